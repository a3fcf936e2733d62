//! Why a TLS handshake failed, in words a person can act on. [`Refusal::find`] walks an error's source chain
//! (tonic -> hyper -> io -> rustls) for the rustls error and tells which side refused and why:
//! - this client refused the controller's certificate (unknown CA, expired, wrong name, ...), from the
//!   verifier's own error;
//! - the controller refused this client's certificate, from the TLS alert it sent (`unknown_ca`,
//!   `certificate_expired`, `certificate_revoked`, `access_denied`, `bad_certificate`), which the
//!   controller's client verifier chooses precisely ([`crate::server_config`]).
//!
//! [`Refusal::fix`] adds what to do, worded for the program that failed ([`Audience`]).

use std::fmt;

use rustls::{AlertDescription, CertificateError};

/// Which side of the handshake said no.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefusedBy {
    /// The controller refused the certificate this client presented (it sent a TLS alert).
    Controller,
    /// This client refused the controller's certificate.
    Client,
}

/// Why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RefusalCause {
    /// Not signed by the CA the verifying side trusts.
    UnknownCa,
    /// Past its `notAfter` (or not valid yet: `not_yet` is true).
    Expired { not_yet: bool, detail: String },
    /// Revoked by an admin.
    Revoked,
    /// The controller's certificate does not name the host that was dialled.
    NameMismatch {
        expected: String,
        presented: Vec<String>,
    },
    /// Signed by the right CA but unusable: no `pxfleet://` identity, wrong key usage.
    NoIdentity,
    /// The controller wants a client certificate and none was sent.
    CertificateRequired,
    /// Anything else, with rustls's words.
    Other(String),
}

/// A classified handshake failure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub by: RefusedBy,
    pub cause: RefusalCause,
    /// The TLS alert name (`certificate_expired`) or rustls's own message.
    pub evidence: String,
}

/// Who reads the fix: the commands to suggest differ.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Audience {
    /// A pxctl user.
    Pxctl,
    /// The agent of this node (`pxagent run`).
    Agent { node: String },
    /// `pxagent join` (enrolment, no client certificate).
    Join,
}

