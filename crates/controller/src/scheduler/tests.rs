//! Tests of the scheduler: vm_id and MAC allocation, placement, constraints, anti-affinity, room.

use super::*;
use crate::testutil::{container, node};

fn cands(specs: &[(&str, u64)]) -> Vec<Candidate> {
    specs
        .iter()
        .map(|(n, mem)| Candidate::from_node(&node(n, *mem), NodeStatus::Ready, []))
        .collect()
}

fn placed(cs: &[Container]) -> BTreeMap<String, String> {
    cs.iter()
        .map(|c| (c.name.clone(), c.node.clone().unwrap()))
        .collect()
}

#[test]
fn six_spread_over_three_nodes_two_each() {
    let mut cs: Vec<Container> = (1..=6).map(|i| container(&format!("c{i}"))).collect();
    let mut nodes = cands(&[("a", 8000), ("b", 8000), ("c", 8000)]);
    place(&mut cs, &mut nodes).unwrap();
    let mut per_node: BTreeMap<String, usize> = BTreeMap::new();
    for n in placed(&cs).values() {
        *per_node.entry(n.clone()).or_default() += 1;
    }
    assert_eq!(
        per_node,
        [("a".into(), 2), ("b".into(), 2), ("c".into(), 2)].into()
    );
}

#[test]
fn ties_go_to_most_free_memory_and_result_is_deterministic() {
    let mut cs = vec![container("x")];
    let mut nodes = cands(&[("a", 2000), ("b", 6000), ("c", 4000)]);
    place(&mut cs, &mut nodes).unwrap();
    assert_eq!(cs[0].node.as_deref(), Some("b"));
    // same input in another order, same answer
    let mut cs2 = vec![container("x")];
    let mut nodes2 = cands(&[("c", 4000), ("b", 6000), ("a", 2000)]);
    place(&mut cs2, &mut nodes2).unwrap();
    assert_eq!(cs2[0].node.as_deref(), Some("b"));
}

#[test]
fn spread_beats_free_memory() {
    let mut cs = vec![container("x")];
    let big = node("big", 9000);
    let small = node("small", 1000);
    let existing = container("other");
    let mut nodes = vec![
        Candidate::from_node(&big, NodeStatus::Ready, [&existing]),
        Candidate::from_node(&small, NodeStatus::Ready, []),
    ];
    place(&mut cs, &mut nodes).unwrap();
    assert_eq!(cs[0].node.as_deref(), Some("small"));
}

#[test]
fn explicit_node_is_kept() {
    let mut c = container("x");
    c.node = Some("a".into());
    let mut cs = vec![c];
    let mut nodes = cands(&[("b", 9000)]);
    place(&mut cs, &mut nodes).unwrap();
    assert_eq!(cs[0].node.as_deref(), Some("a"));
}

#[test]
fn filters_report_each_nodes_reason() {
    let mut c = container("x");
    c.memory = 4096;
    c.constraints.node_labels.insert("ssd".into(), "yes".into());
    let mut nodes = cands(&[("a", 8000), ("b", 1000)]);
    nodes[1].labels.insert("ssd".into(), "yes".into());
    let err = place(&mut [c.clone()], &mut nodes).unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("a: label ssd=yes not set"), "{msg}");
    assert!(
        msg.contains("b: 1000 MiB memory free, 4096 needed"),
        "{msg}"
    );

    let mut nodes = cands(&[("a", 8000), ("b", 8000), ("c", 8000), ("d", 8000)]);
    nodes[0].status = NodeStatus::Cordoned;
    nodes[1].status = NodeStatus::Down;
    nodes[2].bridges.clear();
    nodes[3].rootdir_free_gib.insert("local-lvm".into(), 2);
    let err = place(&mut [container("y")], &mut nodes)
        .unwrap_err()
        .to_string();
    assert!(err.contains("a: node is cordoned"), "{err}");
    assert!(err.contains("b: node is down"), "{err}");
    assert!(err.contains("c: no bridge vmbr0"), "{err}");
    assert!(
        err.contains("d: storage local-lvm has 2 GiB free, 4 needed"),
        "{err}"
    );
}

