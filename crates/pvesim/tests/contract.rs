//! The contract suite: temporary pvesim nodes (and two-node simulated clusters) driven through the real
//! driver, `pxfleet_pve::Node` over `ProcessRunner`, checking each item of CONTRACT §9 (the simulator checklist)
//! and every `Node` operation the agent relies on. A failure here means pvesim and the driver disagree; which
//! side is wrong is decided by `../shared/pve/CONTRACT.md`, not by this file.
//!
//! The last test replays the "What I will run" sequence of issue 3 at the CLI level and compares the layouts
//! with the captured PVE examples (the copy in `crates/pve/tests/fixtures`).

// Test code: it starts the programs under test and the tools around them.
#![allow(clippy::disallowed_methods)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use pxfleet_pve::parse::{self, ContainerConfig, ContainerStatus, RunState};
use pxfleet_pve::spec::{MountVolume, NetConfig};
use pxfleet_pve::{
    ConfigChange, CreateSpec, MountPointSpec, Node, ProcessRunner, PveError, RetryPolicy,
    RootfsSpec, Secret, ShutdownOutcome,
};

const TMPL_FILE: &str = "debian-13-standard_13.6-1_amd64.tar.zst";
const TMPL: &str = "local:vztmpl/debian-13-standard_13.6-1_amd64.tar.zst";

/// A temporary directory holding node state directories and the tool links.
struct Sim {
    dir: tempfile::TempDir,
}

struct Out {
    stdout: String,
    stderr: String,
    code: i32,
}

impl Sim {
    fn new() -> Sim {
        Sim {
            dir: tempfile::tempdir().expect("tempdir"),
        }
    }

    fn bin(&self) -> PathBuf {
        self.dir.path().join("bin")
    }

    fn state(&self, node: &str) -> PathBuf {
        self.dir.path().join(node)
    }

    /// `pvesim init --state D --node N --bin-dir BIN [--cluster C] [--config F]`; `cluster_of` names the node
    /// whose state directory is the cluster directory.
    fn init(&self, node: &str, cluster_of: Option<&str>, config: Option<&str>) {
        let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_pvesim"));
        c.args(["init", "--state"])
            .arg(self.state(node))
            .args(["--node", node, "--bin-dir"])
            .arg(self.bin());
        if let Some(cl) = cluster_of {
            c.arg("--cluster").arg(self.state(cl));
        }
        if let Some(cfg) = config {
            let p = self.dir.path().join(format!("{node}.toml"));
            std::fs::write(&p, cfg).expect("write config");
            c.arg("--config").arg(p);
        }
        let o = c.output().expect("run pvesim init");
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }

    /// The driver for `node`, with quick retries unless a test says otherwise.
    fn node(&self, name: &str) -> Node {
        self.node_with(name, quick_retry())
    }

    fn node_with(&self, name: &str, retry: RetryPolicy) -> Node {
        let runner = ProcessRunner::with_bin_dir(self.bin())
            .with_env("PVESIM_STATE", self.state(name).display().to_string());
        Node::new(name, Arc::new(runner)).with_retry(retry)
    }

    /// Runs a tool as a user would (for CLI-level checks and for setting up states the driver never makes).
    fn cli(&self, node: &str, tool: &str, args: &[&str]) -> Out {
        self.cli_stdin(node, tool, args, None)
    }

