//! pxcontroller: owns fleet state in sled, plans and schedules, and dispatches operations to node agents over
//! mutual-TLS gRPC. `main.rs` only parses arguments and calls into this library.

pub mod agents;
pub mod authz;
pub mod config;
pub mod convert;
pub mod metrics;
pub mod model;
pub mod reconciler;
pub mod scheduler;
pub mod store;

#[cfg(test)]
mod testutil;
