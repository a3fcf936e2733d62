//! [`PveNode`]: the agent's [`NodeApi`] over crates/pve's node driver ([`pxfleet_pve::Node`]). Creates arrive as
//! pve's typed [`CreateSpec`], changes as its [`ConfigChange`], configurations go back as its
//! [`ContainerConfig`]; pve's other typed answers are turned into the agent's plain data. This is the only module
//! that drives crates/pve.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use pxfleet_pve::{ConfigChange, CreateSpec, Node, ProcessRunner, PveError, Timeouts};

use crate::config::AgentConfig;
use crate::node::{
    BridgeInfo, ContainerConfig, CtSummary, Interface, NodeApi, NodeFacts, Secret, StorageInfo,
    TemplateFile,
};

/// A PVE node reached through its command-line tools.
pub struct PveNode {
    node: Node,
    /// Storage -> its template directory (`pvesm path`): asked once per storage, not once per create.
    template_dirs: std::sync::Mutex<BTreeMap<String, PathBuf>>,
    /// This node's container config files (`/etc/pve/nodes/<node>/lxc`), for the `lxc.idmap` and
    /// `lxc.environment.runtime` lines.
    config_dir: PathBuf,
}

impl PveNode {
    /// The storages (with usage) and the templates in the template storages: what an operation can change on
    /// the node, read for [`NodeApi::facts`] and [`NodeApi::inventory`].
    async fn storages_and_templates(
        &self,
    ) -> Result<(Vec<StorageInfo>, Vec<TemplateFile>), PveError> {
        let storages = self.node.storages().await?;
        let mut templates = Vec::new();
        let mut out_storages = Vec::new();
        for s in storages {
            if s.content.contains("vztmpl") && s.active && s.enabled {
                if let Ok(list) = self.node.templates(&s.storage).await {
                    for t in list {
                        let file_name = t
                            .volid
                            .split_once(":vztmpl/")
                            .map(|(_, f)| f.to_string())
                            .unwrap_or_default();
                        templates.push(TemplateFile {
                            volid: t.volid,
                            storage: s.storage.clone(),
                            file_name,
                            size_bytes: t.size,
                        });
                    }
                }
            }
            let path = if s.content.contains("vztmpl") {
                // cached: the directory of a storage does not move
                NodeApi::template_dir(self, &s.storage)
                    .await
                    .ok()
                    .and_then(|p| {
                        p.parent()
                            .and_then(|p| p.parent())
                            .map(|p| p.display().to_string())
                    })
            } else {
                None
            };
            out_storages.push(StorageInfo {
                id: s.storage,
                kind: s.kind,
                content: s.content.into_iter().collect(),
                active: s.active,
                enabled: s.enabled,
                shared: s.shared,
                total_bytes: s.total,
                used_bytes: s.used,
                avail_bytes: s.avail,
                path,
            });
        }
        Ok((out_storages, templates))
    }

    pub fn new(node: Node) -> Self {
        let config_dir = PathBuf::from("/etc/pve/nodes")
            .join(node.name())
            .join("lxc");
        PveNode {
            node,
            template_dirs: Default::default(),
            config_dir,
        }
    }

    /// Where this node's container config files are (tests point it into pvesim's cluster directory).
    pub fn with_config_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.config_dir = dir.into();
        self
    }

    /// The node described by the agent config: tools in `pve_bin_dir`, `env` passed to them.
    pub fn from_config(config: &AgentConfig) -> Self {
        let mut runner = ProcessRunner::with_bin_dir(&config.pve_bin_dir);
        for (k, v) in &config.env {
            runner = runner.with_env(k, v);
        }
        let t = config.command_timeout();
        let timeouts = Timeouts {
            create: t,
            destroy: t,
            migrate: t,
            download: t,
            ..Timeouts::default()
        };
        let node = PveNode::new(Node::new(&config.node, Arc::new(runner)).with_timeouts(timeouts));
        match &config.pve_config_dir {
            Some(dir) => node.with_config_dir(dir),
            None => node,
        }
    }

    /// Runs `edit` on the config directory off the async workers (file locking and writing block).
    async fn edit_config_file(
        &self,
        vmid: u32,
        edit: impl FnOnce(&std::path::Path) -> Result<(), PveError> + Send + 'static,
    ) -> Result<(), PveError> {
        let dir = self.config_dir.clone();
        tokio::task::spawn_blocking(move || edit(&dir))
            .await
            .map_err(|e| PveError::ConfigFile {
                vmid,
                path: String::new(),
                source: std::io::Error::other(e.to_string()),
            })?
    }
}

