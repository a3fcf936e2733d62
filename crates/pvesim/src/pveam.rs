//! Templates: the appliance index (aplinfo.dat format; a built-in one or a configured local file whose
//! `Location:` may be a local path or `file://` URL), `pveam available|list|download|update|remove`.

use std::collections::BTreeMap;
use std::fs;
use std::path::PathBuf;

use serde_json::{json, Value};
use sha2::{Digest, Sha512};

use crate::error::{Result, SimError};
use crate::node::{write_file, Node};
use crate::storage;
use crate::task::{self, TaskOutcome};

const BUILTIN: &[(&str, &str, &str, &str)] = &[
    (
        "almalinux-10-default",
        "20250930",
        "almalinux-10",
        "almalinux-10-default_20250930_amd64.tar.xz",
    ),
    (
        "alpine-3.22-default",
        "20250617",
        "alpine-3.22",
        "alpine-3.22-default_20250617_amd64.tar.xz",
    ),
    (
        "debian-12-standard",
        "12.12-1",
        "debian-12",
        "debian-12-standard_12.12-1_amd64.tar.zst",
    ),
    (
        "debian-13-standard",
        "13.6-1",
        "debian-13",
        "debian-13-standard_13.6-1_amd64.tar.zst",
    ),
    (
        "ubuntu-24.04-standard",
        "24.04-2",
        "ubuntu-24.04",
        "ubuntu-24.04-standard_24.04-2_amd64.tar.zst",
    ),
];

/// Content of a built-in template (the memory backend needs no real root filesystem).
pub fn builtin_content(file: &str) -> Vec<u8> {
    format!("pvesim synthetic template {file}\n").into_bytes()
}

fn builtin_index() -> String {
    let mut s = String::new();
    for (pkg, ver, os, file) in BUILTIN {
        let sha = hex::encode(Sha512::digest(builtin_content(file)));
        s.push_str(&format!(
            "Package: {pkg}\nVersion: {ver}\nType: lxc\nOS: {os}\nSection: system\nMaintainer: Proxmox Support Team <support@proxmox.com>\nArchitecture: amd64\nLocation: pvesim-builtin:{file}\nSha512sum: {sha}\nInfopage: https://pve.proxmox.com/wiki/Linux_Container#pct_supported_distributions\nDescription: {pkg} (simulated)\n\n"
        ));
    }
    s
}

fn index_path(node: &Node) -> PathBuf {
    node.state.join("apl-info/aplinfo.dat")
}

/// Copies the configured (or built-in) index into the node state, as `pveam update` does.
pub fn install_index(node: &Node) -> Result<()> {
    let text = match &node.cfg.template_index {
        Some(p) => fs::read_to_string(p).map_err(|e| SimError::io(p, e))?,
        None => builtin_index(),
    };
    write_file(&index_path(node), &text)
}

/// Parsed index entries by template file name.
pub fn entries(node: &Node) -> BTreeMap<String, BTreeMap<String, String>> {
    let text = fs::read_to_string(index_path(node)).unwrap_or_default();
    let mut out = BTreeMap::new();
    for para in text.split("\n\n") {
        let mut e = BTreeMap::new();
        for line in para.lines() {
            if let Some((k, v)) = line.split_once(':') {
                e.insert(k.trim().to_lowercase(), v.trim().to_string());
            }
        }
        let Some(loc) = e.get("location").cloned() else {
            continue;
        };
        let file = loc.rsplit(['/', ':']).next().unwrap_or(&loc).to_string();
        e.insert("template".into(), file.clone());
        e.entry("section".into()).or_insert_with(|| "system".into());
        e.entry("architecture".into())
            .or_insert_with(|| "amd64".into());
        out.insert(file, e);
    }
    out
}

/// `pveam available [--section S]`
pub fn available_text(node: &Node, section: Option<&str>) -> String {
    let mut rows: Vec<(String, String, String)> = entries(node)
        .into_values()
        .filter(|e| {
            section
                .map(|s| e.get("section").map(|x| x == s).unwrap_or(false))
                .unwrap_or(true)
        })
        .map(|e| {
            (
                e["section"].clone(),
                e["template"].clone(),
                e["architecture"].clone(),
            )
        })
        .collect();
    rows.sort();
    rows.iter()
        .map(|(s, t, a)| format!("{s:<15} {t:<60} {a}\n"))
        .collect()
}

/// `GET /nodes/{node}/aplinfo`
pub fn aplinfo(node: &Node) -> Value {
    Value::Array(
        entries(node)
            .into_values()
            .map(|e| {
                let mut m = serde_json::Map::new();
                for (k, v) in e {
                    m.insert(k, json!(v));
                }
                Value::Object(m)
            })
            .collect(),
    )
}

/// `pveam list <storage>`
pub fn list_text(node: &Node, sid: &str) -> Result<String> {
    let st = storage::get(node, sid)?;
    if !st.content.iter().any(|c| c == "vztmpl") {
        return Err(SimError::die("Storage does not support templates!"));
    }
    let mut out = format!("{:<60} {:<6}\n", "NAME", "SIZE");
    for v in storage::list(node, st, Some("vztmpl"), None) {
        out.push_str(&format!(
            "{:<60} {:<4.2}MB\n",
            v.volid,
            v.size as f64 / 1048576.0
        ));
    }
    Ok(out)
}

/// `pveam download <storage> <template>` (and `POST /nodes/{node}/aplinfo`).
pub fn download(node: &Node, sid: &str, template: &str, out: &mut String) -> Result<TaskOutcome> {
    let idx = entries(node);
    let Some(e) = idx.get(template) else {
        return Err(SimError::param("template", "no such template"));
    };
    let st = storage::get(node, sid)?;
    if !st.content.iter().any(|c| c == "vztmpl") {
        return Err(SimError::die(format!(
            "storage '{sid}' does not support templates"
        )));
    }
    let dest = node.storage_dir(st).join("template/cache").join(template);
    let loc = e.get("location").cloned().unwrap_or_default();
    let want = e.get("sha512sum").cloned();
    task::run_task(node, out, "download", template, |log| {
        let data = if let Some(f) = loc.strip_prefix("pvesim-builtin:") {
            builtin_content(f)
        } else {
            let p = loc.strip_prefix("file://").unwrap_or(&loc);
            fs::read(p).map_err(|e| SimError::die(format!("download of '{loc}' failed: {e}")))?
        };
        if dest.exists() {
            let have = hex::encode(Sha512::digest(fs::read(&dest).unwrap_or_default()));
            if want.as_deref().map(|w| w == have).unwrap_or(true) {
                log.line("calculating checksum of existing file...OK, got correct file already, no need to download");
                return Ok(());
            }
        }
        log.line(format!("downloading {loc} to {}", dest.display()));
        let got = hex::encode(Sha512::digest(&data));
        if let Some(w) = &want {
            if *w != got {
                return Err(SimError::die(format!(
                    "checksum mismatch: got '{got}' != expect '{w}', aborting"
                )));
            }
        }
        log.line("calculating checksum...OK, checksum verified");
        let tmp = dest.with_extension(format!("tmp_dwnl.{}", std::process::id()));
        if let Some(d) = dest.parent() {
            fs::create_dir_all(d).map_err(|e| SimError::io(d, e))?;
        }
        fs::write(&tmp, &data).map_err(|e| SimError::io(&tmp, e))?;
        fs::rename(&tmp, &dest).map_err(|e| SimError::io(&dest, e))?;
        log.line(format!(
            "download of '{loc}' to '{}' finished",
            dest.display()
        ));
        Ok(())
    })
}
