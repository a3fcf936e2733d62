//! Field-by-field comparison of one desired container with what a node reports (and what was last applied).
//!
//! The rule for every field: the current value is the observed one; when it differs from the desired one, the
//! change is *drift* (a repair) if the last applied spec already had the desired value, else an *update*. Fields
//! PVE cannot report (password, SSH keys) are compared with the applied spec instead. Whether a change is live on
//! a running container follows CONTRACT §3.1. Values are compared typed and turned into JSON only when they differ,
//! which keeps planning 10,000 unchanged containers cheap.

use std::borrow::Cow;

use serde::Serialize;
use serde_json::Value;

use super::types::{Attribute, FieldChange};
use crate::model::{Container, Interface, Ipv4Config, Ipv6Config, MountPoint};
use crate::observed::{normalise_tags, ObservedContainer, PowerState, MANAGED_TAG};

/// Field names as used in plans (and understood by [`super::simulate`]).
pub(crate) mod field {
    pub const HOSTNAME: &str = "hostname";
    pub const CORES: &str = "cores";
    pub const CPU_LIMIT: &str = "cpu_limit";
    pub const CPU_UNITS: &str = "cpu_units";
    pub const MEMORY: &str = "memory";
    pub const SWAP: &str = "swap";
    pub const DISK_SIZE: &str = "disk_size";
    pub const TEMPLATE: &str = "template";
    pub const VM_ID: &str = "vm_id";
    pub const NODE: &str = "node";
    pub const DATASTORE_ID: &str = "datastore_id";
    pub const UNPRIVILEGED: &str = "unprivileged";
    pub const NESTING: &str = "features.nesting";
    pub const FUSE: &str = "features.fuse";
    pub const KEYCTL: &str = "features.keyctl";
    pub const MOUNT: &str = "features.mount";
    pub const DNS_SERVERS: &str = "dns.servers";
    pub const DNS_DOMAIN: &str = "dns.domain";
    pub const STARTUP: &str = "startup";
    pub const START_ON_BOOT: &str = "start_on_boot";
    pub const STATE: &str = "state";
    pub const PROTECTION: &str = "protection";
    pub const TAGS: &str = "tags";
    pub const DESCRIPTION: &str = "description";
    pub const PASSWORD: &str = "password";
    pub const SSH_PUBLIC_KEYS: &str = "ssh_public_keys";
    pub const LABELS: &str = "labels";
    pub const OSTYPE: &str = "ostype";

    /// Sub-fields of an interface, after [`interface_prefix`].
    pub const IFACE_FIELDS: [&str; 11] = [
        "name",
        "bridge",
        "ip_address",
        "gateway",
        "ipv6",
        "gateway6",
        "vlan_id",
        "mtu",
        "mac_address",
        "firewall",
        "rate_limit",
    ];

    /// net0's fields are top-level in the file; net1.. live under `extra_interfaces`.
    pub fn interface_prefix(i: usize) -> String {
        if i == 0 {
            String::new()
        } else {
            format!("extra_interfaces[{}].", i - 1)
        }
    }

    /// Inverse of [`interface_prefix`] + sub-field: `(index, sub-field)`.
    pub fn parse_interface(f: &str) -> Option<(usize, &str)> {
        if let Some(rest) = f.strip_prefix("extra_interfaces[") {
            let (n, sub) = rest.split_once("].")?;
            let n: usize = n.parse().ok()?;
            return Some((n + 1, sub));
        }
        IFACE_FIELDS.iter().find(|s| **s == f).map(|s| (0, *s))
    }

    /// `mount_points["/data"]`: mount points are identified by their path inside the container.
    pub fn mount_point(path: &str) -> String {
        format!(
            "mount_points[{}]",
            serde_json::Value::String(path.to_owned())
        )
    }

    /// Inverse of [`mount_point`].
    pub fn parse_mount_point(f: &str) -> Option<String> {
        let inner = f.strip_prefix("mount_points[")?.strip_suffix(']')?;
        serde_json::from_str(inner).ok()
    }
}

