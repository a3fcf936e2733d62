//! Certificates and join tokens in words a person can act on: why a join token is refused, the serial records
//! behind `pxctl user list` and node certificate renewal (grpc/agent_service.rs `renew`), and why a down node will
//! not come back by itself (its certificate expired or was revoked).

use pxfleet_tls::{Identity, IssuedCert, JoinToken};
use time::OffsetDateTime;

use crate::model::Millis;
use crate::store::{SerialRecord, TokenRecord};

/// Milliseconds since the epoch of a certificate time (0 before the epoch).
pub fn millis(t: OffsetDateTime) -> Millis {
    u64::try_from(t.unix_timestamp_nanos() / 1_000_000).unwrap_or(0)
}

/// RFC 3339 text of a millisecond timestamp, for messages.
pub fn when(ms: Millis) -> String {
    OffsetDateTime::from_unix_timestamp_nanos(ms as i128 * 1_000_000)
        .ok()
        .and_then(|t| {
            t.format(&time::format_description::well_known::Rfc3339)
                .ok()
        })
        .unwrap_or_else(|| format!("{ms} ms after the epoch"))
}

/// The store record of a certificate issued for `identity` at `now`.
pub fn serial_record(cert: &IssuedCert, identity: &Identity, now: Millis) -> SerialRecord {
    SerialRecord {
        serial: cert.serial.as_str().to_string(),
        subject: identity.uri(),
        issued_ms: now,
        revoked: false,
        not_after_ms: millis(cert.not_after),
    }
}

/// Why `Enroll` refuses `token` for `node`, precisely. The reason is given only when the token's secret
/// matches (or for things the caller already knows: the id, the fingerprint), so refusals tell a guesser
/// nothing. `rec` is the stored record for the token's id.
pub fn token_refusal(
    rec: Option<&TokenRecord>,
    token: &JoinToken,
    node: &str,
    now: Millis,
    ca_fingerprint: &str,
) -> String {
    let new_token = format!("ask an admin for a new one: `pxctl node token create --node {node}`");
    if token.ca_fingerprint != ca_fingerprint {
        return format!(
            "join token {} was made by another controller (it pins CA {}, this controller's CA is {}): \
             check --controller, or get a token from this controller",
            token.id, token.ca_fingerprint, ca_fingerprint
        );
    }
    let Some(rec) = rec.filter(|r| token.matches_hash(&r.hash)) else {
        return format!(
            "join token {} is unknown to this controller or its secret does not match (copy the whole token); \
             {new_token}",
            token.id
        );
    };
    if let Some(used) = rec.used_ms {
        return format!(
            "join token {} was already used at {} (tokens are single-use); {new_token}",
            token.id,
            when(used)
        );
    }
    if now >= rec.expires_ms {
        return format!(
            "join token {} expired at {}; {new_token} (use --ttl for a longer lifetime)",
            token.id,
            when(rec.expires_ms)
        );
    }
    if !rec.node.is_empty() && rec.node != node {
        return format!(
            "join token {} is for node {}, not {node}: run `pxagent join` with --node {} on that node, or {}",
            token.id,
            rec.node,
            rec.node,
            new_token
        );
    }
    format!("join token {} was refused; {new_token}", token.id)
}

/// Why a down node's agent cannot reconnect by itself, if its newest certificate expired or was revoked.
pub fn node_cert_problem(serials: &[SerialRecord], node: &str, now: Millis) -> Option<String> {
    let subject = Identity::Node(node.to_string()).uri();
    let newest = serials
        .iter()
        .filter(|s| s.subject == subject)
        .max_by_key(|s| s.issued_ms)?;
    let again = format!(
        "enrol it again: `pxctl node token create --node {node}`, then on the node `pxagent join --node {node}` \
         with that token"
    );
    if newest.revoked {
        return Some(format!(
            "its certificate (serial {}) was revoked, so its agent is refused; {again}",
            newest.serial
        ));
    }
    if newest.not_after_ms != 0 && newest.not_after_ms <= now {
        return Some(format!(
            "its certificate (serial {}) expired at {} while its agent was away (renewal needs a valid \
             certificate), so it needs a new join token; {again}",
            newest.serial,
            when(newest.not_after_ms)
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    const FP: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    fn rec(token: &JoinToken, node: &str, expires_ms: Millis, used: Option<Millis>) -> TokenRecord {
        TokenRecord {
            id: token.id.clone(),
            hash: token.secret_hash(),
            node: node.into(),
            created_by: String::new(),
            created_ms: 0,
            expires_ms,
            used_ms: used,
        }
    }

    #[test]
    fn token_refusals_name_the_cause_and_the_fix() {
        let t = JoinToken::generate(FP).unwrap();
        let used = token_refusal(Some(&rec(&t, "", 10_000, Some(5))), &t, "mk1", 6, FP);
        assert!(
            used.contains("already used") && used.contains("pxctl node token create --node mk1"),
            "{used}"
        );
        let expired = token_refusal(Some(&rec(&t, "", 10, None)), &t, "mk1", 20, FP);
        assert!(expired.contains("expired"), "{expired}");
        let other = token_refusal(Some(&rec(&t, "mk2", 10_000, None)), &t, "mk1", 20, FP);
        assert!(other.contains("is for node mk2, not mk1"), "{other}");
        let foreign = token_refusal(None, &t, "mk1", 20, &"f".repeat(64));
        assert!(foreign.contains("another controller"), "{foreign}");
        // A wrong secret learns nothing about the record.
        let guess = JoinToken::generate(FP).unwrap();
        let mut r = rec(&t, "mk2", 10, Some(1));
        r.id = guess.id.clone();
        let text = token_refusal(Some(&r), &guess, "mk1", 20, FP);
        assert!(
            text.contains("unknown") && !text.contains("used") && !text.contains("mk2"),
            "{text}"
        );
    }

    #[test]
    fn a_down_node_with_an_expired_or_revoked_certificate_is_explained() {
        let subject = "pxfleet://node/mk1".to_string();
        let mut s = SerialRecord {
            serial: "4a".into(),
            subject: subject.clone(),
            issued_ms: 1,
            revoked: false,
            not_after_ms: 1000,
        };
        assert_eq!(
            node_cert_problem(std::slice::from_ref(&s), "mk1", 999),
            None
        );
        let expired = node_cert_problem(std::slice::from_ref(&s), "mk1", 1000).unwrap();
        assert!(
            expired.contains("expired") && expired.contains("new join token"),
            "{expired}"
        );
        // A newer, valid certificate wins.
        let newer = SerialRecord {
            serial: "4b".into(),
            issued_ms: 2,
            not_after_ms: 5000,
            ..s.clone()
        };
        assert_eq!(node_cert_problem(&[s.clone(), newer], "mk1", 1000), None);
        s.revoked = true;
        assert!(node_cert_problem(&[s], "mk1", 0)
            .unwrap()
            .contains("revoked"));
    }
}
