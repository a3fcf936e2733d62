//! The controller's TOML configuration (`/etc/pxcontroller/controller.toml`): what it listens on, where its
//! state and PKI live, the vm_id range it allocates from and the reconciler's timings. Unknown keys are refused.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

/// Default state directory (FHS: state under `/var/lib`).
pub const DEFAULT_DATA_DIR: &str = "/var/lib/pxcontroller";
/// The seal key's file name, next to the configuration file unless `seal_key` says otherwise.
pub const SEAL_KEY_FILE: &str = "seal.key";
/// Default path of the configuration file.
pub const DEFAULT_CONFIG_PATH: &str = "/etc/pxcontroller/controller.toml";

/// Errors reading or validating the configuration; each names the file and, where known, the line and column.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file cannot be read, or is not valid TOML for [`Config`] (names file:line:column).
    #[error(transparent)]
    File(#[from] pxfleet_common::TomlFileError),
    #[error("{path}: field `{field}`: {message}")]
    Invalid {
        path: PathBuf,
        field: &'static str,
        message: String,
    },
}

/// The whole configuration. Every field has a default, so an empty file is a valid configuration.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Where the sled database and the PKI live.
    pub data_dir: PathBuf,
    /// The one gRPC port (mutual TLS), for pxctl and agents alike.
    pub listen: SocketAddr,
    /// Plain-HTTP `/metrics` and `/healthz`; localhost by default because it is unauthenticated.
    pub metrics_listen: SocketAddr,
    /// Certificate paths; relative paths are taken relative to `data_dir`.
    pub tls: TlsConfig,
    /// The range vm_ids are allocated from when a container gives none.
    pub vm_ids: VmIdRange,
    /// Reconciler timings.
    pub reconciler: ReconcilerConfig,
    /// Lifetime of a join token made by `CreateJoinToken` when the caller gives none.
    pub join_token_ttl_secs: u64,
    /// The key file that seals secrets at rest (`crate::seal`); kept apart from `data_dir` so a copy of the
    /// data directory reveals no password. Default: `seal.key` in the directory of the config file (relative
    /// paths are taken relative to that directory); see [`Config::seal_key_path`].
    pub seal_key: Option<PathBuf>,
    /// Limits against a bad or hostile client ([`crate::limits`]).
    pub limits: crate::limits::LimitsConfig,
    /// Backup targets ([`crate::backup::s3`]).
    pub backup: crate::backup::s3::BackupConfig,
    /// Where template URLs may point ([`crate::templates::UrlPolicy`]).
    pub template_urls: crate::templates::UrlPolicy,
    /// Where the HTTP hooks written in operators' fleet files may send requests (admins' own hooks and the
    /// hooks defined under `hooks` are the admin's and not limited); same form as `template_urls`.
    pub hook_urls: crate::templates::UrlPolicy,
    /// Hooks fleets may use by name (`[hooks.NAME]`, docs/hooks.md), as written; checked into `hook_catalog`.
    pub hooks: std::collections::BTreeMap<String, toml::Value>,
    /// The definitions of `hooks`, checked.
    #[serde(skip)]
    pub hook_catalog: crate::hooks::HookCatalog,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            data_dir: PathBuf::from(DEFAULT_DATA_DIR),
            listen: "0.0.0.0:8443".parse().expect("literal address"),
            metrics_listen: "127.0.0.1:9090".parse().expect("literal address"),
            tls: TlsConfig::default(),
            vm_ids: VmIdRange::default(),
            reconciler: ReconcilerConfig::default(),
            join_token_ttl_secs: 3600,
            seal_key: None,
            limits: crate::limits::LimitsConfig::default(),
            backup: Default::default(),
            template_urls: Default::default(),
            hook_urls: Default::default(),
            hooks: Default::default(),
            hook_catalog: Default::default(),
        }
    }
}

/// Paths of the CA certificate (and key, used to sign node certificates at enrolment) and the server identity.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct TlsConfig {
    pub ca_cert: PathBuf,
    pub ca_key: PathBuf,
    pub server_cert: PathBuf,
    pub server_key: PathBuf,
    /// Lifetime of node certificates (enrolment and renewal), seconds. Agents renew when a third is left.
    pub node_cert_validity_secs: u64,
    /// Additional CA certificates (PEM files) trusted for client certificates during a CA rotation: nodes and
    /// users holding certificates of the old CA keep working until they renew (docs/security.md).
    pub extra_client_cas: Vec<PathBuf>,
}

impl Default for TlsConfig {
    fn default() -> Self {
        TlsConfig {
            ca_cert: PathBuf::from("pki/ca.pem"),
            ca_key: PathBuf::from("pki/ca.key"),
            server_cert: PathBuf::from("pki/server.pem"),
            server_key: PathBuf::from("pki/server.key"),
            node_cert_validity_secs: pxfleet_tls::DEFAULT_CLIENT_VALIDITY.as_secs(),
            extra_client_cas: Vec::new(),
        }
    }
}

