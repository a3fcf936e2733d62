//! The benchmark's simulated nodes: the agent's in-memory PVE node ([`pxfleet_agent::mem_node`]) with the
//! benchmark's latency model (`pct create`, `pct start`, `pct destroy` take fixed times), PVE's per-container
//! config lock (an operation on a locked container waits for it, and fails as PVE does after 10 s) and the
//! benchmark's template pre-seeded in the `local` cache (no `pveam` downloads). The node reports storages, a
//! bridge and memory so that the scheduler places containers on it.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use pxfleet_agent::mem_node::{Latency, MemNode, MemNodeOptions};

/// One simulated node, shared as `Arc<SimNode>` with its agent.
pub type SimNode = MemNode;

/// How long PVE takes for each kind of work on a node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct LatencyModel {
    /// `pct create` (unpacking the template).
    pub create: Duration,
    /// `pct start` (until the container is up).
    pub start: Duration,
    /// `pct destroy`.
    pub destroy: Duration,
}

impl LatencyModel {
    /// PVE-like defaults: create 2 s, start 1 s, destroy 1 s.
    pub const PVE: LatencyModel = LatencyModel {
        create: Duration::from_secs(2),
        start: Duration::from_secs(1),
        destroy: Duration::from_secs(1),
    };
}

impl From<LatencyModel> for Latency {
    /// A shutdown takes no time in the benchmark's model.
    fn from(m: LatencyModel) -> Latency {
        Latency {
            create: m.create,
            start: m.start,
            shutdown: Duration::ZERO,
            destroy: m.destroy,
        }
    }
}

/// A simulated node `name` with `latency`, its templates in `template_dir` (shared by every simulated node:
/// it is only read).
pub fn sim_node(name: &str, latency: LatencyModel, template_dir: PathBuf) -> Arc<SimNode> {
    MemNode::new(MemNodeOptions {
        latency: latency.into(),
        config_locks: true,
        pveam: false,
        ..MemNodeOptions::new(name, template_dir)
    })
}
