//! Container operations of the memory backend: create, set, start/stop/shutdown/reboot, destroy, resize,
//! unlock, migrate, status (`vmstatus`), interfaces; config locks, `lock: create`, normalisation of values,
//! disks and capacity, runtime state (`runtime/<vmid>.json`) and DHCP leases. Nothing runs inside a container.
//!
//! This module keeps what every operation shares (runtime state, config files, locks, faults, sizes)
//! and `pct unlock`; each `pct` subcommand group has its own submodule: `create`, `config` (set,
//! resize), `power`, `destroy`, `migrate`, `clone` (clone, template), `status`, `guest` (chpasswd, interfaces), and
//! `values`
//! (normalisation of option values and disk plans).
// pvesim simulates PVE: its timestamps and lock timeouts are the simulated node's real time
#![allow(clippy::disallowed_methods)]

use std::collections::BTreeMap;
use std::fs;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::ctconf::CtConf;
use crate::error::{Result, SimError};
use crate::faults;
use crate::lock::{self, Held};
use crate::node::{write_file, Node};
use crate::task::now;

mod clone;
mod config;
mod create;
mod destroy;
mod guest;
mod migrate;
mod power;
mod snapshot;
mod status;
mod values;

pub use clone::{clone, template};
pub use config::{resize, set};
pub use create::create;
pub use destroy::destroy;
pub use guest::{chpasswd, interfaces};
pub use migrate::migrate;
pub use power::{power_loss, reboot, shutdown, start, stop};
pub use snapshot::{delsnapshot, rollback, snapshot, snapshot_tree, snapshots};
pub use status::{list, vmstatus};

/// Runtime state of a container on the memory backend.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Runtime {
    pub running: bool,
    pub started: u64,
    pub pid: u32,
    /// dhcp addresses by interface name
    #[serde(default)]
    pub leases: BTreeMap<String, String>,
    /// Keys given with `ssh-public-keys` at create (root's `authorized_keys`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub authorized_keys: Vec<String>,
    /// Users whose password `pct create --password` or `chpasswd` set: user -> SHA-256 hex of the password (the
    /// CT's shadow file).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub passwords: BTreeMap<String, String>,
    /// How many times the CT booted (`pct start`, `pct reboot`): a CT created stopped has never booted.
    #[serde(default)]
    pub boots: u32,
    /// What the first boot ran with: the `lxc.idmap` and `lxc.environment.runtime` lines of the config and
    /// whether root had a password by then (what a first boot writes gets its owners from that map).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_boot: Option<FirstBoot>,
}

/// The configuration a container's first boot ran with (see [`Runtime::first_boot`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FirstBoot {
    pub idmap: Vec<String>,
    pub env: Vec<String>,
    pub root_password: bool,
}

impl Runtime {
    /// Stopped: not running, no start time, no process.
    fn stop(&mut self) {
        self.running = false;
        self.started = 0;
        self.pid = 0;
    }

