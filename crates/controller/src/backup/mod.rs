//! `pxcontroller backup` / `restore`: the whole sled state (every tree, every key and value, byte for byte) in
//! one file, and back.
//!
//! The backup is taken with the data directory's lock held ([`DataDirLock`]), so no controller writes while it
//! is read: the snapshot is consistent across trees. A running controller holds the lock, so `backup` refuses
//! it (stop the controller first). Secrets stay sealed exactly as stored: the seal key is not in the backup
//! (it lives apart from the data dir; the restored store needs the same key), nor are the PKI files in
//! `DATA_DIR/pki/` (copy them with the data dir's other files).
//!
//! File format (version 1), all integers big-endian:
//! ```text
//! "PXFLEET-BACKUP\n" u32 version
//! per tree: u8 'T', u32 name length, name, u64 entry count, then per entry: u32 key length, key,
//!           u32 value length, value
//! u8 'E', then the SHA-256 of every byte before it (32 bytes)
//! ```
//! A restore reads and verifies the whole file before it writes anything, builds the store in a new directory
//! next to `db/` and renames it into place, so a failed restore leaves the data dir as it was.

pub mod s3;
pub mod schedule;

use std::io::Write;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::datadir::{DataDirError, DataDirLock};

const MAGIC: &[u8] = b"PXFLEET-BACKUP\n";
const VERSION: u32 = 1;
/// Bytes per chunk of the `Backup` RPC (well under the message size limit).
pub const CHUNK: usize = 1 << 20;

#[derive(Debug, thiserror::Error)]
pub enum BackupError {
    #[error(transparent)]
    DataDir(#[from] DataDirError),
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("store {}: {source}", path.display())]
    Sled {
        path: PathBuf,
        #[source]
        source: sled::Error,
    },
    #[error("{} is not a usable pxfleet backup: {why}", path.display())]
    Corrupt { path: PathBuf, why: String },
    #[error(
        "data dir {} already holds a store ({}): restore into an empty data dir, or pass --force to replace it",
        dir.display(),
        db.display()
    )]
    NotEmpty { dir: PathBuf, db: PathBuf },
    #[error("no store to back up in {}", db.display())]
    NoStore { db: PathBuf },
}

/// What a backup or restore covered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Summary {
    pub trees: usize,
    pub entries: u64,
    pub bytes: u64,
    /// SHA-256 (hex) of the file's contents before its checksum.
    pub sha256: String,
}

/// One tree of a snapshot: its name and its entries in key order.
pub type Tree = (Vec<u8>, Vec<(Vec<u8>, Vec<u8>)>);

/// Encodes `trees` in the backup format.
pub fn encode(trees: &[Tree]) -> (Vec<u8>, String) {
    let mut out = Vec::new();
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&VERSION.to_be_bytes());
    for (name, entries) in trees {
        out.push(b'T');
        put_bytes(&mut out, name);
        out.extend_from_slice(&(entries.len() as u64).to_be_bytes());
        for (k, v) in entries {
            put_bytes(&mut out, k);
            put_bytes(&mut out, v);
        }
    }
    out.push(b'E');
    let sum = Sha256::digest(&out);
    out.extend_from_slice(&sum);
    (out, hex::encode(sum))
}

fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    out.extend_from_slice(&(b.len() as u32).to_be_bytes());
    out.extend_from_slice(b);
}

/// Decodes and verifies a backup; the error says what is wrong (not a backup, another version, truncated,
/// checksum mismatch).
pub fn decode(data: &[u8]) -> Result<(Vec<Tree>, String), String> {
    if !data.starts_with(MAGIC) {
        return Err("it does not start with the pxfleet backup header".into());
    }
    if data.len() < MAGIC.len() + 4 + 1 + 32 {
        return Err(format!("truncated ({} bytes)", data.len()));
    }
    let (body, sum) = data.split_at(data.len() - 32);
    let mut r = Reader {
        data: body,
        pos: MAGIC.len(),
    };
    let version = r.u32()?;
    if version != VERSION {
        return Err(format!(
            "format version {version}; this pxcontroller reads version {VERSION}"
        ));
    }
    let mut trees = Vec::new();
    loop {
        match r.u8()? {
            b'T' => {
                let name = r.bytes()?.to_vec();
                let n = r.u64()?;
                let mut entries = Vec::new();
                for _ in 0..n {
                    let k = r.bytes()?.to_vec();
                    let v = r.bytes()?.to_vec();
                    entries.push((k, v));
                }
                trees.push((name, entries));
            }
            b'E' if r.pos == body.len() => break,
            b'E' => return Err(format!("data after the end mark at byte {}", r.pos)),
            other => {
                return Err(format!(
                    "unexpected record {other:#04x} at byte {}",
                    r.pos - 1
                ))
            }
        }
    }
    let want = Sha256::digest(body);
    if want.as_slice() != sum {
        return Err(format!(
            "checksum mismatch (file says {}, contents hash to {}): the file is damaged",
            hex::encode(sum),
            hex::encode(want)
        ));
    }
    Ok((trees, hex::encode(want)))
}

