//! Edits of a container's config file (`/etc/pve/nodes/<node>/lxc/<vmid>.conf`) for what no PVE tool sets:
//! the raw `lxc.idmap` lines (the API cannot write `lxc.*` keys, CONTRACT §7) and `env` with more than what an
//! argument can carry (its NUL separator), as the `lxc.environment.runtime` lines PVE writes for it. PVE writes the
//! main section as the sorted keys, then the `lxc.environment.runtime` lines, then raw `lxc.*` lines, before a
//! `[pve:pending]` or snapshot section; that is where they go.

use std::collections::BTreeMap;
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

/// The raw key PVE writes `env` as, one line per variable.
pub const ENV_KEY: &str = "lxc.environment.runtime";

/// Whether a config line is an `lxc.environment.runtime` entry (`: ` or ` = `).
fn is_env_line(line: &str) -> bool {
    line.strip_prefix(ENV_KEY)
        .is_some_and(|rest| rest.trim_start().starts_with([':', '=']))
}

/// `text` (a config file) with its `lxc.environment.runtime` lines replaced by `entries` (`NAME=value`), in
/// order, where PVE writes them: after the keys of the main section, before its first raw `lxc.*` line. The
/// pending and snapshot sections are left as they are.
pub fn with_env(text: &str, entries: &[String]) -> String {
    let (main, rest) = match text.find("\n[") {
        Some(i) => (&text[..=i], &text[i + 1..]),
        None => (text, ""),
    };
    let kept: Vec<&str> = main.lines().filter(|l| !is_env_line(l)).collect();
    // Before the first raw lxc.* line, else after the last non-blank line.
    let at = kept
        .iter()
        .position(|l| l.starts_with("lxc."))
        .unwrap_or_else(|| {
            kept.iter()
                .rposition(|l| !l.trim().is_empty())
                .map_or(0, |i| i + 1)
        });
    let mut out = String::with_capacity(text.len() + entries.len() * 48);
    for line in &kept[..at] {
        out.push_str(line);
        out.push('\n');
    }
    for e in entries {
        out.push_str(ENV_KEY);
        out.push_str(": ");
        out.push_str(e);
        out.push('\n');
    }
    for line in &kept[at..] {
        out.push_str(line);
        out.push('\n');
    }
    while out.ends_with("\n\n") {
        out.pop();
    }
    if !rest.is_empty() {
        out.push('\n');
        out.push_str(rest);
    }
    out
}

/// Replaces the `env` of CT `vmid` (its `lxc.environment.runtime` lines) in its config file in `dir` with the
/// variables of `env`, checked first (an empty map removes them all). Any number of variables.
pub fn write_env(dir: &Path, vmid: u32, env: &BTreeMap<String, String>) -> Result<(), PveError> {
    let entries = crate::runtime::env_entries(vmid, env)?;
    rewrite(dir, vmid, |text| with_env(text, &entries))
}

/// Rewrites the `lxc.idmap` lines of CT `vmid`'s config file in `dir` (a node's `lxc` directory).
pub fn write_idmap(dir: &Path, vmid: u32, values: &[String]) -> Result<(), PveError> {
    rewrite(dir, vmid, |text| with_idmap(text, values))
}

/// Edits CT `vmid`'s config file in `dir`: read, edit, write to a temporary file beside it, rename over it
/// (pmxcfs renames atomically).
fn rewrite(dir: &Path, vmid: u32, edit: impl FnOnce(&str) -> String) -> Result<(), PveError> {
    let path = dir.join(format!("{vmid}.conf"));
    let err = |source| PveError::ConfigFile {
        vmid,
        path: path.display().to_string(),
        source,
    };
    let text = std::fs::read_to_string(&path).map_err(err)?;
    let new = edit(&text);
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
    fn env_lines_go_after_the_keys_and_before_raw_lxc_lines() {
        let text = "#web\narch: amd64\nhostname: web\nlxc.environment.runtime: OLD=1\nlxc.cap.drop: \nlxc.idmap: u 0 100000 65536\n\n[pve:pending]\ncores: 2\n";
        let three = ["A=1".to_string(), "B=x=y z".into(), "C=".into()];
        assert_eq!(
            with_env(text, &three),
            "#web\narch: amd64\nhostname: web\nlxc.environment.runtime: A=1\nlxc.environment.runtime: B=x=y z\nlxc.environment.runtime: C=\nlxc.cap.drop: \nlxc.idmap: u 0 100000 65536\n\n[pve:pending]\ncores: 2\n"
        );
        // No raw lines: at the end of the main section; an empty set removes them all.
        assert_eq!(
            with_env("hostname: a\n", &["A=1".into()]),
            "hostname: a\nlxc.environment.runtime: A=1\n"
        );
        assert_eq!(
            with_env(
                "hostname: a\nlxc.environment.runtime = A=1\nlxc.environment.runtime: B=2\n",
                &[]
            ),
            "hostname: a\n"
        );
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
        let env = BTreeMap::from([
            ("A".to_string(), "1".to_string()),
            ("B".to_string(), "2".to_string()),
        ]);
        write_env(&dir, 101, &env).unwrap();
        assert_eq!(
            std::fs::read_to_string(dir.join("101.conf")).unwrap(),
            "hostname: a\nlxc.environment.runtime: A=1\nlxc.environment.runtime: B=2\nlxc.idmap: u 0 100000 65536\n"
        );
        let bad = BTreeMap::from([("A".to_string(), "1\n2".to_string())]);
        let e = write_env(&dir, 101, &bad).unwrap_err();
        assert!(e.to_string().contains("env.A"), "{e}");
        let e = write_idmap(&dir, 102, &[]).unwrap_err();
        assert!(e.to_string().contains("102.conf"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
