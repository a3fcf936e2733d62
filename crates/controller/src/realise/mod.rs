//! One source of truth: the operations the reconciler runs are the spec planner's actions, the same planner
//! `pxctl plan` prints. For one container, [`container_plan`] plans (desired, applied, observed) exactly as a
//! submit does, and [`next_operation`] maps the plan's first action to the operation that realises it:
//!
//! | plan action        | operation                                                          |
//! |--------------------|--------------------------------------------------------------------|
//! | create             | seed_template (when the node lacks the template), then create      |
//! | replace            | destroy, then (the container being missing) create                 |
//! | move               | migrate (`--restart` when it runs)                                 |
//! | resize             | resize of that disk                                                |
//! | update and repair  | one update carrying both actions' changes                          |
//! | start / stop       | start / stop                                                       |
//! | destroy            | destroy                                                            |
//!
//! A node change that `pct migrate` cannot make (another cluster, a datastore missing on the target) is a replace
//! in the plan, so a destroy and a create here; the planner knows the nodes through [`View::nodes`].
//!
//! The reconciler has no rule of its own: what the planner refuses (a protected container to destroy or replace,
//! a disk to shrink) is no operation, and the plan says why.

use std::collections::BTreeMap;

use pxfleet_spec::plan::{
    Action, ActionKind, CreateReason, DestroyReason, FieldChange, Nodes, Plan, PlanError,
};
use pxfleet_spec::{Container, Fleet};

use crate::grpc::convert;
use crate::model::{AppliedContainer, DesiredContainer, ObservedContainer, OperationKind};

/// What the reconciler wants done next for one container.
#[derive(Debug, Clone, PartialEq)]
pub struct NextAction {
    pub node: String,
    pub vm_id: u32,
    pub kind: OperationKind,
    /// Why, for the operation listing ("memory 512 -> 1024", "template changed: replace").
    pub reason: String,
}

/// Inputs for one container.
#[derive(Debug, Clone, Copy)]
pub struct View<'a> {
    pub desired: Option<&'a DesiredContainer>,
    pub applied: Option<&'a AppliedContainer>,
    /// The container carrying this entry's mark, on any node.
    pub observed: Option<&'a ObservedContainer>,
    /// Whether the desired template is available on the desired node (seeded or reported cached).
    pub template_ready: bool,
    /// The nodes' clusters and datastores, for the planner to tell a move it can migrate from one it must
    /// replace ([`NO_NODES`] when only updates and repairs matter).
    pub nodes: &'a Nodes,
}

/// No node facts: every node change counts as a migration.
pub static NO_NODES: Nodes = Nodes::new();

/// The fleet name of an entry: desired, else applied, else the observed mark.
fn fleet_name(v: &View<'_>) -> Option<String> {
    v.desired
        .map(|d| d.fleet.clone())
        .or_else(|| v.applied.map(|a| a.fleet.clone()))
        .or_else(|| {
            v.observed
                .and_then(|o| o.managed.as_ref().map(|m| m.fleet.clone()))
        })
}

fn container_name(v: &View<'_>) -> Option<String> {
    v.desired
        .map(|d| d.name.clone())
        .or_else(|| v.applied.map(|a| a.name.clone()))
        .or_else(|| {
            v.observed
                .and_then(|o| o.managed.as_ref().map(|m| m.name.clone()))
        })
}

/// The desired container as the planner sees it: placed (node and vm_id known), without password.
fn desired_container(d: &DesiredContainer) -> Container {
    let mut c = d.container.clone();
    c.node = Some(d.node.clone());
    c.vm_id = Some(d.vm_id);
    c.password = None;
    c
}

