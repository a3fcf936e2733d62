//! From a submitted fleet.yaml to a placed fleet and its plan: parsing (pxfleet-spec), the checks the spec crate
//! cannot make (against every container agents report, node inventories and cordons), vm_id allocation,
//! scheduling, MAC allocation, and the spec planner. Pure over a [`Snapshot`] of the store, so it is testable without a server.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::net::IpAddr;

use pxfleet_spec::observed::ObservedContainer as SpecObserved;
use pxfleet_spec::plan::Plan;
use pxfleet_spec::{DatastoreFacts, Diagnostic, Fleet, Holder, NodeFacts, Span, WorldFacts};

use crate::config::VmIdRange;
use crate::convert;
use crate::model::{
    Allocation, AppliedContainer, DesiredContainer, NodeRecord, NodeStatus, ObservedContainer,
    Revision,
};
use crate::scheduler::{self, Candidate};
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
}

/// The outcome of preparing a fleet: placed, numbered and planned, or the diagnostics that refuse it.
#[derive(Debug, Clone)]
pub struct Prepared {
    /// Containers with node, vm_id and datastore filled in.
    pub fleet: Fleet,
    pub plan: Plan,
    pub desired: Vec<DesiredContainer>,
}

fn diag(file: &str, fleet: &Fleet, path: String, message: String) -> Diagnostic {
    let span: Span = fleet.spans.lookup(&path);
    Diagnostic::new(file, span, path, message)
}

/// World facts over a snapshot, for [`pxfleet_spec::check_against_world`].
struct Facts<'a> {
    snap: &'a Snapshot,
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
        Some(NodeFacts {
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
        })
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

