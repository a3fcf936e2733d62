//! The operation executor: runs operations against the node with bounded parallelism (a semaphore)
//! and one operation per vm_id at a time (a mutex per vmid), journals every state change, answers a
//! re-sent finished operation from the journal, and at start-up cleans up after operations that were
//! running when the agent died (a `lock: create` leftover is destroyed so the re-sent create starts
//! clean). Every operation is written to be idempotent: it first looks at what exists.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use pxfleet_pve::parse::disk_size;
use tokio::sync::{mpsc, Semaphore};

use crate::journal::{Journal, JournalError, OpState};
use crate::node::{CreateArgs, CtConfig, ManagedMark, NodeApi, NodeError, MANAGED_TAG};
use crate::observe::{self, Delta, ObservedContainer, Snapshot};
use crate::ops::{
    CreateOp, OpFailure, OpKind, OpResult, OpUpdate, Operation, TemplateSource, TemplateSpec,
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
}

impl Default for ExecutorSettings {
    fn default() -> Self {
        ExecutorSettings {
            parallelism: 4,
            address_wait: Duration::from_secs(60),
            address_poll: Duration::from_millis(500),
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

impl From<NodeError> for OpFailure {
    fn from(e: NodeError) -> Self {
        OpFailure {
            error: e.message,
            retryable: e.retryable,
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
                        tracing::warn!(vmid, op_id = %op.id, lock = ?cfg.get("lock"), "cleaning up a container left half-made by an interrupted operation");
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
        if let Some(vmid) = op.vmid() {
            self.snapshot().touch(vmid);
        }
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
    pub async fn observe_pass(&self) -> Result<Delta, NodeError> {
        let (began, known) = {
            let mut s = self.snapshot();
            (s.begin_pass(), s.reusable(REREAD_EVERY_PASSES))
        };
        let (all, read) = observe::observe_changed(&*self.inner.node, &known).await?;
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
    pub async fn full_observation(&self) -> Result<Vec<ObservedContainer>, NodeError> {
        let began = self.snapshot().begin_pass();
        let (all, read) = observe::observe_changed(&*self.inner.node, &BTreeMap::new()).await?;
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
        let d = &*self.inner.node;
        match &op.kind {
            OpKind::Create(c) => self.create(&op.id, c).await,
            OpKind::Update {
                vmid,
                expect,
                desired,
                tags,
                description,
                restart,
                adopt,
            } => {
                let cfg = self.existing(*vmid).await?;
                let unmarked = cfg
                    .get("description")
                    .and_then(|d| ManagedMark::from_description(d))
                    .is_none();
                let mark = match expect {
                    // Taken over: the mark is written with the other changes.
                    Some(e) if *adopt && unmarked => {
                        self.progress(
                            &op.id,
                            format!("adopting CT {vmid} as {} {}", e.fleet, e.name),
                        );
                        e.clone()
                    }
                    _ => check_managed(*vmid, &cfg, expect.as_ref())?,
                };
                let (mut options, mut delete) =
                    plan_update(&mark, &cfg, desired, tags, description.as_deref());
                // `pct config` shows pending values merged in: where the file wants what is in effect now, drop
                // the pending change (a `pct set` made by hand on the running container) instead of piling
                // another one on it.
                let revert = revert_pending(&d.pending(*vmid).await?, &mut options, &mut delete);
                if !revert.is_empty() {
                    self.progress(&op.id, format!("pct set --revert {}", revert.join(",")));
                    d.revert(*vmid, &revert).await?;
                }
                if !options.is_empty() || !delete.is_empty() {
                    let keys: Vec<&str> = options
                        .iter()
                        .map(|(k, _)| k.as_str())
                        .chain(delete.iter().map(String::as_str))
                        .collect();
                    self.progress(&op.id, format!("pct set {}", keys.join(" ")));
                    d.set(*vmid, &options, &delete).await?;
                }
                // What PVE could not apply to the running container waits for its next start (also from an
                // earlier update that was not allowed to restart).
                let pending = if self.status(*vmid).await? == "running" {
                    d.pending(*vmid).await?
                } else {
                    Vec::new()
                };
                let keys: Vec<&str> = pending.iter().map(|p| p.key.as_str()).collect();
                let message = match (keys.is_empty(), *restart) {
                    (true, _) if options.is_empty() && delete.is_empty() && revert.is_empty() => {
                        return ok("nothing to change", self.observed(*vmid).await)
                    }
                    (true, _) => "updated".to_string(),
                    (false, true) => {
                        self.progress(&op.id, format!("pct reboot: {} pending", keys.join(" ")));
                        d.reboot(*vmid, REBOOT_TIMEOUT_SECS).await?;
                        let cfg = self.existing(*vmid).await?;
                        self.wait_for_addresses(&op.id, *vmid, &cfg).await;
                        format!("updated and restarted ({} applied)", keys.join(" "))
                    }
                    (false, false) => format!(
                        "updated; pending until the next restart: {}",
                        keys.join(" ")
                    ),
                };
                ok(message, self.observed(*vmid).await)
            }
            OpKind::Resize {
                vmid,
                expect,
                disk,
                size_gib,
            } => {
                let cfg = self.existing(*vmid).await?;
                check_managed(*vmid, &cfg, expect.as_ref())?;
                let current = cfg
                    .get(disk.as_str())
                    .ok_or_else(|| fail(format!("CT {vmid} has no disk `{disk}`")))?;
                let current_bytes = disk_size(current).ok_or_else(|| {
                    fail(format!(
                        "CT {vmid}: cannot read the size of {disk} from `{current}`"
                    ))
                })?;
                let want = size_gib.saturating_mul(1 << 30);
                if current_bytes == want {
                    return ok("already at that size", self.observed(*vmid).await);
                }
                if current_bytes > want {
                    return Err(fail(format!(
                        "CT {vmid}: {disk} is {current_bytes} bytes, larger than the requested {size_gib} GiB; shrinking is not supported"
                    )));
                }
                d.resize(*vmid, disk, *size_gib).await?;
                ok("resized", self.observed(*vmid).await)
            }
            OpKind::Start { vmid, expect } => {
                let cfg = self.existing(*vmid).await?;
                check_managed(*vmid, &cfg, expect.as_ref())?;
                if self.status(*vmid).await? != "running" {
                    d.start(*vmid).await?;
                }
                self.wait_for_addresses(&op.id, *vmid, &cfg).await;
                ok("running", self.observed(*vmid).await)
            }
            OpKind::Stop {
                vmid,
                expect,
                force,
                timeout_secs,
            } => {
                let cfg = self.existing(*vmid).await?;
                check_managed(*vmid, &cfg, expect.as_ref())?;
                if self.status(*vmid).await? == "running" {
                    let clean = !*force && d.shutdown(*vmid, (*timeout_secs).max(1)).await?;
                    if !clean {
                        d.stop(*vmid).await?;
                    }
                    ok("stopped", self.observed(*vmid).await)
                } else {
                    ok("already stopped", self.observed(*vmid).await)
                }
            }
            OpKind::Destroy {
                vmid,
                expect,
                purge,
            } => {
                let Some(cfg) = d.config(*vmid).await? else {
                    return ok("already gone", None);
                };
                if is_half_made(&cfg) {
                    self.cleanup(*vmid).await?;
                    return ok("destroyed (was half-made)", None);
                }
                check_managed(*vmid, &cfg, expect.as_ref())?;
                if self.status(*vmid).await? == "running" {
                    self.progress(&op.id, "stopping before destroy");
                    d.stop(*vmid).await?;
                }
                d.destroy(*vmid, *purge).await?;
                if d.config(*vmid).await?.is_some() {
                    return Err(OpFailure {
                        error: format!("CT {vmid} still exists after destroy"),
                        retryable: true,
                    });
                }
                ok("destroyed", None)
            }
            OpKind::Migrate {
                vmid,
                expect,
                target,
                restart,
            } => {
                let Some(cfg) = d.config(*vmid).await? else {
                    return ok(
                        format!("not on this node; assumed migrated to {target}"),
                        None,
                    );
                };
                check_managed(*vmid, &cfg, expect.as_ref())?;
                d.migrate(*vmid, target, *restart).await?;
                ok(format!("migrated to {target}"), None)
            }
            OpKind::SeedTemplate(spec) => {
                let (volid, sha256) = self.ensure_template(&op.id, spec).await?;
                Ok(OpResult {
                    message: "template present".into(),
                    container: None,
                    template_volid: Some(volid),
                    template_sha256: sha256,
                })
            }
        }
    }

    async fn create(&self, op_id: &str, c: &CreateOp) -> Outcome {
        let d = &*self.inner.node;
        let vmid = c.vmid;
        if let Some(cfg) = d.config(vmid).await? {
            if is_half_made(&cfg) {
                self.progress(
                    op_id,
                    "removing a half-created container left by an earlier attempt",
                );
                self.cleanup(vmid).await?;
            } else {
                match cfg.get("description").and_then(|s| ManagedMark::from_description(s)) {
                    Some(m) if m == c.mark => {
                        // Created by an earlier attempt of this (or an equivalent) operation.
                        if c.start && self.status(vmid).await? != "running" {
                            d.start(vmid).await?;
                        }
                        if c.start {
                            self.wait_for_addresses(op_id, vmid, &cfg).await;
                        }
                        return ok("already created", self.observed(vmid).await);
                    }
                    Some(m) => {
                        return Err(fail(format!(
                            "vm_id {vmid} is already used by fleet {} container {}, not {} {}",
                            m.fleet, m.name, c.mark.fleet, c.mark.name
                        )))
                    }
                    None => {
                        return Err(fail(format!(
                            "vm_id {vmid} is already used by a container pxfleet does not manage; refusing to touch it"
                        )))
                    }
                }
            }
        }
        self.progress(op_id, format!("ensuring template {}", c.template.volid()));
        let (ostemplate, _) = self.ensure_template(op_id, &c.template).await?;
        let mut options: Vec<(String, String)> = c
            .options
            .iter()
            .filter(|(k, _)| k != "tags" && k != "description")
            .cloned()
            .collect();
        options.push(("tags".into(), tags_with_mark(&c.tags)));
        options.push((
            "description".into(),
            c.mark.description(c.description.as_deref()),
        ));
        let args = CreateArgs {
            vmid,
            ostemplate,
            options,
            ssh_public_keys: c.ssh_public_keys.clone(),
            start_after: c.start,
        };
        self.progress(op_id, format!("creating CT {vmid}"));
        let running = match d.create(&args, c.password.as_ref()).await {
            Ok(running) => running,
            Err(e) => {
                // PVE removes a failed create's config itself, but a killed tool may leave the lock behind.
                if let Ok(Some(cfg)) = d.config(vmid).await {
                    if is_half_made(&cfg) {
                        let _ = self.cleanup(vmid).await;
                    }
                }
                return Err(e.into());
            }
        };
        // What was asked for is what was created (pct create fails otherwise): no need to read it back here.
        let cfg: CtConfig = args.options.iter().cloned().collect();
        if c.start {
            if !running {
                self.progress(op_id, format!("starting CT {vmid}"));
                d.start(vmid).await?;
            }
            self.wait_for_addresses(op_id, vmid, &cfg).await;
        }
        ok("created", self.observed(vmid).await)
    }

    /// Makes sure a template is in its storage; returns the volid to create from and, for a URL
    /// template, the file's sha256.
    async fn ensure_template(
        &self,
        op_id: &str,
        spec: &TemplateSpec,
    ) -> Result<(String, Option<String>), OpFailure> {
        let d = &*self.inner.node;
        let volid = spec.volid();
        match &spec.source {
            TemplateSource::Existing => Ok((volid, None)),
            TemplateSource::Url { url, digest } => {
                let dir = d.template_dir(&spec.storage).await?;
                self.progress(op_id, format!("downloading {url}"));
                let seeded = self
                    .inner
                    .seeder
                    .ensure(&dir, &spec.file_name, url, digest.as_ref())
                    .await?;
                Ok((volid, Some(seeded.sha256)))
            }
            TemplateSource::Appliance => {
                let lock = self
                    .inner
                    .template_locks
                    .lock()
                    .expect("template_locks lock")
                    .entry(volid.clone())
                    .or_default()
                    .clone();
                let _g = lock.lock().await;
                let dir = d.template_dir(&spec.storage).await?;
                let path = dir.join(&spec.file_name);
                if !path.exists() {
                    self.progress(
                        op_id,
                        format!("pveam download {} {}", spec.storage, spec.file_name),
                    );
                    d.pveam_download(&spec.storage, &spec.file_name).await?;
                    // pveam exits 0 even when its task failed: confirm the file is there.
                    if !path.exists() {
                        return Err(OpFailure {
                            error: format!(
                                "pveam download {} {} finished but {} is missing",
                                spec.storage,
                                spec.file_name,
                                path.display()
                            ),
                            retryable: true,
                        });
                    }
                }
                Ok((volid, None))
            }
        }
    }

    async fn existing(&self, vmid: u32) -> Result<CtConfig, OpFailure> {
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
        observe::observe_one(&*self.inner.node, vmid)
            .await
            .ok()
            .flatten()
    }

    /// Removes a container left locked by a cut-short create or destroy.
    async fn cleanup(&self, vmid: u32) -> Result<(), NodeError> {
        let d = &*self.inner.node;
        // `unlock` complains when there is no lock; that is fine.
        let _ = d.unlock(vmid).await;
        d.destroy(vmid, false).await?;
        Ok(())
    }

    /// Bounded wait until a started container that has a network shows an address.
    async fn wait_for_addresses(&self, op_id: &str, vmid: u32, cfg: &CtConfig) {
        let has_net = cfg.keys().any(|k| k.starts_with("net"));
        if !has_net {
            return;
        }
        self.progress(op_id, "waiting for addresses");
        let deadline = tokio::time::Instant::now() + self.inner.settings.address_wait;
        loop {
            if let Ok(Some(ifaces)) = self.inner.node.interfaces(vmid).await {
                if !observe::useful_addresses(&ifaces).is_empty() {
                    return;
                }
            }
            if tokio::time::Instant::now() >= deadline {
                self.progress(
                    op_id,
                    format!(
                        "no address after {}s; reporting without one",
                        self.inner.settings.address_wait.as_secs()
                    ),
                );
                return;
            }
            tokio::time::sleep(self.inner.settings.address_poll).await;
        }
    }
}

/// `lock: create` or `lock: destroyed`: left behind by a cut-short create or destroy.
fn is_half_made(cfg: &CtConfig) -> bool {
    matches!(
        cfg.get("lock").map(String::as_str),
        Some("create") | Some("destroyed")
    )
}

fn check_managed(
    vmid: u32,
    cfg: &CtConfig,
    expect: Option<&ManagedMark>,
) -> Result<ManagedMark, OpFailure> {
    let Some(mark) = cfg
        .get("description")
        .and_then(|d| ManagedMark::from_description(d))
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

fn tags_with_mark(tags: &[String]) -> String {
    let mut all: Vec<String> = tags.iter().map(|t| t.to_ascii_lowercase()).collect();
    all.push(MANAGED_TAG.into());
    all.sort();
    all.dedup();
    all.join(";")
}

/// Option keys an update may delete when the spec no longer sets them. Create-only and
/// resize-only keys (`rootfs`, `unprivileged`, `mpN` volumes) are never touched here.
fn deletable(key: &str) -> bool {
    matches!(
        key,
        "cores"
            | "cpulimit"
            | "cpuunits"
            | "nameserver"
            | "searchdomain"
            | "startup"
            | "onboot"
            | "protection"
            | "features"
    ) || key
        .strip_prefix("net")
        .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

/// Computes the `pct set` for an update: desired options that differ from the config (with the mark
/// kept in description and tags), and managed keys to delete.
fn plan_update(
    mark: &ManagedMark,
    cfg: &CtConfig,
    desired: &[(String, String)],
    tags: &[String],
    description: Option<&str>,
) -> (Vec<(String, String)>, Vec<String>) {
    // Mount points are matched by their path, not their slot: one already there is left alone (growth is a
    // resize), a new one gets a free slot, one whose path left the file is deleted (PVE keeps its volume as
    // unusedN).
    let mp_path = |v: &str| {
        v.split(',')
            .find_map(|p| p.strip_prefix("mp="))
            .map(str::to_string)
    };
    let have_mps: Vec<(&String, Option<String>)> = cfg
        .iter()
        .filter(|(k, _)| is_mp_key(k))
        .map(|(k, v)| (k, mp_path(v)))
        .collect();
    let want_paths: Vec<Option<String>> = desired
        .iter()
        .filter(|(k, _)| is_mp_key(k))
        .map(|(_, v)| mp_path(v))
        .collect();
    let mut taken: Vec<String> = have_mps.iter().map(|(k, _)| (*k).clone()).collect();
    let mut want: Vec<(String, String)> = Vec::new();
    for (k, v) in desired {
        if matches!(
            k.as_str(),
            "tags" | "description" | "rootfs" | "unprivileged"
        ) {
            continue;
        }
        if !is_mp_key(k) {
            want.push((k.clone(), v.clone()));
            continue;
        }
        let path = mp_path(v);
        if have_mps.iter().any(|(_, p)| *p == path) {
            continue;
        }
        let slot = if taken.contains(k) {
            (0..256)
                .map(|i| format!("mp{i}"))
                .find(|s| !taken.contains(s))
                .unwrap_or_else(|| k.clone())
        } else {
            k.clone()
        };
        taken.push(slot.clone());
        want.push((slot, v.clone()));
    }
    want.push(("tags".into(), tags_with_mark(tags)));
    want.push(("description".into(), mark.description(description)));
    let mut set = Vec::new();
    for (k, v) in want {
        let same = match cfg.get(&k) {
            None => false,
            Some(cur) if k.starts_with("net") => crate::convert::same_net(cur, &v),
            Some(cur) if k == "tags" => {
                observe::split_tags(cur).join(";") == observe::split_tags(&v).join(";")
            }
            Some(cur) => cur.trim_end() == v.trim_end(),
        };
        if !same {
            // Keep a generated MAC: a spec without one must not make PVE generate a new one.
            let v = match (k.starts_with("net"), cfg.get(&k)) {
                (true, Some(cur)) => crate::convert::keep_hwaddr(cur, &v),
                _ => v,
            };
            set.push((k, v));
        }
    }
    let mut delete: Vec<String> = cfg
        .keys()
        .filter(|k| deletable(k) && !desired.iter().any(|(d, _)| d == *k))
        .cloned()
        .collect();
    delete.extend(
        have_mps
            .iter()
            .filter(|(_, p)| !want_paths.contains(p))
            .map(|(k, _)| (*k).clone()),
    );
    (set, delete)
}

/// Takes out of `options` / `delete` what would only undo a pending change (the file wants the value in effect
/// now) and returns those keys, to be reverted instead.
fn revert_pending(
    pending: &[pxfleet_pve::PendingKey],
    options: &mut Vec<(String, String)>,
    delete: &mut Vec<String>,
) -> Vec<String> {
    let mut revert = Vec::new();
    for p in pending {
        if p.current.is_none() {
            if let Some(i) = delete.iter().position(|k| *k == p.key) {
                delete.remove(i);
                revert.push(p.key.clone());
            }
        }
        let now = p.current.as_deref().map(str::trim_end);
        if let Some(i) = options
            .iter()
            .position(|(k, v)| *k == p.key && Some(v.trim_end()) == now)
        {
            options.remove(i);
            revert.push(p.key.clone());
        }
    }
    revert
}

/// `mp0` ... `mp255`.
fn is_mp_key(key: &str) -> bool {
    key.strip_prefix("mp")
        .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pending_change_the_file_does_not_want_is_reverted_not_piled_on() {
        let pend =
            |key: &str, current: Option<&str>, pending: Option<&str>| pxfleet_pve::PendingKey {
                key: key.into(),
                current: current.map(String::from),
                pending: pending.map(String::from),
                delete: pending.is_none(),
            };
        // features=nesting=1 set by hand (pending only), nameserver changed by hand (pending), cores by
        // the file (no pending entry)
        let pending = vec![
            pend("features", None, Some("nesting=1")),
            pend("nameserver", Some("10.0.0.1"), Some("10.0.0.9")),
        ];
        let mut options = vec![
            ("nameserver".to_string(), "10.0.0.1".to_string()),
            ("cores".to_string(), "2".to_string()),
        ];
        let mut delete = vec!["features".to_string()];
        let revert = revert_pending(&pending, &mut options, &mut delete);
        assert_eq!(
            revert,
            vec!["features".to_string(), "nameserver".to_string()]
        );
        assert_eq!(options, vec![("cores".to_string(), "2".to_string())]);
        assert!(delete.is_empty());
    }

    #[test]
    fn mount_points_are_matched_by_path_not_slot() {
        let mark = ManagedMark {
            fleet: "dev".into(),
            name: "web".into(),
        };
        let mut cfg = CtConfig::new();
        cfg.insert("description".into(), mark.description(None));
        cfg.insert("tags".into(), "pxfleet".into());
        cfg.insert(
            "mp0".into(),
            "local-lvm:vm-1-disk-1,mp=/data,size=4G".into(),
        );
        cfg.insert(
            "mp1".into(),
            "local-lvm:vm-1-disk-2,mp=/logs,size=2G".into(),
        );
        // /data left the file (so /logs is mp0 in the spec), /new came in as mp1
        let desired = vec![
            ("mp0".to_string(), "local-lvm:2,mp=/logs".to_string()),
            ("mp1".to_string(), "local-lvm:1,mp=/new".to_string()),
        ];
        let (set, delete) = plan_update(&mark, &cfg, &desired, &[], None);
        assert_eq!(delete, vec!["mp0".to_string()]);
        let mps: Vec<&(String, String)> = set.iter().filter(|(k, _)| is_mp_key(k)).collect();
        assert_eq!(
            mps,
            vec![&("mp2".to_string(), "local-lvm:1,mp=/new".to_string())]
        );
    }

    #[test]
    fn updates_keep_the_mark_and_only_touch_what_differs() {
        let mark = ManagedMark {
            fleet: "dev".into(),
            name: "web".into(),
        };
        let mut cfg = CtConfig::new();
        cfg.insert("description".into(), mark.description(None));
        cfg.insert("tags".into(), "pxfleet;web".into());
        cfg.insert("cores".into(), "2".into());
        cfg.insert("memory".into(), "512".into());
        cfg.insert("startup".into(), "order=1".into());
        cfg.insert("rootfs".into(), "local:100/x.raw,size=4G".into());
        cfg.insert(
            "net0".into(),
            "name=eth0,bridge=vmbr0,hwaddr=BC:24:11:00:00:01,ip=dhcp,type=veth".into(),
        );
        let desired = vec![
            ("cores".to_string(), "4".to_string()),
            ("memory".to_string(), "512".to_string()),
            ("rootfs".to_string(), "local:8".to_string()),
            (
                "net0".to_string(),
                "name=eth0,bridge=vmbr0,ip=dhcp,type=veth".to_string(),
            ),
        ];
        let (set, del) = plan_update(&mark, &cfg, &desired, &["web".into()], Some("hello"));
        assert_eq!(
            set,
            vec![
                ("cores".to_string(), "4".to_string()),
                (
                    "description".to_string(),
                    "managed-by: pxfleet fleet=dev name=web\nhello\n".to_string()
                ),
            ]
        );
        assert_eq!(del, vec!["startup".to_string()]);
        assert_eq!(
            tags_with_mark(&["Web".into(), "db".into()]),
            "db;pxfleet;web"
        );
    }
}
