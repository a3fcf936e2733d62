//! The controller's PKI on disk: `pxcontroller init` makes the CA, the server certificate, the first admin
//! client bundle (keys 0600) and a pxctl config pointing at them; `load` reads the CA and server identity back
//! for `run`.

use std::path::{Path, PathBuf};

use pxfleet_common::Clock;
use pxfleet_tls::{Bundle, BundlePaths, Ca, Identity, Role};

use crate::config::{Config, TlsConfig};
use crate::store::{SerialRecord, Store, StoreError};

#[derive(Debug, thiserror::Error)]
pub enum PkiError {
    #[error(
        "{path} already exists; refusing to overwrite an existing PKI (remove it to start over)"
    )]
    Exists { path: PathBuf },
    #[error("TLS: {0}")]
    Tls(#[from] pxfleet_tls::TlsError),
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot write {path}: {source}")]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// What `init` wrote.
#[derive(Debug, Clone)]
pub struct InitReport {
    pub ca_cert: PathBuf,
    pub server_cert: PathBuf,
    pub admin: BundlePaths,
    pub pxctl_config: PathBuf,
    pub ca_fingerprint: String,
}

/// Creates the PKI under `data_dir` (`pki/` for the CA and server, `admin/` for the admin bundle and its
/// pxctl config). `sans` are the server certificate's names (DNS names or IP addresses); `controller_url` goes
/// into the pxctl config.
pub fn init(
    data_dir: &Path,
    sans: &[String],
    controller_url: &str,
) -> Result<InitReport, PkiError> {
    let tls = TlsConfig::default();
    let ca_cert = data_dir.join(&tls.ca_cert);
    if ca_cert.exists() {
        return Err(PkiError::Exists { path: ca_cert });
    }
    let ca = Ca::generate("pxfleet controller CA")?;
    pxfleet_tls::write_file(&ca_cert, ca.cert_pem().as_bytes(), pxfleet_tls::CERT_MODE)?;
    pxfleet_tls::write_file(
        &data_dir.join(&tls.ca_key),
        ca.key_pem().as_bytes(),
        pxfleet_tls::KEY_MODE,
    )?;
    let mut names: Vec<String> = sans.to_vec();
    for default in ["localhost", "127.0.0.1"] {
        if !names.iter().any(|n| n == default) {
            names.push(default.to_string());
        }
    }
    let server = ca.issue_server(&names)?.into_bundle(ca.cert_pem());
    let server_paths = BundlePaths {
        ca: ca_cert.clone(),
        cert: data_dir.join(&tls.server_cert),
        key: data_dir.join(&tls.server_key),
    };
    server.write(&server_paths)?;
    let admin_id = Identity::user("admin", Role::Admin, &[])?;
    let admin_creds = ca.issue_client(&admin_id, pxfleet_tls::DEFAULT_CLIENT_VALIDITY)?;
    let serial = admin_creds.cert.serial.as_str().to_string();
    let admin_creds_not_after = admin_creds.cert.not_after;
    let admin = admin_creds.into_bundle(ca.cert_pem());
    let admin_paths = BundlePaths::in_dir(&data_dir.join("admin"), "admin");
    admin.write(&admin_paths)?;
    let pxctl_config = data_dir.join("admin").join("pxctl.toml");
    let text = format!(
        "# pxctl configuration for the first admin (copy to ~/.config/pxctl/config.toml)\n\
         controller = {:?}\nca = {:?}\ncert = {:?}\nkey = {:?}\n",
        controller_url,
        admin_paths.ca.display().to_string(),
        admin_paths.cert.display().to_string(),
        admin_paths.key.display().to_string(),
    );
    pxfleet_tls::write_file(&pxctl_config, text.as_bytes(), pxfleet_tls::KEY_MODE)?;
    // Record the admin serial so it can be listed and revoked later.
    let store = Store::open(&data_dir.join("db"))?;
    store.put_serial(&SerialRecord {
        serial,
        subject: admin_id.uri(),
        issued_ms: Clock::system().now_ms(),
        revoked: false,
        not_after_ms: crate::identities::millis(admin_creds_not_after),
    })?;
    drop(store);
    Ok(InitReport {
        ca_fingerprint: ca.fingerprint_sha256(),
        ca_cert,
        server_cert: server_paths.cert,
        admin: admin_paths,
        pxctl_config,
    })
}

fn read(path: &Path) -> Result<String, PkiError> {
    std::fs::read_to_string(path).map_err(|source| PkiError::Read {
        path: path.to_path_buf(),
        source,
    })
}

/// The CA (with its key, to sign at enrolment) and the server bundle named by the config.
pub fn load(config: &Config) -> Result<(Ca, Bundle), PkiError> {
    let t = &config.tls;
    let ca_pem = read(&config.resolve(&t.ca_cert))?;
    let ca = Ca::from_pem(&ca_pem, &read(&config.resolve(&t.ca_key))?)?;
    let server = Bundle {
        ca_pem,
        cert_pem: read(&config.resolve(&t.server_cert))?,
        key_pem: read(&config.resolve(&t.server_key))?,
    };
    Ok((ca, server))
}

/// The PEM texts of `tls.extra_client_cas` (CAs whose client certificates are still accepted during a CA
/// rotation).
pub fn extra_client_cas(config: &Config) -> Result<Vec<String>, PkiError> {
    config
        .tls
        .extra_client_cas
        .iter()
        .map(|p| read(&config.resolve(p)))
        .collect()
}

/// What `reissue-server-cert` wrote.
#[derive(Debug, Clone)]
pub struct Reissued {
    pub server_cert: PathBuf,
    /// The previous certificate and key, kept as `server.pem.old` / `server.key.old`.
    pub backup_cert: PathBuf,
    pub old_names: Vec<String>,
    pub names: Vec<String>,
    pub not_after: time::OffsetDateTime,
}

/// Reissues the controller's server certificate with new names (`sans`, plus localhost and 127.0.0.1) and a
/// new key, signed by the same CA: nodes and users keep their certificates, since they trust the CA, not
/// this certificate. The previous files are kept beside it (`.old`). The running controller uses the new
/// certificate after a restart.
pub fn reissue_server(config: &Config, sans: &[String]) -> Result<Reissued, PkiError> {
    let (ca, old) = load(config)?;
    let mut names: Vec<String> = sans.to_vec();
    for default in ["localhost", "127.0.0.1"] {
        if !names.iter().any(|n| n == default) {
            names.push(default.to_string());
        }
    }
    let old_names = pxfleet_tls::server_names(&old.cert_pem);
    let t = &config.tls;
    let cert_path = config.resolve(&t.server_cert);
    let key_path = config.resolve(&t.server_key);
    let backup_cert = cert_path.with_extension("pem.old");
    pxfleet_tls::write_file(
        &backup_cert,
        old.cert_pem.as_bytes(),
        pxfleet_tls::CERT_MODE,
    )?;
    pxfleet_tls::write_file(
        &key_path.with_extension("key.old"),
        old.key_pem.as_bytes(),
        pxfleet_tls::KEY_MODE,
    )?;
    let server = ca.issue_server(&names)?;
    let not_after = server.cert.not_after;
    pxfleet_tls::write_file(
        &cert_path,
        server.cert.cert_pem.as_bytes(),
        pxfleet_tls::CERT_MODE,
    )?;
    pxfleet_tls::write_file(&key_path, server.key_pem.as_bytes(), pxfleet_tls::KEY_MODE)?;
    Ok(Reissued {
        server_cert: cert_path,
        backup_cert,
        old_names,
        names,
        not_after,
    })
}

/// Files of a CA rotation, beside the CA in `pki/`.
#[derive(Debug, Clone)]
pub struct RotationPaths {
    /// The next CA (made by `prepare`).
    pub next_cert: PathBuf,
    pub next_key: PathBuf,
    /// Current and next CA certificates concatenated: the ca.pem every agent and pxctl user needs during the
    /// overlap.
    pub bundle: PathBuf,
    /// The previous CA after `switch` (listed in `tls.extra_client_cas` during the overlap).
    pub old_cert: PathBuf,
    pub old_key: PathBuf,
}

impl RotationPaths {
    pub fn of(config: &Config) -> RotationPaths {
        let ca = config.resolve(&config.tls.ca_cert);
        let dir = ca.parent().map(Path::to_path_buf).unwrap_or_default();
        RotationPaths {
            next_cert: dir.join("ca-next.pem"),
            next_key: dir.join("ca-next.key"),
            bundle: dir.join("ca-bundle.pem"),
            old_cert: dir.join("ca-old.pem"),
            old_key: dir.join("ca-old.key"),
        }
    }
}

/// CA rotation, step 1: makes the next CA (`pki/ca-next.pem`, key 0600) and `pki/ca-bundle.pem` (current +
/// next). Nothing changes for the running controller; distribute the bundle as every client's ca.pem.
pub fn rotate_ca_prepare(config: &Config) -> Result<RotationPaths, PkiError> {
    let paths = RotationPaths::of(config);
    if paths.next_cert.exists() {
        return Err(PkiError::Exists {
            path: paths.next_cert,
        });
    }
    let current = read(&config.resolve(&config.tls.ca_cert))?;
    // A name of its own: with two CAs of the same name trusted at once, certificate path building may pick
    // the wrong one and report a bad signature.
    let next = Ca::generate(&format!(
        "pxfleet controller CA {}",
        crate::identities::when(Clock::system().now_ms())
    ))?;
    pxfleet_tls::write_file(
        &paths.next_key,
        next.key_pem().as_bytes(),
        pxfleet_tls::KEY_MODE,
    )?;
    pxfleet_tls::write_file(
        &paths.next_cert,
        next.cert_pem().as_bytes(),
        pxfleet_tls::CERT_MODE,
    )?;
    let bundle = format!("{}\n{}", current.trim_end(), next.cert_pem());
    pxfleet_tls::write_file(&paths.bundle, bundle.as_bytes(), pxfleet_tls::CERT_MODE)?;
    Ok(paths)
}

/// CA rotation, step 2: the next CA becomes the CA (the previous one is kept as `pki/ca-old.*`), and the
/// server certificate is reissued by it with the same names. Add `extra_client_cas = ["pki/ca-old.pem"]` to
/// `[tls]` and restart: certificates of the old CA keep working until they are renewed or reissued.
pub fn rotate_ca_switch(config: &Config) -> Result<RotationPaths, PkiError> {
    let paths = RotationPaths::of(config);
    let next_cert = read(&paths.next_cert)?;
    let next = Ca::from_pem(&next_cert, &read(&paths.next_key)?)?;
    let (old, server) = load(config)?;
    pxfleet_tls::write_file(
        &paths.old_key,
        old.key_pem().as_bytes(),
        pxfleet_tls::KEY_MODE,
    )?;
    pxfleet_tls::write_file(
        &paths.old_cert,
        old.cert_pem().as_bytes(),
        pxfleet_tls::CERT_MODE,
    )?;
    let t = &config.tls;
    pxfleet_tls::write_file(
        &config.resolve(&t.ca_key),
        next.key_pem().as_bytes(),
        pxfleet_tls::KEY_MODE,
    )?;
    pxfleet_tls::write_file(
        &config.resolve(&t.ca_cert),
        next.cert_pem().as_bytes(),
        pxfleet_tls::CERT_MODE,
    )?;
    let names = pxfleet_tls::server_names(&server.cert_pem);
    let reissued = next.issue_server(&names)?;
    pxfleet_tls::write_file(
        &config.resolve(&t.server_cert),
        reissued.cert.cert_pem.as_bytes(),
        pxfleet_tls::CERT_MODE,
    )?;
    pxfleet_tls::write_file(
        &config.resolve(&t.server_key),
        reissued.key_pem.as_bytes(),
        pxfleet_tls::KEY_MODE,
    )?;
    let _ = std::fs::remove_file(&paths.next_key);
    let _ = std::fs::remove_file(&paths.next_cert);
    Ok(paths)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn init_writes_private_keys_0600_and_refuses_to_overwrite() {
        let dir = tempfile::tempdir().unwrap();
        let r = init(
            dir.path(),
            &["ctl.example".into()],
            "https://ctl.example:8443",
        )
        .unwrap();
        for key in [
            dir.path().join("pki/ca.key"),
            dir.path().join("pki/server.key"),
            r.admin.key.clone(),
        ] {
            let mode = std::fs::metadata(&key).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o600, "{}", key.display());
        }
        let cfg = std::fs::read_to_string(&r.pxctl_config).unwrap();
        assert!(
            cfg.contains("controller = \"https://ctl.example:8443\""),
            "{cfg}"
        );
        let admin =
            pxfleet_tls::CertInfo::from_pem(&std::fs::read_to_string(&r.admin.cert).unwrap())
                .unwrap();
        assert_eq!(
            admin.identity,
            Some(Identity::user("admin", Role::Admin, &[]).unwrap())
        );
        let config = Config {
            data_dir: dir.path().to_path_buf(),
            ..Config::default()
        };
        let (ca, _server) = load(&config).unwrap();
        assert_eq!(ca.fingerprint_sha256(), r.ca_fingerprint);
        assert!(matches!(
            init(dir.path(), &[], "https://x:1"),
            Err(PkiError::Exists { .. })
        ));
    }

    #[test]
    fn the_server_certificate_is_reissued_with_new_names_by_the_same_ca() {
        let dir = tempfile::tempdir().unwrap();
        init(
            dir.path(),
            &["ctl.example".into()],
            "https://ctl.example:8443",
        )
        .unwrap();
        let config = Config {
            data_dir: dir.path().to_path_buf(),
            ..Config::default()
        };
        let (ca_before, _) = load(&config).unwrap();
        let r = reissue_server(&config, &["ctl.new.example".into(), "10.0.0.5".into()]).unwrap();
        assert!(
            r.old_names.contains(&"ctl.example".to_string()),
            "{:?}",
            r.old_names
        );
        assert_eq!(
            r.names,
            ["ctl.new.example", "10.0.0.5", "localhost", "127.0.0.1"]
        );
        let (ca_after, server) = load(&config).unwrap();
        assert_eq!(
            ca_after.fingerprint_sha256(),
            ca_before.fingerprint_sha256()
        );
        assert_eq!(pxfleet_tls::server_names(&server.cert_pem), r.names);
        assert!(r.backup_cert.exists());
        let mode = std::fs::metadata(dir.path().join("pki/server.key.old"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        // The new key and certificate belong together.
        pxfleet_tls::server_config(&server, std::sync::Arc::new(pxfleet_tls::NoRevocation))
            .unwrap();
    }
}
