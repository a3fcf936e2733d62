//! Credential files: a [`Bundle`] is the CA certificate, one certificate and its private key, as PEM files.
//! Keys are written with mode 0600 (created so, never widened later); writes go through a temporary file and a
//! rename so a crash never leaves half a key.

use std::fmt;
use std::fs;
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::{Credentials, TlsError};

/// Mode of private key files.
pub const KEY_MODE: u32 = 0o600;
/// Mode of certificate files.
pub const CERT_MODE: u32 = 0o644;

/// Where a bundle's three files live.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BundlePaths {
    pub ca: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl BundlePaths {
    /// `DIR/ca.pem`, `DIR/NAME.pem`, `DIR/NAME.key` (e.g. name `server`, `admin`, `node`).
    pub fn in_dir(dir: &Path, name: &str) -> BundlePaths {
        BundlePaths {
            ca: dir.join("ca.pem"),
            cert: dir.join(format!("{name}.pem")),
            key: dir.join(format!("{name}.key")),
        }
    }
}

/// A CA certificate, a certificate it issued and that certificate's private key, all PEM.
#[derive(Clone, PartialEq, Eq)]
pub struct Bundle {
    pub ca_pem: String,
    pub cert_pem: String,
    /// Secret.
    pub key_pem: String,
}

impl fmt::Debug for Bundle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Bundle")
            .field("ca_pem", &self.ca_pem)
            .field("cert_pem", &self.cert_pem)
            .field("key_pem", &"<redacted>")
            .finish()
    }
}

impl Credentials {
    /// Pairs these credentials with the CA certificate that issued them.
    pub fn into_bundle(self, ca_pem: &str) -> Bundle {
        Bundle {
            ca_pem: ca_pem.to_string(),
            cert_pem: self.cert.cert_pem,
            key_pem: self.key_pem,
        }
    }
}

impl Bundle {
    /// Writes the three files (creating parent directories); the key with mode 0600.
    pub fn write(&self, paths: &BundlePaths) -> Result<(), TlsError> {
        write_file(&paths.ca, self.ca_pem.as_bytes(), CERT_MODE)?;
        write_file(&paths.cert, self.cert_pem.as_bytes(), CERT_MODE)?;
        write_file(&paths.key, self.key_pem.as_bytes(), KEY_MODE)?;
        Ok(())
    }

    /// Reads the three files back; refuses a key file that group or others can read.
    pub fn read(paths: &BundlePaths) -> Result<Bundle, TlsError> {
        let key_mode = fs::metadata(&paths.key)
            .map_err(|source| TlsError::Io {
                action: "reading",
                path: paths.key.clone(),
                source,
            })?
            .permissions()
            .mode();
        if key_mode & 0o077 != 0 {
            return Err(TlsError::Pem {
                what: format!("private key {}", paths.key.display()),
                reason: format!(
                    "is readable by group or others (mode {:o}); run chmod 600 on it",
                    key_mode & 0o777
                ),
            });
        }
        Ok(Bundle {
            ca_pem: read_file(&paths.ca)?,
            cert_pem: read_file(&paths.cert)?,
            key_pem: read_file(&paths.key)?,
        })
    }
}

fn read_file(path: &Path) -> Result<String, TlsError> {
    fs::read_to_string(path).map_err(|source| TlsError::Io {
        action: "reading",
        path: path.to_path_buf(),
        source,
    })
}

/// Writes `contents` to `path` atomically with `mode` (a temporary sibling created with that mode, then renamed).
pub fn write_file(path: &Path, contents: &[u8], mode: u32) -> Result<(), TlsError> {
    let io = |action: &'static str, p: &Path| {
        let p = p.to_path_buf();
        move |source| TlsError::Io {
            action,
            path: p,
            source,
        }
    };
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        fs::create_dir_all(dir).map_err(io("creating directory", dir))?;
    }
    let file_name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = path.with_file_name(format!(".{file_name}.tmp"));
    let _ = fs::remove_file(&tmp);
    let mut file = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(&tmp)
        .map_err(io("creating", &tmp))?;
    // The umask may have narrowed the mode; set it exactly.
    file.set_permissions(fs::Permissions::from_mode(mode))
        .map_err(io("setting permissions of", &tmp))?;
    file.write_all(contents).map_err(io("writing", &tmp))?;
    file.sync_all().map_err(io("syncing", &tmp))?;
    drop(file);
    fs::rename(&tmp, path).map_err(io("renaming into place", path))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Ca, Identity, Role};
    use std::time::Duration;

    #[test]
    fn bundle_round_trips_with_a_0600_key() {
        let dir = tempfile::tempdir().unwrap();
        let ca = Ca::generate("ca").unwrap();
        let admin = ca
            .issue_client(
                &Identity::user("admin", Role::Admin, &[]).unwrap(),
                Duration::from_secs(60),
            )
            .unwrap()
            .into_bundle(ca.cert_pem());
        let paths = BundlePaths::in_dir(&dir.path().join("pki"), "admin");
        admin.write(&paths).unwrap();
        assert_eq!(
            fs::metadata(&paths.key).unwrap().permissions().mode() & 0o777,
            0o600
        );
        assert_eq!(
            fs::metadata(&paths.cert).unwrap().permissions().mode() & 0o777,
            0o644
        );
        assert_eq!(Bundle::read(&paths).unwrap(), admin);
        assert!(!format!("{admin:?}").contains("PRIVATE KEY"));

        // Overwriting keeps the mode and replaces the content.
        let again = ca
            .issue_client(
                &Identity::user("admin", Role::Admin, &[]).unwrap(),
                Duration::from_secs(60),
            )
            .unwrap()
            .into_bundle(ca.cert_pem());
        again.write(&paths).unwrap();
        assert_eq!(Bundle::read(&paths).unwrap(), again);
        assert_eq!(
            fs::metadata(&paths.key).unwrap().permissions().mode() & 0o777,
            0o600
        );
    }

    #[test]
    fn a_world_readable_key_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let paths = BundlePaths::in_dir(dir.path(), "node");
        Bundle {
            ca_pem: "ca".into(),
            cert_pem: "cert".into(),
            key_pem: "key".into(),
        }
        .write(&paths)
        .unwrap();
        fs::set_permissions(&paths.key, fs::Permissions::from_mode(0o644)).unwrap();
        let err = Bundle::read(&paths).unwrap_err().to_string();
        assert!(
            err.contains("chmod 600") && err.contains("node.key"),
            "{err}"
        );
    }

    #[test]
    fn a_missing_file_names_its_path() {
        let dir = tempfile::tempdir().unwrap();
        let err = Bundle::read(&BundlePaths::in_dir(dir.path(), "x"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("x.key"), "{err}");
    }
}
