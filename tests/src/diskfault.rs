//! The controller's disk full or its data directory read-only (issue 12, fault 5): the data directory moved
//! onto a small tmpfs of its own, which is then filled with a filler file or remounted read-only. Needs root
//! (mount); every mount, umount and remount runs from an argv with a timeout, and a [`Mount`] guard unmounts
//! on drop, so a failing test leaves no mount behind.
// test code driving separate processes: real time
#![allow(clippy::disallowed_methods)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::{HarnessError, Result};

/// How long mount, umount and remount may take.
pub const MOUNT_TIMEOUT: Duration = Duration::from_secs(30);

/// Whether this process is root (it can mount).
pub fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .and_then(|l| l.split_whitespace().nth(1).map(|e| e == "0"))
        })
        .unwrap_or(false)
}

/// Runs `program args` (an argv, no shell) and waits at most [`MOUNT_TIMEOUT`], blocking (also usable from
/// `Drop`); stderr is kept for the error.
pub fn run_blocking(program: &str, args: &[&str]) -> Result<()> {
    let argv = format!("{program} {}", args.join(" "));
    let mut child = std::process::Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|source| HarnessError::Io {
            path: PathBuf::from(program),
            source,
        })?;
    let start = Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(status)) => {
                if status.success() {
                    return Ok(());
                }
                let mut stderr = String::new();
                if let Some(mut e) = child.stderr.take() {
                    use std::io::Read;
                    let _ = e.read_to_string(&mut stderr);
                }
                return Err(HarnessError::Command {
                    argv,
                    status: status.to_string(),
                    stdout: String::new(),
                    stderr,
                });
            }
            Ok(None) if start.elapsed() > MOUNT_TIMEOUT => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(HarnessError::Timeout {
                    argv,
                    secs: MOUNT_TIMEOUT.as_secs(),
                });
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(50)),
            Err(source) => {
                return Err(HarnessError::Io {
                    path: PathBuf::from(program),
                    source,
                })
            }
        }
    }
}

/// A tmpfs mounted by this test; unmounted (lazily, so a process still inside cannot block it) on drop.
#[derive(Debug)]
pub struct Mount {
    pub path: PathBuf,
    mounted: bool,
}

impl Mount {
    /// `mount -t tmpfs -o size=SIZE_MIB m pxfleet-fault PATH` (PATH must exist).
    pub fn tmpfs(path: &Path, size_mib: u64) -> Result<Mount> {
        let p = path.display().to_string();
        run_blocking(
            "mount",
            &[
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size_mib}m,mode=0700"),
                "pxfleet-fault",
                &p,
            ],
        )?;
        Ok(Mount {
            path: path.to_path_buf(),
            mounted: true,
        })
    }

    /// `mount -o remount,ro PATH` (`read_only`) or `remount,rw`.
    pub fn remount(&self, read_only: bool) -> Result<()> {
        let opt = if read_only {
            "remount,ro"
        } else {
            "remount,rw"
        };
        run_blocking("mount", &["-o", opt, &self.path.display().to_string()])
    }

    /// Fills the file system with `name` until a write fails with "no space"; returns the filler's path.
    pub fn fill(&self, name: &str) -> Result<PathBuf> {
        let path = self.path.join(name);
        let io = |source| HarnessError::Io {
            path: path.clone(),
            source,
        };
        let mut f = std::fs::File::create(&path).map_err(io)?;
        let chunk = vec![0x5au8; 1 << 20];
        loop {
            match f.write_all(&chunk) {
                Ok(()) => {}
                Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => break,
                Err(e) => return Err(io(e)),
            }
        }
        // the last few bytes too (write_all may have stopped in the middle of a chunk)
        let small = [0x5au8; 512];
        while f.write_all(&small).is_ok() {}
        let _ = f.sync_all();
        Ok(path)
    }

    /// Unmounts now (also done on drop).
    pub fn unmount(&mut self) -> Result<()> {
        if self.mounted {
            run_blocking("umount", &["-l", &self.path.display().to_string()])?;
            self.mounted = false;
        }
        Ok(())
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        if let Err(e) = self.unmount() {
            eprintln!(
                "pxfleet harness: could not unmount {}: {e}",
                self.path.display()
            );
        }
    }
}

/// Copies the directory tree `from` into `to` (files and directories; permissions kept).
pub fn copy_tree(from: &Path, to: &Path) -> Result<()> {
    let io = |p: &Path| {
        let p = p.to_path_buf();
        move |source| HarnessError::Io { path: p, source }
    };
    std::fs::create_dir_all(to).map_err(io(to))?;
    for entry in std::fs::read_dir(from).map_err(io(from))? {
        let entry = entry.map_err(io(from))?;
        let src = entry.path();
        let dst = to.join(entry.file_name());
        let meta = entry.metadata().map_err(io(&src))?;
        if meta.is_dir() {
            copy_tree(&src, &dst)?;
            std::fs::set_permissions(&dst, meta.permissions()).map_err(io(&dst))?;
        } else if meta.is_file() {
            std::fs::copy(&src, &dst).map_err(io(&src))?;
        }
    }
    Ok(())
}
