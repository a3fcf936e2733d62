//! One reconcile pass over the world: overdue operations expire or are sent again, each container gets its
//! next operation ([`crate::realise::next_operation`]), templates kept on every node are seeded, and pending
//! operations are dispatched to connected agents within each node's window.

use pxfleet_common::Stopwatch;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};

use super::decide::{adopt_node, backoff_ms};
use super::dispatch::{self, Waiting};
use super::{emit, VANISHED_GRACE_MS};
use crate::model::{
    AppliedContainer, DesiredContainer, Millis, NodeRecord, ObservedContainer, OpState, Operation,
    OperationKind,
};
use crate::query::{load, pick, Key};
use crate::realise::{next_operation, NextAction, View};
use crate::state::State;
use crate::store::StoreError;
use crate::templates::{digest_conflict, template_ready_on, unpinned_url};

/// Adopts `o` where it is when [`adopt_node`] says so: the desired (and applied) node
/// follow it. Returns the updated records.
fn adopt(
    state: &State,
    d: &DesiredContainer,
    a: Option<&AppliedContainer>,
    o: &ObservedContainer,
) -> Result<Option<(DesiredContainer, Option<AppliedContainer>)>, StoreError> {
    let Some(node) = adopt_node(d, o) else {
        return Ok(None);
    };
    let datastore = o.config.as_ref().and_then(|c| c.datastore_id.clone());
    if !state
        .store
        .adopt_desired(&d.fleet, &d.name, node, datastore.as_deref())?
    {
        return Ok(None);
    }
    tracing::info!(fleet = %d.fleet, container = %d.name, from = %d.node, to = %node, vm_id = o.vm_id,
        "container moved outside pxfleet: adopted where it is");
    let mut d = d.clone();
    d.node = node.to_string();
    d.container.node = Some(node.to_string());
    if let Some(ds) = &datastore {
        d.container.datastore_id = Some(ds.clone());
    }
    let a = match a {
        Some(a) if a.vm_id == o.vm_id => {
            let mut a = a.clone();
            a.node = node.to_string();
            a.container.node = Some(node.to_string());
            if let Some(ds) = &datastore {
                a.container.datastore_id = Some(ds.clone());
            }
            state.store.put_applied(&a)?;
            Some(a)
        }
        _ => None,
    };
    Ok(Some((d, a)))
}

