//! `pxfleet-bench`: argument parsing, runtime sizing and output only; the benchmark is in the library.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use pxfleet_bench::sim::LatencyModel;
use pxfleet_bench::BenchOptions;

/// Scale benchmark for pxfleet: starts a real pxcontroller and N simulated PVE nodes in this process (each a
/// real agent session over mutual TLS), submits a fleet of C containers and prints the controller's figures:
/// time until all running, dispatches per second, peak RSS, CPU time (also while the agents sit idle),
/// operation latency beyond the simulated PVE time, and the overhead over the latency model's critical path.
///
/// Each simulated node answers `pct create` in --create-ms, `pct start` in --start-ms and `pct destroy` in
/// --destroy-ms, one operation per vm_id at a time. Ctrl-C stops the run and kills the controller it
/// started (by its PID), nothing else. For 1,000 nodes the open-file limit is raised to the hard limit;
/// if that is below ~4,096, raise it first (`ulimit -n 65536`).
#[derive(Parser)]
#[command(name = "pxfleet-bench", version, verbatim_doc_comment)]
struct Cli {
    /// Simulated nodes (agents in this process).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=5000))]
    nodes: u32,
    /// Containers in the submitted fleet.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=99_999))]
    containers: u32,
    /// Simulated `pct create` time, in ms.
    #[arg(long, default_value_t = 2000, value_name = "MS")]
    create_ms: u64,
    /// Simulated `pct start` time, in ms (a create operation runs create then start).
    #[arg(long, default_value_t = 1000, value_name = "MS")]
    start_ms: u64,
    /// Simulated `pct destroy` time, in ms.
    #[arg(long, default_value_t = 1000, value_name = "MS")]
    destroy_ms: u64,
    /// Seconds to measure the controller's CPU with every agent idle (heartbeats only), after convergence.
    #[arg(long, default_value_t = 60, value_name = "SECS")]
    idle_secs: u64,
    /// The pxcontroller binary (default: next to this executable).
    #[arg(long, value_name = "PATH")]
    pxcontroller: Option<PathBuf>,
    /// How often to poll the controller for the containers' states while waiting, in ms.
    #[arg(long, default_value_t = 250, value_name = "MS")]
    poll_ms: u64,
    /// Give up (and report what is stuck) when no container has become running for this long.
    #[arg(long, default_value_t = 120, value_name = "SECS")]
    stall_secs: u64,
    /// Tokio worker threads for the agents (default: one per CPU).
    #[arg(long, value_name = "N")]
    threads: Option<usize>,
    /// Directory for the run's temporary files, created when missing (default: the system temp dir).
    #[arg(long, value_name = "DIR")]
    work_dir: Option<PathBuf>,
    /// Keep the temporary directory (controller data and log, agent journals) and print its path.
    #[arg(long)]
    keep: bool,
    /// Print the figures as one JSON object on stdout (progress still goes to stderr).
    #[arg(long)]
    json: bool,
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("PXFLEET_BENCH_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    let nofile = pxfleet_bench::raise_nofile_limit();
    if let Some(n) = nofile {
        if n < (cli.nodes as u64) * 4 + 256 {
            eprintln!(
                "pxfleet-bench: warning: open-file limit is {n}, low for {} nodes; raise it (ulimit -n 65536)",
                cli.nodes
            );
        }
    }
    let mut opts = BenchOptions::new(
        cli.nodes as usize,
        cli.containers as usize,
        cli.pxcontroller
            .unwrap_or_else(pxfleet_bench::default_pxcontroller),
    );
    opts.latency = LatencyModel {
        create: Duration::from_millis(cli.create_ms),
        start: Duration::from_millis(cli.start_ms),
        destroy: Duration::from_millis(cli.destroy_ms),
    };
    opts.idle = Duration::from_secs(cli.idle_secs);
    opts.poll = Duration::from_millis(cli.poll_ms.max(10));
    opts.stall = Duration::from_secs(cli.stall_secs.max(1));
    opts.work_dir = cli.work_dir;
    opts.keep = cli.keep;
    let mut rt = tokio::runtime::Builder::new_multi_thread();
    rt.enable_all();
    if let Some(n) = cli.threads {
        rt.worker_threads(n.max(1));
    }
    let rt = rt.build().context("starting the tokio runtime")?;
    let report: anyhow::Result<Option<pxfleet_bench::Report>> = rt.block_on(async {
        let mut term =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
                .context("installing the SIGTERM handler")?;
        tokio::select! {
            r = pxfleet_bench::run(&opts, |line| eprintln!("pxfleet-bench: {line}")) => Ok(Some(r?)),
            _ = tokio::signal::ctrl_c() => Ok(None),
            _ = term.recv() => Ok(None),
        }
    });
    // Dropping the runtime ends the agents; the controller child was killed when its handle dropped.
    rt.shutdown_timeout(Duration::from_secs(5));
    let Some(report) = report? else {
        eprintln!("pxfleet-bench: interrupted; the controller it started has been stopped");
        std::process::exit(130);
    };
    if cli.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", pxfleet_bench::render(&report));
    }
    Ok(())
}