#[test]
fn reserved_room_counts_and_no_room_names_the_need_and_the_best_node() {
    let mut nodes = cands(&[("a", 2000), ("b", 1500)]);
    // a container scheduled on a but not created yet holds 1024 MiB there
    let mut pending = container("pending");
    pending.memory = 1024;
    nodes[0].reserve(&pending);
    assert_eq!(
        (nodes[0].memory_free_mib, nodes[0].reserved_mib),
        (976, 1024)
    );
    let mut c = container("x");
    c.memory = 1200;
    let mut cs = vec![c.clone()];
    place(&mut cs, &mut nodes).unwrap();
    assert_eq!(
        cs[0].node.as_deref(),
        Some("b"),
        "a's free memory is reserved"
    );
    // b is now charged too: nothing has room for another one
    let err = place(&mut [c], &mut nodes).unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, ScheduleError::NoRoom { .. }), "{err:?}");
    assert!(
        msg.starts_with(
            "no node has room for container x: it needs 1200 MiB memory and 4 GiB disk"
        ),
        "{msg}"
    );
    assert!(
        msg.contains(
            "the node with the most free memory, a, has 976 MiB free after 1024 MiB reserved"
        ),
        "{msg}"
    );
    assert!(msg.contains("b: 300 MiB memory free, 1200 needed"), "{msg}");
    // a refusal that more room would not fix is not "no room"
    let mut c = container("y");
    c.constraints.nodes = vec!["zz".into()];
    let err = place(&mut [c], &mut cands(&[("a", 8000)])).unwrap_err();
    assert!(matches!(err, ScheduleError::NoNode { .. }), "{err:?}");
}

#[test]
fn datastore_picked_when_absent_and_missing_one_refused() {
    let mut c = container("x");
    c.datastore_id = None;
    let mut cs = vec![c];
    let mut nodes = cands(&[("a", 8000)]);
    place(&mut cs, &mut nodes).unwrap();
    assert_eq!(cs[0].datastore_id.as_deref(), Some("local-lvm"));

    let mut c = container("y");
    c.datastore_id = Some("local".into()); // vztmpl only
    let err = place(&mut [c], &mut cands(&[("a", 8000)]))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("no storage local with rootdir content"),
        "{err}"
    );
}

#[test]
fn datastore_picked_for_a_container_pinned_to_a_node() {
    let mut c = container("x");
    c.datastore_id = None;
    c.node = Some("b".into());
    let mut cs = vec![c.clone()];
    let mut nodes = cands(&[("a", 8000), ("b", 8000)]);
    place(&mut cs, &mut nodes).unwrap();
    assert_eq!(cs[0].node.as_deref(), Some("b"));
    assert_eq!(cs[0].datastore_id.as_deref(), Some("local-lvm"));
    // too big for any rootdir storage of b: refused, naming b
    c.disk_size = 1 << 30;
    let err = place(&mut [c], &mut cands(&[("a", 8000), ("b", 8000)])).unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("b: no rootdir storage with"), "{msg}");
}

#[test]
fn anti_affinity_separates() {
    let mk = |n: &str| {
        let mut c = container(n);
        c.labels.insert("role".into(), "db".into());
        c.constraints.anti_affinity = vec!["role".into()];
        c
    };
    let mut cs = vec![mk("db1"), mk("db2"), mk("db3")];
    let err = place(&mut cs, &mut cands(&[("a", 8000), ("b", 8000)])).unwrap_err();
    assert!(err.to_string().contains("anti-affinity"), "{err}");
    let mut cs = vec![mk("db1"), mk("db2")];
    place(&mut cs, &mut cands(&[("a", 8000), ("b", 8000)])).unwrap();
    assert_ne!(cs[0].node, cs[1].node);
}

#[test]
fn allocator_skips_taken_and_observed_ids() {
    let range = VmIdRange {
        first: 1000,
        last: 1003,
    };
    let mut taken: BTreeSet<u32> = [1000, 1002].into();
    let mut cs = vec![container("b"), container("a")];
    cs[0].vm_id = None;
    allocate_vm_ids(&mut cs, range, &mut taken).unwrap();
    // a is allocated first (name order)
    assert_eq!(cs[1].vm_id, Some(1001));
    assert_eq!(cs[0].vm_id, Some(1003));
    let err = allocate_vm_ids(&mut [container("c")], range, &mut taken).unwrap_err();
    assert!(
        err.to_string()
            .contains("no free vm_id left in 1000..=1003"),
        "{err}"
    );
}

