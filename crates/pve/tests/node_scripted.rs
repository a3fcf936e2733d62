//! Node operations against a ScriptedRunner: golden argv for every fleet.yaml field, the password and SSH-key
//! handling, failure detection (exit codes vs read-back), lock retries and idempotent power operations.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use pretty_assertions::assert_eq;
use pxfleet_pve::parse::{Features, NetConfig, Startup};
use pxfleet_pve::spec::{MountPointSpec, MountVolume};
use pxfleet_pve::{
    ConfigChange, CreateSpec, Node, Output, PveError, RetryPolicy, RootfsSpec, ScriptedRunner,
    Secret, ShutdownOutcome,
};

const ANY: &str = ScriptedRunner::ANY;
const TEMPLATE: &str = "local:vztmpl/debian-13-standard_13.6-1_amd64.tar.zst";

fn node(r: &Arc<ScriptedRunner>) -> Node {
    Node::new("pve1", r.clone()).with_retry(RetryPolicy::immediate(3))
}

fn config_json(net0: &str, rootfs_size: &str) -> String {
    format!(
        r#"{{"arch":"amd64","cores":2,"digest":"abc","hostname":"web1","memory":1024,"net0":"{net0}","rootfs":"local-lvm:vm-100-disk-0,size={rootfs_size}","swap":512,"unprivileged":1}}"#
    )
}

fn full_spec() -> CreateSpec {
    let mut nets = BTreeMap::new();
    nets.insert(
        0,
        NetConfig {
            name: "eth0".into(),
            bridge: Some("vmbr0".into()),
            ip: Some("192.168.7.100/24".into()),
            gw: Some("192.168.7.1".into()),
            ip6: Some("fd00::100/64".into()),
            gw6: Some("fd00::1".into()),
            tag: Some(42),
            mtu: Some(1450),
            hwaddr: Some("BC:24:11:00:00:01".into()),
            firewall: Some(true),
            rate: Some(12.5),
            ..NetConfig::default()
        },
    );
    nets.insert(
        1,
        NetConfig {
            name: "eth1".into(),
            bridge: Some("vmbr1".into()),
            ip: Some("dhcp".into()),
            ip6: Some("auto".into()),
            ..NetConfig::default()
        },
    );
    let mut mps = BTreeMap::new();
    mps.insert(
        0,
        MountPointSpec {
            volume: MountVolume::Storage {
                storage: "local-lvm".into(),
                size_gib: 32,
            },
            path: "/var/lib/postgresql".into(),
            backup: Some(true),
            read_only: None,
            mount_options: Vec::new(),
            acl: None,
            quota: None,
            replicate: None,
            shared: None,
            keepattrs: None,
            idmap: None,
        },
    );
    mps.insert(
        1,
        MountPointSpec {
            volume: MountVolume::Bind {
                host_path: "/srv/shared".into(),
            },
            path: "/shared".into(),
            backup: None,
            read_only: Some(true),
            mount_options: Vec::new(),
            acl: None,
            quota: None,
            replicate: None,
            shared: None,
            keepattrs: None,
            idmap: None,
        },
    );
    CreateSpec {
        hostname: Some("dev-nextcloud".into()),
        cores: Some(4),
        cpulimit: Some(1.5),
        cpuunits: Some(200),
        memory: Some(4096),
        swap: Some(0),
        unprivileged: true,
        features: Features {
            nesting: true,
            fuse: true,
            keyctl: true,
            mount: vec!["nfs".into(), "cifs".into()],
            ..Features::default()
        },
        nets,
        nameservers: vec!["1.1.1.1".into(), "9.9.9.9".into()],
        searchdomains: vec!["example.com".into()],
        ssh_public_keys: vec![
            "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIA ops@example".into(),
            "ssh-rsa AAAAB3NzaC1yc2E dev@example".into(),
        ],
        startup: Some(Startup {
            order: Some(3),
            up: Some(60),
            down: Some(30),
        }),
        onboot: Some(true),
        protection: Some(false),
        tags: vec!["web".into(), "Pxfleet".into()],
        description: Some("managed-by: pxfleet fleet=dev name=dev-nextcloud\n".into()),
        mount_points: mps,
        ..CreateSpec::new(
            2100,
            TEMPLATE,
            RootfsSpec {
                storage: "local-zfs".into(),
                size_gib: 16,
            },
        )
    }
}

