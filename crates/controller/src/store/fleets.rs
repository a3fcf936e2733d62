//! Fleets, their revisions and desired containers: the one-transaction submit (with secrets, audit and
//! allocations), allocations kept across destroy, and the desired node following an adopted or drained
//! container.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use sled::transaction::{ConflictableTransactionError, Transactional, TransactionalTree};

use super::{
    abort, enc, key2, prefix, revision_key, tx_get, unwrap_tx, Store, StoreError, SubmitTx,
};
use crate::model::{Allocation, AuditEntry, DesiredContainer, FleetRecord, Revision};

/// A [`Revision`] as it is written, borrowing the spec: a 10,000-container spec is not copied to be encoded
/// (the same fields, so it reads back as a `Revision`).
#[derive(serde::Serialize)]
struct RevisionOut<'a> {
    fleet: &'a str,
    revision: u64,
    author: &'a str,
    created_ms: crate::model::Millis,
    spec: &'a serde_json::value::RawValue,
    summary: &'a str,
    file_name: &'a str,
    source_sha256: &'a str,
}

impl Store {
    pub fn fleet(&self, name: &str) -> Result<Option<FleetRecord>, StoreError> {
        Self::get(&self.fleets, "fleets", name.as_bytes())
    }

    pub fn fleets(&self) -> Result<Vec<FleetRecord>, StoreError> {
        Self::scan(&self.fleets, "fleets", b"")
    }

    pub fn revisions(&self, fleet: &str) -> Result<Vec<Revision>, StoreError> {
        Self::scan(&self.revisions, "revisions", &prefix(fleet))
    }

    pub fn revision(&self, fleet: &str, rev: u64) -> Result<Option<Revision>, StoreError> {
        Self::get(&self.revisions, "revisions", &revision_key(fleet, rev))
    }

    /// Part of a revision: the fields `T` names, the others skipped without being decoded (a revision's spec
    /// holds every container).
    pub fn revision_part<T: serde::de::DeserializeOwned>(
        &self,
        fleet: &str,
        rev: u64,
    ) -> Result<Option<T>, StoreError> {
        Self::get(&self.revisions, "revisions", &revision_key(fleet, rev))
    }

    pub fn desired(&self, fleet: &str) -> Result<Vec<DesiredContainer>, StoreError> {
        Ok(self
            .desired_cache
            .get(&self.desired, "desired", fleet.as_bytes())?
            .map(|l| l.0.iter().map(|d| (**d).clone()).collect())
            .unwrap_or_default())
    }

    /// The vm_ids of `fleet`'s desired containers, read from the cache without copying the containers.
    pub fn desired_vm_ids(
        &self,
        fleet: &str,
    ) -> Result<std::collections::BTreeSet<u32>, StoreError> {
        Ok(self
            .desired_cache
            .get(&self.desired, "desired", fleet.as_bytes())?
            .map(|l| l.0.iter().map(|d| d.vm_id).collect())
            .unwrap_or_default())
    }

    pub fn all_desired(&self) -> Result<Vec<DesiredContainer>, StoreError> {
        Ok(self
            .all_desired_shared()?
            .into_iter()
            .map(|d| (*d).clone())
            .collect())
    }

    /// Every fleet's desired containers, shared with the store's cache (a reconcile pass reads them all).
    pub fn all_desired_shared(&self) -> Result<Vec<Arc<DesiredContainer>>, StoreError> {
        let per_fleet = self.desired_cache.scan(&self.desired, "desired", b"")?;
        Ok(per_fleet.iter().flat_map(|f| f.0.iter().cloned()).collect())
    }

