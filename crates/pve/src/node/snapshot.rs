//! Snapshots of a container: `pct snapshot`, `pct delsnapshot`, `pct rollback` (task commands: a failed task is
//! a non-zero exit), and the list as the API gives it (`GET /nodes/{node}/lxc/{vmid}/snapshot`; `pct
//! listsnapshot` prints a tree meant for people). PVE takes a snapshot only when every volume is on a storage that
//! can (lvmthin, zfspool, rbd, btrfs) and there is no bind mount (`snapshot feature is not available`).

use serde::{Deserialize, Serialize};

use super::*;

/// One snapshot of a container (the list's `current` entry left out).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Snapshot {
    pub name: String,
    #[serde(default)]
    pub description: String,
    /// Unix seconds; 0 when PVE has none.
    #[serde(default)]
    pub snaptime: u64,
    /// The snapshot this one was taken after, if any.
    #[serde(default)]
    pub parent: Option<String>,
}

/// A snapshot name as PVE's `pve-configid` takes it (a letter, then letters, digits, `_` or `-`; at most 40), and
/// not one PVE reserves (`current`, `vzdump`).
pub fn check_snapshot_name(vmid: u32, name: &str) -> Result<(), PveError> {
    let ok = name.len() >= 2
        && name.len() <= 40
        && name.starts_with(|c: char| c.is_ascii_alphabetic())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        && name != "current"
        && name != "vzdump";
    if ok {
        Ok(())
    } else {
        Err(PveError::invalid(
            Some(vmid),
            "snapname",
            name,
            "a letter, then letters, digits, '_' or '-' (2 to 40), not current or vzdump",
        ))
    }
}

impl Node {
    /// `pct snapshot VMID NAME [--description TEXT]`.
    pub async fn snapshot(
        &self,
        vmid: u32,
        name: &str,
        description: Option<&str>,
    ) -> Result<(), PveError> {
        argv::check_vmid(vmid)?;
        check_snapshot_name(vmid, name)?;
        let mut args = vec!["snapshot".to_string(), vmid.to_string(), name.to_string()];
        if let Some(d) = description.filter(|d| !d.is_empty()) {
            args.push("--description".into());
            args.push(d.to_string());
        }
        let cmd = self.pct(args, self.timeouts.set);
        self.exec(cmd, Some(vmid)).await?;
        Ok(())
    }

    /// `pct delsnapshot VMID NAME`.
    pub async fn delete_snapshot(&self, vmid: u32, name: &str) -> Result<(), PveError> {
        argv::check_vmid(vmid)?;
        check_snapshot_name(vmid, name)?;
        let cmd = self.pct(
            vec!["delsnapshot".into(), vmid.to_string(), name.to_string()],
            self.timeouts.set,
        );
        self.exec(cmd, Some(vmid)).await?;
        Ok(())
    }

    /// `pct rollback VMID NAME [--start 1]`: PVE stops a running container first; `start` starts it afterwards.
    pub async fn rollback(&self, vmid: u32, name: &str, start: bool) -> Result<(), PveError> {
        argv::check_vmid(vmid)?;
        check_snapshot_name(vmid, name)?;
        let mut args = vec!["rollback".into(), vmid.to_string(), name.to_string()];
        if start {
            args.push("--start".into());
            args.push("1".into());
        }
        let cmd = self.pct(args, self.timeouts.power + self.timeouts.set);
        self.exec(cmd, Some(vmid)).await?;
        Ok(())
    }

    /// The container's snapshots, oldest first: a parent before its children, then by `snaptime` and name.
    pub async fn snapshots(&self, vmid: u32) -> Result<Vec<Snapshot>, PveError> {
        argv::check_vmid(vmid)?;
        let mut list: Vec<Snapshot> = self
            .get(
                &format!("{}/snapshot", self.lxc_path(vmid)),
                &[],
                Some(vmid),
                |s| crate::parse::parse_json("GET /nodes/{node}/lxc/{vmid}/snapshot", s),
            )
            .await?;
        list.retain(|s| s.name != "current");
        // Parents before children (snaptime has seconds only), then by time and name.
        let parents: std::collections::BTreeMap<String, Option<String>> = list
            .iter()
            .map(|s| (s.name.clone(), s.parent.clone()))
            .collect();
        let depth = |name: &str| {
            let mut d = 0usize;
            let mut at = parents.get(name).cloned().flatten();
            while let Some(p) = at {
                d += 1;
                if d > parents.len() {
                    break; // a cycle PVE would not write
                }
                at = parents.get(&p).cloned().flatten();
            }
            d
        };
        list.sort_by_cached_key(|s| (depth(&s.name), s.snaptime, s.name.clone()));
        Ok(list)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshot_names_follow_pve_configid() {
        for ok in ["before-upgrade", "s1", "nightly_2026_12_07"] {
            assert!(check_snapshot_name(100, ok).is_ok(), "{ok}");
        }
        for bad in [
            "current",
            "vzdump",
            "1st",
            "a",
            "with space",
            "a;b",
            &"x".repeat(41),
        ] {
            assert!(check_snapshot_name(100, bad).is_err(), "{bad}");
        }
    }
}
