//! Node capacity facts the spec crate cannot know: cordons and room on the chosen datastore for containers
//! placed on a node for the first time (disk reserved by other fleets' containers not created yet counts as
//! used), and the scheduler's candidate nodes with the memory and disk of containers scheduled there but not
//! reported yet reserved, so that quick submits do not count on the same room twice.

use std::collections::{BTreeMap, HashMap, HashSet};

use pxfleet_spec::{Diagnostic, Fleet};

use super::snapshot::unobserved;
use super::{diag, Snapshot};
use crate::model::{DesiredContainer, NodeStatus};
use crate::scheduler::{self, Candidate};

/// Refusals for containers of `fleet` placed on a node they are not on yet (`stored`: the fleet's desired
/// containers): a cordoned node, or too little room on the datastore. `others` is the snapshot without this
/// fleet's desired containers; `seen` where containers are observed.
pub(super) fn check_new_placements(
    file: &str,
    fleet: &Fleet,
    snap: &Snapshot,
    stored: &BTreeMap<&str, &DesiredContainer>,
    others: &[&DesiredContainer],
    seen: &HashSet<(&str, u32)>,
) -> Vec<Diagnostic> {
    let mut diags = Vec::new();
    // Disk reserved per (node, datastore) by other fleets' containers not created yet.
    let mut reserved_gib: BTreeMap<(&str, &str), u64> = BTreeMap::new();
    for (node, _, c) in unobserved(seen, others) {
        if let Some(ds) = &c.datastore_id {
            *reserved_gib.entry((node, ds.as_str())).or_default() += scheduler::disk_need_gib(c);
        }
    }
    let mut nodes: HashMap<&str, (&crate::model::NodeRecord, &NodeStatus)> = HashMap::new();
    for (n, status) in &snap.nodes {
        nodes.entry(n.name.as_str()).or_insert((n, status));
    }
    for (key, c) in &fleet.containers {
        let Some(node) = &c.node else { continue };
        let is_new_here = stored.get(key.as_str()).is_none_or(|p| p.node != *node);
        if !is_new_here || c.adopt {
            continue;
        }
        let Some(&(n, status)) = nodes.get(node.as_str()) else {
            continue;
        };
        if *status == NodeStatus::Cordoned || n.cordoned {
            diags.push(diag(
                file,
                fleet,
                format!("containers.{key}.node"),
                format!(
                    "node {node} is cordoned; uncordon it or choose another node (or omit node)"
                ),
            ));
        }
        let Some(ds) = &c.datastore_id else { continue };
        let Some(s) = n.inventory.storages.iter().find(|s| s.id == *ds) else {
            continue;
        };
        let need = scheduler::disk_need_gib(c);
        let reserved = reserved_gib
            .get(&(node.as_str(), ds.as_str()))
            .copied()
            .unwrap_or(0);
        let free = (s.avail_bytes >> 30).saturating_sub(reserved);
        if free < need {
            let held = if reserved > 0 {
                format!(
                    " ({reserved} GiB of it reserved for containers scheduled there but not yet created)"
                )
            } else {
                String::new()
            };
            diags.push(diag(
                file,
                fleet,
                format!("containers.{key}.disk_size"),
                format!(
                    "datastore {ds} on node {node} has {free} GiB free{held}, {need} GiB needed"
                ),
            ));
        }
    }
    diags
}

/// Every node as a scheduling candidate for `list` (this fleet's containers, some already placed), by name.
pub(super) fn candidates(
    snap: &Snapshot,
    others: &[&DesiredContainer],
    seen: &HashSet<(&str, u32)>,
    list: &[pxfleet_spec::Container],
) -> Vec<Candidate> {
    let mut placed: HashMap<&str, Vec<&pxfleet_spec::Container>> = HashMap::new();
    for c in list {
        if let Some(node) = c.node.as_deref() {
            placed.entry(node).or_default().push(c);
        }
    }
    let mut candidates: Vec<Candidate> = snap
        .nodes
        .iter()
        .map(|(n, status)| {
            let here = placed.get(n.name.as_str()).into_iter().flatten().copied();
            Candidate::from_node(n, *status, here)
        })
        .collect();
    candidates.sort_by(|a, b| a.name.cmp(&b.name));
    let mut by_name: HashMap<String, usize> = HashMap::new();
    for (j, cand) in candidates.iter().enumerate() {
        by_name.entry(cand.name.clone()).or_insert(j);
    }
    // Containers scheduled on a node (by any fleet, in any submit, this one included) that the node does not
    // report yet are not in its free memory: reserve their room so quick submits do not count on it twice.
    let mine = list
        .iter()
        .filter_map(|c| Some((c.node.as_deref()?, c.vm_id?, c)))
        .filter(|(n, v, _)| !seen.contains(&(*n, *v)));
    for (node, _, c) in unobserved(seen, others).chain(mine) {
        if let Some(&j) = by_name.get(node) {
            candidates[j].reserve(c);
        }
    }
    candidates
}
