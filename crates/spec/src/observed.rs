//! Observed state: what a node reports about one container, already translated into fleet terms.
//!
//! The agent builds an [`ObservedContainer`] from `pct list`, `pct config` / `pvesh .../config` and, for a running
//! container, `.../interfaces`. Keys that `pct config` leaves out are filled with PVE's meaning of "absent"
//! (`onboot` absent = false, `features` absent = all off, `cores` absent = `None` = all host CPUs, ...), so a field
//! here is `Option` only where PVE really may not say: the template a container was made from is not kept by PVE,
//! `cores`/`cpu_limit`/`cpu_units`/`startup` are unset unless given.
//!
//! The planner compares these values with the desired [`Container`]; [`ObservedContainer::from_desired`] builds the
//! observation a perfectly applied container would give, which the simulator and tests use.

use std::collections::BTreeMap;

use ipnet::IpNet;
use serde::{Deserialize, Serialize};

use crate::model::{Container, Device, Dns, Features, IdMap, Interface, MountPoint, Startup};

pub use pxfleet_pvekeys::mark::{user_description, ManagedMark, MANAGED_LINE_PREFIX, MANAGED_TAG};

/// One container as a node reports it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ObservedContainer {
    pub vm_id: u32,
    /// The node whose `/etc/pve/nodes/<node>/lxc/` holds the config.
    pub node: String,
    pub status: PowerState,
    /// PVE's config lock (`create`, `backup`, `migrate`, ...). A locked container is in the middle of an
    /// operation; the planner leaves it alone (except to destroy it when it left the file).
    pub lock: Option<String>,
    /// The pxfleet mark, read from the description line (and the `pxfleet` tag). `None`: not ours, never touched.
    pub managed: Option<ManagedMark>,
    pub config: ObservedConfig,
}

/// `running` / `stopped` as `pct status` says; `unknown` when the node could not tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PowerState {
    Running,
    Stopped,
    Unknown,
}

/// A container's configuration in fleet terms.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ObservedConfig {
    pub hostname: String,
    /// `None`: unset (all host CPUs).
    pub cores: Option<u32>,
    /// `None`: unset (0, unlimited).
    pub cpu_limit: Option<f64>,
    /// `None`: unset (100 on cgroup v2).
    pub cpu_units: Option<u32>,
    /// MiB.
    pub memory: u64,
    /// MiB.
    pub swap: u64,
    /// Root disk size in GiB (`size=512M` is 0.5).
    pub disk_size_gib: f64,
    /// Storage of the root disk; `None` when the rootfs is not a storage volume.
    pub datastore_id: Option<String>,
    /// Fleet template name the container was created from, when the agent knows it (PVE does not keep it).
    pub template: Option<String>,
    pub unprivileged: bool,
    pub features: Features,
    /// net0, net1, ... in order.
    pub interfaces: Vec<ObservedInterface>,
    pub dns: Dns,
    pub startup: Option<Startup>,
    pub start_on_boot: bool,
    pub protection: bool,
    /// As PVE stores them (lower-case, sorted), without the `pxfleet` tag.
    pub tags: Vec<String>,
    /// Without the `managed-by:` line; `None` when nothing else is left.
    pub description: Option<String>,
    pub mount_points: Vec<ObservedMountPoint>,
    /// `dev0`, `dev1`, ... in slot order.
    #[serde(default)]
    pub devices: Vec<Device>,
    /// `lxc.idmap` lines in file order.
    #[serde(default)]
    pub idmap: Vec<IdMap>,
    /// `ostype` as the node reports it (PVE fills it in from the template when not given).
    #[serde(default)]
    pub ostype: Option<String>,
    /// `env` as the node reports it (`lxc.environment.runtime` lines).
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// `entrypoint`; `None` when the config has none (PVE's `/sbin/init`).
    #[serde(default)]
    pub entrypoint: Option<String>,
    /// `arch` as the node reports it (PVE detects it from the template when not given).
    #[serde(default)]
    pub arch: Option<String>,
    /// `timezone`; `None` when the config has none.
    #[serde(default)]
    pub timezone: Option<String>,
    /// `console`, `tty`, `cmode` in effect (PVE's defaults filled in for absent keys).
    #[serde(default)]
    pub console: crate::model::Console,
    /// The root disk's options (PVE's defaults for absent keys).
    #[serde(default)]
    pub rootfs: crate::model::MountFlags,
    /// `hookscript`; `None` when the config has none.
    #[serde(default)]
    pub hookscript: Option<String>,
    /// The root disk's volume id (`local-lvm:vm-101-disk-0`), when the node reported it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rootfs_volume: Option<String>,
    /// `template: 1`: the container is a template (`pct template`), which cannot start.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub is_template: bool,
    /// The resource pool it is in, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool: Option<String>,
}

/// One `netN` and, for a running container, the addresses it really has.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ObservedInterface {
    /// The N of `netN`.
    pub slot: u32,
    /// The configured interface (`mac_address` is always `Some` once PVE generated one).
    pub config: Interface,
    /// Addresses seen inside the container (`.../interfaces`); empty when stopped.
    #[serde(default)]
    pub addresses: Vec<IpNet>,
}

/// One `mpN`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ObservedMountPoint {
    /// The N of `mpN` (needed by `pct resize <vmid> mpN`).
    pub slot: u32,
    /// The mount point in fleet terms. For a volume, `size_gib` is rounded up to whole GiB; see `size_gib` here
    /// for the exact size.
    pub mount: MountPoint,
    /// Exact size of a volume in GiB (`None` for bind mounts).
    pub size_gib: Option<f64>,
    /// The volume id of a storage volume (`local-lvm:vm-101-disk-1`), when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume: Option<String>,
}

