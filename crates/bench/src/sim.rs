//! An in-memory PVE node for the benchmark: implements the agent's [`NodeApi`] with a configurable latency
//! model (`pct create`, `pct start`, `pct destroy` take fixed times), one lock per vm_id like PVE's config lock
//! (an operation on a locked container waits for it, and fails as PVE does after 10 s), the benchmark's
//! template already in the `local` cache, and storages, a bridge and memory reported so that the scheduler
//! places containers on it.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use pxfleet_agent::node::{
    typed_config, BridgeInfo, ConfigChange, ContainerConfig, CreateSpec, CtConfig, CtSummary,
    Interface, NodeApi, NodeFacts, PveError, Secret, StorageInfo, TemplateFile,
};
use pxfleet_agent::pve_options::{create_options, set_options};

/// A failure of this in-memory node, as crates/pve reports a failed command.
fn permanent(message: impl Into<String>) -> PveError {
    PveError::Command {
        argv: "fake".into(),
        status: Some(255),
        stderr: message.into(),
        retryable: false,
    }
}

/// A failure worth another attempt (as a lock timeout would be).
fn transient(message: impl Into<String>) -> PveError {
    PveError::Command {
        argv: "fake".into(),
        status: Some(255),
        stderr: message.into(),
        retryable: true,
    }
}

/// How long PVE takes for each kind of work on a node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct LatencyModel {
    /// `pct create` (unpacking the template).
    pub create: Duration,
    /// `pct start` (until the container is up).
    pub start: Duration,
    /// `pct destroy`.
    pub destroy: Duration,
}

impl LatencyModel {
    /// PVE-like defaults: create 2 s, start 1 s, destroy 1 s.
    pub const PVE: LatencyModel = LatencyModel {
        create: Duration::from_secs(2),
        start: Duration::from_secs(1),
        destroy: Duration::from_secs(1),
    };
}

/// How long PVE itself may wait for a container's lock before giving up (`can't lock file ... got timeout`).
pub const LOCK_TIMEOUT: Duration = Duration::from_secs(10);
/// Memory of a simulated node.
pub const NODE_MEMORY_BYTES: u64 = 512 << 30;
/// Size of the simulated `local-lvm` thin pool.
pub const NODE_DISK_BYTES: u64 = 64 << 40;
/// Cores of a simulated node.
pub const NODE_CORES: u32 = 64;
/// The storage that holds templates.
pub const TEMPLATE_STORAGE: &str = "local";
/// The storage containers' root disks go to.
pub const ROOT_STORAGE: &str = "local-lvm";

#[derive(Debug, Clone)]
struct Ct {
    status: String,
    config: CtConfig,
}

/// One simulated node. Shared as `Arc<SimNode>` with its agent.
pub struct SimNode {
    name: String,
    latency: LatencyModel,
    /// The `local` storage's template cache (may be shared by all simulated nodes: it is only read).
    template_dir: PathBuf,
    /// File names present in the template cache.
    templates: Vec<String>,
    cts: Mutex<BTreeMap<u32, Ct>>,
    locks: Mutex<HashMap<u32, Arc<tokio::sync::Mutex<()>>>>,
}

impl SimNode {
    pub fn new(
        name: &str,
        latency: LatencyModel,
        template_dir: PathBuf,
        templates: Vec<String>,
    ) -> Arc<SimNode> {
        Arc::new(SimNode {
            name: name.to_string(),
            latency,
            template_dir,
            templates,
            cts: Mutex::new(BTreeMap::new()),
            locks: Mutex::new(HashMap::new()),
        })
    }

    /// Containers on this node and how many of them run.
    pub fn counts(&self) -> (usize, usize) {
        let cts = self.cts.lock().expect("cts lock");
        let running = cts.values().filter(|c| c.status == "running").count();
        (cts.len(), running)
    }

    /// Takes the container's lock, waiting like PVE does (up to [`LOCK_TIMEOUT`]).
    async fn lock(&self, vmid: u32) -> Result<tokio::sync::OwnedMutexGuard<()>, PveError> {
        let m = self
            .locks
            .lock()
            .expect("locks lock")
            .entry(vmid)
            .or_default()
            .clone();
        tokio::time::timeout(LOCK_TIMEOUT, m.lock_owned())
            .await
            .map_err(|_| {
                transient(format!(
                    "can't lock file '/run/lock/lxc/pve-config-{vmid}.lock' - got timeout"
                ))
            })
    }

    fn missing(&self, vmid: u32) -> PveError {
        permanent(format!(
            "Configuration file 'nodes/{}/lxc/{vmid}.conf' does not exist",
            self.name
        ))
    }

