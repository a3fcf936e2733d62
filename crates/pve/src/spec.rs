//! Typed requests: [`CreateSpec`] (everything `pct create` needs for one fleet container) and [`ConfigChange`]
//! (an in-place `pct set`). Independent of the fleet.yaml model; the agent maps fleet fields onto these.
//!
//! fleet.yaml field -> here: vm_id -> `vmid`; hostname; cores; cpu_limit -> `cpulimit`; cpu_units -> `cpuunits`;
//! memory; swap; disk_size + datastore_id -> `rootfs`; template -> `template` (volid); unprivileged; features;
//! interfaces -> `nets` (net0..); dns.servers -> `nameservers`; dns.domain -> `searchdomains`; ssh_public_keys;
//! startup; onboot; protection; tags; description; mount_points; devices -> `devN`. `password` is not here: it is
//! `Node::create`'s own argument (it travels on stdin, never in argv).

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

pub use crate::parse::{Features, NetConfig, Startup};

/// The root disk: always explicit, never PVE's implicit `local:4`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RootfsSpec {
    /// Storage ID with `rootdir` content (`local-lvm`, `local-zfs`).
    pub storage: String,
    pub size_gib: u32,
}

/// The root disk's options besides its volume and size (`rootfs: ..,acl=,mountoptions=,quota=,replicate=`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RootfsOptions {
    /// PVE's `mountoptions=`; empty for none.
    pub mount_options: Vec<String>,
    /// `acl=`; `None` leaves the file system's default.
    pub acl: Option<bool>,
    /// `quota=` (privileged containers only: PVE refuses to start an unprivileged one with it).
    pub quota: Option<bool>,
    /// `replicate=` (PVE's default is 1).
    pub replicate: Option<bool>,
}

impl RootfsOptions {
    /// The options of a stored rootfs `m`.
    pub fn of(m: &crate::parse::MountPoint) -> RootfsOptions {
        RootfsOptions {
            mount_options: m.mount_option_list(),
            acl: m.acl,
            quota: m.quota,
            replicate: m.replicate,
        }
    }

    /// Whether `m` (the stored rootfs) has these options, PVE's defaults filled in (quota off, replicate on, no
    /// mount options, `acl` unset its own state).
    pub fn matches(&self, m: &crate::parse::MountPoint) -> bool {
        let mut have = m.mount_option_list();
        let mut want = self.mount_options.clone();
        have.sort_unstable();
        want.sort_unstable();
        have == want
            && m.acl == self.acl
            && m.quota.unwrap_or(false) == self.quota.unwrap_or(false)
            && m.replicate.unwrap_or(true) == self.replicate.unwrap_or(true)
    }

    /// These options on the stored rootfs `m` (its volume and size kept): the value `pct set --rootfs` needs
    /// (PVE does not rescan the size of a rootfs it is given).
    pub fn applied_to(&self, m: &crate::parse::MountPoint) -> crate::parse::MountPoint {
        crate::parse::MountPoint {
            acl: self.acl,
            quota: self.quota.filter(|q| *q),
            replicate: self.replicate.filter(|r| !*r),
            mountoptions: Some(self.mount_options.join(";")).filter(|o| !o.is_empty()),
            ..m.clone()
        }
    }
}

/// Where a mount point's data lives.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum MountVolume {
    /// A new volume allocated on a storage (`STORAGE:GiB`).
    Storage { storage: String, size_gib: u32 },
    /// A bind mount of an absolute host path (root only, which the agent is).
    Bind { host_path: String },
    /// A volume already in storage (`local-lvm:vm-100-disk-1`), mounted as it is.
    Existing { volume: String },
}

impl MountVolume {
    /// The vm_id an existing volume's name gives as its owner (`local-lvm:vm-100-disk-1`,
    /// `local:100/vm-100-disk-1.raw`, `local-zfs:subvol-100-disk-0` -> 100); `None` for the other kinds.
    /// `pct destroy` frees the volumes a container owns, so an existing volume owned by the container it is
    /// mounted into would not outlive it.
    pub fn existing_owner(&self) -> Option<u32> {
        let MountVolume::Existing { volume } = self else {
            return None;
        };
        volume_owner(volume)
    }
}

pub use pxfleet_pvekeys::volume_owner;

