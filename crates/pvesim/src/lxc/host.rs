//! What the host must offer the `lxc` backend: root, the LXC tools on the PATH, the node's
//! network namespace, and subordinate ids for unprivileged containers.

use std::fs;
use std::path::Path;

use super::{idmap_base, netns, LxcError};
use crate::node::Node;

pub(super) fn on_path(tool: &str) -> bool {
    std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).any(|d| d.join(tool).is_file()))
        .unwrap_or(false)
}

/// What the host must offer: root, LXC installed, the node's namespace (when named).
pub fn check_host(node: &Node) -> Result<(), LxcError> {
    use std::os::unix::fs::MetadataExt;
    if fs::metadata("/proc/self")
        .map(|m| m.uid())
        .unwrap_or(u32::MAX)
        != 0
    {
        return Err(LxcError::Host(
            "real containers need root (run as root or use --backend memory)".into(),
        ));
    }
    for t in ["lxc-start", "lxc-info", "lxc-attach", "mkfs.ext4", "tar"] {
        if !on_path(t) {
            return Err(LxcError::Host(format!(
                "'{t}' not found on PATH (install lxc, e2fsprogs, tar: scripts/testbed/setup does)"
            )));
        }
    }
    if let Some(ns) = netns(node) {
        if !Path::new("/run/netns").join(ns).exists() {
            return Err(LxcError::Netns {
                netns: ns.into(),
                msg: format!("/run/netns/{ns} does not exist (scripts/testbed/netns add {ns} IP)"),
            });
        }
    }
    Ok(())
}

/// Unprivileged containers need `root:BASE:65536` in /etc/subuid and /etc/subgid (newuidmap checks them).
pub(super) fn check_subids(node: &Node) -> Result<(), LxcError> {
    let base = u64::from(idmap_base(node));
    for f in ["/etc/subuid", "/etc/subgid"] {
        let text = fs::read_to_string(f).unwrap_or_default();
        let ok = text.lines().any(|l| {
            let p: Vec<&str> = l.trim().split(':').collect();
            p.len() == 3
                && (p[0] == "root" || p[0] == "0")
                && match (p[1].parse::<u64>(), p[2].parse::<u64>()) {
                    (Ok(s), Ok(n)) => s <= base && base + 65536 <= s + n,
                    _ => false,
                }
        });
        if !ok {
            return Err(LxcError::Host(format!(
                "unprivileged containers need 'root:{base}:65536' in {f} (scripts/testbed/setup adds it)"
            )));
        }
    }
    Ok(())
}
