//! Tests of planning: placement, vm_id and MAC allocation, capacity refusals, stable placement, adoption.

use super::*;
use crate::grpc::convert;
use crate::model::{NodeStatus, ObservedContainer};
use crate::store::Store;
use crate::testutil::node;

const HEAD: &str = "fleet: dev\ntemplates: {deb: {pveam: debian-12-standard_12.7-1_amd64.tar.zst}}\n\
                        defaults: {template: deb, datastore_id: local-lvm, memory: 512}\ncontainers:\n";

/// Fleet `dev` of `HEAD` with `body` under `containers:`.
fn fleet(body: &str) -> Fleet {
    other_fleet("dev", body)
}

/// Fleet `name` of `HEAD` with `body` under `containers:`.
fn other_fleet(name: &str, body: &str) -> Fleet {
    fleet_of(&HEAD.replace("fleet: dev", &format!("fleet: {name}")), body)
}

/// The fleet of `head` (up to `containers:`) and `body`.
fn fleet_of(head: &str, body: &str) -> Fleet {
    pxfleet_spec::parse_fleet(
        "fleet.yaml",
        &format!("{head}{body}"),
        &pxfleet_spec::NoFiles,
    )
    .unwrap()
}

/// Prepares fleet `dev` with `body` (from fleet.yaml) against `s` as revision `revision`.
fn prepare_dev(body: &str, s: &Snapshot, revision: u64) -> Result<Prepared, Vec<Diagnostic>> {
    prepare("fleet.yaml", fleet(body), s, range(), revision)
}

/// A container its node reports as `fleet`'s `name`.
fn managed(node: &str, vm_id: u32, fleet: &str, name: &str) -> ObservedContainer {
    ObservedContainer {
        node: node.into(),
        vm_id,
        hostname: name.into(),
        managed: Some(crate::model::ManagedBy {
            fleet: fleet.into(),
            name: name.into(),
        }),
        ..ObservedContainer::default()
    }
}

/// A store with nodes in it, which submits go to like the controller's: snapshots are taken from it.
struct Stored {
    store: Store,
}

impl Stored {
    /// Nodes `(name, free memory MiB)`, all ready.
    fn with_nodes(nodes: &[(&str, u64)]) -> Stored {
        let store = Store::temporary().unwrap();
        for (name, memory) in nodes {
            store
                .update_node(name, |n| *n = node(name, *memory))
                .unwrap();
        }
        Stored { store }
    }

    fn take(&self, fleet: &str) -> Snapshot {
        Snapshot::take(&self.store, fleet, |_| NodeStatus::Ready).unwrap()
    }

    /// Prepares `f` against the store's world as its next revision.
    fn prepare(&self, f: Fleet) -> Result<Prepared, Vec<Diagnostic>> {
        let s = self.take(&f.name);
        prepare("fleet.yaml", f, &s, range(), s.revision + 1)
    }