#[tokio::test]
async fn create_golden_argv_every_field() {
    let r = Arc::new(ScriptedRunner::new());
    let expected: Vec<&str> = vec![
        "pct", "create", "2100", TEMPLATE,
        "--hostname", "dev-nextcloud",
        "--cores", "4",
        "--cpulimit", "1.5",
        "--cpuunits", "200",
        "--memory", "4096",
        "--swap", "0",
        "--rootfs", "local-zfs:16",
        "--mp0", "local-lvm:32,mp=/var/lib/postgresql,backup=1",
        "--mp1", "/srv/shared,mp=/shared,ro=1",
        "--net0", "name=eth0,bridge=vmbr0,firewall=1,gw=192.168.7.1,gw6=fd00::1,hwaddr=BC:24:11:00:00:01,ip=192.168.7.100/24,ip6=fd00::100/64,mtu=1450,rate=12.5,tag=42",
        "--net1", "name=eth1,bridge=vmbr1,ip=dhcp,ip6=auto",
        "--features", "fuse=1,keyctl=1,mount=nfs;cifs,nesting=1",
        "--nameserver", "1.1.1.1 9.9.9.9",
        "--searchdomain", "example.com",
        "--onboot", "1",
        "--protection", "0",
        "--startup", "order=3,up=60,down=30",
        "--tags", "pxfleet;web",
        "--description", "managed-by: pxfleet fleet=dev name=dev-nextcloud\n",
        "--unprivileged", "1",
        "--ssh-public-keys", ANY,
    ];
    r.expect(&expected, Output::ok(""));
    node(&r).create(&full_spec(), None).await.unwrap();
    assert_eq!(r.remaining(), 0);
    let call = &r.calls()[0];
    // The key file: 0600, one key per line, and gone afterwards.
    let key_path = call.argv.last().unwrap();
    let f = call
        .files
        .iter()
        .find(|f| &f.path == key_path)
        .expect("key file existed during the call");
    assert_eq!(f.mode, 0o600);
    assert_eq!(
        String::from_utf8(f.content.clone()).unwrap(),
        "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIA ops@example\nssh-rsa AAAAB3NzaC1yc2E dev@example\n"
    );
    assert!(
        !std::path::Path::new(key_path).exists(),
        "key file removed after create"
    );
    assert!(call.stdin.is_none());
}

#[tokio::test]
async fn create_minimal_has_explicit_rootfs_and_unprivileged() {
    let r = Arc::new(ScriptedRunner::new());
    r.expect(
        &[
            "pct",
            "create",
            "100",
            TEMPLATE,
            "--rootfs",
            "local-lvm:8",
            "--unprivileged",
            "1",
        ],
        Output::ok(""),
    );
    let spec = CreateSpec::new(
        100,
        TEMPLATE,
        RootfsSpec {
            storage: "local-lvm".into(),
            size_gib: 8,
        },
    );
    node(&r).create(&spec, None).await.unwrap();
    let mut privileged = spec.clone();
    privileged.unprivileged = false;
    r.expect(
        &[
            "pct",
            "create",
            "100",
            TEMPLATE,
            "--rootfs",
            "local-lvm:8",
            "--unprivileged",
            "0",
        ],
        Output::ok(""),
    );
    node(&r).create(&privileged, None).await.unwrap();
    assert_eq!(r.remaining(), 0);
}

