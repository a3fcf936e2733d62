//! Host powers an admin granted to a fleet (`pxctl grant add|list|revoke`). What gives a container powers over
//! its host (PVE reserves it for root@pam; pxfleet's agent runs `pct` as root, so pxfleet draws the line itself)
//! is refused in an operator's submit unless a grant of that fleet covers it, narrowly: a host path prefix for
//! bind mounts, one device per grant, one feature, a range of host ids for idmap entries, or `privileged`.
//! Admins' own submits need no grant. The plan says, per container it changes, which powers it runs with and
//! what allowed them.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use pxfleet_spec::{Diagnostic, Fleet, MountPoint};
use serde::{Deserialize, Serialize};

use pxfleet_tls::Identity;

use crate::certs::actor;
use crate::error::{Error, Result};
use crate::model::{AuditEntry, Millis};
use crate::state::State;

/// PVE's default subordinate id range of root (`/etc/subuid`, `/etc/subgid`: `root:100000:65536`): an idmap
/// entry inside it maps container ids to unprivileged host ids only, and needs no grant.
pub const SUBORDINATE_IDS: std::ops::Range<u64> = 100_000..165_536;

/// One power over the host, as granted (`pxctl grant add FLEET POWER`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum HostPower {
    /// `privileged`: containers with `unprivileged: false` (root in the container is root on the host).
    Privileged,
    /// `bind-mount:/srv/data`: bind mounts of host paths at or below the prefix (whole path components).
    BindMount { prefix: String },
    /// `device:/dev/net/tun`: passthrough of exactly this device.
    Device { path: String },
    /// `feature:fuse`, `feature:keyctl`, `feature:mknod`, `feature:force_rw_sys`, `feature:mount=nfs` (one
    /// file-system type): every feature but nesting, which PVE leaves to root@pam.
    Feature { name: String },
    /// `idmap:0-65535`: idmap entries mapping into these host ids (inclusive), outside the subordinate range.
    Idmap { first: u32, last: u32 },
    /// `volume:local-lvm:vm-900-disk-1`: mounting exactly this existing volume, which belongs to no container
    /// of the fleet (another fleet's, a hand-made container's, or none's).
    Volume { volid: String },
    /// `adopt:VMID`: taking the container VMID, made outside pxfleet, under this fleet's management (and so
    /// its destroy, its data): PVE would ask for permissions on that container.
    Adopt { vm_id: u32 },
    /// `hookscript:local:snippets/hook.sh`: this script as a container's hook script, which PVE runs as root on
    /// the node at the container's lifecycle events.
    Hookscript { volid: String },
}

/// Why a text is not a host power.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct BadPower(String);

const POWER_FORMS: &str =
    "privileged, bind-mount:/HOST/PATH, device:/dev/NAME, feature:fuse, feature:keyctl, \
                           feature:mknod, feature:force_rw_sys, feature:mount=FSTYPE, idmap:FIRST-LAST (host ids), \
                           volume:STORAGE:NAME, adopt:VMID or hookscript:STORAGE:snippets/FILE";

/// Absolute, no `.`/`..`/empty components, no `,` (PVE's property strings), not only `/`.
fn clean_path(s: &str) -> bool {
    s.starts_with('/')
        && s.len() > 1
        && !s.contains(',')
        && s[1..]
            .trim_end_matches('/')
            .split('/')
            .all(|c| !c.is_empty() && c != "." && c != "..")
}

