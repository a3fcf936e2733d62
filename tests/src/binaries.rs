//! The workspace's binaries the harness starts: where they are ([`Binaries::locate`]) and building them once per
//! test process ([`build_binaries`]) so a test never runs an old one.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use crate::error::{HarnessError, Result};
use crate::process::tail;

/// The workspace root (the parent of this crate's directory).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ has a parent")
        .to_path_buf()
}

/// The four binaries the harness starts.
#[derive(Debug, Clone)]
pub struct Binaries {
    pub pxcontroller: PathBuf,
    pub pxagent: PathBuf,
    pub pxctl: PathBuf,
    pub pvesim: PathBuf,
}

impl Binaries {
    /// Builds the binaries (once per process, see [`build_binaries`]), then finds them in
    /// `$CARGO_TARGET_DIR/debug` or `<workspace>/target/debug`.
    pub fn locate() -> Result<Binaries> {
        build_binaries()?;
        let target = std::env::var_os("CARGO_TARGET_DIR")
            .map(PathBuf::from)
            .map(|p| {
                if p.is_absolute() {
                    p
                } else {
                    workspace_root().join(p)
                }
            })
            .unwrap_or_else(|| workspace_root().join("target"));
        let dir = target.join("debug");
        let find = |name: &str| {
            let p = dir.join(name);
            if p.is_file() {
                Ok(p)
            } else {
                Err(HarnessError::MissingBinary { path: p })
            }
        };
        Ok(Binaries {
            pxcontroller: find("pxcontroller")?,
            pxagent: find("pxagent")?,
            pxctl: find("pxctl")?,
            pvesim: find("pvesim")?,
        })
    }
}

/// How long building the binaries may take (from scratch on a slow machine).
const BUILD_TIMEOUT: Duration = Duration::from_secs(40 * 60);

/// Runs `cargo build --workspace --bins --locked` (the dev profile, the command scripts/test uses, so features
/// unify the same way and a built tree is not rebuilt) once per test process; every later call returns the first
/// result. Cargo holds no build lock while `cargo test` runs the tests, so the nested build does not wait on
/// its parent; the timeout bounds it anyway. `PXFLEET_TESTS_NO_BUILD=1` skips it (binaries built elsewhere).
pub fn build_binaries() -> Result<()> {
    static BUILT: std::sync::OnceLock<Result<(), String>> = std::sync::OnceLock::new();
    BUILT
        .get_or_init(|| {
            if std::env::var("PXFLEET_TESTS_NO_BUILD").as_deref() == Ok("1") {
                return Ok(());
            }
            let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
            let args = ["build", "--workspace", "--bins", "--locked", "--quiet"];
            run_blocking(Path::new(&cargo), &args, &workspace_root(), BUILD_TIMEOUT)
        })
        .clone()
        .map_err(HarnessError::Build)
}

/// Runs `program args` in `dir` (argv, no shell) and waits at most `timeout`; the error carries the exit status
/// and the end of stderr (written to a temp file, so a chatty child cannot fill a pipe nobody reads).
fn run_blocking(
    program: &Path,
    args: &[&str],
    dir: &Path,
    timeout: Duration,
) -> Result<(), String> {
    let argv = format!("{} {}", program.display(), args.join(" "));
    let stderr = tempfile::NamedTempFile::new().map_err(|e| format!("{argv}: temp file: {e}"))?;
    let err_file = stderr
        .reopen()
        .map_err(|e| format!("{argv}: temp file: {e}"))?;
    let mut child = std::process::Command::new(program)
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(err_file)
        .spawn()
        .map_err(|e| format!("{argv}: {e}"))?;
    let started = std::time::Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if started.elapsed() > timeout => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "`{argv}` did not finish within {} s\n{}",
                    timeout.as_secs(),
                    tail(stderr.path())
                ));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(100)),
            Err(e) => return Err(format!("{argv}: {e}")),
        }
    };
    if status.success() {
        Ok(())
    } else {
        Err(format!(
            "`{argv}` failed ({status}):\n{}",
            tail(stderr.path())
        ))
    }
}
