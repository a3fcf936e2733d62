//! The sled database: one tree per kind of state (fleets, revisions, desired, applied, observed, nodes,
//! operations, secrets, audit, tokens, serials, allocations). Values are JSON. A submit is one multi-tree transaction, so it
//! lands whole or not at all; per-fleet values (desired containers, secrets) are single keys so the transaction
//! never needs to scan.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use serde::de::DeserializeOwned;
use serde::Serialize;
use sled::transaction::{
    ConflictableTransactionError, TransactionError, Transactional, TransactionalTree,
};

use crate::model::{
    Allocation, AppliedContainer, AuditEntry, DesiredContainer, FleetRecord, Millis, NodeRecord,
    ObservedContainer, Operation, Revision,
};
use crate::store_cache::{Decoded, SharedList};

/// Store errors, with the tree and key where one is at fault.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("database error: {0}")]
    Sled(#[from] sled::Error),
    #[error("corrupt value in tree {tree} at key {key:?}: {source}")]
    Corrupt {
        tree: &'static str,
        key: String,
        #[source]
        source: serde_json::Error,
    },
    #[error(
        "fleet {fleet}: the plan was computed on revision {expected} but the fleet is now at revision {actual}; \
         plan again"
    )]
    RevisionMoved {
        fleet: String,
        expected: u64,
        actual: u64,
    },
    #[error("fleet {fleet}: {message}")]
    Invalid { fleet: String, message: String },
    #[error("join token is unknown, already used or expired")]
    TokenRefused,
    #[error(transparent)]
    Flush(#[from] pxfleet_common::FlushError),
    #[error(transparent)]
    Seal(#[from] crate::seal::SealError),
    /// A write failed on the disk earlier (see [`crate::store_status`]): sled cannot continue its log after
    /// that, so later writes are refused until a restart.
    #[error("an earlier write failed on the disk ({first}); sled cannot continue its log after a failed write: restart the controller once the data dir is writable")]
    DiskFailed { first: String },
}

/// A stored join token (only its hash is kept).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TokenRecord {
    /// The token id (its public part).
    pub id: String,
    /// SHA-256 of the token secret.
    pub hash: String,
    /// The node name the token is limited to; empty = any node.
    pub node: String,
    pub created_by: String,
    pub created_ms: Millis,
    pub expires_ms: Millis,
    pub used_ms: Option<Millis>,
}

/// A certificate the CA issued.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SerialRecord {
    pub serial: String,
    pub subject: String,
    pub issued_ms: Millis,
    pub revoked: bool,
    /// When the certificate expires (0 = not recorded: issued before this was kept).
    #[serde(default)]
    pub not_after_ms: Millis,
}

/// Everything one submit (or destroy) writes, atomically.
#[derive(Debug, Clone)]
pub struct SubmitTx {
    pub fleet: String,
    /// The revision the plan was computed on (0 = the fleet must not exist yet); None = don't check.
    pub expected_revision: Option<u64>,
    pub author: String,
    pub time_ms: Millis,
    pub spec: serde_json::Value,
    pub summary: String,
    /// The fleet's complete desired containers after this submit; `revision` fields are filled in by the store
    /// for containers that changed.
    pub desired: Vec<DesiredContainer>,
    /// The fleet's complete secrets after this submit (container name -> root password).
    pub secrets: BTreeMap<String, String>,
    pub audit_action: String,
    /// The submitted file's name and the SHA-256 (hex) of its text; empty for a destroy.
    pub file_name: String,
    pub source_sha256: String,
    /// Containers to retry: their `revision` moves to this submit's even when unchanged, so operations that
    /// failed for good start again from the first attempt.
    pub retry: Vec<String>,
}

