//! Resource pools, as pve-access-control keeps them in the cluster's `user.cfg` (`pool:NAME:COMMENT:VMS:STORAGE:`)
//! and pve-manager's `PVE/API2/Pool.pm` changes them (`GET/POST/PUT/DELETE /pools`): a guest is in at most one pool,
//! `pct create --pool` needs the pool to exist, and `pct destroy` takes the guest out of its pool.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::PathBuf;

use serde_json::{json, Value};

use crate::ctconf::{decode_text, encode_text};
use crate::error::{Result, SimError};
use crate::lock;
use crate::node::{write_file, Node};
use crate::schema::split_list;

/// One pool of `user.cfg`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Pool {
    pub comment: String,
    pub vms: BTreeSet<u32>,
    pub storage: BTreeSet<String>,
}

fn path(node: &Node) -> PathBuf {
    node.cluster().join("user.cfg")
}

/// The pools of the node's cluster, by name.
pub fn read(node: &Node) -> BTreeMap<String, Pool> {
    let text = fs::read_to_string(path(node)).unwrap_or_default();
    let mut out = BTreeMap::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("pool:") else {
            continue;
        };
        let f: Vec<&str> = rest.split(':').collect();
        let name = f.first().copied().unwrap_or_default().to_string();
        if name.is_empty() {
            continue;
        }
        let pool = Pool {
            comment: decode_text(f.get(1).copied().unwrap_or_default()),
            vms: split_list(f.get(2).copied().unwrap_or_default())
                .iter()
                .filter_map(|v| v.parse().ok())
                .collect(),
            storage: split_list(f.get(3).copied().unwrap_or_default())
                .into_iter()
                .collect(),
        };
        out.insert(name, pool);
    }
    out
}

fn write(node: &Node, pools: &BTreeMap<String, Pool>) -> Result<()> {
    let mut text = String::new();
    for (name, p) in pools {
        let vms: Vec<String> = p.vms.iter().map(u32::to_string).collect();
        let storage: Vec<&str> = p.storage.iter().map(String::as_str).collect();
        text.push_str(&format!(
            "pool:{name}:{}:{}:{}:\n",
            encode_text(&p.comment),
            vms.join(","),
            storage.join(",")
        ));
    }
    write_file(&path(node), &text)
}

/// Runs `f` on the pools under the cluster's user.cfg lock and writes them back when it succeeds.
fn change<T>(node: &Node, f: impl FnOnce(&mut BTreeMap<String, Pool>) -> Result<T>) -> Result<T> {
    let _held = lock::lock_blocking(&node.cluster().join("lock").join("user.cfg.lock"))?;
    let mut pools = read(node);
    let r = f(&mut pools)?;
    write(node, &pools)?;
    Ok(r)
}

/// The pool guest `vmid` is in.
pub fn pool_of(node: &Node, vmid: u32) -> Option<String> {
    read(node)
        .into_iter()
        .find(|(_, p)| p.vms.contains(&vmid))
        .map(|(n, _)| n)
}

/// `check_pool_exist` (a permission exception in PVE).
pub fn check_exists(node: &Node, pool: &str) -> Result<()> {
    if read(node).contains_key(pool) {
        Ok(())
    } else {
        Err(SimError::die(format!(
            "Permission check failed (pool '{pool}' does not exist)"
        )))
    }
}

/// `add_vm_to_pool` (after a create or clone with `--pool`).
pub fn add_vm(node: &Node, vmid: u32, pool: &str) -> Result<()> {
    change(node, |pools| {
        for p in pools.values_mut() {
            p.vms.remove(&vmid);
        }
        if let Some(p) = pools.get_mut(pool) {
            p.vms.insert(vmid);
        }
        Ok(())
    })
}

/// `remove_vm_access` (every destroy): the guest leaves its pool.
pub fn remove_vm(node: &Node, vmid: u32) -> Result<()> {
    if pool_of(node, vmid).is_none() {
        return Ok(());
    }
    change(node, |pools| {
        for p in pools.values_mut() {
            p.vms.remove(&vmid);
        }
        Ok(())
    })
}

/// `GET /pools`: `[{poolid, comment}]`, or with `poolid` that pool with its `members`.
pub fn index(node: &Node, poolid: Option<&str>) -> Result<Value> {
    let pools = read(node);
    match poolid {
        None => Ok(Value::Array(
            pools
                .iter()
                .map(|(n, p)| {
                    let mut e = json!({"poolid": n});
                    if !p.comment.is_empty() {
                        e["comment"] = json!(p.comment);
                    }
                    e
                })
                .collect(),
        )),
        Some(id) => {
            let p = pools
                .get(id)
                .ok_or_else(|| SimError::die(format!("pool '{id}' does not exist")))?;
            let mut members: Vec<Value> = p
                .vms
                .iter()
                .map(|v| {
                    json!({"id": format!("lxc/{v}"), "vmid": v, "type": "lxc", "node": node.name()})
                })
                .collect();
            members.extend(
                p.storage
                    .iter()
                    .map(|s| json!({"id": format!("storage/{}/{s}", node.name()), "storage": s, "type": "storage"})),
            );
            let mut e = json!({"poolid": id, "members": members});
            if !p.comment.is_empty() {
                e["comment"] = json!(p.comment);
            }
            Ok(Value::Array(vec![e]))
        }
    }
}

