//! The fault suite's checks and figures (issue 12): after each fault, what the NODES hold (pvesim state, not the
//! controller's view) is compared with the fleet, `pxctl plan --detailed-exitcode` must exit 0 and the agents'
//! logs must show no operation that succeeded twice. Each run gives a [`RunResult`]; [`Row`]s make the table
//! `scripts/faults` prints.
// test code driving separate processes: real time
#![allow(clippy::disallowed_methods)]

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;
use std::time::{Duration, Instant};

use pxfleet_proto::v1 as pb;

use crate::{api, Cluster};

/// The agents' mark in a managed container's description.
pub const MARK: &str = "managed-by: pxfleet";

/// Runs per fault: `PXFLEET_FAULT_RUNS` (scripts/faults --runs N), default 1.
pub fn runs() -> usize {
    std::env::var("PXFLEET_FAULT_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|n| *n > 0)
        .unwrap_or(1)
}

/// Containers per fleet: `PXFLEET_FAULT_CONTAINERS`, default 30 (over 3 nodes).
pub fn containers() -> usize {
    std::env::var("PXFLEET_FAULT_CONTAINERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|n| *n > 0)
        .unwrap_or(30)
}

/// A small deterministic generator (xorshift64*), seeded from `PXFLEET_FAULT_SEED` or the clock; the seed is
/// printed so that a failing run can be replayed.
pub struct Rng(u64);

impl Rng {
    pub fn from_env(fault: &str) -> Rng {
        let seed = std::env::var("PXFLEET_FAULT_SEED")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_nanos() as u64)
                    .unwrap_or(1)
            });
        eprintln!("fault suite: {fault}: seed {seed} (replay with PXFLEET_FAULT_SEED={seed})");
        Rng(seed.max(1))
    }

    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in `0..n` (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }
}

/// What one run of a fault left behind.
#[derive(Debug, Clone, Default)]
pub struct RunResult {
    pub converged: bool,
    /// Containers of the fleet found more than once across the nodes (count of extra copies).
    pub duplicates: usize,
    /// Containers of the fleet found on no node.
    pub lost: usize,
    /// Containers carrying pxfleet's mark that the fleet does not want, and half-made (`lock: create`) leftovers.
    pub orphans: usize,
    /// Time from the fault (or the submit) until converged.
    pub secs: f64,
    /// What was wrong, for the log.
    pub detail: String,
}

/// One line of the table.
#[derive(Debug, Clone)]
pub struct Row {
    pub fault: String,
    pub runs: Vec<RunResult>,
}

impl Row {
    pub fn converged(&self) -> usize {
        self.runs.iter().filter(|r| r.converged).count()
    }

    fn times(&self) -> Vec<f64> {
        let mut t: Vec<f64> = self
            .runs
            .iter()
            .filter(|r| r.converged)
            .map(|r| r.secs)
            .collect();
        t.sort_by(|a, b| a.total_cmp(b));
        t
    }

    /// The table line (markdown).
    pub fn line(&self) -> String {
        let t = self.times();
        let median = if t.is_empty() {
            "-".to_string()
        } else {
            format!("{:.1}", t[t.len() / 2])
        };
        let worst = t
            .last()
            .map(|w| format!("{w:.1}"))
            .unwrap_or_else(|| "-".into());
        format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} |",
            self.fault,
            self.runs.len(),
            self.converged(),
            self.runs.iter().map(|r| r.duplicates).sum::<usize>(),
            self.runs.iter().map(|r| r.lost).sum::<usize>(),
            self.runs.iter().map(|r| r.orphans).sum::<usize>(),
            median,
            worst
        )
    }

    /// Appends the line to `PXFLEET_FAULT_REPORT` (when set) and prints it; panics when a run did not converge
    /// (after printing every run's detail).
    pub fn finish(&self) {
        let line = self.line();
        eprintln!("{}\n{line}", HEADER);
        if let Ok(path) = std::env::var("PXFLEET_FAULT_REPORT") {
            use std::io::Write;
            if let Ok(mut f) = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&path)
            {
                let _ = writeln!(f, "{line}");
            }
        }
        let bad: Vec<String> = self
            .runs
            .iter()
            .enumerate()
            .filter(|(_, r)| !r.converged)
            .map(|(i, r)| format!("run {i}: {}", r.detail))
            .collect();
        assert!(bad.is_empty(), "{}: {}", self.fault, bad.join("\n"));
    }
}

