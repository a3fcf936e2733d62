//! The reconcile loop: passes run on a timer and whenever something is observed ([`run`]); each one applies
//! [`crate::realise::next_operation`] to every container and dispatches what is due ([`pass`]). Results from agents come
//! in through [`on_update`]. Progress goes out to Watch as events ([`emit`]).

use pxfleet_common::Stopwatch;
use std::future::Future;

use crate::model::{FleetEvent, Millis, OpEvent, Operation};
use crate::state::State;

pub mod decide;
mod dispatch;
mod pass;
mod restart;
mod results;
mod snapshot;

pub use dispatch::Backlog;
#[cfg(test)]
use pass::REPAIR_HOLD_MS;
pub use pass::{pass, REPAIR_DOES_NOT_HOLD};
pub use restart::queue_restarts;
pub use results::{on_update, requeue_node};
pub use snapshot::queue_snapshot;

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
            _ = state.reconciler.wake.notified() => true,
            _ = tokio::time::sleep(interval) => false,
        };
        let now = state.now_ms();
        if !woken
            && seen_generation == Some(state.generation())
            && now < state.reconciler.next_due_ms.load(Ordering::Relaxed)
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
        let now = state.now_ms();
        let st = state.clone();
        let started = Stopwatch::start();
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

/// What the reconcile loop keeps between its passes. The rest of the controller only wakes it
/// ([`State::changed`]); passes, dispatch and results read and write the rest.
#[derive(Default)]
pub struct Reconciler {
    /// Wakes the loop (after an observation, a result, a submit).
    pub(crate) wake: tokio::sync::Notify,
    /// The earliest time something timed becomes due (a backoff ends, a deadline or an acknowledgement wait
    /// passes), as the last pass found it; `u64::MAX` when nothing is.
    pub(crate) next_due_ms: std::sync::atomic::AtomicU64,
    /// Containers that were created and are observed nowhere now, with when a pass first saw that: a container
    /// between two nodes (migrated by hand) is missing from both agents' reports for a moment, so it is recreated
    /// only once missing for [`VANISHED_GRACE_MS`].
    pub(crate) vanished: std::sync::Mutex<std::collections::HashMap<(String, String), u64>>,
    /// Operations due but held back by their node's dispatch window, sent as results free slots.
    pub(crate) backlog: Backlog,
}

/// How long a created container must be missing from every node's report before it is created again.
pub const VANISHED_GRACE_MS: Millis = 15_000;

/// With nothing changed and nothing due, a pass still runs every this many `interval_ms` ticks (30 s by
/// default): a safety net only, since every change wakes the reconciler and every timed event (backoff,
/// deadline, acknowledgement wait, vanished grace) is in `next_due_ms`; node status is computed when read. At
/// 10,000 containers a pass costs a few hundred milliseconds of CPU, and with a pass every 5 s these were half
/// of an idle controller's CPU (profile in docs/performance.md).
const IDLE_PASS_EVERY: u32 = 30;

/// Broadcasts a progress event for Watch.
pub fn emit(state: &State, op: &Operation, message: &str) {
    state.bump();
    let _ = state.events.send(FleetEvent {
        unix_ms: state.now_ms(),
        fleet: op.fleet.clone(),
        container: op.container.clone(),
        vm_id: op.vm_id,
        node: op.node.clone(),
        op: Some(OpEvent {
            id: op.id.clone(),
            kind: op.kind.tag(),
            state: op.state,
        }),
        message: message.to_string(),
        error: op.last_error.clone().unwrap_or_default(),
        revision: op.revision,
        ..Default::default()
    });
}

#[cfg(test)]
mod tests;
