//! The reconciler's driver: one pass applies [`crate::reconciler::next_action`] to every container (desired,
//! applied, or carrying a known fleet's mark), creates operations, expires overdue ones, and dispatches
//! pending ones to connected agents. Passes run on a timer and whenever something is observed. Operation
//! results from agents come in through [`on_update`].

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

use pxfleet_proto::v1 as pb;

use crate::convert;
use pxfleet_spec::{Checksum, Template, TemplateSource};

use crate::model::{
    now_ms, AppliedContainer, ContainerStatus, DesiredContainer, ManagedBy, Millis, NodeRecord,
    ObservedContainer, OpState, Operation, OperationKind, TemplateDigest,
};
use crate::reconciler::{backoff_ms, container_status, next_action, View};
use crate::state::State;
use crate::store::StoreError;

/// One row of `get containers`.
#[derive(Debug, Clone)]
pub struct ContainerRow {
    pub fleet: String,
    pub name: String,
    pub desired: Option<DesiredContainer>,
    pub observed: Option<ObservedContainer>,
    pub latest_op: Option<Operation>,
    pub status: ContainerStatus,
    /// Fields on the node moved away from what was applied (a repair is due); see
    /// [`crate::realise::drifted`].
    pub drifted: bool,
    /// Fields its last update left pending until the next restart (`restart_policy: never`); see
    /// [`crate::realise::pending_restart`].
    pub pending_restart: Vec<String>,
}

impl ContainerRow {
    pub fn node(&self) -> String {
        self.desired
            .as_ref()
            .map(|d| d.node.clone())
            .or_else(|| self.observed.as_ref().map(|o| o.node.clone()))
            .unwrap_or_default()
    }
    pub fn vm_id(&self) -> u32 {
        self.desired
            .as_ref()
            .map(|d| d.vm_id)
            .or_else(|| self.observed.as_ref().map(|o| o.vm_id))
            .unwrap_or(0)
    }
    /// The error of the latest operation, when it failed.
    pub fn error(&self) -> Option<String> {
        self.latest_op
            .as_ref()
            .filter(|o| o.state == OpState::Failed)
            .and_then(|o| o.last_error.clone())
    }
}

type Key = (String, String);

/// Everything a pass looks at, shared with the store's decoded cache (nothing is copied to build it).
struct World {
    desired: BTreeMap<Key, Arc<DesiredContainer>>,
    applied: BTreeMap<Key, Arc<AppliedContainer>>,
    observed: BTreeMap<Key, Vec<Arc<ObservedContainer>>>,
    latest: BTreeMap<Key, Arc<Operation>>,
    ops: Vec<Arc<Operation>>,
    keys: BTreeSet<Key>,
}

impl World {
    fn desired(&self, k: &Key) -> Option<&DesiredContainer> {
        self.desired.get(k).map(|d| &**d)
    }
    fn applied(&self, k: &Key) -> Option<&AppliedContainer> {
        self.applied.get(k).map(|a| &**a)
    }
    fn observed(&self, k: &Key) -> Option<&[Arc<ObservedContainer>]> {
        self.observed.get(k).map(|v| v.as_slice())
    }
    fn latest(&self, k: &Key) -> Option<&Operation> {
        self.latest.get(k).map(|o| &**o)
    }
}

fn load(state: &State) -> Result<World, StoreError> {
    let store = &state.store;
    let fleets: BTreeSet<String> = store.fleets()?.into_iter().map(|f| f.name).collect();
    let desired: BTreeMap<Key, Arc<DesiredContainer>> = store
        .all_desired_shared()?
        .into_iter()
        .map(|d| ((d.fleet.clone(), d.name.clone()), d))
        .collect();
    let applied: BTreeMap<Key, Arc<AppliedContainer>> = store
        .all_applied_shared()?
        .into_iter()
        .map(|a| ((a.fleet.clone(), a.name.clone()), a))
        .collect();
    let mut observed: BTreeMap<Key, Vec<Arc<ObservedContainer>>> = BTreeMap::new();
    for o in store.all_observed_shared()? {
        if let Some(ManagedBy { fleet, name }) = &o.managed {
            if fleets.contains(fleet) {
                observed
                    .entry((fleet.clone(), name.clone()))
                    .or_default()
                    .push(o);
            }
        }
    }
    if desired.values().any(|d| d.container.adopt) {
        let all: Vec<ObservedContainer> = store
            .all_observed_shared()?
            .iter()
            .map(|o| (**o).clone())
            .collect();
        for (k, o) in crate::adopt::targets_of(desired.values().map(|d| &**d), all) {
            observed.entry(k).or_insert_with(|| vec![Arc::new(o)]);
        }
    }
    let ops = store.ops_shared()?;
    let mut latest: BTreeMap<Key, Arc<Operation>> = BTreeMap::new();
    for op in &ops {
        if !op.container.is_empty() {
            latest.insert((op.fleet.clone(), op.container.clone()), op.clone());
        }
    }
    let keys = desired
        .keys()
        .chain(applied.keys())
        .chain(observed.keys())
        .cloned()
        .collect();
    Ok(World {
        desired,
        applied,
        observed,
        latest,
        ops,
        keys,
    })
}

/// The observed container for an entry: the one where desired (or applied) says it is, else any.
fn pick<'a>(
    list: Option<&'a [Arc<ObservedContainer>]>,
    d: Option<&DesiredContainer>,
    a: Option<&AppliedContainer>,
) -> Option<&'a ObservedContainer> {
    let list = list?;
    let at = |node: &str, vm_id: u32| {
        list.iter()
            .find(|o| o.node == node && o.vm_id == vm_id)
            .map(|o| &**o)
    };
    d.and_then(|d| at(&d.node, d.vm_id))
        .or_else(|| a.and_then(|a| at(&a.node, a.vm_id)))
        .or_else(|| list.first().map(|o| &**o))
}

/// Every managed container with its status, sorted by fleet and name.
pub fn container_rows(state: &State) -> Result<Vec<ContainerRow>, StoreError> {
    let w = load(state)?;
    let max = state.config.reconciler.max_attempts;
    Ok(w.keys
        .iter()
        .map(|k| {
            let d = w.desired(k);
            let o = pick(w.observed(k), d, w.applied(k)).cloned();
            let latest = w.latest(k).cloned();
            let drifted = match (d, &o) {
                (Some(d), Some(o))
                    if o.lock.is_none() && o.node == d.node && o.vm_id == d.vm_id =>
                {
                    crate::realise::drifted(d, w.applied(k), o)
                }
                _ => false,
            };
            ContainerRow {
                drifted,
                pending_restart: crate::realise::pending_restart(latest.as_ref()),
                fleet: k.0.clone(),
                name: k.1.clone(),
                desired: d.cloned(),
                // A failure of an older revision is being retried by the newer one: not failed (any more).
                status: container_status(
                    latest.as_ref().filter(|l| {
                        l.state != OpState::Failed || d.is_none_or(|d| l.revision >= d.revision)
                    }),
                    o.as_ref(),
                    max,
                ),
                observed: o,
                latest_op: latest,
            }
        })
        .collect())
}

