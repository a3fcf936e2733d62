//! Checks against the world outside the file: nodes, datastores, bridges, and vm_ids,
//! hostnames and addresses held by others. The diagnostics point at the fleet file's lines.

use pxfleet_spec::*;

const FLEET: &str = "fleet: dev
templates:
  deb: {pveam: debian-12-standard_12.7-1_amd64.tar.zst}
containers:
  web-1:
    template: deb
    node: mk33
    vm_id: 2100
    datastore_id: local-zfs
    ip_address: 192.168.7.100/24
    gateway: 192.168.7.1
  web-2:
    template: deb
    node: mk34
    datastore_id: local
    bridge: vmbr9
    constraints: {nodes: [mk33, mk99]}
";

fn world() -> MemoryWorld {
    MemoryWorld::default()
        .with_node(
            "mk33",
            &[
                ("local", &["vztmpl", "iso"]),
                ("local-zfs", &["rootdir", "images"]),
            ],
            &["vmbr0"],
        )
        .with_node(
            "mk34",
            &[("local", &["vztmpl"]), ("local-lvm", &["rootdir"])],
            &["vmbr0", "vmbr1"],
        )
}

fn diags(w: &dyn WorldFacts) -> Vec<String> {
    let f = parse_fleet("fleet.yaml", FLEET, &NoFiles).unwrap();
    check_against_world("fleet.yaml", &f, w)
        .iter()
        .map(ToString::to_string)
        .collect()
}

#[test]
fn datastore_content_bridge_and_constraint_nodes_are_checked() {
    let d = diags(&world());
    let text = d.join("\n");
    assert!(
        text.contains("fleet.yaml:15:19: containers.web-2.datastore_id: datastore local on node mk34 does not hold `rootdir` content"),
        "{text}"
    );
    assert!(
        text.contains("storages of mk34 with rootdir: local-lvm"),
        "{text}"
    );
    assert!(text.contains("fleet.yaml:16:13: containers.web-2.bridge: bridge on node mk34: 'vmbr9' does not exist"), "{text}");
    assert!(
        text.contains("containers.web-2.constraints.nodes.1: node 'mk99' does not exist"),
        "{text}"
    );
    assert_eq!(d.len(), 3, "{text}");
}

#[test]
fn unknown_node_gets_a_suggestion() {
    let f = parse_fleet(
        "fleet.yaml",
        &FLEET.replace("node: mk33", "node: mk3"),
        &NoFiles,
    )
    .unwrap();
    let d = check_against_world("fleet.yaml", &f, &world());
    let first = d
        .iter()
        .find(|d| d.path == "containers.web-1.node")
        .unwrap();
    assert_eq!(first.line, 7);
    assert!(first.message.contains("did you mean"), "{first}");
}

#[test]
fn ids_names_and_addresses_held_by_others_conflict_but_not_our_own() {
    let mut w = world();
    let other = Holder {
        node: "mk34".into(),
        vm_id: Some(2100),
        fleet: Some("prod".into()),
        container: Some("db".into()),
    };
    w.vm_ids.insert(2100, other.clone());
    w.hostnames.insert(
        "web-2".into(),
        Holder {
            node: "mk33".into(),
            vm_id: Some(150),
            fleet: None,
            container: None,
        },
    );
    w.addresses.insert("192.168.7.100".parse().unwrap(), other);
    let text = diags(&w).join("\n");
    assert!(text.contains("fleet.yaml:8:12: containers.web-1.vm_id: vm_id 2100 is already taken by container 2100 on node mk34 (fleet prod, db)"), "{text}");
    assert!(text.contains("containers.web-2.hostname: hostname web-2 is already used by container 150 on node mk33 (not managed by pxfleet)"), "{text}");
    assert!(
        text.contains(
            "fleet.yaml:10:17: containers.web-1.ip_address: address 192.168.7.100 is already used"
        ),
        "{text}"
    );

    // the same facts, held by this very container, are no conflict
    let mut w = world();
    let me = Holder {
        node: "mk33".into(),
        vm_id: Some(2100),
        fleet: Some("dev".into()),
        container: Some("web-1".into()),
    };
    w.vm_ids.insert(2100, me.clone());
    w.addresses.insert("192.168.7.100".parse().unwrap(), me);
    assert_eq!(diags(&w).len(), 3);
}

#[test]
fn empty_world_knows_no_node() {
    let d = diags(&EmptyWorld);
    assert!(
        d.iter()
            .any(|d| d.contains("containers.web-1.node: node 'mk33' does not exist")),
        "{d:?}"
    );
}

#[test]
fn an_enrolled_node_without_inventory_gets_one_clear_message() {
    // mk34 has enrolled but its agent has not sent storages and bridges yet.
    let w = world().with_node("mk34", &[], &[]);
    let text = diags(&w).join("\n");
    assert!(
        text.contains(
            "containers.web-2.node: node mk34 has not reported its storages and bridges yet"
        ),
        "{text}"
    );
    assert!(text.contains("pxctl get nodes"), "{text}");
    assert!(
        !text.contains("datastore on node mk34") && !text.contains("bridge on node mk34"),
        "no per-field 'does not exist' for a silent node: {text}"
    );
}

#[test]
fn a_mount_point_idmap_is_refused_on_a_node_older_than_pve_9_2() {
    let yaml = "fleet: dev
templates:
  deb: {pveam: debian-12-standard_12.7-1_amd64.tar.zst}
containers:
  m:
    template: deb
    node: mk33
    mount_points:
      - {datastore_id: local-zfs, size: 1, path: /a}
      - {datastore_id: local-zfs, size: 1, path: /b, idmap: passthrough}
";
    let f = parse_fleet("fleet.yaml", yaml, &NoFiles).expect("valid");
    let mut w = world();
    for (version, refused) in [
        (None, false),
        (Some("9.1.2"), true),
        (Some("9.2.0"), false),
        (Some("10.0.1"), false),
    ] {
        w.nodes.get_mut("mk33").unwrap().pve_version = version.map(String::from);
        let d = check_against_world("fleet.yaml", &f, &w);
        let hit = d
            .iter()
            .find(|d| d.path == "containers.m.mount_points.1.idmap");
        assert_eq!(hit.is_some(), refused, "{version:?}: {d:?}");
        if let Some(d) = hit {
            assert!(d.message.contains("runs PVE 9.1.2"), "{d:?}");
            assert_eq!(d.span().line, 10);
        }
    }
    assert!(pve_at_least("pve-manager/9.2.1/abc", 9, 2));
    assert!(!pve_at_least("9.1.9", 9, 2));
    assert!(pve_at_least("unknown", 9, 2));
}