/// The table's header (markdown).
pub const HEADER: &str = "| fault | runs | converged | duplicates | lost | orphans | median s | worst s |\n|---|---|---|---|---|---|---|---|";

/// `n` containers named `{prefix}-NN`, unplaced (the scheduler spreads them).
pub fn body(prefix: &str, n: usize) -> (String, Vec<String>) {
    let names: Vec<String> = (0..n).map(|i| format!("{prefix}-{i:02}")).collect();
    let body = names
        .iter()
        .map(|name| format!("  {name}: {{memory: 256, disk_size: 1}}\n"))
        .collect();
    (body, names)
}

/// One container as a node holds it.
#[derive(Debug, Clone)]
pub struct Held {
    pub node: String,
    pub vmid: u32,
    pub mac: String,
    pub lock: Option<String>,
    /// (fleet, name) from the mark.
    pub mark: Option<(String, String)>,
}

/// Every container on every node, read from the nodes (pvesim), with its mark, MAC and lock.
pub fn on_nodes(c: &Cluster) -> Vec<Held> {
    let mut all = Vec::new();
    for n in &c.nodes {
        for vmid in c.vmids_on(&n.name) {
            let path = format!("/nodes/{}/lxc/{vmid}/config", n.name);
            let out = c.pve(&n.name, "pvesh", &["get", &path, "--output-format", "json"]);
            let cfg: serde_json::Value = serde_json::from_str(&out.stdout).unwrap_or_default();
            let s = |k: &str| cfg.get(k).and_then(|v| v.as_str()).map(str::to_string);
            let mark = s("description").and_then(|d| {
                d.lines().find_map(|l| {
                    let rest = l.trim().strip_prefix(MARK)?;
                    let mut f = None;
                    let mut nm = None;
                    for w in rest.split_whitespace() {
                        if let Some(v) = w.strip_prefix("fleet=") {
                            f = Some(v.to_string());
                        } else if let Some(v) = w.strip_prefix("name=") {
                            nm = Some(v.to_string());
                        }
                    }
                    Some((f?, nm?))
                })
            });
            let mac = s("net0")
                .and_then(|net| {
                    net.split(',')
                        .find_map(|kv| kv.strip_prefix("hwaddr=").map(str::to_string))
                })
                .unwrap_or_default()
                .to_lowercase();
            all.push(Held {
                node: n.name.clone(),
                vmid,
                mac,
                lock: s("lock"),
                mark,
            });
        }
    }
    all
}

