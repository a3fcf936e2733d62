//! End-to-end tests of the built `pvesim` binary against temporary state directories.

// Test code: it starts the programs under test and the tools around them.
#![allow(clippy::disallowed_methods)]

use std::path::{Path, PathBuf};
use std::process::Command;

const TMPL: &str = "local:vztmpl/debian-13-standard_13.6-1_amd64.tar.zst";

struct Sim {
    _dir: tempfile::TempDir,
    root: PathBuf,
}

struct Out {
    stdout: String,
    stderr: String,
    code: i32,
}

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_pvesim")
}

impl Sim {
    fn new(node: &str) -> Sim {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().to_path_buf();
        let s = Sim { _dir: dir, root };
        s.init(node, None, None);
        s
    }

    fn init(&self, node: &str, cluster: Option<&Path>, config: Option<&str>) {
        let mut c = Command::new(bin());
        c.args(["init", "--state"])
            .arg(self.root.join(node))
            .args(["--node", node]);
        c.arg("--bin-dir").arg(self.root.join("bin"));
        if let Some(cl) = cluster {
            c.arg("--cluster").arg(cl);
        }
        if let Some(cfg) = config {
            let p = self.root.join(format!("{node}.toml"));
            std::fs::write(&p, cfg).unwrap();
            c.arg("--config").arg(p);
        }
        let o = c.output().unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }

    fn run(&self, node: &str, tool: &str, args: &[&str]) -> Out {
        let o = Command::new(self.root.join("bin").join(tool))
            .args(args)
            .env("PVESIM_STATE", self.root.join(node))
            .output()
            .unwrap();
        Out {
            stdout: String::from_utf8_lossy(&o.stdout).into(),
            stderr: String::from_utf8_lossy(&o.stderr).into(),
            code: o.status.code().unwrap_or(-1),
        }
    }

    fn seed(&self, node: &str) {
        let o = self.run(
            node,
            "pveam",
            &[
                "download",
                "local",
                "debian-13-standard_13.6-1_amd64.tar.zst",
            ],
        );
        assert_eq!(o.code, 0, "{}", o.stderr);
    }

    fn create(&self, node: &str, vmid: &str, extra: &[&str]) -> Out {
        let mut a = vec!["create", vmid, TMPL];
        a.extend_from_slice(extra);
        self.run(node, "pct", &a)
    }
}

fn fixture(name: &str) -> String {
    std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures")
            .join(name),
    )
    .unwrap()
}

