//! One controller per data directory: `DATA_DIR/pxcontroller.lock` is held (an exclusive `flock`) for as long as
//! a controller runs on the directory, and names its process id. A second controller on the same directory is
//! refused at once with that pid, instead of sled's "could not acquire lock ... WouldBlock". After shutdown,
//! [`wait_store_released`] waits until sled has closed its own lock on `db/db`, so a restart in the same process
//! (tests, dev mode) opens the store cleanly.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The lock file's name inside the data directory.
pub const LOCK_FILE: &str = "pxcontroller.lock";

#[derive(Debug, thiserror::Error)]
pub enum DataDirError {
    #[error(
        "data dir {} is in use by another pxcontroller (pid {}?): stop it first, or give this one another data_dir",
        dir.display(),
        pid.map(|p| p.to_string()).unwrap_or_else(|| "unknown".into())
    )]
    InUse { dir: PathBuf, pid: Option<u32> },
    #[error("data dir lock {}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "the store in {} was still open {after:?} after shutdown (a task kept the controller state alive)",
        path.display()
    )]
    StillOpen { path: PathBuf, after: Duration },
}

/// Held while a controller runs on a data directory; released when dropped (the file stays, unlocked).
#[derive(Debug)]
pub struct DataDirLock {
    _file: File,
    path: PathBuf,
}

impl DataDirLock {
    /// Takes the data directory's lock and writes this process's id into it; `InUse` (with the holder's pid when
    /// it wrote one) when another controller holds it.
    pub fn acquire(data_dir: &Path) -> Result<DataDirLock, DataDirError> {
        let path = data_dir.join(LOCK_FILE);
        let io = |source| DataDirError::Io {
            path: path.clone(),
            source,
        };
        std::fs::create_dir_all(data_dir).map_err(io)?;
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(io)?;
        match file.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                let mut text = String::new();
                let _ = file.read_to_string(&mut text);
                return Err(DataDirError::InUse {
                    dir: data_dir.to_path_buf(),
                    pid: text.trim().parse().ok(),
                });
            }
            Err(TryLockError::Error(e)) => return Err(io(e)),
        }
        file.set_len(0).map_err(io)?;
        file.seek(SeekFrom::Start(0)).map_err(io)?;
        writeln!(file, "{}", std::process::id()).map_err(io)?;
        file.flush().map_err(io)?;
        Ok(DataDirLock { _file: file, path })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// Whether sled's own lock on the database in `db_dir` is free: sled holds an exclusive `flock` on `db_dir/db`
/// from open until its last handle is dropped (a probe from the same process conflicts with it as well, flock
/// locks belonging to the open file).
pub fn store_lock_free(db_dir: &Path) -> Result<bool, DataDirError> {
    let path = db_dir.join("db");
    let file = match File::open(&path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(true),
        Err(source) => return Err(DataDirError::Io { path, source }),
    };
    match file.try_lock() {
        Ok(()) => {
            let _ = file.unlock();
            Ok(true)
        }
        Err(TryLockError::WouldBlock) => Ok(false),
        Err(TryLockError::Error(source)) => Err(DataDirError::Io { path, source }),
    }
}

/// Waits (polling, at most `limit`) until sled's lock on the database in `db_dir` is free, that is until the
/// last handle on the store is dropped.
pub async fn wait_store_released(db_dir: &Path, limit: Duration) -> Result<(), DataDirError> {
    let start = pxfleet_common::Stopwatch::start();
    loop {
        if store_lock_free(db_dir)? {
            return Ok(());
        }
        if start.elapsed() >= limit {
            return Err(DataDirError::StillOpen {
                path: db_dir.to_path_buf(),
                after: limit,
            });
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_lock_on_the_same_dir_is_refused_with_the_holders_pid() {
        let dir = tempfile::tempdir().unwrap();
        let first = DataDirLock::acquire(dir.path()).unwrap();
        let err = DataDirLock::acquire(dir.path()).unwrap_err();
        let msg = err.to_string();
        assert!(
            matches!(err, DataDirError::InUse { pid: Some(p), .. } if p == std::process::id()),
            "{msg}"
        );
        assert!(msg.contains("is in use by another pxcontroller"), "{msg}");
        assert!(msg.contains(&dir.path().display().to_string()), "{msg}");
        drop(first);
        DataDirLock::acquire(dir.path()).unwrap();
    }

    #[tokio::test]
    async fn the_store_lock_probe_sees_an_open_sled_db_until_it_is_closed() {
        let dir = tempfile::tempdir().unwrap();
        let db_dir = dir.path().join("db");
        assert!(store_lock_free(&db_dir).unwrap());
        let db = sled::open(&db_dir).unwrap();
        db.insert("k", "v").unwrap();
        db.flush_async().await.unwrap();
        assert!(!store_lock_free(&db_dir).unwrap());
        let err = wait_store_released(&db_dir, Duration::from_millis(50))
            .await
            .unwrap_err();
        assert!(matches!(err, DataDirError::StillOpen { .. }), "{err}");
        // sled's own threads may hold the file a moment after the last handle is dropped
        drop(db);
        wait_store_released(&db_dir, Duration::from_secs(30))
            .await
            .unwrap();
        drop(sled::open(&db_dir).unwrap());
    }
}
