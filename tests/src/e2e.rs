//! End-to-end harness with real LXC containers (root only): the testbed (scripts/testbed: bridge, dnsmasq,
//! template), a template HTTP server on the bridge address that counts downloads per node, a controller in its
//! own network namespace, and one `pxagent` + `pvesim --backend lxc` node per namespace, so the containers of
//! every node sit on the shared bridge. [`E2e::start`] builds all of it; dropping the [`E2e`] destroys the
//! containers it made, stops the processes it started (by handle) and removes its namespaces, and tears the
//! testbed down when it was the one that set it up (scripts/e2e sets it up once and tears it down in a trap).
//!
//! Gate: the scenarios are `#[ignore]`d (scripts/e2e runs them with `--ignored`); [`require_lxc`] fails one run
//! without root or LXC, naming what is missing.
// test code driving separate processes: real time
#![allow(clippy::disallowed_methods)]

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use pxfleet_proto::v1 as pb;
use pxfleet_proto::v1::fleet_service_client::FleetServiceClient;
use pxfleet_tls::{Bundle, BundlePaths, Role};
use tokio::process::{Child, Command};
use tonic::transport::Channel;

use crate::{api, run_command, tail, wait_until, Binaries, HarnessError};

type Result<T, E = HarnessError> = std::result::Result<T, E>;

/// The controller's port inside its namespace.
pub const CONTROLLER_PORT: u16 = 8443;
/// Network namespace and address of the controller.
pub const CONTROLLER_NS: (&str, &str) = ("pxe-ctl", "10.77.0.60");
/// Network namespace and address from which the second (viewer) pxctl runs.
pub const CLIENT_NS: (&str, &str) = ("pxe-cli", "10.77.0.63");
/// The two nodes: (node name, network namespace, node address on its vmbr0).
pub const NODES: [(&str, &str, &str); 2] = [
    ("pxe1", "pxe-n1", "10.77.0.61"),
    ("pxe2", "pxe-n2", "10.77.0.62"),
];
/// A second `dir` storage on every node (besides `local`), for the datastore scenario.
pub const BULK_STORAGE: &str = "bulk";

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> HarnessError + '_ {
    move |source| HarnessError::Io {
        path: path.to_path_buf(),
        source,
    }
}

fn setup_err(what: impl Into<String>, message: impl Into<String>) -> HarnessError {
    HarnessError::Setup {
        what: what.into(),
        message: message.into(),
    }
}

/// Panics, naming what is missing, unless this runs as root with LXC installed: the e2e scenarios are
/// `#[ignore]`d, so reaching this without them means someone asked for them explicitly (`--ignored`).
pub fn require_lxc() {
    if !unsafe_free_euid_is_root() {
        panic!("the e2e scenarios need root (real LXC containers, network namespaces): run scripts/e2e as root");
    }
    if !Path::new("/usr/bin/lxc-start").exists() {
        panic!(
            "lxc-start is not installed (scripts/testbed/setup installs it; scripts/e2e runs it)"
        );
    }
}

fn unsafe_free_euid_is_root() -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self")
        .map(|m| m.uid() == 0)
        .unwrap_or(false)
}

/// One finished command: exit code (-1 when killed), stdout, stderr.
#[derive(Debug, Clone)]
pub struct Out {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Out {
    pub fn ok(&self) -> bool {
        self.code == 0
    }
}

/// Runs `argv` (no shell) with `env` and a timeout; a timeout is reported as code -1 with a note in stderr.
pub async fn exec(argv: &[&str], env: &[(&str, &str)], timeout: Duration) -> Out {
    let mut cmd = Command::new(argv[0]);
    cmd.args(&argv[1..])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    for (k, v) in env {
        cmd.env(k, v);
    }
    match tokio::time::timeout(timeout, cmd.output()).await {
        Ok(Ok(o)) => Out {
            code: o.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
        },
        Ok(Err(e)) => Out {
            code: -1,
            stdout: String::new(),
            stderr: format!("cannot start {argv:?}: {e}"),
        },
        Err(_) => Out {
            code: -1,
            stdout: String::new(),
            stderr: format!("{argv:?} did not finish within {timeout:?}"),
        },
    }
}

/// Like [`exec`], but a failure is an error naming the argv.
pub async fn exec_ok(argv: &[&str], timeout: Duration) -> Result<String> {
    let o = exec(argv, &[], timeout).await;
    if o.ok() {
        Ok(o.stdout)
    } else {
        Err(HarnessError::Command {
            argv: argv.join(" "),
            status: format!("exit {}", o.code),
            stdout: o.stdout,
            stderr: o.stderr,
        })
    }
}

/// What scripts/testbed/setup reported.
#[derive(Debug, Clone)]
pub struct Testbed {
    pub bridge: String,
    pub gateway: String,
    pub dhcp_first: String,
    pub dhcp_last: String,
    pub template: PathBuf,
    pub sha256: String,
    /// True when this process made the bridge (then it also tears the testbed down).
    pub made_here: bool,
}

impl Testbed {
    /// The template's file name (a PVE vztmpl name).
    pub fn template_name(&self) -> String {
        self.template
            .file_name()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default()
    }

