//! `pct snapshot`, `pct delsnapshot`, `pct rollback` and the snapshot list (`GET .../snapshot`), as
//! pve-guest-common's AbstractConfig and pve-container's Snapshot API do them: a snapshot is a `[name]` section of
//! the config (the current config without `description`, `lock`, `unusedN`, with `snaptime` and the snapshot's own
//! description), the main section's `parent` names the latest; only storages that can snapshot (lvmthin, zfspool,
//! rbd, btrfs) take one, and a bind mount blocks it. The memory backend keeps configurations only (no volume data).

use super::clone::is_template;
use super::{check_lock, lock_ct, read_conf, runtime, save_runtime, write_conf};
use crate::ctconf::{stored_description, CtConf};
use crate::error::{Result, SimError};
use crate::node::Node;
use crate::storage;
use crate::task::{self, TaskOutcome};

use super::values::{is_disk_key, parse_prop};

/// Storage types whose container volumes (raw, subvol) PVE can snapshot.
const SNAPSHOT_KINDS: &[&str] = &["lvmthin", "zfspool", "rbd", "btrfs"];

/// `unusedN`: a volume the config keeps but mounts nowhere.
fn is_unused_key(k: &str) -> bool {
    k.strip_prefix("unused")
        .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

/// `has_feature('snapshot')`: every volume (rootfs, mpN) on a storage that snapshots; a bind mount has none.
fn can_snapshot(node: &Node, conf: &CtConf) -> bool {
    conf.opts
        .iter()
        .filter(|(k, _)| *k == "rootfs" || is_disk_key(k))
        .all(|(k, v)| {
            let Ok(m) = parse_prop(k, v) else {
                return false;
            };
            let volid = m.get("volume").cloned().unwrap_or_default();
            if volid.starts_with('/') {
                return false;
            }
            storage::split_volid(&volid)
                .ok()
                .and_then(|(sid, _)| storage::get(node, &sid).ok())
                .is_some_and(|st| SNAPSHOT_KINDS.contains(&st.kind.as_str()))
        })
}

/// `__snapshot_copy_config`: what a snapshot keeps of a config.
fn copy_config(from: &CtConf) -> CtConf {
    let mut c = CtConf {
        lxc: from.lxc.clone(),
        ..CtConf::default()
    };
    for (k, v) in &from.opts {
        if matches!(
            k.as_str(),
            "snapstate" | "snaptime" | "vmstate" | "lock" | "digest" | "description"
        ) || is_unused_key(k)
        {
            continue;
        }
        c.opts.insert(k.clone(), v.clone());
    }
    c
}

fn not_there(snapname: &str) -> SimError {
    SimError::die(format!("snapshot '{snapname}' does not exist"))
}

/// `pct snapshot VMID SNAPNAME [--description TEXT]`.
pub fn snapshot(
    node: &Node,
    vmid: u32,
    snapname: &str,
    description: Option<&str>,
    out: &mut String,
    err: &mut String,
) -> Result<TaskOutcome> {
    if snapname == "current" {
        return Err(SimError::die(
            "unable to use snapshot name 'current' (reserved name)",
        ));
    }
    if snapname == "vzdump" {
        return Err(SimError::die(
            "unable to use snapshot name 'vzdump' (reserved name)",
        ));
    }
    if crate::lxc::is_lxc(node) {
        // The lxc backend's containers have real root file systems this simulation does not snapshot.
        return Err(SimError::die(
            "pct snapshot is simulated on the memory backend only",
        ));
    }
    let _held = lock_ct(node, vmid, false, err)?;
    let (mut conf, _) = read_conf(node, vmid)?;
    task::run_task(node, out, "vzsnapshot", &vmid.to_string(), |_log| {
        if is_template(&conf) {
            return Err(SimError::die(
                "you can't take a snapshot if it's a template",
            ));
        }
        check_lock(node, vmid, &conf)?;
        if conf.snapshot(snapname).is_some() {
            return Err(SimError::die(format!(
                "snapshot name '{snapname}' already used"
            )));
        }
        if !can_snapshot(node, &conf) {
            return Err(SimError::die("snapshot feature is not available"));
        }
        // A snapshot that names the new one as its parent would make a cycle: PVE drops that reference.
        for (_, s) in conf.snapshots.iter_mut() {
            if s.opts.get("parent").map(String::as_str) == Some(snapname) {
                s.opts.remove("parent");
            }
        }
        let mut snap = copy_config(&conf);
        snap.opts.insert("snaptime".into(), task::now().to_string());
        if let Some(d) = description.filter(|d| !d.is_empty()) {
            snap.description = stored_description(d);
        }
        conf.snapshots.push((snapname.to_string(), snap));
        conf.opts.insert("parent".into(), snapname.to_string());
        write_conf(node, vmid, &conf)
    })
}

/// `pct delsnapshot VMID SNAPNAME [--force]`: the section goes, and whatever named it as parent gets its parent.
pub fn delsnapshot(
    node: &Node,
    vmid: u32,
    snapname: &str,
    out: &mut String,
    err: &mut String,
) -> Result<TaskOutcome> {
    let _held = lock_ct(node, vmid, false, err)?;
    let (mut conf, _) = read_conf(node, vmid)?;
    task::run_task(node, out, "vzdelsnapshot", &vmid.to_string(), |_log| {
        let Some(snap) = conf.snapshot(snapname).cloned() else {
            return Err(not_there(snapname));
        };
        if is_template(&conf) {
            return Err(SimError::die(
                "you can't delete a snapshot if vm is a template",
            ));
        }
        check_lock(node, vmid, &conf)?;
        let new_parent = snap.opts.get("parent").cloned();
        let unlink = |c: &mut CtConf| {
            if c.opts.get("parent").map(String::as_str) == Some(snapname) {
                match &new_parent {
                    Some(p) => c.opts.insert("parent".into(), p.clone()),
                    None => c.opts.remove("parent"),
                };
            }
        };
        unlink(&mut conf);
        for (_, s) in conf.snapshots.iter_mut() {
            unlink(s);
        }
        conf.snapshots.retain(|(n, _)| n != snapname);
        write_conf(node, vmid, &conf)
    })
}

/// `pct rollback VMID SNAPNAME [--start]`: a running container is stopped first; the config becomes the
/// snapshot's (description, unused volumes and the snapshots kept), `parent` the snapshot.
pub fn rollback(
    node: &Node,
    vmid: u32,
    snapname: &str,
    start: bool,
    out: &mut String,
    err: &mut String,
) -> Result<TaskOutcome> {
    let outcome = {
        let _held = lock_ct(node, vmid, false, err)?;
        let (conf, _) = read_conf(node, vmid)?;
        task::run_task(node, out, "vzrollback", &vmid.to_string(), |_log| {
            if is_template(&conf) {
                return Err(SimError::die("you can't rollback if vm is a template"));
            }
            let Some(snap) = conf.snapshot(snapname).cloned() else {
                return Err(not_there(snapname));
            };
            check_lock(node, vmid, &conf)?;
            let mut rt = runtime(node, vmid);
            if rt.running {
                rt.stop();
                save_runtime(node, vmid, &rt)?;
            }
            let mut next = copy_config(&snap);
            next.description = conf.description.clone();
            for (k, v) in conf.opts.iter().filter(|(k, _)| is_unused_key(k)) {
                next.opts.insert(k.clone(), v.clone());
            }
            next.snapshots = conf.snapshots.clone();
            next.opts.insert("parent".into(), snapname.to_string());
            write_conf(node, vmid, &next)
        })?
    };
    if start && outcome.ok() {
        let t = super::start(node, vmid, false, out, err)?;
        if !t.ok() {
            return Ok(t);
        }
    }
    Ok(outcome)
}

/// `GET /nodes/{node}/lxc/{vmid}/snapshot`: each snapshot (`name`, `description`, `snaptime`, `parent`), then
/// `current` (its `parent` the latest snapshot, `running` 1 when it runs).
pub fn snapshots(node: &Node, vmid: u32) -> Result<serde_json::Value> {
    let (conf, _) = read_conf(node, vmid)?;
    let mut out = Vec::new();
    for (name, s) in &conf.snapshots {
        let snaptime = s
            .opts
            .get("snaptime")
            .and_then(|t| t.parse::<u64>().ok())
            .unwrap_or(0);
        let mut e = serde_json::json!({
            "name": name,
            "snaptime": snaptime,
            "description": s.description.trim_end_matches('\n'),
        });
        if let Some(p) = s.opts.get("parent") {
            e["parent"] = serde_json::json!(p);
        }
        out.push(e);
    }
    let mut current = serde_json::json!({
        "name": "current",
        "description": "You are here!",
        "running": u8::from(runtime(node, vmid).running),
    });
    if let Some(p) = conf.opts.get("parent") {
        current["parent"] = serde_json::json!(p);
    }
    out.push(current);
    Ok(serde_json::Value::Array(out))
}

/// `pct listsnapshot`: pve-guest-common's `print_snapshot_tree` over the list: roots then children, each level
/// sorted by `snaptime` with `current` (no time) last, `"{prefix} {name:<30-len(prefix)} {time:<23} {description}"`,
/// the prefix `` `-> `` growing by one space per level; times as `%F %H:%M:%S` (UTC here: pvesim has no zone).
pub fn snapshot_tree(list: &serde_json::Value) -> String {
    use std::collections::BTreeMap;
    let items: Vec<&serde_json::Value> = list
        .as_array()
        .map(|a| a.iter().collect())
        .unwrap_or_default();
    let names: std::collections::BTreeSet<&str> =
        items.iter().filter_map(|e| e["name"].as_str()).collect();
    // children by parent (a parent that is not in the list makes a root); `current` (no time) sorts last
    let mut kids: BTreeMap<Option<String>, Vec<usize>> = BTreeMap::new();
    for (i, e) in items.iter().enumerate() {
        let parent = e["parent"]
            .as_str()
            .filter(|p| names.contains(p))
            .map(String::from);
        kids.entry(parent).or_default().push(i);
    }
    let time = |e: &serde_json::Value| {
        if e["name"] == "current" {
            u64::MAX
        } else {
            e["snaptime"].as_u64().unwrap_or(0)
        }
    };
    for v in kids.values_mut() {
        v.sort_by_key(|i| time(items[*i]));
    }
    fn walk(
        out: &mut String,
        prefix: &str,
        i: usize,
        items: &[&serde_json::Value],
        kids: &BTreeMap<Option<String>, Vec<usize>>,
    ) {
        let e = items[i];
        let name = e["name"].as_str().unwrap_or_default();
        let description = e["description"]
            .as_str()
            .filter(|d| !d.is_empty())
            .unwrap_or("no-description");
        // `m/(.*)$/m`: the first line
        let description = description.lines().next().unwrap_or_default();
        let when = if name == "current" {
            String::new()
        } else {
            utc(e["snaptime"].as_u64().unwrap_or(0))
        };
        let width = 30usize.saturating_sub(prefix.len());
        out.push_str(&format!(
            "{prefix} {name:<width$} {when:<23} {description}\n"
        ));
        let deeper = format!(" {prefix}");
        for c in kids.get(&Some(name.to_string())).into_iter().flatten() {
            walk(out, &deeper, *c, items, kids);
        }
    }
    let mut out = String::new();
    for root in kids.get(&None).into_iter().flatten() {
        walk(&mut out, "`->", *root, &items, &kids);
    }
    out
}

/// Unix seconds as `YYYY-MM-DD HH:MM:SS` (UTC), by the civil-from-days algorithm.
fn utc(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tree_is_printed_as_pct_listsnapshot_does() {
        let list = serde_json::json!([
            {"name": "after", "snaptime": 1_765_107_000u64, "description": "", "parent": "before"},
            {"name": "before", "snaptime": 1_765_106_000u64, "description": "first line\nbefore the upgrade"},
            {"name": "current", "description": "You are here!", "running": 0, "parent": "after"}
        ]);
        let text = snapshot_tree(&list);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3, "{text}");
        assert!(lines[0].starts_with("`-> before "), "{text}");
        assert!(
            lines[0].ends_with(" 2025-12-07 11:13:20     first line"),
            "{text}"
        );
        assert!(lines[1].starts_with(" `-> after "), "{text}");
        assert!(lines[1].ends_with("no-description"), "{text}");
        assert!(lines[2].starts_with("  `-> current "), "{text}");
        assert_eq!(utc(0), "1970-01-01 00:00:00");
    }
}
