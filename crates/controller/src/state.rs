//! The controller's shared state: configuration, store, agent sessions, the reconciler's wake-up, event
//! broadcast for Watch, metrics, the CA, the per-fleet submit locks (two submits to one fleet never
//! interleave) and the placement lock (submits of different fleets never place at the same time).

use std::collections::HashMap;
use std::sync::Arc;

use pxfleet_common::Clock;
use pxfleet_tls::{Ca, RevocationList};
use tokio::sync::broadcast;

use crate::agents::Sessions;
use crate::config::Config;
use crate::metrics::{Gauges, Metrics};
use crate::model::{
    ContainerStatus, FleetEvent, Millis, NodeRecord, NodeStatus, OpState, Operation,
};
use crate::store::{Store, StoreError};

pub struct State {
    pub config: Config,
    /// Where every timestamp, expiry and timeout of the controller reads the time ([`Clock::system`] in
    /// production, a [`pxfleet_common::ManualClock`]'s in tests).
    pub clock: Clock,
    pub store: Store,
    pub sessions: Sessions,
    /// What the reconcile loop keeps between its passes; the rest of the controller only wakes it
    /// ([`State::changed`]).
    pub reconciler: crate::reconcile::Reconciler,
    /// Advances whenever containers, operations or observations change, so watchers recompute only then.
    generation: std::sync::atomic::AtomicU64,
    pub events: broadcast::Sender<FleetEvent>,
    pub metrics: Metrics,
    pub ca: Ca,
    pub revocations: Arc<RevocationList>,
    /// Serialises every read-modify-write of operations (reconcile passes, agent results, requeues), so a fast
    /// agent's result is never overwritten by the pass that dispatched it.
    pub ops_lock: std::sync::Mutex<()>,
    fleet_locks: std::sync::Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    /// Held by a submit from its snapshot until its revision is stored (after its fleet's lock), so submits
    /// of different fleets place one after the other and each sees the room the previous one reserved.
    pub placement_lock: Arc<tokio::sync::Mutex<()>>,
    /// Watch streams per identity, enrolment failures ([`crate::limits`]).
    pub limiter: crate::limits::Limiter,
    /// The queue of hooks to run ([`crate::hooks`]).
    pub hooks: crate::hooks::Hooks,
    /// The `seed: all_nodes` templates of each fleet's head revision ([`crate::preseed`]).
    pub preseed: crate::preseed::Cache,
}

impl State {
    pub fn new(
        config: Config,
        store: Store,
        ca: Ca,
        revocations: Arc<RevocationList>,
        clock: Clock,
    ) -> Arc<State> {
        let (events, _) = broadcast::channel(1024);
        Arc::new(State {
            limiter: crate::limits::Limiter::new(config.limits.clone(), clock.clone()),
            clock,
            hooks: crate::hooks::Hooks::new(),
            config,
            store,
            sessions: Sessions::default(),
            reconciler: Default::default(),
            generation: Default::default(),
            events,
            metrics: Metrics::default(),
            ca,
            revocations,
            ops_lock: std::sync::Mutex::new(()),
            fleet_locks: Default::default(),
            placement_lock: Default::default(),
            preseed: Default::default(),
        })
    }

    /// Something a watcher or the reconciler cares about changed: wakes the reconciler.
    pub fn changed(&self) {
        self.bump();
        self.reconciler.wake.notify_one();
    }

    /// Advances the change generation without waking the reconciler (operation events).
    pub fn bump(&self) {
        self.generation
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    /// The change generation: equal values mean nothing changed in between.
    pub fn generation(&self) -> u64 {
        self.generation.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The lock a submit or destroy of `fleet` holds for its whole duration.
    pub fn fleet_lock(&self, fleet: &str) -> Arc<tokio::sync::Mutex<()>> {
        self.fleet_locks
            .lock()
            .expect("fleet locks")
            .entry(fleet.to_string())
            .or_default()
            .clone()
    }

    /// Wall time now, in Unix milliseconds, from [`State::clock`].
    pub fn now_ms(&self) -> Millis {
        self.clock.now_ms()
    }

    pub fn heartbeat_timeout_ms(&self) -> u64 {
        self.config.reconciler.heartbeat_timeout_secs * 1000
    }

    pub fn node_status(&self, node: &crate::model::NodeRecord) -> NodeStatus {
        if self.cert_revoked(node) {
            return NodeStatus::Down;
        }
        node.status(self.now_ms(), self.heartbeat_timeout_ms())
    }

    /// Whether the certificate the node's agent last connected with was revoked: its stream was closed then,
    /// and it is down at once (not only once its heartbeats are missed).
    fn cert_revoked(&self, node: &crate::model::NodeRecord) -> bool {
        !node.cert_serial.is_empty()
            && pxfleet_tls::Serial::from_hex(&node.cert_serial)
                .is_ok_and(|s| pxfleet_tls::RevocationCheck::is_revoked(&*self.revocations, &s))
    }

    /// What `get nodes` shows: the record's status, except that a node whose operations in flight (`ops`: the
    /// node's active operations) have not moved for `stall_secs` is `stalled`; with the reason in words.
    pub fn node_health(
        &self,
        node: &NodeRecord,
        ops: &[&Operation],
        now: Millis,
    ) -> (NodeStatus, String) {
        if self.cert_revoked(node) {
            return (
                NodeStatus::Down,
                format!(
                    "its certificate (serial {}) was revoked: its agent was cut off and is refused; enrol it again: \
                     `pxctl node token create --node {}`, then on the node `pxagent join --node {}` with that token",
                    node.cert_serial, node.name, node.name
                ),
            );
        }
        let status = node.status(now, self.heartbeat_timeout_ms());
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
                if quiet <= self.config.reconciler.stall_secs * 1000 {
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

    /// Gauges for /metrics.
    pub fn gauges(&self) -> Result<Gauges, StoreError> {
        let mut g = Gauges::default();
        for s in [
            NodeStatus::Ready,
            NodeStatus::Down,
            NodeStatus::Cordoned,
            NodeStatus::Stalled,
        ] {
            g.nodes_by_status.insert(s.as_str(), 0);
        }
        let ops = self.store.ops()?;
        let now = self.now_ms();
        for n in self.store.nodes()? {
            let mine: Vec<&Operation> = ops.iter().filter(|o| o.node == n.name).collect();
            *g.nodes_by_status
                .entry(self.node_health(&n, &mine, now).0.as_str())
                .or_default() += 1;
        }
        for s in ContainerStatus::ALL {
            g.containers_by_status.insert(s.as_str(), 0);
        }
        for c in crate::query::container_rows(self)? {
            *g.containers_by_status.entry(c.status.as_str()).or_default() += 1;
        }
        Ok(g)
    }

    /// The /metrics text.
    pub fn scrape(&self) -> String {
        match self.gauges() {
            Ok(g) => self.metrics.render(&g),
            Err(e) => {
                tracing::error!(error = %e, "metrics scrape failed");
                self.metrics.render(&Gauges::default())
            }
        }
    }
}