    /// Applies a submit in one transaction over fleets, revisions, desired, secrets and audit. Returns the new
    /// revision. Refused, with nothing written, if the fleet's revision moved or the batch is inconsistent.
    pub fn submit(&self, tx: &SubmitTx) -> Result<u64, StoreError> {
        self.disk_failed.check()?;
        let sealed_secrets = if tx.secrets.is_empty() {
            None
        } else {
            Some(self.seal_secrets(&tx.fleet, &tx.secrets)?)
        };
        let r = (
            &self.fleets,
            &self.revisions,
            &self.desired,
            &self.secrets,
            &self.audit,
            &self.allocations,
        )
            .transaction(
                |(fleets, revisions, desired, secrets, audit, allocations)| {
                    let revision = self.submit_in(tx, fleets, revisions, desired, audit)?;
                    let key = tx.fleet.as_bytes();
                    match &sealed_secrets {
                        None => secrets.remove(key)?,
                        Some(v) => secrets.insert(key, v.as_slice())?,
                    };
                    Self::allocate_in(tx, allocations)?;
                    Ok(revision)
                },
            );
        self.disk_failed.note(unwrap_tx(r))
    }

    /// Every container name's allocation (vm_id, MACs), of every fleet; kept across destroy.
    pub fn allocations(&self) -> Result<Vec<Allocation>, StoreError> {
        Self::scan(&self.allocations, "allocations", b"")
    }

    /// Records, for each desired container of the submit, its vm_id and interface MACs as its allocation.
    /// Entries are only added or updated, never removed: a destroyed container keeps them for its recreation.
    pub(super) fn allocate_in(
        tx: &SubmitTx,
        allocations: &TransactionalTree,
    ) -> Result<(), ConflictableTransactionError<StoreError>> {
        for d in &tx.desired {
            let key = key2(&d.fleet, &d.name);
            let mut a: Allocation =
                tx_get(allocations, "allocations", &key)?.unwrap_or_else(|| Allocation {
                    fleet: d.fleet.clone(),
                    name: d.name.clone(),
                    ..Allocation::default()
                });
            let before = a.clone();
            a.vm_id = Some(d.vm_id);
            for (i, iface) in d.container.interfaces.iter().enumerate() {
                if let Some(mac) = iface.mac_address {
                    a.macs.insert(i, mac);
                }
            }
            if a != before {
                allocations.insert(key, enc(&a))?;
            }
        }
        Ok(())
    }

    pub(super) fn submit_in(
        &self,
        tx: &SubmitTx,
        fleets: &TransactionalTree,
        revisions: &TransactionalTree,
        desired: &TransactionalTree,
        audit: &TransactionalTree,
    ) -> Result<u64, ConflictableTransactionError<StoreError>> {
        let key = tx.fleet.as_bytes();
        let head: Option<FleetRecord> = tx_get(fleets, "fleets", key)?;
        let current = head.as_ref().map(|h| h.revision).unwrap_or(0);
        if let Some(expected) = tx.expected_revision {
            if expected != current {
                return abort(StoreError::RevisionMoved {
                    fleet: tx.fleet.clone(),
                    expected,
                    actual: current,
                });
            }
        }
        // Defensive consistency check: the planner and scheduler guarantee this, the store refuses anyway.
        let mut seen = BTreeMap::new();
        for d in &tx.desired {
            if d.fleet != tx.fleet {
                return abort(StoreError::Invalid {
                    fleet: tx.fleet.clone(),
                    message: format!("container {} belongs to fleet {}", d.name, d.fleet),
                });
            }
            if let Some(other) = seen.insert(d.vm_id, &d.name) {
                return abort(StoreError::Invalid {
                    fleet: tx.fleet.clone(),
                    message: format!("containers {other} and {} share vm_id {}", d.name, d.vm_id),
                });
            }
        }
        let revision = current + 1;
        let old: Vec<DesiredContainer> = tx_get(desired, "desired", key)?.unwrap_or_default();
        let mut old_by_name: HashMap<&str, &DesiredContainer> = HashMap::new();
        for o in &old {
            old_by_name.entry(o.name.as_str()).or_insert(o);
        }
        let retry: HashSet<&str> = tx.retry.iter().map(String::as_str).collect();
        let new: Vec<DesiredContainer> = tx
            .desired
            .iter()
            .map(|d| {
                let mut d = d.clone();
                d.revision = match old_by_name.get(d.name.as_str()) {
                    Some(o)
                        if !retry.contains(d.name.as_str())
                            && o.node == d.node
                            && o.vm_id == d.vm_id
                            && o.container == d.container
                            && o.template == d.template =>
                    {
                        o.revision
                    }
                    _ => revision,
                };
                d
            })
            .collect();
        if new.is_empty() {
            desired.remove(key)?;
        } else {
            desired.insert(key, enc(&new))?;
        }
        revisions.insert(
            revision_key(&tx.fleet, revision),
            enc(&RevisionOut {
                fleet: &tx.fleet,
                revision,
                author: &tx.author,
                created_ms: tx.time_ms,
                spec: &tx.spec,
                summary: &tx.summary,
                file_name: &tx.file_name,
                source_sha256: &tx.source_sha256,
            }),
        )?;
        fleets.insert(
            key,
            enc(&FleetRecord {
                name: tx.fleet.clone(),
                revision,
                author: tx.author.clone(),
                updated_ms: tx.time_ms,
                has_hooks: has_hooks(tx, head.as_ref()),
            }),
        )?;
        let id = audit.generate_id()?;
        audit.insert(
            &id.to_be_bytes(),
            enc(&AuditEntry {
                time_ms: tx.time_ms,
                actor: tx.author.clone(),
                action: tx.audit_action.clone(),
                target: tx.fleet.clone(),
                detail: format!("revision {revision}: {}", tx.summary),
            }),
        )?;
        Ok(revision)
    }

