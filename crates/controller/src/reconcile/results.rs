//! What an agent reports back: an operation's result is recorded ([`on_update`]), a success updates the applied
//! and observed records ([`apply_success`]), a seed's digest is checked against other nodes, and a node's
//! unfinished operations go back to pending when its stream ends ([`requeue_node`]).

use std::collections::BTreeSet;

use pxfleet_spec::{Container, Template, TemplateSource};

use super::emit;
use crate::grpc::convert;
use crate::model::{
    AppliedContainer, ManagedBy, Millis, ObservedContainer, OpState, Operation, OperationKind,
    OperationUpdate, TemplateDigest, UpdateState,
};
use crate::state::State;
use crate::store::StoreError;
use crate::templates::{digest_conflict, unpinned_url};

/// Applies an operation update from `node`. Returns whether it was final (so the agent gets an Ack).
pub fn on_update(state: &State, node: &str, u: &OperationUpdate) -> Result<bool, StoreError> {
    let _ops = state.ops_lock.lock().unwrap_or_else(|p| p.into_inner());
    let Some(mut op) = state.store.op(&u.op_id)? else {
        tracing::warn!(node, op = %u.op_id, "update for an unknown operation ignored");
        return Ok(true);
    };
    if op.node != node {
        tracing::warn!(node, op = %u.op_id, owner = %op.node, "update for another node's operation ignored");
        return Ok(false);
    }
    let now = state.now_ms();
    if let Some(obs) = &u.container {
        state.store.set_observed(node, obs.vm_id, Some(obs))?;
    }
    let final_state = match u.state {
        UpdateState::Succeeded => OpState::Succeeded,
        UpdateState::Failed => OpState::Failed,
        UpdateState::Progress => {
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
    let was_in_flight = matches!(op.state, OpState::Dispatched | OpState::Running);
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
        if let OperationKind::Snapshot(s) = &mut op.kind {
            s.snapshots = u.snapshots.clone();
        }
    }
    state.store.put_op(&op)?;
    state.metrics.op_finished(op.kind.name(), op.state.as_str());
    tracing::info!(op = %op.id, node, kind = op.kind.name(), state = op.state.as_str(),
        error = op.last_error.as_deref().unwrap_or(""), "operation finished");
    emit(state, &op, op.state.as_str());
    if was_in_flight {
        // its slot in the node's window is free: the node's next operation goes now, not at the next pass
        super::dispatch::next_for(state, node, now)?;
    }
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

/// What a created or updated container now is, as the store keeps it.
fn applied_of(op: &Operation, container: &Container, template: &Template) -> AppliedContainer {
    AppliedContainer {
        fleet: op.fleet.clone(),
        name: op.container.clone(),
        node: op.node.clone(),
        vm_id: op.vm_id,
        container: container.clone(),
        template: template.clone(),
    }
}

fn apply_success(state: &State, op: &Operation, observed_sent: bool) -> Result<(), StoreError> {
    let store = &state.store;
    match &op.kind {
        OperationKind::Create {
            container,
            template,
        } => {
            store.put_applied(&applied_of(op, container, template))?;
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
            store.put_applied(&applied_of(op, container, template))?;
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
            let seen = store.observed(&op.node, op.vm_id)?;
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
            let already = store.observed(target, op.vm_id)?.is_some();
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
        OperationKind::Resize { .. } | OperationKind::Stop | OperationKind::Snapshot(_) => {}
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