/// The plan for the one container of `v`, made by the spec planner from the same inputs a submit uses: the
/// desired container and its template, what was applied (when it is the container observed) and what its node
/// reports (every container carrying its mark).
pub fn container_plan(v: &View<'_>) -> Result<Plan, PlanError> {
    let fleet = fleet_name(v).unwrap_or_default();
    let name = container_name(v).unwrap_or_default();
    let applied = v.applied.filter(|a| {
        v.observed
            .is_none_or(|o| a.node == o.node && a.vm_id == o.vm_id)
    });
    let mut desired = Fleet {
        name: fleet.clone(),
        allow_privileged: true,
        templates: BTreeMap::new(),
        containers: BTreeMap::new(),
        hooks: vec![],
        spans: Default::default(),
    };
    if let Some(d) = v.desired {
        desired
            .templates
            .insert(d.container.template.clone(), d.template.clone());
        desired
            .containers
            .insert(name.clone(), desired_container(d));
    }
    let applied_fleet = applied.map(|a: &AppliedContainer| {
        let mut c = a.container.clone();
        c.password = None;
        Fleet {
            name: fleet.clone(),
            allow_privileged: true,
            templates: [(a.container.template.clone(), a.template.clone())].into(),
            containers: [(name.clone(), c)].into(),
            hooks: vec![],
            spans: Default::default(),
        }
    });
    let fallback = applied
        .map(|a| &a.container)
        .or(v.desired.map(|d| &d.container));
    let observed: Vec<_> = v
        .observed
        .and_then(|o| convert::spec_observed(&fleet, &name, o, fallback))
        .into_iter()
        .collect();
    let plan = pxfleet_spec::plan::plan_on(&desired, applied_fleet.as_ref(), &observed, v.nodes)?;
    // A container that left the fleet and that no node reports has nothing to realise: its applied record
    // stays until a node reports it (then it is destroyed) or it is forgotten with the fleet's state.
    let not_found = |a: &Action| {
        matches!(
            a.kind,
            ActionKind::Destroy {
                reason: DestroyReason::NotFound
            }
        )
    };
    if !plan.actions.iter().any(not_found) {
        return Ok(plan);
    }
    let warnings = plan.warnings;
    let mut kept = Plan::new(
        plan.fleet,
        plan.actions.into_iter().filter(|a| !not_found(a)).collect(),
    );
    kept.warnings = warnings;
    Ok(kept)
}

/// The operation realising the first action of `plan` for the container of `v`, or None when the plan is empty.
pub fn operation_for(v: &View<'_>, plan: &Plan) -> Option<NextAction> {
    let first = plan.actions.first()?;
    let at = |a: &Action, kind: OperationKind, reason: String| NextAction {
        node: a.node.clone().unwrap_or_default(),
        vm_id: a.vm_id.unwrap_or_default(),
        kind,
        reason,
    };
    match &first.kind {
        ActionKind::Destroy { reason } => {
            let why = match reason {
                DestroyReason::RemovedFromFile => "left the fleet",
                DestroyReason::Orphaned => "orphaned: not in the file",
                DestroyReason::Duplicate => "duplicate of the same fleet/name mark",
                DestroyReason::NotFound => "left the fleet, reported by no node",
            };
            Some(at(first, OperationKind::Destroy, why.into()))
        }
        ActionKind::Replace { reasons, .. } => {
            let fields: Vec<String> = reasons
                .iter()
                .map(|c| match &c.why {
                    Some(why) => format!("{} ({why})", c.field),
                    None => c.field.clone(),
                })
                .collect();
            Some(at(
                first,
                OperationKind::Destroy,
                format!("{} changed: replace", fields.join(", ")),
            ))
        }
        ActionKind::Create { reason, .. } => {
            let d = v.desired?;
            if !v.template_ready {
                return Some(NextAction {
                    node: d.node.clone(),
                    vm_id: 0,
                    kind: OperationKind::SeedTemplate {
                        name: d.container.template.clone(),
                        template: d.template.clone(),
                    },
                    reason: format!("template {} needed on {}", d.container.template, d.node),
                });
            }
            Some(NextAction {
                node: d.node.clone(),
                vm_id: d.vm_id,
                kind: OperationKind::Create {
                    container: Box::new(d.container.clone()),
                    template: d.template.clone(),
                },
                reason: match reason {
                    CreateReason::New => "new".into(),
                    CreateReason::Missing => "missing: recreate".into(),
                },
            })
        }
        ActionKind::Move { from, to } => {
            let running = v
                .observed
                .is_some_and(|o| o.running && o.node == *from && Some(o.vm_id) == first.vm_id);
            Some(at(
                first,
                OperationKind::Migrate {
                    target: to.clone(),
                    restart: running,
                },
                format!("moves from {from} to {to}"),
            ))
        }
        ActionKind::Resize { disk, to_gib, .. } => {
            let gib = to_gib.ceil() as u64;
            let what = if disk == "rootfs" { "disk_size" } else { disk };
            Some(at(
                first,
                OperationKind::Resize {
                    disk: disk.clone(),
                    disk_gib: gib,
                },
                format!("{what} -> {gib} GiB"),
            ))
        }
        ActionKind::Update { .. } | ActionKind::Repair { .. } => {
            let d = v.desired?;
            // The update and the repair that follows it (the planner puts them next to each other) are one
            // `pct set`.
            let mut updates: Vec<FieldChange> = Vec::new();
            let mut drift: Vec<FieldChange> = Vec::new();
            let mut restart = false;
            for a in plan.actions.iter().take(2) {
                if a.container != first.container {
                    break;
                }
                match &a.kind {
                    ActionKind::Update {
                        changes,
                        restart_required,
                    } => {
                        updates.extend(changes.iter().cloned());
                        restart |= restart_required;
                    }
                    ActionKind::Repair {
                        drift: changes,
                        restart_required,
                    } => {
                        drift.extend(changes.iter().cloned());
                        restart |= restart_required;
                    }
                    _ => break,
                }
            }
            let reason = update_reason(&updates, &drift);
            let fields = updates
                .iter()
                .chain(&drift)
                .map(|c| c.field.clone())
                .collect();
            let changes = updates.into_iter().chain(drift).collect();
            Some(at(
                first,
                OperationKind::Update {
                    container: Box::new(d.container.clone()),
                    template: d.template.clone(),
                    fields,
                    restart,
                    changes,
                },
                reason,
            ))
        }
        ActionKind::Start => Some(at(first, OperationKind::Start, "stopped: start".into())),
        ActionKind::Stop => Some(at(first, OperationKind::Stop, "state stopped: stop".into())),
    }
}

