//! `pxctl node drain NODE`: every container placed on NODE moves off it. The node is cordoned first (nothing new
//! lands there), then, fleet by fleet, the scheduler places the containers the file leaves unplaced on the other
//! nodes exactly as a submit would (constraints, anti-affinity, room, the container's datastore). Their desired
//! node becomes the target; the reconciler's plan for each is then a move (`pct migrate`, `--restart` when it
//! runs), and a later submit keeps the new node (stable placement). Containers the file pins to NODE (`node:`)
//! are not moved: the file would move them back; the drain names them. A drain never replaces: only nodes a
//! container can be migrated to (the drained node's cluster, every datastore of its rootfs and volume mount
//! points present) are offered to the scheduler for it; with none, it stays and the drain says why.

use std::collections::BTreeMap;

use pxfleet_spec::plan::why_not_migrate;
use pxfleet_spec::{Container, MountPoint};

use crate::model::{DesiredContainer, NodeStatus};
use crate::planning::{nodes_facts, Snapshot};
use crate::scheduler::{self, Candidate};

/// One container to move.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Move {
    pub fleet: String,
    pub name: String,
    pub vm_id: u32,
    pub to: String,
}

/// What draining a node does, or cannot do.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DrainPlan {
    pub moves: Vec<Move>,
    /// Containers left on the node, each with why (pinned by the file, or no node can take it).
    pub stuck: Vec<(String, String, String)>,
}