#[derive(Clone)]
pub struct Store {
    db: sled::Db,
    fleets: sled::Tree,
    revisions: sled::Tree,
    desired: sled::Tree,
    applied: sled::Tree,
    observed: sled::Tree,
    nodes: sled::Tree,
    operations: sled::Tree,
    secrets: sled::Tree,
    audit: sled::Tree,
    tokens: sled::Tree,
    serials: sled::Tree,
    allocations: sled::Tree,
    /// Decoded values of the trees every reconcile pass reads whole.
    desired_cache: Decoded<SharedList<DesiredContainer>>,
    applied_cache: Decoded<AppliedContainer>,
    observed_cache: Decoded<ObservedContainer>,
    nodes_cache: Decoded<NodeRecord>,
    ops_cache: Decoded<Operation>,
    /// Group commit for [`Store::flush`] (sled's `flush_async` deadlocks when called concurrently).
    flusher: pxfleet_common::Flusher,
    /// The key the `secrets` tree is sealed with ([`crate::seal`]); None for a store opened only to read or
    /// write other trees (init, dev-mode tokens, benchmarks), which then cannot touch secrets.
    seal: Option<std::sync::Arc<crate::seal::SealKey>>,
    /// Set by the first write that failed on the disk; later writes are refused (store_status.rs).
    disk_failed: crate::store_status::DiskFailure,
}

fn enc<T: Serialize>(v: &T) -> Vec<u8> {
    serde_json::to_vec(v).expect("domain types serialize")
}

pub(crate) fn dec<T: DeserializeOwned>(
    tree: &'static str,
    key: &[u8],
    v: &[u8],
) -> Result<T, StoreError> {
    serde_json::from_slice(v).map_err(|source| StoreError::Corrupt {
        tree,
        key: String::from_utf8_lossy(key).into_owned(),
        source,
    })
}

fn key2(a: &str, b: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(a.len() + b.len() + 1);
    k.extend_from_slice(a.as_bytes());
    k.push(0);
    k.extend_from_slice(b.as_bytes());
    k
}

fn prefix(a: &str) -> Vec<u8> {
    let mut k = a.as_bytes().to_vec();
    k.push(0);
    k
}

fn revision_key(fleet: &str, rev: u64) -> Vec<u8> {
    let mut k = prefix(fleet);
    k.extend_from_slice(&rev.to_be_bytes());
    k
}

/// Aborts a transaction with a store error.
fn abort<T>(e: StoreError) -> Result<T, ConflictableTransactionError<StoreError>> {
    Err(ConflictableTransactionError::Abort(e))
}

fn tx_dec<T: DeserializeOwned>(
    tree: &'static str,
    key: &[u8],
    v: &[u8],
) -> Result<T, ConflictableTransactionError<StoreError>> {
    dec(tree, key, v).map_err(ConflictableTransactionError::Abort)
}

fn unwrap_tx<T>(r: Result<T, TransactionError<StoreError>>) -> Result<T, StoreError> {
    r.map_err(|e| match e {
        TransactionError::Abort(e) => e,
        TransactionError::Storage(e) => StoreError::Sled(e),
    })
}

impl Store {
    /// Opens (or creates) the database in `path`.
    /// Opens (or creates) the database in `path` without a seal key: everything but the secrets.
    pub fn open(path: &Path) -> Result<Store, StoreError> {
        Store::from_db(sled::open(path)?)
    }

    /// Opens (or creates) the database in `path` with the seal key in `key_file` (created on first use when
    /// the store holds nothing sealed yet), and seals any secrets still stored in clear (a store from before
    /// sealing). Refuses a missing or foreign key when the store holds sealed values.
    pub fn open_sealed(path: &Path, key_file: &Path) -> Result<Store, StoreError> {
        let mut store = Store::open(path)?;
        let mut store_id = None;
        for r in store.secrets.iter() {
            let (_, v) = r?;
            if let Some(id) = crate::seal::sealed_key_id(&v) {
                store_id = Some(id);
                break;
            }
        }
        let key = crate::seal::SealKey::load_or_create(key_file, store_id.as_deref())?;
        store.seal = Some(std::sync::Arc::new(key));
        let n = store.seal_clear_secrets()?;
        if n > 0 {
            store.db.flush()?;
            tracing::info!(
                fleets = n,
                "sealed secrets that were stored in clear (a store from before sealing)"
            );
        }
        Ok(store)
    }

