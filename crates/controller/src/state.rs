//! The controller's shared state: configuration, store, agent sessions, the reconciler's wake-up, event
//! broadcast for Watch, metrics, the CA, the per-fleet submit locks (two submits to one fleet never
//! interleave) and the placement lock (submits of different fleets never place at the same time).

use std::collections::HashMap;
use std::sync::Arc;

use pxfleet_proto::v1 as pb;
use pxfleet_tls::{Ca, RevocationList};
use tokio::sync::{broadcast, Notify};

use crate::agents::Sessions;
use crate::config::Config;
use crate::metrics::{Gauges, Metrics};
use crate::model::{now_ms, ContainerStatus, NodeStatus};
use crate::store::{Store, StoreError};

pub struct State {
    pub config: Config,
    pub store: Store,
    pub sessions: Sessions,
    /// Wakes the reconciler (after an observation, a result, a submit).
    pub wake: Notify,
    pub events: broadcast::Sender<pb::FleetEvent>,
    pub metrics: Metrics,
    pub ca: Ca,
    pub revocations: Arc<RevocationList>,
    /// Serialises every read-modify-write of operations (reconcile passes, agent results, requeues), so a fast
    /// agent's result is never overwritten by the pass that dispatched it.
    pub ops_lock: std::sync::Mutex<()>,
    fleet_locks: std::sync::Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    /// Held by a submit from its snapshot until its revision is stored (after its fleet's lock), so submits
    /// of different fleets place one after the other and each sees the room the previous one reserved.
    pub placement_lock: tokio::sync::Mutex<()>,
}

impl State {
    pub fn new(
        config: Config,
        store: Store,
        ca: Ca,
        revocations: Arc<RevocationList>,
    ) -> Arc<State> {
        let (events, _) = broadcast::channel(1024);
        Arc::new(State {
            config,
            store,
            sessions: Sessions::default(),
            wake: Notify::new(),
            events,
            metrics: Metrics::default(),
            ca,
            revocations,
            ops_lock: std::sync::Mutex::new(()),
            fleet_locks: Default::default(),
            placement_lock: tokio::sync::Mutex::new(()),
        })
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

    pub fn heartbeat_timeout_ms(&self) -> u64 {
        self.config.reconciler.heartbeat_timeout_secs * 1000
    }

    pub fn node_status(&self, node: &crate::model::NodeRecord) -> NodeStatus {
        node.status(now_ms(), self.heartbeat_timeout_ms())
    }

    /// Gauges for /metrics.
    pub fn gauges(&self) -> Result<Gauges, StoreError> {
        let mut g = Gauges::default();
        for s in [NodeStatus::Ready, NodeStatus::Down, NodeStatus::Cordoned] {
            g.nodes_by_status.insert(s.as_str(), 0);
        }
        for n in self.store.nodes()? {
            *g.nodes_by_status
                .entry(self.node_status(&n).as_str())
                .or_default() += 1;
        }
        for s in ContainerStatus::ALL {
            g.containers_by_status.insert(s.as_str(), 0);
        }
        for c in crate::driver::container_rows(self)? {
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