/// The one next operation for the container of `v`: the plan's first action, realised. None when the plan is
/// empty, or refused (a protected container, a disk to shrink: the planner's error, which `pxctl plan` shows).
pub fn next_operation(v: &View<'_>) -> Option<NextAction> {
    match container_plan(v) {
        Ok(plan) => operation_for(v, &plan),
        Err(e) => {
            tracing::debug!(error = %e, "the plan for this container is refused: no operation");
            None
        }
    }
}

/// The operation's reason: `memory 512 -> 1024`, `repair: tags ["a"] -> ["web"], memory 1024 -> 512`, or both
/// separated by `; `.
fn update_reason(updates: &[FieldChange], drift: &[FieldChange]) -> String {
    let join = |v: &[FieldChange]| v.iter().map(change_text).collect::<Vec<_>>().join(", ");
    match (updates.is_empty(), drift.is_empty()) {
        (_, true) => join(updates),
        (true, false) => format!("repair: {}", join(drift)),
        (false, false) => format!("{}; repair: {}", join(updates), join(drift)),
    }
}

/// `field from -> to`, shortened; a sensitive field only says it changed.
pub fn change_text(c: &FieldChange) -> String {
    if c.sensitive {
        return format!("{} changed", c.field);
    }
    format!(
        "{} {} -> {}",
        c.field,
        show_value(&c.from),
        show_value(&c.to)
    )
}

/// `field: wanted TO, node has FROM` (shortened like [`change_text`]); a sensitive field only says it differs.
pub fn wanted_has(c: &FieldChange) -> String {
    if c.sensitive {
        return format!("{}: differs", c.field);
    }
    // A text with a line break or surrounding spaces is quoted: those are often the whole difference.
    let show = |v: &Option<serde_json::Value>| match v {
        Some(serde_json::Value::String(s)) if s.contains('\n') || s.trim() != s => {
            let quoted = serde_json::Value::String(s.clone()).to_string();
            if quoted.chars().count() > 64 {
                format!("{}...", quoted.chars().take(61).collect::<String>())
            } else {
                quoted
            }
        }
        v => show_value(v),
    };
    format!(
        "{}: wanted {}, node has {}",
        c.field,
        show(&c.to),
        show(&c.from)
    )
}

