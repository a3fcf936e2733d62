//! Storages of the simulated node: volumes as sparse files (`<storage dir>/images/<vmid>/<name>`) whose length
//! is the volume size, capacity accounting, templates in `template/cache`, and the `pvesm` command.

use std::fs;
use std::path::PathBuf;

use crate::error::{Result, SimError};
use crate::node::{Node, StorageCfg};

/// A volume found on a storage.
#[derive(Debug, Clone, PartialEq)]
pub struct Volume {
    pub volid: String,
    pub format: String,
    pub content: String,
    pub size: u64,
    pub vmid: Option<u32>,
    pub ctime: u64,
}

/// Template file extensions accepted for vztmpl, with the listing format.
pub fn template_format(file: &str) -> Option<&'static str> {
    let l = file.to_ascii_lowercase();
    if l.contains('/') {
        return None;
    }
    [
        (".tar.gz", "tgz"),
        (".tar.xz", "txz"),
        (".tar.zst", "tzst"),
        (".tar.bz2", "tbz2"),
        (".tar", "tar"),
    ]
    .into_iter()
    .find(|(ext, _)| l.ends_with(ext) && l.len() > ext.len())
    .map(|(_, f)| f)
}

fn path_based(st: &StorageCfg) -> bool {
    matches!(
        st.kind.as_str(),
        "dir" | "nfs" | "cifs" | "cephfs" | "btrfs"
    )
}

/// Looks up a storage of the node: `storage '<sid>' does not exist`.
pub fn get<'a>(node: &'a Node, sid: &str) -> Result<&'a StorageCfg> {
    node.storage(sid)
        .ok_or_else(|| SimError::die(format!("storage '{sid}' does not exist")))
}

/// Splits `sid:volname`.
pub fn split_volid(volid: &str) -> Result<(String, String)> {
    match volid.split_once(':') {
        Some((s, v)) if !s.is_empty() && !v.is_empty() => Ok((s.to_string(), v.to_string())),
        _ => Err(SimError::die(format!(
            "unable to parse volume ID '{volid}'"
        ))),
    }
}

/// The file behind a volume or template.
pub fn volume_path(node: &Node, volid: &str) -> Result<PathBuf> {
    let (sid, name) = split_volid(volid)?;
    let st = get(node, &sid)?;
    let dir = node.storage_dir(st);
    if name.contains('/') && matches!(st.kind.as_str(), "lvm" | "lvmthin" | "zfspool") {
        // Block storages have no directories: PVE's parse_volname of these plugins refuses the name.
        let what = if st.kind == "zfspool" { "zfs" } else { "lvm" };
        return Err(SimError::die(format!(
            "unable to parse {what} volume name '{name}'"
        )));
    }
    if let Some(t) = name.strip_prefix("vztmpl/") {
        if template_format(t).is_none() {
            return Err(SimError::die(format!(
                "unable to parse directory volume name '{name}'"
            )));
        }
        return Ok(dir.join("template/cache").join(t));
    }
    if let Some(rest) = name.strip_prefix("iso/") {
        return Ok(dir.join("template/iso").join(rest));
    }
    if let Some(rest) = name.strip_prefix("snippets/") {
        return Ok(dir.join("snippets").join(rest));
    }
    let file = name.rsplit('/').next().unwrap_or(&name).to_string();
    let vmid = vmid_of(&file)
        .ok_or_else(|| SimError::die(format!("unable to parse volume name '{name}'")))?;
    Ok(dir.join("images").join(vmid.to_string()).join(file))
}

/// `PVE::GuestHelpers::check_hookscript`: `volid` is a snippets volume whose file exists and is executable.
pub fn check_hookscript(node: &Node, volid: &str) -> Result<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let path = volume_path(node, volid)?;
    let (_, name) = split_volid(volid)?;
    if !name.starts_with("snippets/") {
        return Err(SimError::die(format!(
            "'{volid}' is not in the snippets directory"
        )));
    }
    match fs::metadata(&path) {
        Ok(m) if m.is_file() && m.permissions().mode() & 0o111 != 0 => Ok(path),
        Ok(m) if m.is_file() => Err(SimError::die(format!("script '{volid}' is not executable"))),
        _ => Err(SimError::die(format!("script '{volid}' does not exist"))),
    }
}

/// The path `pvesm path` prints (the simulated file).
pub fn display_path(node: &Node, volid: &str) -> Result<PathBuf> {
    volume_path(node, volid)
}