#[test]
fn brief_scenario_matches_pve_layouts() {
    let s = Sim::new("pve1");
    s.seed("pve1");
    let o = s.create(
        "pve1",
        "100",
        &[
            "--rootfs",
            "local-lvm:8",
            "--hostname",
            "a",
            "--net0",
            "name=eth0,bridge=vmbr0,ip=dhcp",
        ],
    );
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(o.stdout.starts_with(
        "  Logical volume \"vm-100-disk-0\" created.\nCreating filesystem with 2097152 4k blocks"
    ));
    assert!(o
        .stdout
        .contains("Detected container architecture: amd64\n"));
    assert!(!o.stdout.contains("UPID:"), "pct does not print the UPID");
    assert_eq!(s.run("pve1", "pct", &["start", "100"]).code, 0);

    let list = s.run("pve1", "pct", &["list"]).stdout;
    assert_eq!(list.lines().next(), fixture("pct-list.txt").lines().next());
    assert_eq!(
        list.lines().nth(1).unwrap(),
        format!("{:<10} {:<10} {:<12} {:<20}", "100", "running", "", "a")
    );

    let conf = s.run("pve1", "pct", &["config", "100"]).stdout;
    let keys: Vec<&str> = conf.lines().map(|l| l.split(':').next().unwrap()).collect();
    assert_eq!(
        keys,
        [
            "arch",
            "hostname",
            "memory",
            "net0",
            "ostype",
            "rootfs",
            "swap",
            "unprivileged"
        ]
    );
    assert!(conf.contains("rootfs: local-lvm:vm-100-disk-0,size=8G\n"));
    let net0 = conf.lines().find(|l| l.starts_with("net0: ")).unwrap();
    let re = regex::Regex::new(r"^net0: name=eth0,bridge=vmbr0,hwaddr=BC:24:11:[0-9A-F]{2}:[0-9A-F]{2}:[0-9A-F]{2},ip=dhcp,type=veth$").unwrap();
    assert!(re.is_match(net0), "{net0}");

    assert_eq!(
        s.run("pve1", "pct", &["status", "100"]).stdout,
        "status: running\n"
    );

    let j = s.run(
        "pve1",
        "pvesh",
        &["get", "/nodes/pve1/lxc", "--output-format", "json"],
    );
    let v: serde_json::Value = serde_json::from_str(&j.stdout).unwrap();
    let ex: serde_json::Value =
        serde_json::from_str(&fixture("pvesh-nodes-node-lxc.json")).unwrap();
    let keys = |x: &serde_json::Value| x.as_object().unwrap().keys().cloned().collect::<Vec<_>>();
    let mut want = keys(&ex[1]);
    want.retain(|k| k != "tags");
    assert_eq!(
        keys(&v[0]),
        want,
        "running CT (without tags) has the fields of the example's running CT"
    );
    assert_eq!(v[0]["maxdisk"], 8u64 << 30);
    assert!(
        j.stdout.starts_with("[{\"cpu\":0,\"cpus\":8,"),
        "compact sorted JSON: {}",
        j.stdout
    );

    let st = s.run("pve1", "pvesm", &["status"]).stdout;
    // the example has a longer storage id (nfs-backup), so its first column is one wider
    let ex_status = fixture("pvesm-status.txt");
    assert_eq!(
        st.lines().next().unwrap(),
        ex_status
            .lines()
            .next()
            .unwrap()
            .replacen("Name  ", "Name ", 1)
    );
    assert!(st.lines().nth(2).unwrap().starts_with(
        "local-lvm     lvmthin     active       367001600         8388608       358612992    2.29%"
    ));

    let pl = s.run("pve1", "pveam", &["list", "local"]).stdout;
    assert_eq!(
        pl.lines().next(),
        fixture("pveam-list-local.txt").lines().next()
    );
    assert!(pl.contains(&format!("{:<60} 0.00MB\n", TMPL)));

    let again = s.create("pve1", "100", &[]);
    assert_eq!(again.stderr, fixture("pct-create-exists.stderr.txt"));
    assert_eq!(again.code, 255);

    let unknown = s.create("pve1", "101", &["--foo", "bar"]);
    assert_eq!(unknown.stderr, "Unknown option: foo\n400 unable to parse option\npct create <vmid> <ostemplate> [OPTIONS]\n");
    assert_eq!(unknown.code, 255);
}

#[test]
fn validation_errors_follow_the_schema() {
    let s = Sim::new("pve1");
    s.seed("pve1");
    let o = s.create("pve1", "101", &["--memory", "8"]);
    assert_eq!(o.stderr, "400 Parameter verification failed.\nmemory: value must have a minimum value of 16\npct create <vmid> <ostemplate> [OPTIONS]\n");
    let o = s.create("pve1", "101", &["--net0", "name=eth0,colour=red"]);
    assert!(
        o.stderr.contains(
            "net0: invalid format - invalid key in comma-separated list property: colour\n"
        ),
        "{}",
        o.stderr
    );
    let o = s.create("pve1", "101", &["--arch", "sparc"]);
    assert!(o.stderr.contains("arch: value 'sparc' does not have a value in the enumeration 'amd64, i386, arm64, armhf, riscv32, riscv64'"));
    let o = s.create("pve1", "101", &["--rootfs", "local:8"]);
    assert_eq!(
        o.code, 0,
        "local has rootdir content by default: {}",
        o.stderr
    );
    let o = s.run("pve1", "pct", &["status", "99"]);
    assert!(o
        .stderr
        .contains("vmid: invalid format - value does not look like a valid VM ID"));
    assert_eq!(s.run("pve1", "pct", &["list"]).code, 0);
}

#[test]
fn missing_template_and_missing_ct() {
    let s = Sim::new("pve1");
    let o = s.run(
        "pve1",
        "pct",
        &[
            "create",
            "103",
            "local:vztmpl/debian-13-standard_13.9-1_amd64.tar.zst",
        ],
    );
    assert_eq!(o.stderr, fixture("pct-create-missing-template.stderr.txt"));
    assert_eq!(o.code, 255);
    assert_eq!(
        s.run("pve1", "pct", &["list"]).stdout,
        "",
        "config removed, no CTs, no header"
    );
    assert_eq!(
        s.run("pve1", "pvesm", &["list", "local"])
            .stdout
            .lines()
            .count(),
        1,
        "disk freed"
    );
    let o = s.run("pve1", "pct", &["config", "999"]);
    assert_eq!(o.stderr, fixture("pct-missing-ct.stderr.txt"));
}

