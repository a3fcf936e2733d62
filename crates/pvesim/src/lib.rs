//! pvesim: a simulated Proxmox VE node. One multi-call binary answers as `pct`, `pvesh`, `pvesm` and `pveam`
//! (by the name it is invoked under, or `pvesim pct ...`) from a state directory, with PVE's output formats,
//! error texts and exit codes. `pvesim init` creates a node, `pvesim install-links` the tool symlinks.
//! Backend `memory`: containers are config files and runtime records; nothing really runs. Backend `lxc`
//! (`pvesim init --backend lxc`, module `lxc`): the same behaviour with real LXC containers.

pub mod ct;
pub mod ctconf;
pub mod error;
pub mod faults;
pub mod getopt;
pub mod json;
pub mod lock;
pub mod lxc;
pub mod node;
pub mod pct;
pub mod pools;
pub mod pveam;
pub mod pvesh;
pub mod schema;
pub mod sshkey;
pub mod storage;
pub mod task;
pub mod tools;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

pub use error::{Result, SimError};
pub use node::{InitOptions, Node};

/// What one invocation printed and its exit code.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Outcome {
    pub stdout: String,
    pub stderr: String,
    pub code: i32,
}

impl Outcome {
    /// An outcome with only stderr.
    pub fn err(stderr: &str, code: i32) -> Outcome {
        Outcome {
            stdout: String::new(),
            stderr: stderr.to_string(),
            code,
        }
    }
}

/// The names the binary answers to.
pub const TOOLS: [&str; 4] = ["pct", "pvesh", "pvesm", "pveam"];

const USAGE: &str = "usage: pvesim init --state DIR --node NAME [--cluster DIR] [--cluster-name NAME] [--config FILE]\n                   [--bin-dir DIR] [--backend memory|lxc] [--netns NS]\n       pvesim install-links --bin-dir DIR\n       pvesim reboot --state DIR   (power loss: every container stopped)\n       pvesim <pct|pvesh|pvesm|pveam> ARGS...   (node from PVESIM_STATE=DIR)\n";

/// Runs one invocation: `argv0` is the name the binary was started as, `args` the rest, `env` the
/// environment (only `PVESIM_STATE` is read). Tests call this in-process. Stdin is empty; see [`run_io`].
pub fn run(argv0: &str, args: &[String], env: &BTreeMap<String, String>) -> Outcome {
    run_io(argv0, args, env, &mut std::io::empty())
}

/// [`run`] with a stdin, read only by the commands that take input (`pct exec ... -- chpasswd`).
pub fn run_io(
    argv0: &str,
    args: &[String],
    env: &BTreeMap<String, String>,
    stdin: &mut dyn std::io::Read,
) -> Outcome {
    let name = Path::new(argv0)
        .file_name()
        .map(|f| f.to_string_lossy().to_string())
        .unwrap_or_default();
    if TOOLS.contains(&name.as_str()) {
        return run_tool(&name, args, env, stdin);
    }
    match args.first().map(String::as_str) {
        Some(t) if TOOLS.contains(&t) => run_tool(t, &args[1..], env, stdin),
        Some("init") => finish(init_cmd(&args[1..], argv0)),
        Some("install-links") => finish(links_cmd(&args[1..], argv0)),
        Some("reboot") => finish(reboot_cmd(&args[1..])),
        Some("-h" | "--help" | "help") => Outcome {
            stdout: USAGE.into(),
            stderr: String::new(),
            code: 0,
        },
        _ => Outcome::err(USAGE, 2),
    }
}

fn finish(r: Result<String>) -> Outcome {
    match r {
        Ok(s) => Outcome {
            stdout: s,
            stderr: String::new(),
            code: 0,
        },
        Err(e) => Outcome::err(&e.render(None), e.exit_code()),
    }
}

fn flags(args: &[String], known: &[&str]) -> Result<BTreeMap<String, String>> {
    let mut m = BTreeMap::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let Some(k) = a.strip_prefix("--").filter(|k| known.contains(k)) else {
            return Err(SimError::Usage(format!(
                "unexpected argument '{a}'\n{USAGE}"
            )));
        };
        let v = it
            .next()
            .ok_or_else(|| SimError::Usage(format!("--{k} needs a value")))?;
        m.insert(k.to_string(), v.clone());
    }
    Ok(m)
}

