//! Backend `lxc`: the same pct/pvesh behaviour as the memory backend, but containers are real LXC containers.
//! The memory backend's code (crate::ct) keeps the configs, locks, tasks and volumes; it calls in here at the
//! points where something real happens (create, start, stop, destroy, resize, set, migrate, status, interfaces,
//! exec). A node's containers are named `pxsim-<node>-<vmid>`, live under `<lxcpath>` (default `<state>/lxc`),
//! and every `lxc-*` command runs inside the node's network namespace when the node config names one.
//! What the host must offer is checked in `host`; what a running container shows is read in `observe`; volume
//! mount points are mounted in `volumes`. A migration moves the volume files to the target node's storages (the
//! memory backend does that) and the LXC directory's create-time facts with them ([`migrate`]).

pub mod config;
pub mod crypt;
pub mod rootfs;
pub mod run;
pub mod volumes;

use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::ctconf::CtConf;
use crate::error::SimError;
use crate::node::Node;
use crate::task::TaskLog;
use config::{Cgroups, InitKind};
use rootfs::{Identity, Mounted, NetSetup};
use run::{argv, check, run as run_cmd, run_input, Output};

mod host;
mod observe;

pub use host::check_host;
use host::check_subids;
use observe::cgroup_get;
pub use observe::{interfaces, observe, parse_ip_json, state, stats};

/// Which backend a node uses.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Backend {
    /// Config files and runtime records only; nothing runs.
    #[default]
    Memory,
    /// Real LXC containers (root only).
    Lxc,
}

impl std::str::FromStr for Backend {
    type Err = SimError;
    fn from_str(s: &str) -> Result<Self, SimError> {
        match s {
            "memory" => Ok(Backend::Memory),
            "lxc" => Ok(Backend::Lxc),
            other => Err(SimError::Usage(format!(
                "--backend '{other}': expected 'memory' or 'lxc'"
            ))),
        }
    }
}

/// `[lxc]` in node.toml / the overrides file.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct LxcCfg {
    /// Network namespace (`/run/netns/NAME`) holding this node's bridges; `lxc-*` commands run inside it.
    #[serde(default)]
    pub netns: Option<String>,
    /// LXC path for this node's containers (default `<state>/lxc`).
    #[serde(default)]
    pub lxcpath: Option<PathBuf>,
    /// Host uid/gid of container root for unprivileged containers (default 100000, as PVE).
    #[serde(default)]
    pub idmap_base: Option<u32>,
}

/// Errors of the lxc backend, with the command, container or path they concern.
#[derive(Debug, thiserror::Error)]
pub enum LxcError {
    #[error("cannot run '{argv}': {msg}")]
    Spawn { argv: String, msg: String },
    #[error("command '{argv}' failed: exit code {code}{}", if stderr.is_empty() { String::new() } else { format!(": {stderr}") })]
    Failed {
        argv: String,
        code: i32,
        stderr: String,
    },
    #[error("command '{argv}' timed out after {secs} s{}", if stderr.is_empty() { String::new() } else { format!(": {stderr}") })]
    Timeout {
        argv: String,
        secs: u64,
        stderr: String,
    },
    #[error("network namespace '{netns}': {msg}")]
    Netns { netns: String, msg: String },
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("CT {vmid}: {msg}")]
    Ct { vmid: u32, msg: String },
    #[error("lxc backend: {0}")]
    Host(String),
}

impl From<LxcError> for SimError {
    fn from(e: LxcError) -> Self {
        SimError::die(e.to_string())
    }
}

const T_LXC: Duration = Duration::from_secs(30);
const T_START: Duration = Duration::from_secs(90);
const T_SHUTDOWN: u64 = 60;
const T_EXEC: Duration = Duration::from_secs(3600);
const PATH_ENV: &str = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Facts found at create and needed at every start.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Facts {
    init: InitKind,
}

pub fn is_lxc(node: &Node) -> bool {
    node.cfg.backend == Backend::Lxc
}

