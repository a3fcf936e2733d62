//! What a real container shows: running or not and its pid (`lxc-info`), uptime, memory and
//! disk in use for `vmstatus`, and its interfaces (`ip -j addr` inside it) in PVE's shape.

use std::fs;
use std::path::Path;

use serde_json::{json, Value};

use super::config::Cgroups;
use super::run::{argv, run as run_cmd, Output};
use super::{dir, exec, lxc_argv, netns, LxcError, T_LXC};
use crate::node::Node;

/// Running or not, and the init's pid, from `lxc-info` in the node's namespace.
pub fn state(node: &Node, vmid: u32) -> (bool, u32) {
    if !dir(node, vmid).join("config").exists() {
        return (false, 0);
    }
    let a = lxc_argv(node, "lxc-info", vmid, &["-s", "-p", "-H"]);
    match run_cmd(&a, netns(node), T_LXC) {
        Ok(o) if o.ok() => parse_info(&o.stdout),
        Ok(o) => {
            tracing::debug!(vmid, stderr = %o.stderr.trim(), "lxc-info failed");
            (false, 0)
        }
        Err(e) => {
            tracing::warn!(vmid, error = %e, "lxc-info");
            (false, 0)
        }
    }
}

/// `lxc-info -s -p -H` output (`State:  RUNNING` / `PID:  1234`) as (running, pid).
pub(super) fn parse_info(text: &str) -> (bool, u32) {
    let mut running = false;
    let mut pid = 0;
    for l in text.lines() {
        match l.split_once(':').map(|(k, v)| (k.trim(), v.trim())) {
            Some(("State", v)) => running = v == "RUNNING",
            Some(("PID", v)) => pid = v.parse().unwrap_or(0),
            _ => {}
        }
    }
    (running, pid)
}

/// Seconds since the process `pid` started (host view).
pub(super) fn uptime_of(pid: u32) -> u64 {
    let Ok(stat) = fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return 0;
    };
    let after = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let start_ticks: u64 = after
        .split_whitespace()
        .nth(19)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    // /proc reports in USER_HZ, which is 100 on every Linux architecture.
    let hz = 100;
    let up: f64 = fs::read_to_string("/proc/uptime")
        .ok()
        .and_then(|u| u.split_whitespace().next()?.parse().ok())
        .unwrap_or(0.0);
    (up as u64).saturating_sub(start_ticks / hz)
}

/// The memory backend's runtime record, corrected by what LXC says.
pub fn observe(node: &Node, vmid: u32, mut rt: crate::ct::Runtime) -> crate::ct::Runtime {
    let (running, pid) = state(node, vmid);
    rt.running = running;
    rt.pid = pid;
    if running {
        rt.started = crate::task::now().saturating_sub(uptime_of(pid));
    } else {
        rt.started = 0;
    }
    rt
}

pub(super) fn cgroup_get(node: &Node, vmid: u32, key: &str) -> Option<u64> {
    let a = lxc_argv(node, "lxc-cgroup", vmid, &["--", key]);
    run_cmd(&a, netns(node), T_LXC)
        .ok()
        .filter(Output::ok)
        .and_then(|o| o.stdout.trim().parse().ok())
}

/// Fills the real figures of a running container into a `vmstatus` object: pid, uptime, memory in use, disk use.
pub fn stats(node: &Node, vmid: u32, v: &mut Value) {
    let pid = v["pid"].as_u64().unwrap_or(0) as u32;
    if pid == 0 {
        return;
    }
    v["uptime"] = json!(uptime_of(pid));
    let key = match Cgroups::detect(Path::new("/sys/fs/cgroup")) {
        Cgroups::V1 { .. } => "memory.usage_in_bytes",
        Cgroups::V2 => "memory.current",
    };
    if let Some(m) = cgroup_get(node, vmid, key) {
        v["mem"] = json!(m);
    }
    if let Some(used) = fs_used(&format!("/proc/{pid}/root/")) {
        v["disk"] = json!(used);
    }
}

/// Bytes in use on the file system holding `path` (statvfs).
pub(super) fn fs_used(path: &str) -> Option<u64> {
    let st = rustix::fs::statvfs(path).ok()?;
    Some(st.f_blocks.saturating_sub(st.f_bfree) * st.f_frsize)
}

/// `GET .../interfaces` of a running container: `ip -j addr` inside it, in PVE's shape (lower-case MACs).
pub fn interfaces(node: &Node, vmid: u32) -> Result<Value, LxcError> {
    let o = exec(node, vmid, &argv(&["ip", "-j", "addr", "show"]), None)?;
    if !o.ok() {
        return Err(LxcError::Ct {
            vmid,
            msg: format!("ip -j addr show failed: {}", o.stderr.trim()),
        });
    }
    parse_ip_json(&o.stdout).ok_or_else(|| LxcError::Ct {
        vmid,
        msg: "cannot parse the output of 'ip -j addr show'".into(),
    })
}

/// Maps `ip -j addr show` to the interfaces endpoint's JSON.
pub fn parse_ip_json(text: &str) -> Option<Value> {
    let v: Value = serde_json::from_str(text).ok()?;
    let mut out = Vec::new();
    for i in v.as_array()? {
        let name = i["ifname"].as_str().unwrap_or("").to_string();
        let mac = i["address"].as_str().unwrap_or("").to_ascii_lowercase();
        let mut addrs = Vec::new();
        let mut e = json!({"name": name, "hwaddr": mac, "hardware-address": mac});
        for a in i["addr_info"].as_array().into_iter().flatten() {
            let fam = a["family"].as_str().unwrap_or("");
            let ip = a["local"].as_str().unwrap_or("");
            let p = a["prefixlen"].as_u64().unwrap_or(0);
            if fam != "inet" && fam != "inet6" {
                continue;
            }
            if e.get(fam).is_none() {
                e[fam] = json!(format!("{ip}/{p}"));
            }
            addrs.push(json!({"ip-address": ip, "ip-address-type": fam, "prefix": p}));
        }
        e["ip-addresses"] = Value::Array(addrs);
        out.push(e);
    }
    Some(Value::Array(out))
}

#[cfg(test)]
mod tests {

    #[test]
    fn the_root_file_system_has_bytes_in_use() {
        assert!(fs_used("/").is_some_and(|b| b > 0));
        assert_eq!(fs_used("/no/such/dir"), None);
    }

    use super::*;

    #[test]
    fn ip_json_maps_to_pve_shape() {
        let t = r#"[{"ifindex":1,"ifname":"lo","address":"00:00:00:00:00:00","addr_info":[{"family":"inet","local":"127.0.0.1","prefixlen":8},{"family":"inet6","local":"::1","prefixlen":128}]},
                   {"ifindex":2,"ifname":"eth0","address":"BC:24:11:AA:BB:CC","addr_info":[{"family":"inet","local":"10.77.0.141","prefixlen":24}]}]"#;
        let v = parse_ip_json(t).unwrap();
        assert_eq!(v[1]["name"], "eth0");
        assert_eq!(v[1]["hwaddr"], "bc:24:11:aa:bb:cc");
        assert_eq!(v[1]["inet"], "10.77.0.141/24");
        assert_eq!(v[1]["ip-addresses"][0]["ip-address"], "10.77.0.141");
        assert_eq!(v[0]["inet6"], "::1/128");
        assert!(parse_ip_json("not json").is_none());
    }

    #[test]
    fn lxc_info_is_parsed() {
        assert_eq!(
            parse_info("State:          RUNNING\nPID:            2247\n"),
            (true, 2247)
        );
        assert_eq!(parse_info("State:          STOPPED\n"), (false, 0));
    }
}