fn vmid_of(file: &str) -> Option<u32> {
    let rest = file
        .strip_prefix("vm-")
        .or_else(|| file.strip_prefix("subvol-"))?;
    rest.split('-').next()?.parse().ok()
}

fn walk_size(dir: &std::path::Path) -> u64 {
    let Ok(rd) = fs::read_dir(dir) else { return 0 };
    rd.flatten()
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => walk_size(&e.path()),
            Ok(m) => m.len(),
            Err(_) => 0,
        })
        .sum()
}

/// Bytes in use on a storage (volume sizes plus, for path-based storages, every other file).
pub fn used(node: &Node, st: &StorageCfg) -> u64 {
    walk_size(&node.storage_dir(st))
}

fn volume_name(st: &StorageCfg, vmid: u32, n: u32) -> (String, String) {
    match st.kind.as_str() {
        "zfspool" => (
            format!("subvol-{vmid}-disk-{n}"),
            format!("subvol-{vmid}-disk-{n}"),
        ),
        "dir" | "nfs" | "cifs" | "cephfs" | "btrfs" => (
            format!("vm-{vmid}-disk-{n}.raw"),
            format!("{vmid}/vm-{vmid}-disk-{n}.raw"),
        ),
        _ => (format!("vm-{vmid}-disk-{n}"), format!("vm-{vmid}-disk-{n}")),
    }
}

/// Allocates a new volume for `vmid` of `size` bytes (lowest free disk index), failing as the storage tool
/// would when it does not fit. Prints what the storage tool prints into `log`.
pub fn alloc(
    node: &Node,
    sid: &str,
    vmid: u32,
    size: u64,
    log: &mut Vec<String>,
) -> Result<String> {
    alloc_named(node, sid, vmid, None, size, log)
}

/// [`alloc`] with the file name `pvesm alloc` was given (`vm-900-disk-1`), when it names one.
pub fn alloc_named(
    node: &Node,
    sid: &str,
    vmid: u32,
    name: Option<&str>,
    size: u64,
    log: &mut Vec<String>,
) -> Result<String> {
    let st = get(node, sid)?.clone();
    let _g =
        crate::lock::lock_blocking(&node.state.join("lock").join(format!("storage-{sid}.lock")))?;
    let dir = node.storage_dir(&st).join("images").join(vmid.to_string());
    let mut n = 0;
    let named = name.filter(|f| !f.is_empty()).map(|f| {
        let path_based = matches!(
            st.kind.as_str(),
            "dir" | "nfs" | "cifs" | "cephfs" | "btrfs"
        );
        let volname = if path_based {
            format!("{vmid}/{f}")
        } else {
            f.to_string()
        };
        (f.to_string(), volname)
    });
    if let Some((file, _)) = &named {
        if dir.join(file).exists() {
            return Err(SimError::die(format!(
                "volume '{sid}:{file}' already exists"
            )));
        }
    }
    let (file, volname) = if let Some(n) = named {
        n
    } else {
        loop {
            let (f, v) = volume_name(&st, vmid, n);
            let taken = ["vm", "subvol"].iter().any(|p| {
                let base = format!("{p}-{vmid}-disk-{n}");
                dir.join(&base).exists() || dir.join(format!("{base}.raw")).exists()
            });
            if !taken {
                break (f, v);
            }
            n += 1;
        }
    };
    let mut used = used(node, &st);
    if let Some(f) = &node.cfg.faults.storage_full {
        if f.storages.iter().any(|s| s == sid)
            && crate::faults::fire(node, "storage_full", f.count)?
        {
            used = st.capacity;
        }
    }
    if used.saturating_add(size) > st.capacity {
        let free = st.capacity.saturating_sub(used);
        return Err(SimError::die(match st.kind.as_str() {
            "lvmthin" | "lvm" => format!(
                "lvcreate 'pve/{file}' error:   Volume group \"pve\" has insufficient free space ({} extents): {} required.",
                free / (4 << 20),
                size / (4 << 20)
            ),
            "zfspool" => format!("zfs error: cannot create 'rpool/data/{file}': out of space"),
            _ => format!("unable to create image: qemu-img: {}: Could not preallocate data for the new file: No space left on device", dir.join(&file).display()),
        }));
    }
    fs::create_dir_all(&dir).map_err(|e| SimError::io(&dir, e))?;
    let path = dir.join(&file);
    let f = fs::OpenOptions::new()
        .create_new(true)
        .write(true)
        .open(&path)
        .map_err(|e| SimError::io(&path, e))?;
    f.set_len(size).map_err(|e| SimError::io(&path, e))?;
    match st.kind.as_str() {
        "lvmthin" | "lvm" => log.push(format!("  Logical volume \"{file}\" created.")),
        "zfspool" => {}
        _ => log.push(format!(
            "Formatting '{}', fmt=raw size={size} preallocation=off",
            path.display()
        )),
    }
    Ok(format!("{sid}:{volname}"))
}

