//! Workspace-level integration harness: a real `pxcontroller` process and one real `pxagent` process per
//! simulated PVE node (`pvesim`), on 127.0.0.1 with real mutual TLS, each cluster in its own temporary
//! directory with its own ports. Scenarios in `tests/tests/*.rs` drive it through `pxctl` (as a user would)
//! and through the FleetService gRPC API (for precise assertions and for the security checks).
//!
//! The binaries are the workspace's own: `target/debug/{pxcontroller,pxagent,pxctl,pvesim}` (or under
//! `$CARGO_TARGET_DIR`). [`Binaries::locate`] builds them first, once per test process (`cargo build --workspace
//! --bins`, a no-op when they are current), so a test never runs an old binary. Dropping a [`Cluster`] kills the
//! processes it started, and only those.
// The test harness starts the real binaries and the tools around them: spawning is its job.
#![allow(clippy::disallowed_methods)]

use std::collections::BTreeMap;
use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use pxfleet_proto::v1 as pb;
use pxfleet_proto::v1::fleet_service_client::FleetServiceClient;
use pxfleet_tls::{Bundle, BundlePaths, Ca, Identity, Role};
use tokio::process::{Child, Command};
use tonic::transport::Channel;

pub use pxfleet_proto::v1;

pub mod api;
pub mod day2;
pub mod dev;
pub mod diskfault;
pub mod e2e;
pub mod faults;
pub mod netcut;

/// How long a one-shot command (init, join, pxctl) may take before the harness gives up.
pub const COMMAND_TIMEOUT: Duration = Duration::from_secs(120);

/// Why the harness could not set up or drive a cluster. Each variant names the path, node or argv.
#[derive(Debug, thiserror::Error)]
pub enum HarnessError {
    #[error("{path} not found: run `cargo build --bins` first (the integration tests start the real binaries)")]
    MissingBinary { path: PathBuf },
    #[error("building the binaries the tests start: {0}")]
    Build(String),
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("`{argv}` failed ({status}):\nstdout: {stdout}\nstderr: {stderr}")]
    Command {
        argv: String,
        status: String,
        stdout: String,
        stderr: String,
    },
    #[error("`{argv}` did not finish within {secs} s")]
    Timeout { argv: String, secs: u64 },
    #[error("TLS: {0}")]
    Tls(#[from] pxfleet_tls::TlsError),
    #[error("gRPC {call}: {status}")]
    Grpc {
        call: &'static str,
        status: tonic::Status,
    },
    #[error("{what}: {message}")]
    Setup { what: String, message: String },
}

type Result<T, E = HarnessError> = std::result::Result<T, E>;

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> HarnessError + '_ {
    move |source| HarnessError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// The workspace root (the parent of this crate's directory).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ has a parent")
        .to_path_buf()
}

/// The four binaries the harness starts.
#[derive(Debug, Clone)]
pub struct Binaries {
    pub pxcontroller: PathBuf,
    pub pxagent: PathBuf,
    pub pxctl: PathBuf,
    pub pvesim: PathBuf,
}

impl Binaries {
    /// Builds the binaries (once per process, see [`build_binaries`]), then finds them in
    /// `$CARGO_TARGET_DIR/debug` or `<workspace>/target/debug`.
    pub fn locate() -> Result<Binaries> {
        build_binaries()?;
        let target = std::env::var_os("CARGO_TARGET_DIR")
            .map(PathBuf::from)
            .map(|p| {
                if p.is_absolute() {
                    p
                } else {
                    workspace_root().join(p)
                }
            })
            .unwrap_or_else(|| workspace_root().join("target"));
        let dir = target.join("debug");
        let find = |name: &str| {
            let p = dir.join(name);
            if p.is_file() {
                Ok(p)
            } else {
                Err(HarnessError::MissingBinary { path: p })
            }
        };
        Ok(Binaries {
            pxcontroller: find("pxcontroller")?,
            pxagent: find("pxagent")?,
            pxctl: find("pxctl")?,
            pvesim: find("pvesim")?,
        })
    }
}

/// How long building the binaries may take (from scratch on a slow machine).
const BUILD_TIMEOUT: Duration = Duration::from_secs(40 * 60);

