//! The certificate authority: generating or loading the CA (rcgen, ECDSA P-256), issuing the server
//! certificate, user and node certificates (identity in a URI SAN), signing agents' CSRs, serial numbers,
//! fingerprints, and reading the facts back out of a certificate ([`CertInfo`]).

use std::fmt;
use std::time::Duration;

use rcgen::{
    BasicConstraints, CertificateParams, CertificateSigningRequestParams, DistinguishedName,
    DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, KeyUsagePurpose, SanType, SerialNumber,
    PKCS_ECDSA_P256_SHA256,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;
use sha2::{Digest, Sha256};
use time::OffsetDateTime;

use crate::{Identity, TlsError};

/// Validity of a new CA.
pub const CA_VALIDITY: Duration = Duration::from_secs(20 * 365 * 24 * 3600);
/// Validity of the controller's server certificate.
pub const SERVER_VALIDITY: Duration = Duration::from_secs(3 * 365 * 24 * 3600);
/// Suggested validity for node and user certificates.
pub const DEFAULT_CLIENT_VALIDITY: Duration = Duration::from_secs(365 * 24 * 3600);
/// Certificates start this long before "now", to tolerate clock skew between controller and nodes.
pub const BACKDATE: Duration = Duration::from_secs(300);

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

/// A certificate the CA issued (or signed from a CSR).
#[derive(Debug, Clone)]
pub struct IssuedCert {
    pub cert_pem: String,
    pub serial: Serial,
    pub not_after: OffsetDateTime,
    /// `None` for the server certificate.
    pub identity: Option<Identity>,
}

/// A certificate together with its private key (server certificate, or a client bundle made by the CA).
#[derive(Clone)]
pub struct Credentials {
    pub cert: IssuedCert,
    /// PKCS#8 PEM private key. Secret: write it only with [`crate::Bundle::write`] (mode 0600).
    pub key_pem: String,
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credentials")
            .field("cert", &self.cert)
            .field("key_pem", &"<redacted>")
            .finish()
    }
}

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

/// The controller's certificate authority.
pub struct Ca {
    issuer: Issuer<'static, KeyPair>,
    cert_pem: String,
    cert_der: CertificateDer<'static>,
}

impl fmt::Debug for Ca {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Ca")
            .field("fingerprint", &self.fingerprint_sha256())
            .finish_non_exhaustive()
    }
}