    /// Counts a boot with `conf` (remembering the first one's configuration).
    fn booted(&mut self, conf: &crate::ctconf::CtConf) {
        self.boots += 1;
        if self.first_boot.is_none() {
            self.first_boot = Some(FirstBoot {
                idmap: conf
                    .lxc
                    .iter()
                    .filter(|(k, _)| k == "lxc.idmap")
                    .map(|(_, v)| v.clone())
                    .collect(),
                // `env` is parsed into one NUL-separated option, as PVE's parser does
                env: conf
                    .opts
                    .get("env")
                    .map(|e| e.split('\0').map(str::to_string).collect())
                    .unwrap_or_default(),
                root_password: self.passwords.contains_key("root"),
            });
        }
    }
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct FaultState {
    creates_failed: u32,
    lock_since: Option<u64>,
}

fn runtime_path(node: &Node, vmid: u32) -> PathBuf {
    node.state.join("runtime").join(format!("{vmid}.json"))
}

pub fn runtime(node: &Node, vmid: u32) -> Runtime {
    let rt = fs::read_to_string(runtime_path(node, vmid))
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or_default();
    if crate::lxc::is_lxc(node) {
        return crate::lxc::observe(node, vmid, rt);
    }
    rt
}

fn save_runtime(node: &Node, vmid: u32, rt: &Runtime) -> Result<()> {
    write_file(
        &runtime_path(node, vmid),
        &serde_json::to_string(rt).unwrap_or_default(),
    )
}

pub fn conf_path(node: &Node, vmid: u32) -> PathBuf {
    node.conf_dir().join(format!("{vmid}.conf"))
}

/// Reads the config of a CT on this node; PVE's message when it is missing or on another node.
pub fn read_conf(node: &Node, vmid: u32) -> Result<(CtConf, String)> {
    let p = conf_path(node, vmid);
    match fs::read_to_string(&p) {
        Ok(raw) => Ok((CtConf::parse(&raw), raw)),
        Err(_) => Err(SimError::die(format!(
            "Configuration file 'nodes/{}/lxc/{vmid}.conf' does not exist",
            node.name()
        ))),
    }
}

pub fn write_conf(node: &Node, vmid: u32, c: &CtConf) -> Result<()> {
    write_file(&conf_path(node, vmid), &c.write())
}

/// The `ct_locked` fault: the CT is taken to carry its lock.
fn fault_lock(node: &Node, vmid: u32) -> Result<()> {
    if let Some(f) = &node.cfg.faults.ct_locked {
        if f.vmid.is_none_or(|v| v == vmid) && faults::fire(node, "ct_locked", f.count)? {
            return Err(SimError::die(format!("CT is locked ({})", f.lock)));
        }
    }
    Ok(())
}

fn check_lock(node: &Node, vmid: u32, c: &CtConf) -> Result<()> {
    fault_lock(node, vmid)?;
    match c.lock() {
        Some(l) => Err(SimError::die(format!("CT is locked ({l})"))),
        None => Ok(()),
    }
}

fn with_faults<T>(node: &Node, f: impl FnOnce(&mut FaultState) -> T) -> Result<T> {
    let _g = lock::lock_blocking(&node.state.join("lock").join("faults.lock"))?;
    let p = node.state.join("faults-state.json");
    let mut st: FaultState = fs::read_to_string(&p)
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or_default();
    let r = f(&mut st);
    write_file(&p, &serde_json::to_string(&st).unwrap_or_default())?;
    Ok(r)
}

/// Takes the config lock of `vmid` (10 s, or 5 s for create), honouring the `lock_vmid` fault.
pub fn lock_ct(node: &Node, vmid: u32, create: bool, err: &mut String) -> Result<Held> {
    let mut busy = None;
    if let Some(f) = node.cfg.faults.lock_vmid.clone().filter(|f| f.vmid == vmid) {
        let since = with_faults(node, |s| *s.lock_since.get_or_insert(now()))?;
        let until = since + f.seconds;
        let n = now();
        if until > n {
            busy = Some(Instant::now() + Duration::from_secs(until - n));
        }
    }
    let timeout = Duration::from_secs(if create { 5 } else { 10 });
    if let Some(f) = &node.cfg.faults.lock_held {
        if f.vmid.is_none_or(|v| v == vmid) && faults::fire(node, "lock_held", f.count)? {
            busy = Some(Instant::now() + timeout + Duration::from_secs(1));
        }
    }
    lock::lock_config(node.cluster(), vmid, timeout, busy, err)
}

fn sleep_ms(ms: u64) {
    if ms > 0 {
        std::thread::sleep(Duration::from_millis(ms));
    }
}

/// `format_size`: the largest exact binary unit.
pub fn format_size(bytes: u64) -> String {
    if bytes == 0 {
        return "0T".into();
    }
    for (unit, shift) in [("T", 40), ("G", 30), ("M", 20), ("K", 10)] {
        if bytes.trailing_zeros() >= shift {
            return format!("{}{unit}", bytes >> shift);
        }
    }
    bytes.to_string()
}

/// `parse_size` (bytes without unit).
pub fn parse_size(s: &str) -> Option<u64> {
    let (num, mul) = match s.chars().last()? {
        'K' => (&s[..s.len() - 1], 1u64 << 10),
        'M' => (&s[..s.len() - 1], 1u64 << 20),
        'G' => (&s[..s.len() - 1], 1u64 << 30),
        'T' => (&s[..s.len() - 1], 1u64 << 40),
        _ => (s, 1),
    };
    num.parse::<f64>().ok().map(|n| (n * mul as f64) as u64)
}

/// `pct unlock`.
pub fn unlock(node: &Node, vmid: u32, err: &mut String) -> Result<()> {
    let _held = lock_ct(node, vmid, false, err)?;
    let (mut conf, _) = read_conf(node, vmid)?;
    if conf.opts.remove("lock").is_none() {
        return Err(SimError::die("no lock found trying to remove any lock"));
    }
    write_conf(node, vmid, &conf)
}

#[cfg(test)]
mod tests;
