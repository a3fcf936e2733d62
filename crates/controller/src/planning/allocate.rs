//! What planning allocates for a fleet: stable placement (what the file leaves open keeps the node,
//! datastore and vm_id given before), vm_ids (never one desired anywhere, reported by any agent or given in
//! the file; a name destroyed and created again gets its old one back while it is free), and MACs (never
//! one another container holds, reports or was allocated).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use pxfleet_spec::{Diagnostic, Fleet};

use super::{diag, Snapshot};
use crate::config::VmIdRange;
use crate::model::{Allocation, DesiredContainer, ObservedContainer};
use crate::scheduler;

/// Stable placement: what the file leaves open keeps the value given before (`stored`: the fleet's desired
/// containers). A container moved to another node keeps its storage when the target has it.
pub(super) fn keep_placement(
    fleet: &mut Fleet,
    stored: &BTreeMap<&str, &DesiredContainer>,
    snap: &Snapshot,
) {
    for (key, c) in fleet.containers.iter_mut() {
        let Some(prev) = stored.get(key.as_str()) else {
            continue;
        };
        if c.node.is_none() && c.constraints.nodes.iter().all(|n| *n == prev.node) {
            c.node = Some(prev.node.clone());
            if c.datastore_id.is_none() {
                c.datastore_id = prev.container.datastore_id.clone();
            }
        }
        if c.node.as_deref() == Some(prev.node.as_str()) && c.datastore_id.is_none() {
            c.datastore_id = prev.container.datastore_id.clone();
        }
        // Moved to another node: it keeps its storage when the target has it (a `pct migrate`); only a target
        // without it gets the scheduler's choice, and the plan then says the datastore changes: a replacement.
        if let (Some(to), None, Some(ds)) = (&c.node, &c.datastore_id, &prev.container.datastore_id)
        {
            let has = snap.nodes.iter().any(|(n, _)| {
                n.name == *to
                    && n.inventory
                        .storages
                        .iter()
                        .any(|s| s.id == *ds && s.holds_rootdir())
            });
            if *to != prev.node && has {
                c.datastore_id = Some(ds.clone());
            }
        }
        if c.vm_id.is_none() {
            c.vm_id = Some(prev.vm_id);
        }
    }
}

/// The source (vm_id, node) of template `name` when it is a linked `clone:` template.
fn linked_clone_source<'a>(
    templates: &'a BTreeMap<String, pxfleet_spec::Template>,
    name: &str,
) -> Option<(&'a u32, &'a String)> {
    match templates.get(name).map(|t| &t.source) {
        Some(pxfleet_spec::TemplateSource::Clone {
            vm_id,
            node,
            full: false,
            ..
        }) => Some((vm_id, node)),
        _ => None,
    }
}

/// A linked clone's root disk stays where its template's is: a container of a linked `clone:` template gets the
/// observed source's rootfs storage (the scheduler would pick any, and the plan would then
/// want to replace the clone for being elsewhere). Left open when the source is not observed (`pct clone` fails).
pub(super) fn linked_clone_datastores(fleet: &mut Fleet, snap: &Snapshot) {
    for c in fleet.containers.values_mut() {
        let Some((vm_id, node)) = linked_clone_source(&fleet.templates, &c.template) else {
            continue;
        };
        // The file cannot name one for a linked clone (parse refuses it); a stored one may be a stale pick.
        let observed = snap
            .observed
            .iter()
            .find(|o| o.vm_id == *vm_id && o.node == *node)
            .and_then(|o| {
                // Unmanaged containers may come without a config in fleet terms: the raw rootfs says it too.
                o.config
                    .as_ref()
                    .and_then(|cfg| cfg.datastore_id.clone())
                    .or_else(|| {
                        let rootfs = o.raw_config.get("rootfs")?;
                        let (ds, _) = rootfs.split_once(':')?;
                        Some(ds.to_string())
                    })
            });
        if observed.is_some() {
            c.datastore_id = observed;
        }
    }
}

/// A linked clone of a container of the same fleet (`state: template` in the file) gets its source's placed
/// datastore: the source may not exist yet, so no node reports where its disk is.
pub(super) fn linked_clones_follow_fleet_sources(fleet: &mut Fleet) {
    let sources: BTreeMap<(String, u32), Option<String>> = fleet
        .containers
        .values()
        .filter_map(|c| Some(((c.node.clone()?, c.vm_id?), c.datastore_id.clone())))
        .collect();
    for c in fleet.containers.values_mut() {
        let Some((vm_id, node)) = linked_clone_source(&fleet.templates, &c.template) else {
            continue;
        };
        if let Some(Some(ds)) = sources.get(&(node.clone(), *vm_id)) {
            c.datastore_id = Some(ds.clone());
        }
    }
}

