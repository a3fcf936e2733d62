//! Checks that need the world outside the file: the datastores and bridges of a node, and the
//! vm_ids, hostnames and addresses that other fleets or unmanaged containers already hold. The
//! controller knows these facts (from agent inventories) and supplies them through
//! [`WorldFacts`]; [`check_against_world`] turns conflicts into [`Diagnostic`]s that point at the
//! file's lines through the fleet's [`Spans`](crate::Spans).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::net::IpAddr;

use crate::diag::{did_you_mean, Diagnostic};
use crate::model::{Fleet, MountPoint};

/// One PVE storage as a node reports it.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DatastoreFacts {
    /// PVE content types (`rootdir`, `images`, `vztmpl`, `iso`, `backup`, ...).
    pub content: BTreeSet<String>,
    /// Free space in bytes (for the scheduler; not checked here).
    pub free_bytes: u64,
}

/// What a node offers.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct NodeFacts {
    pub datastores: BTreeMap<String, DatastoreFacts>,
    pub bridges: BTreeSet<String>,
    /// The PVE cluster the node is in; `None` for a standalone node. Containers migrate only within a cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster: Option<String>,
    /// The node's PVE version (`9.1.2`), when it reported one: options of newer releases are refused at plan time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pve_version: Option<String>,
}

/// Whether PVE version `have` (`9.1.2`, `pve-manager/9.2.0/...`) is at least `major.minor`; an unreadable version
/// counts as new enough (PVE itself then says what it refuses).
pub fn pve_at_least(have: &str, major: u32, minor: u32) -> bool {
    let v = have.rsplit_once("pve-manager/").map_or(have, |(_, v)| v);
    let mut parts = v.split(['.', '/', '-']).map(|p| p.parse::<u32>());
    match (parts.next(), parts.next()) {
        (Some(Ok(ma)), Some(Ok(mi))) => (ma, mi) >= (major, minor),
        _ => true,
    }
}

/// Who holds a vm_id, hostname or address already.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Holder {
    pub node: String,
    pub vm_id: Option<u32>,
    /// The pxfleet fleet and container key, when the holder is managed by pxfleet.
    pub fleet: Option<String>,
    pub container: Option<String>,
}

impl Holder {
    /// Whether the holder is this very container (its own existing instance is no conflict).
    pub fn is(&self, fleet: &str, container: &str) -> bool {
        self.fleet.as_deref() == Some(fleet) && self.container.as_deref() == Some(container)
    }
}

impl fmt::Display for Holder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.vm_id {
            Some(id) => write!(f, "container {id} on node {}", self.node)?,
            None => write!(f, "a container on node {}", self.node)?,
        }
        match (&self.fleet, &self.container) {
            (Some(fl), Some(c)) => write!(f, " (fleet {fl}, {c})"),
            _ => write!(f, " (not managed by pxfleet)"),
        }
    }
}

/// Facts about the world, supplied by the controller.
pub trait WorldFacts {
    /// Every known node.
    fn node_names(&self) -> Vec<String>;
    /// A node's storages and bridges; `None` for an unknown node.
    fn node(&self, name: &str) -> Option<NodeFacts>;
    /// Who holds a vm_id on any node (managed or not).
    fn vm_id_holder(&self, vm_id: u32) -> Option<Holder>;
    /// Who uses a hostname (compared case-insensitively).
    fn hostname_holder(&self, hostname: &str) -> Option<Holder>;
    /// Who has a static address.
    fn address_holder(&self, addr: IpAddr) -> Option<Holder>;
}

/// A world with no nodes and nothing in use.
#[derive(Clone, Copy, Debug, Default)]
pub struct EmptyWorld;

impl WorldFacts for EmptyWorld {
    fn node_names(&self) -> Vec<String> {
        Vec::new()
    }
    fn node(&self, _: &str) -> Option<NodeFacts> {
        None
    }
    fn vm_id_holder(&self, _: u32) -> Option<Holder> {
        None
    }
    fn hostname_holder(&self, _: &str) -> Option<Holder> {
        None
    }
    fn address_holder(&self, _: IpAddr) -> Option<Holder> {
        None
    }
}

/// An in-memory world, for tests and for the controller to fill from its store.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MemoryWorld {
    pub nodes: BTreeMap<String, NodeFacts>,
    pub vm_ids: BTreeMap<u32, Holder>,
    /// Keys lower-case.
    pub hostnames: BTreeMap<String, Holder>,
    pub addresses: BTreeMap<IpAddr, Holder>,
}