    /// Runs scripts/testbed/setup (idempotent) and parses its KEY=VALUE output.
    pub async fn ensure() -> Result<Testbed> {
        let scripts = crate::workspace_root().join("scripts/testbed");
        let existed = exec(
            &["ip", "link", "show", "pxtbr0"],
            &[],
            Duration::from_secs(10),
        )
        .await
        .ok();
        let setup = scripts.join("setup");
        let out = exec(
            &[setup.to_str().unwrap_or("setup")],
            &[],
            Duration::from_secs(900),
        )
        .await;
        if !out.ok() {
            return Err(HarnessError::Command {
                argv: setup.display().to_string(),
                status: format!("exit {}", out.code),
                stdout: out.stdout,
                stderr: out.stderr,
            });
        }
        let kv: BTreeMap<&str, &str> = out
            .stdout
            .lines()
            .filter_map(|l| l.split_once('='))
            .collect();
        let get = |k: &str| {
            kv.get(k)
                .map(|s| s.to_string())
                .ok_or_else(|| setup_err("scripts/testbed/setup", format!("printed no {k}=")))
        };
        Ok(Testbed {
            bridge: get("BRIDGE")?,
            gateway: get("GATEWAY")?,
            dhcp_first: get("DHCP_FIRST")?,
            dhcp_last: get("DHCP_LAST")?,
            template: PathBuf::from(get("TEMPLATE")?),
            sha256: get("SHA256")?,
            made_here: !existed,
        })
    }

    /// Reserves `ip` for `mac` in the testbed's dnsmasq (`dhcp-hosts`, reread on SIGHUP), as an admin would
    /// for a DHCP container that must keep its address across destroy and create.
    pub fn reserve(&self, mac: &str, ip: &str) -> Result<()> {
        let run = PathBuf::from(
            std::env::var("PXTB_RUN").unwrap_or_else(|_| "/run/pxfleet-testbed".into()),
        );
        let hosts = run.join("dhcp-hosts");
        let mut text = std::fs::read_to_string(&hosts).unwrap_or_default();
        let line = format!("{mac},{ip}");
        if !text.lines().any(|l| l == line) {
            text.push_str(&line);
            text.push('\n');
            std::fs::write(&hosts, text).map_err(io(&hosts))?;
        }
        let pidf = run.join("dnsmasq.pid");
        let pid: u32 = std::fs::read_to_string(&pidf)
            .map_err(io(&pidf))?
            .trim()
            .parse()
            .map_err(|_| setup_err(pidf.display().to_string(), "not a pid"))?;
        let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
        if comm.trim() != "dnsmasq" {
            return Err(setup_err(
                pidf.display().to_string(),
                format!("pid {pid} is not the testbed's dnsmasq"),
            ));
        }
        crate::signal(pid, libc::SIGHUP);
        Ok(())
    }

