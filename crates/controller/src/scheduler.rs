//! Placement and numbering, as pure functions: the scheduler picks a node (and a datastore when the container
//! names none) for containers without `node`, and the allocator hands out vm_ids from the configured range.
//!
//! Placement filters nodes by readiness and cordon, `constraints.nodes`, `constraints.node_labels`, the
//! datastore (exists, holds `rootdir`, has room), the bridges, free memory and cores, and anti-affinity; then
//! spreads (fewest containers of the fleet), breaking ties towards the most free memory, then the node name.
//! Containers are placed in name order and each placement is charged to its node before the next, so the
//! result is deterministic and a batch of six spreads over three nodes two by two.
//!
//! MACs: every interface the file leaves without `mac_address` gets one from the controller (see
//! [`allocate_macs`]), so destroying and re-creating a container gives it the same MAC (ARP caches, DHCP leases).

use std::collections::{BTreeMap, BTreeSet};

use pxfleet_spec::{Container, MacAddr};

use crate::config::VmIdRange;
use crate::model::{NodeRecord, NodeStatus};

/// Why a container could not be placed, with each node's reason for refusing it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScheduleError {
    #[error("container {container}: no node can take it ({})", reasons_text(.reasons))]
    NoNode {
        container: String,
        reasons: Vec<(String, String)>,
    },
    #[error(
        "no node has room for container {container}: it needs {need_mib} MiB memory and {need_gib} GiB disk; \
         the node with the most free memory, {best_node}, has {best_free_mib} MiB free{} ({})",
        reserved_text(*.best_reserved_mib),
        reasons_text(.reasons)
    )]
    NoRoom {
        container: String,
        need_mib: u64,
        need_gib: u64,
        /// Of the nodes refused only for lack of room, the one with the most free memory.
        best_node: String,
        /// Its free memory after what is reserved on it.
        best_free_mib: u64,
        /// Memory reserved on it for containers scheduled there but not yet observed.
        best_reserved_mib: u64,
        reasons: Vec<(String, String)>,
    },
    #[error(
        "no free MAC address found for container {container} interface {index} after {attempts} tries in \
         BC:24:11:xx:xx:xx; set its mac_address"
    )]
    MacsExhausted {
        container: String,
        index: usize,
        attempts: u32,
    },
    #[error("no free vm_id left in {first}..={last} (container {container})")]
    VmIdsExhausted {
        container: String,
        first: u32,
        last: u32,
    },
}

fn reserved_text(reserved_mib: u64) -> String {
    if reserved_mib == 0 {
        String::new()
    } else {
        format!(
            " after {reserved_mib} MiB reserved for containers scheduled there but not yet created"
        )
    }
}

fn reasons_text(reasons: &[(String, String)]) -> String {
    if reasons.is_empty() {
        return "no nodes are enrolled".into();
    }
    reasons
        .iter()
        .map(|(n, r)| format!("{n}: {r}"))
        .collect::<Vec<_>>()
        .join("; ")
}

/// A node as the scheduler sees it: capacity left after what is already planned for it.
#[derive(Debug, Clone)]
pub struct Candidate {
    pub name: String,
    pub status: NodeStatus,
    pub labels: BTreeMap<String, String>,
    pub cores: u32,
    pub memory_free_mib: u64,
    /// rootdir-capable storages: id -> free GiB.
    pub rootdir_free_gib: BTreeMap<String, u64>,
    pub bridges: BTreeSet<String>,
    /// Containers of the fleet being placed that are already on this node.
    pub fleet_containers: usize,
    /// Labels of the fleet's containers on this node (for anti-affinity).
    pub fleet_labels: Vec<BTreeMap<String, String>>,
    /// Memory taken off `memory_free_mib` for containers scheduled here (by any fleet, any submit) that the node
    /// does not report yet: the node's free memory does not show them, so two quick submits must not both
    /// count on it.
    pub reserved_mib: u64,
}

/// Why a node cannot take a container; `room` when only capacity (memory, disk) is missing.
#[derive(Debug, Clone)]
struct Refusal {
    reason: String,
    room: bool,
}

impl Refusal {
    fn other(reason: impl Into<String>) -> Refusal {
        Refusal {
            reason: reason.into(),
            room: false,
        }
    }
    fn room(reason: String) -> Refusal {
        Refusal { reason, room: true }
    }
}

