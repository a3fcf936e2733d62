//! The planner: a pure function from (desired fleet, last applied fleet, observed containers) to an ordered
//! [`Plan`], or a [`PlanError`] listing every change pxfleet refuses to make.
//!
//! Matching: an observed container belongs to desired container `NAME` when it carries this fleet's mark
//! (`managed-by: pxfleet fleet=FLEET name=NAME`). Unmarked containers are never touched (they only count as
//! holders of a vm_id). Per desired container:
//! - not observed: **create** (reason `missing` when it was applied before: deleted outside pxfleet);
//! - template, vm_id, datastore_id or unprivileged differ: **replace**, naming those fields;
//! - the node changed and the container cannot be migrated there (another cluster, or a datastore of its
//!   rootfs or volume mount points missing on the target; see [`migrate`]): **replace**, saying why;
//! - otherwise **move** (node changed: `pct migrate`), **resize** (a disk grew; shrinking is an error), **update** (fields the
//!   file changed; each marked live or restart-needed per CONTRACT §3.1), **repair** (fields that differ from the
//!   applied spec although the file did not change them: drift), **start** (stopped);
//! - locked (`lock:` set, an operation is running): left alone in this plan.
//!
//! Observed containers with this fleet's mark and a name not in the file are **destroyed** (reason
//! `removed_from_file` when they were applied, else `orphaned`); extra containers with the same mark are destroyed
//! as `duplicate`. A container with `protection: true` is never destroyed or replaced: that is an error.
//!
//! Order (deterministic): destroys (by name), then replacements (each a destroy before its create) by startup
//! order, then changes to existing containers (per container: move, resize, update, repair, start) by startup
//! order, then creates by startup order. Startup order is `startup.order` ascending, containers without one last
//! (as PVE starts them), ties by name.

pub(crate) mod diff;
mod error;
mod migrate;
pub mod simulate;
mod types;

use std::collections::{HashMap, HashSet};

pub use error::{PlanError, PlanProblem};
pub use migrate::{why_not_migrate, Nodes};
pub use types::*;

use crate::model::{Container, Fleet, TemplateSource};
use crate::observed::ObservedContainer;

/// Plans `desired` against `applied` (the last submitted spec, `None` if never) and `observed` (what the nodes
/// report, every container, managed or not), knowing nothing of the nodes: every node change is a move.
pub fn plan(
    desired: &Fleet,
    applied: Option<&Fleet>,
    observed: &[ObservedContainer],
) -> Result<Plan, PlanError> {
    plan_on(desired, applied, observed, &Nodes::new())
}