/// A fingerprint of each container's config file (`<dir>/<vmid>.conf`, pending section included): the node's
/// listing shows only tags, CPUs, memory, swap and disk, so without it a change to any other key (`pct set
/// --features nesting=1`, a description, a mount option) went unseen until the container's turn to be read
/// again came round (ten observation passes). Reading a file of pmxcfs costs no process, unlike `pct config`.
/// Containers whose file cannot be read (no such directory, as on a node without /etc/pve) are left out and
/// keep the rotation alone.
fn config_fingerprints(dir: &std::path::Path, vmids: &[u32]) -> BTreeMap<u32, String> {
    vmids
        .iter()
        .filter_map(|v| Some((*v, fingerprint(&dir.join(format!("{v}.conf")))?)))
        .collect()
}

/// The fingerprint of one config file; `None` when it cannot be read.
fn fingerprint(path: &std::path::Path) -> Option<String> {
    use sha2::Digest;
    let bytes = std::fs::read(path).ok()?;
    let digest = sha2::Sha256::digest(&bytes);
    Some(hex::encode(&digest[..12]))
}

/// Every `VMID.conf` of `dir` with its fingerprint; `None` when the directory cannot be read.
fn dir_fingerprints(dir: &std::path::Path) -> Option<BTreeMap<u32, String>> {
    let mut out = BTreeMap::new();
    for entry in std::fs::read_dir(dir).ok()?.flatten() {
        let name = entry.file_name();
        let Some(vmid) = name
            .to_str()
            .and_then(|n| n.strip_suffix(".conf"))
            .and_then(|v| v.parse::<u32>().ok())
        else {
            continue;
        };
        if let Some(f) = fingerprint(&entry.path()) {
            out.insert(vmid, f);
        }
    }
    Some(out)
}

impl NodeApi for PveNode {
    async fn list(&self) -> Result<Vec<CtSummary>, PveError> {
        let list = self.node.list_containers().await?;
        let vmids: Vec<u32> = list.iter().map(|c| c.vmid as u32).collect();
        let dir = self.config_dir.clone();
        let files = tokio::task::spawn_blocking(move || config_fingerprints(&dir, &vmids))
            .await
            .unwrap_or_default();
        Ok(list
            .into_iter()
            .map(|c| CtSummary {
                vmid: c.vmid as u32,
                status: match c.status {
                    pxfleet_pve::parse::RunState::Running => "running".to_string(),
                    pxfleet_pve::parse::RunState::Stopped => "stopped".to_string(),
                    pxfleet_pve::parse::RunState::Other(s) => s,
                },
                listing: format!(
                    "tags={:?} cpus={:?} maxmem={:?} maxswap={:?} maxdisk={:?} file={}",
                    c.tags,
                    c.cpus,
                    c.maxmem,
                    c.maxswap,
                    c.maxdisk,
                    files
                        .get(&(c.vmid as u32))
                        .map(String::as_str)
                        .unwrap_or("-")
                ),
                lock: c.lock,
                name: c.name.unwrap_or_else(|| format!("CT{}", c.vmid)),
            })
            .collect())
    }

    async fn config_fingerprints(&self) -> Option<BTreeMap<u32, String>> {
        let dir = self.config_dir.clone();
        tokio::task::spawn_blocking(move || dir_fingerprints(&dir))
            .await
            .ok()
            .flatten()
    }

