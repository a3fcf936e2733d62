//! The error type of pxfleet-tls: every variant says what was being done (which certificate, file, identity,
//! URL) and why it failed. Key material never appears in these messages.

use std::path::PathBuf;

/// Everything that can go wrong in PKI, identity, configuration, file and transport helpers.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// rcgen refused to build or sign something.
    #[error("{what}: {source}")]
    Rcgen {
        what: String,
        #[source]
        source: rcgen::Error,
    },
    /// rustls refused a configuration (bad key, no usable certificate, ...).
    #[error("{what}: {source}")]
    Rustls {
        what: String,
        #[source]
        source: rustls::Error,
    },
    /// A PEM input did not contain what was expected.
    #[error("{what}: {reason}")]
    Pem { what: String, reason: String },
    /// A certificate could not be parsed or is not what it must be.
    #[error("certificate {what}: {reason}")]
    Certificate { what: String, reason: String },
    /// A certificate signing request was unusable.
    #[error("certificate signing request: {reason}")]
    Csr { reason: String },
    /// An identity URI (`pxfleet://...`) or identity part was malformed.
    #[error("identity {uri:?}: {reason}")]
    Identity { uri: String, reason: String },
    /// A subject alternative name for a server certificate was not a DNS name or an IP address.
    #[error("server name {san:?}: {reason}")]
    InvalidSan { san: String, reason: String },
    /// A CA fingerprint was not 64 hex digits (SHA-256).
    #[error("CA fingerprint {value:?}: {reason}")]
    Fingerprint { value: String, reason: String },
    /// A join token was malformed. The token text itself is never included.
    #[error("join token: {reason}")]
    Token { reason: String },
    /// Reading or writing a file failed.
    #[error("{action} {}: {source}", path.display())]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// An endpoint URL was not `https://HOST:PORT`.
    #[error("controller URL {url:?}: {reason}")]
    Url { url: String, reason: String },
    /// Connecting to a gRPC endpoint failed (TCP, TLS handshake or HTTP/2).
    #[error("connecting to {url}: {source}")]
    Connect {
        url: String,
        #[source]
        source: tonic::transport::Error,
    },
    /// The TLS handshake was refused by one side; [`crate::Refusal::fix`] says what to do.
    #[error("connecting to {url}: {refusal}")]
    Handshake {
        url: String,
        refusal: crate::Refusal,
    },
    /// The gRPC server failed.
    #[error("serving gRPC over TLS: {source}")]
    Serve {
        #[source]
        source: tonic::transport::Error,
    },
}

impl TlsError {
    pub(crate) fn rcgen(what: impl Into<String>) -> impl FnOnce(rcgen::Error) -> TlsError {
        let what = what.into();
        move |source| TlsError::Rcgen { what, source }
    }

    pub(crate) fn rustls(what: impl Into<String>) -> impl FnOnce(rustls::Error) -> TlsError {
        let what = what.into();
        move |source| TlsError::Rustls { what, source }
    }

    pub(crate) fn cert(what: impl Into<String>, reason: impl Into<String>) -> TlsError {
        TlsError::Certificate {
            what: what.into(),
            reason: reason.into(),
        }
    }

    pub(crate) fn identity(uri: impl Into<String>, reason: impl Into<String>) -> TlsError {
        TlsError::Identity {
            uri: uri.into(),
            reason: reason.into(),
        }
    }
}
