//! Who a certificate speaks for: [`Identity`] (a node, or a user with a [`Role`]) and its URI SAN form
//! (`pxfleet://node/NAME`, `pxfleet://user/NAME?role=ROLE[&fleets=A,B]`), plus the small authorization
//! questions every service asks of it.

use std::fmt;
use std::str::FromStr;

use x509_parser::extensions::GeneralName;

use crate::TlsError;

/// URI scheme of identity SANs.
pub const SCHEME: &str = "pxfleet://";

/// What a user certificate may do. Nodes are not a role here but their own [`Identity::Node`] variant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Role {
    /// Everything: fleets, nodes, join tokens, certificates.
    Admin,
    /// Plan, submit and destroy (limited to [`Identity::User::fleets`] when that is not empty), and read.
    Operator,
    /// Read only.
    Viewer,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Admin => "admin",
            Role::Operator => "operator",
            Role::Viewer => "viewer",
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Role {
    type Err = TlsError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "admin" => Ok(Role::Admin),
            "operator" => Ok(Role::Operator),
            "viewer" => Ok(Role::Viewer),
            other => Err(TlsError::identity(
                format!("role={other}"),
                "unknown role; expected admin, operator or viewer",
            )),
        }
    }
}

/// The holder of a certificate, carried in exactly one `pxfleet://` URI SAN.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Identity {
    /// A pxagent; speaks only for the PVE node of that name.
    Node(String),
    /// A person or a CI job using pxctl.
    User {
        name: String,
        role: Role,
        /// Operator only: the fleets it may change; empty = all fleets.
        fleets: Vec<String>,
    },
}

impl Identity {
    /// A node identity, with the name checked.
    pub fn node(name: &str) -> Result<Identity, TlsError> {
        let id = Identity::Node(name.to_string());
        id.validate()?;
        Ok(id)
    }

    /// A user identity, with the name, role and fleets checked.
    pub fn user(name: &str, role: Role, fleets: &[&str]) -> Result<Identity, TlsError> {
        let id = Identity::User {
            name: name.to_string(),
            role,
            fleets: fleets.iter().map(|f| f.to_string()).collect(),
        };
        id.validate()?;
        Ok(id)
    }

    /// Checks names against what the URI form allows; `parse` and the issuing functions call this.
    pub fn validate(&self) -> Result<(), TlsError> {
        match self {
            Identity::Node(name) => {
                check_node_name(name).map_err(|r| TlsError::identity(self.uri(), r))
            }
            Identity::User { name, role, fleets } => {
                check_user_name(name).map_err(|r| TlsError::identity(self.uri(), r))?;
                if !fleets.is_empty() && *role != Role::Operator {
                    return Err(TlsError::identity(
                        self.uri(),
                        "fleets may only limit an operator; admins and viewers cover all fleets",
                    ));
                }
                for (i, fleet) in fleets.iter().enumerate() {
                    check_fleet_name(fleet).map_err(|r| TlsError::identity(self.uri(), r))?;
                    if fleets[..i].contains(fleet) {
                        return Err(TlsError::identity(
                            self.uri(),
                            format!("fleet {fleet:?} is listed twice"),
                        ));
                    }
                }
                Ok(())
            }
        }
    }

    /// The URI SAN form, e.g. `pxfleet://user/alice?role=operator&fleets=dev,prod`.
    pub fn uri(&self) -> String {
        match self {
            Identity::Node(name) => format!("{SCHEME}node/{name}"),
            Identity::User { name, role, fleets } if fleets.is_empty() => {
                format!("{SCHEME}user/{name}?role={role}")
            }
            Identity::User { name, role, fleets } => {
                format!(
                    "{SCHEME}user/{name}?role={role}&fleets={}",
                    fleets.join(",")
                )
            }
        }
    }

