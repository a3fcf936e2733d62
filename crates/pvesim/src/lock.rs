//! Config locks as PVE takes them: one flock per guest (`<cluster>/lock/pve-config-<vmid>.lock`, reported as
//! `/run/lock/lxc/pve-config-<vmid>.lock`), waited for with a timeout, plus a cluster-wide lock that makes the
//! vmid reservation atomic and a node-wide one for storage allocation.
// pvesim simulates PVE: its timestamps and lock timeouts are the simulated node's real time
#![allow(clippy::disallowed_methods)]

use std::fs::{File, OpenOptions};
use std::path::Path;
use std::time::{Duration, Instant};

use crate::error::{Result, SimError};

/// A held flock; released on drop.
#[derive(Debug)]
pub struct Held {
    _file: File,
}

fn open(path: &Path) -> Result<File> {
    if let Some(d) = path.parent() {
        std::fs::create_dir_all(d).map_err(|e| SimError::io(d, e))?;
    }
    OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
        .map_err(|e| SimError::io(path, e))
}

/// Tries to take `path` exclusively until `timeout`; `busy_until` simulates another holder (a fault) until that
/// instant. Returns `Ok(None)` on timeout.
#[allow(clippy::incompatible_msrv)]
pub fn try_lock_for(
    path: &Path,
    timeout: Duration,
    busy_until: Option<Instant>,
) -> Result<Option<Held>> {
    let file = open(path)?;
    let deadline = Instant::now() + timeout;
    loop {
        let faulted = busy_until.map(|b| Instant::now() < b).unwrap_or(false);
        if !faulted {
            match file.try_lock() {
                Ok(()) => return Ok(Some(Held { _file: file })),
                Err(std::fs::TryLockError::WouldBlock) => {}
                Err(std::fs::TryLockError::Error(e)) => return Err(SimError::io(path, e)),
            }
        }
        if Instant::now() >= deadline {
            return Ok(None);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Blocks until `path` is held (for short internal critical sections).
#[allow(clippy::incompatible_msrv)]
pub fn lock_blocking(path: &Path) -> Result<Held> {
    let file = open(path)?;
    file.lock().map_err(|e| SimError::io(path, e))?;
    Ok(Held { _file: file })
}

/// Takes the config lock of `vmid` the way `lock_file_full` does: immediately if free, otherwise prints
/// `trying to acquire lock...` on `err` and waits; fails with `can't lock file ... - got timeout`.
pub fn lock_config(
    cluster: &Path,
    vmid: u32,
    timeout: Duration,
    busy_until: Option<Instant>,
    err: &mut String,
) -> Result<Held> {
    let path = cluster.join("lock").join(format!("pve-config-{vmid}.lock"));
    if let Some(h) = try_lock_for(&path, Duration::ZERO, busy_until)? {
        return Ok(h);
    }
    err.push_str("trying to acquire lock...");
    match try_lock_for(&path, timeout, busy_until)? {
        Some(h) => {
            err.push_str(" OK\n");
            Ok(h)
        }
        None => Err(SimError::die(format!(
            "can't lock file '/run/lock/lxc/pve-config-{vmid}.lock' - got timeout"
        ))),
    }
}
