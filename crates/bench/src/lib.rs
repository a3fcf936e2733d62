//! `pxfleet-bench`: the scale benchmark. It starts a real `pxcontroller` process on loopback, runs N simulated
//! nodes in this process (each a real agent session, [`pxfleet_agent::run_with`], over mutual TLS and the real
//! protocol, against an in-memory node with a PVE-like latency model, [`sim::SimNode`]), submits a fleet of C
//! containers through the FleetService API and measures the controller: time until all containers run,
//! dispatches per second, peak RSS and CPU time (from /proc), CPU while the agents sit idle heartbeating,
//! operation latency beyond the simulated PVE time, and the ratio of the wall time to the critical path the
//! latency model allows.
//!
//! Node certificates are issued directly from the controller's CA files in its data directory (`pki/ca.pem`,
//! `pki/ca.key`), as `pxagent join` would get them from the controller: the controller accepts any node
//! certificate its CA signed that is not revoked, and 1,000 join round trips would only slow the set-up.
//!
//! Operation timings (`dispatched_ms`, `finished_ms`) are not in the FleetService API; they are read from the
//! controller's own store after it has been stopped gracefully at the end of the run.

mod agents;
pub mod controller;
pub mod figures;
pub mod procstat;
mod report;
pub mod sim;
mod waits;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use pxfleet_proto::v1 as pb;
use pxfleet_tls::{Bundle, BundlePaths, Ca};

use crate::controller::Controller;
use crate::figures::OpRecord;
use crate::sim::LatencyModel;

use agents::start_agents;
pub use report::{render, Report};
use waits::{api, is_up, now_ms, stall_summary, wait_nodes_ready};

/// The template every benchmark container uses (pre-seeded on every simulated node).
pub const TEMPLATE_FILE: &str = "debian-13-standard_13.6-1_amd64.tar.zst";
/// The benchmark fleet's name.
pub const FLEET: &str = "bench";
/// Largest gRPC message the benchmark accepts (a 10,000-container GetContainers answer is several MB).
const MAX_MESSAGE: usize = 256 << 20;

