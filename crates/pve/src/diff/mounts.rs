//! The `mpN` and `devN` part of [`ConfigChange::diff`]: matched by path, not by slot.
//!
//! A mount point already there with the same volume and options is left alone (growth is a resize); with the
//! same volume but other options it is set again on the volume it has (`mpN: <its volume>,mp=..,<options>`);
//! with another volume (another storage, host path or existing volume) it is set to the desired one, and PVE
//! keeps the old volume as `unusedN`. A new one gets a free slot; one whose path is no longer wanted is deleted
//! (PVE keeps its volume as `unusedN`). Devices likewise, by device path.

use std::collections::BTreeSet;

use crate::parse::{ContainerConfig, MountPoint};
use crate::spec::{ConfigChange, CreateSpec, DeviceSpec, MountPointSpec, MountVolume};

/// Whether the stored mount point uses the volume the desired one names.
fn same_volume(cur: &MountPoint, want: &MountVolume) -> bool {
    match want {
        MountVolume::Storage { storage, .. } => cur.storage() == Some(storage.as_str()),
        MountVolume::Bind { host_path } => cur.volume == *host_path,
        MountVolume::Existing { volume } => cur.volume == *volume,
    }
}

fn sorted_options(o: &[String]) -> Vec<&str> {
    let mut v: Vec<&str> = o
        .iter()
        .flat_map(|o| o.split(';'))
        .filter(|o| !o.is_empty())
        .collect();
    v.sort_unstable();
    v.dedup();
    v
}

/// Whether the stored options are the desired ones (PVE's defaults filled in: `backup`, `ro`, `quota`, `shared`
/// off, `replicate` on; `acl` unset is its own state).
fn same_options(cur: &MountPoint, want: &MountPointSpec) -> bool {
    let off = |v: Option<bool>| v.unwrap_or(false);
    let cur_opts: Vec<String> = cur.mountoptions.iter().cloned().collect();
    off(cur.backup) == off(want.backup)
        && off(cur.ro) == off(want.read_only)
        && off(cur.quota) == off(want.quota)
        && off(cur.shared) == off(want.shared)
        && cur.replicate.unwrap_or(true) == want.replicate.unwrap_or(true)
        && cur.acl == want.acl
        && off(cur.keepattrs) == off(want.keepattrs)
        && cur.idmap == want.idmap
        && sorted_options(&cur_opts) == sorted_options(&want.mount_options)
}

fn same_device(cur: &DeviceSpec, want: &DeviceSpec) -> bool {
    cur.path == want.path
        && cur.mode == want.mode
        && cur.uid == want.uid
        && cur.gid == want.gid
        && cur.deny_write.unwrap_or(false) == want.deny_write.unwrap_or(false)
}

fn free_slot(taken: &mut BTreeSet<u32>, wanted: u32) -> u32 {
    let slot = if taken.contains(&wanted) {
        (0..256).find(|s| !taken.contains(s)).unwrap_or(wanted)
    } else {
        wanted
    };
    taken.insert(slot);
    slot
}

