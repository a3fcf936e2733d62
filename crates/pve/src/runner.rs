//! The only place in the workspace where a PVE tool process is spawned.
//!
//! A [`Command`] is data (program, argv, optional stdin, timeout, extra environment, values to redact);
//! a [`Runner`] turns it into an [`Output`]. [`ProcessRunner`] spawns real processes with tokio (never through a
//! shell, always with a timeout, killed when dropped); [`crate::scripted::ScriptedRunner`] answers from a script in
//! unit tests.
//!
//! Each child runs in a process group of its own; on timeout (or when the run is dropped) the whole group is
//! killed, so a tool's own children (a `pct` that forked a helper holding our pipes) do not outlive it. The
//! timeout counts monotonic wall-clock time: a paused agent (SIGSTOP, a VM freeze) that resumes may find a
//! command timed out that was itself not slow.

use std::fmt;
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::process::Stdio;
use std::time::Duration;

use tokio::io::AsyncWriteExt;

/// The mask written in place of a redacted value.
pub const REDACTED: &str = "******";

/// One process to run: argv, never a shell line.
#[derive(Clone, PartialEq, Eq)]
pub struct Command {
    /// Program name (`pct`, `pvesh`, ...). Resolved against the runner's bin dir, else `PATH`.
    pub program: String,
    /// Arguments after the program name.
    pub args: Vec<String>,
    /// Bytes written to the child's stdin, which is then closed. `None` gives the child `/dev/null`, so a tool that
    /// would prompt (for example `pct --password` without a value) fails instead of hanging.
    pub stdin: Option<Vec<u8>>,
    /// Hard limit; the child is killed when it is exceeded.
    pub timeout: Duration,
    /// Extra environment on top of the runner's own (the parent environment is inherited).
    pub env: Vec<(String, String)>,
    /// Values masked as [`REDACTED`] wherever this command is displayed (logs, errors).
    pub redact: Vec<String>,
}

impl Command {
    /// A command with the default timeout of 60 s.
    pub fn new(program: impl Into<String>) -> Self {
        Command {
            program: program.into(),
            args: Vec::new(),
            stdin: None,
            timeout: Duration::from_secs(60),
            env: Vec::new(),
            redact: Vec::new(),
        }
    }

    /// Appends one argument.
    pub fn arg(mut self, a: impl Into<String>) -> Self {
        self.args.push(a.into());
        self
    }

    /// Appends arguments.
    pub fn args<I, S>(mut self, it: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.args.extend(it.into_iter().map(Into::into));
        self
    }

    /// Sets the timeout.
    pub fn timeout(mut self, t: Duration) -> Self {
        self.timeout = t;
        self
    }

    /// Sets the bytes fed on stdin.
    pub fn stdin(mut self, data: Vec<u8>) -> Self {
        self.stdin = Some(data);
        self
    }

    /// Adds an environment variable.
    pub fn env(mut self, k: impl Into<String>, v: impl Into<String>) -> Self {
        self.env.push((k.into(), v.into()));
        self
    }

    /// Masks `value` wherever this command is shown.
    pub fn redact(mut self, value: impl Into<String>) -> Self {
        let v = value.into();
        if !v.is_empty() {
            self.redact.push(v);
        }
        self
    }

    /// Program followed by the arguments, unredacted (what is executed).
    pub fn argv(&self) -> Vec<String> {
        std::iter::once(self.program.clone())
            .chain(self.args.iter().cloned())
            .collect()
    }

    /// Program and arguments with every redacted value masked: safe for logs and errors.
    pub fn redacted_argv(&self) -> Vec<String> {
        self.argv()
            .into_iter()
            .map(|a| {
                let mut a = a;
                for secret in &self.redact {
                    if a.contains(secret.as_str()) {
                        a = a.replace(secret.as_str(), REDACTED);
                    }
                }
                a
            })
            .collect()
    }
}

impl fmt::Display for Command {
    /// Shell-like rendering for humans (quoted where needed), redacted. Never executed.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self.redacted_argv().iter().map(|a| quote(a)).collect();
        f.write_str(&parts.join(" "))
    }
}