impl FromStr for HostPower {
    type Err = BadPower;
    fn from_str(s: &str) -> Result<Self, BadPower> {
        let bad = |why: String| BadPower(format!("{why}; a power is one of: {POWER_FORMS}"));
        let (kind, value) = s.split_once(':').unwrap_or((s, ""));
        match kind {
            "privileged" if value.is_empty() => Ok(HostPower::Privileged),
            "bind-mount" if clean_path(value) => Ok(HostPower::BindMount {
                prefix: value.trim_end_matches('/').to_string(),
            }),
            "bind-mount" => Err(bad(format!(
                "bind-mount needs an absolute host path below / without '.', '..' or ',' (got {value:?})"
            ))),
            "device" if value.starts_with("/dev/") && clean_path(value) => {
                Ok(HostPower::Device {
                    path: value.to_string(),
                })
            }
            "device" => Err(bad(format!(
                "device needs a device path under /dev (got {value:?})"
            ))),
            "feature" => match value.split_once('=') {
                None if matches!(value, "fuse" | "keyctl" | "mknod" | "force_rw_sys") => Ok(HostPower::Feature {
                    name: value.to_string(),
                }),
                Some(("mount", fs)) if pxfleet_spec::syntax::is_simple_name(fs) => {
                    Ok(HostPower::Feature {
                        name: format!("mount={fs}"),
                    })
                }
                _ => Err(bad(format!(
                    "feature is fuse, keyctl, mknod, force_rw_sys or mount=FSTYPE (got {value:?}; nesting needs no grant)"
                ))),
            },
            "idmap" => {
                let (a, b) = value.split_once('-').unwrap_or((value, value));
                match (a.parse::<u32>(), b.parse::<u32>()) {
                    (Ok(first), Ok(last)) if first <= last => Ok(HostPower::Idmap { first, last }),
                    _ => Err(bad(format!(
                        "idmap needs a host id range FIRST-LAST, e.g. idmap:1000-1999 (got {value:?})"
                    ))),
                }
            }
            "volume" => match value.split_once(':') {
                Some((storage, name))
                    if pxfleet_spec::syntax::is_simple_name(storage)
                        && !name.is_empty()
                        && !name.contains(',')
                        && !name.split('/').any(|c| c == "..") =>
                {
                    Ok(HostPower::Volume {
                        volid: value.to_string(),
                    })
                }
                _ => Err(bad(format!(
                    "volume needs a volume id STORAGE:NAME, e.g. volume:local-lvm:vm-900-disk-1 (got {value:?})"
                ))),
            },
            "hookscript" if pxfleet_pve::argv::is_hookscript_volid(value) => {
                Ok(HostPower::Hookscript {
                    volid: value.to_string(),
                })
            }
            "hookscript" => Err(bad(format!(
                "hookscript needs a snippets volume STORAGE:snippets/FILE, e.g. hookscript:local:snippets/hook.sh (got {value:?})"
            ))),
            "adopt" => match value.parse::<u32>() {
                Ok(vm_id) if vm_id >= 100 => Ok(HostPower::Adopt { vm_id }),
                _ => Err(bad(format!(
                    "adopt needs the vm_id of the container, e.g. adopt:105 (got {value:?})"
                ))),
            },
            _ => Err(bad(format!("{s:?} is not a host power"))),
        }
    }
}

impl fmt::Display for HostPower {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HostPower::Privileged => f.write_str("privileged"),
            HostPower::BindMount { prefix } => write!(f, "bind-mount:{prefix}"),
            HostPower::Device { path } => write!(f, "device:{path}"),
            HostPower::Feature { name } => write!(f, "feature:{name}"),
            HostPower::Idmap { first, last } => write!(f, "idmap:{first}-{last}"),
            HostPower::Volume { volid } => write!(f, "volume:{volid}"),
            HostPower::Adopt { vm_id } => write!(f, "adopt:{vm_id}"),
            HostPower::Hookscript { volid } => write!(f, "hookscript:{volid}"),
        }
    }
}

/// A grant as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Grant {
    pub id: u64,
    pub fleet: String,
    pub power: HostPower,
    pub reason: String,
    /// The admin's identity URI.
    pub granted_by: String,
    pub granted_ms: Millis,
}

/// One use of a host power in a fleet: where (the field), what it is in words, and what a grant must cover.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Use {
    pub container: String,
    /// The field path (`containers.NAME.devices[0].path`).
    pub path: String,
    pub what: String,
    pub needs: Needed,
}

/// What one use needs a grant to cover.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Needed {
    Privileged,
    BindMount(String),
    Device(String),
    Feature(String),
    /// Host ids, inclusive.
    Idmap(u64, u64),
    Volume(String),
    Adopt(u32),
    Hookscript(String),
}

impl Needed {
    /// The narrowest grant that covers this use, in `pxctl grant add`'s form.
    pub fn grant_text(&self) -> String {
        match self {
            Needed::Privileged => "privileged".into(),
            Needed::BindMount(p) => format!("bind-mount:{p}"),
            Needed::Device(p) => format!("device:{p}"),
            Needed::Feature(n) => format!("feature:{n}"),
            Needed::Idmap(a, b) => format!("idmap:{a}-{b}"),
            Needed::Volume(v) => format!("volume:{v}"),
            Needed::Adopt(v) => format!("adopt:{v}"),
            Needed::Hookscript(v) => format!("hookscript:{v}"),
        }
    }

