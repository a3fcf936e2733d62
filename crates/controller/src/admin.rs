//! The `pxcontroller` subcommands other than `dev`: init, run, reissue-server-cert, rotate-ca, seal-key,
//! backup, restore and validate-config. Each loads what it needs, does the work through the library and
//! writes the operator's lines to `out`; `main.rs` only parses arguments, sets up tracing, calls one of
//! these and turns an [`AdminError`] into the one-line message and exit code.

use std::future::Future;
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::backup::s3::S3BackupError;
use crate::backup::BackupError;
use crate::config::{Config, ConfigError};
use crate::datadir::DataDirError;
use crate::pki::{self, PkiError};
use crate::seal::{SealError, SealKey};
use crate::server::ServerError;

/// Why a subcommand failed; the message (with its causes) is what the operator sees.
#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Pki(#[from] PkiError),
    #[error(transparent)]
    DataDir(#[from] DataDirError),
    #[error(transparent)]
    Server(#[from] ServerError),
    #[error(transparent)]
    Seal(#[from] SealError),
    #[error(transparent)]
    Backup(#[from] BackupError),
    #[error(transparent)]
    S3(#[from] S3BackupError),
    /// A listen address, data dir or file that could not be used.
    #[error("{what}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    /// A flag that needs a config section the config does not have, or flags that do not go together.
    #[error("{0}")]
    Usage(String),
    /// stdout went away.
    #[error("writing the report: {0}")]
    Output(#[source] std::io::Error),
}

pub type Result<T, E = AdminError> = std::result::Result<T, E>;

/// `writeln!` to the report, its error an [`AdminError::Output`].
macro_rules! say {
    ($out:expr, $($arg:tt)*) => {
        writeln!($out, $($arg)*).map_err(AdminError::Output)?
    };
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> AdminError {
    let what = what.into();
    move |source| AdminError::Io { what, source }
}

/// `pxcontroller init`: the CA, the server certificate, the first admin bundle and its pxctl config.
pub fn init(
    data_dir: &Path,
    san: &[String],
    url: Option<String>,
    out: &mut impl Write,
) -> Result<()> {
    let host = san.first().cloned().unwrap_or_else(|| "localhost".into());
    let url = url.unwrap_or_else(|| format!("https://{host}:8443"));
    let r = pki::init(data_dir, san, &url)?;
    say!(out, "CA certificate:     {}", r.ca_cert.display());
    say!(out, "CA fingerprint:     {}", r.ca_fingerprint);
    say!(out, "server certificate: {}", r.server_cert.display());
    say!(out, "admin certificate:  {}", r.admin.cert.display());
    say!(out, "admin key:          {}", r.admin.key.display());
    say!(out, "pxctl config:       {}", r.pxctl_config.display());
    Ok(())
}

/// `pxcontroller run`: serves until `shutdown` resolves.
pub async fn run(config: &Path, shutdown: impl Future<Output = ()> + Send + 'static) -> Result<()> {
    let cfg = Config::load(config)?;
    // a second controller on a held data dir is refused before it touches the listen addresses
    drop(crate::datadir::DataDirLock::acquire(&cfg.data_dir)?);
    let listener = tokio::net::TcpListener::bind(cfg.listen)
        .await
        .map_err(io(format!("binding {}", cfg.listen)))?;
    let metrics = tokio::net::TcpListener::bind(cfg.metrics_listen)
        .await
        .map_err(io(format!("binding {}", cfg.metrics_listen)))?;
    crate::server::run(cfg, listener, metrics, shutdown).await?;
    Ok(())
}

/// `pxcontroller reissue-server-cert`: a new server certificate with the names `san`, same CA.
pub fn reissue_server_cert(config: &Path, san: &[String], out: &mut impl Write) -> Result<()> {
    let cfg = Config::load(config)?;
    let r = pki::reissue_server(&cfg, san)?;
    say!(out, "server certificate: {}", r.server_cert.display());
    say!(out, "previous names:     {}", r.old_names.join(", "));
    say!(out, "names:              {}", r.names.join(", "));
    say!(out, "valid until:        {}", r.not_after);
    say!(
        out,
        "previous files:     {} (and the key beside it)",
        r.backup_cert.display()
    );
    say!(
        out,
        "restart pxcontroller to serve it; agents and pxctl reconnect without new certificates"
    );
    Ok(())
}

/// The steps of `pxcontroller rotate-ca`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RotateStep {
    Prepare,
    Switch,
}

/// `pxcontroller rotate-ca prepare|switch`.
pub fn rotate_ca(config: &Path, step: RotateStep, out: &mut impl Write) -> Result<()> {
    let cfg = Config::load(config)?;
    match step {
        RotateStep::Prepare => {
            let p = pki::rotate_ca_prepare(&cfg)?;
            say!(out, "next CA:   {}", p.next_cert.display());
            say!(out, "CA bundle: {} (current + next)", p.bundle.display());
            say!(
                out,
                "next: install the bundle as ca.pem on every node (/etc/pxagent/ca.pem) and restart pxagent; \
                 give it to pxctl users as their ca.pem; then run `pxcontroller rotate-ca switch`"
            );
        }
        RotateStep::Switch => {
            let p = pki::rotate_ca_switch(&cfg)?;
            say!(out, "previous CA kept as {}", p.old_cert.display());
            say!(
                out,
                "next: add to the [tls] section of {}:\n  extra_client_cas = [{:?}]\nrestart pxcontroller, \
                 renew the nodes (`pxagent renew`, or wait for their own renewal) and reissue user certificates \
                 (`pxctl user request` / `pxctl user issue`); then remove extra_client_cas, restart, and drop the \
                 old CA from the clients' ca.pem",
                config.display(),
                p.old_cert.display().to_string()
            );
        }
    }
    Ok(())
}

/// `pxcontroller seal-key`: creates the seal key at `file` (default: the config's `seal_key`) unless it
/// exists, and names its id.
pub fn seal_key(file: Option<PathBuf>, config: &Path, out: &mut impl Write) -> Result<()> {
    let path = match file {
        Some(f) => f,
        None => Config::load(config)?.seal_key_path(),
    };
    let key = if path.exists() {
        SealKey::load(&path)?
    } else {
        SealKey::create(&path)?
    };
    say!(out, "seal key {}: id {}", path.display(), key.id_hex());
    Ok(())
}

/// `pxcontroller backup`: the whole state to `out_file`, and/or uploaded to `[backup.s3]` (`s3`).
pub async fn backup(
    config: &Path,
    out_file: Option<PathBuf>,
    s3: bool,
    out: &mut impl Write,
) -> Result<()> {
    let cfg = Config::load(config)?;
    let s3 = match s3 {
        true => Some(cfg.backup.s3.clone().ok_or_else(|| {
            AdminError::Usage(format!(
                "--s3: no [backup.s3] section in {}",
                config.display()
            ))
        })?),
        false => None,
    };
    let dir = upload_dir(&cfg)?;
    let file = out_file
        .clone()
        .unwrap_or_else(|| dir.join("upload.pxbackup"));
    let s = crate::backup::backup(&cfg.data_dir, &file)?;
    say!(
        out,
        "backup: {} trees, {} entries, {} bytes, sha256 {}",
        s.trees,
        s.entries,
        s.bytes,
        s.sha256
    );
    if out_file.is_some() {
        say!(out, "written to {}", file.display());
    }
    if let Some(s3) = s3 {
        let data = std::fs::read(&file).map_err(io(file.display().to_string()))?;
        let key = s3.key_for(pxfleet_common::Clock::system().now_ms());
        let uploaded = s3.put(&key, &data).await;
        if out_file.is_none() {
            let _ = std::fs::remove_file(&file);
        }
        uploaded?;
        say!(
            out,
            "uploaded to {} (restore: --from-s3 {key})",
            s3.url(&key)
        );
    }
    Ok(())
}

/// Where a backup bound only for S3 is written first: the data dir's parent would do, the data dir is simplest.
fn upload_dir(cfg: &Config) -> Result<PathBuf> {
    std::fs::create_dir_all(&cfg.data_dir)
        .map_err(io(format!("data dir {}", cfg.data_dir.display())))?;
    Ok(cfg.data_dir.clone())
}

/// `pxcontroller restore`: the state from the file `from` or the S3 object `from_s3` into the data dir.
pub async fn restore(
    config: &Path,
    from: Option<PathBuf>,
    from_s3: Option<String>,
    force: bool,
    out: &mut impl Write,
) -> Result<()> {
    let cfg = Config::load(config)?;
    let s = match (from, from_s3) {
        (Some(from), _) => crate::backup::restore(&cfg.data_dir, &from, force)?,
        (None, Some(key)) => {
            let s3 = cfg.backup.s3.clone().ok_or_else(|| {
                AdminError::Usage(format!(
                    "--from-s3: no [backup.s3] section in {}",
                    config.display()
                ))
            })?;
            let data = s3.get(&key).await?;
            let url = PathBuf::from(s3.url(&key));
            crate::backup::restore_bytes(&cfg.data_dir, &data, &url, force)?
        }
        (None, None) => {
            return Err(AdminError::Usage(
                "give --from FILE or --from-s3 KEY".into(),
            ))
        }
    };
    say!(
        out,
        "restored into {}: {} trees, {} entries (sha256 {}); start pxcontroller with the same seal key",
        cfg.db_path().display(),
        s.trees,
        s.entries,
        s.sha256
    );
    Ok(())
}

/// `pxcontroller validate-config`.
pub fn validate_config(file: &Path, out: &mut impl Write) -> Result<()> {
    Config::load(file)?;
    say!(out, "{}: ok", file.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn init_reports_what_it_wrote_and_refuses_a_second_time() {
        let dir = tempfile::tempdir().unwrap();
        let mut out = Vec::new();
        init(dir.path(), &["ctl.example".into()], None, &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(text.contains("CA fingerprint:"), "{text}");
        assert!(text.contains("pxctl config:"), "{text}");
        let err = init(dir.path(), &[], None, &mut Vec::new()).unwrap_err();
        assert!(err.to_string().contains("already exists"), "{err}");
    }

    #[test]
    fn validate_config_refuses_a_missing_file() {
        let dir = tempfile::tempdir().unwrap();
        let err = validate_config(&dir.path().join("missing.toml"), &mut Vec::new()).unwrap_err();
        assert!(matches!(err, AdminError::Config(_)), "{err}");
    }
}
