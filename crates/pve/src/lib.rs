//! pxfleet-pve: the node driver, the agent's only way to touch a Proxmox VE node.
//!
//! Layers, each usable alone:
//! - [`runner`]: [`Runner`] spawns processes from an argv with a timeout ([`ProcessRunner`]); [`ScriptedRunner`]
//!   answers from a script in tests.
//! - [`parse`]: pure parsers for pct/pvesh/pvesm/pveam output and printers for PVE property strings.
//! - [`spec`] and [`argv`]: typed create/set requests and the pure argv builders for them ([`runtime`]: `env`
//!   and `entrypoint`).
//! - [`diff`]: [`ConfigChange::diff`], the in-place change from a stored configuration to a desired one.
//! - [`node`]: [`Node`], async typed operations with failure detection and lock-contention retries.
//! - [`error`]: [`PveError`], classification of PVE's error texts.
//! - [`mark`]: [`ManagedMark`], how pxfleet labels the containers it manages.
//!
//! See `crates/pve/README.md` for which command backs which operation and why.

pub mod argv;
pub mod conffile;
pub mod diff;
pub mod error;
pub mod node;
pub mod parse;
pub mod runner;
pub mod runtime;
pub mod scripted;
pub mod secret;
pub mod spec;

pub use error::PveError;
pub use mark::{ManagedMark, MANAGED_LINE_PREFIX, MANAGED_TAG};
pub use node::{
    check_snapshot_name, guest_pools, is_pool_id, CloneSpec, Node, PendingKey, RetryPolicy,
    ShutdownOutcome, Snapshot, Timeouts,
};
pub use parse::ContainerConfig;
pub use pxfleet_pvekeys::{mark, zones};
pub use runner::{Command, Output, ProcessRunner, RunError, Runner};
pub use scripted::ScriptedRunner;
pub use secret::Secret;
pub use spec::{
    volume_owner, ConfigChange, CreateSpec, DeviceSpec, MountPointSpec, MountVolume, RootfsSpec,
};
