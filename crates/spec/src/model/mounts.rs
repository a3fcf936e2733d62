//! What a container mounts and maps: mount points (`mpN`) with their options, passed-through devices
//! (`devN`) and `lxc.idmap` entries.

use serde::{Deserialize, Serialize};

/// `--mpN`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum MountPoint {
    /// A new volume on a datastore: `mpN: <datastore_id>:<size_gib>,mp=<path>,backup=..,ro=..`.
    Volume {
        datastore_id: String,
        size_gib: u64,
        /// Mount path inside the container (absolute).
        path: String,
        /// Included in vzdump backups. Default false (PVE's default for mount points).
        backup: bool,
        read_only: bool,
        /// `acl`, `quota`, `replicate`, `shared`, `mountoptions`.
        #[serde(default, skip_serializing_if = "MountFlags::is_default")]
        flags: MountFlags,
    },
    /// A bind mount of a host directory: `mpN: <host_path>,mp=<path>,ro=..`.
    Bind {
        host_path: String,
        path: String,
        read_only: bool,
        #[serde(default, skip_serializing_if = "MountFlags::is_default")]
        flags: MountFlags,
    },
    /// A volume that already exists in storage (`volume: local-lvm:vm-100-disk-1`), mounted as it is:
    /// `mpN: <volume>,mp=<path>,..`. pxfleet never allocates, resizes or deletes it.
    Existing {
        volume: String,
        path: String,
        backup: bool,
        read_only: bool,
        #[serde(default, skip_serializing_if = "MountFlags::is_default")]
        flags: MountFlags,
    },
    /// Another container's volume: the one container `container` of the same fleet has at `source_path`
    /// (`volume_of: {container: db, path: /srv/data}`; bpg's `mount_point.volume = <other>.mount_point[N]
    /// .path_in_datastore`). Mounted as an existing volume once the source exists and its node reports the volume
    /// id ([`MountPoint::resolved`]); until then, the container waits.
    VolumeOf {
        container: String,
        source_path: String,
        path: String,
        backup: bool,
        read_only: bool,
        #[serde(default, skip_serializing_if = "MountFlags::is_default")]
        flags: MountFlags,
    },
}

/// The options of an `mpN` besides its volume, path, `backup` and `ro`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MountFlags {
    /// `mountoptions=a;b`: a sorted subset of [`MOUNT_OPTIONS`]. Empty: none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mount_options: Vec<String>,
    /// `acl=`: `None` leaves it to the file system's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub acl: Option<bool>,
    /// `quota=` (user quotas inside the container). Default false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub quota: bool,
    /// `replicate=` (storage replication includes the volume). Default true, as in PVE.
    #[serde(default = "yes", skip_serializing_if = "is_true")]
    pub replicate: bool,
    /// `shared=` (a non-volume mount available on every node). Default false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub shared: bool,
    /// `keepattrs=` (PVE 9.2): the volume's root keeps the owner and mode of the mount point directory when it
    /// exists already. Default false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub keepattrs: bool,
    /// `idmap=` (PVE 9.2), as PVE stores it: `passthrough`, or `u|g:CONTAINER:DISK:COUNT` entries joined by `;`
    /// mapping container ids to ids on the volume (the rest follow the container's `lxc.idmap`). `None`: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idmap: Option<String>,
}

fn yes() -> bool {
    true
}

fn is_true(b: &bool) -> bool {
    *b
}

impl Default for MountFlags {
    fn default() -> Self {
        MountFlags {
            mount_options: Vec::new(),
            acl: None,
            quota: false,
            replicate: true,
            shared: false,
            keepattrs: false,
            idmap: None,
        }
    }
}

impl MountFlags {
    pub fn is_default(&self) -> bool {
        *self == MountFlags::default()
    }
}

/// What PVE accepts in `mountoptions=` (CONTRACT §2.4).
pub const MOUNT_OPTIONS: [&str; 6] = [
    "discard", "lazytime", "noatime", "nodev", "noexec", "nosuid",
];

impl MountPoint {
    /// Mount path inside the container.
    pub fn path(&self) -> &str {
        match self {
            MountPoint::Volume { path, .. }
            | MountPoint::Bind { path, .. }
            | MountPoint::Existing { path, .. }
            | MountPoint::VolumeOf { path, .. } => path,
        }
    }