/// Runs `cargo build --workspace --bins --locked` (the dev profile, the command scripts/test uses, so features
/// unify the same way and a built tree is not rebuilt) once per test process; every later call returns the first
/// result. Cargo holds no build lock while `cargo test` runs the tests, so the nested build does not wait on
/// its parent; the timeout bounds it anyway. `PXFLEET_TESTS_NO_BUILD=1` skips it (binaries built elsewhere).
pub fn build_binaries() -> Result<()> {
    static BUILT: std::sync::OnceLock<Result<(), String>> = std::sync::OnceLock::new();
    BUILT
        .get_or_init(|| {
            if std::env::var("PXFLEET_TESTS_NO_BUILD").as_deref() == Ok("1") {
                return Ok(());
            }
            let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
            let args = ["build", "--workspace", "--bins", "--locked", "--quiet"];
            run_blocking(Path::new(&cargo), &args, &workspace_root(), BUILD_TIMEOUT)
        })
        .clone()
        .map_err(HarnessError::Build)
}

/// Runs `program args` in `dir` (argv, no shell) and waits at most `timeout`; the error carries the exit status
/// and the end of stderr (written to a temp file, so a chatty child cannot fill a pipe nobody reads).
fn run_blocking(
    program: &Path,
    args: &[&str],
    dir: &Path,
    timeout: Duration,
) -> Result<(), String> {
    let argv = format!("{} {}", program.display(), args.join(" "));
    let stderr = tempfile::NamedTempFile::new().map_err(|e| format!("{argv}: temp file: {e}"))?;
    let err_file = stderr
        .reopen()
        .map_err(|e| format!("{argv}: temp file: {e}"))?;
    let mut child = std::process::Command::new(program)
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(err_file)
        .spawn()
        .map_err(|e| format!("{argv}: {e}"))?;
    let started = std::time::Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if started.elapsed() > timeout => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "`{argv}` did not finish within {} s\n{}",
                    timeout.as_secs(),
                    tail(stderr.path())
                ));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(100)),
            Err(e) => return Err(format!("{argv}: {e}")),
        }
    };
    if status.success() {
        Ok(())
    } else {
        Err(format!(
            "`{argv}` failed ({status}):\n{}",
            tail(stderr.path())
        ))
    }
}

/// What a cluster looks like. `Default`: 3 nodes, the controller's default heartbeat timeout (30 s), no
/// simulated latency, the dev example's template pre-seeded (a placeholder: pvesim never unpacks it).
#[derive(Debug, Clone)]
pub struct ClusterOptions {
    pub nodes: usize,
    pub heartbeat_timeout_secs: u64,
    /// pvesim `pct create` latency on every node, in ms (to catch an operation in flight).
    pub create_latency_ms: u64,
    /// Template file names placed in every node's `local` template cache.
    pub preseed_templates: Vec<String>,
    /// The agents' `command_timeout_secs` (their default when unset).
    pub command_timeout_secs: Option<u64>,
}

impl Default for ClusterOptions {
    fn default() -> Self {
        ClusterOptions {
            nodes: 3,
            heartbeat_timeout_secs: 30,
            create_latency_ms: 0,
            preseed_templates: pxfleet_controller::dev::DEFAULT_TEMPLATES
                .iter()
                .map(|s| s.to_string())
                .collect(),
            command_timeout_secs: None,
        }
    }
}

/// One simulated PVE node and its agent.
#[derive(Debug)]
pub struct SimNode {
    pub name: String,
    /// pvesim state directory (`PVESIM_STATE`).
    pub sim: PathBuf,
    /// pct, pvesh, pvesm, pveam -> pvesim.
    pub bin: PathBuf,
    /// The agent's config directory (agent.toml, node certificate and key, journal).
    pub agent_dir: PathBuf,
    /// The agent's stdout and stderr.
    pub log: PathBuf,
    agent: Option<Child>,
}

impl SimNode {
    pub fn agent_toml(&self) -> PathBuf {
        self.agent_dir.join("agent.toml")
    }
    /// The node certificate bundle the agent enrolled with.
    pub fn bundle(&self) -> Result<Bundle> {
        Ok(Bundle::read(&BundlePaths {
            ca: self.agent_dir.join("ca.pem"),
            cert: self.agent_dir.join("node.pem"),
            key: self.agent_dir.join("node.key"),
        })?)
    }
    /// The agent's PID while it runs.
    pub fn agent_pid(&self) -> Option<u32> {
        self.agent.as_ref().and_then(|c| c.id())
    }
}

