//! A fleet's secrets (container name -> root password), sealed at rest with the store's key ([`crate::seal`]).

use std::collections::BTreeMap;

use super::{dec, enc, key2, Store, StoreError};

impl Store {
    /// The associated data a fleet's sealed secrets are bound to.
    pub(super) fn secrets_aad(fleet: &str) -> Vec<u8> {
        key2("secrets", fleet)
    }

    pub(super) fn seal_secrets(
        &self,
        fleet: &str,
        secrets: &BTreeMap<String, String>,
    ) -> Result<Vec<u8>, StoreError> {
        let key = self.seal.as_ref().ok_or(crate::seal::SealError::NoKey)?;
        Ok(key.seal(&Self::secrets_aad(fleet), &enc(secrets))?)
    }

    pub(super) fn open_secrets(
        &self,
        fleet: &str,
        value: &[u8],
    ) -> Result<BTreeMap<String, String>, StoreError> {
        if !crate::seal::is_sealed(value) {
            // stored in clear before sealing; open_sealed seals these at once
            return dec("secrets", fleet.as_bytes(), value);
        }
        let key = self.seal.as_ref().ok_or(crate::seal::SealError::NoKey)?;
        let plain = key.open(
            &Self::secrets_aad(fleet),
            value,
            &format!("the secrets of fleet {fleet}"),
        )?;
        dec("secrets", fleet.as_bytes(), &plain)
    }

    /// Seals every value of the secrets tree that is still in clear; returns how many it sealed.
    pub fn seal_clear_secrets(&self) -> Result<usize, StoreError> {
        let mut n = 0;
        for r in self.secrets.iter() {
            let (k, v) = r?;
            if crate::seal::is_sealed(&v) {
                continue;
            }
            let fleet = String::from_utf8_lossy(&k).into_owned();
            let clear: BTreeMap<String, String> = dec("secrets", &k, &v)?;
            let sealed = self.seal_secrets(&fleet, &clear)?;
            // a concurrent writer (none at open) would win; the next open seals its value
            if self
                .secrets
                .compare_and_swap(&k, Some(&v), Some(sealed))?
                .is_ok()
            {
                n += 1;
            }
        }
        Ok(n)
    }

    /// The raw (sealed) bytes of a fleet's secrets, for tests and audits of the at-rest format.
    pub fn raw_secrets(&self, fleet: &str) -> Result<Option<Vec<u8>>, StoreError> {
        Ok(self.secrets.get(fleet.as_bytes())?.map(|v| v.to_vec()))
    }

    /// A fleet's secrets (container name -> root password), unsealed.
    pub fn secrets(&self, fleet: &str) -> Result<BTreeMap<String, String>, StoreError> {
        match self.secrets.get(fleet.as_bytes())? {
            Some(v) => self.open_secrets(fleet, &v),
            None => Ok(BTreeMap::new()),
        }
    }
}