/// An inclusive range of vm_ids. PVE accepts 100..=999999999; the default starts at 1000 to leave room for
/// hand-made containers.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct VmIdRange {
    pub first: u32,
    pub last: u32,
}

impl Default for VmIdRange {
    fn default() -> Self {
        VmIdRange {
            first: 1000,
            last: 999_999,
        }
    }
}

/// How the reconciler paces itself.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct ReconcilerConfig {
    /// A node without a heartbeat for this long is `down`.
    pub heartbeat_timeout_secs: u64,
    /// A dispatched operation without a result after this long is failed and retried.
    pub operation_deadline_secs: u64,
    /// Attempts before a container is left `failed` (until the next submit).
    pub max_attempts: u32,
    /// First retry delay; doubles per attempt, jittered, capped at `backoff_max_ms`.
    pub backoff_base_ms: u64,
    pub backoff_max_ms: u64,
    /// Level-triggered pass interval (passes also run after every observation).
    pub interval_ms: u64,
    /// Operations handed to one agent at once (dispatched, not finished); the rest stay pending at the
    /// controller. Twice the agent's parallelism keeps it busy without a deep queue on the node.
    pub dispatch_window: u32,
    /// A dispatched operation the agent has not acknowledged (`received`) after this long is sent again (same
    /// id: the agent runs an id at most once) when the stream it was sent on is gone; never on the live stream.
    pub ack_timeout_secs: u64,
    /// A node with operations in flight and no operation update for this long is shown `stalled`.
    pub stall_secs: u64,
}

impl Default for ReconcilerConfig {
    fn default() -> Self {
        ReconcilerConfig {
            heartbeat_timeout_secs: 30,
            operation_deadline_secs: 900,
            max_attempts: 3,
            backoff_base_ms: 1000,
            backoff_max_ms: 60_000,
            interval_ms: 1000,
            dispatch_window: 8,
            ack_timeout_secs: 15,
            stall_secs: 120,
        }
    }
}

impl ReconcilerConfig {
    pub fn heartbeat_timeout(&self) -> Duration {
        Duration::from_secs(self.heartbeat_timeout_secs)
    }
    pub fn operation_deadline(&self) -> Duration {
        Duration::from_secs(self.operation_deadline_secs)
    }
}

impl Config {
    /// Reads, parses and validates a config file.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = pxfleet_common::toml_file::read(path)?;
        let mut config = Config::parse(path, &text)?;
        let dir = path
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        config.seal_key = Some(match config.seal_key.take() {
            Some(p) if p.is_relative() => dir.join(p),
            Some(p) => p,
            None => dir.join(SEAL_KEY_FILE),
        });
        // no hook reads the controller's own data, an admin's definitions included
        let protected = crate::hooks::Protected::of(&config);
        if let Some((field, why)) = protected
            .refusals(config.hook_catalog.definitions())
            .into_iter()
            .next()
        {
            return Err(ConfigError::Invalid {
                path: path.to_path_buf(),
                field: "hooks",
                message: format!("{field}: {why}"),
            });
        }
        Ok(config)
    }

    /// Parses and validates config text; `path` is used in error messages only.
    pub fn parse(path: &Path, text: &str) -> Result<Config, ConfigError> {
        let mut config: Config = pxfleet_common::toml_file::parse(path, text)?;
        config.validate(path)?;
        config.hook_catalog =
            crate::hooks::HookCatalog::parse(path, &config.hooks).map_err(|message| {
                ConfigError::Invalid {
                    path: path.to_path_buf(),
                    field: "hooks",
                    message,
                }
            })?;
        Ok(config)
    }

    fn validate(&self, path: &Path) -> Result<(), ConfigError> {
        let invalid = |field, message: String| ConfigError::Invalid {
            path: path.to_path_buf(),
            field,
            message,
        };
        if self.vm_ids.first < 100
            || self.vm_ids.last > 999_999_999
            || self.vm_ids.first > self.vm_ids.last
        {
            return Err(invalid(
                "vm_ids",
                format!(
                    "range {}..={} is not within 100..=999999999 with first <= last",
                    self.vm_ids.first, self.vm_ids.last
                ),
            ));
        }
        if let Err(e) = self.backup.interval() {
            return Err(invalid("backup.every", e));
        }
        if self.reconciler.heartbeat_timeout_secs == 0 {
            return Err(invalid(
                "reconciler.heartbeat_timeout_secs",
                "must be at least 1".into(),
            ));
        }
        if self.reconciler.max_attempts == 0 {
            return Err(invalid(
                "reconciler.max_attempts",
                "must be at least 1".into(),
            ));
        }
        if self.reconciler.interval_ms == 0 {
            return Err(invalid(
                "reconciler.interval_ms",
                "must be at least 1".into(),
            ));
        }
        for (field, v) in [
            (
                "reconciler.dispatch_window",
                u64::from(self.reconciler.dispatch_window),
            ),
            (
                "reconciler.ack_timeout_secs",
                self.reconciler.ack_timeout_secs,
            ),
            ("reconciler.stall_secs", self.reconciler.stall_secs),
        ] {
            if v == 0 {
                return Err(invalid(field, "must be at least 1".into()));
            }
        }
        if let Some((field, message)) = self.limits.invalid() {
            return Err(invalid(field, message));
        }
        if self.join_token_ttl_secs == 0 {
            return Err(invalid("join_token_ttl_secs", "must be at least 1".into()));
        }
        if self.tls.node_cert_validity_secs == 0 {
            return Err(invalid(
                "tls.node_cert_validity_secs",
                "must be at least 1 (agents renew when a third is left; a year is the default)"
                    .into(),
            ));
        }
        Ok(())
    }

    /// A TLS path resolved against the data directory.
    pub fn resolve(&self, p: &Path) -> PathBuf {
        if p.is_absolute() {
            p.to_path_buf()
        } else {
            self.data_dir.join(p)
        }
    }

    /// The seal key file: `seal_key` (set by [`Config::load`] to `seal.key` next to the config file when the
    /// file does not name one); for a configuration built in code without one, `DATA_DIR.seal.key` beside
    /// (never inside) the data directory.
    pub fn seal_key_path(&self) -> PathBuf {
        match &self.seal_key {
            Some(p) => p.clone(),
            None => {
                let mut name = self
                    .data_dir
                    .file_name()
                    .map(|n| n.to_os_string())
                    .unwrap_or_else(|| "pxcontroller".into());
                name.push(".seal.key");
                self.data_dir.with_file_name(name)
            }
        }
    }

    /// The sled database directory.
    pub fn db_path(&self) -> PathBuf {
        self.data_dir.join("db")
    }
}