impl fmt::Debug for Command {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Command")
            .field("argv", &self.redacted_argv())
            .field(
                "stdin",
                &self.stdin.as_ref().map(|s| format!("<{} bytes>", s.len())),
            )
            .field("timeout", &self.timeout)
            .field("env", &self.env)
            .finish()
    }
}

fn quote(a: &str) -> String {
    let plain = !a.is_empty()
        && a.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./:=,@+%;".contains(c));
    if plain {
        a.to_string()
    } else {
        format!("'{}'", a.replace('\'', r"'\''"))
    }
}

/// What a finished process left behind.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Output {
    /// Exit code; `None` when the process was ended by a signal.
    pub status: Option<i32>,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
}

impl Output {
    /// Exit 0 with the given stdout.
    pub fn ok(stdout: impl Into<Vec<u8>>) -> Self {
        Output {
            status: Some(0),
            stdout: stdout.into(),
            stderr: Vec::new(),
        }
    }

    /// Exit `code` with the given stderr.
    pub fn fail(code: i32, stderr: impl Into<Vec<u8>>) -> Self {
        Output {
            status: Some(code),
            stdout: Vec::new(),
            stderr: stderr.into(),
        }
    }

    /// Sets stderr (for example the one-line task error PVE prints while still exiting 0).
    pub fn with_stderr(mut self, stderr: impl Into<Vec<u8>>) -> Self {
        self.stderr = stderr.into();
        self
    }

    /// Exit status 0.
    pub fn success(&self) -> bool {
        self.status == Some(0)
    }

    /// stdout as text (lossy).
    pub fn stdout_str(&self) -> String {
        String::from_utf8_lossy(&self.stdout).into_owned()
    }

    /// stderr as text (lossy), trimmed.
    pub fn stderr_str(&self) -> String {
        String::from_utf8_lossy(&self.stderr).trim().to_string()
    }
}

/// Why a command produced no [`Output`].
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("cannot start `{argv}`: {source}")]
    Spawn {
        /// Redacted command line.
        argv: String,
        source: std::io::Error,
    },
    #[error("`{argv}` did not finish within {after:?} and was killed")]
    Timeout { argv: String, after: Duration },
    #[error("i/o error while running `{argv}`: {source}")]
    Io {
        argv: String,
        source: std::io::Error,
    },
    /// Only from the scripted runner: the call was not in the script.
    #[error("unexpected command `{argv}`: {detail}")]
    Unexpected { argv: String, detail: String },
}

/// Boxed future returned by [`Runner::run`], so a runner is usable as `Arc<dyn Runner>` across tokio tasks.
pub type RunFuture<'a> = Pin<Box<dyn Future<Output = Result<Output, RunError>> + Send + 'a>>;

/// Runs a [`Command`]. The only process-spawning abstraction in the workspace.
pub trait Runner: Send + Sync {
    fn run<'a>(&'a self, cmd: Command) -> RunFuture<'a>;
}

/// Spawns real processes with tokio: argv only, stdin piped or null, stdout/stderr captured, killed on timeout
/// and when the future is dropped.
#[derive(Clone, Debug, Default)]
pub struct ProcessRunner {
    /// Directory holding `pct`, `pvesh`, `pvesm`, `pveam`; `None` resolves through `PATH`. Tests point this at
    /// pvesim's multi-call binary links.
    pub bin_dir: Option<PathBuf>,
    /// Environment added to every command (for example `PVESIM_STATE` when several simulated nodes are driven
    /// from one process). The parent environment is inherited as well.
    pub env: Vec<(String, String)>,
}

impl ProcessRunner {
    /// Resolves programs through `PATH`.
    pub fn new() -> Self {
        Self::default()
    }

    /// Resolves programs in `dir`.
    pub fn with_bin_dir(dir: impl Into<PathBuf>) -> Self {
        ProcessRunner {
            bin_dir: Some(dir.into()),
            env: Vec::new(),
        }
    }

    /// Adds an environment variable to every command.
    pub fn with_env(mut self, k: impl Into<String>, v: impl Into<String>) -> Self {
        self.env.push((k.into(), v.into()));
        self
    }

