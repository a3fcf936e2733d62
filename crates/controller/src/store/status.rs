//! What a client is told when the controller cannot write its data directory (disk full, file system
//! read-only, I/O errors): a clear status naming the cause, not a generic internal error. Reads do not write
//! and keep working; sled's errors are not sticky, so the next write after space comes back works without a
//! restart (the fault suite's `controller_disk_full_or_read_only` shows both).

use std::sync::{Arc, OnceLock};

use crate::store::StoreError;

/// The first write error caused by the disk, shared by a store's clones.
#[derive(Debug, Clone, Default)]
pub struct DiskFailure(Arc<OnceLock<String>>);

impl DiskFailure {
    /// `Err(DiskFailed)` once a write has failed on the disk.
    pub fn check(&self) -> Result<(), StoreError> {
        match self.0.get() {
            Some(first) => Err(StoreError::DiskFailed {
                first: first.clone(),
            }),
            None => Ok(()),
        }
    }

    /// Passes `r` through, remembering the first disk error it carries.
    pub fn note<T>(&self, r: Result<T, StoreError>) -> Result<T, StoreError> {
        if let Err(e) = &r {
            if let Some(detail) = disk_detail(e) {
                if self.0.set(detail.1.clone()).is_ok() {
                    tracing::error!(error = %detail.1, "a write failed on the data dir; writes are refused until the controller restarts");
                }
            }
        }
        r
    }
}

/// (no space?, the OS error) for errors caused by the disk.
fn disk_detail(e: &StoreError) -> Option<(bool, String)> {
    match e {
        StoreError::Sled(sled::Error::Io(io)) => Some((
            matches!(
                io.kind(),
                std::io::ErrorKind::StorageFull | std::io::ErrorKind::QuotaExceeded
            ),
            io.to_string(),
        )),
        StoreError::Flush(pxfleet_common::FlushError::Failed { message, .. }) => Some((
            message.contains("No space left") || message.contains("quota exceeded"),
            message.clone(),
        )),
        _ => None,
    }
}

/// The status for a store error caused by the disk, or `None` for other store errors.
pub fn disk_status(e: &StoreError) -> Option<tonic::Status> {
    if let StoreError::DiskFailed { .. } = e {
        return Some(tonic::Status::unavailable(format!(
            "controller cannot write its data dir: {e} (reads keep working)"
        )));
    }
    let (no_space, detail) = disk_detail(e)?;
    let message = format!(
        "controller cannot write its data dir: {detail}; writes are refused until it is writable again and \
         the controller restarted (reads keep working)"
    );
    Some(if no_space {
        tonic::Status::resource_exhausted(message)
    } else {
        tonic::Status::unavailable(message)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_disk_is_resource_exhausted_with_the_os_error() {
        let e = StoreError::Sled(sled::Error::Io(std::io::Error::from_raw_os_error(28)));
        let s = disk_status(&e).expect("a disk error");
        assert_eq!(s.code(), tonic::Code::ResourceExhausted);
        assert!(
            s.message()
                .starts_with("controller cannot write its data dir: No space left on device"),
            "{}",
            s.message()
        );
    }

    #[test]
    fn a_read_only_data_dir_and_a_failed_flush_are_named_too() {
        let e = StoreError::Sled(sled::Error::Io(std::io::Error::from_raw_os_error(30)));
        let s = disk_status(&e).expect("a disk error");
        assert_eq!(s.code(), tonic::Code::Unavailable);
        assert!(
            s.message().contains("Read-only file system"),
            "{}",
            s.message()
        );
        let e = StoreError::Flush(pxfleet_common::FlushError::Failed {
            what: "store".into(),
            message: "IO error: No space left on device (os error 28)".into(),
        });
        assert_eq!(
            disk_status(&e).expect("a disk error").code(),
            tonic::Code::ResourceExhausted
        );
        assert!(disk_status(&StoreError::TokenRefused).is_none());
    }

    #[test]
    fn after_a_disk_failure_writes_are_refused_until_a_restart() {
        let f = DiskFailure::default();
        assert!(f.check().is_ok());
        let r: Result<(), _> = f.note(Err(StoreError::TokenRefused));
        assert!(r.is_err());
        assert!(f.check().is_ok(), "not a disk error");
        let full = StoreError::Sled(sled::Error::Io(std::io::Error::from_raw_os_error(28)));
        assert!(f.note::<()>(Err(full)).is_err());
        let e = f.check().expect_err("refused from now on");
        let s = disk_status(&e).expect("a disk status");
        assert_eq!(s.code(), tonic::Code::Unavailable);
        assert!(
            s.message().contains("No space left on device"),
            "{}",
            s.message()
        );
        assert!(
            s.message().contains("restart the controller"),
            "{}",
            s.message()
        );
        assert!(f.clone().check().is_err(), "shared by clones");
    }
}
