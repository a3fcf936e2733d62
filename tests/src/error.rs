//! The harness's error type ([`HarnessError`]: each variant names the path, node or argv) and its `Result`.

use std::path::{Path, PathBuf};

/// Why the harness could not set up or drive a cluster. Each variant names the path, node or argv.
#[derive(Debug, thiserror::Error)]
pub enum HarnessError {
    #[error("{path} not found: run `cargo build --bins` first (the integration tests start the real binaries)")]
    MissingBinary { path: PathBuf },
    #[error("building the binaries the tests start: {0}")]
    Build(String),
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("`{argv}` failed ({status}):\nstdout: {stdout}\nstderr: {stderr}")]
    Command {
        argv: String,
        status: String,
        stdout: String,
        stderr: String,
    },
    #[error("`{argv}` did not finish within {secs} s")]
    Timeout { argv: String, secs: u64 },
    #[error("TLS: {0}")]
    Tls(#[from] pxfleet_tls::TlsError),
    #[error("gRPC {call}: {status}")]
    Grpc {
        call: &'static str,
        status: tonic::Status,
    },
    #[error("{what}: {message}")]
    Setup { what: String, message: String },
}

pub(crate) type Result<T, E = HarnessError> = std::result::Result<T, E>;

/// An I/O error about `path`.
pub(crate) fn io(path: &Path) -> impl FnOnce(std::io::Error) -> HarnessError + '_ {
    move |source| HarnessError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// A failed gRPC `call`.
pub(crate) fn grpc(call: &'static str) -> impl FnOnce(tonic::Status) -> HarnessError {
    move |status| HarnessError::Grpc { call, status }
}
