//! The world as planning sees it: a [`Snapshot`] of the store taken at one moment (nodes and their status,
//! observed, desired and applied containers, allocations, the fleet's head revision), the world facts the
//! spec crate checks a fleet against (who holds a vm_id, hostname or address), where containers are observed,
//! and the planner's view of this fleet's observed containers.

use std::collections::{HashMap, HashSet};
use std::net::IpAddr;

use pxfleet_spec::observed::ObservedContainer as SpecObserved;
use pxfleet_spec::plan::Nodes;
use pxfleet_spec::{DatastoreFacts, Holder, NodeFacts, WorldFacts};

use crate::grpc::convert;
use crate::model::{
    Allocation, AppliedContainer, DesiredContainer, NodeRecord, NodeStatus, ObservedContainer,
    Revision,
};
use crate::store::{Store, StoreError};

/// Everything planning reads, taken from the store at one moment.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    pub nodes: Vec<(NodeRecord, NodeStatus)>,
    pub observed: Vec<ObservedContainer>,
    /// Every fleet's desired containers.
    pub desired: Vec<DesiredContainer>,
    pub applied: Vec<AppliedContainer>,
    /// Every container name's allocation (vm_id, MACs) in every fleet, destroyed containers included.
    pub allocations: Vec<Allocation>,
    /// The fleet's current revision (0 = new) and its stored spec.
    pub revision: u64,
    pub head: Option<Revision>,
}

impl Snapshot {
    pub fn take(
        store: &Store,
        fleet: &str,
        status: impl Fn(&NodeRecord) -> NodeStatus,
    ) -> Result<Snapshot, StoreError> {
        let revision = store.fleet(fleet)?.map(|f| f.revision).unwrap_or(0);
        Ok(Snapshot {
            nodes: store
                .nodes()?
                .into_iter()
                .map(|n| {
                    let s = status(&n);
                    (n, s)
                })
                .collect(),
            observed: store.all_observed()?,
            desired: store.all_desired()?,
            applied: store.all_applied()?,
            allocations: store.allocations()?,
            head: if revision > 0 {
                store.revision(fleet, revision)?
            } else {
                None
            },
            revision,
        })
    }

    /// Every fleet's desired containers but `fleet`'s own (they are no conflict with themselves).
    pub fn others_desired(&self, fleet: &str) -> Vec<&DesiredContainer> {
        self.desired.iter().filter(|d| d.fleet != fleet).collect()
    }
}

/// What the spec crate knows of a node: its enabled datastores, bridges and PVE cluster.
pub fn node_facts(n: &NodeRecord) -> NodeFacts {
    NodeFacts {
        datastores: n
            .inventory
            .storages
            .iter()
            .filter(|s| s.enabled)
            .map(|s| {
                (
                    s.id.clone(),
                    DatastoreFacts {
                        content: s.content.iter().cloned().collect(),
                        free_bytes: s.avail_bytes,
                    },
                )
            })
            .collect(),
        bridges: n.inventory.bridges.iter().cloned().collect(),
        cluster: Some(n.inventory.cluster_name.clone()).filter(|c| !c.is_empty()),
        pve_version: Some(n.inventory.pve_version.clone()).filter(|v| !v.is_empty()),
    }
}

/// Every node's facts by name, for the planner ([`pxfleet_spec::plan::plan_on`]).
pub fn nodes_facts<'a>(nodes: impl IntoIterator<Item = &'a NodeRecord>) -> Nodes {
    nodes
        .into_iter()
        .map(|n| (n.name.clone(), node_facts(n)))
        .collect()
}

/// World facts over a snapshot and the other fleets' desired containers, for
/// [`pxfleet_spec::check_against_world`]. Who holds a vm_id, hostname or address is looked up in maps built
/// once (the first holder in the snapshot's order, observed before desired, as a scan finds it): the check asks
/// for every container, and scanning the world each time made a resubmit of 10,000 containers quadratic.
pub(super) struct Facts<'a> {
    nodes: Vec<&'a NodeRecord>,
    node_by_name: HashMap<&'a str, &'a NodeRecord>,
    observed_vm_id: HashMap<u32, &'a ObservedContainer>,
    observed_hostname: HashMap<&'a str, &'a ObservedContainer>,
    observed_address: HashMap<&'a str, &'a ObservedContainer>,
    desired_vm_id: HashMap<u32, &'a DesiredContainer>,
    desired_hostname: HashMap<&'a str, &'a DesiredContainer>,
    desired_address: HashMap<IpAddr, &'a DesiredContainer>,
}

