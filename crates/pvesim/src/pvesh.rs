//! The `pvesh` command: API paths matched against the schema, parameters validated like pct's, the endpoints
//! of CONTRACT §4.3 served from the simulated state, task-returning calls printing their log then the UPID
//! (exit 0 even when the task failed), and output as `json`, `json-pretty` or `text`.

use std::collections::BTreeMap;

use serde_json::{json, Value};

use crate::ct;
use crate::error::{Result, SimError};
use crate::getopt::parse_and_validate;
use crate::json;
use crate::node::Node;
use crate::schema::{self, method_params};
use crate::storage;
use crate::task::{self, stderr_after, TaskOutcome};
use crate::Outcome;

enum Reply {
    Data(Value),
    Null,
    Task(TaskOutcome),
}

fn output_props() -> BTreeMap<String, Value> {
    let v = json!({
        "output-format": {"type": "string", "enum": ["text", "json", "json-pretty", "yaml"], "optional": 1},
        "noborder": {"type": "boolean", "optional": 1},
        "noheader": {"type": "boolean", "optional": 1},
        "human-readable": {"type": "boolean", "optional": 1},
        "quiet": {"type": "boolean", "optional": 1},
    });
    schema::expand(v.as_object().expect("object literal"))
}

/// Runs `pvesh <args>`.
pub fn run(node: &Node, args: &[String]) -> Outcome {
    let args: Vec<String> = args
        .iter()
        .filter(|a| *a != "--noproxy" && *a != "--nooutput")
        .cloned()
        .collect();
    let (Some(cmd), Some(path)) = (args.first(), args.get(1)) else {
        return Outcome::err(
            "ERROR: no command specified\nUSAGE: pvesh <COMMAND> [ARGS] [OPTIONS]\n",
            255,
        );
    };
    let method = match cmd.as_str() {
        "get" => "GET",
        "set" => "PUT",
        "create" => "POST",
        "delete" => "DELETE",
        "ls" | "usage" => "GET",
        other => {
            return Outcome::err(
                &format!(
                "ERROR: unknown command 'pvesh {other}'\nUSAGE: pvesh <COMMAND> [ARGS] [OPTIONS]\n"
            ),
                255,
            )
        }
    };
    let no_handler = || {
        let e = SimError::NoHandler {
            cmd: cmd.clone(),
            path: path.clone(),
        };
        Outcome::err(&e.render(None), e.exit_code())
    };
    let Some((tmpl, caps)) = schema::match_path(path) else {
        return no_handler();
    };
    if !schema::path_methods(&tmpl).iter().any(|m| m == method) {
        return no_handler();
    }
    let mut props = method_params(&tmpl, method)
        .map(|p| (*p).clone())
        .unwrap_or_default();
    props.extend(output_props());
    let usage = format!("pvesh {cmd} {path} [OPTIONS] [FORMAT_OPTIONS]");
    let p = match parse_and_validate(&props, &args[2..], &[], &caps) {
        Ok(p) => p,
        Err((w, e)) => {
            return Outcome::err(&format!("{w}{}", e.render(Some(&usage))), e.exit_code())
        }
    };
    let format = p
        .get("output-format")
        .cloned()
        .unwrap_or_else(|| "text".into());
    let target = match p.get("node") {
        Some(n) if n != node.name() => {
            if !node.cluster_nodes().contains(n) {
                return Outcome::err(&format!("hostname lookup '{n}' failed - failed to get address info for: {n}: Name or service not known\n"), 255);
            }
            match node.peer(n) {
                Ok(peer) => peer,
                Err(e) => return Outcome::err(&e.render(None), e.exit_code()),
            }
        }
        _ => node.clone(),
    };
    let mut out = String::new();
    let mut err = String::new();
    match handle(&target, &tmpl, method, &p, &mut out, &mut err) {
        Ok(Reply::Null) => Outcome {
            stdout: out,
            stderr: err,
            code: 0,
        },
        Ok(Reply::Data(v)) => {
            out.push_str(&render(&v, &format));
            Outcome {
                stdout: out,
                stderr: err,
                code: 0,
            }
        }
        Ok(Reply::Task(t)) => {
            out.push_str(&render(&json!(t.upid), &format));
            err.push_str(&stderr_after(&t));
            Outcome {
                stdout: out,
                stderr: err,
                code: 0,
            }
        }
        Err(e) => {
            err.push_str(&e.render(Some(&usage)));
            Outcome {
                stdout: out,
                stderr: err,
                code: e.exit_code(),
            }
        }
    }
}

