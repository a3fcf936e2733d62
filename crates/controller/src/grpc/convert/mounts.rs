//! Mount points (`mpN` with their options), devices (`devN`) and `lxc.idmap` lines between protobuf and the
//! spec's types, both ways: the desired spec sent to agents and the configuration they read back.

use pxfleet_proto::v1 as pb;
use pxfleet_spec::observed::ObservedMountPoint;
use pxfleet_spec::{Device, IdKind, IdMap, MountFlags, MountPoint};

/// The options of a mount point (or of the root disk, whose `MountPoint` carries only these) as read back.
pub(super) fn flags_from_pb(m: &pb::MountPoint) -> MountFlags {
    let mut mount_options: Vec<String> = m
        .mount_options
        .iter()
        .flat_map(|o| o.split(';'))
        .filter(|o| !o.is_empty())
        .map(String::from)
        .collect();
    mount_options.sort();
    mount_options.dedup();
    MountFlags {
        mount_options,
        acl: m.acl,
        quota: m.quota,
        replicate: m.replicate.unwrap_or(true),
        shared: m.shared,
        keepattrs: m.keepattrs,
        idmap: (!m.idmap.is_empty()).then(|| m.idmap.clone()),
    }
}

/// A read-back `mpN`: a bind mount, or a storage volume (with its volume id, whether pxfleet allocated it or
/// the file names it as existing: the planner tells them apart).
pub(super) fn observed_mount(m: &pb::MountPoint) -> ObservedMountPoint {
    let flags = flags_from_pb(m);
    let mount = if m.host_path.is_empty() {
        MountPoint::Volume {
            datastore_id: m.datastore_id.clone(),
            size_gib: m.size_gib,
            path: m.path.clone(),
            backup: m.backup,
            read_only: m.read_only,
            flags,
        }
    } else {
        MountPoint::Bind {
            host_path: m.host_path.clone(),
            path: m.path.clone(),
            read_only: m.read_only,
            flags,
        }
    };
    ObservedMountPoint {
        slot: m.index,
        mount,
        size_gib: m.host_path.is_empty().then_some(m.size_gib as f64),
        volume: (!m.volume.is_empty()).then(|| m.volume.clone()),
    }
}

/// Desired options as the protocol carries them (a mount point's, or the root disk's alone).
pub(super) fn flags_pb(f: &MountFlags) -> pb::MountPoint {
    pb::MountPoint {
        mount_options: f.mount_options.clone(),
        acl: f.acl,
        quota: f.quota,
        replicate: (!f.replicate).then_some(false),
        shared: f.shared,
        keepattrs: f.keepattrs,
        idmap: f.idmap.clone().unwrap_or_default(),
        ..Default::default()
    }
}

/// A desired mount point in slot `index`.
pub(super) fn mount_pb(index: u32, m: &MountPoint) -> pb::MountPoint {
    let mut out = pb::MountPoint {
        index,
        path: m.path().to_owned(),
        ..flags_pb(m.flags())
    };
    match m {
        MountPoint::Volume {
            datastore_id,
            size_gib,
            backup,
            read_only,
            ..
        } => {
            out.datastore_id = datastore_id.clone();
            out.size_gib = *size_gib;
            out.backup = *backup;
            out.read_only = *read_only;
        }
        MountPoint::Bind {
            host_path,
            read_only,
            ..
        } => {
            out.host_path = host_path.clone();
            out.read_only = *read_only;
        }
        MountPoint::Existing {
            volume,
            backup,
            read_only,
            ..
        } => {
            out.volume = volume.clone();
            out.existing = true;
            out.backup = *backup;
            out.read_only = *read_only;
        }
        // Resolved before an operation is made (reconcile::volumes); one that is not reaches the agent without a
        // volume id, which it refuses.
        MountPoint::VolumeOf {
            backup, read_only, ..
        } => {
            out.existing = true;
            out.backup = *backup;
            out.read_only = *read_only;
        }
    }
    out
}

pub(super) fn devices_pb(devices: &[Device]) -> Vec<pb::Device> {
    devices
        .iter()
        .enumerate()
        .map(|(i, d)| pb::Device {
            index: i as u32,
            path: d.path.clone(),
            mode: d.mode.clone().unwrap_or_default(),
            uid: d.uid,
            gid: d.gid,
            deny_write: d.deny_write,
        })
        .collect()
}

/// Read-back devices in slot order.
pub(super) fn devices_from_pb(devices: &[pb::Device]) -> Vec<Device> {
    let mut v: Vec<&pb::Device> = devices.iter().collect();
    v.sort_by_key(|d| d.index);
    v.into_iter()
        .map(|d| Device {
            path: d.path.clone(),
            mode: (!d.mode.is_empty()).then(|| d.mode.clone()),
            uid: d.uid,
            gid: d.gid,
            deny_write: d.deny_write,
        })
        .collect()
}

pub(super) fn idmap_pb(idmap: &[IdMap]) -> Vec<pb::IdMapEntry> {
    idmap
        .iter()
        .map(|m| pb::IdMapEntry {
            kind: m.kind.letter().to_owned(),
            container_id: m.container_id,
            host_id: m.host_id,
            size: m.size,
        })
        .collect()
}

/// Read-back `lxc.idmap` lines; one of another kind than `u`/`g` cannot be expressed and is left out (it then
/// shows as drift against the file).
pub(super) fn idmap_from_pb(idmap: &[pb::IdMapEntry]) -> Vec<IdMap> {
    idmap
        .iter()
        .filter_map(|m| {
            let kind = match m.kind.as_str() {
                "u" => IdKind::Uid,
                "g" => IdKind::Gid,
                _ => return None,
            };
            Some(IdMap {
                kind,
                container_id: m.container_id,
                host_id: m.host_id,
                size: m.size,
            })
        })
        .collect()
}
