//! pxfleet-pvekeys: what Proxmox VE accepts and how pxfleet marks its containers, as pure values, for the crates
//! on both sides of the node: the planner (`pxfleet-spec`, which checks fleet files without touching a node) and
//! the driver (`pxfleet-pve`, which builds argv and parses output). No I/O and no async runtime, so the planner
//! stays a pure library.
//!
//! - [`mark`]: [`ManagedMark`], the tag and description line pxfleet leaves on a container it manages.
//! - [`zones`]: the time zones PVE's `timezone` takes.
//! - [`ids`]: identifiers as PVE's schema checks them (storage, pool, hook script volume) and the owner a volume
//!   id's name gives.
//! - [`system`]: the values of `arch`, `cmode` and `tty`.

pub mod ids;
pub mod mark;
pub mod system;
pub mod zones;

pub use ids::{is_hookscript_volid, is_pool_id, is_storage_id, volume_owner};
pub use mark::{ManagedMark, MANAGED_LINE_PREFIX, MANAGED_TAG};
pub use system::{ARCHES, CMODES, MAX_TTY};