/// Places, numbers, checks and plans `fleet` against `snap`. `destroy` plans the fleet's removal instead.
pub fn prepare(
    file: &str,
    mut fleet: Fleet,
    snap: &Snapshot,
    range: VmIdRange,
    revision: u64,
) -> Result<Prepared, Vec<Diagnostic>> {
    let name = fleet.name.clone();
    let stored: BTreeMap<&str, &DesiredContainer> = snap
        .desired
        .iter()
        .filter(|d| d.fleet == name)
        .map(|d| (d.name.as_str(), d))
        .collect();
    let pinned: BTreeSet<String> = fleet
        .containers
        .iter()
        .filter(|(_, c)| c.node.is_some())
        .map(|(k, _)| k.clone())
        .collect();
    // Stable placement: what the file leaves open keeps the value given before.
    for (key, c) in fleet.containers.iter_mut() {
        if let Some(prev) = stored.get(key.as_str()) {
            if c.node.is_none() && c.constraints.nodes.iter().all(|n| *n == prev.node) {
                c.node = Some(prev.node.clone());
                if c.datastore_id.is_none() {
                    c.datastore_id = prev.container.datastore_id.clone();
                }
            }
            if c.node.as_deref() == Some(prev.node.as_str()) && c.datastore_id.is_none() {
                c.datastore_id = prev.container.datastore_id.clone();
            }
            // Moved to another node: it keeps its storage when the target has it (a `pct migrate`); only a target
            // without it gets the scheduler's choice, and the plan then says the datastore changes: a replacement.
            if let (Some(to), None, Some(ds)) =
                (&c.node, &c.datastore_id, &prev.container.datastore_id)
            {
                let has = snap.nodes.iter().any(|(n, _)| {
                    n.name == *to
                        && n.inventory
                            .storages
                            .iter()
                            .any(|s| s.id == *ds && s.holds_rootdir())
                });
                if *to != prev.node && has {
                    c.datastore_id = Some(ds.clone());
                }
            }
            if c.vm_id.is_none() {
                c.vm_id = Some(prev.vm_id);
            }
        }
    }
    crate::adopt::fill_from_targets(&mut fleet, snap);
    let snap_others = Snapshot {
        // this fleet's own desired containers are no conflict with themselves
        desired: snap
            .desired
            .iter()
            .filter(|d| d.fleet != name)
            .cloned()
            .collect(),
        ..snap.clone()
    };
    let mut diags = pxfleet_spec::check_against_world(file, &fleet, &Facts { snap: &snap_others });
    if file != "(stored spec)" {
        // A spec the controller changes itself (power, destroy) is not refused for a secret gone missing.
        diags.extend(crate::hooks::check_secrets(file, &fleet));
    }
    let seen = observed_places(snap);
    // Disk reserved per (node, datastore) by other fleets' containers not created yet.
    let mut reserved_gib: BTreeMap<(&str, &str), u64> = BTreeMap::new();
    for (node, _, c) in unobserved(&seen, &snap_others.desired) {
        if let Some(ds) = &c.datastore_id {
            *reserved_gib.entry((node, ds.as_str())).or_default() += scheduler::disk_need_gib(c);
        }
    }
    // What the spec crate cannot know: cordons and room on the chosen datastore, for new placements.
    for (key, c) in &fleet.containers {
        let Some(node) = &c.node else { continue };
        let is_new_here = stored.get(key.as_str()).is_none_or(|p| p.node != *node);
        if !is_new_here || c.adopt {
            continue;
        }
        if let Some((n, status)) = snap.nodes.iter().find(|(n, _)| n.name == *node) {
            if *status == NodeStatus::Cordoned || n.cordoned {
                diags.push(diag(
                    file,
                    &fleet,
                    format!("containers.{key}.node"),
                    format!(
                    "node {node} is cordoned; uncordon it or choose another node (or omit node)"
                ),
                ));
            }
            if let Some(ds) = &c.datastore_id {
                if let Some(s) = n.inventory.storages.iter().find(|s| s.id == *ds) {
                    let need = scheduler::disk_need_gib(c);
                    let reserved = reserved_gib
                        .get(&(node.as_str(), ds.as_str()))
                        .copied()
                        .unwrap_or(0);
                    let free = (s.avail_bytes >> 30).saturating_sub(reserved);
                    if free < need {
                        let held = if reserved > 0 {
                            format!(
                                " ({reserved} GiB of it reserved for containers scheduled there but not yet created)"
                            )
                        } else {
                            String::new()
                        };
                        diags.push(diag(
                            file,
                            &fleet,
                            format!("containers.{key}.disk_size"),
                            format!(
                                "datastore {ds} on node {node} has {free} GiB free{held}, {need} GiB needed"
                            ),
                        ));
                    }
                }
            }
        }
    }
    if !diags.is_empty() {
        return Err(diags);
    }
    // vm_ids: never one that is desired anywhere, reported by any agent, or given explicitly in this file.
    let mut taken: BTreeSet<u32> = snap_others.desired.iter().map(|d| d.vm_id).collect();
    taken.extend(
        snap.observed
            .iter()
            .filter(|o| {
                o.managed
                    .as_ref()
                    .is_none_or(|m| m.fleet != name || !fleet.containers.contains_key(&m.name))
            })
            .map(|o| o.vm_id),
    );
    taken.extend(fleet.containers.values().filter_map(|c| c.vm_id));
    // A container name created before (and destroyed since) gets its vm_id back when it is still free.
    for c in fleet.containers.values_mut().filter(|c| c.vm_id.is_none()) {
        let again = snap
            .allocations
            .iter()
            .find(|a| a.fleet == name && a.name == c.name)
            .and_then(|a| a.vm_id)
            .filter(|id| (range.first..=range.last).contains(id) && !taken.contains(id));
        if let Some(id) = again {
            taken.insert(id);
            c.vm_id = Some(id);
        }
    }
    let mut list: Vec<pxfleet_spec::Container> = fleet.containers.values().cloned().collect();
    if let Err(e) = scheduler::allocate_vm_ids(&mut list, range, &mut taken) {
        return Err(vec![diag(file, &fleet, "containers".into(), e.to_string())]);
    }
    let mut candidates: Vec<Candidate> = snap
        .nodes
        .iter()
        .map(|(n, status)| {
            let placed = list
                .iter()
                .filter(|c| c.node.as_deref() == Some(n.name.as_str()));
            Candidate::from_node(n, *status, placed)
        })
        .collect();
    candidates.sort_by(|a, b| a.name.cmp(&b.name));
    // Containers scheduled on a node (by any fleet, in any submit, this one included) that the node does not
    // report yet are not in its free memory: reserve their room so quick submits do not count on it twice.
    let mine = list
        .iter()
        .filter_map(|c| Some((c.node.as_deref()?, c.vm_id?, c)))
        .filter(|(n, v, _)| !seen.contains(&(*n, *v)));
    for (node, _, c) in unobserved(&seen, &snap_others.desired).chain(mine) {
        if let Some(cand) = candidates.iter_mut().find(|x| x.name == node) {
            cand.reserve(c);
        }
    }
    if let Err(e) = scheduler::place(&mut list, &mut candidates) {
        let path = match &e {
            scheduler::ScheduleError::NoNode { container, .. }
            | scheduler::ScheduleError::NoRoom { container, .. } => {
                format!("containers.{container}")
            }
            _ => "containers".into(),
        };
        return Err(vec![diag(file, &fleet, path, e.to_string())]);
    }
    assign_macs(&name, &mut list, snap).map_err(|e| {
        let path = match &e {
            scheduler::ScheduleError::MacsExhausted {
                container, index, ..
            } => format!("containers.{container}.{}mac_address", iface_prefix(*index)),
            _ => "containers".into(),
        };
        vec![diag(file, &fleet, path, e.to_string())]
    })?;
    for c in list {
        fleet.containers.insert(c.name.clone(), c);
    }
    // Plan against what was applied and what is observed.
    let applied_fleet: Option<Fleet> = snap
        .head
        .as_ref()
        .and_then(|r| serde_json::from_value::<Fleet>(r.spec.clone()).ok())
        .map(without_passwords);
    let mut observed = spec_observed(&name, snap);
    observed.extend(crate::adopt::targets(&fleet, snap));
    let plan = pxfleet_spec::plan::plan(
        &without_passwords(fleet.clone()),
        applied_fleet.as_ref(),
        &observed,
    )
    .map_err(|e| {
        e.problems
            .iter()
            .map(|p| diag(file, &fleet, problem_path(p), p.to_string()))
            .collect::<Vec<_>>()
    })?;
    let desired = fleet
        .containers
        .values()
        .map(|c| DesiredContainer {
            fleet: name.clone(),
            name: c.name.clone(),
            node: c.node.clone().unwrap_or_default(),
            vm_id: c.vm_id.unwrap_or_default(),
            template: fleet
                .templates
                .get(&c.template)
                .cloned()
                .unwrap_or_else(|| pxfleet_spec::Template {
                    source: pxfleet_spec::TemplateSource::Pveam {
                        appliance: c.template.clone(),
                    },
                    storage: pxfleet_spec::DEFAULT_TEMPLATE_STORAGE.into(),
                    seed: Default::default(),
                }),
            container: pxfleet_spec::Container {
                password: None,
                ..c.clone()
            },
            revision,
            node_pinned: pinned.contains(&c.name),
        })
        .collect();
    Ok(Prepared {
        fleet,
        plan,
        desired,
    })
}

