//! Who may do what. Identity and role come from the client certificate ([`pxfleet_tls::Identity`]); these
//! functions answer the questions the services ask, and [`AuthzError`] maps to gRPC status codes in
//! [`crate::error`].

use pxfleet_tls::{Identity, RevocationCheck, Role};

/// What a FleetService call needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need<'a> {
    /// Reading fleets, containers, nodes, operations, outputs without secrets, history.
    Read,
    /// Reading secrets (`output --show-sensitive`): operator of the fleet, or admin.
    ReadSecrets(&'a str),
    /// Plan, submit, destroy of a fleet.
    Change(&'a str),
    /// Plan or submit of a fleet file, checked before the file is read (which fleet it is comes from the file,
    /// and a viewer, who may change none, must not make the controller parse one).
    ChangeSome,
    /// Join tokens, cordon, certificates.
    Admin,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthzError {
    #[error("a client certificate signed by this controller's CA is required")]
    Unauthenticated,
    #[error("{who} may not {what}")]
    Denied { who: String, what: String },
    #[error(
        "the client certificate (serial {serial}) was revoked by an admin: nothing made with it is accepted any \
         more, also on connections opened before; ask an admin for a new certificate (`pxctl user request`)"
    )]
    Revoked { serial: String },
    #[error(
        "the client certificate (serial {serial}) was not issued by this controller (it is in no `pxctl user list \
         --all`): only certificates it issued itself (`pxctl user issue`, node enrolment) are accepted; ask an admin \
         for one"
    )]
    NotIssued { serial: String },
}

/// The caller of a request: the identity of its verified client certificate (`None` without one), refused when
/// that certificate was revoked since the connection's handshake (the handshake refuses it on new connections;
/// this check is what cuts off calls on connections opened before the revoke), or when this controller never
/// issued it (`issued` says whether it recorded the serial): a certificate made with the CA key outside the
/// controller is not one of its users or nodes, whatever its subject says.
pub fn caller<T>(
    revocations: &dyn RevocationCheck,
    issued: impl Fn(&str) -> bool,
    req: &tonic::Request<T>,
) -> Result<Option<Identity>, AuthzError> {
    let Some(cert) = pxfleet_tls::peer_cert_info(req) else {
        return Ok(None);
    };
    let serial = cert.serial.as_str().to_string();
    if revocations.is_revoked(&cert.serial) {
        return Err(AuthzError::Revoked { serial });
    }
    if !issued(&serial) {
        return Err(AuthzError::NotIssued { serial });
    }
    Ok(cert.identity)
}

/// [`caller`] against the controller's revocation list and its record of the certificates it issued.
pub fn caller_of<T>(
    state: &crate::state::State,
    req: &tonic::Request<T>,
) -> Result<Option<Identity>, AuthzError> {
    caller(
        &*state.revocations,
        |serial| state.store.serial(serial).ok().flatten().is_some(),
        req,
    )
}

fn denied(id: &Identity, what: impl Into<String>) -> AuthzError {
    AuthzError::Denied {
        who: id.uri(),
        what: what.into(),
    }
}

/// Checks a FleetService call. Node certificates are refused for every FleetService call.
pub fn check_fleet(id: Option<&Identity>, need: Need<'_>) -> Result<(), AuthzError> {
    let id = id.ok_or(AuthzError::Unauthenticated)?;
    let (role, fleets) = match id {
        Identity::Node(_) => {
            return Err(denied(
                id,
                "call the fleet API (node certificates speak only AgentService)",
            ))
        }
        Identity::User { role, fleets, .. } => (*role, fleets),
    };
    let may_change = |fleet: &str| fleets.is_empty() || fleets.iter().any(|f| f == fleet);
    match (need, role) {
        (_, Role::Admin) => Ok(()),
        (Need::Read, _) => Ok(()),
        (Need::Change(f), Role::Operator) if may_change(f) => Ok(()),
        (Need::ChangeSome, Role::Operator) => Ok(()),
        (Need::ChangeSome, _) => Err(denied(
            id,
            "plan or submit fleet files (a viewer reads only; ask an admin for an operator certificate)",
        )),
        (Need::ReadSecrets(f), Role::Operator) if may_change(f) => Ok(()),
        (Need::Change(f), _) => Err(denied(id, format!("change fleet {f}"))),
        (Need::ReadSecrets(f), _) => Err(denied(id, format!("read the secrets of fleet {f}"))),
        (Need::Admin, _) => Err(denied(id, "use admin calls (tokens, cordon, certificates)")),
    }
}

