//! Secrets sealed at rest. Root passwords (generated or given in a fleet file) are kept in the store's
//! `secrets` tree encrypted with ChaCha20-Poly1305 (ring's AEAD) under a 256-bit key that lives in its own file,
//! apart from the data directory (by default `seal.key` next to `controller.toml`, config key `seal_key`). A
//! copy of the data directory alone therefore reveals no password.
//!
//! Key file: one line, `pxfleet-seal-key-v1 <64 hex digits>`, mode 0600 (a key readable by group or others is
//! refused). It is created on first start when absent and the store holds nothing sealed yet; when the store
//! holds sealed values and the key file is missing or is another key, opening fails with a message naming the
//! file and the key ids, never with garbage.
//!
//! A sealed value is `PXS1` | key id (8 bytes) | nonce (12 bytes, random) | ciphertext and tag. The associated
//! data binds it to its tree and key (`secrets` + fleet name), so a sealed value moved to another fleet's key
//! does not open.

use std::path::{Path, PathBuf};

use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, CHACHA20_POLY1305, NONCE_LEN};
use ring::rand::{SecureRandom, SystemRandom};
use sha2::{Digest, Sha256};

/// The first bytes of every sealed value (clear JSON values start with `{`).
pub const MAGIC: &[u8; 4] = b"PXS1";
/// The first word of a key file.
pub const KEY_FILE_HEADER: &str = "pxfleet-seal-key-v1";
/// The key file's mode.
pub const KEY_FILE_MODE: u32 = 0o600;
const KEY_LEN: usize = 32;
const ID_LEN: usize = 8;
const HEADER_LEN: usize = MAGIC.len() + ID_LEN + NONCE_LEN;

#[derive(Debug, thiserror::Error)]
pub enum SealError {
    #[error(
        "seal key file {} is missing, but the store holds secrets sealed with key {store_id}: restore that file \
         from your backup (or set `seal_key` in controller.toml to where it is); without it those passwords \
         cannot be read",
        path.display()
    )]
    Missing { path: PathBuf, store_id: String },
    #[error(
        "seal key file {} holds key {file_id}, but the store's secrets were sealed with key {store_id}: this is \
         not the key file of this data directory; restore the right one",
        path.display()
    )]
    WrongKey {
        path: PathBuf,
        file_id: String,
        store_id: String,
    },
    #[error("seal key file {}: {message}", path.display())]
    BadKeyFile { path: PathBuf, message: String },
    #[error("seal key file {}: {action}: {source}", path.display())]
    Io {
        path: PathBuf,
        action: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error("a sealed value in {what} is corrupt or was tampered with (authentication failed)")]
    Tampered { what: String },
    #[error(
        "a sealed value in {what} was sealed with key {value_id}, not this store's key {key_id}"
    )]
    OtherKey {
        what: String,
        value_id: String,
        key_id: String,
    },
    #[error("the store was opened without a seal key, so it cannot read or write secrets")]
    NoKey,
    #[error("the system random generator failed")]
    Random,
}

/// A sealing key. Its `Debug` shows only the key id.
pub struct SealKey {
    key: LessSafeKey,
    id: [u8; ID_LEN],
}

impl std::fmt::Debug for SealKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SealKey")
            .field("id", &self.id_hex())
            .finish_non_exhaustive()
    }
}

fn key_id(bytes: &[u8]) -> [u8; ID_LEN] {
    let mut h = Sha256::new();
    h.update(b"pxfleet seal key id\0");
    h.update(bytes);
    let d = h.finalize();
    let mut id = [0u8; ID_LEN];
    id.copy_from_slice(&d[..ID_LEN]);
    id
}

/// Whether `value` is a sealed value (else: a clear value from before sealing).
pub fn is_sealed(value: &[u8]) -> bool {
    value.starts_with(MAGIC)
}

/// The key id (hex) a sealed value names, if it is one.
pub fn sealed_key_id(value: &[u8]) -> Option<String> {
    if is_sealed(value) && value.len() >= HEADER_LEN {
        Some(hex::encode(&value[MAGIC.len()..MAGIC.len() + ID_LEN]))
    } else {
        None
    }
}