    async fn config(&self, vmid: u32) -> Result<Option<ContainerConfig>, PveError> {
        match self.node.config(vmid).await {
            Ok(c) => Ok(Some(c)),
            Err(PveError::NotFound { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    async fn create(&self, spec: &CreateSpec, password: Option<&Secret>) -> Result<(), PveError> {
        let password = password.map(|pw| pxfleet_pve::Secret::new(pw.0.clone()));
        self.node.create(spec, password.as_ref()).await
    }

    async fn clone_ct(&self, spec: &pxfleet_pve::CloneSpec) -> Result<(), PveError> {
        self.node.clone_ct(spec).await
    }

    async fn set(&self, vmid: u32, change: &ConfigChange) -> Result<(), PveError> {
        self.node.set(vmid, change).await
    }

    async fn write_idmap(&self, vmid: u32, values: &[String]) -> Result<(), PveError> {
        let values = values.to_vec();
        self.edit_config_file(vmid, move |dir| {
            pxfleet_pve::conffile::write_idmap(dir, vmid, &values)
        })
        .await
    }

    async fn write_env(&self, vmid: u32, env: &BTreeMap<String, String>) -> Result<(), PveError> {
        let env = env.clone();
        self.edit_config_file(vmid, move |dir| {
            pxfleet_pve::conffile::write_env(dir, vmid, &env)
        })
        .await
    }

    async fn resize(&self, vmid: u32, disk: &str, size_gib: u64) -> Result<(), PveError> {
        let size = u32::try_from(size_gib).map_err(|_| PveError::Invalid {
            vmid: Some(vmid),
            field: format!("{disk} size"),
            value: format!("{size_gib} GiB"),
            expected: format!("at most {} GiB", u32::MAX),
        })?;
        self.node.resize(vmid, disk, size).await
    }

    async fn start(&self, vmid: u32) -> Result<(), PveError> {
        match self.node.start(vmid).await {
            Ok(()) | Err(PveError::AlreadyRunning { .. }) => Ok(()),
            Err(e) => Err(e),
        }
    }

    async fn stop(&self, vmid: u32) -> Result<(), PveError> {
        self.node.stop(vmid).await
    }

    async fn shutdown(&self, vmid: u32, timeout_secs: u32) -> Result<bool, PveError> {
        // pve stops hard by itself when the clean shutdown times out, so the container is stopped either way.
        self.node
            .shutdown(vmid, Duration::from_secs(timeout_secs.into()))
            .await
            .map(|_| true)
    }

    async fn destroy(&self, vmid: u32, _purge: bool) -> Result<(), PveError> {
        match self.node.destroy(vmid).await {
            Ok(()) | Err(PveError::NotFound { .. }) => Ok(()),
            Err(e) => Err(e),
        }
    }

    async fn unlock(&self, vmid: u32) -> Result<(), PveError> {
        self.node.unlock(vmid).await
    }

    async fn make_template(&self, vmid: u32) -> Result<(), PveError> {
        self.node.template(vmid).await
    }

    async fn snapshot(
        &self,
        vmid: u32,
        name: &str,
        description: Option<&str>,
    ) -> Result<(), PveError> {
        self.node.snapshot(vmid, name, description).await
    }

    async fn delete_snapshot(&self, vmid: u32, name: &str) -> Result<(), PveError> {
        self.node.delete_snapshot(vmid, name).await
    }

    async fn rollback(&self, vmid: u32, name: &str, start: bool) -> Result<(), PveError> {
        self.node.rollback(vmid, name, start).await
    }

    async fn snapshots(&self, vmid: u32) -> Result<Vec<crate::ops::SnapshotInfo>, PveError> {
        self.node.snapshots(vmid).await
    }

    async fn guest_pools(&self) -> BTreeMap<u32, String> {
        // <pve>/nodes/<node>/lxc -> <pve>/user.cfg (pmxcfs, or pvesim's cluster directory)
        let Some(file) = self
            .config_dir
            .ancestors()
            .nth(3)
            .map(|d| d.join("user.cfg"))
        else {
            return BTreeMap::new();
        };
        match tokio::fs::read_to_string(&file).await {
            Ok(text) => pxfleet_pve::guest_pools(&text),
            Err(_) => BTreeMap::new(),
        }
    }

    async fn set_pool(
        &self,
        vmid: u32,
        from: Option<&str>,
        to: Option<&str>,
    ) -> Result<(), PveError> {
        self.node.set_pool(vmid, from, to).await
    }

    async fn pending(&self, vmid: u32) -> Result<Vec<pxfleet_pve::PendingKey>, PveError> {
        self.node.pending(vmid).await
    }

    async fn revert(&self, vmid: u32, keys: &[String]) -> Result<(), PveError> {
        let change = ConfigChange {
            revert: keys.iter().cloned().collect(),
            ..ConfigChange::default()
        };
        self.node.set(vmid, &change).await
    }

    async fn reboot(&self, vmid: u32, timeout_secs: u32) -> Result<(), PveError> {
        self.node
            .reboot(vmid, Duration::from_secs(timeout_secs.into()))
            .await
    }

    async fn migrate(&self, vmid: u32, target: &str, restart: bool) -> Result<(), PveError> {
        self.node.migrate(vmid, target, restart).await
    }

    async fn interfaces(&self, vmid: u32) -> Result<Option<Vec<Interface>>, PveError> {
        let ifaces = self.node.interfaces(vmid).await?;
        if ifaces.is_empty() {
            return Ok(None);
        }
        Ok(Some(
            ifaces
                .into_iter()
                .map(|i| Interface {
                    name: i.name,
                    hwaddr: i.hwaddr.unwrap_or_default(),
                    addresses: i
                        .addresses
                        .into_iter()
                        .map(|a| format!("{}/{}", a.address, a.prefix))
                        .collect(),
                })
                .collect(),
        ))
    }

    async fn memory_free_bytes(&self) -> Result<u64, PveError> {
        let status = self.node.node_status().await?;
        Ok(status.memory.available.unwrap_or(status.memory.free))
    }

    async fn facts(&self) -> Result<NodeFacts, PveError> {
        let version = self.node.version().await?;
        let cluster_name = self.node.cluster_name().await?.unwrap_or_default();
        let status = self.node.node_status().await?;
        let bridges = self.node.bridges().await?;
        let (out_storages, templates) = self.storages_and_templates().await?;
        Ok(NodeFacts {
            pve_version: version.version,
            cluster_name,
            cores: status.cpuinfo.cpus.or(status.cpuinfo.cores).unwrap_or(0) as u32,
            memory_bytes: status.memory.total,
            memory_free_bytes: status.memory.available.unwrap_or(status.memory.free),
            storages: out_storages,
            bridges: bridges
                .into_iter()
                .map(|b| BridgeInfo {
                    name: b.iface,
                    active: b.active,
                    mtu: b.mtu.map(|m| m as u32),
                    cidrs: b.cidr.into_iter().collect(),
                })
                .collect(),
            templates,
        })
    }

    async fn inventory(&self) -> Result<NodeFacts, PveError> {
        let (storages, templates) = self.storages_and_templates().await?;
        Ok(NodeFacts {
            storages,
            templates,
            ..NodeFacts::default()
        })
    }

    async fn template_dir(&self, storage: &str) -> Result<PathBuf, PveError> {
        if let Some(dir) = self
            .template_dirs
            .lock()
            .expect("template dirs")
            .get(storage)
        {
            return Ok(dir.clone());
        }
        let dir = self.node.template_dir(storage).await?;
        self.template_dirs
            .lock()
            .expect("template dirs")
            .insert(storage.to_string(), dir.clone());
        Ok(dir)
    }

    async fn has_template(&self, storage: &str, file_name: &str) -> Result<bool, PveError> {
        let volid = format!("{storage}:vztmpl/{file_name}");
        let list = self.node.templates(storage).await?;
        Ok(list.iter().any(|t| t.volid == volid))
    }

    async fn pveam_download(&self, storage: &str, name: &str) -> Result<(), PveError> {
        self.node.pveam_download(storage, name).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pxfleet_pve::{Output, ScriptedRunner};

    // pvesh's `--output-format json` prints one line
    const STORAGES: &str = concat!(
        r#"[{"storage":"local","type":"dir","content":"iso,vztmpl,backup","enabled":1,"active":1,"#,
        r#""shared":0,"total":100000,"used":40000,"avail":60000},"#,
        r#"{"storage":"local-lvm","type":"lvmthin","content":"rootdir,images","enabled":1,"active":1,"#,
        r#""shared":0,"total":500000,"used":1000,"avail":499000}]"#
    );
    const TEMPLATES: &str = r#"[{"content":"vztmpl","format":"tzst","size":123456,"volid":"local:vztmpl/debian-13-standard_13.6-1_amd64.tar.zst"}]"#;

    /// The two listings an inventory reads, the templates listing answering `templates`.
    fn expect_listings<'r>(runner: &'r ScriptedRunner, templates: &str) -> &'r ScriptedRunner {
        runner
            .expect(
                &[
                    "pvesh",
                    "get",
                    "/nodes/pve1/storage",
                    "--output-format",
                    "json",
                ],
                Output::ok(STORAGES),
            )
            .expect(
                &[
                    "pvesh",
                    "get",
                    "/nodes/pve1/storage/local/content",
                    "--output-format",
                    "json",
                    "--content",
                    "vztmpl",
                ],
                Output::ok(templates),
            )
    }

    #[tokio::test]
    async fn the_inventory_after_an_operation_reads_only_storages_and_templates() {
        let runner = Arc::new(ScriptedRunner::new());
        expect_listings(&runner, TEMPLATES).expect(
            &["pvesm", "path", "local:vztmpl/pxfleet-probe.tar.zst"],
            Output::ok("/var/lib/vz/template/cache/pxfleet-probe.tar.zst\n"),
        );
        let node = PveNode::new(Node::new("pve1", runner.clone()));
        let inv = node.inventory().await.expect("inventory");
        // no version, cluster, node status or network call: the script would have failed on it
        assert_eq!(runner.remaining(), 0);
        assert_eq!(runner.calls().len(), 3);
        let ids: Vec<_> = inv.storages.iter().map(|s| s.id.as_str()).collect();
        assert_eq!(ids, ["local", "local-lvm"]);
        assert_eq!(inv.storages[1].avail_bytes, 499000);
        assert_eq!(inv.storages[0].path.as_deref(), Some("/var/lib/vz"));
        assert_eq!(inv.templates.len(), 1);
        assert_eq!(
            inv.templates[0].file_name,
            "debian-13-standard_13.6-1_amd64.tar.zst"
        );
        assert_eq!(inv.templates[0].storage, "local");

        // the template directory is cached: a second inventory does not ask `pvesm path` again
        expect_listings(&runner, "[]");
        let again = node.inventory().await.expect("inventory");
        assert_eq!(runner.remaining(), 0);
        assert!(again.templates.is_empty());
        assert_eq!(again.storages[0].path.as_deref(), Some("/var/lib/vz"));
    }

    /// Issue 28: `pct set --features nesting=1` changes neither the node's listing nor the file's size; the
    /// file's fingerprint moves, so the next pass reads the container's configuration again.
    #[test]
    fn a_config_file_change_of_the_same_size_moves_its_fingerprint() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("100.conf");
        std::fs::write(&file, "features: nesting=0\nmemory: 512\n").unwrap();
        let before = config_fingerprints(dir.path(), &[100, 101]);
        assert_eq!(before.len(), 1, "a container without a file is left out");
        std::fs::write(&file, "features: nesting=1\nmemory: 512\n").unwrap();
        let after = config_fingerprints(dir.path(), &[100, 101]);
        assert_ne!(before[&100], after[&100]);
        assert_eq!(after, config_fingerprints(dir.path(), &[100]));
        assert!(config_fingerprints(&dir.path().join("missing"), &[100]).is_empty());
        // the directory's view: every VMID.conf, nothing else
        std::fs::write(dir.path().join("notes.txt"), "x").unwrap();
        std::fs::write(dir.path().join("7.conf.tmp.123"), "x").unwrap();
        assert_eq!(dir_fingerprints(dir.path()), Some(after));
        assert_eq!(dir_fingerprints(&dir.path().join("missing")), None);
    }
}
