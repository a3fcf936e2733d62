//! pxcontroller: owns fleet state in sled, plans and schedules, and dispatches operations to node agents over
//! mutual-TLS gRPC. `main.rs` only parses arguments and calls into this library; [`server::run`] starts the
//! whole controller on listeners the caller binds (tests use 127.0.0.1:0).

pub mod admin;
pub mod adopt;
pub mod agents;
pub mod audit;
pub mod authz;
pub mod backup;
pub mod certs;
pub mod config;
pub mod datadir;
pub mod dev;
pub mod drain;
pub mod error;
pub mod grants;
pub mod grpc;
pub mod hooks;
pub mod identities;
pub mod limits;
pub mod listing;
pub mod metrics;
pub mod model;
pub mod nodes;
pub mod pki;
pub mod planning;
pub mod policy;
pub mod preseed;
pub mod query;
pub mod realise;
pub mod reconcile;
pub mod scheduler;
pub mod seal;
pub mod server;
pub mod state;
pub mod store;
pub mod submit;
pub mod templates;
#[cfg(feature = "test-harness")]
pub mod test_harness;
pub mod watch;

pub use config::Config;
pub use server::{run, run_with_clock};

#[cfg(test)]
mod testutil;
