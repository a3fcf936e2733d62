//! `pct template` and `pct clone` on the memory backend. A template cannot run and is cloned, linked (its disks
//! shared, on a storage that can: lvmthin, zfspool) or full (copied, to `--storage` or the source's); any other
//! container only fully. The clone gets the source's configuration with fresh MACs, its own hostname and disks,
//! no `template` flag; it is written with `lock: create` first (the id reserved cluster-wide), unlocked at the end,
//! and removed with its disks when the task fails, like a create.

use std::collections::BTreeMap;
use std::fs;

use super::values::{parse_prop, print_prop};
use super::{check_lock, conf_path, format_size, lock_ct, read_conf, runtime, write_conf};
use crate::ctconf::CtConf;
use crate::error::{Result, SimError};
use crate::lock;
use crate::node::Node;
use crate::schema;
use crate::storage;
use crate::task::{self, TaskOutcome};

/// Storage types whose volumes PVE can clone linked.
const LINKED_CLONE_KINDS: &[&str] = &["lvmthin", "zfspool"];

pub(super) fn is_template(c: &CtConf) -> bool {
    c.opts.get("template").is_some_and(|t| t == "1")
}

/// `pct template VMID`.
pub fn template(node: &Node, vmid: u32, err: &mut String) -> Result<()> {
    let _held = lock_ct(node, vmid, false, err)?;
    let (mut conf, _) = read_conf(node, vmid)?;
    check_lock(node, vmid, &conf)?;
    if is_template(&conf) {
        return Err(SimError::die("you can't convert a template to a template"));
    }
    if runtime(node, vmid).running {
        return Err(SimError::die(
            "you can't convert a CT to template if the CT is running",
        ));
    }
    conf.opts.insert("template".into(), "1".into());
    write_conf(node, vmid, &conf)
}

/// The disk keys of a config (`rootfs`, `mpN` with a storage volume).
fn volumes(conf: &CtConf) -> Vec<(String, BTreeMap<String, String>)> {
    conf.opts
        .iter()
        .filter(|(k, _)| *k == "rootfs" || super::values::is_disk_key(k))
        .filter_map(|(k, v)| parse_prop(k, v).ok().map(|m| (k.clone(), m)))
        .filter(|(_, m)| m.get("volume").is_some_and(|v| !v.starts_with('/')))
        .collect()
}

/// `pct clone SOURCE NEWID [--hostname H] [--full 0|1] [--storage S] [--description D]`.
pub fn clone(
    node: &Node,
    source: u32,
    p: &BTreeMap<String, String>,
    out: &mut String,
    err: &mut String,
) -> Result<TaskOutcome> {
    if crate::lxc::is_lxc(node) {
        return Err(SimError::die(
            "pct clone is simulated on the memory backend only",
        ));
    }
    let newid: u32 = p["newid"]
        .parse()
        .map_err(|_| SimError::param("newid", "value does not look like a valid VM ID"))?;
    let (src, _) = read_conf(node, source)?;
    check_lock(node, source, &src)?;
    let template = is_template(&src);
    let full = p
        .get("full")
        .map(|f| schema::parse_boolean(f) == Some(true))
        .unwrap_or(!template);
    if !full && !template {
        return Err(SimError::die(
            "linked clone of a CT that is not a template is not possible: give --full 1",
        ));
    }
    if !full && p.contains_key("storage") {
        return Err(SimError::param("storage", "only allowed for full clones"));
    }
    if !template && runtime(node, source).running {
        return Err(SimError::die(format!(
            "CT {source} is running: stop it, or clone a template"
        )));
    }
    let target = match p.get("storage") {
        Some(sid) => {
            let st = storage::get(node, sid)?;
            if !st.content.iter().any(|c| c == "rootdir") {
                return Err(SimError::die(format!(
                    "storage '{sid}' does not support container directories"
                )));
            }
            Some(sid.clone())
        }
        None => None,
    };
    let disks = volumes(&src);
    if !full {
        for (_, m) in &disks {
            let volid = &m["volume"];
            let (sid, _) = storage::split_volid(volid)?;
            let st = storage::get(node, &sid)?;
            if !LINKED_CLONE_KINDS.contains(&st.kind.as_str()) {
                return Err(SimError::die(format!(
                    "linked clone feature for '{volid}' is not available"
                )));
            }
        }
    }
    let _held = lock_ct(node, newid, true, err)?;
    {
        let _vl = lock::lock_blocking(&node.cluster().join("lock").join("vmlist.lock"))?;
        if let Some((n, ty)) = node.vmlist().get(&newid) {
            let what = if *ty == "qemu" { "VM" } else { "CT" };
            return Err(SimError::die(format!(
                "{what} {newid} already exists on node '{n}'"
            )));
        }
        let path = conf_path(node, newid);
        if let Some(d) = path.parent() {
            fs::create_dir_all(d).map_err(|e| SimError::io(d, e))?;
        }
        fs::write(&path, "lock: create\n").map_err(|e| SimError::io(&path, e))?;
    }
    let mut allocated: Vec<String> = Vec::new();
    let outcome = task::run_task(node, out, "vzclone", &source.to_string(), |log| {
        let r = (|| -> Result<()> {
            let mut conf = CtConf {
                description: p
                    .get("description")
                    .map(|d| crate::ctconf::stored_description(d))
                    .unwrap_or_else(|| src.description.clone()),
                ..CtConf::default()
            };
            for (k, v) in &src.opts {
                if matches!(k.as_str(), "template" | "lock") {
                    continue;
                }
                conf.opts.insert(k.clone(), v.clone());
            }
            conf.lxc = src.lxc.clone();
            if let Some(h) = p.get("hostname") {
                conf.opts.insert("hostname".into(), h.clone());
            }
            // A clone gets its own MACs.
            let nets: Vec<(String, String)> = conf
                .opts
                .iter()
                .filter(|(k, _)| super::values::is_net_key(k))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            for (k, v) in nets {
                let mut m = parse_prop(&k, &v)?;
                m.insert("hwaddr".into(), super::values::random_mac());
                conf.opts.insert(k, print_prop(&m, &["name"]));
            }
            for (key, m) in &disks {
                let volid = &m["volume"];
                let (sid, _) = storage::split_volid(volid)?;
                let to = if full {
                    target.clone().unwrap_or(sid)
                } else {
                    sid
                };
                let size = storage::size_of(node, volid)?;
                let mut lines = Vec::new();
                let r = storage::alloc(node, &to, newid, size, &mut lines);
                for l in lines {
                    log.line(l);
                }
                let new = r?;
                allocated.push(new.clone());
                log.line(if full {
                    format!("copying {volid} to {new}")
                } else {
                    format!("linked clone of {volid}: {new}")
                });
                let mut m2 = m.clone();
                m2.insert("volume".into(), new);
                m2.insert("size".into(), format_size(size));
                conf.opts
                    .insert(key.clone(), print_prop(&m2, &["volume", "mp"]));
            }
            write_conf(node, newid, &conf)
        })();
        if r.is_err() {
            for v in &allocated {
                let _ = storage::free(node, v);
            }
            let _ = fs::remove_file(conf_path(node, newid));
        }
        r.map_err(|e| match e {
            SimError::Die(m) => SimError::die(format!("clone failed: {m}")),
            other => other,
        })
    })?;
    Ok(outcome)
}