fn json<T: Serialize + ?Sized>(v: &T) -> Value {
    serde_json::to_value(v).unwrap_or(Value::Null)
}

fn non_null(v: Value) -> Option<Value> {
    (!v.is_null()).then_some(v)
}

/// Collects the changes of one existing container.
pub(crate) struct Differ {
    running: bool,
    /// Whether the container is in the last applied spec (only then can a difference be drift).
    applied: bool,
    pub updates: Vec<FieldChange>,
    pub drift: Vec<FieldChange>,
}

impl Differ {
    pub(crate) fn new(running: bool, applied: bool) -> Self {
        Differ {
            running,
            applied,
            updates: Vec::new(),
            drift: Vec::new(),
        }
    }

    /// Compares one field. `app` is the applied value (`None` when the container was never applied).
    fn cmp<T: PartialEq + Serialize>(
        &mut self,
        name: impl FnOnce() -> String,
        obs: T,
        app: Option<T>,
        des: T,
        live_when_running: bool,
    ) {
        if obs == des {
            return;
        }
        let drift = self.applied && app.as_ref() == Some(&des);
        let change = FieldChange {
            field: name(),
            from: non_null(json(&obs)),
            to: non_null(json(&des)),
            live: !self.running || live_when_running,
            sensitive: false,
        };
        if drift {
            self.drift.push(change);
        } else {
            self.updates.push(change);
        }
    }

    /// Whether any change needs a restart to take effect.
    pub(crate) fn restart(changes: &[FieldChange]) -> bool {
        changes.iter().any(|c| !c.live)
    }
}

fn s(name: &'static str) -> impl FnOnce() -> String {
    move || name.to_owned()
}

/// Tags as compared: normalised like PVE, borrowed when already normal (the usual case).
fn tags_view(tags: &[String]) -> Cow<'_, [String]> {
    let normal = tags.windows(2).all(|w| w[0] < w[1])
        && tags
            .iter()
            .all(|t| t != MANAGED_TAG && !t.chars().any(|c| c.is_ascii_uppercase()));
    if normal {
        Cow::Borrowed(tags)
    } else {
        Cow::Owned(normalise_tags(tags))
    }
}

fn description_view(d: Option<&str>) -> Option<&str> {
    d.map(str::trim_end).filter(|t| !t.is_empty())
}

fn cpu_limit_view(v: Option<f64>) -> Option<f64> {
    v.filter(|x| *x != 0.0)
}

fn cpu_units_view(v: Option<u32>) -> Option<u32> {
    v.filter(|x| *x != 100)
}

pub(crate) fn ipv4_str(c: &Ipv4Config) -> String {
    match c {
        Ipv4Config::Dhcp => "dhcp".to_owned(),
        Ipv4Config::Static { addr, .. } => addr.to_string(),
        Ipv4Config::None => "none".to_owned(),
    }
}

pub(crate) fn ipv6_str(c: &Ipv6Config) -> String {
    match c {
        Ipv6Config::Auto => "auto".to_owned(),
        Ipv6Config::Dhcp => "dhcp".to_owned(),
        Ipv6Config::Static { addr, .. } => addr.to_string(),
        Ipv6Config::None => "none".to_owned(),
    }
}

fn gw4(c: &Ipv4Config) -> Option<String> {
    match c {
        Ipv4Config::Static {
            gateway: Some(g), ..
        } => Some(g.to_string()),
        _ => None,
    }
}

fn gw6(c: &Ipv6Config) -> Option<String> {
    match c {
        Ipv6Config::Static {
            gateway: Some(g), ..
        } => Some(g.to_string()),
        _ => None,
    }
}