/// LXC's name of the container: unique per machine.
pub fn name(node: &Node, vmid: u32) -> String {
    format!("pxsim-{}-{vmid}", node.name())
}

pub fn lxcpath(node: &Node) -> PathBuf {
    node.cfg
        .lxc
        .lxcpath
        .clone()
        .unwrap_or_else(|| node.state.join("lxc"))
}

fn dir(node: &Node, vmid: u32) -> PathBuf {
    lxcpath(node).join(name(node, vmid))
}

fn netns(node: &Node) -> Option<&str> {
    node.cfg.lxc.netns.as_deref()
}

fn idmap_base(node: &Node) -> u32 {
    node.cfg.lxc.idmap_base.unwrap_or(100000)
}

fn lxc_argv(node: &Node, tool: &str, vmid: u32, extra: &[&str]) -> Vec<String> {
    let mut a = argv(&[
        tool,
        "-n",
        &name(node, vmid),
        "-P",
        &lxcpath(node).display().to_string(),
    ]);
    a.extend(extra.iter().map(|s| s.to_string()));
    a
}

fn unprivileged(o: &std::collections::BTreeMap<String, String>) -> bool {
    o.get("unprivileged").map(|v| v == "1").unwrap_or(false)
}

fn owner(node: &Node, o: &std::collections::BTreeMap<String, String>) -> u32 {
    if unprivileged(o) {
        idmap_base(node)
    } else {
        0
    }
}

/// The image file behind the `rootfs` option.
fn rootfs_image(
    node: &Node,
    vmid: u32,
    o: &std::collections::BTreeMap<String, String>,
) -> Result<PathBuf, LxcError> {
    let r = o.get("rootfs").cloned().unwrap_or_default();
    let vol = r
        .split(',')
        .next()
        .unwrap_or("")
        .trim_start_matches("volume=");
    if vol.is_empty() || vol.starts_with('/') || !vol.contains(':') {
        return Err(LxcError::Ct {
            vmid,
            msg: format!("rootfs '{vol}': the lxc backend needs a storage volume (STORAGE:SIZE)"),
        });
    }
    crate::storage::volume_path(node, vol).map_err(|e| LxcError::Ct {
        vmid,
        msg: e.to_string(),
    })
}

fn identity(o: &std::collections::BTreeMap<String, String>, vmid: u32) -> Identity {
    let mut nets = Vec::new();
    for (k, v) in o {
        if !(k.starts_with("net") && k[3..].parse::<u32>().is_ok()) {
            continue;
        }
        let Some(m) = crate::schema::property_format("net0")
            .and_then(|f| crate::schema::parse_property_string(f, v, k).ok())
        else {
            continue;
        };
        nets.push(NetSetup {
            name: m.get("name").cloned().unwrap_or_else(|| "eth0".into()),
            ip: m.get("ip").cloned(),
            gw: m.get("gw").cloned(),
            ip6: m.get("ip6").cloned(),
            gw6: m.get("gw6").cloned(),
        });
    }
    Identity {
        hostname: o
            .get("hostname")
            .cloned()
            .unwrap_or_else(|| format!("CT{vmid}")),
        nets,
        nameserver: o.get("nameserver").cloned(),
        searchdomain: o.get("searchdomain").cloned(),
    }
}

