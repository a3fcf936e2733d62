//! `pct migrate` inside the simulated cluster: the config moves to the target node, volumes
//! to the same storage id there. As PVE's `PVE::LXC::Migrate::prepare`, every volume's storage must be
//! available on the target node with `rootdir` content, else the task fails before anything moves (a running
//! container keeps running).

use std::fs;

use super::destroy::owned_volumes;
use super::power::assign_leases;
use super::{
    check_lock, conf_path, lock_ct, read_conf, runtime, runtime_path, save_runtime, write_conf,
};
use crate::error::{Result, SimError};
use crate::node::Node;
use crate::storage;
use crate::task::{self, now, TaskOutcome};

/// `pct migrate <vmid> <target> [--restart]` inside the simulated cluster: moves the config file (volumes are
/// moved to the same storage id of the target node).
pub fn migrate(
    node: &Node,
    vmid: u32,
    target: &str,
    restart: bool,
    online: bool,
    out: &mut String,
    err: &mut String,
) -> Result<TaskOutcome> {
    if target == node.name() {
        return Err(SimError::die("target is local node."));
    }
    if !node.cluster_nodes().iter().any(|n| n == target) {
        return Err(SimError::die(format!("no such cluster node '{target}'")));
    }
    let peer = node.peer(target)?;
    let _held = lock_ct(node, vmid, false, err)?;
    let (mut conf, _) = read_conf(node, vmid)?;
    check_lock(node, vmid, &conf)?;
    let rt = runtime(node, vmid);
    if rt.running && !restart && !online {
        return Err(SimError::die(
            "lxc live migration is currently not implemented",
        ));
    }
    if rt.running && online && !restart {
        return Err(SimError::die(
            "lxc live migration is currently not implemented",
        ));
    }
    task::run_task(node, out, "vzmigrate", &vmid.to_string(), |log| {
        if let Err(why) = check_target_storages(&peer, &conf, vmid) {
            // AbstractMigrate: the reason is logged, the task fails with "migration aborted".
            log.line(format!(
                "ERROR: migration aborted (duration 00:00:00): {why}"
            ));
            return Err(SimError::die("migration aborted"));
        }
        log.line(format!(
            "starting migration of CT {vmid} to node '{target}'"
        ));
        if rt.running {
            log.line(format!("shutdown CT {vmid}"));
            if crate::lxc::is_lxc(node) {
                crate::lxc::stop(node, vmid, true)?;
            }
        }
        conf.opts.insert("lock".into(), "migrate".into());
        write_conf(node, vmid, &conf)?;
        for v in owned_volumes(&conf, vmid) {
            let src = storage::volume_path(node, &v)?;
            let dst = storage::volume_path(&peer, &v)?;
            if let Some(d) = dst.parent() {
                fs::create_dir_all(d).map_err(|e| SimError::io(d, e))?;
            }
            fs::rename(&src, &dst)
                .or_else(|_| fs::copy(&src, &dst).and_then(|_| fs::remove_file(&src)))
                .map_err(|e| SimError::io(&src, e))?;
            log.line(format!("volume '{v}' is '{v}' on the target"));
        }
        conf.opts.remove("lock");
        write_conf(&peer, vmid, &conf)?;
        fs::remove_file(conf_path(node, vmid))
            .map_err(|e| SimError::io(conf_path(node, vmid), e))?;
        let _ = fs::remove_file(runtime_path(node, vmid));
        if crate::lxc::is_lxc(node) {
            crate::lxc::migrate(node, &peer, vmid)?;
        }
        if rt.running && crate::lxc::is_lxc(&peer) {
            let mut rt2 = rt.clone();
            rt2.pid = crate::lxc::start(&peer, vmid, &conf, log)?;
            rt2.started = now();
            save_runtime(&peer, vmid, &rt2)?;
            log.line(format!("start CT {vmid} on node '{target}'"));
        } else if rt.running {
            let mut rt2 = rt.clone();
            assign_leases(&peer, vmid, &conf, &mut rt2)?;
            rt2.started = now();
            save_runtime(&peer, vmid, &rt2)?;
            log.line(format!("start CT {vmid} on node '{target}'"));
        }
        log.line("migration finished successfully (duration 00:00:01)");
        Ok(())
    })
}

/// PVE's prepare step: each volume's storage is enabled on the target (`storage 'X' is not available on node
/// 'T'` when the target does not have it, `storage 'X' is disabled`) and holds `rootdir` content there.
fn check_target_storages(
    peer: &Node,
    conf: &crate::ctconf::CtConf,
    vmid: u32,
) -> std::result::Result<(), String> {
    for vol in owned_volumes(conf, vmid) {
        let Ok((sid, _)) = storage::split_volid(&vol) else {
            continue;
        };
        let Some(st) = peer.storage(&sid) else {
            return Err(format!(
                "storage '{sid}' is not available on node '{}'",
                peer.name()
            ));
        };
        if !st.enabled {
            return Err(format!("storage '{sid}' is disabled"));
        }
        if !st.content.iter().any(|c| c == "rootdir") {
            return Err(format!(
                "{vol}: content type 'rootdir' is not available on storage '{sid}'"
            ));
        }
    }
    Ok(())
}
