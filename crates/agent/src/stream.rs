//! `pxagent run`: the one bidirectional stream to the controller. On every (re)connect it sends a
//! Hello with the full inventory and the operations the controller has not acknowledged (a full
//! resync), then heartbeats, operation updates and observation deltas, and executes the operations
//! it receives. A broken stream is redialled with jittered exponential backoff.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use pxfleet_proto::v1::{self, agent_message, controller_message};
use tokio::sync::{mpsc, Notify};
use tokio_stream::wrappers::ReceiverStream;

use crate::config::AgentConfig;
use crate::convert;
use crate::executor::{Event, Executor, ExecutorSettings};
use crate::journal::{Journal, JournalError, OpState};
use crate::node::{NodeApi, NodeFacts};
use crate::ops::{OpFailure, OpUpdate};
use crate::pve_node::PveNode;
use crate::seed::Seeder;

/// Why the agent stopped (reconnectable trouble is retried, not returned).
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("reading the node credentials ({cert}, {key}, {ca}): {source}")]
    Credentials {
        cert: String,
        key: String,
        ca: String,
        #[source]
        source: pxfleet_tls::TlsError,
    },
    #[error(transparent)]
    Journal(#[from] JournalError),
}

/// Backoff between reconnects: doubling from `min` to `max`, each wait jittered to 50..100 %.
#[derive(Debug, Clone)]
pub struct Backoff {
    pub min: Duration,
    pub max: Duration,
    current: Duration,
}

impl Backoff {
    pub fn new(min: Duration, max: Duration) -> Self {
        Backoff {
            min,
            max,
            current: min,
        }
    }
    /// The next wait.
    pub fn next_delay(&mut self) -> Duration {
        let base = self.current;
        self.current = (self.current * 2).min(self.max);
        let factor = 0.5 + rand::random::<f64>() * 0.5;
        base.mul_f64(factor)
    }
    pub fn reset(&mut self) {
        self.current = self.min;
    }
}

/// Runs the agent on a real PVE node until `shutdown` completes.
pub async fn run(
    config: AgentConfig,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), RunError> {
    let paths = pxfleet_tls::BundlePaths {
        ca: config.ca.clone(),
        cert: config.cert.clone(),
        key: config.key.clone(),
    };
    let cred_err = |source| RunError::Credentials {
        cert: config.cert.display().to_string(),
        key: config.key.display().to_string(),
        ca: config.ca.display().to_string(),
        source,
    };
    let bundle = pxfleet_tls::Bundle::read(&paths).map_err(cred_err)?;
    let (tls, slot) = pxfleet_tls::renewable_client_config(&bundle).map_err(cred_err)?;
    let renewer = tokio::spawn(crate::renew::keep_renewed(
        config.clone(),
        tls.clone(),
        slot,
        bundle,
        pxfleet_common::Clock::system(),
    ));
    let node = Arc::new(PveNode::from_config(&config));
    let result = run_with(config, node, tls, shutdown).await;
    renewer.abort();
    result
}

/// Runs the agent with any [`NodeApi`](crate::NodeApi) implementation and TLS client config (tests use an in-memory node).
pub async fn run_with<D: NodeApi>(
    config: AgentConfig,
    node: Arc<D>,
    tls: Arc<rustls::ClientConfig>,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), RunError> {
    std::fs::create_dir_all(&config.state_dir).ok();
    let settings = ExecutorSettings {
        parallelism: config.parallelism,
        address_wait: config.address_wait(),
        ..ExecutorSettings::default()
    };
    let journal = Journal::open(&config.journal_dir())?.with_clock(settings.clock.clone());
    let seeder = Seeder::with_limits(config.template_ca_file.clone(), config.template_limits());
    let (exec, mut events) = Executor::new(node, journal, seeder, settings);
    let interrupted = exec.recover().await?;
    if !interrupted.is_empty() {
        tracing::info!(
            count = interrupted.len(),
            "recovered interrupted operations"
        );
    }
    let mut backoff = Backoff::new(Duration::from_millis(500), Duration::from_secs(30));
    tokio::pin!(shutdown);
    loop {
        let session = session(&config, &exec, &tls, &mut events, &mut backoff);
        tokio::select! {
            _ = &mut shutdown => {
                tracing::info!("shutting down");
                return Ok(());
            }
            outcome = session => {
                match outcome {
                    Ok(()) => tracing::warn!(controller = %config.controller, "controller closed the stream"),
                    Err(e) => tracing::warn!(controller = %config.controller, error = %e, "controller stream failed"),
                }
            }
        }
        let wait = backoff.next_delay();
        tracing::info!(
            wait_ms = wait.as_millis() as u64,
            "reconnecting after backoff"
        );
        let sleep = tokio::time::sleep(wait);
        tokio::pin!(sleep);
        // Keep draining executor events while disconnected: finals are in the journal and resent in the hello.
        loop {
            tokio::select! {
                _ = &mut shutdown => return Ok(()),
                _ = &mut sleep => break,
                e = events.recv() => if e.is_none() { return Ok(()) },
            }
        }
    }
}

