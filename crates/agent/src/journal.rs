//! The operation journal: a small local sled database mapping operation id to its state
//! (received, running, done, failed, interrupted). It is what makes operations idempotent across
//! re-sends and agent restarts: a finished operation is answered from here, and an operation that
//! was running when the agent died is found here at start-up and cleaned up ([`crate::executor`]).

use std::path::{Path, PathBuf};

use pxfleet_common::Clock;
use serde::{Deserialize, Serialize};

use crate::ops::{OpFailure, OpResult, Operation};

#[derive(Debug, thiserror::Error)]
pub enum JournalError {
    #[error("cannot open journal at {path}: {source}")]
    Open {
        path: PathBuf,
        #[source]
        source: sled::Error,
    },
    #[error("journal {action} for operation {op_id}: {source}")]
    Db {
        action: &'static str,
        op_id: String,
        #[source]
        source: sled::Error,
    },
    #[error("journal flush for operation {op_id}: {source}")]
    Flush {
        op_id: String,
        #[source]
        source: pxfleet_common::FlushError,
    },
    #[error("journal entry for operation {op_id} is unreadable: {source}")]
    Decode {
        op_id: String,
        #[source]
        source: serde_json::Error,
    },
}

/// Where an operation stands.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum OpState {
    Received,
    Running,
    Done(OpResult),
    Failed(OpFailure),
    /// Was running when the agent stopped; cleaned up at start-up, redone when the controller re-sends it.
    Interrupted,
}

/// One journal record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JournalEntry {
    pub op: Operation,
    pub state: OpState,
    /// Seconds since the epoch of the last state change.
    pub updated: u64,
}

/// The journal. Cheap to clone (sled handles are shared).
#[derive(Clone)]
pub struct Journal {
    ops: sled::Tree,
    /// Operation ids whose final update the controller acknowledged.
    acked: sled::Tree,
    /// Group commit: never `flush_async` (concurrent calls deadlock in sled 0.34).
    flusher: pxfleet_common::Flusher,
    /// The time of `updated` and of pruning.
    clock: Clock,
}