fn render(v: &Value, format: &str) -> String {
    match format {
        "json" => format!("{}\n", json::compact(v)),
        "json-pretty" | "yaml" => format!("{}\n", json::pretty(v)),
        _ => match v {
            Value::String(s) => format!("{s}\n"),
            Value::Number(n) => format!("{n}\n"),
            Value::Null => String::new(),
            other => format!("{}\n", json::pretty(other)),
        },
    }
}

fn vmid(p: &BTreeMap<String, String>) -> u32 {
    p.get("vmid").and_then(|v| v.parse().ok()).unwrap_or(0)
}

fn flag(p: &BTreeMap<String, String>, k: &str) -> bool {
    p.get(k).map(|v| v == "1").unwrap_or(false)
}

fn config_json(node: &Node, vmid: u32, current: bool) -> Result<Value> {
    let (conf, raw) = ct::read_conf(node, vmid)?;
    let mut m = serde_json::Map::new();
    for (k, v) in conf.effective(current) {
        let ty = schema::create_param(&k)
            .and_then(|d| d.get("type"))
            .and_then(Value::as_str)
            .unwrap_or("string");
        let val = match ty {
            "integer" | "boolean" => v
                .parse::<i64>()
                .map(Value::from)
                .unwrap_or(Value::String(v)),
            _ => Value::String(v),
        };
        m.insert(k, val);
    }
    if !conf.lxc.is_empty() {
        m.insert(
            "lxc".into(),
            Value::Array(conf.lxc.iter().map(|(k, v)| json!([k, v])).collect()),
        );
    }
    m.insert("digest".into(), json!(crate::ctconf::digest(&raw)));
    Ok(Value::Object(m))
}

fn node_status(node: &Node) -> Value {
    let used: u64 = ct::list(node)
        .iter()
        .filter(|(id, _)| ct::runtime(node, *id).running)
        .map(|(id, c)| ct::vmstatus(node, *id, c)["mem"].as_u64().unwrap_or(0))
        .sum::<u64>()
        + (1 << 30);
    json!({
        "uptime": 1209600, "idle": 0, "cpu": 0, "wait": 0, "loadavg": ["0.12", "0.20", "0.25"],
        "kversion": "Linux 6.17.2-1-pve #1 SMP PREEMPT_DYNAMIC PMX 6.17.2-1 (2025-10-21T11:55Z)",
        "current-kernel": {"machine": "x86_64", "release": "6.17.2-1-pve", "sysname": "Linux",
            "version": "#1 SMP PREEMPT_DYNAMIC PMX 6.17.2-1 (2025-10-21T11:55Z)"},
        "boot-info": {"mode": "efi", "secureboot": 0},
        "cpuinfo": {"cores": node.cfg.cores, "cpus": node.cfg.cores, "sockets": 1, "user_hz": 100, "hvm": "1",
            "family": "6", "mhz": "3700.000", "model": "pvesim virtual CPU", "vendor": "GenuineIntel", "flags": "fpu vme de pse tsc"},
        "memory": {"total": node.cfg.memory, "used": used, "free": node.cfg.memory.saturating_sub(used),
            "available": node.cfg.memory.saturating_sub(used)},
        "ksm": {"shared": 0},
        "swap": {"free": 8589930496u64, "total": 8589930496u64, "used": 0},
        "pveversion": format!("pve-manager/{}/9e1e0a7c2b3d4f56", node.cfg.pve_version),
        "rootfs": {"total": 100861726720u64, "avail": 83343413248u64, "used": 12345678848u64, "free": 88516047872u64},
    })
}

fn storage_json(node: &Node, st: &crate::node::StorageCfg) -> Value {
    let mut v = json!({
        "storage": st.id, "type": st.kind, "content": st.content.join(","), "enabled": st.enabled as u8,
        "active": st.enabled as u8, "shared": st.shared as u8, "total": 0, "used": 0, "avail": 0,
    });
    if st.enabled {
        let used = storage::used(node, st);
        v["total"] = json!(st.capacity);
        v["used"] = json!(used);
        v["avail"] = json!(st.capacity.saturating_sub(used));
        if st.capacity > 0 {
            v["used_fraction"] = json!(used as f64 / st.capacity as f64);
        }
    }
    v
}