/// A controller, agents and pvesim nodes on loopback. Drop kills the processes it started.
pub struct Cluster {
    pub dir: tempfile::TempDir,
    pub bins: Binaries,
    pub url: String,
    pub listen: SocketAddr,
    /// The controller's data_dir (pki/, db/, admin/).
    pub controller_dir: PathBuf,
    pub controller_config: PathBuf,
    pub controller_log: PathBuf,
    /// pxctl config for the admin certificate.
    pub pxctl_config: PathBuf,
    pub nodes: Vec<SimNode>,
    pub options: ClusterOptions,
    controller: Option<Child>,
    admin: Bundle,
}

/// The simulated nodes' names (as in dev mode: mk33, mk34, ...).
pub fn node_names(n: usize) -> Vec<String> {
    pxfleet_controller::dev::node_names(n)
}

fn free_port() -> Result<u16> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").map_err(io(Path::new("127.0.0.1:0")))?;
    Ok(l.local_addr().map_err(io(Path::new("127.0.0.1:0")))?.port())
}

impl Cluster {
    /// `n` nodes, everything else default.
    pub async fn start(n: usize) -> Result<Cluster> {
        Cluster::start_with(ClusterOptions {
            nodes: n,
            ..ClusterOptions::default()
        })
        .await
    }

    pub async fn start_with(options: ClusterOptions) -> Result<Cluster> {
        let bins = Binaries::locate()?;
        let dir = tempfile::Builder::new()
            .prefix("pxfleet-it-")
            .tempdir()
            .map_err(io(Path::new("temp dir")))?;
        let root = dir.path().to_path_buf();
        let controller_dir = root.join("controller");
        run_command(
            &bins.pxcontroller,
            &[
                "init".into(),
                "--data-dir".into(),
                controller_dir.display().to_string(),
            ],
            &[],
        )
        .await?;
        let admin_paths = BundlePaths::in_dir(&controller_dir.join("admin"), "admin");
        let admin = Bundle::read(&admin_paths)?;
        let mut cluster = Cluster {
            controller_log: root.join("controller.log"),
            controller_config: root.join("controller.toml"),
            pxctl_config: root.join("pxctl.toml"),
            dir,
            bins,
            url: String::new(),
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            controller_dir,
            nodes: Vec::new(),
            options,
            controller: None,
            admin,
        };
        // A free port is picked just before the controller binds it; if another test took it in between, the
        // controller exits with a bind error and the next attempt picks another.
        let mut attempt = 0;
        loop {
            attempt += 1;
            cluster.set_port(free_port()?)?;
            match cluster.start_controller().await {
                Ok(()) => break,
                Err(e) if attempt < 3 && tail(&cluster.controller_log).contains("binding") => {
                    eprintln!("pxfleet harness: controller port taken, retrying: {e}");
                }
                Err(e) => return Err(e),
            }
        }
        for name in node_names(cluster.options.nodes) {
            cluster.add_node(&name).await?;
        }
        cluster.wait_nodes_ready(Duration::from_secs(60)).await?;
        Ok(cluster)
    }

    /// Writes the controller's config and the admin's pxctl config for `port` (before the agents join).
    fn set_port(&mut self, port: u16) -> Result<()> {
        self.listen = SocketAddr::from(([127, 0, 0, 1], port));
        self.url = format!("https://127.0.0.1:{port}");
        let text = format!(
            "data_dir = {:?}\nlisten = \"{}\"\nmetrics_listen = \"127.0.0.1:0\"\n\n[reconciler]\n\
             heartbeat_timeout_secs = {}\ninterval_ms = 200\nbackoff_base_ms = 200\nbackoff_max_ms = 2000\n",
            self.controller_dir.display().to_string(),
            self.listen,
            self.options.heartbeat_timeout_secs,
        );
        std::fs::write(&self.controller_config, text).map_err(io(&self.controller_config))?;
        let admin = BundlePaths::in_dir(&self.controller_dir.join("admin"), "admin");
        let pxctl = format!(
            "controller = \"{}\"\nca = {:?}\ncert = {:?}\nkey = {:?}\n",
            self.url,
            admin.ca.display().to_string(),
            admin.cert.display().to_string(),
            admin.key.display().to_string()
        );
        std::fs::write(&self.pxctl_config, pxctl).map_err(io(&self.pxctl_config))
    }

