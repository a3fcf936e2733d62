//! Operations: one record per unit of work for a node, read in creation order, pruned by age once finished.

use std::sync::Arc;

use super::{enc, Store, StoreError};
use crate::model::{Millis, Operation};

impl Store {
    /// Stores `op`; the cache of decoded operations learns it at once, so the pass or read that follows does not
    /// decode it again (10,000 operations written by one pass took a second to decode).
    pub fn put_op(&self, op: &Operation) -> Result<(), StoreError> {
        let bytes = sled::IVec::from(enc(op));
        self.operations.insert(op.id.as_bytes(), bytes.clone())?;
        self.ops_cache
            .remember(op.id.as_bytes(), bytes, Arc::new(op.clone()));
        Ok(())
    }

    pub fn op(&self, id: &str) -> Result<Option<Operation>, StoreError> {
        self.ops_cache
            .get(&self.operations, "operations", id.as_bytes())
    }

    pub fn ops(&self) -> Result<Vec<Operation>, StoreError> {
        Ok(self
            .ops_shared()?
            .into_iter()
            .map(|o| (*o).clone())
            .collect())
    }

    /// Every operation in creation order, shared with the store's cache.
    pub fn ops_shared(&self) -> Result<Vec<Arc<Operation>>, StoreError> {
        let mut ops = self.ops_cache.scan(&self.operations, "operations", b"")?;
        ops.sort_by(|a, b| {
            a.created_ms
                .cmp(&b.created_ms)
                .then_with(|| a.id.cmp(&b.id))
        });
        Ok(ops)
    }

    /// Drops finished operations older than `before`, keeping history bounded.
    pub fn prune_ops(&self, before: Millis) -> Result<usize, StoreError> {
        let mut n = 0;
        for op in self.ops()? {
            if !op.state.is_active() && op.finished_ms.is_some_and(|f| f < before) {
                self.operations.remove(op.id.as_bytes())?;
                n += 1;
            }
        }
        Ok(n)
    }
}