/// 1-based line and column of a byte offset.
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_file_gives_defaults() {
        let c = Config::parse(Path::new("c.toml"), "").unwrap();
        assert_eq!(c, Config::default());
        assert_eq!(c.listen.port(), 8443);
        assert_eq!(c.metrics_listen.to_string(), "127.0.0.1:9090");
        assert_eq!((c.vm_ids.first, c.vm_ids.last), (1000, 999_999));
    }

    #[test]
    fn shipped_example_parses() {
        let path = Path::new(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/examples/controller.toml"
        ));
        let c = Config::load(path).unwrap();
        assert_eq!(c.data_dir, PathBuf::from("/var/lib/pxcontroller"));
        assert_eq!(c.reconciler.heartbeat_timeout_secs, 30);
    }

    #[test]
    fn unknown_key_refused_with_position() {
        let err = Config::parse(
            Path::new("c.toml"),
            "listen = \"127.0.0.1:1\"\nlisten_addr = 1\n",
        )
        .unwrap_err();
        let msg = err.to_string();
        assert!(msg.starts_with("c.toml:2:1:"), "{msg}");
        assert!(msg.contains("listen_addr"), "{msg}");
    }

    #[test]
    fn bad_range_names_field() {
        let err =
            Config::parse(Path::new("c.toml"), "[vm_ids]\nfirst = 500\nlast = 400\n").unwrap_err();
        assert!(err.to_string().contains("field `vm_ids`"), "{err}");
    }

    #[test]
    fn seal_key_defaults_next_to_the_config_file_not_in_the_data_dir() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("controller.toml");
        std::fs::write(&path, "data_dir = \"/srv/pxc\"\n").unwrap();
        let c = Config::load(&path).unwrap();
        assert_eq!(c.seal_key_path(), dir.path().join("seal.key"));
        std::fs::write(&path, "seal_key = \"keys/s.key\"\n").unwrap();
        let c = Config::load(&path).unwrap();
        assert_eq!(c.seal_key_path(), dir.path().join("keys/s.key"));
        let c = Config::parse(Path::new("c.toml"), "data_dir = \"/srv/pxc\"\n").unwrap();
        assert_eq!(c.seal_key_path(), PathBuf::from("/srv/pxc.seal.key"));
    }

    #[test]
    fn relative_tls_paths_resolve_under_data_dir() {
        let c = Config::parse(Path::new("c.toml"), "data_dir = \"/srv/pxc\"\n").unwrap();
        assert_eq!(
            c.resolve(&c.tls.ca_cert),
            PathBuf::from("/srv/pxc/pki/ca.pem")
        );
        assert_eq!(c.resolve(Path::new("/x.pem")), PathBuf::from("/x.pem"));
    }
}