    /// The datastore its volume lives on (a new volume's, or the `STORAGE` of an existing `STORAGE:NAME`);
    /// `None` for a bind mount and for another container's volume not resolved yet. What a migration needs on the
    /// target node.
    pub fn datastore(&self) -> Option<&str> {
        match self {
            MountPoint::Volume { datastore_id, .. } => Some(datastore_id),
            MountPoint::Existing { volume, .. } => {
                volume.split_once(':').map(|(storage, _)| storage)
            }
            MountPoint::Bind { .. } | MountPoint::VolumeOf { .. } => None,
        }
    }

    /// A [`MountPoint::VolumeOf`] as the existing volume `volume` it names now; any other kind as it is.
    pub fn resolved(&self, volume: &str) -> MountPoint {
        match self {
            MountPoint::VolumeOf {
                path,
                backup,
                read_only,
                flags,
                ..
            } => MountPoint::Existing {
                volume: volume.to_string(),
                path: path.clone(),
                backup: *backup,
                read_only: *read_only,
                flags: flags.clone(),
            },
            other => other.clone(),
        }
    }

    /// The options besides volume and path.
    pub fn flags(&self) -> &MountFlags {
        match self {
            MountPoint::Volume { flags, .. }
            | MountPoint::Bind { flags, .. }
            | MountPoint::Existing { flags, .. }
            | MountPoint::VolumeOf { flags, .. } => flags,
        }
    }
}

/// Whether two mount paths are one place in a container (`mnt/data` and `/mnt/data` are).
pub fn same_mount_path(a: &str, b: &str) -> bool {
    a.trim_start_matches('/') == b.trim_start_matches('/')
}

/// Puts in each [`MountPoint::VolumeOf`] of `mounts` the volume `lookup(container, source_path)` finds; the
/// first one it finds none for is the error, as `(container, source_path)`, and nothing is changed.
pub fn resolve_volumes(
    mounts: &[MountPoint],
    lookup: impl Fn(&str, &str) -> Option<String>,
) -> Result<Vec<MountPoint>, (String, String)> {
    mounts
        .iter()
        .map(|m| match m {
            MountPoint::VolumeOf {
                container,
                source_path,
                ..
            } => lookup(container, source_path)
                .map(|v| m.resolved(&v))
                .ok_or_else(|| (container.clone(), source_path.clone())),
            other => Ok(other.clone()),
        })
        .collect()
}

pub use pxfleet_pvekeys::volume_owner;

/// `--devN`: a host device node passed through to the container.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Device {
    /// `path=`: the device under /dev on the host (and in the container).
    pub path: String,
    /// `mode=`: octal access mode such as `0660`. `None`: PVE's default (the host node's mode).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    /// `uid=` of the device node inside the container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<u32>,
    /// `gid=` of the device node inside the container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gid: Option<u32>,
    /// `deny-write=1`: the container may only read. Default false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub deny_write: bool,
}

/// Whether an `idmap` entry maps user or group ids.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum IdKind {
    Uid,
    Gid,
}

impl IdKind {
    /// `u` or `g`, as in `lxc.idmap`.
    pub fn letter(self) -> &'static str {
        match self {
            IdKind::Uid => "u",
            IdKind::Gid => "g",
        }
    }
}

/// One `lxc.idmap: <u|g> <container_id> <host_id> <size>` line of an unprivileged container.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct IdMap {
    #[serde(rename = "type")]
    pub kind: IdKind,
    pub container_id: u32,
    pub host_id: u32,
    pub size: u32,
}

impl IdMap {
    /// The value of its `lxc.idmap` line: `u 0 100000 65536`.
    pub fn line(&self) -> String {
        format!(
            "{} {} {} {}",
            self.kind.letter(),
            self.container_id,
            self.host_id,
            self.size
        )
    }

    /// Reads an `lxc.idmap` value (`u 0 100000 65536`).
    pub fn parse_line(s: &str) -> Option<IdMap> {
        let mut it = s.split_whitespace();
        let kind = match it.next()? {
            "u" => IdKind::Uid,
            "g" => IdKind::Gid,
            _ => return None,
        };
        let mut n = || it.next()?.parse::<u32>().ok();
        let (container_id, host_id, size) = (n()?, n()?, n()?);
        Some(IdMap {
            kind,
            container_id,
            host_id,
            size,
        })
    }
}