/// Frees a volume (`pvesm free`).
pub fn free(node: &Node, volid: &str) -> Result<()> {
    let p = volume_path(node, volid)?;
    fs::remove_file(&p).map_err(|_| SimError::die(format!("volume '{volid}' does not exist")))
}

/// Size of a volume in bytes.
pub fn size_of(node: &Node, volid: &str) -> Result<u64> {
    let p = volume_path(node, volid)?;
    fs::metadata(&p)
        .map(|m| m.len())
        .map_err(|_| SimError::die(format!("volume '{volid}' does not exist")))
}

/// Grows a volume, failing when the storage is full.
pub fn resize(node: &Node, volid: &str, new_size: u64) -> Result<()> {
    let (sid, _) = split_volid(volid)?;
    let st = get(node, &sid)?.clone();
    let _g =
        crate::lock::lock_blocking(&node.state.join("lock").join(format!("storage-{sid}.lock")))?;
    let old = size_of(node, volid)?;
    if used(node, &st) + new_size.saturating_sub(old) > st.capacity {
        return Err(SimError::die(format!(
            "volume resize of '{volid}' failed: not enough free space on storage '{sid}'"
        )));
    }
    let p = volume_path(node, volid)?;
    let f = fs::OpenOptions::new()
        .write(true)
        .open(&p)
        .map_err(|e| SimError::io(&p, e))?;
    f.set_len(new_size).map_err(|e| SimError::io(&p, e))
}

