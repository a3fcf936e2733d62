//! Rego policies an admin installed (`pxctl policy add`), evaluated on every submit, destroy, start, stop and
//! restart ([`crate::policy`]): one key per policy name.

use super::{enc, Store, StoreError};
use crate::model::Millis;

/// An installed policy.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct AdminPolicy {
    pub name: String,
    /// The Rego module's text.
    pub source: String,
    /// The admin's identity URI.
    pub installed_by: String,
    pub installed_ms: Millis,
}

impl AdminPolicy {
    /// SHA-256 (hex) of its source, as `pxctl policy list` and the audit log show it.
    pub fn sha256(&self) -> String {
        use sha2::Digest;
        hex::encode(sha2::Sha256::digest(self.source.as_bytes()))
    }
}

impl Store {
    /// Installs `p`, replacing a policy of the same name.
    pub fn put_policy(&self, p: &AdminPolicy) -> Result<(), StoreError> {
        self.policies.insert(p.name.as_bytes(), enc(p))?;
        Ok(())
    }

    /// Every installed policy, by name.
    pub fn policies(&self) -> Result<Vec<AdminPolicy>, StoreError> {
        Self::scan(&self.policies, "policies", b"")
    }

    /// Removes policy `name`; returns it, `None` when there is none.
    pub fn remove_policy(&self, name: &str) -> Result<Option<AdminPolicy>, StoreError> {
        match self.policies.remove(name.as_bytes())? {
            Some(v) => Ok(Some(super::dec("policies", name.as_bytes(), &v)?)),
            None => Ok(None),
        }
    }
}