impl Ca {
    /// A new self-signed CA with an ECDSA P-256 key, valid for [`CA_VALIDITY`].
    pub fn generate(common_name: &str) -> Result<Ca, TlsError> {
        let key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256)
            .map_err(TlsError::rcgen("generating the CA key"))?;
        let mut params = CertificateParams::default();
        params.distinguished_name = dn(common_name);
        params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let (not_before, not_after) = validity_window(CA_VALIDITY)?;
        params.not_before = not_before;
        params.not_after = not_after;
        params.serial_number = Some(random_serial()?);
        let cert = params
            .self_signed(&key)
            .map_err(TlsError::rcgen("self-signing the CA certificate"))?;
        Ok(Ca {
            cert_pem: cert.pem(),
            cert_der: cert.der().clone(),
            issuer: Issuer::new(params, key),
        })
    }

    /// Loads a CA saved with [`Ca::cert_pem`] and [`Ca::key_pem`]; checks that the key belongs to the
    /// certificate and that the certificate is a CA.
    pub fn from_pem(cert_pem: &str, key_pem: &str) -> Result<Ca, TlsError> {
        let cert_der = cert_der_from_pem(cert_pem, "CA certificate")?;
        let key = KeyPair::from_pem(key_pem).map_err(TlsError::rcgen("reading the CA key"))?;
        let (_, parsed) = x509_parser::parse_x509_certificate(&cert_der)
            .map_err(|e| TlsError::cert("CA", e.to_string()))?;
        if !parsed.is_ca() {
            return Err(TlsError::cert(
                "CA",
                "is not a CA certificate (basicConstraints CA:FALSE)",
            ));
        }
        if parsed.public_key().subject_public_key.data.as_ref() != key.public_key_raw() {
            return Err(TlsError::cert(
                "CA",
                "the key does not belong to this certificate",
            ));
        }
        let issuer = Issuer::from_ca_cert_der(&cert_der, key)
            .map_err(TlsError::rcgen("loading the CA certificate"))?;
        Ok(Ca {
            issuer,
            cert_pem: cert_pem.to_string(),
            cert_der,
        })
    }

    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    pub fn cert_der(&self) -> &CertificateDer<'static> {
        &self.cert_der
    }

    /// The CA private key as PKCS#8 PEM. Secret: store it 0600 (or in the controller's database), never log it.
    pub fn key_pem(&self) -> String {
        self.issuer.key().serialize_pem()
    }

    /// SHA-256 of the CA certificate's DER: what join tokens carry and agents pin.
    pub fn fingerprint_sha256(&self) -> String {
        fingerprint_sha256(&self.cert_der)
    }

    /// The controller's server certificate and key. `sans` are DNS names or IP addresses
    /// (e.g. `pxcontroller.example.org`, `127.0.0.1`); clients check the name they dial against them.
    pub fn issue_server(&self, sans: &[String]) -> Result<Credentials, TlsError> {
        if sans.is_empty() {
            return Err(TlsError::InvalidSan {
                san: String::new(),
                reason: "a server certificate needs at least one DNS name or IP address".into(),
            });
        }
        let mut names = Vec::new();
        for san in sans {
            names.push(server_san(san)?);
        }
        let key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256)
            .map_err(TlsError::rcgen("generating the server key"))?;
        let mut params = self.leaf_params(&sans[0], SERVER_VALIDITY)?;
        params.subject_alt_names = names;
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let cert = self.sign(&params, &key, "signing the server certificate", None)?;
        Ok(Credentials {
            cert,
            key_pem: key.serialize_pem(),
        })
    }

    /// A client certificate and key made by the CA (the admin bundle of `pxcontroller init`, or a user bundle).
    pub fn issue_client(
        &self,
        identity: &Identity,
        validity: Duration,
    ) -> Result<Credentials, TlsError> {
        let key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256)
            .map_err(TlsError::rcgen("generating a client key"))?;
        let cert = self.sign_client(identity, &key, validity)?;
        Ok(Credentials {
            cert,
            key_pem: key.serialize_pem(),
        })
    }

    /// Signs a CSR for `identity`. Only the CSR's public key is used (its signature is checked): subject, SANs
    /// and usages come from the identity, whatever the CSR asked for.
    pub fn sign_csr(
        &self,
        csr_pem: &str,
        identity: &Identity,
        validity: Duration,
    ) -> Result<IssuedCert, TlsError> {
        let csr =
            CertificateSigningRequestParams::from_pem(csr_pem).map_err(|e| TlsError::Csr {
                reason: format!(
                    "{e} (expected a PEM CERTIFICATE REQUEST with a valid self-signature)"
                ),
            })?;
        self.sign_client(identity, &csr.public_key, validity)
    }

    fn sign_client(
        &self,
        identity: &Identity,
        public_key: &impl rcgen::PublicKeyData,
        validity: Duration,
    ) -> Result<IssuedCert, TlsError> {
        identity.validate()?;
        let cn = match identity {
            Identity::Node(name) => name.clone(),
            Identity::User { name, .. } => name.clone(),
        };
        let mut params = self.leaf_params(&cn, validity)?;
        let uri = identity
            .uri()
            .try_into()
            .map_err(TlsError::rcgen(format!("encoding {identity} as a URI SAN")))?;
        params.subject_alt_names = vec![SanType::URI(uri)];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        self.sign(
            &params,
            public_key,
            &format!("signing the certificate for {identity}"),
            Some(identity.clone()),
        )
    }

    fn leaf_params(
        &self,
        common_name: &str,
        validity: Duration,
    ) -> Result<CertificateParams, TlsError> {
        let mut params = CertificateParams::default();
        params.distinguished_name = dn(common_name);
        params.is_ca = IsCa::ExplicitNoCa;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.use_authority_key_identifier_extension = true;
        let (not_before, not_after) = validity_window(validity)?;
        params.not_before = not_before;
        params.not_after = not_after;
        params.serial_number = Some(random_serial()?);
        Ok(params)
    }

    fn sign(
        &self,
        params: &CertificateParams,
        public_key: &impl rcgen::PublicKeyData,
        what: &str,
        identity: Option<Identity>,
    ) -> Result<IssuedCert, TlsError> {
        let cert = params
            .signed_by(public_key, &self.issuer)
            .map_err(TlsError::rcgen(what))?;
        let info = CertInfo::from_der(cert.der())?;
        Ok(IssuedCert {
            cert_pem: cert.pem(),
            serial: info.serial,
            not_after: info.not_after,
            identity,
        })
    }
}

