//! Syntax checks of single values, as PVE and the RFCs define them: hostnames (RFC 1123
//! labels), fleet names, PVE tags, storage ids, bridges, template URLs and file names, OpenSSH
//! public keys, checksums. Each returns `Err(what would be right)`.

use base64::Engine as _;

/// An RFC 1123 label: 1..=63 letters, digits and `-`, not starting or ending with `-`.
pub fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// A DNS name: dot-separated labels, at most 253 characters.
pub fn is_dns_name(s: &str) -> bool {
    let s = s.strip_suffix('.').unwrap_or(s);
    !s.is_empty() && s.len() <= 253 && s.split('.').all(is_dns_label)
}

/// Fleet name: lower-case letters, digits and `-` (1..=63, starting with a letter or digit).
pub fn is_fleet_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
}

/// PVE's tag syntax (`pve-tag`): `[a-z0-9_][a-z0-9_\-+.]*`, case-insensitive.
pub fn is_pve_tag(s: &str) -> bool {
    let mut bytes = s.bytes();
    match bytes.next() {
        Some(b) if b.is_ascii_alphanumeric() || b == b'_' => {}
        _ => return false,
    }
    bytes.all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'+' | b'.'))
}

pub use pxfleet_pvekeys::is_storage_id;

/// A Linux bridge name: 1..=15 of letters, digits, `_`, `-`, `.`.
pub fn is_bridge_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 15
        && s.bytes()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
}

/// Template, label and constraint keys: letters, digits, `.`, `_`, `-`, `/`.
pub fn is_simple_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 128
        && s.bytes()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.' | b'/'))
}

/// Template file extensions PVE accepts in a `vztmpl` storage.
pub const TEMPLATE_EXTENSIONS: [&str; 4] = [".tar.gz", ".tar.xz", ".tar.zst", ".tar.bz2"];

/// A file name PVE accepts as a container template.
pub fn check_template_file_name(name: &str) -> Result<(), String> {
    let lower = name.to_ascii_lowercase();
    if name.is_empty() || name.contains('/') || name.starts_with('.') {
        return Err("a file name such as debian-12-standard_12.7-1_amd64.tar.zst".into());
    }
    if !TEMPLATE_EXTENSIONS.iter().any(|e| lower.ends_with(e)) {
        return Err(format!(
            "a file name ending in one of {}",
            TEMPLATE_EXTENSIONS.join(", ")
        ));
    }
    Ok(())
}

/// An http(s) URL with a host and a template file name at the end of its path.
pub fn check_template_url(url: &str) -> Result<(), String> {
    let rest = if let Some(r) = url.strip_prefix("https://") {
        r
    } else if let Some(r) = url.strip_prefix("http://") {
        r
    } else {
        return Err("an http:// or https:// URL".into());
    };
    if url.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err("a URL without spaces (percent-encode them as %20)".into());
    }
    let host_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let host = &rest[..host_end];
    if host.is_empty() || host.starts_with(':') || host.contains('@') {
        return Err("a URL with a host name, e.g. https://images.example.org/x.tar.xz".into());
    }
    if !rest[host_end..].starts_with('/') {
        return Err("a URL whose path names the template file".into());
    }
    check_template_file_name(crate::model::url_file_name(url))
        .map_err(|e| format!("a URL whose last path segment is {e}"))
}

/// A hex checksum of `len` hex digits.
pub fn check_hex(s: &str, len: usize) -> Result<String, String> {
    if s.len() != len {
        return Err(format!("{len} hex digits, got {}", s.len()));
    }
    if !s.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(format!(
            "{len} hex digits (0-9, a-f), got a non-hex character"
        ));
    }
    Ok(s.to_ascii_lowercase())
}

/// OpenSSH public key types we accept.
pub const SSH_KEY_TYPES: [&str; 8] = [
    "ssh-ed25519",
    "ssh-rsa",
    "ecdsa-sha2-nistp256",
    "ecdsa-sha2-nistp384",
    "ecdsa-sha2-nistp521",
    "sk-ssh-ed25519@openssh.com",
    "sk-ecdsa-sha2-nistp256@openssh.com",
    "ssh-dss",
];

/// A valid OpenSSH public key line: `TYPE BASE64 [comment]`, whose base64 blob decodes and
/// starts with the same type name. Returns the key normalised to one line.
pub fn check_ssh_key(line: &str) -> Result<String, String> {
    let line = line.trim();
    let mut parts = line.split_whitespace();
    let (Some(kind), Some(b64)) = (parts.next(), parts.next()) else {
        return Err(
            "an OpenSSH public key: `ssh-ed25519 AAAA... comment` (the content of a .pub file)"
                .into(),
        );
    };
    if !SSH_KEY_TYPES.contains(&kind) {
        if kind.contains("PRIVATE") || line.starts_with("-----") {
            return Err("a PUBLIC key (the .pub file); this looks like a private key".into());
        }
        return Err(format!(
            "an OpenSSH public key starting with one of {}; got '{}'",
            SSH_KEY_TYPES.join(", "),
            kind.chars().take(40).collect::<String>()
        ));
    }
    let blob = base64::engine::general_purpose::STANDARD
        .decode(b64)
        .map_err(|_| {
            "a key whose second part is valid base64 (was the key cut or wrapped?)".to_string()
        })?;
    if blob.len() < 4 {
        return Err("a complete key (the base64 part is too short)".into());
    }
    let n = u32::from_be_bytes([blob[0], blob[1], blob[2], blob[3]]) as usize;
    if blob.len() < 4 + n || &blob[4..4 + n] != kind.as_bytes() {
        return Err(format!(
            "a key whose base64 part encodes a {kind} key (it does not)"
        ));
    }
    let comment: Vec<&str> = parts.collect();
    Ok(if comment.is_empty() {
        format!("{kind} {b64}")
    } else {
        format!("{kind} {b64} {}", comment.join(" "))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    pub const ED25519: &str = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl ops@example";

    #[test]
    fn labels() {
        assert!(is_dns_label("dev-nextcloud"));
        assert!(!is_dns_label("-a"));
        assert!(!is_dns_label("a_b"));
        assert!(!is_dns_label(&"a".repeat(64)));
    }

    #[test]
    fn tags() {
        assert!(is_pve_tag("web"));
        assert!(is_pve_tag("k8s.node+1"));
        assert!(!is_pve_tag("-x"));
        assert!(!is_pve_tag("a b"));
        assert!(!is_pve_tag(""));
    }

    #[test]
    fn urls() {
        assert!(check_template_url("https://h/x/ubuntu.tar.xz").is_ok());
        assert!(check_template_url("ftp://h/x.tar.xz").is_err());
        assert!(check_template_url("https:///x.tar.xz").is_err());
        assert!(check_template_url("https://h/x.iso").is_err());
    }

    #[test]
    fn ssh_keys() {
        assert!(check_ssh_key(ED25519).is_ok());
        assert!(check_ssh_key(
            "ssh-rsa AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl"
        )
        .is_err());
        assert!(check_ssh_key("ssh-ed25519 notbase64!!").is_err());
        assert!(check_ssh_key("hello").is_err());
    }
}