/// Checks an agent stream: only a node certificate, and only for its own node. Returns the node name.
pub fn check_node<'a>(id: Option<&'a Identity>, claimed: &str) -> Result<&'a str, AuthzError> {
    let id = id.ok_or(AuthzError::Unauthenticated)?;
    match id {
        Identity::Node(name) if claimed.is_empty() || name == claimed => Ok(name),
        Identity::Node(_) => Err(denied(id, format!("speak for node {claimed}"))),
        Identity::User { .. } => Err(denied(
            id,
            "open an agent stream (a node certificate is needed)",
        )),
    }
}

/// A refusal of something only an admin may submit, at `path` of `fleet`'s file, with what to do (`hint`).
pub fn admin_only(
    file: &str,
    fleet: &pxfleet_spec::Fleet,
    path: String,
    message: String,
    hint: &str,
) -> pxfleet_spec::Diagnostic {
    let span = fleet.spans.lookup(&path);
    let mut d = pxfleet_spec::Diagnostic::new(file, span, path, message);
    d.hint = Some(hint.into());
    d
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(role: Role, fleets: &[&str]) -> Identity {
        Identity::User {
            name: "u".into(),
            role,
            fleets: fleets.iter().map(|f| f.to_string()).collect(),
        }
    }

    #[test]
    fn fleet_api_matrix() {
        let admin = user(Role::Admin, &[]);
        let op = user(Role::Operator, &[]);
        let op_dev = user(Role::Operator, &["dev"]);
        let viewer = user(Role::Viewer, &[]);
        let node = Identity::Node("mk33".into());
        let ok = |id: &Identity, need| check_fleet(Some(id), need).is_ok();
        for need in [
            Need::Read,
            Need::Change("dev"),
            Need::Change("prod"),
            Need::Admin,
            Need::ReadSecrets("dev"),
        ] {
            assert!(ok(&admin, need), "admin {need:?}");
            assert!(!ok(&node, need), "node {need:?}");
        }
        assert!(ok(&op, Need::Change("prod")));
        assert!(!ok(&op, Need::Admin));
        assert!(ok(&op_dev, Need::Change("dev")));
        assert!(!ok(&op_dev, Need::Change("prod")));
        assert!(!ok(&op_dev, Need::ReadSecrets("prod")));
        assert!(ok(&viewer, Need::Read));
        assert!(!ok(&viewer, Need::Change("dev")));
        assert!(!ok(&viewer, Need::ReadSecrets("dev")));
        assert!(!ok(&viewer, Need::Admin));
        assert!(!ok(&viewer, Need::ChangeSome));
        assert!(ok(&op_dev, Need::ChangeSome) && ok(&admin, Need::ChangeSome));
        assert_eq!(
            check_fleet(None, Need::Read),
            Err(AuthzError::Unauthenticated)
        );
        let status: tonic::Status = check_fleet(Some(&viewer), Need::Change("dev"))
            .unwrap_err()
            .into();
        assert_eq!(status.code(), tonic::Code::PermissionDenied);
    }

    #[test]
    fn node_speaks_only_for_itself() {
        let node = Identity::Node("mk33".into());
        assert_eq!(check_node(Some(&node), "mk33"), Ok("mk33"));
        assert!(check_node(Some(&node), "mk34").is_err());
        assert!(check_node(Some(&user(Role::Admin, &[])), "mk33").is_err());
        assert_eq!(check_node(None, "mk33"), Err(AuthzError::Unauthenticated));
    }
}
