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

    /// Replaces everything observed on a node with a full report (the hello, or a full resync). Returns whether
    /// anything changed (an unchanged report writes nothing).
    pub fn replace_observed(
        &self,
        node: &str,
        containers: &[ObservedContainer],
    ) -> Result<bool, StoreError> {
        let mut old = std::collections::BTreeMap::new();
        for r in self.observed.scan_prefix(prefix(node)) {
            let (k, v) = r?;
            old.insert(k, v);
        }
        let new: std::collections::BTreeMap<sled::IVec, Vec<u8>> = containers
            .iter()
            .map(|c| (key2(node, &format!("{:010}", c.vm_id)).into(), enc(c)))
            .collect();
        if old.len() == new.len()
            && old
                .iter()
                .zip(&new)
                .all(|((ok, ov), (nk, nv))| ok == nk && ov.as_ref() == nv.as_slice())
        {
            return Ok(false);
        }
        let mut batch = sled::Batch::default();
        for k in old.keys() {
            if !new.contains_key(k) {
                batch.remove(k.clone());
            }
        }
        for (k, v) in new {
            if old.get(&k).is_none_or(|o| o.as_ref() != v.as_slice()) {
                batch.insert(k, v);
            }
        }
        self.observed.apply_batch(batch)?;
        Ok(true)
    }

    /// Updates one observed container (a delta), or removes it when `container` is None. Returns whether
    /// anything changed.
    pub fn set_observed(
        &self,
        node: &str,
        vm_id: u32,
        container: Option<&ObservedContainer>,
    ) -> Result<bool, StoreError> {
        let key = key2(node, &format!("{vm_id:010}"));
        Ok(match container {
            Some(c) => {
                let v = enc(c);
                if self
                    .observed
                    .get(&key)?
                    .is_some_and(|o| o.as_ref() == v.as_slice())
                {
                    false
                } else {
                    self.observed.insert(key, v)?;
                    true
                }
            }
            None => self.observed.remove(key)?.is_some(),
        })
    }

    /// What `node` reports for `vm_id`, if anything: a point read (the hot paths of a result must not scan
    /// every observed container: at 10,000 containers that made each result cost a full scan).
    pub fn observed(
        &self,
        node: &str,
        vm_id: u32,
    ) -> Result<Option<ObservedContainer>, StoreError> {
        self.observed_cache.get(
            &self.observed,
            "observed",
            &key2(node, &format!("{vm_id:010}")),
        )
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
