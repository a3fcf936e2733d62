//! rustls configurations (ring provider, TLS 1.3 only, ALPN h2) for the controller and its clients, and the
//! certificate verifiers behind them:
//! - the server's client verifier accepts a missing client certificate (enrolment), but a presented one must
//!   chain to our CA, be valid for client auth, carry a `pxfleet://` identity and not be revoked;
//! - clients verify the server against our CA ([`client_config`], [`anonymous_client_config`]) or, before they
//!   have it, against the CA whose fingerprint they pinned ([`pinned_client_config`]).

use std::collections::HashSet;
use std::fmt;
use std::sync::{Arc, RwLock};

use pxfleet_common::Clock;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::WebPkiClientVerifier;
use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, DistinguishedName, RootCertStore,
    ServerConfig, SignatureScheme,
};

use crate::ca::{cert_der_from_pem, fingerprint_sha256, normalize_fingerprint};
use crate::{Bundle, CertInfo, Serial, TlsError};

/// Decides at the handshake whether a certificate serial is revoked. The controller implements it over its
/// store; [`RevocationList`] is an in-memory implementation.
pub trait RevocationCheck: Send + Sync + fmt::Debug {
    fn is_revoked(&self, serial: &Serial) -> bool;
}

/// Nothing is revoked.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoRevocation;

impl RevocationCheck for NoRevocation {
    fn is_revoked(&self, _: &Serial) -> bool {
        false
    }
}

/// A shared, updatable set of revoked serials; revoking takes effect at the next handshake.
#[derive(Debug, Default)]
pub struct RevocationList {
    revoked: RwLock<HashSet<Serial>>,
}

impl RevocationList {
    pub fn new(serials: impl IntoIterator<Item = Serial>) -> RevocationList {
        RevocationList {
            revoked: RwLock::new(serials.into_iter().collect()),
        }
    }

    pub fn revoke(&self, serial: Serial) {
        self.revoked
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .insert(serial);
    }
}

impl RevocationCheck for RevocationList {
    fn is_revoked(&self, serial: &Serial) -> bool {
        self.revoked
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .contains(serial)
    }
}

/// The ring provider; pxfleet never uses aws-lc.
pub fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

const ALPN_H2: &[u8] = b"h2";

/// Every CERTIFICATE in `ca_pem` becomes a trust anchor: one CA normally, two during a CA rotation's
/// overlap (the old and the new CA concatenated in one ca.pem).
fn roots_from_pem(ca_pem: &str) -> Result<Arc<RootCertStore>, TlsError> {
    let mut roots = RootCertStore::empty();
    add_roots(&mut roots, ca_pem, "CA certificate")?;
    Ok(Arc::new(roots))
}

fn add_roots(roots: &mut RootCertStore, pem: &str, what: &str) -> Result<(), TlsError> {
    let mut added = 0;
    for der in CertificateDer::pem_slice_iter(pem.as_bytes()) {
        let der = der.map_err(|e| TlsError::Pem {
            what: what.to_string(),
            reason: format!("unreadable PEM CERTIFICATE block ({e})"),
        })?;
        roots.add(der).map_err(TlsError::rustls(format!(
            "using the {what} as trust anchor"
        )))?;
        added += 1;
    }
    if added == 0 {
        // The same error as everywhere else a certificate is missing.
        cert_der_from_pem(pem, what)?;
    }
    Ok(())
}

fn key_from_pem(key_pem: &str, what: &str) -> Result<PrivateKeyDer<'static>, TlsError> {
    PrivateKeyDer::from_pem_slice(key_pem.as_bytes()).map_err(|e| TlsError::Pem {
        what: what.to_string(),
        reason: format!("no PEM PRIVATE KEY block ({e})"),
    })
}

/// The controller's server configuration: TLS 1.3 only, its certificate chain (server certificate + CA, so
/// pinning clients can find the CA), and the client verifier described in the module docs.
pub fn server_config(
    server: &Bundle,
    revocation: Arc<dyn RevocationCheck>,
) -> Result<Arc<ServerConfig>, TlsError> {
    server_config_with_client_cas(server, &[], revocation, Clock::system())
}

