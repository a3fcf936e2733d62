//! What the node reports about its containers: `vmstatus` (one CT) and the list of all CTs.

use std::fs;

use serde_json::{json, Value};

use super::{parse_size, runtime};
use crate::ctconf::CtConf;
use crate::node::{Node, GIB};
use crate::task::now;

/// `vmstatus` for one CT: the fields of `/nodes/{node}/lxc` and `pct status --verbose`.
pub fn vmstatus(node: &Node, vmid: u32, conf: &CtConf) -> Value {
    let rt = runtime(node, vmid);
    let o = &conf.opts;
    let int = |k: &str| o.get(k).and_then(|v| v.parse::<u64>().ok());
    let memory = int("memory").unwrap_or(512) << 20;
    let swap = int("swap").map(|s| s << 20).unwrap_or(0);
    let cpus: Value = if let Some(c) = int("cores") {
        json!(c)
    } else if let Some(c) = o
        .get("cpulimit")
        .and_then(|v| v.parse::<f64>().ok())
        .filter(|c| *c > 0.0)
    {
        json!(c)
    } else {
        json!(node.cfg.cores)
    };
    let rootsize = o
        .get("rootfs")
        .and_then(|r| r.split(',').find_map(|p| p.strip_prefix("size=")))
        .and_then(parse_size)
        .unwrap_or(4 * GIB);
    let name = o
        .get("hostname")
        .map(|h| h.split_whitespace().collect::<String>())
        .unwrap_or_else(|| format!("CT{vmid}"));
    let mut v = json!({
        "vmid": vmid, "name": name, "type": "lxc", "status": if rt.running { "running" } else { "stopped" },
        "cpus": cpus, "maxmem": memory, "maxswap": swap, "maxdisk": rootsize, "cpu": 0,
        "mem": 0, "swap": 0, "disk": 0, "uptime": 0, "netin": 0, "netout": 0, "diskread": 0, "diskwrite": 0,
    });
    if rt.running {
        v["mem"] = json!((memory / 16).min(96 << 20));
        v["disk"] = json!(rootsize / 6);
        v["uptime"] = json!(now().saturating_sub(rt.started));
        v["pid"] = json!(rt.pid);
        if crate::lxc::is_lxc(node) {
            crate::lxc::stats(node, vmid, &mut v);
        }
        for k in [
            "pressurecpusome",
            "pressurecpufull",
            "pressureiosome",
            "pressureiofull",
            "pressurememorysome",
            "pressurememoryfull",
        ] {
            v[k] = json!("0.00");
        }
    }
    if let Some(t) = o.get("tags") {
        v["tags"] = json!(t);
    }
    if let Some(l) = o.get("lock") {
        v["lock"] = json!(l);
    }
    if o.get("template").map(|t| t == "1").unwrap_or(false) {
        v["template"] = json!(1);
    }
    v
}

/// All CTs of this node, by vmid.
pub fn list(node: &Node) -> Vec<(u32, CtConf)> {
    let mut out = Vec::new();
    let Ok(rd) = fs::read_dir(node.conf_dir()) else {
        return out;
    };
    for e in rd.flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        let Some(id) = name
            .strip_suffix(".conf")
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        if let Ok(raw) = fs::read_to_string(e.path()) {
            out.push((id, CtConf::parse(&raw)));
        }
    }
    out.sort_by_key(|(id, _)| *id);
    out
}