    fn covered_by(&self, p: &HostPower) -> bool {
        match (self, p) {
            (Needed::Privileged, HostPower::Privileged) => true,
            (Needed::BindMount(path), HostPower::BindMount { prefix }) => {
                let comps = |s: &str| {
                    s.split('/')
                        .filter(|c| !c.is_empty() && *c != ".")
                        .map(str::to_string)
                        .collect::<Vec<_>>()
                };
                let (path, prefix) = (comps(path), comps(prefix));
                !path.iter().any(|c| c == "..") && path.starts_with(&prefix)
            }
            (Needed::Device(d), HostPower::Device { path }) => d == path,
            (Needed::Feature(n), HostPower::Feature { name }) => n == name,
            (Needed::Idmap(a, b), HostPower::Idmap { first, last }) => {
                *a >= *first as u64 && *b <= *last as u64
            }
            (Needed::Volume(v), HostPower::Volume { volid }) => v == volid,
            (Needed::Adopt(v), HostPower::Adopt { vm_id }) => v == vm_id,
            (Needed::Hookscript(v), HostPower::Hookscript { volid }) => v == volid,
            _ => false,
        }
    }
}

/// The vm_id a PVE volume id belongs to (`local-lvm:vm-900-disk-1`, `local-zfs:subvol-900-disk-0`,
/// `local:900/vm-900-disk-0.raw`), if its name says.
pub fn volume_owner(volid: &str) -> Option<u32> {
    let name = volid.split_once(':').map_or(volid, |(_, n)| n);
    if let Some((dir, _)) = name.split_once('/') {
        return dir.parse().ok();
    }
    ["vm-", "subvol-", "base-"]
        .iter()
        .find_map(|p| name.strip_prefix(p)?.split('-').next()?.parse().ok())
}

/// Every use of a host power in `fleet`, in file order: a privileged container, a feature other than
/// `nesting`, a bind mount, a device, an idmap entry mapping into host ids outside [`SUBORDINATE_IDS`], an
/// existing volume that belongs to none of the fleet's containers (those `stored` and those the file names with
/// a vm_id: PVE asks for the owner's permission, pxfleet for a grant), the adoption of a container that is not
/// the fleet's yet (`stored`: the vm_ids of its stored containers).
pub fn uses(fleet: &Fleet, stored: &std::collections::BTreeSet<u32>) -> Vec<Use> {
    let own: std::collections::BTreeSet<u32> = stored
        .iter()
        .copied()
        .chain(fleet.containers.values().filter_map(|c| c.vm_id))
        .collect();
    let mut out = Vec::new();
    for (name, c) in &fleet.containers {
        let mut add = |field: String, what: String, needs: Needed| {
            out.push(Use {
                container: name.clone(),
                path: format!("containers.{name}.{field}"),
                what,
                needs,
            })
        };
        if let Some(v) = c.vm_id.filter(|v| c.adopt && !stored.contains(v)) {
            add(
                "adopt".into(),
                format!(
                    "adoption of container {v}, made outside pxfleet (its data and its destroy)"
                ),
                Needed::Adopt(v),
            );
        }
        if !c.unprivileged {
            add(
                "unprivileged".into(),
                "privileged container (root in the container is root on the host)".into(),
                Needed::Privileged,
            );
        }
        for (on, f) in [
            (c.features.fuse, "fuse"),
            (c.features.keyctl, "keyctl"),
            (c.features.mknod, "mknod"),
            (c.features.force_rw_sys, "force_rw_sys"),
        ] {
            if on {
                add(
                    format!("features.{f}"),
                    format!("feature {f}"),
                    Needed::Feature(f.into()),
                );
            }
        }
        for fs in &c.features.mount {
            add(
                "features.mount".into(),
                format!("feature mount={fs}"),
                Needed::Feature(format!("mount={fs}")),
            );
        }
        for (i, m) in c.mount_points.iter().enumerate() {
            match m {
                MountPoint::Bind { host_path, .. } => add(
                    format!("mount_points[{i}].host_path"),
                    format!("bind mount of the host's {host_path}"),
                    Needed::BindMount(host_path.clone()),
                ),
                MountPoint::Existing { volume, .. }
                    if !volume_owner(volume).is_some_and(|o| own.contains(&o)) =>
                {
                    let whose = match volume_owner(volume) {
                        Some(o) => format!("it belongs to vm_id {o}, no container of this fleet"),
                        None => "its name says no owner".to_string(),
                    };
                    add(
                        format!("mount_points[{i}].volume"),
                        format!("mount of the existing volume {volume} ({whose})"),
                        Needed::Volume(volume.clone()),
                    )
                }
                _ => {}
            }
        }
        if let Some(h) = &c.hookscript {
            add(
                "hookscript".into(),
                format!("hook script {h}, run as root on the node"),
                Needed::Hookscript(h.clone()),
            );
        }
        for (i, d) in c.devices.iter().enumerate() {
            add(
                format!("devices[{i}].path"),
                format!("passthrough of the host's device {}", d.path),
                Needed::Device(d.path.clone()),
            );
        }
        for (i, m) in c.idmap.iter().enumerate() {
            let (start, end) = (m.host_id as u64, m.host_id as u64 + m.size as u64);
            if start < SUBORDINATE_IDS.start || end > SUBORDINATE_IDS.end {
                let root = if start == 0 {
                    ", host root among them"
                } else {
                    ""
                };
                add(
                    format!("idmap[{i}].host_id"),
                    format!(
                        "idmap entry {} (host ids {start}-{}, outside the subordinate range {}-{}{root})",
                        m.line(),
                        end - 1,
                        SUBORDINATE_IDS.start,
                        SUBORDINATE_IDS.end - 1
                    ),
                    Needed::Idmap(start, end.saturating_sub(1)),
                );
            }
        }
    }
    out
}

