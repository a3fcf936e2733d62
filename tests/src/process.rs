//! Child processes: long-running daemons spawned with their output in a log file, one-shot commands from an
//! argv with a timeout, signals and graceful termination of our own children, and log tails for messages.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use tokio::process::{Child, Command};

use crate::error::{io, HarnessError, Result};

/// How long a one-shot command (init, join, pxctl) may take before the harness gives up.
pub const COMMAND_TIMEOUT: Duration = Duration::from_secs(120);

/// The last 40 lines of a log file.
pub fn tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(40)..].join("\n")
}

/// Starts `program args` with stdout and stderr appended to the file `log`; killed when its handle is dropped.
pub(crate) fn spawn_logged(program: &Path, args: &[String], log: &Path) -> Result<Child> {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .map_err(io(log))?;
    let log2 = log.try_clone().map_err(io(program))?;
    let mut cmd = Command::new(program);
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(log2)
        .kill_on_drop(true);
    if std::env::var_os("PXFLEET_LOG").is_none() {
        cmd.env("PXFLEET_LOG", "info");
    }
    // plain text logs: the fault suite parses them (tracing's fmt layer honours NO_COLOR)
    cmd.env("NO_COLOR", "1");
    cmd.spawn().map_err(io(program))
}

/// Runs a one-shot command from an argv (no shell) with [`COMMAND_TIMEOUT`]; stdout on success.
pub async fn run_command(program: &Path, args: &[String], env: &[(&str, &str)]) -> Result<String> {
    let argv = format!("{} {}", program.display(), args.join(" "));
    let mut cmd = Command::new(program);
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = tokio::time::timeout(COMMAND_TIMEOUT, cmd.output())
        .await
        .map_err(|_| HarnessError::Timeout {
            argv: argv.clone(),
            secs: COMMAND_TIMEOUT.as_secs(),
        })?
        .map_err(io(program))?;
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    if !out.status.success() {
        return Err(HarnessError::Command {
            argv,
            status: out.status.to_string(),
            stdout,
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        });
    }
    Ok(stdout)
}

/// SIGTERM, then SIGKILL if the child has not exited within `grace`.
pub async fn terminate(child: &mut Child, grace: Duration) {
    if let Some(pid) = child.id() {
        signal(pid, libc::SIGTERM);
        if tokio::time::timeout(grace, child.wait()).await.is_ok() {
            return;
        }
    }
    let _ = child.kill().await;
}

/// Sends `sig` to a process this harness started.
#[allow(unsafe_code)]
pub fn signal(pid: u32, sig: i32) {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return;
    };
    // SAFETY: kill(2) has no memory-safety preconditions; `pid` is one of our own children.
    unsafe {
        libc::kill(pid, sig);
    }
}
