//! The simulated node: its configuration (`node.toml`), `pvesim init`, the optional TOML overrides (storages,
//! bridges, capacity, latencies, faults), the state-directory layout and the cluster directory it belongs to.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{Result, SimError};
use crate::lxc::{Backend, LxcCfg};

pub const GIB: u64 = 1 << 30;

/// One storage of the node (`storage.cfg` entry plus the simulated capacity).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct StorageCfg {
    pub id: String,
    /// `dir`, `lvmthin`, `zfspool`, `nfs`, `lvm`
    #[serde(rename = "type")]
    pub kind: String,
    pub content: Vec<String>,
    /// Directory holding the simulated volumes and (for path-based storages) `template/cache`.
    #[serde(default)]
    pub path: Option<PathBuf>,
    /// Capacity in bytes; creates that do not fit fail.
    pub capacity: u64,
    #[serde(default = "yes")]
    pub enabled: bool,
    #[serde(default)]
    pub shared: bool,
}

fn yes() -> bool {
    true
}

/// A Linux bridge of the node (`/nodes/{node}/network`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct BridgeCfg {
    pub name: String,
    #[serde(default)]
    pub cidr: Option<String>,
    #[serde(default)]
    pub gateway: Option<String>,
    #[serde(default)]
    pub ports: Option<String>,
    #[serde(default = "default_mtu")]
    pub mtu: u32,
}

fn default_mtu() -> u32 {
    1500
}

/// The simulated DHCP server: containers with `ip=dhcp` get the lowest free address of the range on start.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct DhcpCfg {
    /// First address handed out, for example `192.168.7.100`.
    pub first: String,
    /// Last address handed out.
    pub last: String,
    pub prefix: u8,
}

impl Default for DhcpCfg {
    fn default() -> Self {
        DhcpCfg {
            first: "192.168.7.100".into(),
            last: "192.168.7.250".into(),
            prefix: 24,
        }
    }
}

/// Per-operation latencies in milliseconds (for benchmarks).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct LatencyCfg {
    #[serde(default)]
    pub create_ms: u64,
    #[serde(default)]
    pub start_ms: u64,
    #[serde(default)]
    pub stop_ms: u64,
    #[serde(default)]
    pub destroy_ms: u64,
    #[serde(default)]
    pub set_ms: u64,
}

/// Fail the next `count` creates with `message` (inside the task: `unable to create CT <vmid> - <message>`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct FailCreates {
    pub count: u32,
    #[serde(default = "default_fail_message")]
    pub message: String,
}

fn default_fail_message() -> String {
    "simulated failure".into()
}

/// Hold the config lock of `vmid` for `seconds`, counted from the first command that wants it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct LockVmid {
    pub vmid: u32,
    pub seconds: u64,
}

/// Slow down every invocation whose `tool subcommand` starts with `command` (for example `pct start`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Slow {
    pub command: String,
    pub ms: u64,
}

/// `pct create` dies halfway (as when its worker is killed): the disks are allocated, the config is left with only
/// `lock: create`, nothing is cleaned up, and the tool exits 255 with `message`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct HalfCreate {
    /// How many creates die (the later ones work); unset: every one.
    #[serde(default)]
    pub count: Option<u32>,
    #[serde(default = "default_half_create_message")]
    pub message: String,
}

fn default_half_create_message() -> String {
    "worker killed halfway (simulated)".into()
}

/// The config lock of a CT is held by someone else: commands that take it wait PVE's timeout (5 s for create,
/// 10 s otherwise) and fail with `can't lock file '/run/lock/lxc/pve-config-<vmid>.lock' - got timeout`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct LockHeld {
    /// Only this CT; unset: any.
    #[serde(default)]
    pub vmid: Option<u32>,
    /// How many lock attempts fail; unset: every one.
    #[serde(default)]
    pub count: Option<u32>,
}

/// An existing CT carries a lock (`backup`, `snapshot`, ...): commands that check it fail with
/// `CT is locked (<lock>)`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct CtLocked {
    #[serde(default = "default_ct_lock")]
    pub lock: String,
    #[serde(default)]
    pub vmid: Option<u32>,
    #[serde(default)]
    pub count: Option<u32>,
}

fn default_ct_lock() -> String {
    "backup".into()
}

/// These storages are full: allocating a volume fails with the storage tool's out-of-space message.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct StorageFull {
    pub storages: Vec<String>,
    #[serde(default)]
    pub count: Option<u32>,
}

