//! The fault suite (issue 12): real processes (pxcontroller, pxagent, pvesim nodes), a fault at a random moment
//! (seed printed), then the checks of [`pxfleet_tests::faults::check`] against the nodes themselves. Ignored in
//! the default `cargo test`: `scripts/faults [--runs N]` runs them (`--ignored`) and prints the table.
//! `PXFLEET_FAULT_RUNS`, `PXFLEET_FAULT_CONTAINERS`, `PXFLEET_FAULT_SEED` and `PXFLEET_FAULT_REPORT` steer them.
// test code driving separate processes: real time
#![allow(clippy::disallowed_methods)]

use std::path::PathBuf;
use std::time::{Duration, Instant};

use pxfleet_tests::faults::{
    self, body, check, containers, destroy, runs, wait_converged, Rng, Row,
};
use pxfleet_tests::{fleet_yaml, v1 as pb, Cluster, ClusterOptions};

const CONVERGE: Duration = Duration::from_secs(240);
/// The agents' command timeout in these clusters: short, so a hanging `pct` is killed soon.
const COMMAND_TIMEOUT_SECS: u64 = 8;

async fn cluster(create_latency_ms: u64) -> Cluster {
    Cluster::start_with(ClusterOptions {
        nodes: 3,
        create_latency_ms,
        command_timeout_secs: Some(COMMAND_TIMEOUT_SECS),
        ..ClusterOptions::default()
    })
    .await
    .expect("cluster")
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// The fleet file of run `run` of a fault: `n` unplaced containers.
fn fleet(
    c: &Cluster,
    prefix: &str,
    run: usize,
    n: usize,
) -> (String, String, PathBuf, Vec<String>) {
    let name = format!("{prefix}-{run}");
    // hostnames are unique cluster-wide: each fleet's containers are named after it
    let (b, names) = body(&name, n);
    let yaml = fleet_yaml(&name, &b);
    let file = c.write_fleet(&format!("{name}.yaml"), &yaml);
    (name, yaml, file, names)
}

async fn revisions(c: &Cluster, fleet: &str) -> usize {
    let Ok(mut api) = c.api().await else {
        return 0;
    };
    api.history(pb::HistoryRequest {
        fleet: fleet.into(),
        limit: 0,
    })
    .await
    .map(|h| h.into_inner().revisions.len())
    .unwrap_or(0)
}

/// Cleans up after a run so the next one has room; a failure is part of the run's result.
async fn clean(c: &Cluster, fleet: &str, r: &mut faults::RunResult) {
    if let Err(e) = destroy(c, fleet, CONVERGE).await {
        r.converged = false;
        r.detail.push_str(&format!("  cleanup: {e}\n"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "fault suite: scripts/faults"]
async fn controller_killed_during_a_submit() {
    let what = "controller kill -9 during a submit";
    let mut c = cluster(100).await;
    let mut rng = Rng::from_env(what);
    let mut row = Row {
        fault: what.into(),
        runs: vec![],
    };
    for run in 0..runs() {
        let (name, yaml, file, names) = fleet(&c, "ck", run, containers());
        // half the runs kill within the Submit call itself, the others while its operations are dispatched
        let delay = if rng.below(2) == 0 {
            rng.below(200)
        } else {
            rng.below(3000)
        };
        let mut api = c.api().await.unwrap();
        let req = pb::SubmitRequest {
            file_name: "fleet.yaml".into(),
            source: yaml.clone(),
            ..Default::default()
        };
        let submit = tokio::spawn(async move { api.submit(req).await });
        tokio::time::sleep(ms(delay)).await;
        c.kill_controller().await;
        let t0 = Instant::now();
        c.start_controller().await.expect("controller restarts");
        let answered = matches!(submit.await, Ok(Ok(_)));
        // a user whose submit got no answer submits again (it is refused or a no-op if it had gone through)
        let stored = revisions(&c, &name).await;
        if stored == 0 {
            let r = c.submit(&yaml).await.expect("submit again");
            assert!(r.diagnostics.is_empty(), "{:?}", r.diagnostics);
        }
        eprintln!(
            "run {run}: killed {delay} ms into the submit (answered: {answered}, stored: {stored})"
        );
        let secs = wait_converged(&c, &name, &names, CONVERGE)
            .await
            .map(|_| t0.elapsed().as_secs_f64());
        let mut r = check(&c, &name, Some(&file), &names, secs).await;
        clean(&c, &name, &mut r).await;
        row.runs.push(r);
    }
    row.finish();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "fault suite: scripts/faults"]
async fn agent_killed_during_creates_starts_and_destroys() {
    let mut c = cluster(300).await;
    let mut rng = Rng::from_env("agent kill -9");
    let mut create = Row {
        fault: "agent kill -9 during creates/starts".into(),
        runs: vec![],
    };
    let mut gone = Row {
        fault: "agent kill -9 during destroys".into(),
        runs: vec![],
    };
    let nodes: Vec<String> = c.nodes.iter().map(|n| n.name.clone()).collect();
    for run in 0..runs() {
        let (name, yaml, file, names) = fleet(&c, "ak", run, containers());
        let r = c.submit(&yaml).await.expect("submit");
        assert!(r.diagnostics.is_empty(), "{:?}", r.diagnostics);
        let delay = rng.below(4000);
        let node = nodes[rng.below(nodes.len() as u64) as usize].clone();
        tokio::time::sleep(ms(delay)).await;
        c.kill_agent(&node).await;
        tokio::time::sleep(ms(500)).await;
        c.start_agent(&node).expect("agent restarts");
        let t0 = Instant::now();
        eprintln!("run {run}: agent {node} killed {delay} ms into the creates");
        let secs = wait_converged(&c, &name, &names, CONVERGE)
            .await
            .map(|_| t0.elapsed().as_secs_f64());
        create
            .runs
            .push(check(&c, &name, Some(&file), &names, secs).await);

        // destroys
        let mut api = c.api().await.unwrap();
        api.destroy(pb::DestroyRequest {
            fleet: name.clone(),
            ..Default::default()
        })
        .await
        .expect("destroy");
        let delay = rng.below(1500);
        let node = nodes[rng.below(nodes.len() as u64) as usize].clone();
        tokio::time::sleep(ms(delay)).await;
        c.kill_agent(&node).await;
        tokio::time::sleep(ms(500)).await;
        c.start_agent(&node).expect("agent restarts");
        let t0 = Instant::now();
        eprintln!("run {run}: agent {node} killed {delay} ms into the destroys");
        let secs = faults::wait_gone(&c, &name, CONVERGE)
            .await
            .map(|_| t0.elapsed().as_secs_f64());
        gone.runs.push(check(&c, &name, None, &[], secs).await);
    }
    create.finish();
    gone.finish();
}

/// A PVE-side fault: `plan` (a pvesim fault plan) on every node while a fleet of 9 is created.
async fn pve_fault(c: &Cluster, what: &str, prefix: &str, plan: &str) -> Row {
    let hang_secs = plan
        .contains("[[hang]]")
        .then(|| {
            plan.split("seconds = ")
                .nth(1)?
                .lines()
                .next()?
                .parse::<u64>()
                .ok()
        })
        .flatten();
    let mut row = Row {
        fault: what.into(),
        runs: vec![],
    };
    for run in 0..runs() {
        for n in &c.nodes {
            let _ = std::fs::remove_file(n.sim.join("faults-fired.json"));
            std::fs::write(n.sim.join("faults.toml"), plan).unwrap();
        }
        let (name, yaml, file, names) = fleet(c, prefix, run, 9);
        let t0 = Instant::now();
        let r = c.submit(&yaml).await.expect("submit");
        assert!(r.diagnostics.is_empty(), "{:?}", r.diagnostics);
        let secs = wait_converged(c, &name, &names, CONVERGE)
            .await
            .map(|_| t0.elapsed().as_secs_f64());
        // how often the fault fired (pvesim counts it per node): a fault that never fired proves nothing
        let fired: u64 = c
            .nodes
            .iter()
            .filter_map(|n| std::fs::read_to_string(n.sim.join("faults-fired.json")).ok())
            .filter_map(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
            .filter_map(|v| {
                v.get("counts")?
                    .as_object()
                    .map(|m| m.values().filter_map(|x| x.as_u64()).sum::<u64>())
            })
            .sum();
        for n in &c.nodes {
            let _ = std::fs::remove_file(n.sim.join("faults.toml"));
        }
        let mut r = check(c, &name, Some(&file), &names, secs).await;
        eprintln!("run {run}: {what}: fired {fired} time(s)");
        if fired == 0 {
            r.converged = false;
            r.detail.push_str("  the fault never fired\n");
        }
        if let Some(secs) = hang_secs {
            // the hung worker (pvesim's forked `sleep`) died with its process group
            let left = sleeping(secs);
            if !left.is_empty() {
                r.converged = false;
                r.detail
                    .push_str(&format!("  hung workers outlived the timeout: {left:?}\n"));
            }
        }
        clean(c, &name, &mut r).await;
        row.runs.push(r);
    }
    row
}

/// Live processes (not zombies) whose command line is `sleep SECS`.
fn sleeping(secs: u64) -> Vec<u32> {
    let want = format!("sleep\0{secs}\0");
    std::fs::read_dir("/proc")
        .map(|d| {
            d.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
                .filter(|pid| {
                    std::fs::read(format!("/proc/{pid}/cmdline"))
                        .is_ok_and(|c| c == want.as_bytes())
                        && std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
                            s.rsplit_once(')')
                                .is_some_and(|(_, r)| !r.trim_start().starts_with('Z'))
                        })
                })
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "fault suite: scripts/faults"]
async fn pve_side_faults() {
    let c = cluster(100).await;
    let cases = [
        (
            "pct create dies halfway (lock: create left)",
            "half",
            "[half_create]\ncount = 1\n",
        ),
        (
            "config lock held (got timeout)",
            "lockheld",
            "[lock_held]\ncount = 1\n",
        ),
        (
            "CT is locked (backup)",
            "locked",
            "[ct_locked]\nlock = \"backup\"\ncount = 2\n",
        ),
        (
            "storage full (once per node)",
            "full",
            "[storage_full]\nstorages = [\"local-lvm\"]\ncount = 1\n",
        ),
        (
            "pct create hangs past the agent's timeout",
            "hang",
            "[[hang]]\ncommand = \"pct create\"\nseconds = 127\ncount = 1\n",
        ),
        (
            "pvesh returns garbage",
            "garbage",
            "[[garbage]]\ncommand = \"pvesh get\"\ncount = 3\n",
        ),
    ];
    let mut rows = Vec::new();
    for (what, prefix, plan) in cases {
        eprintln!("fault suite: {what}");
        rows.push(pve_fault(&c, what, prefix, plan).await);
    }
    // every row is printed before the first failure is reported
    for r in &rows {
        eprintln!("{}", r.line());
    }
    for r in &rows {
        r.finish();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "fault suite: scripts/faults"]
async fn node_reboot_then_agent_restart() {
    let what = "node reboots (all CTs stopped), agent restarts";
    let mut c = cluster(0).await;
    let mut rng = Rng::from_env(what);
    let mut row = Row {
        fault: what.into(),
        runs: vec![],
    };
    let nodes: Vec<String> = c.nodes.iter().map(|n| n.name.clone()).collect();
    for run in 0..runs() {
        let (name, yaml, file, names) = fleet(&c, "boot", run, 9);
        c.submit(&yaml).await.expect("submit");
        wait_converged(&c, &name, &names, CONVERGE)
            .await
            .expect("converged before the reboot");
        let node = nodes[rng.below(nodes.len() as u64) as usize].clone();
        c.kill_agent(&node).await;
        let sim = c.node(&node).sim.display().to_string();
        pxfleet_tests::run_command(
            &c.bins.pvesim,
            &["reboot".into(), "--state".into(), sim],
            &[],
        )
        .await
        .expect("pvesim reboot");
        c.start_agent(&node).expect("agent restarts");
        let t0 = Instant::now();
        // the controller learns the containers stopped before it can converge again
        tokio::time::sleep(ms(1500)).await;
        let secs = wait_converged(&c, &name, &names, CONVERGE)
            .await
            .map(|_| t0.elapsed().as_secs_f64());
        let mut r = check(&c, &name, Some(&file), &names, secs).await;
        let stopped: Vec<u32> = c
            .vmids_on(&node)
            .into_iter()
            .filter(|v| {
                c.runtime(&node, *v)
                    .and_then(|rt| rt.get("running").and_then(|b| b.as_bool()))
                    != Some(true)
            })
            .collect();
        if !stopped.is_empty() {
            r.converged = false;
            r.detail
                .push_str(&format!("  still stopped on {node}: {stopped:?}\n"));
        }
        clean(&c, &name, &mut r).await;
        row.runs.push(r);
    }
    row.finish();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "fault suite: scripts/faults"]
async fn concurrent_submits_one_wins_and_parallel_fleets_all_converge() {
    let c = cluster(100).await;
    let mut same = Row {
        fault: "two pxctl submits of one fleet at once".into(),
        runs: vec![],
    };
    let mut parallel = Row {
        fault: "5 fleets submitted in parallel".into(),
        runs: vec![],
    };
    for run in 0..runs() {
        let (name, _yaml, file, names) = fleet(&c, "twice", run, 9);
        let f = file.display().to_string();
        let t0 = Instant::now();
        let argv = ["submit", f.as_str(), "-y", "--no-wait"];
        let (a, b) = tokio::join!(c.pxctl(&argv), c.pxctl(&argv));
        let secs = wait_converged(&c, &name, &names, CONVERGE)
            .await
            .map(|_| t0.elapsed().as_secs_f64());
        let mut r = check(&c, &name, Some(&file), &names, secs).await;
        // one wins; the other is refused with the revision error, or (when it planned after the first stored)
        // found nothing to do; never two revisions
        let wins = [&a, &b].iter().filter(|o| o.0 == 0).count();
        let refused = [&a, &b]
            .iter()
            .filter(|o| o.0 != 0 && o.2.contains("revision"))
            .count();
        let revs = revisions(&c, &name).await;
        if revs != 1 || wins + refused != 2 || wins == 0 {
            r.converged = false;
            r.detail.push_str(&format!(
                "  revisions {revs}; submit A exit {} ({}), B exit {} ({})\n",
                a.0,
                a.2.trim(),
                b.0,
                b.2.trim()
            ));
        }
        eprintln!(
            "run {run}: submit exits {} / {}; {}",
            a.0,
            b.0,
            [a.2.trim(), b.2.trim()].join(" | ")
        );
        clean(&c, &name, &mut r).await;
        same.runs.push(r);

        // N different fleets at once
        let fleets: Vec<_> = (0..5)
            .map(|i| fleet(&c, &format!("par{i}"), run, 6))
            .collect();
        let t0 = Instant::now();
        let submits = fleets.iter().map(|(_, yaml, _, _)| c.submit(yaml));
        for s in futures_join_all(submits).await {
            let s = s.expect("submit");
            assert!(s.diagnostics.is_empty(), "{:?}", s.diagnostics);
        }
        let mut all = faults::RunResult {
            converged: true,
            ..Default::default()
        };
        // every fleet converges before any is checked: while one is still creating, its containers hold
        // `lock: create` without a mark (as on PVE), which the check of another fleet would count as half-made
        let mut times = Vec::new();
        for (name, _, _, names) in &fleets {
            times.push(
                wait_converged(&c, name, names, CONVERGE)
                    .await
                    .map(|_| t0.elapsed().as_secs_f64()),
            );
        }
        for ((name, _, file, names), secs) in fleets.iter().zip(times) {
            let r = check(&c, name, Some(file), names, secs).await;
            all.converged &= r.converged;
            all.duplicates += r.duplicates;
            all.lost += r.lost;
            all.orphans += r.orphans;
            all.secs = all.secs.max(r.secs);
            all.detail.push_str(&r.detail);
        }
        for (name, _, _, _) in &fleets {
            clean(&c, name, &mut all).await;
        }
        parallel.runs.push(all);
    }
    same.finish();
    parallel.finish();
}

/// Awaits every future (in order), concurrently.
async fn futures_join_all<F: std::future::Future>(fs: impl Iterator<Item = F>) -> Vec<F::Output> {
    let handles: Vec<_> = fs.map(Box::pin).collect();
    let mut out = Vec::with_capacity(handles.len());
    let mut pending: Vec<_> = handles.into_iter().map(Some).collect();
    let mut results: Vec<Option<F::Output>> = (0..pending.len()).map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut done = true;
        for (i, slot) in pending.iter_mut().enumerate() {
            if let Some(f) = slot {
                match f.as_mut().poll(cx) {
                    std::task::Poll::Ready(v) => {
                        results[i] = Some(v);
                        *slot = None;
                    }
                    std::task::Poll::Pending => done = false,
                }
            }
        }
        if done {
            std::task::Poll::Ready(())
        } else {
            std::task::Poll::Pending
        }
    })
    .await;
    out.extend(
        results
            .into_iter()
            .map(|r| r.expect("every future finished")),
    );
    out
}

/// The cut's length: `PXFLEET_FAULT_CUT_SECS`, default the 60 s.
fn cut_secs() -> u64 {
    std::env::var("PXFLEET_FAULT_CUT_SECS")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|n| *n > 0)
        .unwrap_or(60)
}

/// The controller's heartbeat timeout in the network cut's cluster (the harness's default is 30 s): short, so
/// the cut node is down for most of a 60 s cut. The agents heartbeat every 5 s (the controller's Welcome).
const CUT_HEARTBEAT_TIMEOUT_SECS: u64 = 15;

/// The agent log of `node` from byte `from` on.
fn log_since(c: &Cluster, node: &str, from: usize) -> String {
    let text = std::fs::read_to_string(&c.node(node).log).unwrap_or_default();
    text.get(from..).unwrap_or_default().to_string()
}

fn log_len(c: &Cluster, node: &str) -> usize {
    std::fs::metadata(&c.node(node).log)
        .map(|m| m.len() as usize)
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "fault suite: scripts/faults"]
async fn node_cut_off_by_the_network() {
    use pxfleet_tests::netcut::{Blackhole, Restore};
    let what = "node cut off the network (black-holed)";
    let cut = Duration::from_secs(cut_secs());
    // down within the timeout after the last heartbeat before the cut, plus the polling's own delay
    let down_limit = Duration::from_secs(CUT_HEARTBEAT_TIMEOUT_SECS + 10);
    assert!(
        cut > down_limit,
        "PXFLEET_FAULT_CUT_SECS={} is too short to see the node down (heartbeat timeout {} s): use more than {} s",
        cut.as_secs(),
        CUT_HEARTBEAT_TIMEOUT_SECS,
        down_limit.as_secs()
    );
    let mut c = Cluster::start_with(ClusterOptions {
        nodes: 3,
        // creates in flight when the cable is pulled finish during the cut
        create_latency_ms: 2000,
        heartbeat_timeout_secs: CUT_HEARTBEAT_TIMEOUT_SECS,
        command_timeout_secs: Some(COMMAND_TIMEOUT_SECS),
        ..ClusterOptions::default()
    })
    .await
    .expect("cluster");
    let mut rng = Rng::from_env(what);
    let nodes: Vec<String> = c.nodes.iter().map(|n| n.name.clone()).collect();
    let node = nodes[rng.below(nodes.len() as u64) as usize].clone();
    let proxy = Blackhole::start(c.listen).await.expect("proxy");
    c.redirect_agent(&node, &format!("https://{}", proxy.addr()))
        .await
        .expect("agent through the proxy");
    c.wait_nodes_ready(Duration::from_secs(60))
        .await
        .expect("nodes ready");
    let mut row = Row {
        fault: what.into(),
        runs: vec![],
    };
    for run in 0..runs() {
        // even runs: the stalled connections stay dead (the agent and the controller must notice by
        // themselves); odd runs: they resume (TCP after a short cut)
        let how = if run % 2 == 0 {
            Restore::StayDead
        } else {
            Restore::Resume
        };
        let (name, yaml, file, names) = fleet(&c, "cut", run, 15);
        let r = c.submit(&yaml).await.expect("submit");
        assert!(r.diagnostics.is_empty(), "{:?}", r.diagnostics);
        pxfleet_tests::wait_until(
            &format!("a create running on {node}"),
            Duration::from_secs(120),
            || async {
                let ops = c.operations(&name).await.map_err(|e| e.to_string())?;
                ops.iter()
                    .any(|o| {
                        o.node == node
                            && o.kind == pb::OperationKind::Create as i32
                            && o.state == pb::OperationState::Running as i32
                    })
                    .then_some(())
                    .ok_or_else(|| format!("{} operations, none running there", ops.len()))
            },
        )
        .await;
        let placed: std::collections::BTreeMap<String, String> = c
            .containers(&name)
            .await
            .expect("containers")
            .into_iter()
            .filter(|x| !x.node.is_empty())
            .map(|x| (x.name, x.node))
            .collect();
        let log_at_cut = log_len(&c, &node);
        let controller_log_at_cut = std::fs::metadata(&c.controller_log)
            .map(|m| m.len() as usize)
            .unwrap_or(0);
        proxy.cut();
        let t_cut = Instant::now();
        let mut problems: Vec<String> = Vec::new();
        eprintln!("run {run}: {node} cut off ({how:?} after the restore)");

        // shown down (API), within the heartbeat timeout
        let mut down_after = None;
        while t_cut.elapsed() < down_limit {
            let ns = c.nodes_info().await.unwrap_or_default();
            if ns
                .iter()
                .any(|n| n.name == node && n.status == pb::NodeStatus::Down as i32)
            {
                down_after = Some(t_cut.elapsed().as_secs_f64());
                break;
            }
            tokio::time::sleep(ms(250)).await;
        }
        match down_after {
            Some(s) => eprintln!("run {run}: {node} shown down {s:.1} s after the cut"),
            None => problems.push(format!(
                "{node} not shown down within {} s of the cut (heartbeat timeout {CUT_HEARTBEAT_TIMEOUT_SECS} s)",
                down_limit.as_secs()
            )),
        }
        // ... and by pxctl get nodes, as a user sees it
        let shown = c.pxctl_json(&["get", "nodes"]).await;
        let status = shown
            .as_array()
            .and_then(|a| a.iter().find(|n| n["name"] == node.as_str()))
            .map(|n| n["status"].as_str().unwrap_or_default().to_string())
            .unwrap_or_default();
        if status != "down" {
            problems.push(format!(
                "pxctl get nodes shows {node} as {status:?}, not down"
            ));
        }
        // while cut: its operations wait (none failed) and none of its containers moves to another node
        while t_cut.elapsed() < cut {
            if let Ok(ops) = c.operations(&name).await {
                for o in ops
                    .iter()
                    .filter(|o| o.node == node && o.state == pb::OperationState::Failed as i32)
                {
                    let p = format!(
                        "{} {} failed during the cut: {}",
                        o.op_id, o.container, o.error
                    );
                    if !problems.contains(&p) {
                        problems.push(p);
                    }
                }
            }
            if let Ok(cs) = c.containers(&name).await {
                for x in &cs {
                    if placed.get(&x.name) == Some(&node) && x.node != node {
                        let p =
                            format!("{} moved from {node} to {} during the cut", x.name, x.node);
                        if !problems.contains(&p) {
                            problems.push(p);
                        }
                    }
                }
            }
            tokio::time::sleep(ms(1000)).await;
        }
        let during = log_since(&c, &node, log_at_cut);
        let finished_cut_off = faults::succeeded_op_ids(&during);
        let noticed = during.contains("controller stream failed");
        let controller_during = std::fs::read_to_string(&c.controller_log)
            .ok()
            .and_then(|t| t.get(controller_log_at_cut..).map(faults::strip_ansi))
            .unwrap_or_default();
        let dropped = controller_during
            .lines()
            .any(|l| l.contains("agent disconnected") && l.contains(&format!("node={node}")));
        proxy.restore(how);
        let t0 = Instant::now();
        eprintln!(
            "run {run}: restored after {:.1} s; {} operation(s) finished while cut off; agent noticed the dead stream: {noticed}; controller dropped it: {dropped}",
            t_cut.elapsed().as_secs_f64(),
            finished_cut_off.len()
        );
        let secs = wait_converged(&c, &name, &names, CONVERGE)
            .await
            .map(|_| t0.elapsed().as_secs_f64());
        let mut r = check(&c, &name, Some(&file), &names, secs).await;
        if finished_cut_off.is_empty() {
            problems.push(
                "no operation finished while the node was cut off: the fault proved nothing".into(),
            );
        }
        // what it finished while cut off is reported (succeeded in the controller's view) ...
        let ops = c.operations(&name).await.unwrap_or_default();
        for id in &finished_cut_off {
            match ops.iter().find(|o| &o.op_id == id) {
                Some(o) if o.state == pb::OperationState::Succeeded as i32 => {}
                Some(o) => problems.push(format!(
                    "{id} finished while cut off, the controller says {:?}",
                    pb::OperationState::try_from(o.state).unwrap_or_default()
                )),
                None => problems.push(format!(
                    "{id} finished while cut off, unknown to the controller"
                )),
            }
        }
        // ... and not run again (check's ops_succeeded_twice); nothing placed on the node went elsewhere
        let cs = c.containers(&name).await.unwrap_or_default();
        for x in &cs {
            if placed.get(&x.name) == Some(&node) && x.node != node {
                problems.push(format!("{} moved from {node} to {}", x.name, x.node));
            }
        }
        if how == Restore::StayDead && !noticed {
            problems.push(format!(
                "the agent of {node} never noticed its connection was dead during the cut"
            ));
        }
        if how == Restore::StayDead && !dropped {
            problems.push(format!(
                "the controller kept {node}'s dead connection as its session during the cut"
            ));
        }
        if !problems.is_empty() {
            r.converged = false;
            for p in &problems {
                r.detail.push_str(&format!("  {p}\n"));
            }
            eprintln!("fault suite: {name}: NOT converged:\n{}", r.detail);
        }
        clean(&c, &name, &mut r).await;
        row.runs.push(r);
    }
    row.finish();
}

/// A fleet of `n` containers, each with a description of about 6.8 KiB (PVE keeps at most 8 KiB, and the spec
/// refuses more than 7,680 bytes): 30 of them need about 200 KiB of new space in the store.
fn big_fleet_yaml(name: &str, n: usize) -> String {
    let (_, names) = body(name, n);
    let line = "x".repeat(96);
    let desc: String = (0..70).map(|_| format!("      {line}\n")).collect();
    let containers: String = names
        .iter()
        .map(|c| format!("  {c}:\n    memory: 256\n    disk_size: 1\n    description: |\n{desc}"))
        .collect();
    fleet_yaml(name, &containers)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum DiskFault {
    Full,
    ReadOnly,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "fault suite: scripts/faults"]
async fn controller_disk_full_or_read_only() {
    use pxfleet_tests::diskfault;
    assert!(
        diskfault::is_root(),
        "this fault mounts a tmpfs as the controller's data directory and needs root: run scripts/faults as root \
         (CI does); not skipped silently"
    );
    let mut c = cluster(0).await;
    let mut mount = c
        .controller_data_on_tmpfs(64)
        .await
        .expect("the controller's data directory on a tmpfs");
    let mut full = Row {
        fault: "controller disk full".into(),
        runs: vec![],
    };
    let mut ro = Row {
        fault: "controller data dir read-only".into(),
        runs: vec![],
    };
    for run in 0..runs() {
        for fault in [DiskFault::Full, DiskFault::ReadOnly] {
            let tag = match fault {
                DiskFault::Full => "full",
                DiskFault::ReadOnly => "ro",
            };
            // a fleet that exists before the fault: reads about it must keep working
            let (old, old_yaml, old_file, old_names) = fleet(&c, &format!("{tag}a"), run, 3);
            if !c.controller_running() {
                c.start_controller().await.expect("controller");
            }
            let r = c.submit(&old_yaml).await.expect("submit");
            assert!(r.diagnostics.is_empty(), "{:?}", r.diagnostics);
            wait_converged(&c, &old, &old_names, CONVERGE)
                .await
                .expect("converged before the fault");
            let mut problems: Vec<String> = Vec::new();
            let os_error = match fault {
                DiskFault::Full => "No space left on device",
                DiskFault::ReadOnly => "Read-only file system",
            };
            // the refused fleet: its stored spec is over sled's blob threshold (128 KiB with the default 512 KiB
            // segments), so storing it needs new space on the disk (a small write may still fit in the log
            // segment sled has already allocated)
            let (new, new_names) = (format!("{tag}b-{run}"), body(&format!("{tag}b-{run}"), 3).1);
            let new_yaml = big_fleet_yaml(&new, 30);
            let new_file = c.write_fleet(&format!("{new}.yaml"), &new_yaml);
            let nf = new_file.display().to_string();
            let filler = match fault {
                DiskFault::Full => Some(mount.fill("filler").expect("filling the tmpfs")),
                DiskFault::ReadOnly => None,
            };
            if fault == DiskFault::ReadOnly {
                // A mounted file system cannot be remounted read-only while the controller holds its database
                // open for writing (EBUSY): the read-only case is a controller (re)started on a data dir that
                // came up read-only (after a reboot, or ext4's errors=remount-ro). It must refuse to start
                // with a clear error, and start once the data dir is writable again.
                c.stop_controller().await;
                mount.remount(true).expect("remount ro");
                match c.start_controller().await {
                    Ok(()) => {
                        problems.push("the controller started on a read-only data dir".into())
                    }
                    Err(_) => {
                        // the whole log: its tail is a backtrace
                        let e = std::fs::read_to_string(&c.controller_log).unwrap_or_default();
                        let e = e
                            .lines()
                            .rev()
                            .find(|l| l.to_ascii_lowercase().contains("error:"))
                            .unwrap_or_default()
                            .to_string();
                        eprintln!(
                            "run {run}: {tag}: the controller refused to start: {}",
                            e.lines()
                                .rev()
                                .find(|l| l.contains(os_error))
                                .unwrap_or(e.as_str())
                        );
                        if !e.contains(os_error) {
                            problems.push(format!(
                                "the controller's start error does not say {os_error}: {e}"
                            ));
                        }
                    }
                }
            } else {
                // a write fails with a clear error
                let (code, out, err) = c.pxctl(&["submit", &nf, "-y", "--no-wait"]).await;
                eprintln!(
                    "run {run}: {tag}: pxctl submit exited {code}: {}",
                    err.trim()
                );
                if code == 0 {
                    problems.push(format!(
                        "submit succeeded on a {tag} data dir: {}",
                        out.lines().next().unwrap_or("")
                    ));
                } else if !err.contains(os_error) || !err.contains("data dir") {
                    problems.push(format!(
                    "submit's error does not say the data dir cannot be written ({os_error}): {}",
                    err.trim()
                ));
                }
                // reads keep working
                let of = old_file.display().to_string();
                for argv in [
                    vec!["get", "containers", "--fleet", old.as_str()],
                    vec!["get", "nodes"],
                    vec!["plan", of.as_str(), "--detailed-exitcode"],
                    vec!["output", "--fleet", old.as_str()],
                ] {
                    let (code, _, err) = c.pxctl(&argv).await;
                    if code != 0 {
                        problems.push(format!(
                            "pxctl {} exited {code} during the fault: {}",
                            argv.join(" "),
                            err.trim()
                        ));
                    }
                }
                // nothing half-written: no revision of the refused fleet
                let revs = revisions(&c, &new).await;
                if revs != 0 {
                    problems.push(format!("{revs} revision(s) stored for the refused submit"));
                }
            }
            // space comes back
            match fault {
                DiskFault::Full => {
                    std::fs::remove_file(filler.expect("filler")).expect("removing the filler")
                }
                DiskFault::ReadOnly => {
                    mount.remount(false).expect("remount rw");
                    c.start_controller()
                        .await
                        .expect("the controller starts on a writable data dir");
                    c.wait_nodes_ready(Duration::from_secs(90))
                        .await
                        .expect("the agents reconnect");
                }
            }
            // the same fleet, with a description PVE accepts (at most 8 KiB)
            let new_file =
                c.write_fleet(&format!("{new}.yaml"), &fleet_yaml(&new, &body(&new, 3).0));
            let t0 = Instant::now();
            let (mut code, _, mut err) = c.pxctl(&["submit", &nf, "-y", "--no-wait"]).await;
            let mut restarted = false;
            if code != 0 {
                eprintln!(
                    "run {run}: {tag}: submit after recovery failed ({}); restarting the controller",
                    err.trim()
                );
                c.stop_controller().await;
                c.start_controller().await.expect("controller restarts");
                c.wait_nodes_ready(Duration::from_secs(90))
                    .await
                    .expect("the agents reconnect");
                restarted = true;
                (code, _, err) = c.pxctl(&["submit", &nf, "-y", "--no-wait"]).await;
            }
            if code != 0 {
                problems.push(format!(
                    "submit after the space came back: exit {code}: {}",
                    err.trim()
                ));
            }
            eprintln!(
                "run {run}: {tag}: writes work again {}",
                match (fault, restarted) {
                    (DiskFault::ReadOnly, _) => "(the controller started on the writable data dir)",
                    (_, true) => "after one restart of the controller",
                    (_, false) => "without a restart",
                }
            );
            let secs = wait_converged(&c, &new, &new_names, CONVERGE)
                .await
                .map(|_| t0.elapsed().as_secs_f64());
            let mut r = check(&c, &new, Some(&new_file), &new_names, secs).await;
            let r_old = check(&c, &old, Some(&old_file), &old_names, Ok(0.0)).await;
            if !r_old.converged {
                problems.push(format!("the fleet from before the fault: {}", r_old.detail));
            }
            // a full disk: sled cannot continue its log after a failed write, so the controller refuses
            // writes until restarted (store/status.rs); what was stored before must survive that restart
            if fault == DiskFault::Full && !restarted {
                problems.push(
                    "writes were accepted again without a restart after a failed write (sled drops them at the next start)".into(),
                );
            }
            if !problems.is_empty() {
                r.converged = false;
                for p in &problems {
                    r.detail.push_str(&format!("  {p}\n"));
                }
                eprintln!("fault suite: {new}: NOT converged:\n{}", r.detail);
            }
            clean(&c, &new, &mut r).await;
            clean(&c, &old, &mut r).await;
            match fault {
                DiskFault::Full => full.runs.push(r),
                DiskFault::ReadOnly => ro.runs.push(r),
            }
        }
    }
    eprintln!("{}\n{}", full.line(), ro.line());
    c.stop_controller().await;
    mount.unmount().expect("unmount");
    full.finish();
    ro.finish();
}
