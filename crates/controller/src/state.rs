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
use crate::metrics::Metrics;
use crate::model::{FleetEvent, Millis};
use crate::store::Store;

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
}