#[test]
fn lifecycle_and_pvesh_tasks() {
    let s = Sim::new("pve1");
    s.seed("pve1");
    let o = s.run(
        "pve1",
        "pvesh",
        &[
            "create",
            "/nodes/pve1/lxc",
            "--vmid",
            "103",
            "--ostemplate",
            TMPL,
            "--rootfs",
            "local-zfs:16",
            "--output-format",
            "json",
        ],
    );
    assert_eq!(o.code, 0, "{}", o.stderr);
    let upid: String = serde_json::from_str(o.stdout.lines().last().unwrap()).unwrap();
    assert!(upid.starts_with("UPID:pve1:") && upid.contains(":vzcreate:103:root@pam:"));
    let st = s.run(
        "pve1",
        "pvesh",
        &[
            "get",
            &format!("/nodes/pve1/tasks/{upid}/status"),
            "--output-format",
            "json",
        ],
    );
    let v: serde_json::Value = serde_json::from_str(&st.stdout).unwrap();
    assert_eq!(v["exitstatus"], "OK");
    assert_eq!(v["status"], "stopped");
    let cfg = s.run(
        "pve1",
        "pvesh",
        &[
            "get",
            "/nodes/pve1/lxc/103/config",
            "--output-format",
            "json",
        ],
    );
    let v: serde_json::Value = serde_json::from_str(&cfg.stdout).unwrap();
    assert_eq!(v["rootfs"], "local-zfs:subvol-103-disk-0,size=16G");
    assert_eq!(v["memory"], 512);
    assert_eq!(v["hostname"], "CT103");
    let i = s.run(
        "pve1",
        "pvesh",
        &[
            "get",
            "/nodes/pve1/lxc/103/interfaces",
            "--output-format",
            "json",
        ],
    );
    assert_eq!(i.stdout, "null\n");
    assert_eq!(
        s.run("pve1", "pct", &["stop", "103"]).stderr,
        "CT 103 not running\n"
    );
    assert_eq!(
        s.run(
            "pve1",
            "pct",
            &["set", "103", "--tags", "web,Prod", "--cores", "2"]
        )
        .code,
        0
    );
    assert!(s
        .run("pve1", "pct", &["config", "103"])
        .stdout
        .contains("tags: prod;web\n"));
    let r = s.run("pve1", "pct", &["resize", "103", "rootfs", "+4G"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(s
        .run("pve1", "pct", &["config", "103"])
        .stdout
        .contains("rootfs: local-zfs:subvol-103-disk-0,size=20G\n"));
    assert_eq!(s.run("pve1", "pct", &["start", "103"]).code, 0);
    assert_eq!(
        s.run("pve1", "pct", &["start", "103"]).stderr,
        "CT 103 already running\n"
    );
    assert_eq!(
        s.run("pve1", "pct", &["destroy", "103"]).stderr,
        "unable to destroy CT 103 - container is running\n"
    );
    assert_eq!(s.run("pve1", "pct", &["destroy", "103", "--force"]).code, 0);
    assert_eq!(
        s.run("pve1", "pvesm", &["list", "local-zfs"])
            .stdout
            .lines()
            .count(),
        1
    );
}

#[test]
fn parallel_creates_distinct_all_win_same_vmid_one_wins() {
    let s = std::sync::Arc::new(Sim::new("pve1"));
    s.seed("pve1");
    let hs: Vec<_> = (0..6)
        .map(|i| {
            let s = s.clone();
            std::thread::spawn(move || {
                s.create("pve1", &(200 + i).to_string(), &["--rootfs", "local-lvm:1"])
                    .code
            })
        })
        .collect();
    assert!(hs.into_iter().all(|h| h.join().unwrap() == 0));
    let hs: Vec<_> = (0..4)
        .map(|_| {
            let s = s.clone();
            std::thread::spawn(move || s.create("pve1", "300", &["--rootfs", "local-lvm:1"]))
        })
        .collect();
    let outs: Vec<Out> = hs.into_iter().map(|h| h.join().unwrap()).collect();
    assert_eq!(outs.iter().filter(|o| o.code == 0).count(), 1);
    for o in outs.iter().filter(|o| o.code != 0) {
        assert!(
            o.stderr.contains("CT 300 already exists on node 'pve1'")
                || o.stderr.contains("got timeout"),
            "{}",
            o.stderr
        );
    }
    assert_eq!(s.run("pve1", "pct", &["list"]).stdout.lines().count(), 8);
    assert_eq!(
        s.run("pve1", "pvesm", &["list", "local-lvm"])
            .stdout
            .lines()
            .count(),
        8
    );
}

#[test]
fn cluster_ids_are_unique_and_ct_of_other_node_is_refused() {
    let s = Sim::new("pve1");
    let cluster = s.root.join("pve1");
    s.init("pve2", Some(&cluster), None);
    s.seed("pve1");
    s.seed("pve2");
    assert_eq!(s.create("pve1", "100", &[]).code, 0);
    let o = s.create("pve2", "100", &[]);
    assert_eq!(o.stderr, "CT 100 already exists on node 'pve1'\n");
    let o = s.run("pve2", "pct", &["status", "100"]);
    assert_eq!(
        o.stderr,
        "Configuration file 'nodes/pve2/lxc/100.conf' does not exist\n"
    );
    let n = s.run("pve2", "pvesh", &["get", "/cluster/nextid"]);
    assert_eq!(n.stdout, "101\n");
    assert_eq!(s.run("pve1", "pct", &["start", "100"]).code, 0);
    let m = s.run("pve1", "pct", &["migrate", "100", "pve2", "--restart"]);
    assert_eq!(m.code, 0, "{}", m.stderr);
    assert_eq!(
        s.run("pve2", "pct", &["status", "100"]).stdout,
        "status: running\n"
    );
    assert_eq!(s.run("pve1", "pct", &["list"]).stdout, "");
}

#[test]
fn cluster_status_names_the_cluster_and_migrate_needs_the_storage_on_the_target() {
    let s = Sim::new("solo");
    let status = |node: &str| -> serde_json::Value {
        let o = s.run(
            node,
            "pvesh",
            &["get", "/cluster/status", "--output-format", "json"],
        );
        assert_eq!(o.code, 0, "{}", o.stderr);
        serde_json::from_str(&o.stdout).unwrap()
    };
    // A node on its own: only its own entry, no cluster.
    let solo = status("solo");
    assert_eq!(solo.as_array().unwrap().len(), 1, "{solo}");
    assert_eq!(solo[0]["type"], "node");
    assert_eq!(solo[0]["nodeid"], 0);
    // Two nodes of cluster `lab`; pve2 lacks the storage `fast` that pve1 has.
    let cluster = s.root.join("lab");
    let mut c = Command::new(bin());
    let fast = s.root.join("fast.toml");
    std::fs::write(
        &fast,
        "[[storage]]\nid = \"fast\"\ntype = \"dir\"\ncontent = [\"rootdir\"]\n",
    )
    .unwrap();
    c.args(["init", "--state"])
        .arg(s.root.join("pve1"))
        .args(["--node", "pve1", "--cluster-name", "lab", "--cluster"])
        .arg(&cluster)
        .arg("--config")
        .arg(&fast);
    assert!(c.output().unwrap().status.success());
    s.init("pve2", Some(&cluster), None);
    let st = status("pve2");
    assert_eq!(st[0]["type"], "cluster", "{st}");
    assert_eq!(st[0]["name"], "lab");
    assert_eq!(st[0]["nodes"], 2);
    let local: Vec<&str> = st.as_array().unwrap()[1..]
        .iter()
        .filter(|n| n["local"] == 1)
        .map(|n| n["name"].as_str().unwrap())
        .collect();
    assert_eq!(local, ["pve2"]);
    // A later node naming another cluster for the same directory is refused.
    let o = Command::new(bin())
        .args(["init", "--state"])
        .arg(s.root.join("pve3"))
        .args(["--node", "pve3", "--cluster-name", "other", "--cluster"])
        .arg(&cluster)
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("is cluster 'lab'"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );

    s.seed("pve1");
    assert_eq!(s.create("pve1", "100", &["--rootfs", "fast:1"]).code, 0);
    assert_eq!(s.run("pve1", "pct", &["start", "100"]).code, 0);
    let m = s.run("pve1", "pct", &["migrate", "100", "pve2", "--restart"]);
    assert_ne!(m.code, 0);
    assert_eq!(m.stderr, "migration aborted\n");
    assert!(
        m.stdout.contains(
            "ERROR: migration aborted (duration 00:00:00): storage 'fast' is not available on node 'pve2'"
        ),
        "{}",
        m.stdout
    );
    // Nothing moved, still running where it was.
    assert_eq!(
        s.run("pve1", "pct", &["status", "100"]).stdout,
        "status: running\n"
    );
    assert!(s
        .run("pve1", "pct", &["config", "100"])
        .stdout
        .contains("rootfs: fast:"));
    assert_eq!(s.run("pve2", "pct", &["list"]).stdout, "");
    // Not a node of this cluster.
    let m = s.run("pve1", "pct", &["migrate", "100", "solo", "--restart"]);
    assert_eq!(m.stderr, "no such cluster node 'solo'\n");
}

#[test]
fn capacity_and_faults() {
    let s = Sim::new("pve1");
    s.init(
        "pve9",
        None,
        Some("[[storage]]\nid = \"local-lvm\"\ncapacity_gib = 10\n\n[faults]\nfail_creates = { count = 1, message = \"boom\" }\n"),
    );
    s.seed("pve9");
    let o = s.create("pve9", "100", &["--rootfs", "local-lvm:8"]);
    assert_eq!(o.stderr, "unable to create CT 100 - boom\n");
    assert_eq!(o.code, 255);
    assert_eq!(
        s.create("pve9", "100", &["--rootfs", "local-lvm:8"]).code,
        0
    );
    let o = s.create("pve9", "101", &["--rootfs", "local-lvm:8"]);
    assert_eq!(o.code, 255);
    assert!(
        o.stderr
            .starts_with("unable to create CT 101 - lvcreate 'pve/vm-101-disk-0' error:"),
        "{}",
        o.stderr
    );
    assert_eq!(
        s.run("pve9", "pct", &["list"]).stdout.lines().count(),
        2,
        "failed create left nothing"
    );
}

#[test]
fn held_lock_times_out_then_frees() {
    let s = Sim::new("pve1");
    s.init(
        "pve9",
        None,
        Some("[faults]\nlock_vmid = { vmid = 100, seconds = 30 }\n"),
    );
    s.seed("pve9");
    let t = std::time::Instant::now();
    let o = s.create("pve9", "100", &[]);
    assert_eq!(o.stderr, "trying to acquire lock...can't lock file '/run/lock/lxc/pve-config-100.lock' - got timeout\n");
    assert_eq!(o.code, 255);
    assert!(t.elapsed() >= std::time::Duration::from_secs(5));
    assert_eq!(
        s.create("pve9", "101", &[]).code,
        0,
        "other vmids are not affected"
    );
}

#[test]
fn bad_config_file_names_position() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("bad.toml");
    std::fs::write(&cfg, "cores = 4\nbogus = 1\n").unwrap();
    let o = Command::new(bin())
        .args(["init", "--state"])
        .arg(dir.path().join("s"))
        .args(["--node", "pve1", "--config"])
        .arg(&cfg)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(e.contains("bad.toml:2:1"), "{e}");
}

#[test]
fn a_full_dhcp_range_takes_back_the_addresses_of_departed_containers_only() {
    let s = Sim::new("pve1");
    s.init(
        "pve8",
        None,
        Some("[dhcp]\nfirst = \"10.9.0.100\"\nlast = \"10.9.0.101\"\nprefix = 24\n"),
    );
    s.seed("pve8");
    for vmid in ["100", "101", "102"] {
        let o = s.create(
            "pve8",
            vmid,
            &[
                "--rootfs",
                "local-lvm:1",
                "--net0",
                "name=eth0,bridge=vmbr0,ip=dhcp",
            ],
        );
        assert_eq!(o.code, 0, "{}", o.stderr);
    }
    let addr = |vmid: &str| {
        let o = s.run(
            "pve8",
            "pvesh",
            &[
                "get",
                &format!("/nodes/pve8/lxc/{vmid}/interfaces"),
                "--output-format",
                "json",
            ],
        );
        assert_eq!(o.code, 0, "{}", o.stderr);
        let v: serde_json::Value = serde_json::from_str(&o.stdout).unwrap();
        v.as_array()
            .unwrap()
            .iter()
            .find(|i| i["name"] == "eth0")
            .and_then(|i| i["inet"].as_str())
            .unwrap_or_default()
            .to_string()
    };
    assert_eq!(s.run("pve8", "pct", &["start", "100"]).code, 0);
    assert_eq!(s.run("pve8", "pct", &["start", "101"]).code, 0);
    let (a100, a101) = (addr("100"), addr("101"));
    assert_eq!(
        (a100.as_str(), a101.as_str()),
        ("10.9.0.100/24", "10.9.0.101/24")
    );
    // Both leases belong to existing containers: none is taken from them, even when 101 is stopped.
    assert_eq!(s.run("pve8", "pct", &["stop", "101"]).code, 0);
    let o = s.run("pve8", "pct", &["start", "102"]);
    assert_ne!(o.code, 0);
    assert!(o.stderr.contains("no free address"), "{}", o.stderr);
    // 101 is destroyed: its lease expired with it, 102 gets the address.
    assert_eq!(s.run("pve8", "pct", &["destroy", "101"]).code, 0);
    assert_eq!(s.run("pve8", "pct", &["start", "102"]).code, 0);
    assert_eq!(addr("102"), "10.9.0.101/24");
    // 100 keeps its own across a restart.
    assert_eq!(s.run("pve8", "pct", &["reboot", "100"]).code, 0);
    assert_eq!(addr("100"), a100);
}