/// A sub-field of an interface as a JSON value (the form plans show).
pub(crate) fn iface_value(iface: &Interface, sub: &str) -> Value {
    match sub {
        "name" => json(&iface.name),
        "bridge" => json(&iface.bridge),
        "ip_address" => json(&ipv4_str(&iface.ipv4)),
        "gateway" => json(&gw4(&iface.ipv4)),
        "ipv6" => json(&ipv6_str(&iface.ipv6)),
        "gateway6" => json(&gw6(&iface.ipv6)),
        "vlan_id" => json(&iface.vlan_id),
        "mtu" => json(&iface.mtu),
        "mac_address" => json(&iface.mac_address),
        "firewall" => json(&iface.firewall),
        "rate_limit" => json(&iface.rate_limit),
        _ => Value::Null,
    }
}

/// Typed equality of one interface sub-field (no allocation).
fn iface_eq(a: &Interface, b: &Interface, sub: &str) -> bool {
    match sub {
        "name" => a.name == b.name,
        "bridge" => a.bridge == b.bridge,
        "ip_address" => match (&a.ipv4, &b.ipv4) {
            (Ipv4Config::Static { addr: x, .. }, Ipv4Config::Static { addr: y, .. }) => x == y,
            (x, y) => std::mem::discriminant(x) == std::mem::discriminant(y),
        },
        "gateway" => gw4_ref(&a.ipv4) == gw4_ref(&b.ipv4),
        "ipv6" => match (&a.ipv6, &b.ipv6) {
            (Ipv6Config::Static { addr: x, .. }, Ipv6Config::Static { addr: y, .. }) => x == y,
            (x, y) => std::mem::discriminant(x) == std::mem::discriminant(y),
        },
        "gateway6" => gw6_ref(&a.ipv6) == gw6_ref(&b.ipv6),
        "vlan_id" => a.vlan_id == b.vlan_id,
        "mtu" => a.mtu == b.mtu,
        "mac_address" => a.mac_address == b.mac_address,
        "firewall" => a.firewall == b.firewall,
        "rate_limit" => a.rate_limit == b.rate_limit,
        _ => true,
    }
}

fn gw4_ref(c: &Ipv4Config) -> Option<std::net::Ipv4Addr> {
    match c {
        Ipv4Config::Static { gateway, .. } => *gateway,
        _ => None,
    }
}

fn gw6_ref(c: &Ipv6Config) -> Option<std::net::Ipv6Addr> {
    match c {
        Ipv6Config::Static { gateway, .. } => *gateway,
        _ => None,
    }
}

/// A mount point as plans show it: its path is in the field name; the size only when `with_size` (a size
/// change alone is a resize, not an update).
pub(crate) fn mount_value(m: &MountPoint, with_size: bool) -> Value {
    match m {
        MountPoint::Volume {
            datastore_id,
            size_gib,
            backup,
            read_only,
            ..
        } => {
            let mut v = serde_json::json!({ "datastore_id": datastore_id });
            if with_size {
                v["size_gib"] = Value::from(*size_gib);
            }
            v["backup"] = Value::from(*backup);
            v["read_only"] = Value::from(*read_only);
            v
        }
        MountPoint::Bind {
            host_path,
            read_only,
            ..
        } => {
            serde_json::json!({ "host_path": host_path, "read_only": read_only })
        }
    }
}

fn mount_shape(m: &MountPoint) -> Value {
    mount_value(m, false)
}

fn same_shape(a: &MountPoint, b: &MountPoint) -> bool {
    match (a, b) {
        (
            MountPoint::Volume {
                datastore_id: d1,
                path: p1,
                backup: b1,
                read_only: r1,
                ..
            },
            MountPoint::Volume {
                datastore_id: d2,
                path: p2,
                backup: b2,
                read_only: r2,
                ..
            },
        ) => d1 == d2 && p1 == p2 && b1 == b2 && r1 == r2,
        (x, y) => x == y,
    }
}

/// A disk that must grow: `(disk, from_gib, to_gib)`.
pub(crate) type Growth = (String, f64, f64);