struct Reader<'a> {
    data: &'a [u8],
    pos: usize,
}

impl Reader<'_> {
    fn take(&mut self, n: usize) -> Result<&[u8], String> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.data.len());
        let Some(end) = end else {
            return Err(format!(
                "truncated: {n} bytes expected at byte {}, the file has {} before its checksum",
                self.pos,
                self.data.len()
            ));
        };
        let s = &self.data[self.pos..end];
        self.pos = end;
        Ok(s)
    }
    fn u8(&mut self) -> Result<u8, String> {
        Ok(self.take(1)?[0])
    }
    fn u32(&mut self) -> Result<u32, String> {
        Ok(u32::from_be_bytes(
            self.take(4)?.try_into().unwrap_or_default(),
        ))
    }
    fn u64(&mut self) -> Result<u64, String> {
        Ok(u64::from_be_bytes(
            self.take(8)?.try_into().unwrap_or_default(),
        ))
    }
    fn bytes(&mut self) -> Result<&[u8], String> {
        let n = self.u32()? as usize;
        self.take(n)
    }
}

/// Every tree of `db` (the default tree included), in name order.
pub fn snapshot(db: &sled::Db) -> Result<Vec<Tree>, sled::Error> {
    let mut names: Vec<Vec<u8>> = db.tree_names().into_iter().map(|n| n.to_vec()).collect();
    names.sort();
    let mut out = Vec::new();
    for name in names {
        let tree = db.open_tree(&name)?;
        let mut entries = Vec::new();
        for r in tree.iter() {
            let (k, v) = r?;
            entries.push((k.to_vec(), v.to_vec()));
        }
        out.push((name, entries));
    }
    Ok(out)
}

/// An online backup for the FleetService call, recorded in the audit log as taken by `by`.
pub async fn online_audited(
    state: &std::sync::Arc<crate::state::State>,
    by: Option<&pxfleet_tls::Identity>,
) -> Result<Vec<u8>, crate::error::Error> {
    let bytes = online(state)
        .await
        .map_err(|e| crate::error::Error::Internal(format!("backup: {e}")))?;
    tracing::info!(bytes = bytes.len(), "online backup taken");
    state.store.audit(&crate::model::AuditEntry {
        time_ms: state.now_ms(),
        actor: by.map(|i| i.uri()).unwrap_or_default(),
        action: "backup".into(),
        target: "state".into(),
        detail: format!("{} bytes", bytes.len()),
    })?;
    Ok(bytes)
}

/// A backup of a running controller, in the file format: every tree read with submits (the placement lock) and
/// operation changes (the operations lock) held, so fleets, revisions, desired containers, allocations and
/// operations agree with each other; observations and heartbeats may be a moment apart (agents report them
/// again after a restore anyway).
pub async fn online(state: &std::sync::Arc<crate::state::State>) -> Result<Vec<u8>, sled::Error> {
    let _submits = state.placement_lock.lock().await;
    let st = state.clone();
    let read = tokio::task::spawn_blocking(move || {
        let _ops = st.ops_lock.lock().unwrap_or_else(|p| p.into_inner());
        snapshot(st.store.sled_db())
    })
    .await
    .map_err(|e| sled::Error::ReportableBug(format!("backup task: {e}")))??;
    Ok(encode(&read).0)
}

fn summary(trees: &[Tree], bytes: usize, sha256: String) -> Summary {
    Summary {
        trees: trees.len(),
        entries: trees.iter().map(|(_, e)| e.len() as u64).sum(),
        bytes: bytes as u64,
        sha256,
    }
}

/// Writes a backup of the store in `data_dir/db` to `out` (through a temporary file renamed into place), with
/// the data dir's lock held: refused while a controller runs on it.
pub fn backup(data_dir: &Path, out: &Path) -> Result<Summary, BackupError> {
    let _lock = DataDirLock::acquire(data_dir)?;
    let db_path = data_dir.join("db");
    if !db_path.join("db").exists() {
        return Err(BackupError::NoStore { db: db_path });
    }
    let sled_err = |source| BackupError::Sled {
        path: db_path.clone(),
        source,
    };
    // a store this process just closed may be held by sled's threads a moment longer
    wait_released(&db_path)?;
    let db = sled::open(&db_path).map_err(sled_err)?;
    let trees = snapshot(&db).map_err(sled_err)?;
    drop(db);
    let (bytes, sha256) = encode(&trees);
    let mut name = out.file_name().unwrap_or_default().to_os_string();
    name.push(format!(".partial.{}", std::process::id()));
    let tmp = out.with_file_name(name);
    let written = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(&bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, out)
    })();
    if let Err(source) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(BackupError::Io {
            path: out.to_path_buf(),
            source,
        });
    }
    Ok(summary(&trees, bytes.len(), sha256))
}