/// Invocations whose `tool subcommand ...` line starts with `command` hang for `seconds` in a forked child (the
/// way PVE's CLI waits for its worker), then run normally; a caller's timeout must kill the whole group.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Hang {
    pub command: String,
    pub seconds: u64,
    #[serde(default)]
    pub count: Option<u32>,
}

/// Invocations whose line starts with `command` print `text` on stdout and exit 0 without doing anything
/// (a proxy's error page, a truncated answer).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Garbage {
    pub command: String,
    #[serde(default = "default_garbage")]
    pub text: String,
    #[serde(default)]
    pub count: Option<u32>,
}

fn default_garbage() -> String {
    "<html><body>502 Bad Gateway</body></html>\n{\"data\":[{\"vmid\":".into()
}

/// Injected faults: `[faults]` in `node.toml`, replaced by a fault plan file when one is given (see
/// [`crate::faults`]). Each fault with a `count` fires that many times on this node, then no more.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct FaultsCfg {
    #[serde(default)]
    pub fail_creates: Option<FailCreates>,
    #[serde(default)]
    pub lock_vmid: Option<LockVmid>,
    #[serde(default)]
    pub slow: Vec<Slow>,
    #[serde(default)]
    pub half_create: Option<HalfCreate>,
    #[serde(default)]
    pub lock_held: Option<LockHeld>,
    #[serde(default)]
    pub ct_locked: Option<CtLocked>,
    #[serde(default)]
    pub storage_full: Option<StorageFull>,
    #[serde(default)]
    pub hang: Vec<Hang>,
    #[serde(default)]
    pub garbage: Vec<Garbage>,
}

/// `node.toml` in the state directory.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct NodeCfg {
    pub name: String,
    pub cluster_dir: PathBuf,
    pub cores: u32,
    /// Bytes of RAM.
    pub memory: u64,
    pub storage: Vec<StorageCfg>,
    pub bridge: Vec<BridgeCfg>,
    #[serde(default)]
    pub dhcp: DhcpCfg,
    #[serde(default)]
    pub latency: LatencyCfg,
    #[serde(default)]
    pub faults: FaultsCfg,
    /// aplinfo.dat-style index for `pveam available|download`; the built-in index when unset.
    #[serde(default)]
    pub template_index: Option<PathBuf>,
    /// `memory` (default) or `lxc` (real containers, see crate::lxc).
    #[serde(default)]
    pub backend: Backend,
    /// Settings of the lxc backend.
    #[serde(default)]
    pub lxc: LxcCfg,
    /// The PVE version the node acts as (`pvesh get /version`, the node status' `pveversion`). From 9.2 on, a
    /// mount point's (and the root disk's) `idmap` key is accepted, as pve-container 9.2's schema has it.
    #[serde(default = "default_pve_version")]
    pub pve_version: String,
}

/// The release the shared schema (../shared/pve/schema) was taken from.
pub const DEFAULT_PVE_VERSION: &str = "9.1.2";

fn default_pve_version() -> String {
    DEFAULT_PVE_VERSION.to_string()
}

/// The overrides file given to `pvesim init --config FILE` (every field optional).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Overrides {
    pub cores: Option<u32>,
    /// GiB of RAM.
    pub memory_gib: Option<u64>,
    /// Storages: an entry with a known id replaces it, a new id is added.
    #[serde(default)]
    pub storage: Vec<StorageOverride>,
    /// Bridges: replace the default list when given.
    pub bridge: Option<Vec<BridgeCfg>>,
    pub dhcp: Option<DhcpCfg>,
    pub latency: Option<LatencyCfg>,
    pub faults: Option<FaultsCfg>,
    pub template_index: Option<PathBuf>,
    pub backend: Option<Backend>,
    pub lxc: Option<LxcCfg>,
    /// `pve_version = "9.2.0"`: act as that PVE release (major.minor.patch).
    pub pve_version: Option<String>,
}

/// A storage entry in the overrides file; sizes in GiB.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StorageOverride {
    pub id: String,
    #[serde(rename = "type")]
    pub kind: Option<String>,
    pub content: Option<Vec<String>>,
    pub capacity_gib: Option<f64>,
    pub enabled: Option<bool>,
    pub shared: Option<bool>,
}

/// A loaded node: config plus where its state lives.
#[derive(Debug, Clone)]
pub struct Node {
    pub cfg: NodeCfg,
    pub state: PathBuf,
}

