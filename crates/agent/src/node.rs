//! What the agent needs from a PVE node, as one small async trait ([`NodeApi`]), plus the plain data types it
//! returns. The executor and observer are written against this trait; tests and the bench supply in-memory nodes.
//!
//! Names: [`NodeApi`] (this trait) is the agent's view of a node; [`crate::pve_node::PveNode`] implements it over
//! [`pxfleet_pve::Node`], crates/pve's node driver (the only code that runs pct/pvesh/pvesm/pveam). The
//! controller's reconcile loop is not a driver of either.

use std::collections::BTreeMap;
use std::future::Future;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

pub use pxfleet_pve::mark::{ManagedMark, MANAGED_LINE_PREFIX, MANAGED_TAG};
pub use pxfleet_pve::{CloneSpec, ConfigChange, ContainerConfig, CreateSpec, PveError};

/// One row of the node's container list.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CtSummary {
    pub vmid: u32,
    /// `running` / `stopped` (or whatever PVE reports).
    pub status: String,
    /// PVE lock (`create`, `destroyed`, ...), if any.
    pub lock: Option<String>,
    pub name: String,
    /// What else the cheap listing says of its configuration (tags, cores, memory, swap, disk size); when
    /// this or the fields above change, the configuration is read again. Empty when the node tells nothing more.
    pub listing: String,
}

/// A container's configuration as key -> stored value (numbers rendered as decimal strings): how an in-memory
/// node keeps it; [`NodeApi::config`] hands it out typed ([`typed_config`]).
pub type CtConfig = BTreeMap<String, String>;

/// Types a stored key -> value configuration with pve's parser (what `pct config` would give).
pub fn typed_config(raw: &CtConfig) -> Result<ContainerConfig, PveError> {
    ContainerConfig::from_pairs(raw.iter().map(|(k, v)| (k.clone(), v.clone()))).map_err(|e| {
        PveError::Parse {
            argv: "config".into(),
            what: e.what,
            detail: e.detail,
        }
    })
}

/// One network interface as seen inside a running container.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Interface {
    pub name: String,
    pub hwaddr: String,
    /// `addr/prefix` strings, both families.
    pub addresses: Vec<String>,
}

/// A storage on this node.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StorageInfo {
    pub id: String,
    pub kind: String,
    pub content: Vec<String>,
    pub active: bool,
    pub enabled: bool,
    pub shared: bool,
    pub total_bytes: u64,
    pub used_bytes: u64,
    pub avail_bytes: u64,
    /// Filesystem path of a path-based storage.
    pub path: Option<String>,
}

/// A network bridge on this node.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BridgeInfo {
    pub name: String,
    pub active: bool,
    pub mtu: Option<u32>,
    pub cidrs: Vec<String>,
}

/// A template file in a storage's cache.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TemplateFile {
    pub volid: String,
    pub storage: String,
    pub file_name: String,
    pub size_bytes: u64,
}

/// What the node is and has, sent in the hello.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeFacts {
    pub pve_version: String,
    /// The PVE cluster the node belongs to (`GET /cluster/status`); empty for a standalone node.
    #[serde(default)]
    pub cluster_name: String,
    pub cores: u32,
    pub memory_bytes: u64,
    pub memory_free_bytes: u64,
    pub storages: Vec<StorageInfo>,
    pub bridges: Vec<BridgeInfo>,
    pub templates: Vec<TemplateFile>,
}

/// A root password; `Debug` never shows it and it is never serialised into the journal.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(pub String);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(***)")
    }
}