#[derive(Debug, thiserror::Error)]
enum SessionError {
    #[error("connect: {0}")]
    Connect(#[from] pxfleet_tls::TlsError),
    #[error("stream: {0}")]
    Status(#[from] tonic::Status),
    #[error("observing the node: {0}")]
    Node(#[from] crate::node::PveError),
    #[error("{0}")]
    Journal(#[from] JournalError),
    #[error("outgoing stream closed")]
    Closed,
}

/// One connected session. Four loops share the stream, each waiting only on its own work, so none of them
/// holds up another: reading the controller's messages (operations, acks) never waits for a send or for the
/// node, sending executor events never waits for `pvesh`, and the node is read (heartbeat status, inventory
/// after operations, periodic observation, full resync) off the message paths.
async fn session<D: NodeApi>(
    config: &AgentConfig,
    exec: &Executor<D>,
    tls: &Arc<rustls::ClientConfig>,
    events: &mut mpsc::UnboundedReceiver<Event>,
    backoff: &mut Backoff,
) -> Result<(), SessionError> {
    let channel = pxfleet_tls::connect(&config.controller, tls.clone())
        .await
        .inspect_err(|e| crate::renew::log_refusal(e, &config.node))?;
    let mut client = v1::agent_service_client::AgentServiceClient::new(channel);
    let (tx, rx) = mpsc::channel::<v1::AgentMessage>(OUTBOUND_QUEUE);
    // Discard updates queued before this session: the hello below carries the journal's view.
    while events.try_recv().is_ok() {}
    let (hello_msg, facts) = hello(config, exec).await?;
    tx.send(hello_msg).await.map_err(|_| SessionError::Closed)?;
    // What the controller last heard of the node's template caches and storages.
    let sent_inventory = (convert::templates(&facts), convert::storages(&facts));
    let incoming = client.connect(ReceiverStream::new(rx)).await?.into_inner();
    tracing::info!(controller = %config.controller, node = %config.node, "connected; hello sent");
    backoff.reset();
    let shared = Shared {
        config,
        exec,
        out: Outbox { tx },
        vmids: Mutex::new(HashMap::new()),
        heartbeat_every: Mutex::new(config.heartbeat()),
        heartbeat_changed: Notify::new(),
        inventory_dirty: Notify::new(),
    };
    tokio::select! {
        r = read_loop(&shared, incoming) => r,
        r = event_loop(&shared, events) => r,
        r = heartbeat_loop(&shared) => r,
        r = node_loop(&shared, sent_inventory) => r,
    }
}

/// Messages the agent queues for the controller. Bounded: when the controller reads slowly the loop that
/// sends waits, never the one that reads.
const OUTBOUND_QUEUE: usize = 1024;

/// Shortest gap between two inventory reads after operations: a burst of finished operations costs one
/// `pvesh`/`pvesm` round, not one per operation.
const INVENTORY_COALESCE: Duration = Duration::from_millis(500);

struct Outbox {
    tx: mpsc::Sender<v1::AgentMessage>,
}

impl Outbox {
    async fn send(&self, m: agent_message::Msg) -> Result<(), SessionError> {
        self.tx
            .send(v1::AgentMessage { msg: Some(m) })
            .await
            .map_err(|_| SessionError::Closed)
    }
}

/// What the loops of one session share.
struct Shared<'a, D: NodeApi> {
    config: &'a AgentConfig,
    exec: &'a Executor<D>,
    out: Outbox,
    /// Operation id -> vm_id, for updates (the controller's message carries it; seeds have none).
    vmids: Mutex<HashMap<String, u32>>,
    heartbeat_every: Mutex<Duration>,
    heartbeat_changed: Notify,
    /// Set when an operation finished: templates or free space may have changed.
    inventory_dirty: Notify,
}

impl<D: NodeApi> Shared<'_, D> {
    fn node(&self) -> &str {
        &self.config.node
    }
}

/// Reads the controller's messages: operations go to the executor at once (it queues them behind its
/// parallelism), acks to the journal.
async fn read_loop<D: NodeApi>(
    sh: &Shared<'_, D>,
    mut incoming: tonic::Streaming<v1::ControllerMessage>,
) -> Result<(), SessionError> {
    loop {
        let Some(msg) = incoming.message().await? else {
            return Ok(());
        };
        match msg.msg {
            Some(controller_message::Msg::Welcome(w)) => {
                tracing::info!(node = %w.node, protocol = w.protocol_version, "welcomed by controller");
                if w.heartbeat_interval_seconds > 0 {
                    *sh.heartbeat_every.lock().expect("heartbeat lock") =
                        Duration::from_secs(w.heartbeat_interval_seconds.into());
                    sh.heartbeat_changed.notify_one();
                }
            }
            Some(controller_message::Msg::Operation(op)) => {
                let vmid = op.vm_id;
                match convert::operation_from_proto(op) {
                    Ok(op) => {
                        sh.vmids
                            .lock()
                            .expect("vmids lock")
                            .insert(op.id.clone(), op.vmid().unwrap_or(vmid));
                        sh.exec.submit(op);
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "refusing an operation");
                        let u = OpUpdate::Failed {
                            op_id: e.op_id.clone(),
                            failure: OpFailure {
                                error: e.to_string(),
                                retryable: false,
                            },
                        };
                        let m = convert::update_to_proto(&u, vmid, sh.node(), sh.exec.now_ms());
                        // Not awaited here: the reply goes out through the queue without holding up reading.
                        if sh
                            .out
                            .tx
                            .try_send(v1::AgentMessage {
                                msg: Some(agent_message::Msg::OperationUpdate(m)),
                            })
                            .is_err()
                        {
                            tracing::warn!(op_id = %e.op_id, "outbound queue full; the refusal is sent when the controller re-sends the operation");
                        }
                    }
                }
            }
            Some(controller_message::Msg::Cancel(c)) => {
                tracing::warn!(op_id = %c.op_id, reason = %c.reason, "cancel requested; operations run to completion (they are idempotent and short)");
            }
            Some(controller_message::Msg::Ack(a)) => {
                for id in &a.op_ids {
                    sh.exec.journal().ack(id)?;
                    sh.vmids.lock().expect("vmids lock").remove(id);
                }
            }
            None => {}
        }
    }
}

/// Sends what the executor reports (operation progress and results, observation deltas) as it comes.
async fn event_loop<D: NodeApi>(
    sh: &Shared<'_, D>,
    events: &mut mpsc::UnboundedReceiver<Event>,
) -> Result<(), SessionError> {
    loop {
        let Some(ev) = events.recv().await else {
            return Err(SessionError::Closed);
        };
        match ev {
            Event::Op(u) => {
                let vmid = sh
                    .vmids
                    .lock()
                    .expect("vmids lock")
                    .get(u.op_id())
                    .copied()
                    .unwrap_or(0);
                let m = convert::update_to_proto(&u, vmid, sh.node(), sh.exec.now_ms());
                sh.out.send(agent_message::Msg::OperationUpdate(m)).await?;
                if u.is_final() {
                    sh.inventory_dirty.notify_one();
                }
            }
            Event::Delta(d) => {
                sh.out
                    .send(agent_message::Msg::Observation(v1::Observation {
                        full: false,
                        containers: d
                            .changed
                            .iter()
                            .map(|c| convert::observed_to_proto(c, sh.node()))
                            .collect(),
                        removed_vm_ids: d.removed.clone(),
                        templates: vec![],
                        storages: vec![],
                        unix_ms: sh.exec.now_ms(),
                    }))
                    .await?;
            }
        }
    }
}

/// Heartbeats at the controller's interval, with the node's free memory (a slow node status read delays only
/// this loop).
async fn heartbeat_loop<D: NodeApi>(sh: &Shared<'_, D>) -> Result<(), SessionError> {
    let mut seq = 0u64;
    loop {
        let every = *sh.heartbeat_every.lock().expect("heartbeat lock");
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = sh.heartbeat_changed.notified() => break,
            }
            seq += 1;
            let memory_free_bytes = match sh.exec.node().memory_free_bytes().await {
                Ok(b) => b,
                Err(e) => {
                    tracing::debug!(error = %e, "node status for the heartbeat failed");
                    0 // the controller keeps its last value
                }
            };
            sh.out
                .send(agent_message::Msg::Heartbeat(v1::Heartbeat {
                    seq,
                    unix_ms: sh.exec.now_ms(),
                    running_operations: sh.exec.in_flight() as u32,
                    memory_free_bytes,
                }))
                .await?;
        }
    }
}

