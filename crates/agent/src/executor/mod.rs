//! The operation executor: runs operations against the node with bounded parallelism (a semaphore)
//! and one operation per vm_id at a time (a mutex per vmid), journals every state change, answers a
//! re-sent finished operation from the journal, and at start-up cleans up after operations that were
//! running when the agent died (a `lock: create` leftover is destroyed so the re-sent create starts
//! clean). Every operation is written to be idempotent: it first looks at what exists.
//!
//! This module holds the machinery (journal, locks, observation, dispatch); each operation is in its own
//! module: [`create`], [`update`] (`pct set`, pending changes), [`resize`], [`power`] (start, stop),
//! [`destroy`], [`migrate`] and [`template`] (seeding).

mod clone;
mod create;
mod destroy;
mod migrate;
mod power;
mod resize;
mod snapshots;
mod template;
mod update;

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use pxfleet_common::Clock;
use tokio::sync::{mpsc, Semaphore};

use crate::journal::{Journal, JournalError, OpState};
use crate::node::{ContainerConfig, Interface, ManagedMark, NodeApi, PveError, MANAGED_TAG};
use crate::observe::{self, Delta, ObservedContainer, Snapshot};
use crate::ops::{
    CreateOp, OpFailure, OpKind, OpResult, OpUpdate, Operation, TemplateSource, TemplateSpec,
    WaitFor,
};
use crate::seed::{SeedError, Seeder};

/// A quick observation pass reads each container's configuration again at least this often (in passes).
pub const REREAD_EVERY_PASSES: usize = 10;

/// Something the stream should tell the controller.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    Op(OpUpdate),
    Delta(Delta),
}

/// Tunables of the executor.
#[derive(Debug, Clone)]
pub struct ExecutorSettings {
    /// Operations running at once.
    pub parallelism: usize,
    /// Upper bound on waiting for a started container's addresses.
    pub address_wait: Duration,
    /// Interval between interface polls while waiting.
    pub address_poll: Duration,
    /// Where the executor, its journal's timestamps and the agent's messages read the time.
    pub clock: Clock,
}

impl Default for ExecutorSettings {
    fn default() -> Self {
        ExecutorSettings {
            parallelism: 4,
            address_wait: Duration::from_secs(60),
            address_poll: Duration::from_millis(250),
            clock: Clock::system(),
        }
    }
}

/// Executes operations; cheap to clone.
pub struct Executor<D: NodeApi> {
    inner: Arc<Inner<D>>,
}

impl<D: NodeApi> Clone for Executor<D> {
    fn clone(&self) -> Self {
        Executor {
            inner: self.inner.clone(),
        }
    }
}

struct Inner<D> {
    node: Arc<D>,
    journal: Journal,
    seeder: Seeder,
    settings: ExecutorSettings,
    permits: Semaphore,
    vm_locks: Mutex<HashMap<u32, Arc<tokio::sync::Mutex<()>>>>,
    template_locks: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    in_flight: Mutex<HashSet<String>>,
    snapshot: Mutex<Snapshot>,
    events: mpsc::UnboundedSender<Event>,
}

type Outcome = Result<OpResult, OpFailure>;

fn fail(error: impl Into<String>) -> OpFailure {
    OpFailure {
        error: error.into(),
        retryable: false,
    }
}

impl From<PveError> for OpFailure {
    fn from(e: PveError) -> Self {
        OpFailure {
            retryable: e.retryable(),
            error: e.to_string(),
        }
    }
}

impl From<JournalError> for OpFailure {
    fn from(e: JournalError) -> Self {
        OpFailure {
            error: e.to_string(),
            retryable: true,
        }
    }
}

impl From<SeedError> for OpFailure {
    fn from(e: SeedError) -> Self {
        let retryable = match &e {
            SeedError::Mismatch { .. }
            | SeedError::BadName { .. }
            | SeedError::Tls { .. }
            | SeedError::TooLarge { .. } => false,
            // a slow mirror may be faster next time
            SeedError::TimedOut { .. } => true,
            SeedError::Status { status, .. } => *status >= 500 || *status == 429,
            SeedError::Http { .. } | SeedError::Io { .. } => true,
        };
        OpFailure {
            error: e.to_string(),
            retryable,
        }
    }
}

/// How long `pct reboot` waits for a clean shutdown before PVE kills the container.
const REBOOT_TIMEOUT_SECS: u32 = 60;

fn ok(message: impl Into<String>, container: Option<ObservedContainer>) -> Outcome {
    Ok(OpResult {
        message: message.into(),
        container: container.map(Box::new),
        template_volid: None,
        template_sha256: None,
        snapshots: None,
    })
}