    /// Starts (or restarts) the controller process on the same port and data directory.
    pub async fn start_controller(&mut self) -> Result<()> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.controller_log)
            .map_err(io(&self.controller_log))?;
        let child = spawn_logged(
            &self.bins.pxcontroller,
            &[
                "run".into(),
                "--config".into(),
                self.controller_config.display().to_string(),
            ],
            log,
        )?;
        self.controller = Some(child);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            if self.api().await.is_ok() {
                return Ok(());
            }
            if let Some(c) = self.controller.as_mut() {
                if let Ok(Some(status)) = c.try_wait() {
                    return Err(HarnessError::Setup {
                        what: "pxcontroller run".into(),
                        message: format!(
                            "exited with {status}; log:\n{}",
                            tail(&self.controller_log)
                        ),
                    });
                }
            }
            if tokio::time::Instant::now() > deadline {
                return Err(HarnessError::Setup {
                    what: "pxcontroller run".into(),
                    message: format!(
                        "not answering on {}; log:\n{}",
                        self.url,
                        tail(&self.controller_log)
                    ),
                });
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Stops the controller: SIGTERM (graceful, the store is flushed), SIGKILL after 10 s.
    pub async fn stop_controller(&mut self) {
        if let Some(mut c) = self.controller.take() {
            terminate(&mut c, Duration::from_secs(10)).await;
        }
    }

    /// Whether the controller process this cluster started is still running.
    pub fn controller_running(&mut self) -> bool {
        self.controller
            .as_mut()
            .is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }

    /// Kills the controller with SIGKILL (a crash).
    pub async fn kill_controller(&mut self) {
        if let Some(mut c) = self.controller.take() {
            let _ = c.kill().await;
        }
    }

    /// Adds a simulated node: pvesim state, a join token, `pxagent join`, then `pxagent run`.
    pub async fn add_node(&mut self, name: &str) -> Result<()> {
        let root = self.dir.path().to_path_buf();
        let base = root.join("nodes").join(name);
        let node = SimNode {
            name: name.to_string(),
            sim: base.join("sim"),
            bin: base.join("bin"),
            agent_dir: base.join("agent"),
            log: root.join(format!("agent-{name}.log")),
            agent: None,
        };
        let overrides = base.join("pvesim.toml");
        std::fs::create_dir_all(&base).map_err(io(&base))?;
        std::fs::write(
            &overrides,
            format!(
                "[latency]\ncreate_ms = {}\n",
                self.options.create_latency_ms
            ),
        )
        .map_err(io(&overrides))?;
        run_command(
            &self.bins.pvesim,
            &[
                "init".into(),
                "--state".into(),
                node.sim.display().to_string(),
                "--node".into(),
                name.into(),
                "--cluster".into(),
                root.join("cluster").display().to_string(),
                "--config".into(),
                overrides.display().to_string(),
                "--bin-dir".into(),
                node.bin.display().to_string(),
            ],
            &[],
        )
        .await?;
        for t in &self.options.preseed_templates {
            let out = pvesim_tool(&node.sim, "pvesm", &["path", &format!("local:vztmpl/{t}")]);
            if out.code != 0 {
                return Err(HarnessError::Setup {
                    what: format!("pvesm path for {t} on {name}"),
                    message: out.stderr,
                });
            }
            let path = PathBuf::from(out.stdout.trim());
            std::fs::write(&path, "placeholder template: pvesim never unpacks it\n")
                .map_err(io(&path))?;
        }
        let token = self.join_token(name, 600).await?;
        self.join(name, &node.agent_dir, &token.token).await?;
        self.nodes.push(node);
        self.configure_agent(name)?;
        self.start_agent(name)?;
        Ok(())
    }

    /// A join token from the controller (admin), limited to `node`, valid `ttl_secs`.
    pub async fn join_token(
        &self,
        node: &str,
        ttl_secs: u32,
    ) -> Result<pb::CreateJoinTokenResponse> {
        let mut api = self.api().await?;
        Ok(api
            .create_join_token(pb::CreateJoinTokenRequest {
                ttl_seconds: ttl_secs,
                node: node.into(),
            })
            .await
            .map_err(|status| HarnessError::Grpc {
                call: "CreateJoinToken",
                status,
            })?
            .into_inner())
    }

    /// `pxagent join` for `node` into `config_dir`, the token passed in the environment.
    pub async fn join(&self, node: &str, config_dir: &Path, token: &str) -> Result<String> {
        std::fs::create_dir_all(config_dir).map_err(io(config_dir))?;
        run_command(
            &self.bins.pxagent,
            &[
                "join".into(),
                "--controller".into(),
                self.url.clone(),
                "--node".into(),
                node.into(),
                "--config-dir".into(),
                config_dir.display().to_string(),
            ],
            &[("PXAGENT_JOIN_TOKEN", token)],
        )
        .await
    }

    /// Points the agent at its pvesim node; fast heartbeats and observations.
    fn configure_agent(&self, name: &str) -> Result<()> {
        let n = self.node(name);
        let path = n.agent_toml();
        let text = std::fs::read_to_string(&path).map_err(io(&path))?;
        let mut doc: toml::Table =
            text.parse()
                .map_err(|e: toml::de::Error| HarnessError::Setup {
                    what: path.display().to_string(),
                    message: e.to_string(),
                })?;
        doc.insert("pve_bin_dir".into(), n.bin.display().to_string().into());
        // pvesim's cluster directory stands for /etc/pve.
        let conf_dir = self.dir.path().join("cluster/nodes").join(name).join("lxc");
        doc.insert(
            "pve_config_dir".into(),
            conf_dir.display().to_string().into(),
        );
        doc.insert("heartbeat_secs".into(), toml::Value::Integer(1));
        doc.insert("observe_secs".into(), toml::Value::Integer(1));
        doc.insert("address_wait_secs".into(), toml::Value::Integer(5));
        if let Some(t) = self.options.command_timeout_secs {
            doc.insert(
                "command_timeout_secs".into(),
                toml::Value::Integer(t as i64),
            );
        }
        let mut env = toml::Table::new();
        env.insert("PVESIM_STATE".into(), n.sim.display().to_string().into());
        doc.insert("env".into(), toml::Value::Table(env));
        let out = toml::to_string_pretty(&doc).map_err(|e| HarnessError::Setup {
            what: path.display().to_string(),
            message: e.to_string(),
        })?;
        std::fs::write(&path, out).map_err(io(&path))
    }

    /// Starts `pxagent run` for `name` (again, after [`Cluster::kill_agent`]).
    pub fn start_agent(&mut self, name: &str) -> Result<()> {
        let bin = self.bins.pxagent.clone();
        let n = self.node_mut(name);
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&n.log)
            .map_err(io(&n.log))?;
        let child = spawn_logged(
            &bin,
            &[
                "run".into(),
                "--config".into(),
                n.agent_toml().display().to_string(),
            ],
            log,
        )?;
        n.agent = Some(child);
        Ok(())
    }

    /// Points the agent of `name` at `controller` (`https://HOST:PORT`, e.g. a [`netcut::Blackhole`] in front
    /// of the controller) and restarts it.
    pub async fn redirect_agent(&mut self, name: &str, controller: &str) -> Result<()> {
        let path = self.node(name).agent_toml();
        let text = std::fs::read_to_string(&path).map_err(io(&path))?;
        let mut doc: toml::Table =
            text.parse()
                .map_err(|e: toml::de::Error| HarnessError::Setup {
                    what: path.display().to_string(),
                    message: e.to_string(),
                })?;
        doc.insert("controller".into(), controller.into());
        let out = toml::to_string_pretty(&doc).map_err(|e| HarnessError::Setup {
            what: path.display().to_string(),
            message: e.to_string(),
        })?;
        std::fs::write(&path, out).map_err(io(&path))?;
        if let Some(mut c) = self.node_mut(name).agent.take() {
            terminate(&mut c, Duration::from_secs(10)).await;
        }
        self.start_agent(name)
    }

    /// Moves the controller's data directory onto a tmpfs of `size_mib` of its own (stop, copy, restart on the
    /// same path): [`diskfault::Mount::fill`] then fills the controller's disk, `remount` makes it read-only.
    /// Needs root. Keep the guard in a variable declared after the cluster (it must unmount first).
    pub async fn controller_data_on_tmpfs(&mut self, size_mib: u64) -> Result<diskfault::Mount> {
        self.stop_controller().await;
        let orig = self.dir.path().join("controller-before-tmpfs");
        std::fs::rename(&self.controller_dir, &orig).map_err(io(&self.controller_dir))?;
        std::fs::create_dir_all(&self.controller_dir).map_err(io(&self.controller_dir))?;
        let mount = diskfault::Mount::tmpfs(&self.controller_dir, size_mib)?;
        diskfault::copy_tree(&orig, &self.controller_dir)?;
        self.start_controller().await?;
        Ok(mount)
    }

    /// SIGKILL to the agent of `name` (the node's containers stay as they are).
    pub async fn kill_agent(&mut self, name: &str) {
        if let Some(mut c) = self.node_mut(name).agent.take() {
            let _ = c.kill().await;
        }
    }

    pub fn node(&self, name: &str) -> &SimNode {
        self.nodes
            .iter()
            .find(|n| n.name == name)
            .unwrap_or_else(|| panic!("no node {name} in this cluster"))
    }

    fn node_mut(&mut self, name: &str) -> &mut SimNode {
        self.nodes
            .iter_mut()
            .find(|n| n.name == name)
            .unwrap_or_else(|| panic!("no node {name} in this cluster"))
    }

    /// The admin credentials `pxcontroller init` made.
    pub fn admin(&self) -> &Bundle {
        &self.admin
    }

    /// Replaces the admin credentials the harness uses (after a CA rotation, the admin holds new ones).
    pub fn set_admin(&mut self, admin: Bundle) {
        self.admin = admin;
    }

    /// A FleetService client with the admin certificate.
    pub async fn api(&self) -> Result<FleetServiceClient<Channel>> {
        self.api_as(&self.admin).await
    }

    /// A FleetService client presenting `bundle`.
    pub async fn api_as(&self, bundle: &Bundle) -> Result<FleetServiceClient<Channel>> {
        let tls = pxfleet_tls::client_config(bundle)?;
        let channel = pxfleet_tls::connect(&self.url, tls).await?;
        Ok(FleetServiceClient::new(channel))
    }

    /// A user certificate signed by this cluster's CA (as `pxctl`'s admin would issue one).
    pub fn issue_user(&self, name: &str, role: Role) -> Result<Bundle> {
        let pki = self.controller_dir.join("pki");
        let read = |p: PathBuf| std::fs::read_to_string(&p).map_err(io(&p));
        let ca_pem = read(pki.join("ca.pem"))?;
        let ca = Ca::from_pem(&ca_pem, &read(pki.join("ca.key"))?)?;
        let id = Identity::user(name, role, &[])?;
        let creds = ca.issue_client(&id, pxfleet_tls::DEFAULT_CLIENT_VALIDITY)?;
        Ok(creds.into_bundle(ca.cert_pem()))
    }

    /// Writes `yaml` into the cluster's directory as `name` and returns its path.
    pub fn write_fleet(&self, name: &str, yaml: &str) -> PathBuf {
        let path = self.dir.path().join(name);
        std::fs::write(&path, yaml).unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
        path
    }

    /// Submit through the API as admin; diagnostics (validation errors) come back in the response.
    pub async fn submit(&self, yaml: &str) -> Result<pb::SubmitResponse> {
        let mut api = self.api().await?;
        Ok(api
            .submit(pb::SubmitRequest {
                file_name: "fleet.yaml".into(),
                source: yaml.into(),
                ..Default::default()
            })
            .await
            .map_err(|status| HarnessError::Grpc {
                call: "Submit",
                status,
            })?
            .into_inner())
    }

    /// Plan through the API as admin.
    pub async fn plan(&self, yaml: &str) -> Result<pb::PlanResponse> {
        let mut api = self.api().await?;
        Ok(api
            .plan(pb::PlanRequest {
                file_name: "fleet.yaml".into(),
                source: yaml.into(),
                ..Default::default()
            })
            .await
            .map_err(|status| HarnessError::Grpc {
                call: "Plan",
                status,
            })?
            .into_inner())
    }

    /// Every container of `fleet`, as the controller reports it.
    pub async fn containers(&self, fleet: &str) -> Result<Vec<pb::ContainerInfo>> {
        api::containers(self.api().await?, fleet).await
    }

    pub async fn nodes_info(&self) -> Result<Vec<pb::NodeInfo>> {
        api::nodes(self.api().await?).await
    }

    pub async fn operations(&self, fleet: &str) -> Result<Vec<pb::OperationInfo>> {
        api::operations(self.api().await?, fleet).await
    }

    /// Waits until every node of the cluster is `ready`.
    pub async fn wait_nodes_ready(&self, timeout: Duration) -> Result<()> {
        let names: Vec<String> = self.nodes.iter().map(|n| n.name.clone()).collect();
        let logs = || {
            self.nodes
                .iter()
                .map(|n| format!("--- {}:\n{}", n.name, tail(&n.log)))
                .collect::<Vec<_>>()
                .join("\n")
        };
        api::wait_nodes_ready(&names, timeout, || self.api(), logs).await
    }

    /// Waits until the fleet has exactly `names` and each is running with a node, a vm_id and an address,
    /// and does not differ from what was submitted (not drifted).
    pub async fn wait_running(
        &self,
        fleet: &str,
        names: &[&str],
        timeout: Duration,
    ) -> Vec<pb::ContainerInfo> {
        let up = |c: &pb::ContainerInfo| api::is_up(c) && !c.drifted;
        api::wait_running(fleet, names, timeout, up, || self.api()).await
    }

    /// `pxctl ARGS` with this cluster's admin config; returns (exit code, stdout, stderr).
    pub async fn pxctl(&self, args: &[&str]) -> (i32, String, String) {
        let mut cmd = Command::new(&self.bins.pxctl);
        cmd.args(args)
            .env("PXCTL_CONFIG", &self.pxctl_config)
            .env("NO_COLOR", "1")
            .current_dir(workspace_root())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let out = tokio::time::timeout(COMMAND_TIMEOUT, cmd.output())
            .await
            .unwrap_or_else(|_| panic!("pxctl {args:?} did not finish within {COMMAND_TIMEOUT:?}"))
            .unwrap_or_else(|e| panic!("starting pxctl {args:?}: {e}"));
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    /// `pxctl ARGS -o json`, which must succeed; the parsed output.
    pub async fn pxctl_json(&self, args: &[&str]) -> serde_json::Value {
        let mut all: Vec<&str> = args.to_vec();
        all.extend(["-o", "json"]);
        let (code, out, err) = self.pxctl(&all).await;
        assert_eq!(
            code, 0,
            "pxctl {all:?} exited {code}\nstdout: {out}\nstderr: {err}"
        );
        serde_json::from_str(&out)
            .unwrap_or_else(|e| panic!("pxctl {all:?}: not JSON ({e}): {out}"))
    }

    /// Runs a pvesim tool (`pct`, `pvesh`, `pvesm`, `pveam`) against `node`'s state, in this process.
    pub fn pve(&self, node: &str, tool: &str, args: &[&str]) -> pxfleet_pvesim::Outcome {
        pvesim_tool(&self.node(node).sim, tool, args)
    }

    /// vm_ids of every container on `node` (managed or not), from `pct list`.
    pub fn vmids_on(&self, node: &str) -> Vec<u32> {
        let out = self.pve(node, "pct", &["list"]);
        assert_eq!(out.code, 0, "pct list on {node}: {}", out.stderr);
        out.stdout
            .lines()
            .skip(1)
            .filter_map(|l| l.split_whitespace().next()?.parse().ok())
            .collect()
    }

    /// The last lines of every log, for assertion messages.
    pub fn logs(&self) -> String {
        let mut s = format!("--- controller:\n{}\n", tail(&self.controller_log));
        for n in &self.nodes {
            s.push_str(&format!("--- agent {}:\n{}\n", n.name, tail(&n.log)));
        }
        s
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        // Only our own children, by handle (kill_on_drop is the backstop).
        for n in &mut self.nodes {
            if let Some(c) = n.agent.as_mut() {
                let _ = c.start_kill();
            }
        }
        if let Some(c) = self.controller.as_mut() {
            let _ = c.start_kill();
        }
        if std::env::var_os("PXFLEET_KEEP").is_some() {
            let path =
                std::mem::replace(&mut self.dir, tempfile::tempdir().expect("a temp dir")).keep();
            eprintln!("pxfleet harness: kept {}", path.display());
        }
    }
}