impl SealKey {
    fn from_bytes(bytes: &[u8; KEY_LEN]) -> SealKey {
        SealKey {
            key: LessSafeKey::new(UnboundKey::new(&CHACHA20_POLY1305, bytes).expect("32-byte key")),
            id: key_id(bytes),
        }
    }

    /// A new random key (kept in memory only; see [`SealKey::create`]).
    pub fn generate() -> Result<SealKey, SealError> {
        Ok(SealKey::from_bytes(&random_key()?))
    }

    /// The key id: 16 hex digits derived from the key (not secret; names the key in errors).
    pub fn id_hex(&self) -> String {
        hex::encode(self.id)
    }

    /// Writes a new random key to `path` (mode 0600, parent directories created), refusing to overwrite.
    pub fn create(path: &Path) -> Result<SealKey, SealError> {
        if path.exists() {
            return Err(SealError::BadKeyFile {
                path: path.to_path_buf(),
                message: "already exists; refusing to overwrite a seal key".into(),
            });
        }
        let bytes = random_key()?;
        let text = format!("{KEY_FILE_HEADER} {}\n", hex::encode(bytes));
        pxfleet_tls::write_file(path, text.as_bytes(), KEY_FILE_MODE).map_err(|e| {
            SealError::Io {
                path: path.to_path_buf(),
                action: "creating it (where the controller may not write, create it with \
                         `pxcontroller seal-key --file FILE` as root and give it to the controller's user)",
                source: std::io::Error::other(e.to_string()),
            }
        })?;
        Ok(SealKey::from_bytes(&bytes))
    }

    /// Reads a key file; refuses one readable by group or others, or not in the key file format.
    pub fn load(path: &Path) -> Result<SealKey, SealError> {
        use std::os::unix::fs::PermissionsExt;
        let bad = |message: String| SealError::BadKeyFile {
            path: path.to_path_buf(),
            message,
        };
        let meta = std::fs::metadata(path).map_err(|source| SealError::Io {
            path: path.to_path_buf(),
            action: "reading it",
            source,
        })?;
        let mode = meta.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            return Err(bad(format!(
                "is readable by group or others (mode {mode:o}); run chmod 600 on it"
            )));
        }
        let text = std::fs::read_to_string(path).map_err(|source| SealError::Io {
            path: path.to_path_buf(),
            action: "reading it",
            source,
        })?;
        let mut words = text.split_whitespace();
        if words.next() != Some(KEY_FILE_HEADER) {
            return Err(bad(format!(
                "line 1: expected `{KEY_FILE_HEADER} <64 hex digits>`"
            )));
        }
        let hex_key = words.next().unwrap_or_default();
        let mut bytes = [0u8; KEY_LEN];
        if hex::decode_to_slice(hex_key, &mut bytes).is_err() || words.next().is_some() {
            return Err(bad(format!(
                "line 1: expected `{KEY_FILE_HEADER} <64 hex digits>`"
            )));
        }
        Ok(SealKey::from_bytes(&bytes))
    }

    /// The key for a store: loads `path`, or creates it when it does not exist and the store holds nothing
    /// sealed yet (`store_id`: the key id of a sealed value in the store, if any). Checks that the key is the
    /// one the store's values were sealed with.
    pub fn load_or_create(path: &Path, store_id: Option<&str>) -> Result<SealKey, SealError> {
        let key = if path.exists() {
            SealKey::load(path)?
        } else if let Some(store_id) = store_id {
            return Err(SealError::Missing {
                path: path.to_path_buf(),
                store_id: store_id.to_string(),
            });
        } else {
            let key = SealKey::create(path)?;
            tracing::info!(path = %path.display(), key_id = %key.id_hex(), "created the seal key for secrets at rest");
            key
        };
        if let Some(store_id) = store_id {
            if store_id != key.id_hex() {
                return Err(SealError::WrongKey {
                    path: path.to_path_buf(),
                    file_id: key.id_hex(),
                    store_id: store_id.to_string(),
                });
            }
        }
        Ok(key)
    }

    /// Seals `plain`, bound to `aad` (what the value is: tree and key).
    pub fn seal(&self, aad: &[u8], plain: &[u8]) -> Result<Vec<u8>, SealError> {
        let mut nonce = [0u8; NONCE_LEN];
        SystemRandom::new()
            .fill(&mut nonce)
            .map_err(|_| SealError::Random)?;
        let mut out = Vec::with_capacity(HEADER_LEN + plain.len() + 16);
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&self.id);
        out.extend_from_slice(&nonce);
        let mut body = plain.to_vec();
        self.key
            .seal_in_place_append_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(aad),
                &mut body,
            )
            .map_err(|_| SealError::Random)?;
        out.extend_from_slice(&body);
        Ok(out)
    }

    /// Opens a sealed value; `what` names it in errors.
    pub fn open(&self, aad: &[u8], sealed: &[u8], what: &str) -> Result<Vec<u8>, SealError> {
        if !is_sealed(sealed) || sealed.len() < HEADER_LEN {
            return Err(SealError::Tampered { what: what.into() });
        }
        let id = &sealed[MAGIC.len()..MAGIC.len() + ID_LEN];
        if id != self.id {
            return Err(SealError::OtherKey {
                what: what.into(),
                value_id: hex::encode(id),
                key_id: self.id_hex(),
            });
        }
        let mut nonce = [0u8; NONCE_LEN];
        nonce.copy_from_slice(&sealed[MAGIC.len() + ID_LEN..HEADER_LEN]);
        let mut body = sealed[HEADER_LEN..].to_vec();
        let plain = self
            .key
            .open_in_place(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(aad),
                &mut body,
            )
            .map_err(|_| SealError::Tampered { what: what.into() })?;
        Ok(plain.to_vec())
    }
}