impl<D: NodeApi> Executor<D> {
    /// Builds an executor; the receiver yields progress, results and observation deltas.
    pub fn new(
        node: Arc<D>,
        journal: Journal,
        seeder: Seeder,
        settings: ExecutorSettings,
    ) -> (Self, mpsc::UnboundedReceiver<Event>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let permits = Semaphore::new(settings.parallelism.max(1));
        let inner = Inner {
            node,
            journal,
            seeder,
            settings,
            permits,
            vm_locks: Mutex::new(HashMap::new()),
            template_locks: Mutex::new(HashMap::new()),
            in_flight: Mutex::new(HashSet::new()),
            snapshot: Mutex::new(Snapshot::default()),
            events: tx,
        };
        (
            Executor {
                inner: Arc::new(inner),
            },
            rx,
        )
    }

    /// Number of operations currently executing or waiting for a slot.
    pub fn in_flight(&self) -> usize {
        self.inner.in_flight.lock().expect("in_flight lock").len()
    }

    pub fn node(&self) -> &Arc<D> {
        &self.inner.node
    }

    pub fn journal(&self) -> &Journal {
        &self.inner.journal
    }

    /// The clock of [`ExecutorSettings::clock`].
    pub fn clock(&self) -> &Clock {
        &self.inner.settings.clock
    }

    /// Wall time now in Unix milliseconds, as the agent's messages carry it.
    pub fn now_ms(&self) -> i64 {
        self.inner.settings.clock.now_ms() as i64
    }

    /// Start-up recovery: every operation the journal shows as received or running was cut short.
    /// A container left half-created (`lock: create`) or half-destroyed (`lock: destroyed`) is removed;
    /// the operation is marked interrupted, to be redone when the controller re-sends it.
    /// Returns the ids of the interrupted operations.
    pub async fn recover(&self) -> Result<Vec<String>, JournalError> {
        let mut interrupted = Vec::new();
        for entry in self.inner.journal.entries()? {
            if !matches!(entry.state, OpState::Received | OpState::Running) {
                continue;
            }
            let op = entry.op;
            if let Some(vmid) = op.vmid() {
                match self.inner.node.config(vmid).await {
                    Ok(Some(cfg)) if is_half_made(&cfg) => {
                        tracing::warn!(vmid, op_id = %op.id, lock = ?cfg.lock, "cleaning up a container left half-made by an interrupted operation");
                        if let Err(e) = self.cleanup(vmid).await {
                            tracing::error!(vmid, error = %e, "cleanup failed; the re-sent operation will retry it");
                        }
                    }
                    Ok(_) => {}
                    Err(e) => {
                        tracing::error!(vmid, error = %e, "cannot inspect container during recovery")
                    }
                }
            }
            tracing::info!(op_id = %op.id, kind = op.kind_name(), "operation interrupted by a restart; waiting for the controller to re-send it");
            self.inner.journal.record(&op, OpState::Interrupted).await?;
            interrupted.push(op.id);
        }
        Ok(interrupted)
    }

    /// Starts an operation in the background; its updates arrive on the event channel.
    pub fn submit(&self, op: Operation) {
        let this = self.clone();
        tokio::spawn(async move {
            this.execute(op).await;
        });
    }

    /// Runs an operation to its end and returns the final update (also sent as an event).
    /// A re-sent operation that is done returns the recorded result without touching the node;
    /// one that is still running returns a progress update saying so.
    pub async fn execute(&self, op: Operation) -> OpUpdate {
        let id = op.id.clone();
        match self.inner.journal.get(&id) {
            Ok(Some(entry)) => {
                if let OpState::Done(result) = entry.state {
                    tracing::debug!(op_id = %id, "re-sent operation already done; answering from the journal");
                    let u = OpUpdate::Succeeded { op_id: id, result };
                    self.emit(Event::Op(u.clone()));
                    return u;
                }
            }
            Ok(None) => {}
            Err(e) => return self.finish_failed(&op, e.into()).await,
        }
        {
            let mut in_flight = self.inner.in_flight.lock().expect("in_flight lock");
            if !in_flight.insert(id.clone()) {
                let u = OpUpdate::Progress {
                    op_id: id,
                    message: "already in progress".into(),
                };
                self.emit(Event::Op(u.clone()));
                return u;
            }
        }
        let update = self.run_tracked(&op).await;
        self.inner
            .in_flight
            .lock()
            .expect("in_flight lock")
            .remove(&id);
        update
    }

