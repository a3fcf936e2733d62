//! pxfleet-tls: the PKI and mutual-TLS plumbing shared by pxcontroller, pxagent and pxctl.
//!
//! - [`Ca`]: generate or load the CA (rcgen, ECDSA P-256), issue the server certificate, client bundles and
//!   node certificates from CSRs; identities live in a URI SAN ([`Identity`]).
//! - [`server_config`], [`client_config`], [`anonymous_client_config`], [`pinned_client_config`]: rustls
//!   (ring, TLS 1.3 only) with our verifiers, including revocation at the handshake ([`RevocationCheck`]).
//! - [`serve_tls`] / [`tls_incoming`], [`peer_identity`], [`connect`]: tonic over those configurations.
//! - [`Bundle`]: credential files (keys 0600). [`JoinToken`]: the enrolment token format.
//!
//! docs/security.md describes the design as a whole.

mod bundle;
mod ca;
mod config;
mod error;
mod identity;
mod public;
mod refusal;
mod token;
mod transport;

pub use bundle::{write_file, Bundle, BundlePaths, CERT_MODE, KEY_MODE};
pub use ca::{
    csr_common_name, fingerprint_of_pem, fingerprint_sha256, generate_key_and_csr,
    normalize_fingerprint, server_names, verify_ca_fingerprint, Ca, CertInfo, Credentials,
    IssuedCert, KeyAndCsr, Serial, BACKDATE, CA_VALIDITY, DEFAULT_CLIENT_VALIDITY, SERVER_VALIDITY,
};
pub use config::{
    anonymous_client_config, client_config, pinned_client_config, provider,
    renewable_client_config, server_config, server_config_with_client_cas, ClientCertSlot,
    NoRevocation, RevocationCheck, RevocationList,
};
pub use error::TlsError;
pub use identity::{Identity, Role, SCHEME};
pub use public::{public_client_config, PublicCaError, SYSTEM_CA_BUNDLES};
pub use refusal::{Audience, Refusal, RefusalCause, RefusedBy};
pub use token::JoinToken;
pub use transport::{
    connect, connect_keepalive, connect_lazy, connect_with_server_name, peer_cert_info,
    peer_identity, require_identity, serve_tls, server_builder, tls_incoming, KeepAlive,
    PeerStream, CONNECT_TIMEOUT, FIRST_BYTES_TIMEOUT, HANDSHAKE_TIMEOUT, KEEPALIVE_INTERVAL,
    KEEPALIVE_TIMEOUT, MAX_CONNECTIONS_PER_PEER, MAX_PENDING_HANDSHAKES, MAX_PENDING_PER_PEER,
    PREFACE_TIMEOUT,
};

/// Fills `buf` from the ring provider's system random source.
pub(crate) fn random_bytes(buf: &mut [u8]) -> Result<(), TlsError> {
    rustls::crypto::ring::default_provider()
        .secure_random
        .fill(buf)
        .map_err(|_| TlsError::cert("random serial or token", "the system random source failed"))
}
