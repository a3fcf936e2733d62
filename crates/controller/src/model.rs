//! The controller's domain types: what it stores in sled and reasons about. Protobuf and spec types are
//! converted to these at the edges (fleet_service, agent_service), so the store, scheduler and reconciler
//! do not depend on wire formats.

use std::collections::BTreeMap;

use pxfleet_spec::observed::ObservedConfig;
use pxfleet_spec::{Container, Template};
use serde::{Deserialize, Serialize};

/// Milliseconds since the Unix epoch.
pub type Millis = u64;

/// A storage as the agent reports it (`pvesm status` / `pvesh get /nodes/N/storage`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct StorageInfo {
    pub id: String,
    /// Content types, e.g. `rootdir`, `vztmpl`, `images`.
    pub content: Vec<String>,
    pub enabled: bool,
    pub active: bool,
    pub total_bytes: u64,
    pub avail_bytes: u64,
}

impl StorageInfo {
    pub fn holds_rootdir(&self) -> bool {
        self.enabled && self.content.iter().any(|c| c == "rootdir")
    }
}

/// What a node told us about itself in its hello (refreshed with every inventory update).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct NodeInventory {
    pub pve_version: String,
    /// The PVE cluster the node is in; empty for a standalone node (or an agent too old to say). Containers
    /// migrate only between nodes of one cluster.
    #[serde(default)]
    pub cluster_name: String,
    pub cores: u32,
    pub memory_mib: u64,
    pub memory_free_mib: u64,
    pub storages: Vec<StorageInfo>,
    pub bridges: Vec<String>,
    /// Template volume ids cached on the node (e.g. `local:vztmpl/ubuntu-25.04.tar.xz`).
    pub templates: Vec<String>,
    /// Labels the agent's config gives the node (merged with labels set through the API).
    pub labels: BTreeMap<String, String>,
}

/// A node as stored: inventory, operator state and liveness.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct NodeRecord {
    pub name: String,
    pub inventory: NodeInventory,
    pub cordoned: bool,
    /// Why it was cordoned (empty when not cordoned or no reason given).
    #[serde(default)]
    pub cordon_reason: String,
    /// Serial (lowercase hex) of the node certificate its agent last connected with.
    #[serde(default)]
    pub cert_serial: String,
    /// Last heartbeat or message, ms since epoch; 0 = never seen.
    pub last_seen_ms: Millis,
    /// Last operation update (progress or result) from its agent; with operations in flight and none for a
    /// while the node is `stalled`.
    #[serde(default)]
    pub last_op_update_ms: Millis,
    /// When the node enrolled.
    pub enrolled_ms: Millis,
    /// Templates seeded on this node through a successful seed operation: template name -> volid.
    pub seeded: BTreeMap<String, String>,
    /// What each URL template's file is on this node, as the agent reported after seeding: URL -> digest.
    /// Compared across nodes for templates without a declared checksum (`template_url`).
    #[serde(default)]
    pub template_digests: BTreeMap<String, TemplateDigest>,
}

/// The sha256 an agent reported for a template file on its node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct TemplateDigest {
    /// Template name in the fleet (for messages).
    pub template: String,
    /// Lower-case hex.
    pub sha256: String,
    /// When this digest was first reported on this node; the earliest report of a URL is the reference
    /// that other nodes are compared with.
    pub recorded_ms: Millis,
}

/// Node status as shown by `get nodes`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NodeStatus {
    Ready,
    Down,
    Cordoned,
    /// Heartbeating, but its operations do not move.
    Stalled,
}

impl NodeStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            NodeStatus::Ready => "ready",
            NodeStatus::Down => "down",
            NodeStatus::Cordoned => "cordoned",
            NodeStatus::Stalled => "stalled",
        }
    }
}

impl NodeRecord {
    /// `down` beats `cordoned`: an operator wants to know first that the node is unreachable.
    pub fn status(&self, now: Millis, heartbeat_timeout_ms: u64) -> NodeStatus {
        if self.last_seen_ms == 0 || now.saturating_sub(self.last_seen_ms) > heartbeat_timeout_ms {
            NodeStatus::Down
        } else if self.cordoned {
            NodeStatus::Cordoned
        } else {
            NodeStatus::Ready
        }
    }
}

/// The pxfleet mark on a container: which fleet entry it belongs to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, PartialOrd, Ord, Hash)]
pub struct ManagedBy {
    pub fleet: String,
    pub name: String,
}

