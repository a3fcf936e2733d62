//! pxcontroller: owns fleet state in sled, plans and schedules, and dispatches operations to node agents over
//! mutual-TLS gRPC. `main.rs` only parses arguments and calls into this library.

pub mod config;
pub mod model;
pub mod scheduler;
pub mod store;

#[cfg(test)]
mod testutil;