/// Everything that differs between one desired container and its observation.
pub(crate) struct Existing {
    /// Fields that force a replacement.
    pub replace: Vec<FieldChange>,
    pub move_to: Option<String>,
    pub grow: Vec<Growth>,
    /// Disks that would have to shrink: `(field, from_gib, to_gib)`.
    pub shrink: Vec<Growth>,
    pub updates: Vec<FieldChange>,
    pub drift: Vec<FieldChange>,
    pub start: bool,
    /// The file says `state: stopped` and it runs.
    pub stop: bool,
}

/// Compares desired `d` (applied as `a`, if ever) with observation `o`.
pub(crate) fn existing(d: &Container, a: Option<&Container>, o: &ObservedContainer) -> Existing {
    let oc = &o.config;
    let mut replace = Vec::new();
    let change = |field: &str, from: Value, to: Value| FieldChange {
        field: field.to_owned(),
        from: non_null(from),
        to: non_null(to),
        live: false,
        sensitive: false,
    };
    // Replacement: template, vm_id, datastore_id, unprivileged (DESIGN.md's plan table).
    let current_template = oc.template.as_deref().or(a.map(|a| a.template.as_str()));
    if let Some(t) = current_template {
        if t != d.template {
            replace.push(change(field::TEMPLATE, json(t), json(&d.template)));
        }
    }
    if let Some(v) = d.vm_id {
        if v != o.vm_id {
            replace.push(change(field::VM_ID, json(&o.vm_id), json(&v)));
        }
    }
    if let (Some(want), Some(have)) = (&d.datastore_id, &oc.datastore_id) {
        if want != have {
            replace.push(change(field::DATASTORE_ID, json(have), json(want)));
        }
    }
    if d.unprivileged != oc.unprivileged {
        replace.push(change(
            field::UNPRIVILEGED,
            json(&oc.unprivileged),
            json(&d.unprivileged),
        ));
    }

    let move_to = d.node.as_ref().filter(|n| **n != o.node).cloned();
    let start = o.status == PowerState::Stopped && d.state.is_running();
    let stop = o.status == PowerState::Running && !d.state.is_running();

    let mut grow = Vec::new();
    let mut shrink = Vec::new();
    let want = d.disk_size as f64;
    if want > oc.disk_size_gib + 1e-9 {
        grow.push(("rootfs".to_owned(), oc.disk_size_gib, want));
    } else if want + 1e-9 < oc.disk_size_gib {
        shrink.push((field::DISK_SIZE.to_owned(), oc.disk_size_gib, want));
    }

    let running = o.status == PowerState::Running;
    let mut df = Differ::new(running, a.is_some());
    df.cmp(
        s(field::HOSTNAME),
        oc.hostname.as_str(),
        a.map(|a| a.hostname.as_str()),
        d.hostname.as_str(),
        true,
    );
    df.cmp(s(field::CORES), oc.cores, a.map(|a| a.cores), d.cores, true);
    df.cmp(
        s(field::CPU_LIMIT),
        cpu_limit_view(oc.cpu_limit),
        a.map(|a| cpu_limit_view(a.cpu_limit)),
        cpu_limit_view(d.cpu_limit),
        true,
    );
    df.cmp(
        s(field::CPU_UNITS),
        cpu_units_view(oc.cpu_units),
        a.map(|a| cpu_units_view(a.cpu_units)),
        cpu_units_view(d.cpu_units),
        true,
    );
    df.cmp(
        s(field::MEMORY),
        oc.memory,
        a.map(|a| a.memory),
        d.memory,
        true,
    );
    df.cmp(s(field::SWAP), oc.swap, a.map(|a| a.swap), d.swap, true);
    df.cmp(
        s(field::NESTING),
        oc.features.nesting,
        a.map(|a| a.features.nesting),
        d.features.nesting,
        false,
    );
    df.cmp(
        s(field::FUSE),
        oc.features.fuse,
        a.map(|a| a.features.fuse),
        d.features.fuse,
        false,
    );
    df.cmp(
        s(field::KEYCTL),
        oc.features.keyctl,
        a.map(|a| a.features.keyctl),
        d.features.keyctl,
        false,
    );
    df.cmp(
        s(field::MOUNT),
        oc.features.mount.as_slice(),
        a.map(|a| a.features.mount.as_slice()),
        d.features.mount.as_slice(),
        false,
    );
    interfaces(
        &mut df,
        &d.interfaces,
        a.map(|a| a.interfaces.as_slice()),
        &oc.interfaces,
    );
    df.cmp(
        s(field::DNS_SERVERS),
        oc.dns.servers.as_slice(),
        a.map(|a| a.dns.servers.as_slice()),
        d.dns.servers.as_slice(),
        false,
    );
    df.cmp(
        s(field::DNS_DOMAIN),
        oc.dns.domain.as_deref(),
        a.map(|a| a.dns.domain.as_deref()),
        d.dns.domain.as_deref(),
        false,
    );
    df.cmp(
        s(field::STARTUP),
        oc.startup.as_ref(),
        a.map(|a| a.startup.as_ref()),
        d.startup.as_ref(),
        true,
    );
    df.cmp(
        s(field::START_ON_BOOT),
        oc.start_on_boot,
        a.map(|a| a.start_on_boot),
        d.start_on_boot,
        true,
    );
    df.cmp(
        s(field::PROTECTION),
        oc.protection,
        a.map(|a| a.protection),
        d.protection,
        true,
    );
    df.cmp(
        s(field::TAGS),
        tags_view(&oc.tags).as_ref(),
        a.map(|a| tags_view(&a.tags)).as_deref(),
        tags_view(&d.tags).as_ref(),
        true,
    );
    df.cmp(
        s(field::DESCRIPTION),
        description_view(oc.description.as_deref()),
        a.map(|a| description_view(a.description.as_deref())),
        description_view(d.description.as_deref()),
        true,
    );
    mounts(&mut df, &mut grow, &mut shrink, d, a, o);
    // Only when the file names one: otherwise PVE's detection stands.
    if d.ostype.is_some() {
        df.cmp(
            s(field::OSTYPE),
            oc.ostype.as_deref(),
            a.map(|a| a.ostype.as_deref()),
            d.ostype.as_deref(),
            false,
        );
    }

    // PVE cannot report these: compare with what was applied. The agent sets them inside the running container.
    if let Some(a) = a {
        if a.password != d.password {
            df.updates.push(FieldChange {
                field: field::PASSWORD.to_owned(),
                from: None,
                to: None,
                live: true,
                sensitive: true,
            });
        }
        if a.ssh_public_keys != d.ssh_public_keys {
            df.updates.push(FieldChange {
                field: field::SSH_PUBLIC_KEYS.to_owned(),
                from: Some(json(&a.ssh_public_keys)),
                to: Some(json(&d.ssh_public_keys)),
                live: true,
                sensitive: false,
            });
        }
    }

    Existing {
        replace,
        move_to,
        grow,
        shrink,
        updates: df.updates,
        drift: df.drift,
        start,
        stop,
    }
}