/// One line per container, for wait messages.
pub fn describe(cs: &[pb::ContainerInfo]) -> String {
    cs.iter()
        .map(|c| {
            format!(
                "{} state={:?} node={} vm_id={} addrs={:?} drifted={} err={}",
                c.name,
                pb::ContainerState::try_from(c.state).unwrap_or_default(),
                c.node,
                c.vm_id,
                c.addresses,
                c.drifted,
                c.last_error
            )
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// Polls `check` every 200 ms until it returns `Ok`, panicking after `timeout` with `what` and the last
/// `Err` (a description of what was seen instead).
pub async fn wait_until<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = std::result::Result<T, String>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        match check().await {
            Ok(v) => return v,
            Err(last) => {
                if tokio::time::Instant::now() >= deadline {
                    panic!("timed out after {timeout:?} waiting for {what}; last seen: {last}");
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn pvesim_tool(state: &Path, tool: &str, args: &[&str]) -> pxfleet_pvesim::Outcome {
    let env: BTreeMap<String, String> =
        [("PVESIM_STATE".to_string(), state.display().to_string())].into();
    let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    pxfleet_pvesim::run(tool, &args, &env)
}

/// The last 40 lines of a log file.
pub fn tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(40)..].join("\n")
}

fn spawn_logged(program: &Path, args: &[String], log: std::fs::File) -> Result<Child> {
    let log2 = log.try_clone().map_err(io(program))?;
    let mut cmd = Command::new(program);
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(log2)
        .kill_on_drop(true);
    if std::env::var_os("PXFLEET_LOG").is_none() {
        cmd.env("PXFLEET_LOG", "info");
    }
    // plain text logs: the fault suite parses them (tracing's fmt layer honours NO_COLOR)
    cmd.env("NO_COLOR", "1");
    cmd.spawn().map_err(io(program))
}

/// Runs a one-shot command from an argv (no shell) with [`COMMAND_TIMEOUT`]; stdout on success.
pub async fn run_command(program: &Path, args: &[String], env: &[(&str, &str)]) -> Result<String> {
    let argv = format!("{} {}", program.display(), args.join(" "));
    let mut cmd = Command::new(program);
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = tokio::time::timeout(COMMAND_TIMEOUT, cmd.output())
        .await
        .map_err(|_| HarnessError::Timeout {
            argv: argv.clone(),
            secs: COMMAND_TIMEOUT.as_secs(),
        })?
        .map_err(io(program))?;
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    if !out.status.success() {
        return Err(HarnessError::Command {
            argv,
            status: out.status.to_string(),
            stdout,
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        });
    }
    Ok(stdout)
}

/// SIGTERM, then SIGKILL if the child has not exited within `grace`.
pub async fn terminate(child: &mut Child, grace: Duration) {
    if let Some(pid) = child.id() {
        signal(pid, libc::SIGTERM);
        if tokio::time::timeout(grace, child.wait()).await.is_ok() {
            return;
        }
    }
    let _ = child.kill().await;
}

/// Sends `sig` to a process this harness started.
#[allow(unsafe_code)]
pub fn signal(pid: u32, sig: i32) {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return;
    };
    // SAFETY: kill(2) has no memory-safety preconditions; `pid` is one of our own children.
    unsafe {
        libc::kill(pid, sig);
    }
}

impl Cluster {
    /// pvesim's runtime record of `vmid` on `node` (`running`, `started`, `pid`), or None if it has none.
    pub fn runtime(&self, node: &str, vmid: u32) -> Option<serde_json::Value> {
        let path = self
            .node(node)
            .sim
            .join("runtime")
            .join(format!("{vmid}.json"));
        let text = std::fs::read_to_string(path).ok()?;
        serde_json::from_str(&text).ok()
    }

    /// `pct config VMID` on `node` as key -> value.
    pub fn pct_config(&self, node: &str, vmid: u32) -> BTreeMap<String, String> {
        let out = self.pve(node, "pct", &["config", &vmid.to_string()]);
        assert_eq!(out.code, 0, "pct config {vmid} on {node}: {}", out.stderr);
        out.stdout
            .lines()
            .filter_map(|l| l.split_once(": "))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }
}

/// An SSH key for test fleets (the public half of nothing in particular).
pub const TEST_SSH_KEY: &str =
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAII/tPVpCESUKZXQ0ZlJvcxfIUAgEGPXvlUgtWiKvukcx ci@example";

/// A fleet file for the scenarios: fleet `name`, templates `deb13` and `ubu24` (pvesim's offline appliance
/// index), DHCP on vmbr0, storage local-lvm; `containers` is the YAML body under `containers:` (indented 2).
pub fn fleet_yaml(name: &str, containers: &str) -> String {
    format!(
        "fleet: {name}\n\
         defaults:\n  \
           template: deb13\n  \
           datastore_id: local-lvm\n  \
           bridge: vmbr0\n  \
           ip_address: dhcp\n  \
           ssh_public_keys: [\"{TEST_SSH_KEY}\"]\n\
         templates:\n  \
           deb13: {{pveam: debian-13-standard_13.6-1_amd64.tar.zst}}\n  \
           ubu24: {{pveam: ubuntu-24.04-standard_24.04-2_amd64.tar.zst}}\n\
         containers:\n{containers}"
    )
}
