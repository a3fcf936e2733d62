//! From a submitted fleet.yaml to a placed fleet and its plan: parsing (pxfleet-spec), the checks the spec crate
//! cannot make (against every container agents report, node inventories and cordons), vm_id allocation,
//! scheduling, MAC allocation, and the spec planner. Pure over a [`Snapshot`] of the store, so it is testable
//! without a server. [`prepare`] runs the steps in order; the world it reads is in [`snapshot`], node room and
//! cordons in [`capacity`], stable placement, vm_id and MAC allocation in [`allocate`].

mod allocate;
mod capacity;
mod snapshot;
pub mod volumes;

use std::collections::{BTreeMap, BTreeSet};

use pxfleet_spec::plan::Plan;
use pxfleet_spec::{Diagnostic, Fleet, Span};

use crate::config::VmIdRange;
use crate::model::DesiredContainer;
use crate::scheduler;

pub use snapshot::{nodes_facts, spec_observed, Snapshot};

/// The outcome of preparing a fleet: placed, numbered and planned, or the diagnostics that refuse it.
#[derive(Debug, Clone)]
pub struct Prepared {
    /// Containers with node, vm_id and datastore filled in.
    pub fleet: Fleet,
    pub plan: Plan,
    pub desired: Vec<DesiredContainer>,
}

fn diag(file: &str, fleet: &Fleet, path: String, message: String) -> Diagnostic {
    let span: Span = fleet.spans.lookup(&path);
    Diagnostic::new(file, span, path, message)
}

/// Places, numbers, checks and plans `fleet` against `snap`. `destroy` plans the fleet's removal instead.
pub fn prepare(
    file: &str,
    mut fleet: Fleet,
    snap: &Snapshot,
    range: VmIdRange,
    revision: u64,
) -> Result<Prepared, Vec<Diagnostic>> {
    let name = fleet.name.clone();
    let stored: BTreeMap<&str, &DesiredContainer> = snap
        .desired
        .iter()
        .filter(|d| d.fleet == name)
        .map(|d| (d.name.as_str(), d))
        .collect();
    let pinned: BTreeSet<String> = fleet
        .containers
        .iter()
        .filter(|(_, c)| c.node.is_some())
        .map(|(k, _)| k.clone())
        .collect();
    allocate::keep_placement(&mut fleet, &stored, snap);
    allocate::linked_clone_datastores(&mut fleet, snap);
    crate::adopt::fill_from_targets(&mut fleet, snap);
    let others = snap.others_desired(&name);
    let mut diags =
        pxfleet_spec::check_against_world(file, &fleet, &snapshot::Facts::new(snap, &others));
    if file != "(stored spec)" {
        // A spec the controller changes itself (power, destroy) is not refused for a secret gone missing.
        diags.extend(crate::hooks::check_secrets(file, &fleet));
    }
    let seen = snapshot::observed_places(snap);
    diags.extend(capacity::check_new_placements(
        file, &fleet, snap, &stored, &others, &seen,
    ));
    if !diags.is_empty() {
        return Err(diags);
    }
    let mut list = allocate::vm_ids(file, &mut fleet, snap, &others, range)?;
    let mut candidates = capacity::candidates(snap, &others, &seen, &list);
    if let Err(e) = scheduler::place(&mut list, &mut candidates) {
        let path = match &e {
            scheduler::ScheduleError::NoNode { container, .. }
            | scheduler::ScheduleError::NoRoom { container, .. } => {
                format!("containers.{container}")
            }
            _ => "containers".into(),
        };
        return Err(vec![diag(file, &fleet, path, e.to_string())]);
    }
    allocate::macs(file, &fleet, &mut list, snap)?;
    for c in list {
        fleet.containers.insert(c.name.clone(), c);
    }
    allocate::linked_clones_follow_fleet_sources(&mut fleet);
    volumes::resolve(&mut fleet, snap);
    let plan = plan_against(file, &fleet, snap)?;
    let diags = volumes::destroyed_while_mounted(file, &fleet, &plan, snap);
    if !diags.is_empty() {
        return Err(diags);
    }
    let desired = desired_of(&fleet, revision, &pinned);
    Ok(Prepared {
        fleet,
        plan,
        desired,
    })
}

/// The spec planner's plan for the placed `fleet`, against what was applied and what is observed.
fn plan_against(file: &str, fleet: &Fleet, snap: &Snapshot) -> Result<Plan, Vec<Diagnostic>> {
    let applied_fleet: Option<Fleet> = snap
        .head
        .as_ref()
        .and_then(|r| <Fleet as serde::Deserialize>::deserialize(&r.spec).ok())
        .map(without_passwords);
    let mut observed = spec_observed(&fleet.name, snap);
    observed.extend(crate::adopt::targets(fleet, snap));
    let nodes = nodes_facts(snap.nodes.iter().map(|(n, _)| n));
    // copied only when there are passwords to leave out
    let planned = if fleet.containers.values().any(|c| c.password.is_some()) {
        std::borrow::Cow::Owned(without_passwords(fleet.clone()))
    } else {
        std::borrow::Cow::Borrowed(fleet)
    };
    pxfleet_spec::plan::plan_on(&planned, applied_fleet.as_ref(), &observed, &nodes).map_err(|e| {
        e.problems
            .iter()
            .map(|p| diag(file, fleet, problem_path(p), p.to_string()))
            .collect::<Vec<_>>()
    })
}

/// The desired containers the placed `fleet` stores at `revision` (passwords go to the secrets tree).
fn desired_of(fleet: &Fleet, revision: u64, pinned: &BTreeSet<String>) -> Vec<DesiredContainer> {
    fleet
        .containers
        .values()
        .map(|c| DesiredContainer {
            fleet: fleet.name.clone(),
            name: c.name.clone(),
            node: c.node.clone().unwrap_or_default(),
            vm_id: c.vm_id.unwrap_or_default(),
            template: fleet
                .templates
                .get(&c.template)
                .cloned()
                .unwrap_or_else(|| pxfleet_spec::Template {
                    source: pxfleet_spec::TemplateSource::Pveam {
                        appliance: c.template.clone(),
                    },
                    storage: pxfleet_spec::DEFAULT_TEMPLATE_STORAGE.into(),
                    seed: Default::default(),
                }),
            container: pxfleet_spec::Container {
                password: None,
                ..c.clone()
            },
            revision,
            node_pinned: pinned.contains(&c.name),
        })
        .collect()
}

fn problem_path(p: &pxfleet_spec::plan::PlanProblem) -> String {
    use pxfleet_spec::plan::PlanProblem::*;
    match p {
        Shrink {
            container, field, ..
        } => format!("containers.{container}.{field}"),
        Protected { container, .. } => format!("containers.{container}.protection"),
        Adopt { container, .. } => format!("containers.{container}.adopt"),
        VmIdInUse { container, .. } => format!("containers.{container}.vm_id"),
    }
}

fn without_passwords(mut f: Fleet) -> Fleet {
    for c in f.containers.values_mut() {
        c.password = None;
    }
    f
}

#[cfg(test)]
mod tests;
