//! The world as planning sees it: a [`Snapshot`] of the store taken at one moment (nodes and their status,
//! observed, desired and applied containers, allocations, the fleet's head revision), the world facts the
//! spec crate checks a fleet against (who holds a vm_id, hostname or address), where containers are observed,
//! and the planner's view of this fleet's observed containers.

use std::collections::HashSet;
use std::net::IpAddr;

use pxfleet_spec::observed::ObservedContainer as SpecObserved;
use pxfleet_spec::plan::Nodes;
use pxfleet_spec::{DatastoreFacts, Holder, NodeFacts, WorldFacts};

use crate::convert;
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

    /// The snapshot without `fleet`'s own desired containers (they are no conflict with themselves).
    pub fn without_fleet(&self, fleet: &str) -> Snapshot {
        Snapshot {
            desired: self
                .desired
                .iter()
                .filter(|d| d.fleet != fleet)
                .cloned()
                .collect(),
            ..self.clone()
        }
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
    }
}

/// Every node's facts by name, for the planner ([`pxfleet_spec::plan::plan_on`]).
pub fn nodes_facts<'a>(nodes: impl IntoIterator<Item = &'a NodeRecord>) -> Nodes {
    nodes
        .into_iter()
        .map(|n| (n.name.clone(), node_facts(n)))
        .collect()
}

/// World facts over a snapshot, for [`pxfleet_spec::check_against_world`].
pub(super) struct Facts<'a> {
    pub snap: &'a Snapshot,
}

impl Facts<'_> {
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
        self.snap
            .nodes
            .iter()
            .map(|(n, _)| n.name.clone())
            .collect()
    }

    fn node(&self, name: &str) -> Option<NodeFacts> {
        let (n, _) = self.snap.nodes.iter().find(|(n, _)| n.name == name)?;
        Some(node_facts(n))
    }

    fn vm_id_holder(&self, vm_id: u32) -> Option<Holder> {
        self.snap
            .observed
            .iter()
            .find(|o| o.vm_id == vm_id)
            .map(|o| self.holder_of(o))
            .or_else(|| {
                self.snap
                    .desired
                    .iter()
                    .find(|d| d.vm_id == vm_id)
                    .map(|d| self.holder_desired(d))
            })
    }

    fn hostname_holder(&self, hostname: &str) -> Option<Holder> {
        self.snap
            .observed
            .iter()
            .find(|o| o.hostname == hostname)
            .map(|o| self.holder_of(o))
            .or_else(|| {
                self.snap
                    .desired
                    .iter()
                    .find(|d| d.container.hostname == hostname)
                    .map(|d| self.holder_desired(d))
            })
    }

    fn address_holder(&self, addr: IpAddr) -> Option<Holder> {
        let a = addr.to_string();
        self.snap
            .observed
            .iter()
            .find(|o| o.static_addresses.contains(&a))
            .map(|o| self.holder_of(o))
            .or_else(|| {
                self.snap
                    .desired
                    .iter()
                    .find(|d| {
                        d.container.interfaces.iter().any(|i| {
                            i.ipv4.static_addr().map(IpAddr::V4) == Some(addr)
                                || i.ipv6.static_addr().map(IpAddr::V6) == Some(addr)
                        })
                    })
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
    desired: &'a [DesiredContainer],
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
    snap.observed
        .iter()
        .filter_map(|o| {
            let m = o.managed.as_ref().filter(|m| m.fleet == fleet)?;
            let a = snap
                .applied
                .iter()
                .find(|a| a.fleet == fleet && a.name == m.name);
            if o.config.is_none() && a.is_none() {
                return None;
            }
            convert::spec_observed(fleet, &m.name, o, a.map(|a| &a.container))
        })
        .collect()
}
