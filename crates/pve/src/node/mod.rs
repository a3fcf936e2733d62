//! [`Node`]: typed operations on one PVE node over its CLI tools, with CONTRACT §1 failure detection
//! (exit codes where they are reliable, read-back where they are not) and bounded, jittered retries on
//! config-lock contention.
//!
//! Reads (listings, configs, node facts) are here; the changes (create, set, resize, power, destroy, migrate,
//! downloads, the root password) are in [`changes`]; `pct clone` and `pct template` in [`clone`].

mod changes;
mod clone;
mod pools;
mod snapshot;

pub use changes::fill_hwaddrs;
pub use clone::{clone_args, CloneSpec};
pub use pools::{guest_pools, is_pool_id};
pub use snapshot::{check_snapshot_name, Snapshot};

use std::hash::{BuildHasher, Hasher};
use std::io::Write as _;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::argv;
use crate::error::{classify, PveError};
use crate::parse::{
    self, parse_interfaces, parse_json, parse_json_list, parse_pveam_available, AplInfo, Bridge,
    ClusterResource, ClusterStatusItem, ContainerConfig, ContainerStatus, Interface, NodeStatus,
    ParseError, PveamAvailable, RunState, StorageContent, StorageInfo, TaskStatus, Upid, Version,
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

    /// `GET /cluster/status`: the name of the PVE cluster this node belongs to, `None` for a standalone node.
    pub async fn cluster_name(&self) -> Result<Option<String>, PveError> {
        self.get("/cluster/status", &[], None, |s| {
            parse_json::<Vec<ClusterStatusItem>>("GET /cluster/status", s)
        })
        .await
        .map(|items| parse::cluster_name(&items))
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