/// Placement as it was before candidates were ranked: every candidate asked for every container, the best one
/// kept. The ranked placement must choose exactly the same node and datastore, and fail the same way.
fn place_by_scan(
    containers: &mut [Container],
    candidates: &mut [Candidate],
) -> Result<(), ScheduleError> {
    let mut order: Vec<usize> = (0..containers.len()).collect();
    order.sort_by(|a, b| containers[*a].name.cmp(&containers[*b].name));
    for i in order {
        let c = &mut containers[i];
        if c.node.is_some() {
            continue;
        }
        let mut best: Option<(usize, String)> = None;
        for (j, cand) in candidates.iter().enumerate() {
            if let Ok(ds) = cand.refuse(c) {
                let better = best.as_ref().is_none_or(|(b, _)| {
                    let b = &candidates[*b];
                    (
                        cand.fleet_containers,
                        std::cmp::Reverse(cand.memory_free_mib),
                        &cand.name,
                    ) < (
                        b.fleet_containers,
                        std::cmp::Reverse(b.memory_free_mib),
                        &b.name,
                    )
                });
                if better {
                    best = Some((j, ds));
                }
            }
        }
        let Some((j, ds)) = best else {
            return Err(unplaceable(c, candidates));
        };
        c.datastore_id = Some(ds);
        let cand = &mut candidates[j];
        c.node = Some(cand.name.clone());
        cand.fleet_containers += 1;
        cand.fleet_labels.push(c.labels.clone());
        cand.charge(c);
    }
    Ok(())
}

mod ranked_equals_scan {
    use super::*;
    use proptest::prelude::*;

    /// Nodes (a name from a small set, so some repeat; free memory; cordoned or not; a `zone` label) and
    /// containers (memory, allowed nodes, a `zone` constraint, an anti-affinity label).
    #[allow(clippy::type_complexity)]
    fn world() -> impl Strategy<
        Value = (
            Vec<(u8, u64, bool, u8)>,
            Vec<(u64, Vec<u8>, Option<u8>, Option<u8>)>,
        ),
    > {
        (
            prop::collection::vec((0u8..8, 0u64..4000, any::<bool>(), 0u8..3), 0..8),
            prop::collection::vec(
                (
                    1u64..1500,
                    prop::collection::vec(0u8..8, 0..3),
                    prop::option::of(0u8..3),
                    prop::option::of(0u8..2),
                ),
                0..24,
            ),
        )
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]
        #[test]
        fn ranked_placement_chooses_what_a_full_scan_chooses((nodes, cs) in world()) {
            let cands: Vec<Candidate> = nodes
                .iter()
                .map(|(n, mem, cordoned, zone)| {
                    let mut rec = node(&format!("n{n}"), *mem);
                    rec.inventory.labels.insert("zone".into(), format!("z{zone}"));
                    let status = if *cordoned { NodeStatus::Cordoned } else { NodeStatus::Ready };
                    Candidate::from_node(&rec, status, [])
                })
                .collect();
            let containers: Vec<Container> = cs
                .iter()
                .enumerate()
                .map(|(i, (mem, only, zone, group))| {
                    let mut c = container(&format!("c{i:02}"));
                    c.node = None;
                    c.memory = *mem;
                    c.constraints.nodes = only.iter().map(|n| format!("n{n}")).collect();
                    if let Some(z) = zone {
                        c.constraints.node_labels.insert("zone".into(), format!("z{z}"));
                    }
                    if let Some(g) = group {
                        c.labels.insert("group".into(), format!("g{g}"));
                        c.constraints.anti_affinity = vec!["group".into()];
                    }
                    c
                })
                .collect();
            let (mut a, mut ca) = (containers.clone(), cands.clone());
            let (mut b, mut cb) = (containers, cands);
            let ranked = place(&mut a, &mut ca);
            let scanned = place_by_scan(&mut b, &mut cb);
            prop_assert_eq!(ranked, scanned);
            prop_assert_eq!(a, b);
        }
    }
}
