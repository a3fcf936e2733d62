//! pxagent: the per-node agent of pxfleet. It enrols with the controller ([`join`]), holds one
//! bidirectional stream to it ([`run`]), executes operations against the node through crates/pve
//! ([`executor`]), seeds templates ([`seed`]) and reports what exists ([`observe`]).

pub mod config;
pub mod convert;
pub mod executor;
pub mod join;
pub mod journal;
#[cfg(feature = "test-node")]
pub mod mem_node;
pub mod node;
pub mod observe;
pub mod ops;
pub mod pve_node;
pub mod pve_options;
pub mod renew;
pub mod seed;
pub mod stream;

pub use config::AgentConfig;
pub use executor::{Event, Executor, ExecutorSettings};
pub use join::{join, JoinError, Joined};
pub use journal::Journal;
pub use node::{ManagedMark, NodeApi, PveError};
pub use ops::{OpKind, OpUpdate, Operation};
pub use seed::{DownloadLimits, SeedError, Seeder};
pub use stream::{run, run_with, RunError};
