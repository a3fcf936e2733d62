//! An in-memory PVE node answering the agent's [`NodeApi`] (feature `test-node`): the node of the agent's own
//! tests and of the benchmark's simulated nodes. It keeps containers as PVE's raw config, answers as PVE does
//! (the errors crates/pve parses, a `lock: create` while a create runs, a MAC and an address per vm_id), and
//! has a latency per kind of work ([`Latency`]). Optionally it takes one lock per vm_id like PVE's config lock
//! (the benchmark's model; the agent's tests leave it off, since they check that the executor itself never
//! runs two operations on one container at once) and downloads appliances with `pveam` into its template
//! directory. It records every call, the passwords it was given and how many slow calls ran at once.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::node::{
    typed_config, BridgeInfo, CloneSpec, ConfigChange, ContainerConfig, CreateSpec, CtConfig,
    CtSummary, Interface, NodeApi, NodeFacts, PveError, Secret, StorageInfo, TemplateFile,
};
use crate::pve_options::{create_options, set_options};

/// How long PVE itself may wait for a container's lock before giving up (`can't lock file ... got timeout`).
pub const LOCK_TIMEOUT: Duration = Duration::from_secs(10);
/// Memory of an in-memory node.
pub const NODE_MEMORY_BYTES: u64 = 512 << 30;
/// Size of its `local-lvm` thin pool.
pub const NODE_DISK_BYTES: u64 = 64 << 40;
/// Its cores.
pub const NODE_CORES: u32 = 64;
/// The storage that holds templates (its files are those of [`MemNodeOptions::template_dir`]).
pub const TEMPLATE_STORAGE: &str = "local";
/// The storage containers' root disks go to.
pub const ROOT_STORAGE: &str = "local-lvm";

/// A failure of this in-memory node, as crates/pve reports a failed command.
fn permanent(message: impl Into<String>) -> PveError {
    PveError::Command {
        argv: "mem-node".into(),
        status: Some(255),
        stderr: message.into(),
        retryable: false,
    }
}

/// A failure worth another attempt (as a lock timeout would be).
fn transient(message: impl Into<String>) -> PveError {
    PveError::Command {
        argv: "mem-node".into(),
        status: Some(255),
        stderr: message.into(),
        retryable: true,
    }
}

/// How long each kind of work takes on the node (zero: at once).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Latency {
    /// `pct create` (unpacking the template).
    pub create: Duration,
    /// `pct start` (until the container is up).
    pub start: Duration,
    /// `pct shutdown`.
    pub shutdown: Duration,
    /// `pct destroy`.
    pub destroy: Duration,
}

impl Latency {
    /// The same time for every kind of work.
    pub fn uniform(d: Duration) -> Latency {
        Latency {
            create: d,
            start: d,
            shutdown: d,
            destroy: d,
        }
    }
}

/// What kind of node [`MemNode::new`] makes.
#[derive(Debug, Clone)]
pub struct MemNodeOptions {
    /// The node's name, as PVE's errors name it.
    pub name: String,
    /// The `local` storage's template cache: a create finds its template there. It may be shared by several
    /// nodes when `pveam` is off (it is then only read).
    pub template_dir: PathBuf,
    pub latency: Latency,
    /// One lock per vm_id like PVE's config lock: work on a locked container waits for it, and fails as PVE
    /// does after [`LOCK_TIMEOUT`].
    pub config_locks: bool,
    /// `pveam download` writes the appliance into the template directory; off, it is refused (the templates
    /// are pre-seeded).
    pub pveam: bool,
}

impl MemNodeOptions {
    /// A node without latency or config locks whose `pveam download` works.
    pub fn new(name: &str, template_dir: PathBuf) -> MemNodeOptions {
        MemNodeOptions {
            name: name.to_string(),
            template_dir,
            latency: Latency::default(),
            config_locks: false,
            pveam: true,
        }
    }
}

/// One container: `running` or `stopped`, and its raw config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ct {
    pub status: String,
    pub config: CtConfig,
}

/// What the node holds and what it saw, open to tests.
#[derive(Debug, Default)]
pub struct MemState {
    pub cts: BTreeMap<u32, Ct>,
    /// Every call but `list`, `interfaces` and `facts`: `create 101`, `start 101`, `pveam NAME`, ...
    pub calls: Vec<String>,
    /// The next create stops after writing `lock: create` and reports a retryable failure (a killed pct).
    pub crash_next_create: bool,
    /// Slow calls (create, start, shutdown, destroy) running now, and the most that ever ran at once.
    pub running_now: usize,
    pub max_running: usize,
    /// Root passwords creates were given.
    pub passwords: Vec<String>,
    /// Snapshots per container (name, description, parent), oldest first; configurations are not kept.
    pub snapshots: BTreeMap<u32, Vec<crate::ops::SnapshotInfo>>,
}