/// What allowed a container's host powers, per container: the sentence the plan prints.
pub type Powers = BTreeMap<String, String>;

/// Checks `fleet`'s host powers: an admin's submit needs no grant; anyone else's needs, for every use, a grant
/// of this fleet that covers it. Refused: one diagnostic per use not covered, at its field, naming the grant an
/// admin would give. Allowed: per container that has any, what it runs with and what allowed it.
pub fn check(
    file: &str,
    fleet: &Fleet,
    stored: &std::collections::BTreeSet<u32>,
    grants: &[Grant],
    admin: bool,
) -> Result<Powers, Vec<Diagnostic>> {
    let mut refused = Vec::new();
    let mut allowed: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for u in uses(fleet, stored) {
        let by = grants
            .iter()
            .find(|g| g.fleet == fleet.name && u.needs.covered_by(&g.power));
        match (by, admin) {
            (Some(g), _) => allowed
                .entry(u.container)
                .or_default()
                .push(format!("{} (grant {}: {})", u.what, g.id, g.power)),
            (None, true) => allowed
                .entry(u.container)
                .or_default()
                .push(format!("{} (submitted by an admin)", u.what)),
            (None, false) => {
                let span = fleet.spans.lookup(&u.path);
                let mut d = Diagnostic::new(
                    file,
                    span,
                    u.path.clone(),
                    format!(
                        "container {}: {} gives the container powers over its host; fleet {} has no grant for \
                         it (PVE reserves it for root@pam, pxfleet for what an admin granted)",
                        u.container, u.what, fleet.name
                    ),
                );
                d.hint = Some(format!(
                    "ask an admin to grant it: `pxctl grant add {} {}` (see `pxctl grant list {}`), or leave it out",
                    fleet.name,
                    u.needs.grant_text(),
                    fleet.name
                ));
                refused.push(d);
            }
        }
    }
    if !refused.is_empty() {
        return Err(refused);
    }
    Ok(allowed
        .into_iter()
        .map(|(c, list)| {
            (
                c.clone(),
                format!("container {c} runs with host powers: {}", list.join("; ")),
            )
        })
        .collect())
}

/// `pxctl grant add`: records that `fleet` may use `power` (text form), audit-logged and flushed before the
/// answer. Granting what the fleet already has returns the existing grant.
pub async fn add(
    state: &State,
    by: Option<&Identity>,
    fleet: &str,
    power: &str,
    reason: &str,
) -> Result<Grant> {
    if !pxfleet_spec::syntax::is_fleet_name(fleet) {
        return Err(Error::InvalidArgument(format!(
            "{fleet:?} is not a fleet name (lower-case letters, digits and '-', at most 63)"
        )));
    }
    let power: HostPower = power
        .trim()
        .parse()
        .map_err(|e: BadPower| Error::InvalidArgument(e.to_string()))?;
    let g = state
        .store
        .add_grant(fleet, power, reason, &actor(by), state.now_ms())?;
    state.store.audit(&AuditEntry {
        time_ms: state.now_ms(),
        actor: actor(by),
        action: "grant".into(),
        target: fleet.to_string(),
        detail: format!("grant {}: {} ({reason})", g.id, g.power),
    })?;
    state.store.flush().await?;
    tracing::info!(fleet, grant = g.id, power = %g.power, "host power granted");
    Ok(g)
}

