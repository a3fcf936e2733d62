//! Certificate signing requests: a fresh key with its CSR for a node that enrols, and the
//! subject a CSR names (informational only; the CA decides the identity).

use std::fmt;

use rcgen::{CertificateParams, KeyPair, PKCS_ECDSA_P256_SHA256};

use super::dn;
use crate::TlsError;

/// A private key and a CSR made from it, for a node that enrols (`pxagent join`).
#[derive(Clone)]
pub struct KeyAndCsr {
    /// PKCS#8 PEM private key; stays on the node.
    pub key_pem: String,
    /// PEM certificate signing request sent to the controller.
    pub csr_pem: String,
}

impl fmt::Debug for KeyAndCsr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyAndCsr")
            .field("key_pem", &"<redacted>")
            .field("csr_pem", &self.csr_pem)
            .finish()
    }
}

/// Makes an ECDSA P-256 key and a CSR for it. The subject is informational only: the CA sets the subject and
/// SANs from the identity it decides on.
pub fn generate_key_and_csr(common_name: &str) -> Result<KeyAndCsr, TlsError> {
    let key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256)
        .map_err(TlsError::rcgen("generating a key pair"))?;
    let mut params = CertificateParams::default();
    params.distinguished_name = dn(common_name);
    let csr = params
        .serialize_request(&key)
        .map_err(TlsError::rcgen("building the certificate signing request"))?;
    let csr_pem = csr
        .pem()
        .map_err(TlsError::rcgen("encoding the certificate signing request"))?;
    Ok(KeyAndCsr {
        key_pem: key.serialize_pem(),
        csr_pem,
    })
}

/// The subject common name a CSR asks for (`pxctl user request NAME` puts NAME there); the CA ignores it when
/// signing, `pxctl user issue` uses it as the default user name.
pub fn csr_common_name(csr_pem: &str) -> Result<Option<String>, TlsError> {
    let bad = |reason: String| TlsError::Csr { reason };
    let (_, pem) = x509_parser::pem::parse_x509_pem(csr_pem.as_bytes()).map_err(|e| {
        bad(format!(
            "not PEM ({e}); expected a CERTIFICATE REQUEST block"
        ))
    })?;
    if pem.label != "CERTIFICATE REQUEST" {
        return Err(bad(format!(
            "a PEM {} block, expected CERTIFICATE REQUEST (the .csr file `pxctl user request` wrote)",
            pem.label
        )));
    }
    use x509_parser::prelude::FromDer;
    let (_, csr) =
        x509_parser::certification_request::X509CertificationRequest::from_der(&pem.contents)
            .map_err(|e| bad(format!("unreadable ({e})")))?;
    let name = csr
        .certification_request_info
        .subject
        .iter_common_name()
        .next()
        .and_then(|cn| cn.as_str().ok())
        .map(str::to_string);
    Ok(name)
}
