//! `[backup] every = "6h"`: a backup of the running controller ([`crate::backup::online`]) at that interval,
//! written to `dir` (default `DATA_DIR/backups`, the newest `keep` kept) and uploaded to `[backup.s3]` when
//! configured. A failure is logged and retried at the next interval; it never stops the controller. The task
//! holds the state only while it takes a backup, so shutdown does not wait for it.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Weak};
use std::time::Duration;

use crate::state::State;

/// Starts the schedule when `[backup] every` is set.
pub fn spawn(state: &Arc<State>, stopped: impl Future<Output = ()> + Send + 'static) {
    let Ok(Some(every)) = state.config.backup.interval() else {
        return;
    };
    let dir = state
        .config
        .backup
        .dir
        .clone()
        .unwrap_or_else(|| state.config.data_dir.join("backups"));
    let keep = state.config.backup.keep.unwrap_or(7).max(1);
    tracing::info!(every_secs = every.as_secs(), dir = %dir.display(), keep, "scheduled backups");
    tokio::spawn(run(Arc::downgrade(state), every, dir, keep, stopped));
}

async fn run(
    state: Weak<State>,
    every: Duration,
    dir: PathBuf,
    keep: usize,
    stopped: impl Future<Output = ()>,
) {
    tokio::pin!(stopped);
    loop {
        tokio::select! {
            _ = &mut stopped => return,
            _ = tokio::time::sleep(every) => {}
        }
        let Some(st) = state.upgrade() else { return };
        let now = st.now_ms();
        let taken = crate::backup::online(&st).await;
        let s3 = st.config.backup.s3.clone();
        drop(st);
        let data = match taken {
            Ok(d) => d,
            Err(e) => {
                tracing::warn!(error = %e, "scheduled backup failed");
                continue;
            }
        };
        let name = crate::backup::s3::S3Config::file_name(now);
        match write(&dir, &name, &data) {
            Ok(path) => {
                tracing::info!(path = %path.display(), bytes = data.len(), "scheduled backup written");
                if let Err(e) = prune(&dir, keep) {
                    tracing::warn!(dir = %dir.display(), error = %e, "removing old backups failed");
                }
            }
            Err(e) => {
                tracing::warn!(dir = %dir.display(), error = %e, "writing the scheduled backup failed")
            }
        }
        if let Some(s3) = s3 {
            let key = s3.key_for(now);
            match s3.put(&key, &data).await {
                Ok(()) => tracing::info!(url = %s3.url(&key), "scheduled backup uploaded"),
                Err(e) => tracing::warn!(error = %e, "uploading the scheduled backup failed"),
            }
        }
    }
}

fn write(dir: &Path, name: &str, data: &[u8]) -> std::io::Result<PathBuf> {
    use std::io::Write;
    std::fs::create_dir_all(dir)?;
    let path = dir.join(name);
    let tmp = dir.join(format!(".{name}.partial"));
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(data)?;
    f.sync_all()?;
    std::fs::rename(&tmp, &path)?;
    Ok(path)
}

/// Removes all but the newest `keep` scheduled backups (by name, which sorts by time) from `dir`.
pub fn prune(dir: &Path, keep: usize) -> std::io::Result<usize> {
    let mut names: Vec<PathBuf> = std::fs::read_dir(dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("pxfleet-") && n.ends_with(".pxbackup"))
        })
        .collect();
    names.sort();
    let excess = names.len().saturating_sub(keep);
    for p in &names[..excess] {
        std::fs::remove_file(p)?;
    }
    Ok(excess)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_parses_and_rejects_what_is_not_a_duration() {
        let c = |e: &str| crate::backup::s3::BackupConfig {
            every: Some(e.into()),
            ..Default::default()
        };
        assert_eq!(c("6h").interval(), Ok(Some(Duration::from_secs(6 * 3600))));
        assert_eq!(c("30m").interval(), Ok(Some(Duration::from_secs(1800))));
        assert!(c("6 hours").interval().unwrap_err().contains("e.g. 10m"));
        assert!(c("0s").interval().is_err());
        assert!(c("99999999999999999d").interval().is_err(), "no overflow");
        assert_eq!(
            crate::backup::s3::BackupConfig::default().interval(),
            Ok(None)
        );
    }

    #[test]
    fn prune_keeps_the_newest() {
        let d = tempfile::tempdir().unwrap();
        for t in ["20261201T000000Z", "20261202T000000Z", "20261203T000000Z"] {
            std::fs::write(d.path().join(format!("pxfleet-{t}.pxbackup")), "x").unwrap();
        }
        std::fs::write(d.path().join("other.txt"), "x").unwrap();
        assert_eq!(prune(d.path(), 2).unwrap(), 1);
        assert!(!d.path().join("pxfleet-20261201T000000Z.pxbackup").exists());
        assert!(d.path().join("pxfleet-20261203T000000Z.pxbackup").exists());
        assert!(d.path().join("other.txt").exists());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_scheduled_backup_is_written_and_restorable() {
        let d = tempfile::tempdir().unwrap();
        let store = crate::store::Store::temporary().unwrap();
        let mut config = crate::Config::default();
        config.backup.every = Some("1s".into());
        config.backup.dir = Some(d.path().join("b"));
        let ca = pxfleet_tls::Ca::generate("test").unwrap();
        let state = State::new(
            config,
            store,
            ca,
            Default::default(),
            pxfleet_common::Clock::system(),
        );
        state
            .store
            .put_op(&crate::model::Operation {
                id: "op-1".into(),
                fleet: "dev".into(),
                container: "web".into(),
                node: "n1".into(),
                vm_id: 1000,
                kind: crate::model::OperationKind::Start,
                attempt: 1,
                state: crate::model::OpState::Succeeded,
                created_ms: 1,
                not_before_ms: 1,
                dispatched_ms: None,
                dispatched_conn: 0,
                deadline_ms: None,
                finished_ms: Some(2),
                last_error: None,
                revision: 1,
                reason: "test".into(),
            })
            .unwrap();
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        spawn(&state, async {
            let _ = rx.await;
        });
        let dir = d.path().join("b");
        let start = pxfleet_common::Stopwatch::start();
        let file = loop {
            let found = std::fs::read_dir(&dir).ok().and_then(|mut r| {
                r.find_map(|e| {
                    let p = e.ok()?.path();
                    p.extension().is_some_and(|x| x == "pxbackup").then_some(p)
                })
            });
            if let Some(f) = found {
                break f;
            }
            assert!(
                start.elapsed() < Duration::from_secs(120),
                "no scheduled backup in {}",
                dir.display()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        let _ = tx.send(());
        let data = std::fs::read(&file).unwrap();
        let (trees, _) = crate::backup::decode(&data).unwrap();
        let ops = trees
            .iter()
            .find(|(n, _)| n == b"operations")
            .expect("the operations tree");
        assert_eq!(ops.1.len(), 1);
    }
}