    fn cli_stdin(&self, node: &str, tool: &str, args: &[&str], stdin: Option<&str>) -> Out {
        use std::io::Write;
        use std::process::Stdio;
        let mut child = std::process::Command::new(self.bin().join(tool))
            .args(args)
            .env("PVESIM_STATE", self.state(node))
            .stdin(if stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn tool");
        if let (Some(s), Some(mut pipe)) = (stdin, child.stdin.take()) {
            pipe.write_all(s.as_bytes()).expect("write stdin");
        }
        let o = child.wait_with_output().expect("wait tool");
        Out {
            stdout: String::from_utf8_lossy(&o.stdout).into(),
            stderr: String::from_utf8_lossy(&o.stderr).into(),
            code: o.status.code().unwrap_or(-1),
        }
    }
}

fn quick_retry() -> RetryPolicy {
    RetryPolicy {
        attempts: 3,
        base_delay: Duration::from_millis(50),
        max_delay: Duration::from_millis(200),
    }
}

/// One node `pve1` with the template downloaded through the driver.
async fn seeded(config: Option<&str>) -> (Sim, Node) {
    let s = Sim::new();
    s.init("pve1", None, config);
    let n = s.node("pve1");
    n.pveam_download("local", TMPL_FILE)
        .await
        .expect("pveam download");
    (s, n)
}

/// Two nodes `pve1`, `pve2` sharing pve1's cluster directory, both seeded.
async fn cluster() -> (Sim, Node, Node) {
    let s = Sim::new();
    s.init("pve1", None, None);
    s.init("pve2", Some("pve1"), None);
    let (a, b) = (s.node("pve1"), s.node("pve2"));
    for n in [&a, &b] {
        n.pveam_download("local", TMPL_FILE)
            .await
            .expect("pveam download");
    }
    (s, a, b)
}

fn spec(vmid: u32, storage: &str, gib: u32) -> CreateSpec {
    CreateSpec::new(
        vmid,
        TMPL,
        RootfsSpec {
            storage: storage.into(),
            size_gib: gib,
        },
    )
}

fn nic(name: &str, ip: &str) -> NetConfig {
    NetConfig {
        name: name.into(),
        bridge: Some("vmbr0".into()),
        ip: Some(ip.into()),
        ..NetConfig::default()
    }
}

fn fixture(name: &str) -> String {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../pve/tests/fixtures")
        .join(name);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn is_generated_mac(m: &str) -> bool {
    regex::Regex::new(r"^BC:24:11:[0-9A-F]{2}:[0-9A-F]{2}:[0-9A-F]{2}$")
        .expect("regex")
        .is_match(m)
}

/// A syntactically valid ed25519 public key line (what `ssh-keygen -l` accepts).
fn ed25519_key(seed: u8, comment: &str) -> String {
    use base64::Engine;
    let mut blob = Vec::new();
    blob.extend_from_slice(&11u32.to_be_bytes());
    blob.extend_from_slice(b"ssh-ed25519");
    blob.extend_from_slice(&32u32.to_be_bytes());
    blob.extend_from_slice(&[seed; 32]);
    format!(
        "ssh-ed25519 {} {comment}",
        base64::engine::general_purpose::STANDARD.encode(blob)
    )
}

async fn volumes(s: &Sim, node: &str, storage: &str) -> Vec<parse::PvesmVolume> {
    let o = s.cli(node, "pvesm", &["list", storage]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    parse::parse_pvesm_list(&o.stdout).expect("pvesm list parses")
}

// ----- §9.4-9.7: create, normalised values, MACs kept across set ----------------------------------------------

#[tokio::test]
async fn create_gives_normalised_config_and_set_keeps_the_mac() {
    let (s, n) = seeded(None).await;
    let mut sp = spec(200, "local-lvm", 8);
    sp.hostname = Some("web1".into());
    sp.nets.insert(0, nic("eth0", "dhcp"));
    sp.tags = vec!["web".into(), "Prod".into(), "web".into()];
    sp.nameservers = vec!["1.1.1.1".into(), "9.9.9.9".into()];
    sp.searchdomains = vec!["example.org".into()];
    sp.description = Some("line one\nline: two".into());
    sp.features.nesting = true;
    n.create(&sp, None).await.expect("create");

    let c = n.config(200).await.expect("config");
    assert_eq!(c.lock, None, "lock removed at the end of create");
    assert_eq!(c.hostname.as_deref(), Some("web1"));
    assert_eq!(
        c.raw["rootfs"], "local-lvm:vm-200-disk-0,size=8G",
        "disk name and format_size"
    );
    assert_eq!(c.rootfs_size(), Some(8 << 30));
    let mac = c.hwaddr(0).expect("net0 has a MAC").to_string();
    assert!(is_generated_mac(&mac), "{mac}");
    assert_eq!(
        c.raw["net0"],
        format!("name=eth0,bridge=vmbr0,hwaddr={mac},ip=dhcp,type=veth"),
        "stored form: name first, then alphabetical, type=veth"
    );
    assert_eq!(c.raw["tags"], "prod;web");
    assert_eq!(c.tags, ["prod", "web"]);
    assert_eq!(c.raw["nameserver"], "1.1.1.1 9.9.9.9");
    assert_eq!(c.raw["searchdomain"], "example.org");
    assert!(c.unprivileged, "unprivileged: 1 written");
    assert_eq!((c.memory, c.swap), (Some(512), Some(512)), "defaults");
    assert_eq!(c.arch.as_deref(), Some("amd64"));
    assert_eq!(c.ostype.as_deref(), Some("debian"));
    assert!(c.features.nesting);
    assert_eq!(c.description.as_deref(), Some("line one\nline: two\n"));
    let text = s.cli("pve1", "pct", &["config", "200"]).stdout;
    assert!(
        text.starts_with("arch: amd64\ndescription: line one%0Aline%3A two%0A\n"),
        "pct config: sorted keys, description %-encoded: {text}"
    );
    assert!(!text.contains("digest"), "{text}");
    let mut from_json = c.clone();
    assert!(
        from_json.raw.remove("digest").is_some(),
        "pvesh config has a digest"
    );
    from_json.digest = None;
    assert_eq!(
        ContainerConfig::from_pct_config(&text).expect("pct config parses"),
        from_json,
        "pct config and pvesh config agree"
    );

    let st = &n.list_containers().await.expect("list")[0];
    assert_eq!(st.name.as_deref(), Some("web1"));
    assert_eq!(st.maxdisk, Some(8 << 30));
    assert_eq!(
        st.tags.iter().map(String::as_str).collect::<Vec<_>>(),
        ["prod", "web"]
    );

    // The driver sends the current MAC back, so a NIC change keeps it (PVE would generate a new one).
    let change = ConfigChange {
        nets: BTreeMap::from([(0, nic("eth0", "192.168.7.50/24"))]),
        cores: Some(2),
        tags: Some(vec![]),
        ..ConfigChange::default()
    };
    n.set(200, &change).await.expect("set");
    let c2 = n.config(200).await.expect("config");
    assert_eq!(c2.hwaddr(0), Some(mac.as_str()), "MAC kept across set");
    assert_eq!(c2.nets[&0].ip.as_deref(), Some("192.168.7.50/24"));
    assert_eq!(c2.cores, Some(2));
    assert!(c2.tags.is_empty(), "empty tags deleted");
    // ... and PVE itself does generate a new one when hwaddr is left out.
    let o = s.cli(
        "pve1",
        "pct",
        &["set", "200", "--net0", "name=eth0,bridge=vmbr0,ip=dhcp"],
    );
    assert_eq!((o.code, o.stdout.as_str()), (0, ""), "{}", o.stderr);
    let c3 = n.config(200).await.expect("config");
    let mac3 = c3.hwaddr(0).expect("mac");
    assert!(is_generated_mac(mac3) && mac3 != mac, "{mac3} vs {mac}");
}

// ----- PVE 9.1 runtime options: env, entrypoint, host-managed NICs ----------------------------------------------

#[tokio::test]
async fn env_entrypoint_and_host_managed_nics() {
    let (s, n) = seeded(None).await;
    let mut sp = spec(210, "local-lvm", 2);
    sp.env = Some(BTreeMap::from([(
        "APP_PORT".to_string(),
        "8080".to_string(),
    )]));
    sp.entrypoint = Some("/usr/local/bin/app --serve".into());
    sp.nets.insert(
        0,
        NetConfig {
            host_managed: Some(true),
            ..nic("lan0", "dhcp")
        },
    );
    n.create(&sp, None).await.expect("create");
    // env is no `pct create` argument (a NUL cannot be in one): the caller writes the lines into the file.
    assert!(n.config(210).await.expect("config").env.is_empty());
    let three = BTreeMap::from([
        ("APP_PORT".to_string(), "8080".to_string()),
        ("DB_URL".to_string(), "pg://db/app?x=1".to_string()),
        ("MODE".to_string(), String::new()),
    ]);
    let dir = s.state("pve1").join("nodes/pve1/lxc");
    pxfleet_pve::conffile::write_env(&dir, 210, &three).expect("write env");
    let c = n.config(210).await.expect("config");
    assert_eq!(c.env, three);
    assert_eq!(c.entrypoint.as_deref(), Some("/usr/local/bin/app --serve"));
    assert_eq!(c.nets[&0].name, "lan0");
    assert_eq!(c.nets[&0].host_managed, Some(true));
    assert!(
        c.raw["net0"].contains(",host-managed=1,"),
        "{}",
        c.raw["net0"]
    );
    // The file keeps env as lxc.environment.runtime lines after the sorted keys (CONTRACT §7), and pvesim
    // rewrites it (a `pct set`) keeping them where PVE writes them.
    let o = s.cli("pve1", "pct", &["set", "210", "--cores", "2"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let file = std::fs::read_to_string(dir.join("210.conf")).expect("conf");
    assert!(
        file.ends_with("\nlxc.environment.runtime: APP_PORT=8080\nlxc.environment.runtime: DB_URL=pg://db/app?x=1\nlxc.environment.runtime: MODE=\n"),
        "{file}"
    );
    assert!(!file.contains("\nenv:"), "{file}");
    // `pct config` and the API show one `env` value, NUL-separated.
    let text = s.cli("pve1", "pct", &["config", "210"]).stdout;
    assert!(
        text.contains("\nenv: APP_PORT=8080\0DB_URL=pg://db/app?x=1\0MODE=\n"),
        "{text:?}"
    );
    let json = s.cli(
        "pve1",
        "pvesh",
        &[
            "get",
            "/nodes/pve1/lxc/210/config",
            "--output-format",
            "json",
        ],
    );
    let v: serde_json::Value = serde_json::from_str(&json.stdout).expect("json");
    assert_eq!(
        v["env"],
        "APP_PORT=8080\u{0}DB_URL=pg://db/app?x=1\u{0}MODE="
    );
    // One changed, one removed: the set is replaced.
    let two = BTreeMap::from([
        ("APP_PORT".to_string(), "9090".to_string()),
        ("DB_URL".to_string(), "pg://db/app?x=1".to_string()),
    ]);
    pxfleet_pve::conffile::write_env(&dir, 210, &two).expect("write env");
    assert_eq!(n.config(210).await.expect("config").env, two);

    // On a running CT both are read at the next start: pending, shown merged by pct config.
    n.start(210).await.expect("start");
    let o = s.cli("pve1", "pct", &["set", "210", "--env", "APP_PORT=7070"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let change = ConfigChange {
        entrypoint: Some("/usr/local/bin/app".into()),
        ..ConfigChange::default()
    };
    n.set(210, &change).await.expect("set");
    let pending: Vec<String> = n
        .pending(210)
        .await
        .expect("pending")
        .into_iter()
        .filter(|p| p.pending.is_some())
        .map(|p| p.key)
        .collect();
    assert!(
        pending.contains(&"env".to_string()) && pending.contains(&"entrypoint".to_string()),
        "{pending:?}"
    );
    let c = n.config(210).await.expect("config");
    assert_eq!(
        c.env,
        BTreeMap::from([("APP_PORT".to_string(), "7070".to_string())])
    );

    // host-managed NICs have no SLAAC.
    let o = s.cli(
        "pve1",
        "pct",
        &[
            "set",
            "210",
            "--net1",
            "name=eth1,bridge=vmbr0,ip6=auto,host-managed=1",
        ],
    );
    assert_ne!(o.code, 0);
    assert!(
        o.stderr
            .contains("SLAAC is not supported for host-managed network configuration"),
        "{}",
        o.stderr
    );
    // A name outside \w is refused by PVE's pattern.
    let o = s.cli("pve1", "pct", &["set", "210", "--env", "APP-PORT=1"]);
    assert_ne!(o.code, 0);
    assert!(
        o.stderr
            .contains("env: value does not match the regex pattern"),
        "{}",
        o.stderr
    );
}

// ----- pct template, pct clone (linked from a template, full from anything) ------------------------------------

#[tokio::test]
async fn templates_are_cloned_linked_or_full() {
    use pxfleet_pve::CloneSpec;
    let (s, n) = seeded(None).await;
    let mut sp = spec(9000, "local-lvm", 2);
    sp.hostname = Some("golden".into());
    sp.nets.insert(0, nic("eth0", "dhcp"));
    n.create(&sp, None).await.expect("create");
    let src_mac = n
        .config(9000)
        .await
        .expect("config")
        .hwaddr(0)
        .unwrap()
        .to_string();
    let clone = |vmid: u32, full: bool, storage: Option<&str>| CloneSpec {
        source: 9000,
        vmid,
        hostname: Some(format!("web{vmid}")),
        full,
        storage: storage.map(String::from),
        description: None,
    };
    // Linked clones come from templates only.
    let e = n.clone_ct(&clone(301, false, None)).await.unwrap_err();
    assert!(e.to_string().contains("not a template"), "{e}");
    n.template(9000).await.expect("template");
    assert!(n.config(9000).await.expect("config").template);
    let e = n.start(9000).await.unwrap_err();
    assert!(
        e.to_string()
            .contains("you can't start a CT if it's a template"),
        "{e}"
    );
    let o = s.cli("pve1", "pct", &["template", "9000"]);
    assert!(
        o.stderr
            .contains("you can't convert a template to a template"),
        "{}",
        o.stderr
    );

    n.clone_ct(&clone(301, false, None))
        .await
        .expect("linked clone");
    let c = n.config(301).await.expect("config");
    assert_eq!(c.hostname.as_deref(), Some("web301"));
    assert!(!c.template && c.lock.is_none());
    assert!(
        c.raw["rootfs"].starts_with("local-lvm:"),
        "{}",
        c.raw["rootfs"]
    );
    assert_eq!(c.rootfs_size(), Some(2 << 30));
    let mac = c.hwaddr(0).unwrap();
    assert!(
        is_generated_mac(mac) && mac != src_mac,
        "a clone gets its own MAC"
    );
    n.start(301).await.expect("a clone runs");

    // A full copy may go to another storage; a linked one may not, and only where the storage can.
    n.clone_ct(&clone(302, true, Some("local-zfs")))
        .await
        .expect("full clone");
    assert!(n.config(302).await.expect("config").raw["rootfs"].starts_with("local-zfs:"));
    let o = s.cli(
        "pve1",
        "pct",
        &["clone", "9000", "303", "--full", "0", "--storage", "local"],
    );
    assert_ne!(o.code, 0);
    assert!(o.stderr.contains("storage"), "{}", o.stderr);
    // The id is taken: refused before anything is made.
    let e = n.clone_ct(&clone(301, true, None)).await.unwrap_err();
    assert!(
        matches!(e, PveError::AlreadyExists { vmid: 301, .. }),
        "{e}"
    );

    let mut dir = spec(9100, "local", 2);
    dir.hostname = Some("dirbase".into());
    n.create(&dir, None).await.expect("create on dir");
    n.template(9100).await.expect("template");
    let o = s.cli("pve1", "pct", &["clone", "9100", "304"]);
    assert_ne!(o.code, 0, "{}", o.stderr);
    assert!(
        o.stderr.contains("linked clone feature for 'local:"),
        "{}",
        o.stderr
    );
    assert!(
        !s.state("pve1").join("nodes/pve1/lxc/304.conf").exists(),
        "nothing left behind"
    );
}

#[tokio::test]
async fn defaults_and_mount_points_on_other_storages() {
    let (_s, n) = seeded(None).await;
    let mut sp = spec(201, "local-zfs", 2);
    sp.unprivileged = false;
    sp.mount_points.insert(
        0,
        MountPointSpec {
            volume: MountVolume::Storage {
                storage: "local-lvm".into(),
                size_gib: 3,
            },
            path: "/srv/data".into(),
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
    sp.mount_points.insert(
        1,
        MountPointSpec {
            volume: MountVolume::Storage {
                storage: "local-zfs".into(),
                size_gib: 1,
            },
            path: "/srv/logs".into(),
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
    n.create(&sp, None).await.expect("create");
    let c = n.config(201).await.expect("config");
    assert_eq!(c.raw["rootfs"], "local-zfs:subvol-201-disk-0,size=2G");
    assert_eq!(
        c.raw["mp1"], "local-zfs:subvol-201-disk-1,mp=/srv/logs,ro=1,size=1G",
        "volume, mp, then alphabetical; lowest free disk index on that storage"
    );
    assert_eq!(
        c.raw["mp0"], "local-lvm:vm-201-disk-0,mp=/srv/data,backup=1,size=3G",
        "volume, mp, then alphabetical; lowest free disk index"
    );
    assert_eq!(
        c.hostname.as_deref(),
        Some("CT201"),
        "hostname defaults to CT<vmid>"
    );
    assert!(!c.unprivileged, "explicit --unprivileged 0 kept");
    assert_eq!(c.disk_size("mp0"), Some(3 << 30));
}

// ----- §9.4: lock: create while the task runs -----------------------------------------------------------------

#[tokio::test]
async fn create_lock_is_visible_during_a_slow_create() {
    let (s, n) = seeded(Some("[latency]\ncreate_ms = 2500\n")).await;
    let n2 = n.clone();
    let creating = tokio::spawn(async move { n2.create(&spec(300, "local-lvm", 1), None).await });
    let deadline = Instant::now() + Duration::from_secs(2);
    let seen = loop {
        let l = n.list_containers().await.expect("list");
        if let Some(c) = l.iter().find(|c| c.vmid == 300) {
            break c.clone();
        }
        assert!(Instant::now() < deadline, "CT 300 never appeared");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(seen.lock.as_deref(), Some("create"));
    assert_eq!(seen.status, RunState::Stopped);
    assert_eq!(
        n.config(300).await.expect("config").lock.as_deref(),
        Some("create")
    );
    let list = parse::parse_pct_list(&s.cli("pve1", "pct", &["list"]).stdout).expect("pct list");
    assert_eq!(list[0].lock.as_deref(), Some("create"), "Lock column");

    // destroy checks the lock before waiting for the config lock: the typed error, at once, not retried.
    let t = Instant::now();
    match n.destroy(300).await {
        Err(PveError::Locked {
            vmid: 300, lock, ..
        }) => assert_eq!(lock, "create"),
        other => panic!("expected Locked(create), got {other:?}"),
    }
    assert!(t.elapsed() < Duration::from_secs(1), "{:?}", t.elapsed());
    // The ID is already taken.
    match n.create(&spec(300, "local-lvm", 1), None).await {
        Err(PveError::AlreadyExists {
            vmid: 300,
            node,
            kind,
        }) => {
            assert_eq!((node.as_str(), kind.as_str()), ("pve1", "CT"))
        }
        other => panic!("expected AlreadyExists, got {other:?}"),
    }

    creating.await.expect("join").expect("create finishes");
    assert_eq!(n.config(300).await.expect("config").lock, None);
}

// ----- §9.10: vmid uniqueness, other node's CT ----------------------------------------------------------------

#[tokio::test]
async fn vmids_are_unique_across_the_cluster_and_qemu() {
    let (s, a, b) = cluster().await;
    a.create(&spec(100, "local-lvm", 1), None)
        .await
        .expect("create");
    for n in [&a, &b] {
        match n.create(&spec(100, "local-lvm", 1), None).await {
            Err(PveError::AlreadyExists {
                vmid: 100,
                node,
                kind,
            }) => {
                assert_eq!((node.as_str(), kind.as_str()), ("pve1", "CT"))
            }
            other => panic!("{}: expected AlreadyExists, got {other:?}", n.name()),
        }
    }
    let o = s.cli("pve2", "pct", &["create", "100", TMPL]);
    assert_eq!(
        (o.stderr.as_str(), o.code),
        ("CT 100 already exists on node 'pve1'\n", 255)
    );
    // The CT of another node is "missing" for every pct command on this node.
    match b.config(100).await {
        Err(PveError::NotFound {
            vmid: 100, node, ..
        }) => assert_eq!(node, "pve2"),
        other => panic!("expected NotFound, got {other:?}"),
    }
    assert!(matches!(b.start(100).await, Err(PveError::NotFound { .. })));
    assert!(matches!(
        b.destroy(100).await,
        Err(PveError::NotFound { .. })
    ));

    // A qemu VM reserves its id too.
    let qdir = s.state("pve1").join("nodes/pve2/qemu-server");
    std::fs::create_dir_all(&qdir).expect("mkdir");
    std::fs::write(qdir.join("105.conf"), "memory: 512\n").expect("write");
    match a.create(&spec(105, "local-lvm", 1), None).await {
        Err(PveError::AlreadyExists {
            vmid: 105,
            node,
            kind,
        }) => {
            assert_eq!((node.as_str(), kind.as_str()), ("pve2", "VM"))
        }
        other => panic!("expected AlreadyExists VM, got {other:?}"),
    }

    let guests = b.cluster_guests().await.expect("cluster resources");
    let ids: Vec<(&str, Option<&str>)> = guests
        .iter()
        .map(|g| (g.id.as_str(), g.node.as_deref()))
        .collect();
    assert!(ids.contains(&("lxc/100", Some("pve1"))), "{ids:?}");
    assert!(
        guests.iter().all(|g| g.kind == "lxc" || g.kind == "qemu"),
        "--type vm gives guests only: {ids:?}"
    );
}

// ----- §9.4/§2.7.5: failed create leaves nothing ---------------------------------------------------------------

#[tokio::test]
async fn failed_create_leaves_nothing_behind() {
    let (s, n) = seeded(Some(
        "[faults]\nfail_creates = { count = 1, message = \"boom\" }\n",
    ))
    .await;
    match n.create(&spec(100, "local-lvm", 4), None).await {
        Err(PveError::TaskFailed { message, .. }) => {
            assert!(
                message.contains("unable to create CT 100 - boom"),
                "{message}"
            )
        }
        other => panic!("expected TaskFailed, got {other:?}"),
    }
    assert!(n.list_containers().await.expect("list").is_empty());
    assert_eq!(
        s.cli("pve1", "pct", &["list"]).stdout,
        "",
        "no CTs: no output, not even the header"
    );
    assert!(
        volumes(&s, "pve1", "local-lvm").await.is_empty(),
        "disk freed"
    );
    let lvm = n.storages().await.expect("storages");
    assert_eq!(
        lvm.iter()
            .find(|x| x.storage == "local-lvm")
            .map(|x| x.used),
        Some(0)
    );
    n.create(&spec(100, "local-lvm", 4), None)
        .await
        .expect("the id is free again");

    let mut missing = spec(101, "local-lvm", 1);
    missing.template = "local:vztmpl/debian-13-standard_13.9-1_amd64.tar.zst".into();
    match n.create(&missing, None).await {
        Err(PveError::TaskFailed { message, .. }) => assert_eq!(
            message,
            "unable to create CT 101 - can't find file 'local:vztmpl/debian-13-standard_13.9-1_amd64.tar.zst'"
        ),
        other => panic!("expected TaskFailed, got {other:?}"),
    }
    assert!(matches!(
        n.config(101).await,
        Err(PveError::NotFound { .. })
    ));
    assert_eq!(
        volumes(&s, "pve1", "local-lvm").await.len(),
        1,
        "only CT 100's disk"
    );
}

// ----- §3.3: power operations ---------------------------------------------------------------------------------

#[tokio::test]
async fn power_operations_are_idempotent() {
    let (s, n) = seeded(None).await;
    n.create(&spec(100, "local-lvm", 1), None)
        .await
        .expect("create");
    assert!(!n.is_running(100).await.expect("status"));
    n.start(100).await.expect("start");
    n.start(100).await.expect("start again is fine");
    assert_eq!(
        s.cli("pve1", "pct", &["start", "100"]).stderr,
        "CT 100 already running\n"
    );
    let st = n.status(100).await.expect("status");
    assert_eq!(st.status, RunState::Running);
    assert!(st.pid.is_some(), "running CTs have a pid");
    assert_eq!(st.ha.map(|h| h.managed), Some(false));
    assert_eq!(
        n.shutdown(100, Duration::from_secs(5))
            .await
            .expect("shutdown"),
        ShutdownOutcome::Clean
    );
    assert_eq!(
        n.shutdown(100, Duration::from_secs(5))
            .await
            .expect("shutdown"),
        ShutdownOutcome::AlreadyStopped
    );
    n.stop(100).await.expect("stop of a stopped CT is fine");
    let o = s.cli("pve1", "pct", &["stop", "100"]);
    assert_eq!((o.stderr.as_str(), o.code), ("CT 100 not running\n", 255));
    n.start(100).await.expect("start");
    n.stop(100).await.expect("stop");
    assert!(!n.is_running(100).await.expect("status"));
    assert!(matches!(
        n.start(999).await,
        Err(PveError::NotFound { vmid: 999, .. })
    ));
}

#[tokio::test]
async fn shutdown_that_times_out_is_forced() {
    let (s, n) = seeded(Some("[latency]\nstop_ms = 1500\n")).await;
    n.create(&spec(100, "local-lvm", 1), None)
        .await
        .expect("create");
    n.start(100).await.expect("start");
    let o = s.cli("pve1", "pct", &["shutdown", "100", "--timeout", "1"]);
    assert_eq!(
        (o.stderr.as_str(), o.code),
        ("container did not stop\n", 255)
    );
    assert_eq!(
        n.shutdown(100, Duration::from_secs(1))
            .await
            .expect("shutdown"),
        ShutdownOutcome::Forced
    );
    assert!(!n.is_running(100).await.expect("status"));
    n.start(100).await.expect("start");
    assert_eq!(
        n.shutdown(100, Duration::from_secs(2))
            .await
            .expect("shutdown"),
        ShutdownOutcome::Clean
    );
}

// ----- §3.2: resize -------------------------------------------------------------------------------------------

#[tokio::test]
async fn resize_grows_refuses_to_shrink_and_detects_a_failed_task() {
    let (s, n) = seeded(Some("[[storage]]\nid = \"local-lvm\"\ncapacity_gib = 20\n")).await;
    n.create(&spec(100, "local-lvm", 8), None)
        .await
        .expect("create");
    n.resize(100, "rootfs", 12).await.expect("grow");
    let c = n.config(100).await.expect("config");
    assert_eq!(c.raw["rootfs"], "local-lvm:vm-100-disk-0,size=12G");
    n.resize(100, "rootfs", 12)
        .await
        .expect("already at that size is done");
    match n.resize(100, "rootfs", 4).await {
        Err(PveError::Invalid { field, .. }) => assert_eq!(field, "rootfs"),
        other => panic!("expected Invalid, got {other:?}"),
    }
    let o = s.cli("pve1", "pct", &["resize", "100", "rootfs", "4G"]);
    assert_eq!(
        (o.stderr.as_str(), o.code),
        ("unable to shrink disk size\n", 255)
    );
    // The task fails (no room) but pct resize exits 0: the driver reads the size back.
    let o = s.cli("pve1", "pct", &["resize", "100", "rootfs", "40G"]);
    assert_eq!(o.code, 0, "resize has no $upid_exit");
    assert!(!o.stderr.is_empty(), "the task error is on stderr");
    match n.resize(100, "rootfs", 40).await {
        Err(PveError::TaskFailed { message, .. }) => {
            assert!(
                message.starts_with("rootfs is 12G after resize, wanted 40G"),
                "{message}"
            )
        }
        other => panic!("expected TaskFailed, got {other:?}"),
    }
    assert!(matches!(
        n.resize(100, "mp7", 10).await,
        Err(PveError::Command { .. })
    ));
}

// ----- §3.4: destroy ------------------------------------------------------------------------------------------

#[tokio::test]
async fn destroy_removes_the_ct_and_its_volumes() {
    let (s, n) = seeded(None).await;
    let mut sp = spec(100, "local-lvm", 2);
    sp.mount_points.insert(
        0,
        MountPointSpec {
            volume: MountVolume::Storage {
                storage: "local-zfs".into(),
                size_gib: 1,
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
    n.create(&sp, None).await.expect("create");
    n.start(100).await.expect("start");
    // A leftover volume of this vmid that the config does not reference.
    let o = s.cli(
        "pve1",
        "pvesm",
        &["alloc", "local-lvm", "100", "vm-100-disk-5", "1G"],
    );
    assert_eq!(o.code, 0, "{}", o.stderr);
    n.destroy(100).await.expect("destroy a running CT");
    assert!(matches!(
        n.config(100).await,
        Err(PveError::NotFound { .. })
    ));
    assert!(
        volumes(&s, "pve1", "local-lvm").await.is_empty(),
        "rootfs and leftover freed"
    );
    assert!(
        volumes(&s, "pve1", "local-zfs").await.is_empty(),
        "mp0 freed"
    );
    assert!(matches!(
        n.destroy(100).await,
        Err(PveError::NotFound { vmid: 100, .. })
    ));
    assert_eq!(
        n.templates("local").await.expect("templates").len(),
        1,
        "template kept"
    );

    let mut p = spec(101, "local-lvm", 1);
    p.protection = Some(true);
    n.create(&p, None).await.expect("create");
    assert!(matches!(
        n.destroy(101).await,
        Err(PveError::Protected { vmid: 101, .. })
    ));
    n.set(
        101,
        &ConfigChange {
            protection: Some(false),
            ..ConfigChange::default()
        },
    )
    .await
    .expect("clear protection");
    n.destroy(101).await.expect("destroy");
}

// ----- node facts: storages, bridges, templates, version, node status -----------------------------------------

#[tokio::test]
async fn node_facts_parse() {
    let (s, n) = seeded(None).await;
    let st = n.storages().await.expect("storages");
    let ids: Vec<&str> = st.iter().map(|x| x.storage.as_str()).collect();
    assert_eq!(ids, ["local", "local-lvm", "local-zfs"]);
    let lvm = &st[1];
    assert_eq!(lvm.kind, "lvmthin");
    assert!(lvm.holds_rootdir() && !lvm.holds_vztmpl() && lvm.enabled && lvm.active);
    assert_eq!((lvm.total, lvm.used, lvm.avail), (350 << 30, 0, 350 << 30));
    assert!(st[0].holds_vztmpl());

    let br = n.bridges().await.expect("bridges");
    assert_eq!(br.len(), 1);
    assert_eq!(br[0].iface, "vmbr0");
    assert_eq!(br[0].kind, "bridge");
    assert_eq!(br[0].cidr.as_deref(), Some("192.168.7.10/24"));

    let t = n.templates("local").await.expect("templates");
    assert_eq!(t.len(), 1);
    assert_eq!(t[0].volid, TMPL);
    assert_eq!(t[0].format.as_deref(), Some("tzst"));
    assert_eq!(t[0].content.as_deref(), Some("vztmpl"));
    assert!(t[0].size > 0);

    // `pvesm path` of a file that does not exist tells where templates go; a file put there is a template.
    let dir = n.template_dir("local").await.expect("template dir");
    assert!(dir.ends_with("template/cache"), "{}", dir.display());
    assert!(
        dir.join(TMPL_FILE).is_file(),
        "the downloaded template is there"
    );
    std::fs::write(dir.join("alpine-3.22-default_20250617_amd64.tar.xz"), b"x").expect("seed");
    let t = n.templates("local").await.expect("templates");
    assert_eq!(t.len(), 2);
    assert_eq!(
        t[0].volid,
        "local:vztmpl/alpine-3.22-default_20250617_amd64.tar.xz"
    );
    assert_eq!(t[0].format.as_deref(), Some("txz"));
    assert!(matches!(
        n.template_dir("local-lvm").await,
        Err(PveError::Command { .. })
    ));
    assert!(matches!(
        n.templates("nope").await,
        Err(PveError::Command { .. })
    ));

    let v = n.version().await.expect("version");
    assert_eq!(v.major(), Some(9));
    assert!(v.release.is_some() && v.repoid.is_some());
    let ns = n.node_status().await.expect("node status");
    assert_eq!(ns.cpuinfo.cpus, Some(8));
    assert_eq!(ns.memory.total, 32 << 30);
    assert_eq!(ns.loadavg.len(), 3);
    assert!(ns
        .pveversion
        .as_deref()
        .is_some_and(|p| p.starts_with("pve-manager/9.")));

    let avail = n
        .pveam_available(Some("system"))
        .await
        .expect("pveam available");
    assert!(avail.iter().any(|a| a.template == TMPL_FILE), "{avail:?}");
    let apl = n.aplinfo().await.expect("aplinfo");
    let e = apl
        .iter()
        .find(|a| a.template == TMPL_FILE)
        .expect("in aplinfo");
    assert!(e
        .location
        .as_deref()
        .is_some_and(|l| l.ends_with(TMPL_FILE)));
    assert!(e.sha512sum.is_some());
    assert!(matches!(
        n.pveam_download("local", "no-such-template.tar.zst").await,
        Err(PveError::Command { .. })
    ));
    let o = s.cli("pve1", "pveam", &["download", "local-lvm", TMPL_FILE]);
    assert_ne!(o.code, 0, "storage without vztmpl content: {}", o.stdout);
}

// ----- §4.3: interfaces ---------------------------------------------------------------------------------------

#[tokio::test]
async fn interfaces_are_empty_when_stopped_and_addressed_when_running() {
    let (s, n) = seeded(None).await;
    let mut sp = spec(100, "local-lvm", 1);
    sp.nets.insert(0, nic("eth0", "dhcp"));
    sp.nets.insert(1, nic("eth1", "192.168.7.60/24"));
    n.create(&sp, None).await.expect("create");
    assert!(n.interfaces(100).await.expect("interfaces").is_empty());
    let o = s.cli(
        "pve1",
        "pvesh",
        &[
            "get",
            "/nodes/pve1/lxc/100/interfaces",
            "--output-format",
            "json",
        ],
    );
    assert_eq!(o.stdout, "null\n", "a stopped CT gives null");
    n.start(100).await.expect("start");
    let c = n.config(100).await.expect("config");
    let ifs = n.interfaces(100).await.expect("interfaces");
    let names: Vec<&str> = ifs.iter().map(|i| i.name.as_str()).collect();
    assert_eq!(names, ["eth0", "eth1", "lo"]);
    let eth0 = &ifs[0];
    assert_eq!(
        eth0.hwaddr.as_deref(),
        c.hwaddr(0).map(str::to_ascii_lowercase).as_deref(),
        "lower-case MAC of the config's net0"
    );
    let v4: Vec<&parse::IpAddress> = eth0
        .addresses
        .iter()
        .filter(|a| a.family == "inet")
        .collect();
    assert_eq!(v4.len(), 1);
    let ip: std::net::Ipv4Addr = v4[0].address.parse().expect("ipv4");
    assert!(
        (u32::from(ip) >= u32::from(std::net::Ipv4Addr::new(192, 168, 7, 100)))
            && (u32::from(ip) <= u32::from(std::net::Ipv4Addr::new(192, 168, 7, 250))),
        "DHCP range: {ip}"
    );
    assert_eq!(v4[0].prefix, 24);
    assert!(ifs[1]
        .addresses
        .iter()
        .any(|a| a.address == "192.168.7.60" && a.prefix == 24));
    assert!(ifs[2].addresses.iter().any(|a| a.address == "127.0.0.1"));
    n.stop(100).await.expect("stop");
    assert!(n.interfaces(100).await.expect("interfaces").is_empty());
}

// ----- §1 config lock: contention retried, then given up ------------------------------------------------------

#[tokio::test]
async fn lock_contention_is_retried_within_the_budget() {
    // Held for 7 s: the first create gives up after 5 s (`got timeout`), the retry gets it.
    let (_s, n) = seeded(Some("[faults]\nlock_vmid = { vmid = 100, seconds = 7 }\n")).await;
    let n = n.with_retry(RetryPolicy::default());
    let t = Instant::now();
    n.create(&spec(100, "local-lvm", 1), None)
        .await
        .expect("create after a retry");
    assert!(t.elapsed() >= Duration::from_secs(5), "{:?}", t.elapsed());
    assert_eq!(n.config(100).await.expect("config").lock, None);
}

#[tokio::test]
async fn lock_contention_is_given_up_after_the_budget() {
    let (_s, n) = seeded(Some("[faults]\nlock_vmid = { vmid = 100, seconds = 60 }\n")).await;
    let n = n.with_retry(RetryPolicy {
        attempts: 2,
        base_delay: Duration::from_millis(100),
        max_delay: Duration::from_millis(100),
    });
    let t = Instant::now();
    match n.create(&spec(100, "local-lvm", 1), None).await {
        Err(e @ PveError::LockTimeout { vmid: 100, .. }) => assert!(e.retryable()),
        other => panic!("expected LockTimeout, got {other:?}"),
    }
    assert!(
        t.elapsed() >= Duration::from_secs(10),
        "two tries of 5 s: {:?}",
        t.elapsed()
    );
    assert!(
        n.list_containers().await.expect("list").is_empty(),
        "nothing created"
    );
}

#[tokio::test]
async fn locked_ct_is_retried_and_unlock_clears_it() {
    let (s, n) = seeded(None).await;
    n.create(&spec(100, "local-lvm", 1), None)
        .await
        .expect("create");
    let o = s.cli("pve1", "pct", &["set", "100", "--lock", "backup"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let t = Instant::now();
    match n.start(100).await {
        Err(e @ PveError::Locked { vmid: 100, .. }) => {
            assert!(e.retryable());
            assert!(e.to_string().contains("(backup)"), "{e}");
        }
        other => panic!("expected Locked, got {other:?}"),
    }
    assert!(
        t.elapsed() >= Duration::from_millis(50),
        "retried before giving up"
    );
    let o = s.cli("pve1", "pct", &["start", "100"]);
    assert_eq!(
        (o.stderr.as_str(), o.code),
        ("CT is locked (backup)\n", 255)
    );

    // A lock that goes away while the driver waits: the retry succeeds.
    let patient = n.clone().with_retry(RetryPolicy {
        attempts: 6,
        base_delay: Duration::from_millis(300),
        max_delay: Duration::from_secs(1),
    });
    let bin = s.bin().join("pct");
    let state = s.state("pve1");
    let unlocker = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(200)).await;
        tokio::process::Command::new(bin)
            .args(["unlock", "100"])
            .env("PVESIM_STATE", state)
            .status()
            .await
            .expect("pct unlock")
    });
    patient.start(100).await.expect("started once unlocked");
    assert!(unlocker.await.expect("join").success());
    assert!(n.is_running(100).await.expect("status"));
    n.unlock(100).await.expect("no lock is fine");
    assert_eq!(
        s.cli("pve1", "pct", &["unlock", "100"]).stderr,
        "no lock found trying to remove any lock\n"
    );
}

// ----- §3.8: root password over pct exec chpasswd -------------------------------------------------------------

#[tokio::test]
async fn root_password_is_set_through_chpasswd_on_stdin() {
    let (s, n) = seeded(None).await;
    n.create(&spec(100, "local-lvm", 1), None)
        .await
        .expect("create");
    let pw = Secret::new("correct horse battery".to_string());
    match n.set_root_password(100, &pw).await {
        Err(e @ PveError::NotRunning { vmid: 100, .. }) => {
            assert!(!e.to_string().contains("horse"), "{e}")
        }
        other => panic!("expected NotRunning, got {other:?}"),
    }
    n.start(100).await.expect("start");
    n.set_root_password(100, &pw).await.expect("chpasswd");
    let rt: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(s.state("pve1").join("runtime/100.json")).expect("runtime"),
    )
    .expect("json");
    let want = {
        use sha2::Digest;
        hex::encode(sha2::Sha256::digest(b"correct horse battery"))
    };
    assert_eq!(
        rt["passwords"]["root"],
        want.as_str(),
        "the password arrived on stdin: {rt}"
    );

    let chpasswd = ["exec", "100", "--keep-env", "0", "--", "chpasswd"];
    let o = s.cli_stdin("pve1", "pct", &chpasswd, Some("no-colon-here\n"));
    assert_eq!(o.code, 1);
    assert_eq!(
        o.stderr,
        "chpasswd: line 1: missing new password\nchpasswd: error detected, changes ignored\n"
    );
    let o = s.cli_stdin("pve1", "pct", &chpasswd, Some("bob:secret1\n"));
    assert_eq!(o.code, 1);
    assert!(
        o.stderr
            .starts_with("chpasswd: line 1: user 'bob' does not exist\n"),
        "{}",
        o.stderr
    );
    assert!(!o.stderr.contains("secret1"));
    let o = s.cli(
        "pve1",
        "pct",
        &["exec", "100", "--keep-env", "0", "--", "true"],
    );
    assert_eq!(
        o.code, 0,
        "other commands run nothing and succeed: {}",
        o.stderr
    );
    let o = s.cli("pve1", "pct", &["exec", "100", "--", "sh", "-c", "exit 3"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
}

// ----- §2.1/§3.8: the root password set by the create itself (pct's interactive --password) ----------------

fn runtime_json(s: &Sim, vmid: u32) -> serde_json::Value {
    serde_json::from_str(
        &std::fs::read_to_string(s.state("pve1").join(format!("runtime/{vmid}.json")))
            .unwrap_or_else(|_| "{}".into()),
    )
    .expect("json")
}

#[tokio::test]
async fn create_sets_the_root_password_read_from_stdin_and_leaves_the_ct_unbooted() {
    let (s, n) = seeded(None).await;
    let pw = Secret::new("correct horse battery".to_string());
    n.create(&spec(100, "local-lvm", 1), Some(&pw))
        .await
        .expect("create");
    let want = {
        use sha2::Digest;
        hex::encode(sha2::Sha256::digest(b"correct horse battery"))
    };
    let rt = runtime_json(&s, 100);
    assert_eq!(rt["passwords"]["root"], want.as_str(), "{rt}");
    assert_eq!(rt["boots"], 0, "created without a start: {rt}");
    assert!(!n.is_running(100).await.expect("status"));
    n.start(100).await.expect("start");
    let rt = runtime_json(&s, 100);
    assert_eq!(rt["boots"], 1, "{rt}");
    assert_eq!(rt["first_boot"]["root_password"], true, "{rt}");

    // the CLI as PVE's: the password and its confirmation are lines of stdin; a value in argv works too
    let create = |vmid: &str, extra: &[&str], stdin: Option<&str>| {
        let mut args = vec!["create", vmid, TMPL, "--rootfs", "local-lvm:1"];
        args.extend_from_slice(extra);
        s.cli_stdin("pve1", "pct", &args, stdin)
    };
    let o = create("101", &["--password"], Some("s3cret-1\ns3cret-2\n"));
    assert_eq!(
        (o.code, o.stderr.as_str()),
        (255, "passwords do not match\n")
    );
    let o = create("101", &["--password"], Some("s3cret-1\n"));
    assert_eq!(
        (o.code, o.stderr.as_str()),
        (255, "EOF while reading password\n")
    );
    let o = create("101", &["--password"], Some("abc\nabc\n"));
    assert_eq!(o.code, 255, "{}", o.stderr);
    assert!(
        o.stderr
            .starts_with("400 Parameter verification failed.\npassword: value must be at least 5 characters long\n"),
        "checked like a value given in argv: {}",
        o.stderr
    );
    assert!(n.config(101).await.is_err(), "nothing was created");
    // `--password` followed by another option has no value either: it prompts
    let o = create(
        "101",
        &["--password", "--memory", "256"],
        Some("s3cret-1\ns3cret-1\n"),
    );
    assert_eq!(o.code, 0, "{}", o.stderr);
    let o = create("102", &["--password", "s3cret-2"], None);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let hash = |p: &[u8]| {
        use sha2::Digest;
        hex::encode(sha2::Sha256::digest(p))
    };
    assert_eq!(
        runtime_json(&s, 101)["passwords"]["root"],
        hash(b"s3cret-1").as_str()
    );
    assert_eq!(
        runtime_json(&s, 102)["passwords"]["root"],
        hash(b"s3cret-2").as_str()
    );
}

// ----- §2.1: ssh keys from a file, validated ------------------------------------------------------------------

#[tokio::test]
async fn ssh_keys_are_read_from_a_file_and_validated() {
    let (s, n) = seeded(None).await;
    let mut sp = spec(100, "local-lvm", 1);
    sp.ssh_public_keys = vec![ed25519_key(1, "a@x"), ed25519_key(2, "b@y")];
    n.create(&sp, None).await.expect("create with keys");
    let rt = std::fs::read_to_string(s.state("pve1").join("runtime/100.json")).unwrap_or_default();
    assert!(
        rt.contains("a@x") && rt.contains("b@y"),
        "keys recorded: {rt}"
    );
    let cfg = n.config(100).await.expect("config");
    assert!(
        !cfg.raw.contains_key("ssh-public-keys"),
        "create-only, not stored"
    );

    let mut bad = spec(101, "local-lvm", 1);
    bad.ssh_public_keys = vec!["ssh-ed25519 bm90IGEga2V5 oops".into()];
    match n.create(&bad, None).await {
        Err(PveError::Command { stderr, status, .. }) => {
            assert_eq!(stderr, "SSH public key validation error");
            assert_eq!(status, Some(255));
        }
        other => panic!("expected a validation error, got {other:?}"),
    }
    assert!(
        matches!(n.config(101).await, Err(PveError::NotFound { .. })),
        "checked before create"
    );
    let keyfile = s.state("pve1").join("keys.pub");
    std::fs::write(&keyfile, "not a key at all\n").expect("write");
    let o = s.cli(
        "pve1",
        "pct",
        &[
            "create",
            "102",
            TMPL,
            "--ssh-public-keys",
            &keyfile.display().to_string(),
        ],
    );
    assert_eq!(
        (o.stderr.as_str(), o.code),
        ("SSH public key validation error\n", 255)
    );
    let o = s.cli(
        "pve1",
        "pct",
        &["create", "102", TMPL, "--ssh-public-keys", "/nonexistent/k"],
    );
    assert!(
        o.stderr
            .starts_with("unable to open file '/nonexistent/k' - "),
        "{}",
        o.stderr
    );
}

// ----- migrate ------------------------------------------------------------------------------------------------

#[tokio::test]
async fn migrate_with_restart_moves_a_running_ct() {
    let (s, a, b) = cluster().await;
    a.create(&spec(100, "local-lvm", 1), None)
        .await
        .expect("create");
    a.start(100).await.expect("start");
    match a.migrate(100, "pve2", false).await {
        Err(PveError::Command { stderr, .. }) => {
            assert!(stderr.contains("live migration"), "{stderr}")
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    a.migrate(100, "pve2", true)
        .await
        .expect("migrate --restart 1");
    assert!(b.is_running(100).await.expect("status on pve2"));
    assert!(matches!(
        a.config(100).await,
        Err(PveError::NotFound { .. })
    ));
    assert!(volumes(&s, "pve1", "local-lvm").await.is_empty());
    assert_eq!(volumes(&s, "pve2", "local-lvm").await.len(), 1);
    let g = a.cluster_guests().await.expect("resources");
    assert_eq!(g[0].node.as_deref(), Some("pve2"));
    assert!(matches!(
        a.migrate(100, "pve2", true).await,
        Err(PveError::NotFound { .. })
    ));
    assert!(matches!(
        b.migrate(100, "pve9", false).await,
        Err(PveError::Command { .. })
    ));
    b.destroy(100).await.expect("destroy on the new node");
}

// ----- §4.2: task status --------------------------------------------------------------------------------------

#[tokio::test]
async fn task_status_of_pvesh_tasks() {
    let (s, n) = seeded(Some(
        "[faults]\nfail_creates = { count = 1, message = \"boom\" }\n",
    ))
    .await;
    let create = |vmid: &'static str| {
        s.cli(
            "pve1",
            "pvesh",
            &[
                "create",
                "/nodes/pve1/lxc",
                "--vmid",
                vmid,
                "--ostemplate",
                TMPL,
                "--rootfs",
                "local-lvm:1",
                "--output-format",
                "json",
            ],
        )
    };
    let upid_of = |o: &Out| -> String {
        serde_json::from_str(o.stdout.lines().last().expect("a last line")).expect("json string")
    };
    let failed = create("103");
    assert_eq!(failed.code, 0, "pvesh exits 0 even when the task failed");
    assert_eq!(failed.stderr, "unable to create CT 103 - boom\n");
    let st = n.task_status(&upid_of(&failed)).await.expect("task status");
    assert!(!st.succeeded());
    assert_eq!(
        st.exitstatus.as_deref(),
        Some("unable to create CT 103 - boom")
    );

    let ok = create("104");
    assert_eq!(ok.code, 0, "{}", ok.stderr);
    assert!(
        ok.stdout.lines().count() > 1,
        "task log lines come before the JSON"
    );
    let upid = upid_of(&ok);
    let st = n.task_status(&upid).await.expect("task status");
    assert!(st.succeeded(), "{st:?}");
    assert_eq!(st.kind.as_deref(), Some("vzcreate"));
    assert_eq!(st.id.as_deref(), Some("104"));
    assert_eq!(st.node.as_deref(), Some("pve1"));
    assert_eq!(parse::Upid::parse(&upid).expect("upid").node, "pve1");
    assert!(matches!(
        n.task_status("UPID:nope").await,
        Err(PveError::Invalid { .. })
    ));
}

// ----- The "What I will run" sequence, at the CLI, against the examples ---------------------------------------

#[test]
fn cli_sequence_matches_the_example_layouts() {
    let s = Sim::new();
    s.init("pve1", None, None);
    let o = s.cli("pve1", "pveam", &["download", "local", TMPL_FILE]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let o = s.cli(
        "pve1",
        "pct",
        &[
            "create",
            "100",
            TMPL,
            "--rootfs",
            "local-lvm:8",
            "--hostname",
            "a",
            "--net0",
            "name=eth0,bridge=vmbr0,ip=dhcp",
        ],
    );
    assert_eq!((o.code, o.stderr.as_str()), (0, ""));
    // stdout: the task log, in the order of the example (lvcreate, mkfs, extract, arch, ssh keys), no UPID.
    let ex = fixture("pct-create-100.stdout.txt");
    let order = |text: &str| -> Vec<&'static str> {
        [
            "Logical volume \"vm-100-disk-0\" created",
            "Creating filesystem with",
            "extracting archive '",
            "Total bytes read:",
            "Detected container architecture: amd64",
            "Creating SSH host key",
        ]
        .into_iter()
        .filter_map(|m| text.find(m).map(|i| (i, m)))
        .collect::<std::collections::BTreeMap<_, _>>()
        .into_values()
        .collect()
    };
    assert_eq!(order(&o.stdout), order(&ex));
    assert!(!o.stdout.contains("UPID:"));
    assert_eq!(s.cli("pve1", "pct", &["start", "100"]).code, 0);

    // pct list: header and fixed columns with trailing spaces, parsed by the driver like the example.
    let list = s.cli("pve1", "pct", &["list"]).stdout;
    let ex = fixture("pct-list.txt");
    assert_eq!(list.lines().next(), ex.lines().next(), "header");
    assert_eq!(
        list.lines().nth(1),
        Some(format!("{:<10} {:<10} {:<12} {:<20}", 100, "running", "", "a").as_str())
    );
    assert!(!parse::parse_pct_list(&ex)
        .expect("example parses")
        .is_empty());
    let rows = parse::parse_pct_list(&list).expect("pct list parses");
    assert_eq!(
        (rows[0].vmid, &rows[0].status, rows[0].name.as_str()),
        (100, &RunState::Running, "a")
    );

    // pct config: sorted `key: value`, the example's key set (minus what was not asked for), same value forms.
    let conf = s.cli("pve1", "pct", &["config", "100"]).stdout;
    let ex = fixture("pct-config-100.txt");
    let keys = |t: &str| -> Vec<String> {
        t.lines()
            .map(|l| l.split(": ").next().unwrap_or("").to_string())
            .collect()
    };
    let mut sorted = keys(&conf);
    sorted.sort();
    assert_eq!(keys(&conf), sorted);
    // The example was created with more options; a create with these options gives its key set minus those.
    let mut want = keys(&ex);
    want.retain(|k| {
        ![
            "cores",
            "description",
            "features",
            "onboot",
            "startup",
            "tags",
        ]
        .contains(&k.as_str())
    });
    assert_eq!(keys(&conf), want);
    let shape = regex::Regex::new(r"(?m)^(rootfs: local-lvm:vm-10\d-disk-0,size=\d+G|net0: name=eth0,bridge=vmbr0,.*hwaddr=BC:24:11:[0-9A-F:]{8},ip=dhcp,.*type=veth|unprivileged: 1)$").expect("regex");
    assert_eq!(shape.find_iter(&conf).count(), 3, "{conf}");
    assert_eq!(
        shape.find_iter(&ex).count(),
        3,
        "the example has the same forms"
    );
    ContainerConfig::from_pct_config(&ex).expect("example parses");
    let c = ContainerConfig::from_pct_config(&conf).expect("pct config parses");
    assert_eq!(c.rootfs_size(), Some(8 << 30));

    assert_eq!(
        s.cli("pve1", "pct", &["status", "100"]).stdout,
        fixture("pct-status.txt")
    );

    // pvesh JSON: compact, sorted keys, the example's fields for a running CT.
    let j = s
        .cli(
            "pve1",
            "pvesh",
            &["get", "/nodes/pve1/lxc", "--output-format", "json"],
        )
        .stdout;
    assert_eq!(j.lines().count(), 1);
    assert!(j.ends_with("}]\n"));
    let v: serde_json::Value = serde_json::from_str(&j).expect("json");
    assert_eq!(
        serde_json::to_string(&v).expect("json") + "\n",
        j,
        "canonical compact form"
    );
    let ex: serde_json::Value =
        serde_json::from_str(&fixture("pvesh-nodes-node-lxc.json")).expect("json");
    let running = ex
        .as_array()
        .expect("array")
        .iter()
        .find(|c| c["status"] == "running")
        .expect("a running CT");
    let fields = |x: &serde_json::Value| -> Vec<String> {
        x.as_object()
            .expect("object")
            .keys()
            .filter(|k| *k != "tags")
            .cloned()
            .collect()
    };
    assert_eq!(fields(&v[0]), fields(running));
    let ours: Vec<ContainerStatus> = parse::parse_json("lxc", &j).expect("parses");
    assert_eq!(ours[0].maxdisk, Some(8 << 30));

    // pvesm status: header of PVE >= 9.0.14 (first column as wide as the longest id + 1), rows per the printf.
    let st = s.cli("pve1", "pvesm", &["status"]).stdout;
    let ex = fixture("pvesm-status.txt");
    let squash = |l: &str| l.split_whitespace().collect::<Vec<_>>().join(" ");
    assert_eq!(
        squash(st.lines().next().unwrap_or("")),
        squash(ex.lines().next().unwrap_or(""))
    );
    assert_eq!(
        st.lines().next().map(str::len),
        Some("local-lvm ".len() + 1 + 10 + 1 + 10 + 3 * 16 + 9)
    );
    let rows = parse::parse_pvesm_status(&st).expect("pvesm status parses");
    parse::parse_pvesm_status(&ex).expect("example parses");
    let lvm = rows
        .iter()
        .find(|r| r.name == "local-lvm")
        .expect("local-lvm");
    assert_eq!((lvm.total_kib, lvm.used_kib), (350 << 20, 8 << 20));

    // pveam list: `%-60s %-4.2fMB`.
    let pl = s.cli("pve1", "pveam", &["list", "local"]).stdout;
    let ex = fixture("pveam-list-local.txt");
    assert_eq!(pl.lines().next(), ex.lines().next());
    let t = parse::parse_pveam_list(&pl).expect("pveam list parses");
    assert_eq!(t[0].volid, TMPL);
    parse::parse_pveam_list(&ex).expect("example parses");

    // Without --rootfs: `<storage>:4`, and the defaults written at the end of create.
    let o = s.cli(
        "pve1",
        "pct",
        &["create", "102", TMPL, "--storage", "local-lvm"],
    );
    assert_eq!(o.code, 0, "{}", o.stderr);
    let c102 = s.cli("pve1", "pct", &["config", "102"]).stdout;
    for line in [
        "hostname: CT102",
        "memory: 512",
        "rootfs: local-lvm:vm-102-disk-0,size=4G",
        "swap: 512",
        "unprivileged: 1",
    ] {
        assert!(c102.lines().any(|l| l == line), "{line} in {c102}");
    }

    // pvesh set prints nothing; pvesm path of a missing file still prints the path.
    let o = s.cli(
        "pve1",
        "pvesh",
        &["set", "/nodes/pve1/lxc/100/config", "--cores", "2"],
    );
    assert_eq!((o.code, o.stdout.as_str()), (0, ""));
    let o = s.cli(
        "pve1",
        "pvesm",
        &["path", "local:vztmpl/pxfleet-probe.tar.zst"],
    );
    assert_eq!(o.code, 0);
    assert!(
        o.stdout
            .ends_with("/template/cache/pxfleet-probe.tar.zst\n"),
        "{}",
        o.stdout
    );

    // A second create and an unknown option: PVE's texts and exit codes.
    let o = s.cli(
        "pve1",
        "pct",
        &["create", "100", TMPL, "--rootfs", "local-lvm:8"],
    );
    assert_eq!(
        (o.stderr.as_str(), o.code),
        (fixture("pct-create-exists.stderr.txt").as_str(), 255)
    );
    let o = s.cli("pve1", "pct", &["create", "101", TMPL, "--foo", "bar"]);
    assert_eq!(
        (o.stderr.as_str(), o.code),
        ("Unknown option: foo\n400 unable to parse option\npct create <vmid> <ostemplate> [OPTIONS]\n", 255)
    );
    assert_eq!(
        s.cli("pve1", "pct", &["config", "999"]).stderr,
        fixture("pct-missing-ct.stderr.txt")
    );
    let o = s.cli("pve1", "pvesh", &["get", "/nodes/pve1/nosuch"]);
    assert_eq!(o.code, 1, "{}", o.stderr);
    assert!(
        o.stderr
            .starts_with("No 'get' handler defined for '/nodes/pve1/nosuch'"),
        "{}",
        o.stderr
    );
}

// ----- mount point options, existing volumes, devices, lxc.idmap (issue 10 item 13) ---------------------------

fn mp(volume: MountVolume, path: &str) -> MountPointSpec {
    MountPointSpec::new(volume, path)
}

#[tokio::test]
async fn mount_options_and_existing_volumes_are_stored_and_existing_ones_outlive_the_ct() {
    let (s, n) = seeded(None).await;
    let o = s.cli(
        "pve1",
        "pvesm",
        &["alloc", "local-lvm", "900", "vm-900-disk-1", "1G"],
    );
    assert_eq!(o.code, 0, "{}", o.stderr);
    let mut sp = spec(202, "local-lvm", 2);
    let mut data = mp(
        MountVolume::Storage {
            storage: "local-zfs".into(),
            size_gib: 1,
        },
        "/data",
    );
    data.acl = Some(true);
    data.quota = Some(true);
    data.replicate = Some(false);
    data.mount_options = vec!["noatime".into(), "nodev".into()];
    sp.mount_points.insert(0, data);
    sp.mount_points.insert(
        1,
        mp(
            MountVolume::Existing {
                volume: "local-lvm:vm-900-disk-1".into(),
            },
            "/kept",
        ),
    );
    let mut bind = mp(
        MountVolume::Bind {
            host_path: "/srv/media".into(),
        },
        "/media",
    );
    bind.shared = Some(true);
    bind.read_only = Some(true);
    sp.mount_points.insert(2, bind);
    sp.devices.insert(
        0,
        pxfleet_pve::DeviceSpec {
            path: "/dev/null".into(),
            mode: Some("0666".into()),
            uid: Some(0),
            gid: Some(0),
            deny_write: Some(true),
        },
    );
    n.create(&sp, None).await.expect("create");
    let c = n.config(202).await.expect("config");
    assert_eq!(
        c.raw["mp0"],
        "local-zfs:subvol-202-disk-0,mp=/data,acl=1,mountoptions=noatime;nodev,quota=1,replicate=0,size=1G"
    );
    assert_eq!(c.raw["mp1"], "local-lvm:vm-900-disk-1,mp=/kept,size=1G");
    assert_eq!(c.raw["mp2"], "/srv/media,mp=/media,ro=1,shared=1");
    assert_eq!(
        c.raw["dev0"],
        "path=/dev/null,deny-write=1,gid=0,mode=0666,uid=0"
    );
    assert_eq!(c.devices[&0].mode.as_deref(), Some("0666"));

    // lxc.idmap: no tool sets it; the file edit shows in `pct config`, in file order.
    pxfleet_pve::conffile::write_idmap(
        &s.state("pve1").join("nodes/pve1/lxc"),
        202,
        &["u 0 200000 65536".into(), "g 0 200000 65536".into()],
    )
    .expect("write idmap");
    let c = n.config(202).await.expect("config");
    assert_eq!(c.idmap, ["u 0 200000 65536", "g 0 200000 65536"]);
    let o = s.cli("pve1", "pct", &["set", "202", "--lxc.idmap", "u 0 1 1"]);
    assert_ne!(o.code, 0, "pct set takes no lxc.* keys: {}", o.stdout);

    // An existing volume on a storage that does not exist: PVE's message; a volume id that is not one.
    let o = s.cli(
        "pve1",
        "pct",
        &["set", "202", "--mp5", "nope:vm-900-disk-1,mp=/x"],
    );
    assert_ne!(o.code, 0);
    assert!(
        o.stderr.contains("storage 'nope' does not exist"),
        "{}",
        o.stderr
    );
    let o = s.cli(
        "pve1",
        "pct",
        &["set", "202", "--mp5", "local-lvm:8,mp=/x,mountoptions=sync"],
    );
    assert_ne!(o.code, 0);
    assert!(o.stderr.contains("mp5"), "{}", o.stderr);
    let o = s.cli(
        "pve1",
        "pct",
        &["set", "202", "--dev5", "/dev/null,mode=666"],
    );
    assert_ne!(o.code, 0);
    assert!(o.stderr.contains("dev5"), "{}", o.stderr);

    n.destroy(202).await.expect("destroy");
    let vols: Vec<String> = volumes(&s, "pve1", "local-lvm")
        .await
        .into_iter()
        .map(|v| v.volid)
        .collect();
    assert_eq!(
        vols,
        ["local-lvm:vm-900-disk-1"],
        "owned by vm_id 900: kept"
    );
    assert!(
        volumes(&s, "pve1", "local-zfs").await.is_empty(),
        "mp0 freed"
    );
}

#[tokio::test]
async fn on_a_running_ct_new_mount_points_and_devices_hotplug_changed_ones_wait() {
    let (_s, n) = seeded(None).await;
    let mut sp = spec(203, "local-lvm", 2);
    sp.mount_points.insert(
        0,
        mp(
            MountVolume::Storage {
                storage: "local-lvm".into(),
                size_gib: 1,
            },
            "/data",
        ),
    );
    sp.devices.insert(
        0,
        pxfleet_pve::DeviceSpec {
            path: "/dev/null".into(),
            ..Default::default()
        },
    );
    n.create(&sp, None).await.expect("create");
    n.start(203).await.expect("start");
    let now = n.config(203).await.expect("config");
    let vol = now.mount_points[&0].volume.clone();

    // New ones: hot-plugged, nothing pending.
    let mut add = ConfigChange::default();
    let mut m = mp(
        MountVolume::Storage {
            storage: "local-lvm".into(),
            size_gib: 1,
        },
        "/more",
    );
    m.mount_options = vec!["noexec".into()];
    add.mount_points.insert(1, m);
    add.devices.insert(
        1,
        pxfleet_pve::DeviceSpec {
            path: "/dev/zero".into(),
            ..Default::default()
        },
    );
    n.set(203, &add).await.expect("hotplug");
    assert!(n.pending(203).await.expect("pending").is_empty());

    // Changed ones: pending until the next start (options set again on the volume mp0 has).
    let want = {
        let mut d = sp.clone();
        d.mount_points.get_mut(&0).unwrap().mount_options = vec!["noatime".into()];
        d.devices.get_mut(&0).unwrap().deny_write = Some(true);
        d.mount_points.insert(1, add.mount_points[&1].clone());
        d.devices.insert(1, add.devices[&1].clone());
        d
    };
    let cur = n.config(203).await.expect("config");
    let change = ConfigChange::diff(&cur, &want, &[]);
    assert_eq!(change.keys(), ["mp0", "dev0"]);
    assert_eq!(
        change.mount_points[&0].volume,
        MountVolume::Existing {
            volume: vol.clone()
        }
    );
    n.set(203, &change).await.expect("set");
    let mut pending: Vec<String> = n
        .pending(203)
        .await
        .expect("pending")
        .into_iter()
        .map(|p| p.key)
        .collect();
    pending.sort();
    assert_eq!(pending, ["dev0", "mp0"]);
    // `pct config` shows them merged in, so the same diff is now empty.
    let cur = n.config(203).await.expect("config");
    assert!(ConfigChange::diff(&cur, &want, &[]).is_empty());
    assert!(cur.raw["mp0"].starts_with(&format!("{vol},mp=/data,mountoptions=noatime")));
}

/// PVE's start refuses an unprivileged container with `quota=1` on its root disk or a mount point
/// (`Quotas are not supported by unprivileged containers.`); a privileged one starts, and without the quota the
/// unprivileged one starts too.
#[tokio::test]
async fn unprivileged_containers_with_quotas_do_not_start() {
    let (s, _n) = seeded(None).await;
    for (vmid, args) in [
        (
            "401",
            vec!["--unprivileged", "1", "--rootfs", "local-lvm:1,quota=1"],
        ),
        (
            "402",
            vec![
                "--unprivileged",
                "1",
                "--rootfs",
                "local-lvm:1",
                "--mp0",
                "local-lvm:1,mp=/data,quota=1",
            ],
        ),
    ] {
        let mut argv = vec!["create", vmid, TMPL];
        argv.extend(args);
        let o = s.cli("pve1", "pct", &argv);
        assert_eq!(o.code, 0, "{}", o.stderr);
        let o = s.cli("pve1", "pct", &["start", vmid]);
        assert_ne!(o.code, 0);
        assert!(
            o.stderr
                .contains("Quotas are not supported by unprivileged containers."),
            "{}",
            o.stderr
        );
        let o = s.cli("pve1", "pct", &["set", vmid, "--delete", "mp0"]);
        assert_eq!(o.code, 0, "{}", o.stderr);
    }
    // without the quota (402's mount point removed) it starts
    let o = s.cli("pve1", "pct", &["start", "402"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let o = s.cli(
        "pve1",
        "pct",
        &[
            "create",
            "403",
            TMPL,
            "--unprivileged",
            "0",
            "--rootfs",
            "local-lvm:1,quota=1",
        ],
    );
    assert_eq!(o.code, 0, "{}", o.stderr);
    let o = s.cli("pve1", "pct", &["start", "403"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
}

// ----- §2.2: arch, timezone (zone.tab), console, tty, cmode ------------------------------------------------------

#[tokio::test]
async fn arch_timezone_and_console_options_are_checked_stored_and_pending_on_a_running_ct() {
    let (s, n) = seeded(None).await;
    let create = |vmid: &str, extra: &[&str]| {
        let mut args = vec!["create", vmid, TMPL, "--rootfs", "local-lvm:1"];
        args.extend_from_slice(extra);
        s.cli("pve1", "pct", &args)
    };
    for (extra, want) in [
        (&["--timezone", "Mars/Olympus_Mons"][..], "timezone: invalid format - invalid time zone 'Mars/Olympus_Mons'\n"),
        (&["--timezone", "CET"][..], "timezone: invalid format - invalid time zone 'CET'\n"),
        (&["--tty", "7"][..], "tty: value must have a maximum value of 6\n"),
        (&["--cmode", "serial"][..], "cmode: value 'serial' does not have a value in the enumeration 'shell, console, tty'\n"),
        (&["--arch", "sparc"][..], "arch: value 'sparc' does not have a value in the enumeration 'amd64, i386, arm64, armhf, riscv32, riscv64'\n"),
    ] {
        let o = create("101", extra);
        assert_eq!(o.code, 255, "{extra:?}: {}", o.stderr);
        assert!(
            o.stderr.starts_with(&format!("400 Parameter verification failed.\n{want}")),
            "{extra:?}: {}",
            o.stderr
        );
    }
    let o = create(
        "100",
        &[
            "--arch",
            "arm64",
            "--timezone",
            "Europe/Berlin",
            "--console",
            "0",
            "--tty",
            "4",
            "--cmode",
            "shell",
        ],
    );
    assert_eq!(o.code, 0, "{}", o.stderr);
    let cfg = n.config(100).await.expect("config");
    assert_eq!(cfg.arch.as_deref(), Some("arm64"));
    assert_eq!(cfg.timezone.as_deref(), Some("Europe/Berlin"));
    assert_eq!(
        (cfg.console, cfg.tty, cfg.cmode.as_deref()),
        (Some(false), Some(4), Some("shell"))
    );
    // host and UTC are always accepted
    n.start(100).await.expect("start");
    let o = s.cli(
        "pve1",
        "pct",
        &[
            "set",
            "100",
            "--timezone",
            "host",
            "--tty",
            "2",
            "--console",
            "1",
        ],
    );
    assert_eq!(o.code, 0, "{}", o.stderr);
    let pending = s.cli("pve1", "pct", &["pending", "100"]).stdout;
    for line in ["new timezone: host", "new tty: 2", "new console: 1"] {
        assert!(
            pending.lines().any(|l| l == line),
            "{line:?} pending on a running CT:\n{pending}"
        );
    }
}

// ----- §2.2: hookscript, a snippets volume that exists and is executable ------------------------------------------

#[tokio::test]
async fn a_hookscript_must_be_an_executable_snippet() {
    use std::os::unix::fs::PermissionsExt;
    let (s, n) = seeded(None).await;
    let path = s.cli("pve1", "pvesm", &["path", "local:snippets/hook.sh"]);
    assert_eq!(path.code, 0, "{}", path.stderr);
    let file = std::path::PathBuf::from(path.stdout.trim());
    assert!(file.ends_with("snippets/hook.sh"), "{file:?}");
    let create = |vmid: &str, hook: &str| {
        s.cli(
            "pve1",
            "pct",
            &[
                "create",
                vmid,
                TMPL,
                "--rootfs",
                "local-lvm:1",
                "--hookscript",
                hook,
            ],
        )
    };
    let o = create("100", "local:snippets/hook.sh");
    assert_eq!(
        (o.code, o.stderr.as_str()),
        (255, "script 'local:snippets/hook.sh' does not exist\n")
    );
    std::fs::create_dir_all(file.parent().unwrap()).unwrap();
    std::fs::write(&file, "#!/bin/sh\nexit 0\n").unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
    let o = create("100", "local:snippets/hook.sh");
    assert_eq!(
        (o.code, o.stderr.as_str()),
        (255, "script 'local:snippets/hook.sh' is not executable\n")
    );
    let o = create("100", &format!("local:vztmpl/{TMPL_FILE}"));
    assert_eq!(o.code, 255, "{}", o.stderr);
    assert_eq!(
        o.stderr,
        format!("'local:vztmpl/{TMPL_FILE}' is not in the snippets directory\n")
    );
    assert!(n.config(100).await.is_err(), "nothing was created");
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o755)).unwrap();
    let o = create("100", "local:snippets/hook.sh");
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert_eq!(
        n.config(100).await.unwrap().hookscript.as_deref(),
        Some("local:snippets/hook.sh")
    );
    // pct set checks it the same way; on a running CT it applies at once
    n.start(100).await.expect("start");
    let o = s.cli(
        "pve1",
        "pct",
        &["set", "100", "--hookscript", "local:snippets/other.sh"],
    );
    assert_eq!(
        (o.code, o.stderr.as_str()),
        (255, "script 'local:snippets/other.sh' does not exist\n")
    );
    let o = s.cli("pve1", "pct", &["set", "100", "--delete", "hookscript"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert_eq!(n.config(100).await.unwrap().hookscript, None);
}

// ----- §2.4: keepattrs (PVE 9.1 schema) and a mount point's idmap (PVE 9.2, not in the 9.1 schema) ---------------

#[tokio::test]
async fn keepattrs_is_stored_and_a_9_1_node_refuses_a_mount_point_idmap() {
    let (s, n) = seeded(None).await;
    let create = |vmid: &str, mp0: &str| {
        s.cli(
            "pve1",
            "pct",
            &[
                "create",
                vmid,
                TMPL,
                "--rootfs",
                "local-lvm:1",
                "--mp0",
                mp0,
            ],
        )
    };
    let o = create("101", "local-lvm:1,mp=/data,idmap=passthrough");
    assert_eq!(o.code, 255, "{}", o.stderr);
    assert!(
        o.stderr.starts_with(
            "400 Parameter verification failed.\nmp0: invalid format - invalid key in comma-separated list property: idmap\n"
        ),
        "{}",
        o.stderr
    );
    let o = create("100", "local-lvm:1,mp=/data,keepattrs=1");
    assert_eq!(o.code, 0, "{}", o.stderr);
    let cfg = n.config(100).await.expect("config");
    assert_eq!(cfg.mount_points[&0].keepattrs, Some(true));
}

#[tokio::test]
async fn a_9_2_node_takes_a_mount_point_idmap_and_checks_its_pattern() {
    let (s, n) = seeded(Some("pve_version = \"9.2.0\"\n")).await;
    let v = s.cli(
        "pve1",
        "pvesh",
        &["get", "/version", "--output-format", "json"],
    );
    assert!(v.stdout.contains("\"version\":\"9.2.0\""), "{}", v.stdout);
    assert!(v.stdout.contains("\"release\":\"9.2\""), "{}", v.stdout);
    let create = |vmid: &str, mp0: &str| {
        s.cli(
            "pve1",
            "pct",
            &[
                "create",
                vmid,
                TMPL,
                "--rootfs",
                "local-lvm:1",
                "--mp0",
                mp0,
            ],
        )
    };
    let o = create(
        "100",
        "local-lvm:1,mp=/data,idmap=u:1000:1000:1;g:1000:1000:1",
    );
    assert_eq!(o.code, 0, "{}", o.stderr);
    let cfg = n.config(100).await.expect("config");
    assert_eq!(
        cfg.mount_points[&0].idmap.as_deref(),
        Some("u:1000:1000:1;g:1000:1000:1")
    );
    let o = create("101", "local-lvm:1,mp=/data,idmap=passthrough");
    assert_eq!(o.code, 0, "{}", o.stderr);
    // PVE's pattern: a range of 0, or a type other than u and g, is refused
    let o = create("102", "local-lvm:1,mp=/data,idmap=u:1000:1000:0");
    assert_eq!(o.code, 255, "{}", o.stderr);
    assert!(
        o.stderr
            .starts_with("400 Parameter verification failed.\nmp0: invalid format - "),
        "{}",
        o.stderr
    );
    let o = s.cli(
        "pve1",
        "pct",
        &[
            "set",
            "100",
            "--mp0",
            "local-lvm:vm-100-disk-1,mp=/data,idmap=x:1:1:1",
        ],
    );
    assert_eq!(o.code, 255, "{}", o.stderr);
}

// ----- snapshots: pct snapshot / delsnapshot / rollback and GET .../snapshot (AbstractConfig, Snapshot.pm) ---------

#[tokio::test]
async fn snapshots_are_taken_listed_rolled_back_and_deleted_as_pve_does() {
    let (s, n) = seeded(None).await;
    let mut sp = spec(100, "local-lvm", 1);
    sp.memory = Some(512);
    sp.description = Some("managed-by: pxfleet fleet=dev name=web\n".into());
    n.create(&sp, None).await.expect("create");
    n.snapshot(100, "before", Some("before the upgrade"))
        .await
        .expect("snapshot");
    let change = ConfigChange {
        memory: Some(1024),
        ..ConfigChange::default()
    };
    n.set(100, &change).await.expect("set");
    n.snapshot(100, "after", None)
        .await
        .expect("second snapshot");
    let list = n.snapshots(100).await.expect("list");
    let names: Vec<(&str, Option<&str>)> = list
        .iter()
        .map(|s| (s.name.as_str(), s.parent.as_deref()))
        .collect();
    assert_eq!(names, vec![("before", None), ("after", Some("before"))]);
    assert_eq!(list[0].description, "before the upgrade");
    let tree = s.cli("pve1", "pct", &["listsnapshot", "100"]);
    let lines: Vec<&str> = tree.stdout.lines().collect();
    assert_eq!(lines.len(), 3, "{}", tree.stdout);
    assert!(lines[0].starts_with("`-> before ") && lines[0].ends_with("before the upgrade"));
    assert!(lines[1].starts_with(" `-> after ") && lines[1].ends_with("no-description"));
    assert!(lines[2].starts_with("  `-> current ") && lines[2].ends_with("You are here!"));
    assert!(list[0].snaptime > 0);
    // A name in use, a reserved one, and one that is not there.
    let o = s.cli("pve1", "pct", &["snapshot", "100", "before"]);
    assert_ne!(o.code, 0);
    assert!(
        o.stderr.contains("snapshot name 'before' already used"),
        "{}",
        o.stderr
    );
    let o = s.cli("pve1", "pct", &["snapshot", "100", "current"]);
    assert!(
        o.stderr
            .contains("unable to use snapshot name 'current' (reserved name)"),
        "{}",
        o.stderr
    );
    let o = s.cli("pve1", "pct", &["rollback", "100", "nope"]);
    assert!(
        o.stderr.contains("snapshot 'nope' does not exist"),
        "{}",
        o.stderr
    );

    // Rollback: a running container is stopped, the config is the snapshot's, the description stays the current one.
    n.start(100).await.expect("start");
    n.rollback(100, "before", false).await.expect("rollback");
    let cfg = n.config(100).await.expect("config");
    assert_eq!(cfg.memory, Some(512));
    assert!(cfg
        .description
        .as_deref()
        .is_some_and(|d| d.contains("pxfleet fleet=dev name=web")));
    let st = s.cli("pve1", "pct", &["status", "100"]);
    assert!(st.stdout.contains("stopped"), "{}", st.stdout);
    let raw = s.cli("pve1", "pct", &["config", "100"]);
    assert!(raw.stdout.contains("parent: before"), "{}", raw.stdout);
    n.rollback(100, "after", true)
        .await
        .expect("rollback --start");
    assert_eq!(n.config(100).await.unwrap().memory, Some(1024));
    let st = s.cli("pve1", "pct", &["status", "100"]);
    assert!(st.stdout.contains("running"), "{}", st.stdout);

    // Deleting `before` makes `after` a root.
    n.delete_snapshot(100, "before").await.expect("delsnapshot");
    let list = n.snapshots(100).await.expect("list");
    assert_eq!(list.len(), 1);
    assert_eq!(
        (list[0].name.as_str(), list[0].parent.as_deref()),
        ("after", None)
    );

    // A storage that cannot snapshot (dir) and a template are refused.
    n.create(&spec(101, "local", 1), None)
        .await
        .expect("create on dir");
    let o = s.cli("pve1", "pct", &["snapshot", "101", "s1"]);
    assert!(
        o.stderr.contains("snapshot feature is not available"),
        "{}",
        o.stderr
    );
    n.create(&spec(102, "local-lvm", 1), None)
        .await
        .expect("create");
    n.template(102).await.expect("template");
    let o = s.cli("pve1", "pct", &["snapshot", "102", "s1"]);
    assert!(
        o.stderr
            .contains("you can't take a snapshot if it's a template"),
        "{}",
        o.stderr
    );
}

// ----- resource pools: user.cfg, /pools (pve-manager Pool.pm), pct create --pool, destroy --------------------------

#[tokio::test]
async fn pools_hold_guests_as_pve_keeps_them() {
    let (s, n) = seeded(None).await;
    // A create into a pool that does not exist is refused before anything is made.
    let mut sp = spec(100, "local-lvm", 1);
    sp.pool = Some("web".into());
    let e = n.create(&sp, None).await.expect_err("no such pool");
    assert!(e.to_string().contains("pool 'web' does not exist"), "{e}");
    assert!(n.config(100).await.is_err(), "nothing created");
    for pool in ["web", "db"] {
        let o = s.cli("pve1", "pvesh", &["create", "/pools", "--poolid", pool]);
        assert_eq!(o.code, 0, "{}", o.stderr);
    }
    let o = s.cli("pve1", "pvesh", &["create", "/pools", "--poolid", "web"]);
    assert!(
        o.stderr.contains("pool 'web' already exists"),
        "{}",
        o.stderr
    );
    assert_eq!(
        n.pools().await.unwrap(),
        vec!["db".to_string(), "web".to_string()]
    );

    n.create(&sp, None).await.expect("create into web");
    let pool_of = |vmid: u64| {
        let s = &s;
        async move {
            let o = s.cli(
                "pve1",
                "pvesh",
                &[
                    "get",
                    "/cluster/resources",
                    "--type",
                    "vm",
                    "--output-format",
                    "json",
                ],
            );
            let v: serde_json::Value = serde_json::from_str(&o.stdout).unwrap();
            v.as_array()
                .unwrap()
                .iter()
                .find(|e| e["vmid"] == vmid)
                .and_then(|e| e["pool"].as_str().map(String::from))
        }
    };
    assert_eq!(pool_of(100).await.as_deref(), Some("web"));
    // Into another pool only with allow-move (set_pool sends it); out of it with delete.
    let o = s.cli(
        "pve1",
        "pvesh",
        &["set", "/pools", "--poolid", "db", "--vms", "100"],
    );
    assert!(
        o.stderr
            .contains("VM 100 belongs already to pool 'web' and 'allow-move' is not set"),
        "{}",
        o.stderr
    );
    n.set_pool(100, Some("web"), Some("db"))
        .await
        .expect("move");
    assert_eq!(pool_of(100).await.as_deref(), Some("db"));
    n.set_pool(100, Some("db"), None).await.expect("out");
    assert_eq!(pool_of(100).await, None);
    let e = n
        .set_pool(100, Some("db"), None)
        .await
        .expect_err("not a member");
    assert!(e.to_string().contains("VM 100 is not a pool member"), "{e}");
    // A pool with a guest cannot go; a destroy takes the guest out of its pool.
    n.set_pool(100, None, Some("web")).await.expect("in again");
    let o = s.cli("pve1", "pvesh", &["delete", "/pools", "--poolid", "web"]);
    assert!(
        o.stderr
            .contains("pool 'web' is not empty (contains VM 100)"),
        "{}",
        o.stderr
    );
    n.destroy(100).await.expect("destroy");
    let o = s.cli("pve1", "pvesh", &["delete", "/pools", "--poolid", "web"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert_eq!(n.pools().await.unwrap(), vec!["db".to_string()]);
}