/// One reconcile pass at time `now`.
pub fn pass(state: &State, now: Millis) -> Result<(), StoreError> {
    let _ops = state.ops_lock.lock().unwrap_or_else(|p| p.into_inner());
    let started = Stopwatch::start();
    let rc = &state.config.reconciler;
    let mut w = load(state)?;
    let loaded = started.elapsed();
    let mut changed = false;
    // 1. overdue dispatched operations fail (the agent may still finish; its late result is then ignored);
    //    ones the agent never acknowledged are sent again, but only when the stream they were sent on is gone
    //    (the agent reconnected, or the controller restarted) and `ack_timeout_secs` passed: an HTTP/2 stream
    //    delivers in order or breaks, so an operation on the node's live stream is on its way however long the
    //    acknowledgement takes. (Re-sending on silence alone fed on itself at 10,000 containers: a controller
    //    slow to read the acknowledgements took its own backlog for lost operations.)
    let ack_ms = rc.ack_timeout_secs * 1000;
    let nodes = state.store.nodes()?;
    // Clusters and datastores, for the planner to tell a migration from a replacement.
    let node_facts = crate::planning::nodes_facts(&nodes);
    let by_name: HashMap<&str, &NodeRecord> = nodes.iter().map(|n| (n.name.as_str(), n)).collect();
    let mut conns: BTreeMap<&str, Option<u64>> = BTreeMap::new();
    for op in &w.ops {
        let unacknowledged = op.state == OpState::Dispatched
            && op.dispatched_ms.is_some_and(|d| now > d + ack_ms)
            && *conns
                .entry(op.node.as_str())
                .or_insert_with(|| state.sessions.current_conn(&op.node))
                != Some(op.dispatched_conn);
        if unacknowledged && op.deadline_ms.is_none_or(|d| now <= d) {
            let mut op = (**op).clone();
            tracing::warn!(op = %op.id, node = %op.node, vm_id = op.vm_id, kind = op.kind.name(),
                "not acknowledged by the agent, and the stream it was sent on is gone; sending the operation again");
            op.state = OpState::Pending;
            op.deadline_ms = None;
            state.store.put_op(&op)?;
            state.metrics.op_resent();
            changed = true;
            continue;
        }
        if matches!(op.state, OpState::Dispatched | OpState::Running)
            && op.deadline_ms.is_some_and(|d| now > d)
        {
            changed = true;
            let mut op = (**op).clone();
            op.state = OpState::Failed;
            op.finished_ms = Some(now);
            op.last_error = Some(format!("{NO_RESULT} {} s", rc.operation_deadline_secs));
            state.store.put_op(&op)?;
            state.metrics.op_finished(op.kind.name(), "failed");
            tracing::warn!(op = %op.id, node = %op.node, vm_id = op.vm_id, "operation deadline exceeded");
        }
    }
    if changed {
        w = load(state)?;
    }
    let active_seeds: BTreeSet<(String, String)> = w
        .ops
        .iter()
        .filter(|o| o.state.is_active())
        .filter_map(|o| match &o.kind {
            OperationKind::SeedTemplate { name, .. } => Some((o.node.clone(), name.clone())),
            _ => None,
        })
        .collect();
    let mut seeds_now = active_seeds.clone();
    let mut planned: Vec<Operation> = Vec::new();
    // Operations planned by this pass and not stored yet (the pass holds the operations lock until they are).
    let mut unstored: HashSet<String> = HashSet::new();
    // 2. the next operation per container
    let mut vanished_due = Millis::MAX;
    {
        // a container no longer desired is not waited for any more
        let mut v = state
            .reconciler
            .vanished
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if !v.is_empty() {
            v.retain(|k, _| w.desired.contains_key(k));
        }
    }
    let clone_sources = w.clone_sources();
    for k in &w.keys {
        let d = w.desired(k);
        let a = w.applied(k);
        let o = pick(w.observed(k), d, a);
        let latest = w.latest(k);
        if latest.is_some_and(|op| op.state.is_active()) {
            continue;
        }
        // A `volume_of` mount point is mounted once its source's node reports the volume; until then the container
        // waits (`pxctl get` says why).
        let resolved;
        let d = match d.map(|d| w.volumes_resolved(d)) {
            None => None,
            Some(Ok(r)) => {
                resolved = r;
                Some(&*resolved)
            }
            Some(Err(why)) => {
                tracing::debug!(fleet = %k.0, container = %k.1, %why, "not created or changed yet");
                continue;
            }
        };
        // A clone of a container another entry is to make (a fleet's `state: template`) waits until that one is
        // there as its file says; `pxctl get` shows why (query.rs). The source's result wakes the loop.
        if let (Some(d), None, false) = (d, o, clone_sources.is_empty()) {
            if let Some(why) = w.clone_source_wait(d, &clone_sources) {
                tracing::debug!(fleet = %d.fleet, container = %d.name, %why, "not cloned yet");
                continue;
            }
        }
        // Not created yet, from a template without checksum whose file on this node differs from another
        // node's: failed (with both digests) instead of creating from an unknown file.
        if let (Some(d), None) = (d, o) {
            let conflict = unpinned_url(&d.template)
                .and_then(|url| Some((url, digest_conflict(&nodes, &d.node, url)?)));
            if let Some((url, c)) = conflict {
                let error = c.message(&d.container.template, url);
                if !latest.is_some_and(|l| {
                    l.state == OpState::Failed && l.last_error.as_deref() == Some(error.as_str())
                }) {
                    fail_for_template(state, k, d, error, now)?;
                }
                continue;
            }
        }
        // A container moved by hand that the file does not pin: adopted where it is, not moved back.
        let adopted = match (d, o) {
            (Some(d), Some(o)) => adopt(state, d, a, o)?,
            _ => None,
        };
        let (d, a) = match &adopted {
            Some((nd, na)) => (Some(nd), na.as_ref().or(a)),
            None => (d, a),
        };
        let view = View {
            desired: d,
            applied: a,
            observed: o,
            nodes: &node_facts,
            template_ready: d.is_some_and(|d| {
                by_name
                    .get(d.node.as_str())
                    .is_some_and(|n| template_ready_on(n, &d.container.template, &d.template))
            }),
        };
        let Some(next) = next_operation(&view) else {
            if d.is_none() && o.is_none() && a.is_some() {
                state.store.remove_applied(&k.0, &k.1)?;
            }
            continue;
        };
        // A container that was created and is now observed nowhere is recreated only once it stayed missing for
        // a grace period: migrated by hand, it is missing from both nodes' reports until the target's agent
        // observes it, and a create meanwhile fails on PVE's cluster-wide vm_id check (three times, and the
        // container showed `failed`).
        let vanished = matches!(next.kind, OperationKind::Create { .. })
            && o.is_none()
            && a.is_some_and(|a| d.is_some_and(|d| a.vm_id == d.vm_id));
        {
            let mut v = state
                .reconciler
                .vanished
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            if vanished {
                let since = *v.entry(k.clone()).or_insert(now);
                if now < since + VANISHED_GRACE_MS {
                    vanished_due = vanished_due.min(since + VANISHED_GRACE_MS);
                    continue;
                }
            } else if !v.is_empty() {
                v.remove(k);
            }
        }
        if let OperationKind::SeedTemplate { name, .. } = &next.kind {
            if !seeds_now.insert((next.node.clone(), name.clone())) {
                continue; // another container already asked for this template on this node
            }
        }
        let revision = d.map(|d| d.revision).unwrap_or(0);
        // A failure is retried; a success that did not change what is observed (the same operation for the
        // same reason again soon after) is paced the same way, so a change the node cannot make never turns
        // into a tight loop. A repair (update, start, stop, resize, migrate) needed again after `max_attempts`
        // successes does not hold: it stops, recorded as failed with the keys and both values, until the next
        // submit.
        let repairs = next.kind.is_repair();
        let window = if repairs { REPAIR_HOLD_MS } else { 60_000 };
        let repeats = |l: &Operation| match l.state {
            OpState::Failed => true,
            OpState::Succeeded => {
                l.kind.same_work(&next.kind) && l.finished_ms.is_some_and(|f| now < f + window)
            }
            _ => false,
        };
        let (attempt, not_before) = match latest {
            Some(l)
                if repeats(l) && l.kind.name() == next.kind.name() && l.revision == revision =>
            {
                if l.attempt >= rc.max_attempts {
                    if repairs && l.state == OpState::Succeeded {
                        does_not_hold(state, k, l, &next, now)?;
                    }
                    continue; // failed for good until the next submit changes it (after success: the window above)
                }
                let attempt = l.attempt + 1;
                let delay = backoff_ms(
                    attempt,
                    rc.backoff_base_ms,
                    rc.backoff_max_ms,
                    rand::random::<f64>(),
                );
                (attempt, l.finished_ms.unwrap_or(now) + delay)
            }
            _ => (1, now),
        };
        let op = Operation {
            attempt,
            not_before_ms: not_before,
            revision,
            reason: next.reason,
            ..Operation::pending(&k.0, &k.1, &next.node, next.vm_id, next.kind, now)
        };
        tracing::info!(op = %op.id, fleet = %op.fleet, container = %op.container, node = %op.node,
            kind = op.kind.name(), attempt, reason = %op.reason, "operation planned");
        // stored below: once, as dispatched, when this pass sends it; else as pending
        unstored.insert(op.id.clone());
        emit(state, &op, "planned");
        planned.push(op);
    }
    // 2b. templates kept on every ready node (`seed: all_nodes`)
    crate::preseed::plan(state, &nodes, &w.ops, &mut seeds_now, now, &mut planned)?;
    // 3. dispatch what is due to connected nodes, in creation order, at most `dispatch_window` in flight per
    //    node: the rest wait here, not in the agent's queue, so no deadline runs while they wait.
    let mut in_flight: BTreeMap<&str, u32> = BTreeMap::new();
    for op in &w.ops {
        if matches!(op.state, OpState::Dispatched | OpState::Running) {
            *in_flight.entry(op.node.as_str()).or_default() += 1;
        }
    }
    let mut secrets: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
    let mut backlog: HashMap<String, VecDeque<Waiting>> = HashMap::new();
    for op in w.ops.iter().map(|o| &**o).chain(&planned) {
        if op.state != OpState::Pending || op.not_before_ms > now {
            continue;
        }
        if !state.sessions.is_connected(&op.node) {
            continue;
        }
        let password = match &op.kind {
            OperationKind::Create { .. } => {
                if !secrets.contains_key(&op.fleet) {
                    secrets.insert(op.fleet.clone(), state.store.secrets(&op.fleet)?);
                }
                secrets[&op.fleet].get(&op.container).cloned()
            }
            _ => None,
        };
        let busy = in_flight.entry(op.node.as_str()).or_default();
        if *busy >= rc.dispatch_window {
            // sent by the result that frees a slot (dispatch.rs), or by a later pass
            backlog
                .entry(op.node.clone())
                .or_default()
                .push_back(Waiting {
                    id: op.id.clone(),
                    password,
                });
            continue;
        }
        let sent = if unstored.remove(&op.id) {
            dispatch::send_new(state, op, password, now)?
        } else {
            dispatch::send(state, op, password, now)?
        };
        if sent {
            *busy += 1;
        }
    }
    for op in planned.iter().filter(|o| unstored.contains(&o.id)) {
        state.store.put_op(op)?;
    }
    state.reconciler.backlog.replace(backlog);
    // what falls due next without any change: a backoff ends, an acknowledgement wait or a deadline passes, a
    // vanished container's grace ends
    let mut due = vanished_due;
    for op in w.ops.iter().map(|o| &**o).chain(&planned) {
        match op.state {
            OpState::Pending if op.not_before_ms > now => due = due.min(op.not_before_ms),
            OpState::Dispatched | OpState::Running => {
                if let Some(d) = op.deadline_ms {
                    due = due.min(d + 1);
                }
                if let (OpState::Dispatched, Some(d)) = (op.state, op.dispatched_ms) {
                    due = due.min(d + ack_ms + 1);
                }
            }
            _ => {}
        }
    }
    state
        .reconciler
        .next_due_ms
        .store(due, std::sync::atomic::Ordering::Relaxed);
    let took = started.elapsed();
    state.metrics.reconcile_took(took.as_secs_f64());
    tracing::debug!(
        took_ms = took.as_millis() as u64,
        load_ms = loaded.as_millis() as u64,
        containers = w.keys.len(),
        operations = w.ops.len(),
        planned = planned.len(),
        "reconcile pass"
    );
    if took > std::time::Duration::from_secs(1) {
        tracing::warn!(
            took_ms = took.as_millis() as u64,
            load_ms = loaded.as_millis() as u64,
            containers = w.keys.len(),
            operations = w.ops.len(),
            "slow reconcile pass"
        );
    }
    Ok(())
}