impl Candidate {
    /// Builds a candidate from a stored node; `placed` are the fleet's containers already on it.
    pub fn from_node<'a>(
        node: &NodeRecord,
        status: NodeStatus,
        placed: impl IntoIterator<Item = &'a Container>,
    ) -> Candidate {
        let mut labels = node.inventory.labels.clone();
        labels
            .entry("node".into())
            .or_insert_with(|| node.name.clone());
        let placed: Vec<&Container> = placed.into_iter().collect();
        Candidate {
            name: node.name.clone(),
            status,
            labels,
            cores: node.inventory.cores,
            memory_free_mib: node.inventory.memory_free_mib,
            rootdir_free_gib: node
                .inventory
                .storages
                .iter()
                .filter(|s| s.holds_rootdir())
                .map(|s| (s.id.clone(), s.avail_bytes >> 30))
                .collect(),
            bridges: node.inventory.bridges.iter().cloned().collect(),
            fleet_containers: placed.len(),
            fleet_labels: placed.iter().map(|c| c.labels.clone()).collect(),
            reserved_mib: 0,
        }
    }

    /// Reserves room for `c`, scheduled on this node but not created yet: its memory, and its disk on its
    /// datastore.
    pub fn reserve(&mut self, c: &Container) {
        self.charge(c);
        self.reserved_mib += c.memory;
    }

    /// Takes `c`'s memory and disk off what is free.
    fn charge(&mut self, c: &Container) {
        self.memory_free_mib = self.memory_free_mib.saturating_sub(c.memory);
        self.charge_disk(c);
    }

    /// Takes `c`'s disk off what is free on its datastore.
    fn charge_disk(&mut self, c: &Container) {
        if let Some(free) = c
            .datastore_id
            .as_ref()
            .and_then(|ds| self.rootdir_free_gib.get_mut(ds))
        {
            *free = free.saturating_sub(disk_need_gib(c));
        }
    }

    /// The datastore this node would use for `c`, or why it cannot take `c`.
    fn refuse(&self, c: &Container) -> Result<String, Refusal> {
        match self.status {
            NodeStatus::Ready => {}
            NodeStatus::Down => return Err(Refusal::other("node is down")),
            NodeStatus::Cordoned => return Err(Refusal::other("node is cordoned")),
            NodeStatus::Stalled => {
                return Err(Refusal::other(
                    "node is stalled (its operations do not move)",
                ))
            }
        }
        if !c.constraints.nodes.is_empty() && !c.constraints.nodes.contains(&self.name) {
            return Err(Refusal::other("not in constraints.nodes"));
        }
        for (k, v) in &c.constraints.node_labels {
            if self.labels.get(k) != Some(v) {
                return Err(Refusal::other(format!("label {k}={v} not set")));
            }
        }
        for iface in &c.interfaces {
            if !self.bridges.contains(&iface.bridge) {
                return Err(Refusal::other(format!("no bridge {}", iface.bridge)));
            }
        }
        if self.memory_free_mib < c.memory {
            return Err(Refusal::room(format!(
                "{} MiB memory free, {} needed",
                self.memory_free_mib, c.memory
            )));
        }
        if let Some(cores) = c.cores {
            if self.cores < cores {
                return Err(Refusal::other(format!(
                    "{} cores, {cores} needed",
                    self.cores
                )));
            }
        }
        for key in &c.constraints.anti_affinity {
            if let Some(v) = c.labels.get(key) {
                if self.fleet_labels.iter().any(|l| l.get(key) == Some(v)) {
                    return Err(Refusal::other(format!(
                        "anti-affinity: a container with {key}={v} is already there"
                    )));
                }
            }
        }
        self.datastore_for(c)
    }

    /// The rootdir datastore `c` uses on this node: the one it names (which must exist and have room), or
    /// the one with the most free space that has room (then the first id in order).
    fn datastore_for(&self, c: &Container) -> Result<String, Refusal> {
        let need = disk_need_gib(c);
        match &c.datastore_id {
            Some(ds) => match self.rootdir_free_gib.get(ds) {
                None => Err(Refusal::other(format!(
                    "no storage {ds} with rootdir content"
                ))),
                Some(free) if *free < need => Err(Refusal::room(format!(
                    "storage {ds} has {free} GiB free, {need} needed"
                ))),
                Some(_) => Ok(ds.clone()),
            },
            None => self
                .rootdir_free_gib
                .iter()
                .filter(|(_, free)| **free >= need)
                // most free space, then the first id in order
                .max_by(|a, b| a.1.cmp(b.1).then_with(|| b.0.cmp(a.0)))
                .map(|(id, _)| id.clone())
                .ok_or_else(|| {
                    let any = !self.rootdir_free_gib.is_empty();
                    let why = format!("no rootdir storage with {need} GiB free");
                    if any {
                        Refusal::room(why)
                    } else {
                        Refusal::other(why)
                    }
                }),
        }
    }
}

