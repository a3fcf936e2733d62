//! ProcessRunner against real programs: argv without a shell, stdin, exit status, stderr, env, bin dir, timeout.

// Test code: it starts the programs under test and the tools around them.
#![allow(clippy::disallowed_methods)]

use std::time::{Duration, Instant};

use pxfleet_pve::{Command, ProcessRunner, RunError, Runner};

fn which(p: &str) -> String {
    for dir in ["/usr/bin", "/bin"] {
        let path = format!("{dir}/{p}");
        if std::path::Path::new(&path).exists() {
            return path;
        }
    }
    panic!("{p} not found")
}

#[tokio::test]
async fn argv_is_not_interpreted_by_a_shell() {
    let r = ProcessRunner::new();
    let out = r
        .run(Command::new("echo").args(["$HOME", "a;b", "`x`"]))
        .await
        .unwrap();
    assert!(out.success());
    assert_eq!(out.stdout_str(), "$HOME a;b `x`\n");
}

#[tokio::test]
async fn stdin_is_fed_and_closed() {
    let r = ProcessRunner::new();
    let out = r
        .run(Command::new("cat").stdin(b"root:pw\n".to_vec()))
        .await
        .unwrap();
    assert_eq!(out.stdout, b"root:pw\n");
    // Without stdin the child reads /dev/null and does not hang.
    let out = r
        .run(Command::new("cat").timeout(Duration::from_secs(5)))
        .await
        .unwrap();
    assert!(out.success() && out.stdout.is_empty());
}

#[tokio::test]
async fn exit_status_and_stderr_are_kept() {
    let r = ProcessRunner::new();
    let out = r
        .run(Command::new("ls").arg("/definitely/not/here"))
        .await
        .unwrap();
    assert!(!out.success());
    assert_ne!(out.status, Some(0));
    assert!(
        out.stderr_str().contains("/definitely/not/here"),
        "{}",
        out.stderr_str()
    );
}

#[tokio::test]
async fn env_from_runner_and_command() {
    let r = ProcessRunner::new().with_env("PVESIM_STATE", "/tmp/node1");
    let out = r
        .run(Command::new("printenv").arg("PVESIM_STATE"))
        .await
        .unwrap();
    assert_eq!(out.stdout_str(), "/tmp/node1\n");
    let out = r
        .run(Command::new("printenv").arg("X_ONE").env("X_ONE", "1"))
        .await
        .unwrap();
    assert_eq!(out.stdout_str(), "1\n");
}

#[tokio::test]
async fn bin_dir_resolves_programs() {
    let dir = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(which("echo"), dir.path().join("pct")).unwrap();
    let r = ProcessRunner::with_bin_dir(dir.path());
    let out = r.run(Command::new("pct").args(["list"])).await.unwrap();
    assert_eq!(out.stdout_str(), "list\n");
    let missing = r.run(Command::new("pvesh")).await.unwrap_err();
    assert!(matches!(missing, RunError::Spawn { .. }), "{missing:?}");
}

#[tokio::test]
async fn timeout_kills_the_child() {
    let r = ProcessRunner::new();
    let t0 = Instant::now();
    let e = r
        .run(
            Command::new("sleep")
                .arg("30")
                .timeout(Duration::from_millis(200)),
        )
        .await
        .unwrap_err();
    assert!(matches!(e, RunError::Timeout { .. }), "{e:?}");
    assert!(t0.elapsed() < Duration::from_secs(5));
    assert!(e.to_string().contains("sleep 30"));
}

/// Whether `pid` is a live process (a zombie awaiting its reaper counts as gone).
fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // "PID (comm) STATE ...": the state follows the last ')'
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| !rest.trim_start().starts_with(['Z', 'X'])),
        Err(_) => false,
    }
}

#[tokio::test]
async fn timeout_kills_the_whole_process_group() {
    let dir = tempfile::tempdir().unwrap();
    let pid_file = dir.path().join("grandchild.pid");
    // the child forks a grandchild that sleeps past the timeout and holds the output pipes
    let script = format!("sleep 300 & echo $! > {}; wait", pid_file.display());
    let e = ProcessRunner::new()
        .run(
            Command::new(which("sh"))
                .args(["-c", &script])
                .timeout(Duration::from_millis(500)),
        )
        .await
        .unwrap_err();
    assert!(matches!(e, RunError::Timeout { .. }), "{e:?}");
    let pid: u32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    // SIGKILL is delivered at once; allow its reaper a moment
    let mut gone = false;
    for _ in 0..100 {
        if !alive(pid) {
            gone = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(gone, "grandchild {pid} outlived the timeout");
}

#[tokio::test]
async fn a_finished_command_leaves_what_it_started_alone() {
    let dir = tempfile::tempdir().unwrap();
    let pid_file = dir.path().join("daemon.pid");
    // a tool that starts a daemon and exits at once (as `pct start` leaves lxc-start running); the daemon's
    // output goes elsewhere so the runner does not wait for it
    let script = format!(
        "sleep 300 >/dev/null 2>&1 & echo $! > {}",
        pid_file.display()
    );
    let out = ProcessRunner::new()
        .run(
            Command::new(which("sh"))
                .args(["-c", &script])
                .timeout(Duration::from_secs(30)),
        )
        .await
        .unwrap();
    assert!(out.success(), "{out:?}");
    let pid: u32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(alive(pid), "the daemon {pid} was killed");
    // clean up through a command, as everything else here
    ProcessRunner::new()
        .run(Command::new(which("kill")).arg(pid.to_string()))
        .await
        .unwrap();
}

#[tokio::test]
async fn spawn_error_redacts() {
    let r = ProcessRunner::new();
    let e = r
        .run(
            Command::new("/nonexistent/pct")
                .args(["x", "--password", "s3cret"])
                .redact("s3cret"),
        )
        .await
        .unwrap_err();
    let s = e.to_string();
    assert!(
        s.contains("/nonexistent/pct") && !s.contains("s3cret"),
        "{s}"
    );
}

#[tokio::test]
async fn large_stdin_and_stdout_do_not_deadlock() {
    let r = ProcessRunner::new();
    let data = vec![b'x'; 4 << 20];
    let out = r
        .run(
            Command::new("cat")
                .stdin(data.clone())
                .timeout(Duration::from_secs(20)),
        )
        .await
        .unwrap();
    assert_eq!(out.stdout.len(), data.len());
}
