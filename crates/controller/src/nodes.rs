//! Nodes as `pxctl node` sees and changes them: the node view (health and why, container count), cordon and
//! uncordon, and drain (cordon, then move every movable container off: the moves are planned by
//! [`crate::drain::plan`] and applied by the reconciler). The gRPC handlers in [`crate::grpc::fleet_service`] only
//! authorise and convert.

use pxfleet_tls::Identity;

use crate::drain::DrainPlan;
use crate::error::{Error, Result};
use crate::model::{
    AuditEntry, Millis, NodeRecord, NodeStatus, ObservedContainer, OpState, Operation,
};
use crate::planning::Snapshot;
use crate::reconcile;
use crate::state::State;

/// A node with its health now.
#[derive(Debug, Clone)]
pub struct NodeView {
    pub record: NodeRecord,
    pub status: NodeStatus,
    /// Why the node is not ready (empty when it is).
    pub status_reason: String,
    /// Containers the node reports.
    pub container_count: u32,
}

/// The view of `n`, given every observed container and the active operations (of `n` or all nodes).
pub fn node_view(
    state: &State,
    n: &NodeRecord,
    observed: &[ObservedContainer],
    active: &[Operation],
) -> NodeView {
    let mine: Vec<&Operation> = active.iter().filter(|o| o.node == n.name).collect();
    let (status, mut status_reason) = crate::nodes::health(state, n, &mine, state.now_ms());
    if status == NodeStatus::Down {
        let serials = state.store.serials().unwrap_or_default();
        if let Some(why) = crate::identities::node_cert_problem(&serials, &n.name, state.now_ms()) {
            status_reason = why;
        }
    }
    NodeView {
        record: n.clone(),
        status,
        status_reason,
        container_count: observed.iter().filter(|o| o.node == n.name).count() as u32,
    }
}

/// Every enrolled node.
pub fn nodes(state: &State) -> Result<Vec<NodeView>> {
    let observed = state.store.all_observed()?;
    let active: Vec<Operation> = state
        .store
        .ops()?
        .into_iter()
        .filter(|o| o.state.is_active())
        .collect();
    Ok(state
        .store
        .nodes()?
        .iter()
        .map(|n| node_view(state, n, &observed, &active))
        .collect())
}

/// Cordons `node` with `cordon_reason` (nothing new is placed there), or uncordons it (`None`).
pub fn set_cordon(
    state: &State,
    by: Option<&Identity>,
    node: &str,
    cordon_reason: Option<&str>,
) -> Result<NodeView> {
    let cordoned = cordon_reason.is_some();
    if state.store.node(node)?.is_none() {
        return Err(Error::NotFound(format!("no node {node} is enrolled")));
    }
    let rec = state.store.update_node(node, |n| {
        n.cordoned = cordoned;
        n.cordon_reason = cordon_reason.unwrap_or_default().to_string();
    })?;
    state.store.audit(&AuditEntry {
        time_ms: state.now_ms(),
        actor: by.map(|i| i.uri()).unwrap_or_default(),
        action: if cordoned { "cordon" } else { "uncordon" }.into(),
        target: node.into(),
        detail: cordon_reason.unwrap_or_default().to_string(),
    })?;
    let observed = state.store.all_observed()?;
    let active: Vec<Operation> = state
        .store
        .ops()?
        .into_iter()
        .filter(|o| o.state.is_active() && o.node == node)
        .collect();
    Ok(node_view(state, &rec, &observed, &active))
}