/// `POST /pools`.
pub fn create(node: &Node, poolid: &str, comment: Option<&str>) -> Result<()> {
    change(node, |pools| {
        if pools.contains_key(poolid) {
            return Err(SimError::die(format!("pool '{poolid}' already exists")));
        }
        match poolid.rsplit_once('/') {
            Some((parent, leaf)) => {
                if !pools.contains_key(parent) {
                    return Err(SimError::die(format!(
                        "parent '{parent}' of pool '{poolid}' does not exist"
                    )));
                }
                if !leaf.starts_with(|c: char| c.is_ascii_alphabetic()) {
                    return Err(SimError::die("pool name must start with a letter"));
                }
            }
            None if !poolid.starts_with(|c: char| c.is_ascii_alphabetic()) => {
                return Err(SimError::die("pool name must start with a letter"));
            }
            None => {}
        }
        pools.insert(
            poolid.to_string(),
            Pool {
                comment: comment.unwrap_or_default().to_string(),
                ..Pool::default()
            },
        );
        Ok(())
    })
}

/// `PUT /pools`: the comment, and guests or storages added (`allow-move`: out of another pool) or, with
/// `delete`, removed.
pub fn update(node: &Node, p: &BTreeMap<String, String>) -> Result<()> {
    let flag = |k: &str| {
        p.get(k)
            .is_some_and(|v| crate::schema::parse_boolean(v) == Some(true))
    };
    let poolid = p.get("poolid").cloned().unwrap_or_default();
    let delete = flag("delete");
    let allow_move = flag("allow-move");
    change(node, |pools| {
        if !pools.contains_key(&poolid) {
            return Err(SimError::die(format!("pool '{poolid}' does not exist")));
        }
        if let Some(c) = p.get("comment") {
            if let Some(pool) = pools.get_mut(&poolid) {
                pool.comment = c.clone();
            }
        }
        for v in split_list(p.get("vms").map(String::as_str).unwrap_or_default()) {
            let vmid: u32 = v.parse().unwrap_or_default();
            if delete {
                let pool = pools.get_mut(&poolid).expect("checked above");
                if !pool.vms.remove(&vmid) {
                    return Err(SimError::die(format!("VM {vmid} is not a pool member")));
                }
                continue;
            }
            if pools[&poolid].vms.contains(&vmid) {
                return Err(SimError::die(format!("VM {vmid} is already a pool member")));
            }
            if let Some(existing) = pools
                .iter()
                .find(|(_, x)| x.vms.contains(&vmid))
                .map(|(n, _)| n.clone())
            {
                if !allow_move {
                    return Err(SimError::die(format!(
                        "VM {vmid} belongs already to pool '{existing}' and 'allow-move' is not set"
                    )));
                }
                if let Some(x) = pools.get_mut(&existing) {
                    x.vms.remove(&vmid);
                }
            }
            pools
                .get_mut(&poolid)
                .expect("checked above")
                .vms
                .insert(vmid);
        }
        for s in split_list(p.get("storage").map(String::as_str).unwrap_or_default()) {
            let pool = pools.get_mut(&poolid).expect("checked above");
            if delete {
                if !pool.storage.remove(&s) {
                    return Err(SimError::die(format!("Storage '{s}' is not a pool member")));
                }
            } else if !pool.storage.insert(s.clone()) {
                return Err(SimError::die(format!(
                    "Storage '{s}' is already a pool member"
                )));
            }
        }
        Ok(())
    })
}

/// `DELETE /pools`: only an empty pool (no sub-pool, guest or storage).
pub fn delete(node: &Node, poolid: &str) -> Result<()> {
    change(node, |pools| {
        let Some(p) = pools.get(poolid) else {
            return Err(SimError::die(format!("pool '{poolid}' does not exist")));
        };
        let prefix = format!("{poolid}/");
        if let Some(sub) = pools.keys().find(|k| k.starts_with(&prefix)) {
            return Err(SimError::die(format!(
                "pool '{poolid}' is not empty (contains pool '{sub}')"
            )));
        }
        if let Some(v) = p.vms.iter().next() {
            return Err(SimError::die(format!(
                "pool '{poolid}' is not empty (contains VM {v})"
            )));
        }
        if let Some(s) = p.storage.iter().next() {
            return Err(SimError::die(format!(
                "pool '{poolid}' is not empty (contains storage '{s}')"
            )));
        }
        pools.remove(poolid);
        Ok(())
    })
}
