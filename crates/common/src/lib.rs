//! What pxfleet's daemons share beyond the protocol, the spec and the PVE driver. Today: [`flush`], the
//! group-commit flusher both sled databases (the controller's store, the agent's journal) make writes durable
//! with.

pub mod flush;

pub use flush::{FlushError, Flusher};