fn random_key() -> Result<[u8; KEY_LEN], SealError> {
    let mut bytes = [0u8; KEY_LEN];
    SystemRandom::new()
        .fill(&mut bytes)
        .map_err(|_| SealError::Random)?;
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn sealed_values_open_only_with_their_key_and_context() {
        let k = SealKey::generate().unwrap();
        let s = k.seal(b"secrets\0dev", b"hunter2-password").unwrap();
        assert!(is_sealed(&s));
        assert!(!s.windows(7).any(|w| w == b"hunter2"));
        assert_eq!(
            k.open(b"secrets\0dev", &s, "x").unwrap(),
            b"hunter2-password"
        );
        // moved to another fleet's key
        assert!(matches!(
            k.open(b"secrets\0prod", &s, "x"),
            Err(SealError::Tampered { .. })
        ));
        // one bit flipped
        let mut t = s.clone();
        *t.last_mut().unwrap() ^= 1;
        assert!(matches!(
            k.open(b"secrets\0dev", &t, "x"),
            Err(SealError::Tampered { .. })
        ));
        // another key
        let other = SealKey::generate().unwrap();
        let err = other.open(b"secrets\0dev", &s, "x").unwrap_err();
        assert!(matches!(err, SealError::OtherKey { .. }), "{err}");
        // two seals of the same value differ (random nonce)
        assert_ne!(s, k.seal(b"secrets\0dev", b"hunter2-password").unwrap());
    }

    #[test]
    fn key_file_is_created_0600_and_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("etc/seal.key");
        let k = SealKey::load_or_create(&path, None).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let again = SealKey::load_or_create(&path, Some(&k.id_hex())).unwrap();
        assert_eq!(again.id_hex(), k.id_hex());
        assert!(!format!("{k:?}").contains(&std::fs::read_to_string(&path).unwrap()[20..40]));
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let err = SealKey::load(&path).unwrap_err().to_string();
        assert!(err.contains("chmod 600"), "{err}");
    }

    #[test]
    fn a_missing_or_foreign_key_is_a_clear_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("seal.key");
        let err = SealKey::load_or_create(&path, Some("0011223344556677")).unwrap_err();
        let msg = err.to_string();
        assert!(matches!(err, SealError::Missing { .. }), "{msg}");
        assert!(
            msg.contains("seal.key is missing") && msg.contains("0011223344556677"),
            "{msg}"
        );
        assert!(!path.exists(), "no new key is made over sealed data");
        SealKey::create(&path).unwrap();
        let err = SealKey::load_or_create(&path, Some("0011223344556677")).unwrap_err();
        assert!(matches!(err, SealError::WrongKey { .. }), "{err}");
        std::fs::write(&path, "not a key\n").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        let err = SealKey::load(&path).unwrap_err().to_string();
        assert!(err.contains("line 1"), "{err}");
    }
}
