//! The fault plan (`<state>/faults.toml` or `PVESIM_FAULTS=FILE`) on the built binary: each fault answers with
//! PVE's texts and exit codes (shared/pve/CONTRACT.md §1, §2.7, §3.11), fires `count` times, then the node
//! behaves again.

// Test code: it starts the programs under test and the tools around them.
#![allow(clippy::disallowed_methods)]

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use pxfleet_pve::{ProcessRunner, RunError, Runner};

const TMPL: &str = "local:vztmpl/debian-13-standard_13.6-1_amd64.tar.zst";
const NODE: &str = "pve9";

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
    fn new() -> Sim {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().to_path_buf();
        let o = Command::new(bin())
            .args(["init", "--state"])
            .arg(root.join(NODE))
            .args(["--node", NODE, "--bin-dir"])
            .arg(root.join("bin"))
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let s = Sim { _dir: dir, root };
        let o = s.run(
            "pveam",
            &[
                "download",
                "local",
                "debian-13-standard_13.6-1_amd64.tar.zst",
            ],
        );
        assert_eq!(o.code, 0, "{}", o.stderr);
        s
    }

    fn state(&self) -> PathBuf {
        self.root.join(NODE)
    }

    /// Writes the node's fault plan (`<state>/faults.toml`).
    fn plan(&self, toml: &str) {
        std::fs::write(self.state().join("faults.toml"), toml).unwrap();
    }

    fn command(&self, tool: &str, args: &[&str]) -> Command {
        let mut c = Command::new(self.root.join("bin").join(tool));
        c.args(args).env("PVESIM_STATE", self.state());
        c
    }

    fn output(mut c: Command) -> Out {
        let o = c.output().unwrap();
        Out {
            stdout: String::from_utf8_lossy(&o.stdout).into(),
            stderr: String::from_utf8_lossy(&o.stderr).into(),
            code: o.status.code().unwrap_or(-1),
        }
    }

    fn run(&self, tool: &str, args: &[&str]) -> Out {
        Self::output(self.command(tool, args))
    }

    fn create(&self, vmid: &str, rootfs: &str) -> Out {
        self.run("pct", &["create", vmid, TMPL, "--rootfs", rootfs])
    }

    fn config(&self, vmid: &str) -> String {
        self.run("pct", &["config", vmid]).stdout
    }
}

