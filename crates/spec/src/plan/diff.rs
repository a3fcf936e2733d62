//! Field-by-field comparison of one desired container with what a node reports (and what was last applied).
//!
//! The rule for every field: the current value is the observed one; when it differs from the desired one, the
//! change is *drift* (a repair) if the last applied spec already had the desired value, else an *update*. Fields
//! PVE cannot report (password, SSH keys) are compared with the applied spec instead. Whether a change is live on
//! a running container follows CONTRACT §3.1. Values are compared typed and turned into JSON only when they differ,
//! which keeps planning 10,000 unchanged containers cheap.
//!
//! The field names are in [`field`], the comparable views of values in `views`, and the full
//! attribute list of a container to create in `attributes`.

use serde::Serialize;
use serde_json::Value;

use super::types::FieldChange;
use crate::model::{Container, DesiredState, Interface};
use crate::observed::{ObservedContainer, PowerState};

mod attributes;
pub(crate) mod field;
mod mounts;
mod views;

pub(crate) use attributes::attributes;
use mounts::{devices, idmap, mounts};
use views::{
    cpu_limit_view, cpu_units_view, description_view, iface_eq, iface_value, json, non_null, s,
    tags_view,
};

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
            why: None,
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
        why: None,
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

    // PVE cannot turn a template back into a container: only a new one is what the file says.
    if oc.is_template && !d.state.is_template() {
        replace.push(FieldChange {
            why: Some("PVE cannot turn a template back into a container".into()),
            ..change(field::STATE, json(&DesiredState::Template), json(&d.state))
        });
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
    // A container becomes a template in place (`pct template`, after a stop when it runs): its disks are kept.
    if d.state.is_template() && !oc.is_template {
        let now = if running {
            DesiredState::Running
        } else {
            DesiredState::Stopped
        };
        df.updates.push(FieldChange {
            field: field::STATE.to_owned(),
            from: Some(json(&now)),
            to: Some(json(&DesiredState::Template)),
            live: true,
            sensitive: false,
            why: None,
        });
    }
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
        s(field::MKNOD),
        oc.features.mknod,
        a.map(|a| a.features.mknod),
        d.features.mknod,
        false,
    );
    df.cmp(
        s(field::FORCE_RW_SYS),
        oc.features.force_rw_sys,
        a.map(|a| a.features.force_rw_sys),
        d.features.force_rw_sys,
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
    devices(&mut df, d, a, o);
    idmap(&mut df, d, a, o);
    runtime(&mut df, d, a, oc);
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
                why: None,
            });
        }
        if a.ssh_public_keys != d.ssh_public_keys {
            df.updates.push(FieldChange {
                field: field::SSH_PUBLIC_KEYS.to_owned(),
                from: Some(json(&a.ssh_public_keys)),
                to: Some(json(&d.ssh_public_keys)),
                live: true,
                sensitive: false,
                why: None,
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

/// `env` and `entrypoint`: compared only when the file gives them (an OCI image brings its own, which stands
/// otherwise). PVE applies both at the next start, so a change on a running container is not live.
fn runtime(
    df: &mut Differ,
    d: &Container,
    a: Option<&Container>,
    oc: &crate::observed::ObservedConfig,
) {
    // compared only when given; given empty (`env: {}`, `entrypoint: ""`) means none
    // (an applied file that did not give them applied nothing: a change now is the file's, not drift)
    if let Some(env) = &d.env {
        df.cmp(
            s(field::ENV),
            &oc.env,
            a.and_then(|a| a.env.as_ref()),
            env,
            false,
        );
    }
    fn entrypoint(e: &Option<String>) -> Option<&str> {
        e.as_deref().filter(|e| !e.is_empty())
    }
    if d.entrypoint.is_some() {
        df.cmp(
            s(field::ENTRYPOINT),
            oc.entrypoint.as_deref(),
            a.and_then(|a| a.entrypoint.as_ref().map(|_| entrypoint(&a.entrypoint))),
            entrypoint(&d.entrypoint),
            false,
        );
    }
    system(df, d, a, oc);
    rootfs(df, d, a, oc);
    // always compared (left out: none); PVE applies it to a running container at once
    df.cmp(
        s(field::HOOKSCRIPT),
        oc.hookscript.as_deref(),
        a.map(|a| a.hookscript.as_deref()),
        d.hookscript.as_deref(),
        true,
    );
    // compared only when given (a pool set in PVE stays); a move between pools touches no running container
    if d.pool.is_some() {
        df.cmp(
            s(field::POOL),
            oc.pool.as_deref(),
            a.map(|a| a.pool.as_deref()),
            d.pool.as_deref(),
            true,
        );
    }
}

/// The root disk's options, always compared (left out: PVE's defaults), applied at the next start.
fn rootfs(
    df: &mut Differ,
    d: &Container,
    a: Option<&Container>,
    oc: &crate::observed::ObservedConfig,
) {
    let (o, ar) = (&oc.rootfs, a.map(|a| &a.rootfs));
    let sorted = |v: &[String]| {
        let mut v = v.to_vec();
        v.sort();
        v
    };
    df.cmp(
        s(field::ROOTFS_MOUNT_OPTIONS),
        sorted(&o.mount_options),
        ar.map(|r| sorted(&r.mount_options)),
        sorted(&d.rootfs.mount_options),
        false,
    );
    df.cmp(
        s(field::ROOTFS_ACL),
        o.acl,
        ar.map(|r| r.acl),
        d.rootfs.acl,
        false,
    );
    df.cmp(
        s(field::ROOTFS_QUOTA),
        o.quota,
        ar.map(|r| r.quota),
        d.rootfs.quota,
        false,
    );
    df.cmp(
        s(field::ROOTFS_REPLICATE),
        o.replicate,
        ar.map(|r| r.replicate),
        d.rootfs.replicate,
        false,
    );
}

/// arch, timezone and console: each compared only when the file gives it (PVE detects the arch, leaves the time
/// zone alone and has console defaults otherwise); applied at the next start.
fn system(
    df: &mut Differ,
    d: &Container,
    a: Option<&Container>,
    oc: &crate::observed::ObservedConfig,
) {
    if d.arch.is_some() {
        df.cmp(
            s(field::ARCH),
            oc.arch.as_deref(),
            a.map(|a| a.arch.as_deref()),
            d.arch.as_deref(),
            false,
        );
    }
    if d.timezone.is_some() {
        df.cmp(
            s(field::TIMEZONE),
            oc.timezone.as_deref(),
            a.map(|a| a.timezone.as_deref()),
            d.timezone.as_deref(),
            false,
        );
    }
    let (dc, ac) = (&d.console, a.map(|a| &a.console));
    if dc.enabled.is_some() {
        df.cmp(
            s(field::CONSOLE_ENABLED),
            oc.console.enabled,
            ac.map(|c| c.enabled),
            dc.enabled,
            false,
        );
    }
    if dc.tty_count.is_some() {
        df.cmp(
            s(field::CONSOLE_TTY_COUNT),
            oc.console.tty_count,
            ac.map(|c| c.tty_count),
            dc.tty_count,
            false,
        );
    }
    if dc.mode.is_some() {
        df.cmp(
            s(field::CONSOLE_TYPE),
            oc.console.mode.as_deref(),
            ac.map(|c| c.mode.as_deref()),
            dc.mode.as_deref(),
            false,
        );
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
                || field::interface_field(i, sub),
                value(o),
                ap.map(value),
                value(d),
                true,
            );
        }
    }
}
