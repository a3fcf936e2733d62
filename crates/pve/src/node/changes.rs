//! The changes [`Node`] makes on a node: `pct create`/`set`/`resize`, power, destroy, migrate, template
//! downloads and the root password, each with its failure detection and lock-contention retries.

use super::*;

impl Node {
    /// `pct create` (see README: pct, not pvesh, because its exit code reports a failed task, and its
    /// `--ssh-public-keys` takes a file). The CT is left stopped. With a `password`, root's password is set by the
    /// create itself (PVE's post-create setup writes the shadow entry before the first start): `--password` goes
    /// last without a value and the password on stdin, twice (pct's interactive `pve-password` mapping reads the
    /// password and its confirmation as lines when stdin is no terminal), so it never appears in any argv, log or
    /// error.
    ///
    /// Errors worth matching: [`PveError::AlreadyExists`] (the vmid is taken, by this or another node) and
    /// [`PveError::Locked`] with `create` (a half-created CT: [`Node::unlock`] then [`Node::destroy`]).
    pub async fn create(
        &self,
        spec: &CreateSpec,
        password: Option<&Secret>,
    ) -> Result<(), PveError> {
        if let Some(pw) = password {
            check_password(spec.vmid, pw)?;
        }
        let keyfile = if spec.ssh_public_keys.is_empty() {
            None
        } else {
            Some(write_private_temp(&argv::ssh_keys_file_content(
                &spec.ssh_public_keys,
            ))?)
        };
        let mut args = argv::create_args(spec, keyfile.as_ref().map(|f| f.path()))?;
        let cmd = match password {
            Some(pw) => {
                args.push("--password".into());
                let pw = pw.expose();
                self.pct(args, self.timeouts.create)
                    .stdin(format!("{pw}\n{pw}\n").into_bytes())
                    .redact(pw)
            }
            None => self.pct(args, self.timeouts.create),
        };
        tracing::info!(node = %self.name, vmid = spec.vmid, "creating container");
        self.exec(cmd, Some(spec.vmid)).await?;
        drop(keyfile);
        Ok(())
    }

    /// `pct set`. NICs in `change.nets` without `hwaddr` get the CT's current MAC for that index, so a change
    /// never gives the CT a new MAC (CONTRACT §2.3). Synchronous in PVE; its exit code is reliable.
    pub async fn set(&self, vmid: u32, change: &ConfigChange) -> Result<(), PveError> {
        let mut change = change.clone();
        if change.nets.values().any(|n| n.hwaddr.is_none()) {
            let current = self.config(vmid).await?;
            fill_hwaddrs(&mut change, &current);
        }
        let cmd = self.pct(argv::set_args(vmid, &change)?, self.timeouts.set);
        self.exec(cmd, Some(vmid)).await?;
        Ok(())
    }

    /// Grows `disk` (`rootfs` or `mpN`) to `size_gib` GiB with `pct resize`. That command exits 0 even when its
    /// task fails, so the size is read back; "already at specified size" counts as done. Shrinking is refused.
    pub async fn resize(&self, vmid: u32, disk: &str, size_gib: u32) -> Result<(), PveError> {
        let is_mp = disk
            .strip_prefix("mp")
            .is_some_and(|n| n.parse::<u32>().is_ok());
        if disk != "rootfs" && !is_mp {
            return Err(PveError::invalid(
                Some(vmid),
                "disk",
                disk,
                "rootfs or mp0..mp255",
            ));
        }
        let cmd = self.pct(
            vec![
                "resize".into(),
                vmid.to_string(),
                disk.into(),
                format!("{size_gib}G"),
            ],
            self.timeouts.resize,
        );
        let task_stderr = match self.exec(cmd.clone(), Some(vmid)).await {
            Ok(out) => out.stderr_str(),
            Err(PveError::Command { stderr, .. })
                if stderr.contains("disk is already at specified size") =>
            {
                String::new()
            }
            Err(PveError::Command { stderr, .. })
                if stderr.contains("unable to shrink disk size") =>
            {
                return Err(PveError::invalid(
                    Some(vmid),
                    disk,
                    format!("{size_gib}G"),
                    "a size larger than the current one (shrinking is not possible)",
                ));
            }
            Err(e) => return Err(e),
        };
        let want = u64::from(size_gib) << 30;
        let have = self.config(vmid).await?.disk_size(disk);
        if have.is_some_and(|h| h >= want) {
            Ok(())
        } else {
            Err(PveError::TaskFailed {
                argv: cmd.to_string(),
                upid: None,
                message: format!(
                    "{disk} is {} after resize, wanted {}G{}",
                    have.map(parse::format_size)
                        .unwrap_or_else(|| "unknown".into()),
                    size_gib,
                    if task_stderr.is_empty() {
                        String::new()
                    } else {
                        format!(": {task_stderr}")
                    }
                ),
            })
        }
    }

