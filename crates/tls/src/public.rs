//! TLS for the clients that reach services outside pxfleet over HTTPS (template downloads on the agent, hook
//! webhooks on the controller): one way to find the trusted CAs, so both trust the same ones.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;
use rustls::RootCertStore;

/// Where Debian (and, for a controller on another distribution, Red Hat) keep the system's CA bundle, in the
/// order looked at.
pub const SYSTEM_CA_BUNDLES: &[&str] = &[
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
];

/// A CA file that cannot be used, named.
#[derive(Debug, thiserror::Error)]
#[error("CA file {}: {message}", path.display())]
pub struct PublicCaError {
    pub path: PathBuf,
    pub message: String,
}

/// Client TLS for public HTTPS services: the system's CA bundle (`SSL_CERT_FILE` when set, else the first of
/// [`SYSTEM_CA_BUNDLES`] that exists; none is no error, as on a node that only downloads over plain HTTP) and,
/// when given, every certificate of `extra_ca` (a PEM file that must hold at least one).
pub fn public_client_config(
    extra_ca: Option<&Path>,
) -> Result<rustls::ClientConfig, PublicCaError> {
    let mut roots = RootCertStore::empty();
    let system = std::env::var_os("SSL_CERT_FILE")
        .map(PathBuf::from)
        .into_iter()
        .chain(SYSTEM_CA_BUNDLES.iter().map(PathBuf::from))
        .find_map(|p| std::fs::read(&p).ok());
    if let Some(pem) = system {
        for cert in CertificateDer::pem_slice_iter(&pem).flatten() {
            let _ = roots.add(cert);
        }
    }
    if let Some(path) = extra_ca {
        let err = |message: String| PublicCaError {
            path: path.to_path_buf(),
            message,
        };
        let pem = std::fs::read(path).map_err(|e| err(e.to_string()))?;
        let mut n = 0;
        for cert in CertificateDer::pem_slice_iter(&pem) {
            let cert = cert.map_err(|e| err(format!("bad PEM: {e}")))?;
            roots
                .add(cert)
                .map_err(|e| err(format!("unusable certificate: {e}")))?;
            n += 1;
        }
        if n == 0 {
            return Err(err("no certificates found (expected PEM)".into()));
        }
    }
    rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .map(|b| b.with_root_certificates(roots).with_no_client_auth())
        .map_err(|e| PublicCaError {
            path: PathBuf::from("<rustls>"),
            message: e.to_string(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_extra_ca_file_must_hold_a_certificate() {
        let dir = tempfile::tempdir().unwrap();
        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, "not pem\n").unwrap();
        let e = public_client_config(Some(&empty)).unwrap_err();
        assert!(e.to_string().contains("no certificates found"), "{e}");
        let missing = dir.path().join("missing.pem");
        let e = public_client_config(Some(&missing)).unwrap_err();
        assert!(e.to_string().contains("missing.pem"), "{e}");
        let ca = crate::Ca::generate("test CA").unwrap();
        let good = dir.path().join("ca.pem");
        std::fs::write(&good, ca.cert_pem()).unwrap();
        assert!(public_client_config(Some(&good)).is_ok());
    }
}