fn interfaces(
    df: &mut Differ,
    des: &[Interface],
    app: Option<&[Interface]>,
    obs: &[crate::observed::ObservedInterface],
) {
    let n = des.len().max(obs.len());
    for i in 0..n {
        let d = des.get(i);
        let o = obs.get(i).map(|o| &o.config);
        let ap = app.map(|a| a.get(i));
        if let (Some(d), Some(o)) = (d, o) {
            // Fast path: nothing differs (a MAC the file leaves to PVE is not compared).
            let all_eq = field::IFACE_FIELDS.iter().all(|sub| {
                (*sub == "mac_address" && d.mac_address.is_none()) || iface_eq(d, o, sub)
            });
            if all_eq {
                continue;
            }
        }
        for sub in field::IFACE_FIELDS {
            if i == 0 && sub == "name" {
                continue; // net0 is always eth0: the file has no field for it
            }
            if sub == "mac_address" && d.is_some_and(|d| d.mac_address.is_none()) {
                continue;
            }
            let equal = match (d, o) {
                (Some(d), Some(o)) => iface_eq(d, o, sub),
                (None, None) => true,
                _ => false,
            };
            if equal {
                continue;
            }
            let value =
                |i: Option<&Interface>| i.map(|i| iface_value(i, sub)).unwrap_or(Value::Null);
            df.cmp(
                || format!("{}{sub}", field::interface_prefix(i)),
                value(o),
                ap.map(value),
                value(d),
                true,
            );
        }
    }
}