impl MemoryWorld {
    /// Add a node with the given storages (`(id, content types)`) and bridges.
    pub fn with_node(
        mut self,
        name: &str,
        datastores: &[(&str, &[&str])],
        bridges: &[&str],
    ) -> Self {
        let facts = NodeFacts {
            datastores: datastores
                .iter()
                .map(|(id, content)| {
                    (
                        (*id).to_owned(),
                        DatastoreFacts {
                            content: content.iter().map(|c| (*c).to_owned()).collect(),
                            free_bytes: 1 << 40,
                        },
                    )
                })
                .collect(),
            bridges: bridges.iter().map(|b| (*b).to_owned()).collect(),
            cluster: None,
            pve_version: None,
        };
        self.nodes.insert(name.to_owned(), facts);
        self
    }

    /// Puts an added node into PVE cluster `cluster`.
    pub fn in_cluster(mut self, name: &str, cluster: &str) -> Self {
        if let Some(n) = self.nodes.get_mut(name) {
            n.cluster = Some(cluster.to_owned());
        }
        self
    }
}

impl WorldFacts for MemoryWorld {
    fn node_names(&self) -> Vec<String> {
        self.nodes.keys().cloned().collect()
    }
    fn node(&self, name: &str) -> Option<NodeFacts> {
        self.nodes.get(name).cloned()
    }
    fn vm_id_holder(&self, vm_id: u32) -> Option<Holder> {
        self.vm_ids.get(&vm_id).cloned()
    }
    fn hostname_holder(&self, hostname: &str) -> Option<Holder> {
        self.hostnames.get(&hostname.to_ascii_lowercase()).cloned()
    }
    fn address_holder(&self, addr: IpAddr) -> Option<Holder> {
        self.addresses.get(&addr).cloned()
    }
}

fn unknown(what: &str, name: &str, known: &[String]) -> (String, Option<String>) {
    let refs: Vec<&str> = known.iter().map(String::as_str).collect();
    let msg = match did_you_mean(name, &refs) {
        Some(s) => format!("{what} '{name}' does not exist; did you mean '{s}'?"),
        None => format!("{what} '{name}' does not exist"),
    };
    let hint = if known.is_empty() {
        None
    } else {
        Some(format!("known: {}", known.join(", ")))
    };
    (msg, hint)
}

fn datastore_problem(
    node: &str,
    nf: &NodeFacts,
    ds: &str,
    content: &str,
) -> Option<(String, Option<String>)> {
    match nf.datastores.get(ds) {
        None => {
            let ids: Vec<String> = nf.datastores.keys().cloned().collect();
            Some(unknown(&format!("datastore on node {node}:"), ds, &ids))
        }
        Some(f) if !f.content.contains(content) => {
            let with: Vec<&str> = nf
                .datastores
                .iter()
                .filter(|(_, f)| f.content.contains(content))
                .map(|(k, _)| k.as_str())
                .collect();
            Some((
                format!("datastore {ds} on node {node} does not hold `{content}` content"),
                Some(if with.is_empty() {
                    format!(
                        "enable {content} on a storage of {node} (pvesm set {ds} --content ...)"
                    )
                } else {
                    format!("storages of {node} with {content}: {}", with.join(", "))
                }),
            ))
        }
        Some(_) => None,
    }
}

