//! Admin calls on the controller's CA: join tokens for new nodes, user certificates signed from a CSR, and
//! revocation. Each is recorded in the audit log and flushed (tokens, revocations) before it is answered.
//! The gRPC handlers in [`crate::grpc::fleet_service`] only authorise and convert; the certificate list and the
//! words for refusals live in [`crate::identities`].

use std::time::Duration;

use pxfleet_tls::{Identity, JoinToken, Role, Serial};

use crate::error::{Error, Result};
use crate::model::{AuditEntry, Millis};
use crate::state::State;
use crate::store::{SerialRecord, TokenRecord};

/// A new join token; `token` is the secret, shown once.
#[derive(Debug, Clone)]
pub struct IssuedToken {
    pub token: String,
    pub token_id: String,
    pub expires_ms: Millis,
    pub ca_fingerprint: String,
}

/// A user certificate signed from the caller's CSR.
#[derive(Debug, Clone)]
pub struct UserCert {
    pub cert_pem: String,
    pub ca_pem: String,
    pub serial: String,
    pub not_after_ms: i64,
    pub identity: String,
}

/// The audit log's actor: the caller's identity URI (empty without one).
pub(crate) fn actor(id: Option<&Identity>) -> String {
    id.map(|i| i.uri()).unwrap_or_default()
}

/// A join token for `node` (any node when empty), valid `ttl_secs` (the configured default when 0).
pub async fn create_join_token(
    state: &State,
    by: Option<&Identity>,
    node: &str,
    ttl_secs: u64,
) -> Result<IssuedToken> {
    let fp = state.ca.fingerprint_sha256();
    let token = JoinToken::generate(&fp).map_err(|e| Error::Internal(e.to_string()))?;
    let ttl = if ttl_secs == 0 {
        state.config.join_token_ttl_secs
    } else {
        ttl_secs
    };
    let now = state.now_ms();
    let rec = TokenRecord {
        id: token.id.clone(),
        hash: token.secret_hash(),
        node: node.to_string(),
        created_by: actor(by),
        created_ms: now,
        expires_ms: now + ttl * 1000,
        used_ms: None,
    };
    state.store.put_token(&rec)?;
    state.store.audit(&AuditEntry {
        time_ms: now,
        actor: rec.created_by.clone(),
        action: "create_join_token".into(),
        target: if node.is_empty() {
            "any node".into()
        } else {
            node.to_string()
        },
        detail: format!("token {} valid {ttl} s", token.id),
    })?;
    state.store.flush().await?;
    Ok(IssuedToken {
        token: token.reveal(),
        token_id: token.id,
        expires_ms: rec.expires_ms,
        ca_fingerprint: fp,
    })
}

/// Signs `csr_pem` for the user `name` with `role`, limited to `fleets` (all when empty), valid
/// `validity_days` (the default client validity when 0).
pub fn issue_user_certificate(
    state: &State,
    by: Option<&Identity>,
    name: &str,
    role: Role,
    fleets: &[String],
    csr_pem: &str,
    validity_days: u32,
) -> Result<UserCert> {
    let fleets: Vec<&str> = fleets.iter().map(String::as_str).collect();
    let identity =
        Identity::user(name, role, &fleets).map_err(|e| Error::InvalidArgument(e.to_string()))?;
    let validity = if validity_days == 0 {
        pxfleet_tls::DEFAULT_CLIENT_VALIDITY
    } else {
        Duration::from_secs(validity_days as u64 * 86400)
    };
    let cert = state
        .ca
        .sign_csr(csr_pem, &identity, validity)
        .map_err(|e| Error::InvalidArgument(e.to_string()))?;
    state.store.put_serial(&crate::identities::serial_record(
        &cert,
        &identity,
        state.now_ms(),
    ))?;
    state.store.audit(&AuditEntry {
        time_ms: state.now_ms(),
        actor: actor(by),
        action: "issue_user_certificate".into(),
        target: identity.uri(),
        detail: format!("serial {}", cert.serial.as_str()),
    })?;
    Ok(UserCert {
        cert_pem: cert.cert_pem,
        ca_pem: state.ca.cert_pem().to_string(),
        serial: cert.serial.as_str().to_string(),
        not_after_ms: cert.not_after.unix_timestamp() * 1000,
        identity: identity.uri(),
    })
}

/// Revokes the certificate with serial `serial` (hex), known or not: the handshake refuses it from now on.
pub async fn revoke_certificate(
    state: &State,
    by: Option<&Identity>,
    serial: &str,
    reason: String,
) -> Result<()> {
    let serial = Serial::from_hex(serial).map_err(|e| Error::InvalidArgument(e.to_string()))?;
    let mut rec = state
        .store
        .serials()?
        .into_iter()
        .find(|s| s.serial == serial.as_str())
        .unwrap_or(SerialRecord {
            serial: serial.as_str().to_string(),
            subject: String::new(),
            issued_ms: 0,
            revoked: false,
            not_after_ms: 0,
        });
    rec.revoked = true;
    state.store.put_serial(&rec)?;
    state.revocations.revoke(serial);
    // Cut off what is already connected with it: an agent's stream ends now (its reconnection is refused at
    // the handshake); every later call of a user on an open connection is refused by the per-call check, and
    // a Watch stream ends at its next revocation check.
    for node in state.sessions.close_serial(&rec.serial) {
        tracing::warn!(%node, serial = %rec.serial, "certificate revoked: the node's agent stream is closed");
    }
    state.store.audit(&AuditEntry {
        time_ms: state.now_ms(),
        actor: actor(by),
        action: "revoke_certificate".into(),
        target: rec.serial.clone(),
        detail: reason,
    })?;
    state.store.flush().await?;
    Ok(())
}

/// Every certificate this controller issued, oldest first.
pub fn certificates(state: &State) -> Result<Vec<SerialRecord>> {
    let mut serials = state.store.serials()?;
    serials.sort_by(|a, b| (a.issued_ms, &a.serial).cmp(&(b.issued_ms, &b.serial)));
    Ok(serials)
}
