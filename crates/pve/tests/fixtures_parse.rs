//! Every captured example in tests/fixtures (copied from ../shared/pve/examples) goes through a parser,
//! and the values a user would check come out right.

// Test code: it starts the programs under test and the tools around them.
#![allow(clippy::disallowed_methods)]

use std::collections::BTreeSet;
use std::path::PathBuf;

use pxfleet_pve::parse::*;
use pxfleet_pve::PveError;
use pxfleet_pve::{Command, Output};

fn fixture(name: &str) -> String {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// Files this suite covers; `every_fixture_is_covered` fails when a new file lands without a test.
const COVERED: &[&str] = &[
    "etc-pve-lxc-100.conf",
    "pct-config-100.txt",
    "pct-create-100.stdout.txt",
    "pct-create-exists.stderr.txt",
    "pct-create-missing-template.stderr.txt",
    "pct-list.txt",
    "pct-locked.stderr.txt",
    "pct-missing-ct.stderr.txt",
    "pct-status-verbose.txt",
    "pct-status.txt",
    "pveam-available-system-pre-9.2.7.txt",
    "pveam-available-system.txt",
    "pveam-list-local.txt",
    "pvesh-aplinfo-entry.json",
    "pvesh-cluster-resources-vm.json",
    "pvesh-create-lxc.stdout.txt",
    "pvesh-lxc-100-config.json",
    "pvesh-lxc-100-interfaces.json",
    "pvesh-lxc-100-status-current.json",
    "pvesh-network-bridges.json",
    "pvesh-node-status.json",
    "pvesh-nodes-node-lxc.compact.json",
    "pvesh-nodes-node-lxc.json",
    "pvesh-nodes.json",
    "pvesh-storage-content-vztmpl.json",
    "pvesh-storage.json",
    "pvesh-task-status.json",
    "pvesh-version.json",
    "pvesm-list-local-lvm.txt",
    "pvesm-list-local-vztmpl.txt",
    "pvesm-status-pve8.txt",
    "pvesm-status.txt",
];

#[test]
fn every_fixture_is_covered() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let on_disk: BTreeSet<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    let covered: BTreeSet<String> = COVERED.iter().map(|s| s.to_string()).collect();
    assert_eq!(on_disk, covered);
}

fn check_ct100_config(c: &ContainerConfig) {
    assert_eq!(c.hostname.as_deref(), Some("web1"));
    assert_eq!(c.arch.as_deref(), Some("amd64"));
    assert_eq!(c.cores, Some(2));
    assert_eq!(c.memory, Some(1024));
    assert_eq!(c.swap, Some(512));
    assert!(c.features.nesting && !c.features.keyctl);
    assert!(c.onboot && c.unprivileged && !c.protection);
    assert_eq!(c.tags, vec!["prod", "web"]);
    assert_eq!(c.description.as_deref(), Some("Web server\n"));
    assert_eq!(
        c.startup,
        Some(Startup {
            order: Some(1),
            up: Some(30),
            down: None
        })
    );
    let root = c.rootfs.as_ref().unwrap();
    assert_eq!(root.volume, "local-lvm:vm-100-disk-0");
    assert_eq!(root.storage(), Some("local-lvm"));
    assert_eq!(c.rootfs_size(), Some(8 << 30));
    let n = &c.nets[&0];
    assert_eq!(n.name, "eth0");
    assert_eq!(n.bridge.as_deref(), Some("vmbr0"));
    assert_eq!(c.hwaddr(0), Some("BC:24:11:5E:7A:01"));
    assert_eq!(n.ip.as_deref(), Some("dhcp"));
    assert_eq!(n.ip6.as_deref(), Some("auto"));
    assert_eq!(n.firewall, Some(true));
    assert_eq!(n.kind.as_deref(), Some("veth"));
    assert_eq!(
        n.to_property_string(),
        "name=eth0,bridge=vmbr0,firewall=1,hwaddr=BC:24:11:5E:7A:01,ip=dhcp,ip6=auto,type=veth"
    );
    assert_eq!(c.lock, None);
}

#[test]
fn etc_pve_lxc_conf() {
    let c = ContainerConfig::from_conf_file(&fixture("etc-pve-lxc-100.conf")).unwrap();
    check_ct100_config(&c);
}

#[test]
fn pct_config_text() {
    let c = ContainerConfig::from_pct_config(&fixture("pct-config-100.txt")).unwrap();
    check_ct100_config(&c);
}