/// Everything the agent asks of a PVE node. Implementations must be cheap to share (`Arc`).
pub trait NodeApi: Send + Sync + 'static {
    /// All containers on this node.
    fn list(&self) -> impl Future<Output = Result<Vec<CtSummary>, PveError>> + Send;
    /// A container's config, typed by pve's parser (every key also kept as text), `None` when it does not
    /// exist on this node.
    fn config(
        &self,
        vmid: u32,
    ) -> impl Future<Output = Result<Option<ContainerConfig>, PveError>> + Send;
    /// Creates the container, stopped, with root's `password` set by the create itself (never by starting it).
    fn create(
        &self,
        spec: &CreateSpec,
        password: Option<&Secret>,
    ) -> impl Future<Output = Result<(), PveError>> + Send;
    /// `pct clone`: a copy of container `spec.source` on this node as `spec.vmid` (stopped; its configuration
    /// the source's, with fresh MACs and the given hostname and description).
    fn clone_ct(&self, spec: &CloneSpec) -> impl Future<Output = Result<(), PveError>> + Send;
    /// `pct template`: the stopped container becomes a template (it can be cloned, never started).
    fn make_template(&self, vmid: u32) -> impl Future<Output = Result<(), PveError>> + Send;
    /// An in-place change (`pct set`: options, deletions, reverts).
    fn set(
        &self,
        vmid: u32,
        change: &ConfigChange,
    ) -> impl Future<Output = Result<(), PveError>> + Send;
    /// Grow a disk to an absolute size in GiB.
    fn resize(
        &self,
        vmid: u32,
        disk: &str,
        size_gib: u64,
    ) -> impl Future<Output = Result<(), PveError>> + Send;
    fn start(&self, vmid: u32) -> impl Future<Output = Result<(), PveError>> + Send;
    /// Immediate stop.
    fn stop(&self, vmid: u32) -> impl Future<Output = Result<(), PveError>> + Send;
    /// Clean shutdown; `Ok(false)` when it did not stop within the timeout.
    fn shutdown(
        &self,
        vmid: u32,
        timeout_secs: u32,
    ) -> impl Future<Output = Result<bool, PveError>> + Send;
    /// Destroys a stopped container and its volumes (`purge`: also from backup jobs, HA, ACLs).
    fn destroy(&self, vmid: u32, purge: bool) -> impl Future<Output = Result<(), PveError>> + Send;
    fn unlock(&self, vmid: u32) -> impl Future<Output = Result<(), PveError>> + Send;
    /// Replaces the raw `lxc.idmap` lines of a container's config file (no PVE tool sets them). The default: a
    /// node whose config files the agent cannot edit.
    fn write_idmap(
        &self,
        vmid: u32,
        _values: &[String],
    ) -> impl Future<Output = Result<(), PveError>> + Send {
        async move { Err(config_files_not_editable(vmid)) }
    }
    /// Replaces the `env` of a container (its `lxc.environment.runtime` lines in the config file; `pct` cannot be
    /// given more than one variable). An empty map removes them. The default: a node whose config files the
    /// agent cannot edit.
    fn write_env(
        &self,
        vmid: u32,
        _env: &BTreeMap<String, String>,
    ) -> impl Future<Output = Result<(), PveError>> + Send {
        async move { Err(config_files_not_editable(vmid)) }
    }
    /// Keys whose change waits for the next start (`pct pending`). The default: none (a node that applies
    /// every change at once).
    fn pending(
        &self,
        _vmid: u32,
    ) -> impl Future<Output = Result<Vec<pxfleet_pve::PendingKey>, PveError>> + Send {
        async { Ok(Vec::new()) }
    }
    /// Drops pending changes of `keys` (`pct set --revert`). The default: nothing to drop.
    fn revert(
        &self,
        _vmid: u32,
        _keys: &[String],
    ) -> impl Future<Output = Result<(), PveError>> + Send {
        async { Ok(()) }
    }
    /// Restart a running container so that pending changes apply (`pct reboot`). The default: a clean
    /// shutdown, then a start.
    fn reboot(
        &self,
        vmid: u32,
        timeout_secs: u32,
    ) -> impl Future<Output = Result<(), PveError>> + Send {
        async move {
            self.shutdown(vmid, timeout_secs).await?;
            self.start(vmid).await
        }
    }
    fn migrate(
        &self,
        vmid: u32,
        target: &str,
        restart: bool,
    ) -> impl Future<Output = Result<(), PveError>> + Send;
    /// Interfaces of a running container; `None` when stopped.
    fn interfaces(
        &self,
        vmid: u32,
    ) -> impl Future<Output = Result<Option<Vec<Interface>>, PveError>> + Send;
    /// Node facts for the hello (version, resources, storages, bridges, templates).
    fn facts(&self) -> impl Future<Output = Result<NodeFacts, PveError>> + Send;
    /// What an operation can change in the node's facts: `storages` (usage) and `templates`; the other fields
    /// may be left empty. Read after operations finish. The default reads all facts; a PVE node skips the
    /// version, cluster, status and network calls that no operation changes.
    fn inventory(&self) -> impl Future<Output = Result<NodeFacts, PveError>> + Send {
        self.facts()
    }
    /// Free (available) memory in bytes, for heartbeats. The default asks for all facts; implementations with
    /// a cheaper way (one node status call) override it.
    fn memory_free_bytes(&self) -> impl Future<Output = Result<u64, PveError>> + Send {
        async { Ok(self.facts().await?.memory_free_bytes) }
    }
    /// A fingerprint of every container config file of the node (vmid -> digest of `VMID.conf`), read without
    /// starting a process; `None` when the node has no such files to read (the default). Watched between
    /// observation passes: a change starts a pass at once.
    fn config_fingerprints(&self) -> impl Future<Output = Option<BTreeMap<u32, String>>> + Send {
        async { None }
    }
    /// `pct snapshot VMID NAME [--description D]`.
    fn snapshot(
        &self,
        vmid: u32,
        name: &str,
        description: Option<&str>,
    ) -> impl Future<Output = Result<(), PveError>> + Send;
    /// `pct delsnapshot VMID NAME`.
    fn delete_snapshot(
        &self,
        vmid: u32,
        name: &str,
    ) -> impl Future<Output = Result<(), PveError>> + Send;
    /// `pct rollback VMID NAME [--start 1]`.
    fn rollback(
        &self,
        vmid: u32,
        name: &str,
        start: bool,
    ) -> impl Future<Output = Result<(), PveError>> + Send;
    /// The container's snapshots, parents first.
    fn snapshots(
        &self,
        vmid: u32,
    ) -> impl Future<Output = Result<Vec<crate::ops::SnapshotInfo>, PveError>> + Send;
    /// Which resource pool each guest is in (vmid -> pool), as the cluster's `user.cfg` says; empty when the node
    /// has no such file to read (the default).
    fn guest_pools(&self) -> impl Future<Output = BTreeMap<u32, String>> + Send {
        async { BTreeMap::new() }
    }
    /// Puts `vmid` into pool `to` (out of `from`), or takes it out of `from` when `to` is `None`.
    fn set_pool(
        &self,
        vmid: u32,
        from: Option<&str>,
        to: Option<&str>,
    ) -> impl Future<Output = Result<(), PveError>> + Send {
        let _ = (from, to);
        async move {
            Err(PveError::Invalid {
                vmid: Some(vmid),
                field: "pool".into(),
                value: to.unwrap_or_default().to_string(),
                expected: "a node with resource pools (this one has none)".into(),
            })
        }
    }
    /// The directory that holds `STORAGE:vztmpl/` files.
    fn template_dir(&self, storage: &str)
        -> impl Future<Output = Result<PathBuf, PveError>> + Send;
    /// Whether `storage` holds the template file `file_name` (`STORAGE:vztmpl/FILE`). The default looks in
    /// [`NodeApi::template_dir`]; a PVE node asks the storage's content list.
    fn has_template(
        &self,
        storage: &str,
        file_name: &str,
    ) -> impl Future<Output = Result<bool, PveError>> + Send {
        async move {
            let dir = self.template_dir(storage).await?;
            Ok(dir.join(file_name).is_file())
        }
    }
    /// `pveam download STORAGE NAME` (appliance templates from the index).
    fn pveam_download(
        &self,
        storage: &str,
        name: &str,
    ) -> impl Future<Output = Result<(), PveError>> + Send;
}

/// The error of a node whose config files the agent cannot edit (the default of the file-editing calls).
fn config_files_not_editable(vmid: u32) -> PveError {
    PveError::ConfigFile {
        vmid,
        path: String::new(),
        source: std::io::Error::new(
            std::io::ErrorKind::Unsupported,
            "this node's config files cannot be edited",
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secret_debug_is_redacted() {
        assert_eq!(format!("{:?}", Secret("hunter22".into())), "Secret(***)");
    }
}
