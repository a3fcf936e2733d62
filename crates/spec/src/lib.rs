//! pxfleet-spec: the `fleet.yaml` model, its parser (with line:column for every node),
//! validation, and the interface for checks against the world outside the file.
//!
//! Pure: no network, no processes, no file reads of its own (files named by `file:` SSH keys
//! are read through a [`FileSource`] the caller hands in).
//!
//! ```
//! use pxfleet_spec::{parse_fleet, NoFiles};
//! let text = "fleet: dev\ntemplates:\n  deb: {pveam: debian-12-standard_12.7-1_amd64.tar.zst}\ncontainers:\n  web-1: {template: deb, memory: 8}\n";
//! let errs = parse_fleet("fleet.yaml", text, &NoFiles).unwrap_err();
//! assert_eq!(errs.to_string().lines().next().unwrap(),
//!     "fleet.yaml:5:34: containers.web-1.memory: memory must be at least 16 (MiB), got 8");
//! ```

mod check;
pub mod diag;
pub mod files;
pub mod hooks;
pub mod model;
pub mod observed;
mod parse;
pub mod plan;
pub mod policies;
pub mod render;
pub mod syntax;
pub mod world;
pub mod yaml;

pub use diag::{Diagnostic, Diagnostics};
pub use files::{FileSource, MemFiles, NoFiles};
pub use model::*;
pub use parse::{parse_fleet, parse_hook_definitions, MAX_INTERFACES, MAX_MOUNT_POINTS};
pub use policies::{read_policies, PolicyFile};
pub use world::{
    check_against_world, pve_at_least, DatastoreFacts, EmptyWorld, Holder, MemoryWorld, NodeFacts,
    WorldFacts,
};
