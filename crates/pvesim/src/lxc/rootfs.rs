//! A container's root file system on the lxc backend: the volume is a sparse image file (the memory backend's
//! volume file, so `pvesm list` and the disk agree) holding ext4, which enforces the size. Create: mkfs, mount,
//! extract the template with tar, scrub and set up (PVE's post-create: hostname, hosts, network, SSH host keys,
//! authorized_keys, root password), shift ownership by the idmap base for unprivileged containers (a `lchown`
//! walk), unmount. Start: the same setup of hostname, hosts and network again (PVE does it at every start), and
//! the image stays mounted as the container's `dir:` rootfs until stop. Loop devices are pvesim's own, one per
//! image at most ([`Mounted`] says why). Every write stays inside the rootfs: symlinks in the
//! container are never followed out of it.
//!
//! Here: extraction, paths kept inside the rootfs, id shifting, the init kind. The image, loop
//! devices and mounts are in `image`, PVE's setup files in `setup`.

use std::fs;
use std::io::Write;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};
use std::time::Duration;

use super::config::InitKind;
use super::run::{argv, check};
use super::LxcError;

mod image;
mod setup;

pub use image::{bound_loops, detach_image, mkfs, release, Mounted, LOOP_LOCK};
pub use setup::{
    hosts_file, interfaces_file, setup_host_keys, setup_identity, setup_password, setup_ssh_keys,
    Identity, NetSetup,
};

const T_TAR: Duration = Duration::from_secs(900);

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> LxcError + '_ {
    move |e| LxcError::Io {
        path: path.to_path_buf(),
        source: e,
    }
}

/// Extracts a `.tar[.zst|.xz|.gz|.bz2]` template into `dir` as root, numeric owners kept. Returns tar's
/// `Total bytes read` line.
pub fn extract(template: &Path, dir: &Path) -> Result<String, LxcError> {
    let name = template.to_string_lossy().to_ascii_lowercase();
    let z = if name.ends_with(".zst") {
        Some("--zstd")
    } else if name.ends_with(".xz") {
        Some("-J")
    } else if name.ends_with(".gz") {
        Some("-z")
    } else if name.ends_with(".bz2") {
        Some("-j")
    } else {
        None
    };
    let mut a = argv(&[
        "tar",
        "-C",
        &dir.display().to_string(),
        "--numeric-owner",
        "--totals",
        "--xattrs",
        "--xattrs-include=user.*",
        "--xattrs-include=security.capability",
    ]);
    a.extend(z.map(String::from));
    a.extend(argv(&["-xpf", &template.display().to_string()]));
    let o = check(&a, None, T_TAR)?;
    Ok(o.stderr
        .lines()
        .find(|l| l.starts_with("Total bytes read"))
        .unwrap_or("")
        .to_string())
}

/// Resolves `rel` inside `root` the way the container would see it: symlinks (absolute ones relative to `root`)
/// are followed but never leave `root`. The result may not exist.
pub fn resolve_in(root: &Path, rel: &str) -> PathBuf {
    let mut todo: Vec<String> = rel
        .split('/')
        .filter(|c| !c.is_empty())
        .map(String::from)
        .rev()
        .collect();
    let mut cur: Vec<String> = Vec::new();
    let mut hops = 0;
    while let Some(c) = todo.pop() {
        match c.as_str() {
            "." => continue,
            ".." => {
                cur.pop();
                continue;
            }
            _ => {}
        }
        let p = cur
            .iter()
            .fold(root.to_path_buf(), |p, c| p.join(c))
            .join(&c);
        match fs::symlink_metadata(&p) {
            Ok(m) if m.file_type().is_symlink() && hops < 40 => {
                hops += 1;
                let t = fs::read_link(&p).unwrap_or_default();
                if t.is_absolute() {
                    cur.clear();
                }
                for comp in t.components().rev() {
                    if let Component::Normal(s) = comp {
                        todo.push(s.to_string_lossy().to_string());
                    } else if comp == Component::ParentDir {
                        todo.push("..".into());
                    }
                }
            }
            _ => cur.push(c),
        }
    }
    cur.iter().fold(root.to_path_buf(), |p, c| p.join(c))
}

/// Writes `data` to `rel` inside `root` with `mode`, owned by `owner` (uid = gid). Missing parent directories are
/// made (0755, same owner); a symlink at the final component is replaced, never written through.
pub fn write_in(
    root: &Path,
    rel: &str,
    data: &[u8],
    mode: u32,
    owner: u32,
) -> Result<(), LxcError> {
    let (parent, file) = rel.rsplit_once('/').unwrap_or(("", rel));
    let dir = resolve_in(root, parent);
    if !dir.starts_with(root) {
        return Err(LxcError::Io {
            path: dir,
            source: std::io::Error::other("outside the container root"),
        });
    }
    if !dir.exists() {
        fs::create_dir_all(&dir).map_err(io(&dir))?;
        let mut d = dir.as_path();
        while d != root {
            let _ = std::os::unix::fs::lchown(d, Some(owner), Some(owner));
            d = d.parent().unwrap_or(root);
        }
    }
    let path = dir.join(file);
    if fs::symlink_metadata(&path)
        .map(|m| m.file_type().is_symlink())
        .unwrap_or(false)
    {
        fs::remove_file(&path).map_err(io(&path))?;
    }
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(mode)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&path)
        .map_err(io(&path))?;
    f.write_all(data).map_err(io(&path))?;
    fs::set_permissions(&path, fs::Permissions::from_mode(mode)).map_err(io(&path))?;
    std::os::unix::fs::lchown(&path, Some(owner), Some(owner)).map_err(io(&path))
}

/// Reads `rel` inside `root` (confined like [`write_in`]); `None` when missing.
pub fn read_in(root: &Path, rel: &str) -> Option<String> {
    let p = resolve_in(root, rel);
    if !p.starts_with(root) {
        return None;
    }
    fs::read_to_string(p).ok()
}

/// Adds `offset` to the owner and group of every entry under `root` (symlinks not followed, hard links once,
/// setuid/setgid bits restored after the chown cleared them). Stays on `root`'s file system.
pub fn shift_ids(root: &Path, offset: u32) -> Result<(), LxcError> {
    let dev = fs::symlink_metadata(root).map_err(io(root))?.dev();
    let mut seen = std::collections::HashSet::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(p) = stack.pop() {
        let m = fs::symlink_metadata(&p).map_err(io(&p))?;
        if m.dev() != dev {
            continue;
        }
        if !m.is_dir() && m.nlink() > 1 && !seen.insert(m.ino()) {
            continue;
        }
        if m.uid() < offset {
            std::os::unix::fs::lchown(&p, Some(m.uid() + offset), Some(m.gid() + offset))
                .map_err(io(&p))?;
            if !m.file_type().is_symlink() && m.mode() & 0o6000 != 0 {
                fs::set_permissions(&p, fs::Permissions::from_mode(m.mode() & 0o7777))
                    .map_err(io(&p))?;
            }
        }
        if m.is_dir() {
            for e in fs::read_dir(&p).map_err(io(&p))? {
                stack.push(e.map_err(io(&p))?.path());
            }
        }
    }
    Ok(())
}

/// systemd or something else, from where `/sbin/init` leads.
pub fn init_kind(root: &Path) -> InitKind {
    let p = resolve_in(root, "sbin/init");
    if p.to_string_lossy().contains("systemd") {
        InitKind::Systemd
    } else {
        InitKind::Other
    }
}

#[cfg(test)]
mod tests;