fn alert_name(a: AlertDescription) -> String {
    // rustls's Debug is CamelCase (`CertificateExpired`); the RFC name is snake_case.
    let camel = format!("{a:?}");
    let mut out = String::new();
    for (i, c) in camel.chars().enumerate() {
        if c.is_ascii_uppercase() {
            if i > 0 {
                out.push('_');
            }
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    out.replace("unknown_c_a", "unknown_ca")
}

impl Refusal {
    /// The first rustls error in `err`'s source chain, classified; `None` when the failure was not TLS
    /// (connection refused, timeout, ...).
    pub fn find(err: &(dyn std::error::Error + 'static)) -> Option<Refusal> {
        let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(err);
        while let Some(e) = cur {
            if let Some(r) = e.downcast_ref::<rustls::Error>() {
                return Refusal::from_rustls(r);
            }
            if let Some(io) = e.downcast_ref::<std::io::Error>() {
                if let Some(r) = io
                    .get_ref()
                    .and_then(|inner| inner.downcast_ref::<rustls::Error>())
                {
                    return Refusal::from_rustls(r);
                }
            }
            cur = e.source();
        }
        None
    }

    /// Classifies one rustls error; `None` for errors that are not about certificates.
    pub fn from_rustls(e: &rustls::Error) -> Option<Refusal> {
        match e {
            rustls::Error::AlertReceived(alert) => {
                let cause = match alert {
                    AlertDescription::UnknownCA => RefusalCause::UnknownCa,
                    AlertDescription::CertificateExpired => RefusalCause::Expired {
                        not_yet: false,
                        detail: String::new(),
                    },
                    AlertDescription::CertificateRevoked => RefusalCause::Revoked,
                    AlertDescription::AccessDenied | AlertDescription::UnsupportedCertificate => {
                        RefusalCause::NoIdentity
                    }
                    AlertDescription::CertificateRequired => RefusalCause::CertificateRequired,
                    AlertDescription::BadCertificate
                    | AlertDescription::CertificateUnknown
                    | AlertDescription::DecryptError => RefusalCause::Other(
                        "the certificate is malformed or its signature does not verify".into(),
                    ),
                    _ => return None,
                };
                Some(Refusal {
                    by: RefusedBy::Controller,
                    cause,
                    evidence: format!("TLS alert {}", alert_name(*alert)),
                })
            }
            rustls::Error::InvalidCertificate(c) => {
                let cause = match c {
                    CertificateError::UnknownIssuer => RefusalCause::UnknownCa,
                    CertificateError::Expired => RefusalCause::Expired {
                        not_yet: false,
                        detail: String::new(),
                    },
                    CertificateError::ExpiredContext { time, not_after } => RefusalCause::Expired {
                        not_yet: false,
                        detail: format!(
                            "valid until {}, now {}",
                            unix(not_after.as_secs()),
                            unix(time.as_secs())
                        ),
                    },
                    CertificateError::NotValidYet => RefusalCause::Expired {
                        not_yet: true,
                        detail: String::new(),
                    },
                    CertificateError::NotValidYetContext { time, not_before } => {
                        RefusalCause::Expired {
                            not_yet: true,
                            detail: format!(
                                "valid from {}, now {}",
                                unix(not_before.as_secs()),
                                unix(time.as_secs())
                            ),
                        }
                    }
                    CertificateError::Revoked => RefusalCause::Revoked,
                    CertificateError::NotValidForName => RefusalCause::NameMismatch {
                        expected: String::new(),
                        presented: Vec::new(),
                    },
                    CertificateError::NotValidForNameContext {
                        expected,
                        presented,
                    } => RefusalCause::NameMismatch {
                        expected: server_name_text(expected),
                        presented: presented.clone(),
                    },
                    CertificateError::InvalidPurpose
                    | CertificateError::InvalidPurposeContext { .. } => RefusalCause::NoIdentity,
                    other => RefusalCause::Other(other.to_string()),
                };
                Some(Refusal {
                    by: RefusedBy::Client,
                    cause,
                    evidence: e.to_string(),
                })
            }
            _ => None,
        }
    }

    /// What to do about it, for `audience`.
    pub fn fix(&self, audience: &Audience) -> String {
        use RefusalCause::*;
        use RefusedBy::*;
        let new_user_cert =
            "make a new key and request with `pxctl user request NAME` and have an admin sign it \
                             with `pxctl user issue NAME.csr --role ROLE`";
        let reenrol = |node: &str| {
            format!(
                "enrol the node again with a new token: an admin runs `pxctl node token create --node {node}`, \
                 then on the node `pxagent join --controller URL --node {node}` with that token"
            )
        };
        let ca_file = match audience {
            Audience::Pxctl => "the `ca` file in your pxctl config",
            Audience::Agent { .. } => "the `ca` file in agent.toml",
            Audience::Join => "the CA fingerprint in the join token",
        };
        match (&self.by, &self.cause, audience) {
            (Controller, UnknownCa, Audience::Pxctl) => format!(
                "your pxctl config's cert and key were issued by another controller's CA (or this controller was \
                 re-initialised): point --config at this controller's pxctl.toml, or {new_user_cert}"
            ),
            (Controller, UnknownCa, Audience::Agent { node }) => format!(
                "this node's certificate was issued by another controller's CA (or the controller was \
                 re-initialised): {}",
                reenrol(node)
            ),
            (Controller, Expired { .. }, Audience::Pxctl) => format!(
                "the certificate is past its expiry (check this machine's clock too): {new_user_cert}"
            ),
            (Controller, Expired { .. }, Audience::Agent { node }) => format!(
                "the node certificate expired before it could be renewed (the agent was offline past its \
                 expiry; renewal needs a valid certificate, so a new token is needed): {}",
                reenrol(node)
            ),
            (Controller, Revoked, Audience::Pxctl) => format!(
                "an admin revoked this certificate (`pxctl user list` shows it); if you should still have \
                 access, {new_user_cert}"
            ),
            (Controller, Revoked, Audience::Agent { node }) => format!(
                "an admin revoked this node's certificate; if the node should rejoin, {}",
                reenrol(node)
            ),
            (Controller, NoIdentity, _) => format!(
                "the certificate is signed by the right CA but is not a pxfleet client certificate (no \
                 pxfleet:// identity or no clientAuth usage); use one made by `pxctl user issue` or \
                 `pxagent join`; {new_user_cert}"
            ),
            (Controller, CertificateRequired, _) => {
                "configure a client certificate (`cert` and `key`)".into()
            }
            (Controller, _, Audience::Agent { node }) => reenrol(node),
            (Controller, _, _) => new_user_cert.into(),
            (Client, UnknownCa, Audience::Join) => {
                "the controller at this URL is not the one that made the token (its CA has another fingerprint): \
                 check --controller, or ask that controller's admin for a token"
                    .into()
            }
            (Client, UnknownCa, _) => format!(
                "{ca_file} belongs to another controller (or this controller was re-initialised or its CA \
                 rotated): use the ca.pem of the controller you dial (`pxctl user issue` writes it; on the \
                 controller it is DATA_DIR/pki/ca.pem), or point the URL at the right controller"
            ),
            (Client, Expired { not_yet: true, .. }, _) => {
                "the controller's certificate is not valid yet: check the clocks of this machine and the \
                 controller"
                    .into()
            }
            (Client, Expired { .. }, _) => {
                "the controller's server certificate has expired: on the controller run `pxcontroller \
                 reissue-server-cert --config CONFIG` and restart it (nodes keep their certificates)"
                    .into()
            }
            (Client, NameMismatch { presented, .. }, aud) => {
                let names = if presented.is_empty() {
                    "a name in the certificate".to_string()
                } else {
                    presented.join(", ")
                };
                let set_name = match aud {
                    Audience::Pxctl => "set `server_name = \"NAME\"` in the pxctl config (or --server-name)",
                    _ => "use a URL with one of those names",
                };
                format!(
                    "dial the controller by one of the names its certificate lists ({names}), {set_name}, or \
                     reissue the server certificate with this name too: `pxcontroller reissue-server-cert \
                     --config CONFIG --san NAME ...` and restart the controller"
                )
            }
            (Client, Revoked, _) | (Client, NoIdentity, _) | (Client, CertificateRequired, _) => {
                "the controller presents a certificate that is not a pxfleet server certificate: check the URL"
                    .into()
            }
            (Client, Other(_), _) => format!("check the URL and {ca_file}"),
        }
    }
}

fn unix(secs: u64) -> String {
    time::OffsetDateTime::from_unix_timestamp(secs as i64)
        .ok()
        .and_then(|t| {
            t.format(&time::format_description::well_known::Rfc3339)
                .ok()
        })
        .unwrap_or_else(|| format!("{secs} s after the epoch"))
}

fn server_name_text(n: &rustls::pki_types::ServerName<'_>) -> String {
    match n {
        rustls::pki_types::ServerName::DnsName(d) => d.as_ref().to_string(),
        rustls::pki_types::ServerName::IpAddress(ip) => std::net::IpAddr::from(*ip).to_string(),
        other => format!("{other:?}"),
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use RefusalCause::*;
        let whose = match self.by {
            RefusedBy::Controller => "the controller refused this client's certificate",
            RefusedBy::Client => "this client refused the controller's certificate",
        };
        let why = match &self.cause {
            UnknownCa => match self.by {
                RefusedBy::Controller => "it was not issued by the controller's CA".to_string(),
                RefusedBy::Client => "it is not signed by the CA this client trusts".to_string(),
            },
            Expired { not_yet, detail } => {
                let what = if *not_yet {
                    "it is not valid yet"
                } else {
                    "it has expired"
                };
                if detail.is_empty() {
                    what.to_string()
                } else {
                    format!("{what} ({detail})")
                }
            }
            Revoked => "it has been revoked".to_string(),
            NameMismatch {
                expected,
                presented,
            } => format!(
                "it is not valid for the name {} (it names {})",
                if expected.is_empty() {
                    "dialled"
                } else {
                    expected
                },
                if presented.is_empty() {
                    "other names".to_string()
                } else {
                    presented.join(", ")
                }
            ),
            NoIdentity => "it is not a pxfleet client certificate".to_string(),
            CertificateRequired => "none was presented".to_string(),
            Other(s) => s.clone(),
        };
        write!(f, "{whose}: {why} ({})", self.evidence)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alerts_name_the_controller_and_the_cause() {
        let r = Refusal::from_rustls(&rustls::Error::AlertReceived(
            AlertDescription::CertificateExpired,
        ))
        .unwrap();
        assert_eq!(r.by, RefusedBy::Controller);
        let text = r.to_string();
        assert!(
            text.contains("controller refused")
                && text.contains("expired")
                && text.contains("certificate_expired"),
            "{text}"
        );
        let r = Refusal::from_rustls(&rustls::Error::AlertReceived(AlertDescription::UnknownCA))
            .unwrap();
        assert!(r.to_string().contains("unknown_ca"), "{r}");
        assert!(r.fix(&Audience::Pxctl).contains("pxctl user request"));
        assert!(r
            .fix(&Audience::Agent {
                node: "mk33".into()
            })
            .contains("pxctl node token create --node mk33"));
    }

    #[test]
    fn the_chain_is_walked_through_io_errors() {
        let io = std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            rustls::Error::InvalidCertificate(CertificateError::UnknownIssuer),
        );
        let r = Refusal::find(&io).unwrap();
        assert_eq!(
            (r.by, r.cause.clone()),
            (RefusedBy::Client, RefusalCause::UnknownCa)
        );
        assert!(r
            .fix(&Audience::Pxctl)
            .contains("`ca` file in your pxctl config"));
        let plain = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused");
        assert!(Refusal::find(&plain).is_none());
    }
}