/// Disk the container needs on its root datastore: the root disk plus volumes on the same datastore.
pub fn disk_need_gib(c: &Container) -> u64 {
    c.disk_size
        + c.mount_points
            .iter()
            .filter_map(|m| match m {
                pxfleet_spec::MountPoint::Volume {
                    datastore_id,
                    size_gib,
                    ..
                } if Some(datastore_id) == c.datastore_id.as_ref() => Some(*size_gib),
                _ => None,
            })
            .sum::<u64>()
}

/// Where a candidate stands in placement's preference: fewest containers of the fleet, then the most free
/// memory, then the name, then its position (the first of equals wins, as in a scan).
type Rank = (usize, std::cmp::Reverse<u64>, String, usize);

fn rank(c: &Candidate, j: usize) -> Rank {
    (
        c.fleet_containers,
        std::cmp::Reverse(c.memory_free_mib),
        c.name.clone(),
        j,
    )
}

/// Places every container of `containers` whose `node` is None (in name order), setting `node` and, when
/// absent, `datastore_id`. Placed containers are charged to their node so later ones see the remaining room.
///
/// The candidates are kept ordered by preference ([`Rank`]), so a container goes to the first one that takes it
/// and only the chosen one moves in the order: a fleet of 10,000 containers over 1,000 nodes asks one node per
/// container instead of all of them (which was 10 million checks, a second of the submit).
pub fn place(
    containers: &mut [Container],
    candidates: &mut [Candidate],
) -> Result<(), ScheduleError> {
    let mut order: Vec<usize> = (0..containers.len()).collect();
    order.sort_by(|a, b| containers[*a].name.cmp(&containers[*b].name));
    let mut by_name: BTreeMap<String, usize> = BTreeMap::new();
    for (j, cand) in candidates.iter().enumerate() {
        by_name.entry(cand.name.clone()).or_insert(j);
    }
    // Containers the file pins to a node without a datastore: that node's datastore, chosen as for the others.
    for &i in &order {
        let c = &mut containers[i];
        let (Some(node), None) = (&c.node, &c.datastore_id) else {
            continue;
        };
        // an unknown node is reported by the world check
        let Some(&j) = by_name.get(node.as_str()) else {
            continue;
        };
        let cand = &mut candidates[j];
        match cand.datastore_for(c) {
            Ok(ds) => {
                c.datastore_id = Some(ds);
                cand.charge_disk(c);
            }
            Err(r) => {
                return Err(ScheduleError::NoNode {
                    container: c.name.clone(),
                    reasons: vec![(cand.name.clone(), r.reason)],
                })
            }
        }
    }
    let mut ranked: BTreeSet<Rank> = candidates
        .iter()
        .enumerate()
        .map(|(j, c)| rank(c, j))
        .collect();
    for i in order {
        let c = &mut containers[i];
        if c.node.is_some() {
            continue;
        }
        let best = ranked
            .iter()
            .find_map(|r| candidates[r.3].refuse(c).ok().map(|ds| (r.3, ds)));
        let Some((j, ds)) = best else {
            return Err(unplaceable(c, candidates));
        };
        c.datastore_id = Some(ds);
        let cand = &mut candidates[j];
        ranked.remove(&rank(cand, j));
        c.node = Some(cand.name.clone());
        cand.fleet_containers += 1;
        cand.fleet_labels.push(c.labels.clone());
        cand.charge(c);
        ranked.insert(rank(cand, j));
    }
    Ok(())
}

/// Why no candidate takes `c`: every node's reason, and of the nodes refused only for lack of room the one with
/// the most free memory.
fn unplaceable(c: &Container, candidates: &[Candidate]) -> ScheduleError {
    let mut reasons = Vec::new();
    let mut roomiest: Option<usize> = None;
    for (j, cand) in candidates.iter().enumerate() {
        let Err(r) = cand.refuse(c) else { continue };
        if r.room
            && roomiest.is_none_or(|b| {
                (cand.memory_free_mib, std::cmp::Reverse(&cand.name))
                    > (
                        candidates[b].memory_free_mib,
                        std::cmp::Reverse(&candidates[b].name),
                    )
            })
        {
            roomiest = Some(j);
        }
        reasons.push((cand.name.clone(), r.reason));
    }
    match roomiest {
        Some(b) => ScheduleError::NoRoom {
            container: c.name.clone(),
            need_mib: c.memory,
            need_gib: disk_need_gib(c),
            best_node: candidates[b].name.clone(),
            best_free_mib: candidates[b].memory_free_mib,
            best_reserved_mib: candidates[b].reserved_mib,
            reasons,
        },
        None => ScheduleError::NoNode {
            container: c.name.clone(),
            reasons,
        },
    }
}

/// The lowest vm_id of `range` not in `taken`.
pub fn allocate_vm_id(range: VmIdRange, taken: &BTreeSet<u32>) -> Option<u32> {
    (range.first..=range.last).find(|id| !taken.contains(id))
}