fn dn(common_name: &str) -> DistinguishedName {
    let mut dn = DistinguishedName::new();
    dn.push(DnType::OrganizationName, "pxfleet");
    dn.push(DnType::CommonName, common_name);
    dn
}

fn server_san(san: &str) -> Result<SanType, TlsError> {
    if let Ok(ip) = san.parse::<std::net::IpAddr>() {
        return Ok(SanType::IpAddress(ip));
    }
    let valid = !san.is_empty()
        && san.len() <= 253
        && san.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        });
    if !valid {
        return Err(TlsError::InvalidSan {
            san: san.to_string(),
            reason: "expected a DNS name such as pxcontroller.example.org or an IP address such as 127.0.0.1".into(),
        });
    }
    let name = san
        .to_string()
        .try_into()
        .map_err(|e: rcgen::Error| TlsError::InvalidSan {
            san: san.to_string(),
            reason: e.to_string(),
        })?;
    Ok(SanType::DnsName(name))
}

fn validity_window(validity: Duration) -> Result<(OffsetDateTime, OffsetDateTime), TlsError> {
    let now = OffsetDateTime::now_utc();
    let span = time::Duration::try_from(validity)
        .map_err(|_| TlsError::cert("validity", format!("{validity:?} is too long")))?;
    let not_after = now
        .checked_add(span)
        .ok_or_else(|| TlsError::cert("validity", format!("{validity:?} is too long")))?;
    Ok((now - BACKDATE, not_after))
}

