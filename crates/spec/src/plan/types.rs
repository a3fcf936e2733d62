//! The plan as data: what the planner returns, what the renderers print and what `pxctl plan -o json` emits.
//!
//! Values are carried as [`serde_json::Value`] so that numbers stay numbers in JSON. A secret never becomes a value:
//! the planner sets [`FieldChange::sensitive`] / [`Attribute::sensitive`] and leaves the value out, which is why no
//! rendering can leak it. The JSON form of these types is documented in `docs/plan-json.md`; bump
//! [`SCHEMA_VERSION`] on any incompatible change.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Version of the JSON document produced by serialising a [`Plan`].
pub const SCHEMA_VERSION: u32 = 1;

/// An ordered list of actions that takes the observed world to the desired fleet.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    /// Always [`SCHEMA_VERSION`] when produced by this crate; consumers refuse versions they do not know.
    pub schema_version: u32,
    /// The fleet's name (`fleet:` in fleet.yaml).
    pub fleet: String,
    /// Counts per kind of action, so a reader (or a CI job) need not walk the list.
    pub summary: Summary,
    /// In execution order; see [`crate::plan`] for the ordering rules.
    pub actions: Vec<Action>,
    /// What the file allows but a reader should know (a template without checksum), each saying what to do
    /// about it; printed by every rendering, also when there are no actions.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

impl Plan {
    /// Builds a plan from ordered actions, filling in the schema version and the summary.
    pub fn new(fleet: impl Into<String>, actions: Vec<Action>) -> Self {
        let summary = Summary::of(&actions);
        Plan {
            schema_version: SCHEMA_VERSION,
            fleet: fleet.into(),
            summary,
            actions,
            warnings: Vec::new(),
        }
    }

    /// True when applying the plan would change nothing.
    pub fn is_empty(&self) -> bool {
        self.actions.is_empty()
    }
}

/// Number of actions of each kind in a plan.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Summary {
    pub create: usize,
    pub update: usize,
    pub resize: usize,
    pub replace: usize,
    #[serde(rename = "move")]
    pub move_: usize,
    pub destroy: usize,
    pub start: usize,
    pub stop: usize,
    pub repair: usize,
}

impl Summary {
    /// Counts the actions by kind.
    pub fn of(actions: &[Action]) -> Self {
        let mut s = Summary::default();
        for a in actions {
            match a.kind {
                ActionKind::Create { .. } => s.create += 1,
                ActionKind::Update { .. } => s.update += 1,
                ActionKind::Resize { .. } => s.resize += 1,
                ActionKind::Replace { .. } => s.replace += 1,
                ActionKind::Move { .. } => s.move_ += 1,
                ActionKind::Destroy { .. } => s.destroy += 1,
                ActionKind::Start => s.start += 1,
                ActionKind::Stop => s.stop += 1,
                ActionKind::Repair { .. } => s.repair += 1,
            }
        }
        s
    }

    /// Total number of actions.
    pub fn total(&self) -> usize {
        self.create
            + self.update
            + self.resize
            + self.replace
            + self.move_
            + self.destroy
            + self.start
            + self.stop
            + self.repair
    }

    /// `(label, count)` pairs in the order the renderers print them, zero counts included.
    pub fn parts(&self) -> [(&'static str, usize); 9] {
        [
            ("to create", self.create),
            ("to update", self.update),
            ("to resize", self.resize),
            ("to replace", self.replace),
            ("to move", self.move_),
            ("to destroy", self.destroy),
            ("to start", self.start),
            ("to stop", self.stop),
            ("to repair", self.repair),
        ]
    }
}

/// One step of a plan, about one container.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Action {
    /// The container's name (its key under `containers:`).
    pub container: String,
    /// `None` when the id is allocated by the controller at apply time ("known after apply").
    pub vm_id: Option<u32>,
    /// The node the action runs on (for a move: the source). `None` when the scheduler places it at apply time.
    pub node: Option<String>,
    #[serde(flatten)]
    pub kind: ActionKind,
}

