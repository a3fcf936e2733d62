//! The agent's own model of an operation and its outcome: what the controller asks for once it has
//! been converted from protobuf at the edge ([`crate::convert`]), and what goes into the journal.
//! Secrets (the root password) are carried in memory only and never serialised.

use serde::{Deserialize, Serialize};

use crate::node::{CreateSpec, ManagedMark, Secret};
use crate::observe::ObservedContainer;

/// One operation, keyed by the controller's operation id (the idempotency key).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Operation {
    pub id: String,
    pub kind: OpKind,
}

impl Operation {
    /// The container this operation works on; `None` for template seeding.
    pub fn vmid(&self) -> Option<u32> {
        match &self.kind {
            OpKind::Create(c) => Some(c.vmid),
            OpKind::Update { vmid, .. }
            | OpKind::Resize { vmid, .. }
            | OpKind::Start { vmid, .. }
            | OpKind::Stop { vmid, .. }
            | OpKind::Destroy { vmid, .. }
            | OpKind::Migrate { vmid, .. }
            | OpKind::Snapshot { vmid, .. } => Some(*vmid),
            OpKind::SeedTemplate(_) => None,
        }
    }

    /// Short name of the kind, for logs and messages.
    pub fn kind_name(&self) -> &'static str {
        match &self.kind {
            OpKind::Create(_) => "create",
            OpKind::Update { .. } => "update",
            OpKind::Resize { .. } => "resize",
            OpKind::Start { .. } => "start",
            OpKind::Stop { .. } => "stop",
            OpKind::Destroy { .. } => "destroy",
            OpKind::Migrate { .. } => "migrate",
            OpKind::Snapshot { .. } => "snapshot",
            OpKind::SeedTemplate(_) => "seed-template",
        }
    }
}

/// What to do.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum OpKind {
    Create(CreateOp),
    /// Bring a container's settable options to `desired` (`pct set` of what differs; managed keys
    /// present on the node but absent from `desired` are deleted). The mark is always kept.
    Update {
        vmid: u32,
        expect: Option<ManagedMark>,
        /// Typed (its `vmid` and `template` unused, `tags` and `description` are the fields below), and
        /// journaled as it is.
        desired: CreateSpec,
        tags: Vec<String>,
        description: Option<String>,
        /// Restart a running container when PVE left changes pending (`pct reboot`); without it they stay
        /// pending until the next start.
        #[serde(default)]
        restart: bool,
        /// `adopt: true`: a container without the mark is taken over (the mark `expect` is written) instead of
        /// refused.
        #[serde(default)]
        adopt: bool,
        /// fleet.yaml `state: template`: a container that is not one yet is stopped and made a template (`pct
        /// template`) after the changes.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        make_template: bool,
    },
    /// Grow `disk` (`rootfs`, `mp0` ...) to `size_gib`.
    Resize {
        vmid: u32,
        expect: Option<ManagedMark>,
        disk: String,
        size_gib: u64,
    },
    Start {
        vmid: u32,
        expect: Option<ManagedMark>,
    },
    /// `force`: immediate stop; otherwise a clean shutdown of `timeout_secs`, then stop.
    Stop {
        vmid: u32,
        expect: Option<ManagedMark>,
        force: bool,
        timeout_secs: u32,
    },
    Destroy {
        vmid: u32,
        expect: Option<ManagedMark>,
        purge: bool,
    },
    Migrate {
        vmid: u32,
        expect: Option<ManagedMark>,
        target: String,
        restart: bool,
    },
    SeedTemplate(TemplateSpec),
    /// A snapshot taken, deleted or rolled back to, or only the list; the result carries the list after it.
    Snapshot {
        vmid: u32,
        expect: Option<ManagedMark>,
        action: SnapshotAction,
        /// The snapshot (empty for `List`).
        #[serde(default)]
        name: String,
        #[serde(default)]
        description: Option<String>,
        /// `Rollback`: start it afterwards.
        #[serde(default)]
        start: bool,
    },
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

/// One snapshot of a container, as the result of a snapshot operation reports it (the PVE driver's record).
pub use pxfleet_pve::Snapshot as SnapshotInfo;