#[test]
fn pvesh_config_json() {
    let c = ContainerConfig::from_json(&fixture("pvesh-lxc-100-config.json")).unwrap();
    check_ct100_config(&c);
    assert_eq!(
        c.digest.as_deref(),
        Some("3f0e6c1b7d2a9e4f5c8b1a0d9e7f6c5b4a3d2e1f")
    );
}

#[test]
fn all_three_config_renderings_agree() {
    let file = ContainerConfig::from_conf_file(&fixture("etc-pve-lxc-100.conf")).unwrap();
    let text = ContainerConfig::from_pct_config(&fixture("pct-config-100.txt")).unwrap();
    let mut json = ContainerConfig::from_json(&fixture("pvesh-lxc-100-config.json")).unwrap();
    json.digest = None;
    json.raw.remove("digest");
    assert_eq!(file, text);
    assert_eq!(text, json);
}

fn cls(stderr: &str, vmid: u32) -> PveError {
    pxfleet_pve::error::classify(
        &Command::new("pct").arg("x"),
        &Output::fail(255, stderr),
        Some(vmid),
    )
}

#[test]
fn pct_create_stdout_has_no_upid() {
    // pct does not print the UPID (CONTRACT §1); the create log is informational only.
    assert!(Upid::find_in_output(&fixture("pct-create-100.stdout.txt")).is_none());
}

#[test]
fn pvesh_create_stdout_ends_with_upid() {
    let u = Upid::find_in_output(&fixture("pvesh-create-lxc.stdout.txt")).unwrap();
    assert_eq!(u.kind, "vzcreate");
    assert_eq!(u.id, "103");
    assert_eq!(u.node, "pve1");
    assert_eq!(
        u.raw,
        "UPID:pve1:0003C8E1:0071A2B4:6711F0A2:vzcreate:103:root@pam:"
    );
}

#[test]
fn create_exists_stderr() {
    match cls(&fixture("pct-create-exists.stderr.txt"), 100) {
        PveError::AlreadyExists { vmid, node, kind } => {
            assert_eq!((vmid, node.as_str(), kind.as_str()), (100, "pve1", "CT"))
        }
        e => panic!("{e:?}"),
    }
}

#[test]
fn create_missing_template_stderr() {
    let e = cls(&fixture("pct-create-missing-template.stderr.txt"), 103);
    assert!(
        matches!(&e, PveError::TaskFailed { message, .. } if message.contains("can't find file 'local:vztmpl/debian-13-standard_13.9-1_amd64.tar.zst'")),
        "{e:?}"
    );
    assert!(!e.retryable());
}

#[test]
fn locked_stderr() {
    let e = cls(&fixture("pct-locked.stderr.txt"), 102);
    assert!(
        matches!(&e, PveError::Locked { vmid: 102, lock, .. } if lock == "create"),
        "{e:?}"
    );
}

#[test]
fn missing_ct_stderr() {
    let e = cls(&fixture("pct-missing-ct.stderr.txt"), 999);
    assert!(
        matches!(&e, PveError::NotFound { vmid: 999, node, .. } if node == "pve1"),
        "{e:?}"
    );
}

#[test]
fn pct_list() {
    let v = parse_pct_list(&fixture("pct-list.txt")).unwrap();
    assert_eq!(v.len(), 3);
    assert_eq!(
        v[0],
        PctListEntry {
            vmid: 100,
            status: RunState::Running,
            lock: None,
            name: "web1".into()
        }
    );
    assert_eq!(v[1].status, RunState::Stopped);
    assert_eq!(v[1].name, "db1");
    assert_eq!(v[2].lock.as_deref(), Some("create"));
    assert_eq!(v[2].name, "CT102");
}

#[test]
fn pct_status() {
    assert_eq!(
        parse_pct_status(&fixture("pct-status.txt")).unwrap(),
        RunState::Running
    );
}

#[test]
fn pct_status_verbose() {
    let text = fixture("pct-status-verbose.txt");
    assert_eq!(parse_pct_status(&text).unwrap(), RunState::Running);
    let kv: std::collections::BTreeMap<_, _> = parse_key_values("pct status", &text)
        .unwrap()
        .into_iter()
        .collect();
    assert_eq!(kv["maxmem"], "1073741824");
    assert_eq!(kv["pressurecpusome"], "0.00");
    assert_eq!(kv["tags"], "prod;web");
}

