//! The parts of a container PVE keys by slot but pxfleet by identity: mount points (by path inside the
//! container), devices (by device path), and the `lxc.idmap` lines (as one list).
//!
//! Live or not follows CONTRACT §3.1: on a running container a *new* `mpN` or `devN` is hot-plugged; a changed
//! or removed one, and any idmap change, waits as a pending change for the next start (a restart).

use super::views::{mount_shape, mount_value, same_shape};
use super::{field, Differ, Growth};
use crate::model::{Container, Device, MountPoint};
use crate::observed::{ObservedContainer, ObservedMountPoint};

/// The observed mount point in the terms of the desired one: a storage volume read back from PVE is a
/// `Volume`; when the file mounts that volume as an existing one, it is compared as `Existing`.
fn as_desired(om: &ObservedMountPoint, want: Option<&MountPoint>) -> MountPoint {
    match want {
        Some(MountPoint::Existing { .. }) => om.as_existing().unwrap_or_else(|| om.mount.clone()),
        _ => om.mount.clone(),
    }
}

pub(super) fn mounts(
    df: &mut Differ,
    grow: &mut Vec<Growth>,
    shrink: &mut Vec<Growth>,
    d: &Container,
    a: Option<&Container>,
    o: &ObservedContainer,
) {
    let obs = &o.config.mount_points;
    if d.mount_points.is_empty() && obs.is_empty() {
        return;
    }
    let applied_by_path = |path: &str| {
        a.map(|a| {
            a.mount_points
                .iter()
                .find(|m| m.path() == path)
                .map(mount_shape)
        })
    };
    for m in &d.mount_points {
        match obs.iter().find(|om| om.mount.path() == m.path()) {
            Some(om) => {
                let have = as_desired(om, Some(m));
                if !same_shape(m, &have) {
                    df.cmp(
                        || field::mount_point(m.path()),
                        Some(mount_shape(&have)),
                        applied_by_path(m.path()),
                        Some(mount_shape(m)),
                        false,
                    );
                    continue;
                }
                if let MountPoint::Volume { size_gib, .. } = m {
                    let want = *size_gib as f64;
                    let have = om.size_gib.unwrap_or(match &om.mount {
                        MountPoint::Volume { size_gib, .. } => *size_gib as f64,
                        MountPoint::Bind { .. }
                        | MountPoint::Existing { .. }
                        | MountPoint::VolumeOf { .. } => want,
                    });
                    if want > have + 1e-9 {
                        grow.push((format!("mp{}", om.slot), have, want));
                    } else if want + 1e-9 < have {
                        shrink.push((
                            format!("{}.size_gib", field::mount_point(m.path())),
                            have,
                            want,
                        ));
                    }
                }
            }
            // A new mount point is hot-plugged into a running container.
            None => {
                let full = |m: &MountPoint| mount_value(m, true);
                let applied = a.map(|a| {
                    a.mount_points
                        .iter()
                        .find(|x| x.path() == m.path())
                        .map(full)
                });
                df.cmp(
                    || field::mount_point(m.path()),
                    None,
                    applied,
                    Some(full(m)),
                    true,
                )
            }
        }
    }
    for om in obs {
        if !d.mount_points.iter().any(|m| m.path() == om.mount.path()) {
            let have = as_desired(
                om,
                a.and_then(|a| a.mount_points.iter().find(|m| m.path() == om.mount.path())),
            );
            df.cmp(
                || field::mount_point(om.mount.path()),
                Some(mount_shape(&have)),
                applied_by_path(om.mount.path()),
                None,
                false,
            );
        }
    }
}

/// `devN`, matched by device path: a new one is hot-plugged, a changed or removed one waits for a restart.
pub(super) fn devices(
    df: &mut Differ,
    d: &Container,
    a: Option<&Container>,
    o: &ObservedContainer,
) {
    let obs = &o.config.devices;
    if d.devices.is_empty() && obs.is_empty() {
        return;
    }
    let applied = |path: &str| a.map(|a| a.devices.iter().find(|x| x.path == path));
    for want in &d.devices {
        let have = obs.iter().find(|x| x.path == want.path);
        if have == Some(want) {
            continue;
        }
        df.cmp(
            || field::device(&want.path),
            have,
            applied(&want.path),
            Some(want),
            have.is_none(),
        );
    }
    for have in obs {
        if !d.devices.iter().any(|x| x.path == have.path) {
            df.cmp(
                || field::device(&have.path),
                Some(have),
                applied(&have.path),
                None::<&Device>,
                false,
            );
        }
    }
}

/// The `lxc.idmap` lines as one list: they take effect when the container starts.
pub(super) fn idmap(df: &mut Differ, d: &Container, a: Option<&Container>, o: &ObservedContainer) {
    df.cmp(
        || field::IDMAP.to_owned(),
        o.config.idmap.as_slice(),
        a.map(|a| a.idmap.as_slice()),
        d.idmap.as_slice(),
        false,
    );
}
