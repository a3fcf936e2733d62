//! Power: `pct start`, `stop`, `shutdown`, `reboot`, a node's power loss, and the DHCP leases
//! a started container gets.

use std::collections::BTreeMap;
use std::fs;

use super::config::apply_pending;
use super::status::list;
use super::values::{is_disk_key, is_net_key, parse_prop};
use super::{
    check_lock, fault_lock, lock_ct, read_conf, runtime, save_runtime, sleep_ms, write_conf,
    Runtime,
};
use crate::ctconf::CtConf;
use crate::error::{Result, SimError};
use crate::lock;
use crate::node::{write_file, Node};
use crate::task::{self, now, TaskOutcome};

pub(super) fn ipv4_add(base: std::net::Ipv4Addr, n: u32) -> std::net::Ipv4Addr {
    std::net::Ipv4Addr::from(u32::from(base) + n)
}

/// Every `hwaddr=` of every container config on the node.
fn configured_macs(node: &Node) -> std::collections::BTreeSet<String> {
    let mut macs = std::collections::BTreeSet::new();
    let Ok(dir) = fs::read_dir(node.conf_dir()) else {
        return macs;
    };
    for entry in dir.flatten() {
        let Ok(raw) = fs::read_to_string(entry.path()) else {
            continue;
        };
        let conf = CtConf::parse(&raw);
        for (k, v) in &conf.opts {
            if let Some(mac) = is_net_key(k)
                .then(|| parse_prop(k, v).ok())
                .flatten()
                .and_then(|m| m.get("hwaddr").cloned())
            {
                macs.insert(mac);
            }
        }
    }
    macs
}

pub(super) fn assign_leases(node: &Node, vmid: u32, conf: &CtConf, rt: &mut Runtime) -> Result<()> {
    let _g = lock::lock_blocking(&node.state.join("lock").join("dhcp.lock"))?;
    let first: std::net::Ipv4Addr = node.cfg.dhcp.first.parse().map_err(|_| {
        SimError::state(
            node.state.join("node.toml"),
            "dhcp.first is not an IPv4 address",
        )
    })?;
    let last: std::net::Ipv4Addr = node.cfg.dhcp.last.parse().map_err(|_| {
        SimError::state(
            node.state.join("node.toml"),
            "dhcp.last is not an IPv4 address",
        )
    })?;
    let leases_path = node.state.join("dhcp-leases.json");
    let mut leases: BTreeMap<String, String> = fs::read_to_string(&leases_path)
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or_default();
    rt.leases.clear();
    for (k, v) in &conf.opts {
        if !is_net_key(k) {
            continue;
        }
        let Ok(m) = parse_prop(k, v) else { continue };
        // a link that is down (`link_down=1`, the cable pulled) reaches no DHCP server
        if m.get("ip").map(String::as_str) != Some("dhcp")
            || m.get("link_down").map(String::as_str) == Some("1")
        {
            continue;
        }
        let mac = m.get("hwaddr").cloned().unwrap_or_default();
        let addr = match leases.get(&mac) {
            Some(a) => a.clone(),
            None => {
                let range = || {
                    (0..=(u32::from(last).saturating_sub(u32::from(first))))
                        .map(|i| ipv4_add(first, i).to_string())
                };
                let free = |leases: &BTreeMap<String, String>| {
                    let used: Vec<&String> = leases.values().collect();
                    range().find(|a| !used.contains(&a))
                };
                let n = match free(&leases) {
                    Some(n) => n,
                    None => {
                        // The range is full: like a DHCP server whose leases of departed clients expired, take
                        // back the addresses of MACs no container on this node has any more (a MAC that is
                        // still configured keeps its address, so a recreated container gets the same one).
                        let present = configured_macs(node);
                        leases.retain(|m, _| present.contains(m));
                        free(&leases).ok_or_else(|| {
                            SimError::die(format!(
                                "no free address in the simulated DHCP range for CT {vmid}"
                            ))
                        })?
                    }
                };
                leases.insert(mac.clone(), n.clone());
                n
            }
        };
        rt.leases.insert(
            m.get("name").cloned().unwrap_or_default(),
            format!("{addr}/{}", node.cfg.dhcp.prefix),
        );
    }
    write_file(
        &leases_path,
        &serde_json::to_string(&leases).unwrap_or_default(),
    )
}

/// PVE's start refuses an unprivileged container whose root disk or a mount point has `quota=1` (its current
/// values, before pending ones are applied: `PVE::API2::LXC::Status` vm_start).
fn unprivileged_with_quota(conf: &CtConf) -> bool {
    let yes = |v: Option<&String>| v.is_some_and(|v| crate::schema::parse_boolean(v) == Some(true));
    yes(conf.opts.get("unprivileged"))
        && conf
            .opts
            .iter()
            .filter(|(k, _)| is_disk_key(k))
            .any(|(k, v)| parse_prop(k, v).is_ok_and(|m| yes(m.get("quota"))))
}