/// A container as an agent reports it; managed or not.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct ObservedContainer {
    pub node: String,
    pub vm_id: u32,
    pub hostname: String,
    pub running: bool,
    /// The pxfleet mark; None = not ours, never touched (but its vm_id and addresses still count as taken).
    pub managed: Option<ManagedBy>,
    /// None = unset (all host CPUs).
    pub cores: Option<u32>,
    pub memory_mib: u64,
    pub swap_mib: u64,
    pub disk_gib: u64,
    /// Static addresses from the config (no prefix), for collision checks.
    pub static_addresses: Vec<String>,
    /// Addresses seen at runtime (CIDR or plain).
    pub addresses: Vec<String>,
    /// `lock:` value (e.g. `create`), if any: the container is mid-operation.
    pub lock: Option<String>,
    /// The raw `pct config` key/value pairs as the agent reported them (for `describe` and drift).
    #[serde(default)]
    pub raw_config: BTreeMap<String, String>,
    /// The whole configuration in fleet terms (tags, description without the managed-by line, network, ...),
    /// what drift is detected on. `None` for an observation without a config (an older record, or the
    /// placeholder stored after a create whose result carried no observation).
    #[serde(default)]
    pub config: Option<ObservedConfig>,
}

impl ObservedContainer {
    /// The first runtime IPv4 address, without prefix.
    pub fn ipv4(&self) -> Option<String> {
        self.first_address(false)
    }
    /// The first global runtime IPv6 address, without prefix.
    pub fn ipv6(&self) -> Option<String> {
        self.first_address(true)
    }
    fn first_address(&self, v6: bool) -> Option<String> {
        self.addresses
            .iter()
            .map(|a| a.split('/').next().unwrap_or(a))
            .filter_map(|a| a.parse::<std::net::IpAddr>().ok())
            .find(|ip| match ip {
                std::net::IpAddr::V4(ip) => !v6 && !ip.is_loopback(),
                std::net::IpAddr::V6(ip) => {
                    v6 && !ip.is_loopback() && (ip.segments()[0] & 0xffc0) != 0xfe80
                }
            })
            .map(|ip| ip.to_string())
    }
}

/// One container of one fleet as it should be: placed (node) and numbered (vm_id).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DesiredContainer {
    pub fleet: String,
    pub name: String,
    pub node: String,
    pub vm_id: u32,
    /// The resolved container with `node`, `vm_id` and `datastore_id` filled in by placement. Its password is
    /// not kept here (a `Secret` serializes redacted); it lives in the secrets tree.
    pub container: Container,
    /// The fleet's template this container is created from.
    pub template: Template,
    /// The fleet revision that last changed this container; a new revision resets failed attempts.
    pub revision: u64,
    /// The file names the node (`node:`); otherwise the scheduler chose it, and a container moved to another
    /// node by hand is adopted there instead of being moved back.
    #[serde(default)]
    pub node_pinned: bool,
}

/// What was last successfully applied to a node for a container (created, updated). The reconciler compares
/// desired against this for what the agent cannot observe (template, unprivileged), and uses its existence
/// to know which containers it must destroy when they leave the fleet.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AppliedContainer {
    pub fleet: String,
    pub name: String,
    pub node: String,
    pub vm_id: u32,
    pub container: Container,
    pub template: Template,
}

/// What the controller allocated to one container name of a fleet and keeps forever, also across destroy, so
/// destroying and re-creating the container gives the same result: its vm_id (preferred again when it is
/// free) and the MAC of each interface the file leaves without `mac_address` (interface index -> MAC).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct Allocation {
    pub fleet: String,
    pub name: String,
    #[serde(default)]
    pub vm_id: Option<u32>,
    #[serde(default)]
    pub macs: BTreeMap<usize, pxfleet_spec::MacAddr>,
}

/// A fleet's head: the current revision and who made it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FleetRecord {
    pub name: String,
    pub revision: u64,
    pub author: String,
    pub updated_ms: Millis,
    /// Whether the fleet has hooks at this revision, as [`crate::hooks`] finds them (the latest revision
    /// that names hooks or was submitted from a file), so the hook worker learns that a fleet has none without
    /// decoding its revision (10,000 containers). `None` in records written before it was kept: the worker
    /// reads the revisions then.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub has_hooks: Option<bool>,
}