fn write_atomic(path: &Path, data: &[u8]) -> Result<()> {
    if let Some(dir) = path.parent() {
        fs::create_dir_all(dir).map_err(|e| SimError::io(dir, e))?;
    }
    let tmp = path.with_extension(format!("tmp.{}", std::process::id()));
    fs::write(&tmp, data).map_err(|e| SimError::io(&tmp, e))?;
    fs::rename(&tmp, path).map_err(|e| SimError::io(path, e))
}

/// Writes a file through a temporary file and a rename, so readers see the old or the new content.
pub fn write_file(path: &Path, data: &str) -> Result<()> {
    write_atomic(path, data.as_bytes())
}

/// Options of `pvesim init`.
#[derive(Debug, Clone)]
pub struct InitOptions {
    pub state: PathBuf,
    pub node: String,
    pub cluster: Option<PathBuf>,
    pub config: Option<PathBuf>,
    /// `--backend`: overrides the file's `backend`.
    pub backend: Option<Backend>,
    /// `--netns`: overrides the file's `[lxc] netns`.
    pub netns: Option<String>,
    /// `--cluster-name`: the PVE cluster's name (corosync `cluster_name`), written into the cluster directory's
    /// `corosync.conf` by its first node; later nodes must name the same cluster or none.
    pub cluster_name: Option<String>,
}

/// The name a shared cluster directory without `corosync.conf` has (directories made before names existed).
pub const DEFAULT_CLUSTER_NAME: &str = "pvesim";

fn default_storages(state: &Path) -> Vec<StorageCfg> {
    let s = |id: &str, kind: &str, content: &[&str], gib: u64| StorageCfg {
        id: id.into(),
        kind: kind.into(),
        content: content.iter().map(|c| c.to_string()).collect(),
        path: Some(state.join("storage").join(id)),
        capacity: gib * GIB,
        enabled: true,
        shared: false,
    };
    vec![
        s("local", "dir", &["vztmpl", "iso", "backup", "rootdir"], 100),
        s("local-lvm", "lvmthin", &["rootdir", "images"], 350),
        s("local-zfs", "zfspool", &["rootdir", "images"], 400),
    ]
}

/// Applies an overrides file to a node config.
pub fn apply_overrides(cfg: &mut NodeCfg, state: &Path, ov: Overrides) -> Result<()> {
    if let Some(c) = ov.cores {
        cfg.cores = c;
    }
    if let Some(m) = ov.memory_gib {
        cfg.memory = m * GIB;
    }
    for so in ov.storage {
        let idx = cfg.storage.iter().position(|s| s.id == so.id);
        let mut st = match idx {
            Some(i) => cfg.storage[i].clone(),
            None => StorageCfg {
                id: so.id.clone(),
                kind: so.kind.clone().ok_or_else(|| {
                    SimError::Usage(format!(
                        "storage '{}': a new storage needs `type` (dir, lvmthin, zfspool, nfs)",
                        so.id
                    ))
                })?,
                content: vec!["rootdir".into()],
                path: Some(state.join("storage").join(&so.id)),
                capacity: 100 * GIB,
                enabled: true,
                shared: false,
            },
        };
        if let Some(k) = so.kind {
            st.kind = k;
        }
        if let Some(c) = so.content {
            st.content = c;
        }
        if let Some(g) = so.capacity_gib {
            st.capacity = (g * GIB as f64) as u64;
        }
        if let Some(e) = so.enabled {
            st.enabled = e;
        }
        if let Some(s) = so.shared {
            st.shared = s;
        }
        match idx {
            Some(i) => cfg.storage[i] = st,
            None => cfg.storage.push(st),
        }
    }
    if let Some(b) = ov.bridge {
        cfg.bridge = b;
    }
    if let Some(d) = ov.dhcp {
        cfg.dhcp = d;
    }
    if let Some(l) = ov.latency {
        cfg.latency = l;
    }
    if let Some(f) = ov.faults {
        cfg.faults = f;
    }
    if let Some(v) = ov.pve_version {
        if crate::schema::release_of(&v).is_none() {
            return Err(SimError::state(
                state.join("node.toml"),
                format!("pve_version {v:?} is not MAJOR.MINOR.PATCH, e.g. 9.2.0"),
            ));
        }
        cfg.pve_version = v;
    }
    if let Some(t) = ov.template_index {
        cfg.template_index = Some(t);
    }
    if let Some(b) = ov.backend {
        cfg.backend = b;
    }
    if let Some(l) = ov.lxc {
        cfg.lxc = l;
    }
    Ok(())
}

