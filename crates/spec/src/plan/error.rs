//! Why a plan is refused: changes pxfleet will not make (shrinking a disk, destroying a protected container,
//! taking a vm_id another container holds). Each problem names the container, where it lives and the field.

use std::fmt;

/// One change the planner refuses.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PlanProblem {
    #[error(
        "container {container} (vm_id {vm_id} on {node}): {field} would shrink from {from_gib} GiB to {to_gib} GiB; \
         disks can only grow: set {field} to {from_gib} or more"
    )]
    Shrink {
        container: String,
        vm_id: u32,
        node: String,
        field: String,
        from_gib: f64,
        to_gib: f64,
    },
    #[error(
        "container {container} (vm_id {vm_id} on {node}) has `protection: true` and would be destroyed ({why}); \
         set `protection: false` and submit first, or undo the change"
    )]
    Protected {
        container: String,
        vm_id: u32,
        node: String,
        why: String,
    },
    #[error("container {container} (vm_id {vm_id} on {node}) cannot be adopted: {why}")]
    Adopt {
        container: String,
        vm_id: u32,
        node: String,
        why: String,
    },
    #[error(
        "container {container}: vm_id {vm_id} is already used by {holder} on {node}; \
         choose a free vm_id, or omit vm_id to have one allocated"
    )]
    VmIdInUse {
        container: String,
        vm_id: u32,
        node: String,
        holder: String,
    },
}

/// The planner's error: every refused change, so the user fixes them all in one go.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub struct PlanError {
    pub fleet: String,
    pub problems: Vec<PlanProblem>,
}

impl fmt::Display for PlanError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "cannot plan fleet {}:", self.fleet)?;
        for p in &self.problems {
            write!(f, "\n  - {p}")?;
        }
        Ok(())
    }
}
