//! The real `pxcontroller` process the benchmark measures: `pxcontroller init` on a fresh data directory, a
//! config on loopback ports, `pxcontroller run`, and a graceful stop (SIGTERM to its PID, SIGKILL after a
//! grace period) so that its store can be read afterwards. Only the process started here is ever signalled.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use pxfleet_pve::runner::{ProcessRunner, Runner};
use tokio::process::{Child, Command};

use crate::BenchError;

/// `MALLOC_ARENA_MAX` of the packaged controller unit.
pub const UNIT_MALLOC_ARENA_MAX: &str = "2";

/// How long `pxcontroller init` may take.
const INIT_TIMEOUT: Duration = Duration::from_secs(60);
/// How long the controller may take to answer after `run`.
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// A running controller started by the benchmark.
pub struct Controller {
    child: Option<Child>,
    pid: u32,
    pub url: String,
    pub listen: SocketAddr,
    pub metrics: SocketAddr,
    pub data_dir: PathBuf,
    pub config: PathBuf,
    pub log: PathBuf,
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> BenchError + '_ {
    move |source| BenchError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// A free loopback port (bound then released; the controller binds it right after).
pub fn free_port() -> Result<u16, BenchError> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").map_err(io(Path::new("127.0.0.1:0")))?;
    Ok(l.local_addr().map_err(io(Path::new("127.0.0.1:0")))?.port())
}

/// `pxcontroller init --data-dir DIR`, through crates/pve's process runner (argv, timeout, output kept).
pub async fn init(bin: &Path, data_dir: &Path) -> Result<(), BenchError> {
    let cmd = pxfleet_pve::runner::Command::new(bin.display().to_string())
        .args(["init", "--data-dir"])
        .arg(data_dir.display().to_string())
        .timeout(INIT_TIMEOUT);
    let shown = cmd.to_string();
    let out = ProcessRunner::new()
        .run(cmd)
        .await
        .map_err(|e| BenchError::Setup {
            what: shown.clone(),
            message: e.to_string(),
        })?;
    if !out.success() {
        return Err(BenchError::Setup {
            what: shown,
            message: format!(
                "exited with {}: {}",
                out.status
                    .map_or_else(|| "a signal".to_string(), |c| format!("status {c}")),
                out.stderr_str()
            ),
        });
    }
    Ok(())
}

impl Controller {
    /// Writes `dir/controller.toml` and starts `pxcontroller run` on fresh loopback ports; returns once its
    /// gRPC port accepts connections (the caller then waits for the API itself).
    // The bench starts a long-running pxcontroller it measures and stops. crates/pve's runner only runs a
    // command to completion and hands back its output (it owns the child for that one call), so a daemon whose
    // handle the bench keeps, signals and reaps is spawned here.
    #[allow(clippy::disallowed_methods)]
    pub async fn start(bin: &Path, dir: &Path, data_dir: &Path) -> Result<Controller, BenchError> {
        let config = dir.join("controller.toml");
        let log = dir.join("controller.log");
        let listen = SocketAddr::from(([127, 0, 0, 1], free_port()?));
        let metrics = SocketAddr::from(([127, 0, 0, 1], free_port()?));
        // Heartbeat timeout well above the heartbeat interval (5 s) so a busy machine does not mark nodes down.
        let text = format!(
            "data_dir = {:?}\nlisten = \"{listen}\"\nmetrics_listen = \"{metrics}\"\n\n[reconciler]\n\
             heartbeat_timeout_secs = 60\n",
            data_dir.display().to_string(),
        );
        std::fs::write(&config, text).map_err(io(&config))?;
        let out = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .map_err(io(&log))?;
        let err = out.try_clone().map_err(io(&log))?;
        let mut cmd = Command::new(bin);
        cmd.arg("run")
            .arg("--config")
            .arg(&config)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .kill_on_drop(true);
        if std::env::var_os("PXFLEET_LOG").is_none() {
            cmd.env("PXFLEET_LOG", "info");
        }
        // As the packaged systemd unit runs it (packaging/debian/pxcontroller/pxcontroller.service): two glibc
        // malloc arenas instead of up to eight per core. Set MALLOC_ARENA_MAX to measure another value.
        if std::env::var_os("MALLOC_ARENA_MAX").is_none() {
            cmd.env("MALLOC_ARENA_MAX", UNIT_MALLOC_ARENA_MAX);
        }
        let child = cmd.spawn().map_err(io(bin))?;
        let pid = child.id().ok_or_else(|| BenchError::Setup {
            what: "pxcontroller run".into(),
            message: "exited at once".into(),
        })?;
        let mut c = Controller {
            child: Some(child),
            pid,
            url: format!("https://{listen}"),
            listen,
            metrics,
            data_dir: data_dir.to_path_buf(),
            config,
            log,
        };
        let deadline = tokio::time::Instant::now() + START_TIMEOUT;
        loop {
            if tokio::net::TcpStream::connect(listen).await.is_ok() {
                return Ok(c);
            }
            if let Some(status) = c.exited() {
                return Err(BenchError::Setup {
                    what: "pxcontroller run".into(),
                    message: format!("exited with {status}; log:\n{}", tail(&c.log, 20)),
                });
            }
            if tokio::time::Instant::now() > deadline {
                return Err(BenchError::Setup {
                    what: "pxcontroller run".into(),
                    message: format!(
                        "not listening on {listen} after {} s; log:\n{}",
                        START_TIMEOUT.as_secs(),
                        tail(&c.log, 20)
                    ),
                });
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The controller's PID.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The exit status, once it has exited.
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child
            .as_mut()
            .and_then(|c| c.try_wait().ok().flatten())
    }

    /// SIGTERM (the controller flushes its store and exits), SIGKILL after `grace`.
    pub async fn stop(&mut self, grace: Duration) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        if let Some(pid) = child.id().and_then(|p| i32::try_from(p).ok()) {
            if let Some(pid) = rustix::process::Pid::from_raw(pid) {
                let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
            }
            if tokio::time::timeout(grace, child.wait()).await.is_ok() {
                return;
            }
        }
        let _ = child.kill().await;
    }
}

impl Drop for Controller {
    fn drop(&mut self) {
        // Our own child only, by its handle (kill_on_drop is the backstop).
        if let Some(c) = self.child.as_mut() {
            let _ = c.start_kill();
        }
    }
}

/// The last `n` lines of a log file.
pub fn tail(path: &Path, n: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

#[cfg(test)]
mod tests {
    /// The benchmark measures the controller with the packaged unit's malloc setting: the two stay the same.
    #[test]
    fn the_controller_runs_with_the_packaged_units_malloc_arenas() {
        let unit = include_str!("../../../packaging/debian/pxcontroller/pxcontroller.service");
        let want = format!(
            "Environment=MALLOC_ARENA_MAX={}",
            super::UNIT_MALLOC_ARENA_MAX
        );
        assert!(
            unit.lines().any(|l| l.trim() == want),
            "pxcontroller.service has no `{want}`"
        );
    }
}