fn handle(
    node: &Node,
    tmpl: &str,
    method: &str,
    p: &BTreeMap<String, String>,
    out: &mut String,
    err: &mut String,
) -> Result<Reply> {
    let id = vmid(p);
    Ok(match (method, tmpl) {
        ("GET", "/version") => {
            let v = &node.cfg.pve_version;
            let release = v.rsplit_once('.').map_or(v.as_str(), |(r, _)| r);
            Reply::Data(json!({"version": v, "release": release, "repoid": "9e1e0a7c2b3d4f56"}))
        }
        ("GET", "/nodes") => Reply::Data(Value::Array(
            node.cluster_nodes()
                .iter()
                .filter_map(|n| node.peer(n).ok())
                .map(|n| json!({
                    "id": format!("node/{}", n.name()), "node": n.name(), "type": "node", "status": "online", "level": "",
                    "uptime": 1209600, "cpu": 0, "maxcpu": n.cfg.cores, "maxmem": n.cfg.memory, "mem": 1u64 << 30,
                    "maxdisk": 100861726720u64, "disk": 12345678848u64,
                    "ssl_fingerprint": "AB:CD:EF:01:23:45:67:89:AB:CD:EF:01:23:45:67:89:AB:CD:EF:01:23:45:67:89:AB:CD:EF:01:23:45:67:89",
                }))
                .collect(),
        )),
        ("GET", "/nodes/{node}/status") => Reply::Data(node_status(node)),
        ("GET", "/nodes/{node}/lxc") => {
            Reply::Data(Value::Array(ct::list(node).iter().map(|(i, c)| ct::vmstatus(node, *i, c)).collect()))
        }
        ("POST", "/nodes/{node}/lxc") => Reply::Task(ct::create(node, p, out, err)?),
        ("GET", "/nodes/{node}/lxc/{vmid}/status/current") => {
            let (c, _) = ct::read_conf(node, id)?;
            let mut v = ct::vmstatus(node, id, &c);
            v["ha"] = json!({"managed": 0});
            Reply::Data(v)
        }
        ("GET", "/nodes/{node}/lxc/{vmid}/config") => Reply::Data(config_json(node, id, flag(p, "current"))?),
        ("PUT", "/nodes/{node}/lxc/{vmid}/config") => {
            ct::set(node, id, p, err)?;
            Reply::Null
        }
        ("GET", "/nodes/{node}/lxc/{vmid}/pending") => {
            let (c, _) = ct::read_conf(node, id)?;
            let mut items = Vec::new();
            for (k, v) in &c.opts {
                let mut e = json!({"key": k, "value": v});
                if let Some(n) = c.pending.get(k) {
                    e["pending"] = json!(n);
                }
                if c.pending_delete.contains(k) {
                    e["delete"] = json!(1);
                }
                items.push(e);
            }
            for (k, n) in &c.pending {
                if !c.opts.contains_key(k) {
                    items.push(json!({"key": k, "pending": n}));
                }
            }
            Reply::Data(Value::Array(items))
        }
        ("GET", "/nodes/{node}/lxc/{vmid}/interfaces") => Reply::Data(ct::interfaces(node, id)?),
        ("POST", "/nodes/{node}/lxc/{vmid}/status/start") => Reply::Task(ct::start(node, id, flag(p, "skiplock"), out, err)?),
        ("POST", "/nodes/{node}/lxc/{vmid}/status/stop") => Reply::Task(ct::stop(node, id, false, flag(p, "skiplock"), out, err)?),
        ("POST", "/nodes/{node}/lxc/{vmid}/status/shutdown") => Reply::Task(ct::shutdown(node, id, p.get("timeout").and_then(|t| t.parse().ok()).unwrap_or(60), flag(p, "forceStop"), out, err)?),
        ("POST", "/nodes/{node}/lxc/{vmid}/status/reboot") => Reply::Task(ct::reboot(node, id, out, err)?),
        ("DELETE", "/nodes/{node}/lxc/{vmid}") => Reply::Task(ct::destroy(
            node,
            id,
            flag(p, "force"),
            flag(p, "purge"),
            flag(p, "destroy-unreferenced-disks"),
            out,
            err,
        )?),
        ("GET", "/nodes/{node}/lxc/{vmid}/snapshot") => Reply::Data(ct::snapshots(node, id)?),
        ("POST", "/nodes/{node}/lxc/{vmid}/snapshot") => Reply::Task(ct::snapshot(
            node,
            id,
            &p["snapname"],
            p.get("description").map(String::as_str),
            out,
            err,
        )?),
        ("DELETE", "/nodes/{node}/lxc/{vmid}/snapshot/{snapname}") => {
            Reply::Task(ct::delsnapshot(node, id, &p["snapname"], out, err)?)
        }
        ("POST", "/nodes/{node}/lxc/{vmid}/snapshot/{snapname}/rollback") => {
            Reply::Task(ct::rollback(node, id, &p["snapname"], flag(p, "start"), out, err)?)
        }
        ("PUT", "/nodes/{node}/lxc/{vmid}/resize") => Reply::Task(ct::resize(node, id, &p["disk"], &p["size"], out, err)?),
        ("POST", "/nodes/{node}/lxc/{vmid}/migrate") => {
            Reply::Task(ct::migrate(node, id, &p["target"], flag(p, "restart"), flag(p, "online"), out, err)?)
        }
        ("GET", "/nodes/{node}/storage") => {
            let mut v = Vec::new();
            if let Some(s) = p.get("storage") {
                if node.storage(s).is_none() {
                    return Err(SimError::param("storage", "No such storage."));
                }
            }
            for st in &node.cfg.storage {
                if p.get("storage").map(|s| s != &st.id).unwrap_or(false) {
                    continue;
                }
                if flag(p, "enabled") && !st.enabled {
                    continue;
                }
                if let Some(c) = p.get("content") {
                    if !st.enabled || !c.split(',').any(|x| st.content.iter().any(|y| y == x)) {
                        continue;
                    }
                }
                v.push(storage_json(node, st));
            }
            Reply::Data(Value::Array(v))
        }
        ("GET", "/nodes/{node}/storage/{storage}/status") => {
            let st = storage::get(node, &p["storage"])?;
            Reply::Data(storage_json(node, st))
        }
        ("GET", "/nodes/{node}/storage/{storage}/content") => {
            let st = storage::get(node, &p["storage"])?;
            let vid = p.get("vmid").and_then(|v| v.parse().ok());
            let items = storage::list(node, st, p.get("content").map(String::as_str), vid)
                .into_iter()
                .map(|v| {
                    let mut e = json!({"volid": v.volid, "format": v.format, "content": v.content, "size": v.size, "ctime": v.ctime});
                    if let Some(o) = v.vmid {
                        e["vmid"] = json!(o);
                    }
                    e
                })
                .collect();
            Reply::Data(Value::Array(items))
        }
        ("POST", "/nodes/{node}/storage/{storage}/download-url") => Reply::Task(download_url(node, p, out)?),
        ("GET", "/nodes/{node}/network") => {
            let want = p.get("type").map(String::as_str);
            let items = node
                .cfg
                .bridge
                .iter()
                .filter(|_| matches!(want, None | Some("bridge") | Some("any_bridge")))
                .map(|b| {
                    let mut e = json!({"iface": b.name, "type": "bridge", "method": "static", "method6": "manual",
                        "families": ["inet"], "priority": 4, "autostart": 1, "active": 1, "bridge_stp": "off", "bridge_fd": "0"});
                    if let Some(c) = &b.cidr {
                        let (a, n) = c.split_once('/').unwrap_or((c, "24"));
                        e["cidr"] = json!(c);
                        e["address"] = json!(a);
                        e["netmask"] = json!(n);
                    }
                    if let Some(g) = &b.gateway {
                        e["gateway"] = json!(g);
                    }
                    if let Some(pt) = &b.ports {
                        e["bridge_ports"] = json!(pt);
                    }
                    if b.mtu != 1500 {
                        e["mtu"] = json!(b.mtu);
                    }
                    e
                })
                .collect();
            Reply::Data(Value::Array(items))
        }
        ("GET", "/nodes/{node}/tasks/{upid}/status") => Reply::Data(task::status(node, &p["upid"])?),
        ("GET", "/nodes/{node}/tasks/{upid}/log") => {
            let start = p.get("start").and_then(|s| s.parse().ok()).unwrap_or(0);
            let limit = p.get("limit").and_then(|s| s.parse().ok()).unwrap_or(50);
            Reply::Data(task::log(node, &p["upid"], start, limit)?)
        }
        ("GET", "/cluster/nextid") => {
            let list = node.vmlist();
            if let Some(v) = p.get("vmid") {
                let n: u32 = v.parse().unwrap_or(0);
                if list.contains_key(&n) {
                    return Err(SimError::param("vmid", format!("VM {n} already exists")));
                }
                Reply::Data(json!(n))
            } else {
                let id = (100u32..1_000_000).find(|i| !list.contains_key(i)).unwrap_or(0);
                Reply::Data(json!(id))
            }
        }
        ("GET", "/cluster/status") => Reply::Data(cluster_status(node)),
        ("GET", "/pools") => Reply::Data(crate::pools::index(node, p.get("poolid").map(String::as_str))?),
        ("POST", "/pools") => {
            crate::pools::create(node, &p["poolid"], p.get("comment").map(String::as_str))?;
            Reply::Null
        }
        ("PUT", "/pools") => {
            crate::pools::update(node, p)?;
            Reply::Null
        }
        ("DELETE", "/pools") => {
            crate::pools::delete(node, &p["poolid"])?;
            Reply::Null
        }
        ("GET", "/cluster/resources") => {
            let want = p.get("type").map(String::as_str);
            let pools = crate::pools::read(node);
            let mut items = Vec::new();
            for n in node.cluster_nodes() {
                let Ok(peer) = node.peer(&n) else { continue };
                if matches!(want, None | Some("node")) {
                    items.push(json!({"id": format!("node/{n}"), "node": n, "type": "node", "status": "online",
                        "maxcpu": peer.cfg.cores, "maxmem": peer.cfg.memory, "cpu": 0, "level": ""}));
                }
                if matches!(want, None | Some("vm")) {
                    for (id, c) in ct::list(&peer) {
                        let s = ct::vmstatus(&peer, id, &c);
                        let mut e = json!({"id": format!("lxc/{id}"), "vmid": id, "node": n, "type": "lxc",
                            "status": s["status"], "name": s["name"], "template": s.get("template").cloned().unwrap_or(json!(0)),
                            "uptime": s["uptime"], "maxcpu": s["cpus"], "cpu": 0, "maxmem": s["maxmem"], "mem": s["mem"],
                            "memhost": s["mem"], "maxdisk": s["maxdisk"], "disk": s["disk"], "netin": 0, "netout": 0,
                            "diskread": 0, "diskwrite": 0});
                        for k in ["tags", "lock"] {
                            if let Some(v) = s.get(k) {
                                e[k] = v.clone();
                            }
                        }
                        if let Some((pool, _)) = pools.iter().find(|(_, x)| x.vms.contains(&id)) {
                            e["pool"] = json!(pool);
                        }
                        items.push(e);
                    }
                }
                if matches!(want, None | Some("storage")) {
                    for st in &peer.cfg.storage {
                        let sj = storage_json(&peer, st);
                        items.push(json!({"id": format!("storage/{n}/{}", st.id), "storage": st.id, "node": n,
                            "type": "storage", "plugintype": st.kind, "content": sj["content"], "shared": sj["shared"],
                            "status": if st.enabled { "available" } else { "unknown" }, "maxdisk": sj["total"], "disk": sj["used"]}));
                    }
                }
            }
            if matches!(want, None | Some("pool")) {
                for (name, pool) in &pools {
                    let mut e = json!({"id": format!("/pool/{name}"), "pool": name, "type": "pool"});
                    if !pool.comment.is_empty() {
                        e["comment"] = json!(pool.comment);
                    }
                    items.push(e);
                }
            }
            Reply::Data(Value::Array(items))
        }
        ("GET", "/nodes/{node}/aplinfo") => Reply::Data(crate::pveam::aplinfo(node)),
        ("POST", "/nodes/{node}/aplinfo") => Reply::Task(crate::pveam::download(node, &p["storage"], &p["template"], out)?),
        (m, t) => {
            return Err(SimError::NoHandler {
                cmd: match m {
                    "GET" => "get",
                    "PUT" => "set",
                    "POST" => "create",
                    _ => "delete",
                }
                .into(),
                path: t.into(),
            })
        }
    })
}