    /// Parses the URI SAN form; unknown parameters, a missing role or bad names are errors.
    pub fn parse(uri: &str) -> Result<Identity, TlsError> {
        let err = |reason: &str| TlsError::identity(uri, reason);
        let rest = uri
            .strip_prefix(SCHEME)
            .ok_or_else(|| err("must start with pxfleet://"))?;
        let (path, query) = match rest.split_once('?') {
            Some((p, q)) => (p, Some(q)),
            None => (rest, None),
        };
        let (kind, name) = path
            .split_once('/')
            .ok_or_else(|| err("expected pxfleet://node/NAME or pxfleet://user/NAME?role=ROLE"))?;
        let id = match kind {
            "node" => {
                if query.is_some() {
                    return Err(err("a node identity takes no parameters"));
                }
                Identity::Node(name.to_string())
            }
            "user" => {
                let mut role = None;
                let mut fleets = None;
                for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
                    let (key, value) = pair
                        .split_once('=')
                        .ok_or_else(|| err("parameters must be key=value"))?;
                    match key {
                        "role" if role.is_none() => role = Some(value.parse::<Role>()?),
                        "fleets" if fleets.is_none() => {
                            if value.is_empty() {
                                return Err(err(
                                    "fleets= is empty; leave it out to mean all fleets",
                                ));
                            }
                            fleets = Some(value.split(',').map(str::to_string).collect::<Vec<_>>())
                        }
                        "role" | "fleets" => return Err(err(&format!("{key} is given twice"))),
                        other => {
                            return Err(err(&format!(
                                "unknown parameter {other:?}; expected role and optionally fleets"
                            )))
                        }
                    }
                }
                Identity::User {
                    name: name.to_string(),
                    role: role
                        .ok_or_else(|| err("a user identity needs role=admin|operator|viewer"))?,
                    fleets: fleets.unwrap_or_default(),
                }
            }
            other => {
                return Err(err(&format!(
                    "unknown kind {other:?}; expected node or user"
                )))
            }
        };
        id.validate()?;
        Ok(id)
    }

    /// Reads the identity from a DER certificate: exactly one `pxfleet://` URI SAN must be present.
    /// Does not verify the certificate; the TLS layer has done that for peer certificates.
    pub fn from_cert_der(der: &[u8]) -> Result<Identity, TlsError> {
        let (_, cert) = x509_parser::parse_x509_certificate(der)
            .map_err(|e| TlsError::cert("parsing DER", e.to_string()))?;
        let san = cert
            .subject_alternative_name()
            .map_err(|e| TlsError::cert("reading subjectAltName", e.to_string()))?;
        let mut found = None;
        for name in san.iter().flat_map(|s| s.value.general_names.iter()) {
            if let GeneralName::URI(uri) = name {
                if uri.starts_with(SCHEME) {
                    if found.is_some() {
                        return Err(TlsError::cert(
                            "identity",
                            "more than one pxfleet:// URI SAN; a certificate speaks for one identity",
                        ));
                    }
                    found = Some(Identity::parse(uri)?);
                }
            }
        }
        found.ok_or_else(|| TlsError::cert("identity", "no pxfleet:// URI SAN"))
    }

    /// The node name when this is a node identity.
    pub fn node_name(&self) -> Option<&str> {
        match self {
            Identity::Node(name) => Some(name),
            Identity::User { .. } => None,
        }
    }

    /// The user's role, `None` for a node.
    pub fn role(&self) -> Option<Role> {
        match self {
            Identity::Node(_) => None,
            Identity::User { role, .. } => Some(*role),
        }
    }

    /// Admin-only actions: join tokens, cordon, certificates.
    pub fn is_admin(&self) -> bool {
        self.role() == Some(Role::Admin)
    }

    /// Read access to the fleet API (every user role; never a node).
    pub fn can_read(&self) -> bool {
        self.role().is_some()
    }

    /// Plan/submit/destroy for `fleet`: admins, and operators unless their fleet list excludes it.
    pub fn can_change_fleet(&self, fleet: &str) -> bool {
        match self {
            Identity::User {
                role: Role::Admin, ..
            } => true,
            Identity::User {
                role: Role::Operator,
                fleets,
                ..
            } => fleets.is_empty() || fleets.iter().any(|f| f == fleet),
            _ => false,
        }
    }

    /// Whether this identity may speak for PVE node `node` on the agent stream.
    pub fn is_node(&self, node: &str) -> bool {
        self.node_name() == Some(node)
    }
}