/// One `mpN`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MountPointSpec {
    pub volume: MountVolume,
    /// Absolute path inside the CT.
    pub path: String,
    /// Include in vzdump backups (storage volumes).
    pub backup: Option<bool>,
    /// Mount read-only.
    pub read_only: Option<bool>,
    /// PVE's `mountoptions=` (`noatime`, `nodev`, `nosuid`, `noexec`, `lazytime`, `discard`); empty for none.
    pub mount_options: Vec<String>,
    /// `acl=`; `None` leaves the file system's default.
    pub acl: Option<bool>,
    /// `quota=`.
    pub quota: Option<bool>,
    /// `replicate=` (PVE's default is 1).
    pub replicate: Option<bool>,
    /// `shared=` (non-volume mount points).
    pub shared: Option<bool>,
    /// `keepattrs=` (PVE 9.2).
    pub keepattrs: Option<bool>,
    /// `idmap=` (PVE 9.2): `passthrough` or `u|g:CT:DISK:COUNT[;...]`.
    pub idmap: Option<String>,
}

impl MountPointSpec {
    /// A mount point with no options set.
    pub fn new(volume: MountVolume, path: impl Into<String>) -> Self {
        MountPointSpec {
            volume,
            path: path.into(),
            backup: None,
            read_only: None,
            mount_options: Vec::new(),
            acl: None,
            quota: None,
            replicate: None,
            shared: None,
            keepattrs: None,
            idmap: None,
        }
    }
}

/// One `devN`: a host device node passed through.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceSpec {
    /// `/dev/...`.
    pub path: String,
    /// Octal mode such as `0660`.
    pub mode: Option<String>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    /// `deny-write=`.
    pub deny_write: Option<bool>,
}

/// A container to create.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CreateSpec {
    pub vmid: u32,
    /// Template volume ID, `STORAGE:vztmpl/FILE`.
    pub template: String,
    pub hostname: Option<String>,
    pub cores: Option<u32>,
    pub cpulimit: Option<f64>,
    pub cpuunits: Option<u32>,
    /// MiB.
    pub memory: Option<u32>,
    /// MiB (an explicit 0 is kept by PVE).
    pub swap: Option<u32>,
    pub rootfs: RootfsSpec,
    /// Sent explicitly either way (PVE's create default is 1).
    pub unprivileged: bool,
    /// Left out when nothing is enabled.
    pub features: Features,
    /// `net0`.. by index. Leave `hwaddr` empty to let PVE generate one.
    pub nets: BTreeMap<u32, NetConfig>,
    pub nameservers: Vec<String>,
    pub searchdomains: Vec<String>,
    /// One key per entry; written to a 0600 temporary file passed as `--ssh-public-keys <path>`.
    pub ssh_public_keys: Vec<String>,
    pub startup: Option<Startup>,
    pub onboot: Option<bool>,
    pub protection: Option<bool>,
    pub tags: Vec<String>,
    pub description: Option<String>,
    /// The root disk's options (`rootfs: STORAGE:GiB,<options>`).
    pub rootfs_options: RootfsOptions,
    /// `mp0`.. by index.
    pub mount_points: BTreeMap<u32, MountPointSpec>,
    /// `dev0`.. by index.
    pub devices: BTreeMap<u32, DeviceSpec>,
    /// Raw `lxc.idmap` values (`u 0 100000 65536`): not a `pct create` option; written into the config file
    /// after the create (see [`crate::conffile`]). Empty: PVE's default map.
    pub idmap: Vec<String>,
    /// Normally detected from the template.
    pub arch: Option<String>,
    pub ostype: Option<String>,
    /// `host`, `UTC` or a zone of zone.tab ([`crate::zones::is_timezone`]).
    pub timezone: Option<String>,
    /// `--console` (PVE's default: 1).
    pub console: Option<bool>,
    /// `--tty`, 0..=6 (PVE's default: 2).
    pub tty: Option<u32>,
    /// `--cmode`: `tty`, `console` or `shell` (PVE's default: `tty`).
    pub cmode: Option<String>,
    /// `--hookscript STORAGE:snippets/FILE`: a script PVE runs as root on the node at the container's
    /// lifecycle events.
    pub hookscript: Option<String>,
    /// `--pool`: the resource pool the new container goes into (it must exist). Create only: a pool is no
    /// config key ([`crate::Node::set_pool`] moves a container).
    pub pool: Option<String>,
    /// `env` (PVE 9.1+), any number of variables: not passed to `pct create` (a command line cannot carry PVE's
    /// NUL separator); written into the config file as `lxc.environment.runtime` lines after the create
    /// ([`crate::conffile::write_env`]). `None`: left as it is; `Some(empty)`: no variables.
    pub env: Option<BTreeMap<String, String>>,
    /// `--entrypoint` (PVE 9.1+). `None`: left as it is; `Some("")`: none (PVE's /sbin/init).
    pub entrypoint: Option<String>,
}