/// [`plan`] knowing the nodes' clusters and datastores: a node change that `pct migrate` cannot make is a
/// replacement whose `node` reason says why.
pub fn plan_on(
    desired: &Fleet,
    applied: Option<&Fleet>,
    observed: &[ObservedContainer],
    nodes: &Nodes,
) -> Result<Plan, PlanError> {
    let fleet = desired.name.as_str();
    let mut problems = Vec::new();

    // This fleet's marked containers, by name.
    let mut marked: HashMap<&str, Vec<&ObservedContainer>> = HashMap::with_capacity(observed.len());
    for o in observed {
        if let Some(m) = &o.managed {
            if m.fleet == fleet {
                marked.entry(m.name.as_str()).or_default().push(o);
            }
        }
    }

    let mut destroys: Vec<Action> = Vec::new();
    let mut freed: HashSet<u32> = HashSet::new();
    let mut replaces: Vec<(StartKey<'_>, Action)> = Vec::new();
    let mut changes: Vec<(StartKey<'_>, Vec<Action>)> = Vec::new();
    let mut creates: Vec<(StartKey<'_>, Action)> = Vec::new();
    // vm_ids that creates and replacements will take: (container, vm_id, observed holder to ignore).
    let mut claims: Vec<(&str, u32)> = Vec::new();
    let mut drift_reports: Vec<String> = Vec::new();

    for (name, d) in &desired.containers {
        let a = applied.and_then(|f| f.containers.get(name));
        let key = StartKey::of(d);
        let candidates = marked.remove(name.as_str()).unwrap_or_default();
        // `adopt: true`: the unmarked container at (node, vm_id) stands for it until it carries the mark.
        let adopting = match (d.adopt && candidates.is_empty(), &d.node, d.vm_id) {
            (true, Some(node), Some(vm_id)) => {
                let target = observed
                    .iter()
                    .find(|o| o.managed.is_none() && o.node == *node && o.vm_id == vm_id);
                if target.is_none() {
                    problems.push(PlanProblem::Adopt {
                        container: name.clone(),
                        vm_id,
                        node: node.clone(),
                        why: "no container without pxfleet's mark is there to take over; remove `adopt: true` \
                              to create a new one"
                            .to_owned(),
                    });
                    continue;
                }
                target
            }
            _ => None,
        };
        let Some(primary) = adopting.or_else(|| pick_primary(&candidates, d, a)) else {
            if let Some(v) = d.vm_id {
                claims.push((name, v));
            }
            let reason = if a.is_some() {
                CreateReason::Missing
            } else {
                CreateReason::New
            };
            creates.push((
                key,
                Action {
                    container: name.clone(),
                    vm_id: d.vm_id,
                    node: d.node.clone(),
                    kind: ActionKind::Create {
                        reason,
                        attributes: diff::attributes(d, desired.templates.get(&d.template)),
                    },
                },
            ));
            continue;
        };
        for extra in candidates.iter().filter(|o| o.vm_id != primary.vm_id) {
            match destroy_action(extra, name, DestroyReason::Duplicate) {
                Ok(act) => {
                    freed.insert(extra.vm_id);
                    destroys.push(act);
                }
                Err(p) => problems.push(p),
            }
        }
        if primary.lock.is_some() {
            continue;
        }
        let mut ex = diff::existing(d, a, primary);
        // A linked clone's disk is where its template's is, whatever datastore placement wrote down.
        if desired.templates.get(&d.template).is_some_and(|t| {
            matches!(
                t.source,
                crate::model::TemplateSource::Clone { full: false, .. }
            )
        }) {
            ex.replace.retain(|c| c.field != diff::field::DATASTORE_ID);
        }
        // Given no mount points, a clone keeps the storage volumes `pct clone` copied for it (its own, named for
        // its vm_id): what it has, not drift (the agent leaves them too).
        if d.mount_points.is_empty()
            && desired
                .templates
                .get(&d.template)
                .is_some_and(|t| t.source.is_clone())
        {
            let kept: Vec<String> = primary
                .config
                .mount_points
                .iter()
                .filter(|m| {
                    m.volume.as_deref().and_then(crate::model::volume_owner) == Some(primary.vm_id)
                })
                .map(|m| diff::field::mount_point(m.mount.path()))
                .collect();
            if !kept.is_empty() {
                ex.updates.retain(|c| !kept.contains(&c.field));
                ex.drift.retain(|c| !kept.contains(&c.field));
            }
        }
        if let Some(c) = template_source_change(desired, applied, d, a, primary) {
            ex.replace.push(c);
        }
        if let Some(to) = &ex.move_to {
            if let Some(why) = migrate::blocker(nodes, primary, to) {
                ex.replace.push(FieldChange {
                    field: diff::field::NODE.to_owned(),
                    from: Some(serde_json::Value::String(primary.node.clone())),
                    to: Some(serde_json::Value::String(to.clone())),
                    live: false,
                    sensitive: false,
                    why: Some(why),
                });
                ex.move_to = None;
            }
        }
        if adopting.is_some() {
            if !ex.replace.is_empty() {
                let fields: Vec<&str> = ex.replace.iter().map(|c| c.field.as_str()).collect();
                problems.push(PlanProblem::Adopt {
                    container: name.clone(),
                    vm_id: primary.vm_id,
                    node: primary.node.clone(),
                    why: format!(
                        "{} differ from the existing container and cannot change in place (adopting never \
                         recreates it); make the file say what the container has",
                        fields.join(", ")
                    ),
                });
                continue;
            }
            ex.updates.insert(
                0,
                FieldChange {
                    field: ADOPT_FIELD.to_owned(),
                    from: None,
                    to: Some(serde_json::Value::String(format!(
                        "fleet={} name={name}",
                        desired.name
                    ))),
                    live: true,
                    sensitive: false,
                    why: None,
                },
            );
        }
        let at = |kind: ActionKind| Action {
            container: name.clone(),
            vm_id: Some(primary.vm_id),
            node: Some(primary.node.clone()),
            kind,
        };
        if !ex.replace.is_empty() {
            if primary.config.protection {
                let fields: Vec<&str> = ex.replace.iter().map(|c| c.field.as_str()).collect();
                let whys: Vec<&str> = ex.replace.iter().filter_map(|c| c.why.as_deref()).collect();
                let because = if whys.is_empty() {
                    String::new()
                } else {
                    format!(" ({})", whys.join("; "))
                };
                problems.push(PlanProblem::Protected {
                    container: name.clone(),
                    vm_id: primary.vm_id,
                    node: primary.node.clone(),
                    why: format!("replaced because {} changed{because}", fields.join(", ")),
                });
                continue;
            }
            freed.insert(primary.vm_id);
            if let Some(v) = d.vm_id {
                if v != primary.vm_id {
                    claims.push((name, v));
                }
            }
            replaces.push((
                key,
                at(ActionKind::Replace {
                    reasons: ex.replace,
                    attributes: diff::attributes(d, desired.templates.get(&d.template)),
                }),
            ));
            continue;
        }
        for (field, from_gib, to_gib) in ex.shrink {
            problems.push(PlanProblem::Shrink {
                container: name.clone(),
                vm_id: primary.vm_id,
                node: primary.node.clone(),
                field,
                from_gib,
                to_gib,
            });
        }
        let mut mine = Vec::new();
        // Whatever follows a move runs on the destination node.
        let here = ex.move_to.clone().unwrap_or_else(|| primary.node.clone());
        if let Some(to) = ex.move_to {
            mine.push(at(ActionKind::Move {
                from: primary.node.clone(),
                to,
            }));
        }
        let at = |kind: ActionKind| Action {
            node: Some(here.clone()),
            ..at(kind)
        };
        for (disk, from_gib, to_gib) in ex.grow {
            mine.push(at(ActionKind::Resize {
                disk,
                from_gib,
                to_gib,
            }));
        }
        // `restart_policy: never`: what is not live stays pending (the plan says so), no restart.
        let may_restart = d.restart_policy.is_auto();
        if !ex.updates.is_empty() {
            let restart_required = may_restart && diff::Differ::restart(&ex.updates);
            mine.push(at(ActionKind::Update {
                changes: ex.updates,
                restart_required,
            }));
        }
        // `drift: report`: shown, not repaired (no action: nothing is done about it).
        if !ex.drift.is_empty() && !d.drift.is_repair() {
            let what: Vec<String> = ex.drift.iter().map(drift_text).collect();
            drift_reports.push(format!(
                "container {name} (vm_id {} on {}) drifted: {} (drift: report, so it is left as it is; set \
                 `drift: repair` to have it put back, or write these values into the file)",
                primary.vm_id,
                primary.node,
                what.join(", ")
            ));
            ex.drift.clear();
        }
        if !ex.drift.is_empty() {
            let restart_required = may_restart && diff::Differ::restart(&ex.drift);
            mine.push(at(ActionKind::Repair {
                drift: ex.drift,
                restart_required,
            }));
        }
        if ex.start {
            mine.push(at(ActionKind::Start));
        }
        if ex.stop {
            mine.push(at(ActionKind::Stop));
        }
        if !mine.is_empty() {
            changes.push((key, mine));
        }
    }

    // Marked containers whose name is not in the file.
    let mut leftover: Vec<(&str, &ObservedContainer)> = marked
        .iter()
        .flat_map(|(n, os)| os.iter().map(move |o| (*n, *o)))
        .collect();
    leftover.sort_by(|x, y| (x.0, x.1.vm_id).cmp(&(y.0, y.1.vm_id)));
    for (name, o) in leftover {
        let was_applied = applied.is_some_and(|f| f.containers.contains_key(name));
        let reason = if was_applied {
            DestroyReason::RemovedFromFile
        } else {
            DestroyReason::Orphaned
        };
        match destroy_action(o, name, reason) {
            Ok(act) => {
                freed.insert(o.vm_id);
                destroys.push(act);
            }
            Err(p) => problems.push(p),
        }
    }

    // Containers of the applied fleet that left the file and that no node reports: they leave the fleet's state,
    // which the plan must say (else the plan is empty and nothing would record it).
    if let Some(a) = applied {
        for (name, c) in &a.containers {
            if !desired.containers.contains_key(name) && !marked.contains_key(name.as_str()) {
                destroys.push(Action {
                    container: name.clone(),
                    vm_id: c.vm_id,
                    node: c.node.clone(),
                    kind: ActionKind::Destroy {
                        reason: DestroyReason::NotFound,
                    },
                });
            }
        }
    }

    // A vm_id may only be taken when no container keeps holding it.
    if !claims.is_empty() {
        let holders: HashMap<u32, &ObservedContainer> =
            observed.iter().map(|o| (o.vm_id, o)).collect();
        for (name, v) in claims {
            if let Some(h) = holders.get(&v) {
                if !freed.contains(&v) {
                    let holder = match &h.managed {
                        Some(m) => format!("container {} of fleet {}", m.name, m.fleet),
                        None => "a container pxfleet does not manage".to_owned(),
                    };
                    problems.push(PlanProblem::VmIdInUse {
                        container: name.to_owned(),
                        vm_id: v,
                        node: h.node.clone(),
                        holder,
                    });
                }
            }
        }
    }

    if !problems.is_empty() {
        return Err(PlanError {
            fleet: fleet.to_owned(),
            problems,
        });
    }

    destroys.sort_by(|x, y| (&x.container, x.vm_id).cmp(&(&y.container, y.vm_id)));
    replaces.sort_by(|x, y| x.0.cmp(&y.0));
    changes.sort_by(|x, y| x.0.cmp(&y.0));
    creates.sort_by(|x, y| x.0.cmp(&y.0));
    let mut actions = destroys;
    actions.extend(replaces.into_iter().map(|(_, a)| a));
    actions.extend(changes.into_iter().flat_map(|(_, a)| a));
    actions.extend(creates.into_iter().map(|(_, a)| a));
    let mut plan = Plan::new(fleet, actions);
    plan.warnings = template_warnings(desired);
    plan.warnings
        .extend(clone_key_warning(desired, &plan.actions));
    plan.warnings.extend(drift_reports);
    Ok(plan)
}

/// Containers this plan creates from a clone template with `ssh_public_keys`: `pct clone` copies the source's
/// root account, and no `pct` option adds keys to an existing container, so the keys are not applied. One line.
fn clone_key_warning(desired: &Fleet, actions: &[Action]) -> Option<String> {
    let names: Vec<&str> = actions
        .iter()
        .filter(|a| matches!(a.kind, ActionKind::Create { .. }))
        .filter_map(|a| desired.containers.get(&a.container))
        .filter(|c| {
            !c.ssh_public_keys.is_empty()
                && desired
                    .templates
                    .get(&c.template)
                    .is_some_and(|t| t.source.is_clone())
        })
        .map(|c| c.name.as_str())
        .collect();
    if names.is_empty() {
        return None;
    }
    const SHOWN: usize = 5;
    let who = if names.len() > SHOWN {
        format!(
            "{} and {} more",
            names[..SHOWN].join(", "),
            names.len() - SHOWN
        )
    } else {
        names.join(", ")
    };
    Some(format!(
        "ssh_public_keys of {who} are not applied: they are made with pct clone, which copies the source \
         container's root account (its /root/.ssh/authorized_keys); put the keys into the source"
    ))
}

/// `field from -> to` of a drifted field, for the `drift: report` warning (a secret only says it changed).
fn drift_text(c: &FieldChange) -> String {
    if c.sensitive {
        return format!("{} changed", c.field);
    }
    let show = |v: &Option<serde_json::Value>| match v {
        None => "none".to_owned(),
        Some(serde_json::Value::String(s)) => s.clone(),
        Some(v) => v.to_string(),
    };
    format!(
        "{} is {} (applied: {})",
        c.field,
        show(&c.from),
        show(&c.to)
    )
}

/// The field of the update that takes an existing container under management (`adopt: true`): its mark is
/// written (description line and `pxfleet` tag) together with the other changes.
pub const ADOPT_FIELD: &str = "managed_by";

/// One warning per template that carries no checksum (made from a container's `template_url`): where it is
/// used (field path and line:column) and how to pin it.
pub fn template_warnings(fleet: &Fleet) -> Vec<String> {
    let mut out = Vec::new();
    for (name, t) in &fleet.templates {
        let TemplateSource::Url {
            url,
            checksum: None,
        } = &t.source
        else {
            continue;
        };
        let users: Vec<&str> = fleet
            .containers
            .values()
            .filter(|c| c.template == *name)
            .map(|c| c.name.as_str())
            .collect();
        let Some(first) = users.first() else {
            continue;
        };
        let own = format!("containers.{first}.template_url");
        let at = [own.clone(), "defaults.template_url".to_owned()]
            .into_iter()
            .find_map(|p| {
                fleet
                    .spans
                    .get(&p)
                    .map(|s| format!("{p} at line:column {s}"))
            })
            .unwrap_or(own);
        // A few names, then how many more: one warning line, however large the fleet.
        const SHOWN: usize = 5;
        let used_by = if users.len() > SHOWN {
            format!(
                "{} and {} more",
                users[..SHOWN].join(", "),
                users.len() - SHOWN
            )
        } else {
            users.join(", ")
        };
        out.push(format!(
            "template {name} ({url}, used by {used_by}) has no checksum ({at}): each node keeps whatever the URL serves \
             and the controller only compares what the nodes got; pin it: `templates: {name}: {{url: {url}, sha256: <hex>}}` \
             and use `template: {name}`"
        ));
    }
    out
}

/// The container's template keeps its name but the file now makes it from another source (another appliance,
/// URL or checksum): the container was made from the old file, so it is replaced.
fn template_source_change(
    desired: &Fleet,
    applied: Option<&Fleet>,
    d: &Container,
    a: Option<&Container>,
    o: &ObservedContainer,
) -> Option<FieldChange> {
    let a = a?;
    let current = o.config.template.as_deref().unwrap_or(a.template.as_str());
    if a.template != d.template || current != d.template {
        return None;
    }
    let was = applied?.templates.get(&a.template)?;
    let now = desired.templates.get(&d.template)?;
    (was.source != now.source).then(|| FieldChange {
        field: "template_source".to_owned(),
        from: serde_json::to_value(&was.source).ok(),
        to: serde_json::to_value(&now.source).ok(),
        live: false,
        sensitive: false,
        why: None,
    })
}

/// The destroy action for `o`, or the refusal when it is protected.
fn destroy_action(
    o: &ObservedContainer,
    name: &str,
    reason: DestroyReason,
) -> Result<Action, PlanProblem> {
    if o.config.protection {
        return Err(PlanProblem::Protected {
            container: name.to_owned(),
            vm_id: o.vm_id,
            node: o.node.clone(),
            why: match reason {
                DestroyReason::RemovedFromFile => "it left the fleet file".to_owned(),
                DestroyReason::Orphaned => {
                    "it carries this fleet's mark but is not in the file".to_owned()
                }
                DestroyReason::Duplicate => {
                    "another container carries the same fleet/name mark".to_owned()
                }
                DestroyReason::NotFound => "it left the fleet file".to_owned(),
            },
        });
    }
    Ok(Action {
        container: name.to_owned(),
        vm_id: Some(o.vm_id),
        node: Some(o.node.clone()),
        kind: ActionKind::Destroy { reason },
    })
}

/// Of several containers carrying the same mark, the one that stands for the desired container: the one with
/// the desired vm_id, else the applied vm_id, else the lowest vm_id.
fn pick_primary<'a>(
    candidates: &[&'a ObservedContainer],
    d: &Container,
    a: Option<&Container>,
) -> Option<&'a ObservedContainer> {
    let by_id = |v: Option<u32>| v.and_then(|v| candidates.iter().find(|o| o.vm_id == v).copied());
    by_id(d.vm_id)
        .or_else(|| by_id(a.and_then(|a| a.vm_id)))
        .or_else(|| candidates.iter().min_by_key(|o| o.vm_id).copied())
}

/// Sort key by startup order: `startup.order` ascending, unordered last, then name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct StartKey<'a> {
    unordered: bool,
    order: u32,
    name: &'a str,
}

impl<'a> StartKey<'a> {
    fn of(c: &'a Container) -> Self {
        let order = c.startup.as_ref().and_then(|s| s.order);
        StartKey {
            unordered: order.is_none(),
            order: order.unwrap_or(0),
            name: &c.name,
        }
    }
}
