//! SSH public key validation as PVE does it for `ssh-public-keys` (`PVE::Tools::validate_ssh_public_keys`: every
//! non-blank line must be accepted by `ssh-keygen -l`, else `SSH public key validation error`). Here a line is
//! accepted when, after optional authorized_keys options, it has a known key type followed by base64 whose
//! embedded type name is the same and which carries key material.

use base64::Engine;

use crate::error::{Result, SimError};

const KEY_TYPES: &[&str] = &[
    "ssh-rsa",
    "ssh-dss",
    "ssh-ed25519",
    "ecdsa-sha2-nistp256",
    "ecdsa-sha2-nistp384",
    "ecdsa-sha2-nistp521",
    "sk-ssh-ed25519@openssh.com",
    "sk-ecdsa-sha2-nistp256@openssh.com",
];

fn known_type(t: &str) -> bool {
    KEY_TYPES.contains(&t)
        || t.strip_suffix("-cert-v01@openssh.com").is_some_and(|b| {
            KEY_TYPES
                .iter()
                .any(|k| k.trim_end_matches("@openssh.com") == b)
        })
}

/// Whether one line is a public key `ssh-keygen -l` would fingerprint.
pub fn line_is_valid(line: &str) -> bool {
    let words: Vec<&str> = line.split_whitespace().collect();
    let Some(i) = words.iter().position(|w| known_type(w)) else {
        return false;
    };
    let Some(b64) = words.get(i + 1) else {
        return false;
    };
    let Ok(blob) = base64::engine::general_purpose::STANDARD.decode(b64) else {
        return false;
    };
    let Some(len) = blob
        .get(..4)
        .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]) as usize)
    else {
        return false;
    };
    let Some(name) = blob.get(4..4 + len) else {
        return false;
    };
    name == words[i].as_bytes() && blob.len() > 4 + len + 4
}

/// Validates the key text (one key per line) and returns the non-blank lines.
pub fn validate(raw: &str) -> Result<Vec<String>> {
    let mut keys = Vec::new();
    for line in raw.lines().filter(|l| !l.trim().is_empty()) {
        if !line_is_valid(line) {
            return Err(SimError::die("SSH public key validation error"));
        }
        keys.push(line.trim().to_string());
    }
    Ok(keys)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(kind: &str, material: &[u8]) -> String {
        let mut blob = (kind.len() as u32).to_be_bytes().to_vec();
        blob.extend_from_slice(kind.as_bytes());
        blob.extend_from_slice(&(material.len() as u32).to_be_bytes());
        blob.extend_from_slice(material);
        format!(
            "{kind} {} user@host",
            base64::engine::general_purpose::STANDARD.encode(blob)
        )
    }

    #[test]
    fn accepts_keys_with_and_without_options() {
        let k = key("ssh-ed25519", &[7; 32]);
        assert!(line_is_valid(&k));
        assert!(line_is_valid(&format!("no-pty,command=\"x\" {k}")));
        assert_eq!(validate(&format!("\n{k}\n\n{k}\n")).unwrap().len(), 2);
    }

    #[test]
    fn rejects_garbage_and_mismatched_types() {
        assert!(!line_is_valid("not a key"));
        assert!(!line_is_valid("ssh-ed25519 !!!notbase64"));
        assert!(!line_is_valid("ssh-ed25519 bm90IGEga2V5"));
        let rsa_blob_named_ed = key("ssh-rsa", &[1; 64]).replacen("ssh-rsa", "ssh-ed25519", 1);
        assert!(!line_is_valid(&rsa_blob_named_ed));
        let e = validate("ssh-rsa AAAA\n").unwrap_err();
        assert_eq!(e.render(None), "SSH public key validation error\n");
    }
}