/// Reads and parses an overrides file; errors name the file and the TOML position.
pub fn read_overrides(path: &Path) -> Result<Overrides> {
    let text = fs::read_to_string(path).map_err(|e| SimError::io(path, e))?;
    toml::from_str(&text).map_err(|e| {
        let pos = e
            .span()
            .map(|sp| {
                let before = &text[..sp.start.min(text.len())];
                let line = before.matches('\n').count() + 1;
                let col = before
                    .rfind('\n')
                    .map(|i| sp.start - i)
                    .unwrap_or(sp.start + 1);
                format!(":{line}:{col}")
            })
            .unwrap_or_default();
        SimError::Usage(format!("{}{pos}: {}", path.display(), e.message()))
    })
}

fn abs(p: &Path) -> Result<PathBuf> {
    if p.is_absolute() {
        Ok(p.to_path_buf())
    } else {
        let cwd = std::env::current_dir().map_err(|e| SimError::io(".", e))?;
        Ok(cwd.join(p))
    }
}

/// `pvesim init`: creates the state directory, the node config and its place in the cluster directory.
pub fn init(opts: &InitOptions) -> Result<Node> {
    if crate::schema::check_named_format("pve-node", &opts.node).is_err() {
        return Err(SimError::Usage(format!(
            "--node '{}': a node name is letters, digits and '-', not starting or ending with '-'",
            opts.node
        )));
    }
    let state = abs(&opts.state)?;
    fs::create_dir_all(&state).map_err(|e| SimError::io(&state, e))?;
    let cluster = match &opts.cluster {
        Some(c) => abs(c)?,
        None => state.clone(),
    };
    if let Some(name) = &opts.cluster_name {
        if crate::schema::check_named_format("pve-node", name).is_err() || name.len() > 15 {
            return Err(SimError::Usage(format!(
                "--cluster-name '{name}': a cluster name is letters, digits and '-', at most 15 characters"
            )));
        }
    }
    let corosync = cluster.join("corosync.conf");
    match (read_cluster_name(&corosync), &opts.cluster_name) {
        (Some(have), Some(want)) if have != *want => {
            return Err(SimError::Usage(format!(
                "--cluster-name '{want}': {} is cluster '{have}'",
                cluster.display()
            )))
        }
        (Some(_), _) => {}
        (None, want) => {
            // A shared cluster directory always names its cluster; a node on its own only when told to.
            let name = want.clone().or_else(|| {
                opts.cluster
                    .is_some()
                    .then(|| DEFAULT_CLUSTER_NAME.to_owned())
            });
            if let Some(name) = name {
                write_file(&corosync, &corosync_conf(&name))?;
            }
        }
    }
    let mut cfg = NodeCfg {
        name: opts.node.clone(),
        cluster_dir: cluster.clone(),
        cores: 8,
        memory: 32 * GIB,
        storage: default_storages(&state),
        bridge: vec![BridgeCfg {
            name: "vmbr0".into(),
            cidr: Some("192.168.7.10/24".into()),
            gateway: Some("192.168.7.1".into()),
            ports: Some("eno1".into()),
            mtu: 1500,
        }],
        dhcp: DhcpCfg::default(),
        latency: LatencyCfg::default(),
        faults: FaultsCfg::default(),
        template_index: None,
        backend: Backend::Memory,
        lxc: LxcCfg::default(),
        pve_version: default_pve_version(),
    };
    if let Some(c) = &opts.config {
        let ov = read_overrides(c)?;
        apply_overrides(&mut cfg, &state, ov)?;
    }
    if let Some(b) = opts.backend {
        cfg.backend = b;
    }
    if let Some(ns) = &opts.netns {
        cfg.lxc.netns = Some(ns.clone());
    }
    let node = Node { cfg, state };
    node.save()?;
    for st in &node.cfg.storage {
        let dir = node.storage_dir(st);
        fs::create_dir_all(&dir).map_err(|e| SimError::io(&dir, e))?;
        if st.content.iter().any(|c| c == "vztmpl") {
            let t = dir.join("template/cache");
            fs::create_dir_all(&t).map_err(|e| SimError::io(&t, e))?;
        }
    }
    for d in [
        node.conf_dir(),
        node.cluster().join("lock"),
        node.state.join("tasks"),
        node.state.join("runtime"),
    ] {
        fs::create_dir_all(&d).map_err(|e| SimError::io(&d, e))?;
    }
    write_file(
        &node
            .cluster()
            .join("nodes")
            .join(&node.cfg.name)
            .join("pvesim-state"),
        &node.state.display().to_string(),
    )?;
    crate::pveam::install_index(&node)?;
    Ok(node)
}

