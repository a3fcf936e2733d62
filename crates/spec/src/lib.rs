//! pxfleet-spec: the `fleet.yaml` model, its parser (with line:column for every node),
//! validation, and the interface for checks against the world outside the file.
//!
//! Pure: no network, no processes, no file reads of its own (files named by `file:` SSH keys
//! are read through a [`FileSource`] the caller hands in).

pub mod model;
pub mod observed;
pub mod plan;
pub mod render;

pub use model::*;