/// Create a managed container.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CreateOp {
    pub vmid: u32,
    pub mark: ManagedMark,
    pub template: TemplateSpec,
    /// What to create, typed (hostname, cores, memory, swap, rootfs, nets, features, ...); its `vmid`,
    /// `template`, SSH keys, `tags` and `description` are unused: those are the fields of this operation, so the
    /// mark is always present. Journaled as it is.
    pub options: CreateSpec,
    pub tags: Vec<String>,
    pub description: Option<String>,
    pub ssh_public_keys: Vec<String>,
    /// Never journalled: a replay after a restart waits for the controller to re-send it.
    #[serde(skip)]
    pub password: Option<Secret>,
    /// Start after creating, and wait (bounded) for addresses.
    pub start: bool,
    /// fleet.yaml `state: template`: made a template (`pct template`) once created, never started.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub make_template: bool,
    /// fleet.yaml `wait_for_ip`: the address families the started container must have before the create is done.
    #[serde(default, skip_serializing_if = "WaitFor::is_any")]
    pub wait_for: WaitFor,
    /// Made as a copy of another container on this node (`pct clone`) instead of from `template`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clone: Option<CloneFrom>,
}

/// Which addresses a create waits for after the start: at least one IPv4 / IPv6 address (neither loopback nor
/// link-local). Neither: any one address, and the create is done without one when none comes in time.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WaitFor {
    #[serde(default)]
    pub ipv4: bool,
    #[serde(default)]
    pub ipv6: bool,
}

impl WaitFor {
    pub fn is_any(&self) -> bool {
        !self.ipv4 && !self.ipv6
    }
}

/// A fleet.yaml `clone:` template: the container to copy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct CloneFrom {
    pub source: u32,
    /// Copy the disks (to the create's rootfs storage); `false`: a linked clone of a template.
    pub full: bool,
}

/// A template that must be present in a storage's template cache.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TemplateSpec {
    /// Storage whose template cache holds it (`local`).
    pub storage: String,
    /// File name in the cache (`ubuntu-25.04.tar.xz`).
    pub file_name: String,
    pub source: TemplateSource,
}

impl TemplateSpec {
    /// `STORAGE:vztmpl/FILE`
    pub fn volid(&self) -> String {
        format!("{}:vztmpl/{}", self.storage, self.file_name)
    }
}

/// Where a template comes from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum TemplateSource {
    /// Download over HTTP(S), verified against `digest` when one is declared (a fleet.yaml
    /// `template_url` carries none; the sha256 is then only computed and reported).
    Url { url: String, digest: Option<Digest> },
    /// An appliance name from the PVE index: `pveam download`.
    Appliance,
    /// Already present on the node (or managed by someone else): use as is.
    Existing,
    /// A volume the fleet names as already in storage (fleet.yaml `volume:`): never downloaded; checked to be
    /// there.
    Volume,
}

/// An expected checksum, lower-case hex.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Digest {
    Sha256(String),
    Sha512(String),
}

impl Digest {
    pub fn algorithm(&self) -> &'static str {
        match self {
            Digest::Sha256(_) => "sha256",
            Digest::Sha512(_) => "sha512",
        }
    }
    pub fn hex(&self) -> &str {
        match self {
            Digest::Sha256(h) | Digest::Sha512(h) => h,
        }
    }
}

/// The result of an operation that succeeded.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OpResult {
    /// What was done, in a few words (`created`, `already created`, `destroyed` ...).
    pub message: String,
    /// The container as observed after the operation (`None` when it is gone or for seeding).
    pub container: Option<Box<ObservedContainer>>,
    /// For seeding: the template's volume id.
    pub template_volid: Option<String>,
    /// For seeding from a URL: sha256 (hex) of the template file as it is on the node.
    #[serde(default)]
    pub template_sha256: Option<String>,
    /// After a snapshot operation: the container's snapshots, parents first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshots: Option<Vec<SnapshotInfo>>,
}

/// Why an operation failed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OpFailure {
    pub error: String,
    pub retryable: bool,
}

/// An update about an operation, sent on the controller stream.
#[derive(Debug, Clone, PartialEq)]
pub enum OpUpdate {
    Progress { op_id: String, message: String },
    Succeeded { op_id: String, result: OpResult },
    Failed { op_id: String, failure: OpFailure },
}

impl OpUpdate {
    pub fn op_id(&self) -> &str {
        match self {
            OpUpdate::Progress { op_id, .. }
            | OpUpdate::Succeeded { op_id, .. }
            | OpUpdate::Failed { op_id, .. } => op_id,
        }
    }
    pub fn is_final(&self) -> bool {
        !matches!(self, OpUpdate::Progress { .. })
    }
}