    /// Stores `p` as the next revision of its fleet, like a submit does.
    fn submit(&self, p: &Prepared) {
        let rev = self
            .store
            .fleet(&p.fleet.name)
            .unwrap()
            .map(|f| f.revision)
            .unwrap_or(0);
        self.store
            .submit(&crate::store::SubmitTx {
                fleet: p.fleet.name.clone(),
                expected_revision: Some(rev),
                author: "test".into(),
                time_ms: 0,
                spec: crate::store::spec_json(&p.fleet).unwrap(),
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

    /// Destroys fleet `f` (its stored spec with no containers) as `pxctl destroy` does: its desired containers
    /// are gone.
    fn destroy(&self, mut f: Fleet) {
        f.containers.clear();
        let s = self.take(&f.name);
        let gone = prepare("(stored spec)", f, &s, range(), s.revision + 1).unwrap();
        assert!(gone.desired.is_empty());
        self.submit(&gone);
        assert!(self.take(&gone.fleet.name).desired.is_empty());
    }
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
    let p = prepare_dev(&body, &snap(&["a", "b", "c"]), 1).unwrap();
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
    let errs = prepare_dev(
        "  web: {vm_id: 1000, ip_address: 10.0.0.5/24, gateway: 10.0.0.1}\n",
        &s,
        1,
    )
    .unwrap_err();
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
    let p = prepare_dev("  web: {}\n", &s, 1).unwrap();
    assert_eq!(p.desired[0].vm_id, 1001);
}

#[test]
fn cordoned_unknown_and_full_nodes_are_refused() {
    let mut s = snap(&["a", "b"]);
    s.nodes[0].1 = NodeStatus::Cordoned;
    s.nodes[0].0.cordoned = true;
    let errs = prepare_dev("  web: {node: a}\n", &s, 1).unwrap_err();
    assert!(errs[0].message.contains("node a is cordoned"), "{errs:?}");
    let errs = prepare_dev("  web: {node: zz}\n", &s, 1).unwrap_err();
    assert!(errs[0].path.contains("node"), "{errs:?}");
    // unplaced: the cordoned node is skipped
    let p = prepare_dev("  web: {}\n", &s, 1).unwrap();
    assert_eq!(p.desired[0].node, "b");
    let errs = prepare_dev("  web: {node: b, disk_size: 500}\n", &s, 1).unwrap_err();
    assert!(
        errs[0].message.contains("100 GiB free, 500 GiB needed"),
        "{errs:?}"
    );
}

#[test]
fn the_plan_shows_drift_reported_by_the_node_as_repair() {
    let body = "  web: {node: a, vm_id: 1000, tags: [Web, db]}\n";
    let p = prepare_dev(body, &snap(&["a"]), 1).unwrap();
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
    let p = prepare_dev(body, &s, 2).unwrap();
    assert!(p.plan.is_empty(), "{:?}", p.plan.actions);
    // changed on the node: a repair naming the fields
    s.observed = vec![report(&["db"], 1024)];
    let p = prepare_dev(body, &s, 2).unwrap();
    assert_eq!(p.plan.summary.repair, 1, "{:?}", p.plan.actions);
    let pxfleet_spec::plan::ActionKind::Repair { drift, .. } = &p.plan.actions[0].kind else {
        panic!("not a repair: {:?}", p.plan.actions)
    };
    let fields: Vec<&str> = drift.iter().map(|c| c.field.as_str()).collect();
    assert_eq!(fields, ["memory", "tags"]);
}

#[test]
fn back_to_back_submits_do_not_count_on_the_same_free_memory() {
    let w = Stored::with_nodes(&[("small", 1500)]);
    let submit = |f: Fleet| {
        let p = w.prepare(f)?;
        w.submit(&p);
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
    w.store
        .update_node("big", |n| *n = node("big", 1200))
        .unwrap();
    let second = submit(other_fleet("two", "  app: {memory: 1024}\n")).unwrap();
    assert_eq!(second.desired[0].node, "big");
    // once the node reports the first container, its memory is in the node's own free figure instead
    let d = &first.desired[0];
    w.store
        .set_observed(
            "small",
            d.vm_id,
            Some(&managed("small", d.vm_id, "one", "web")),
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
    let body = "  web: {}\n  db: {}\n";
    let p = prepare_dev(body, &snap(&["a", "b"]), 1).unwrap();
    let mut s1 = snap(&["a", "b", "c"]);
    s1.desired = p.desired.clone();
    let p2 = prepare_dev(body, &s1, 2).unwrap();
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
    let head = "fleet: dev\ntemplates: {deb: {pveam: debian-12-standard_12.7-1_amd64.tar.zst}}\n\
                    defaults: {template: deb, memory: 512}\ncontainers:\n";
    let fleet = |body: &str| fleet_of(head, body);
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
        running: true,
        config: Some(cfg),
        ..managed("a", d.vm_id, "dev", "web")
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
    let pxfleet_spec::plan::ActionKind::Replace { reasons, .. } = &to_c.plan.actions[0].kind else {
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
    let w = Stored::with_nodes(&[("a", 8000)]);
    let body = "  web: {extra_interfaces: [{bridge: vmbr0, ip_address: dhcp}]}\n  db: {}\n";
    let p = w.prepare(fleet(body)).unwrap();
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
    let again = w.prepare(fleet(body)).unwrap();
    assert_eq!(macs(&again), m);
    w.submit(&p);
    let ids: BTreeMap<String, u32> = p
        .desired
        .iter()
        .map(|d| (d.name.clone(), d.vm_id))
        .collect();
    assert_eq!(ids, [("db".into(), 1000), ("web".into(), 1001)].into());
    // destroy: the fleet is empty, its desired containers are gone
    w.destroy(fleet(body));
    // meanwhile another fleet takes the lowest free id, db's
    let other = w.prepare(other_fleet("other", "  x: {}\n")).unwrap();
    w.submit(&other);
    assert_eq!(other.desired[0].vm_id, 1000);
    assert!(!macs(&other)
        .values()
        .flatten()
        .any(|x| all.contains(&x.unwrap())));
    // recreate: the same MACs; web's vm_id back, db a new one since its old one is taken
    let back = w.prepare(fleet(body)).unwrap();
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
    let p = prepare_dev("  web: {}\n", &s, 1).unwrap();
    let mac = p.desired[0].container.interfaces[0].mac_address.unwrap();
    assert_ne!(mac, first);
    assert_eq!(mac, scheduler::candidate_mac("dev", "web", 0, 1));
    // a container that exists (created before MACs were allocated) keeps the MAC its node reports
    let own: pxfleet_spec::MacAddr = "BC:24:11:0A:0B:0C".parse().unwrap();
    s.observed.push(ObservedContainer {
        raw_config: [(
            "net0".to_string(),
            format!("name=eth0,bridge=vmbr0,hwaddr={own},ip=dhcp"),
        )]
        .into(),
        ..managed("a", 1000, "dev", "web")
    });
    let p = prepare_dev("  web: {vm_id: 1000}\n", &s, 1).unwrap();
    assert_eq!(p.desired[0].container.interfaces[0].mac_address, Some(own));
}

#[test]
fn mac_collisions_are_rerolled_and_an_explicit_mac_is_never_given_twice() {
    let a0 = scheduler::candidate_mac("dev", "a", 0, 0);
    // b pins a's first candidate; a must not get it
    let body = format!("  a: {{}}\n  b: {{mac_address: \"{a0}\"}}\n");
    let p = prepare_dev(&body, &snap(&["a"]), 1).unwrap();
    let m = macs(&p);
    assert_eq!(m["b"][0], Some(a0));
    assert_eq!(m["a"][0], Some(scheduler::candidate_mac("dev", "a", 0, 1)));
    // another fleet's container holding it counts too
    let mut s = snap(&["a"]);
    let theirs = format!("  z: {{mac_address: \"{a0}\"}}\n");
    let o = prepare("fleet.yaml", other_fleet("o", &theirs), &s, range(), 1).unwrap();
    s.desired = o.desired.clone();
    let p = prepare_dev("  a: {}\n", &s, 1).unwrap();
    assert_eq!(
        macs(&p)["a"][0],
        Some(scheduler::candidate_mac("dev", "a", 0, 1))
    );
}

#[test]
fn an_adopted_mac_is_remembered_across_destroy() {
    let w = Stored::with_nodes(&[("a", 8000)]);
    // web was created before MACs were allocated: PVE gave it one
    let own: pxfleet_spec::MacAddr = "BC:24:11:0A:0B:0C".parse().unwrap();
    let web = ObservedContainer {
        raw_config: [("net0".to_string(), format!("name=eth0,hwaddr={own}"))].into(),
        ..managed("a", 1000, "dev", "web")
    };
    w.store.set_observed("a", 1000, Some(&web)).unwrap();
    let p = w.prepare(fleet("  web: {}\n")).unwrap();
    assert_eq!(macs(&p)["web"], [Some(own)]);
    w.submit(&p);
    // destroyed: gone from desired and from the node
    w.destroy(fleet("  web: {}\n"));
    w.store.set_observed("a", 1000, None).unwrap();
    let back = w.prepare(fleet("  web: {}\n")).unwrap();
    assert_eq!(macs(&back)["web"], [Some(own)]);
    assert_eq!(back.desired[0].vm_id, 1000);
}