/// Real part of `pct create`: make the file system on the rootfs volume, extract the template, set the
/// container up. `opts` are the final config options (with `rootfs` pointing at the allocated volume).
pub fn create(
    node: &Node,
    vmid: u32,
    opts: &std::collections::BTreeMap<String, String>,
    template: &Path,
    password: Option<&str>,
    ssh_keys: Option<&str>,
    log: &mut TaskLog,
) -> Result<(), LxcError> {
    check_host(node)?;
    if unprivileged(opts) {
        check_subids(node)?;
    }
    let img = rootfs_image(node, vmid, opts)?;
    let d = dir(node, vmid);
    let _ = fs::remove_dir_all(&d);
    fs::create_dir_all(&d).map_err(|e| LxcError::Io {
        path: d.clone(),
        source: e,
    })?;
    let own = owner(node, opts);
    rootfs::mkfs(&img, own)?;
    let m = Mounted::image(&img, &d.join("rootfs"))?;
    log.line(format!("extracting archive '{}'", template.display()));
    let totals = rootfs::extract(template, &m.dir)?;
    if !totals.is_empty() {
        log.line(totals);
    }
    let init = rootfs::init_kind(&m.dir);
    if own != 0 {
        rootfs::shift_ids(&m.dir, own)?;
    }
    let id = identity(opts, vmid);
    rootfs::setup_identity(&m.dir, &id, own)?;
    for l in rootfs::setup_host_keys(&m.dir, &d.join("hostkeys"), &id.hostname, own)? {
        log.line(l);
    }
    if let Some(k) = ssh_keys.filter(|k| !k.trim().is_empty()) {
        rootfs::setup_ssh_keys(&m.dir, k, own)?;
    }
    if let Some(p) = password {
        rootfs::setup_password(&m.dir, p, own)?;
    }
    drop(m);
    rootfs::detach_image(&img)?;
    let facts = serde_json::to_string(&Facts { init }).unwrap_or_default();
    let f = d.join("pvesim.json");
    fs::write(&f, facts).map_err(|e| LxcError::Io { path: f, source: e })
}

fn facts(node: &Node, vmid: u32) -> Facts {
    fs::read_to_string(dir(node, vmid).join("pvesim.json"))
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or(Facts {
            init: InitKind::Other,
        })
}

fn host_cpus() -> u32 {
    std::thread::available_parallelism()
        .map(|n| n.get() as u32)
        .unwrap_or(1)
}

