//! Node records: inventory, liveness, cordon, seeded templates and template digests.
//!
//! Liveness (the last heartbeat or message, the last operation update) is kept in memory ([`Liveness`]) and
//! written to the record only every [`LIVENESS_PERSIST_MS`] or with something else that changed (free memory,
//! an inventory): at 1,000 nodes a sled read-modify-write of the node record per heartbeat was 200 writes a second
//! of an idle controller. Every read of a record ([`Store::node`], [`Store::nodes`]) returns the newer of the
//! stored and the in-memory times, so no reader sees the difference.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use super::{dec, enc, Store, StoreError};
use crate::model::{Millis, NodeRecord};

/// How often a node that only heartbeats has its record written (for a controller restart's first view).
pub const LIVENESS_PERSIST_MS: Millis = 30_000;

#[derive(Debug, Clone, Copy, Default)]
struct Live {
    seen_ms: Millis,
    op_update_ms: Millis,
    /// When the record last got these times written.
    persisted_ms: Millis,
    /// The free memory last written to the record by [`Store::touch_node`].
    memory_free_mib: Option<u64>,
}

/// The in-memory liveness of every node, shared by the clones of a store.
#[derive(Clone, Default)]
pub(crate) struct Liveness(Arc<Mutex<HashMap<String, Live>>>);

impl Liveness {
    fn get(&self, name: &str) -> Option<Live> {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(name)
            .copied()
    }

    fn overlay(&self, rec: &mut NodeRecord) {
        if let Some(l) = self.get(&rec.name) {
            rec.last_seen_ms = rec.last_seen_ms.max(l.seen_ms);
            rec.last_op_update_ms = rec.last_op_update_ms.max(l.op_update_ms);
        }
    }
}

impl Store {
    pub fn node(&self, name: &str) -> Result<Option<NodeRecord>, StoreError> {
        let mut rec = self
            .nodes_cache
            .get(&self.nodes, "nodes", name.as_bytes())?;
        if let Some(r) = rec.as_mut() {
            self.liveness.overlay(r);
        }
        Ok(rec)
    }

    pub fn nodes(&self) -> Result<Vec<NodeRecord>, StoreError> {
        let mut all = self.nodes_cache.scan_owned(&self.nodes, "nodes", b"")?;
        for r in &mut all {
            self.liveness.overlay(r);
        }
        Ok(all)
    }

    /// A heartbeat or message from `name` at `now` (`op_update`: an operation update), reporting
    /// `memory_free_mib` when known. Kept in memory; the record is written when the free memory changed or
    /// [`LIVENESS_PERSIST_MS`] went by since it was last written, or when there is no record yet.
    pub fn touch_node(
        &self,
        name: &str,
        now: Millis,
        op_update: bool,
        memory_free_mib: Option<u64>,
    ) -> Result<(), StoreError> {
        let write = {
            let mut map = self.liveness.0.lock().unwrap_or_else(|p| p.into_inner());
            let l = map.entry(name.to_string()).or_default();
            l.seen_ms = l.seen_ms.max(now);
            if op_update {
                l.op_update_ms = l.op_update_ms.max(now);
            }
            let memory_moved = memory_free_mib.is_some_and(|m| l.memory_free_mib != Some(m));
            if memory_moved || l.persisted_ms == 0 || now >= l.persisted_ms + LIVENESS_PERSIST_MS {
                l.persisted_ms = now.max(1);
                if memory_free_mib.is_some() {
                    l.memory_free_mib = memory_free_mib;
                }
                true
            } else {
                false
            }
        };
        if write {
            self.update_node(name, |n| {
                if let Some(m) = memory_free_mib {
                    n.inventory.memory_free_mib = m;
                }
            })?;
        }
        Ok(())
    }

    /// Forgets what [`Store::touch_node`] last wrote for `name` (its inventory was replaced), so the next
    /// heartbeat writes its free memory again.
    pub fn forget_written_memory(&self, name: &str) {
        if let Some(l) = self
            .liveness
            .0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get_mut(name)
        {
            l.memory_free_mib = None;
        }
    }

    /// Read-modify-write of one node record (created from default when absent). Returns the new record. The
    /// record is written with the in-memory liveness folded in; what `f` leaves in the liveness fields is then
    /// what readers see.
    pub fn update_node(
        &self,
        name: &str,
        f: impl Fn(&mut NodeRecord),
    ) -> Result<NodeRecord, StoreError> {
        let live = self.liveness.get(name);
        let mut out = None;
        let mut err = None;
        let mut set_by_f = false;
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
            if let Some(l) = live {
                rec.last_seen_ms = rec.last_seen_ms.max(l.seen_ms);
                rec.last_op_update_ms = rec.last_op_update_ms.max(l.op_update_ms);
            }
            let merged = (rec.last_seen_ms, rec.last_op_update_ms);
            f(&mut rec);
            set_by_f = merged != (rec.last_seen_ms, rec.last_op_update_ms);
            let bytes = enc(&rec);
            out = Some(rec);
            Some(bytes)
        })?;
        if let Some(e) = err {
            return Err(e);
        }
        let rec = out.expect("update closure ran");
        if !set_by_f {
            return Ok(rec);
        }
        if let Some(l) = self
            .liveness
            .0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get_mut(name)
        {
            l.seen_ms = rec.last_seen_ms;
            l.op_update_ms = rec.last_op_update_ms;
        }
        Ok(rec)
    }
}