fn mounts(
    df: &mut Differ,
    grow: &mut Vec<Growth>,
    shrink: &mut Vec<Growth>,
    d: &Container,
    a: Option<&Container>,
    o: &ObservedContainer,
) {
    let obs = &o.config.mount_points;
    if d.mount_points.is_empty() && obs.is_empty() {
        return;
    }
    let applied_by_path = |path: &str| {
        a.map(|a| {
            a.mount_points
                .iter()
                .find(|m| m.path() == path)
                .map(mount_shape)
        })
    };
    for m in &d.mount_points {
        match obs.iter().find(|om| om.mount.path() == m.path()) {
            Some(om) => {
                if !same_shape(m, &om.mount) {
                    df.cmp(
                        || field::mount_point(m.path()),
                        Some(mount_shape(&om.mount)),
                        applied_by_path(m.path()),
                        Some(mount_shape(m)),
                        false,
                    );
                    continue;
                }
                if let MountPoint::Volume { size_gib, .. } = m {
                    let want = *size_gib as f64;
                    let have = om.size_gib.unwrap_or(match &om.mount {
                        MountPoint::Volume { size_gib, .. } => *size_gib as f64,
                        MountPoint::Bind { .. } => want,
                    });
                    if want > have + 1e-9 {
                        grow.push((format!("mp{}", om.slot), have, want));
                    } else if want + 1e-9 < have {
                        shrink.push((
                            format!("{}.size_gib", field::mount_point(m.path())),
                            have,
                            want,
                        ));
                    }
                }
            }
            // A new mount point is hot-plugged into a running container.
            None => {
                let full = |m: &MountPoint| mount_value(m, true);
                let applied = a.map(|a| {
                    a.mount_points
                        .iter()
                        .find(|x| x.path() == m.path())
                        .map(full)
                });
                df.cmp(
                    || field::mount_point(m.path()),
                    None,
                    applied,
                    Some(full(m)),
                    true,
                )
            }
        }
    }
    for om in obs {
        if !d.mount_points.iter().any(|m| m.path() == om.mount.path()) {
            df.cmp(
                || field::mount_point(om.mount.path()),
                Some(mount_shape(&om.mount)),
                applied_by_path(om.mount.path()),
                None,
                false,
            );
        }
    }
}

