//! The figures of one run ([`Report`]) and their rendering as aligned text.

use std::path::PathBuf;

use serde::Serialize;

use crate::figures::{DispatchFigures, LatencyFigures};

/// The figures of one run. Times in seconds unless the name says otherwise.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub nodes: usize,
    pub containers: usize,
    pub create_ms: u64,
    pub start_ms: u64,
    pub destroy_ms: u64,
    pub parallelism: usize,
    /// Controller start, N agents connected and `ready`.
    pub setup_secs: f64,
    /// The Submit call itself (planning, scheduling, storing).
    pub submit_secs: f64,
    /// Submit sent -> the client saw every container running with an address (polled).
    pub all_running_secs: f64,
    /// Submit sent -> the last operation finished, from the controller's records.
    pub converged_secs: f64,
    pub dispatch: DispatchFigures,
    /// (finished - dispatched) minus the simulated PVE time, succeeded operations.
    pub op_latency: LatencyFigures,
    /// Finished minus the finish an ideal node would reach (operations in dispatch order on `parallelism`
    /// slots taking exactly their simulated time): the delay added by pxfleet, not by queueing on the node.
    pub op_delay_beyond_ideal: LatencyFigures,
    /// The shortest wall time the latency model allows.
    pub critical_path_secs: f64,
    /// converged_secs / critical_path_secs.
    pub overhead_ratio: f64,
    pub operations: usize,
    pub operations_failed: usize,
    pub controller_peak_rss_mib: f64,
    /// Controller CPU from submit to all running.
    pub controller_cpu_submit_secs: f64,
    /// Controller CPU over its whole life (start, connects, submit, idle).
    pub controller_cpu_total_secs: f64,
    pub idle_secs: f64,
    /// Controller CPU while all agents sat idle, in percent of one core.
    pub idle_cpu_percent: f64,
    /// This process (all agents and simulated nodes) at the end.
    pub bench_peak_rss_mib: f64,
    /// CPU this process (all agents and simulated nodes) used from submit to all running.
    pub bench_cpu_submit_secs: f64,
    /// The kept work directory, if any.
    pub work_dir: Option<PathBuf>,
}

/// The report as aligned text, one figure a line.
pub fn render(r: &Report) -> String {
    let mut s = String::new();
    let mut line = |k: &str, v: String| s.push_str(&format!("{k:<34} {v}\n"));
    line(
        "run",
        format!(
            "{} containers over {} nodes; create {} ms, start {} ms, destroy {} ms; {} ops/node at once",
            r.containers, r.nodes, r.create_ms, r.start_ms, r.destroy_ms, r.parallelism
        ),
    );
    line(
        "setup (controller + nodes ready)",
        format!("{:.2} s", r.setup_secs),
    );
    line("submit call", format!("{:.2} s", r.submit_secs));
    line(
        "all running (client view)",
        format!("{:.2} s", r.all_running_secs),
    );
    line(
        "converged (controller records)",
        format!("{:.2} s", r.converged_secs),
    );
    line(
        "critical path (latency model)",
        format!("{:.2} s", r.critical_path_secs),
    );
    line(
        "overhead (converged / critical)",
        if r.critical_path_secs > 0.0 {
            format!("{:.3}x", r.overhead_ratio)
        } else {
            "n/a (the latency model takes no time)".into()
        },
    );
    line(
        "dispatches",
        format!(
            "{} within {:.2} s of the submit: {:.0}/s; peak {} in one 1 s window; first to last {:.2} s",
            r.dispatch.dispatched,
            r.dispatch.since_submit_secs,
            r.dispatch.per_sec_since_submit,
            r.dispatch.peak_1s,
            r.dispatch.span_secs
        ),
    );
    line(
        "op latency beyond PVE time",
        format!(
            "p50 {} ms, p99 {} ms, max {} ms ({} ops)",
            r.op_latency.p50_ms, r.op_latency.p99_ms, r.op_latency.max_ms, r.op_latency.count
        ),
    );
    line(
        "op delay beyond an ideal node",
        format!(
            "p50 {} ms, p99 {} ms, max {} ms",
            r.op_delay_beyond_ideal.p50_ms,
            r.op_delay_beyond_ideal.p99_ms,
            r.op_delay_beyond_ideal.max_ms
        ),
    );
    line(
        "operations",
        format!("{} ({} failed attempts)", r.operations, r.operations_failed),
    );
    line(
        "controller peak RSS",
        format!("{:.1} MiB", r.controller_peak_rss_mib),
    );
    line(
        "controller CPU",
        format!(
            "{:.2} s during submit->running, {:.2} s total",
            r.controller_cpu_submit_secs, r.controller_cpu_total_secs
        ),
    );
    line(
        "controller CPU, agents idle",
        format!(
            "{:.2} % of one core over {:.0} s",
            r.idle_cpu_percent, r.idle_secs
        ),
    );
    line(
        "bench process (all agents)",
        format!(
            "peak RSS {:.1} MiB, CPU {:.2} s during submit->running",
            r.bench_peak_rss_mib, r.bench_cpu_submit_secs
        ),
    );
    if let Some(d) = &r.work_dir {
        line("work directory (kept)", d.display().to_string());
    }
    s
}