    async fn run_tracked(&self, op: &Operation) -> OpUpdate {
        if let Err(e) = self.inner.journal.record(op, OpState::Received).await {
            return self.finish_failed(op, e.into()).await;
        }
        // Tells the controller the operation arrived (it re-sends one it hears nothing about), also while it
        // waits below for a free slot.
        self.progress(&op.id, "received");
        let _permit = self
            .inner
            .permits
            .acquire()
            .await
            .expect("semaphore never closed");
        let vm_lock = op.vmid().map(|v| self.vm_lock(v));
        let _vm_guard = match &vm_lock {
            Some(l) => Some(l.lock().await),
            None => None,
        };
        if let Err(e) = self.inner.journal.record(op, OpState::Running).await {
            return self.finish_failed(op, e.into()).await;
        }
        // Passes leave the container to this operation while it runs; the guard ends that also when the
        // operation's future is dropped or panics, so a container is never left unobserved for good.
        let _busy = op.vmid().map(|vmid| {
            let mut s = self.snapshot();
            s.touch(vmid);
            s.set_busy(vmid, true);
            BusyGuard {
                snapshot: &self.inner.snapshot,
                vmid,
            }
        });
        self.progress(&op.id, format!("{} started", op.kind_name()));
        tracing::info!(op_id = %op.id, kind = op.kind_name(), vmid = ?op.vmid(), "operation started");
        let outcome = self.perform(op).await;
        if let Some(vmid) = op.vmid() {
            match &outcome {
                // The operation read the container back at its end: that is the observation.
                Ok(r) if r.container.is_some() => {
                    self.record_observed(vmid, r.container.as_deref().cloned())
                }
                _ => self.observe_vmid(vmid).await,
            }
        }
        drop(_busy);
        match outcome {
            Ok(result) => {
                tracing::info!(op_id = %op.id, message = %result.message, "operation succeeded");
                if let Err(e) = self
                    .inner
                    .journal
                    .record(op, OpState::Done(result.clone()))
                    .await
                {
                    tracing::error!(op_id = %op.id, error = %e, "cannot journal the result");
                }
                let u = OpUpdate::Succeeded {
                    op_id: op.id.clone(),
                    result,
                };
                self.emit(Event::Op(u.clone()));
                u
            }
            Err(failure) => self.finish_failed(op, failure).await,
        }
    }

    async fn finish_failed(&self, op: &Operation, failure: OpFailure) -> OpUpdate {
        tracing::warn!(op_id = %op.id, error = %failure.error, retryable = failure.retryable, "operation failed");
        if let Err(e) = self
            .inner
            .journal
            .record(op, OpState::Failed(failure.clone()))
            .await
        {
            tracing::error!(op_id = %op.id, error = %e, "cannot journal the failure");
        }
        let u = OpUpdate::Failed {
            op_id: op.id.clone(),
            failure,
        };
        self.emit(Event::Op(u.clone()));
        u
    }

    fn emit(&self, e: Event) {
        // The receiver lives as long as the agent; if it is gone we are shutting down.
        let _ = self.inner.events.send(e);
    }

    fn progress(&self, op_id: &str, message: impl Into<String>) {
        self.emit(Event::Op(OpUpdate::Progress {
            op_id: op_id.to_string(),
            message: message.into(),
        }));
    }

    fn vm_lock(&self, vmid: u32) -> Arc<tokio::sync::Mutex<()>> {
        self.inner
            .vm_locks
            .lock()
            .expect("vm_locks lock")
            .entry(vmid)
            .or_default()
            .clone()
    }

    /// Re-observes one container and emits the delta, if any.
    async fn observe_vmid(&self, vmid: u32) {
        match observe::observe_one(&*self.inner.node, vmid).await {
            Ok(now) => self.record_observed(vmid, now),
            Err(e) => tracing::warn!(vmid, error = %e, "cannot observe container after operation"),
        }
    }

    /// Records what an operation saw of one container and emits the delta, if any.
    fn record_observed(&self, vmid: u32, now: Option<ObservedContainer>) {
        let delta = self.snapshot().update_one(vmid, now);
        if !delta.is_empty() {
            self.emit(Event::Delta(delta));
        }
    }

