//! The fault plan: which faults a node injects, and how many times each has fired.
//!
//! A node's faults come from `[faults]` in its `node.toml`, replaced (whole) by a fault plan file when there is
//! one: the file named by `PVESIM_FAULTS`, else `<state>/faults.toml`. The file has the same fields as
//! `[faults]` (see [`crate::node::FaultsCfg`]) and is read on every invocation, so a test can change a running
//! node's faults by writing or removing it. A fault with a `count` fires that many times, counted per node in
//! `<state>/faults-fired.json`; the counts start again whenever the plan changes.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{Result, SimError};
use crate::node::{write_file, FaultsCfg, Node};

/// Environment variable naming a fault plan file.
pub const ENV: &str = "PVESIM_FAULTS";
/// The fault plan file looked for in the state directory when `PVESIM_FAULTS` is unset.
pub const FILE: &str = "faults.toml";

/// The fault plan file in effect for `state`, if any.
pub fn plan_path(state: &Path, env: &BTreeMap<String, String>) -> Option<PathBuf> {
    match env.get(ENV).filter(|p| !p.is_empty()) {
        Some(p) => Some(PathBuf::from(p)),
        None => Some(state.join(FILE)).filter(|p| p.is_file()),
    }
}

/// Parses a fault plan; errors name the file, line and column.
pub fn parse_plan(path: &Path, text: &str) -> Result<FaultsCfg> {
    toml::from_str(text).map_err(|e| SimError::state(path, e.to_string().trim_end().to_string()))
}

/// Replaces the node's faults with the plan file's, when there is one.
pub fn apply_plan(node: &mut Node, env: &BTreeMap<String, String>) -> Result<()> {
    if let Some(path) = plan_path(&node.state, env) {
        let text = fs::read_to_string(&path).map_err(|e| SimError::io(&path, e))?;
        node.cfg.faults = parse_plan(&path, &text)?;
    }
    Ok(())
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct Fired {
    /// The plan these counts belong to.
    plan: String,
    counts: BTreeMap<String, u32>,
}

/// Whether the fault `key` fires now: always without a `count`, else while it has fired fewer than `count`
/// times on this node (counting this one).
pub fn fire(node: &Node, key: &str, count: Option<u32>) -> Result<bool> {
    let Some(limit) = count else {
        return Ok(true);
    };
    let _g = crate::lock::lock_blocking(&node.state.join("lock").join("faults-fired.lock"))?;
    let path = node.state.join("faults-fired.json");
    let plan = serde_json::to_string(&node.cfg.faults).unwrap_or_default();
    let mut fired: Fired = fs::read_to_string(&path)
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or_default();
    if fired.plan != plan {
        fired = Fired {
            plan,
            counts: BTreeMap::new(),
        };
    }
    let n = fired.counts.entry(key.to_string()).or_default();
    let fires = *n < limit;
    if fires {
        *n += 1;
    }
    write_file(&path, &serde_json::to_string(&fired).unwrap_or_default())?;
    Ok(fires)
}

/// How many times `key` has fired under the current plan.
pub fn fired(node: &Node, key: &str) -> u32 {
    let plan = serde_json::to_string(&node.cfg.faults).unwrap_or_default();
    fs::read_to_string(node.state.join("faults-fired.json"))
        .ok()
        .and_then(|t| serde_json::from_str::<Fired>(&t).ok())
        .filter(|f| f.plan == plan)
        .and_then(|f| f.counts.get(key).copied())
        .unwrap_or(0)
}

/// Hangs for `seconds` the way PVE's CLI waits for its forked worker: in a child process (`sleep`), so that a
/// caller's timeout that kills only this process leaves the child behind; in-process when `sleep` cannot run.
// a fault plan's hang: pvesim stands in for PVE and spawns its own `sleep`
#[allow(clippy::disallowed_methods)]
pub fn hang(seconds: u64) {
    let spawned = std::process::Command::new("sleep")
        .arg(seconds.to_string())
        .stdin(std::process::Stdio::null())
        .status();
    if spawned.is_err() {
        std::thread::sleep(std::time::Duration::from_secs(seconds));
    }
}

/// The `hang` and `garbage` faults for one invocation (`line` is `tool args...`): hangs first when one matches,
/// then returns the garbage to print instead of running the command, when one matches.
pub fn before_invocation(node: &Node, line: &str) -> Result<Option<String>> {
    for (i, h) in node.cfg.faults.hang.iter().enumerate() {
        if line.starts_with(&h.command) && fire(node, &format!("hang.{i}"), h.count)? {
            tracing::debug!(%line, seconds = h.seconds, "fault: hang");
            hang(h.seconds);
        }
    }
    for (i, g) in node.cfg.faults.garbage.iter().enumerate() {
        if line.starts_with(&g.command) && fire(node, &format!("garbage.{i}"), g.count)? {
            return Ok(Some(g.text.clone()));
        }
    }
    Ok(None)
}