fn mtime(m: &fs::Metadata) -> u64 {
    m.modified()
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// Lists the volumes of a storage (`pvesm list`, `/storage/{sid}/content`), sorted by volid.
pub fn list(node: &Node, st: &StorageCfg, content: Option<&str>, vmid: Option<u32>) -> Vec<Volume> {
    let dir = node.storage_dir(st);
    let mut out = Vec::new();
    if st.content.iter().any(|c| c == "vztmpl") && vmid.is_none() {
        if let Ok(rd) = fs::read_dir(dir.join("template/cache")) {
            for e in rd.flatten() {
                let name = e.file_name().to_string_lossy().to_string();
                let (Some(fmt), Ok(m)) = (template_format(&name), e.metadata()) else {
                    continue;
                };
                if !m.is_file() || name.contains(".tmp_dwnl.") {
                    continue;
                }
                out.push(Volume {
                    volid: format!("{}:vztmpl/{name}", st.id),
                    format: fmt.into(),
                    content: "vztmpl".into(),
                    size: m.len(),
                    vmid: None,
                    ctime: mtime(&m),
                });
            }
        }
    }
    if let Ok(rd) = fs::read_dir(dir.join("images")) {
        for d in rd.flatten() {
            let Ok(owner) = d.file_name().to_string_lossy().parse::<u32>() else {
                continue;
            };
            if vmid.map(|v| v != owner).unwrap_or(false) {
                continue;
            }
            let Ok(files) = fs::read_dir(d.path()) else {
                continue;
            };
            for f in files.flatten() {
                let name = f.file_name().to_string_lossy().to_string();
                let Ok(m) = f.metadata() else { continue };
                let (volname, format) = if path_based(st) {
                    (
                        format!("{owner}/{name}"),
                        if name.ends_with(".raw") {
                            "raw"
                        } else {
                            "subvol"
                        },
                    )
                } else if name.starts_with("subvol-") {
                    (name.clone(), "subvol")
                } else {
                    (name.clone(), "raw")
                };
                out.push(Volume {
                    volid: format!("{}:{volname}", st.id),
                    format: format.into(),
                    content: "rootdir".into(),
                    size: m.len(),
                    vmid: Some(owner),
                    ctime: mtime(&m),
                });
            }
        }
    }
    if let Some(c) = content {
        let wanted: Vec<&str> = c.split(',').collect();
        out.retain(|v| {
            wanted.contains(&v.content.as_str())
                || (v.content == "rootdir" && wanted.contains(&"images"))
        });
    }
    out.sort_by_key(|v| v.volid.to_lowercase());
    out
}

/// `pvesm status` text (PVE 9.0.14+ headers).
pub fn status_text(node: &Node, only: Option<&str>, content: Option<&str>) -> Result<String> {
    let mut sts: Vec<&StorageCfg> = node.cfg.storage.iter().collect();
    if let Some(o) = only {
        sts.retain(|s| s.id == o);
        if sts.is_empty() {
            return Err(SimError::die(format!("storage '{o}' does not exist")));
        }
    }
    if let Some(c) = content {
        sts.retain(|s| s.enabled && c.split(',').any(|x| s.content.iter().any(|y| y == x)));
    }
    sts.sort_by(|a, b| a.id.cmp(&b.id));
    let w = sts.iter().map(|s| s.id.len()).max().unwrap_or(4).max(4) + 1;
    let mut out = format!(
        "{:<w$} {:>10} {:>10} {:>15} {:>15} {:>15} {:>8}\n",
        "Name", "Type", "Status", "Total (KiB)", "Used (KiB)", "Available (KiB)", "%"
    );
    for s in sts {
        if !s.enabled {
            out.push_str(&format!(
                "{:<w$} {:>10} {:>10} {:>15} {:>15} {:>15} {:>8}\n",
                s.id, s.kind, "disabled", 0, 0, 0, "N/A"
            ));
            continue;
        }
        let total = s.capacity / 1024;
        let used = used(node, s) / 1024;
        let avail = total.saturating_sub(used);
        let pct = if total > 0 {
            used as f64 * 100.0 / total as f64
        } else {
            0.0
        };
        out.push_str(&format!(
            "{:<w$} {:>10} {:>10} {:>15} {:>15} {:>15} {:>7.2}%\n",
            s.id, s.kind, "active", total, used, avail, pct
        ));
    }
    Ok(out)
}

/// `pvesm list` text.
pub fn list_text(vols: &[Volume]) -> String {
    let w1 = vols.iter().map(|v| v.volid.len()).max().unwrap_or(5).max(5);
    let w2 = vols
        .iter()
        .map(|v| v.size.to_string().len())
        .max()
        .unwrap_or(4)
        .max(4);
    let mut out = format!(
        "{:<w1$} {:<7} {:<9} {:>w2$} {}\n",
        "Volid", "Format", "Type", "Size", "VMID"
    );
    let (with, without): (Vec<&Volume>, Vec<&Volume>) = vols.iter().partition(|v| v.vmid.is_some());
    for v in with {
        out.push_str(&format!(
            "{:<w1$} {:<7} {:<9} {:>w2$} {}\n",
            v.volid,
            v.format,
            v.content,
            v.size,
            v.vmid.unwrap_or(0)
        ));
    }
    let mut without = without;
    without.sort_by(|a, b| a.format.cmp(&b.format).then(a.volid.cmp(&b.volid)));
    for v in without {
        out.push_str(&format!(
            "{:<w1$} {:<7} {:<9} {:>w2$}\n",
            v.volid, v.format, v.content, v.size
        ));
    }
    out
}

/// Parses a `pvesm alloc` size: KiB unless suffixed `M` or `G`.
pub fn parse_alloc_size(s: &str) -> Option<u64> {
    let (num, mul) = match s.chars().last()? {
        'M' => (&s[..s.len() - 1], 1u64 << 20),
        'G' => (&s[..s.len() - 1], 1u64 << 30),
        _ => (s, 1024),
    };
    num.parse::<u64>().ok().map(|n| n * mul)
}

/// Removes a template file (`pveam remove`).
pub fn free_template(node: &Node, volid: &str) -> Result<()> {
    let p = volume_path(node, volid)?;
    fs::remove_file(&p).map_err(|_| SimError::die(format!("volume '{volid}' does not exist")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn template_extensions() {
        assert_eq!(
            template_format("debian-13-standard_13.6-1_amd64.tar.zst"),
            Some("tzst")
        );
        assert_eq!(template_format("x.tar"), Some("tar"));
        assert_eq!(template_format("x.tgz"), None);
    }

    #[test]
    fn list_layout_matches_example() {
        let v = |id: &str, size: u64, vmid: u32| Volume {
            volid: id.into(),
            format: "raw".into(),
            content: "rootdir".into(),
            size,
            vmid: Some(vmid),
            ctime: 0,
        };
        let text = list_text(&[
            v("local-lvm:vm-100-disk-0", 8589934592, 100),
            v("local-lvm:vm-101-disk-0", 34359738368, 101),
            v("local-lvm:vm-101-disk-1", 68719476736, 101),
        ]);
        assert_eq!(
            text,
            include_str!("../tests/fixtures/pvesm-list-local-lvm.txt")
        );
    }
}