impl ObservedMountPoint {
    /// A storage volume read back (a `Volume` with its volume id) as the existing volume it is; `None` for a bind
    /// mount or a volume whose id is not known.
    pub fn as_existing(&self) -> Option<MountPoint> {
        match (&self.mount, &self.volume) {
            (
                MountPoint::Volume {
                    path,
                    backup,
                    read_only,
                    flags,
                    ..
                },
                Some(volume),
            ) => Some(MountPoint::Existing {
                volume: volume.clone(),
                path: path.clone(),
                backup: *backup,
                read_only: *read_only,
                flags: flags.clone(),
            }),
            (MountPoint::Existing { .. }, _) => Some(self.mount.clone()),
            _ => None,
        }
    }
}

impl ObservedContainer {
    /// What a node would report for `c` once created exactly as desired: `vm_id` and `node` are where it landed,
    /// `mac` gives the MAC PVE generates for interface `i` when the file names none.
    pub fn from_desired(
        fleet: &str,
        c: &Container,
        vm_id: u32,
        node: &str,
        status: PowerState,
        default_datastore: &str,
        mac: impl Fn(usize) -> crate::model::MacAddr,
    ) -> Self {
        ObservedContainer {
            vm_id,
            node: node.to_owned(),
            status,
            lock: None,
            managed: Some(ManagedMark {
                fleet: fleet.to_owned(),
                name: c.name.clone(),
            }),
            config: ObservedConfig {
                hostname: c.hostname.clone(),
                cores: c.cores,
                cpu_limit: c.cpu_limit,
                cpu_units: c.cpu_units,
                memory: c.memory,
                swap: c.swap,
                disk_size_gib: c.disk_size as f64,
                datastore_id: Some(
                    c.datastore_id
                        .clone()
                        .unwrap_or_else(|| default_datastore.to_owned()),
                ),
                template: Some(c.template.clone()),
                ostype: c.ostype.clone(),
                env: c.env.clone().unwrap_or_default(),
                entrypoint: c.entrypoint.clone().filter(|e| !e.is_empty()),
                arch: c.arch.clone(),
                timezone: c.timezone.clone(),
                console: {
                    let pve = crate::model::Console::pve_defaults();
                    crate::model::Console {
                        enabled: c.console.enabled.or(pve.enabled),
                        tty_count: c.console.tty_count.or(pve.tty_count),
                        mode: c.console.mode.clone().or(pve.mode),
                    }
                },
                rootfs: c.rootfs.clone(),
                hookscript: c.hookscript.clone(),
                rootfs_volume: None,
                is_template: c.state.is_template(),
                pool: c.pool.clone(),
                unprivileged: c.unprivileged,
                features: c.features.clone(),
                interfaces: c
                    .interfaces
                    .iter()
                    .enumerate()
                    .map(|(i, iface)| observed_interface(i, iface, &mac))
                    .collect(),
                dns: c.dns.clone(),
                startup: c.startup.clone(),
                start_on_boot: c.start_on_boot,
                protection: c.protection,
                tags: normalise_tags(&c.tags),
                description: c.description.as_deref().and_then(normalise_description),
                mount_points: c
                    .mount_points
                    .iter()
                    .enumerate()
                    .map(|(i, m)| observed_mount(i as u32, m))
                    .collect(),
                devices: c.devices.clone(),
                idmap: c.idmap.clone(),
            },
        }
    }
}

/// The observation of a desired interface at position `i`.
pub fn observed_interface(
    i: usize,
    iface: &Interface,
    mac: &impl Fn(usize) -> crate::model::MacAddr,
) -> ObservedInterface {
    let mut config = iface.clone();
    config.mac_address = Some(iface.mac_address.unwrap_or_else(|| mac(i)));
    ObservedInterface {
        slot: i as u32,
        config,
        addresses: Vec::new(),
    }
}

/// The observation of a desired mount point in slot `slot`.
pub fn observed_mount(slot: u32, m: &MountPoint) -> ObservedMountPoint {
    let (size_gib, volume) = match m {
        MountPoint::Volume { size_gib, .. } => (Some(*size_gib as f64), None),
        MountPoint::Bind { .. } | MountPoint::VolumeOf { .. } => (None, None),
        MountPoint::Existing { volume, .. } => (None, Some(volume.clone())),
    };
    ObservedMountPoint {
        slot,
        mount: m.clone(),
        size_gib,
        volume,
    }
}

/// Tags as PVE stores them: lower-cased, sorted, de-duplicated, without pxfleet's own tag.
pub fn normalise_tags(tags: &[String]) -> Vec<String> {
    let mut out: Vec<String> = tags
        .iter()
        .map(|t| t.to_lowercase())
        .filter(|t| t != MANAGED_TAG)
        .collect();
    out.sort();
    out.dedup();
    out
}

/// A description as compared: trailing whitespace (PVE's trailing newline) dropped, empty meaning none.
pub fn normalise_description(d: &str) -> Option<String> {
    let t = d.trim_end();
    (!t.is_empty()).then(|| t.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_normalise_like_pve() {
        let t = normalise_tags(&["Web".into(), "db".into(), "web".into(), "pxfleet".into()]);
        assert_eq!(t, vec!["db".to_owned(), "web".to_owned()]);
    }
}