/// Reads the node in the background: the inventory after operations finished (coalesced), the periodic
/// observation pass, and the full resync.
async fn node_loop<D: NodeApi>(
    sh: &Shared<'_, D>,
    mut sent_inventory: InventoryView,
) -> Result<(), SessionError> {
    let mut observe = tokio::time::interval(sh.config.observe_interval());
    observe.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    observe.reset();
    let mut resync = tokio::time::interval(FULL_RESYNC);
    resync.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    resync.reset();
    let mut watch = tokio::time::interval(CONFIG_WATCH.min(sh.config.observe_interval()));
    watch.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut files = sh.exec.node().config_fingerprints().await;
    loop {
        tokio::select! {
            _ = watch.tick() => {
                // A config file changed by hand (or by anyone): observe now, not at the next pass.
                let now = sh.exec.node().config_fingerprints().await;
                if now.is_some() && files.is_some() && now != files {
                    if let Err(e) = sh.exec.observe_pass().await {
                        tracing::warn!(error = %e, "observation after a config file changed failed");
                    }
                }
                files = now;
            }
            _ = sh.inventory_dirty.notified() => {
                // Let the rest of a burst finish first; notifications meanwhile are folded into this read.
                tokio::time::sleep(INVENTORY_COALESCE).await;
                match sh.exec.node().inventory().await {
                    Ok(facts) => {
                        if let Some(obs) = inventory_delta(&facts, &mut sent_inventory, sh.exec.now_ms()) {
                            sh.out.send(agent_message::Msg::Observation(obs)).await?;
                        }
                    }
                    Err(e) => tracing::warn!(error = %e, "reading templates and storages after an operation failed"),
                }
            }
            _ = observe.tick() => {
                if let Err(e) = sh.exec.observe_pass().await {
                    tracing::warn!(error = %e, "periodic observation failed");
                }
            }
            _ = resync.tick() => {
                // Safety net: the complete picture, replacing whatever the controller holds for this node.
                match full_observation(sh.config, sh.exec).await {
                    Ok((obs, inv)) => {
                        sent_inventory = inv;
                        sh.out.send(agent_message::Msg::Observation(obs)).await?;
                    }
                    Err(e) => tracing::warn!(error = %e, "full resync observation failed"),
                }
            }
        }
    }
}