/// Gives every container of `fleet` a vm_id in `range` and returns them as a list for the scheduler.
/// `others` is the snapshot without this fleet's desired containers.
pub(super) fn vm_ids(
    file: &str,
    fleet: &mut Fleet,
    snap: &Snapshot,
    others: &[&DesiredContainer],
    range: VmIdRange,
) -> Result<Vec<pxfleet_spec::Container>, Vec<Diagnostic>> {
    let name = fleet.name.clone();
    // vm_ids: never one that is desired anywhere, reported by any agent, or given explicitly in this file.
    let mut taken: BTreeSet<u32> = others.iter().map(|d| d.vm_id).collect();
    taken.extend(
        snap.observed
            .iter()
            .filter(|o| {
                o.managed
                    .as_ref()
                    .is_none_or(|m| m.fleet != name || !fleet.containers.contains_key(&m.name))
            })
            .map(|o| o.vm_id),
    );
    taken.extend(fleet.containers.values().filter_map(|c| c.vm_id));
    // A container name created before (and destroyed since) gets its vm_id back when it is still free.
    let mut allocated: HashMap<&str, &Allocation> = HashMap::new();
    for a in snap.allocations.iter().filter(|a| a.fleet == name) {
        allocated.entry(a.name.as_str()).or_insert(a);
    }
    for c in fleet.containers.values_mut().filter(|c| c.vm_id.is_none()) {
        let again = allocated
            .get(c.name.as_str())
            .and_then(|a| a.vm_id)
            .filter(|id| (range.first..=range.last).contains(id) && !taken.contains(id));
        if let Some(id) = again {
            taken.insert(id);
            c.vm_id = Some(id);
        }
    }
    let mut list: Vec<pxfleet_spec::Container> = fleet.containers.values().cloned().collect();
    if let Err(e) = scheduler::allocate_vm_ids(&mut list, range, &mut taken) {
        return Err(vec![diag(file, fleet, "containers".into(), e.to_string())]);
    }
    Ok(list)
}

/// Allocates the MACs `list` leaves open ([`assign_macs`]); a refusal names the interface's field.
pub(super) fn macs(
    file: &str,
    fleet: &Fleet,
    list: &mut [pxfleet_spec::Container],
    snap: &Snapshot,
) -> Result<(), Vec<Diagnostic>> {
    assign_macs(&fleet.name, list, snap).map_err(|e| {
        let path = match &e {
            scheduler::ScheduleError::MacsExhausted {
                container, index, ..
            } => format!("containers.{container}.{}mac_address", iface_prefix(*index)),
            _ => "containers".into(),
        };
        vec![diag(file, fleet, path, e.to_string())]
    })
}

/// The path prefix of interface `index` in diagnostics (`extra_interfaces.0.` for net1, empty for net0).
fn iface_prefix(index: usize) -> String {
    if index == 0 {
        String::new()
    } else {
        format!("extra_interfaces.{}.", index - 1)
    }
}

/// The MACs a node reports for a container: interface index (the N of `netN`) -> MAC, from its configuration,
/// or from the raw `netN` lines (`hwaddr=`) of an observation without one.
pub fn observed_macs(o: &ObservedContainer) -> Vec<(usize, pxfleet_spec::MacAddr)> {
    if let Some(config) = &o.config {
        return config
            .interfaces
            .iter()
            .filter_map(|i| Some((i.slot as usize, i.config.mac_address?)))
            .collect();
    }
    o.raw_config
        .iter()
        .filter_map(|(k, v)| {
            let slot = k.strip_prefix("net")?.parse::<usize>().ok()?;
            let mac = v
                .split(',')
                .find_map(|kv| kv.strip_prefix("hwaddr="))?
                .parse()
                .ok()?;
            Some((slot, mac))
        })
        .collect()
}

/// Allocates the MACs of `list`'s interfaces that the file leaves open (see [`scheduler::allocate_macs`]), never
/// one that any agent reports for another container, that another fleet's containers have, or that is
/// allocated to any other container name (destroyed ones included).
fn assign_macs(
    fleet: &str,
    list: &mut [pxfleet_spec::Container],
    snap: &Snapshot,
) -> Result<(), scheduler::ScheduleError> {
    use scheduler::MacHolder;
    let names: HashSet<&str> = list.iter().map(|c| c.name.as_str()).collect();
    let mine = |f: &str, n: &str| {
        if f == fleet && names.contains(n) {
            MacHolder::Container(n.to_string())
        } else {
            MacHolder::Other
        }
    };
    let mut held: BTreeMap<pxfleet_spec::MacAddr, MacHolder> = BTreeMap::new();
    let mut hold = |mac, holder: MacHolder| {
        // `Other` wins: a MAC something else holds is never free for a container of this fleet.
        let e = held.entry(mac).or_insert_with(|| holder.clone());
        if *e != holder {
            *e = MacHolder::Other;
        }
    };
    let mut observed = BTreeMap::new();
    for o in &snap.observed {
        let holder = match &o.managed {
            Some(m) => mine(&m.fleet, &m.name),
            None => MacHolder::Other,
        };
        for (i, mac) in observed_macs(o) {
            if let MacHolder::Container(n) = &holder {
                observed.insert((n.clone(), i), mac);
            }
            hold(mac, holder.clone());
        }
    }
    for d in &snap.desired {
        for mac in d.container.interfaces.iter().filter_map(|i| i.mac_address) {
            hold(mac, mine(&d.fleet, &d.name));
        }
    }
    let mut remembered = BTreeMap::new();
    for a in &snap.allocations {
        let holder = if a.fleet == fleet {
            MacHolder::Container(a.name.clone())
        } else {
            MacHolder::Other
        };
        for (i, mac) in &a.macs {
            if a.fleet == fleet {
                remembered.insert((a.name.clone(), *i), *mac);
            }
            hold(*mac, holder.clone());
        }
    }
    for c in list.iter() {
        for mac in c.interfaces.iter().filter_map(|i| i.mac_address) {
            hold(mac, MacHolder::Container(c.name.clone()));
        }
    }
    scheduler::allocate_macs(fleet, list, &observed, &remembered, &mut held)
}
