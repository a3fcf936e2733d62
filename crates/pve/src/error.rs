//! [`PveError`], the driver's error type, and [`classify`], which maps PVE's exact error texts (CONTRACT §3.11)
//! to typed variants and decides whether a retry can help.

use crate::parse::ParseError;
use crate::runner::{Command, Output, RunError};

/// Everything that can go wrong talking to a node. Argv in errors is always redacted.
#[derive(Debug, thiserror::Error)]
pub enum PveError {
    /// The command failed and the text did not match a more specific variant.
    #[error("`{argv}` failed (exit {}): {stderr}", fmt_status(*status))]
    Command {
        argv: String,
        status: Option<i32>,
        stderr: String,
        retryable: bool,
    },
    /// `Configuration file 'nodes/<node>/lxc/<vmid>.conf' does not exist`: missing, or on another node.
    #[error("CT {vmid} does not exist on node {node} (`{argv}`)")]
    NotFound {
        vmid: u32,
        node: String,
        argv: String,
    },
    /// `CT <vmid> already exists on node '<node>'` (`kind` is `CT` or `VM` for a qemu guest).
    #[error("{kind} {vmid} already exists on node '{node}'")]
    AlreadyExists {
        vmid: u32,
        node: String,
        kind: String,
    },
    /// `CT is locked (<lock>)`; `create` means a half-created CT (see `Node::unlock` + `Node::destroy`).
    #[error("CT {vmid} is locked ({lock}) (`{argv}`)")]
    Locked {
        vmid: u32,
        lock: String,
        argv: String,
    },
    /// `can't lock file ... - got timeout`: another operation held the config lock.
    #[error("CT {vmid}: timed out waiting for the config lock (`{argv}`)")]
    LockTimeout { vmid: u32, argv: String },
    /// The operation needs a running CT.
    #[error("CT {vmid} is not running (`{argv}`)")]
    NotRunning { vmid: u32, argv: String },
    /// `CT <vmid> already running`.
    #[error("CT {vmid} is already running")]
    AlreadyRunning { vmid: u32 },
    /// `... - protection mode enabled`.
    #[error("CT {vmid} has protection enabled; clear `protection` first (`{argv}`)")]
    Protected { vmid: u32, argv: String },
    /// The task ran and failed (exit 255 from a task command, or an exit-0 command whose result did not show).
    #[error("task failed: `{argv}`: {message}")]
    TaskFailed {
        argv: String,
        upid: Option<String>,
        message: String,
    },
    /// The command succeeded but its output did not parse.
    #[error("`{argv}`: cannot parse {what}: {detail}")]
    Parse {
        argv: String,
        what: String,
        detail: String,
    },
    /// A request the driver refuses before running anything.
    #[error("invalid {field} `{value}`{}: expected {expected}", vmid.map(|v| format!(" for CT {v}")).unwrap_or_default())]
    Invalid {
        vmid: Option<u32>,
        field: String,
        /// Never the secret itself for secret fields.
        value: String,
        expected: String,
    },
    /// The process could not be run, timed out, or broke.
    #[error(transparent)]
    Run(#[from] RunError),
    /// The temporary file for SSH keys could not be written.
    #[error("cannot write temporary file {path}: {source}")]
    TempFile {
        path: String,
        source: std::io::Error,
    },
    /// A container's config file could not be read or written (the raw `lxc.*` lines no tool sets).
    #[error("CT {vmid}: config file {path}: {source}")]
    ConfigFile {
        vmid: u32,
        path: String,
        source: std::io::Error,
    },
}

fn fmt_status(s: Option<i32>) -> String {
    s.map(|c| c.to_string()).unwrap_or_else(|| "signal".into())
}

impl PveError {
    /// Whether running the same command again later can succeed (lock contention).
    pub fn retryable(&self) -> bool {
        match self {
            PveError::Locked { lock, .. } => lock != "create" && lock != "destroyed",
            PveError::LockTimeout { .. } => true,
            PveError::Command { retryable, .. } => *retryable,
            _ => false,
        }
    }

    /// Whether the error is lock contention of any kind (including a `create` lock).
    pub fn is_lock(&self) -> bool {
        matches!(self, PveError::Locked { .. } | PveError::LockTimeout { .. })
    }

    pub(crate) fn invalid(
        vmid: Option<u32>,
        field: &str,
        value: impl ToString,
        expected: &str,
    ) -> Self {
        PveError::Invalid {
            vmid,
            field: field.to_string(),
            value: value.to_string(),
            expected: expected.to_string(),
        }
    }

