//! `pxcontroller dev` driven as a user drives it: start it on a data directory, run pxctl against the config it
//! prints, stop it with SIGTERM. Used by the dev-mode and scale scenarios.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use crate::{workspace_root, Binaries};

/// Runs pxctl with `config` from the workspace root; returns (exit code, stdout, stderr). Gives up after
/// `timeout`.
pub async fn pxctl_within(
    bins: &Binaries,
    config: &Path,
    args: &[&str],
    timeout: Duration,
) -> (i32, String, String) {
    let out = tokio::time::timeout(
        timeout,
        Command::new(&bins.pxctl)
            .args(args)
            .env("PXCTL_CONFIG", config)
            .env("NO_COLOR", "1")
            .current_dir(workspace_root())
            .stdin(Stdio::null())
            .kill_on_drop(true)
            .output(),
    )
    .await
    .unwrap_or_else(|_| panic!("pxctl {args:?} did not finish within {timeout:?}"))
    .expect("pxctl starts");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// [`pxctl_within`] two minutes.
pub async fn pxctl(bins: &Binaries, config: &Path, args: &[&str]) -> (i32, String, String) {
    pxctl_within(bins, config, args, Duration::from_secs(120)).await
}

/// Processes whose command line mentions `needle` (read from /proc; nothing is signalled).
pub fn processes_mentioning(needle: &str) -> Vec<String> {
    let mut found = Vec::new();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        if let Ok(cmd) = std::fs::read(e.path().join("cmdline")) {
            let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
            if cmd.contains(needle) {
                found.push(cmd);
            }
        }
    }
    found
}

/// Starts `pxcontroller dev --nodes NODES` on `data` and waits for its export line; returns the child and the
/// pxctl config path it printed.
pub async fn start_dev(
    bins: &Binaries,
    data: &Path,
    err_log: &Path,
    nodes: u32,
) -> (Child, PathBuf) {
    let stderr = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(err_log)
        .unwrap();
    let mut dev = Command::new(&bins.pxcontroller)
        .args([
            "dev",
            "--nodes",
            &nodes.to_string(),
            "--listen",
            "127.0.0.1:0",
            "--data-dir",
        ])
        .arg(data)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(stderr)
        .kill_on_drop(true)
        .spawn()
        .expect("pxcontroller dev starts");
    let mut lines = BufReader::new(dev.stdout.take().unwrap()).lines();
    let export = tokio::time::timeout(Duration::from_secs(90), async {
        while let Some(line) = lines.next_line().await.unwrap() {
            if let Some(rest) = line.strip_prefix("export PXCTL_CONFIG=") {
                return PathBuf::from(rest.trim());
            }
        }
        panic!(
            "dev mode ended without the export line:\n{}",
            std::fs::read_to_string(err_log).unwrap_or_default()
        );
    })
    .await
    .unwrap_or_else(|_| {
        panic!(
            "no export line within 90 s:\n{}",
            std::fs::read_to_string(err_log).unwrap_or_default()
        )
    });
    // Keep reading what dev mode prints after the export line, as a terminal would.
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    (dev, export)
}

/// SIGTERM (what Ctrl-C / scripts/demo --stop do): dev mode exits 0 and no process of `data` is left.
/// `err_log` (dev mode's stderr) is shown when it does not stop cleanly.
pub async fn stop_dev(mut dev: Child, data: &Path, err_log: &Path) {
    crate::signal(dev.id().unwrap(), libc::SIGTERM);
    let status = tokio::time::timeout(Duration::from_secs(20), dev.wait())
        .await
        .expect("dev mode stops within 20 s")
        .unwrap();
    assert!(
        status.success(),
        "dev mode exited with {status}; its stderr ends with:\n{}",
        tail(err_log, 60)
    );
    // The agents are gone at once; a PVE tool an agent had just started (pvesh, pct) may finish on its own
    // a moment later, as on a real node.
    let mut left = processes_mentioning(data.to_str().unwrap());
    for _ in 0..50 {
        if left.is_empty() {
            break;
        }
        assert!(
            !left.iter().any(|c| c.contains("pxagent")),
            "agents still running after dev mode stopped: {left:#?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
        left = processes_mentioning(data.to_str().unwrap());
    }
    assert!(
        left.is_empty(),
        "still running 5 s after dev mode stopped: {left:#?}"
    );
}

/// The last `n` lines of a file, for failure messages.
pub fn tail(path: &Path, n: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}
