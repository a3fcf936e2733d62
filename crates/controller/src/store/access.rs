//! The audit log, join tokens (single use, expiring) and the certificates the CA issued.

use super::{abort, enc, tx_dec, unwrap_tx, SerialRecord, Store, StoreError, TokenRecord};
use crate::model::{AuditEntry, Millis};

impl Store {
    pub fn audit(&self, entry: &AuditEntry) -> Result<(), StoreError> {
        let id = self.db.generate_id()?;
        self.audit.insert(id.to_be_bytes(), enc(entry))?;
        Ok(())
    }

    pub fn audit_log(&self) -> Result<Vec<AuditEntry>, StoreError> {
        Self::scan(&self.audit, "audit", b"")
    }

    pub fn put_token(&self, t: &TokenRecord) -> Result<(), StoreError> {
        self.tokens.insert(t.id.as_bytes(), enc(t))?;
        Ok(())
    }

    /// The token record `id`, if any (to explain a refusal; [`Store::consume_token`] decides).
    pub fn token(&self, id: &str) -> Result<Option<TokenRecord>, StoreError> {
        Self::get(&self.tokens, "tokens", id.as_bytes())
    }

    /// Marks token `id` used, atomically; refused if unknown, used, expired, or `accept` says no (wrong secret
    /// or node).
    pub fn consume_token(
        &self,
        id: &str,
        now: Millis,
        accept: impl Fn(&TokenRecord) -> bool,
    ) -> Result<TokenRecord, StoreError> {
        let r = self.tokens.transaction(|t| {
            let Some(v) = t.get(id.as_bytes())? else {
                return abort(StoreError::TokenRefused);
            };
            let mut rec: TokenRecord = tx_dec("tokens", id.as_bytes(), &v)?;
            if rec.used_ms.is_some() || now >= rec.expires_ms || !accept(&rec) {
                return abort(StoreError::TokenRefused);
            }
            rec.used_ms = Some(now);
            t.insert(id.as_bytes(), enc(&rec))?;
            Ok(rec)
        });
        unwrap_tx(r)
    }

    pub fn put_serial(&self, s: &SerialRecord) -> Result<(), StoreError> {
        self.serials.insert(s.serial.as_bytes(), enc(s))?;
        Ok(())
    }

    /// The record of the certificate with serial `serial` (lower-case hex), if this controller issued it.
    pub fn serial(&self, serial: &str) -> Result<Option<SerialRecord>, StoreError> {
        Self::get(&self.serials, "serials", serial.as_bytes())
    }

    pub fn serials(&self) -> Result<Vec<SerialRecord>, StoreError> {
        Self::scan(&self.serials, "serials", b"")
    }
}