    pub(crate) fn parse(cmd: &Command, e: ParseError) -> Self {
        PveError::Parse {
            argv: cmd.to_string(),
            what: e.what,
            detail: e.detail,
        }
    }
}

/// Removes every redacted value from a text (stderr may echo input).
pub(crate) fn scrub(text: &str, cmd: &Command) -> String {
    let mut t = text.to_string();
    for s in &cmd.redact {
        t = t.replace(s.as_str(), crate::runner::REDACTED);
    }
    t
}

/// Maps a failed command's stderr to an error. `vmid` gives context for the CT-specific variants.
pub fn classify(cmd: &Command, out: &Output, vmid: Option<u32>) -> PveError {
    let stderr = scrub(&out.stderr_str(), cmd);
    let argv = cmd.to_string();
    let v = vmid.unwrap_or(0);
    for line in stderr.lines().rev() {
        let line = line.trim();
        if let Some((kind, id, node)) = already_exists(line) {
            return PveError::AlreadyExists {
                vmid: id,
                node,
                kind,
            };
        }
        if let Some((node, id)) = config_missing(line) {
            return PveError::NotFound {
                vmid: id,
                node,
                argv,
            };
        }
        if let Some(lock) = line
            .find("CT is locked (")
            .map(|i| &line[i + "CT is locked (".len()..])
            .and_then(|r| r.split_once(')'))
            .map(|(l, _)| l.to_string())
        {
            return PveError::Locked {
                vmid: v,
                lock,
                argv,
            };
        }
        if line.contains("can't lock file") && line.contains("got timeout") {
            return PveError::LockTimeout { vmid: v, argv };
        }
        if line.contains("protection mode enabled") {
            return PveError::Protected { vmid: v, argv };
        }
        if line.ends_with("already running") && line.starts_with("CT ") {
            return PveError::AlreadyRunning { vmid: v };
        }
        if (line.starts_with("CT ") || line.starts_with("VM ")) && line.ends_with(" not running")
            || line.starts_with("container '") && line.ends_with("not running!")
            || line.starts_with("can only push files to a running CT")
            || line.starts_with("can only pull files from a running")
        {
            return PveError::NotRunning { vmid: v, argv };
        }
        if line.starts_with("unable to create CT")
            || line.starts_with("unable to restore CT")
            || line.starts_with("TASK ERROR:")
            || line == "container did not stop"
            || line.contains("command 'systemctl start pve-container@")
        {
            return PveError::TaskFailed {
                argv,
                upid: None,
                message: stderr.clone(),
            };
        }
    }
    PveError::Command {
        argv,
        status: out.status,
        stderr,
        retryable: false,
    }
}

/// `CT 100 already exists on node 'pve1'` -> ("CT", 100, "pve1").
fn already_exists(line: &str) -> Option<(String, u32, String)> {
    let i = line.find(" already exists on node '")?;
    let head = &line[..i];
    let mut words = head.rsplit(' ');
    let id: u32 = words.next()?.parse().ok()?;
    let kind = words.next()?;
    if kind != "CT" && kind != "VM" {
        return None;
    }
    let rest = &line[i + " already exists on node '".len()..];
    let node = rest.split('\'').next()?.to_string();
    Some((kind.to_string(), id, node))
}

/// `Configuration file 'nodes/pve1/lxc/100.conf' does not exist` -> ("pve1", 100).
fn config_missing(line: &str) -> Option<(String, u32)> {
    let i = line.find("Configuration file 'nodes/")?;
    let rest = &line[i + "Configuration file 'nodes/".len()..];
    let (path, tail) = rest.split_once('\'')?;
    if !tail.contains("does not exist") {
        return None;
    }
    let mut parts = path.split('/');
    let node = parts.next()?.to_string();
    let _kind = parts.next()?;
    let id = parts.next()?.strip_suffix(".conf")?.parse().ok()?;
    Some((node, id))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cls(stderr: &str) -> PveError {
        classify(
            &Command::new("pct").arg("x"),
            &Output::fail(255, stderr),
            Some(100),
        )
    }

    #[test]
    fn known_texts() {
        assert!(matches!(cls("CT 100 already exists on node 'pve1'\n"),
            PveError::AlreadyExists { vmid: 100, ref node, ref kind } if node == "pve1" && kind == "CT"));
        assert!(matches!(cls("VM 100 already exists on node 'pve2'"),
            PveError::AlreadyExists { ref kind, .. } if kind == "VM"));
        assert!(
            matches!(cls("Configuration file 'nodes/pve1/lxc/999.conf' does not exist\n"),
            PveError::NotFound { vmid: 999, ref node, .. } if node == "pve1")
        );
        let l = cls("CT is locked (backup)\n");
        assert!(matches!(l, PveError::Locked { ref lock, .. } if lock == "backup"));
        assert!(l.retryable());
        assert!(
            !cls("CT is locked (create)").retryable(),
            "a create lock does not go away by itself"
        );
        let t = cls("trying to acquire lock...\ncan't lock file '/run/lock/lxc/pve-config-100.lock' - got timeout\n");
        assert!(matches!(t, PveError::LockTimeout { vmid: 100, .. }) && t.retryable());
        assert!(matches!(
            cls("can't remove CT 100 - protection mode enabled"),
            PveError::Protected { .. }
        ));
        assert!(matches!(
            cls("CT 100 already running"),
            PveError::AlreadyRunning { .. }
        ));
        assert!(matches!(
            cls("CT 100 not running"),
            PveError::NotRunning { .. }
        ));
        assert!(matches!(
            cls("container '100' not running!"),
            PveError::NotRunning { .. }
        ));
        assert!(matches!(
            cls("unable to create CT 103 - can't find file 'local:vztmpl/x.tar.zst'"),
            PveError::TaskFailed { .. }
        ));
        let other = cls("storage 'foo' does not exist");
        assert!(
            matches!(
                other,
                PveError::Command {
                    status: Some(255),
                    ..
                }
            ) && !other.retryable()
        );
    }

    #[test]
    fn stderr_is_scrubbed() {
        let cmd = Command::new("pct").arg("exec").redact("s3cret!");
        let e = classify(&cmd, &Output::fail(1, "chpasswd: bad s3cret!"), Some(1));
        assert!(!e.to_string().contains("s3cret!"), "{e}");
    }
}
