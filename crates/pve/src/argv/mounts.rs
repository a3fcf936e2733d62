//! `mpN` and `devN` values for `pct create` / `pct set`, checked as PVE's schema checks them (CONTRACT §2.2,
//! §2.4): a new volume `STORAGE:GiB`, an existing volume `STORAGE:NAME` or a host path, with the mount options;
//! a device `/dev/...` with its mode and owner.

use super::{check_mp_path, is_storage_id, R};
use crate::error::PveError;
use crate::parse::MountPoint;
use crate::spec::{DeviceSpec, MountPointSpec, MountVolume};

/// What PVE accepts in `mountoptions=` (CONTRACT §2.4).
pub const MOUNT_OPTIONS: [&str; 6] = [
    "discard", "lazytime", "noatime", "nodev", "noexec", "nosuid",
];

/// `STORAGE:NAME` of an existing volume (not `STORAGE:GiB`, which allocates).
fn is_volume_id(s: &str) -> bool {
    match s.split_once(':') {
        Some((st, name)) => {
            is_storage_id(st)
                && !name.is_empty()
                && name.parse::<f64>().is_err()
                && !name.contains([',', ' ', '='])
                && !name.split('/').any(|p| p == "..")
        }
        None => false,
    }
}

/// `mpN` value: `STORAGE:GiB,mp=/path,..` (new volume), `STORAGE:NAME,mp=/path,..` (existing volume) or
/// `/host,mp=/path,..` (bind mount), with `acl`, `backup`, `mountoptions`, `quota`, `replicate`, `ro`, `shared`.
pub fn mount_point_value(vmid: u32, index: u32, m: &MountPointSpec) -> R<String> {
    let v = Some(vmid);
    if index > 255 {
        return Err(PveError::invalid(
            v,
            "mount point index",
            index,
            "mp0 to mp255",
        ));
    }
    if !check_mp_path(&m.path) {
        return Err(PveError::invalid(
            v,
            &format!("mp{index}.mp"),
            &m.path,
            "an absolute path without /./, /../ or commas",
        ));
    }
    let volume = match &m.volume {
        MountVolume::Storage { storage, size_gib } => {
            if !is_storage_id(storage) {
                return Err(PveError::invalid(
                    v,
                    &format!("mp{index}.storage"),
                    storage,
                    "a storage ID like local-lvm",
                ));
            }
            format!("{storage}:{size_gib}")
        }
        MountVolume::Bind { host_path } => {
            if !check_mp_path(host_path) {
                return Err(PveError::invalid(
                    v,
                    &format!("mp{index}.volume"),
                    host_path,
                    "an absolute host path",
                ));
            }
            host_path.clone()
        }
        MountVolume::Existing { volume } => {
            if !is_volume_id(volume) {
                return Err(PveError::invalid(
                    v,
                    &format!("mp{index}.volume"),
                    volume,
                    "a volume ID like local-lvm:vm-100-disk-1",
                ));
            }
            volume.clone()
        }
    };
    for o in &m.mount_options {
        if !MOUNT_OPTIONS.contains(&o.as_str()) {
            return Err(PveError::invalid(
                v,
                &format!("mp{index}.mountoptions"),
                o,
                "one of discard, lazytime, noatime, nodev, noexec, nosuid",
            ));
        }
    }
    Ok(MountPoint {
        volume,
        mp: Some(m.path.clone()),
        backup: m.backup,
        ro: m.read_only,
        acl: m.acl,
        quota: m.quota,
        replicate: m.replicate,
        shared: m.shared,
        mountoptions: Some(m.mount_options.join(";")).filter(|o| !o.is_empty()),
        ..MountPoint::default()
    }
    .to_property_string())
}

/// `devN` value: `path=/dev/..[,deny-write=1][,gid=N][,mode=0NNN][,uid=N]`.
pub fn device_value(vmid: u32, index: u32, d: &DeviceSpec) -> R<String> {
    let v = Some(vmid);
    if index > 255 {
        return Err(PveError::invalid(v, "device index", index, "dev0 to dev255"));
    }
    let f = |k: &str| format!("dev{index}.{k}");
    if !d.path.starts_with("/dev/")
        || d.path.contains([',', '=', ' '])
        || d.path.split('/').any(|p| p == "." || p == "..")
    {
        return Err(PveError::invalid(
            v,
            &f("path"),
            &d.path,
            "a device path under /dev",
        ));
    }
    if let Some(m) = &d.mode {
        let ok = m.len() == 4 && m.starts_with('0') && m.bytes().all(|b| (b'0'..=b'7').contains(&b));
        if !ok {
            return Err(PveError::invalid(
                v,
                &f("mode"),
                m,
                "an octal access mode like 0660",
            ));
        }
    }
    Ok(d.to_property_string())
}