/// `pct start`.
pub fn start(
    node: &Node,
    vmid: u32,
    skiplock: bool,
    out: &mut String,
    err: &mut String,
) -> Result<TaskOutcome> {
    let _held = lock_ct(node, vmid, false, err)?;
    let (mut conf, _) = read_conf(node, vmid)?;
    let mut rt = runtime(node, vmid);
    if rt.running {
        return Err(SimError::die(format!("CT {vmid} already running")));
    }
    task::run_task(node, out, "vzstart", &vmid.to_string(), |_log| {
        if !skiplock && conf.lock().map(|l| l != "mounted").unwrap_or(false) {
            check_lock(node, vmid, &conf)?;
        } else if !skiplock {
            fault_lock(node, vmid)?;
        }
        if conf.opts.get("template").map(|t| t == "1").unwrap_or(false) {
            return Err(SimError::die("you can't start a CT if it's a template"));
        }
        if unprivileged_with_quota(&conf) {
            return Err(SimError::die(
                "Quotas are not supported by unprivileged containers.",
            ));
        }
        sleep_ms(node.cfg.latency.start_ms);
        if !conf.pending.is_empty() || !conf.pending_delete.is_empty() {
            apply_pending(&mut conf);
            write_conf(node, vmid, &conf)?;
        }
        if crate::lxc::is_lxc(node) {
            rt.pid = crate::lxc::start(node, vmid, &conf, _log)?;
        } else {
            assign_leases(node, vmid, &conf, &mut rt)?;
            rt.pid = 40000 + (vmid % 20000);
        }
        rt.running = true;
        rt.started = now();
        rt.booted(&conf);
        save_runtime(node, vmid, &rt)
    })
}

/// `pct stop` (`shutdown` = false) or `pct shutdown`.
pub fn stop(
    node: &Node,
    vmid: u32,
    shutdown: bool,
    skiplock: bool,
    out: &mut String,
    err: &mut String,
) -> Result<TaskOutcome> {
    let _held = lock_ct(node, vmid, false, err)?;
    let (conf, _) = read_conf(node, vmid)?;
    let mut rt = runtime(node, vmid);
    if !rt.running {
        return Err(SimError::die(format!("CT {vmid} not running")));
    }
    let ttype = if shutdown { "vzshutdown" } else { "vzstop" };
    task::run_task(node, out, ttype, &vmid.to_string(), |_log| {
        if !skiplock && conf.lock().map(|l| l != "mounted").unwrap_or(false) {
            check_lock(node, vmid, &conf)?;
        } else if !skiplock {
            fault_lock(node, vmid)?;
        }
        sleep_ms(node.cfg.latency.stop_ms);
        if crate::lxc::is_lxc(node) {
            crate::lxc::stop(node, vmid, shutdown)?;
        }
        rt.stop();
        save_runtime(node, vmid, &rt)
    })
}

/// A power loss (`pvesim reboot`, memory backend): every container of the node is stopped at once, without a
/// task; configs, disks and locks stay as they were. Returns the vmids that were running.
pub fn power_loss(node: &Node) -> Result<Vec<u32>> {
    if crate::lxc::is_lxc(node) {
        return Err(SimError::Usage(
            "reboot simulates a power loss on the memory backend only".into(),
        ));
    }
    let mut stopped = Vec::new();
    for (vmid, _) in list(node) {
        let mut rt = runtime(node, vmid);
        if rt.running {
            rt.stop();
            save_runtime(node, vmid, &rt)?;
            stopped.push(vmid);
        }
    }
    Ok(stopped)
}

/// `pct shutdown [--timeout S] [--forceStop 1]`. On the memory backend a shutdown slower than the timeout (latency
/// `stop_ms`) fails its task with `container did not stop` after the timeout, as PVE's does, unless `forceStop`.
pub fn shutdown(
    node: &Node,
    vmid: u32,
    timeout_s: u64,
    force: bool,
    out: &mut String,
    err: &mut String,
) -> Result<TaskOutcome> {
    if crate::lxc::is_lxc(node) || force || node.cfg.latency.stop_ms <= timeout_s * 1000 {
        return stop(node, vmid, true, false, out, err);
    }
    let _held = lock_ct(node, vmid, false, err)?;
    read_conf(node, vmid)?;
    if !runtime(node, vmid).running {
        return Err(SimError::die(format!("CT {vmid} not running")));
    }
    task::run_task(node, out, "vzshutdown", &vmid.to_string(), |_log| {
        sleep_ms(timeout_s * 1000);
        Err(SimError::die("container did not stop"))
    })
}

/// `pct reboot`.
pub fn reboot(node: &Node, vmid: u32, out: &mut String, err: &mut String) -> Result<TaskOutcome> {
    let _held = lock_ct(node, vmid, false, err)?;
    let (mut conf, _) = read_conf(node, vmid)?;
    let mut rt = runtime(node, vmid);
    if !rt.running {
        return Err(SimError::die(format!("VM {vmid} not running")));
    }
    task::run_task(node, out, "vzreboot", &vmid.to_string(), |_log| {
        check_lock(node, vmid, &conf)?;
        sleep_ms(node.cfg.latency.stop_ms + node.cfg.latency.start_ms);
        apply_pending(&mut conf);
        write_conf(node, vmid, &conf)?;
        if crate::lxc::is_lxc(node) {
            crate::lxc::stop(node, vmid, true)?;
            rt.pid = crate::lxc::start(node, vmid, &conf, _log)?;
        } else {
            assign_leases(node, vmid, &conf, &mut rt)?;
        }
        rt.started = now();
        rt.booted(&conf);
        save_runtime(node, vmid, &rt)
    })
}
