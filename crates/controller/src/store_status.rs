//! What a client is told when the controller cannot write its data directory (disk full, file system
//! read-only, I/O errors): a clear status naming the cause, not a generic internal error. Reads do not write
//! and keep working; sled's errors are not sticky, so the next write after space comes back works without a
//! restart (the fault suite's `controller_disk_full_or_read_only` shows both).

use crate::store::StoreError;

/// The status for a store error caused by the disk, or `None` for other store errors.
pub fn disk_status(e: &StoreError) -> Option<tonic::Status> {
    let (no_space, detail) = match e {
        StoreError::Sled(sled::Error::Io(io)) => (
            matches!(
                io.kind(),
                std::io::ErrorKind::StorageFull | std::io::ErrorKind::QuotaExceeded
            ),
            io.to_string(),
        ),
        StoreError::Flush(pxfleet_common::FlushError::Failed { message, .. }) => (
            message.contains("No space left") || message.contains("quota exceeded"),
            message.clone(),
        ),
        _ => return None,
    };
    let message = format!(
        "controller cannot write its data dir: {detail}; writes are refused until it can (reads keep working)"
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
}
