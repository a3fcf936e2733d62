//! Following an apply (submit or destroy) until it settles: polls GetContainers and the active operations
//! every 500 ms and prints one plain line per change (`[12s] dev-nextcloud  creating -> running  10.0.0.5`),
//! then a summary. Settled means: none of the submitted operations (nor any other for these containers) is
//! still active, and every followed container is running, stopped or failed (or gone, when destroying).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::Write;
use std::time::Duration;

use pxfleet_common::Stopwatch;
use pxfleet_proto::v1 as pb;

use crate::client::Client;
use crate::error::{CliError, Result};
use crate::render::{container_state, first_address, op_kind};

/// What to follow.
#[derive(Debug, Clone)]
pub struct Follow {
    pub fleet: String,
    /// Operations the submission started (may be empty when the controller plans them later).
    pub op_ids: BTreeSet<String>,
    /// Only these containers (destroy of some); `None` = the whole fleet.
    pub only: Option<BTreeSet<String>>,
    /// Destroying: success means the containers are gone.
    pub destroying: bool,
    /// True when the plan had changes: then something must visibly happen before we call it settled.
    pub expect_activity: bool,
    pub timeout: Duration,
    pub poll: Duration,
    /// Containers the file wants stopped (`state: stopped`): stopped is success for them.
    pub want_stopped: BTreeSet<String>,
}

/// How it ended.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Outcome {
    pub running: Vec<String>,
    pub stopped: Vec<String>,
    /// Name and error text.
    pub failed: Vec<(String, String)>,
    pub gone: Vec<String>,
}

impl Outcome {
    /// Exit 0 only when everything succeeded: all running (or gone when destroying; or stopped when
    /// `want_stopped`), nothing failed.
    pub fn success(&self, destroying: bool, want_stopped: &BTreeSet<String>) -> bool {
        self.failed.is_empty()
            && (destroying || self.stopped.iter().all(|n| want_stopped.contains(n)))
    }
}

/// Grace period after which an apply that shows no activity at all is taken as already settled.
const QUIET_GRACE: Duration = Duration::from_secs(10);