/// The path prefix of interface `index` in diagnostics (`extra_interfaces.0.` for net1, empty for net0).
fn iface_prefix(index: usize) -> String {
    if index == 0 {
        String::new()
    } else {
        format!("extra_interfaces.{}.", index - 1)
    }
}

/// The MACs a node reports for a container: interface index (the N of `netN`) -> MAC, from its configuration,
/// or from the raw `netN` lines (`hwaddr=`) of an observation without one.
pub fn observed_macs(o: &ObservedContainer) -> Vec<(usize, pxfleet_spec::MacAddr)> {
    if let Some(config) = &o.config {
        return config
            .interfaces
            .iter()
            .filter_map(|i| Some((i.slot as usize, i.config.mac_address?)))
            .collect();
    }
    o.raw_config
        .iter()
        .filter_map(|(k, v)| {
            let slot = k.strip_prefix("net")?.parse::<usize>().ok()?;
            let mac = v
                .split(',')
                .find_map(|kv| kv.strip_prefix("hwaddr="))?
                .parse()
                .ok()?;
            Some((slot, mac))
        })
        .collect()
}

/// Allocates the MACs of `list`'s interfaces that the file leaves open (see [`scheduler::allocate_macs`]), never
/// one that any agent reports for another container, that another fleet's containers have, or that is
/// allocated to any other container name (destroyed ones included).
fn assign_macs(
    fleet: &str,
    list: &mut [pxfleet_spec::Container],
    snap: &Snapshot,
) -> Result<(), scheduler::ScheduleError> {
    use scheduler::MacHolder;
    let mine = |f: &str, n: &str| {
        if f == fleet && list.iter().any(|c| c.name == n) {
            MacHolder::Container(n.to_string())
        } else {
            MacHolder::Other
        }
    };
    let mut held: BTreeMap<pxfleet_spec::MacAddr, MacHolder> = BTreeMap::new();
    let mut hold = |mac, holder: MacHolder| {
        // `Other` wins: a MAC something else holds is never free for a container of this fleet.
        let e = held.entry(mac).or_insert_with(|| holder.clone());
        if *e != holder {
            *e = MacHolder::Other;
        }
    };
    let mut observed = BTreeMap::new();
    for o in &snap.observed {
        let holder = match &o.managed {
            Some(m) => mine(&m.fleet, &m.name),
            None => MacHolder::Other,
        };
        for (i, mac) in observed_macs(o) {
            if let MacHolder::Container(n) = &holder {
                observed.insert((n.clone(), i), mac);
            }
            hold(mac, holder.clone());
        }
    }
    for d in &snap.desired {
        for mac in d.container.interfaces.iter().filter_map(|i| i.mac_address) {
            hold(mac, mine(&d.fleet, &d.name));
        }
    }
    let mut remembered = BTreeMap::new();
    for a in &snap.allocations {
        let holder = if a.fleet == fleet {
            MacHolder::Container(a.name.clone())
        } else {
            MacHolder::Other
        };
        for (i, mac) in &a.macs {
            if a.fleet == fleet {
                remembered.insert((a.name.clone(), *i), *mac);
            }
            hold(*mac, holder.clone());
        }
    }
    for c in list.iter() {
        for mac in c.interfaces.iter().filter_map(|i| i.mac_address) {
            hold(mac, MacHolder::Container(c.name.clone()));
        }
    }
    scheduler::allocate_macs(fleet, list, &observed, &remembered, &mut held)
}

