//! [`Node`]: typed operations on one PVE node over its CLI tools, with CONTRACT §1 failure detection
//! (exit codes where they are reliable, read-back where they are not) and bounded, jittered retries on
//! config-lock contention.

use std::hash::{BuildHasher, Hasher};
use std::io::Write as _;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::argv;
use crate::error::{classify, PveError};
use crate::parse::{
    self, parse_interfaces, parse_json, parse_json_list, parse_pveam_available, AplInfo, Bridge,
    ClusterResource, ContainerConfig, ContainerStatus, Interface, NodeStatus, ParseError,
    PveamAvailable, RunState, StorageContent, StorageInfo, TaskStatus, Upid, Version,
};
use crate::runner::{Command, Output, Runner};
use crate::secret::Secret;
use crate::spec::{ConfigChange, CreateSpec};

/// Per-operation time limits (the process is killed when exceeded).
#[derive(Clone, Debug)]
pub struct Timeouts {
    /// pvesh gets, pvesm path, pct unlock.
    pub read: Duration,
    pub create: Duration,
    pub set: Duration,
    pub resize: Duration,
    /// start/stop; shutdown gets its own timeout plus this.
    pub power: Duration,
    pub destroy: Duration,
    pub migrate: Duration,
    pub download: Duration,
    pub exec: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            read: Duration::from_secs(30),
            create: Duration::from_secs(20 * 60),
            set: Duration::from_secs(5 * 60),
            resize: Duration::from_secs(30 * 60),
            power: Duration::from_secs(3 * 60),
            destroy: Duration::from_secs(10 * 60),
            migrate: Duration::from_secs(60 * 60),
            download: Duration::from_secs(60 * 60),
            exec: Duration::from_secs(60),
        }
    }
}

/// Retries of lock contention (`CT is locked (...)` other than `create`/`destroyed`, `got timeout`).
#[derive(Clone, Debug)]
pub struct RetryPolicy {
    /// Total tries, at least 1.
    pub attempts: u32,
    /// First delay; doubled each time, capped at `max_delay`, then jittered to 50..100 %.
    pub base_delay: Duration,
    pub max_delay: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            attempts: 6,
            base_delay: Duration::from_millis(500),
            max_delay: Duration::from_secs(10),
        }
    }
}

impl RetryPolicy {
    /// Retries without waiting (tests).
    pub fn immediate(attempts: u32) -> Self {
        RetryPolicy {
            attempts,
            base_delay: Duration::ZERO,
            max_delay: Duration::ZERO,
        }
    }

    /// Delay before try `n + 1` (n >= 1).
    pub fn delay(&self, n: u32) -> Duration {
        let exp = self
            .base_delay
            .saturating_mul(1u32 << (n.saturating_sub(1)).min(16))
            .min(self.max_delay);
        let r = std::collections::hash_map::RandomState::new()
            .build_hasher()
            .finish();
        let frac = 0.5 + (r % 1000) as f64 / 2000.0;
        exp.mul_f64(frac)
    }
}

/// How [`Node::shutdown`] ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ShutdownOutcome {
    /// Clean shutdown within the timeout.
    Clean,
    /// Did not stop in time (or the shutdown task failed), so it was stopped hard.
    Forced,
    /// Was not running.
    AlreadyStopped,
}

/// One PVE node, driven through a [`Runner`].
#[derive(Clone)]
pub struct Node {
    name: String,
    runner: Arc<dyn Runner>,
    timeouts: Timeouts,
    retry: RetryPolicy,
}

impl std::fmt::Debug for Node {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Node").field("name", &self.name).finish()
    }
}

/// A file name used only to ask `pvesm path` where a storage keeps templates.
const TEMPLATE_PROBE: &str = "pxfleet-probe.tar.zst";

/// One key of `pct pending` that waits for the next start.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PendingKey {
    pub key: String,
    /// The value in effect now (`None`: not set).
    pub current: Option<String>,
    /// The value it will have (`None` when it is only deleted).
    pub pending: Option<String>,
    /// It will be deleted.
    pub delete: bool,
}

impl Node {
    /// `name` is the PVE node name used in API paths (`/nodes/<name>/...`).
    pub fn new(name: impl Into<String>, runner: Arc<dyn Runner>) -> Self {
        Node {
            name: name.into(),
            runner,
            timeouts: Timeouts::default(),
            retry: RetryPolicy::default(),
        }
    }

