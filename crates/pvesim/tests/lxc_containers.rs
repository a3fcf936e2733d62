//! Real containers through the pvesim binary with `--backend lxc` (root only): create from the testbed template,
//! start, ssh in, live memory change, stop, destroy; static address + unprivileged (container root = host uid
//! 100000), DHCP + privileged, and a node inside its own network namespace. Root and LXC only: the tests are
//! `#[ignore]`d and scripts/e2e runs them with `--ignored` (a missing prerequisite then fails).

// Test code: it starts the programs under test and the tools around them.
#![allow(clippy::disallowed_methods)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Panics, naming what is missing, unless this runs as root with LXC installed (the tests are `#[ignore]`d:
/// reaching this means they were asked for).
fn require_lxc() {
    use std::os::unix::fs::MetadataExt;
    let root = std::fs::metadata("/proc/self")
        .map(|m| m.uid() == 0)
        .unwrap_or(false);
    assert!(
        root,
        "the lxc backend tests need root (scripts/e2e runs them)"
    );
    assert!(
        Path::new("/usr/bin/lxc-start").exists(),
        "lxc-start is not installed (scripts/testbed/setup installs it)"
    );
}

fn sh(argv: &[&str]) -> Output {
    let o = Command::new(argv[0])
        .args(&argv[1..])
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("{argv:?}: {e}"));
    o
}

fn ok(argv: &[&str]) -> String {
    let o = sh(argv);
    assert!(
        o.status.success(),
        "{argv:?} failed: {}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).to_string()
}

struct Node {
    state: PathBuf,
    bin: PathBuf,
}

impl Node {
    fn init(dir: &Path, name: &str, overrides: &str, template: &Path) -> Node {
        let state = dir.join(name);
        let bin = dir.join("bin");
        let ov = dir.join(format!("{name}.toml"));
        std::fs::write(&ov, overrides).unwrap();
        ok(&[
            env!("CARGO_BIN_EXE_pvesim"),
            "init",
            "--state",
            state.to_str().unwrap(),
            "--node",
            name,
            "--config",
            ov.to_str().unwrap(),
            "--bin-dir",
            bin.to_str().unwrap(),
        ]);
        std::fs::copy(
            template,
            state
                .join("storage/local/template/cache")
                .join(template.file_name().unwrap()),
        )
        .unwrap();
        Node { state, bin }
    }

    fn tool(&self, tool: &str, args: &[&str], stdin: Option<&str>) -> Output {
        let mut c = Command::new(self.bin.join(tool));
        c.args(args).env("PVESIM_STATE", &self.state);
        c.stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        });
        c.stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut ch = c.spawn().unwrap();
        if let Some(s) = stdin {
            use std::io::Write;
            ch.stdin.take().unwrap().write_all(s.as_bytes()).unwrap();
        }
        ch.wait_with_output().unwrap()
    }

    fn pct(&self, args: &[&str]) -> String {
        let o = self.tool("pct", args, None);
        assert!(
            o.status.success(),
            "pct {args:?} exit {:?}: {}{}",
            o.status.code(),
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8_lossy(&o.stdout).to_string()
    }

    fn status_field(&self, vmid: &str, field: &str) -> String {
        self.pct(&["status", vmid, "--verbose"])
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{field}: ")).map(String::from))
            .unwrap_or_default()
    }

    fn eth0_addr(&self, node: &str, vmid: &str) -> Option<String> {
        let o = self.tool(
            "pvesh",
            &[
                "get",
                &format!("/nodes/{node}/lxc/{vmid}/interfaces"),
                "--output-format",
                "json",
            ],
            None,
        );
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).ok()?;
        let e = v.as_array()?.iter().find(|i| i["name"] == "eth0")?;
        assert_eq!(e["hwaddr"].as_str()?, e["hwaddr"].as_str()?.to_lowercase());
        Some(e["inet"].as_str()?.split('/').next()?.to_string())
    }
}

fn ssh(key: &Path, ip: &str, cmd: &str) -> Option<String> {
    let o = sh(&[
        "ssh",
        "-i",
        key.to_str().unwrap(),
        "-o",
        "BatchMode=yes",
        "-o",
        "StrictHostKeyChecking=no",
        "-o",
        "UserKnownHostsFile=/dev/null",
        "-o",
        "ConnectTimeout=3",
        "-o",
        "LogLevel=ERROR",
        &format!("root@{ip}"),
        cmd,
    ]);
    o.status
        .success()
        .then(|| String::from_utf8_lossy(&o.stdout).to_string())
}