impl CreateSpec {
    /// A minimal unprivileged container; fill in the rest with struct update syntax or field assignment.
    pub fn new(vmid: u32, template: impl Into<String>, rootfs: RootfsSpec) -> Self {
        CreateSpec {
            vmid,
            template: template.into(),
            hostname: None,
            cores: None,
            cpulimit: None,
            cpuunits: None,
            memory: None,
            swap: None,
            rootfs,
            unprivileged: true,
            features: Features::default(),
            nets: BTreeMap::new(),
            nameservers: Vec::new(),
            searchdomains: Vec::new(),
            ssh_public_keys: Vec::new(),
            startup: None,
            onboot: None,
            protection: None,
            tags: Vec::new(),
            description: None,
            rootfs_options: RootfsOptions::default(),
            mount_points: BTreeMap::new(),
            devices: BTreeMap::new(),
            idmap: Vec::new(),
            arch: None,
            ostype: None,
            timezone: None,
            console: None,
            tty: None,
            cmode: None,
            hookscript: None,
            pool: None,
            env: None,
            entrypoint: None,
        }
    }
}

/// An in-place change (`pct set`). `None` leaves a key alone; keys in `delete` are removed.
/// Empty lists / an empty `Features` / an empty `Startup` / an empty description are sent as deletions.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ConfigChange {
    pub hostname: Option<String>,
    pub cores: Option<u32>,
    pub cpulimit: Option<f64>,
    pub cpuunits: Option<u32>,
    pub memory: Option<u32>,
    pub swap: Option<u32>,
    pub features: Option<Features>,
    /// Changed NICs. A NIC without `hwaddr` gets its current MAC filled in by `Node::set`.
    pub nets: BTreeMap<u32, NetConfig>,
    pub nameservers: Option<Vec<String>>,
    pub searchdomains: Option<Vec<String>>,
    pub startup: Option<Startup>,
    pub onboot: Option<bool>,
    pub protection: Option<bool>,
    pub tags: Option<Vec<String>>,
    pub description: Option<String>,
    /// `--ostype` (never deleted: PVE requires it).
    pub ostype: Option<String>,
    /// `--arch`, `--timezone`, `--console`, `--tty`, `--cmode`: set when given and different, never deleted (a
    /// file that leaves them out does not compare them).
    pub arch: Option<String>,
    pub timezone: Option<String>,
    pub console: Option<bool>,
    pub tty: Option<u32>,
    pub cmode: Option<String>,
    /// `--hookscript`; deleted (`delete`) when the desired side has none.
    pub hookscript: Option<String>,
    /// `env` (PVE 9.1+), replacing every variable; `Some(empty)` removes them. Not sent by `pct set`: the
    /// caller writes the `lxc.environment.runtime` lines into the config file ([`crate::conffile::write_env`]).
    pub env: Option<BTreeMap<String, String>>,
    /// `--entrypoint` (PVE 9.1+).
    pub entrypoint: Option<String>,
    /// The root disk with other options (`--rootfs <its volume>,<options>,size=<its size>`); applied at the next
    /// start on a running container.
    pub rootfs: Option<crate::parse::MountPoint>,
    /// New mount points (allocated by PVE), and existing ones whose options change (`MountVolume::Existing`
    /// with the volume they have).
    pub mount_points: BTreeMap<u32, MountPointSpec>,
    /// New or changed `devN`.
    pub devices: BTreeMap<u32, DeviceSpec>,
    /// New raw `lxc.idmap` values when they differ (not sent by `pct set`: the caller writes them into the
    /// config file, [`crate::conffile::with_idmap`]); `Some(empty)` removes them.
    pub idmap: Option<Vec<String>>,
    /// Keys to delete (`net1`, `cpulimit`, `mp0`, ...).
    pub delete: BTreeSet<String>,
    /// Pending changes to drop (`--revert`): the key keeps its current value.
    pub revert: BTreeSet<String>,
}

impl ConfigChange {
    /// True when nothing would be sent.
    pub fn is_empty(&self) -> bool {
        *self == ConfigChange::default()
    }
}
