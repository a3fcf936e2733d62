//! Sending an operation to its node's agent ([`send`]), and the backlog of operations that were due when their
//! node's dispatch window was full ([`Backlog`]): a pass leaves it behind, and each final result of an operation
//! in flight sends the node's next one at once ([`next_for`]) instead of waiting for the next pass. At 10,000
//! containers a pass takes a tenth of a second or more, and waiting for one after every result halved the rate
//! at which nodes were kept busy.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use super::emit;
use crate::agents::ToAgent;
use crate::model::{Millis, OpState, Operation};
use crate::state::State;
use crate::store::StoreError;

/// One operation waiting for room on its node, with the root password a create carries (read by the pass that
/// left it behind; dropped with the entry).
pub(crate) struct Waiting {
    pub id: String,
    pub password: Option<String>,
}

/// Per node, the operations a pass found due but could not send for the window, in the order it would have.
#[derive(Default)]
pub struct Backlog(Mutex<HashMap<String, VecDeque<Waiting>>>);

impl Backlog {
    /// Replaces the whole backlog with what the pass that just ran left behind.
    pub(crate) fn replace(&self, next: HashMap<String, VecDeque<Waiting>>) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = next;
    }

    fn pop(&self, node: &str) -> Option<Waiting> {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get_mut(node)?
            .pop_front()
    }
}

/// Sends `op` (pending) to its node with its deadline set; records it dispatched when the node's stream took it.
/// Returns whether it was sent.
pub(crate) fn send(
    state: &State,
    op: &Operation,
    password: Option<String>,
    now: Millis,
) -> Result<bool, StoreError> {
    let mut op = op.clone();
    op.deadline_ms = Some(now + state.config.reconciler.operation_deadline_secs * 1000);
    let msg = ToAgent::Operation {
        op: Box::new(op.clone()),
        password,
    };
    let Some(conn) = state.sessions.send_on(&op.node, msg) else {
        return Ok(false);
    };
    op.state = OpState::Dispatched;
    op.dispatched_ms = Some(now);
    op.dispatched_conn = conn;
    state.store.put_op(&op)?;
    state.metrics.op_dispatched();
    emit(state, &op, "dispatched");
    Ok(true)
}

/// Sends `op`, planned by the pass that sends it and not stored yet: it is stored once, as dispatched on the
/// node's current stream, before it is sent (a controller stopped in between finds it dispatched on a stream
/// that is gone, and sends it again, as after any restart); stored pending when the stream does not take it.
/// At 10,000 containers a first pass stored each operation twice (pending, then dispatched): half of its time.
pub(crate) fn send_new(
    state: &State,
    op: &Operation,
    password: Option<String>,
    now: Millis,
) -> Result<bool, StoreError> {
    let Some(conn) = state.sessions.current_conn(&op.node) else {
        state.store.put_op(op)?;
        return Ok(false);
    };
    let mut sending = op.clone();
    sending.deadline_ms = Some(now + state.config.reconciler.operation_deadline_secs * 1000);
    let mut dispatched = sending.clone();
    dispatched.state = OpState::Dispatched;
    dispatched.dispatched_ms = Some(now);
    dispatched.dispatched_conn = conn;
    state.store.put_op(&dispatched)?;
    let msg = ToAgent::Operation {
        op: Box::new(sending),
        password,
    };
    match state.sessions.send_on(&op.node, msg) {
        Some(c) if c == conn => {}
        Some(c) => {
            // the agent reconnected in between: the stream it went on
            dispatched.dispatched_conn = c;
            state.store.put_op(&dispatched)?;
        }
        None => {
            state.store.put_op(op)?;
            return Ok(false);
        }
    }
    state.metrics.op_dispatched();
    emit(state, &dispatched, "dispatched");
    Ok(true)
}

/// A final result freed a slot of `node`'s window: sends the first operation of its backlog that is still
/// pending and due. The caller holds the operations lock.
pub(crate) fn next_for(state: &State, node: &str, now: Millis) -> Result<(), StoreError> {
    while let Some(w) = state.reconciler.backlog.pop(node) {
        let Some(op) = state.store.op(&w.id)? else {
            continue;
        };
        if op.state != OpState::Pending || op.not_before_ms > now || op.node != node {
            continue; // settled or re-planned since the pass
        }
        send(state, &op, w.password, now)?;
        return Ok(());
    }
    Ok(())
}