/// One numbered revision of a fleet: the whole normalised spec, the author, the time.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Revision {
    pub fleet: String,
    pub revision: u64,
    pub author: String,
    pub created_ms: Millis,
    /// The normalised spec (secrets removed) as JSON.
    pub spec: serde_json::Value,
    /// A one-line summary of the plan this revision applied ("2 to create, 1 to destroy").
    pub summary: String,
    /// The file name the submitter gave (empty for a destroy).
    #[serde(default)]
    pub file_name: String,
    /// SHA-256 (hex) of the submitted fleet.yaml text (empty for a destroy).
    #[serde(default)]
    pub source_sha256: String,
}

/// What an operation does.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum OperationKind {
    /// Download and verify a template into the node's storage.
    SeedTemplate {
        name: String,
        template: Template,
    },
    /// `pct create` (the password is taken from the secrets tree at dispatch) then start.
    Create {
        container: Box<Container>,
        template: Template,
    },
    /// `pct set` of the fields that differ, applied live where PVE allows.
    Update {
        container: Box<Container>,
        template: Template,
        /// The fleet fields that differ (plan field names: `memory`, `tags`, `extra_interfaces[0].mtu`), drift
        /// included; sent to the agent as `changed_fields`.
        #[serde(default)]
        fields: Vec<String>,
        /// The plan announced a restart ("(then restarted)"): the agent restarts the running container when
        /// PVE leaves changes pending.
        #[serde(default)]
        restart: bool,
        /// The planner's changes this operation realises (its update and repair actions), structured: what
        /// the listing shows and what tells a repeat of the same work from new work.
        #[serde(default)]
        changes: Vec<pxfleet_spec::plan::FieldChange>,
    },
    /// `pct resize <vmid> <disk> <disk_gib>G`.
    Resize {
        /// `rootfs` or `mpN` (the planner's `Resize.disk`).
        #[serde(default = "rootfs")]
        disk: String,
        disk_gib: u64,
    },
    Start,
    Stop,
    /// Stop and `pct destroy --purge`.
    Destroy,
    /// `pct migrate <vmid> <target>` (`--restart` for a running container): the container, its volumes,
    /// vm_id and MACs move to `target`. Runs on the source node.
    Migrate {
        target: String,
        restart: bool,
    },
    /// `pxctl snapshot`: `pct snapshot`, `delsnapshot`, `rollback` or `listsnapshot`. Work beside the file, not
    /// towards it: once finished it is not the container's latest operation for the reconciler ([`Self::is_aside`]).
    Snapshot(SnapshotOp),
}

/// A snapshot operation and, once it succeeded, the container's snapshots after it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SnapshotOp {
    pub action: SnapshotAction,
    /// The snapshot (empty for `List`).
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub description: String,
    /// `Rollback`: start the container afterwards (it was running).
    #[serde(default)]
    pub start: bool,
    /// The agent's list after a success, parents first.
    #[serde(default)]
    pub snapshots: Vec<pxfleet_pve::Snapshot>,
}

/// What a snapshot operation does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SnapshotAction {
    Create,
    Delete,
    Rollback,
    List,
}

impl SnapshotAction {
    pub fn as_str(self) -> &'static str {
        match self {
            SnapshotAction::Create => "create",
            SnapshotAction::Delete => "delete",
            SnapshotAction::Rollback => "rollback",
            SnapshotAction::List => "list",
        }
    }
}

fn rootfs() -> String {
    "rootfs".into()
}

/// Which kind of operation, without its payload (what an event names).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpKind {
    SeedTemplate,
    Create,
    Update,
    Resize,
    Start,
    Stop,
    Destroy,
    Migrate,
    Snapshot,
}

impl OperationKind {
    pub fn tag(&self) -> OpKind {
        match self {
            OperationKind::SeedTemplate { .. } => OpKind::SeedTemplate,
            OperationKind::Create { .. } => OpKind::Create,
            OperationKind::Update { .. } => OpKind::Update,
            OperationKind::Resize { .. } => OpKind::Resize,
            OperationKind::Start => OpKind::Start,
            OperationKind::Stop => OpKind::Stop,
            OperationKind::Destroy => OpKind::Destroy,
            OperationKind::Migrate { .. } => OpKind::Migrate,
            OperationKind::Snapshot(_) => OpKind::Snapshot,
        }
    }

