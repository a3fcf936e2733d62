//! Durable sled writes without `flush_async`.
//!
//! sled 0.34's `Db::flush_async` deadlocks when several futures poll it at once (spacejam/sled#1308, #1241):
//! their wakers are lost and they stay pending forever. That hung pxagent as soon as about ten operations
//! arrived at once (every operation task awaited a flush of the journal), so its creates stayed `dispatched`.
//!
//! A [`Flusher`] owns one thread per database that runs the blocking `Db::flush`. Callers queue a request and
//! await its answer; the thread takes every request queued by then and answers them all with one flush (group
//! commit): a burst of N writes costs one fsync, not N, and no two flushes ever run at once. The request queue
//! is bounded, so a stuck disk pushes back on writers instead of growing memory.

use std::sync::Arc;
use std::thread::JoinHandle;

use tokio::sync::{mpsc, oneshot};

/// Requests waiting for the flush thread at most; a writer beyond that waits for room.
const QUEUE: usize = 4096;

/// Why a flush did not make the writes durable.
#[derive(Debug, Clone, thiserror::Error)]
pub enum FlushError {
    #[error("flushing {what} to disk: {message}")]
    Failed { what: String, message: String },
    #[error("the flush thread of {what} has stopped")]
    Stopped { what: String },
}

type Reply = oneshot::Sender<Result<(), FlushError>>;

struct Inner {
    what: String,
    tx: Option<mpsc::Sender<Reply>>,
    thread: Option<JoinHandle<()>>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        // Closing the queue ends the thread; joining it releases its handle on the database, so whoever
        // drops the last handle knows the database (and its lock file) is let go when drop returns.
        self.tx.take();
        if let Some(t) = self.thread.take() {
            if t.join().is_err() {
                tracing::error!(what = %self.what, "the flush thread panicked");
            }
        }
    }
}

/// Group-commit flusher for one sled database. Cheap to clone; the thread ends with the last clone.
#[derive(Clone)]
pub struct Flusher {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Flusher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Flusher")
            .field("what", &self.inner.what)
            .finish()
    }
}

impl Flusher {
    /// Starts the flush thread for `db`. `what` names the database in errors and the thread name
    /// (`journal`, `store`).
    pub fn new(db: sled::Db, what: &str) -> Flusher {
        let (tx, mut rx) = mpsc::channel::<Reply>(QUEUE);
        let name = what.to_string();
        let thread = std::thread::Builder::new()
            .name(format!("flush-{what}"))
            .spawn(move || {
                let mut batch = Vec::new();
                while let Some(first) = rx.blocking_recv() {
                    batch.push(first);
                    while let Ok(more) = rx.try_recv() {
                        batch.push(more);
                    }
                    let result = db.flush().map(|_| ()).map_err(|e| FlushError::Failed {
                        what: name.clone(),
                        message: e.to_string(),
                    });
                    if let Err(e) = &result {
                        tracing::error!(error = %e, "flush failed");
                    }
                    for reply in batch.drain(..) {
                        let _ = reply.send(result.clone());
                    }
                }
            });
        let thread = match thread {
            Ok(t) => Some(t),
            Err(e) => {
                // Without a thread every flush reports Stopped, which callers surface as an error.
                tracing::error!(what, error = %e, "cannot start the flush thread");
                None
            }
        };
        Flusher {
            inner: Arc::new(Inner {
                what: what.to_string(),
                tx: thread.is_some().then_some(tx),
                thread,
            }),
        }
    }

    /// Returns once everything written to the database before the call is on disk.
    pub async fn flush(&self) -> Result<(), FlushError> {
        let stopped = || FlushError::Stopped {
            what: self.inner.what.clone(),
        };
        let tx = self.inner.tx.as_ref().ok_or_else(stopped)?;
        let (reply, answer) = oneshot::channel();
        tx.send(reply).await.map_err(|_| stopped())?;
        answer.await.map_err(|_| stopped())?
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// The shape that hung pxagent: many tasks writing and flushing the same database at once. Each must
    /// come back; a lost wake-up would leave `join_all` pending until the timeout.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn concurrent_flushes_all_complete_and_persist() {
        let dir = tempfile::tempdir().unwrap();
        let db = sled::open(dir.path().join("db")).unwrap();
        let flusher = Flusher::new(db.clone(), "test");
        for round in 0..20u32 {
            let tasks = (0..64u32).map(|i| {
                let db = db.clone();
                let flusher = flusher.clone();
                tokio::spawn(async move {
                    db.insert(format!("{round}-{i}"), &i.to_be_bytes()).unwrap();
                    flusher.flush().await
                })
            });
            let all = futures::future::join_all(tasks);
            let results = tokio::time::timeout(Duration::from_secs(60), all)
                .await
                .unwrap_or_else(|_| panic!("round {round}: flushes did not complete"));
            for r in results {
                r.unwrap().unwrap();
            }
        }
        drop(flusher);
        drop(db);
        let db = reopen(&dir.path().join("db"));
        assert_eq!(
            db.len(),
            20 * 64,
            "every flushed write is there after reopening"
        );
    }

    /// Opens the database again once sled let go of its lock: after the last handle is dropped, sled's own I/O
    /// threads may still hold it for a moment (seen under load: `could not acquire lock ... WouldBlock`).
    fn reopen(path: &std::path::Path) -> sled::Db {
        let waited = crate::Stopwatch::start();
        loop {
            match sled::open(path) {
                Ok(db) => return db,
                Err(e)
                    if waited.elapsed() < Duration::from_secs(20)
                        && e.to_string().contains("WouldBlock") =>
                {
                    std::thread::sleep(Duration::from_millis(20));
                }
                Err(e) => panic!("reopening {}: {e}", path.display()),
            }
        }
    }

    #[tokio::test]
    async fn dropping_the_last_handle_releases_the_database() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db");
        let db = sled::open(&path).unwrap();
        let flusher = Flusher::new(db.clone(), "test");
        db.insert("k", "v").unwrap();
        flusher.flush().await.unwrap();
        drop(db);
        drop(flusher);
        // sled holds an exclusive lock on the directory while any handle is alive.
        let again = sled::open(&path).expect("the flush thread let go of the database");
        assert_eq!(again.get("k").unwrap().as_deref(), Some(&b"v"[..]));
    }
}