fn tail(path: &Path, n: usize) -> String {
    let t = fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = t.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// Real part of `pct start`: set the rootfs up (hostname, hosts, network), write the LXC config, `lxc-start`,
/// then make sure it stayed up. Returns the init's pid.
pub fn start(node: &Node, vmid: u32, conf: &CtConf, log: &mut TaskLog) -> Result<u32, LxcError> {
    check_host(node)?;
    let o = &conf.opts;
    if unprivileged(o) {
        check_subids(node)?;
    }
    let img = rootfs_image(node, vmid, o)?;
    let d = dir(node, vmid);
    fs::create_dir_all(&d).map_err(|e| LxcError::Io {
        path: d.clone(),
        source: e,
    })?;
    let own = owner(node, o);
    let rootfs_dir = d.join("rootfs");
    let vols = volumes::of(node, vmid, o, &d)?;
    {
        let m = Mounted::image(&img, &rootfs_dir)?;
        rootfs::setup_identity(&m.dir, &identity(o, vmid), own)?;
        // stays mounted: the container's rootfs (released at stop, or below when the start fails)
        m.keep();
    }
    let r = volumes::mount_all(&vols, own)
        .and_then(|()| start_mounted(node, vmid, conf, &d, &rootfs_dir));
    if r.is_err() && !state(node, vmid).0 {
        volumes::release_all(&vols);
        if let Err(e) = rootfs::release(&rootfs_dir) {
            tracing::warn!(vmid, error = %e, "releasing the rootfs after a failed start");
        }
    }
    let _ = log;
    r
}

/// [`start`] once the rootfs is mounted: LXC config, `lxc-start`, the running check.
fn start_mounted(
    node: &Node,
    vmid: u32,
    conf: &CtConf,
    d: &Path,
    rootfs_dir: &Path,
) -> Result<u32, LxcError> {
    let o = &conf.opts;
    let seccomp = if config::needs_keyctl_block(o) {
        let common = fs::read_to_string("/usr/share/lxc/config/common.seccomp")
            .unwrap_or_else(|_| "2\ndenylist\n".into());
        let p = d.join("seccomp");
        fs::write(&p, config::seccomp_profile(&common)).map_err(|e| LxcError::Io {
            path: p.clone(),
            source: e,
        })?;
        Some(p)
    } else {
        None
    };
    let nm = name(node, vmid);
    let host = config::Host {
        name: &nm,
        rootfs_dir,
        dir: d,
        cgroups: Cgroups::detect(Path::new("/sys/fs/cgroup")),
        host_cpus: host_cpus(),
        init: facts(node, vmid).init,
        idmap_base: idmap_base(node),
    };
    let text = config::render(conf, &host, seccomp.as_deref());
    let cfgp = d.join("config");
    fs::write(&cfgp, text).map_err(|e| LxcError::Io {
        path: cfgp.clone(),
        source: e,
    })?;
    let logf = d.join("lxc.log");
    let _ = fs::write(&logf, "");
    let _ = fs::write(d.join("console.log"), "");
    let a = lxc_argv(
        node,
        "lxc-start",
        vmid,
        &["-o", &logf.display().to_string(), "-l", "WARN"],
    );
    let o = run_cmd(&a, netns(node), T_START)?;
    let failed = |why: &str| LxcError::Ct {
        vmid,
        msg: format!(
            "startup for container '{vmid}' failed: {why}\n{}{}",
            tail(&logf, 8),
            {
                let c = tail(&d.join("console.log"), 8);
                if c.is_empty() {
                    String::new()
                } else {
                    format!("\nconsole:\n{c}")
                }
            }
        ),
    };
    if !o.ok() {
        return Err(failed(&format!("lxc-start exit code {}", o.code)));
    }
    // lxc-start can return 0 for a container whose init died right away: look again a little later.
    let mut pid = 0;
    for wait in [0u64, 100, 250] {
        std::thread::sleep(Duration::from_millis(wait));
        let (running, p) = state(node, vmid);
        if !running {
            return Err(failed("the container stopped right after starting"));
        }
        pid = p;
    }
    tracing::debug!(name = %nm, pid, "started");
    Ok(pid)
}

/// Real part of `pct stop` (`lxc-stop --kill`) and `pct shutdown` (`lxc-stop` with a timeout, killed after it).
pub fn stop(node: &Node, vmid: u32, shutdown: bool) -> Result<(), LxcError> {
    let t = T_SHUTDOWN.to_string();
    let extra: Vec<&str> = if shutdown { vec!["-t", &t] } else { vec!["-k"] };
    let a = lxc_argv(node, "lxc-stop", vmid, &extra);
    let o = run_cmd(&a, netns(node), Duration::from_secs(T_SHUTDOWN + 30))?;
    if !o.ok() && state(node, vmid).0 {
        return Err(LxcError::Failed {
            argv: a.join(" "),
            code: o.code,
            stderr: o.stderr.trim().to_string(),
        });
    }
    volumes::release_dir(&dir(node, vmid))?;
    rootfs::release(&dir(node, vmid).join("rootfs"))
}

/// Real part of `pct destroy`: kill it if running, remove its LXC directory (the volumes are freed by the caller).
pub fn destroy(node: &Node, vmid: u32) -> Result<(), LxcError> {
    if state(node, vmid).0 {
        stop(node, vmid, false)?;
    }
    let d = dir(node, vmid);
    volumes::release_dir(&d)?;
    rootfs::release(&d.join("rootfs"))?;
    match fs::remove_dir_all(&d) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(LxcError::Io { path: d, source: e }),
    }
}

/// Forgets a container that was never set up completely (failed create).
pub fn forget(node: &Node, vmid: u32) {
    if let Err(e) = destroy(node, vmid) {
        tracing::warn!(vmid, error = %e, "cleaning up after a failed create");
    }
}