    pub fn with_timeouts(mut self, t: Timeouts) -> Self {
        self.timeouts = t;
        self
    }

    pub fn with_retry(mut self, r: RetryPolicy) -> Self {
        self.retry = r;
        self
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    // ----- plumbing -------------------------------------------------------------------------------------------

    /// Runs `cmd`; a non-zero exit becomes a classified error; retryable lock errors are retried.
    async fn exec(&self, cmd: Command, vmid: Option<u32>) -> Result<Output, PveError> {
        let attempts = self.retry.attempts.max(1);
        let mut n = 1;
        loop {
            let out = self.runner.run(cmd.clone()).await?;
            if out.success() {
                if !out.stderr.is_empty() {
                    tracing::debug!(command = %cmd, stderr = %crate::error::scrub(&out.stderr_str(), &cmd), "stderr");
                }
                return Ok(out);
            }
            let err = classify(&cmd, &out, vmid);
            if err.retryable() && n < attempts {
                let d = self.retry.delay(n);
                tracing::info!(command = %cmd, error = %err, attempt = n, delay = ?d, "lock contention, retrying");
                tokio::time::sleep(d).await;
                n += 1;
                continue;
            }
            return Err(err);
        }
    }

    fn pvesh_get(&self, path: &str, params: &[(&str, &str)]) -> Command {
        let mut c = Command::new("pvesh").args(["get", path, "--output-format", "json"]);
        for (k, v) in params {
            c = c.arg(format!("--{k}")).arg(*v);
        }
        c.timeout(self.timeouts.read)
    }

    async fn get<T>(
        &self,
        path: &str,
        params: &[(&str, &str)],
        vmid: Option<u32>,
        parse: impl FnOnce(&str) -> Result<T, ParseError>,
    ) -> Result<T, PveError> {
        let cmd = self.pvesh_get(path, params);
        let out = self.exec(cmd.clone(), vmid).await?;
        parse(&out.stdout_str()).map_err(|e| PveError::parse(&cmd, e))
    }

    fn pct(&self, args: Vec<String>, timeout: Duration) -> Command {
        Command::new("pct").args(args).timeout(timeout)
    }

    fn lxc_path(&self, vmid: u32) -> String {
        format!("/nodes/{}/lxc/{vmid}", self.name)
    }

    // ----- reads ---------------------------------------------------------------------------------------------

    /// `GET /nodes/{node}/lxc`, sorted by vmid.
    pub async fn list_containers(&self) -> Result<Vec<ContainerStatus>, PveError> {
        let path = format!("/nodes/{}/lxc", self.name);
        self.get(&path, &[], None, |s| {
            parse_json_list("GET /nodes/{node}/lxc", s, |c: &ContainerStatus| c.vmid)
        })
        .await
    }

    /// `GET .../lxc/{vmid}/config` (pending values merged in, as PVE does by default).
    pub async fn config(&self, vmid: u32) -> Result<ContainerConfig, PveError> {
        self.get(
            &format!("{}/config", self.lxc_path(vmid)),
            &[],
            Some(vmid),
            ContainerConfig::from_json,
        )
        .await
    }

    /// `GET .../lxc/{vmid}/pending`: the keys whose new value or deletion waits for the next start.
    pub async fn pending(&self, vmid: u32) -> Result<Vec<PendingKey>, PveError> {
        #[derive(serde::Deserialize)]
        struct Entry {
            key: String,
            #[serde(default)]
            value: Option<serde_json::Value>,
            #[serde(default)]
            pending: Option<serde_json::Value>,
            #[serde(default)]
            delete: Option<serde_json::Value>,
        }
        let text = |v: serde_json::Value| match v {
            serde_json::Value::String(s) => s,
            v => v.to_string(),
        };
        self.get(
            &format!("{}/pending", self.lxc_path(vmid)),
            &[],
            Some(vmid),
            |s| {
                let all: Vec<Entry> = parse_json("GET /nodes/{node}/lxc/{vmid}/pending", s)?;
                Ok(all
                    .into_iter()
                    .filter(|e| e.pending.is_some() || e.delete.is_some())
                    .map(|e| PendingKey {
                        key: e.key,
                        current: e.value.map(text),
                        pending: e.pending.map(text),
                        delete: e.delete.is_some(),
                    })
                    .collect())
            },
        )
        .await
    }

    /// `GET .../lxc/{vmid}/status/current`.
    pub async fn status(&self, vmid: u32) -> Result<ContainerStatus, PveError> {
        self.get(
            &format!("{}/status/current", self.lxc_path(vmid)),
            &[],
            Some(vmid),
            |s| parse_json("GET /nodes/{node}/lxc/{vmid}/status/current", s),
        )
        .await
    }

    /// `GET .../lxc/{vmid}/interfaces`; empty for a stopped CT (PVE returns `null`).
    pub async fn interfaces(&self, vmid: u32) -> Result<Vec<Interface>, PveError> {
        self.get(
            &format!("{}/interfaces", self.lxc_path(vmid)),
            &[],
            Some(vmid),
            parse_interfaces,
        )
        .await
    }

    /// `GET /nodes/{node}/storage`, sorted by ID, with content types and free space.
    pub async fn storages(&self) -> Result<Vec<StorageInfo>, PveError> {
        let path = format!("/nodes/{}/storage", self.name);
        self.get(&path, &[], None, |s| {
            parse_json_list("GET /nodes/{node}/storage", s, |x: &StorageInfo| {
                x.storage.clone()
            })
        })
        .await
    }

    /// `GET /nodes/{node}/network?type=any_bridge` (Linux and OVS bridges, SDN vnets), sorted by name.
    pub async fn bridges(&self) -> Result<Vec<Bridge>, PveError> {
        let path = format!("/nodes/{}/network", self.name);
        self.get(&path, &[("type", "any_bridge")], None, |s| {
            parse_json_list("GET /nodes/{node}/network", s, |x: &Bridge| x.iface.clone())
        })
        .await
    }

    /// Templates on `storage`: `GET /nodes/{node}/storage/{storage}/content?content=vztmpl`, sorted by volid.
    pub async fn templates(&self, storage: &str) -> Result<Vec<StorageContent>, PveError> {
        let path = format!("/nodes/{}/storage/{storage}/content", self.name);
        self.get(&path, &[("content", "vztmpl")], None, |s| {
            parse_json_list(
                "GET /nodes/{node}/storage/{storage}/content",
                s,
                |x: &StorageContent| x.volid.clone(),
            )
        })
        .await
    }

    /// The directory where `storage` keeps templates (`/var/lib/vz/template/cache` for `local`), from
    /// `pvesm path <storage>:vztmpl/<probe>`: where seeded template files must be written.
    pub async fn template_dir(&self, storage: &str) -> Result<PathBuf, PveError> {
        let cmd = Command::new("pvesm")
            .args(["path", &format!("{storage}:vztmpl/{TEMPLATE_PROBE}")])
            .timeout(self.timeouts.read);
        let out = self.exec(cmd.clone(), None).await?;
        let text = out.stdout_str();
        let line = text
            .lines()
            .map(str::trim)
            .rfind(|l| !l.is_empty())
            .unwrap_or("");
        let p = PathBuf::from(line);
        match (p.is_absolute(), p.file_name()) {
            (true, Some(f)) if f == TEMPLATE_PROBE => {
                Ok(p.parent().map(PathBuf::from).unwrap_or_default())
            }
            _ => Err(PveError::parse(
                &cmd,
                ParseError::new(
                    "pvesm path",
                    format!("expected an absolute path ending in {TEMPLATE_PROBE}, got `{line}`"),
                ),
            )),
        }
    }

    /// `pveam available [--section S]`: the downloadable template index.
    pub async fn pveam_available(
        &self,
        section: Option<&str>,
    ) -> Result<Vec<PveamAvailable>, PveError> {
        let mut cmd = Command::new("pveam")
            .arg("available")
            .timeout(self.timeouts.read);
        if let Some(s) = section {
            cmd = cmd.args(["--section", s]);
        }
        let out = self.exec(cmd.clone(), None).await?;
        parse_pveam_available(&out.stdout_str()).map_err(|e| PveError::parse(&cmd, e))
    }

    /// `GET /nodes/{node}/aplinfo`: the same index with URLs and checksums.
    pub async fn aplinfo(&self) -> Result<Vec<AplInfo>, PveError> {
        let path = format!("/nodes/{}/aplinfo", self.name);
        self.get(&path, &[], None, |s| {
            parse_json_list("GET /nodes/{node}/aplinfo", s, |x: &AplInfo| {
                x.template.clone()
            })
        })
        .await
    }

    /// `GET /nodes/{node}/tasks/{upid}/status` (asked of the node named in the UPID).
    pub async fn task_status(&self, upid: &str) -> Result<TaskStatus, PveError> {
        let node = Upid::parse(upid)
            .map(|u| u.node)
            .map_err(|e| PveError::invalid(None, "upid", upid, &e.detail))?;
        self.get(
            &format!("/nodes/{node}/tasks/{upid}/status"),
            &[],
            None,
            |s| parse_json("GET /nodes/{node}/tasks/{upid}/status", s),
        )
        .await
    }

    /// `GET /nodes/{node}/status`.
    pub async fn node_status(&self) -> Result<NodeStatus, PveError> {
        self.get(&format!("/nodes/{}/status", self.name), &[], None, |s| {
            parse_json("GET /nodes/{node}/status", s)
        })
        .await
    }

    /// `GET /version`.
    pub async fn version(&self) -> Result<Version, PveError> {
        self.get("/version", &[], None, |s| parse_json("GET /version", s))
            .await
    }

    /// `GET /cluster/resources?type=vm`: every guest of the cluster (qemu too), for vmid allocation. Sorted by id.
    pub async fn cluster_guests(&self) -> Result<Vec<ClusterResource>, PveError> {
        self.get("/cluster/resources", &[("type", "vm")], None, |s| {
            parse_json_list("GET /cluster/resources", s, |x: &ClusterResource| {
                x.id.clone()
            })
        })
        .await
    }

    // ----- changes -------------------------------------------------------------------------------------------

    /// `pct create` (see README: pct, not pvesh, because its exit code reports a failed task, and its
    /// `--ssh-public-keys` takes a file). The CT is not started and has no root password yet: call
    /// [`Node::start`] and then [`Node::set_root_password`].
    ///
    /// Errors worth matching: [`PveError::AlreadyExists`] (the vmid is taken, by this or another node) and
    /// [`PveError::Locked`] with `create` (a half-created CT: [`Node::unlock`] then [`Node::destroy`]).
    pub async fn create(&self, spec: &CreateSpec) -> Result<(), PveError> {
        let keyfile = if spec.ssh_public_keys.is_empty() {
            None
        } else {
            Some(write_private_temp(&argv::ssh_keys_file_content(
                &spec.ssh_public_keys,
            ))?)
        };
        let args = argv::create_args(spec, keyfile.as_ref().map(|f| f.path()))?;
        let cmd = self.pct(args, self.timeouts.create);
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
        let pw = password.expose();
        if pw.chars().count() < 5 || pw.contains(['\n', '\r', '\0']) {
            return Err(PveError::invalid(
                Some(vmid),
                "password",
                "<redacted>",
                "at least 5 characters, no newlines",
            ));
        }
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

impl PveError {
    /// The vmid this error is about, when there is one.
    pub fn vmid(&self) -> Option<u32> {
        match self {
            PveError::NotFound { vmid, .. }
            | PveError::AlreadyExists { vmid, .. }
            | PveError::Locked { vmid, .. }
            | PveError::LockTimeout { vmid, .. }
            | PveError::NotRunning { vmid, .. }
            | PveError::AlreadyRunning { vmid }
            | PveError::Protected { vmid, .. } => Some(*vmid),
            PveError::Invalid { vmid, .. } => *vmid,
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_is_send_sync() {
        fn is<T: Send + Sync + 'static>() {}
        is::<Node>();
    }

    #[test]
    fn backoff_is_bounded_and_jittered() {
        let p = RetryPolicy::default();
        for n in 1..20 {
            let d = p.delay(n);
            assert!(d <= p.max_delay, "{d:?}");
            assert!(d >= p.base_delay.min(p.max_delay) / 2, "{d:?}");
        }
        assert_eq!(RetryPolicy::immediate(3).delay(2), Duration::ZERO);
    }
}