/// Drains `node`: cordons it (`reason`, "drained" when empty), moves what can move, and runs a reconcile
/// pass so the moves are under way when the caller is answered.
pub async fn drain(
    state: &State,
    by: Option<&Identity>,
    node: &str,
    reason: &str,
) -> Result<(NodeView, DrainPlan)> {
    let reason = if reason.is_empty() { "drained" } else { reason };
    let _placing = state.placement_lock.lock().await;
    let info = set_cordon(state, by, node, Some(reason))?;
    let snap = Snapshot::take(&state.store, "", |n| crate::nodes::status(state, n))?;
    let plan = crate::drain::plan(&snap, node);
    for m in &plan.moves {
        state.store.move_desired(&m.fleet, &m.name, &m.to)?;
        tracing::info!(node = %node, fleet = %m.fleet, container = %m.name, to = %m.to, "drain: moving");
    }
    state.store.audit(&AuditEntry {
        time_ms: state.now_ms(),
        actor: by.map(|i| i.uri()).unwrap_or_default(),
        action: "drain".into(),
        target: node.to_string(),
        detail: format!("{} to move, {} left", plan.moves.len(), plan.stuck.len()),
    })?;
    reconcile::pass(state, state.now_ms())?;
    state.changed();
    Ok((info, plan))
}

/// A node's status: its record's, except that a node whose certificate was revoked is down at once.
pub fn status(state: &State, node: &NodeRecord) -> NodeStatus {
    if cert_revoked(state, node) {
        return NodeStatus::Down;
    }
    node.status(state.now_ms(), state.heartbeat_timeout_ms())
}

/// Whether the certificate the node's agent last connected with was revoked: its stream was closed then,
/// and it is down at once (not only once its heartbeats are missed).
fn cert_revoked(state: &State, node: &NodeRecord) -> bool {
    !node.cert_serial.is_empty()
        && pxfleet_tls::Serial::from_hex(&node.cert_serial)
            .is_ok_and(|s| pxfleet_tls::RevocationCheck::is_revoked(&*state.revocations, &s))
}

/// What `get nodes` shows: the record's status, except that a node whose operations in flight (`ops`: the
/// node's active operations) have not moved for `stall_secs` is `stalled`; with the reason in words.
pub fn health(
    state: &State,
    node: &NodeRecord,
    ops: &[&Operation],
    now: Millis,
) -> (NodeStatus, String) {
    if cert_revoked(state, node) {
        return (
            NodeStatus::Down,
            format!(
                "its certificate (serial {}) was revoked: its agent was cut off and is refused; enrol it again: \
                 `pxctl node token create --node {}`, then on the node `pxagent join --node {}` with that token",
                node.cert_serial, node.name, node.name
            ),
        );
    }
    let status = node.status(now, state.heartbeat_timeout_ms());
    match status {
        NodeStatus::Down if node.last_seen_ms == 0 => {
            (status, "its agent has never connected".into())
        }
        NodeStatus::Down => (
            status,
            format!(
                "no heartbeat for {} s (its operations wait for it)",
                now.saturating_sub(node.last_seen_ms) / 1000
            ),
        ),
        NodeStatus::Ready | NodeStatus::Cordoned | NodeStatus::Stalled => {
            let in_flight: Vec<&&Operation> = ops
                .iter()
                .filter(|o| matches!(o.state, OpState::Dispatched | OpState::Running))
                .collect();
            let Some(oldest) = in_flight.iter().min_by_key(|o| o.dispatched_ms) else {
                return (status, String::new());
            };
            let since = node
                .last_op_update_ms
                .max(oldest.dispatched_ms.unwrap_or(now));
            let quiet = now.saturating_sub(since);
            if quiet <= state.config.reconciler.stall_secs * 1000 {
                return (status, String::new());
            }
            (
                NodeStatus::Stalled,
                format!(
                    "{} operation(s) in flight and no update from its agent for {} s (oldest: {} of {}/{}, \
                     dispatched {} s ago); check pxagent on the node (journalctl -u pxagent)",
                    in_flight.len(),
                    quiet / 1000,
                    oldest.kind.name(),
                    oldest.fleet,
                    oldest.container,
                    now.saturating_sub(oldest.dispatched_ms.unwrap_or(now)) / 1000
                ),
            )
        }
    }
}
