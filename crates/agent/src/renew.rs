//! The node certificate renews itself: when a third of its lifetime is left, the agent makes a new key and
//! CSR and asks the controller (AgentService.Renew) over its current, still valid certificate: no token. The
//! new certificate and key are written over the old files (key 0600) and presented from the next handshake
//! on. A node offline past its certificate's expiry cannot renew (the controller refuses an expired
//! certificate); it needs a new join token, and [`log_refusal`] says so.

use std::sync::Arc;
use std::time::Duration;

use pxfleet_common::Clock;
use pxfleet_proto::v1;
use pxfleet_tls::{Audience, Bundle, BundlePaths, CertInfo, ClientCertSlot, TlsError};
use time::OffsetDateTime;

use crate::config::AgentConfig;

/// Logs a refused handshake with its reason and the fix (for the agent of `node`); other errors are left to
/// the caller's log.
pub fn log_refusal(e: &TlsError, node: &str) {
    if let TlsError::Handshake { url, refusal } = e {
        let fix = refusal.fix(&Audience::Agent {
            node: node.to_string(),
        });
        tracing::error!(
            controller = %url,
            "connecting to the controller: {refusal}. To fix: {fix}"
        );
    }
}

/// When to renew a certificate valid from `not_before` to `not_after`: when a third of its lifetime is left
/// (the lifetime without the backdating the CA adds for clock skew).
pub fn renew_at(not_before: OffsetDateTime, not_after: OffsetDateTime) -> OffsetDateTime {
    let backdate = time::Duration::try_from(pxfleet_tls::BACKDATE).unwrap_or(time::Duration::ZERO);
    let mut lifetime = not_after - not_before;
    if lifetime > backdate {
        lifetime -= backdate;
    }
    not_after - lifetime / 3
}

#[derive(Debug, thiserror::Error)]
pub enum RenewError {
    #[error("{0}")]
    Tls(#[from] TlsError),
    #[error("the controller refused the renewal: {}", .0.message())]
    Refused(Box<tonic::Status>),
    #[error("the controller answered with a CA other than ours ({0}); not installing it")]
    OtherCa(String),
}

/// Renews once: new key and CSR, Renew over the current certificate, files written, slot updated. Returns the
/// new bundle.
pub async fn renew_once(
    config: &AgentConfig,
    tls: Arc<rustls::ClientConfig>,
    slot: &ClientCertSlot,
    current: &Bundle,
) -> Result<Bundle, RenewError> {
    let key = pxfleet_tls::generate_key_and_csr(&config.node)?;
    let channel = pxfleet_tls::connect(&config.controller, tls).await?;
    let resp = v1::agent_service_client::AgentServiceClient::new(channel)
        .renew(v1::RenewRequest {
            csr_pem: key.csr_pem.clone(),
        })
        .await
        .map_err(|s| RenewError::Refused(Box::new(s)))?
        .into_inner();
    // The CA that signed the new certificate must be one we already trust (during a CA rotation ca.pem holds
    // the old and the new CA; the renewed certificate then comes from the new one).
    let theirs = pxfleet_tls::fingerprint_of_pem(&resp.ca_pem)?;
    if !trusted_fingerprints(&current.ca_pem).contains(&theirs) {
        return Err(RenewError::OtherCa(theirs));
    }
    let bundle = Bundle {
        ca_pem: current.ca_pem.clone(),
        cert_pem: resp.cert_pem,
        key_pem: key.key_pem,
    };
    bundle.write(&BundlePaths {
        ca: config.ca.clone(),
        cert: config.cert.clone(),
        key: config.key.clone(),
    })?;
    slot.set(&bundle)?;
    Ok(bundle)
}

/// SHA-256 fingerprints of every certificate in a ca.pem.
fn trusted_fingerprints(ca_pem: &str) -> Vec<String> {
    use rustls::pki_types::pem::PemObject;
    rustls::pki_types::CertificateDer::pem_slice_iter(ca_pem.as_bytes())
        .filter_map(Result::ok)
        .map(|der| pxfleet_tls::fingerprint_sha256(&der))
        .collect()
}

/// `pxagent renew`: renews now (before a CA rotation's end, or to test the path), with the agent's files.
pub async fn renew_now(config: &AgentConfig) -> Result<CertInfo, RenewError> {
    let bundle = Bundle::read(&BundlePaths {
        ca: config.ca.clone(),
        cert: config.cert.clone(),
        key: config.key.clone(),
    })?;
    let (tls, slot) = pxfleet_tls::renewable_client_config(&bundle)?;
    let renewed = renew_once(config, tls, &slot, &bundle).await?;
    Ok(CertInfo::from_pem(&renewed.cert_pem)?)
}

/// Runs until dropped: sleeps until [`renew_at`] of the current certificate, renews, repeats. Failures are
/// logged and retried (every 30 s at most, sooner when the end is near). "Now" is `clock`'s.
pub async fn keep_renewed(
    config: AgentConfig,
    tls: Arc<rustls::ClientConfig>,
    slot: Arc<ClientCertSlot>,
    mut current: Bundle,
    clock: Clock,
) {
    loop {
        let info = match CertInfo::from_pem(&current.cert_pem) {
            Ok(i) => i,
            Err(e) => {
                tracing::error!(error = %e, "cannot read the node certificate; not renewing it");
                return;
            }
        };
        let now = OffsetDateTime::from(clock.system_time());
        let at = renew_at(info.not_before, info.not_after);
        if at > now {
            let wait = Duration::try_from(at - now).unwrap_or(Duration::ZERO);
            tracing::debug!(serial = %info.serial, wait_s = wait.as_secs(), "node certificate renewal scheduled");
            tokio::time::sleep(wait).await;
        }
        match renew_once(&config, tls.clone(), &slot, &current).await {
            Ok(bundle) => {
                if let Ok(new) = CertInfo::from_pem(&bundle.cert_pem) {
                    tracing::info!(
                        old = %info.serial,
                        serial = %new.serial,
                        not_after = %new.not_after,
                        "node certificate renewed"
                    );
                }
                current = bundle;
                // Never renew in a tight loop, whatever the lifetime.
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            Err(e) => {
                if let RenewError::Tls(t) = &e {
                    log_refusal(t, &config.node);
                }
                let left =
                    Duration::try_from(info.not_after - OffsetDateTime::from(clock.system_time()))
                        .unwrap_or(Duration::ZERO);
                let retry = (left / 10).clamp(Duration::from_secs(1), Duration::from_secs(30));
                tracing::warn!(
                    error = %e,
                    not_after = %info.not_after,
                    retry_s = retry.as_secs(),
                    "renewing the node certificate failed; retrying"
                );
                tokio::time::sleep(retry).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renewal_starts_when_a_third_of_the_lifetime_is_left() {
        let issued = OffsetDateTime::from_unix_timestamp(1_000_000).unwrap();
        let backdate = time::Duration::try_from(pxfleet_tls::BACKDATE).unwrap();
        let year = time::Duration::days(365);
        let at = renew_at(issued - backdate, issued + year);
        assert_eq!(at, issued + year - year / 3);
        let at = renew_at(issued - backdate, issued + time::Duration::seconds(30));
        assert_eq!(at, issued + time::Duration::seconds(20));
    }
}
