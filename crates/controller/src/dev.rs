//! `pxcontroller dev`: the embedded default, like `nomad agent -dev`. One command starts, on loopback and with
//! real mutual TLS, a controller (in this process), N simulated PVE nodes (`pvesim`, one simulated cluster)
//! and one `pxagent` child process per node; writes `DIR/pxctl.toml`, prints the `export PXCTL_CONFIG=...`
//! line, and runs in the foreground until Ctrl-C (or SIGTERM), when it kills the agents it started (by their
//! PIDs, nothing else) and stops the controller.
//!
//! Offline templates: a pvesim node never unpacks a template (its containers are configuration files), so dev
//! mode pre-seeds each node's `local` template cache with a small placeholder file under every name given with
//! `--template` (default: [`DEFAULT_TEMPLATES`], the file of the template `examples/dev/fleet.yaml` declares).
//! The agent's seed operation finds the file already there and only hashes it (every placeholder has the same
//! content, so the digests the controller compares across nodes agree). Nothing is fetched from the internet;
//! the placeholder is not a root filesystem and is only good for pvesim. Templates declared with `pveam:` come from pvesim's built-in
//! appliance index, also offline.
//!
//! Layout of the data directory (re-used when it already exists, so `dev` can be restarted on the same state):
//!
//! ```text
//! DIR/controller/        the controller's data_dir (pki/, db/, admin/)
//! DIR/controller.seal.key the key sealing root passwords (kept out of the data_dir)
//! DIR/cluster/           pvesim's shared cluster directory (container configs)
//! DIR/nodes/NAME/sim     pvesim node state;  DIR/nodes/NAME/bin  pct, pvesh, pvesm, pveam -> pvesim
//! DIR/nodes/NAME/agent   the agent's agent.toml, node certificate and journal
//! DIR/logs/NAME.log      each agent's output
//! DIR/pxctl.toml         pxctl config for the admin certificate
//! ```

use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use pxfleet_proto::v1 as pb;
use pxfleet_tls::JoinToken;
use tokio::net::TcpListener;
use tokio::process::{Child, Command};

use crate::config::Config;
use crate::pki;
use crate::store::{Store, TokenRecord};

/// Template file names pre-seeded on every simulated node when `--template` is not given: the file of the
/// `template_url` in `examples/dev/fleet.yaml` (a test in tests/ keeps the two in step).
pub const DEFAULT_TEMPLATES: &[&str] = &["ubuntu-25.04-server-cloudimg-amd64-root.tar.xz"];

/// Environment variable naming the pvesim binary (else: next to this executable).
pub const ENV_PVESIM: &str = "PXFLEET_PVESIM";
/// Environment variable naming the pxagent binary (else: next to this executable).
pub const ENV_PXAGENT: &str = "PXFLEET_PXAGENT";

/// What one-shot child commands (`pvesim init`, `pxagent join`, `pvesim pvesm path`) may take.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(60);
/// How long to wait for every node to report ready.
const READY_TIMEOUT: Duration = Duration::from_secs(60);

/// `pxcontroller dev` arguments.
#[derive(Debug, Clone, clap::Args)]
pub struct DevArgs {
    /// Number of simulated nodes (named mk33, mk34, ...: the example fleet pins its containers to mk33).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u16).range(1..=32))]
    pub nodes: u16,
    /// State directory; re-used if it exists (default: a new directory under the system temp dir).
    #[arg(long, value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
    /// The controller's mutual-TLS gRPC address (port 0: any free port; pxctl.toml gets the real one).
    #[arg(long, default_value = "127.0.0.1:7443")]
    pub listen: SocketAddr,
    /// pvesim binary (default: $PXFLEET_PVESIM, else next to pxcontroller).
    #[arg(long, value_name = "PATH")]
    pub pvesim: Option<PathBuf>,
    /// pxagent binary (default: $PXFLEET_PXAGENT, else next to pxcontroller).
    #[arg(long, value_name = "PATH")]
    pub pxagent: Option<PathBuf>,
    /// Template file name to pre-seed (placeholder) on every node; repeatable (default: the example's).
    #[arg(long = "template", value_name = "FILE_NAME")]
    pub templates: Vec<String>,
}