fn self_exe(argv0: &str) -> PathBuf {
    std::env::current_exe().unwrap_or_else(|_| PathBuf::from(argv0))
}

/// Creates `pct`, `pvesh`, `pvesm`, `pveam` symlinks to `exe` in `dir`.
pub fn install_links(dir: &Path, exe: &Path) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(|e| SimError::io(dir, e))?;
    for t in TOOLS {
        let l = dir.join(t);
        let _ = std::fs::remove_file(&l);
        std::os::unix::fs::symlink(exe, &l).map_err(|e| SimError::io(&l, e))?;
    }
    Ok(())
}

fn init_cmd(args: &[String], argv0: &str) -> Result<String> {
    let f = flags(
        args,
        &[
            "state",
            "node",
            "cluster",
            "cluster-name",
            "config",
            "bin-dir",
            "backend",
            "netns",
        ],
    )?;
    let state = f
        .get("state")
        .ok_or_else(|| SimError::Usage("init needs --state DIR".into()))?;
    let node = f
        .get("node")
        .ok_or_else(|| SimError::Usage("init needs --node NAME".into()))?;
    let n = node::init(&InitOptions {
        state: state.into(),
        node: node.clone(),
        cluster: f.get("cluster").map(PathBuf::from),
        config: f.get("config").map(PathBuf::from),
        backend: f.get("backend").map(|b| b.parse()).transpose()?,
        netns: f.get("netns").cloned(),
        cluster_name: f.get("cluster-name").cloned(),
    })?;
    if lxc::is_lxc(&n) {
        lxc::check_host(&n)?;
    }
    if let Some(b) = f.get("bin-dir") {
        install_links(Path::new(b), &self_exe(argv0))?;
    }
    Ok(format!(
        "initialised node '{}' in {}\n",
        n.name(),
        n.state.display()
    ))
}

/// `pvesim reboot --state DIR`: the node loses power and comes back; every container is stopped.
fn reboot_cmd(args: &[String]) -> Result<String> {
    let f = flags(args, &["state"])?;
    let state = f
        .get("state")
        .ok_or_else(|| SimError::Usage("reboot needs --state DIR".into()))?;
    let node = Node::load(Path::new(state))?;
    let stopped = ct::power_loss(&node)?;
    Ok(format!(
        "node '{}' rebooted; {} container(s) stopped\n",
        node.name(),
        stopped.len()
    ))
}

fn links_cmd(args: &[String], argv0: &str) -> Result<String> {
    let f = flags(args, &["bin-dir"])?;
    let b = f
        .get("bin-dir")
        .ok_or_else(|| SimError::Usage("install-links needs --bin-dir DIR".into()))?;
    install_links(Path::new(b), &self_exe(argv0))?;
    Ok(String::new())
}

fn run_tool(
    tool: &str,
    args: &[String],
    env: &BTreeMap<String, String>,
    stdin: &mut dyn std::io::Read,
) -> Outcome {
    let Some(state) = env.get("PVESIM_STATE").filter(|s| !s.is_empty()) else {
        return Outcome::err(&format!("pvesim: {tool}: set PVESIM_STATE to a node state directory (made by `pvesim init`)\n"), 2);
    };
    let mut node = match Node::load(Path::new(state)) {
        Ok(n) => n,
        Err(e) => return Outcome::err(&e.render(None), 2),
    };
    if let Err(e) = faults::apply_plan(&mut node, env) {
        return Outcome::err(&e.render(None), 2);
    }
    let line = format!("{tool} {}", args.join(" "));
    for s in &node.cfg.faults.slow {
        if line.starts_with(&s.command) {
            std::thread::sleep(std::time::Duration::from_millis(s.ms));
        }
    }
    match faults::before_invocation(&node, &line) {
        Ok(Some(garbage)) => {
            return Outcome {
                stdout: garbage,
                stderr: String::new(),
                code: 0,
            }
        }
        Ok(None) => {}
        Err(e) => return Outcome::err(&e.render(None), 2),
    }
    tracing::debug!(node = node.name(), %line, "invocation");
    let out = match tool {
        "pct" => pct::run(&node, args, stdin),
        "pvesh" => pvesh::run(&node, args),
        "pvesm" => tools::pvesm(&node, args),
        _ => tools::pveam(&node, args),
    };
    tracing::debug!(code = out.code, "done");
    out
}