impl Journal {
    /// Opens (creating if needed) the journal in `dir`, on the system clock ([`Journal::with_clock`]).
    pub fn open(dir: &Path) -> Result<Self, JournalError> {
        // sled's lock on the directory outlives the last handle of a closed journal by a moment (its I/O
        // threads let go last): a journal reopened at once, by a restart in the same process, waits for it
        // rather than failing with `could not acquire lock ... WouldBlock`. Another agent really holding it is
        // still refused, after LOCK_WAIT.
        const LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(5);
        let waited = pxfleet_common::Stopwatch::start();
        let db = loop {
            let opened = sled::Config::new()
                .path(dir)
                .mode(sled::Mode::LowSpace)
                // The journal holds a few hundred small entries; sled's default 1 GiB cache is for databases.
                .cache_capacity(8 << 20)
                .open();
            match opened {
                Ok(db) => break db,
                Err(e)
                    if e.to_string().contains("could not acquire lock")
                        && waited.elapsed() < LOCK_WAIT =>
                {
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
                Err(source) => {
                    return Err(JournalError::Open {
                        path: dir.to_path_buf(),
                        source,
                    })
                }
            }
        };
        let ops = db.open_tree("ops").map_err(|source| JournalError::Open {
            path: dir.to_path_buf(),
            source,
        })?;
        let acked = db.open_tree("acked").map_err(|source| JournalError::Open {
            path: dir.to_path_buf(),
            source,
        })?;
        let flusher = pxfleet_common::Flusher::new(db, "journal");
        Ok(Journal {
            ops,
            acked,
            flusher,
            clock: Clock::system(),
        })
    }

    /// This journal reading the time from `clock`.
    pub fn with_clock(mut self, clock: Clock) -> Self {
        self.clock = clock;
        self
    }

    /// Seconds since the epoch, as `updated` holds them.
    fn now(&self) -> u64 {
        self.clock.now_ms() / 1000
    }

    pub fn get(&self, op_id: &str) -> Result<Option<JournalEntry>, JournalError> {
        let raw = self.ops.get(op_id).map_err(|source| JournalError::Db {
            action: "read",
            op_id: op_id.to_string(),
            source,
        })?;
        raw.map(|bytes| {
            serde_json::from_slice(&bytes).map_err(|source| JournalError::Decode {
                op_id: op_id.to_string(),
                source,
            })
        })
        .transpose()
    }

    /// Records a new state for an operation and flushes it to disk before returning.
    pub async fn record(&self, op: &Operation, state: OpState) -> Result<(), JournalError> {
        let entry = JournalEntry {
            op: op.clone(),
            state,
            updated: self.now(),
        };
        let bytes = serde_json::to_vec(&entry).expect("journal entries always serialise");
        self.ops
            .insert(op.id.as_bytes(), bytes)
            .map_err(|source| JournalError::Db {
                action: "write",
                op_id: op.id.clone(),
                source,
            })?;
        self.flusher
            .flush()
            .await
            .map_err(|source| JournalError::Flush {
                op_id: op.id.clone(),
                source,
            })?;
        Ok(())
    }

    /// Every entry (used at start-up to find operations that were running). An entry this agent cannot read (a
    /// format it does not know) is left out with a warning rather than stopping the agent: re-sent, that operation
    /// fails with the journal's error, and the controller's next attempt is a new operation.
    pub fn entries(&self) -> Result<Vec<JournalEntry>, JournalError> {
        let mut out = Vec::new();
        for item in self.ops.iter() {
            let (key, value) = item.map_err(|source| JournalError::Db {
                action: "scan",
                op_id: String::new(),
                source,
            })?;
            match serde_json::from_slice(&value) {
                Ok(entry) => out.push(entry),
                Err(source) => {
                    let e = JournalError::Decode {
                        op_id: String::from_utf8_lossy(&key).into_owned(),
                        source,
                    };
                    tracing::warn!(error = %e, "journal entry skipped");
                }
            }
        }
        Ok(out)
    }

    /// Notes that the controller stored an operation's final update.
    pub fn ack(&self, op_id: &str) -> Result<(), JournalError> {
        self.acked
            .insert(op_id.as_bytes(), &[])
            .map_err(|source| JournalError::Db {
                action: "ack",
                op_id: op_id.to_string(),
                source,
            })?;
        Ok(())
    }

    /// Operations the controller should hear about again after a reconnect: finished but not
    /// acknowledged, or still in progress.
    pub fn unacked(&self) -> Result<Vec<JournalEntry>, JournalError> {
        let mut out = Vec::new();
        for e in self.entries()? {
            let acked = self
                .acked
                .contains_key(e.op.id.as_bytes())
                .map_err(|source| JournalError::Db {
                    action: "read ack",
                    op_id: e.op.id.clone(),
                    source,
                })?;
            if !acked && !matches!(e.state, OpState::Interrupted) {
                out.push(e);
            }
        }
        Ok(out)
    }

    /// Drops finished entries last changed more than `max_age_secs` ago; returns how many.
    pub fn prune(&self, max_age_secs: u64) -> Result<usize, JournalError> {
        self.prune_before(self.now().saturating_sub(max_age_secs))
    }

    /// Drops finished entries last changed before `cutoff` (seconds since the epoch).
    pub fn prune_before(&self, cutoff: u64) -> Result<usize, JournalError> {
        let mut removed = 0;
        for entry in self.entries()? {
            let finished = matches!(entry.state, OpState::Done(_) | OpState::Failed(_));
            if finished && entry.updated < cutoff {
                self.ops
                    .remove(entry.op.id.as_bytes())
                    .map_err(|source| JournalError::Db {
                        action: "remove",
                        op_id: entry.op.id.clone(),
                        source,
                    })?;
                let _ = self.acked.remove(entry.op.id.as_bytes());
                removed += 1;
            }
        }
        Ok(removed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node::Secret;
    use crate::ops::{CreateOp, OpKind, TemplateSource, TemplateSpec};

    fn create_op(id: &str) -> Operation {
        Operation {
            id: id.into(),
            kind: OpKind::Create(CreateOp {
                vmid: 100,
                mark: crate::node::ManagedMark {
                    fleet: "dev".into(),
                    name: "web".into(),
                },
                template: TemplateSpec {
                    storage: "local".into(),
                    file_name: "t.tar.zst".into(),
                    source: TemplateSource::Existing,
                },
                options: crate::pve_options::options_spec(&[("memory".into(), "512".into())])
                    .unwrap(),
                tags: vec![],
                description: None,
                ssh_public_keys: vec![],
                password: Some(Secret("supersecret".into())),
                start: true,
                make_template: false,
                wait_for: Default::default(),
                clone: None,
            }),
        }
    }

    #[tokio::test]
    async fn states_survive_reopen_and_password_is_not_stored() {
        let dir = tempfile::tempdir().unwrap();
        {
            let j = Journal::open(dir.path()).unwrap();
            j.record(&create_op("op-1"), OpState::Running)
                .await
                .unwrap();
            j.record(
                &create_op("op-2"),
                OpState::Failed(OpFailure {
                    error: "boom".into(),
                    retryable: false,
                }),
            )
            .await
            .unwrap();
        }
        let j = Journal::open(dir.path()).unwrap();
        let e = j.get("op-1").unwrap().unwrap();
        assert_eq!(e.state, OpState::Running);
        match e.op.kind {
            OpKind::Create(c) => assert_eq!(c.password, None),
            other => panic!("unexpected {other:?}"),
        }
        assert_eq!(j.entries().unwrap().len(), 2);
        assert!(j.get("op-3").unwrap().is_none());
        let raw = std::fs::read_dir(dir.path()).unwrap().count();
        assert!(raw > 0);
    }

    /// The journal keeps an operation's options typed: what comes back is what went in, the parts no `pct`
    /// option list carries (env, entrypoint, idmap lines) included.
    #[tokio::test]
    async fn options_come_back_typed() {
        let dir = tempfile::tempdir().unwrap();
        let j = Journal::open(dir.path()).unwrap();
        let mut op = create_op("op-typed");
        if let OpKind::Create(c) = &mut op.kind {
            c.options.env = Some([("TZ".to_string(), "UTC".to_string())].into());
            c.options.entrypoint = Some(String::new());
            c.options.idmap = vec!["u 0 100000 65536".into()];
            c.options.mount_points.insert(
                2,
                pxfleet_pve::MountPointSpec {
                    volume: pxfleet_pve::MountVolume::Existing {
                        volume: "local-lvm:vm-9-disk-1".into(),
                    },
                    path: "/data".into(),
                    backup: Some(true),
                    read_only: None,
                    mount_options: vec!["noatime".into()],
                    acl: None,
                    quota: None,
                    replicate: Some(false),
                    shared: None,
                    keepattrs: None,
                    idmap: None,
                },
            );
        }
        j.record(&op, OpState::Received).await.unwrap();
        let back = j.get("op-typed").unwrap().unwrap();
        match (&back.op.kind, &op.kind) {
            (OpKind::Create(b), OpKind::Create(o)) => assert_eq!(b.options, o.options),
            other => panic!("unexpected {other:?}"),
        }
    }

    /// Regression: every operation task records (and flushes) as it arrives. With sled's `flush_async` a
    /// burst of about ten of them at once lost wake-ups and the agent stopped running operations for good.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn a_burst_of_concurrent_records_all_complete() {
        let dir = tempfile::tempdir().unwrap();
        let j = Journal::open(dir.path()).unwrap();
        for round in 0..10 {
            let tasks = (0..100).map(|i| {
                let j = j.clone();
                tokio::spawn(async move {
                    let op = create_op(&format!("op-{round}-{i}"));
                    j.record(&op, OpState::Received).await?;
                    j.record(&op, OpState::Running).await
                })
            });
            let all = futures::future::join_all(tasks);
            let results = tokio::time::timeout(std::time::Duration::from_secs(60), all)
                .await
                .unwrap_or_else(|_| panic!("round {round}: journal records never completed"));
            for r in results {
                r.unwrap().unwrap();
            }
        }
        assert_eq!(j.entries().unwrap().len(), 1000);
    }

    /// An entry of the pre-release text format (options as `[key, value]` strings, never shipped) is not read:
    /// the agent starts without it, and that operation, re-sent, fails with the journal's error.
    #[tokio::test]
    async fn an_entry_of_the_text_format_is_skipped_at_start_up() {
        let line = r#"{"op":{"id":"op-7","kind":{"Create":{"vmid":100,"mark":{"fleet":"dev","name":"web"},"template":{"storage":"local","file_name":"t.tar.zst","source":"Existing"},"options":[["hostname","web"],["memory","512"]],"tags":["web"],"description":null,"ssh_public_keys":[],"start":true}}},"state":"Running","updated":1700000000}"#;
        let dir = tempfile::tempdir().unwrap();
        let j = Journal::open(dir.path()).unwrap();
        j.ops.insert("op-7", line.as_bytes()).unwrap();
        j.record(&create_op("op-8"), OpState::Running)
            .await
            .unwrap();
        let ids: Vec<String> = j.entries().unwrap().into_iter().map(|e| e.op.id).collect();
        assert_eq!(ids, ["op-8"]);
        assert!(matches!(j.get("op-7"), Err(JournalError::Decode { .. })));
    }

    #[tokio::test]
    async fn prune_drops_finished_entries_once_old_and_keeps_unfinished_ones() {
        let dir = tempfile::tempdir().unwrap();
        let clock = pxfleet_common::ManualClock::new();
        let j = Journal::open(dir.path()).unwrap().with_clock(clock.clock());
        j.record(&create_op("a"), OpState::Running).await.unwrap();
        j.record(
            &create_op("b"),
            OpState::Failed(OpFailure {
                error: "x".into(),
                retryable: true,
            }),
        )
        .await
        .unwrap();
        assert_eq!(j.prune(3600).unwrap(), 0, "fresh entries are kept");
        clock.advance(std::time::Duration::from_secs(3602));
        assert_eq!(
            j.prune(3600).unwrap(),
            1,
            "an hour later the finished one goes"
        );
        assert!(j.get("b").unwrap().is_none(), "finished entry removed");
        assert!(j.get("a").unwrap().is_some(), "running entry kept");
    }
}