/// A plan value in one short line: strings bare, `none` when unset, at most 48 characters.
fn show_value(v: &Option<serde_json::Value>) -> String {
    let text = match v {
        None => "none".to_string(),
        Some(serde_json::Value::String(s)) => s.clone(),
        Some(v) => v.to_string(),
    };
    let text = text.replace('\n', " ");
    if text.chars().count() > 48 {
        format!("{}...", text.chars().take(45).collect::<String>())
    } else {
        text
    }
}

/// What the plan would change on this existing container with `pct set`, one text per field: `field from -> to`
/// for updates, `drift: field from -> to` for repairs; empty when none or when the plan is refused.
pub fn change_texts(v: &View<'_>) -> Vec<String> {
    let Ok(plan) = container_plan(v) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for a in &plan.actions {
        match &a.kind {
            ActionKind::Update { changes, .. } => out.extend(changes.iter().map(change_text)),
            ActionKind::Repair { drift, .. } => {
                out.extend(drift.iter().map(|c| format!("drift: {}", change_text(c))))
            }
            _ => {}
        }
    }
    out
}

/// Whether observed `o` has drifted from what was applied (a repair is in the plan).
pub fn drifted(d: &DesiredContainer, a: Option<&AppliedContainer>, o: &ObservedContainer) -> bool {
    // Drift counts whatever the policy (`drift: report` only leaves it unrepaired).
    let mut d = d.clone();
    d.container.drift = pxfleet_spec::DriftPolicy::Repair;
    let v = View {
        desired: Some(&d),
        applied: a,
        observed: Some(o),
        template_ready: true,
        nodes: &NO_NODES,
    };
    container_plan(&v).is_ok_and(|p| {
        p.actions
            .iter()
            .any(|a| matches!(a.kind, ActionKind::Repair { .. }))
    })
}

/// The fields a container's latest operation left pending until its next restart: an update that was not
/// allowed to restart (`restart_policy: never`) with changes PVE does not apply to a running container. Until the
/// next operation (a restart, `pxctl restart`, another update that may restart) they are shown as pending.
pub fn pending_restart(latest: Option<&crate::model::Operation>) -> Vec<String> {
    match latest {
        Some(op) if op.state == crate::model::OpState::Succeeded => match &op.kind {
            OperationKind::Update {
                restart: false,
                changes,
                ..
            } => changes
                .iter()
                .filter(|c| !c.live)
                .map(|c| c.field.clone())
                .collect(),
            _ => Vec::new(),
        },
        _ => Vec::new(),
    }
}

/// The containers of `fleet` whose latest operation failed, with its error.
fn latest_failed(
    state: &crate::state::State,
    fleet: &str,
) -> Result<Vec<(String, Option<String>)>, crate::store::StoreError> {
    let mut latest: BTreeMap<&str, &crate::model::Operation> = BTreeMap::new();
    let ops = state.store.ops_shared()?;
    for op in ops
        .iter()
        .filter(|o| o.fleet == fleet && !o.container.is_empty() && !o.kind.is_aside())
    {
        latest.insert(&op.container, op);
    }
    Ok(latest
        .into_iter()
        .filter(|(_, op)| op.state == crate::model::OpState::Failed)
        .map(|(name, op)| (name.to_string(), op.last_error.clone()))
        .collect())
}

/// The containers of `fleet` whose repair does not hold (their latest operation says so), with that error: the
/// plan shows them as warnings, since the repair it lists is not going to be made again until a submit.
pub fn repairs_not_holding(
    state: &crate::state::State,
    fleet: &str,
) -> Result<Vec<(String, String)>, crate::store::StoreError> {
    Ok(latest_failed(state, fleet)?
        .into_iter()
        .filter_map(|(name, e)| {
            e.filter(|e| e.starts_with(crate::reconcile::REPAIR_DOES_NOT_HOLD))
                .map(|e| (name, e))
        })
        .collect())
}

/// The containers of `fleet` whose latest operation failed: a new submit retries them from the first attempt
/// (resubmitting the file, or `pxctl submit --retry-failed` when it did not change).
pub fn failed_containers(
    state: &crate::state::State,
    fleet: &str,
) -> Result<Vec<String>, crate::store::StoreError> {
    Ok(latest_failed(state, fleet)?
        .into_iter()
        .map(|(name, _)| name)
        .collect())
}

#[cfg(test)]
mod tests;