    pub fn name(&self) -> &'static str {
        match self {
            OperationKind::SeedTemplate { .. } => "seed_template",
            OperationKind::Create { .. } => "create",
            OperationKind::Update { .. } => "update",
            OperationKind::Resize { .. } => "resize",
            OperationKind::Start => "start",
            OperationKind::Stop => "stop",
            OperationKind::Destroy => "destroy",
            OperationKind::Migrate { .. } => "migrate",
            OperationKind::Snapshot(_) => "snapshot",
        }
    }

    /// Work beside the fleet file (a snapshot): once finished, the reconciler and `pxctl get` look past it to
    /// the container's latest operation towards the file, so a snapshot neither hides a failure nor shows one.
    pub fn is_aside(&self) -> bool {
        matches!(self, OperationKind::Snapshot(_))
    }

    /// Whether `other` is the same work again: the same kind with the same target values. Two updates compare
    /// by their changes (field, from, to), whether the planner called them update or repair: after an update
    /// that "succeeded" without the node changing, the same difference comes back as drift.
    /// Whether this kind puts back what the node changed (an in-place update, a start, a stop, a disk growth, a
    /// move back to the file's node): the kinds whose repeated success means the repair does not hold.
    pub fn is_repair(&self) -> bool {
        matches!(
            self,
            OperationKind::Update { .. }
                | OperationKind::Start
                | OperationKind::Stop
                | OperationKind::Resize { .. }
                | OperationKind::Migrate { .. }
        )
    }

    pub fn same_work(&self, other: &OperationKind) -> bool {
        match (self, other) {
            (
                OperationKind::Update { changes: a, .. },
                OperationKind::Update { changes: b, .. },
            ) => {
                let key = |c: &pxfleet_spec::plan::FieldChange| {
                    format!("{}\u{1}{:?}\u{1}{:?}", c.field, c.from, c.to)
                };
                let a: std::collections::BTreeSet<String> = a.iter().map(key).collect();
                let b: std::collections::BTreeSet<String> = b.iter().map(key).collect();
                a == b
            }
            (a, b) => a == b,
        }
    }
}

/// Where an operation is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OpState {
    /// Waiting for its node (or its backoff) to be sent.
    Pending,
    /// Sent to the agent; no progress yet.
    Dispatched,
    /// The agent reported progress.
    Running,
    Succeeded,
    Failed,
}

impl OpState {
    pub fn is_active(self) -> bool {
        matches!(
            self,
            OpState::Pending | OpState::Dispatched | OpState::Running
        )
    }
    pub fn as_str(self) -> &'static str {
        match self {
            OpState::Pending => "pending",
            OpState::Dispatched => "dispatched",
            OpState::Running => "running",
            OpState::Succeeded => "succeeded",
            OpState::Failed => "failed",
        }
    }
}

/// One unit of work for one node. Idempotent on the agent by `id`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Operation {
    pub id: String,
    /// Empty for node-level operations (template seeding).
    pub fleet: String,
    pub container: String,
    pub node: String,
    pub vm_id: u32,
    pub kind: OperationKind,
    /// Which attempt this is (1-based) for this container's current goal.
    pub attempt: u32,
    pub state: OpState,
    pub created_ms: Millis,
    /// Not sent before this time (backoff).
    pub not_before_ms: Millis,
    pub dispatched_ms: Option<Millis>,
    /// The agent stream (connection number, unique across controller restarts) it was last sent on: an HTTP/2
    /// stream delivers in order or breaks, so only an operation whose stream is gone can have been lost.
    #[serde(default)]
    pub dispatched_conn: u64,
    /// A dispatched operation without a result by then is failed.
    pub deadline_ms: Option<Millis>,
    pub finished_ms: Option<Millis>,
    pub last_error: Option<String>,
    /// The revision of the desired container this operation works towards.
    pub revision: u64,
    /// Why the reconciler emitted it ("memory 512 -> 1024", "template changed: replace").
    #[serde(default)]
    pub reason: String,
}

impl Operation {
    /// A new operation (fresh id) for `container` of `fleet` on `node`, waiting to be sent from `now` on: the
    /// first attempt, revision 0, no reason, never dispatched. Callers set what differs with `..` update syntax
    /// (attempt and backoff, revision, reason, or a failed state).
    pub fn pending(
        fleet: &str,
        container: &str,
        node: &str,
        vm_id: u32,
        kind: OperationKind,
        now: Millis,
    ) -> Operation {
        Operation {
            id: new_id(),
            fleet: fleet.to_string(),
            container: container.to_string(),
            node: node.to_string(),
            vm_id,
            kind,
            attempt: 1,
            state: OpState::Pending,
            created_ms: now,
            not_before_ms: now,
            dispatched_ms: None,
            dispatched_conn: 0,
            deadline_ms: None,
            finished_ms: None,
            last_error: None,
            revision: 0,
            reason: String::new(),
        }
    }
}