/// Polls until settled or `f.timeout`; writes progress lines and the summary to `out`.
pub async fn follow(client: &mut Client, f: &Follow, out: &mut dyn Write) -> Result<Outcome> {
    let start = Stopwatch::start();
    let mut last: BTreeMap<String, (String, Option<String>)> = BTreeMap::new();
    let mut op_msgs: HashMap<String, String> = HashMap::new();
    let mut seen_activity = !f.expect_activity;
    let mut vanished: BTreeSet<String> = BTreeSet::new();
    let secs = |start: Stopwatch| start.elapsed().as_secs();
    loop {
        let containers = client
            .api
            .get_containers(pb::GetContainersRequest {
                fleet: f.fleet.clone(),
                node: String::new(),
            })
            .await?
            .into_inner()
            .containers;
        let active = client
            .api
            .get_operations(pb::GetOperationsRequest {
                fleet: f.fleet.clone(),
                node: String::new(),
                active_only: true,
                limit: 0,
                op_id: String::new(),
            })
            .await?
            .into_inner()
            .operations;
        let wanted = |name: &str| f.only.as_ref().is_none_or(|o| o.contains(name));
        let now: BTreeMap<String, &pb::ContainerInfo> = containers
            .iter()
            .filter(|c| wanted(&c.name))
            .map(|c| (c.name.clone(), c))
            .collect();
        let t = secs(start);
        for (name, c) in &now {
            let state = container_state(c.state).to_string();
            let ip = first_address(&c.addresses, false);
            let prev = last.get(name).cloned();
            match &prev {
                None => writeln!(out, "[{t}s] {name}  {state}{}", suffix(&ip))?,
                Some((old, _)) if *old != state => {
                    writeln!(out, "[{t}s] {name}  {old} -> {state}{}", suffix(&ip))?
                }
                Some((_, old_ip)) if *old_ip != ip && ip.is_some() => {
                    writeln!(out, "[{t}s] {name}  {state}{}", suffix(&ip))?
                }
                _ => {}
            }
            if state == "failed"
                && prev.as_ref().is_none_or(|(o, _)| o != "failed")
                && !c.last_error.is_empty()
            {
                writeln!(out, "[{t}s] {name}  error: {}", c.last_error.trim())?;
            }
            if !matches!(state.as_str(), "running" | "stopped" | "failed") {
                seen_activity = true;
            }
            last.insert(name.clone(), (state, ip));
        }
        let gone: Vec<String> = last
            .keys()
            .filter(|n| !now.contains_key(*n))
            .cloned()
            .collect();
        for name in &gone {
            if let Some((old, _)) = last.remove(name) {
                writeln!(out, "[{t}s] {name}  {old} -> destroyed")?;
                vanished.insert(name.clone());
                seen_activity = true;
            }
        }
        let mut busy = false;
        for op in &active {
            // Hook runs are listed with the operations but never hold a submit up (a hook never fails its
            // container; its result is in `describe container` and `get operations`).
            if op.kind == pb::OperationKind::Hook as i32 {
                continue;
            }
            if !(f.op_ids.contains(&op.op_id) || wanted(&op.container)) {
                continue;
            }
            busy = true;
            seen_activity = true;
            if !op.message.is_empty() && op_msgs.get(&op.op_id) != Some(&op.message) {
                op_msgs.insert(op.op_id.clone(), op.message.clone());
                let who = if op.container.is_empty() {
                    op.node.as_str()
                } else {
                    op.container.as_str()
                };
                writeln!(out, "[{t}s] {who}  {}: {}", op_kind(op.kind), op.message)?;
            }
        }
        let all_terminal = now
            .values()
            .all(|c| matches!(container_state(c.state), "running" | "stopped" | "failed"));
        let destroyed = !f.destroying || now.values().all(|c| container_state(c.state) == "failed");
        if !busy && all_terminal && destroyed && (seen_activity || start.elapsed() >= QUIET_GRACE) {
            let mut o = Outcome::default();
            for (name, c) in &now {
                match container_state(c.state) {
                    "running" => o.running.push(name.clone()),
                    "failed" => o
                        .failed
                        .push((name.clone(), c.last_error.trim().to_string())),
                    _ => o.stopped.push(name.clone()),
                }
            }
            vanished.extend(
                f.only
                    .iter()
                    .flatten()
                    .filter(|n| !now.contains_key(*n))
                    .cloned(),
            );
            o.gone = vanished.iter().cloned().collect();
            summary(out, &f.fleet, &o, f.destroying, secs(start))?;
            return Ok(o);
        }
        if start.elapsed() >= f.timeout {
            return Err(CliError::Timeout {
                secs: f.timeout.as_secs(),
                fleet: f.fleet.clone(),
            });
        }
        out.flush()?;
        tokio::time::sleep(f.poll).await;
    }
}

fn suffix(ip: &Option<String>) -> String {
    ip.as_ref().map(|i| format!("  {i}")).unwrap_or_default()
}

fn summary(
    out: &mut dyn Write,
    fleet: &str,
    o: &Outcome,
    destroying: bool,
    secs: u64,
) -> std::io::Result<()> {
    let mut parts = Vec::new();
    if destroying {
        parts.push(format!("{} destroyed", o.gone.len()));
    }
    if !o.running.is_empty() || !destroying {
        parts.push(format!("{} running", o.running.len()));
    }
    if !o.stopped.is_empty() {
        parts.push(format!("{} stopped", o.stopped.len()));
    }
    parts.push(format!("{} failed", o.failed.len()));
    writeln!(out, "Fleet {fleet}: {} ({secs}s).", parts.join(", "))?;
    for (name, err) in &o.failed {
        writeln!(
            out,
            "  {name}: {}",
            if err.is_empty() {
                "failed (no error text)"
            } else {
                err
            }
        )?;
    }
    Ok(())
}