/// Why dev mode could not start or stopped early. Each names the path, node or argv involved.
#[derive(Debug, thiserror::Error)]
pub enum DevError {
    #[error("{what} binary not found at {path}: build it with `cargo build --bins`, or pass --{flag} PATH (or set {env})")]
    MissingBinary {
        what: &'static str,
        flag: &'static str,
        env: &'static str,
        path: PathBuf,
    },
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("binding {addr}: {source} (pass --listen 127.0.0.1:0 for any free port)")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("`{argv}` failed ({status}): {stderr}")]
    Command {
        argv: String,
        status: String,
        stderr: String,
    },
    #[error("`{argv}` did not finish within {secs} s")]
    Timeout { argv: String, secs: u64 },
    #[error("--listen {addr}: dev mode is a loopback-only playground (its agents, pxctl config and server certificate use 127.0.0.1); use 127.0.0.1:PORT")]
    NotLoopback { addr: SocketAddr },
    #[error("template file name `{name}` is not a plain file name")]
    BadTemplate { name: String },
    #[error("{path}: {message}")]
    AgentConfig { path: PathBuf, message: String },
    #[error(transparent)]
    Pki(#[from] pki::PkiError),
    #[error("store: {0}")]
    Store(#[from] crate::store::StoreError),
    #[error("TLS: {0}")]
    Tls(#[from] pxfleet_tls::TlsError),
    #[error("controller: {0}")]
    Server(#[from] crate::server::ServerError),
    #[error("the agent of node {node} exited ({status}); its output is in {log}")]
    AgentExited {
        node: String,
        status: String,
        log: PathBuf,
    },
    #[error("the controller stopped unexpectedly: {message}")]
    ControllerStopped { message: String },
    #[error("nodes not ready within {secs} s: {missing:?} (see the logs in {logs})")]
    NotReady {
        secs: u64,
        missing: Vec<String>,
        logs: PathBuf,
    },
}

/// Resolved options for [`run`].
#[derive(Debug, Clone)]
pub struct DevOptions {
    pub nodes: usize,
    pub data_dir: PathBuf,
    pub listen: SocketAddr,
    pub pvesim: PathBuf,
    pub pxagent: PathBuf,
    pub templates: Vec<String>,
}

impl DevArgs {
    /// Fills in defaults (binaries next to the current executable, a temp data dir) and checks the binaries.
    pub fn resolve(self) -> Result<DevOptions, DevError> {
        if !self.listen.ip().is_loopback() {
            return Err(DevError::NotLoopback { addr: self.listen });
        }
        let pvesim = locate("pvesim", "pvesim", ENV_PVESIM, self.pvesim)?;
        let pxagent = locate("pxagent", "pxagent", ENV_PXAGENT, self.pxagent)?;
        let data_dir = match self.data_dir {
            Some(d) => absolute(&d)?,
            None => std::env::temp_dir().join(format!("pxfleet-dev-{}", std::process::id())),
        };
        let templates = if self.templates.is_empty() {
            DEFAULT_TEMPLATES.iter().map(|s| s.to_string()).collect()
        } else {
            self.templates
        };
        for t in &templates {
            if t.is_empty() || t.contains('/') || t.starts_with('.') {
                return Err(DevError::BadTemplate { name: t.clone() });
            }
        }
        Ok(DevOptions {
            nodes: usize::from(self.nodes),
            data_dir,
            listen: self.listen,
            pvesim,
            pxagent,
            templates,
        })
    }
}

/// The simulated nodes' names: mk33, mk34, ... (the PRD's node is mk33).
pub fn node_names(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("mk{}", 33 + i)).collect()
}

fn locate(
    what: &'static str,
    flag: &'static str,
    env: &'static str,
    given: Option<PathBuf>,
) -> Result<PathBuf, DevError> {
    let path = given
        .or_else(|| std::env::var_os(env).map(PathBuf::from))
        .or_else(|| {
            std::env::current_exe()
                .ok()
                .and_then(|exe| exe.parent().map(|d| d.join(what)))
        })
        .unwrap_or_else(|| PathBuf::from(what));
    if path.is_file() {
        absolute(&path)
    } else {
        Err(DevError::MissingBinary {
            what,
            flag,
            env,
            path,
        })
    }
}

fn absolute(p: &Path) -> Result<PathBuf, DevError> {
    std::path::absolute(p).map_err(|source| DevError::Io {
        path: p.to_path_buf(),
        source,
    })
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> DevError + '_ {
    move |source| DevError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Paths of one simulated node.
#[derive(Debug, Clone)]
struct NodeDirs {
    name: String,
    base: PathBuf,
    sim: PathBuf,
    bin: PathBuf,
    agent: PathBuf,
    log: PathBuf,
}

impl NodeDirs {
    fn new(root: &Path, name: &str) -> NodeDirs {
        let base = root.join("nodes").join(name);
        NodeDirs {
            name: name.to_string(),
            sim: base.join("sim"),
            bin: base.join("bin"),
            agent: base.join("agent"),
            log: root.join("logs").join(format!("{name}.log")),
            base,
        }
    }
    fn agent_toml(&self) -> PathBuf {
        self.agent.join("agent.toml")
    }
}

/// A started child: killed by its PID when dev mode stops (`kill_on_drop` as a backstop).
struct Agent {
    node: String,
    log: PathBuf,
    child: Child,
}

/// Runs dev mode until `shutdown` resolves. Prints the export line and a ready line on stdout.
pub async fn run(opts: DevOptions, shutdown: impl Future<Output = ()>) -> Result<(), DevError> {
    // Poll `shutdown` once now so its signal handlers are installed before any child exists: a SIGTERM during
    // start-up must reach this function (which stops the children), not end the process with them orphaned.
    tokio::pin!(shutdown);
    if futures::poll!(&mut shutdown).is_ready() {
        return Ok(());
    }
    let root = &opts.data_dir;
    std::fs::create_dir_all(root.join("logs")).map_err(io(root))?;
    let ctl_dir = root.join("controller");
    let listener = TcpListener::bind(opts.listen)
        .await
        .map_err(|source| DevError::Bind {
            addr: opts.listen,
            source,
        })?;
    let addr = listener.local_addr().map_err(io(root))?;
    let url = format!("https://127.0.0.1:{}", addr.port());
    let metrics_addr: SocketAddr = "127.0.0.1:0".parse().expect("literal address");
    let metrics = TcpListener::bind(metrics_addr)
        .await
        .map_err(|source| DevError::Bind {
            addr: metrics_addr,
            source,
        })?;
    let metrics_port = metrics.local_addr().map_err(io(root))?.port();

    if !ctl_dir.join("pki").join("ca.pem").exists() {
        pki::init(&ctl_dir, &[], &url)?;
        tracing::info!(dir = %ctl_dir.display(), "created the dev CA and admin certificate");
    }
    let pxctl = write_pxctl_config(root, &ctl_dir, &url)?;

    let nodes: Vec<NodeDirs> = node_names(opts.nodes)
        .iter()
        .map(|n| NodeDirs::new(root, n))
        .collect();
    let cluster = root.join("cluster");
    for (i, n) in nodes.iter().enumerate() {
        prepare_node(&opts, &cluster, n, i).await?;
    }

    // Join tokens for nodes not enrolled yet, stored before the controller opens the database.
    let to_join: Vec<&NodeDirs> = nodes.iter().filter(|n| !n.agent_toml().exists()).collect();
    let mut tokens = Vec::new();
    if !to_join.is_empty() {
        let store = Store::open(&ctl_dir.join("db"))?;
        let ca_pem =
            std::fs::read_to_string(ctl_dir.join("pki").join("ca.pem")).map_err(io(&ctl_dir))?;
        let fp = pxfleet_tls::fingerprint_of_pem(&ca_pem)?;
        let now = pxfleet_common::Clock::system().now_ms();
        for n in &to_join {
            let token = JoinToken::generate(&fp)?;
            store.put_token(&TokenRecord {
                id: token.id.clone(),
                hash: token.secret_hash(),
                node: n.name.clone(),
                created_by: "pxcontroller dev".into(),
                created_ms: now,
                expires_ms: now + 600_000,
                used_ms: None,
            })?;
            tokens.push((n.name.clone(), token.reveal()));
        }
        store.flush().await?;
    }

    let config = Config {
        data_dir: ctl_dir.clone(),
        listen: addr,
        metrics_listen: SocketAddr::from(([127, 0, 0, 1], metrics_port)),
        ..Config::default()
    };
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let mut controller = tokio::spawn(crate::server::run(config, listener, metrics, async move {
        let _ = stop_rx.await;
    }));

    let mut agents: Vec<Agent> = Vec::new();
    let started = async {
        for (name, token) in &tokens {
            let n = nodes
                .iter()
                .find(|n| &n.name == name)
                .expect("node of a token");
            join_node(&opts, &url, token, n).await?;
        }
        for n in &nodes {
            patch_agent_config(n, &url, &cluster)?;
            agents.push(spawn_agent(&opts, n)?);
        }
        wait_ready(&ctl_dir, &url, &nodes, root).await
    };
    let mut interrupted = false;
    let outcome = tokio::select! {
        r = started => r,
        r = &mut controller => Err(controller_ended(r)),
        _ = &mut shutdown => {
            interrupted = true;
            Ok(())
        }
    };
    if outcome.is_ok() && !interrupted {
        // Written, not println!: a reader that went away (`pxcontroller dev | head -3`) must not make dev mode
        // panic on a broken pipe.
        use std::io::Write as _;
        let mut out = std::io::stdout().lock();
        let _ = writeln!(
            out,
            "pxfleet dev: controller {url}, nodes {} (metrics http://127.0.0.1:{metrics_port}/metrics)",
            nodes.iter().map(|n| n.name.as_str()).collect::<Vec<_>>().join(", ")
        );
        let _ = writeln!(
            out,
            "pxfleet dev: data in {}, agent logs in {}",
            root.display(),
            root.join("logs").display()
        );
        let _ = writeln!(out, "export PXCTL_CONFIG={}", pxctl.display());
        let _ = writeln!(out, "pxfleet dev: ready; try `pxctl submit examples/dev/fleet.yaml -y` then `pxctl get containers`; Ctrl-C stops");
        let _ = out.flush();
        drop(out);
    }
    let result = match outcome {
        Err(e) => Err(e),
        Ok(()) if interrupted => Ok(()),
        Ok(()) => {
            tokio::select! {
                _ = &mut shutdown => Ok(()),
                r = &mut controller => Err(controller_ended(r)),
                r = watch_agents(&mut agents) => Err(r),
            }
        }
    };
    tracing::info!("stopping the agents and the controller");
    for a in &mut agents {
        if let Some(pid) = a.child.id() {
            tracing::debug!(node = %a.node, pid, "killing agent");
        }
        let _ = a.child.start_kill();
    }
    for a in &mut agents {
        let _ = a.child.wait().await;
    }
    let _ = stop_tx.send(());
    if !controller.is_finished() {
        match tokio::time::timeout(Duration::from_secs(10), &mut controller).await {
            Ok(Ok(Err(e))) if result.is_ok() => return Err(e.into()),
            _ => {}
        }
    }
    result
}

fn controller_ended(
    r: Result<Result<(), crate::server::ServerError>, tokio::task::JoinError>,
) -> DevError {
    match r {
        Ok(Err(e)) => DevError::Server(e),
        Ok(Ok(())) => DevError::ControllerStopped {
            message: "it returned before shutdown was asked for".into(),
        },
        Err(e) => DevError::ControllerStopped {
            message: format!("its task failed: {e}"),
        },
    }
}

/// Resolves when one of the agents exits on its own (dev mode then stops: a half fleet is no dev setup).
async fn watch_agents(agents: &mut [Agent]) -> DevError {
    loop {
        for a in agents.iter_mut() {
            if let Ok(Some(status)) = a.child.try_wait() {
                return DevError::AgentExited {
                    node: a.node.clone(),
                    status: status.to_string(),
                    log: a.log.clone(),
                };
            }
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// `DIR/pxctl.toml`: the admin bundle with absolute paths and the controller's current URL.
fn write_pxctl_config(root: &Path, ctl_dir: &Path, url: &str) -> Result<PathBuf, DevError> {
    let admin = pxfleet_tls::BundlePaths::in_dir(&ctl_dir.join("admin"), "admin");
    let text = format!(
        "# pxctl configuration written by `pxcontroller dev` (admin certificate)\n\
         controller = {:?}\nca = {:?}\ncert = {:?}\nkey = {:?}\n",
        url,
        admin.ca.display().to_string(),
        admin.cert.display().to_string(),
        admin.key.display().to_string(),
    );
    let path = root.join("pxctl.toml");
    pxfleet_tls::write_file(&path, text.as_bytes(), pxfleet_tls::KEY_MODE)?;
    Ok(path)
}

/// The simulated DHCP range of dev node `index` (pvesim's `[dhcp]` overrides): one /16 for the whole dev
/// cluster, like one DHCP server on a shared bridge, 1,020 addresses per node (node 0: 10.99.0.1 to
/// 10.99.3.254, node 1 from 10.99.4.1, ...). pvesim's default range is the same 151 addresses on every node, so
/// dev containers on different nodes got the same address, and a node's 152nd container failed to start.
pub fn dev_dhcp_overrides(index: usize) -> String {
    let third = index * 4;
    format!(
        "[dhcp]\nfirst = \"10.99.{third}.1\"\nlast = \"10.99.{}.254\"\nprefix = 16\n",
        third + 3
    )
}

/// `pvesim init` (first time only) and the placeholder templates.
async fn prepare_node(
    opts: &DevOptions,
    cluster: &Path,
    n: &NodeDirs,
    index: usize,
) -> Result<(), DevError> {
    if !n.sim.join("node.toml").exists() {
        let overrides = n.base.join("pvesim-init.toml");
        std::fs::create_dir_all(&n.base).map_err(io(&n.base))?;
        std::fs::write(&overrides, dev_dhcp_overrides(index)).map_err(io(&overrides))?;
        let argv: Vec<String> = vec![
            "init".into(),
            "--config".into(),
            overrides.display().to_string(),
            "--state".into(),
            n.sim.display().to_string(),
            "--node".into(),
            n.name.clone(),
            "--cluster".into(),
            cluster.display().to_string(),
            "--bin-dir".into(),
            n.bin.display().to_string(),
        ];
        command(&opts.pvesim, &argv, &[]).await?;
    }
    for t in &opts.templates {
        // Ask the node where `local:vztmpl/NAME` lives rather than assuming pvesim's layout.
        let argv = vec!["pvesm".into(), "path".into(), format!("local:vztmpl/{t}")];
        let out = command(&opts.pvesim, &argv, &[("PVESIM_STATE", &n.sim)]).await?;
        let path = PathBuf::from(out.trim());
        if !path.exists() {
            if let Some(dir) = path.parent() {
                std::fs::create_dir_all(dir).map_err(io(dir))?;
            }
            let text = format!(
                "pxfleet dev placeholder for template {t}: pvesim never unpacks templates; not a root filesystem\n"
            );
            std::fs::write(&path, text).map_err(io(&path))?;
        }
    }
    Ok(())
}

async fn join_node(
    opts: &DevOptions,
    url: &str,
    token: &str,
    n: &NodeDirs,
) -> Result<(), DevError> {
    std::fs::create_dir_all(&n.agent).map_err(io(&n.agent))?;
    let argv: Vec<String> = vec![
        "join".into(),
        "--controller".into(),
        url.into(),
        "--node".into(),
        n.name.clone(),
        "--config-dir".into(),
        n.agent.display().to_string(),
    ];
    // The token goes through the environment, never the argv (it would show in `ps`).
    let token_env = std::ffi::OsString::from(token);
    command_env(&opts.pxagent, &argv, &[("PXAGENT_JOIN_TOKEN", &token_env)]).await?;
    Ok(())
}

/// Points the agent at this node's pvesim, its config files in pvesim's cluster directory (what /etc/pve is on
/// a real node: the agent reads them to notice changes and writes `lxc.idmap` and `env` lines into them) and
/// the controller's current URL; short observation interval.
fn patch_agent_config(n: &NodeDirs, url: &str, cluster: &Path) -> Result<(), DevError> {
    let path = n.agent_toml();
    let text = std::fs::read_to_string(&path).map_err(io(&path))?;
    let mut doc: toml::Table =
        text.parse()
            .map_err(|e: toml::de::Error| DevError::AgentConfig {
                path: path.clone(),
                message: e.message().to_string(),
            })?;
    doc.insert("controller".into(), url.into());
    doc.insert("pve_bin_dir".into(), n.bin.display().to_string().into());
    let conf_dir = cluster.join("nodes").join(&n.name).join("lxc");
    doc.insert(
        "pve_config_dir".into(),
        conf_dir.display().to_string().into(),
    );
    doc.insert("observe_secs".into(), toml::Value::Integer(5));
    doc.insert("heartbeat_secs".into(), toml::Value::Integer(2));
    let mut env = toml::Table::new();
    env.insert("PVESIM_STATE".into(), n.sim.display().to_string().into());
    doc.insert("env".into(), toml::Value::Table(env));
    let out = toml::to_string_pretty(&doc).map_err(|e| DevError::AgentConfig {
        path: path.clone(),
        message: e.to_string(),
    })?;
    std::fs::write(&path, out).map_err(io(&path))
}

// dev mode starts long-running pxagent children it supervises
#[allow(clippy::disallowed_methods)]
fn spawn_agent(opts: &DevOptions, n: &NodeDirs) -> Result<Agent, DevError> {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&n.log)
        .map_err(io(&n.log))?;
    let log2 = log.try_clone().map_err(io(&n.log))?;
    let mut cmd = Command::new(&opts.pxagent);
    cmd.arg("run")
        .arg("--config")
        .arg(n.agent_toml())
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(log2)
        .kill_on_drop(true);
    if std::env::var_os("PXFLEET_LOG").is_none() {
        cmd.env("PXFLEET_LOG", "info");
    }
    let child = cmd.spawn().map_err(io(&opts.pxagent))?;
    tracing::info!(node = %n.name, pid = ?child.id(), log = %n.log.display(), "agent started");
    Ok(Agent {
        node: n.name.clone(),
        log: n.log.clone(),
        child,
    })
}

/// Polls GetNodes with the admin certificate until every node is ready.
async fn wait_ready(
    ctl_dir: &Path,
    url: &str,
    nodes: &[NodeDirs],
    root: &Path,
) -> Result<(), DevError> {
    let bundle = pxfleet_tls::Bundle::read(&pxfleet_tls::BundlePaths::in_dir(
        &ctl_dir.join("admin"),
        "admin",
    ))?;
    let tls = pxfleet_tls::client_config(&bundle)?;
    let waited = pxfleet_common::Stopwatch::start();
    let mut missing: Vec<String> = nodes.iter().map(|n| n.name.clone()).collect();
    while waited.elapsed() < READY_TIMEOUT {
        if let Ok(channel) = pxfleet_tls::connect(url, tls.clone()).await {
            let mut client = pb::fleet_service_client::FleetServiceClient::new(channel);
            if let Ok(resp) = client.get_nodes(pb::GetNodesRequest {}).await {
                let ready: Vec<String> = resp
                    .into_inner()
                    .nodes
                    .into_iter()
                    .filter(|n| n.status == pb::NodeStatus::Ready as i32)
                    .map(|n| n.name)
                    .collect();
                missing = nodes
                    .iter()
                    .map(|n| n.name.clone())
                    .filter(|n| !ready.contains(n))
                    .collect();
                if missing.is_empty() {
                    return Ok(());
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    Err(DevError::NotReady {
        secs: READY_TIMEOUT.as_secs(),
        missing,
        logs: root.join("logs"),
    })
}

async fn command(
    program: &Path,
    args: &[String],
    env: &[(&str, &Path)],
) -> Result<String, DevError> {
    let env: Vec<(&str, std::ffi::OsString)> = env
        .iter()
        .map(|(k, v)| (*k, v.as_os_str().to_os_string()))
        .collect();
    let refs: Vec<(&str, &std::ffi::OsString)> = env.iter().map(|(k, v)| (*k, v)).collect();
    command_env(program, args, &refs).await
}

/// Runs a one-shot child from an argv (no shell) with a timeout; stderr is kept for the error.
// dev mode runs the one-shot pvesim/pxagent setup commands of its simulated nodes
#[allow(clippy::disallowed_methods)]
async fn command_env(
    program: &Path,
    args: &[String],
    env: &[(&str, &std::ffi::OsString)],
) -> Result<String, DevError> {
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
    let child = cmd.spawn().map_err(io(program))?;
    let out = match tokio::time::timeout(COMMAND_TIMEOUT, child.wait_with_output()).await {
        Ok(r) => r.map_err(io(program))?,
        Err(_) => {
            return Err(DevError::Timeout {
                argv,
                secs: COMMAND_TIMEOUT.as_secs(),
            })
        }
    };
    if !out.status.success() {
        return Err(DevError::Command {
            argv,
            status: out.status.to_string(),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

#[cfg(test)]
mod tests;
