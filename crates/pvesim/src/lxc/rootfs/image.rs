//! The volume image of a root file system: ext4 made on the sparse image file, pvesim's own loop
//! devices (found, attached and detached under one host-wide lock) and the mount that [`Mounted`]
//! keeps until it is dropped or released.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::io;
use crate::lxc::run::{argv, check, run};
use crate::lxc::LxcError;

pub(super) const T_MOUNT: Duration = Duration::from_secs(60);

/// Host-wide lock file taken around every loop device lookup, attach, mount and detach pvesim does, by every
/// pvesim process and node on this host.
pub const LOOP_LOCK: &str = "/run/lock/pvesim-lxc-loop.lock";

/// Takes [`LOOP_LOCK`] (blocking); released when the file is dropped.
#[allow(clippy::incompatible_msrv)]
pub(super) fn loop_lock() -> Result<fs::File, LxcError> {
    let p = Path::new(LOOP_LOCK);
    if let Some(dir) = p.parent() {
        fs::create_dir_all(dir).map_err(io(dir))?;
    }
    let f = fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(p)
        .map_err(io(p))?;
    f.lock().map_err(io(p))?;
    Ok(f)
}

/// The loop devices bound to `image` (`losetup -j`), including one whose detach is pending.
pub fn bound_loops(image: &Path) -> Result<Vec<String>, LxcError> {
    let o = check(
        &argv(&["losetup", "-j", &image.display().to_string()]),
        None,
        T_MOUNT,
    )?;
    Ok(o.stdout
        .lines()
        .filter_map(|l| l.split_once(':').map(|(d, _)| d.trim().to_string()))
        .filter(|d| d.starts_with("/dev/loop"))
        .collect())
}

/// The file behind loop device `dev` (sysfs), `None` when it is not bound.
pub(super) fn backing_file(dev: &str) -> Option<PathBuf> {
    let n = dev.rsplit('/').next()?;
    let t = fs::read_to_string(format!("/sys/block/{n}/loop/backing_file")).ok()?;
    Some(PathBuf::from(t.trim_end().trim_end_matches(" (deleted)")))
}

/// The source device of the mount on `dir` in this mount namespace (the last one, as `umount` takes it).
pub(super) fn mounted_source(dir: &Path) -> Option<String> {
    let want = dir.display().to_string().replace(' ', "\\040");
    fs::read_to_string("/proc/self/mounts")
        .ok()?
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            (f.len() > 2 && f[1] == want).then(|| f[0].to_string())
        })
        .next_back()
}

/// An image mounted on a directory through a loop device of pvesim's; unmounted when dropped unless kept.
///
/// Why not `mount -o loop` and LXC's `loop:` backend: this host's mounts are private, and every new mount
/// namespace (each `lxc-start`, and each `lxc-*` pvesim runs inside a node's network namespace) takes a private
/// copy of all of them, including another container's rootfs mounted at that moment for create or start.
/// `umount` then only removes the host's view: the ext4 of that image stays alive, unsynced, on its old loop
/// device, and the next `mount -o loop` or LXC `loop:` put a second loop device and a second ext4 on the same
/// image: files extracted a moment earlier read as zeros ("Exec format error - Failed to exec /sbin/init") or the
/// mount fails ("Failed to mount rootfs"). Here an image has at most one loop device: under [`LOOP_LOCK`] the
/// device already bound to the image is reused (mounting it again gives the same, live ext4), and only an image
/// without one gets a new device (`losetup --find --show`, which retries when another process takes the free
/// device first).
pub struct Mounted {
    pub dir: PathBuf,
    /// The loop device, e.g. `/dev/loop3`.
    pub dev: String,
    keep: bool,
}