impl<'a> Facts<'a> {
    /// `others`: the desired containers of every fleet but the one being checked.
    pub(super) fn new(snap: &'a Snapshot, others: &[&'a DesiredContainer]) -> Facts<'a> {
        let mut f = Facts {
            nodes: snap.nodes.iter().map(|(n, _)| n).collect(),
            node_by_name: HashMap::new(),
            observed_vm_id: HashMap::new(),
            observed_hostname: HashMap::new(),
            observed_address: HashMap::new(),
            desired_vm_id: HashMap::new(),
            desired_hostname: HashMap::new(),
            desired_address: HashMap::new(),
        };
        for (n, _) in &snap.nodes {
            f.node_by_name.entry(n.name.as_str()).or_insert(n);
        }
        for o in &snap.observed {
            f.observed_vm_id.entry(o.vm_id).or_insert(o);
            f.observed_hostname.entry(o.hostname.as_str()).or_insert(o);
            for a in &o.static_addresses {
                f.observed_address.entry(a.as_str()).or_insert(o);
            }
        }
        for &d in others {
            f.desired_vm_id.entry(d.vm_id).or_insert(d);
            f.desired_hostname
                .entry(d.container.hostname.as_str())
                .or_insert(d);
            for i in &d.container.interfaces {
                let v4 = i.ipv4.static_addr().map(IpAddr::V4);
                let v6 = i.ipv6.static_addr().map(IpAddr::V6);
                for a in v4.into_iter().chain(v6) {
                    f.desired_address.entry(a).or_insert(d);
                }
            }
        }
        f
    }

    fn holder_of(&self, o: &ObservedContainer) -> Holder {
        Holder {
            node: o.node.clone(),
            vm_id: Some(o.vm_id),
            fleet: o.managed.as_ref().map(|m| m.fleet.clone()),
            container: o.managed.as_ref().map(|m| m.name.clone()),
        }
    }
    fn holder_desired(&self, d: &DesiredContainer) -> Holder {
        Holder {
            node: d.node.clone(),
            vm_id: Some(d.vm_id),
            fleet: Some(d.fleet.clone()),
            container: Some(d.name.clone()),
        }
    }
}

impl WorldFacts for Facts<'_> {
    fn node_names(&self) -> Vec<String> {
        self.nodes.iter().map(|n| n.name.clone()).collect()
    }

    fn node(&self, name: &str) -> Option<NodeFacts> {
        self.node_by_name.get(name).map(|n| node_facts(n))
    }

    fn vm_id_holder(&self, vm_id: u32) -> Option<Holder> {
        self.observed_vm_id
            .get(&vm_id)
            .map(|o| self.holder_of(o))
            .or_else(|| {
                self.desired_vm_id
                    .get(&vm_id)
                    .map(|d| self.holder_desired(d))
            })
    }

    fn hostname_holder(&self, hostname: &str) -> Option<Holder> {
        self.observed_hostname
            .get(hostname)
            .map(|o| self.holder_of(o))
            .or_else(|| {
                self.desired_hostname
                    .get(hostname)
                    .map(|d| self.holder_desired(d))
            })
    }

    fn address_holder(&self, addr: IpAddr) -> Option<Holder> {
        self.observed_address
            .get(addr.to_string().as_str())
            .map(|o| self.holder_of(o))
            .or_else(|| {
                self.desired_address
                    .get(&addr)
                    .map(|d| self.holder_desired(d))
            })
    }
}

/// Where every observed container is: `(node, vm_id)`.
pub(super) fn observed_places(snap: &Snapshot) -> HashSet<(&str, u32)> {
    snap.observed
        .iter()
        .map(|o| (o.node.as_str(), o.vm_id))
        .collect()
}

/// Desired containers of `desired` that no node reports at their place (`seen`) yet: `(node, vm_id, container)`.
pub(super) fn unobserved<'a>(
    seen: &'a HashSet<(&'a str, u32)>,
    desired: &'a [&'a DesiredContainer],
) -> impl Iterator<Item = (&'a str, u32, &'a pxfleet_spec::Container)> + 'a {
    desired
        .iter()
        .filter(|d| !seen.contains(&(d.node.as_str(), d.vm_id)))
        .map(|d| (d.node.as_str(), d.vm_id, &d.container))
}

/// The planner's view of what is observed: this fleet's managed containers with the configuration their node
/// reports (see [`convert::spec_observed`]; without one, the applied spec with the observed size and power).
/// Unmanaged containers only hold vm_ids, which the world checks already cover.
pub fn spec_observed(fleet: &str, snap: &Snapshot) -> Vec<SpecObserved> {
    let mut applied: HashMap<&str, &AppliedContainer> = HashMap::new();
    for a in snap.applied.iter().filter(|a| a.fleet == fleet) {
        applied.entry(a.name.as_str()).or_insert(a);
    }
    snap.observed
        .iter()
        .filter_map(|o| {
            let m = o.managed.as_ref().filter(|m| m.fleet == fleet)?;
            let a = applied.get(m.name.as_str()).copied();
            if o.config.is_none() && a.is_none() {
                return None;
            }
            convert::spec_observed(fleet, &m.name, o, a.map(|a| &a.container))
        })
        .collect()
}