#[test]
fn pveam_available_both_formats() {
    let new = parse_pveam_available(&fixture("pveam-available-system.txt")).unwrap();
    let old = parse_pveam_available(&fixture("pveam-available-system-pre-9.2.7.txt")).unwrap();
    assert_eq!(new.len(), 5);
    assert_eq!(old.len(), 5);
    assert_eq!(new[3].template, "debian-13-standard_13.6-1_amd64.tar.zst");
    assert_eq!(new[3].arch.as_deref(), Some("amd64"));
    assert_eq!(old[3].arch, None);
    for (a, b) in new.iter().zip(&old) {
        assert_eq!((&a.section, &a.template), (&b.section, &b.template));
    }
}

#[test]
fn pveam_list() {
    let v = parse_pveam_list(&fixture("pveam-list-local.txt")).unwrap();
    assert_eq!(v.len(), 3);
    assert_eq!(
        v[1].volid,
        "local:vztmpl/debian-13-standard_13.6-1_amd64.tar.zst"
    );
    assert_eq!(v[1].size_mib, 126.0);
    assert_eq!(v[0].size_mib, 3.04);
}

#[test]
fn aplinfo() {
    let v: Vec<AplInfo> = parse_json("aplinfo", &fixture("pvesh-aplinfo-entry.json")).unwrap();
    assert_eq!(v[0].template, "debian-13-standard_13.6-1_amd64.tar.zst");
    assert_eq!(v[0].sha512sum.as_ref().unwrap().len(), 128);
    assert!(v[0].location.as_ref().unwrap().ends_with(&v[0].template));
}

#[test]
fn cluster_resources() {
    let v: Vec<ClusterResource> =
        parse_json("resources", &fixture("pvesh-cluster-resources-vm.json")).unwrap();
    assert_eq!(v.len(), 2);
    assert_eq!(v[0].vmid, Some(100));
    assert_eq!(v[0].node.as_deref(), Some("pve1"));
    assert_eq!(v[0].kind, "lxc");
    assert!(v[0].tags.contains("web"));
    assert_eq!(v[1].status.as_deref(), Some("stopped"));
}

#[test]
fn interfaces() {
    let v = parse_interfaces(&fixture("pvesh-lxc-100-interfaces.json")).unwrap();
    let eth0 = v.iter().find(|i| i.name == "eth0").unwrap();
    assert_eq!(eth0.hwaddr.as_deref(), Some("bc:24:11:5e:7a:01"));
    let v4: Vec<_> = eth0
        .addresses
        .iter()
        .filter(|a| a.family == "inet")
        .collect();
    assert_eq!(v4.len(), 1);
    assert_eq!(
        (v4[0].address.as_str(), v4[0].prefix),
        ("192.168.7.100", 24)
    );
    assert!(v.iter().any(|i| i.name == "lo"));
}

#[test]
fn status_current() {
    let s: ContainerStatus =
        parse_json("status", &fixture("pvesh-lxc-100-status-current.json")).unwrap();
    assert_eq!(s.vmid, 100);
    assert_eq!(s.status, RunState::Running);
    assert_eq!(s.maxmem, Some(1 << 30));
    assert_eq!(s.pid, Some(41233));
    assert_eq!(
        s.ha,
        Some(HaStatus {
            managed: false,
            state: None
        })
    );
}

#[test]
fn bridges() {
    let v: Vec<Bridge> = parse_json("network", &fixture("pvesh-network-bridges.json")).unwrap();
    assert_eq!(v[0].iface, "vmbr0");
    assert_eq!(v[0].kind, "bridge");
    assert!(v[0].active);
    assert_eq!(v[0].cidr.as_deref(), Some("192.168.7.10/24"));
}

#[test]
fn node_status() {
    let s: NodeStatus = parse_json("node status", &fixture("pvesh-node-status.json")).unwrap();
    assert_eq!(s.loadavg, vec![0.12, 0.20, 0.25]);
    assert_eq!(s.memory.total, 67108864000);
    assert_eq!(s.memory.available, Some(45634027520));
    assert_eq!(s.cpuinfo.cpus, Some(16));
    assert_eq!(s.cpuinfo.mhz, Some(3700.0));
    assert_eq!(s.rootfs.avail, 83343413248);
    assert_eq!(
        s.pveversion.as_deref(),
        Some("pve-manager/9.1.2/9e1e0a7c2b3d4f56")
    );
}