/// The complete configuration of a container to be created, in a fixed order.
pub(crate) fn attributes(c: &Container) -> Vec<Attribute> {
    let mut v = Vec::with_capacity(32);
    let opt = |v: &mut Vec<Attribute>, name: &str, val: Option<Value>| match val {
        Some(x) => v.push(Attribute::known(name, x)),
        None => v.push(Attribute::after_apply(name)),
    };
    opt(&mut v, field::VM_ID, c.vm_id.map(Value::from));
    opt(&mut v, field::NODE, c.node.as_deref().map(Value::from));
    v.push(Attribute::known(field::HOSTNAME, json(&c.hostname)));
    if !c.state.is_running() {
        v.push(Attribute::known(field::STATE, json(&c.state)));
    }
    v.push(Attribute::known(field::TEMPLATE, json(&c.template)));
    opt(
        &mut v,
        field::DATASTORE_ID,
        c.datastore_id.as_deref().map(Value::from),
    );
    v.push(Attribute::known(field::DISK_SIZE, json(&c.disk_size)));
    if let Some(x) = c.cores {
        v.push(Attribute::known(field::CORES, json(&x)));
    }
    if let Some(x) = c.cpu_limit {
        v.push(Attribute::known(field::CPU_LIMIT, json(&x)));
    }
    if let Some(x) = c.cpu_units {
        v.push(Attribute::known(field::CPU_UNITS, json(&x)));
    }
    v.push(Attribute::known(field::MEMORY, json(&c.memory)));
    v.push(Attribute::known(field::SWAP, json(&c.swap)));
    v.push(Attribute::known(field::UNPRIVILEGED, json(&c.unprivileged)));
    v.push(Attribute::known(field::NESTING, json(&c.features.nesting)));
    v.push(Attribute::known(field::FUSE, json(&c.features.fuse)));
    v.push(Attribute::known(field::KEYCTL, json(&c.features.keyctl)));
    if !c.features.mount.is_empty() {
        v.push(Attribute::known(field::MOUNT, json(&c.features.mount)));
    }
    for (i, iface) in c.interfaces.iter().enumerate() {
        let prefix = field::interface_prefix(i);
        for sub in field::IFACE_FIELDS {
            if i == 0 && sub == "name" {
                continue; // net0 is always eth0: the file has no field for it
            }
            let name = format!("{prefix}{sub}");
            let val = iface_value(iface, sub);
            if sub == "mac_address" && val.is_null() {
                v.push(Attribute::after_apply(name));
            } else if !val.is_null() {
                v.push(Attribute::known(name, val));
            }
        }
    }
    if !c.dns.servers.is_empty() {
        v.push(Attribute::known(field::DNS_SERVERS, json(&c.dns.servers)));
    }
    if let Some(d) = &c.dns.domain {
        v.push(Attribute::known(field::DNS_DOMAIN, json(d)));
    }
    if !c.ssh_public_keys.is_empty() {
        v.push(Attribute::known(
            field::SSH_PUBLIC_KEYS,
            json(&c.ssh_public_keys),
        ));
    }
    let mut pw = Attribute::sensitive(field::PASSWORD);
    // No password in the file: the controller generates one at apply time.
    pw.known_after_apply = c.password.is_none();
    v.push(pw);
    if let Some(st) = &c.startup {
        v.push(Attribute::known(field::STARTUP, json(st)));
    }
    v.push(Attribute::known(
        field::START_ON_BOOT,
        json(&c.start_on_boot),
    ));
    v.push(Attribute::known(field::PROTECTION, json(&c.protection)));
    if !c.tags.is_empty() {
        v.push(Attribute::known(
            field::TAGS,
            json(tags_view(&c.tags).as_ref()),
        ));
    }
    if let Some(d) = description_view(c.description.as_deref()) {
        v.push(Attribute::known(field::DESCRIPTION, json(d)));
    }
    if !c.labels.is_empty() {
        v.push(Attribute::known(field::LABELS, json(&c.labels)));
    }
    if let Some(o) = &c.ostype {
        v.push(Attribute::known(field::OSTYPE, json(o)));
    }
    for m in &c.mount_points {
        v.push(Attribute::known(
            field::mount_point(m.path()),
            mount_value(m, true),
        ));
    }
    v
}

#[cfg(test)]
mod tests {
    use super::field::*;

    #[test]
    fn field_names_parse_back() {
        assert_eq!(parse_interface("ip_address"), Some((0, "ip_address")));
        assert_eq!(parse_interface("extra_interfaces[1].mtu"), Some((2, "mtu")));
        assert_eq!(parse_interface("cores"), None);
        let f = mount_point("/var/lib/a \"b\"");
        assert_eq!(parse_mount_point(&f).as_deref(), Some("/var/lib/a \"b\""));
    }
}