/// `pxctl grant revoke ID`: removes the grant, audit-logged. Containers made with it keep running; the next
/// submit that needs it is refused.
pub async fn revoke(state: &State, by: Option<&Identity>, id: u64) -> Result<Grant> {
    let g = state.store.remove_grant(id)?.ok_or_else(|| {
        Error::NotFound(format!(
            "there is no grant {id}; `pxctl grant list` shows the grants and their ids"
        ))
    })?;
    state.store.audit(&AuditEntry {
        time_ms: state.now_ms(),
        actor: actor(by),
        action: "revoke_grant".into(),
        target: g.fleet.clone(),
        detail: format!("grant {}: {}", g.id, g.power),
    })?;
    state.store.flush().await?;
    tracing::info!(fleet = %g.fleet, grant = g.id, power = %g.power, "host power grant revoked");
    Ok(g)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn powers_parse_and_print_the_same() {
        for s in [
            "privileged",
            "bind-mount:/srv/data",
            "device:/dev/net/tun",
            "feature:fuse",
            "feature:keyctl",
            "feature:mknod",
            "feature:force_rw_sys",
            "feature:mount=nfs",
            "idmap:1000-1999",
            "volume:local-lvm:vm-900-disk-1",
            "adopt:105",
            "hookscript:local:snippets/hook.sh",
        ] {
            assert_eq!(s.parse::<HostPower>().unwrap().to_string(), s);
        }
        assert_eq!(
            "bind-mount:/srv/data/".parse::<HostPower>().unwrap(),
            HostPower::BindMount {
                prefix: "/srv/data".into()
            }
        );
        assert_eq!(
            "idmap:0".parse::<HostPower>().unwrap(),
            HostPower::Idmap { first: 0, last: 0 }
        );
        for bad in [
            "root",
            "privileged:yes",
            "bind-mount:srv",
            "bind-mount:/",
            "bind-mount:/srv/../etc",
            "bind-mount:/srv//x",
            "device:/etc/shadow",
            "device:/dev/../etc",
            "feature:nesting",
            "feature:mount=a;b",
            "idmap:5-1",
            "idmap:x",
        ] {
            let e = bad.parse::<HostPower>().unwrap_err().to_string();
            assert!(e.contains("a power is one of"), "{bad}: {e}");
        }
    }

    #[test]
    fn volume_owners_are_read_from_pve_volume_names() {
        assert_eq!(volume_owner("local-lvm:vm-900-disk-1"), Some(900));
        assert_eq!(volume_owner("local-zfs:subvol-2400-disk-0"), Some(2400));
        assert_eq!(volume_owner("local:123/vm-123-disk-0.raw"), Some(123));
        assert_eq!(volume_owner("nfs:base-77-disk-0"), Some(77));
        assert_eq!(volume_owner("ceph:mydata"), None);
    }

    #[test]
    fn bind_mount_prefixes_match_whole_components() {
        let g = HostPower::BindMount {
            prefix: "/srv/data".into(),
        };
        let ok = |p: &str| Needed::BindMount(p.into()).covered_by(&g);
        assert!(ok("/srv/data"));
        assert!(ok("/srv/data/x/y"));
        assert!(ok("/srv/data/"));
        assert!(ok("//srv/./data/x"));
        assert!(!ok("/srv/database"));
        assert!(!ok("/srv"));
        assert!(!ok("/srv/data/../../etc"));
        assert!(!ok("/etc"));
        assert!(!Needed::Device("/dev/sda".into()).covered_by(&g));
        let d = HostPower::Device {
            path: "/dev/net/tun".into(),
        };
        assert!(Needed::Device("/dev/net/tun".into()).covered_by(&d));
        assert!(!Needed::Device("/dev/net/tun2".into()).covered_by(&d));
        let i = HostPower::Idmap {
            first: 1000,
            last: 1999,
        };
        assert!(Needed::Idmap(1000, 1999).covered_by(&i));
        assert!(!Needed::Idmap(999, 1000).covered_by(&i));
        assert!(!Needed::Idmap(1500, 2000).covered_by(&i));
    }
}