    /// True when `ip` lies in the dnsmasq range.
    pub fn in_dhcp_range(&self, ip: &str) -> bool {
        let last = |s: &str| s.rsplit('.').next().and_then(|x| x.parse::<u8>().ok());
        let prefix = |s: &str| s.rsplit_once('.').map(|(p, _)| p.to_string());
        match (last(ip), last(&self.dhcp_first), last(&self.dhcp_last)) {
            (Some(x), Some(a), Some(b)) => {
                prefix(ip) == prefix(&self.dhcp_first) && (a..=b).contains(&x)
            }
            _ => false,
        }
    }
}

/// A minimal HTTP/1.1 file server (GET of whole files, one thread per connection) that records every request
/// with the peer's address, so a test can count downloads per node. Files are served under names of the
/// test's choosing (`/NAME` -> path).
pub struct TemplateServer {
    pub base_url: String,
    files: Arc<Mutex<BTreeMap<String, PathBuf>>>,
    log: Arc<Mutex<Vec<(IpAddr, String, u16)>>>,
    addr: SocketAddr,
    stop: Arc<std::sync::atomic::AtomicBool>,
}

impl TemplateServer {
    /// Listens on `addr:0` (the bridge address: reachable from every namespace on the bridge).
    pub fn start(addr: &str) -> Result<TemplateServer> {
        let bind = format!("{addr}:0");
        let listener = TcpListener::bind(&bind).map_err(io(Path::new(&bind)))?;
        let local = listener.local_addr().map_err(io(Path::new(&bind)))?;
        let files: Arc<Mutex<BTreeMap<String, PathBuf>>> = Arc::default();
        let log: Arc<Mutex<Vec<(IpAddr, String, u16)>>> = Arc::default();
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (f2, l2, s2) = (files.clone(), log.clone(), stop.clone());
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                if s2.load(std::sync::atomic::Ordering::SeqCst) {
                    break;
                }
                let Ok(conn) = conn else { continue };
                let (f3, l3) = (f2.clone(), l2.clone());
                std::thread::spawn(move || serve_one(conn, &f3, &l3));
            }
        });
        Ok(TemplateServer {
            base_url: format!("http://{local}"),
            files,
            log,
            addr: local,
            stop,
        })
    }

    /// Serves `path` as `/name`; returns the URL.
    pub fn add(&self, name: &str, path: &Path) -> String {
        self.files
            .lock()
            .expect("files lock")
            .insert(name.to_string(), path.to_path_buf());
        format!("{}/{name}", self.base_url)
    }

    /// How many GETs of `/name` came from `peer` (any status).
    pub fn gets(&self, peer: &str, name: &str) -> usize {
        let path = format!("/{name}");
        self.log
            .lock()
            .expect("log lock")
            .iter()
            .filter(|(ip, p, _)| ip.to_string() == peer && *p == path)
            .count()
    }

    /// Every request so far: (peer, path, status).
    pub fn requests(&self) -> Vec<(IpAddr, String, u16)> {
        self.log.lock().expect("log lock").clone()
    }
}

impl Drop for TemplateServer {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_secs(1));
    }
}

fn serve_one(
    mut conn: TcpStream,
    files: &Mutex<BTreeMap<String, PathBuf>>,
    log: &Mutex<Vec<(IpAddr, String, u16)>>,
) {
    let _ = conn.set_read_timeout(Some(Duration::from_secs(30)));
    let peer = match conn.peer_addr() {
        Ok(p) => p.ip(),
        Err(_) => return,
    };
    let mut reader = BufReader::new(match conn.try_clone() {
        Ok(c) => c,
        Err(_) => return,
    });
    let mut first = String::new();
    if reader.read_line(&mut first).is_err() {
        return;
    }
    loop {
        let mut line = String::new();
        match reader.read_line(&mut line) {
            Ok(0) | Err(_) => break,
            Ok(_) if line == "\r\n" || line == "\n" => break,
            Ok(_) => {}
        }
    }
    let mut parts = first.split_whitespace();
    let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let file = files
        .lock()
        .expect("files lock")
        .get(path.trim_start_matches('/'))
        .cloned();
    let status = match (method, file) {
        ("GET", Some(p)) => match std::fs::File::open(&p) {
            Ok(mut f) => {
                let len = f.metadata().map(|m| m.len()).unwrap_or(0);
                let head = format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\n\
                     Content-Length: {len}\r\nConnection: close\r\n\r\n"
                );
                if conn.write_all(head.as_bytes()).is_ok() {
                    let _ = std::io::copy(&mut f, &mut conn);
                }
                200
            }
            Err(_) => 500,
        },
        _ => 404,
    };
    if status != 200 {
        let _ = conn.write_all(
            format!(
                "HTTP/1.1 {status} Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
            )
            .as_bytes(),
        );
    }
    log.lock()
        .expect("log lock")
        .push((peer, path.to_string(), status));
}