/// Gives every container without a vm_id the lowest free id of `range`; `taken` holds every id in use anywhere
/// (all fleets' desired containers, everything agents report, ids given explicitly in this fleet) and grows
/// with each allocation.
pub fn allocate_vm_ids(
    containers: &mut [Container],
    range: VmIdRange,
    taken: &mut BTreeSet<u32>,
) -> Result<(), ScheduleError> {
    let mut order: Vec<usize> = (0..containers.len()).collect();
    order.sort_by(|a, b| containers[*a].name.cmp(&containers[*b].name));
    // `taken` only grows here, so the next lowest free id is above the last one given: searching on from there
    // keeps a 10,000-container submit linear (it was quadratic, seconds of the submit).
    let mut from = range.first;
    for i in order {
        let c = &mut containers[i];
        if c.vm_id.is_some() {
            continue;
        }
        let rest = VmIdRange {
            first: from,
            last: range.last,
        };
        let id = allocate_vm_id(rest, taken).ok_or_else(|| ScheduleError::VmIdsExhausted {
            container: c.name.clone(),
            first: range.first,
            last: range.last,
        })?;
        taken.insert(id);
        c.vm_id = Some(id);
        from = id.saturating_add(1);
    }
    Ok(())
}

/// PVE's MAC prefix (Proxmox's OUI): the MACs PVE generates and the ones the controller allocates start with it.
/// `BC` has the multicast bit clear (unicast) and the locally-administered bit clear, as in PVE.
pub const MAC_PREFIX: [u8; 3] = [0xBC, 0x24, 0x11];

/// How many candidates [`allocate_macs`] tries for one interface before giving up (there are 2^24).
const MAC_ATTEMPTS: u32 = 4096;

/// The `attempt`-th candidate MAC of interface `index` of container `container` in fleet `fleet`: the first three
/// bytes of SHA-256 over the four, after [`MAC_PREFIX`]. Deterministic, so a plan and the submit that follows it
/// (and a recreation) agree.
pub fn candidate_mac(fleet: &str, container: &str, index: usize, attempt: u32) -> MacAddr {
    use sha2::Digest;
    let mut h = sha2::Sha256::new();
    h.update(fleet.as_bytes());
    h.update([0]);
    h.update(container.as_bytes());
    h.update([0]);
    h.update((index as u64).to_be_bytes());
    h.update(attempt.to_be_bytes());
    let d = h.finalize();
    let [a, b, c] = MAC_PREFIX;
    MacAddr([a, b, c, d[0], d[1], d[2]])
}

/// Who holds a MAC, for [`allocate_macs`]: a container of the fleet being allocated (by name), or anything else
/// (another fleet, a destroyed container's allocation, a container an agent reports that is not ours).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MacHolder {
    Container(String),
    Other,
}

/// Gives every interface of `containers` without `mac_address` a MAC, in name order: the MAC its node reports
/// for it when the container exists (`observed`, by container name and interface index: containers created
/// before MACs were allocated keep theirs), else the one remembered for it (`remembered`) unless someone else
/// holds it now, else the first [`candidate_mac`] no one holds. `held` holds every MAC in use or allocated
/// anywhere, with its holder, and grows with each allocation.
pub fn allocate_macs(
    fleet: &str,
    containers: &mut [Container],
    observed: &BTreeMap<(String, usize), MacAddr>,
    remembered: &BTreeMap<(String, usize), MacAddr>,
    held: &mut BTreeMap<MacAddr, MacHolder>,
) -> Result<(), ScheduleError> {
    let mut order: Vec<usize> = (0..containers.len()).collect();
    order.sort_by(|a, b| containers[*a].name.cmp(&containers[*b].name));
    for i in order {
        let c = &mut containers[i];
        let me = MacHolder::Container(c.name.clone());
        for index in 0..c.interfaces.len() {
            if c.interfaces[index].mac_address.is_some() {
                continue;
            }
            let own: Vec<MacAddr> = c.interfaces.iter().filter_map(|x| x.mac_address).collect();
            let free = |m: &MacAddr| !own.contains(m) && held.get(m).is_none_or(|h| *h == me);
            let key = (c.name.clone(), index);
            let mac = match observed.get(&key) {
                Some(m) => *m,
                None => match remembered.get(&key).filter(|m| free(m)) {
                    Some(m) => *m,
                    None => (0..MAC_ATTEMPTS)
                        .map(|a| candidate_mac(fleet, &c.name, index, a))
                        .find(|m| free(m))
                        .ok_or_else(|| ScheduleError::MacsExhausted {
                            container: c.name.clone(),
                            index,
                            attempts: MAC_ATTEMPTS,
                        })?,
                },
            };
            held.insert(mac, me.clone());
            c.interfaces[index].mac_address = Some(mac);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