/// How often the container config files are fingerprinted between observation passes (reading pmxcfs files
/// starts no process; `pct config` and the listing do): a change made by hand is then observed within this
/// time rather than at the next `observe_secs` pass.
pub const CONFIG_WATCH: Duration = Duration::from_secs(5);

/// How often the whole node is sent as one `full` observation, whatever the deltas said.
pub const FULL_RESYNC: Duration = Duration::from_secs(60);

type InventoryView = (Vec<v1::CachedTemplate>, Vec<v1::Storage>);

/// An observation carrying the node's templates and storages when they differ from `sent` (which is updated),
/// stamped `unix_ms`.
pub fn inventory_delta(
    facts: &NodeFacts,
    sent: &mut InventoryView,
    unix_ms: i64,
) -> Option<v1::Observation> {
    let now = (convert::templates(facts), convert::storages(facts));
    if now == *sent {
        return None;
    }
    *sent = now.clone();
    Some(v1::Observation {
        full: false,
        containers: vec![],
        removed_vm_ids: vec![],
        templates: now.0,
        storages: now.1,
        unix_ms,
    })
}

/// Every container, template and storage of the node as one `full` observation: the containers as a quick
/// pass leaves the snapshot (one listing, configurations read only where the listing moved), the
/// templates and storages read now.
async fn full_observation<D: NodeApi>(
    config: &AgentConfig,
    exec: &Executor<D>,
) -> Result<(v1::Observation, InventoryView), SessionError> {
    let facts = exec.node().facts().await?;
    exec.observe_pass().await?;
    let containers = exec.known_containers();
    let inv = (convert::templates(&facts), convert::storages(&facts));
    Ok((
        v1::Observation {
            full: true,
            containers: containers
                .iter()
                .map(|c| convert::observed_to_proto(c, &config.node))
                .collect(),
            removed_vm_ids: vec![],
            templates: inv.0.clone(),
            storages: inv.1.clone(),
            unix_ms: exec.now_ms(),
        },
        inv,
    ))
}