/// [`server_config`] that also accepts client certificates issued by `extra_client_cas` (PEM CA
/// certificates): during a CA rotation, nodes and users still holding certificates of the old CA keep
/// working until they have new ones (docs/security.md, "CA rotation"). Client certificates are checked for
/// expiry against `clock` (the controller's injected clock; a manual one in tests).
pub fn server_config_with_client_cas(
    server: &Bundle,
    extra_client_cas: &[String],
    revocation: Arc<dyn RevocationCheck>,
    clock: Clock,
) -> Result<Arc<ServerConfig>, TlsError> {
    let provider = provider();
    let mut client_roots = RootCertStore::empty();
    add_roots(&mut client_roots, &server.ca_pem, "CA certificate")?;
    for extra in extra_client_cas {
        add_roots(&mut client_roots, extra, "additional client CA certificate")?;
    }
    let roots = Arc::new(client_roots);
    let webpki = WebPkiClientVerifier::builder_with_provider(roots.clone(), provider.clone())
        .allow_unauthenticated()
        .build()
        .map_err(|e| TlsError::cert("CA", format!("cannot verify clients with it: {e}")))?;
    let verifier = Arc::new(PxfleetClientVerifier {
        inner: webpki,
        revocation,
    });
    let chain = vec![
        cert_der_from_pem(&server.cert_pem, "server certificate")?,
        cert_der_from_pem(&server.ca_pem, "CA certificate")?,
    ];
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(TlsError::rustls("restricting to TLS 1.3"))?
        .with_client_cert_verifier(verifier)
        .with_single_cert(chain, key_from_pem(&server.key_pem, "server key")?)
        .map_err(TlsError::rustls("loading the server certificate and key"))?;
    config.alpn_protocols = vec![ALPN_H2.to_vec()];
    config.time_provider = Arc::new(ClockTime(clock));
    // No session resumption: a resumed session skips the client verifier, so a revoked certificate could
    // keep reconnecting. Every connection does a full handshake (connections are long-lived anyway).
    config.session_storage = Arc::new(rustls::server::NoServerSessionStorage {});
    config.send_tls13_tickets = 0;
    Ok(Arc::new(config))
}

/// rustls reads the time of certificate validity checks from the injected [`Clock`].
#[derive(Debug)]
struct ClockTime(Clock);

impl rustls::time_provider::TimeProvider for ClockTime {
    fn current_time(&self) -> Option<UnixTime> {
        Some(UnixTime::since_unix_epoch(
            std::time::Duration::from_millis(self.0.now_ms()),
        ))
    }
}

/// A client with a certificate (pxctl, a running agent), trusting only our CA.
pub fn client_config(client: &Bundle) -> Result<Arc<ClientConfig>, TlsError> {
    let provider = provider();
    let roots = roots_from_pem(&client.ca_pem)?;
    let chain = vec![cert_der_from_pem(&client.cert_pem, "client certificate")?];
    let mut config = ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(TlsError::rustls("restricting to TLS 1.3"))?
        .with_root_certificates(roots)
        .with_client_auth_cert(chain, key_from_pem(&client.key_pem, "client key")?)
        .map_err(TlsError::rustls("loading the client certificate and key"))?;
    config.alpn_protocols = vec![ALPN_H2.to_vec()];
    Ok(Arc::new(config))
}

/// A client without a certificate that trusts our CA (health checks; enrolment when the CA is already known).
pub fn anonymous_client_config(ca_pem: &str) -> Result<Arc<ClientConfig>, TlsError> {
    let mut config = ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(TlsError::rustls("restricting to TLS 1.3"))?
        .with_root_certificates(roots_from_pem(ca_pem)?)
        .with_no_client_auth();
    config.alpn_protocols = vec![ALPN_H2.to_vec()];
    Ok(Arc::new(config))
}

/// The enrolment client (`pxagent join`): no client certificate; the server's chain must contain a CA
/// certificate whose SHA-256 equals `ca_fingerprint`, and the server certificate must verify against that CA
/// (signature, validity, server name). A man in the middle cannot produce such a chain without the CA key.
pub fn pinned_client_config(ca_fingerprint: &str) -> Result<Arc<ClientConfig>, TlsError> {
    let provider = provider();
    let verifier = Arc::new(PinnedServerVerifier {
        fingerprint: normalize_fingerprint(ca_fingerprint)?,
        algorithms: provider.signature_verification_algorithms,
        provider: provider.clone(),
    });
    let mut config = ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(TlsError::rustls("restricting to TLS 1.3"))?
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_no_client_auth();
    config.alpn_protocols = vec![ALPN_H2.to_vec()];
    Ok(Arc::new(config))
}

/// webpki chain verification against our CA, then: a `pxfleet://` identity must be present and the serial
/// must not be revoked. No certificate at all is allowed (the service layer then only allows Enroll).
#[derive(Debug)]
struct PxfleetClientVerifier {
    inner: Arc<dyn ClientCertVerifier>,
    revocation: Arc<dyn RevocationCheck>,
}

impl ClientCertVerifier for PxfleetClientVerifier {
    fn offer_client_auth(&self) -> bool {
        true
    }