    fn with_ct<T>(&self, vmid: u32, f: impl FnOnce(&mut Ct) -> T) -> Result<T, PveError> {
        let mut cts = self.cts.lock().expect("cts lock");
        let ct = cts.get_mut(&vmid).ok_or_else(|| self.missing(vmid))?;
        Ok(f(ct))
    }

    fn used_memory_bytes(&self) -> u64 {
        let cts = self.cts.lock().expect("cts lock");
        cts.values()
            .filter_map(|c| c.config.get("memory")?.parse::<u64>().ok())
            .sum::<u64>()
            << 20
    }

    fn used_disk_bytes(&self) -> u64 {
        let cts = self.cts.lock().expect("cts lock");
        cts.values()
            .filter_map(|c| {
                let r = c.config.get("rootfs")?;
                let size = r.split(",size=").nth(1)?.trim_end_matches('G');
                size.parse::<u64>().ok()
            })
            .sum::<u64>()
            << 30
    }
}

/// `STORAGE:SIZE` (as the agent passes `rootfs` to `pct create`) -> the volume PVE makes.
fn rootfs_volume(vmid: u32, spec: &str) -> String {
    match spec.split_once(':') {
        Some((ds, size)) if !size.contains(',') && !size.contains('-') => {
            format!("{ds}:vm-{vmid}-disk-0,size={size}G")
        }
        _ => spec.to_string(),
    }
}

impl NodeApi for SimNode {
    async fn list(&self) -> Result<Vec<CtSummary>, PveError> {
        let cts = self.cts.lock().expect("cts lock");
        Ok(cts
            .iter()
            .map(|(vmid, c)| CtSummary {
                vmid: *vmid,
                status: c.status.clone(),
                lock: c.config.get("lock").cloned(),
                // like PVE's listing: memory, cores, tags and the root disk's size, not the rest of the config
                listing: ["memory", "cores", "tags", "rootfs"]
                    .iter()
                    .map(|k| c.config.get(*k).map(String::as_str).unwrap_or(""))
                    .collect::<Vec<_>>()
                    .join(" "),
                name: c
                    .config
                    .get("hostname")
                    .cloned()
                    .unwrap_or_else(|| format!("CT{vmid}")),
            })
            .collect())
    }

    async fn config(&self, vmid: u32) -> Result<Option<ContainerConfig>, PveError> {
        let cts = self.cts.lock().expect("cts lock");
        cts.get(&vmid).map(|c| typed_config(&c.config)).transpose()
    }

    async fn create(
        &self,
        spec: &CreateSpec,
        _password: Option<&Secret>,
        _start_after: bool,
    ) -> Result<bool, PveError> {
        let _g = self.lock(spec.vmid).await?;
        let file = spec
            .template
            .split_once(":vztmpl/")
            .map(|(_, f)| f.to_string())
            .unwrap_or_default();
        if !self.templates.contains(&file) {
            return Err(permanent(format!(
                "unable to create CT {} - volume '{}' does not exist",
                spec.vmid, spec.template
            )));
        }
        {
            let mut cts = self.cts.lock().expect("cts lock");
            if cts.contains_key(&spec.vmid) {
                return Err(permanent(format!(
                    "unable to create CT {} - CT {} already exists on node '{}'",
                    spec.vmid, spec.vmid, self.name
                )));
            }
            let mut lock = CtConfig::new();
            lock.insert("lock".into(), "create".into());
            cts.insert(
                spec.vmid,
                Ct {
                    status: "stopped".into(),
                    config: lock,
                },
            );
        }
        tokio::time::sleep(self.latency.create).await;
        let mut config: CtConfig = create_options(spec)?.into_iter().collect();
        if let Some(net) = config.get_mut("net0") {
            if !net.contains("hwaddr=") {
                let mac = format!(
                    "BC:24:11:{:02X}:{:02X}:{:02X}",
                    (spec.vmid >> 16) & 0xff,
                    (spec.vmid >> 8) & 0xff,
                    spec.vmid & 0xff
                );
                *net = net.replacen("name=eth0", &format!("name=eth0,hwaddr={mac}"), 1);
            }
        }
        if let Some(r) = config.get("rootfs").cloned() {
            config.insert("rootfs".into(), rootfs_volume(spec.vmid, &r));
        }
        self.cts.lock().expect("cts lock").insert(
            spec.vmid,
            Ct {
                status: "stopped".into(),
                config,
            },
        );
        Ok(false)
    }

    async fn set(&self, vmid: u32, change: &ConfigChange) -> Result<(), PveError> {
        let (options, delete) = set_options(vmid, change)?;
        let _g = self.lock(vmid).await?;
        self.with_ct(vmid, |ct| {
            for (k, v) in &options {
                ct.config.insert(k.clone(), v.clone());
            }
            for k in &delete {
                ct.config.remove(k);
            }
        })
    }