/// Moves the create-time facts to the target node of a migration and forgets the container here.
pub fn migrate(node: &Node, peer: &Node, vmid: u32) -> Result<(), LxcError> {
    let src = dir(node, vmid).join("pvesim.json");
    let dd = dir(peer, vmid);
    fs::create_dir_all(&dd).map_err(|e| LxcError::Io {
        path: dd.clone(),
        source: e,
    })?;
    if src.exists() {
        fs::copy(&src, dd.join("pvesim.json")).map_err(|e| LxcError::Io {
            path: src,
            source: e,
        })?;
    }
    destroy(node, vmid)
}

/// Applies memory, swap, cores, cpulimit and cpuunits to a running container without restarting it (the
/// cgroup files, through `lxc-cgroup`). v1: the memory+swap limit is raised before the memory limit and lowered
/// after it, as the kernel demands.
pub fn apply_limits(node: &Node, vmid: u32, conf: &CtConf) -> Result<(), LxcError> {
    let cg = Cgroups::detect(Path::new("/sys/fs/cgroup"));
    let mut l = config::limits(&conf.opts, cg, host_cpus());
    if let Cgroups::V1 { .. } = cg {
        let new_mem = l
            .iter()
            .find(|(k, _)| k == "memory.limit_in_bytes")
            .and_then(|(_, v)| v.parse::<u64>().ok())
            .unwrap_or(0);
        let cur = cgroup_get(node, vmid, "memory.limit_in_bytes").unwrap_or(0);
        if new_mem < cur {
            // lowering: memory first, then memory+swap
            if let Some(i) = l.iter().position(|(k, _)| k == "memory.limit_in_bytes") {
                let e = l.remove(i);
                l.insert(0, e);
            }
        }
    }
    for (k, v) in l {
        let a = lxc_argv(node, "lxc-cgroup", vmid, &["--", &k, &v]);
        check(&a, netns(node), T_LXC)?;
    }
    Ok(())
}

/// Grows the file system after the volume file grew (`pct resize`): online through the loop device when the
/// container runs, otherwise e2fsck + resize2fs on the image.
pub fn grow(node: &Node, vmid: u32, volid: &str) -> Result<(), LxcError> {
    let img = crate::storage::volume_path(node, volid).map_err(|e| LxcError::Ct {
        vmid,
        msg: e.to_string(),
    })?;
    if !volumes::has_fs(&img) {
        return Ok(()); // a mount point volume never mounted yet: made at its full size when first mounted
    }
    let is = img.display().to_string();
    let loops = check(&argv(&["losetup", "-j", &is]), None, T_LXC)?;
    if let Some(dev) = loops
        .stdout
        .lines()
        .next()
        .and_then(|l| l.split(':').next())
    {
        check(&argv(&["losetup", "-c", dev]), None, T_LXC)?;
        check(&argv(&["resize2fs", dev]), None, Duration::from_secs(300))?;
    } else {
        let o = run_cmd(
            &argv(&["e2fsck", "-f", "-p", &is]),
            None,
            Duration::from_secs(300),
        )?;
        if o.code > 1 {
            return Err(LxcError::Failed {
                argv: format!("e2fsck -f -p {is}"),
                code: o.code,
                stderr: o.stderr.trim().to_string(),
            });
        }
        check(&argv(&["resize2fs", &is]), None, Duration::from_secs(300))?;
    }
    Ok(())
}

/// `pct exec`: runs `cmd` in the container (`lxc-attach --clear-env`) with `input` on its stdin; output and
/// exit code as they are.
pub fn exec(
    node: &Node,
    vmid: u32,
    cmd: &[String],
    input: Option<&[u8]>,
) -> Result<Output, LxcError> {
    let mut extra = vec!["--clear-env", "--set-var", PATH_ENV, "--"];
    extra.extend(cmd.iter().map(String::as_str));
    let a = lxc_argv(node, "lxc-attach", vmid, &extra);
    run_input(&a, netns(node), T_EXEC, input)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backend_names() {
        assert_eq!("lxc".parse::<Backend>().unwrap(), Backend::Lxc);
        let e = "docker".parse::<Backend>().unwrap_err();
        assert!(e.to_string().contains("'memory' or 'lxc'"), "{e}");
    }
}