impl fmt::Display for Identity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.uri())
    }
}

impl FromStr for Identity {
    type Err = TlsError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Identity::parse(s)
    }
}

/// PVE node names are host names: one DNS label.
fn check_node_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 63
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
        && !name.starts_with('-')
        && !name.ends_with('-');
    if ok {
        Ok(())
    } else {
        Err(format!(
            "node name {name:?} must be a DNS label: 1-63 letters, digits or '-', not starting or ending with '-'"
        ))
    }
}

fn check_user_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '@'));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "user name {name:?} must be 1-64 of letters, digits, '.', '_', '-', '@', starting with a letter or digit"
        ))
    }
}

fn check_fleet_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "fleet name {name:?} must be 1-64 of letters, digits, '.', '_', '-', starting with a letter or digit"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uris_round_trip() {
        for uri in [
            "pxfleet://node/mk33",
            "pxfleet://user/alice?role=admin",
            "pxfleet://user/bob@example.org?role=viewer",
            "pxfleet://user/ci-bot?role=operator&fleets=dev,prod",
        ] {
            let id = Identity::parse(uri).unwrap();
            assert_eq!(id.uri(), uri);
        }
        assert_eq!(
            Identity::parse("pxfleet://user/carol?role=operator&fleets=dev").unwrap(),
            Identity::user("carol", Role::Operator, &["dev"]).unwrap()
        );
        // Parameter order does not matter.
        assert_eq!(
            Identity::parse("pxfleet://user/carol?fleets=dev&role=operator").unwrap(),
            Identity::user("carol", Role::Operator, &["dev"]).unwrap()
        );
    }

    #[test]
    fn bad_uris_say_what_is_wrong() {
        let cases = [
            ("https://node/mk33", "must start with pxfleet://"),
            ("pxfleet://node/mk_33", "DNS label"),
            ("pxfleet://node/", "DNS label"),
            ("pxfleet://node/mk33?role=admin", "no parameters"),
            ("pxfleet://user/alice", "needs role="),
            ("pxfleet://user/alice?role=root", "unknown role"),
            ("pxfleet://user/alice?role=admin&role=viewer", "given twice"),
            (
                "pxfleet://user/alice?role=viewer&fleets=dev",
                "only limit an operator",
            ),
            ("pxfleet://user/alice?role=operator&fleets=", "is empty"),
            (
                "pxfleet://user/alice?role=operator&fleets=dev,dev",
                "listed twice",
            ),
            (
                "pxfleet://user/alice?role=operator&team=x",
                "unknown parameter",
            ),
            ("pxfleet://group/ops", "unknown kind"),
            ("pxfleet://user/al ice?role=admin", "user name"),
        ];
        for (uri, expected) in cases {
            let err = Identity::parse(uri).unwrap_err().to_string();
            assert!(err.contains(expected), "{uri}: {err}");
        }
    }

    #[test]
    fn authorization_questions() {
        let admin = Identity::user("a", Role::Admin, &[]).unwrap();
        let op_all = Identity::user("o", Role::Operator, &[]).unwrap();
        let op_dev = Identity::user("d", Role::Operator, &["dev"]).unwrap();
        let viewer = Identity::user("v", Role::Viewer, &[]).unwrap();
        let node = Identity::node("mk33").unwrap();

        assert!(admin.can_change_fleet("prod") && admin.is_admin() && admin.can_read());
        assert!(op_all.can_change_fleet("prod") && !op_all.is_admin());
        assert!(op_dev.can_change_fleet("dev") && !op_dev.can_change_fleet("prod"));
        assert!(viewer.can_read() && !viewer.can_change_fleet("dev"));
        assert!(!node.can_read() && !node.can_change_fleet("dev") && !node.is_admin());
        assert!(node.is_node("mk33") && !node.is_node("mk34") && !admin.is_node("mk33"));
    }
}
