//! The Watch loop: a fleet's operation events as the reconcile loop emits them, and a status event whenever a
//! container's status changes; with `until_settled`, it ends after the event saying every container of the
//! current revision is done. Protobuf is the Watch handler's business ([`crate::grpc::convert_streams`]).

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::model::{ContainerStatus, FleetEvent};
use crate::query;
use crate::state::State;
use crate::store::StoreError;

/// Sends `fleet`'s events through `send` until it returns false (the watcher is gone), the event channel closes,
/// or (with `until_settled`) the revision settled. A store error is sent, and ends the watch.
pub async fn run<F, Fut>(state: Arc<State>, fleet: String, until_settled: bool, mut send: F)
where
    F: FnMut(Result<FleetEvent, StoreError>) -> Fut,
    Fut: Future<Output = bool>,
{
    let mut rx = state.events.subscribe();
    let mut last: BTreeMap<String, ContainerStatus> = BTreeMap::new();
    let mut tick = tokio::time::interval(Duration::from_millis(250));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // Rows are recomputed when something changed (or every 5 s, for time-driven states such as a node going
    // down), not on every tick: each watcher would otherwise read the whole store 4 times a second.
    let mut seen: Option<(u64, Instant)> = None;
    loop {
        tokio::select! {
            ev = rx.recv() => match ev {
                Ok(ev) if ev.fleet == fleet => {
                    if !send(Ok(ev)).await {
                        return;
                    }
                }
                Ok(_) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                Err(_) => return,
            },
            _ = tick.tick() => {
                let generation = state.generation();
                if seen.is_some_and(|(g, at)| g == generation && state.clock.instant().saturating_duration_since(at) < Duration::from_secs(5)) {
                    continue;
                }
                seen = Some((generation, state.clock.instant()));
                let rows = match query::container_rows(&state) {
                    Ok(r) => r,
                    Err(e) => {
                        send(Err(e)).await;
                        return;
                    }
                };
                let rows: Vec<_> = rows.into_iter().filter(|r| r.fleet == fleet).collect();
                let revision = state.store.fleet(&fleet).ok().flatten().map(|f| f.revision).unwrap_or(0);
                let settled = rows.iter().all(|r| match r.status {
                    ContainerStatus::Running | ContainerStatus::Failed => r.desired.is_some(),
                    ContainerStatus::Stopped => {
                        r.desired.as_ref().is_some_and(|d| !d.container.state.is_running())
                    }
                    _ => false,
                }) && !state
                    .store
                    .ops()
                    .map(|ops| ops.iter().any(|o| o.fleet == fleet && o.state.is_active()))
                    .unwrap_or(true);
                for row in &rows {
                    if last.get(&row.name) != Some(&row.status) {
                        last.insert(row.name.clone(), row.status);
                        let ev = FleetEvent {
                            unix_ms: state.now_ms(),
                            fleet: fleet.clone(),
                            container: row.name.clone(),
                            vm_id: row.vm_id(),
                            node: row.node(),
                            status: Some(row.status),
                            message: row.status.as_str().into(),
                            error: row.error().unwrap_or_default(),
                            revision,
                            ..Default::default()
                        };
                        if !send(Ok(ev)).await {
                            return;
                        }
                    }
                }
                if until_settled && settled {
                    send(Ok(FleetEvent {
                        unix_ms: state.now_ms(),
                        fleet: fleet.clone(),
                        revision,
                        settled: true,
                        message: "settled".into(),
                        ..Default::default()
                    }))
                    .await;
                    return;
                }
            }
        }
    }
}
