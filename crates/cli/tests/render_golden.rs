//! Golden renderings of every listing format from fixed protocol records: what scripts and people see.
//! Set `UPDATE_GOLDEN=1` to rewrite the files under tests/golden/ after an intended change.

use std::collections::BTreeMap;

use pxfleet_cli::args::ListFormat;
use pxfleet_cli::render::{self, ContainerRecord, NodeRecord, OperationRecord, OutputRecord};
use pxfleet_proto::v1 as pb;

fn golden(name: &str, actual: &str) {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(name);
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::write(&path, actual).unwrap();
    }
    let expected = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (run with UPDATE_GOLDEN=1)", path.display()));
    pretty_assertions::assert_eq!(expected, actual, "{name}");
}

fn containers() -> Vec<ContainerRecord> {
    let c = |name: &str,
             state: pb::ContainerState,
             vm_id: u32,
             node: &str,
             addrs: &[&str],
             err: &str| {
        ContainerRecord::from(&pb::ContainerInfo {
            fleet: "dev".into(),
            name: name.into(),
            vm_id,
            node: node.into(),
            hostname: name.into(),
            state: state as i32,
            power: if state == pb::ContainerState::Running {
                pb::PowerState::Running as i32
            } else {
                0
            },
            addresses: addrs.iter().map(|s| s.to_string()).collect(),
            template: "ubuntu-25.04".into(),
            cores: Some(2),
            memory_mib: 2048,
            disk_size_gib: 8,
            last_error: err.into(),
            drifted: false,
            revision: 3,
            pending_restart: vec![],
            waiting: String::new(),
        })
    };
    vec![
        c(
            "dev-nextcloud",
            pb::ContainerState::Running,
            2100,
            "mk33",
            &["fe80::1/64", "192.168.7.100/24", "2001:db8::100/64"],
            "",
        ),
        c(
            "dev-vaultwarden",
            pb::ContainerState::Failed,
            2101,
            "mk33",
            &[],
            "pct create 2101 failed: storage 'local-zfs' does not exist\n(exit 255)",
        ),
        c("dev-pending", pb::ContainerState::Pending, 0, "", &[], ""),
    ]
}

fn nodes() -> Vec<NodeRecord> {
    let n = |name: &str, status: pb::NodeStatus, reason: &str, status_reason: &str| {
        NodeRecord::from(&pb::NodeInfo {
            name: name.into(),
            status: status as i32,
            inventory: Some(pb::Inventory {
                node: name.into(),
                pve_version: "9.0.3".into(),
                cores: 16,
                memory_total_bytes: 64 << 30,
                memory_free_bytes: 40 << 30,
                labels: [("rack".to_string(), "a".to_string())].into(),
                ..Default::default()
            }),
            last_heartbeat_unix_ms: 1_790_000_000_000,
            cordon_reason: reason.into(),
            container_count: 2,
            cert_serial: "ab".into(),
            status_reason: status_reason.into(),
        })
    };
    vec![
        n("mk33", pb::NodeStatus::Ready, "", ""),
        n("mk34", pb::NodeStatus::Cordoned, "disk swap", ""),
        n(
            "mk35",
            pb::NodeStatus::Stalled,
            "",
            "4 operation(s) in flight and no update from its agent for 130 s",
        ),
    ]
}

fn operations() -> Vec<OperationRecord> {
    vec![OperationRecord::from(&pb::OperationInfo {
        op_id: "op-7".into(),
        fleet: "dev".into(),
        container: "dev-nextcloud".into(),
        vm_id: 2100,
        node: "mk33".into(),
        kind: pb::OperationKind::Update as i32,
        state: pb::OperationState::Running as i32,
        attempts: 1,
        created_unix_ms: 1_790_000_000_000,
        updated_unix_ms: 1_790_000_005_000,
        deadline_unix_ms: 0,
        message: "pct set".into(),
        error: String::new(),
        reason: "memory 2048 -> 4096".into(),
        snapshots: Vec::new(),
    })]
}

fn outputs(show: bool) -> BTreeMap<String, OutputRecord> {
    let o = pb::ContainerOutput {
        name: "dev-nextcloud".into(),
        vm_id: 2100,
        node: "mk33".into(),
        hostname: "dev-nextcloud".into(),
        addresses: vec!["192.168.7.100/24".into(), "2001:db8::100/64".into()],
        password: Some(pb::Secret {
            value: "s3cret-Pa55word".into(),
        }),
        has_password: true,
        volumes: vec![
            pb::VolumeOutput {
                disk: "rootfs".into(),
                path: "/".into(),
                volume: "local-zfs:subvol-2100-disk-0".into(),
                size_gib: 16.0,
            },
            pb::VolumeOutput {
                disk: "mp0".into(),
                path: "/data".into(),
                volume: "local-zfs:subvol-2100-disk-1".into(),
                size_gib: 100.0,
            },
        ],
    };
    [("dev-nextcloud".to_string(), OutputRecord::from_pb(&o, show))].into()
}

#[test]
fn containers_in_every_format() {
    let rs = containers();
    golden(
        "containers.txt",
        &render::containers(ListFormat::Table, &rs),
    );
    golden(
        "containers.json",
        &render::containers(ListFormat::Json, &rs),
    );
    golden(
        "containers.yaml",
        &render::containers(ListFormat::Yaml, &rs),
    );
    assert_eq!(render::containers(ListFormat::Json, &[]), "[]\n");
}

#[test]
fn nodes_in_every_format() {
    let rs = nodes();
    golden("nodes.txt", &render::nodes(ListFormat::Table, &rs));
    golden("nodes.json", &render::nodes(ListFormat::Json, &rs));
    golden("nodes.yaml", &render::nodes(ListFormat::Yaml, &rs));
}

#[test]
fn operations_in_every_format() {
    let rs = operations();
    golden(
        "operations.txt",
        &render::operations(ListFormat::Table, &rs),
    );
    golden(
        "operations.json",
        &render::operations(ListFormat::Json, &rs),
    );
}

#[test]
fn outputs_hide_passwords_unless_asked() {
    let hidden = outputs(false);
    let json = render::outputs(ListFormat::Json, &hidden, false);
    let table = render::outputs(ListFormat::Table, &hidden, false);
    assert!(!json.contains("s3cret") && !table.contains("s3cret"));
    golden("output.json", &json);
    golden("output.txt", &table);
    let shown = outputs(true);
    golden(
        "output-sensitive.json",
        &render::outputs(ListFormat::Json, &shown, true),
    );
}

#[test]
fn a_container_waiting_for_its_clone_source_says_so() {
    let r = ContainerRecord::from(&pb::ContainerInfo {
        fleet: "dev".into(),
        name: "web-1".into(),
        node: "pve1".into(),
        state: pb::ContainerState::Pending as i32,
        waiting: "waiting for clone source dev/golden (CT 9000 on pve1): not a template yet".into(),
        ..Default::default()
    });
    let table = render::containers(ListFormat::Table, std::slice::from_ref(&r));
    assert!(
        table.contains(
            "pending (waiting for clone source dev/golden (CT 9000 on pve1): not a template yet)"
        ),
        "{table}"
    );
    let json = render::containers(ListFormat::Json, &[r]);
    assert!(
        json.contains("\"waiting\": \"waiting for clone source"),
        "{json}"
    );
    // Not waiting: no key at all (the JSON of every other container is as it was).
    let plain = ContainerRecord::from(&pb::ContainerInfo::default());
    assert!(!render::containers(ListFormat::Json, &[plain]).contains("waiting"));
}