/// Plans the drain of `node` over `snap` (every fleet's desired containers).
pub fn plan(snap: &Snapshot, node: &str) -> DrainPlan {
    let mut by_fleet: BTreeMap<&str, Vec<&DesiredContainer>> = BTreeMap::new();
    for d in &snap.desired {
        by_fleet.entry(d.fleet.as_str()).or_default().push(d);
    }
    let mut out = DrainPlan::default();
    let facts = nodes_facts(snap.nodes.iter().map(|(n, _)| n));
    for (fleet, all) in by_fleet {
        let (here, rest): (Vec<&DesiredContainer>, Vec<&DesiredContainer>) =
            all.into_iter().partition(|d| d.node == node);
        let mut list: Vec<Container> = Vec::new();
        for d in here {
            if d.node_pinned {
                out.stuck.push((
                    fleet.to_string(),
                    d.name.clone(),
                    format!(
                        "the file pins it to {node} (`node: {node}`); change `node` in the file and submit"
                    ),
                ));
                continue;
            }
            let mut c = d.container.clone();
            c.node = None;
            c.vm_id = Some(d.vm_id);
            list.push(c);
        }
        if list.is_empty() {
            continue;
        }
        let mut candidates: Vec<Candidate> = snap
            .nodes
            .iter()
            .map(|(n, status)| {
                let status = if n.name == node {
                    NodeStatus::Cordoned
                } else {
                    *status
                };
                let placed = rest
                    .iter()
                    .filter(|d| d.node == n.name)
                    .map(|d| &d.container);
                Candidate::from_node(n, status, placed)
            })
            .collect();
        candidates.sort_by(|a, b| a.name.cmp(&b.name));
        // Place one by one, so one container that fits nowhere does not keep the others on the node.
        list.sort_by(|a, b| a.name.cmp(&b.name));
        for mut c in list {
            // Only nodes it can be migrated to: the scheduler sees them as the container's allowed nodes.
            let datastores: Vec<&str> = c
                .datastore_id
                .iter()
                .map(String::as_str)
                .chain(c.mount_points.iter().filter_map(MountPoint::datastore))
                .collect();
            let mut refused = Vec::new();
            let reachable: Vec<String> = candidates
                .iter()
                .map(|k| k.name.clone())
                .filter(|to| to != node)
                .filter(
                    |to| match why_not_migrate(&facts, node, to, datastores.iter().copied()) {
                        None => true,
                        Some(why) => {
                            refused.push(why);
                            false
                        }
                    },
                )
                .filter(|to| c.constraints.nodes.is_empty() || c.constraints.nodes.contains(to))
                .collect();
            if reachable.is_empty() {
                let why = if refused.is_empty() {
                    "no other node it may go to".to_owned()
                } else {
                    format!("no node it can be migrated to ({})", refused.join("; "))
                };
                out.stuck.push((fleet.to_string(), c.name, why));
                continue;
            }
            c.constraints.nodes = reachable;
            let mut one = [c];
            match scheduler::place(&mut one, &mut candidates) {
                Ok(()) => {
                    let [c] = one;
                    out.moves.push(Move {
                        fleet: fleet.to_string(),
                        name: c.name.clone(),
                        vm_id: c.vm_id.unwrap_or_default(),
                        to: c.node.unwrap_or_default(),
                    });
                }
                Err(e) => {
                    let [c] = one;
                    out.stuck.push((fleet.to_string(), c.name, e.to_string()));
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{container, node, template};

    fn desired(fleet: &str, name: &str, on: &str, vm_id: u32, pinned: bool) -> DesiredContainer {
        let mut c = container(name);
        c.node = Some(on.into());
        c.vm_id = Some(vm_id);
        DesiredContainer {
            fleet: fleet.into(),
            name: name.into(),
            node: on.into(),
            vm_id,
            container: c,
            template: template(),
            revision: 1,
            node_pinned: pinned,
        }
    }

    fn snap(desired: Vec<DesiredContainer>) -> Snapshot {
        Snapshot {
            nodes: ["n1", "n2", "n3"]
                .iter()
                .map(|n| (node(n, 8192), NodeStatus::Ready))
                .collect(),
            observed: vec![],
            desired,
            applied: vec![],
            allocations: vec![],
            revision: 1,
            head: None,
        }
    }

    #[test]
    fn unpinned_containers_leave_pinned_ones_are_named_and_anti_affinity_holds() {
        let mut a = desired("web", "a", "n1", 100, false);
        let mut b = desired("web", "b", "n2", 101, false);
        for c in [&mut a, &mut b] {
            c.container.labels = [("app".to_string(), "web".to_string())].into();
            c.container.constraints.anti_affinity = vec!["app".into()];
        }
        let pinned = desired("db", "p", "n1", 102, true);
        let other = desired("db", "q", "n3", 103, false);
        let p = plan(&snap(vec![a, b, pinned, other]), "n1");
        // a cannot share n2 with b (anti-affinity on app): n3.
        assert_eq!(
            p.moves,
            vec![Move {
                fleet: "web".into(),
                name: "a".into(),
                vm_id: 100,
                to: "n3".into()
            }]
        );
        assert_eq!(p.stuck.len(), 1);
        assert_eq!((p.stuck[0].0.as_str(), p.stuck[0].1.as_str()), ("db", "p"));
        assert!(p.stuck[0].2.contains("pins"), "{:?}", p.stuck);
    }

    #[test]
    fn a_container_no_node_can_take_stays_with_the_reason() {
        let mut a = desired("web", "a", "n1", 100, false);
        a.container.constraints.nodes = vec!["n1".into()];
        let p = plan(&snap(vec![a]), "n1");
        assert!(p.moves.is_empty());
        assert_eq!(p.stuck.len(), 1, "{p:?}");
    }

    #[test]
    fn a_drain_only_migrates_within_the_cluster_to_nodes_with_the_datastores() {
        let mut s = snap(vec![]);
        // n2 is in another cluster; n3 is in n1's but lacks the datastore `fast` of b's mount point.
        s.nodes[1].0.inventory.cluster_name = "other".into();
        let n1 = &mut s.nodes[0].0;
        let mut fast = n1.inventory.storages[0].clone();
        fast.id = "fast".into();
        n1.inventory.storages.push(fast);
        let a = desired("web", "a", "n1", 100, false);
        let mut b = desired("web", "b", "n1", 101, false);
        b.container.mount_points = vec![MountPoint::Volume {
            datastore_id: "fast".into(),
            size_gib: 2,
            path: "/data".into(),
            backup: false,
            read_only: false,
            flags: Default::default(),
        }];
        s.desired = vec![a, b];
        let p = plan(&s, "n1");
        let to: Vec<(&str, &str)> = p
            .moves
            .iter()
            .map(|m| (m.name.as_str(), m.to.as_str()))
            .collect();
        assert_eq!(to, vec![("a", "n3")], "{p:?}");
        assert_eq!(p.stuck.len(), 1, "{p:?}");
        assert_eq!(p.stuck[0].1, "b");
        assert!(
            p.stuck[0].2.contains("n2 is in cluster other, not lab")
                && p.stuck[0].2.contains("datastore fast is not on n3"),
            "{:?}",
            p.stuck
        );
    }
}