/// Restores the backup `from` into `data_dir/db`. Refused while a controller holds the data dir, and when the
/// data dir already has a store unless `force` (which replaces it). The file is verified completely first.
pub fn restore(data_dir: &Path, from: &Path, force: bool) -> Result<Summary, BackupError> {
    let data = std::fs::read(from).map_err(|source| BackupError::Io {
        path: from.to_path_buf(),
        source,
    })?;
    restore_bytes(data_dir, &data, from, force)
}

/// [`restore`] from a backup already read (`from` names it in errors: a file, or an object's URL).
pub fn restore_bytes(
    data_dir: &Path,
    data: &[u8],
    from: &Path,
    force: bool,
) -> Result<Summary, BackupError> {
    let (trees, sha256) = decode(data).map_err(|why| BackupError::Corrupt {
        path: from.to_path_buf(),
        why,
    })?;
    let _lock = DataDirLock::acquire(data_dir)?;
    let db_path = data_dir.join("db");
    if db_path.exists() && !force {
        return Err(BackupError::NotEmpty {
            dir: data_dir.to_path_buf(),
            db: db_path,
        });
    }
    let staging = data_dir.join("db.restoring");
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| BackupError::Io { path, source }
    };
    if staging.exists() {
        std::fs::remove_dir_all(&staging).map_err(io(&staging))?;
    }
    {
        let sled_err = |source| BackupError::Sled {
            path: staging.clone(),
            source,
        };
        let db = sled::open(&staging).map_err(sled_err)?;
        for (name, entries) in &trees {
            let tree = db.open_tree(name).map_err(sled_err)?;
            let mut batch = sled::Batch::default();
            for (k, v) in entries {
                batch.insert(k.as_slice(), v.as_slice());
            }
            tree.apply_batch(batch).map_err(sled_err)?;
        }
        db.flush().map_err(sled_err)?;
    }
    // sled's threads may hold the staging store a moment after its last handle is dropped
    wait_released(&staging)?;
    if db_path.exists() {
        std::fs::remove_dir_all(&db_path).map_err(io(&db_path))?;
    }
    std::fs::rename(&staging, &db_path).map_err(io(&db_path))?;
    Ok(summary(&trees, data.len(), sha256))
}