    /// `pct start`; a CT that is already running counts as started.
    pub async fn start(&self, vmid: u32) -> Result<(), PveError> {
        let cmd = self.pct(vec!["start".into(), vmid.to_string()], self.timeouts.power);
        match self.exec(cmd, Some(vmid)).await {
            Ok(_) | Err(PveError::AlreadyRunning { .. }) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// `pct reboot --timeout N`: clean shutdown (killed after the timeout), then start; PVE applies the
    /// pending changes on the way. Only for a running CT (PVE says `VM <vmid> not running` otherwise).
    pub async fn reboot(&self, vmid: u32, timeout: Duration) -> Result<(), PveError> {
        let secs = timeout.as_secs().max(1);
        let cmd = self.pct(
            vec![
                "reboot".into(),
                vmid.to_string(),
                "--timeout".into(),
                secs.to_string(),
            ],
            timeout + self.timeouts.power,
        );
        self.exec(cmd, Some(vmid)).await?;
        Ok(())
    }

    /// `pct stop` (hard); a CT that is not running counts as stopped.
    pub async fn stop(&self, vmid: u32) -> Result<(), PveError> {
        let cmd = self.pct(vec!["stop".into(), vmid.to_string()], self.timeouts.power);
        match self.exec(cmd, Some(vmid)).await {
            Ok(_) | Err(PveError::NotRunning { .. }) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// `pct shutdown --timeout N`; if the CT did not stop in time (the task fails), `pct stop`.
    pub async fn shutdown(
        &self,
        vmid: u32,
        timeout: Duration,
    ) -> Result<ShutdownOutcome, PveError> {
        let secs = timeout.as_secs().max(1);
        let cmd = self.pct(
            vec![
                "shutdown".into(),
                vmid.to_string(),
                "--timeout".into(),
                secs.to_string(),
            ],
            timeout + self.timeouts.power,
        );
        match self.exec(cmd, Some(vmid)).await {
            Ok(_) => Ok(ShutdownOutcome::Clean),
            Err(PveError::NotRunning { .. }) => Ok(ShutdownOutcome::AlreadyStopped),
            Err(e @ (PveError::TaskFailed { .. } | PveError::Command { .. })) => {
                tracing::warn!(node = %self.name, vmid, error = %e, "clean shutdown failed, stopping");
                self.stop(vmid).await?;
                Ok(ShutdownOutcome::Forced)
            }
            Err(e) => Err(e),
        }
    }

    /// `pct destroy --force 1 --purge 1 --destroy-unreferenced-disks 1`: stops a running CT first, removes it
    /// from backup/replication/HA, and frees leftover volumes of this vmid. [`PveError::NotFound`] means it is
    /// already gone; [`PveError::Protected`] means `protection` must be cleared first.
    pub async fn destroy(&self, vmid: u32) -> Result<(), PveError> {
        let cmd = self.pct(
            vec![
                "destroy".into(),
                vmid.to_string(),
                "--force".into(),
                "1".into(),
                "--purge".into(),
                "1".into(),
                "--destroy-unreferenced-disks".into(),
                "1".into(),
            ],
            self.timeouts.destroy,
        );
        self.exec(cmd, Some(vmid)).await?;
        Ok(())
    }

    /// `pct unlock`: clears a stale lock (for example `create` after a crash). "no lock found" counts as done.
    pub async fn unlock(&self, vmid: u32) -> Result<(), PveError> {
        let cmd = self.pct(vec!["unlock".into(), vmid.to_string()], self.timeouts.read);
        match self.exec(cmd, Some(vmid)).await {
            Err(PveError::Command { stderr, .. }) if stderr.contains("no lock found") => Ok(()),
            r => r.map(|_| ()),
        }
    }

    /// `pct migrate <vmid> <target> [--restart 1]` (a task command: its exit code reports failure). With
    /// `restart`, a running CT is shut down, moved and started on the target.
    pub async fn migrate(&self, vmid: u32, target: &str, restart: bool) -> Result<(), PveError> {
        if !argv::is_dns_name(target) {
            return Err(PveError::invalid(
                Some(vmid),
                "target node",
                target,
                "a node name",
            ));
        }
        let mut args = vec!["migrate".into(), vmid.to_string(), target.into()];
        if restart {
            args.extend(["--restart".into(), "1".into()]);
        }
        self.exec(self.pct(args, self.timeouts.migrate), Some(vmid))
            .await?;
        Ok(())
    }

    /// `pveam download <storage> <template>`. That command exits 0 even when the download task fails, so the
    /// storage's template list is read back; the file being there is success.
    pub async fn pveam_download(&self, storage: &str, template: &str) -> Result<(), PveError> {
        if template.contains('/') || template.is_empty() {
            return Err(PveError::invalid(
                None,
                "template",
                template,
                "a file name from `pveam available`",
            ));
        }
        let cmd = Command::new("pveam")
            .args(["download", storage, template])
            .timeout(self.timeouts.download);
        let out = self.exec(cmd.clone(), None).await?;
        let volid = format!("{storage}:vztmpl/{template}");
        if self
            .templates(storage)
            .await?
            .iter()
            .any(|t| t.volid == volid)
        {
            Ok(())
        } else {
            Err(PveError::TaskFailed {
                argv: cmd.to_string(),
                upid: None,
                message: match out.stderr_str() {
                    s if s.is_empty() => {
                        format!("{volid} is not on the storage after the download")
                    }
                    s => s,
                },
            })
        }
    }

    /// Sets root's password inside a running CT: `pct exec <vmid> --keep-env 0 -- chpasswd` with
    /// `root:<password>\n` on stdin. The password never appears in any argv, log or error.
    pub async fn set_root_password(&self, vmid: u32, password: &Secret) -> Result<(), PveError> {
        check_password(vmid, password)?;
        let pw = password.expose();
        let cmd = Command::new("pct")
            .args([
                "exec",
                &vmid.to_string(),
                "--keep-env",
                "0",
                "--",
                "chpasswd",
            ])
            .stdin(format!("root:{pw}\n").into_bytes())
            .redact(pw)
            .timeout(self.timeouts.exec);
        self.exec(cmd, Some(vmid)).await?;
        Ok(())
    }

    /// Convenience: whether the CT is running, from `status/current`.
    pub async fn is_running(&self, vmid: u32) -> Result<bool, PveError> {
        Ok(self.status(vmid).await?.status == RunState::Running)
    }
}

/// PVE's `password` (minLength 5), and one line: it travels on stdin as a line.
fn check_password(vmid: u32, password: &Secret) -> Result<(), PveError> {
    let pw = password.expose();
    if pw.chars().count() < 5 || pw.contains(['\n', '\r', '\0']) {
        return Err(PveError::invalid(
            Some(vmid),
            "password",
            "<redacted>",
            "at least 5 characters, no newlines",
        ));
    }
    Ok(())
}

/// Copies current MACs into NIC changes that have none (pure; used by [`Node::set`]).
pub fn fill_hwaddrs(change: &mut ConfigChange, current: &ContainerConfig) {
    for (i, n) in change.nets.iter_mut() {
        if n.hwaddr.is_none() {
            n.hwaddr = current.hwaddr(*i).map(str::to_string);
        }
    }
}

/// A temporary file readable only by its owner (0600), removed when dropped.
fn write_private_temp(content: &str) -> Result<tempfile::NamedTempFile, PveError> {
    use std::os::unix::fs::PermissionsExt;
    let err = |source| PveError::TempFile {
        path: std::env::temp_dir().display().to_string(),
        source,
    };
    let mut f = tempfile::Builder::new()
        .prefix("pxfleet-keys-")
        .permissions(std::fs::Permissions::from_mode(0o600))
        .tempfile()
        .map_err(err)?;
    f.write_all(content.as_bytes()).map_err(err)?;
    f.flush().map_err(err)?;
    Ok(f)
}