/// Waits (polling, at most `limit`) until every container of `fleet` in `names` is up and not drifted and the
/// fleet has no other container; the time it took, or what was seen last.
pub async fn wait_converged(
    c: &Cluster,
    fleet: &str,
    names: &[String],
    limit: Duration,
) -> std::result::Result<f64, String> {
    let start = Instant::now();
    let mut last = String::new();
    while start.elapsed() < limit {
        match c.containers(fleet).await {
            Ok(cs) => {
                let up = cs.len() == names.len()
                    && names.iter().all(|n| {
                        cs.iter()
                            .any(|x| &x.name == n && api::is_up(x) && !x.drifted)
                    });
                // and the nodes agree: each one exists and runs there (pvesim's runtime record)
                let stopped: Vec<&str> = cs
                    .iter()
                    .filter(|x| {
                        c.runtime(&x.node, x.vm_id)
                            .and_then(|rt| rt.get("running").and_then(|b| b.as_bool()))
                            != Some(true)
                    })
                    .map(|x| x.name.as_str())
                    .collect();
                if up && stopped.is_empty() {
                    return Ok(start.elapsed().as_secs_f64());
                }
                if up {
                    last = format!(
                        "the controller says all up; not running on their nodes: {stopped:?}"
                    );
                    tokio::time::sleep(Duration::from_millis(250)).await;
                    continue;
                }
                let ok = cs.iter().filter(|x| api::is_up(x) && !x.drifted).count();
                let errors: Vec<String> = cs
                    .iter()
                    .filter(|x| !x.last_error.is_empty())
                    .take(3)
                    .map(|x| format!("{}: {}", x.name, x.last_error))
                    .collect();
                last = format!(
                    "{ok}/{} up ({} known); errors: {errors:?}",
                    names.len(),
                    cs.len()
                );
            }
            Err(e) => last = e.to_string(),
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    Err(format!("not converged after {limit:?}: {last}"))
}

/// Waits until the controller reports no container of `fleet` and no node holds one with its mark.
pub async fn wait_gone(
    c: &Cluster,
    fleet: &str,
    limit: Duration,
) -> std::result::Result<f64, String> {
    let start = Instant::now();
    let mut last = String::new();
    while start.elapsed() < limit {
        let reported = c
            .containers(fleet)
            .await
            .map(|v| v.len())
            .unwrap_or(usize::MAX);
        let held = on_nodes(c)
            .iter()
            .filter(|h| h.mark.as_ref().is_some_and(|(f, _)| f == fleet))
            .count();
        if reported == 0 && held == 0 {
            return Ok(start.elapsed().as_secs_f64());
        }
        last = format!("controller reports {reported}, nodes hold {held}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    Err(format!("fleet {fleet} not gone after {limit:?}: {last}"))
}

/// Operation ids that an agent log shows as succeeded more than once (an operation run twice).
pub fn ops_succeeded_twice(c: &Cluster) -> Vec<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    for n in &c.nodes {
        let text = std::fs::read_to_string(&n.log).unwrap_or_default();
        for id in succeeded_op_ids(&text) {
            *seen.entry(id).or_default() += 1;
        }
    }
    seen.into_iter()
        .filter(|(_, n)| *n > 1)
        .map(|(id, _)| id)
        .collect()
}

/// The op ids of the `operation succeeded` lines of an agent log, in order (colour codes ignored: a log
/// written with ANSI colours has `op_id\x1b[0m\x1b[2m=\x1b[0m...`, which a plain `op_id=` never matches).
pub fn succeeded_op_ids(log: &str) -> Vec<String> {
    log.lines()
        .filter(|l| l.contains("operation succeeded"))
        .filter_map(|l| {
            strip_ansi(l)
                .split_whitespace()
                .find_map(|w| w.strip_prefix("op_id=").map(str::to_string))
        })
        .collect()
}

/// `s` without ANSI escape sequences (`ESC [ ... letter`).
pub fn strip_ansi(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(ch) = chars.next() {
        if ch == '\u{1b}' {
            if chars.next() == Some('[') {
                for c in chars.by_ref() {
                    if c.is_ascii_alphabetic() {
                        break;
                    }
                }
            }
            continue;
        }
        out.push(ch);
    }
    out
}

/// The checks after a fault, against the nodes (`fleet_file` None: after a destroy, no plan): every container of `fleet` exactly once cluster-wide under the
/// vm_id and MAC the controller gave it, no orphan with pxfleet's mark and no half-made leftover, `pxctl plan
/// --detailed-exitcode` 0, no operation succeeded twice. `secs` is the time to converge measured by the caller
/// (`Err` when it did not).
pub async fn check(
    c: &Cluster,
    fleet: &str,
    fleet_file: Option<&Path>,
    names: &[String],
    secs: std::result::Result<f64, String>,
) -> RunResult {
    let mut r = RunResult::default();
    let mut problems = Vec::new();
    match secs {
        Ok(s) => r.secs = s,
        Err(e) => problems.push(e),
    }
    let held = on_nodes(c);
    for name in names {
        let copies: Vec<&Held> = held
            .iter()
            .filter(|h| h.mark.as_ref() == Some(&(fleet.to_string(), name.clone())))
            .collect();
        match copies.len() {
            0 => {
                r.lost += 1;
                problems.push(format!("{name}: on no node"));
            }
            1 => {
                // under its vm_id and MAC
                let mut api = match c.api().await {
                    Ok(a) => a,
                    Err(e) => {
                        problems.push(e.to_string());
                        continue;
                    }
                };
                let d = api
                    .describe_container(pb::DescribeContainerRequest {
                        fleet: fleet.into(),
                        name: name.clone(),
                    })
                    .await
                    .map(|r| r.into_inner());
                match d {
                    Ok(d) => {
                        let info = d.info.unwrap_or_default();
                        let mac = d
                            .desired
                            .and_then(|s| s.interfaces.first().map(|i| i.mac.to_lowercase()))
                            .unwrap_or_default();
                        let h = copies[0];
                        if (h.vmid, h.node.as_str()) != (info.vm_id, info.node.as_str())
                            || (!mac.is_empty() && h.mac != mac)
                        {
                            problems.push(format!(
                                "{name}: node holds {}/{} mac {}, controller says {}/{} mac {mac}",
                                h.node, h.vmid, h.mac, info.node, info.vm_id
                            ));
                        }
                    }
                    Err(e) => problems.push(format!("{name}: describe: {e}")),
                }
            }
            n => {
                r.duplicates += n - 1;
                problems.push(format!(
                    "{name}: {n} copies: {:?}",
                    copies.iter().map(|h| (&h.node, h.vmid)).collect::<Vec<_>>()
                ));
            }
        }
    }
    for h in &held {
        let wanted_elsewhere = h.mark.as_ref().is_some_and(|(f, _)| f != fleet);
        let ours_unwanted = h
            .mark
            .as_ref()
            .is_some_and(|(f, n)| f == fleet && !names.contains(n));
        let half_made = h.mark.is_none() && h.lock.is_some();
        if (ours_unwanted || half_made) && !wanted_elsewhere {
            r.orphans += 1;
            problems.push(format!(
                "orphan on {}: {} mark {:?} lock {:?}",
                h.node, h.vmid, h.mark, h.lock
            ));
        }
    }
    // MACs are unique cluster-wide
    let mut macs: BTreeMap<&str, usize> = BTreeMap::new();
    for h in held.iter().filter(|h| !h.mac.is_empty()) {
        *macs.entry(h.mac.as_str()).or_default() += 1;
    }
    for (mac, n) in macs.iter().filter(|(_, n)| **n > 1) {
        problems.push(format!("MAC {mac} on {n} containers"));
    }
    if let Some(file) = fleet_file {
        let file = file.display().to_string();
        let (code, out, err) = c.pxctl(&["plan", &file, "--detailed-exitcode"]).await;
        if code != 0 {
            problems.push(format!(
                "pxctl plan --detailed-exitcode exited {code}: {}{}",
                out.lines().take(5).collect::<Vec<_>>().join(" / "),
                err.trim()
            ));
        }
    }
    let twice = ops_succeeded_twice(c);
    if !twice.is_empty() {
        problems.push(format!("operations run twice: {twice:?}"));
    }
    r.converged = problems.is_empty();
    let mut detail = String::new();
    for p in problems.iter().take(12) {
        let _ = writeln!(detail, "  {p}");
    }
    r.detail = detail;
    if !r.converged {
        eprintln!("fault suite: {fleet}: NOT converged:\n{}", r.detail);
    }
    r
}

/// Destroys `fleet` through the API and waits until the nodes no longer hold it.
pub async fn destroy(
    c: &Cluster,
    fleet: &str,
    limit: Duration,
) -> std::result::Result<f64, String> {
    let mut api = c.api().await.map_err(|e| e.to_string())?;
    api.destroy(pb::DestroyRequest {
        fleet: fleet.into(),
        ..Default::default()
    })
    .await
    .map_err(|e| format!("destroy {fleet}: {e}"))?;
    wait_gone(c, fleet, limit).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn succeeded_op_ids_are_found_with_and_without_colours() {
        let log = "\u{1b}[2m2026-12-03T12:38:29.808622Z\u{1b}[0m \u{1b}[32m INFO\u{1b}[0m \u{1b}[2mpxfleet_agent::executor\u{1b}[0m\u{1b}[2m:\u{1b}[0m operation succeeded \u{1b}[3mop_id\u{1b}[0m\u{1b}[2m=\u{1b}[0m18edbeb3 created\n\
                   2026-12-03T12:38:30Z  INFO pxfleet_agent::executor: operation succeeded op_id=18edbeb4 created\n\
                   2026-12-03T12:38:31Z  INFO pxfleet_agent::executor: operation failed op_id=18edbeb5\n";
        assert_eq!(succeeded_op_ids(log), vec!["18edbeb3", "18edbeb4"]);
    }
}