/// What an e2e cluster looks like.
#[derive(Debug, Clone)]
pub struct E2eOptions {
    /// `parallelism` in each agent's config.
    pub parallelism: usize,
}

impl Default for E2eOptions {
    fn default() -> Self {
        E2eOptions { parallelism: 4 }
    }
}

/// One PVE node: a pvesim state with the lxc backend, its namespace, and its agent running in there.
#[derive(Debug)]
pub struct LxcNode {
    pub name: String,
    pub netns: String,
    pub ip: String,
    pub sim: PathBuf,
    pub bin: PathBuf,
    pub agent_dir: PathBuf,
    pub log: PathBuf,
    agent: Option<Child>,
}

/// Controller + two agents + pvesim lxc nodes, each in its own network namespace; see the module doc.
pub struct E2e {
    pub dir: tempfile::TempDir,
    pub bins: Binaries,
    pub testbed: Testbed,
    pub http: TemplateServer,
    /// The URL of the testbed template on [`E2e::http`].
    pub template_url: String,
    pub url: String,
    pub controller_dir: PathBuf,
    pub controller_log: PathBuf,
    pub pxctl_config: PathBuf,
    /// The test's SSH private key (its public half is [`E2e::pubkey`]).
    pub key: PathBuf,
    pub pubkey: String,
    pub nodes: Vec<LxcNode>,
    admin: Bundle,
    controller: Option<Child>,
    namespaces: Vec<String>,
}

/// `ssh -i KEY root@IP CMD` from the host with the test's options (no known_hosts, batch mode, 3 s connect
/// timeout); None when ssh fails. [`E2e::ssh`] with the cluster's key; usable from a spawned task.
pub async fn ssh_with(key: &Path, ip: &str, cmd: &str) -> Option<String> {
    let key = key.display().to_string();
    let target = format!("root@{ip}");
    let o = exec(
        &[
            "ssh",
            "-i",
            &key,
            "-o",
            "BatchMode=yes",
            "-o",
            "StrictHostKeyChecking=no",
            "-o",
            "UserKnownHostsFile=/dev/null",
            "-o",
            "ConnectTimeout=3",
            "-o",
            "LogLevel=ERROR",
            &target,
            cmd,
        ],
        &[],
        Duration::from_secs(20),
    )
    .await;
    o.ok().then_some(o.stdout)
}

fn nsenter_argv(ns: &str, program: &Path, args: &[String]) -> Vec<String> {
    let mut v = vec![
        "nsenter".to_string(),
        format!("--net=/run/netns/{ns}"),
        "--".to_string(),
        program.display().to_string(),
    ];
    v.extend(args.iter().cloned());
    v
}

fn spawn_logged(argv: &[String], log: &Path, env: &[(&str, &str)]) -> Result<Child> {
    let f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .map_err(io(log))?;
    let f2 = f.try_clone().map_err(io(log))?;
    let mut cmd = Command::new(&argv[0]);
    cmd.args(&argv[1..])
        .stdin(Stdio::null())
        .stdout(f)
        .stderr(f2)
        .kill_on_drop(true);
    if std::env::var_os("PXFLEET_LOG").is_none() {
        // every PVE command with its start and end (crates/pve's runner logs both at debug): the per-step
        // breakdown of a scenario (crate::breakdown) reads them
        cmd.env("PXFLEET_LOG", "info,pxfleet_pve::runner=debug");
    }
    // plain text logs: the breakdown and the scenarios parse them (tracing's fmt layer honours NO_COLOR)
    cmd.env("NO_COLOR", "1");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.spawn().map_err(io(Path::new(&argv[0])))
}

