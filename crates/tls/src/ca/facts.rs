//! Facts read back out of certificates: serial numbers, SHA-256 fingerprints (and their checks),
//! [`CertInfo`] (identity, validity, serial) and the names a server certificate lists.

use std::fmt;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;
use sha2::{Digest, Sha256};
use time::OffsetDateTime;

use crate::{Identity, TlsError};

/// A certificate serial number as lowercase hex of its DER integer bytes (what x509 tools print without colons).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Serial(String);

impl Serial {
    /// Accepts hex with or without `:` separators, any case.
    pub fn from_hex(s: &str) -> Result<Serial, TlsError> {
        let clean: String = s
            .chars()
            .filter(|c| *c != ':')
            .collect::<String>()
            .to_ascii_lowercase();
        if clean.is_empty()
            || !clean.len().is_multiple_of(2)
            || !clean.chars().all(|c| c.is_ascii_hexdigit())
        {
            return Err(TlsError::cert(
                format!("serial {s:?}"),
                "expected an even number of hex digits, e.g. 4f3a09...",
            ));
        }
        Ok(Serial(clean))
    }

    fn from_bytes(bytes: &[u8]) -> Serial {
        Serial(hex::encode(bytes))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Serial {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// SHA-256 of a DER certificate, 64 lowercase hex digits.
pub fn fingerprint_sha256(cert_der: &[u8]) -> String {
    hex::encode(Sha256::digest(cert_der))
}

/// SHA-256 fingerprint of the first certificate in a PEM text.
pub fn fingerprint_of_pem(cert_pem: &str) -> Result<String, TlsError> {
    Ok(fingerprint_sha256(&cert_der_from_pem(
        cert_pem,
        "certificate",
    )?))
}

/// Normalizes a fingerprint as users may paste it (`AB:CD:...` or `abcd...`) to 64 lowercase hex digits.
pub fn normalize_fingerprint(value: &str) -> Result<String, TlsError> {
    let clean: String = value
        .trim()
        .chars()
        .filter(|c| *c != ':')
        .collect::<String>()
        .to_ascii_lowercase();
    if clean.len() != 64 || !clean.chars().all(|c| c.is_ascii_hexdigit()) {
        return Err(TlsError::Fingerprint {
            value: value.to_string(),
            reason: "expected a SHA-256 fingerprint: 64 hex digits (colons allowed)".into(),
        });
    }
    Ok(clean)
}

/// Checks that `ca_pem` is the CA with the pinned fingerprint (the agent does this with the CA it receives
/// at enrolment before trusting it for good).
pub fn verify_ca_fingerprint(ca_pem: &str, expected: &str) -> Result<(), TlsError> {
    let expected = normalize_fingerprint(expected)?;
    let actual = fingerprint_of_pem(ca_pem)?;
    if actual != expected {
        return Err(TlsError::Fingerprint {
            value: actual,
            reason: format!("the CA certificate does not match the pinned fingerprint {expected}"),
        });
    }
    Ok(())
}

pub(crate) fn cert_der_from_pem(
    pem: &str,
    what: &str,
) -> Result<CertificateDer<'static>, TlsError> {
    CertificateDer::from_pem_slice(pem.as_bytes()).map_err(|e| TlsError::Pem {
        what: what.to_string(),
        reason: format!("no PEM CERTIFICATE block ({e})"),
    })
}

/// Facts about a certificate, read with x509-parser.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertInfo {
    pub serial: Serial,
    pub not_before: OffsetDateTime,
    pub not_after: OffsetDateTime,
    /// SHA-256 of the DER, lowercase hex.
    pub fingerprint: String,
    /// Subject common name, if any.
    pub common_name: Option<String>,
    pub is_ca: bool,
    /// The `pxfleet://` identity, if the certificate carries one (server and CA certificates do not).
    pub identity: Option<Identity>,
}

impl CertInfo {
    pub fn from_der(der: &[u8]) -> Result<CertInfo, TlsError> {
        let (_, cert) = x509_parser::parse_x509_certificate(der)
            .map_err(|e| TlsError::cert("parsing DER", e.to_string()))?;
        let has_pxfleet_uri = cert
            .subject_alternative_name()
            .ok()
            .flatten()
            .map(|san| {
                san.value.general_names.iter().any(|n| {
                    matches!(n, x509_parser::extensions::GeneralName::URI(u) if u.starts_with(crate::identity::SCHEME))
                })
            })
            .unwrap_or(false);
        let identity = if has_pxfleet_uri {
            Some(Identity::from_cert_der(der)?)
        } else {
            None
        };
        let common_name = cert
            .subject()
            .iter_common_name()
            .next()
            .and_then(|cn| cn.as_str().ok())
            .map(str::to_string);
        Ok(CertInfo {
            serial: Serial::from_bytes(cert.raw_serial()),
            not_before: cert.validity().not_before.to_datetime(),
            not_after: cert.validity().not_after.to_datetime(),
            fingerprint: fingerprint_sha256(der),
            common_name,
            is_ca: cert.is_ca(),
            identity,
        })
    }

    pub fn from_pem(pem: &str) -> Result<CertInfo, TlsError> {
        CertInfo::from_der(&cert_der_from_pem(pem, "certificate")?)
    }
}

/// The DNS names and IP addresses a server certificate lists.
pub fn server_names(cert_pem: &str) -> Vec<String> {
    let Ok((_, pem)) = x509_parser::pem::parse_x509_pem(cert_pem.as_bytes()) else {
        return Vec::new();
    };
    let Ok(cert) = pem.parse_x509() else {
        return Vec::new();
    };
    let Ok(Some(san)) = cert.subject_alternative_name() else {
        return Vec::new();
    };
    san.value
        .general_names
        .iter()
        .filter_map(|n| match n {
            x509_parser::extensions::GeneralName::DNSName(d) => Some(d.to_string()),
            x509_parser::extensions::GeneralName::IPAddress(b) => match b.len() {
                4 => Some(std::net::IpAddr::from(<[u8; 4]>::try_from(*b).ok()?).to_string()),
                16 => Some(std::net::IpAddr::from(<[u8; 16]>::try_from(*b).ok()?).to_string()),
                _ => None,
            },
            _ => None,
        })
        .collect()
}
