//! Config changes: `pct set` / `PUT .../config` (hot-pluggable keys, pending changes, unused
//! volumes) and `pct resize`.

use std::collections::BTreeMap;

use super::values::{
    finish_disk, is_disk_key, is_net_key, normalize_value, parse_prop, plan_disk, print_prop,
    DiskPlan,
};
use super::{
    check_lock, format_size, lock_ct, parse_size, read_conf, runtime, sleep_ms, write_conf,
};
use crate::ctconf::CtConf;
use crate::error::{Result, SimError};
use crate::node::Node;
use crate::schema;
use crate::storage;
use crate::task::{self, TaskOutcome};

pub(super) const HOT_KEYS: &[&str] = &[
    "description",
    "onboot",
    "startup",
    "protection",
    "hostname",
    "hookscript",
    "cores",
    "tags",
    "lock",
    "memory",
    "swap",
    "cpulimit",
    "cpuunits",
];

/// `pct set` / `PUT .../config`.
pub fn set(node: &Node, vmid: u32, p: &BTreeMap<String, String>, err: &mut String) -> Result<()> {
    let mut changes: BTreeMap<String, String> = p
        .iter()
        .filter(|(k, _)| !matches!(k.as_str(), "vmid" | "node" | "delete" | "revert" | "digest"))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let deletes = p
        .get("delete")
        .map(|d| schema::split_list(d))
        .unwrap_or_default();
    let reverts = p
        .get("revert")
        .map(|d| schema::split_list(d))
        .unwrap_or_default();
    if changes.is_empty() && deletes.is_empty() && reverts.is_empty() {
        return Err(SimError::die("no options specified"));
    }
    let _held = lock_ct(node, vmid, false, err)?;
    let (mut conf, raw) = read_conf(node, vmid)?;
    if let Some(d) = p.get("digest") {
        if *d != crate::ctconf::digest(&raw) {
            return Err(SimError::die(
                "detected modified configuration - file changed by other user? Try again.",
            ));
        }
    }
    if !(changes.len() == 1 && changes.contains_key("lock")) {
        check_lock(node, vmid, &conf)?;
    }
    if changes.contains_key("unprivileged") {
        return Err(SimError::param(
            "unprivileged",
            "unable to modify read-only option: 'unprivileged'",
        ));
    }
    if let Some(h) = changes.get("hookscript") {
        crate::storage::check_hookscript(node, h)?;
    }
    sleep_ms(node.cfg.latency.set_ms);
    let running = runtime(node, vmid).running;
    for d in &deletes {
        if matches!(d.as_str(), "memory" | "rootfs" | "ostype") {
            return Err(SimError::die(format!(
                "unable to delete required option '{d}'"
            )));
        }
        if !conf.opts.contains_key(d) && (d != "description" || conf.description.is_empty()) {
            err.push_str(&format!(
                "cannot delete '{d}' - not set in current configuration!\n"
            ));
            continue;
        }
        if running && !HOT_KEYS.contains(&d.as_str()) && !is_net_key(d) {
            conf.pending_delete.push(d.clone());
        } else if d == "description" {
            conf.description.clear();
        } else {
            let old = conf.opts.remove(d);
            if let (true, Some(old)) = (d.starts_with("mp"), old) {
                add_unused(&mut conf, &old);
            }
        }
    }
    for r in &reverts {
        conf.pending.remove(r);
        conf.pending_delete.retain(|x| x != r);
    }
    if let Some(desc) = changes.remove("description") {
        conf.description = crate::ctconf::stored_description(&desc);
    }
    for (k, v) in changes {
        // pve-container `update_pct_config`: a key given a value leaves the deletion queue.
        conf.pending_delete.retain(|d| *d != k);
        let value = if is_disk_key(&k) {
            let d = plan_disk(node, &k, &v, "local")?;
            match &d.alloc {
                Some((sid, size)) => {
                    let mut lines = Vec::new();
                    let volid = storage::alloc(node, sid, vmid, *size, &mut lines)?;
                    finish_disk(&d, &volid, *size)
                }
                None => {
                    let vol = d.opts.get("volume").cloned().unwrap_or_default();
                    let mut d2 = DiskPlan {
                        key: d.key.clone(),
                        opts: d.opts.clone(),
                        alloc: None,
                    };
                    d2.opts.remove("volume");
                    if vol.starts_with('/') {
                        finish_disk(&d2, &vol, 0)
                    } else {
                        existing_volume(node, &d2, &vol, err)?
                    }
                }
            }
        } else {
            normalize_value(node, &k, &v)?
        };
        // New mpN and devN are hot-plugged; a changed one waits for the next start.
        let hotplug = (is_disk_key(&k) && k != "rootfs") || is_dev_key(&k);
        if running
            && !HOT_KEYS.contains(&k.as_str())
            && !is_net_key(&k)
            && (!hotplug || conf.opts.contains_key(&k))
        {
            conf.pending.insert(k, value);
        } else {
            if let Some(old) = conf.opts.insert(k.clone(), value) {
                if k.starts_with("mp") && is_disk_key(&k) {
                    let oldvol = old.split(',').next().unwrap_or("").to_string();
                    if !conf.opts[&k].starts_with(&format!("{oldvol},")) {
                        add_unused(&mut conf, &old);
                    }
                }
            }
            conf.pending.remove(&k);
        }
    }
    cleanup_pending(&mut conf);
    write_conf(node, vmid, &conf)?;
    if running && crate::lxc::is_lxc(node) {
        crate::lxc::apply_limits(node, vmid, &conf)?;
    }
    Ok(())
}