/// The first message of a session: inventory, every container, unacknowledged operations; and the facts
/// it was made from.
async fn hello<D: NodeApi>(
    config: &AgentConfig,
    exec: &Executor<D>,
) -> Result<(v1::AgentMessage, NodeFacts), SessionError> {
    let facts = exec.node().facts().await?;
    let containers = exec.full_observation().await?;
    let mut operations = Vec::new();
    for e in exec.journal().unacked()? {
        let vmid = e.op.vmid().unwrap_or(0);
        let u = match e.state {
            OpState::Done(result) => OpUpdate::Succeeded {
                op_id: e.op.id,
                result,
            },
            OpState::Failed(failure) => OpUpdate::Failed {
                op_id: e.op.id,
                failure,
            },
            OpState::Received | OpState::Running => OpUpdate::Progress {
                op_id: e.op.id,
                message: "running".into(),
            },
            OpState::Interrupted => continue,
        };
        operations.push(convert::update_to_proto(
            &u,
            vmid,
            &config.node,
            exec.now_ms(),
        ));
    }
    let msg = v1::AgentMessage {
        msg: Some(agent_message::Msg::Hello(v1::Hello {
            node: config.node.clone(),
            agent_version: env!("CARGO_PKG_VERSION").to_string(),
            protocol_version: pxfleet_proto::PROTOCOL_VERSION,
            inventory: Some(convert::inventory(
                &config.node,
                &facts,
                &containers,
                &config.labels,
            )),
            operations,
        })),
    };
    Ok((msg, facts))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_with_jitter_and_caps() {
        let mut b = Backoff::new(Duration::from_millis(100), Duration::from_millis(800));
        let waits: Vec<Duration> = (0..6).map(|_| b.next_delay()).collect();
        let bases = [100u64, 200, 400, 800, 800, 800];
        for (w, base) in waits.iter().zip(bases) {
            assert!(
                *w >= Duration::from_millis(base / 2) && *w <= Duration::from_millis(base),
                "{w:?} vs {base}"
            );
        }
        b.reset();
        assert!(b.next_delay() <= Duration::from_millis(100));
    }

    #[test]
    fn template_and_storage_changes_are_reported_once() {
        use crate::node::TemplateFile;
        let mut facts = NodeFacts::default();
        let mut sent = (convert::templates(&facts), convert::storages(&facts));
        assert!(
            inventory_delta(&facts, &mut sent, 1_700_000_000_000).is_none(),
            "nothing changed"
        );
        facts.templates.push(TemplateFile {
            volid: "local:vztmpl/u.tar.xz".into(),
            storage: "local".into(),
            file_name: "u.tar.xz".into(),
            size_bytes: 7,
        });
        let obs = inventory_delta(&facts, &mut sent, 1_700_000_000_000)
            .expect("a new template is reported");
        assert!(!obs.full);
        assert_eq!(obs.templates.len(), 1);
        assert_eq!(obs.templates[0].volid, "local:vztmpl/u.tar.xz");
        assert!(
            inventory_delta(&facts, &mut sent, 1_700_000_000_000).is_none(),
            "reported once"
        );
    }
}
