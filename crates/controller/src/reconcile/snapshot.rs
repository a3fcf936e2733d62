//! `pxctl snapshot`: one snapshot operation (take, delete, roll back to, list) on one container, queued beside
//! the reconciler's own work. It waits its turn like any operation (one in flight per container) and does not
//! change the fleet's revision: after a rollback the container is what the snapshot was, and the next pass
//! repairs whatever differs from the file, as for any change made outside pxfleet.

use super::emit;
use crate::error::{Error, Result};
use crate::model::{Operation, OperationKind, SnapshotAction, SnapshotOp};
use crate::query::{load, pick};
use crate::state::State;

/// Queues `action` on container `name` of `fleet` and returns the operation (pending). Refused when the
/// container is not in the fleet's head revision, not (yet) on a node, locked by PVE, or has an operation in
/// flight; a snapshot name is checked as PVE checks it.
pub fn queue_snapshot(
    state: &State,
    actor: &str,
    fleet: &str,
    name: &str,
    action: SnapshotAction,
    snapshot: &str,
    description: &str,
) -> Result<Operation> {
    if action != SnapshotAction::List {
        pxfleet_pve::check_snapshot_name(0, snapshot).map_err(|_| {
            Error::InvalidArgument(format!(
                "snapshot name `{snapshot}`: a letter, then letters, digits, '_' or '-' (2 to 40 characters, \
                 PVE's pve-configid), and not `current` or `vzdump`"
            ))
        })?;
    }
    let _ops = state.ops_lock.lock().unwrap_or_else(|p| p.into_inner());
    let w = load(state)?;
    let k = (fleet.to_string(), name.to_string());
    let Some(d) = w.desired(&k) else {
        return Err(Error::NotFound(
            if w.desired.keys().any(|(f, _)| f == fleet) {
                format!("fleet {fleet} has no container {name} (pxctl get containers {fleet} lists them)")
            } else {
                format!("no fleet {fleet} (pxctl get fleets lists them)")
            },
        ));
    };
    if action != SnapshotAction::List && d.container.state.is_template() {
        return Err(Error::FailedPrecondition(format!(
            "container {name} of fleet {fleet} is a template (state: template): PVE takes, deletes and rolls back \
             no snapshots of a template"
        )));
    }
    if let Some(op) = w.latest(&k).filter(|op| op.state.is_active()) {
        return Err(Error::FailedPrecondition(format!(
            "container {name} of fleet {fleet} has a {} operation in flight ({}, {}): try again when it ends \
             (pxctl get operations {fleet})",
            op.kind.name(),
            op.id,
            op.state.as_str()
        )));
    }
    let Some(o) = pick(w.observed(&k), Some(d), w.applied(&k)) else {
        return Err(Error::FailedPrecondition(format!(
            "container {name} of fleet {fleet} is not on a node yet: nothing to snapshot"
        )));
    };
    if o.managed
        .as_ref()
        .map(|m| (m.fleet.as_str(), m.name.as_str()))
        != Some((fleet, name))
    {
        return Err(Error::FailedPrecondition(format!(
            "the container at vm_id {} on {} is not marked as {name} of fleet {fleet}: submit the fleet (or adopt \
             it) first",
            o.vm_id, o.node
        )));
    }
    if let Some(lock) = &o.lock {
        return Err(Error::FailedPrecondition(format!(
            "container {name} of fleet {fleet} (vm_id {} on {}) is locked by PVE ({lock}): try again when the \
             lock is gone",
            o.vm_id, o.node
        )));
    }
    let now = state.now_ms();
    let reason = match action {
        SnapshotAction::List => "snapshot list".to_string(),
        SnapshotAction::Rollback if o.running => {
            format!("snapshot rollback {snapshot} (stopped by PVE, then started again)")
        }
        a => format!("snapshot {} {snapshot}", a.as_str()),
    };
    let op = Operation {
        revision: d.revision,
        reason,
        ..Operation::pending(
            fleet,
            name,
            &o.node,
            o.vm_id,
            OperationKind::Snapshot(SnapshotOp {
                action,
                name: if action == SnapshotAction::List {
                    String::new()
                } else {
                    snapshot.to_string()
                },
                description: description.to_string(),
                start: action == SnapshotAction::Rollback && o.running,
                snapshots: Vec::new(),
            }),
            now,
        )
    };
    state.store.put_op(&op)?;
    if action != SnapshotAction::List {
        state.store.audit(&crate::model::AuditEntry {
            time_ms: now,
            actor: actor.to_string(),
            action: format!("snapshot_{}", action.as_str()),
            target: fleet.to_string(),
            detail: format!(
                "container {name} (vm_id {} on {}): snapshot {snapshot}",
                o.vm_id, o.node
            ),
        })?;
    }
    emit(state, &op, "planned");
    state.changed();
    tracing::info!(fleet, container = name, op = %op.id, action = action.as_str(), snapshot, "snapshot queued");
    Ok(op)
}