    fn program_path(&self, program: &str) -> PathBuf {
        match &self.bin_dir {
            Some(dir) if !program.contains('/') => dir.join(program),
            _ => PathBuf::from(program),
        }
    }

    // the process runner: the one place PVE tools are spawned
    #[allow(clippy::disallowed_methods)]
    async fn run_inner(&self, cmd: Command) -> Result<Output, RunError> {
        let shown = cmd.to_string();
        let mut c = tokio::process::Command::new(self.program_path(&cmd.program));
        c.args(&cmd.args)
            .stdin(if cmd.stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            // its own process group (pgid = its pid), so a timeout can kill its children too
            .process_group(0);
        for (k, v) in self.env.iter().chain(cmd.env.iter()) {
            c.env(k, v);
        }
        tracing::debug!(command = %shown, timeout = ?cmd.timeout, "running");
        let mut child = c.spawn().map_err(|source| RunError::Spawn {
            argv: shown.clone(),
            source,
        })?;
        let mut group = GroupGuard {
            pgid: child.id(),
            shown: &shown,
        };
        let stdin_data = cmd.stdin.clone();
        let mut stdin = child.stdin.take();
        if let (Some(data), Some(mut pipe)) = (stdin_data, stdin.take()) {
            // Written concurrently with reading stdout/stderr so a chatty child cannot deadlock us. A child that
            // exits without reading gives EPIPE: not our error, its exit status tells.
            tokio::spawn(async move {
                let _ = pipe.write_all(&data).await;
                drop(pipe);
            });
        }
        let work = child.wait_with_output();
        let finished = tokio::time::timeout(cmd.timeout, work).await;
        if finished.is_ok() {
            // reaped: the group id may be reused from now on, and what the child left running is its business
            group.pgid = None;
        }
        drop(group);
        match finished {
            Err(_) => {
                tracing::warn!(command = %shown, "timed out, its process group killed");
                Err(RunError::Timeout {
                    argv: shown,
                    after: cmd.timeout,
                })
            }
            Ok(Err(source)) => Err(RunError::Io {
                argv: shown,
                source,
            }),
            Ok(Ok(out)) => {
                let output = Output {
                    status: out.status.code(),
                    stdout: out.stdout,
                    stderr: out.stderr,
                };
                tracing::debug!(command = %shown, status = ?output.status, "finished");
                Ok(output)
            }
        }
    }
}

/// Kills a child's process group when dropped, unless the child was reaped first (`pgid` cleared): on timeout,
/// and when the run's future is dropped halfway.
struct GroupGuard<'a> {
    pgid: Option<u32>,
    shown: &'a str,
}

impl Drop for GroupGuard<'_> {
    fn drop(&mut self) {
        let Some(pgid) = self
            .pgid
            .and_then(|p| i32::try_from(p).ok())
            .and_then(rustix::process::Pid::from_raw)
        else {
            return;
        };
        if let Err(e) = rustix::process::kill_process_group(pgid, rustix::process::Signal::KILL) {
            // ESRCH: the group is already gone
            if e != rustix::io::Errno::SRCH {
                tracing::warn!(command = %self.shown, error = %e, "killing the process group failed");
            }
        }
    }
}

impl Runner for ProcessRunner {
    fn run<'a>(&'a self, cmd: Command) -> RunFuture<'a> {
        Box::pin(self.run_inner(cmd))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_redacts_and_quotes() {
        let c = Command::new("pct")
            .args(["set", "100", "--description", "a b"])
            .arg("--x")
            .arg("pw=hunter22")
            .redact("hunter22");
        assert_eq!(
            c.to_string(),
            "pct set 100 --description 'a b' --x 'pw=******'"
        );
        assert!(!format!("{c:?}").contains("hunter22"));
        assert_eq!(c.argv()[6], "pw=hunter22");
    }

    #[test]
    fn debug_hides_stdin() {
        let c = Command::new("pct").stdin(b"root:secret\n".to_vec());
        let d = format!("{c:?}");
        assert!(!d.contains("secret"), "{d}");
        assert!(d.contains("12 bytes"), "{d}");
    }
}