impl E2e {
    /// Testbed, namespaces, controller, two nodes with their agents (ready), template server, SSH key.
    pub async fn start(options: E2eOptions) -> Result<E2e> {
        let testbed = Testbed::ensure().await?;
        let bins = Binaries::locate()?;
        let dir = tempfile::Builder::new()
            .prefix("pxfleet-e2e-")
            .tempdir_in("/var/tmp")
            .map_err(io(Path::new("/var/tmp")))?;
        let root = dir.path().to_path_buf();
        let http = TemplateServer::start(&testbed.gateway)?;
        let template_url = http.add(&testbed.template_name(), &testbed.template);

        let key = root.join("id_ed25519");
        exec_ok(
            &[
                "ssh-keygen",
                "-q",
                "-t",
                "ed25519",
                "-N",
                "",
                "-C",
                "pxfleet-e2e",
                "-f",
                key.to_str().unwrap_or_default(),
            ],
            Duration::from_secs(30),
        )
        .await?;
        let pub_path = root.join("id_ed25519.pub");
        let pubkey = std::fs::read_to_string(&pub_path)
            .map_err(io(&pub_path))?
            .trim()
            .to_string();

        let url = format!("https://{}:{CONTROLLER_PORT}", CONTROLLER_NS.1);
        let controller_dir = root.join("controller");
        run_command(
            &bins.pxcontroller,
            &[
                "init".into(),
                "--data-dir".into(),
                controller_dir.display().to_string(),
                "--san".into(),
                CONTROLLER_NS.1.into(),
                "--url".into(),
                url.clone(),
            ],
            &[],
        )
        .await?;
        let admin = Bundle::read(&BundlePaths::in_dir(&controller_dir.join("admin"), "admin"))?;
        let mut e = E2e {
            controller_log: root.join("controller.log"),
            pxctl_config: controller_dir.join("admin").join("pxctl.toml"),
            dir,
            bins,
            testbed,
            http,
            template_url,
            url,
            controller_dir,
            key,
            pubkey,
            nodes: Vec::new(),
            admin,
            controller: None,
            namespaces: Vec::new(),
        };
        for (ns, ip) in [CONTROLLER_NS, CLIENT_NS]
            .into_iter()
            .chain(NODES.iter().map(|(_, ns, ip)| (*ns, *ip)))
        {
            e.add_netns(ns, ip).await?;
        }
        let config = root.join("controller.toml");
        let text = format!(
            "data_dir = {:?}\nlisten = \"{}:{CONTROLLER_PORT}\"\nmetrics_listen = \"127.0.0.1:0\"\n\n\
             [reconciler]\nheartbeat_timeout_secs = 30\ninterval_ms = 200\nbackoff_base_ms = 500\n\
             backoff_max_ms = 4000\n",
            e.controller_dir.display().to_string(),
            CONTROLLER_NS.1,
        );
        std::fs::write(&config, text).map_err(io(&config))?;
        let argv = nsenter_argv(
            CONTROLLER_NS.0,
            &e.bins.pxcontroller,
            &[
                "run".into(),
                "--config".into(),
                config.display().to_string(),
            ],
        );
        e.controller = Some(spawn_logged(&argv, &e.controller_log, &[])?);
        let deadline = Instant::now() + Duration::from_secs(30);
        while e.api().await.is_err() {
            if Instant::now() > deadline {
                return Err(setup_err(
                    "pxcontroller run in netns",
                    format!("not answering on {}:\n{}", e.url, tail(&e.controller_log)),
                ));
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        for (name, ns, ip) in NODES {
            e.add_node(name, ns, ip, &options).await?;
        }
        e.wait_nodes_ready(Duration::from_secs(60)).await?;
        Ok(e)
    }

    async fn add_netns(&mut self, ns: &str, ip: &str) -> Result<()> {
        let script = crate::workspace_root().join("scripts/testbed/netns");
        exec_ok(
            &[script.to_str().unwrap_or_default(), "add", ns, ip],
            Duration::from_secs(30),
        )
        .await?;
        self.namespaces.push(ns.to_string());
        Ok(())
    }

    async fn add_node(&mut self, name: &str, ns: &str, ip: &str, o: &E2eOptions) -> Result<()> {
        let base = self.dir.path().join("nodes").join(name);
        std::fs::create_dir_all(&base).map_err(io(&base))?;
        let node = LxcNode {
            name: name.into(),
            netns: ns.into(),
            ip: ip.into(),
            sim: base.join("sim"),
            bin: base.join("bin"),
            agent_dir: base.join("agent"),
            log: self.dir.path().join(format!("agent-{name}.log")),
            agent: None,
        };
        let ov = base.join("pvesim.toml");
        let text = format!(
            "backend = \"lxc\"\n[lxc]\nnetns = \"{ns}\"\n[[bridge]]\nname = \"vmbr0\"\ncidr = \"{ip}/24\"\n\
             [[storage]]\nid = \"{BULK_STORAGE}\"\ntype = \"dir\"\ncontent = [\"rootdir\", \"images\"]\n\
             capacity_gib = 200\n"
        );
        std::fs::write(&ov, text).map_err(io(&ov))?;
        run_command(
            &self.bins.pvesim,
            &[
                "init".into(),
                "--state".into(),
                node.sim.display().to_string(),
                "--node".into(),
                name.into(),
                "--cluster".into(),
                self.dir.path().join("cluster").display().to_string(),
                "--config".into(),
                ov.display().to_string(),
                "--bin-dir".into(),
                node.bin.display().to_string(),
            ],
            &[],
        )
        .await?;
        let token = {
            let mut api = self.api().await?;
            api.create_join_token(pb::CreateJoinTokenRequest {
                ttl_seconds: 600,
                node: name.into(),
            })
            .await
            .map_err(|status| HarnessError::Grpc {
                call: "CreateJoinToken",
                status,
            })?
            .into_inner()
            .token
        };
        std::fs::create_dir_all(&node.agent_dir).map_err(io(&node.agent_dir))?;
        let argv = nsenter_argv(
            ns,
            &self.bins.pxagent,
            &[
                "join".into(),
                "--controller".into(),
                self.url.clone(),
                "--node".into(),
                name.into(),
                "--config-dir".into(),
                node.agent_dir.display().to_string(),
            ],
        );
        run_command(
            Path::new(&argv[0]),
            &argv[1..],
            &[("PXAGENT_JOIN_TOKEN", &token)],
        )
        .await?;
        let path = node.agent_dir.join("agent.toml");
        let text = std::fs::read_to_string(&path).map_err(io(&path))?;
        let mut doc: toml::Table = text
            .parse()
            .map_err(|e: toml::de::Error| setup_err(path.display().to_string(), e.to_string()))?;
        doc.insert("pve_bin_dir".into(), node.bin.display().to_string().into());
        let conf_dir = self
            .dir
            .path()
            .join("cluster/nodes")
            .join(&node.name)
            .join("lxc");
        doc.insert(
            "pve_config_dir".into(),
            conf_dir.display().to_string().into(),
        );
        doc.insert(
            "parallelism".into(),
            toml::Value::Integer(o.parallelism as i64),
        );
        doc.insert("heartbeat_secs".into(), toml::Value::Integer(1));
        doc.insert("observe_secs".into(), toml::Value::Integer(2));
        doc.insert("address_wait_secs".into(), toml::Value::Integer(30));
        let mut env = toml::Table::new();
        env.insert("PVESIM_STATE".into(), node.sim.display().to_string().into());
        doc.insert("env".into(), toml::Value::Table(env));
        let text = toml::to_string_pretty(&doc)
            .map_err(|e| setup_err(path.display().to_string(), e.to_string()))?;
        std::fs::write(&path, text).map_err(io(&path))?;
        self.nodes.push(node);
        self.start_agent(name)
    }

    /// Starts `pxagent run` for `name` inside its namespace.
    pub fn start_agent(&mut self, name: &str) -> Result<()> {
        let bin = self.bins.pxagent.clone();
        let n = self
            .nodes
            .iter_mut()
            .find(|n| n.name == name)
            .ok_or_else(|| setup_err("start_agent", format!("no node {name}")))?;
        let argv = nsenter_argv(
            &n.netns,
            &bin,
            &[
                "run".into(),
                "--config".into(),
                n.agent_dir.join("agent.toml").display().to_string(),
            ],
        );
        n.agent = Some(spawn_logged(&argv, &n.log, &[])?);
        Ok(())
    }

    pub fn node(&self, name: &str) -> &LxcNode {
        self.nodes
            .iter()
            .find(|n| n.name == name)
            .unwrap_or_else(|| panic!("no node {name} in this e2e cluster"))
    }

    /// A FleetService client with the admin certificate (from the host namespace, over the bridge).
    pub async fn api(&self) -> Result<FleetServiceClient<Channel>> {
        let tls = pxfleet_tls::client_config(&self.admin)?;
        let channel = pxfleet_tls::connect(&self.url, tls).await?;
        Ok(FleetServiceClient::new(channel))
    }

    /// Waits until both nodes are `ready`.
    pub async fn wait_nodes_ready(&self, timeout: Duration) -> Result<()> {
        let names: Vec<String> = self.nodes.iter().map(|n| n.name.clone()).collect();
        api::wait_nodes_ready(&names, timeout, || self.api(), || self.logs()).await
    }

    /// Every container of `fleet` as the controller reports it.
    pub async fn containers(&self, fleet: &str) -> Result<Vec<pb::ContainerInfo>> {
        api::containers(self.api().await?, fleet).await
    }

    /// Every operation of `fleet`.
    pub async fn operations(&self, fleet: &str) -> Result<Vec<pb::OperationInfo>> {
        api::operations(self.api().await?, fleet).await
    }

    /// The host pid of `vmid`'s init on `node` (`pct status --verbose`), None when it is not running.
    pub async fn init_pid(&self, node: &str, vmid: u32) -> Option<u32> {
        self.pct_status(node, vmid).await.get("pid")?.parse().ok()
    }

    /// Waits until `fleet` has exactly `names`, each running with a node, vm_id and address. Drift is not
    /// required to be absent here: a scenario that cares (PRD 6) checks the node's config itself.
    pub async fn wait_running(
        &self,
        fleet: &str,
        names: &[&str],
        timeout: Duration,
    ) -> Vec<pb::ContainerInfo> {
        api::wait_running(fleet, names, timeout, api::is_up, || self.api()).await
    }

    /// `pxctl ARGS` as admin from the host namespace.
    pub async fn pxctl(&self, args: &[&str]) -> Out {
        let mut argv: Vec<&str> = vec![self.bins.pxctl.to_str().unwrap_or("pxctl")];
        argv.extend(args);
        let cfg = self.pxctl_config.display().to_string();
        exec(
            &argv,
            &[("PXCTL_CONFIG", &cfg), ("NO_COLOR", "1")],
            Duration::from_secs(600),
        )
        .await
    }

    /// `pxctl ARGS` run inside network namespace `ns` with the pxctl config `config`.
    pub async fn pxctl_in(&self, ns: &str, config: &Path, args: &[&str]) -> Out {
        let net = format!("--net=/run/netns/{ns}");
        let mut argv: Vec<&str> = vec![
            "nsenter",
            &net,
            "--",
            self.bins.pxctl.to_str().unwrap_or("pxctl"),
        ];
        argv.extend(args);
        let cfg = config.display().to_string();
        exec(
            &argv,
            &[("PXCTL_CONFIG", &cfg), ("NO_COLOR", "1")],
            Duration::from_secs(120),
        )
        .await
    }

    /// Writes a pxctl config plus a certificate of role `role` for user `name`; returns the config path.
    /// The certificate is issued by the controller through the admin's API (recorded, as `pxctl user issue`).
    pub async fn user_config(&self, name: &str, role: Role) -> Result<PathBuf> {
        let bundle = api::issue_user(self.api().await?, name, role, &[]).await?;
        let dir = self.dir.path().join("users").join(name);
        let paths = BundlePaths::in_dir(&dir, name);
        bundle.write(&paths)?;
        let cfg = dir.join("pxctl.toml");
        let text = format!(
            "controller = {:?}\nca = {:?}\ncert = {:?}\nkey = {:?}\n",
            self.url,
            paths.ca.display().to_string(),
            paths.cert.display().to_string(),
            paths.key.display().to_string()
        );
        std::fs::write(&cfg, text).map_err(io(&cfg))?;
        Ok(cfg)
    }

    /// Writes `yaml` into the run directory as `name`; returns its path.
    pub fn write_fleet(&self, name: &str, yaml: &str) -> PathBuf {
        let path = self.dir.path().join(name);
        std::fs::write(&path, yaml).unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
        path
    }

    /// A PVE tool of `node` (pct, pvesh, pvesm, pveam) as a child process, as the agent runs it.
    pub async fn pve(&self, node: &str, tool: &str, args: &[&str]) -> Out {
        let n = self.node(node);
        let prog = n.bin.join(tool);
        let mut argv: Vec<&str> = vec![prog.to_str().unwrap_or(tool)];
        argv.extend(args);
        let state = n.sim.display().to_string();
        exec(&argv, &[("PVESIM_STATE", &state)], Duration::from_secs(300)).await
    }

    /// `pct config VMID` on `node` as key -> value.
    pub async fn pct_config(&self, node: &str, vmid: u32) -> BTreeMap<String, String> {
        let o = self.pve(node, "pct", &["config", &vmid.to_string()]).await;
        assert!(o.ok(), "pct config {vmid} on {node}: {}", o.stderr);
        o.stdout
            .lines()
            .filter_map(|l| l.split_once(": "))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    /// `pct status VMID --verbose` on `node` as key -> value.
    pub async fn pct_status(&self, node: &str, vmid: u32) -> BTreeMap<String, String> {
        let o = self
            .pve(node, "pct", &["status", &vmid.to_string(), "--verbose"])
            .await;
        assert!(o.ok(), "pct status {vmid} on {node}: {}", o.stderr);
        o.stdout
            .lines()
            .filter_map(|l| l.split_once(": "))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    /// vm_ids of every container on `node`.
    pub async fn vmids_on(&self, node: &str) -> Vec<u32> {
        let o = self.pve(node, "pct", &["list"]).await;
        o.stdout
            .lines()
            .skip(1)
            .filter_map(|l| l.split_whitespace().next()?.parse().ok())
            .collect()
    }

    /// `ssh -i KEY root@IP CMD` from the host; None when ssh fails.
    pub async fn ssh(&self, ip: &str, cmd: &str) -> Option<String> {
        ssh_with(&self.key, ip, cmd).await
    }

    /// Waits until `ssh root@ip CMD` succeeds; its output.
    pub async fn ssh_wait(&self, ip: &str, cmd: &str, timeout: Duration) -> String {
        wait_until(&format!("ssh root@{ip} {cmd}"), timeout, || async {
            self.ssh(ip, cmd)
                .await
                .ok_or_else(|| "ssh failed".to_string())
        })
        .await
    }

    /// The last lines of every log.
    pub fn logs(&self) -> String {
        let mut s = format!("--- controller:\n{}\n", tail(&self.controller_log));
        for n in &self.nodes {
            s.push_str(&format!("--- agent {}:\n{}\n", n.name, tail(&n.log)));
        }
        s
    }

    /// Stops every container on every node and destroys it (through the node's pct, inside its namespace).
    pub fn destroy_all_containers(&self) {
        for n in &self.nodes {
            let pct = n.bin.join("pct");
            let run = |args: &[&str]| {
                std::process::Command::new(&pct)
                    .args(args)
                    .env("PVESIM_STATE", &n.sim)
                    .stdin(Stdio::null())
                    .output()
            };
            let Ok(list) = run(&["list"]) else { continue };
            let ids: Vec<String> = String::from_utf8_lossy(&list.stdout)
                .lines()
                .skip(1)
                .filter_map(|l| l.split_whitespace().next().map(String::from))
                .collect();
            for id in ids {
                let _ = run(&["unlock", &id]);
                let _ = run(&["stop", &id]);
                let _ = run(&["destroy", &id, "--force", "1"]);
            }
        }
    }
}

impl Drop for E2e {
    fn drop(&mut self) {
        // Agents first, so nothing repairs what we tear down; only our own children, by handle.
        for n in &mut self.nodes {
            if let Some(c) = n.agent.as_mut() {
                let _ = c.start_kill();
            }
        }
        if let Some(c) = self.controller.as_mut() {
            let _ = c.start_kill();
        }
        std::thread::sleep(Duration::from_millis(300));
        if std::env::var_os("PXFLEET_KEEP").is_some() {
            // Leave containers, namespaces and the testbed for a look; scripts/testbed/teardown and
            // `pct destroy` (PVESIM_STATE=<dir>/nodes/NODE/sim) clean up afterwards.
            let path =
                std::mem::replace(&mut self.dir, tempfile::tempdir().expect("a temp dir")).keep();
            eprintln!(
                "pxfleet e2e: kept {} (containers and namespaces left running)",
                path.display()
            );
            return;
        }
        self.destroy_all_containers();
        let script = crate::workspace_root().join("scripts/testbed/netns");
        for ns in &self.namespaces {
            let _ = std::process::Command::new(&script)
                .args(["del", ns])
                .stdin(Stdio::null())
                .output();
        }
        if self.testbed.made_here {
            let _ = std::process::Command::new(
                crate::workspace_root().join("scripts/testbed/teardown"),
            )
            .stdin(Stdio::null())
            .output();
        }
    }
}
