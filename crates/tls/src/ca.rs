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
use rustls::pki_types::CertificateDer;
use time::OffsetDateTime;

use crate::{Identity, TlsError};

mod csr;
mod facts;

pub use csr::{csr_common_name, generate_key_and_csr, KeyAndCsr};
pub(crate) use facts::cert_der_from_pem;
pub use facts::{
    fingerprint_of_pem, fingerprint_sha256, normalize_fingerprint, server_names,
    verify_ca_fingerprint, CertInfo, Serial,
};

/// Validity of a new CA.
pub const CA_VALIDITY: Duration = Duration::from_secs(20 * 365 * 24 * 3600);
/// Validity of the controller's server certificate.
pub const SERVER_VALIDITY: Duration = Duration::from_secs(3 * 365 * 24 * 3600);
/// Suggested validity for node and user certificates.
pub const DEFAULT_CLIENT_VALIDITY: Duration = Duration::from_secs(365 * 24 * 3600);
/// Certificates start this long before "now", to tolerate clock skew between controller and nodes.
pub const BACKDATE: Duration = Duration::from_secs(300);

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
    // the real clock, not an injected one: the certificate is checked by other processes against theirs
    #[allow(clippy::disallowed_methods)]
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
mod tests;
