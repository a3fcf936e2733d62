//! The sled database: one tree per kind of state (fleets, revisions, desired, applied, observed, nodes,
//! operations, secrets, audit, tokens, serials, allocations, grants, policies). Values are JSON. A submit is one multi-tree transaction, so it
//! lands whole or not at all; per-fleet values (desired containers, secrets) are single keys so the transaction
//! never needs to scan.

use std::collections::BTreeMap;
use std::path::Path;

use serde::de::DeserializeOwned;
use serde::Serialize;
use sled::transaction::{ConflictableTransactionError, TransactionError, TransactionalTree};

use crate::model::{
    AppliedContainer, DesiredContainer, Millis, NodeRecord, ObservedContainer, Operation,
};
use crate::store::cache::{Decoded, SharedList};

mod access;
pub(crate) mod cache;
mod containers;
mod fleets;
mod grants;
mod policies;
pub mod status;
pub use policies::AdminPolicy;
mod nodes;
mod operations;
mod secrets;

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
    /// A write failed on the disk earlier (see [`crate::store::status`]): sled cannot continue its log after
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

/// A revision's normalised spec as JSON text, serialized once from the fleet and stored as it is. A
/// `serde_json::Value` tree of a 10,000-container fleet took 64 MiB at the submit's peak (heaptrack,
/// docs/performance.md); the text is one allocation the size of the stored value.
pub type SpecJson = Box<serde_json::value::RawValue>;

/// `v` as a revision's spec (JSON text).
pub fn spec_json<T: Serialize + ?Sized>(v: &T) -> Result<SpecJson, serde_json::Error> {
    serde_json::value::to_raw_value(v)
}

/// Everything one submit (or destroy) writes, atomically.
#[derive(Debug, Clone)]
pub struct SubmitTx {
    pub fleet: String,
    /// The revision the plan was computed on (0 = the fleet must not exist yet); None = don't check.
    pub expected_revision: Option<u64>,
    pub author: String,
    pub time_ms: Millis,
    pub spec: SpecJson,
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
    grants: sled::Tree,
    policies: sled::Tree,
    /// Decoded values of the trees every reconcile pass reads whole.
    desired_cache: Decoded<SharedList<DesiredContainer>>,
    applied_cache: Decoded<AppliedContainer>,
    observed_cache: Decoded<ObservedContainer>,
    nodes_cache: Decoded<NodeRecord>,
    ops_cache: Decoded<Operation>,
    /// Node liveness kept in memory between writes of the node records (nodes.rs).
    liveness: nodes::Liveness,
    /// Group commit for [`Store::flush`] (sled's `flush_async` deadlocks when called concurrently).
    flusher: pxfleet_common::Flusher,
    /// The key the `secrets` tree is sealed with ([`crate::seal`]); None for a store opened only to read or
    /// write other trees (init, dev-mode tokens, benchmarks), which then cannot touch secrets.
    seal: Option<std::sync::Arc<crate::seal::SealKey>>,
    /// Set by the first write that failed on the disk; later writes are refused (store/status.rs).
    disk_failed: crate::store::status::DiskFailure,
}

/// sled's page cache. Its default (1 GiB) let the cache grow with the store: the hot trees are also held
/// decoded (store/cache.rs), so the pages of a 10,000-container store are read from the OS's page cache when
/// sled drops them, at a small cost, instead of being held twice.
/// A 16 MiB cache was measured worse at 10,000 containers (peak RSS 404 MiB against 372-384 MiB, and slower).
const SLED_CACHE_BYTES: u64 = 64 << 20;

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

/// The value at `key` of `tree` (named `name` in errors) inside a transaction, decoded.
fn tx_get<T: DeserializeOwned>(
    tree: &TransactionalTree,
    name: &'static str,
    key: &[u8],
) -> Result<Option<T>, ConflictableTransactionError<StoreError>> {
    match tree.get(key)? {
        Some(v) => Ok(Some(tx_dec(name, key, &v)?)),
        None => Ok(None),
    }
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
        Store::from_db(
            sled::Config::new()
                .path(path)
                .cache_capacity(SLED_CACHE_BYTES)
                .open()?,
        )
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
            grants: db.open_tree("grants")?,
            policies: db.open_tree("policies")?,
            desired_cache: Decoded::default(),
            applied_cache: Decoded::default(),
            observed_cache: Decoded::default(),
            nodes_cache: Decoded::default(),
            ops_cache: Decoded::default(),
            liveness: Default::default(),
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

    /// The tree of hook results ([`crate::hooks`] owns its keys and values).
    pub fn hooks_tree(&self) -> Result<sled::Tree, StoreError> {
        Ok(self.db.open_tree("hooks")?)
    }

    /// Every run of a hook, by start time (crate::hooks::runs).
    pub fn hook_runs_tree(&self) -> Result<sled::Tree, StoreError> {
        Ok(self.db.open_tree("hook_runs")?)
    }
}

#[cfg(test)]
mod tests;