#[tokio::test]
async fn create_rejects_bad_fields_before_running_anything() {
    let r = Arc::new(ScriptedRunner::new());
    let n = node(&r);
    let base = full_spec();
    type Mutation = Box<dyn Fn(&mut CreateSpec)>;
    let cases: Vec<(&str, Mutation)> = vec![
        ("vmid", Box::new(|s| s.vmid = 99)),
        (
            "template",
            Box::new(|s| s.template = "debian.tar.zst".into()),
        ),
        (
            "hostname",
            Box::new(|s| s.hostname = Some("under_score".into())),
        ),
        ("memory", Box::new(|s| s.memory = Some(8))),
        ("cores", Box::new(|s| s.cores = Some(0))),
        ("cpulimit", Box::new(|s| s.cpulimit = Some(9000.0))),
        (
            "net0.ip",
            Box::new(|s| s.nets.get_mut(&0).unwrap().ip = Some("10.0.0.1".into())),
        ),
        (
            "net0.tag",
            Box::new(|s| s.nets.get_mut(&0).unwrap().tag = Some(5000)),
        ),
        (
            "net0.mtu",
            Box::new(|s| s.nets.get_mut(&0).unwrap().mtu = Some(10)),
        ),
        (
            "net0.hwaddr",
            Box::new(|s| s.nets.get_mut(&0).unwrap().hwaddr = Some("01:00:00:00:00:01".into())),
        ),
        (
            "net0.gw",
            Box::new(|s| s.nets.get_mut(&0).unwrap().gw = Some("fd00::1".into())),
        ),
        ("tags", Box::new(|s| s.tags = vec!["bad tag!".into()])),
        (
            "nameserver",
            Box::new(|s| s.nameservers = vec!["not-an-ip".into()]),
        ),
        (
            "mp0.mp",
            Box::new(|s| s.mount_points.get_mut(&0).unwrap().path = "/a/../b".into()),
        ),
        (
            "rootfs.storage",
            Box::new(|s| s.rootfs.storage = "Bad Storage".into()),
        ),
        (
            "ssh_public_keys",
            Box::new(|s| s.ssh_public_keys = vec!["a\nb".into()]),
        ),
    ];
    for (field, f) in cases {
        let mut s = base.clone();
        f(&mut s);
        match n.create(&s, None).await {
            Err(PveError::Invalid { field: got, .. }) => assert_eq!(got, field),
            other => panic!("{field}: expected Invalid, got {other:?}"),
        }
    }
    assert!(r.calls().is_empty(), "nothing ran");
}