impl Mounted {
    /// Attaches `image` (or reuses its loop device) and mounts it on `dir` (created; an earlier mount there is
    /// released first).
    pub fn image(image: &Path, dir: &Path) -> Result<Mounted, LxcError> {
        fs::create_dir_all(dir).map_err(io(dir))?;
        release(dir)?;
        let canon = fs::canonicalize(image).map_err(io(image))?;
        let _l = loop_lock()?;
        let mut attempt = 0;
        let dev = loop {
            attempt += 1;
            let dev = match bound_loops(image)?.into_iter().next() {
                Some(d) => d,
                None => check(
                    &argv(&["losetup", "--find", "--show", &canon.display().to_string()]),
                    None,
                    T_MOUNT,
                )?
                .stdout
                .trim()
                .to_string(),
            };
            let a = argv(&["mount", "-t", "ext4", &dev, &dir.display().to_string()]);
            match check(&a, None, T_MOUNT) {
                Ok(_) => break dev,
                // a reused device whose pending detach completed between the lookup and the mount
                Err(_) if attempt < 3 && backing_file(&dev).is_none() => continue,
                Err(e) => return Err(e),
            }
        };
        let m = Mounted {
            dir: dir.to_path_buf(),
            dev: dev.clone(),
            keep: false,
        };
        // The mount holds the device now: it cannot be cleared or rebound under us. Make sure it is our image.
        match backing_file(&dev) {
            Some(b) if b == canon => Ok(m),
            other => Err(LxcError::Io {
                path: image.to_path_buf(),
                source: std::io::Error::other(format!(
                    "{dev} is bound to {} instead",
                    other
                        .map(|b| b.display().to_string())
                        .unwrap_or("nothing".into())
                )),
            }),
        }
    }

    /// Leaves the image mounted (the running container's rootfs); [`release`] undoes it.
    pub fn keep(mut self) -> String {
        self.keep = true;
        self.dev.clone()
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        if self.keep {
            return;
        }
        let d = self.dir.display().to_string();
        let ok = run(&argv(&["umount", &d]), None, T_MOUNT)
            .map(|o| o.ok())
            .unwrap_or(false);
        if !ok {
            tracing::warn!(dir = %d, "umount failed, detaching lazily");
            let _ = run(&argv(&["umount", "-l", &d]), None, T_MOUNT);
        }
    }
}

/// Unmounts whatever pvesim mounted on `dir` and detaches its loop device (under [`LOOP_LOCK`]). A device still
/// held elsewhere (a mount namespace copy) is detached by the kernel once released; until then a new mount of the
/// image reuses it.
pub fn release(dir: &Path) -> Result<(), LxcError> {
    while let Some(src) = mounted_source(dir) {
        let d = dir.display().to_string();
        let o = run(&argv(&["umount", &d]), None, T_MOUNT)?;
        if !o.ok() {
            tracing::warn!(dir = %d, stderr = %o.stderr.trim(), "umount failed, detaching lazily");
            check(&argv(&["umount", "-l", &d]), None, T_MOUNT)?;
        }
        if src.starts_with("/dev/loop") {
            detach(&src)?;
        }
    }
    Ok(())
}

/// Detaches every loop device bound to `image` (under [`LOOP_LOCK`]).
pub fn detach_image(image: &Path) -> Result<(), LxcError> {
    for dev in bound_loops(image)? {
        detach(&dev)?;
    }
    Ok(())
}

pub(super) fn detach(dev: &str) -> Result<(), LxcError> {
    let _l = loop_lock()?;
    if backing_file(dev).is_some() {
        let o = run(&argv(&["losetup", "-d", dev]), None, T_MOUNT)?;
        if !o.ok() && backing_file(dev).is_some() {
            tracing::warn!(dev, stderr = %o.stderr.trim(), "losetup -d failed");
        }
    }
    Ok(())
}

/// Makes an ext4 file system on the volume image; its root directory owned by `owner`.
pub fn mkfs(image: &Path, owner: u32) -> Result<(), LxcError> {
    check(
        &argv(&[
            "mkfs.ext4",
            "-q",
            "-F",
            "-E",
            &format!("root_owner={owner}:{owner}"),
            &image.display().to_string(),
        ]),
        None,
        T_MOUNT,
    )?;
    Ok(())
}