impl Node {
    /// Loads the node whose state directory is `state`.
    pub fn load(state: &Path) -> Result<Node> {
        let path = state.join("node.toml");
        let text = fs::read_to_string(&path).map_err(|e| SimError::io(&path, e))?;
        let cfg: NodeCfg =
            toml::from_str(&text).map_err(|e| SimError::state(&path, e.to_string()))?;
        crate::schema::set_release(&cfg.pve_version);
        Ok(Node {
            cfg,
            state: state.to_path_buf(),
        })
    }

    /// Writes `node.toml`.
    pub fn save(&self) -> Result<()> {
        let text = toml::to_string(&self.cfg)
            .map_err(|e| SimError::state(self.state.join("node.toml"), e.to_string()))?;
        write_file(&self.state.join("node.toml"), &text)
    }

    pub fn name(&self) -> &str {
        &self.cfg.name
    }

    pub fn cluster(&self) -> &Path {
        &self.cfg.cluster_dir
    }

    /// `CLUSTER/nodes/<node>/lxc`
    pub fn conf_dir(&self) -> PathBuf {
        self.conf_dir_of(&self.cfg.name)
    }

    pub fn conf_dir_of(&self, node: &str) -> PathBuf {
        self.cluster().join("nodes").join(node).join("lxc")
    }

    pub fn storage(&self, id: &str) -> Option<&StorageCfg> {
        self.cfg.storage.iter().find(|s| s.id == id)
    }

    pub fn storage_dir(&self, st: &StorageCfg) -> PathBuf {
        st.path
            .clone()
            .unwrap_or_else(|| self.state.join("storage").join(&st.id))
    }

    /// The PVE cluster's name (`cluster_name` in the cluster directory's `corosync.conf`); `None` for a
    /// standalone node. A shared cluster directory without the file (made before names existed) is
    /// [`DEFAULT_CLUSTER_NAME`].
    pub fn cluster_name(&self) -> Option<String> {
        read_cluster_name(&self.cluster().join("corosync.conf")).or_else(|| {
            (self.cluster() != self.state.as_path()).then(|| DEFAULT_CLUSTER_NAME.to_owned())
        })
    }

    /// Names of all nodes of the cluster, sorted.
    pub fn cluster_nodes(&self) -> Vec<String> {
        let mut v: Vec<String> = fs::read_dir(self.cluster().join("nodes"))
            .map(|rd| {
                rd.filter_map(|e| e.ok())
                    .filter_map(|e| e.file_name().into_string().ok())
                    .collect()
            })
            .unwrap_or_default();
        v.sort();
        v
    }

    /// Loads another node of the same cluster.
    pub fn peer(&self, name: &str) -> Result<Node> {
        if name == self.cfg.name {
            return Ok(self.clone());
        }
        let p = self.cluster().join("nodes").join(name).join("pvesim-state");
        let state = fs::read_to_string(&p).map_err(|e| SimError::io(&p, e))?;
        Node::load(Path::new(state.trim()))
    }

    /// All vmids of the cluster with the node holding them and their type (`lxc` or `qemu`).
    pub fn vmlist(&self) -> BTreeMap<u32, (String, &'static str)> {
        let mut out = BTreeMap::new();
        for n in self.cluster_nodes() {
            for (sub, ty) in [("lxc", "lxc"), ("qemu-server", "qemu")] {
                let dir = self.cluster().join("nodes").join(&n).join(sub);
                let Ok(rd) = fs::read_dir(&dir) else { continue };
                for e in rd.flatten() {
                    let name = e.file_name().to_string_lossy().to_string();
                    if let Some(id) = name
                        .strip_suffix(".conf")
                        .and_then(|s| s.parse::<u32>().ok())
                    {
                        out.insert(id, (n.clone(), ty));
                    }
                }
            }
        }
        out
    }
}

/// `cluster_name` of a `corosync.conf` (its `totem` section), if the file exists.
fn read_cluster_name(path: &Path) -> Option<String> {
    let text = fs::read_to_string(path).ok()?;
    text.lines()
        .filter_map(|l| l.trim().strip_prefix("cluster_name:"))
        .map(|v| v.trim().to_owned())
        .find(|v| !v.is_empty())
}

/// A minimal `corosync.conf` naming the cluster (pvesim reads only `cluster_name`).
fn corosync_conf(name: &str) -> String {
    format!(
        "totem {{\n  cluster_name: {name}\n  config_version: 1\n  version: 2\n  ip_version: ipv4-6\n}}\n"
    )
}
