//! `pxctl restart`: stop operations the reconcile loop follows with a start (the desired state being running).

use super::emit;
use crate::model::{Operation, OperationKind};
use crate::query::{load, pick};
use crate::state::State;
use crate::store::StoreError;

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
    let now = state.now_ms();
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
            revision,
            reason: "restart: stop, then start".into(),
            ..Operation::pending(fleet, name, &o.node, o.vm_id, OperationKind::Stop, now)
        };
        state.store.put_op(&op)?;
        emit(state, &op, "planned");
    }
    Ok(())
}
