//! `adopt: true`: an existing container without pxfleet's mark (made by hand, by Terraform) taken under
//! management where it is. The file names it by `node` and `vm_id`; until its first update writes the mark, the
//! controller matches it by that place ([`targets_of`]), the planner plans an update that starts with the
//! `managed_by` change (see [`pxfleet_spec::plan::ADOPT_FIELD`]) and never a replacement or a create.
//! What the file leaves open is taken from the container ([`fill_from_targets`]): its datastore and its MACs,
//! so adopting keeps vm_id, MACs and addresses.

use pxfleet_spec::observed::ObservedContainer as SpecObserved;
use pxfleet_spec::Fleet;

use crate::model::{DesiredContainer, ObservedContainer};
use crate::planning::Snapshot;

/// The unmarked container at (`node`, `vm_id`), if a node reports one.
fn target<'a>(
    observed: &'a [ObservedContainer],
    node: &str,
    vm_id: u32,
) -> Option<&'a ObservedContainer> {
    observed
        .iter()
        .find(|o| o.managed.is_none() && o.node == node && o.vm_id == vm_id)
}

/// The planner's view of the containers `fleet` adopts that do not carry the mark yet (unmarked, so the planner
/// plans their adoption).
pub fn targets(fleet: &Fleet, snap: &Snapshot) -> Vec<SpecObserved> {
    fleet
        .containers
        .iter()
        .filter(|(_, c)| c.adopt)
        .filter_map(|(key, c)| {
            let o = target(&snap.observed, c.node.as_deref()?, c.vm_id?)?;
            crate::grpc::convert::spec_observed(&fleet.name, key, o, None)
        })
        .collect()
}

/// Fills what the file leaves open for an adopted container from the container itself: `datastore_id` (the
/// one its rootfs is on) and the MAC of each interface (PVE's, kept).
pub fn fill_from_targets(fleet: &mut Fleet, snap: &Snapshot) {
    for c in fleet.containers.values_mut().filter(|c| c.adopt) {
        let (Some(node), Some(vm_id)) = (c.node.as_deref(), c.vm_id) else {
            continue;
        };
        let Some(cfg) = target(&snap.observed, node, vm_id).and_then(|o| o.config.as_ref()) else {
            continue;
        };
        if c.datastore_id.is_none() {
            c.datastore_id = cfg.datastore_id.clone();
        }
        for (i, iface) in c.interfaces.iter_mut().enumerate() {
            if iface.mac_address.is_none() {
                iface.mac_address = cfg.interfaces.get(i).and_then(|x| x.config.mac_address);
            }
        }
    }
}

/// For the reconciler: each desired container with `adopt: true` and the unmarked container at its place,
/// under its key (fleet, name). Only asked when some desired container adopts.
pub fn targets_of<'a>(
    desired: impl Iterator<Item = &'a DesiredContainer>,
    observed: Vec<ObservedContainer>,
) -> Vec<((String, String), ObservedContainer)> {
    let mut out = Vec::new();
    for d in desired.filter(|d| d.container.adopt) {
        if let Some(o) = target(&observed, &d.node, d.vm_id) {
            out.push(((d.fleet.clone(), d.name.clone()), o.clone()));
        }
    }
    out
}

/// The containers without pxfleet's mark (what `pxctl adopt` can take over), on `node` or on every node when it
/// is empty, by node then vm_id.
pub fn unmanaged(
    observed: &[std::sync::Arc<ObservedContainer>],
    node: &str,
) -> Vec<std::sync::Arc<ObservedContainer>> {
    let mut out: Vec<std::sync::Arc<ObservedContainer>> = observed
        .iter()
        .filter(|o| o.managed.is_none() && (node.is_empty() || o.node == node))
        .cloned()
        .collect();
    out.sort_by(|a, b| (&a.node, a.vm_id).cmp(&(&b.node, b.vm_id)));
    out
}