fn template_ready(state: &State, d: &DesiredContainer) -> bool {
    match state.store.node(&d.node) {
        Ok(Some(n)) => template_ready_on(&n, &d.container.template, &d.template),
        _ => false,
    }
}

/// Whether template `name` can be created from on node `n` without seeding first.
/// - An appliance: cached (inventory) or seeded.
/// - A URL with a sha256: cached or seeded, unless the digest the node reported differs from the pin.
/// - A URL without checksum: only once the node reported the file's sha256 (a seed operation hashes a cached
///   file without downloading), so nodes can be compared; a seed by an agent that reports no digest counts.
pub fn template_ready_on(n: &NodeRecord, name: &str, t: &Template) -> bool {
    let volid = convert::template_volid(t);
    let seeded = n.seeded.get(name).map(String::as_str) == Some(volid.as_str());
    let cached = n.inventory.templates.contains(&volid);
    match &t.source {
        TemplateSource::Pveam { .. } => seeded || cached,
        TemplateSource::Url { url, checksum } => {
            let reported = n.template_digests.get(url);
            match checksum {
                None => seeded || reported.is_some(),
                Some(Checksum::Sha256(pin)) => {
                    let differs = reported.is_some_and(|r| !r.sha256.eq_ignore_ascii_case(pin));
                    (seeded || cached) && !differs
                }
                Some(Checksum::Sha512(_)) => seeded || cached,
            }
        }
    }
}

/// Two nodes reported different files for one URL template without checksum.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DigestConflict {
    /// The node whose file differs from the first report.
    pub node: String,
    pub sha256: String,
    /// The node that reported the URL first, and its digest.
    pub reference_node: String,
    pub reference_sha256: String,
}

impl DigestConflict {
    /// The error a container on the differing node fails with.
    pub fn message(&self, name: &str, url: &str) -> String {
        format!(
            "template {name} ({url}) has no checksum and differs between nodes: {} has sha256 {}, {} has sha256 {}; \
             the URL served different files. Pin the one you want in fleet.yaml: \
             `templates: {name}: {{url: {url}, sha256: {}}}` and use `template: {name}`",
            self.node, self.sha256, self.reference_node, self.reference_sha256, self.reference_sha256
        )
    }
}

/// Whether `node`'s file for `url` differs from the earliest report of that URL by any node.
pub fn digest_conflict(nodes: &[NodeRecord], node: &str, url: &str) -> Option<DigestConflict> {
    let mine = nodes
        .iter()
        .find(|n| n.name == node)?
        .template_digests
        .get(url)?;
    let (ref_node, reference) = nodes
        .iter()
        .filter_map(|n| n.template_digests.get(url).map(|d| (n.name.as_str(), d)))
        .min_by(|a, b| (a.1.recorded_ms, a.0).cmp(&(b.1.recorded_ms, b.0)))?;
    (ref_node != node && !reference.sha256.eq_ignore_ascii_case(&mine.sha256)).then(|| {
        DigestConflict {
            node: node.to_string(),
            sha256: mine.sha256.clone(),
            reference_node: ref_node.to_string(),
            reference_sha256: reference.sha256.clone(),
        }
    })
}

/// The URL of a template without a declared checksum.
fn unpinned_url(t: &Template) -> Option<&str> {
    match &t.source {
        TemplateSource::Url {
            url,
            checksum: None,
        } => Some(url),
        _ => None,
    }
}

