//! Edits of a container's config file (`/etc/pve/nodes/<node>/lxc/<vmid>.conf`) for what no PVE tool sets:
//! the raw `lxc.idmap` lines (the API cannot write `lxc.*` keys, CONTRACT §7). PVE keeps raw `lxc.*` lines after
//! the sorted keys of the main section, before a `[pve:pending]` or snapshot section; that is where they go.

use std::path::Path;

use crate::error::PveError;

/// Whether a config line is a raw `lxc.idmap` entry (`lxc.idmap: ...` or `lxc.idmap = ...`).
fn is_idmap_line(line: &str) -> bool {
    line.strip_prefix("lxc.idmap")
        .is_some_and(|rest| rest.trim_start().starts_with([':', '=']))
}

/// `text` (a config file) with its `lxc.idmap` lines replaced by `values` (`u 0 100000 65536`), in order, at
/// the end of the main section; the pending and snapshot sections are left as they are.
pub fn with_idmap(text: &str, values: &[String]) -> String {
    let (main, rest) = match text.find("\n[") {
        Some(i) => (&text[..=i], &text[i + 1..]),
        None => (text, ""),
    };
    let mut out = String::with_capacity(text.len() + values.len() * 32);
    for line in main.lines().filter(|l| !is_idmap_line(l)) {
        out.push_str(line);
        out.push('\n');
    }
    while out.ends_with("\n\n") {
        out.pop();
    }
    for v in values {
        out.push_str("lxc.idmap: ");
        out.push_str(v.trim());
        out.push('\n');
    }
    if !rest.is_empty() {
        out.push('\n');
        out.push_str(rest);
    }
    out
}

/// Rewrites the `lxc.idmap` lines of CT `vmid`'s config file in `dir` (a node's `lxc` directory): read, edit,
/// write to a temporary file beside it, rename over it (pmxcfs renames atomically).
pub fn write_idmap(dir: &Path, vmid: u32, values: &[String]) -> Result<(), PveError> {
    let path = dir.join(format!("{vmid}.conf"));
    let err = |source| PveError::ConfigFile {
        vmid,
        path: path.display().to_string(),
        source,
    };
    let text = std::fs::read_to_string(&path).map_err(err)?;
    let new = with_idmap(&text, values);
    if new == text {
        return Ok(());
    }
    let tmp = dir.join(format!(".{vmid}.conf.tmp.{}", std::process::id()));
    std::fs::write(&tmp, new).map_err(err)?;
    std::fs::rename(&tmp, &path).map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        err(e)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn idmap_lines_replace_the_old_ones_before_the_pending_section() {
        let text = "#web\narch: amd64\nhostname: web\nlxc.idmap: u 0 100000 65536\nlxc.cap.drop: \nlxc.idmap = g 0 100000 65536\n\n[pve:pending]\ncores: 2\n";
        let got = with_idmap(
            text,
            &["u 0 200000 65536".into(), "g 0 200000 65536".into()],
        );
        assert_eq!(
            got,
            "#web\narch: amd64\nhostname: web\nlxc.cap.drop: \nlxc.idmap: u 0 200000 65536\nlxc.idmap: g 0 200000 65536\n\n[pve:pending]\ncores: 2\n"
        );
        // Removing them all, and a file without sections.
        assert_eq!(
            with_idmap("hostname: a\nlxc.idmap: u 0 1 2\n", &[]),
            "hostname: a\n"
        );
        // A key that only starts like it is kept.
        assert_eq!(with_idmap("lxc.idmapx: 1\n", &[]), "lxc.idmapx: 1\n");
    }

    #[test]
    fn the_file_is_rewritten_in_place() {
        let dir = std::env::temp_dir().join(format!("pxfleet-conffile-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("101.conf"), "hostname: a\n").unwrap();
        write_idmap(&dir, 101, &["u 0 100000 65536".into()]).unwrap();
        assert_eq!(
            std::fs::read_to_string(dir.join("101.conf")).unwrap(),
            "hostname: a\nlxc.idmap: u 0 100000 65536\n"
        );
        let e = write_idmap(&dir, 102, &[]).unwrap_err();
        assert!(e.to_string().contains("102.conf"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
