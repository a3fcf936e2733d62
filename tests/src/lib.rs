//! Workspace-level integration harness: a real `pxcontroller` process and one real `pxagent` process per
//! simulated PVE node (`pvesim`), on 127.0.0.1 with real mutual TLS, each cluster in its own temporary
//! directory with its own ports. Scenarios in `tests/tests/*.rs` drive it through `pxctl` (as a user would)
//! and through the FleetService gRPC API (for precise assertions and for the security checks).
//!
//! The binaries are the workspace's own: `target/debug/{pxcontroller,pxagent,pxctl,pvesim}` (or under
//! `$CARGO_TARGET_DIR`). [`Binaries::locate`] builds them first, once per test process (`cargo build --workspace
//! --bins`, a no-op when they are current), so a test never runs an old binary. Dropping a [`Cluster`] kills the
//! processes it started, and only those.//!
//! The harness by module: [`cluster`] (options, start, the controller's lifecycle), [`nodes`] (pvesim nodes and
//! their agents), [`client`] (the FleetService API as admin, waits for nodes and containers), [`pxctl`] (the CLI
//! as a user runs it), [`process`] (spawning, one-shot commands, signals, log tails), [`binaries`] (building
//! and finding the binaries), [`waits`], [`fixtures`] (fleet files) and [`error`]. Everything a scenario uses
//! is re-exported here.
// The test harness starts the real binaries and the tools around them: spawning is its job.
#![allow(clippy::disallowed_methods)]

pub use pxfleet_proto::v1;

pub mod api;
pub mod binaries;
pub mod breakdown;
pub mod client;
pub mod cluster;
pub mod day2;
pub mod dev;
pub mod diskfault;
pub mod e2e;
pub mod error;
pub mod faults;
pub mod fixtures;
pub mod hookserver;
pub mod netcut;
pub mod nodes;
pub mod process;
pub mod pxctl;
pub mod waits;

pub use binaries::{build_binaries, workspace_root, Binaries};
pub use cluster::{node_names, Cluster, ClusterOptions, NodeSetup, SimNode};
pub use error::HarnessError;
pub use fixtures::{fleet_yaml, TEST_SSH_KEY};
pub use process::{run_command, signal, tail, terminate, COMMAND_TIMEOUT};
pub use waits::{describe, wait_until};

use error::Result;
