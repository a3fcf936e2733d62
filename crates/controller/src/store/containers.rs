//! What was last applied to each container, and what each node reports it has (observed containers).

use std::sync::Arc;

use super::{enc, key2, prefix, Store, StoreError};
use crate::model::{AppliedContainer, ObservedContainer};

impl Store {
    pub fn applied(&self, fleet: &str, name: &str) -> Result<Option<AppliedContainer>, StoreError> {
        self.applied_cache
            .get(&self.applied, "applied", &key2(fleet, name))
    }

    pub fn all_applied(&self) -> Result<Vec<AppliedContainer>, StoreError> {
        self.applied_cache.scan_owned(&self.applied, "applied", b"")
    }

    /// Every applied container, shared with the store's cache.
    pub fn all_applied_shared(&self) -> Result<Vec<Arc<AppliedContainer>>, StoreError> {
        self.applied_cache.scan(&self.applied, "applied", b"")
    }

    pub fn put_applied(&self, a: &AppliedContainer) -> Result<(), StoreError> {
        self.applied.insert(key2(&a.fleet, &a.name), enc(a))?;
        Ok(())
    }

    pub fn remove_applied(&self, fleet: &str, name: &str) -> Result<(), StoreError> {
        self.applied.remove(key2(fleet, name))?;
        Ok(())
    }

    /// Replaces everything observed on a node with a full report (the hello, or a full resync).
    pub fn replace_observed(
        &self,
        node: &str,
        containers: &[ObservedContainer],
    ) -> Result<(), StoreError> {
        let mut batch = sled::Batch::default();
        for r in self.observed.scan_prefix(prefix(node)).keys() {
            batch.remove(r?);
        }
        for c in containers {
            batch.insert(key2(node, &format!("{:010}", c.vm_id)), enc(c));
        }
        self.observed.apply_batch(batch)?;
        Ok(())
    }

    /// Updates one observed container (a delta), or removes it when `container` is None.
    pub fn set_observed(
        &self,
        node: &str,
        vm_id: u32,
        container: Option<&ObservedContainer>,
    ) -> Result<(), StoreError> {
        let key = key2(node, &format!("{vm_id:010}"));
        match container {
            Some(c) => self.observed.insert(key, enc(c))?,
            None => self.observed.remove(key)?,
        };
        Ok(())
    }

    pub fn all_observed(&self) -> Result<Vec<ObservedContainer>, StoreError> {
        self.observed_cache
            .scan_owned(&self.observed, "observed", b"")
    }

    /// Everything observed on every node, shared with the store's cache.
    pub fn all_observed_shared(&self) -> Result<Vec<Arc<ObservedContainer>>, StoreError> {
        self.observed_cache.scan(&self.observed, "observed", b"")
    }
}