/// How long after a successful repair the same repair counts as the same one again (its `attempt` goes on
/// counting): a repair undone within this time did not hold. Ten minutes covers an agent's observation interval
/// (30 s) many times over, and something on the node that puts a value back on a timer.
pub const REPAIR_HOLD_MS: Millis = 600_000;

/// The start of the error of an operation whose deadline passed without a result from the agent (which may still
/// have done it).
pub const NO_RESULT: &str = "no result within";

/// The start of the error of a repair that does not hold, as `pxctl get` and `describe` show it.
pub const REPAIR_DOES_NOT_HOLD: &str = "drift: repair does not hold";

/// Records that `next`, the same repair as `last` which already succeeded `last.attempt` times, is due again:
/// a failed operation (never sent) whose error names each key with the wanted value and the node's, so that
/// the container shows it instead of being repaired forever.
fn does_not_hold(
    state: &State,
    k: &Key,
    last: &Operation,
    next: &NextAction,
    now: Millis,
) -> Result<(), StoreError> {
    let what = match &next.kind {
        OperationKind::Update { changes, .. } => changes
            .iter()
            .map(crate::realise::wanted_has)
            .collect::<Vec<_>>()
            .join("; "),
        OperationKind::Start => "state: wanted running, node has stopped".into(),
        OperationKind::Stop => "state: wanted stopped, node has running".into(),
        OperationKind::Migrate { target, .. } => {
            format!("node: wanted {target}, the container is on {}", next.node)
        }
        _ => next.reason.clone(),
    };
    let error = format!(
        "{REPAIR_DOES_NOT_HOLD} ({what}): repaired {} times and changed back on the node each time, so pxfleet \
         stopped repairing it; find what changes it on node {} (CT {}), then run `pxctl submit --retry-failed` \
         (or change the file)",
        last.attempt, next.node, next.vm_id
    );
    let op = Operation {
        attempt: last.attempt,
        state: OpState::Failed,
        finished_ms: Some(now),
        last_error: Some(error),
        revision: last.revision,
        reason: next.reason.clone(),
        ..Operation::pending(&k.0, &k.1, &next.node, next.vm_id, next.kind.clone(), now)
    };
    tracing::warn!(fleet = %op.fleet, container = %op.container, node = %op.node, vm_id = op.vm_id,
        error = op.last_error.as_deref().unwrap_or(""), "repair does not hold: stopped");
    state.store.put_op(&op)?;
    state.metrics.op_finished(op.kind.name(), "failed");
    emit(state, &op, "failed");
    Ok(())
}

/// Records a failed operation for a container that cannot be created from its node's template file.
fn fail_for_template(
    state: &State,
    k: &Key,
    d: &DesiredContainer,
    error: String,
    now: Millis,
) -> Result<(), StoreError> {
    let kind = OperationKind::SeedTemplate {
        name: d.container.template.clone(),
        template: d.template.clone(),
    };
    let op = Operation {
        attempt: state.config.reconciler.max_attempts,
        state: OpState::Failed,
        finished_ms: Some(now),
        last_error: Some(error),
        revision: d.revision,
        reason: format!("template {} differs between nodes", d.container.template),
        ..Operation::pending(&k.0, &k.1, &d.node, 0, kind, now)
    };
    tracing::warn!(fleet = %op.fleet, container = %op.container, node = %op.node,
        error = op.last_error.as_deref().unwrap_or(""), "template digest conflict");
    state.store.put_op(&op)?;
    state.metrics.op_finished(op.kind.name(), "failed");
    emit(state, &op, "failed");
    Ok(())
}