#[test]
fn half_create_leaves_a_locked_container_and_its_disk_until_unlocked_and_destroyed() {
    let s = Sim::new();
    s.plan("[half_create]\ncount = 1\n");
    let o = s.create("100", "local-lvm:4");
    assert_eq!(
        (o.code, o.stderr.as_str()),
        (
            255,
            "unable to create CT 100 - worker killed halfway (simulated)\n"
        )
    );
    // the VMID stays taken, the config holds only the lock, the disk stays allocated
    assert_eq!(s.config("100"), "lock: create\n");
    let list = s.run("pct", &["list"]).stdout;
    assert!(
        list.lines()
            .any(|l| l.starts_with("100 ") && l.contains("create")),
        "{list}"
    );
    let vols = s.run("pvesm", &["list", "local-lvm"]).stdout;
    assert!(vols.contains("vm-100-disk-0"), "{vols}");
    let o = s.create("100", "local-lvm:4");
    assert_eq!(o.code, 255);
    assert!(
        o.stderr.contains("CT 100 already exists on node 'pve9'"),
        "{}",
        o.stderr
    );
    let o = s.run("pct", &["destroy", "100"]);
    assert_eq!(
        (o.code, o.stderr.as_str()),
        (255, "CT is locked (create)\n")
    );
    // what an operator (or the agent) does: unlock, destroy, create again; the fault has fired its once
    assert_eq!(s.run("pct", &["unlock", "100"]).code, 0);
    let o = s.run("pct", &["destroy", "100"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let o = s.create("100", "local-lvm:4");
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(!s.config("100").contains("lock"));
}

#[test]
fn held_config_lock_times_out_as_pve_and_the_plan_can_come_from_the_environment() {
    let s = Sim::new();
    let plan = s.root.join("plan.toml");
    std::fs::write(&plan, "[lock_held]\nvmid = 100\ncount = 1\n").unwrap();
    let mut c = s.command("pct", &["create", "100", TMPL]);
    c.env("PVESIM_FAULTS", &plan);
    let o = Sim::output(c);
    assert_eq!(
        (o.code, o.stderr.as_str()),
        (
            255,
            "trying to acquire lock...can't lock file '/run/lock/lxc/pve-config-100.lock' - got timeout\n"
        )
    );
    // nothing was written; without the variable the node has no faults
    assert!(s.run("pct", &["config", "100"]).code != 0);
    let mut c = s.command("pct", &["create", "100", TMPL]);
    c.env("PVESIM_FAULTS", &plan);
    let o = Sim::output(c);
    assert_eq!(o.code, 0, "fired once only: {}", o.stderr);
}

#[test]
fn a_locked_container_refuses_start_while_the_fault_lasts() {
    let s = Sim::new();
    assert_eq!(s.create("100", "local-lvm:4").code, 0);
    s.plan("[ct_locked]\nlock = \"backup\"\ncount = 2\n");
    for _ in 0..2 {
        let o = s.run("pct", &["start", "100"]);
        assert_eq!(
            (o.code, o.stderr.as_str()),
            (255, "CT is locked (backup)\n")
        );
    }
    let o = s.run("pct", &["start", "100"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
}

#[test]
fn a_full_storage_fails_the_create_with_the_storage_tools_message_and_frees_the_vmid() {
    let s = Sim::new();
    s.plan("[storage_full]\nstorages = [\"local-lvm\"]\n");
    let o = s.create("100", "local-lvm:4");
    assert_eq!(o.code, 255);
    assert!(
        o.stderr
            .starts_with("unable to create CT 100 - lvcreate 'pve/vm-100-disk-0' error:")
            && o.stderr.contains("insufficient free space"),
        "{}",
        o.stderr
    );
    assert!(s.run("pct", &["config", "100"]).code != 0, "config removed");
    // other storages have room
    let o = s.create("100", "local-zfs:4");
    assert_eq!(o.code, 0, "{}", o.stderr);
}

#[test]
fn pvesh_garbage_is_printed_with_exit_0_then_the_real_answer() {
    let s = Sim::new();
    s.plan("[[garbage]]\ncommand = \"pvesh get\"\ncount = 1\n");
    let args = ["get", "/nodes/pve9/lxc", "--output-format", "json"];
    let o = s.run("pvesh", &args);
    assert_eq!(o.code, 0);
    assert!(
        serde_json::from_str::<serde_json::Value>(&o.stdout).is_err(),
        "{}",
        o.stdout
    );
    let o = s.run("pvesh", &args);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let v: serde_json::Value = serde_json::from_str(&o.stdout).unwrap();
    assert!(v.is_array(), "{v}");
}

/// Processes whose command line is exactly `argv` (a hanging fault's `sleep`).
fn processes_running(argv: &[&str]) -> Vec<u32> {
    let want: String = argv.iter().map(|a| format!("{a}\0")).collect();
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .map(|c| c == want.as_bytes())
                .unwrap_or(false)
        })
        .filter(|pid| {
            // a killed child not yet reaped is gone already
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|s| Some(s.rsplit_once(')')?.1.trim_start().starts_with('Z')))
                == Some(false)
        })
        .collect()
}

#[tokio::test]
async fn a_hanging_pct_is_killed_with_its_worker_by_the_runners_timeout() {
    let s = Sim::new();
    // an unusual duration, to find this test's worker among the machine's processes
    s.plan("[[hang]]\ncommand = \"pct list\"\nseconds = 3917\ncount = 1\n");
    let runner = ProcessRunner::with_bin_dir(s.root.join("bin"))
        .with_env("PVESIM_STATE", s.state().display().to_string());
    let e = runner
        .run(
            pxfleet_pve::Command::new("pct")
                .arg("list")
                .timeout(Duration::from_secs(2)),
        )
        .await
        .unwrap_err();
    assert!(matches!(e, RunError::Timeout { .. }), "{e:?}");
    let mut left = processes_running(&["sleep", "3917"]);
    for _ in 0..100 {
        if left.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        left = processes_running(&["sleep", "3917"]);
    }
    assert!(
        left.is_empty(),
        "the hung worker outlived the timeout: {left:?}"
    );
    // fired once: the next call answers
    let out = runner
        .run(
            pxfleet_pve::Command::new("pct")
                .arg("list")
                .timeout(Duration::from_secs(30)),
        )
        .await
        .unwrap();
    assert!(out.success(), "{out:?}");
}

#[test]
fn reboot_stops_every_container_and_keeps_them() {
    let s = Sim::new();
    for v in ["100", "101"] {
        assert_eq!(s.create(v, "local-lvm:4").code, 0);
        assert_eq!(s.run("pct", &["start", v]).code, 0);
    }
    let o = Sim::output({
        let mut c = Command::new(bin());
        c.args(["reboot", "--state"]).arg(s.state());
        c
    });
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(o.stdout.contains("2 container(s) stopped"), "{}", o.stdout);
    for v in ["100", "101"] {
        assert_eq!(
            s.run("pct", &["status", v]).stdout,
            "status: stopped\n",
            "CT {v}"
        );
    }
}

#[test]
fn a_bad_plan_names_the_file_and_position() {
    let s = Sim::new();
    s.plan("[half_create]\ncount = 1\nbogus = 2\n");
    let o = s.run("pct", &["list"]);
    assert_eq!(o.code, 2);
    assert!(o.stderr.contains("faults.toml"), "{}", o.stderr);
    assert!(o.stderr.contains("line 3"), "{}", o.stderr);
    assert!(o.stderr.contains("bogus"), "{}", o.stderr);
}
