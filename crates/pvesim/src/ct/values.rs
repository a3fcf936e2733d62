//! Normalisation of `pct` option values as PVE stores them: property strings, network
//! interfaces (generated MACs), tags, and the disk plans of `rootfs`/`mpN` (storage, size, volume).

use std::collections::BTreeMap;

use rand::Rng;

use super::format_size;
use crate::error::{Result, SimError};
use crate::node::{Node, GIB};
use crate::schema::{self, parse_property_string, property_format};
use crate::storage;

pub(super) fn random_mac() -> String {
    let mut r = rand::rng();
    format!(
        "BC:24:11:{:02X}:{:02X}:{:02X}",
        r.random::<u8>(),
        r.random::<u8>(),
        r.random::<u8>()
    )
}

/// `print_property_string`: the default key (or `name`, `mp`) first, then the rest alphabetically.
pub(super) fn print_prop(m: &BTreeMap<String, String>, first: &[&str]) -> String {
    let mut parts = Vec::new();
    for f in first {
        if let Some(v) = m.get(*f) {
            if *f == "volume" {
                parts.push(v.clone());
            } else {
                parts.push(format!("{f}={v}"));
            }
        }
    }
    for (k, v) in m {
        if !first.contains(&k.as_str()) {
            parts.push(format!("{k}={v}"));
        }
    }
    parts.join(",")
}

pub(super) fn parse_prop(param: &str, value: &str) -> Result<BTreeMap<String, String>> {
    let base: String = param
        .trim_end_matches(|c: char| c.is_ascii_digit())
        .to_string();
    let key = if base == "rootfs" {
        "rootfs".to_string()
    } else {
        format!("{base}0")
    };
    let f =
        property_format(&key).ok_or_else(|| SimError::die(format!("no format for '{param}'")))?;
    parse_property_string(f, value, param)
        .map_err(|e| SimError::param(param, format!("invalid format - {e}")))
}

/// Normalises a netN value: stored form with a fresh MAC if none was given; checks the bridge exists.
pub(super) fn normalize_net(node: &Node, param: &str, value: &str) -> Result<String> {
    let mut m = parse_prop(param, value)?;
    m.entry("hwaddr".into()).or_insert_with(random_mac);
    if let Some(h) = m.get_mut("hwaddr") {
        *h = h.to_ascii_uppercase();
    }
    m.insert("type".into(), "veth".into());
    let host_managed = m
        .get("host-managed")
        .is_some_and(|v| schema::parse_boolean(v) == Some(true));
    if host_managed && m.get("ip6").map(String::as_str) == Some("auto") {
        return Err(SimError::die(
            "SLAAC is not supported for host-managed network configuration",
        ));
    }
    if let Some(b) = m.get("bridge") {
        match node.cfg.bridge.iter().find(|x| &x.name == b) {
            None => return Err(SimError::die(format!("bridge '{b}' does not exist"))),
            Some(br) => {
                if let Some(mtu) = m.get("mtu").and_then(|x| x.parse::<u32>().ok()) {
                    if mtu > br.mtu {
                        return Err(SimError::die(format!(
                            "{param}: MTU size '{mtu}' is bigger than bridge MTU '{}'",
                            br.mtu
                        )));
                    }
                }
            }
        }
    }
    Ok(print_prop(&m, &["name"]))
}

pub(super) fn normalize_tags(v: &str) -> String {
    let mut t: Vec<String> = schema::split_list(v)
        .into_iter()
        .map(|s| s.to_lowercase())
        .collect();
    t.sort();
    t.dedup();
    t.join(";")
}

/// A planned disk: `rootfs`/`mpN` with a `STORAGE:GiB` allocation or an existing volume.
pub(super) struct DiskPlan {
    pub(super) key: String,
    pub(super) opts: BTreeMap<String, String>,
    pub(super) alloc: Option<(String, u64)>,
}

pub(super) fn plan_disk(
    node: &Node,
    key: &str,
    value: &str,
    default_storage: &str,
) -> Result<DiskPlan> {
    let mut opts = parse_prop(key, value)?;
    let vol = opts.get("volume").cloned().unwrap_or_default();
    if key.starts_with("mp") && !opts.contains_key("mp") {
        return Err(SimError::param(
            key,
            "invalid format - format error\nmp: property is missing and it is not optional\n",
        ));
    }
    let re = regex::Regex::new(r"^([^:\s]+):(\d+(\.\d+)?)$").expect("static regex");
    let alloc = if let Some(c) = re.captures(&vol) {
        Some((
            c[1].to_string(),
            (c[2].parse::<f64>().unwrap_or(0.0) * GIB as f64) as u64,
        ))
    } else if let Ok(g) = vol.parse::<f64>() {
        Some((default_storage.to_string(), (g * GIB as f64) as u64))
    } else {
        None
    };
    if let Some((sid, _)) = &alloc {
        let st = storage::get(node, sid)?;
        if !st.enabled {
            return Err(SimError::die(format!("storage '{sid}' is disabled")));
        }
        if !st.content.iter().any(|c| c == "rootdir") {
            return Err(SimError::param(
                "storage",
                format!("storage '{sid}' does not support container directories"),
            ));
        }
        opts.remove("volume");
    }
    Ok(DiskPlan {
        key: key.to_string(),
        opts,
        alloc,
    })
}

pub(super) fn finish_disk(d: &DiskPlan, volid: &str, size: u64) -> String {
    let mut m = d.opts.clone();
    m.insert("volume".into(), volid.to_string());
    // Bind and device mounts have no size (CONTRACT §2.4: `mp0: /mnt/bindmounts/shared,mp=/shared`).
    if !volid.starts_with('/') {
        m.insert("size".into(), format_size(size));
    }
    print_prop(&m, &["volume", "mp"])
}

pub(super) fn is_disk_key(k: &str) -> bool {
    k == "rootfs" || (k.starts_with("mp") && k[2..].parse::<u32>().is_ok())
}

pub(super) fn is_net_key(k: &str) -> bool {
    k.starts_with("net") && k[3..].parse::<u32>().is_ok()
}

/// Normalises a plain (non-disk) option value as PVE stores it.
pub(super) fn normalize_value(node: &Node, k: &str, v: &str) -> Result<String> {
    Ok(match k {
        _ if is_net_key(k) => normalize_net(node, k, v)?,
        "tags" => normalize_tags(v),
        "nameserver" | "searchdomain" => schema::split_list(v).join(" "),
        "cpuunits" => v
            .parse::<u64>()
            .map(|x| x.min(10000).to_string())
            .unwrap_or_else(|_| v.to_string()),
        "features" | "startup" => v.to_string(),
        _ if k.starts_with("dev") => {
            let m = parse_prop(k, v)?;
            print_prop(&m, &["path"])
        }
        _ => v.to_string(),
    })
}
