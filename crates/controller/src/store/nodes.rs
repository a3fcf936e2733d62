//! Node records: inventory, liveness, cordon, seeded templates and template digests.

use super::{dec, enc, Store, StoreError};
use crate::model::NodeRecord;

impl Store {
    pub fn node(&self, name: &str) -> Result<Option<NodeRecord>, StoreError> {
        self.nodes_cache.get(&self.nodes, "nodes", name.as_bytes())
    }

    pub fn nodes(&self) -> Result<Vec<NodeRecord>, StoreError> {
        self.nodes_cache.scan_owned(&self.nodes, "nodes", b"")
    }

    /// Read-modify-write of one node record (created from default when absent). Returns the new record.
    pub fn update_node(
        &self,
        name: &str,
        f: impl Fn(&mut NodeRecord),
    ) -> Result<NodeRecord, StoreError> {
        let mut out = None;
        let mut err = None;
        self.nodes.fetch_and_update(name.as_bytes(), |old| {
            let mut rec: NodeRecord = match old.map(|v| dec("nodes", name.as_bytes(), v)) {
                Some(Ok(r)) => r,
                Some(Err(e)) => {
                    err = Some(e);
                    return old.map(|v| v.to_vec());
                }
                None => NodeRecord {
                    name: name.to_string(),
                    ..NodeRecord::default()
                },
            };
            f(&mut rec);
            let bytes = enc(&rec);
            out = Some(rec);
            Some(bytes)
        })?;
        if let Some(e) = err {
            return Err(e);
        }
        Ok(out.expect("update closure ran"))
    }
}