fn wait_released(db: &Path) -> Result<(), BackupError> {
    let start = pxfleet_common::Stopwatch::start();
    while !crate::datadir::store_lock_free(db)? {
        if start.elapsed() > std::time::Duration::from_secs(30) {
            return Err(DataDirError::StillOpen {
                path: db.to_path_buf(),
                after: start.elapsed(),
            }
            .into());
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{OpState, Operation, OperationKind};
    use crate::store::{Store, SubmitTx};
    use crate::testutil::container;

    /// A data dir with a sealed store holding a fleet (with a secret), an applied container and an operation.
    fn populated(dir: &Path, key: &Path) {
        let store = Store::open_sealed(&dir.join("db"), key).unwrap();
        let c = container("web");
        let d = crate::model::DesiredContainer {
            fleet: "dev".into(),
            name: "web".into(),
            node: "n1".into(),
            vm_id: 1000,
            container: c.clone(),
            template: crate::testutil::template(),
            revision: 1,
            node_pinned: false,
        };
        store
            .submit(&SubmitTx {
                fleet: "dev".into(),
                expected_revision: Some(0),
                author: "admin".into(),
                time_ms: 5,
                spec: crate::store::spec_json(&serde_json::json!({"name": "dev"})).unwrap(),
                summary: "1 to create".into(),
                desired: vec![d],
                secrets: [("web".to_string(), "pw-123456".to_string())].into(),
                audit_action: "submit".into(),
                file_name: "fleet.yaml".into(),
                source_sha256: "ab".repeat(32),
                retry: vec![],
            })
            .unwrap();
        store
            .put_op(&Operation {
                id: "op-1".into(),
                fleet: "dev".into(),
                container: "web".into(),
                node: "n1".into(),
                vm_id: 1000,
                kind: OperationKind::Destroy,
                attempt: 1,
                state: OpState::Succeeded,
                created_ms: 1,
                not_before_ms: 1,
                dispatched_ms: Some(2),
                dispatched_conn: 1,
                deadline_ms: None,
                finished_ms: Some(3),
                last_error: None,
                revision: 1,
                reason: "test".into(),
            })
            .unwrap();
        store
            .put_applied(&crate::model::AppliedContainer {
                fleet: "dev".into(),
                name: "web".into(),
                node: "n1".into(),
                vm_id: 1000,
                container: c,
                template: crate::testutil::template(),
            })
            .unwrap();
    }

    #[test]
    fn backup_then_restore_into_a_fresh_data_dir_gives_the_same_state_with_secrets_still_sealed() {
        let tmp = tempfile::tempdir().unwrap();
        let (a, b, key) = (
            tmp.path().join("a"),
            tmp.path().join("b"),
            tmp.path().join("seal.key"),
        );
        populated(&a, &key);
        let file = tmp.path().join("state.pxbackup");
        let s = backup(&a, &file).unwrap();
        assert!(s.entries >= 4, "{s:?}");
        // the secret is not in the file in clear
        let bytes = std::fs::read(&file).unwrap();
        assert!(!bytes.windows(9).any(|w| w == b"pw-123456"));
        let r = restore(&b, &file, false).unwrap();
        assert_eq!(
            (r.trees, r.entries, &r.sha256),
            (s.trees, s.entries, &s.sha256)
        );
        let (sa, sb) = (
            Store::open_sealed(&a.join("db"), &key).unwrap(),
            Store::open_sealed(&b.join("db"), &key).unwrap(),
        );
        assert_eq!(sa.fleets().unwrap(), sb.fleets().unwrap());
        assert_eq!(sb.fleets().unwrap().len(), 1);
        assert_eq!(sa.revisions("dev").unwrap(), sb.revisions("dev").unwrap());
        assert_eq!(sa.all_desired().unwrap(), sb.all_desired().unwrap());
        assert_eq!(sa.all_applied().unwrap(), sb.all_applied().unwrap());
        assert_eq!(sa.ops().unwrap(), sb.ops().unwrap());
        assert_eq!(sb.ops().unwrap().len(), 1);
        assert_eq!(sa.audit_log().unwrap(), sb.audit_log().unwrap());
        let raw = sb.raw_secrets("dev").unwrap().unwrap();
        assert!(crate::seal::is_sealed(&raw));
        assert_eq!(sa.raw_secrets("dev").unwrap().unwrap(), raw);
        assert_eq!(sb.secrets("dev").unwrap()["web"], "pw-123456");
    }

    #[test]
    fn backup_and_restore_refuse_a_held_data_dir_and_restore_refuses_a_store_without_force() {
        let tmp = tempfile::tempdir().unwrap();
        let (a, b, key) = (
            tmp.path().join("a"),
            tmp.path().join("b"),
            tmp.path().join("seal.key"),
        );
        populated(&a, &key);
        let file = tmp.path().join("state.pxbackup");
        {
            let _held = DataDirLock::acquire(&a).unwrap();
            let err = backup(&a, &file).unwrap_err();
            assert!(
                err.to_string().contains("in use by another pxcontroller"),
                "{err}"
            );
            assert!(!file.exists());
        }
        backup(&a, &file).unwrap();
        {
            let _held = DataDirLock::acquire(&b).unwrap();
            let err = restore(&b, &file, true).unwrap_err();
            assert!(
                matches!(err, BackupError::DataDir(DataDirError::InUse { .. })),
                "{err}"
            );
        }
        restore(&b, &file, false).unwrap();
        let err = restore(&b, &file, false).unwrap_err();
        assert!(err.to_string().contains("--force"), "{err}");
        restore(&b, &file, true).unwrap();
        let sb = Store::open_sealed(&b.join("db"), &key).unwrap();
        assert_eq!(sb.fleets().unwrap().len(), 1);
    }

    #[test]
    fn a_truncated_or_damaged_backup_is_refused_and_nothing_is_written() {
        let tmp = tempfile::tempdir().unwrap();
        let (a, key) = (tmp.path().join("a"), tmp.path().join("seal.key"));
        populated(&a, &key);
        let file = tmp.path().join("state.pxbackup");
        backup(&a, &file).unwrap();
        let good = std::fs::read(&file).unwrap();
        let bad = tmp.path().join("bad");
        let target = tmp.path().join("target");
        let cases: Vec<(Vec<u8>, &str)> = vec![
            (good[..good.len() / 2].to_vec(), "truncated"),
            (good[..good.len() - 1].to_vec(), ""),
            (
                {
                    let mut g = good.clone();
                    let i = g.len() / 2;
                    g[i] ^= 0x55;
                    g
                },
                "",
            ),
            (b"hello, world\n".to_vec(), "header"),
        ];
        for (bytes, says) in cases {
            std::fs::write(&bad, &bytes).unwrap();
            let err = restore(&target, &bad, false).unwrap_err();
            let msg = err.to_string();
            assert!(matches!(err, BackupError::Corrupt { .. }), "{msg}");
            assert!(msg.contains("is not a usable pxfleet backup"), "{msg}");
            assert!(msg.contains(says), "{msg}");
            assert!(!target.join("db").exists(), "nothing restored: {msg}");
        }
    }
}