/// Check a parsed fleet against the world. `file` is the fleet file's name for the diagnostics.
pub fn check_against_world(file: &str, fleet: &Fleet, facts: &dyn WorldFacts) -> Vec<Diagnostic> {
    let mut out = Vec::new();
    let spans = &fleet.spans;
    let node_names = facts.node_names();
    let mut push = |path: String, msg: String, hint: Option<String>| {
        let mut d = Diagnostic::new(file, spans.lookup(&path), path, msg);
        d.hint = hint;
        out.push(d);
    };
    let mut node_cache: BTreeMap<String, Option<NodeFacts>> = BTreeMap::new();
    for (key, c) in &fleet.containers {
        let cpath = format!("containers.{key}");
        // The container `adopt: true` takes over holds its own vm_id, hostname and addresses: no conflict.
        let target = |h: &Holder| {
            c.adopt
                && h.fleet.is_none()
                && Some(h.node.as_str()) == c.node.as_deref()
                && h.vm_id.is_some()
                && h.vm_id == c.vm_id
        };
        for (i, n) in c.constraints.nodes.iter().enumerate() {
            if !node_names.contains(n) {
                let (m, h) = unknown("node", n, &node_names);
                push(format!("{cpath}.constraints.nodes.{i}"), m, h);
            }
        }
        if let Some(node) = &c.node {
            let facts_for = node_cache
                .entry(node.clone())
                .or_insert_with(|| facts.node(node));
            match facts_for {
                None => {
                    let (m, h) = unknown("node", node, &node_names);
                    push(
                        format!("{cpath}.node"),
                        m,
                        h.or(Some(
                            "omit `node` to let the scheduler place the container".into(),
                        )),
                    );
                }
                Some(nf) if nf.datastores.is_empty() && nf.bridges.is_empty() => {
                    // Enrolled but silent: one clear message instead of a "does not exist" per field.
                    push(
                        format!("{cpath}.node"),
                        format!("node {node} has not reported its storages and bridges yet"),
                        Some(format!(
                            "its agent sends them when it connects: wait until `pxctl get nodes` shows {node} ready, then submit again"
                        )),
                    );
                }
                Some(nf) => {
                    let mut check_ds = |path: String, ds: &str, content: &str| {
                        if let Some((m, h)) = datastore_problem(node, nf, ds, content) {
                            push(path, m, h);
                        }
                    };
                    if let Some(ds) = &c.datastore_id {
                        check_ds(format!("{cpath}.datastore_id"), ds, "rootdir");
                    }
                    for (i, mp) in c.mount_points.iter().enumerate() {
                        match mp {
                            MountPoint::Volume { datastore_id, .. } => check_ds(
                                format!("{cpath}.mount_points.{i}.datastore_id"),
                                datastore_id,
                                "rootdir",
                            ),
                            // The volume list is not in the node's inventory: its storage is checked here, the
                            // volume itself by PVE (`pct create` fails on a missing one).
                            MountPoint::Existing { volume, .. } => {
                                let sid = volume.split(':').next().unwrap_or_default();
                                check_ds(format!("{cpath}.mount_points.{i}.volume"), sid, "rootdir")
                            }
                            // the source's own volume, checked with the source
                            MountPoint::Bind { .. } | MountPoint::VolumeOf { .. } => {}
                        }
                    }
                    // A clone template has no file to store; its source is checked by `pct clone`.
                    if let Some(t) = fleet
                        .templates
                        .get(&c.template)
                        .filter(|t| !t.source.is_clone())
                    {
                        check_ds(
                            format!("templates.{}.storage", c.template),
                            &t.storage,
                            "vztmpl",
                        );
                    }
                    if c.datastore_id.is_none()
                        && !nf
                            .datastores
                            .values()
                            .any(|f| f.content.contains("rootdir"))
                    {
                        push(
                            format!("{cpath}.node"),
                            format!("node {node} has no storage with rootdir content"),
                            Some("set datastore_id to a storage that holds containers".into()),
                        );
                    }
                    // A mount point's own idmap is new in PVE 9.2: an older node refuses the key.
                    if let Some(v) = nf.pve_version.as_deref().filter(|v| !pve_at_least(v, 9, 2)) {
                        for (i, mp) in c.mount_points.iter().enumerate() {
                            if mp.flags().idmap.is_some() {
                                push(
                                    format!("{cpath}.mount_points.{i}.idmap"),
                                    format!("node {node} runs PVE {v}; a mount point's idmap needs PVE 9.2 or later"),
                                    Some("upgrade the node to PVE 9.2, or remove idmap from the mount point".into()),
                                );
                            }
                        }
                    }
                    for (i, iface) in c.interfaces.iter().enumerate() {
                        if !nf.bridges.contains(&iface.bridge) {
                            let path = if i == 0 {
                                format!("{cpath}.bridge")
                            } else {
                                format!("{cpath}.extra_interfaces.{}.bridge", i - 1)
                            };
                            let known: Vec<String> = nf.bridges.iter().cloned().collect();
                            let (m, h) =
                                unknown(&format!("bridge on node {node}:"), &iface.bridge, &known);
                            push(path, m, h);
                        }
                    }
                }
            }
        }
        if let Some(id) = c.vm_id {
            if let Some(h) = facts
                .vm_id_holder(id)
                .filter(|h| !h.is(&fleet.name, key) && !target(h))
            {
                push(
                    format!("{cpath}.vm_id"),
                    format!("vm_id {id} is already taken by {h}"),
                    Some("pick a free vm_id, or omit it to have one allocated".into()),
                );
            }
        }
        if let Some(h) = facts
            .hostname_holder(&c.hostname)
            .filter(|h| !h.is(&fleet.name, key) && !target(h))
        {
            push(
                format!("{cpath}.hostname"),
                format!("hostname {} is already used by {h}", c.hostname),
                None,
            );
        }
        for (i, iface) in c.interfaces.iter().enumerate() {
            let ipath = if i == 0 {
                cpath.clone()
            } else {
                format!("{cpath}.extra_interfaces.{}", i - 1)
            };
            let v4 = iface
                .ipv4
                .static_addr()
                .map(|a| (IpAddr::V4(a), "ip_address"));
            let v6 = iface.ipv6.static_addr().map(|a| (IpAddr::V6(a), "ipv6"));
            for (addr, field) in v4.into_iter().chain(v6) {
                if let Some(h) = facts
                    .address_holder(addr)
                    .filter(|h| !h.is(&fleet.name, key) && !target(h))
                {
                    push(
                        format!("{ipath}.{field}"),
                        format!("address {addr} is already used by {h}"),
                        None,
                    );
                }
            }
        }
    }
    out.sort_by_key(|d| (d.line, d.column));
    out.dedup();
    out
}