    /// A full observation pass: emits the delta against the last snapshot and returns it.
    ///
    /// One listing of the node; configurations are read only for containers whose listing moved, new ones, and
    /// the tenth read longest ago (so hundreds of containers do not cost hundreds of `pct config` calls per
    /// pass, and a change the listing does not show is still seen within ten passes).
    pub async fn observe_pass(&self) -> Result<Delta, PveError> {
        let (began, known, busy) = {
            let mut s = self.snapshot();
            (
                s.begin_pass(),
                s.reusable(REREAD_EVERY_PASSES),
                s.busy_vmids(),
            )
        };
        let (all, read) = observe::observe_changed(&*self.inner.node, &known, &busy).await?;
        let mut s = self.snapshot();
        s.mark_read(read, began);
        let delta = s.update_pass(all, began);
        drop(s);
        if !delta.is_empty() {
            self.emit(Event::Delta(delta.clone()));
        }
        Ok(delta)
    }

    /// A full observation for a hello / resync: returns every container (no event emitted).
    /// Containers an operation touched while the pass ran keep what the operation reported.
    pub async fn full_observation(&self) -> Result<Vec<ObservedContainer>, PveError> {
        let began = self.snapshot().begin_pass();
        let (all, read) =
            observe::observe_changed(&*self.inner.node, &BTreeMap::new(), &BTreeSet::new()).await?;
        let mut snapshot = self.snapshot();
        snapshot.mark_read(read, began);
        snapshot.update_pass(all, began);
        Ok(snapshot.containers.values().cloned().collect())
    }

    /// Every container as the snapshot has it (what the passes and operations last saw), without reading
    /// the node.
    pub fn known_containers(&self) -> Vec<ObservedContainer> {
        self.snapshot().containers.values().cloned().collect()
    }

    fn snapshot(&self) -> std::sync::MutexGuard<'_, Snapshot> {
        self.inner.snapshot.lock().expect("snapshot lock")
    }

    async fn perform(&self, op: &Operation) -> Outcome {
        match &op.kind {
            OpKind::Create(c) => self.create(&op.id, c).await,
            OpKind::Update { .. } => self.update(op).await,
            OpKind::Resize {
                vmid,
                expect,
                disk,
                size_gib,
            } => self.resize(*vmid, expect.as_ref(), disk, *size_gib).await,
            OpKind::Start { vmid, expect } => self.start(&op.id, *vmid, expect.as_ref()).await,
            OpKind::Stop {
                vmid,
                expect,
                force,
                timeout_secs,
            } => {
                self.stop(*vmid, expect.as_ref(), *force, *timeout_secs)
                    .await
            }
            OpKind::Destroy {
                vmid,
                expect,
                purge,
            } => self.destroy(&op.id, *vmid, expect.as_ref(), *purge).await,
            OpKind::Migrate {
                vmid,
                expect,
                target,
                restart,
            } => self.migrate(*vmid, expect.as_ref(), target, *restart).await,
            OpKind::SeedTemplate(spec) => self.seed(&op.id, spec).await,
            OpKind::Snapshot { .. } => self.snapshot_op(op).await,
        }
    }

    async fn existing(&self, vmid: u32) -> Result<ContainerConfig, OpFailure> {
        self.inner
            .node
            .config(vmid)
            .await?
            .ok_or_else(|| fail(format!("CT {vmid} does not exist on this node")))
    }

    async fn status(&self, vmid: u32) -> Result<String, OpFailure> {
        let list = self.inner.node.list().await?;
        Ok(list
            .into_iter()
            .find(|c| c.vmid == vmid)
            .map(|c| c.status)
            .unwrap_or_else(|| "missing".into()))
    }

    async fn observed(&self, vmid: u32) -> Option<ObservedContainer> {
        self.observed_with(vmid, None).await
    }

    /// [`Self::observed`] with the interfaces an address wait just read (one `interfaces` call fewer).
    async fn observed_with(
        &self,
        vmid: u32,
        interfaces: Option<Vec<Interface>>,
    ) -> Option<ObservedContainer> {
        observe::observe_one_with(&*self.inner.node, vmid, interfaces)
            .await
            .ok()
            .flatten()
    }

    /// Removes a container left locked by a cut-short create or destroy.
    async fn cleanup(&self, vmid: u32) -> Result<(), PveError> {
        let d = &*self.inner.node;
        // `unlock` complains when there is no lock; that is fine.
        let _ = d.unlock(vmid).await;
        d.destroy(vmid, false).await?;
        Ok(())
    }

    /// Bounded wait until a started container that has a network shows an address. Returns the interfaces
    /// that showed one (for [`Self::observed_with`]); `None` without a network or after the deadline.
    async fn wait_for_addresses(
        &self,
        op_id: &str,
        vmid: u32,
        has_net: bool,
    ) -> Option<Vec<Interface>> {
        // Any one address: never fails.
        self.wait_for_ip(op_id, vmid, has_net, WaitFor::default())
            .await
            .unwrap_or(None)
    }

    /// Waits (up to `address_wait`) until the running container has the addresses `want` asks for: at least one
    /// IPv4 / IPv6 address that is neither loopback nor link-local, or any one when it asks for neither. Without
    /// one in time: done without addresses when any would have done, else the operation fails and says which
    /// family is missing and what the container has.
    async fn wait_for_ip(
        &self,
        op_id: &str,
        vmid: u32,
        has_net: bool,
        want: WaitFor,
    ) -> Result<Option<Vec<Interface>>, OpFailure> {
        if !has_net {
            return Ok(None);
        }
        let families = |addrs: &[String]| {
            (
                addrs.iter().any(|a| !a.contains(':')),
                addrs.iter().any(|a| a.contains(':')),
            )
        };
        let enough = |addrs: &[String]| {
            let (v4, v6) = families(addrs);
            if want.is_any() {
                v4 || v6
            } else {
                (!want.ipv4 || v4) && (!want.ipv6 || v6)
            }
        };
        let what = match (want.ipv4, want.ipv6) {
            (true, true) => "an IPv4 and an IPv6 address",
            (true, false) => "an IPv4 address",
            (false, true) => "an IPv6 address",
            (false, false) => "addresses",
        };
        self.progress(op_id, format!("waiting for {what}"));
        let wait = self.inner.settings.address_wait;
        let deadline = self.inner.settings.clock.instant() + wait;
        let mut seen: Vec<String> = Vec::new();
        loop {
            if let Ok(Some(ifaces)) = self.inner.node.interfaces(vmid).await {
                seen = observe::useful_addresses(&ifaces);
                if enough(&seen) {
                    return Ok(Some(ifaces));
                }
            }
            if self.inner.settings.clock.instant() >= deadline {
                if want.is_any() {
                    self.progress(
                        op_id,
                        format!(
                            "no address after {}s; reporting without one",
                            wait.as_secs()
                        ),
                    );
                    return Ok(None);
                }
                let has = if seen.is_empty() {
                    "none".to_string()
                } else {
                    seen.join(", ")
                };
                let (v4, v6) = families(&seen);
                let mut missing = Vec::new();
                if want.ipv4 && !v4 {
                    missing.push("IPv4");
                }
                if want.ipv6 && !v6 {
                    missing.push("IPv6");
                }
                return Err(fail(format!(
                    "CT {vmid} has no {} address after {}s (wait_for_ip); it has {has}: the container was \
                     created and is kept; check the bridge's DHCP server or router advertisements, or remove \
                     wait_for_ip",
                    missing.join(" and no "),
                    wait.as_secs()
                )));
            }
            tokio::time::sleep(self.inner.settings.address_poll).await;
        }
    }
}