#[tokio::test]
async fn create_already_exists_is_typed() {
    let r = Arc::new(ScriptedRunner::new());
    r.expect(
        &["pct", "create", "100", ANY, ANY, ANY, ANY, ANY],
        Output::fail(255, "CT 100 already exists on node 'pve2'\n"),
    );
    let spec = CreateSpec::new(
        100,
        TEMPLATE,
        RootfsSpec {
            storage: "local-lvm".into(),
            size_gib: 8,
        },
    );
    match node(&r).create(&spec, None).await {
        Err(PveError::AlreadyExists {
            vmid: 100, node, ..
        }) => assert_eq!(node, "pve2"),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn create_task_failure_exit_255_is_task_failed() {
    let r = Arc::new(ScriptedRunner::new());
    r.expect(
        &["pct", "create", "103", ANY, ANY, ANY, ANY, ANY],
        Output::fail(
            255,
            "unable to create CT 103 - can't find file 'local:vztmpl/x.tar.zst'\n",
        ),
    );
    let spec = CreateSpec::new(
        103,
        "local:vztmpl/x.tar.zst",
        RootfsSpec {
            storage: "local-lvm".into(),
            size_gib: 8,
        },
    );
    let e = node(&r).create(&spec, None).await.unwrap_err();
    assert!(
        matches!(&e, PveError::TaskFailed { message, .. } if message.contains("can't find file")),
        "{e:?}"
    );
    assert_eq!(r.remaining(), 0, "not retried");
}

#[tokio::test]
async fn set_sends_existing_mac_back() {
    let r = Arc::new(ScriptedRunner::new());
    r.expect(
        &[
            "pvesh",
            "get",
            "/nodes/pve1/lxc/100/config",
            "--output-format",
            "json",
        ],
        Output::ok(config_json(
            "name=eth0,bridge=vmbr0,hwaddr=BC:24:11:5E:7A:01,ip=dhcp,type=veth",
            "8G",
        )),
    );
    r.expect(
        &[
            "pct",
            "set",
            "100",
            "--net0",
            "name=eth0,bridge=vmbr1,hwaddr=BC:24:11:5E:7A:01,ip=10.0.0.5/24,tag=7",
        ],
        Output::ok(""),
    );
    let mut change = ConfigChange::default();
    change.nets.insert(
        0,
        NetConfig {
            name: "eth0".into(),
            bridge: Some("vmbr1".into()),
            ip: Some("10.0.0.5/24".into()),
            tag: Some(7),
            ..NetConfig::default()
        },
    );
    node(&r).set(100, &change).await.unwrap();
    assert_eq!(r.remaining(), 0);
}

#[tokio::test]
async fn set_golden_argv_every_field_and_deletions() {
    let r = Arc::new(ScriptedRunner::new());
    r.expect(
        &[
            "pct",
            "set",
            "100",
            "--hostname",
            "web2",
            "--cores",
            "8",
            "--cpulimit",
            "2",
            "--cpuunits",
            "1024",
            "--memory",
            "2048",
            "--swap",
            "256",
            "--mp2",
            "local-zfs:10,mp=/data",
            "--net1",
            "name=eth1,bridge=vmbr0,hwaddr=BC:24:11:AA:BB:CC,ip=dhcp",
            "--nameserver",
            "10.0.0.53",
            "--onboot",
            "0",
            "--protection",
            "1",
            "--startup",
            "order=2",
            "--tags",
            "db;pxfleet",
            "--description",
            "hello\n",
            "--delete",
            "cpulimit2,features,searchdomain",
        ],
        Output::ok(""),
    );
    let mut c = ConfigChange {
        hostname: Some("web2".into()),
        cores: Some(8),
        cpulimit: Some(2.0),
        cpuunits: Some(1024),
        memory: Some(2048),
        swap: Some(256),
        features: Some(Features::default()),
        nameservers: Some(vec!["10.0.0.53".into()]),
        searchdomains: Some(vec![]),
        startup: Some(Startup {
            order: Some(2),
            up: None,
            down: None,
        }),
        onboot: Some(false),
        protection: Some(true),
        tags: Some(vec!["pxfleet".into(), "db".into()]),
        description: Some("hello\n".into()),
        ..ConfigChange::default()
    };
    c.nets.insert(
        1,
        NetConfig {
            name: "eth1".into(),
            bridge: Some("vmbr0".into()),
            ip: Some("dhcp".into()),
            hwaddr: Some("BC:24:11:AA:BB:CC".into()),
            ..NetConfig::default()
        },
    );
    c.mount_points.insert(
        2,
        MountPointSpec {
            volume: MountVolume::Storage {
                storage: "local-zfs".into(),
                size_gib: 10,
            },
            path: "/data".into(),
            backup: None,
            read_only: None,
            mount_options: Vec::new(),
            acl: None,
            quota: None,
            replicate: None,
            shared: None,
            keepattrs: None,
            idmap: None,
        },
    );
    c.delete.insert("cpulimit2".into());
    node(&r).set(100, &c).await.unwrap();
    assert_eq!(
        r.remaining(),
        0,
        "no config read: every NIC already had a MAC"
    );
}

#[tokio::test]
async fn set_refuses_empty_and_required_deletions() {
    let r = Arc::new(ScriptedRunner::new());
    let n = node(&r);
    assert!(matches!(
        n.set(100, &ConfigChange::default()).await,
        Err(PveError::Invalid { .. })
    ));
    let mut c = ConfigChange::default();
    c.delete.insert("memory".into());
    assert!(
        matches!(n.set(100, &c).await, Err(PveError::Invalid { field, .. }) if field == "delete")
    );
    assert!(r.calls().is_empty());
}

#[tokio::test]
async fn lock_contention_is_retried_then_succeeds() {
    let r = Arc::new(ScriptedRunner::new());
    let argv = ["pct", "set", "100", "--cores", "2"];
    r.expect(&argv, Output::fail(255, "trying to acquire lock...\ncan't lock file '/run/lock/lxc/pve-config-100.lock' - got timeout\n"));
    r.expect(&argv, Output::fail(255, "CT is locked (backup)\n"));
    r.expect(&argv, Output::ok(""));
    node(&r)
        .set(
            100,
            &ConfigChange {
                cores: Some(2),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(r.remaining(), 0);
}

#[tokio::test]
async fn lock_contention_gives_up_after_policy() {
    let r = Arc::new(ScriptedRunner::new());
    let argv = ["pct", "set", "100", "--cores", "2"];
    for _ in 0..3 {
        r.expect(&argv, Output::fail(255, "CT is locked (snapshot)\n"));
    }
    let e = node(&r)
        .set(
            100,
            &ConfigChange {
                cores: Some(2),
                ..Default::default()
            },
        )
        .await
        .unwrap_err();
    assert!(
        matches!(&e, PveError::Locked { vmid: 100, lock, .. } if lock == "snapshot"),
        "{e:?}"
    );
    assert!(e.retryable());
    assert_eq!(r.calls().len(), 3);
}

#[tokio::test]
async fn create_lock_is_not_retried() {
    let r = Arc::new(ScriptedRunner::new());
    r.expect(
        &["pct", "start", "102"],
        Output::fail(255, "CT is locked (create)\n"),
    );
    let e = node(&r).start(102).await.unwrap_err();
    assert!(matches!(&e, PveError::Locked { lock, .. } if lock == "create"));
    assert_eq!(r.calls().len(), 1);
}

#[tokio::test]
async fn other_failures_are_not_retried() {
    let r = Arc::new(ScriptedRunner::new());
    r.expect(
        &["pct", "set", "100", "--cores", "2"],
        Output::fail(255, "storage 'x' does not exist\n"),
    );
    let e = node(&r)
        .set(
            100,
            &ConfigChange {
                cores: Some(2),
                ..Default::default()
            },
        )
        .await
        .unwrap_err();
    match e {
        PveError::Command {
            argv,
            status,
            stderr,
            retryable,
        } => {
            assert_eq!(argv, "pct set 100 --cores 2");
            assert_eq!(status, Some(255));
            assert_eq!(stderr, "storage 'x' does not exist");
            assert!(!retryable);
        }
        e => panic!("{e:?}"),
    }
}

#[tokio::test]
async fn resize_verifies_by_reading_back() {
    let r = Arc::new(ScriptedRunner::new());
    // Exit 0 but the task failed: the size did not change, so this is an error.
    r.expect(
        &["pct", "resize", "100", "rootfs", "16G"],
        Output::ok("").with_stderr("lvextend failed\n"),
    );
    r.expect(
        &[
            "pvesh",
            "get",
            "/nodes/pve1/lxc/100/config",
            "--output-format",
            "json",
        ],
        Output::ok(config_json("name=eth0", "8G")),
    );
    let e = node(&r).resize(100, "rootfs", 16).await.unwrap_err();
    assert!(
        matches!(&e, PveError::TaskFailed { message, .. } if message.contains("8G") && message.contains("lvextend failed")),
        "{e:?}"
    );

    r.expect(&["pct", "resize", "100", "rootfs", "16G"], Output::ok(""));
    r.expect(
        &[
            "pvesh",
            "get",
            "/nodes/pve1/lxc/100/config",
            "--output-format",
            "json",
        ],
        Output::ok(config_json("name=eth0", "16G")),
    );
    node(&r).resize(100, "rootfs", 16).await.unwrap();

    r.expect(
        &["pct", "resize", "100", "rootfs", "16G"],
        Output::fail(255, "disk is already at specified size\n"),
    );
    r.expect(
        &[
            "pvesh",
            "get",
            "/nodes/pve1/lxc/100/config",
            "--output-format",
            "json",
        ],
        Output::ok(config_json("name=eth0", "16G")),
    );
    node(&r).resize(100, "rootfs", 16).await.unwrap();

    r.expect(
        &["pct", "resize", "100", "rootfs", "4G"],
        Output::fail(255, "unable to shrink disk size\n"),
    );
    assert!(matches!(
        node(&r).resize(100, "rootfs", 4).await,
        Err(PveError::Invalid { .. })
    ));
    assert_eq!(r.remaining(), 0);
}

#[tokio::test]
async fn power_operations_are_idempotent() {
    let r = Arc::new(ScriptedRunner::new());
    r.expect(
        &["pct", "start", "100"],
        Output::fail(255, "CT 100 already running\n"),
    );
    r.expect(
        &["pct", "stop", "100"],
        Output::fail(255, "CT 100 not running\n"),
    );
    r.expect(
        &["pct", "shutdown", "100", "--timeout", "30"],
        Output::fail(255, "CT 100 not running\n"),
    );
    let n = node(&r);
    n.start(100).await.unwrap();
    n.stop(100).await.unwrap();
    assert_eq!(
        n.shutdown(100, Duration::from_secs(30)).await.unwrap(),
        ShutdownOutcome::AlreadyStopped
    );
}

#[tokio::test]
async fn shutdown_falls_back_to_stop() {
    let r = Arc::new(ScriptedRunner::new());
    r.expect(
        &["pct", "shutdown", "100", "--timeout", "5"],
        Output::fail(255, "container did not stop\n"),
    );
    r.expect(&["pct", "stop", "100"], Output::ok(""));
    r.expect(
        &["pct", "shutdown", "101", "--timeout", "5"],
        Output::ok(""),
    );
    let n = node(&r);
    assert_eq!(
        n.shutdown(100, Duration::from_secs(5)).await.unwrap(),
        ShutdownOutcome::Forced
    );
    assert_eq!(
        n.shutdown(101, Duration::from_secs(5)).await.unwrap(),
        ShutdownOutcome::Clean
    );
    assert!(
        r.calls()[0].timeout > Duration::from_secs(5),
        "process timeout exceeds the shutdown timeout"
    );
}

#[tokio::test]
async fn shutdown_of_missing_ct_is_not_found() {
    let r = Arc::new(ScriptedRunner::new());
    r.expect(
        &["pct", "shutdown", "999", "--timeout", "5"],
        Output::fail(
            255,
            "Configuration file 'nodes/pve1/lxc/999.conf' does not exist\n",
        ),
    );
    assert!(matches!(
        node(&r).shutdown(999, Duration::from_secs(5)).await,
        Err(PveError::NotFound { vmid: 999, .. })
    ));
    assert_eq!(r.remaining(), 0);
}

#[tokio::test]
async fn destroy_purges_and_reports_protection() {
    let r = Arc::new(ScriptedRunner::new());
    let argv = [
        "pct",
        "destroy",
        "100",
        "--force",
        "1",
        "--purge",
        "1",
        "--destroy-unreferenced-disks",
        "1",
    ];
    r.expect(
        &argv,
        Output::ok("purging CT 100 from related configurations..\n"),
    );
    r.expect(
        &argv,
        Output::fail(255, "can't remove CT 100 - protection mode enabled\n"),
    );
    r.expect(
        &argv,
        Output::fail(
            255,
            "Configuration file 'nodes/pve1/lxc/100.conf' does not exist\n",
        ),
    );
    let n = node(&r);
    n.destroy(100).await.unwrap();
    assert!(matches!(
        n.destroy(100).await,
        Err(PveError::Protected { vmid: 100, .. })
    ));
    assert!(matches!(
        n.destroy(100).await,
        Err(PveError::NotFound { .. })
    ));
}

#[tokio::test]
async fn unlock_and_migrate() {
    let r = Arc::new(ScriptedRunner::new());
    r.expect(&["pct", "unlock", "102"], Output::ok(""));
    r.expect(
        &["pct", "unlock", "102"],
        Output::fail(255, "no lock found trying to remove any lock\n"),
    );
    r.expect(
        &["pct", "migrate", "100", "pve2", "--restart", "1"],
        Output::ok(""),
    );
    r.expect(
        &["pct", "migrate", "101", "pve2"],
        Output::fail(255, "migration aborted\n"),
    );
    let n = node(&r);
    n.unlock(102).await.unwrap();
    n.unlock(102).await.unwrap();
    n.migrate(100, "pve2", true).await.unwrap();
    assert!(n.migrate(101, "pve2", false).await.is_err());
    assert!(matches!(
        n.migrate(101, "bad node!", false).await,
        Err(PveError::Invalid { .. })
    ));
}

#[tokio::test]
async fn create_sets_the_password_from_stdin_without_starting() {
    let r = Arc::new(ScriptedRunner::new());
    let spec = CreateSpec::new(
        100,
        TEMPLATE,
        RootfsSpec {
            storage: "local-lvm".into(),
            size_gib: 8,
        },
    );
    r.expect(
        &[
            "pct",
            "create",
            "100",
            TEMPLATE,
            "--rootfs",
            "local-lvm:8",
            "--unprivileged",
            "1",
            "--password",
        ],
        Output::ok(""),
    );
    r.expect(
        &[
            "pct",
            "create",
            "101",
            TEMPLATE,
            ANY,
            ANY,
            ANY,
            ANY,
            "--password",
        ],
        Output::fail(
            255,
            "unable to create CT 101 - command 'chroot ... usermod -p Hunter2:x root' failed\n",
        ),
    );
    let n = node(&r);
    let pw = Secret::new("Hunter2:x");
    n.create(&spec, Some(&pw)).await.unwrap();
    let call = &r.calls()[0];
    // pct's interactive password: the password and its confirmation, each a line
    assert_eq!(call.stdin.as_deref(), Some(&b"Hunter2:x\nHunter2:x\n"[..]));
    assert!(call.argv.iter().all(|a| !a.contains("Hunter2")));
    let mut other = spec.clone();
    other.vmid = 101;
    let e = n.create(&other, Some(&pw)).await.unwrap_err();
    assert!(
        !format!("{e} {e:?}").contains("Hunter2"),
        "secret scrubbed from errors: {e}"
    );
    // refused before anything runs: too short for PVE, or a second line on stdin
    for bad in ["abc", "two\nlines"] {
        let e = n.create(&spec, Some(&Secret::new(bad))).await.unwrap_err();
        assert!(matches!(e, PveError::Invalid { .. }), "{e}");
    }
    assert_eq!(r.calls().len(), 2);
}

#[tokio::test]
async fn root_password_only_on_stdin() {
    let r = Arc::new(ScriptedRunner::new());
    r.expect(
        &["pct", "exec", "100", "--keep-env", "0", "--", "chpasswd"],
        Output::ok(""),
    );
    r.expect(
        &["pct", "exec", "101", "--keep-env", "0", "--", "chpasswd"],
        Output::fail(255, "container '101' not running!\n"),
    );
    r.expect(
        &["pct", "exec", "102", "--keep-env", "0", "--", "chpasswd"],
        Output::fail(
            1,
            "chpasswd: (user root) pam_chauthtok() failed, Hunter2:x\n",
        ),
    );
    let n = node(&r);
    let pw = Secret::new("Hunter2:x");
    n.set_root_password(100, &pw).await.unwrap();
    let call = &r.calls()[0];
    assert_eq!(call.stdin.as_deref(), Some(&b"root:Hunter2:x\n"[..]));
    assert!(call.argv.iter().all(|a| !a.contains("Hunter2")));
    assert!(matches!(
        n.set_root_password(101, &pw).await,
        Err(PveError::NotRunning { vmid: 101, .. })
    ));
    let e = n.set_root_password(102, &pw).await.unwrap_err();
    assert!(
        !format!("{e} {e:?}").contains("Hunter2"),
        "secret scrubbed from errors: {e}"
    );
    let short = n
        .set_root_password(100, &Secret::new("abc"))
        .await
        .unwrap_err();
    assert!(!format!("{short}").contains("abc`"), "{short}");
    assert_eq!(r.calls().len(), 3);
}

#[tokio::test]
async fn reads_use_pvesh_json() {
    let r = Arc::new(ScriptedRunner::new());
    r.expect(
        &["pvesh", "get", "/nodes/pve1/lxc", "--output-format", "json"],
        Output::ok(
            "[{\"vmid\":\"101\",\"status\":\"stopped\"},{\"vmid\":100,\"status\":\"running\"}]\n",
        ),
    );
    r.expect(
        &[
            "pvesh",
            "get",
            "/nodes/pve1/lxc/101/interfaces",
            "--output-format",
            "json",
        ],
        Output::ok("null\n"),
    );
    r.expect(
        &[
            "pvesh",
            "get",
            "/nodes/pve1/lxc/100/status/current",
            "--output-format",
            "json",
        ],
        Output::ok("{\"vmid\":100,\"status\":\"running\"}"),
    );
    r.expect(&["pvesh", "get", "/nodes/pve1/network", "--output-format", "json", "--type", "any_bridge"], Output::ok("[{\"iface\":\"vmbr1\",\"type\":\"bridge\"},{\"iface\":\"vmbr0\",\"type\":\"OVSBridge\"}]"));
    r.expect(&["pvesh", "get", "/nodes/pve1/storage", "--output-format", "json"], Output::ok("[{\"storage\":\"local\",\"type\":\"dir\",\"content\":\"vztmpl,iso\",\"avail\":\"100\"}]"));
    r.expect(
        &[
            "pvesh",
            "get",
            "/nodes/pve1/storage/local/content",
            "--output-format",
            "json",
            "--content",
            "vztmpl",
        ],
        Output::ok("[]"),
    );
    r.expect(
        &["pvesh", "get", "/nodes/pve2/tasks/UPID:pve2:0003C8E1:0071A2B4:6711F0A2:vzcreate:103:root@pam:/status", "--output-format", "json"],
        Output::ok("{\"upid\":\"UPID:pve2:0003C8E1:0071A2B4:6711F0A2:vzcreate:103:root@pam:\",\"status\":\"stopped\",\"exitstatus\":\"unable to create CT 103 - x\"}"),
    );
    r.expect(
        &["pvesh", "get", "/version", "--output-format", "json"],
        Output::ok("{\"version\":\"9.1.2\"}"),
    );
    r.expect(&["pvesh", "get", "/nodes/pve1/status", "--output-format", "json"], Output::ok("{\"loadavg\":[\"0.5\",\"1\",\"2\"],\"memory\":{\"total\":\"1024\",\"used\":1,\"free\":2}}"));
    r.expect(
        &[
            "pvesh",
            "get",
            "/nodes/pve1/lxc/999/config",
            "--output-format",
            "json",
        ],
        Output::fail(
            2,
            "Configuration file 'nodes/pve1/lxc/999.conf' does not exist\n",
        ),
    );
    r.expect(
        &[
            "pvesh",
            "get",
            "/nodes/pve1/lxc/100/config",
            "--output-format",
            "json",
        ],
        Output::ok("not json"),
    );
    let n = node(&r);
    let cts = n.list_containers().await.unwrap();
    assert_eq!(
        cts.iter().map(|c| c.vmid).collect::<Vec<_>>(),
        vec![100, 101]
    );
    assert!(n.interfaces(101).await.unwrap().is_empty());
    assert!(n.is_running(100).await.unwrap());
    let br = n.bridges().await.unwrap();
    assert_eq!(br[0].iface, "vmbr0");
    let st = n.storages().await.unwrap();
    assert!(st[0].holds_vztmpl());
    assert_eq!(st[0].avail, 100);
    assert!(n.templates("local").await.unwrap().is_empty());
    let t = n
        .task_status("UPID:pve2:0003C8E1:0071A2B4:6711F0A2:vzcreate:103:root@pam:")
        .await
        .unwrap();
    assert!(!t.succeeded());
    assert_eq!(n.version().await.unwrap().major(), Some(9));
    let ns = n.node_status().await.unwrap();
    assert_eq!(ns.loadavg, vec![0.5, 1.0, 2.0]);
    assert_eq!(ns.memory.total, 1024);
    assert!(matches!(
        n.config(999).await,
        Err(PveError::NotFound { vmid: 999, .. })
    ));
    assert!(
        matches!(n.config(100).await, Err(PveError::Parse { argv, .. }) if argv.contains("/lxc/100/config"))
    );
    assert_eq!(r.remaining(), 0);
}

#[tokio::test]
async fn pvesh_json_after_task_log_is_found() {
    let r = Arc::new(ScriptedRunner::new());
    r.expect(
        &["pvesh", "get", "/version", "--output-format", "json"],
        Output::ok("some task line\nanother\n{\"version\":\"8.4.1\",\"release\":\"8.4\"}\n"),
    );
    assert_eq!(node(&r).version().await.unwrap().major(), Some(8));
}

#[tokio::test]
async fn template_dir_and_download() {
    let r = Arc::new(ScriptedRunner::new());
    r.expect(
        &["pvesm", "path", "local:vztmpl/pxfleet-probe.tar.zst"],
        Output::ok("/var/lib/vz/template/cache/pxfleet-probe.tar.zst\n"),
    );
    r.expect(
        &["pvesm", "path", "nfs:vztmpl/pxfleet-probe.tar.zst"],
        Output::ok("garbage\n"),
    );
    let name = "debian-13-standard_13.6-1_amd64.tar.zst";
    let content = format!("[{{\"volid\":\"local:vztmpl/{name}\",\"size\":1}}]");
    // Exit 0 but nothing arrived: failure, with the task's stderr.
    r.expect(
        &["pveam", "download", "local", name],
        Output::ok("").with_stderr("checksum mismatch: got 'a' != expect 'b', aborting\n"),
    );
    r.expect(
        &[
            "pvesh",
            "get",
            "/nodes/pve1/storage/local/content",
            "--output-format",
            "json",
            "--content",
            "vztmpl",
        ],
        Output::ok("[]"),
    );
    r.expect(
        &["pveam", "download", "local", name],
        Output::ok("download finished\n"),
    );
    r.expect(
        &[
            "pvesh",
            "get",
            "/nodes/pve1/storage/local/content",
            "--output-format",
            "json",
            "--content",
            "vztmpl",
        ],
        Output::ok(content),
    );
    let n = node(&r);
    assert_eq!(
        n.template_dir("local").await.unwrap(),
        std::path::PathBuf::from("/var/lib/vz/template/cache")
    );
    assert!(matches!(
        n.template_dir("nfs").await,
        Err(PveError::Parse { .. })
    ));
    let e = n.pveam_download("local", name).await.unwrap_err();
    assert!(
        matches!(&e, PveError::TaskFailed { message, .. } if message.contains("checksum mismatch")),
        "{e:?}"
    );
    n.pveam_download("local", name).await.unwrap();
    assert_eq!(r.remaining(), 0);
}

#[tokio::test]
async fn timeout_is_an_error_with_argv() {
    let r = Arc::new(ScriptedRunner::new());
    r.expect_timeout(&["pct", "start", "100"]);
    let e = node(&r).start(100).await.unwrap_err();
    assert!(e.to_string().contains("pct start 100"), "{e}");
    assert!(!e.retryable());
}