fn check_lxc_list(v: &[ContainerStatus]) {
    let ids: Vec<u64> = v.iter().map(|c| c.vmid).collect();
    assert_eq!(
        ids,
        vec![100, 101, 102],
        "sorted by vmid despite arbitrary PVE order"
    );
    assert_eq!(v[0].name.as_deref(), Some("web1"));
    assert_eq!(v[0].status, RunState::Running);
    assert_eq!(v[1].status, RunState::Stopped);
    assert_eq!(v[2].lock.as_deref(), Some("create"));
    assert_eq!(v[2].maxdisk, Some(4 << 30));
}

#[test]
fn lxc_list_pretty_and_compact() {
    let key = |c: &ContainerStatus| c.vmid;
    let pretty = parse_json_list("lxc", &fixture("pvesh-nodes-node-lxc.json"), key).unwrap();
    let compact =
        parse_json_list("lxc", &fixture("pvesh-nodes-node-lxc.compact.json"), key).unwrap();
    check_lxc_list(&pretty);
    check_lxc_list(&compact);
    assert_eq!(pretty, compact);
}

#[test]
fn nodes() {
    let v: Vec<ClusterNode> = parse_json("nodes", &fixture("pvesh-nodes.json")).unwrap();
    assert_eq!(v[0].node, "pve1");
    assert_eq!(v[0].status, "online");
    assert_eq!(v[0].maxcpu, Some(16));
}

#[test]
fn storage_content() {
    let v: Vec<StorageContent> =
        parse_json("content", &fixture("pvesh-storage-content-vztmpl.json")).unwrap();
    assert_eq!(v.len(), 3);
    assert_eq!(
        v[1].volid,
        "local:vztmpl/debian-13-standard_13.6-1_amd64.tar.zst"
    );
    assert_eq!(v[1].format.as_deref(), Some("tzst"));
    assert_eq!(v[1].size, 132120576);
}

#[test]
fn storages() {
    let v = parse_json_list(
        "storage",
        &fixture("pvesh-storage.json"),
        |s: &StorageInfo| s.storage.clone(),
    )
    .unwrap();
    let names: Vec<&str> = v.iter().map(|s| s.storage.as_str()).collect();
    assert_eq!(names, vec!["local", "local-lvm", "local-zfs", "nfs-backup"]);
    assert!(v[0].holds_vztmpl() && !v[0].holds_rootdir());
    assert!(v[1].holds_rootdir() && v[2].holds_rootdir());
    assert_eq!(v[1].avail, 341132558500);
    assert!(!v[3].enabled && !v[3].active);
}

#[test]
fn task_status() {
    let t: TaskStatus = parse_json("task", &fixture("pvesh-task-status.json")).unwrap();
    assert!(t.succeeded());
    assert_eq!(t.kind.as_deref(), Some("vzcreate"));
    assert_eq!(Upid::parse(&t.upid).unwrap().id, "103");
}

#[test]
fn version() {
    let v: Version = parse_json("version", &fixture("pvesh-version.json")).unwrap();
    assert_eq!(v.version, "9.1.2");
    assert_eq!(v.major(), Some(9));
    assert_eq!(v.release.as_deref(), Some("9.1"));
}

#[test]
fn pvesm_list_lvm() {
    let v = parse_pvesm_list(&fixture("pvesm-list-local-lvm.txt")).unwrap();
    assert_eq!(v.len(), 3);
    assert_eq!(v[2].volid, "local-lvm:vm-101-disk-1");
    assert_eq!(v[2].size, 68719476736);
    assert_eq!(v[2].vmid, Some(101));
    assert_eq!(v[2].content, "rootdir");
}

#[test]
fn pvesm_list_vztmpl() {
    let v = parse_pvesm_list(&fixture("pvesm-list-local-vztmpl.txt")).unwrap();
    assert_eq!(v.len(), 3);
    assert_eq!(v[0].vmid, None);
    assert_eq!(v[0].format, "txz");
    assert_eq!(v[0].size, 3191808);
}

#[test]
fn pvesm_status_both_headers() {
    let new = parse_pvesm_status(&fixture("pvesm-status.txt")).unwrap();
    let old = parse_pvesm_status(&fixture("pvesm-status-pve8.txt")).unwrap();
    assert_eq!(new, old);
    assert_eq!(new.len(), 4);
    assert_eq!(new[1].name, "local-lvm");
    assert_eq!(new[1].avail_kib, 333137264);
    assert_eq!(new[0].used_percent, Some(12.24));
    assert_eq!(new[3].status, "disabled");
    assert_eq!(new[3].used_percent, None);
}