/// The in-memory node. Shared as `Arc<MemNode>` with its agent.
#[derive(Debug)]
pub struct MemNode {
    options: MemNodeOptions,
    pub state: Mutex<MemState>,
    locks: Mutex<HashMap<u32, Arc<tokio::sync::Mutex<()>>>>,
}

/// `BC:24:11:xx:yy:zz` from the vm_id (PVE's prefix), upper case as in a config.
fn mac_of(vmid: u32) -> String {
    format!(
        "BC:24:11:{:02X}:{:02X}:{:02X}",
        (vmid >> 16) & 0xff,
        (vmid >> 8) & 0xff,
        vmid & 0xff
    )
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

impl MemNode {
    pub fn new(options: MemNodeOptions) -> Arc<MemNode> {
        Arc::new(MemNode {
            options,
            state: Mutex::new(MemState::default()),
            locks: Mutex::new(HashMap::new()),
        })
    }

    fn state(&self) -> std::sync::MutexGuard<'_, MemState> {
        self.state.lock().expect("in-memory node state")
    }

    /// How many recorded calls start with `prefix`.
    pub fn calls(&self, prefix: &str) -> usize {
        self.state()
            .calls
            .iter()
            .filter(|c| c.starts_with(prefix))
            .count()
    }

    /// Puts a container on the node as it is, with `status` and the raw config `cfg`.
    pub fn insert(&self, vmid: u32, status: &str, cfg: &[(&str, &str)]) {
        let config = cfg
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        self.state().cts.insert(
            vmid,
            Ct {
                status: status.to_string(),
                config,
            },
        );
    }

    /// A container's status and raw config.
    pub fn get(&self, vmid: u32) -> Option<(String, CtConfig)> {
        self.state()
            .cts
            .get(&vmid)
            .map(|c| (c.status.clone(), c.config.clone()))
    }

    /// Containers on this node and how many of them run.
    pub fn counts(&self) -> (usize, usize) {
        let s = self.state();
        let running = s.cts.values().filter(|c| c.status == "running").count();
        (s.cts.len(), running)
    }

    fn call(&self, c: String) {
        self.state().calls.push(c);
    }

    /// Takes the container's lock when the node has config locks, waiting like PVE does (up to
    /// [`LOCK_TIMEOUT`]).
    async fn lock(&self, vmid: u32) -> Result<Option<tokio::sync::OwnedMutexGuard<()>>, PveError> {
        if !self.options.config_locks {
            return Ok(None);
        }
        let m = self
            .locks
            .lock()
            .expect("locks lock")
            .entry(vmid)
            .or_default()
            .clone();
        tokio::time::timeout(LOCK_TIMEOUT, m.lock_owned())
            .await
            .map(Some)
            .map_err(|_| {
                transient(format!(
                    "can't lock file '/run/lock/lxc/pve-config-{vmid}.lock' - got timeout"
                ))
            })
    }

    /// Takes `d`, counted as a slow call running.
    async fn busy(&self, d: Duration) {
        {
            let mut s = self.state();
            s.running_now += 1;
            s.max_running = s.max_running.max(s.running_now);
        }
        tokio::time::sleep(d).await;
        self.state().running_now -= 1;
    }

    fn missing(&self, vmid: u32) -> PveError {
        permanent(format!(
            "Configuration file 'nodes/{}/lxc/{vmid}.conf' does not exist",
            self.options.name
        ))
    }

    fn with_ct<T>(&self, vmid: u32, f: impl FnOnce(&mut Ct) -> T) -> Result<T, PveError> {
        let mut s = self.state();
        let ct = s.cts.get_mut(&vmid).ok_or_else(|| self.missing(vmid))?;
        Ok(f(ct))
    }

    fn used_memory_bytes(&self) -> u64 {
        self.state()
            .cts
            .values()
            .filter_map(|c| c.config.get("memory")?.parse::<u64>().ok())
            .sum::<u64>()
            << 20
    }

    fn used_disk_bytes(&self) -> u64 {
        self.state()
            .cts
            .values()
            .filter_map(|c| {
                let r = c.config.get("rootfs")?;
                let size = r.split(",size=").nth(1)?.trim_end_matches('G');
                size.parse::<u64>().ok()
            })
            .sum::<u64>()
            << 30
    }

    /// The file names in the template cache, sorted.
    fn templates(&self) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(&self.options.template_dir)
            .map(|d| {
                d.filter_map(|e| e.ok())
                    .filter(|e| e.path().is_file())
                    .filter_map(|e| e.file_name().into_string().ok())
                    .collect()
            })
            .unwrap_or_default();
        names.sort();
        names
    }

    /// Whether `volid` (`local:vztmpl/FILE`) is in the template cache.
    fn has_template(&self, volid: &str) -> bool {
        match volid.split_once(":vztmpl/") {
            Some((storage, file)) => {
                storage == TEMPLATE_STORAGE
                    && !file.contains('/')
                    && self.options.template_dir.join(file).is_file()
            }
            None => false,
        }
    }
}

