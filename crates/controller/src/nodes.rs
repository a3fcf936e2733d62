//! Nodes as `pxctl node` sees and changes them: the node view (health and why, container count), cordon and
//! uncordon, and drain (cordon, then move every movable container off: the moves are planned by
//! [`crate::drain::plan`] and applied by the reconciler). The gRPC handlers in [`crate::grpc::fleet_service`] only
//! authorise and convert.

use pxfleet_tls::Identity;

use crate::drain::DrainPlan;
use crate::error::{Error, Result};
use crate::model::{AuditEntry, NodeRecord, NodeStatus, ObservedContainer, Operation};
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
    let (status, mut status_reason) = state.node_health(n, &mine, state.now_ms());
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
    let snap = Snapshot::take(&state.store, "", |n| state.node_status(n))?;
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