/// A unique 128-bit hex id that sorts in creation order: 64 bits of a strictly increasing clock (nanoseconds
/// since the epoch, bumped by one when two ids are made in the same nanosecond) then 64 random bits. Operations
/// made in the same millisecond therefore still sort in the order they were made (the store orders operations by
/// `(created_ms, id)` and "the latest operation of a container" depends on it).
pub fn new_id() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static LAST: AtomicU64 = AtomicU64::new(0);
    // the real clock, not the injected one: ids must be unique and increasing across restarts whatever a
    // test's clock says; the time an operation was made is its `created_ms`
    #[allow(clippy::disallowed_methods)]
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    let mut prev = LAST.load(Ordering::Relaxed);
    let stamp = loop {
        let next = now.max(prev + 1);
        match LAST.compare_exchange_weak(prev, next, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => break next,
            Err(actual) => prev = actual,
        }
    };
    let random: u64 = rand::random();
    format!("{stamp:016x}{random:016x}")
}

/// Status of a container as `get containers` shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ContainerStatus {
    Pending,
    Creating,
    Running,
    Stopped,
    Updating,
    Destroying,
    Failed,
}

impl ContainerStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            ContainerStatus::Pending => "pending",
            ContainerStatus::Creating => "creating",
            ContainerStatus::Running => "running",
            ContainerStatus::Stopped => "stopped",
            ContainerStatus::Updating => "updating",
            ContainerStatus::Destroying => "destroying",
            ContainerStatus::Failed => "failed",
        }
    }
    pub const ALL: [ContainerStatus; 7] = [
        ContainerStatus::Pending,
        ContainerStatus::Creating,
        ContainerStatus::Running,
        ContainerStatus::Stopped,
        ContainerStatus::Updating,
        ContainerStatus::Destroying,
        ContainerStatus::Failed,
    ];
}

/// One line of the audit log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditEntry {
    pub time_ms: Millis,
    /// The identity from the client certificate (`user/alice`, `node/mk33`).
    pub actor: String,
    /// What was done (`submit`, `destroy`, `cordon`, `create_join_token`, `enroll`).
    pub action: String,
    /// What it was done to (fleet, node).
    pub target: String,
    pub detail: String,
}

/// A progress event for Watch: an operation moved, a container's status changed, a hook ran, or a revision
/// settled. Broadcast on [`crate::state::State::events`]; the Watch handler turns it into protobuf.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FleetEvent {
    pub unix_ms: Millis,
    pub fleet: String,
    /// Empty for fleet-level events.
    pub container: String,
    pub vm_id: u32,
    pub node: String,
    /// A container's status, on status changes.
    pub status: Option<ContainerStatus>,
    /// The operation, on operation events.
    pub op: Option<OpEvent>,
    pub message: String,
    pub error: String,
    /// The fleet revision the event belongs to.
    pub revision: u64,
    /// Every container of the revision is done (running, stopped as desired, or failed).
    pub settled: bool,
}

/// The operation an event is about.
#[derive(Debug, Clone, PartialEq)]
pub struct OpEvent {
    pub id: String,
    pub kind: OpKind,
    pub state: OpState,
}

/// Where an agent says an operation is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UpdateState {
    /// Received or running: not final.
    Progress,
    Succeeded,
    /// Failed or cancelled.
    Failed,
}

/// An agent's report on one operation (progress or its result), as the reconcile loop takes it.
#[derive(Debug, Clone, PartialEq)]
pub struct OperationUpdate {
    pub op_id: String,
    pub state: UpdateState,
    pub message: String,
    pub error: String,
    /// The container as it is after the operation, when the agent sent it.
    pub container: Option<ObservedContainer>,
    /// After a seed from a URL: the sha256 of the file on the node (empty when the agent reports none).
    pub template_sha256: String,
    /// After a snapshot operation: the container's snapshots, parents first.
    pub snapshots: Vec<pxfleet_pve::Snapshot>,
}

#[cfg(test)]
mod tests {
    use super::new_id;

    #[test]
    fn ids_sort_in_creation_order_even_within_one_millisecond() {
        let ids: Vec<String> = (0..10_000).map(|_| new_id()).collect();
        assert!(ids
            .iter()
            .all(|id| id.len() == 32 && id.chars().all(|c| c.is_ascii_hexdigit())));
        assert!(
            ids.windows(2).all(|w| w[0] < w[1]),
            "ids must be strictly increasing"
        );
    }
}