pub(super) fn diff(c: &mut ConfigChange, current: &ContainerConfig, d: &CreateSpec) {
    let mut taken: BTreeSet<u32> = current.mount_points.keys().copied().collect();
    for (i, want) in &d.mount_points {
        let here = current
            .mount_points
            .iter()
            .find(|(_, m)| m.mp.as_deref() == Some(want.path.as_str()));
        match here {
            Some((slot, cur)) if same_volume(cur, &want.volume) => {
                if !same_options(cur, want) {
                    let volume = if cur.volume.starts_with('/') {
                        MountVolume::Bind {
                            host_path: cur.volume.clone(),
                        }
                    } else {
                        MountVolume::Existing {
                            volume: cur.volume.clone(),
                        }
                    };
                    c.mount_points.insert(
                        *slot,
                        MountPointSpec {
                            volume,
                            ..want.clone()
                        },
                    );
                }
            }
            Some((slot, _)) => {
                c.mount_points.insert(*slot, want.clone());
            }
            None => {
                let slot = free_slot(&mut taken, *i);
                c.mount_points.insert(slot, want.clone());
            }
        }
    }
    for (i, m) in &current.mount_points {
        if !d
            .mount_points
            .values()
            .any(|w| Some(w.path.as_str()) == m.mp.as_deref())
        {
            c.delete.insert(format!("mp{i}"));
        }
    }

    let mut taken: BTreeSet<u32> = current.devices.keys().copied().collect();
    for (i, want) in &d.devices {
        match current.devices.iter().find(|(_, x)| x.path == want.path) {
            Some((_, cur)) if same_device(cur, want) => {}
            Some((slot, _)) => {
                c.devices.insert(*slot, want.clone());
            }
            None => {
                let slot = free_slot(&mut taken, *i);
                c.devices.insert(slot, want.clone());
            }
        }
    }
    for (i, x) in &current.devices {
        if !d.devices.values().any(|w| w.path == x.path) {
            c.delete.insert(format!("dev{i}"));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::RootfsSpec;

    fn config(lines: &[(&str, &str)]) -> ContainerConfig {
        ContainerConfig::from_pairs(lines.iter().map(|(k, v)| (k.to_string(), v.to_string())))
            .unwrap()
    }

    fn want() -> CreateSpec {
        let mut d = CreateSpec::new(
            100,
            "",
            RootfsSpec {
                storage: "local-lvm".into(),
                size_gib: 4,
            },
        );
        let mut m = MountPointSpec::new(
            MountVolume::Storage {
                storage: "local-lvm".into(),
                size_gib: 8,
            },
            "/data",
        );
        m.backup = Some(true);
        m.mount_options = vec!["noatime".into(), "nodev".into()];
        d.mount_points.insert(0, m);
        d.mount_points.insert(
            1,
            MountPointSpec::new(
                MountVolume::Existing {
                    volume: "local-lvm:vm-900-disk-1".into(),
                },
                "/kept",
            ),
        );
        d.devices.insert(
            0,
            DeviceSpec {
                path: "/dev/null".into(),
                mode: Some("0666".into()),
                ..DeviceSpec::default()
            },
        );
        d
    }

    #[test]
    fn what_is_there_as_wanted_is_left_alone() {
        let cur = config(&[
            (
                "mp0",
                "local-lvm:vm-100-disk-1,mp=/data,backup=1,mountoptions=nodev;noatime,size=8G",
            ),
            (
                "mp1",
                "local-lvm:vm-900-disk-1,mp=/kept,replicate=1,size=32G",
            ),
            ("dev0", "path=/dev/null,deny-write=0,mode=0666"),
        ]);
        let mut c = ConfigChange::default();
        diff(&mut c, &cur, &want());
        assert_eq!(c, ConfigChange::default());
    }

    #[test]
    fn options_change_on_the_volume_there_and_another_volume_replaces_the_slot() {
        let cur = config(&[
            ("mp3", "local-lvm:vm-100-disk-1,mp=/data,backup=1,size=8G"),
            ("mp1", "local-lvm:vm-901-disk-1,mp=/kept,size=32G"),
            ("mp2", "/srv/old,mp=/old"),
            ("dev4", "path=/dev/null,mode=0600"),
            ("dev1", "path=/dev/ttyS0"),
        ]);
        let mut c = ConfigChange::default();
        diff(&mut c, &cur, &want());
        // Same volume, other options: set again on the volume it has (no new allocation).
        assert_eq!(
            c.mount_points[&3].volume,
            MountVolume::Existing {
                volume: "local-lvm:vm-100-disk-1".into()
            }
        );
        assert_eq!(c.mount_points[&3].mount_options, ["noatime", "nodev"]);
        // Another existing volume at that path: the slot gets the desired one.
        assert_eq!(
            c.mount_points[&1].volume,
            MountVolume::Existing {
                volume: "local-lvm:vm-900-disk-1".into()
            }
        );
        assert_eq!(c.devices[&4].mode.as_deref(), Some("0666"));
        assert_eq!(c.delete.iter().collect::<Vec<_>>(), ["dev1", "mp2"]);
    }
}