/// Where every observed container is: `(node, vm_id)`.
fn observed_places(snap: &Snapshot) -> HashSet<(&str, u32)> {
    snap.observed
        .iter()
        .map(|o| (o.node.as_str(), o.vm_id))
        .collect()
}

/// Desired containers of `desired` that no node reports at their place (`seen`) yet: `(node, vm_id, container)`.
fn unobserved<'a>(
    seen: &'a HashSet<(&'a str, u32)>,
    desired: &'a [DesiredContainer],
) -> impl Iterator<Item = (&'a str, u32, &'a pxfleet_spec::Container)> + 'a {
    desired
        .iter()
        .filter(|d| !seen.contains(&(d.node.as_str(), d.vm_id)))
        .map(|d| (d.node.as_str(), d.vm_id, &d.container))
}

fn problem_path(p: &pxfleet_spec::plan::PlanProblem) -> String {
    use pxfleet_spec::plan::PlanProblem::*;
    match p {
        Shrink {
            container, field, ..
        } => format!("containers.{container}.{field}"),
        Protected { container, .. } => format!("containers.{container}.protection"),
        Adopt { container, .. } => format!("containers.{container}.adopt"),
        VmIdInUse { container, .. } => format!("containers.{container}.vm_id"),
    }
}

fn without_passwords(mut f: Fleet) -> Fleet {
    for c in f.containers.values_mut() {
        c.password = None;
    }
    f
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::node;

    const HEAD: &str = "fleet: dev\ntemplates: {deb: {pveam: debian-12-standard_12.7-1_amd64.tar.zst}}\n\
                        defaults: {template: deb, datastore_id: local-lvm, memory: 512}\ncontainers:\n";

    fn fleet(body: &str) -> Fleet {
        pxfleet_spec::parse_fleet(
            "fleet.yaml",
            &format!("{HEAD}{body}"),
            &pxfleet_spec::NoFiles,
        )
        .unwrap()
    }

    fn snap(nodes: &[&str]) -> Snapshot {
        Snapshot {
            nodes: nodes
                .iter()
                .map(|n| (node(n, 8000), NodeStatus::Ready))
                .collect(),
            ..Snapshot::default()
        }
    }

    fn range() -> VmIdRange {
        VmIdRange {
            first: 1000,
            last: 2000,
        }
    }

    #[test]
    fn six_unplaced_spread_over_three_nodes_and_get_ids() {
        let body: String = (1..=6).map(|i| format!("  c{i}: {{}}\n")).collect();
        let p = prepare(
            "fleet.yaml",
            fleet(&body),
            &snap(&["a", "b", "c"]),
            range(),
            1,
        )
        .unwrap();
        let mut per_node: BTreeMap<&str, usize> = BTreeMap::new();
        for d in &p.desired {
            *per_node.entry(d.node.as_str()).or_default() += 1;
        }
        assert_eq!(per_node, [("a", 2), ("b", 2), ("c", 2)].into());
        let ids: BTreeSet<u32> = p.desired.iter().map(|d| d.vm_id).collect();
        assert_eq!(ids, (1000..1006).collect());
        assert_eq!(p.plan.summary.create, 6);
    }

    #[test]
    fn collisions_with_unmanaged_containers_are_refused() {
        let mut s = snap(&["a"]);
        s.observed.push(ObservedContainer {
            node: "a".into(),
            vm_id: 1000,
            hostname: "handmade".into(),
            static_addresses: vec!["10.0.0.5".into()],
            ..ObservedContainer::default()
        });
        let f = fleet("  web: {vm_id: 1000, ip_address: 10.0.0.5/24, gateway: 10.0.0.1}\n");
        let errs = prepare("fleet.yaml", f, &s, range(), 1).unwrap_err();
        let text: Vec<String> = errs
            .iter()
            .map(|d| format!("{}: {}", d.path, d.message))
            .collect();
        assert!(
            text.iter()
                .any(|t| t.starts_with("containers.web.vm_id") && t.contains("1000")),
            "{text:?}"
        );
        assert!(text.iter().any(|t| t.contains("10.0.0.5")), "{text:?}");
        assert!(errs.iter().all(|d| d.line > 0), "{errs:?}");
        // without the explicit id, the allocator skips the taken one
        let f = fleet("  web: {}\n");
        let p = prepare("fleet.yaml", f, &s, range(), 1).unwrap();
        assert_eq!(p.desired[0].vm_id, 1001);
    }

    #[test]
    fn cordoned_unknown_and_full_nodes_are_refused() {
        let mut s = snap(&["a", "b"]);
        s.nodes[0].1 = NodeStatus::Cordoned;
        s.nodes[0].0.cordoned = true;
        let errs = prepare("fleet.yaml", fleet("  web: {node: a}\n"), &s, range(), 1).unwrap_err();
        assert!(errs[0].message.contains("node a is cordoned"), "{errs:?}");
        let errs = prepare("fleet.yaml", fleet("  web: {node: zz}\n"), &s, range(), 1).unwrap_err();
        assert!(errs[0].path.contains("node"), "{errs:?}");
        // unplaced: the cordoned node is skipped
        let p = prepare("fleet.yaml", fleet("  web: {}\n"), &s, range(), 1).unwrap();
        assert_eq!(p.desired[0].node, "b");
        let errs = prepare(
            "fleet.yaml",
            fleet("  web: {node: b, disk_size: 500}\n"),
            &s,
            range(),
            1,
        )
        .unwrap_err();
        assert!(
            errs[0].message.contains("100 GiB free, 500 GiB needed"),
            "{errs:?}"
        );
    }

    #[test]
    fn the_plan_shows_drift_reported_by_the_node_as_repair() {
        let f = fleet("  web: {node: a, vm_id: 1000, tags: [Web, db]}\n");
        let s0 = snap(&["a"]);
        let p = prepare("fleet.yaml", f.clone(), &s0, range(), 1).unwrap();
        let d = &p.desired[0];
        let mut s = snap(&["a"]);
        s.desired = p.desired.clone();
        s.head = Some(crate::model::Revision {
            fleet: "dev".into(),
            revision: 1,
            author: "t".into(),
            created_ms: 0,
            spec: serde_json::to_value(&p.fleet).unwrap(),
            summary: String::new(),
            file_name: String::new(),
            source_sha256: String::new(),
        });
        s.applied.push(crate::model::AppliedContainer {
            fleet: "dev".into(),
            name: "web".into(),
            node: "a".into(),
            vm_id: 1000,
            container: d.container.clone(),
            template: d.template.clone(),
        });
        let report = |tags: &[&str], memory: u64| {
            let mut spec = convert::container_spec("dev", &d.container, 1000, &d.template, None);
            spec.tags = tags.iter().map(|t| t.to_string()).collect();
            spec.memory_mib = memory;
            spec.description = "managed-by: pxfleet fleet=dev name=web\n".into();
            spec.interfaces[0].mac = "bc:24:11:12:34:56".into();
            convert::observed_from_pb(
                "a",
                &pxfleet_proto::v1::ObservedContainer {
                    vm_id: 1000,
                    power: pxfleet_proto::v1::PowerState::Running as i32,
                    managed: true,
                    config: Some(spec),
                    ..Default::default()
                },
            )
        };
        // as PVE stores it (tags sorted, lower case): nothing to do
        s.observed = vec![report(&["db", "web"], 512)];
        let p = prepare("fleet.yaml", f.clone(), &s, range(), 2).unwrap();
        assert!(p.plan.is_empty(), "{:?}", p.plan.actions);
        // changed on the node: a repair naming the fields
        s.observed = vec![report(&["db"], 1024)];
        let p = prepare("fleet.yaml", f, &s, range(), 2).unwrap();
        assert_eq!(p.plan.summary.repair, 1, "{:?}", p.plan.actions);
        let pxfleet_spec::plan::ActionKind::Repair { drift, .. } = &p.plan.actions[0].kind else {
            panic!("not a repair: {:?}", p.plan.actions)
        };
        let fields: Vec<&str> = drift.iter().map(|c| c.field.as_str()).collect();
        assert_eq!(fields, ["memory", "tags"]);
    }

    /// Stores `p` as the next revision of its fleet, like a submit does.
    fn store_submit(store: &Store, p: &Prepared) {
        let rev = store
            .fleet(&p.fleet.name)
            .unwrap()
            .map(|f| f.revision)
            .unwrap_or(0);
        store
            .submit(&crate::store::SubmitTx {
                fleet: p.fleet.name.clone(),
                expected_revision: Some(rev),
                author: "test".into(),
                time_ms: 0,
                spec: serde_json::to_value(&p.fleet).unwrap(),
                summary: String::new(),
                desired: p.desired.clone(),
                secrets: BTreeMap::new(),
                audit_action: "submit".into(),
                file_name: String::new(),
                source_sha256: String::new(),
                retry: Vec::new(),
            })
            .unwrap();
    }

    fn other_fleet(name: &str, body: &str) -> Fleet {
        pxfleet_spec::parse_fleet(
            "fleet.yaml",
            &format!(
                "{}{body}",
                HEAD.replace("fleet: dev", &format!("fleet: {name}"))
            ),
            &pxfleet_spec::NoFiles,
        )
        .unwrap()
    }

    #[test]
    fn back_to_back_submits_do_not_count_on_the_same_free_memory() {
        let store = Store::temporary().unwrap();
        store
            .update_node("small", |n| *n = node("small", 1500))
            .unwrap();
        let take = |fleet: &str| Snapshot::take(&store, fleet, |_| NodeStatus::Ready).unwrap();
        let submit = |f: Fleet| {
            let name = f.name.clone();
            let s = take(&name);
            let p = prepare("fleet.yaml", f, &s, range(), s.revision + 1)?;
            store_submit(&store, &p);
            Ok::<_, Vec<Diagnostic>>(p)
        };
        let first = submit(other_fleet("one", "  web: {memory: 1024}\n")).unwrap();
        assert_eq!(first.desired[0].node, "small");
        // nothing created yet; the node still says 1500 MiB free, but 1024 of it is promised
        let errs = submit(other_fleet("two", "  app: {memory: 1024}\n")).unwrap_err();
        let msg = &errs[0].message;
        assert!(
            msg.starts_with("no node has room for container app: it needs 1024 MiB memory"),
            "{msg}"
        );
        assert!(
            msg.contains("small, has 476 MiB free after 1024 MiB reserved"),
            "{msg}"
        );
        assert_eq!(errs[0].path, "containers.app");
        // a second node: the next submit goes there
        let mut big = node("big", 1200);
        big.name = "big".into();
        store.update_node("big", |n| *n = big.clone()).unwrap();
        let second = submit(other_fleet("two", "  app: {memory: 1024}\n")).unwrap();
        assert_eq!(second.desired[0].node, "big");
        // once the node reports the first container, its memory is in the node's own free figure instead
        let d = &first.desired[0];
        store
            .set_observed(
                "small",
                d.vm_id,
                Some(&ObservedContainer {
                    node: "small".into(),
                    vm_id: d.vm_id,
                    managed: Some(crate::model::ManagedBy {
                        fleet: "one".into(),
                        name: "web".into(),
                    }),
                    ..ObservedContainer::default()
                }),
            )
            .unwrap();
        let p = submit(other_fleet("three", "  db: {memory: 1024}\n")).unwrap();
        assert_eq!(p.desired[0].node, "small");
        // the same fleet resubmitted does not reserve against itself
        let again = submit(other_fleet("one", "  web: {memory: 1024}\n")).unwrap();
        assert_eq!(again.desired[0].node, "small");
    }

    #[test]
    fn placement_and_ids_are_stable_across_submits() {
        let s0 = snap(&["a", "b"]);
        let p = prepare(
            "fleet.yaml",
            fleet("  web: {}\n  db: {}\n"),
            &s0,
            range(),
            1,
        )
        .unwrap();
        let mut s1 = snap(&["a", "b", "c"]);
        s1.desired = p.desired.clone();
        let p2 = prepare(
            "fleet.yaml",
            fleet("  web: {}\n  db: {}\n"),
            &s1,
            range(),
            2,
        )
        .unwrap();
        let placed = |p: &Prepared| {
            p.desired
                .iter()
                .map(|d| (d.name.clone(), d.node.clone(), d.vm_id))
                .collect::<Vec<_>>()
        };
        assert_eq!(placed(&p), placed(&p2));
    }

    #[test]
    fn a_move_keeps_its_storage_where_the_target_has_it_else_the_plan_replaces_and_says_why() {
        let head =
            "fleet: dev\ntemplates: {deb: {pveam: debian-12-standard_12.7-1_amd64.tar.zst}}\n\
                    defaults: {template: deb, memory: 512}\ncontainers:\n";
        let fleet = |body: &str| {
            pxfleet_spec::parse_fleet(
                "fleet.yaml",
                &format!("{head}{body}"),
                &pxfleet_spec::NoFiles,
            )
            .unwrap()
        };
        let mut s = snap(&["a", "b", "c"]);
        // c has no local-lvm: only another rootdir storage
        for s in s.nodes[2].0.inventory.storages.iter_mut() {
            if s.id == "local-lvm" {
                s.id = "other-ds".into();
            }
        }
        // b has local-lvm and a roomier rootdir storage the scheduler would pick for a new container
        let mut big = s.nodes[1].0.inventory.storages[0].clone();
        big.id = "big".into();
        big.avail_bytes = 900 << 30;
        s.nodes[1].0.inventory.storages.push(big);
        let p = prepare("fleet.yaml", fleet("  web: {node: a}\n"), &s, range(), 1).unwrap();
        let d = p.desired[0].clone();
        assert_eq!(d.container.datastore_id.as_deref(), Some("local-lvm"));
        s.desired = p.desired.clone();
        let cfg = pxfleet_spec::observed::ObservedContainer::from_desired(
            "dev",
            &d.container,
            d.vm_id,
            "a",
            pxfleet_spec::observed::PowerState::Running,
            "local-lvm",
            |_| pxfleet_spec::MacAddr([0xbc, 0x24, 0x11, 0, 0, 1]),
        )
        .config;
        s.observed.push(ObservedContainer {
            node: "a".into(),
            vm_id: d.vm_id,
            hostname: "web".into(),
            running: true,
            managed: Some(crate::model::ManagedBy {
                fleet: "dev".into(),
                name: "web".into(),
            }),
            config: Some(cfg),
            ..ObservedContainer::default()
        });
        let verbs = |p: &Prepared| {
            p.plan
                .actions
                .iter()
                .map(|a| a.kind.verb())
                .collect::<Vec<_>>()
        };
        // b has local-lvm: a move (pct migrate).
        let to_b = prepare("fleet.yaml", fleet("  web: {node: b}\n"), &s, range(), 2).unwrap();
        assert_eq!(verbs(&to_b), ["move"]);
        // c has not: the plan replaces it, naming the datastore that cannot follow.
        let to_c = prepare("fleet.yaml", fleet("  web: {node: c}\n"), &s, range(), 2).unwrap();
        assert_eq!(verbs(&to_c), ["replace"]);
        let pxfleet_spec::plan::ActionKind::Replace { reasons, .. } = &to_c.plan.actions[0].kind
        else {
            unreachable!()
        };
        assert_eq!(reasons[0].field, "datastore_id");
        assert_eq!(reasons[0].to, Some(serde_json::json!("other-ds")));
    }

    fn macs(p: &Prepared) -> BTreeMap<String, Vec<Option<pxfleet_spec::MacAddr>>> {
        p.desired
            .iter()
            .map(|d| {
                let m = d
                    .container
                    .interfaces
                    .iter()
                    .map(|i| i.mac_address)
                    .collect();
                (d.name.clone(), m)
            })
            .collect()
    }

    #[test]
    fn macs_are_allocated_in_pves_prefix_shown_in_the_plan_and_kept_across_destroy() {
        let store = Store::temporary().unwrap();
        store.update_node("a", |n| *n = node("a", 8000)).unwrap();
        let take = || Snapshot::take(&store, "dev", |_| NodeStatus::Ready).unwrap();
        let body = "  web: {extra_interfaces: [{bridge: vmbr0, ip_address: dhcp}]}
  db: {}
";
        let p = prepare("fleet.yaml", fleet(body), &take(), range(), 1).unwrap();
        let m = macs(&p);
        let all: Vec<pxfleet_spec::MacAddr> = m.values().flatten().map(|m| m.unwrap()).collect();
        assert_eq!(all.len(), 3, "{m:?}");
        assert!(all
            .iter()
            .all(|m| m.0[..3] == [0xBC, 0x24, 0x11] && m.is_unicast()));
        assert_eq!(all.iter().collect::<BTreeSet<_>>().len(), 3, "{all:?}");
        // the plan shows the MAC, not "known after apply"
        let text = pxfleet_spec::render::json::render(&p.plan);
        assert!(text.contains(&m["web"][1].unwrap().to_string()), "{text}");
        // a plan and the submit after it agree
        let again = prepare("fleet.yaml", fleet(body), &take(), range(), 1).unwrap();
        assert_eq!(macs(&again), m);
        store_submit(&store, &p);
        let ids: BTreeMap<String, u32> = p
            .desired
            .iter()
            .map(|d| (d.name.clone(), d.vm_id))
            .collect();
        assert_eq!(ids, [("db".into(), 1000), ("web".into(), 1001)].into());
        // destroy: the fleet is empty, its desired containers are gone
        let mut empty = fleet(body);
        empty.containers.clear();
        let gone = prepare("(stored spec)", empty, &take(), range(), 2).unwrap();
        assert!(gone.desired.is_empty());
        store_submit(&store, &gone);
        assert!(take().desired.is_empty());
        // meanwhile another fleet takes the lowest free id, db's
        let other = prepare(
            "fleet.yaml",
            other_fleet("other", "  x: {}\n"),
            &Snapshot::take(&store, "other", |_| NodeStatus::Ready).unwrap(),
            range(),
            1,
        )
        .unwrap();
        store_submit(&store, &other);
        assert_eq!(other.desired[0].vm_id, 1000);
        assert!(!macs(&other)
            .values()
            .flatten()
            .any(|x| all.contains(&x.unwrap())));
        // recreate: the same MACs; web's vm_id back, db a new one since its old one is taken
        let back = prepare("fleet.yaml", fleet(body), &take(), range(), 3).unwrap();
        assert_eq!(macs(&back), m);
        let ids: BTreeMap<String, u32> = back
            .desired
            .iter()
            .map(|d| (d.name.clone(), d.vm_id))
            .collect();
        assert_eq!(ids, [("db".into(), 1002), ("web".into(), 1001)].into());
    }

    #[test]
    fn macs_avoid_what_agents_report_and_existing_containers_keep_theirs() {
        let first = scheduler::candidate_mac("dev", "web", 0, 0);
        let mut s = snap(&["a"]);
        s.observed.push(ObservedContainer {
            node: "a".into(),
            vm_id: 500,
            hostname: "handmade".into(),
            raw_config: [(
                "net0".to_string(),
                format!("name=eth0,bridge=vmbr0,hwaddr={first},ip=dhcp"),
            )]
            .into(),
            ..ObservedContainer::default()
        });
        let p = prepare(
            "fleet.yaml",
            fleet(
                "  web: {}
",
            ),
            &s,
            range(),
            1,
        )
        .unwrap();
        let mac = p.desired[0].container.interfaces[0].mac_address.unwrap();
        assert_ne!(mac, first);
        assert_eq!(mac, scheduler::candidate_mac("dev", "web", 0, 1));
        // a container that exists (created before MACs were allocated) keeps the MAC its node reports
        let own: pxfleet_spec::MacAddr = "BC:24:11:0A:0B:0C".parse().unwrap();
        s.observed.push(ObservedContainer {
            node: "a".into(),
            vm_id: 1000,
            hostname: "web".into(),
            managed: Some(crate::model::ManagedBy {
                fleet: "dev".into(),
                name: "web".into(),
            }),
            raw_config: [(
                "net0".to_string(),
                format!("name=eth0,bridge=vmbr0,hwaddr={own},ip=dhcp"),
            )]
            .into(),
            ..ObservedContainer::default()
        });
        let p = prepare(
            "fleet.yaml",
            fleet(
                "  web: {vm_id: 1000}
",
            ),
            &s,
            range(),
            1,
        )
        .unwrap();
        assert_eq!(p.desired[0].container.interfaces[0].mac_address, Some(own));
    }

    #[test]
    fn mac_collisions_are_rerolled_and_an_explicit_mac_is_never_given_twice() {
        let a0 = scheduler::candidate_mac("dev", "a", 0, 0);
        // b pins a's first candidate; a must not get it
        let body = format!("  a: {{}}\n  b: {{mac_address: \"{a0}\"}}\n");
        let p = prepare("fleet.yaml", fleet(&body), &snap(&["a"]), range(), 1).unwrap();
        let m = macs(&p);
        assert_eq!(m["b"][0], Some(a0));
        assert_eq!(m["a"][0], Some(scheduler::candidate_mac("dev", "a", 0, 1)));
        // another fleet's container holding it counts too
        let mut s = snap(&["a"]);
        let theirs = format!("  z: {{mac_address: \"{a0}\"}}\n");
        let o = prepare("fleet.yaml", other_fleet("o", &theirs), &s, range(), 1).unwrap();
        s.desired = o.desired.clone();
        let p = prepare("fleet.yaml", fleet("  a: {}\n"), &s, range(), 1).unwrap();
        assert_eq!(
            macs(&p)["a"][0],
            Some(scheduler::candidate_mac("dev", "a", 0, 1))
        );
    }

    #[test]
    fn an_adopted_mac_is_remembered_across_destroy() {
        let store = Store::temporary().unwrap();
        store.update_node("a", |n| *n = node("a", 8000)).unwrap();
        let take = || Snapshot::take(&store, "dev", |_| NodeStatus::Ready).unwrap();
        // web was created before MACs were allocated: PVE gave it one
        let own: pxfleet_spec::MacAddr = "BC:24:11:0A:0B:0C".parse().unwrap();
        store
            .set_observed(
                "a",
                1000,
                Some(&ObservedContainer {
                    node: "a".into(),
                    vm_id: 1000,
                    hostname: "web".into(),
                    managed: Some(crate::model::ManagedBy {
                        fleet: "dev".into(),
                        name: "web".into(),
                    }),
                    raw_config: [("net0".to_string(), format!("name=eth0,hwaddr={own}"))].into(),
                    ..ObservedContainer::default()
                }),
            )
            .unwrap();
        let p = prepare("fleet.yaml", fleet("  web: {}\n"), &take(), range(), 1).unwrap();
        assert_eq!(macs(&p)["web"], [Some(own)]);
        store_submit(&store, &p);
        // destroyed: gone from desired and from the node
        let mut empty = fleet("  web: {}\n");
        empty.containers.clear();
        let gone = prepare("(stored spec)", empty, &take(), range(), 2).unwrap();
        store_submit(&store, &gone);
        store.set_observed("a", 1000, None).unwrap();
        let back = prepare("fleet.yaml", fleet("  web: {}\n"), &take(), range(), 3).unwrap();
        assert_eq!(macs(&back)["web"], [Some(own)]);
        assert_eq!(back.desired[0].vm_id, 1000);
    }
}