fn wait_for<T>(secs: u64, mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let end = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(v) = f() {
            return Some(v);
        }
        if Instant::now() > end {
            return None;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn setup_value(out: &str, key: &str) -> String {
    out.lines()
        .find_map(|l| l.strip_prefix(&format!("{key}=")))
        .unwrap_or_else(|| panic!("setup printed no {key}: {out}"))
        .to_string()
}

/// The tests here share one testbed (bridge, dnsmasq) and each may set it up and tear it down: under a plain
/// `cargo test` they would run at once and race (one's teardown under the other's containers), so each holds
/// this for its whole run.
static TESTBED: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn testbed_turn() -> std::sync::MutexGuard<'static, ()> {
    TESTBED
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[test]
#[ignore = "needs root and LXC (scripts/e2e runs it)"]
fn real_containers_on_the_lxc_backend() {
    require_lxc();
    let _turn = testbed_turn();
    let bridge_existed = sh(&["ip", "link", "show", "pxtbr0"]).status.success();
    let out = ok(&[repo().join("scripts/testbed/setup").to_str().unwrap()]);
    let template = PathBuf::from(setup_value(&out, "TEMPLATE"));
    let tname = template.file_name().unwrap().to_str().unwrap().to_string();
    let bridge = setup_value(&out, "BRIDGE");
    let dir = tempfile::Builder::new()
        .prefix("pvesim-lxc-")
        .tempdir_in("/var/tmp")
        .unwrap();
    let key = dir.path().join("key");
    ok(&[
        "ssh-keygen",
        "-q",
        "-t",
        "ed25519",
        "-N",
        "",
        "-f",
        key.to_str().unwrap(),
    ]);
    let pubkey = format!("{}.pub", key.display());
    let tvol = format!("local:vztmpl/{tname}");

    let n1 = Node::init(
        dir.path(),
        "lxa",
        &format!("backend = \"lxc\"\n[[bridge]]\nname = \"{bridge}\"\ncidr = \"10.77.0.1/24\"\n"),
        &template,
    );

    // 1. unprivileged, static address: ssh works, hostname is ours, root is host uid 100000, size enforced
    n1.pct(&[
        "create",
        "9301",
        &tvol,
        "--rootfs",
        "local-lvm:1",
        "--hostname",
        "lxa-static",
        "--memory",
        "256",
        "--net0",
        &format!("name=eth0,bridge={bridge},ip=10.77.0.31/24,hwaddr=02:77:00:93:01:01"),
        "--ssh-public-keys",
        &pubkey,
        "--password",
        "not-in-argv-of-children",
    ]);
    n1.pct(&["start", "9301"]);
    assert_eq!(n1.pct(&["status", "9301"]), "status: running\n");
    let hn = wait_for(15, || ssh(&key, "10.77.0.31", "hostname"));
    assert_eq!(
        hn.as_deref(),
        Some("lxa-static\n"),
        "ssh to the static container"
    );
    let map = ssh(&key, "10.77.0.31", "cat /proc/self/uid_map").unwrap();
    assert_eq!(
        map.split_whitespace().collect::<Vec<_>>(),
        ["0", "100000", "65536"]
    );
    let df = ssh(&key, "10.77.0.31", "df -k --output=size / | tail -1").unwrap();
    let kb: u64 = df.trim().parse().unwrap();
    assert!(
        kb > 900_000 && kb < 1_100_000,
        "1 GiB rootfs, df says {kb} KiB"
    );
    assert_eq!(n1.eth0_addr("lxa", "9301").as_deref(), Some("10.77.0.31"));
    let shadow = ssh(&key, "10.77.0.31", "grep ^root: /etc/shadow").unwrap();
    assert!(shadow.starts_with("root:$6$"), "{shadow}");

    // pct exec: output, exit code and stdin pass through
    let o = n1.tool(
        "pct",
        &["exec", "9301", "--", "sh", "-c", "cat; exit 7"],
        Some("from-stdin"),
    );
    assert_eq!(
        (o.status.code(), String::from_utf8_lossy(&o.stdout).as_ref()),
        (Some(7), "from-stdin")
    );

    // 2. live memory change keeps the container (same pid, uptime goes on) and reaches the cgroup
    let pid = n1.status_field("9301", "pid");
    std::thread::sleep(Duration::from_millis(1100));
    n1.pct(&["set", "9301", "--memory", "384"]);
    assert_eq!(n1.status_field("9301", "pid"), pid);
    assert_eq!(
        n1.status_field("9301", "maxmem"),
        (384u64 << 20).to_string()
    );
    let lim = n1.tool(
        "pct",
        &[
            "exec",
            "9301",
            "--",
            "cat",
            "/sys/fs/cgroup/memory/memory.limit_in_bytes",
        ],
        None,
    );
    let v1 = Path::new("/sys/fs/cgroup/memory/memory.limit_in_bytes").exists();
    if v1 && lim.status.success() {
        assert_eq!(
            String::from_utf8_lossy(&lim.stdout).trim(),
            (384u64 << 20).to_string()
        );
    }
    assert!(n1.status_field("9301", "uptime").parse::<u64>().unwrap() >= 1);

    // 3. stop is fast, state is real
    let t = Instant::now();
    n1.pct(&["shutdown", "9301"]);
    assert!(
        t.elapsed() < Duration::from_secs(10),
        "shutdown took {:?}",
        t.elapsed()
    );
    assert_eq!(n1.pct(&["status", "9301"]), "status: stopped\n");
    assert!(ssh(&key, "10.77.0.31", "true").is_none());

    // 4. privileged with DHCP from the testbed's dnsmasq
    n1.pct(&[
        "create",
        "9302",
        &tvol,
        "--rootfs",
        "local-lvm:1",
        "--hostname",
        "lxa-dhcp",
        "--unprivileged",
        "0",
        "--net0",
        &format!("name=eth0,bridge={bridge},ip=dhcp,hwaddr=02:77:00:93:02:01"),
        "--ssh-public-keys",
        &pubkey,
        "--start",
        "1",
    ]);
    let ip = wait_for(20, || n1.eth0_addr("lxa", "9302")).expect("a DHCP address on eth0");
    assert!(ip.starts_with("10.77.0."), "{ip}");
    assert_eq!(
        wait_for(15, || ssh(&key, &ip, "hostname")).as_deref(),
        Some("lxa-dhcp\n")
    );
    let map = ssh(&key, &ip, "cat /proc/self/uid_map").unwrap();
    assert_eq!(
        map.split_whitespace().collect::<Vec<_>>(),
        ["0", "0", "4294967295"]
    );

    // destroy removes the container and its volume
    n1.pct(&["destroy", "9302", "--force", "1"]);
    n1.pct(&["destroy", "9301"]);
    assert!(ssh(&key, &ip, "true").is_none());
    assert_eq!(n1.pct(&["list"]), "");
    assert!(!n1
        .tool("pvesm", &["list", "local-lvm"], None)
        .stdout
        .windows(4)
        .any(|w| w == b"9301"));

    // 5. a node in its own network namespace: lxc-* run inside it, the container joins the LAN through vmbr0
    let netns = repo().join("scripts/testbed/netns");
    ok(&[netns.to_str().unwrap(), "add", "pxtlx1", "10.77.0.71"]);
    let n2 = Node::init(
        dir.path(),
        "lxb",
        "backend = \"lxc\"\n[lxc]\nnetns = \"pxtlx1\"\n[[bridge]]\nname = \"vmbr0\"\ncidr = \"10.77.0.71/24\"\n",
        &template,
    );
    n2.pct(&[
        "create",
        "9303",
        &tvol,
        "--rootfs",
        "local-lvm:1",
        "--hostname",
        "lxb-ns",
        "--net0",
        "name=eth0,bridge=vmbr0,ip=10.77.0.33/24,hwaddr=02:77:00:93:03:01",
        "--ssh-public-keys",
        &pubkey,
        "--start",
        "1",
    ]);
    assert_eq!(n2.pct(&["status", "9303"]), "status: running\n");
    assert_eq!(
        wait_for(15, || ssh(&key, "10.77.0.33", "hostname")).as_deref(),
        Some("lxb-ns\n")
    );
    // from the host namespace LXC cannot see it (abstract socket per netns): pvesim must have gone inside
    let outside = sh(&[
        "lxc-info",
        "-n",
        "pxsim-lxb-9303",
        "-P",
        n2.state.join("lxc").to_str().unwrap(),
        "-sH",
    ]);
    assert_ne!(String::from_utf8_lossy(&outside.stdout).trim(), "RUNNING");
    assert_eq!(n2.eth0_addr("lxb", "9303").as_deref(), Some("10.77.0.33"));
    n2.pct(&["stop", "9303"]);
    n2.pct(&["destroy", "9303"]);
    ok(&[netns.to_str().unwrap(), "del", "pxtlx1"]);

    if !bridge_existed {
        ok(&[repo().join("scripts/testbed/teardown").to_str().unwrap()]);
    }
}

/// Six containers created and started at the same time on one node (what an agent at parallelism 4 on two nodes
/// does to one host), then all six restarted at once: every one must run the right rootfs (ssh answers with its
/// own hostname), and afterwards no loop device may still hold any of their images.
#[test]
#[ignore = "needs root and LXC (scripts/e2e runs it)"]
fn six_concurrent_creates_and_starts() {
    require_lxc();
    let _turn = testbed_turn();
    let bridge_existed = sh(&["ip", "link", "show", "pxtbr0"]).status.success();
    let out = ok(&[repo().join("scripts/testbed/setup").to_str().unwrap()]);
    let template = PathBuf::from(setup_value(&out, "TEMPLATE"));
    let tname = template.file_name().unwrap().to_str().unwrap().to_string();
    let bridge = setup_value(&out, "BRIDGE");
    let dir = tempfile::Builder::new()
        .prefix("pvesim-lxc6-")
        .tempdir_in("/var/tmp")
        .unwrap();
    let key = dir.path().join("key");
    ok(&[
        "ssh-keygen",
        "-q",
        "-t",
        "ed25519",
        "-N",
        "",
        "-f",
        key.to_str().unwrap(),
    ]);
    let pubkey = format!("{}.pub", key.display());
    let tvol = format!("local:vztmpl/{tname}");
    let n = Node::init(
        dir.path(),
        "lxc6",
        &format!("backend = \"lxc\"\n[[bridge]]\nname = \"{bridge}\"\ncidr = \"10.77.0.1/24\"\n"),
        &template,
    );
    let cts: Vec<(String, String, String)> = (1..=6)
        .map(|i| {
            (
                format!("{}", 9400 + i),
                format!("lxc6-c{i}"),
                format!("10.77.0.{}", 50 + i),
            )
        })
        .collect();
    // on a failed assertion too: no container may outlive the test
    struct Cleanup<'a>(&'a Node, Vec<String>);
    impl Drop for Cleanup<'_> {
        fn drop(&mut self) {
            for v in &self.1 {
                let _ = self.0.tool("pct", &["destroy", v, "--force", "1"], None);
            }
        }
    }
    let _cleanup = Cleanup(&n, cts.iter().map(|c| c.0.clone()).collect());
    let run_all = |f: &(dyn Fn(&(String, String, String)) -> Output + Sync)| -> Vec<String> {
        std::thread::scope(|s| {
            let hs: Vec<_> = cts.iter().map(|c| s.spawn(move || (c, f(c)))).collect();
            hs.into_iter()
                .filter_map(|h| {
                    let (c, o) = h.join().unwrap();
                    (!o.status.success()).then(|| {
                        format!(
                            "CT {}: exit {:?}: {}{}",
                            c.0,
                            o.status.code(),
                            String::from_utf8_lossy(&o.stdout),
                            String::from_utf8_lossy(&o.stderr)
                        )
                    })
                })
                .collect()
        })
    };
    let check_all = |round: &str| {
        for (vmid, host, ip) in &cts {
            let d = n.state.join(format!("lxc/pxsim-lxc6-{vmid}"));
            let logs = || {
                let r = |f: &str| std::fs::read_to_string(d.join(f)).unwrap_or_default();
                format!(
                    "lxc.log:\n{}\nconsole.log:\n{}\nlosetup -a:\n{}",
                    r("lxc.log"),
                    r("console.log"),
                    ok(&["losetup", "-a"])
                )
            };
            assert_eq!(
                n.pct(&["status", vmid]),
                "status: running\n",
                "{round}: CT {vmid}\n{}",
                logs()
            );
            let hn = wait_for(20, || ssh(&key, ip, "hostname"));
            assert_eq!(
                hn.as_deref(),
                Some(format!("{host}\n").as_str()),
                "{round}: ssh to CT {vmid} at {ip}"
            );
        }
    };
    let failed = run_all(&|(vmid, host, ip)| {
        let i = vmid.parse::<u32>().unwrap() - 9400;
        n.tool(
            "pct",
            &[
                "create",
                vmid,
                &tvol,
                "--rootfs",
                "local-lvm:1",
                "--hostname",
                host,
                "--net0",
                &format!("name=eth0,bridge={bridge},ip={ip}/24,hwaddr=02:77:00:94:{i:02x}:01"),
                "--ssh-public-keys",
                &pubkey,
                "--start",
                "1",
            ],
            None,
        )
    });
    assert!(
        failed.is_empty(),
        "concurrent create+start:\n{}",
        failed.join("\n")
    );
    check_all("after the concurrent creates");

    let failed = run_all(&|(vmid, _, _)| n.tool("pct", &["stop", vmid], None));
    assert!(failed.is_empty(), "concurrent stop:\n{}", failed.join("\n"));
    let failed = run_all(&|(vmid, _, _)| n.tool("pct", &["start", vmid], None));
    assert!(
        failed.is_empty(),
        "concurrent start:\n{}",
        failed.join("\n")
    );
    check_all("after the concurrent restarts");

    let failed = run_all(&|(vmid, _, _)| n.tool("pct", &["destroy", vmid, "--force", "1"], None));
    assert!(
        failed.is_empty(),
        "concurrent destroy:\n{}",
        failed.join("\n")
    );
    assert_eq!(n.pct(&["list"]), "");
    let loops = ok(&["losetup", "-a"]);
    let state = n.state.display().to_string();
    assert!(
        !loops.contains(&state),
        "loop devices left attached to this node's images:\n{loops}"
    );
    if !bridge_existed {
        ok(&[repo().join("scripts/testbed/teardown").to_str().unwrap()]);
    }
}