/// Why a benchmark run failed. Each variant names the path, call or what was being waited for.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{what}: {message}")]
    Setup { what: String, message: String },
    #[error("TLS: {0}")]
    Tls(#[from] pxfleet_tls::TlsError),
    #[error("gRPC {call}: {status}")]
    Grpc {
        call: &'static str,
        status: tonic::Status,
    },
    #[error("reading the controller's store {path}: {source}")]
    Store {
        path: PathBuf,
        #[source]
        source: pxfleet_controller::store::StoreError,
    },
    #[error("{0}")]
    Proc(#[from] procstat::ProcError),
    #[error("the fleet did not converge: {summary}\ncontroller log ({log}):\n{log_tail}")]
    Stalled {
        summary: String,
        log: PathBuf,
        log_tail: String,
    },
}

/// What to run.
#[derive(Debug, Clone)]
pub struct BenchOptions {
    pub nodes: usize,
    pub containers: usize,
    pub latency: LatencyModel,
    /// How long to measure the controller's CPU while every agent sits idle after convergence.
    pub idle: Duration,
    /// The `pxcontroller` binary.
    pub pxcontroller: PathBuf,
    /// How often the client polls GetContainers while waiting for convergence.
    pub poll: Duration,
    /// Give up when no container has become running for this long.
    pub stall: Duration,
    /// Operations each agent runs at once (the controller's `max_parallel_operations`).
    pub parallelism: usize,
    /// Where the temporary directory goes (default: the system's temp dir).
    pub work_dir: Option<PathBuf>,
    /// Keep the temporary directory (controller data, log, agent journals) and print its path.
    pub keep: bool,
}

impl BenchOptions {
    pub fn new(nodes: usize, containers: usize, pxcontroller: PathBuf) -> Self {
        BenchOptions {
            nodes,
            containers,
            latency: LatencyModel::PVE,
            idle: Duration::from_secs(60),
            pxcontroller,
            poll: Duration::from_millis(250),
            stall: Duration::from_secs(120),
            parallelism: pxfleet_controller::grpc::agent_service::MAX_PARALLEL_OPERATIONS as usize,
            work_dir: None,
            keep: false,
        }
    }
}

/// The fleet file: `containers` containers `c00000`, `c00001`, ... with small defaults.
pub fn fleet_yaml(containers: usize) -> String {
    let mut s = format!(
        "fleet: {FLEET}\ndefaults:\n  template: d13\n  memory: 64\n  disk_size: 1\n\
         templates:\n  d13: {{pveam: {TEMPLATE_FILE}}}\ncontainers:\n"
    );
    for i in 0..containers {
        s.push_str(&format!("  c{i:05}: {{}}\n"));
    }
    s
}

/// Names of the simulated nodes: sim0001, sim0002, ...
pub fn node_names(n: usize) -> Vec<String> {
    (1..=n).map(|i| format!("sim{i:04}")).collect()
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> BenchError + '_ {
    move |source| BenchError::Io {
        path: path.to_path_buf(),
        source,
    }
}

fn grpc(call: &'static str) -> impl FnOnce(tonic::Status) -> BenchError {
    move |status| BenchError::Grpc { call, status }
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

/// Reads the controller's operation records (after it has stopped: sled holds a lock while it runs).
fn read_ops(db: &Path) -> Result<Vec<OpRecord>, BenchError> {
    let store = pxfleet_controller::store::Store::open(db).map_err(|source| BenchError::Store {
        path: db.to_path_buf(),
        source,
    })?;
    let ops = store.ops().map_err(|source| BenchError::Store {
        path: db.to_path_buf(),
        source,
    })?;
    Ok(ops
        .into_iter()
        .map(|o| OpRecord {
            node: o.node,
            kind: o.kind.name().to_string(),
            succeeded: o.state == pxfleet_controller::model::OpState::Succeeded,
            dispatched_ms: o.dispatched_ms.map(|v| v as i64),
            finished_ms: o.finished_ms.map(|v| v as i64),
        })
        .collect())
}

/// Runs the benchmark once. `progress` receives one line per phase (the CLI prints them to stderr).
pub async fn run(opts: &BenchOptions, progress: impl Fn(&str)) -> Result<Report, BenchError> {
    if !opts.pxcontroller.is_file() {
        return Err(BenchError::Setup {
            what: format!("pxcontroller binary {}", opts.pxcontroller.display()),
            message: "not found: build it with `cargo build --release` or pass --pxcontroller PATH"
                .into(),
        });
    }
    let mut builder = tempfile::Builder::new();
    builder.prefix("pxfleet-bench-");
    let tmp = match &opts.work_dir {
        Some(d) => {
            std::fs::create_dir_all(d).map_err(io(d))?;
            builder.tempdir_in(d).map_err(io(d))?
        }
        None => builder
            .tempdir()
            .map_err(io(Path::new("temporary directory")))?,
    };
    let root = tmp.path().to_path_buf();
    let result = run_in(opts, &root, &progress).await;
    let kept = if opts.keep || result.is_err() && std::env::var_os("PXFLEET_BENCH_KEEP").is_some() {
        let p = tmp.keep();
        progress(&format!("kept {}", p.display()));
        Some(p)
    } else {
        None
    };
    result.map(|mut r| {
        r.work_dir = kept;
        r
    })
}

// the bench measures real time
#[allow(clippy::disallowed_methods)]
async fn run_in(
    opts: &BenchOptions,
    root: &Path,
    progress: &impl Fn(&str),
) -> Result<Report, BenchError> {
    let t_setup = Instant::now();
    let data_dir = root.join("controller");
    controller::init(&opts.pxcontroller, &data_dir).await?;
    let pki = data_dir.join("pki");
    let read = |p: PathBuf| std::fs::read_to_string(&p).map_err(io(&p));
    let ca = Ca::from_pem(&read(pki.join("ca.pem"))?, &read(pki.join("ca.key"))?)?;
    // The nodes' certificates, recorded in the store before the controller opens it (it accepts only
    // certificates it issued; enrolling a thousand agents one by one would be part of no measurement).
    let bundles = agents::node_bundles(opts, &ca, &data_dir.join("db"))?;
    let mut ctl = Controller::start(&opts.pxcontroller, root, &data_dir).await?;
    progress(&format!(
        "controller pid {} on {} (log {})",
        ctl.pid(),
        ctl.url,
        ctl.log.display()
    ));
    let admin = Bundle::read(&BundlePaths::in_dir(&data_dir.join("admin"), "admin"))?;
    let template_dir = root.join("templates");
    std::fs::create_dir_all(&template_dir).map_err(io(&template_dir))?;
    let tfile = template_dir.join(TEMPLATE_FILE);
    std::fs::write(
        &tfile,
        "placeholder: the benchmark's nodes never unpack it\n",
    )
    .map_err(io(&tfile))?;

    let agents = start_agents(opts, &ctl.url, bundles, root, &template_dir)?;
    let mut api = api(&ctl.url, &admin).await?;
    let ready_timeout = Duration::from_secs(60) + Duration::from_millis(100) * opts.nodes as u32;
    wait_nodes_ready(&mut api, opts.nodes, ready_timeout, &ctl.log).await?;
    let setup_secs = t_setup.elapsed().as_secs_f64();
    progress(&format!(
        "{} nodes ready after {setup_secs:.1} s",
        opts.nodes
    ));

    let yaml = fleet_yaml(opts.containers);
    progress(&format!("submitting {} containers", opts.containers));
    let cpu0 = procstat::cpu_time(ctl.pid())?;
    let own0 = procstat::cpu_time(std::process::id())?;
    let submit_ms = now_ms();
    let t0 = Instant::now();
    let submit = api.submit(pb::SubmitRequest {
        file_name: "bench.yaml".into(),
        source: yaml,
        // as pxctl submit: the plan was shown before, the answer need not carry it (18 MB at 10,000)
        omit_plan: true,
        ..Default::default()
    });
    // A Submit that does not answer within the stall time is reported like a stalled convergence.
    let resp = match tokio::time::timeout(opts.stall, submit).await {
        Ok(r) => r.map_err(grpc("Submit"))?.into_inner(),
        Err(_) => {
            let mut probe = self::api(&ctl.url, &admin).await?;
            let summary = stall_summary(&mut probe, None, opts.containers).await;
            return Err(BenchError::Stalled {
                summary: format!(
                    "the Submit call did not answer within {} s; {summary}",
                    opts.stall.as_secs()
                ),
                log: ctl.log.clone(),
                log_tail: controller::tail(&ctl.log, 30),
            });
        }
    };
    let submit_secs = t0.elapsed().as_secs_f64();
    if resp.revision == 0 {
        let diags: Vec<String> = resp.diagnostics.iter().map(|d| d.message.clone()).collect();
        return Err(BenchError::Setup {
            what: "Submit".into(),
            message: format!("refused: {}", diags.join("; ")),
        });
    }
    progress(&format!(
        "submitted {} containers in {submit_secs:.2} s; waiting for all running",
        opts.containers
    ));

    // Wait until every container runs; give up when nothing moved for `stall`.
    let mut best = 0usize;
    let mut moved = Instant::now();
    let mut last_print = Instant::now();
    let all_running_secs = loop {
        let cs = api
            .get_containers(pb::GetContainersRequest {
                fleet: FLEET.into(),
                node: String::new(),
            })
            .await
            .map_err(grpc("GetContainers"))?
            .into_inner()
            .containers;
        let up = cs.iter().filter(|c| is_up(c)).count();
        if up == opts.containers && cs.len() == opts.containers {
            break t0.elapsed().as_secs_f64();
        }
        if up > best {
            best = up;
            moved = Instant::now();
        }
        if last_print.elapsed() >= Duration::from_secs(10) {
            progress(&format!(
                "  {up} of {} running after {:.0} s",
                opts.containers,
                t0.elapsed().as_secs_f64()
            ));
            last_print = Instant::now();
        }
        if moved.elapsed() >= opts.stall {
            let summary = stall_summary(&mut api, Some(up), opts.containers).await;
            return Err(BenchError::Stalled {
                summary: format!(
                    "no progress for {} s after {:.0} s; {summary}",
                    opts.stall.as_secs(),
                    t0.elapsed().as_secs_f64()
                ),
                log: ctl.log.clone(),
                log_tail: controller::tail(&ctl.log, 30),
            });
        }
        if let Some(status) = ctl.exited() {
            return Err(BenchError::Setup {
                what: "pxcontroller".into(),
                message: format!(
                    "exited with {status} while converging; log:\n{}",
                    controller::tail(&ctl.log, 30)
                ),
            });
        }
        tokio::time::sleep(opts.poll).await;
    };
    let cpu1 = procstat::cpu_time(ctl.pid())?;
    let own1 = procstat::cpu_time(std::process::id())?;
    progress(&format!(
        "all {} running after {all_running_secs:.2} s; idle for {} s",
        opts.containers,
        opts.idle.as_secs()
    ));

    // Idle: every agent connected, heartbeating, nothing to do.
    let t_idle = Instant::now();
    tokio::time::sleep(opts.idle).await;
    let cpu2 = procstat::cpu_time(ctl.pid())?;
    let idle_secs = t_idle.elapsed().as_secs_f64();
    let peak_rss = procstat::peak_rss_bytes(ctl.pid())?;
    let bench_rss = procstat::peak_rss_bytes(std::process::id())?;

    drop(api);
    // Agents first: the controller's graceful shutdown waits for open agent streams.
    agents.stop().await;
    ctl.stop(Duration::from_secs(30)).await;
    let ops = read_ops(&data_dir.join("db"))?;
    let operations = ops.len();
    let operations_failed = ops
        .iter()
        .filter(|o| !o.succeeded && o.finished_ms.is_some())
        .count();
    let last_finish = ops
        .iter()
        .filter_map(|o| o.finished_ms)
        .max()
        .unwrap_or(submit_ms);
    let converged_secs = (last_finish - submit_ms).max(0) as f64 / 1000.0;
    let critical = figures::critical_path(&ops, &opts.latency, opts.parallelism);
    let critical_path_secs = critical.as_secs_f64();
    Ok(Report {
        nodes: opts.nodes,
        containers: opts.containers,
        create_ms: opts.latency.create.as_millis() as u64,
        start_ms: opts.latency.start.as_millis() as u64,
        destroy_ms: opts.latency.destroy.as_millis() as u64,
        parallelism: opts.parallelism,
        setup_secs,
        submit_secs,
        all_running_secs,
        converged_secs,
        dispatch: figures::dispatch_figures(&ops, submit_ms),
        op_latency: figures::latency_figures(&ops, &opts.latency),
        op_delay_beyond_ideal: figures::queue_adjusted_latency(
            &ops,
            &opts.latency,
            opts.parallelism,
        ),
        critical_path_secs,
        overhead_ratio: if critical_path_secs > 0.0 {
            converged_secs / critical_path_secs
        } else {
            0.0
        },
        operations,
        operations_failed,
        controller_peak_rss_mib: mib(peak_rss),
        controller_cpu_submit_secs: (cpu1 - cpu0).as_secs_f64(),
        controller_cpu_total_secs: cpu2.as_secs_f64(),
        idle_secs,
        idle_cpu_percent: if !opts.idle.is_zero() && idle_secs > 0.0 {
            (cpu2 - cpu1).as_secs_f64() * 100.0 / idle_secs
        } else {
            0.0
        },
        bench_peak_rss_mib: mib(bench_rss),
        bench_cpu_submit_secs: (own1 - own0).as_secs_f64(),
        work_dir: None,
    })
}

/// The `pxcontroller` next to the running executable (target/release/ when the bench is built there).
pub fn default_pxcontroller() -> PathBuf {
    std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(|d| d.join("pxcontroller")))
        .unwrap_or_else(|| PathBuf::from("pxcontroller"))
}

/// Raises this process's open-file limit to its hard limit (1,000 agents need ~1,000 sockets plus their
/// journals' files; the controller, started after, inherits it). Returns the new soft limit.
pub fn raise_nofile_limit() -> Option<u64> {
    use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
    let cur = getrlimit(Resource::Nofile);
    let want = Rlimit {
        current: cur.maximum,
        maximum: cur.maximum,
    };
    setrlimit(Resource::Nofile, want).ok()?;
    getrlimit(Resource::Nofile).current
}