    async fn resize(&self, vmid: u32, disk: &str, size_gib: u64) -> Result<(), PveError> {
        let _g = self.lock(vmid).await?;
        self.with_ct(vmid, |ct| {
            if let Some(cur) = ct.config.get(disk).cloned() {
                let base = cur.split(",size=").next().unwrap_or(&cur).to_string();
                ct.config
                    .insert(disk.into(), format!("{base},size={size_gib}G"));
            }
        })
    }

    async fn start(&self, vmid: u32) -> Result<(), PveError> {
        let _g = self.lock(vmid).await?;
        if self.with_ct(vmid, |ct| ct.status == "running")? {
            return Err(permanent(format!("CT {vmid} already running")));
        }
        tokio::time::sleep(self.latency.start).await;
        self.with_ct(vmid, |ct| ct.status = "running".into())
    }

    async fn stop(&self, vmid: u32) -> Result<(), PveError> {
        let _g = self.lock(vmid).await?;
        self.with_ct(vmid, |ct| ct.status = "stopped".into())
    }

    async fn shutdown(&self, vmid: u32, _timeout_secs: u32) -> Result<bool, PveError> {
        let _g = self.lock(vmid).await?;
        self.with_ct(vmid, |ct| ct.status = "stopped".into())?;
        Ok(true)
    }

    async fn destroy(&self, vmid: u32, _purge: bool) -> Result<(), PveError> {
        let _g = self.lock(vmid).await?;
        let (running, locked) = self.with_ct(vmid, |ct| {
            (ct.status == "running", ct.config.get("lock").cloned())
        })?;
        if let Some(l) = locked {
            return Err(permanent(format!("CT is locked ({l})")));
        }
        if running {
            return Err(permanent(format!(
                "unable to destroy CT {vmid} - container is running"
            )));
        }
        tokio::time::sleep(self.latency.destroy).await;
        self.cts.lock().expect("cts lock").remove(&vmid);
        Ok(())
    }

    async fn unlock(&self, vmid: u32) -> Result<(), PveError> {
        self.with_ct(vmid, |ct| {
            ct.config.remove("lock");
        })
    }

    async fn migrate(&self, vmid: u32, target: &str, _restart: bool) -> Result<(), PveError> {
        Err(permanent(format!(
            "migration of CT {vmid} to {target}: the benchmark's simulated nodes do not migrate"
        )))
    }

    async fn interfaces(&self, vmid: u32) -> Result<Option<Vec<Interface>>, PveError> {
        let cts = self.cts.lock().expect("cts lock");
        let ct = cts.get(&vmid).ok_or_else(|| self.missing(vmid))?;
        if ct.status != "running" {
            return Ok(None);
        }
        let addr = format!(
            "10.{}.{}.{}/8",
            (vmid >> 16) & 0xff,
            (vmid >> 8) & 0xff,
            vmid & 0xff
        );
        Ok(Some(vec![
            Interface {
                name: "lo".into(),
                hwaddr: "00:00:00:00:00:00".into(),
                addresses: vec!["127.0.0.1/8".into()],
            },
            Interface {
                name: "eth0".into(),
                hwaddr: format!(
                    "bc:24:11:{:02x}:{:02x}:{:02x}",
                    (vmid >> 16) & 0xff,
                    (vmid >> 8) & 0xff,
                    vmid & 0xff
                ),
                addresses: vec![addr],
            },
        ]))
    }

    async fn facts(&self) -> Result<NodeFacts, PveError> {
        let used_disk = self.used_disk_bytes().min(NODE_DISK_BYTES);
        Ok(NodeFacts {
            pve_version: "9.0.3".into(),
            // Every simulated node is in one cluster, so moves and drains migrate.
            cluster_name: "bench".into(),
            cores: NODE_CORES,
            memory_bytes: NODE_MEMORY_BYTES,
            memory_free_bytes: NODE_MEMORY_BYTES.saturating_sub(self.used_memory_bytes()),
            storages: vec![
                StorageInfo {
                    id: TEMPLATE_STORAGE.into(),
                    kind: "dir".into(),
                    content: vec!["vztmpl".into(), "iso".into(), "backup".into()],
                    active: true,
                    enabled: true,
                    shared: false,
                    total_bytes: 100 << 30,
                    used_bytes: 10 << 30,
                    avail_bytes: 90 << 30,
                    path: Some("/var/lib/vz".into()),
                },
                StorageInfo {
                    id: ROOT_STORAGE.into(),
                    kind: "lvmthin".into(),
                    content: vec!["rootdir".into(), "images".into()],
                    active: true,
                    enabled: true,
                    shared: false,
                    total_bytes: NODE_DISK_BYTES,
                    used_bytes: used_disk,
                    avail_bytes: NODE_DISK_BYTES - used_disk,
                    path: None,
                },
            ],
            bridges: vec![BridgeInfo {
                name: "vmbr0".into(),
                active: true,
                mtu: Some(1500),
                cidrs: vec!["10.0.0.1/8".into()],
            }],
            templates: self
                .templates
                .iter()
                .map(|f| TemplateFile {
                    volid: format!("{TEMPLATE_STORAGE}:vztmpl/{f}"),
                    storage: TEMPLATE_STORAGE.into(),
                    file_name: f.clone(),
                    size_bytes: 128 << 20,
                })
                .collect(),
        })
    }