impl NodeApi for MemNode {
    async fn list(&self) -> Result<Vec<CtSummary>, PveError> {
        let s = self.state();
        Ok(s.cts
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
        self.call(format!("config {vmid}"));
        let s = self.state();
        s.cts
            .get(&vmid)
            .map(|c| typed_config(&c.config))
            .transpose()
    }

    async fn create(&self, spec: &CreateSpec, password: Option<&Secret>) -> Result<(), PveError> {
        self.call(format!("create {}", spec.vmid));
        let _g = self.lock(spec.vmid).await?;
        if !self.has_template(&spec.template) {
            return Err(permanent(format!(
                "unable to create CT {} - volume '{}' does not exist",
                spec.vmid, spec.template
            )));
        }
        {
            let mut s = self.state();
            if let Some(p) = password {
                s.passwords.push(p.0.clone());
            }
            if s.cts.contains_key(&spec.vmid) {
                return Err(permanent(format!(
                    "unable to create CT {} - CT {} already exists on node '{}'",
                    spec.vmid, spec.vmid, self.options.name
                )));
            }
            let mut lock = CtConfig::new();
            lock.insert("lock".into(), "create".into());
            s.cts.insert(
                spec.vmid,
                Ct {
                    status: "stopped".into(),
                    config: lock,
                },
            );
            if s.crash_next_create {
                s.crash_next_create = false;
                return Err(transient("pct create: killed"));
            }
        }
        self.busy(self.options.latency.create).await;
        let mut config: CtConfig = create_options(spec)?.into_iter().collect();
        if let Some(net) = config.get_mut("net0") {
            if !net.contains("hwaddr=") {
                let mac = mac_of(spec.vmid);
                *net = net.replacen("name=eth0", &format!("name=eth0,hwaddr={mac}"), 1);
            }
        }
        if let Some(r) = config.get("rootfs").cloned() {
            config.insert("rootfs".into(), rootfs_volume(spec.vmid, &r));
        }
        self.state().cts.insert(
            spec.vmid,
            Ct {
                status: "stopped".into(),
                config,
            },
        );
        Ok(())
    }

    async fn clone_ct(&self, spec: &CloneSpec) -> Result<(), PveError> {
        self.call(format!("clone {} {}", spec.source, spec.vmid));
        let _g = self.lock(spec.vmid).await?;
        let mut config = {
            let s = self.state();
            let src = s
                .cts
                .get(&spec.source)
                .ok_or_else(|| self.missing(spec.source))?;
            let template = src.config.get("template").map(String::as_str) == Some("1");
            if !spec.full && !template {
                return Err(permanent(
                    "linked clone of a CT that is not a template is not possible: give --full 1",
                ));
            }
            if !spec.full && spec.storage.is_some() {
                return Err(permanent("storage: only allowed for full clones"));
            }
            if s.cts.contains_key(&spec.vmid) {
                return Err(permanent(format!(
                    "CT {} already exists on node '{}'",
                    spec.vmid, self.options.name
                )));
            }
            src.config.clone()
        };
        self.busy(self.options.latency.create).await;
        config.remove("template");
        config.remove("lock");
        if let Some(h) = &spec.hostname {
            config.insert("hostname".into(), h.clone());
        }
        if let Some(d) = &spec.description {
            config.insert("description".into(), d.clone());
        }
        for (k, v) in config.iter_mut() {
            if k.starts_with("net") {
                if let Some(at) = v.find("hwaddr=") {
                    let end = v[at..].find(',').map_or(v.len(), |e| at + e);
                    v.replace_range(at..end, &format!("hwaddr={}", mac_of(spec.vmid)));
                }
            }
        }
        if let Some(r) = config.get("rootfs").cloned() {
            // `STORAGE:vm-SRC-disk-0,size=..` -> the new id's volume, on `--storage` for a full clone.
            let (vol, rest) = r.split_once(',').unwrap_or((&r, ""));
            let (ds, _) = vol.split_once(':').unwrap_or((vol, ""));
            let ds = spec.storage.as_deref().unwrap_or(ds);
            let sep = if rest.is_empty() { "" } else { "," };
            config.insert(
                "rootfs".into(),
                format!("{ds}:vm-{}-disk-0{sep}{rest}", spec.vmid),
            );
        }
        self.state().cts.insert(
            spec.vmid,
            Ct {
                status: "stopped".into(),
                config,
            },
        );
        Ok(())
    }

    async fn set(&self, vmid: u32, change: &ConfigChange) -> Result<(), PveError> {
        let (options, delete) = set_options(vmid, change)?;
        self.call(format!("set {vmid}"));
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

    /// The config file's `lxc.environment.runtime` lines, kept as PVE shows them: one `env` value, NUL-separated.
    async fn write_env(
        &self,
        vmid: u32,
        env: &std::collections::BTreeMap<String, String>,
    ) -> Result<(), PveError> {
        let entries = pxfleet_pve::runtime::env_entries(vmid, env)?;
        self.call(format!("write_env {vmid}"));
        self.with_ct(vmid, |ct| {
            if entries.is_empty() {
                ct.config.remove("env");
            } else {
                ct.config.insert("env".into(), entries.join("\0"));
            }
        })
    }

    async fn resize(&self, vmid: u32, disk: &str, size_gib: u64) -> Result<(), PveError> {
        self.call(format!("resize {vmid}"));
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
        self.call(format!("start {vmid}"));
        let _g = self.lock(vmid).await?;
        if self.with_ct(vmid, |ct| ct.status == "running")? {
            return Err(permanent(format!("CT {vmid} already running")));
        }
        if self.with_ct(vmid, |ct| {
            ct.config.get("template").map(String::as_str) == Some("1")
        })? {
            return Err(permanent("you can't start a CT if it's a template"));
        }
        self.busy(self.options.latency.start).await;
        self.with_ct(vmid, |ct| ct.status = "running".into())
    }

    async fn snapshot(
        &self,
        vmid: u32,
        name: &str,
        description: Option<&str>,
    ) -> Result<(), PveError> {
        self.call(format!("snapshot {vmid} {name}"));
        let _g = self.lock(vmid).await?;
        self.with_ct(vmid, |_| ())?;
        let mut s = self.state();
        let list = s.snapshots.entry(vmid).or_default();
        if list.iter().any(|x| x.name == name) {
            return Err(permanent(format!("snapshot name '{name}' already used")));
        }
        let parent = list.last().map(|x| x.name.clone());
        list.push(crate::ops::SnapshotInfo {
            name: name.to_string(),
            description: description.unwrap_or_default().to_string(),
            snaptime: 0,
            parent,
        });
        Ok(())
    }

    async fn delete_snapshot(&self, vmid: u32, name: &str) -> Result<(), PveError> {
        self.call(format!("delsnapshot {vmid} {name}"));
        let _g = self.lock(vmid).await?;
        let mut s = self.state();
        let list = s.snapshots.entry(vmid).or_default();
        let Some(i) = list.iter().position(|x| x.name == name) else {
            return Err(permanent(format!("snapshot '{name}' does not exist")));
        };
        let gone = list.remove(i);
        for x in list.iter_mut() {
            if x.parent.as_deref() == Some(name) {
                x.parent = gone.parent.clone();
            }
        }
        Ok(())
    }

    async fn rollback(&self, vmid: u32, name: &str, start: bool) -> Result<(), PveError> {
        self.call(format!("rollback {vmid} {name}"));
        let _g = self.lock(vmid).await?;
        let known = self
            .state()
            .snapshots
            .get(&vmid)
            .is_some_and(|l| l.iter().any(|x| x.name == name));
        if !known {
            return Err(permanent(format!("snapshot '{name}' does not exist")));
        }
        let status = if start { "running" } else { "stopped" };
        self.with_ct(vmid, |ct| ct.status = status.into())
    }

    async fn snapshots(&self, vmid: u32) -> Result<Vec<crate::ops::SnapshotInfo>, PveError> {
        self.with_ct(vmid, |_| ())?;
        Ok(self
            .state()
            .snapshots
            .get(&vmid)
            .cloned()
            .unwrap_or_default())
    }

    async fn make_template(&self, vmid: u32) -> Result<(), PveError> {
        self.call(format!("template {vmid}"));
        let _g = self.lock(vmid).await?;
        let (running, template) = self.with_ct(vmid, |ct| {
            (
                ct.status == "running",
                ct.config.get("template").map(String::as_str) == Some("1"),
            )
        })?;
        if template {
            return Err(permanent("you can't convert a template to a template"));
        }
        if running {
            return Err(permanent(
                "you can't convert a CT to template if the CT is running",
            ));
        }
        self.with_ct(vmid, |ct| {
            ct.config.insert("template".into(), "1".into());
        })
    }

    async fn stop(&self, vmid: u32) -> Result<(), PveError> {
        self.call(format!("stop {vmid}"));
        let _g = self.lock(vmid).await?;
        self.with_ct(vmid, |ct| ct.status = "stopped".into())
    }

    async fn shutdown(&self, vmid: u32, _timeout_secs: u32) -> Result<bool, PveError> {
        self.call(format!("shutdown {vmid}"));
        let _g = self.lock(vmid).await?;
        self.with_ct(vmid, |_| ())?;
        self.busy(self.options.latency.shutdown).await;
        self.with_ct(vmid, |ct| ct.status = "stopped".into())?;
        Ok(true)
    }

    async fn destroy(&self, vmid: u32, _purge: bool) -> Result<(), PveError> {
        self.call(format!("destroy {vmid}"));
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
        self.busy(self.options.latency.destroy).await;
        self.state().cts.remove(&vmid);
        Ok(())
    }

    async fn unlock(&self, vmid: u32) -> Result<(), PveError> {
        self.call(format!("unlock {vmid}"));
        self.with_ct(vmid, |ct| {
            ct.config.remove("lock");
        })
    }

    /// The container leaves this node (there is no other node here to arrive on).
    async fn migrate(&self, vmid: u32, _target: &str, _restart: bool) -> Result<(), PveError> {
        self.call(format!("migrate {vmid}"));
        let _g = self.lock(vmid).await?;
        self.state()
            .cts
            .remove(&vmid)
            .map(|_| ())
            .ok_or_else(|| self.missing(vmid))
    }

    /// A running container's `eth0` has its configured MAC and its static address, or for DHCP a lease
    /// `10.x.y.z/8` from the vm_id.
    async fn interfaces(&self, vmid: u32) -> Result<Option<Vec<Interface>>, PveError> {
        let s = self.state();
        let ct = s.cts.get(&vmid).ok_or_else(|| self.missing(vmid))?;
        if ct.status != "running" {
            return Ok(None);
        }
        let net0 = ct.config.get("net0").map(String::as_str).unwrap_or("");
        let part = |key: &str| {
            net0.split(',')
                .find_map(|p| p.strip_prefix(key))
                .map(str::to_string)
        };
        let address = match part("ip=") {
            Some(ip) if ip == "dhcp" => Some(format!(
                "10.{}.{}.{}/8",
                (vmid >> 16) & 0xff,
                (vmid >> 8) & 0xff,
                vmid & 0xff
            )),
            other => other,
        };
        let hwaddr = part("hwaddr=").unwrap_or_else(|| mac_of(vmid));
        Ok(Some(vec![
            Interface {
                name: "lo".into(),
                hwaddr: "00:00:00:00:00:00".into(),
                addresses: vec!["127.0.0.1/8".into()],
            },
            Interface {
                name: "eth0".into(),
                hwaddr: hwaddr.to_lowercase(),
                addresses: address.into_iter().collect(),
            },
        ]))
    }

    async fn facts(&self) -> Result<NodeFacts, PveError> {
        let used_disk = self.used_disk_bytes().min(NODE_DISK_BYTES);
        Ok(NodeFacts {
            pve_version: "9.0.3".into(),
            // Every in-memory node is in one cluster, so moves and drains between them migrate.
            cluster_name: "memnode".into(),
            cores: NODE_CORES,
            memory_bytes: NODE_MEMORY_BYTES,
            memory_free_bytes: self.memory_free_bytes().await?,
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
                .templates()
                .into_iter()
                .map(|f| TemplateFile {
                    volid: format!("{TEMPLATE_STORAGE}:vztmpl/{f}"),
                    storage: TEMPLATE_STORAGE.into(),
                    file_name: f,
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
                self.options.name
            )));
        }
        Ok(self.options.template_dir.clone())
    }

    async fn pveam_download(&self, storage: &str, name: &str) -> Result<(), PveError> {
        self.call(format!("pveam {name}"));
        if !self.options.pveam {
            return Err(permanent(format!(
                "pveam download {storage} {name}: this node's templates are pre-seeded; declare one of {:?}",
                self.templates()
            )));
        }
        let dir = self.template_dir(storage).await?;
        std::fs::write(dir.join(name), b"appliance")
            .map_err(|e| permanent(format!("pveam download {storage} {name}: {e}")))
    }
}

#[cfg(test)]
mod tests;
