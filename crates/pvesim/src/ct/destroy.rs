//! `pct destroy`: the volumes a container owns and their removal with its config.

use std::fs;

use super::values::is_disk_key;
use super::{
    check_lock, conf_path, lock_ct, read_conf, runtime, runtime_path, save_runtime, sleep_ms,
    write_conf,
};
use crate::ctconf::CtConf;
use crate::error::{Result, SimError};
use crate::node::Node;
use crate::storage;
use crate::task::{self, TaskOutcome};

pub(super) fn owned_volumes(conf: &CtConf, vmid: u32) -> Vec<String> {
    let mut v = Vec::new();
    for (k, val) in conf.opts.iter().chain(conf.pending.iter()) {
        if is_disk_key(k) || k.starts_with("unused") {
            let vol = val
                .split(',')
                .next()
                .unwrap_or("")
                .trim_start_matches("volume=")
                .to_string();
            if vol.starts_with('/') || !vol.contains(':') {
                continue;
            }
            let owner = vol.split(':').nth(1).and_then(|n| {
                let f = n.rsplit('/').next()?;
                f.strip_prefix("vm-")
                    .or_else(|| f.strip_prefix("subvol-"))?
                    .split('-')
                    .next()?
                    .parse::<u32>()
                    .ok()
            });
            if owner == Some(vmid) && !v.contains(&vol) {
                v.push(vol);
            }
        }
    }
    v
}

/// `pct destroy`.
pub fn destroy(
    node: &Node,
    vmid: u32,
    force: bool,
    purge: bool,
    unreferenced: bool,
    out: &mut String,
    err: &mut String,
) -> Result<TaskOutcome> {
    // PVE runs these checks before taking the config lock (so `CT is locked (create)` comes at once during a
    // create) and again after it.
    let early = |conf: &CtConf| -> Result<()> {
        if conf
            .opts
            .get("protection")
            .map(|p| p == "1")
            .unwrap_or(false)
        {
            return Err(SimError::die(format!(
                "can't remove CT {vmid} - protection mode enabled"
            )));
        }
        check_lock(node, vmid, conf)?;
        if runtime(node, vmid).running && !force {
            return Err(SimError::die(format!(
                "unable to destroy CT {vmid} - container is running"
            )));
        }
        Ok(())
    };
    early(&read_conf(node, vmid)?.0)?;
    let _held = lock_ct(node, vmid, false, err)?;
    let (mut conf, _) = read_conf(node, vmid)?;
    early(&conf)?;
    let mut rt = runtime(node, vmid);
    task::run_task(node, out, "vzdestroy", &vmid.to_string(), |log| {
        if rt.running {
            log.line(format!("forced to stop CT {vmid} before destroying!"));
            rt.running = false;
            save_runtime(node, vmid, &rt)?;
        }
        if purge {
            log.line(format!("purging CT {vmid} from related configurations.."));
        }
        conf.opts.insert("lock".into(), "destroyed".into());
        write_conf(node, vmid, &conf)?;
        sleep_ms(node.cfg.latency.destroy_ms);
        if crate::lxc::is_lxc(node) {
            crate::lxc::destroy(node, vmid)?;
        }
        for v in owned_volumes(&conf, vmid) {
            if let Err(e) = storage::free(node, &v) {
                log.warn(format!("{e}"));
            }
        }
        if unreferenced {
            for st in node
                .cfg
                .storage
                .iter()
                .filter(|s| s.enabled && s.content.iter().any(|c| c == "rootdir"))
            {
                for v in storage::list(node, st, None, Some(vmid)) {
                    let _ = storage::free(node, &v.volid);
                }
            }
        }
        let _ = fs::remove_file(runtime_path(node, vmid));
        fs::remove_file(conf_path(node, vmid))
            .map_err(|e| SimError::io(conf_path(node, vmid), e))?;
        // remove_vm_access: out of its pool (and its ACLs), with or without --purge
        crate::pools::remove_vm(node, vmid)
    })
}