    async fn memory_free_bytes(&self) -> Result<u64, PveError> {
        Ok(NODE_MEMORY_BYTES.saturating_sub(self.used_memory_bytes()))
    }

    async fn template_dir(&self, storage: &str) -> Result<PathBuf, PveError> {
        if storage != TEMPLATE_STORAGE {
            return Err(permanent(format!(
                "storage '{storage}' does not hold templates on node '{}'",
                self.name
            )));
        }
        Ok(self.template_dir.clone())
    }

    async fn pveam_download(&self, storage: &str, name: &str) -> Result<(), PveError> {
        Err(permanent(format!(
            "pveam download {storage} {name}: the benchmark's nodes have their templates pre-seeded; \
             declare one of {:?}",
            self.templates
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(latency: Duration) -> Arc<SimNode> {
        SimNode::new(
            "sim0001",
            LatencyModel {
                create: latency,
                start: latency,
                destroy: latency,
            },
            PathBuf::from("/nonexistent"),
            vec!["t.tar.zst".into()],
        )
    }

    fn args(vmid: u32) -> CreateSpec {
        pxfleet_agent::pve_options::create_spec(&pxfleet_agent::pve_options::CreateArgs {
            vmid,
            ostemplate: "local:vztmpl/t.tar.zst".into(),
            options: vec![
                ("hostname".into(), "c1".into()),
                ("memory".into(), "64".into()),
                ("rootfs".into(), "local-lvm:1".into()),
                ("net0".into(), "name=eth0,bridge=vmbr0,ip=dhcp".into()),
            ],
            ssh_public_keys: vec![],
        })
        .expect("valid options")
    }

    #[tokio::test]
    async fn create_start_destroy_lifecycle() {
        let n = node(Duration::ZERO);
        n.create(&args(1000), None, true).await.unwrap();
        let cfg = n.config(1000).await.unwrap().unwrap();
        assert_eq!(cfg.raw["rootfs"], "local-lvm:vm-1000-disk-0,size=1G");
        assert_eq!(cfg.hwaddr(0), Some("BC:24:11:00:03:E8"), "{cfg:?}");
        assert!(n.interfaces(1000).await.unwrap().is_none());
        n.start(1000).await.unwrap();
        assert_eq!(n.counts(), (1, 1));
        let ifs = n.interfaces(1000).await.unwrap().unwrap();
        assert_eq!(ifs[1].addresses, vec!["10.0.3.232/8".to_string()]);
        let facts = n.facts().await.unwrap();
        assert_eq!(facts.memory_free_bytes, NODE_MEMORY_BYTES - (64 << 20));
        assert_eq!(facts.storages[1].used_bytes, 1 << 30);
        assert!(n
            .destroy(1000, true)
            .await
            .unwrap_err()
            .to_string()
            .contains("running"));
        n.stop(1000).await.unwrap();
        n.destroy(1000, true).await.unwrap();
        assert_eq!(n.counts(), (0, 0));
        assert!(n.create(&args(1000), None, true).await.is_ok());
        assert!(n
            .create(&args(1000), None, true)
            .await
            .unwrap_err()
            .to_string()
            .contains("already exists"));
    }

    #[tokio::test]
    async fn unknown_template_is_refused() {
        let n = node(Duration::ZERO);
        let mut a = args(1001);
        a.template = "local:vztmpl/other.tar.zst".into();
        assert!(n
            .create(&a, None, true)
            .await
            .unwrap_err()
            .to_string()
            .contains("does not exist"));
    }

    #[tokio::test]
    async fn the_vmid_lock_serialises_work_on_one_container() {
        let n = node(Duration::from_millis(100));
        n.create(&args(1002), None, true).await.unwrap();
        // The start takes the lock first; the stop must wait for it, so the container ends stopped. Without
        // the lock the stop would run at once and the slow start would leave it running.
        let (a, b) = tokio::join!(n.start(1002), n.stop(1002));
        a.unwrap();
        b.unwrap();
        assert_eq!(n.counts(), (1, 0));
    }
}
