//! The error type of pxctl's library: every variant says what was being done (which file, which controller,
//! which RPC) and why it failed, in one line a user can act on. `main.rs` prints it as `error: ...`.

use std::path::PathBuf;

/// Everything a pxctl command can fail with.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// The configuration file could not be read.
    #[error("cannot read pxctl config {}: {source}", path.display())]
    ConfigRead {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The configuration file is not valid TOML or has unknown keys.
    #[error("{}:{line}:{column}: {message}", path.display())]
    ConfigParse {
        path: PathBuf,
        line: usize,
        column: usize,
        message: String,
    },
    /// A setting needed to reach the controller is missing from flags, environment and file alike.
    #[error("no {field} configured: {hint}")]
    ConfigMissing { field: &'static str, hint: String },
    /// A file named on the command line could not be read or written.
    #[error("{action} {}: {source}", path.display())]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// Credentials or the connection to the controller failed.
    #[error("{0}")]
    Tls(#[from] pxfleet_tls::TlsError),
    /// The TLS handshake was refused: which side, why, and what to do.
    #[error("connecting to {url}: {refusal}. To fix: {fix}")]
    Handshake {
        url: String,
        refusal: Box<pxfleet_tls::Refusal>,
        fix: String,
    },
    /// The controller answered an RPC with an error.
    #[error("{}", status_line(.0))]
    Rpc(Box<tonic::Status>),
    /// A fleet file did not validate; every diagnostic was already printed.
    #[error("{count} problem(s) in {file}")]
    Invalid { file: String, count: usize },
    /// A saved plan could not be used.
    #[error("saved plan {}: {reason}", path.display())]
    SavedPlan { path: PathBuf, reason: String },
    /// The user declined, or confirmation was needed where nobody can answer.
    #[error("{0}")]
    NotConfirmed(String),
    /// Arguments that parse but do not make sense together (or name nothing).
    #[error("{0}")]
    Usage(String),
    /// Following progress took longer than allowed.
    #[error("gave up waiting after {secs}s; the controller keeps applying: follow with `pxctl get containers --fleet {fleet}`")]
    Timeout { secs: u64, fleet: String },
    /// The fleet's policies deny the plan (the findings were already printed).
    #[error("fleet {fleet}: denied by its policies; the controller refuses to submit it")]
    PolicyDenied { fleet: String },
    /// Writing to the terminal failed (a closed pipe, a full disk).
    #[error("writing output: {0}")]
    Output(#[from] std::io::Error),
}

impl From<tonic::Status> for CliError {
    fn from(s: tonic::Status) -> Self {
        CliError::Rpc(Box::new(s))
    }
}

/// One line for a gRPC error: `permission denied: pxfleet://user/bob?role=viewer may not submit`.
pub fn status_line(s: &tonic::Status) -> String {
    use tonic::Code;
    let what = match s.code() {
        Code::Ok => "ok",
        Code::Cancelled => "cancelled",
        Code::Unknown => "controller error",
        Code::InvalidArgument => "invalid argument",
        Code::DeadlineExceeded => "deadline exceeded",
        Code::NotFound => "not found",
        Code::AlreadyExists => "already exists",
        Code::PermissionDenied => "permission denied",
        Code::ResourceExhausted => "resource exhausted",
        Code::FailedPrecondition => "refused",
        Code::Aborted => "aborted",
        Code::OutOfRange => "out of range",
        Code::Unimplemented => "not supported by this controller",
        Code::Internal => "controller internal error",
        Code::Unavailable => "controller unavailable",
        Code::DataLoss => "data loss",
        Code::Unauthenticated => "not authenticated",
    };
    let msg = s.message().trim();
    if msg.is_empty() {
        what.to_string()
    } else {
        format!("{what}: {}", msg.lines().next().unwrap_or(msg))
    }
}

/// Shorthand for results of this crate.
pub type Result<T, E = CliError> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_becomes_one_clear_line() {
        let e = CliError::from(tonic::Status::permission_denied(
            "pxfleet://user/bob?role=viewer may not submit",
        ));
        assert_eq!(
            e.to_string(),
            "permission denied: pxfleet://user/bob?role=viewer may not submit"
        );
        let e = CliError::from(tonic::Status::unavailable(""));
        assert_eq!(e.to_string(), "controller unavailable");
    }
}