/// Adopts `o` where it is when [`crate::reconciler::adopt_node`] says so: the desired (and applied) node
/// follow it. Returns the updated records.
fn adopt(
    state: &State,
    d: &DesiredContainer,
    a: Option<&AppliedContainer>,
    o: &ObservedContainer,
) -> Result<Option<(DesiredContainer, Option<AppliedContainer>)>, StoreError> {
    let Some(node) = crate::reconciler::adopt_node(d, o) else {
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

/// `pxctl restart`: a stop operation (of revision `revision`) for each of `names` of `fleet` that runs and has
/// no operation in flight; the reconciler starts them again, their desired state being running.
pub fn queue_restarts(
    state: &State,
    fleet: &str,
    names: &[String],
    revision: u64,
) -> Result<(), StoreError> {
    let _ops = state.ops_lock.lock().unwrap_or_else(|p| p.into_inner());
    let w = load(state)?;
    let now = now_ms();
    for name in names {
        let k = (fleet.to_string(), name.clone());
        if w.latest(&k).is_some_and(|op| op.state.is_active()) {
            continue;
        }
        let Some(o) = pick(w.observed(&k), w.desired(&k), w.applied(&k)) else {
            continue;
        };
        if !o.running || o.lock.is_some() {
            continue;
        }
        let op = Operation {
            id: crate::model::new_id(),
            fleet: fleet.to_string(),
            container: name.clone(),
            node: o.node.clone(),
            vm_id: o.vm_id,
            kind: OperationKind::Stop,
            attempt: 1,
            state: OpState::Pending,
            created_ms: now,
            not_before_ms: now,
            dispatched_ms: None,
            dispatched_conn: 0,
            deadline_ms: None,
            finished_ms: None,
            last_error: None,
            revision,
            reason: "restart: stop, then start".into(),
        };
        state.store.put_op(&op)?;
        emit(state, &op, "planned");
    }
    Ok(())
}

/// One reconcile pass at time `now`.
pub fn pass(state: &State, now: Millis) -> Result<(), StoreError> {
    let _ops = state.ops_lock.lock().unwrap_or_else(|p| p.into_inner());
    let started = Instant::now();
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
            op.last_error = Some(format!("no result within {} s", rc.operation_deadline_secs));
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
    // 2. the next operation per container
    let mut vanished_due = Millis::MAX;
    for k in &w.keys {
        let d = w.desired(k);
        let a = w.applied(k);
        let o = pick(w.observed(k), d, a);
        let latest = w.latest(k);
        if latest.is_some_and(|op| op.state.is_active()) {
            continue;
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
            template_ready: d.is_some_and(|d| template_ready(state, d)),
        };
        let Some(next) = next_action(view) else {
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
            let mut v = state.vanished.lock().unwrap_or_else(|p| p.into_inner());
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
        // same reason again within a minute) is paced the same way, so a change the node cannot make never
        // turns into a tight loop.
        let repeats = |l: &Operation| match l.state {
            OpState::Failed => true,
            OpState::Succeeded => {
                l.kind.same_work(&next.kind) && l.finished_ms.is_some_and(|f| now < f + 60_000)
            }
            _ => false,
        };
        let (attempt, not_before) = match latest {
            Some(l)
                if repeats(l) && l.kind.name() == next.kind.name() && l.revision == revision =>
            {
                if l.attempt >= rc.max_attempts {
                    continue; // failed for good until the next submit changes it (or, after success, a minute)
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
            id: crate::model::new_id(),
            fleet: k.0.clone(),
            container: k.1.clone(),
            node: next.node,
            vm_id: next.vm_id,
            kind: next.kind,
            attempt,
            state: OpState::Pending,
            created_ms: now,
            not_before_ms: not_before,
            dispatched_ms: None,
            dispatched_conn: 0,
            deadline_ms: None,
            finished_ms: None,
            last_error: None,
            revision,
            reason: next.reason,
        };
        tracing::info!(op = %op.id, fleet = %op.fleet, container = %op.container, node = %op.node,
            kind = op.kind.name(), attempt, reason = %op.reason, "operation planned");
        state.store.put_op(&op)?;
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
    for op in w.ops.iter().map(|o| &**o).chain(&planned) {
        if op.state != OpState::Pending || op.not_before_ms > now {
            continue;
        }
        let busy = in_flight.entry(op.node.as_str()).or_default();
        if *busy >= rc.dispatch_window || !state.sessions.is_connected(&op.node) {
            continue;
        }
        let mut op = op.clone();
        op.deadline_ms = Some(now + rc.operation_deadline_secs * 1000);
        let password = match &op.kind {
            OperationKind::Create { .. } => {
                if !secrets.contains_key(&op.fleet) {
                    secrets.insert(op.fleet.clone(), state.store.secrets(&op.fleet)?);
                }
                secrets[&op.fleet].get(&op.container).cloned()
            }
            _ => None,
        };
        let msg =
            pb::controller_message::Msg::Operation(convert::operation_pb(&op, password.as_deref()));
        if let Some(conn) = state.sessions.send_on(&op.node, msg) {
            *busy += 1;
            op.state = OpState::Dispatched;
            op.dispatched_ms = Some(now);
            op.dispatched_conn = conn;
            state.store.put_op(&op)?;
            state.metrics.op_dispatched();
            emit(state, &op, "dispatched");
        }
    }
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
        .next_due_ms
        .store(due, std::sync::atomic::Ordering::Relaxed);
    let took = started.elapsed();
    state.metrics.reconcile_took(took.as_secs_f64());
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

/// Records a failed operation for a container that cannot be created from its node's template file.
fn fail_for_template(
    state: &State,
    k: &Key,
    d: &DesiredContainer,
    error: String,
    now: Millis,
) -> Result<(), StoreError> {
    let op = Operation {
        id: crate::model::new_id(),
        fleet: k.0.clone(),
        container: k.1.clone(),
        node: d.node.clone(),
        vm_id: 0,
        kind: OperationKind::SeedTemplate {
            name: d.container.template.clone(),
            template: d.template.clone(),
        },
        attempt: state.config.reconciler.max_attempts,
        state: OpState::Failed,
        created_ms: now,
        not_before_ms: now,
        dispatched_ms: None,
        dispatched_conn: 0,
        deadline_ms: None,
        finished_ms: Some(now),
        last_error: Some(error),
        revision: d.revision,
        reason: format!("template {} differs between nodes", d.container.template),
    };
    tracing::warn!(fleet = %op.fleet, container = %op.container, node = %op.node,
        error = op.last_error.as_deref().unwrap_or(""), "template digest conflict");
    state.store.put_op(&op)?;
    state.metrics.op_finished(op.kind.name(), "failed");
    emit(state, &op, "failed");
    Ok(())
}

/// Runs passes until `shutdown`: at once when woken by a change; on the `interval_ms` tick only when something
/// changed since the last pass, something timed fell due (a backoff, a deadline, an acknowledgement wait), or
/// `IDLE_PASS_EVERY` ticks went by (a safety net); and never more than half of the time: after a pass that took
/// `d`, the next one waits at least `d`. A pass holds the operations lock; at 10,000 containers passes woken by
/// every finished operation ran back to back and starved the handling of the agents' results, and an idle
/// controller spent a fifth of a core re-reading an unchanged world every second. Passes run on the blocking
/// pool, not on an async worker.
pub async fn run(state: std::sync::Arc<State>, shutdown: impl Future<Output = ()>) {
    use std::sync::atomic::Ordering;
    tokio::pin!(shutdown);
    let interval = std::time::Duration::from_millis(state.config.reconciler.interval_ms);
    let mut last_prune = 0;
    let mut rest = std::time::Duration::ZERO;
    let mut seen_generation = None;
    let mut idle_ticks = 0u32;
    loop {
        let woken = tokio::select! {
            _ = &mut shutdown => return,
            _ = state.wake.notified() => true,
            _ = tokio::time::sleep(interval) => false,
        };
        let now = now_ms();
        if !woken
            && seen_generation == Some(state.generation())
            && now < state.next_due_ms.load(Ordering::Relaxed)
            && idle_ticks + 1 < IDLE_PASS_EVERY
        {
            idle_ticks += 1;
            continue;
        }
        idle_ticks = 0;
        tokio::select! {
            _ = &mut shutdown => return,
            _ = tokio::time::sleep(rest) => {}
        }
        let now = now_ms();
        let st = state.clone();
        let started = Instant::now();
        match tokio::task::spawn_blocking(move || pass(&st, now)).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::error!(error = %e, "reconcile pass failed"),
            Err(e) => tracing::error!(error = %e, "reconcile pass panicked"),
        }
        rest = started.elapsed();
        seen_generation = Some(state.generation());
        if now - last_prune > 3_600_000 {
            last_prune = now;
            if let Err(e) = state
                .store
                .prune_ops(now.saturating_sub(7 * 24 * 3_600_000))
            {
                tracing::warn!(error = %e, "pruning old operations failed");
            }
        }
    }
}

/// How long a created container must be missing from every node's report before it is created again.
pub const VANISHED_GRACE_MS: Millis = 15_000;

/// With nothing changed and nothing due, a pass still runs every this many `interval_ms` ticks.
const IDLE_PASS_EVERY: u32 = 5;

/// Broadcasts a progress event for Watch.
pub fn emit(state: &State, op: &Operation, message: &str) {
    state.bump();
    let _ = state.events.send(pb::FleetEvent {
        unix_ms: now_ms() as i64,
        fleet: op.fleet.clone(),
        container: op.container.clone(),
        vm_id: op.vm_id,
        node: op.node.clone(),
        op_id: op.id.clone(),
        kind: convert::op_kind_pb(&op.kind) as i32,
        op_state: convert::op_state_pb(op.state) as i32,
        message: message.to_string(),
        error: op.last_error.clone().unwrap_or_default(),
        revision: op.revision,
        ..Default::default()
    });
}

/// Applies an operation update from `node`. Returns whether it was final (so the agent gets an Ack).
pub fn on_update(state: &State, node: &str, u: &pb::OperationUpdate) -> Result<bool, StoreError> {
    let _ops = state.ops_lock.lock().unwrap_or_else(|p| p.into_inner());
    let Some(mut op) = state.store.op(&u.op_id)? else {
        tracing::warn!(node, op = %u.op_id, "update for an unknown operation ignored");
        return Ok(true);
    };
    if op.node != node {
        tracing::warn!(node, op = %u.op_id, owner = %op.node, "update for another node's operation ignored");
        return Ok(false);
    }
    let now = now_ms();
    if let Some(c) = &u.container {
        let obs = convert::observed_from_pb(node, c);
        state.store.set_observed(node, obs.vm_id, Some(&obs))?;
    }
    let st = pb::OperationState::try_from(u.state).unwrap_or(pb::OperationState::Unspecified);
    let final_state = match st {
        pb::OperationState::Succeeded => OpState::Succeeded,
        pb::OperationState::Failed | pb::OperationState::Cancelled => OpState::Failed,
        _ => {
            if op.state.is_active() {
                op.state = OpState::Running;
                state.store.put_op(&op)?;
                emit(state, &op, &u.message);
            }
            return Ok(false);
        }
    };
    if !op.state.is_active() {
        return Ok(true); // a late or repeated result; already settled
    }
    op.state = final_state;
    op.finished_ms = Some(now);
    let conflict = if final_state == OpState::Succeeded {
        record_template_digest(state, node, &op, &u.template_sha256, now)?
    } else {
        None
    };
    if let Some(error) = conflict {
        // The seed worked, but this node's file is not the one other nodes have: failed for good.
        op.state = OpState::Failed;
        op.attempt = op.attempt.max(state.config.reconciler.max_attempts);
        op.last_error = Some(error);
    } else if final_state == OpState::Failed {
        op.last_error = Some(if u.error.is_empty() {
            "failed".into()
        } else {
            u.error.clone()
        });
    } else {
        apply_success(state, &op, u.container.is_some())?;
    }
    state.store.put_op(&op)?;
    state.metrics.op_finished(op.kind.name(), op.state.as_str());
    tracing::info!(op = %op.id, node, kind = op.kind.name(), state = op.state.as_str(),
        error = op.last_error.as_deref().unwrap_or(""), "operation finished");
    emit(state, &op, op.state.as_str());
    state.changed();
    Ok(true)
}

/// After a seed from a URL: records the sha256 the agent reported for `node`; returns the error when the
/// template has no checksum and another node reported a different file first.
fn record_template_digest(
    state: &State,
    node: &str,
    op: &Operation,
    sha256: &str,
    now: Millis,
) -> Result<Option<String>, StoreError> {
    let OperationKind::SeedTemplate { name, template } = &op.kind else {
        return Ok(None);
    };
    let TemplateSource::Url { url, .. } = &template.source else {
        return Ok(None);
    };
    if sha256.is_empty() {
        return Ok(None); // an agent that does not report digests
    }
    let sha256 = sha256.to_ascii_lowercase();
    state.store.update_node(node, |n| {
        let keep = n
            .template_digests
            .get(url)
            .is_some_and(|d| d.sha256 == sha256);
        if !keep {
            n.template_digests.insert(
                url.clone(),
                TemplateDigest {
                    template: name.clone(),
                    sha256: sha256.clone(),
                    recorded_ms: now,
                },
            );
        }
    })?;
    tracing::info!(node, template = %name, %url, %sha256, "template digest recorded");
    if unpinned_url(template).is_none() {
        return Ok(None);
    }
    let nodes = state.store.nodes()?;
    Ok(digest_conflict(&nodes, node, url).map(|c| c.message(name, url)))
}

fn apply_success(state: &State, op: &Operation, observed_sent: bool) -> Result<(), StoreError> {
    let store = &state.store;
    match &op.kind {
        OperationKind::Create {
            container,
            template,
        } => {
            store.put_applied(&AppliedContainer {
                fleet: op.fleet.clone(),
                name: op.container.clone(),
                node: op.node.clone(),
                vm_id: op.vm_id,
                container: (**container).clone(),
                template: template.clone(),
            })?;
            crate::hooks::on_created(state, op, container);
            if !observed_sent {
                // Until the next observation, assume it is as created, so the next pass does not create again.
                let obs = ObservedContainer {
                    node: op.node.clone(),
                    vm_id: op.vm_id,
                    hostname: container.hostname.clone(),
                    running: container.state.is_running(),
                    managed: Some(ManagedBy {
                        fleet: op.fleet.clone(),
                        name: op.container.clone(),
                    }),
                    cores: container.cores,
                    memory_mib: container.memory,
                    swap_mib: container.swap,
                    disk_gib: container.disk_size,
                    ..Default::default()
                };
                store.set_observed(&op.node, op.vm_id, Some(&obs))?;
            }
        }
        OperationKind::Update {
            container,
            template,
            ..
        } => {
            store.put_applied(&AppliedContainer {
                fleet: op.fleet.clone(),
                name: op.container.clone(),
                node: op.node.clone(),
                vm_id: op.vm_id,
                container: (**container).clone(),
                template: template.clone(),
            })?;
        }
        OperationKind::Destroy => {
            crate::hooks::on_destroyed(state, op);
            if store
                .applied(&op.fleet, &op.container)?
                .is_some_and(|a| a.node == op.node && a.vm_id == op.vm_id)
            {
                store.remove_applied(&op.fleet, &op.container)?;
            }
            store.set_observed(&op.node, op.vm_id, None)?;
        }
        OperationKind::SeedTemplate { name, template } => {
            let volid = convert::template_volid(template);
            store.update_node(&op.node, |n| {
                n.seeded.insert(name.clone(), volid.clone());
            })?;
        }
        OperationKind::Migrate { target, restart } => {
            // Until the target reports it, assume it is there as it was (the source may already have reported
            // it gone), so the next pass neither recreates it on the target nor moves it again.
            let applied = store
                .applied(&op.fleet, &op.container)?
                .filter(|a| a.node == op.node && a.vm_id == op.vm_id);
            let seen = store
                .all_observed()?
                .into_iter()
                .find(|o| o.node == op.node && o.vm_id == op.vm_id);
            let moved = seen.or_else(|| {
                applied.as_ref().map(|a| ObservedContainer {
                    node: op.node.clone(),
                    vm_id: op.vm_id,
                    hostname: a.container.hostname.clone(),
                    running: *restart,
                    managed: Some(ManagedBy {
                        fleet: op.fleet.clone(),
                        name: op.container.clone(),
                    }),
                    cores: a.container.cores,
                    memory_mib: a.container.memory,
                    swap_mib: a.container.swap,
                    disk_gib: a.container.disk_size,
                    ..Default::default()
                })
            });
            let already = store
                .all_observed()?
                .into_iter()
                .any(|o| o.node == *target && o.vm_id == op.vm_id);
            store.set_observed(&op.node, op.vm_id, None)?;
            if let (Some(mut o), false) = (moved, already) {
                o.node = target.clone();
                store.set_observed(target, op.vm_id, Some(&o))?;
            }
            if let Some(mut a) = applied {
                a.node = target.clone();
                a.container.node = Some(target.clone());
                store.put_applied(&a)?;
            }
        }
        OperationKind::Start => crate::hooks::on_started(state, op),
        OperationKind::Resize { .. } | OperationKind::Stop => {}
    }
    Ok(())
}

/// A node's stream ended (or a new one began): its unfinished operations go back to pending, to be re-sent
/// (same id: the agent runs an id at most once) when it is connected.
pub fn requeue_node(
    state: &State,
    node: &str,
    except: &BTreeSet<String>,
) -> Result<(), StoreError> {
    let _ops = state.ops_lock.lock().unwrap_or_else(|p| p.into_inner());
    for mut op in state.store.ops()? {
        if op.node == node
            && matches!(op.state, OpState::Dispatched | OpState::Running)
            && !except.contains(&op.id)
        {
            op.state = OpState::Pending;
            op.deadline_ms = None;
            state.store.put_op(&op)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use crate::store::{Store, SubmitTx};
    use crate::testutil::{container, node, template};
    use std::sync::Arc;

    fn state() -> Arc<State> {
        let mut config = Config::default();
        config.reconciler.backoff_base_ms = 0;
        config.reconciler.backoff_max_ms = 0;
        let store = Store::temporary().unwrap();
        let mut n = node("n1", 8000);
        n.last_seen_ms = now_ms();
        n.inventory.templates = vec!["local:vztmpl/ubuntu.tar.xz".into()];
        n.template_digests.insert(
            "http://127.0.0.1/ubuntu.tar.xz".into(),
            crate::model::TemplateDigest {
                template: "ubuntu".into(),
                sha256: "aa".repeat(32),
                recorded_ms: 1,
            },
        );
        store.update_node("n1", |r| *r = n.clone()).unwrap();
        let ca = pxfleet_tls::Ca::generate("test").unwrap();
        State::new(config, store, ca, Default::default())
    }

    fn submit(st: &State, containers: Vec<DesiredContainer>) {
        let rev = st
            .store
            .fleet("dev")
            .unwrap()
            .map(|f| f.revision)
            .unwrap_or(0);
        st.store
            .submit(&SubmitTx {
                fleet: "dev".into(),
                expected_revision: Some(rev),
                author: "test".into(),
                time_ms: 0,
                spec: serde_json::json!({}),
                summary: String::new(),
                desired: containers,
                secrets: [("web".to_string(), "pw-123456".to_string())].into(),
                audit_action: "submit".into(),
                file_name: String::new(),
                source_sha256: String::new(),
                retry: Vec::new(),
            })
            .unwrap();
    }

    fn web(template_name: &str) -> DesiredContainer {
        let mut c = container("web");
        c.template = template_name.into();
        let mut t = template();
        if template_name != "ubuntu" {
            t.source = pxfleet_spec::TemplateSource::Pveam {
                appliance: "ubuntu.tar.xz".into(),
            };
        }
        DesiredContainer {
            fleet: "dev".into(),
            name: "web".into(),
            node: "n1".into(),
            vm_id: 1000,
            container: c,
            template: t,
            revision: 0,
            node_pinned: true,
        }
    }

    /// Runs a pass and returns the one operation dispatched to n1.
    fn dispatched(
        st: &State,
        rx: &mut tokio::sync::mpsc::Receiver<crate::agents::Outbound>,
    ) -> pb::Operation {
        pass(st, now_ms()).unwrap();
        match rx
            .try_recv()
            .expect("an operation was dispatched")
            .unwrap()
            .msg
        {
            Some(pb::controller_message::Msg::Operation(op)) => op,
            other => panic!("not an operation: {other:?}"),
        }
    }

    fn finish(st: &State, op: &pb::Operation, ok: bool, running: bool) {
        let container =
            (ok && matches!(op.kind, Some(pb::operation::Kind::Create(_)))).then(|| {
                pb::ObservedContainer {
                    vm_id: op.vm_id,
                    power: if running {
                        pb::PowerState::Running
                    } else {
                        pb::PowerState::Stopped
                    } as i32,
                    managed: true,
                    config: match &op.kind {
                        Some(pb::operation::Kind::Create(c)) => c.spec.clone(),
                        _ => None,
                    },
                    ..Default::default()
                }
            });
        let u = pb::OperationUpdate {
            op_id: op.op_id.clone(),
            state: if ok {
                pb::OperationState::Succeeded
            } else {
                pb::OperationState::Failed
            } as i32,
            error: if ok {
                String::new()
            } else {
                "pct create failed: boom".into()
            },
            container,
            ..Default::default()
        };
        assert!(on_update(st, "n1", &u).unwrap());
    }

    fn kind(op: &pb::Operation) -> &'static str {
        match op.kind {
            Some(pb::operation::Kind::Create(_)) => "create",
            Some(pb::operation::Kind::Destroy(_)) => "destroy",
            Some(pb::operation::Kind::Update(_)) => "update",
            Some(pb::operation::Kind::Start(_)) => "start",
            _ => "other",
        }
    }

    fn ops_in(rx: &mut tokio::sync::mpsc::Receiver<crate::agents::Outbound>) -> Vec<pb::Operation> {
        let mut out = Vec::new();
        while let Ok(m) = rx.try_recv() {
            if let Some(pb::controller_message::Msg::Operation(op)) = m.unwrap().msg {
                out.push(op);
            }
        }
        out
    }

    fn many(n: u32) -> Vec<DesiredContainer> {
        (0..n)
            .map(|i| {
                let mut d = web("ubuntu");
                d.name = format!("c{i:03}");
                d.container = container(&d.name);
                d.vm_id = 1000 + i;
                d
            })
            .collect()
    }

    /// A large submit hands an agent at most `dispatch_window` operations; each result lets the next one
    /// go, and all of them are dispatched in the end.
    #[test]
    fn dispatch_is_windowed_per_node_and_drains() {
        let st = state();
        let window = st.config.reconciler.dispatch_window as usize;
        let (_, mut rx) = st.sessions.register("n1");
        submit(&st, many(30));
        pass(&st, now_ms()).unwrap();
        let first = ops_in(&mut rx);
        assert_eq!(first.len(), window, "only the window is in flight");
        let mut created: BTreeSet<u32> = first.iter().map(|o| o.vm_id).collect();
        let mut in_flight = first;
        let mut rounds = 0;
        while let Some(op) = in_flight.pop() {
            rounds += 1;
            assert!(rounds < 1000, "does not settle");
            finish(&st, &op, true, true);
            pass(&st, now_ms()).unwrap();
            for next in ops_in(&mut rx) {
                if kind(&next) == "create" {
                    assert!(created.insert(next.vm_id), "one create per container");
                }
                in_flight.push(next);
            }
            assert!(in_flight.len() <= window, "never more than the window");
        }
        assert_eq!(created.len(), 30, "every container's create was dispatched");
    }

    /// An operation the agent never acknowledged is sent again with the same id once the stream it went out
    /// on is gone (the agent reconnected); on the live stream it is never re-sent, however long the
    /// acknowledgement takes (the stream delivers in order, the controller may just be behind in reading).
    #[test]
    fn unacknowledged_operations_are_sent_again_only_when_their_stream_is_gone() {
        let st = state();
        let (_, mut rx) = st.sessions.register("n1");
        submit(&st, many(2));
        let t0 = now_ms();
        pass(&st, t0).unwrap();
        let sent = ops_in(&mut rx);
        assert_eq!(sent.len(), 2);
        // the agent acknowledges the first only
        let ack = pb::OperationUpdate {
            op_id: sent[0].op_id.clone(),
            state: pb::OperationState::Running as i32,
            message: "received".into(),
            ..Default::default()
        };
        assert!(!on_update(&st, "n1", &ack).unwrap());
        // long past the acknowledgement deadline, node silent, same stream: nothing is re-sent
        let later = t0 + (st.config.reconciler.ack_timeout_secs * 10) * 1000;
        pass(&st, later).unwrap();
        assert!(
            ops_in(&mut rx).is_empty(),
            "the live stream is not re-sent to"
        );
        let resent = |st: &State| {
            st.metrics
                .render(&Default::default())
                .lines()
                .any(|l| l.starts_with("pxfleet_operations_resent_total") && !l.ends_with(" 0"))
        };
        assert!(!resent(&st));
        // the agent reconnects (a new stream) without that operation in its hello: sent again on the new one
        let (_, mut rx2) = st.sessions.register("n1");
        pass(&st, later + 1_000).unwrap();
        let again = ops_in(&mut rx2);
        assert_eq!(again.len(), 1, "{again:?}");
        assert_eq!(again[0].op_id, sent[1].op_id, "the same operation, same id");
        assert!(ops_in(&mut rx).is_empty());
        assert!(resent(&st));
    }

    /// A node that heartbeats but whose operations do not move is shown stalled, with the reason.
    #[test]
    fn a_node_whose_operations_do_not_move_is_stalled() {
        let st = state();
        let (_, mut rx) = st.sessions.register("n1");
        submit(&st, many(3));
        let t0 = now_ms();
        pass(&st, t0).unwrap();
        assert_eq!(ops_in(&mut rx).len(), 3);
        let ops = st.store.ops().unwrap();
        let mine: Vec<&Operation> = ops.iter().collect();
        let mut n = st.store.node("n1").unwrap().unwrap();
        let stall = st.config.reconciler.stall_secs * 1000;
        n.last_seen_ms = t0 + stall + 5_000; // heartbeats keep coming
        let (status, reason) = st.node_health(&n, &mine, t0 + 1_000);
        assert_eq!(status, crate::model::NodeStatus::Ready, "{reason}");
        let (status, reason) = st.node_health(&n, &mine, t0 + stall + 5_000);
        assert_eq!(status, crate::model::NodeStatus::Stalled);
        assert!(reason.contains("3 operation(s) in flight"), "{reason}");
        assert!(reason.contains("create of dev/c00"), "{reason}");
        // an update from the agent counts as movement
        n.last_op_update_ms = t0 + stall;
        let (status, _) = st.node_health(&n, &mine, t0 + stall + 5_000);
        assert_eq!(status, crate::model::NodeStatus::Ready);
    }

    #[test]
    fn create_replace_remove_cycle() {
        let st = state();
        let (_, mut rx) = st.sessions.register("n1");
        submit(&st, vec![web("ubuntu")]);
        let op = dispatched(&st, &mut rx);
        assert_eq!(kind(&op), "create");
        finish(&st, &op, true, true);
        // converged: nothing more to do, status running
        pass(&st, now_ms()).unwrap();
        assert!(rx.try_recv().is_err());
        assert_eq!(
            container_rows(&st).unwrap()[0].status,
            ContainerStatus::Running
        );
        // template changed: destroy, then create
        submit(&st, vec![web("other")]);
        let op = dispatched(&st, &mut rx);
        assert_eq!(kind(&op), "destroy");
        finish(&st, &op, true, true);
        let op = dispatched(&st, &mut rx);
        assert_eq!(kind(&op), "create");
        finish(&st, &op, true, true);
        // removed from the fleet: destroyed, and then forgotten
        submit(&st, vec![]);
        let op = dispatched(&st, &mut rx);
        assert_eq!(kind(&op), "destroy");
        finish(&st, &op, true, true);
        pass(&st, now_ms()).unwrap();
        assert!(rx.try_recv().is_err());
        assert!(container_rows(&st).unwrap().is_empty());
        assert!(st.store.all_applied().unwrap().is_empty());
    }

    /// A created container missing from every report (between two nodes while migrated by hand, or deleted
    /// by hand) is created again only once it stayed missing for the grace period.
    #[test]
    fn a_vanished_container_is_recreated_only_after_the_grace_period() {
        let st = state();
        let (_, mut rx) = st.sessions.register("n1");
        submit(&st, vec![web("ubuntu")]);
        let op = dispatched(&st, &mut rx);
        finish(&st, &op, true, true);
        let t0 = now_ms();
        pass(&st, t0).unwrap();
        assert!(rx.try_recv().is_err());
        st.store.set_observed("n1", op.vm_id, None).unwrap();
        pass(&st, t0 + 1).unwrap();
        pass(&st, t0 + VANISHED_GRACE_MS - 1_000).unwrap();
        assert!(
            ops_in(&mut rx).is_empty(),
            "no create while it may be between nodes"
        );
        pass(&st, t0 + VANISHED_GRACE_MS + 2).unwrap();
        let again = ops_in(&mut rx);
        assert_eq!(again.len(), 1, "{again:?}");
        assert_eq!(again[0].vm_id, op.vm_id, "recreated under its vm_id");
    }

    #[test]
    fn failures_retry_then_fail_with_the_agents_error() {
        let st = state();
        let (_, mut rx) = st.sessions.register("n1");
        submit(&st, vec![web("ubuntu")]);
        let mut attempts = vec![];
        for _ in 0..3 {
            let op = dispatched(&st, &mut rx);
            attempts.push(op.attempt);
            finish(&st, &op, false, false);
        }
        assert_eq!(attempts, vec![1, 2, 3]);
        pass(&st, now_ms()).unwrap();
        assert!(rx.try_recv().is_err(), "no fourth attempt");
        let row = &container_rows(&st).unwrap()[0];
        assert_eq!(row.status, ContainerStatus::Failed);
        assert_eq!(row.error().as_deref(), Some("pct create failed: boom"));
        // a new submit that changes the container starts over
        let mut w = web("ubuntu");
        w.container.memory = 1024;
        submit(&st, vec![w]);
        assert_eq!(dispatched(&st, &mut rx).attempt, 1);
    }

    #[test]
    fn an_update_that_changes_nothing_is_not_repeated_in_a_loop() {
        let st = state();
        let (_, mut rx) = st.sessions.register("n1");
        submit(&st, vec![web("ubuntu")]);
        let op = dispatched(&st, &mut rx);
        finish(&st, &op, true, true);
        // the node keeps reporting 512 MiB although 1024 is desired and every update "succeeds"
        let mut w = web("ubuntu");
        w.container.memory = 1024;
        submit(&st, vec![w]);
        let mut updates = 0;
        for _ in 0..10 {
            pass(&st, now_ms()).unwrap();
            while let Ok(Ok(m)) = rx.try_recv() {
                if let Some(pb::controller_message::Msg::Operation(op)) = m.msg {
                    assert_eq!(kind(&op), "update");
                    updates += 1;
                    on_update(
                        &st,
                        "n1",
                        &pb::OperationUpdate {
                            op_id: op.op_id,
                            state: pb::OperationState::Succeeded as i32,
                            ..Default::default()
                        },
                    )
                    .unwrap();
                }
            }
        }
        assert_eq!(updates, 3, "max_attempts bounds repeated no-op updates");
    }

    #[test]
    fn disconnected_node_keeps_operations_pending_and_stopped_container_is_started() {
        let st = state();
        submit(&st, vec![web("ubuntu")]);
        pass(&st, now_ms()).unwrap();
        let ops = st.store.ops().unwrap();
        assert_eq!((ops.len(), ops[0].state), (1, OpState::Pending));
        let (_, mut rx) = st.sessions.register("n1");
        let op = dispatched(&st, &mut rx);
        assert_eq!(op.op_id, ops[0].id);
        finish(&st, &op, true, false);
        // observed stopped: start it (repair)
        let op = dispatched(&st, &mut rx);
        assert_eq!(kind(&op), "start");
    }

    /// What the agent reports for `spec` once PVE stored it: tags lower-cased and sorted without the mark tag,
    /// the description with the managed-by line and a trailing newline, MACs in lower case, `cpuunits: 100`.
    fn reported(spec: &pb::ContainerSpec) -> pb::ObservedContainer {
        let mut cfg = spec.clone();
        cfg.password = None;
        cfg.template_volid.clear();
        cfg.tags = pxfleet_spec::observed::normalise_tags(&cfg.tags);
        cfg.description = format!(
            "{}\nmanaged-by: pxfleet fleet={} name={}\n",
            cfg.description, cfg.fleet, cfg.name
        );
        for i in &mut cfg.interfaces {
            i.mac = if i.mac.is_empty() {
                format!("bc:24:11:00:00:{:02x}", i.index)
            } else {
                i.mac.to_lowercase()
            };
        }
        cfg.cpu_units = cfg.cpu_units.or(Some(100));
        pb::ObservedContainer {
            vm_id: cfg.vm_id,
            power: pb::PowerState::Running as i32,
            managed: true,
            config: Some(cfg),
            ..Default::default()
        }
    }

    #[test]
    fn drift_on_the_node_is_repaired_naming_the_fields_and_normalised_values_do_not_count() {
        let st = state();
        let (_, mut rx) = st.sessions.register("n1");
        let mut w = web("ubuntu");
        w.container.tags = vec!["Web".into(), "db".into()];
        w.container.description = Some("Web server".into());
        w.container.interfaces[0].mac_address = Some("BC:24:11:AA:BB:CC".parse().unwrap());
        w.container.interfaces[0].mtu = Some(1400);
        submit(&st, vec![w]);
        let op = dispatched(&st, &mut rx);
        let Some(pb::operation::Kind::Create(create)) = &op.kind else {
            panic!("expected a create: {op:?}")
        };
        let spec = create.spec.clone().unwrap();
        finish(&st, &op, true, true);
        // the node reports it as PVE normalises it: equal, nothing to do, not drifted
        let obs = convert::observed_from_pb("n1", &reported(&spec));
        st.store.set_observed("n1", 1000, Some(&obs)).unwrap();
        for _ in 0..3 {
            pass(&st, now_ms()).unwrap();
            assert!(
                next_op(&mut rx).is_none(),
                "no flapping on normalised values"
            );
        }
        assert!(!container_rows(&st).unwrap()[0].drifted);

        // changed by hand on the node: tags, memory, the bridge, the MTU and onboot
        let mut o = reported(&spec);
        let cfg = o.config.as_mut().unwrap();
        cfg.tags = vec!["db".into()];
        cfg.memory_mib = 1024;
        cfg.interfaces[0].bridge = "vmbr1".into();
        cfg.interfaces[0].mtu = None;
        cfg.onboot = true;
        st.store
            .set_observed("n1", 1000, Some(&convert::observed_from_pb("n1", &o)))
            .unwrap();
        assert!(container_rows(&st).unwrap()[0].drifted);
        let op = dispatched(&st, &mut rx);
        let Some(pb::operation::Kind::Update(u)) = &op.kind else {
            panic!("expected an update: {op:?}")
        };
        let mut fields = u.changed_fields.clone();
        fields.sort();
        assert_eq!(
            fields,
            ["bridge", "memory", "mtu", "start_on_boot", "tags"],
            "{u:?}"
        );
        let stored = st.store.op(&op.op_id).unwrap().unwrap();
        for part in [
            "repair: ",
            "memory 1024 -> 512",
            "bridge vmbr1 -> vmbr0",
            "mtu none -> 1400",
            r#"tags ["db"] -> ["db","web"]"#,
        ] {
            assert!(
                stored.reason.contains(part),
                "{part:?} in {:?}",
                stored.reason
            );
        }
        // the update carries the whole desired spec; once the node reports it back, nothing is left to do
        let u = pb::OperationUpdate {
            op_id: op.op_id.clone(),
            state: pb::OperationState::Succeeded as i32,
            container: Some(reported(&spec)),
            ..Default::default()
        };
        assert!(on_update(&st, "n1", &u).unwrap());
        pass(&st, now_ms()).unwrap();
        assert!(next_op(&mut rx).is_none());
        assert!(!container_rows(&st).unwrap()[0].drifted);
    }

    fn seed_result(st: &State, node: &str, op: &pb::Operation, sha256: &str) {
        let u = pb::OperationUpdate {
            op_id: op.op_id.clone(),
            state: pb::OperationState::Succeeded as i32,
            message: "template present".into(),
            template_sha256: sha256.into(),
            ..Default::default()
        };
        assert!(on_update(st, node, &u).unwrap());
    }

    fn next_op(
        rx: &mut tokio::sync::mpsc::Receiver<crate::agents::Outbound>,
    ) -> Option<pb::Operation> {
        match rx.try_recv().ok()?.unwrap().msg {
            Some(pb::controller_message::Msg::Operation(op)) => Some(op),
            _ => None,
        }
    }

    #[test]
    fn unpinned_template_digests_are_recorded_and_a_differing_node_fails() {
        let st = state();
        let mut n2 = node("n2", 8000);
        n2.last_seen_ms = now_ms();
        st.store.update_node("n2", |r| *r = n2.clone()).unwrap();
        let (_, mut rx1) = st.sessions.register("n1");
        let (_, mut rx2) = st.sessions.register("n2");
        let url = "http://127.0.0.1/u.tar.xz";
        let on = |name: &str, node: &str, vm_id: u32| {
            let mut d = web("ubuntu");
            d.name = name.into();
            d.container.name = name.into();
            d.container.template = "u.tar.xz".into();
            d.template.source = pxfleet_spec::TemplateSource::Url {
                url: url.into(),
                checksum: None,
            };
            d.node = node.into();
            d.vm_id = vm_id;
            d
        };
        submit(
            &st,
            vec![
                on("a", "n1", 1000),
                on("b", "n2", 1001),
                on("c", "n2", 1002),
            ],
        );
        pass(&st, now_ms()).unwrap();
        // each node seeds once (the cached file on n1 is not trusted without its digest)
        let s1 = next_op(&mut rx1).expect("seed on n1");
        let s2 = next_op(&mut rx2).expect("seed on n2");
        assert!(
            next_op(&mut rx2).is_none(),
            "one seed per template and node"
        );
        let Some(pb::operation::Kind::SeedTemplate(seed)) = &s1.kind else {
            panic!("expected a seed: {s1:?}")
        };
        assert_eq!((seed.url.as_str(), seed.checksum.as_ref()), (url, None));
        seed_result(&st, "n1", &s1, &"aa".repeat(32));
        seed_result(&st, "n2", &s2, &"BB".repeat(32));
        let n1 = st.store.node("n1").unwrap().unwrap();
        assert_eq!(n1.template_digests[url].sha256, "aa".repeat(32));
        let n2 = st.store.node("n2").unwrap().unwrap();
        assert_eq!(n2.template_digests[url].sha256, "bb".repeat(32));
        // n1 reported first: its container is created; n2's containers fail, naming both digests
        pass(&st, now_ms()).unwrap();
        let c = next_op(&mut rx1).expect("create on n1");
        assert_eq!(kind(&c), "create");
        pass(&st, now_ms()).unwrap();
        assert!(next_op(&mut rx2).is_none(), "nothing is created on n2");
        let rows = container_rows(&st).unwrap();
        for name in ["b", "c"] {
            let row = rows.iter().find(|r| r.name == name).unwrap();
            assert_eq!(row.status, ContainerStatus::Failed, "{name}");
            let e = row.error().unwrap();
            assert!(
                e.contains(&"aa".repeat(32)) && e.contains(&"bb".repeat(32)),
                "{e}"
            );
            assert!(e.contains("sha256:"), "says how to pin: {e}");
        }
        // still failed (no new operations) on later passes
        let before = st.store.ops().unwrap().len();
        pass(&st, now_ms()).unwrap();
        assert_eq!(st.store.ops().unwrap().len(), before);
    }

    #[test]
    fn template_readiness_by_source() {
        let mut n = node("n1", 8000);
        let mut t = template();
        n.inventory.templates = vec!["local:vztmpl/ubuntu.tar.xz".into()];
        // without checksum: a cached file is not enough, its digest must be known
        assert!(!template_ready_on(&n, "ubuntu", &t));
        n.template_digests.insert(
            "http://127.0.0.1/ubuntu.tar.xz".into(),
            crate::model::TemplateDigest {
                template: "ubuntu".into(),
                sha256: "aa".repeat(32),
                recorded_ms: 1,
            },
        );
        assert!(template_ready_on(&n, "ubuntu", &t));
        // pinned: cached is enough, unless the node reported another digest
        t.source = pxfleet_spec::TemplateSource::Url {
            url: "http://127.0.0.1/ubuntu.tar.xz".into(),
            checksum: Some(pxfleet_spec::Checksum::Sha256("aa".repeat(32))),
        };
        assert!(template_ready_on(&n, "ubuntu", &t));
        t.source = pxfleet_spec::TemplateSource::Url {
            url: "http://127.0.0.1/ubuntu.tar.xz".into(),
            checksum: Some(pxfleet_spec::Checksum::Sha256("cc".repeat(32))),
        };
        assert!(!template_ready_on(&n, "ubuntu", &t));
    }
}
