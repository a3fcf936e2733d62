//! The harness end to end, small: 3 simulated nodes, 6 containers, tiny latencies, no idle period. Needs the
//! workspace's `pxcontroller` binary (`cargo build -p pxfleet-controller`, or `cargo build --bins`).

use std::path::PathBuf;
use std::time::Duration;

use pxfleet_bench::sim::LatencyModel;
use pxfleet_bench::{BenchOptions, Report};

fn pxcontroller() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target"));
    let target = if target.is_absolute() {
        target
    } else {
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../..")
            .join(target)
    };
    let p = target.join("debug").join("pxcontroller");
    assert!(
        p.is_file(),
        "{} not found: run `cargo build -p pxfleet-controller` first",
        p.display()
    );
    p
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn six_containers_on_three_nodes_converge_with_sane_figures() {
    let mut opts = BenchOptions::new(3, 6, pxcontroller());
    opts.latency = LatencyModel {
        create: Duration::from_millis(20),
        start: Duration::from_millis(10),
        destroy: Duration::from_millis(10),
    };
    opts.idle = Duration::ZERO;
    opts.poll = Duration::from_millis(50);
    opts.stall = Duration::from_secs(60);
    let r: Report = pxfleet_bench::run(&opts, |l| eprintln!("bench: {l}"))
        .await
        .unwrap_or_else(|e| panic!("the benchmark failed: {e}"));
    eprint!("{}", pxfleet_bench::render(&r));

    // 6 creates (each creates and starts) plus one seed per node that got containers
    let creates = 6;
    assert!(r.operations >= creates, "{r:?}");
    assert_eq!(r.operations_failed, 0, "{r:?}");
    assert_eq!(
        r.dispatch.dispatched, r.operations,
        "every operation was dispatched: {r:?}"
    );
    assert!(r.dispatch.peak_1s >= 1 && r.dispatch.peak_1s <= r.dispatch.dispatched);
    assert_eq!(r.op_latency.count, r.operations);
    assert!(
        r.op_latency.p50_ms <= r.op_latency.p99_ms && r.op_latency.p99_ms <= r.op_latency.max_ms
    );
    // waiting behind the node's own work is part of the raw latency, never of the delay beyond an ideal node
    assert_eq!(r.op_delay_beyond_ideal.count, r.operations);
    assert!(
        r.op_delay_beyond_ideal.max_ms <= r.op_latency.max_ms,
        "{r:?}"
    );
    assert!(r.dispatch.since_submit_secs > 0.0 && r.dispatch.per_sec_since_submit > 0.0);
    // spread over 3 nodes, 2 each at parallelism 4: one round of create + start
    assert_eq!(r.critical_path_secs, 0.03, "{r:?}");
    // nothing converges faster than the latency model allows
    assert!(r.converged_secs >= r.critical_path_secs, "{r:?}");
    assert!(r.overhead_ratio >= 1.0, "{r:?}");
    assert!(r.all_running_secs > 0.0 && r.submit_secs > 0.0);
    assert!(r.controller_peak_rss_mib > 1.0, "{r:?}");
    assert!(r.controller_cpu_total_secs > 0.0, "{r:?}");
    assert!(r.controller_cpu_submit_secs <= r.controller_cpu_total_secs);
    assert_eq!(r.idle_cpu_percent, 0.0);

    let json = serde_json::to_value(&r).unwrap();
    for key in [
        "converged_secs",
        "dispatch",
        "op_latency",
        "overhead_ratio",
        "controller_peak_rss_mib",
        "idle_cpu_percent",
    ] {
        assert!(json.get(key).is_some(), "--json lacks {key}: {json}");
    }
}