/// What to do with the container. Serialised with an `"action"` tag (`"create"`, `"update"`, ...).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "action", rename_all = "snake_case")]
pub enum ActionKind {
    /// Create the container (and start it). `attributes` is the complete desired configuration.
    Create {
        reason: CreateReason,
        attributes: Vec<Attribute>,
    },
    /// Change fields with `pct set`. `restart_required` is true when the container runs and at least one change
    /// is not live (CONTRACT §3.1: it stays pending until the next restart, which the executor then performs).
    Update {
        changes: Vec<FieldChange>,
        restart_required: bool,
    },
    /// Grow a disk with `pct resize` (`disk` is `rootfs` or `mpN`). Shrinking is refused by the planner.
    Resize {
        disk: String,
        from_gib: f64,
        to_gib: f64,
    },
    /// Destroy and create again, because a field that cannot change in place changed. `reasons` are those fields;
    /// `attributes` is the complete configuration of the new container.
    Replace {
        reasons: Vec<FieldChange>,
        attributes: Vec<Attribute>,
    },
    /// Migrate to another node in the same cluster (`pct migrate`, `--restart` when it runs). A node change
    /// that cannot migrate (another cluster, a datastore missing on the target) is a [`ActionKind::Replace`].
    Move { from: String, to: String },
    /// Destroy the container and its volumes.
    Destroy { reason: DestroyReason },
    /// Start a stopped container.
    Start,
    /// Stop a running container.
    Stop,
    /// Put back fields that were changed outside pxfleet (observed differs from what was applied).
    Repair {
        drift: Vec<FieldChange>,
        restart_required: bool,
    },
}

impl ActionKind {
    /// The short verb used in renderings and the JSON `action` tag.
    pub fn verb(&self) -> &'static str {
        match self {
            ActionKind::Create { .. } => "create",
            ActionKind::Update { .. } => "update",
            ActionKind::Resize { .. } => "resize",
            ActionKind::Replace { .. } => "replace",
            ActionKind::Move { .. } => "move",
            ActionKind::Destroy { .. } => "destroy",
            ActionKind::Start => "start",
            ActionKind::Stop => "stop",
            ActionKind::Repair { .. } => "repair",
        }
    }
}

/// Why a container is created.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CreateReason {
    /// It is in the file and has never been applied.
    New,
    /// It was applied before but no node reports it any more (deleted outside pxfleet): drift, repaired by a create.
    Missing,
}

/// Why a container is destroyed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DestroyReason {
    /// It was applied before and has left the fleet file.
    RemovedFromFile,
    /// A node reports a container marked as belonging to this fleet under a name the file does not have.
    Orphaned,
    /// Several containers carry the same fleet/name mark; this one is the extra.
    Duplicate,
    /// It left the fleet file, and no node reports it (its create failed before anything existed, has not run
    /// yet, or its node is down): it leaves the fleet's state; nothing is destroyed now, and a container found
    /// later with its mark is destroyed then (as orphaned).
    NotFound,
}

/// A field whose value changes. `from`/`to` are absent when the field is unset on that side, or sensitive.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FieldChange {
    /// The fleet.yaml field name (`cores`, `memory`, `interfaces[0].ip_address`, `mount_points[1].size`, ...).
    pub field: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to: Option<Value>,
    /// True when the change takes effect without restarting the container (always true for a stopped one).
    pub live: bool,
    /// The value is a secret: `from`/`to` are never filled, renderings say `(sensitive)`.
    #[serde(default, skip_serializing_if = "is_false")]
    pub sensitive: bool,
    /// Why this change forces what it does, when the field alone does not say (a `node` change that cannot be
    /// `pct migrate`: "mk2 is in cluster B, not A: pct migrate cannot cross clusters").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub why: Option<String>,
}

/// One field of a container that will be created.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Attribute {
    pub field: String,
    /// Absent when sensitive or known only after apply.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<Value>,
    /// The value is a secret and is never shown.
    #[serde(default, skip_serializing_if = "is_false")]
    pub sensitive: bool,
    /// The value is decided at apply time (vm_id allocation, scheduling, generated MAC addresses).
    #[serde(default, skip_serializing_if = "is_false")]
    pub known_after_apply: bool,
}

impl Attribute {
    /// A plain, known value.
    pub fn known(field: impl Into<String>, value: Value) -> Self {
        Attribute {
            field: field.into(),
            value: Some(value),
            sensitive: false,
            known_after_apply: false,
        }
    }
    /// A secret: present, never shown.
    pub fn sensitive(field: impl Into<String>) -> Self {
        Attribute {
            field: field.into(),
            value: None,
            sensitive: true,
            known_after_apply: false,
        }
    }
    /// Decided at apply time.
    pub fn after_apply(field: impl Into<String>) -> Self {
        Attribute {
            field: field.into(),
            value: None,
            sensitive: false,
            known_after_apply: true,
        }
    }
}

fn is_false(b: &bool) -> bool {
    !*b
}
