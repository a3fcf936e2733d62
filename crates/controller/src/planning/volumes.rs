//! Volumes shared between containers: `volume_of:` mount points resolved to the volume their source's node
//! reports ([`resolve`]), and plans that would destroy a volume another container mounts refused
//! ([`destroyed_while_mounted`]): `pct destroy` frees a container's own volumes whoever else mounts them.

use pxfleet_spec::plan::{ActionKind, Plan};
use pxfleet_spec::{same_mount_path, volume_owner, Diagnostic, Fleet, MountPoint};

use super::Snapshot;
use crate::model::ObservedContainer;

/// The volume id `o` has mounted at `path` (a mount point's, as its node reports it).
pub fn volume_at(o: &ObservedContainer, path: &str) -> Option<String> {
    o.config
        .as_ref()?
        .mount_points
        .iter()
        .find(|m| same_mount_path(m.mount.path(), path))?
        .volume
        .clone()
}

/// Every storage volume `o` mounts (root disk included), from its configuration in fleet terms or, for a
/// container reported without one, from the raw `rootfs`/`mpN` keys.
fn volumes_of(o: &ObservedContainer) -> Vec<String> {
    if let Some(cfg) = &o.config {
        return cfg
            .rootfs_volume
            .iter()
            .chain(cfg.mount_points.iter().filter_map(|m| m.volume.as_ref()))
            .cloned()
            .collect();
    }
    o.raw_config
        .iter()
        .filter(|(k, _)| {
            *k == "rootfs"
                || k.strip_prefix("mp")
                    .is_some_and(|n| n.parse::<u32>().is_ok())
        })
        .filter_map(|(_, v)| {
            v.split(',')
                .next()
                .filter(|v| v.contains(':'))
                .map(String::from)
        })
        .collect()
}

/// Resolves the `volume_of` mount points of the placed `fleet` whose source its node already reports; the others
/// stay as they are (the reconciler creates the container once the source's volume is there).
pub(super) fn resolve(fleet: &mut Fleet, snap: &Snapshot) {
    let name = fleet.name.clone();
    let nodes: std::collections::BTreeMap<String, Option<String>> = fleet
        .containers
        .iter()
        .map(|(k, c)| (k.clone(), c.node.clone()))
        .collect();
    for c in fleet.containers.values_mut() {
        if !c
            .mount_points
            .iter()
            .any(|m| matches!(m, MountPoint::VolumeOf { .. }))
        {
            continue;
        }
        let lookup = |source: &str, path: &str| {
            let node = nodes.get(source)?.as_deref()?;
            snap.observed
                .iter()
                .filter(|o| o.node == node)
                .filter(|o| {
                    o.managed
                        .as_ref()
                        .is_some_and(|m| m.fleet == name && m.name == source)
                })
                .find_map(|o| volume_at(o, path))
        };
        for m in c.mount_points.iter_mut() {
            let found = match &*m {
                MountPoint::VolumeOf {
                    container,
                    source_path,
                    ..
                } => lookup(container, source_path),
                _ => None,
            };
            if let Some(v) = found {
                *m = m.resolved(&v);
            }
        }
    }
}

/// The diagnostics of a plan that destroys or replaces a container whose own volume (named for its vm_id) another
/// container on its node mounts and keeps: PVE frees that volume with the container. Destroy both, or take the
/// mount point off the other container first.
pub(super) fn destroyed_while_mounted(
    file: &str,
    fleet: &Fleet,
    plan: &Plan,
    snap: &Snapshot,
) -> Vec<Diagnostic> {
    let going = |fleet_name: &str, name: &str| {
        fleet_name == fleet.name
            && plan.actions.iter().any(|a| {
                a.container == name
                    && matches!(
                        a.kind,
                        ActionKind::Destroy { .. } | ActionKind::Replace { .. }
                    )
            })
    };
    // Who mounts a volume another container owns, by node and owner: one pass over what the nodes report (a plan
    // destroying 10,000 containers must not look at every container for each).
    let mut mounted: std::collections::HashMap<(&str, u32), Vec<(&ObservedContainer, String)>> =
        std::collections::HashMap::new();
    for o in &snap.observed {
        for v in volumes_of(o) {
            if let Some(owner) = volume_owner(&v).filter(|owner| *owner != o.vm_id) {
                mounted
                    .entry((o.node.as_str(), owner))
                    .or_default()
                    .push((o, v));
            }
        }
    }
    if mounted.is_empty() {
        return Vec::new();
    }
    let mut out = Vec::new();
    for a in &plan.actions {
        if !matches!(
            a.kind,
            ActionKind::Destroy { .. } | ActionKind::Replace { .. }
        ) {
            continue;
        }
        let (Some(vm_id), Some(node)) = (a.vm_id, a.node.as_deref()) else {
            continue;
        };
        for (o, volume) in mounted.get(&(node, vm_id)).into_iter().flatten() {
            if o.managed.as_ref().is_some_and(|m| going(&m.fleet, &m.name)) {
                continue;
            }
            let holder = match &o.managed {
                Some(m) => format!(
                    "container {} of fleet {} (vm_id {})",
                    m.name, m.fleet, o.vm_id
                ),
                None => format!("container {} (not managed by pxfleet)", o.vm_id),
            };
            let path = if fleet.containers.contains_key(&a.container) {
                format!("containers.{}", a.container)
            } else {
                "containers".to_string()
            };
            out.push(
                Diagnostic::new(
                    file,
                    fleet.spans.lookup(&path),
                    path,
                    format!(
                        "{} (vm_id {vm_id} on {node}) would be destroyed, but {holder} mounts its volume {volume}: PVE \
                         frees the volume with the container that owns it",
                        a.container
                    ),
                )
                .with_hint("remove that mount point from the other container first, or destroy both together"),
            );
        }
    }
    out
}