/// 16 random bytes with the top bit clear and the next one set: positive, and DER keeps all 16 bytes, so the
/// serial we record equals the one x509 tools and the handshake show.
fn random_serial() -> Result<SerialNumber, TlsError> {
    let mut bytes = [0u8; 16];
    crate::random_bytes(&mut bytes)?;
    bytes[0] = (bytes[0] & 0x7f) | 0x40;
    Ok(SerialNumber::from_slice(&bytes))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Role;

    #[test]
    fn ca_round_trips_through_pem_and_keeps_its_fingerprint() {
        let ca = Ca::generate("pxfleet test CA").unwrap();
        let fp = ca.fingerprint_sha256();
        assert_eq!(fp.len(), 64);
        let loaded = Ca::from_pem(ca.cert_pem(), &ca.key_pem()).unwrap();
        assert_eq!(loaded.fingerprint_sha256(), fp);
        let info = CertInfo::from_pem(ca.cert_pem()).unwrap();
        assert!(info.is_ca);
        assert_eq!(info.common_name.as_deref(), Some("pxfleet test CA"));
        assert!(info.identity.is_none());
        assert!(!format!("{ca:?}").contains("PRIVATE"));
    }

    #[test]
    fn from_pem_refuses_a_foreign_key() {
        let a = Ca::generate("a").unwrap();
        let b = Ca::generate("b").unwrap();
        let err = Ca::from_pem(a.cert_pem(), &b.key_pem())
            .unwrap_err()
            .to_string();
        assert!(err.contains("does not belong"), "{err}");
    }

    #[test]
    fn from_pem_refuses_a_leaf_certificate() {
        let ca = Ca::generate("a").unwrap();
        let server = ca.issue_server(&["localhost".into()]).unwrap();
        let err = Ca::from_pem(&server.cert.cert_pem, &server.key_pem)
            .unwrap_err()
            .to_string();
        assert!(err.contains("not a CA"), "{err}");
    }

    #[test]
    fn client_certificates_carry_identity_and_serial() {
        let ca = Ca::generate("ca").unwrap();
        let id = Identity::user("alice", Role::Operator, &["dev", "prod"]).unwrap();
        let creds = ca.issue_client(&id, Duration::from_secs(3600)).unwrap();
        let info = CertInfo::from_pem(&creds.cert.cert_pem).unwrap();
        assert_eq!(info.identity.as_ref(), Some(&id));
        assert_eq!(info.serial, creds.cert.serial);
        assert_eq!(info.serial.as_str().len(), 32);
        assert!(!info.is_ca);
        let left = info.not_after - OffsetDateTime::now_utc();
        assert!(
            left > time::Duration::minutes(59) && left <= time::Duration::minutes(60),
            "{left}"
        );
        assert!(!format!("{creds:?}").contains("PRIVATE KEY"));
    }

    #[test]
    fn serials_differ() {
        let ca = Ca::generate("ca").unwrap();
        let id = Identity::node("mk33").unwrap();
        let a = ca.issue_client(&id, DEFAULT_CLIENT_VALIDITY).unwrap();
        let b = ca.issue_client(&id, DEFAULT_CLIENT_VALIDITY).unwrap();
        assert_ne!(a.cert.serial, b.cert.serial);
    }

    #[test]
    fn csr_subject_and_sans_are_ignored() {
        let ca = Ca::generate("ca").unwrap();
        // The node asks for an admin identity in its CSR; the CA writes the identity it decided on.
        let key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).unwrap();
        let mut params = CertificateParams::new(vec!["evil.example".to_string()]).unwrap();
        params.subject_alt_names.push(SanType::URI(
            "pxfleet://user/mallory?role=admin"
                .to_string()
                .try_into()
                .unwrap(),
        ));
        let csr_pem = params.serialize_request(&key).unwrap().pem().unwrap();
        let node = Identity::node("mk33").unwrap();
        let issued = ca
            .sign_csr(&csr_pem, &node, DEFAULT_CLIENT_VALIDITY)
            .unwrap();
        let info = CertInfo::from_pem(&issued.cert_pem).unwrap();
        assert_eq!(info.identity, Some(node));
        assert_eq!(info.common_name.as_deref(), Some("mk33"));
    }

    #[test]
    fn generated_csr_is_signed_with_its_key() {
        let ca = Ca::generate("ca").unwrap();
        let kc = generate_key_and_csr("mk33").unwrap();
        assert!(kc.key_pem.contains("PRIVATE KEY"));
        let issued = ca
            .sign_csr(
                &kc.csr_pem,
                &Identity::node("mk33").unwrap(),
                DEFAULT_CLIENT_VALIDITY,
            )
            .unwrap();
        // The certificate's public key is the CSR's key.
        let key = KeyPair::from_pem(&kc.key_pem).unwrap();
        let der = cert_der_from_pem(&issued.cert_pem, "cert").unwrap();
        let (_, cert) = x509_parser::parse_x509_certificate(&der).unwrap();
        assert_eq!(
            cert.public_key().subject_public_key.data.as_ref(),
            key.public_key_raw()
        );
        assert!(!format!("{kc:?}").contains("PRIVATE KEY"));
    }

    #[test]
    fn garbage_csr_is_refused() {
        let ca = Ca::generate("ca").unwrap();
        let err = ca
            .sign_csr(
                "not a csr",
                &Identity::node("mk33").unwrap(),
                DEFAULT_CLIENT_VALIDITY,
            )
            .unwrap_err()
            .to_string();
        assert!(err.contains("CERTIFICATE REQUEST"), "{err}");
    }

    #[test]
    fn server_sans_are_checked() {
        let ca = Ca::generate("ca").unwrap();
        let err = ca
            .issue_server(&["bad name!".into()])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("bad name!") && err.contains("DNS name"),
            "{err}"
        );
        assert!(ca.issue_server(&[]).is_err());
        let ok = ca
            .issue_server(&[
                "pxcontroller.example.org".into(),
                "127.0.0.1".into(),
                "::1".into(),
            ])
            .unwrap();
        assert!(CertInfo::from_pem(&ok.cert.cert_pem)
            .unwrap()
            .identity
            .is_none());
    }

    #[test]
    fn fingerprints_normalize_and_verify() {
        let ca = Ca::generate("ca").unwrap();
        let fp = ca.fingerprint_sha256();
        let colons = fp
            .as_bytes()
            .chunks(2)
            .map(|c| std::str::from_utf8(c).unwrap().to_ascii_uppercase())
            .collect::<Vec<_>>()
            .join(":");
        assert_eq!(normalize_fingerprint(&colons).unwrap(), fp);
        verify_ca_fingerprint(ca.cert_pem(), &colons).unwrap();
        let other = Ca::generate("other").unwrap();
        assert!(verify_ca_fingerprint(other.cert_pem(), &fp).is_err());
        assert!(normalize_fingerprint("abc").is_err());
    }

    #[test]
    fn serial_parsing() {
        assert_eq!(Serial::from_hex("4F:3A").unwrap().as_str(), "4f3a");
        assert!(Serial::from_hex("xyz").is_err());
        assert!(Serial::from_hex("abc").is_err());
    }
}
