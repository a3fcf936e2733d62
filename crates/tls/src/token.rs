//! Join tokens for node enrolment: `pxf1.<id>.<secret>.<ca-fingerprint>`. The id names the token in the
//! controller's store, the secret proves possession (the controller stores only its SHA-256), and the CA
//! fingerprint lets the agent pin the controller's CA before it has it. Single use and expiry are enforced by
//! the controller's store.

use std::fmt;
use std::str::FromStr;

use sha2::{Digest, Sha256};

use crate::ca::normalize_fingerprint;
use crate::TlsError;

const PREFIX: &str = "pxf1";
const ID_BYTES: usize = 8;
const SECRET_BYTES: usize = 32;

/// A parsed join token. `Debug` hides the secret; [`JoinToken::reveal`] gives the full text (show it once).
#[derive(Clone, PartialEq, Eq)]
pub struct JoinToken {
    /// 16 lowercase hex digits.
    pub id: String,
    secret: String,
    /// SHA-256 of the CA certificate, 64 lowercase hex digits.
    pub ca_fingerprint: String,
}

impl JoinToken {
    /// A fresh token (random id and secret) for the CA with this fingerprint.
    pub fn generate(ca_fingerprint: &str) -> Result<JoinToken, TlsError> {
        let mut id = [0u8; ID_BYTES];
        let mut secret = [0u8; SECRET_BYTES];
        crate::random_bytes(&mut id)?;
        crate::random_bytes(&mut secret)?;
        Ok(JoinToken {
            id: hex::encode(id),
            secret: hex::encode(secret),
            ca_fingerprint: normalize_fingerprint(ca_fingerprint)?,
        })
    }

    /// The whole token text, to hand to `pxagent join --token`.
    pub fn reveal(&self) -> String {
        format!(
            "{PREFIX}.{}.{}.{}",
            self.id, self.secret, self.ca_fingerprint
        )
    }

    /// SHA-256 (hex) of the secret: what the controller stores.
    pub fn secret_hash(&self) -> String {
        hex::encode(Sha256::digest(self.secret.as_bytes()))
    }

    /// Whether this token's secret hashes to `stored_hash` (constant-time comparison).
    pub fn matches_hash(&self, stored_hash: &str) -> bool {
        let ours = self.secret_hash();
        if ours.len() != stored_hash.len() {
            return false;
        }
        ours.bytes()
            .zip(stored_hash.bytes())
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0
    }
}

impl fmt::Debug for JoinToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JoinToken")
            .field("id", &self.id)
            .field("secret", &"<redacted>")
            .field("ca_fingerprint", &self.ca_fingerprint)
            .finish()
    }
}

impl FromStr for JoinToken {
    type Err = TlsError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = |reason: &str| TlsError::Token {
            reason: reason.to_string(),
        };
        let parts: Vec<&str> = s.trim().split('.').collect();
        let [prefix, id, secret, fp] = parts[..] else {
            return Err(err(
                "expected pxf1.<id>.<secret>.<ca-fingerprint> (four parts separated by '.')",
            ));
        };
        if prefix != PREFIX {
            return Err(err(
                "unknown token version; expected it to start with pxf1.",
            ));
        }
        let is_hex =
            |v: &str, len: usize| v.len() == len && v.chars().all(|c| c.is_ascii_hexdigit());
        if !is_hex(id, ID_BYTES * 2) {
            return Err(err("the id part must be 16 hex digits"));
        }
        if !is_hex(secret, SECRET_BYTES * 2) {
            return Err(err("the secret part must be 64 hex digits"));
        }
        let ca_fingerprint = normalize_fingerprint(fp)
            .map_err(|_| err("the CA fingerprint part must be 64 hex digits"))?;
        Ok(JoinToken {
            id: id.to_ascii_lowercase(),
            secret: secret.to_ascii_lowercase(),
            ca_fingerprint,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FP: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    #[test]
    fn token_round_trips_and_hides_its_secret() {
        let t = JoinToken::generate(FP).unwrap();
        let text = t.reveal();
        assert!(text.starts_with("pxf1.") && text.ends_with(FP));
        let back: JoinToken = text.parse().unwrap();
        assert_eq!(back, t);
        assert!(back.matches_hash(&t.secret_hash()));
        let debug = format!("{t:?}");
        assert!(!debug.contains(&t.secret) && debug.contains(&t.id));
        assert_ne!(JoinToken::generate(FP).unwrap().id, t.id);
    }

    #[test]
    fn a_different_secret_does_not_match() {
        let a = JoinToken::generate(FP).unwrap();
        let b = JoinToken::generate(FP).unwrap();
        assert!(!b.matches_hash(&a.secret_hash()));
        assert!(!a.matches_hash("short"));
    }

    #[test]
    fn malformed_tokens_are_explained_without_echoing_them() {
        let secret = "s".repeat(64);
        let cases = [
            ("pxf1.abc".to_string(), "four parts"),
            (
                "pxf2.0123456789abcdef.".to_string() + &"a".repeat(64) + "." + FP,
                "version",
            ),
            (
                "pxf1.xyz.".to_string() + &"a".repeat(64) + "." + FP,
                "id part",
            ),
            (
                "pxf1.0123456789abcdef.".to_string() + &secret + "." + FP,
                "secret part",
            ),
            (
                "pxf1.0123456789abcdef.".to_string() + &"a".repeat(64) + ".zz",
                "fingerprint part",
            ),
        ];
        for (text, expected) in cases {
            let err = text.parse::<JoinToken>().unwrap_err().to_string();
            assert!(err.contains(expected), "{text}: {err}");
            assert!(!err.contains(&secret));
        }
    }
}
