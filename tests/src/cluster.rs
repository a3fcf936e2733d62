//! A loopback cluster ([`Cluster`]): its options, starting it (controller on a free port, then the nodes),
//! the controller's lifecycle (start, stop, kill, data on a tmpfs), and dropping it (only our own children).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use pxfleet_tls::{Bundle, BundlePaths};
use tokio::process::Child;

use crate::binaries::Binaries;
use crate::diskfault;
use crate::error::{io, HarnessError, Result};
use crate::process::{run_command, spawn_logged, tail, terminate};

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

/// How [`Cluster::add_node_with`] sets up a node.
#[derive(Debug, Clone, Default)]
pub struct NodeSetup {
    /// The PVE cluster it is in (its own cluster directory); `None`: the shared one, cluster `pvesim`.
    pub cluster: Option<String>,
    /// TOML put before the harness's own lines in the node's pvesim overrides (`[[storage]]` entries...).
    pub overrides: String,
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
    pub(crate) agent: Option<Child>,
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
    pub(crate) controller: Option<Child>,
    pub(crate) admin: Bundle,
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
        let child = spawn_logged(
            &self.bins.pxcontroller,
            &[
                "run".into(),
                "--config".into(),
                self.controller_config.display().to_string(),
            ],
            &self.controller_log,
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

    /// The PID of the controller process this cluster started, while it runs.
    pub fn controller_pid(&self) -> Option<u32> {
        self.controller.as_ref().and_then(|c| c.id())
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

    pub fn node(&self, name: &str) -> &SimNode {
        self.nodes
            .iter()
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
