//! How each field is seen for comparison: the normalised view of tags, description and CPU
//! values, interfaces and mount points as plan JSON, and the equality rules between them.

use std::borrow::Cow;

use serde::Serialize;
use serde_json::Value;

use crate::model::{Interface, Ipv4Config, Ipv6Config, MountPoint};
use crate::observed::{normalise_tags, MANAGED_TAG};
use pxfleet_pvekeys::mark::user_description;

pub(super) fn json<T: Serialize + ?Sized>(v: &T) -> Value {
    serde_json::to_value(v).unwrap_or(Value::Null)
}

pub(super) fn non_null(v: Value) -> Option<Value> {
    (!v.is_null()).then_some(v)
}

pub(super) fn s(name: &'static str) -> impl FnOnce() -> String {
    move || name.to_owned()
}

/// Tags as compared: normalised like PVE, borrowed when already normal (the usual case).
pub(super) fn tags_view(tags: &[String]) -> Cow<'_, [String]> {
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

/// The user's description as PVE keeps it (see [`user_description`]): trailing newlines do not count, trailing
/// spaces on a line do.
pub(super) fn description_view(d: Option<&str>) -> Option<&str> {
    user_description(d)
}

pub(super) fn cpu_limit_view(v: Option<f64>) -> Option<f64> {
    v.filter(|x| *x != 0.0)
}

pub(super) fn cpu_units_view(v: Option<u32>) -> Option<u32> {
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

pub(super) fn gw4(c: &Ipv4Config) -> Option<String> {
    match c {
        Ipv4Config::Static {
            gateway: Some(g), ..
        } => Some(g.to_string()),
        _ => None,
    }
}

pub(super) fn gw6(c: &Ipv6Config) -> Option<String> {
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
        "host_managed" => json(&iface.host_managed),
        "link_down" => json(&iface.link_down),
        "trunks" => json(&iface.trunks),
        _ => Value::Null,
    }
}

/// Typed equality of one interface sub-field (no allocation).
pub(super) fn iface_eq(a: &Interface, b: &Interface, sub: &str) -> bool {
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
        "host_managed" => a.host_managed == b.host_managed,
        "link_down" => a.link_down == b.link_down,
        "trunks" => a.trunks == b.trunks,
        _ => true,
    }
}

pub(super) fn gw4_ref(c: &Ipv4Config) -> Option<std::net::Ipv4Addr> {
    match c {
        Ipv4Config::Static { gateway, .. } => *gateway,
        _ => None,
    }
}

pub(super) fn gw6_ref(c: &Ipv6Config) -> Option<std::net::Ipv6Addr> {
    match c {
        Ipv6Config::Static { gateway, .. } => *gateway,
        _ => None,
    }
}

/// A mount point as plans show it: its path is in the field name; the size only when `with_size` (a size
/// change alone is a resize, not an update); the options only where they differ from PVE's defaults.
pub(crate) fn mount_value(m: &MountPoint, with_size: bool) -> Value {
    let mut v = match m {
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
        MountPoint::Existing {
            volume,
            backup,
            read_only,
            ..
        } => {
            serde_json::json!({ "volume": volume, "backup": backup, "read_only": read_only })
        }
        // not resolved yet: the source container is not there (or not reported) yet
        MountPoint::VolumeOf {
            container,
            source_path,
            backup,
            read_only,
            ..
        } => serde_json::json!({
            "volume_of": {"container": container, "path": source_path},
            "backup": backup,
            "read_only": read_only,
        }),
    };
    let f = m.flags();
    if !f.mount_options.is_empty() {
        v["mount_options"] = Value::from(f.mount_options.clone());
    }
    if let Some(acl) = f.acl {
        v["acl"] = Value::from(acl);
    }
    if f.quota {
        v["quota"] = Value::from(true);
    }
    if !f.replicate {
        v["replicate"] = Value::from(false);
    }
    if f.shared {
        v["shared"] = Value::from(true);
    }
    if f.keepattrs {
        v["keepattrs"] = Value::from(true);
    }
    if let Some(i) = &f.idmap {
        v["idmap"] = Value::from(i.clone());
    }
    v
}

pub(super) fn mount_shape(m: &MountPoint) -> Value {
    mount_value(m, false)
}

pub(super) fn same_shape(a: &MountPoint, b: &MountPoint) -> bool {
    match (a, b) {
        (
            MountPoint::Volume {
                datastore_id: d1,
                path: p1,
                backup: b1,
                read_only: r1,
                flags: f1,
                ..
            },
            MountPoint::Volume {
                datastore_id: d2,
                path: p2,
                backup: b2,
                read_only: r2,
                flags: f2,
                ..
            },
        ) => d1 == d2 && p1 == p2 && b1 == b2 && r1 == r2 && f1 == f2,
        (x, y) => x == y,
    }
}