/// `lock: create` or `lock: destroyed`: left behind by a cut-short create or destroy.
fn is_half_made(cfg: &ContainerConfig) -> bool {
    matches!(cfg.lock.as_deref(), Some("create") | Some("destroyed"))
}

fn check_managed(
    vmid: u32,
    cfg: &ContainerConfig,
    expect: Option<&ManagedMark>,
) -> Result<ManagedMark, OpFailure> {
    let Some(mark) = cfg
        .description
        .as_deref()
        .and_then(ManagedMark::from_description)
    else {
        return Err(fail(format!(
            "CT {vmid} is not managed by pxfleet (no `managed-by: pxfleet` line in its description); refusing to touch it"
        )));
    };
    if let Some(e) = expect {
        if *e != mark {
            return Err(fail(format!(
                "CT {vmid} belongs to fleet {} container {}, not {} {}; refusing to touch it",
                mark.fleet, mark.name, e.fleet, e.name
            )));
        }
    }
    Ok(mark)
}

/// The tags with pxfleet's own: lower-case, sorted, de-duplicated (as PVE stores them).
fn tag_list(tags: &[String]) -> Vec<String> {
    let mut all: Vec<String> = tags.iter().map(|t| t.to_ascii_lowercase()).collect();
    all.push(MANAGED_TAG.into());
    all.sort();
    all.dedup();
    all
}

/// Marks a container busy in the observation snapshot for as long as it lives (see [`Snapshot::set_busy`]).
struct BusyGuard<'a> {
    snapshot: &'a Mutex<Snapshot>,
    vmid: u32,
}

impl Drop for BusyGuard<'_> {
    fn drop(&mut self) {
        self.snapshot
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .set_busy(self.vmid, false);
    }
}
