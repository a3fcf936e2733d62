//! The controller's one error type for its use cases ([`Error`]: submit, listings, certificates, node
//! administration), and the one place it becomes a gRPC status ([`From<Error> for tonic::Status`]). Store and
//! authorisation errors keep their own enums and are mapped here too, so every status code a client sees is
//! decided in this file.

use crate::authz::AuthzError;
use crate::store::StoreError;

/// What a controller use case can fail with. Each variant names the gRPC code it is answered with; the
/// message is the user's, unchanged.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Authz(#[from] AuthzError),
    /// The request itself is wrong (a bad role, serial, CSR, action, or a fleet over a limit).
    #[error("{0}")]
    InvalidArgument(String),
    /// The caller may not do this (a join token that is unknown, used, expired or for another node).
    #[error("{0}")]
    PermissionDenied(String),
    /// The fleet, container or node named does not exist.
    #[error("{0}")]
    NotFound(String),
    /// The request is well formed but the state refuses it (a saved plan that no longer matches).
    #[error("{0}")]
    FailedPrecondition(String),
    /// A limit of the controller is used up (Watch streams, enrolment failures).
    #[error("{0}")]
    ResourceExhausted(String),
    /// A bug or an unreadable stored value.
    #[error("{0}")]
    Internal(String),
    /// The caller's own request stream failed (an agent's Connect stream before its Hello): answered with the
    /// status the stream ended with.
    #[error("{0}")]
    Stream(tonic::Status),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl From<Error> for tonic::Status {
    fn from(e: Error) -> Self {
        use tonic::Status;
        match e {
            Error::Store(e) => match e {
                StoreError::RevisionMoved { .. } => Status::aborted(e.to_string()),
                StoreError::Invalid { .. } => Status::invalid_argument(e.to_string()),
                StoreError::TokenRefused => Status::permission_denied(e.to_string()),
                _ => crate::store::status::disk_status(&e)
                    .unwrap_or_else(|| Status::internal(e.to_string())),
            },
            Error::Authz(e) => match e {
                AuthzError::Unauthenticated
                | AuthzError::Revoked { .. }
                | AuthzError::NotIssued { .. } => Status::unauthenticated(e.to_string()),
                AuthzError::Denied { .. } => Status::permission_denied(e.to_string()),
            },
            Error::InvalidArgument(m) => Status::invalid_argument(m),
            Error::PermissionDenied(m) => Status::permission_denied(m),
            Error::NotFound(m) => Status::not_found(m),
            Error::FailedPrecondition(m) => Status::failed_precondition(m),
            Error::ResourceExhausted(m) => Status::resource_exhausted(m),
            Error::Internal(m) => Status::internal(m),
            Error::Stream(s) => s,
        }
    }
}

/// For the services that call the store directly (`?` on a [`StoreError`] in a handler).
impl From<StoreError> for tonic::Status {
    fn from(e: StoreError) -> Self {
        Error::Store(e).into()
    }
}

/// For the services that check a caller directly (`?` on an [`AuthzError`] in a handler).
impl From<AuthzError> for tonic::Status {
    fn from(e: AuthzError) -> Self {
        Error::Authz(e).into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tonic::Code;

    #[test]
    fn each_variant_has_its_code_and_keeps_its_message() {
        let cases = [
            (Error::InvalidArgument("bad".into()), Code::InvalidArgument),
            (
                Error::PermissionDenied("token used".into()),
                Code::PermissionDenied,
            ),
            (Error::NotFound("no fleet x".into()), Code::NotFound),
            (
                Error::FailedPrecondition("plan again".into()),
                Code::FailedPrecondition,
            ),
            (
                Error::ResourceExhausted("too many".into()),
                Code::ResourceExhausted,
            ),
            (Error::Internal("oops".into()), Code::Internal),
            (
                Error::Authz(AuthzError::Unauthenticated),
                Code::Unauthenticated,
            ),
            (
                Error::Store(StoreError::TokenRefused),
                Code::PermissionDenied,
            ),
            (
                Error::Store(StoreError::RevisionMoved {
                    fleet: "dev".into(),
                    expected: 1,
                    actual: 2,
                }),
                Code::Aborted,
            ),
        ];
        for (e, code) in cases {
            let message = e.to_string();
            let status = tonic::Status::from(e);
            assert_eq!(status.code(), code, "{message}");
            assert_eq!(status.message(), message);
        }
    }
}