fn download_url(
    node: &Node,
    p: &BTreeMap<String, String>,
    out: &mut String,
) -> Result<TaskOutcome> {
    let st = storage::get(node, &p["storage"])?;
    let content = p.get("content").cloned().unwrap_or_default();
    if !matches!(
        st.kind.as_str(),
        "dir" | "nfs" | "cifs" | "cephfs" | "btrfs"
    ) {
        return Err(SimError::die(format!(
            "can't upload to storage type '{}', not a file based storage!",
            st.kind
        )));
    }
    if !st.content.contains(&content) {
        return Err(SimError::die(format!(
            "storage '{}' is not configured for content-type '{content}'",
            st.id
        )));
    }
    let filename: String = p
        .get("filename")
        .map(|f| {
            f.rsplit('/')
                .next()
                .unwrap_or(f)
                .chars()
                .map(|c| {
                    if c.is_ascii_alphanumeric() || "_.-".contains(c) {
                        c
                    } else {
                        '_'
                    }
                })
                .collect()
        })
        .unwrap_or_default();
    if content == "vztmpl" && storage::template_format(&filename).is_none() {
        return Err(SimError::param("filename", "wrong file extension"));
    }
    if content == "vztmpl" && p.contains_key("compression") {
        return Err(SimError::die("decompression not supported for vztmpl"));
    }
    let url = p.get("url").cloned().unwrap_or_default();
    let sub = if content == "vztmpl" {
        "template/cache"
    } else {
        "template/iso"
    };
    let dest = node.storage_dir(st).join(sub).join(&filename);
    let checksum = p.get("checksum").cloned();
    task::run_task(node, out, "download", &filename, |log| {
        let src = url.strip_prefix("file://").map(str::to_string);
        let data = match src {
            Some(path) => std::fs::read(&path).map_err(|e| SimError::die(format!("download failed: {path}: {e}")))?,
            None => {
                return Err(SimError::die(format!(
                    "download failed: pvesim has no network access, use a file:// URL or place the file in {}",
                    dest.parent().map(|d| d.display().to_string()).unwrap_or_default()
                )))
            }
        };
        let algo = p
            .get("checksum-algorithm")
            .cloned()
            .unwrap_or_else(|| "sha256".into());
        let got = match algo.as_str() {
            "sha512" => {
                use sha2::Digest;
                hex::encode(sha2::Sha512::digest(&data))
            }
            "sha384" => {
                use sha2::Digest;
                hex::encode(sha2::Sha384::digest(&data))
            }
            "sha224" => {
                use sha2::Digest;
                hex::encode(sha2::Sha224::digest(&data))
            }
            _ => {
                use sha2::Digest;
                hex::encode(sha2::Sha256::digest(&data))
            }
        };
        if dest.exists() {
            match &checksum {
                Some(c) if *c == got => {
                    log.line("calculating checksum of existing file...OK, got correct file already, no need to download");
                    return Ok(());
                }
                Some(c) => {
                    return Err(SimError::die(format!(
                        "checksum mismatch: got '{got}' != expect '{c}', aborting"
                    )))
                }
                None => {
                    return Err(SimError::die(format!(
                        "refusing to override existing file '{}'",
                        dest.display()
                    )))
                }
            }
        }
        log.line(format!("downloading {url} to {}", dest.display()));
        if let Some(c) = &checksum {
            if *c != got {
                return Err(SimError::die(format!(
                    "checksum mismatch: got '{got}' != expect '{c}', aborting"
                )));
            }
            log.line("calculating checksum...OK, checksum verified");
        }
        if let Some(d) = dest.parent() {
            std::fs::create_dir_all(d).map_err(|e| SimError::io(d, e))?;
        }
        std::fs::write(&dest, &data).map_err(|e| SimError::io(&dest, e))?;
        log.line(format!(
            "download of '{url}' to '{}' finished",
            dest.display()
        ));
        Ok(())
    })
}

/// `GET /cluster/status` (pve-manager `get_status`): the cluster entry and one entry per member; a standalone
/// node answers only its own entry (`nodeid` 0).
fn cluster_status(node: &Node) -> Value {
    let ip = |n: &Node| {
        n.cfg
            .bridge
            .iter()
            .find_map(|b| b.cidr.as_deref())
            .and_then(|c| c.split('/').next())
            .unwrap_or("127.0.0.1")
            .to_owned()
    };
    let Some(name) = node.cluster_name() else {
        return json!([{"type": "node", "id": format!("node/{}", node.name()), "name": node.name(),
            "ip": ip(node), "local": 1, "nodeid": 0, "online": 1, "level": ""}]);
    };
    let members = node.cluster_nodes();
    let mut items = vec![json!({"type": "cluster", "id": "cluster", "name": name,
        "nodes": members.len(), "quorate": 1, "version": members.len()})];
    for (i, n) in members.iter().enumerate() {
        let Ok(peer) = node.peer(n) else { continue };
        items.push(
            json!({"type": "node", "id": format!("node/{n}"), "name": n, "nodeid": i + 1,
            "local": u8::from(n == node.name()), "online": 1, "ip": ip(&peer), "level": ""}),
        );
    }
    Value::Array(items)
}