fn is_dev_key(k: &str) -> bool {
    k.starts_with("dev") && k[3..].parse::<u32>().is_ok()
}

/// An existing volume given as `mpN`: its storage must exist (`parse_volname`); its size is rescanned, and a
/// volume that is not there only warns (PVE: `Could not rescan volume size`), leaving `size` out.
fn existing_volume(node: &Node, d: &DiskPlan, vol: &str, err: &mut String) -> Result<String> {
    let sid = vol.split(':').next().unwrap_or("");
    storage::get(node, sid)?;
    match storage::size_of(node, vol) {
        Ok(size) => Ok(finish_disk(d, vol, size)),
        Err(e) => {
            err.push_str(&format!("Could not rescan volume size - {e}\n"));
            let mut m = d.opts.clone();
            m.insert("volume".into(), vol.to_string());
            Ok(print_prop(&m, &["volume", "mp"]))
        }
    }
}

pub(super) fn add_unused(conf: &mut CtConf, old: &str) {
    let vol = old.split(',').next().unwrap_or("").to_string();
    if vol.starts_with('/') || vol.is_empty() {
        return;
    }
    let n = (0..256)
        .find(|i| !conf.opts.contains_key(&format!("unused{i}")))
        .unwrap_or(0);
    conf.opts.insert(format!("unused{n}"), vol);
}

/// pve-guest-common `cleanup_pending` (run by every `pct set`): a pending value equal to the one in effect is
/// dropped, and so is a pending deletion of a key that is not set. Setting a key back to what it is on a running
/// container therefore undoes a pending change of it, as `--revert` would.
fn cleanup_pending(conf: &mut CtConf) {
    let opts = &conf.opts;
    conf.pending.retain(|k, v| opts.get(k) != Some(v));
    conf.pending_delete.retain(|k| opts.contains_key(k));
}

pub(super) fn apply_pending(conf: &mut CtConf) {
    for (k, v) in std::mem::take(&mut conf.pending) {
        conf.opts.insert(k, v);
    }
    for d in std::mem::take(&mut conf.pending_delete) {
        // as at once on a stopped CT: a deleted mount point's volume stays, as unusedN
        if let (true, Some(old)) = (d.starts_with("mp"), conf.opts.remove(&d)) {
            add_unused(conf, &old);
        }
    }
}

/// `pct resize`.
pub fn resize(
    node: &Node,
    vmid: u32,
    disk: &str,
    size: &str,
    out: &mut String,
    err: &mut String,
) -> Result<TaskOutcome> {
    let _held = lock_ct(node, vmid, false, err)?;
    let (mut conf, _) = read_conf(node, vmid)?;
    check_lock(node, vmid, &conf)?;
    let Some(cur) = conf.opts.get(disk).cloned() else {
        return Err(SimError::die(format!(
            "unable to parse config line '{disk}'"
        )));
    };
    let mut m = parse_prop(disk, &cur)?;
    let volid = m.get("volume").cloned().unwrap_or_default();
    let old = storage::size_of(node, &volid)?;
    let (add, num) = match size.strip_prefix('+') {
        Some(s) => (true, s),
        None => (false, size),
    };
    let n = parse_size(num)
        .ok_or_else(|| SimError::param("size", "value does not match the regex pattern"))?;
    let new = if add { old + n } else { n };
    if new < old {
        return Err(SimError::die("unable to shrink disk size"));
    }
    if new == old {
        return Err(SimError::die("disk is already at specified size"));
    }
    task::run_task(node, out, "resize", &vmid.to_string(), |_log| {
        storage::resize(node, &volid, new)?;
        if crate::lxc::is_lxc(node) {
            crate::lxc::grow(node, vmid, &volid)?;
        }
        m.insert("size".into(), format_size(new));
        m.remove("volume");
        m.insert("volume".into(), volid.clone());
        let first: &[&str] = if disk == "rootfs" {
            &["volume"]
        } else {
            &["volume", "mp"]
        };
        conf.opts.insert(disk.to_string(), print_prop(&m, first));
        write_conf(node, vmid, &conf)
    })
}