    fn client_auth_mandatory(&self) -> bool {
        false
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.inner.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        if let Err(e) = self
            .inner
            .verify_client_cert(end_entity, intermediates, now)
        {
            tracing::warn!(error = %e, "client certificate refused: not valid for our CA");
            return Err(e);
        }
        let info = CertInfo::from_der(end_entity).map_err(|e| {
            tracing::warn!(error = %e, "client certificate refused: unreadable identity");
            rustls::Error::InvalidCertificate(CertificateError::ApplicationVerificationFailure)
        })?;
        let Some(identity) = info.identity else {
            tracing::warn!(serial = %info.serial, "client certificate refused: no pxfleet:// identity");
            return Err(rustls::Error::InvalidCertificate(
                CertificateError::ApplicationVerificationFailure,
            ));
        };
        if self.revocation.is_revoked(&info.serial) {
            tracing::warn!(serial = %info.serial, %identity, "client certificate refused: revoked");
            return Err(rustls::Error::InvalidCertificate(CertificateError::Revoked));
        }
        tracing::debug!(serial = %info.serial, %identity, "client certificate accepted");
        Ok(ClientCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

#[derive(Debug)]
struct PinnedServerVerifier {
    fingerprint: String,
    algorithms: WebPkiSupportedAlgorithms,
    provider: Arc<CryptoProvider>,
}

impl ServerCertVerifier for PinnedServerVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let Some(ca) = intermediates
            .iter()
            .find(|c| fingerprint_sha256(c) == self.fingerprint)
        else {
            tracing::warn!(pinned = %self.fingerprint, "server refused: no CA with the pinned fingerprint in its chain");
            return Err(rustls::Error::InvalidCertificate(
                CertificateError::UnknownIssuer,
            ));
        };
        let mut roots = RootCertStore::empty();
        roots.add(ca.clone().into_owned())?;
        let verifier =
            WebPkiServerVerifier::builder_with_provider(Arc::new(roots), self.provider.clone())
                .build()
                .map_err(|e| rustls::Error::General(format!("pinned CA unusable: {e}")))?;
        verifier.verify_server_cert(end_entity, &[], server_name, ocsp_response, now)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

/// The client certificate a [`renewable_client_config`] presents; [`ClientCertSlot::set`] swaps it for the
/// next handshakes (a renewed node certificate) without rebuilding the configuration or its users.
#[derive(Debug)]
pub struct ClientCertSlot {
    current: RwLock<Arc<rustls::sign::CertifiedKey>>,
}

impl ClientCertSlot {
    fn certified(bundle: &Bundle) -> Result<Arc<rustls::sign::CertifiedKey>, TlsError> {
        let chain = vec![cert_der_from_pem(&bundle.cert_pem, "client certificate")?];
        let key = key_from_pem(&bundle.key_pem, "client key")?;
        rustls::sign::CertifiedKey::from_der(chain, key, &provider())
            .map(Arc::new)
            .map_err(TlsError::rustls("loading the client certificate and key"))
    }

    /// Presents `bundle`'s certificate and key from the next handshake on (the CA is not changed).
    pub fn set(&self, bundle: &Bundle) -> Result<(), TlsError> {
        let certified = ClientCertSlot::certified(bundle)?;
        *self.current.write().unwrap_or_else(|p| p.into_inner()) = certified;
        Ok(())
    }
}

impl rustls::client::ResolvesClientCert for ClientCertSlot {
    fn resolve(
        &self,
        _root_hint_subjects: &[&[u8]],
        _sigschemes: &[SignatureScheme],
    ) -> Option<Arc<rustls::sign::CertifiedKey>> {
        Some(
            self.current
                .read()
                .unwrap_or_else(|p| p.into_inner())
                .clone(),
        )
    }

    fn has_certs(&self) -> bool {
        true
    }
}

/// Like [`client_config`], but the certificate can be replaced later through the returned slot (a running
/// agent renews its node certificate this way).
pub fn renewable_client_config(
    client: &Bundle,
) -> Result<(Arc<ClientConfig>, Arc<ClientCertSlot>), TlsError> {
    let slot = Arc::new(ClientCertSlot {
        current: RwLock::new(ClientCertSlot::certified(client)?),
    });
    let mut config = ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(TlsError::rustls("restricting to TLS 1.3"))?
        .with_root_certificates(roots_from_pem(&client.ca_pem)?)
        .with_client_cert_resolver(slot.clone());
    config.alpn_protocols = vec![ALPN_H2.to_vec()];
    Ok((Arc::new(config), slot))
}
