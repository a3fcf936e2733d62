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

impl MountPointSpec {
    /// The `mpN` property string's fields for this mount point on `volume` (what PVE stores), unchecked: what
    /// [`mount_point_value`] sends after its checks, and what the agent's journal text shows.
    pub fn property(&self, volume: String) -> MountPoint {
        MountPoint {
            volume,
            mp: Some(self.path.clone()),
            backup: self.backup,
            ro: self.read_only,
            acl: self.acl,
            quota: self.quota,
            replicate: self.replicate,
            shared: self.shared,
            keepattrs: self.keepattrs,
            idmap: self.idmap.clone(),
            mountoptions: Some(self.mount_options.join(";")).filter(|o| !o.is_empty()),
            ..MountPoint::default()
        }
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
            if !host_path.starts_with('/') || !check_mp_path(host_path) {
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
    Ok(m.property(volume).to_property_string())
}

/// `devN` value: `path=/dev/..[,deny-write=1][,gid=N][,mode=0NNN][,uid=N]`.
pub fn device_value(vmid: u32, index: u32, d: &DeviceSpec) -> R<String> {
    let v = Some(vmid);
    if index > 255 {
        return Err(PveError::invalid(
            v,
            "device index",
            index,
            "dev0 to dev255",
        ));
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
        let ok =
            m.len() == 4 && m.starts_with('0') && m.bytes().all(|b| (b'0'..=b'7').contains(&b));
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::argv::set_args;
    use crate::spec::ConfigChange;

    #[test]
    fn mount_points_carry_every_option_in_pves_stored_order() {
        let mut m = MountPointSpec::new(
            MountVolume::Existing {
                volume: "local-lvm:vm-900-disk-1".into(),
            },
            "/kept",
        );
        m.acl = Some(false);
        m.quota = Some(true);
        m.replicate = Some(false);
        m.read_only = Some(true);
        m.mount_options = vec!["noatime".into(), "nosuid".into()];
        assert_eq!(
            mount_point_value(100, 1, &m).unwrap(),
            "local-lvm:vm-900-disk-1,mp=/kept,acl=0,mountoptions=noatime;nosuid,quota=1,replicate=0,ro=1"
        );
        let mut b = MountPointSpec::new(
            MountVolume::Bind {
                host_path: "/srv/x".into(),
            },
            "/x",
        );
        b.shared = Some(true);
        assert_eq!(
            mount_point_value(100, 2, &b).unwrap(),
            "/srv/x,mp=/x,shared=1"
        );
        // A size is an allocation, not an existing volume; a bad option is named.
        for bad in [
            "local-lvm:8",
            "local-lvm:",
            "no_colon",
            "1local:vm-1-disk-0",
        ] {
            let m = MountPointSpec::new(MountVolume::Existing { volume: bad.into() }, "/kept");
            let e = mount_point_value(100, 1, &m).unwrap_err().to_string();
            assert!(e.contains("mp1.volume") && e.contains(bad), "{e}");
        }
        let mut m = MountPointSpec::new(
            MountVolume::Storage {
                storage: "local-lvm".into(),
                size_gib: 1,
            },
            "/d",
        );
        m.mount_options = vec!["sync".into()];
        let e = mount_point_value(100, 0, &m).unwrap_err().to_string();
        assert!(e.contains("mp0.mountoptions") && e.contains("sync"), "{e}");
    }

    #[test]
    fn devices_are_checked_and_rendered_with_path_first() {
        let d = DeviceSpec {
            path: "/dev/ttyUSB0".into(),
            mode: Some("0660".into()),
            uid: Some(0),
            gid: Some(20),
            deny_write: Some(true),
        };
        assert_eq!(
            device_value(100, 0, &d).unwrap(),
            "path=/dev/ttyUSB0,deny-write=1,gid=20,mode=0660,uid=0"
        );
        assert_eq!(
            DeviceSpec::parse("/dev/ttyUSB0,gid=20,mode=0660,uid=0,deny-write=1").unwrap(),
            d
        );
        for (path, mode, field) in [
            ("/tmp/x", None, "dev3.path"),
            ("/dev/../etc/passwd", None, "dev3.path"),
            ("/dev/null", Some("660"), "dev3.mode"),
            ("/dev/null", Some("0668"), "dev3.mode"),
        ] {
            let d = DeviceSpec {
                path: path.into(),
                mode: mode.map(String::from),
                ..DeviceSpec::default()
            };
            let e = device_value(100, 3, &d).unwrap_err().to_string();
            assert!(e.contains(field), "{path} {mode:?}: {e}");
        }
        let mut c = ConfigChange::default();
        c.devices.insert(
            1,
            DeviceSpec {
                path: "/dev/null".into(),
                ..DeviceSpec::default()
            },
        );
        c.delete.insert("dev0".into());
        let argv = set_args(100, &c).unwrap();
        assert_eq!(
            argv,
            ["set", "100", "--dev1", "path=/dev/null", "--delete", "dev0"]
        );
    }
}