    /// A throw-away in-memory-ish database for tests (sealed with a random key).
    pub fn temporary() -> Result<Store, StoreError> {
        let mut s = Store::from_db(sled::Config::new().temporary(true).open()?)?;
        s.seal = Some(std::sync::Arc::new(crate::seal::SealKey::generate()?));
        Ok(s)
    }

    /// The associated data a fleet's sealed secrets are bound to.
    fn secrets_aad(fleet: &str) -> Vec<u8> {
        key2("secrets", fleet)
    }

    fn seal_secrets(
        &self,
        fleet: &str,
        secrets: &BTreeMap<String, String>,
    ) -> Result<Vec<u8>, StoreError> {
        let key = self.seal.as_ref().ok_or(crate::seal::SealError::NoKey)?;
        Ok(key.seal(&Self::secrets_aad(fleet), &enc(secrets))?)
    }

    fn open_secrets(
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

    /// The underlying database, for a backup's snapshot of every tree ([`crate::backup`]).
    pub fn sled_db(&self) -> &sled::Db {
        &self.db
    }

    fn from_db(db: sled::Db) -> Result<Store, StoreError> {
        Ok(Store {
            fleets: db.open_tree("fleets")?,
            revisions: db.open_tree("revisions")?,
            desired: db.open_tree("desired")?,
            applied: db.open_tree("applied")?,
            observed: db.open_tree("observed")?,
            nodes: db.open_tree("nodes")?,
            operations: db.open_tree("operations")?,
            secrets: db.open_tree("secrets")?,
            audit: db.open_tree("audit")?,
            tokens: db.open_tree("tokens")?,
            serials: db.open_tree("serials")?,
            allocations: db.open_tree("allocations")?,
            desired_cache: Decoded::default(),
            applied_cache: Decoded::default(),
            observed_cache: Decoded::default(),
            nodes_cache: Decoded::default(),
            ops_cache: Decoded::default(),
            flusher: pxfleet_common::Flusher::new(db.clone(), "store"),
            disk_failed: Default::default(),
            db,
            seal: None,
        })
    }

    /// Flushes to disk; called after every state change a user waits on.
    pub async fn flush(&self) -> Result<(), StoreError> {
        self.disk_failed.check()?;
        let r = self.flusher.flush().await.map_err(StoreError::from);
        self.disk_failed.note(r)
    }

    fn scan<T: DeserializeOwned>(
        tree: &sled::Tree,
        name: &'static str,
        pfx: &[u8],
    ) -> Result<Vec<T>, StoreError> {
        tree.scan_prefix(pfx)
            .map(|r| {
                let (k, v) = r?;
                dec(name, &k, &v)
            })
            .collect()
    }

    fn get<T: DeserializeOwned>(
        tree: &sled::Tree,
        name: &'static str,
        key: &[u8],
    ) -> Result<Option<T>, StoreError> {
        match tree.get(key)? {
            Some(v) => Ok(Some(dec(name, key, &v)?)),
            None => Ok(None),
        }
    }

    // --- fleets, revisions, desired, secrets ---

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

    pub fn desired(&self, fleet: &str) -> Result<Vec<DesiredContainer>, StoreError> {
        Ok(self
            .desired_cache
            .get(&self.desired, "desired", fleet.as_bytes())?
            .map(|l| l.0.iter().map(|d| (**d).clone()).collect())
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

    /// Every applied container, shared with the store's cache.
    pub fn all_applied_shared(&self) -> Result<Vec<Arc<AppliedContainer>>, StoreError> {
        self.applied_cache.scan(&self.applied, "applied", b"")
    }

    /// Everything observed on every node, shared with the store's cache.
    pub fn all_observed_shared(&self) -> Result<Vec<Arc<ObservedContainer>>, StoreError> {
        self.observed_cache.scan(&self.observed, "observed", b"")
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

    /// A fleet's secrets (container name -> root password), unsealed.
    pub fn secrets(&self, fleet: &str) -> Result<BTreeMap<String, String>, StoreError> {
        match self.secrets.get(fleet.as_bytes())? {
            Some(v) => self.open_secrets(fleet, &v),
            None => Ok(BTreeMap::new()),
        }
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
    fn allocate_in(
        tx: &SubmitTx,
        allocations: &TransactionalTree,
    ) -> Result<(), ConflictableTransactionError<StoreError>> {
        for d in &tx.desired {
            let key = key2(&d.fleet, &d.name);
            let mut a: Allocation = match allocations.get(&key)? {
                Some(v) => tx_dec("allocations", &key, &v)?,
                None => Allocation {
                    fleet: d.fleet.clone(),
                    name: d.name.clone(),
                    ..Allocation::default()
                },
            };
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

    fn submit_in(
        &self,
        tx: &SubmitTx,
        fleets: &TransactionalTree,
        revisions: &TransactionalTree,
        desired: &TransactionalTree,
        audit: &TransactionalTree,
    ) -> Result<u64, ConflictableTransactionError<StoreError>> {
        let key = tx.fleet.as_bytes();
        let head: Option<FleetRecord> = match fleets.get(key)? {
            Some(v) => Some(tx_dec("fleets", key, &v)?),
            None => None,
        };
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
        let old: Vec<DesiredContainer> = match desired.get(key)? {
            Some(v) => tx_dec("desired", key, &v)?,
            None => Vec::new(),
        };
        let new: Vec<DesiredContainer> = tx
            .desired
            .iter()
            .map(|d| {
                let mut d = d.clone();
                d.revision = match old.iter().find(|o| o.name == d.name) {
                    Some(o)
                        if !tx.retry.contains(&d.name)
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
            enc(&Revision {
                fleet: tx.fleet.clone(),
                revision,
                author: tx.author.clone(),
                created_ms: tx.time_ms,
                spec: tx.spec.clone(),
                summary: tx.summary.clone(),
                file_name: tx.file_name.clone(),
                source_sha256: tx.source_sha256.clone(),
            }),
        )?;
        fleets.insert(
            key,
            enc(&FleetRecord {
                name: tx.fleet.clone(),
                revision,
                author: tx.author.clone(),
                updated_ms: tx.time_ms,
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
        let r = self.desired.transaction(|t| {
            let Some(v) = t.get(fleet.as_bytes())? else {
                return Ok(false);
            };
            let mut all: Vec<DesiredContainer> = tx_dec("desired", fleet.as_bytes(), &v)?;
            let Some(d) = all.iter_mut().find(|d| d.name == name) else {
                return Ok(false);
            };
            d.node = node.to_string();
            d.container.node = Some(node.to_string());
            if let Some(ds) = datastore_id {
                d.container.datastore_id = Some(ds.to_string());
            }
            t.insert(fleet.as_bytes(), enc(&all))?;
            Ok(true)
        });
        unwrap_tx(r)
    }

    /// `pxctl node drain`: the desired node of `fleet`/`name` becomes `node`, held there (`node_pinned`) until the
    /// next submit places it again, so the reconciler migrates it instead of taking it for moved by hand.
    pub fn move_desired(&self, fleet: &str, name: &str, node: &str) -> Result<bool, StoreError> {
        let r = self.desired.transaction(|t| {
            let Some(v) = t.get(fleet.as_bytes())? else {
                return Ok(false);
            };
            let mut all: Vec<DesiredContainer> = tx_dec("desired", fleet.as_bytes(), &v)?;
            let Some(d) = all.iter_mut().find(|d| d.name == name) else {
                return Ok(false);
            };
            d.node = node.to_string();
            d.container.node = Some(node.to_string());
            d.node_pinned = true;
            t.insert(fleet.as_bytes(), enc(&all))?;
            Ok(true)
        });
        unwrap_tx(r)
    }

    // --- applied ---

    pub fn applied(&self, fleet: &str, name: &str) -> Result<Option<AppliedContainer>, StoreError> {
        self.applied_cache
            .get(&self.applied, "applied", &key2(fleet, name))
    }

    pub fn all_applied(&self) -> Result<Vec<AppliedContainer>, StoreError> {
        self.applied_cache.scan_owned(&self.applied, "applied", b"")
    }

    pub fn put_applied(&self, a: &AppliedContainer) -> Result<(), StoreError> {
        self.applied.insert(key2(&a.fleet, &a.name), enc(a))?;
        Ok(())
    }

    pub fn remove_applied(&self, fleet: &str, name: &str) -> Result<(), StoreError> {
        self.applied.remove(key2(fleet, name))?;
        Ok(())
    }

    // --- observed ---

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

    // --- nodes ---

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

    // --- operations ---

    pub fn put_op(&self, op: &Operation) -> Result<(), StoreError> {
        self.operations.insert(op.id.as_bytes(), enc(op))?;
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

    // --- audit ---

    pub fn audit(&self, entry: &AuditEntry) -> Result<(), StoreError> {
        let id = self.db.generate_id()?;
        self.audit.insert(id.to_be_bytes(), enc(entry))?;
        Ok(())
    }

    pub fn audit_log(&self) -> Result<Vec<AuditEntry>, StoreError> {
        Self::scan(&self.audit, "audit", b"")
    }

    // --- PKI ---

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

    pub fn serials(&self) -> Result<Vec<SerialRecord>, StoreError> {
        Self::scan(&self.serials, "serials", b"")
    }

    /// The tree of hook results ([`crate::hooks`] owns its keys and values).
    pub fn hooks_tree(&self) -> Result<sled::Tree, StoreError> {
        Ok(self.db.open_tree("hooks")?)
    }

    /// Every run of a hook, by start time (crate::hook_runs).
    pub fn hook_runs_tree(&self) -> Result<sled::Tree, StoreError> {
        Ok(self.db.open_tree("hook_runs")?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dc(fleet: &str, name: &str, vm_id: u32) -> DesiredContainer {
        DesiredContainer {
            fleet: fleet.into(),
            name: name.into(),
            node: "n1".into(),
            vm_id,
            container: crate::testutil::container(name),
            template: crate::testutil::template(),
            revision: 0,
            node_pinned: true,
        }
    }

    fn tx(fleet: &str, expected: Option<u64>, desired: Vec<DesiredContainer>) -> SubmitTx {
        SubmitTx {
            fleet: fleet.into(),
            expected_revision: expected,
            author: "user/alice".into(),
            time_ms: 1,
            spec: serde_json::json!({"fleet": fleet}),
            summary: "test".into(),
            desired,
            secrets: [("a".to_string(), "pw".to_string())].into(),
            audit_action: "submit".into(),
            file_name: "fleet.yaml".into(),
            source_sha256: "ab".repeat(32),
            retry: Vec::new(),
        }
    }

    #[test]
    fn submit_writes_everything_and_numbers_revisions() {
        let s = Store::temporary().unwrap();
        assert_eq!(
            s.submit(&tx("dev", Some(0), vec![dc("dev", "a", 1000)]))
                .unwrap(),
            1
        );
        assert_eq!(
            s.submit(&tx(
                "dev",
                Some(1),
                vec![dc("dev", "a", 1000), dc("dev", "b", 1001)]
            ))
            .unwrap(),
            2
        );
        assert_eq!(s.fleet("dev").unwrap().unwrap().revision, 2);
        let revs = s.revisions("dev").unwrap();
        assert_eq!(
            revs.iter().map(|r| r.revision).collect::<Vec<_>>(),
            vec![1, 2]
        );
        assert_eq!(revs[0].author, "user/alice");
        let d = s.desired("dev").unwrap();
        // a is unchanged since revision 1, b was added in 2
        assert_eq!(
            d.iter()
                .map(|d| (d.name.as_str(), d.revision))
                .collect::<Vec<_>>(),
            vec![("a", 1), ("b", 2)]
        );
        assert_eq!(s.secrets("dev").unwrap()["a"], "pw");
        assert_eq!(s.audit_log().unwrap().len(), 2);
    }

    #[test]
    fn moved_revision_is_refused_and_writes_nothing() {
        let s = Store::temporary().unwrap();
        s.submit(&tx("dev", Some(0), vec![dc("dev", "a", 1000)]))
            .unwrap();
        let err = s
            .submit(&tx("dev", Some(0), vec![dc("dev", "z", 1005)]))
            .unwrap_err();
        assert!(
            matches!(
                err,
                StoreError::RevisionMoved {
                    expected: 0,
                    actual: 1,
                    ..
                }
            ),
            "{err}"
        );
        assert_eq!(s.fleet("dev").unwrap().unwrap().revision, 1);
        assert_eq!(s.desired("dev").unwrap()[0].name, "a");
        assert_eq!(s.desired("dev").unwrap().len(), 1);
        assert_eq!(s.revisions("dev").unwrap().len(), 1);
        assert_eq!(s.audit_log().unwrap().len(), 1);
    }

    #[test]
    fn failing_submit_leaves_nothing() {
        let s = Store::temporary().unwrap();
        let err = s
            .submit(&tx(
                "dev",
                Some(0),
                vec![dc("dev", "a", 1000), dc("dev", "b", 1000)],
            ))
            .unwrap_err();
        assert!(err.to_string().contains("share vm_id 1000"), "{err}");
        assert!(s.fleet("dev").unwrap().is_none());
        assert!(s.desired("dev").unwrap().is_empty());
        assert!(s.secrets("dev").unwrap().is_empty());
        assert!(s.revisions("dev").unwrap().is_empty());
        assert!(s.audit_log().unwrap().is_empty());
    }

    #[test]
    fn fleets_with_prefix_names_do_not_mix() {
        let s = Store::temporary().unwrap();
        s.submit(&tx("dev", None, vec![dc("dev", "a", 1000)]))
            .unwrap();
        s.submit(&tx("dev2", None, vec![dc("dev2", "a", 1001)]))
            .unwrap();
        assert_eq!(s.revisions("dev").unwrap().len(), 1);
        assert_eq!(s.all_desired().unwrap().len(), 2);
    }

    #[test]
    fn observed_replace_and_delta() {
        let s = Store::temporary().unwrap();
        let c = |vm_id| ObservedContainer {
            node: "n1".into(),
            vm_id,
            ..ObservedContainer::default()
        };
        s.replace_observed("n1", &[c(100), c(101)]).unwrap();
        s.replace_observed(
            "n10",
            &[ObservedContainer {
                node: "n10".into(),
                vm_id: 7,
                ..Default::default()
            }],
        )
        .unwrap();
        s.replace_observed("n1", &[c(102)]).unwrap();
        let mut ids: Vec<u32> = s.all_observed().unwrap().iter().map(|c| c.vm_id).collect();
        ids.sort();
        assert_eq!(ids, vec![7, 102]);
        s.set_observed("n1", 102, None).unwrap();
        s.set_observed("n1", 103, Some(&c(103))).unwrap();
        let mut ids: Vec<u32> = s.all_observed().unwrap().iter().map(|c| c.vm_id).collect();
        ids.sort();
        assert_eq!(ids, vec![7, 103]);
    }

    #[test]
    fn token_is_single_use_and_expires() {
        let s = Store::temporary().unwrap();
        let t = |id: &str, expires_ms| TokenRecord {
            id: id.into(),
            hash: format!("hash-{id}"),
            node: "n1".into(),
            created_by: "user/admin".into(),
            created_ms: 0,
            expires_ms,
            used_ms: None,
        };
        s.put_token(&t("h1", 100)).unwrap();
        s.put_token(&t("h2", 100)).unwrap();
        let yes = |_: &TokenRecord| true;
        // a wrong secret does not use the token up
        let wrong = s.consume_token("h1", 50, |t| t.hash == "x");
        assert!(matches!(wrong, Err(StoreError::TokenRefused)));
        assert_eq!(s.consume_token("h1", 50, yes).unwrap().node, "n1");
        let again = s.consume_token("h1", 51, yes);
        assert!(matches!(again, Err(StoreError::TokenRefused)));
        let expired = s.consume_token("h2", 100, yes);
        assert!(matches!(expired, Err(StoreError::TokenRefused)));
        let unknown = s.consume_token("nope", 1, yes);
        assert!(matches!(unknown, Err(StoreError::TokenRefused)));
    }

    #[test]
    fn secrets_are_sealed_in_the_tree_and_clear_ones_are_sealed_on_open() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("db");
        let key = dir.path().join("etc/seal.key");
        // a store from before sealing: the secrets tree holds clear JSON
        {
            let old = Store::open(&db).unwrap();
            old.secrets
                .insert(
                    "old",
                    enc(&BTreeMap::from([(
                        "a".to_string(),
                        "clear-pw-1".to_string(),
                    )])),
                )
                .unwrap();
            old.db.flush().unwrap();
        }
        let s = Store::open_sealed(&db, &key).unwrap();
        let raw = s.raw_secrets("old").unwrap().unwrap();
        assert!(crate::seal::is_sealed(&raw));
        assert!(!raw.windows(10).any(|w| w == b"clear-pw-1"));
        assert_eq!(s.secrets("old").unwrap()["a"], "clear-pw-1");
        s.submit(&tx("dev", Some(0), vec![dc("dev", "a", 1000)]))
            .unwrap();
        let raw = s.raw_secrets("dev").unwrap().unwrap();
        assert!(crate::seal::is_sealed(&raw));
        assert!(!raw.windows(2).any(|w| w == b"pw"));
        assert_eq!(s.secrets("dev").unwrap()["a"], "pw");
        // a sealed value copied under another fleet's key does not open
        s.secrets.insert("other", raw.as_slice()).unwrap();
        let err = s.secrets("other").unwrap_err().to_string();
        assert!(err.contains("tampered"), "{err}");
        s.secrets.remove("other").unwrap();
        drop(s);
        // the store without its key: a clear error, not garbage
        std::fs::rename(&key, dir.path().join("moved.key")).unwrap();
        let err = loop {
            match Store::open_sealed(&db, &key) {
                // sled's own threads may hold the file a moment after the last handle is dropped
                Err(StoreError::Sled(_)) => {
                    std::thread::sleep(std::time::Duration::from_millis(20))
                }
                Err(e) => break e.to_string(),
                Ok(_) => panic!("opened without its seal key"),
            }
        };
        assert!(
            err.contains("is missing") && err.contains("seal.key"),
            "{err}"
        );
        assert!(!key.exists());
    }

    #[test]
    fn node_update_creates_and_modifies() {
        let s = Store::temporary().unwrap();
        s.update_node("n1", |n| n.cordoned = true).unwrap();
        let n = s.update_node("n1", |n| n.last_seen_ms = 5).unwrap();
        assert!(n.cordoned);
        assert_eq!(n.last_seen_ms, 5);
        assert_eq!(s.nodes().unwrap().len(), 1);
    }
}
