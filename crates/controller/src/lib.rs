//! pxcontroller: owns fleet state in sled, plans and schedules, and dispatches operations to node agents over
//! mutual-TLS gRPC. `main.rs` only parses arguments and calls into this library; [`server::run`] starts the
//! whole controller on listeners the caller binds (tests use 127.0.0.1:0).
//!
//! Public are only the modules `main.rs`, the test harness (crates/controller/tests, tests/) and the bench use:
//! starting a controller (`server`, `dev`, `config`, `datadir`, `admin`, `test_harness`), the gRPC edge (`grpc`),
//! the store and its model (`store`, `model`, `seal`, `backup`), and what tests set up directly (`identities`,
//! `limits`, `scheduler`, `state`, `error`). The use cases, the planner's glue and the reconcile loop are private.

pub mod admin;
mod adopt;
mod agents;
mod audit;
mod authz;
pub mod backup;
mod certs;
pub mod config;
pub mod datadir;
pub mod dev;
mod drain;
pub mod error;
mod grants;
pub mod grpc;
mod hooks;
pub mod identities;
pub mod limits;
mod listing;
mod metrics;
pub mod model;
mod nodes;
mod pki;
mod planning;
mod policy;
mod preseed;
mod query;
mod realise;
mod reconcile;
pub mod scheduler;
pub mod seal;
pub mod server;
pub mod state;
pub mod store;
mod submit;
mod templates;
#[cfg(feature = "test-harness")]
pub mod test_harness;
mod watch;

pub use config::Config;
pub use server::{run, run_with_clock};

#[cfg(test)]
mod testutil;