    /// Records that container `name` of `fleet` now lives on `node` (with its root disk on `datastore_id`,
    /// when known): a container the file does not pin, moved by hand, adopted where it is. False when the fleet
    /// has no such container (any more).
    pub fn adopt_desired(
        &self,
        fleet: &str,
        name: &str,
        node: &str,
        datastore_id: Option<&str>,
    ) -> Result<bool, StoreError> {
        self.update_desired(fleet, name, |d| {
            d.node = node.to_string();
            d.container.node = Some(node.to_string());
            if let Some(ds) = datastore_id {
                d.container.datastore_id = Some(ds.to_string());
            }
        })
    }

    /// `pxctl node drain`: the desired node of `fleet`/`name` becomes `node`, held there (`node_pinned`) until the
    /// next submit places it again, so the reconciler migrates it instead of taking it for moved by hand.
    pub fn move_desired(&self, fleet: &str, name: &str, node: &str) -> Result<bool, StoreError> {
        self.update_desired(fleet, name, |d| {
            d.node = node.to_string();
            d.container.node = Some(node.to_string());
            d.node_pinned = true;
        })
    }

    /// Changes desired container `name` of `fleet` with `change`, in one transaction; false when the fleet has
    /// no such container.
    fn update_desired(
        &self,
        fleet: &str,
        name: &str,
        change: impl Fn(&mut DesiredContainer),
    ) -> Result<bool, StoreError> {
        let key = fleet.as_bytes();
        let r = self.desired.transaction(|t| {
            let Some(mut all) = tx_get::<Vec<DesiredContainer>>(t, "desired", key)? else {
                return Ok(false);
            };
            let Some(d) = all.iter_mut().find(|d| d.name == name) else {
                return Ok(false);
            };
            change(d);
            t.insert(key, enc(&all))?;
            Ok(true)
        });
        unwrap_tx(r)
    }
}

/// Whether a spec's `hooks` is present and not null, read without building the rest of the spec.
pub(super) fn spec_has_hooks(spec: &serde_json::value::RawValue) -> bool {
    #[derive(serde::Deserialize)]
    struct Hooks {
        #[serde(default)]
        hooks: Option<serde::de::IgnoredAny>,
    }
    serde_json::from_str::<Hooks>(spec.get()).is_ok_and(|h| h.hooks.is_some())
}

/// Whether the fleet has hooks once `tx` is stored on `head`, by the rule the hook worker reads revisions with
/// (`crate::hooks`): a spec that names hooks has them (the normalised spec writes `hooks` only when there are
/// some); one submitted from a file without them has none; a revision the controller made itself (power,
/// destroy) without them keeps what the revision before had. Unknown (`None`) when that is unknown.
fn has_hooks(tx: &SubmitTx, head: Option<&FleetRecord>) -> Option<bool> {
    if spec_has_hooks(&tx.spec) {
        Some(true)
    } else if !tx.file_name.is_empty() {
        Some(false)
    } else {
        match head {
            None => Some(false),
            Some(h) => h.has_hooks,
        }
    }
}
