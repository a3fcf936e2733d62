//! The agent's configuration file (`/etc/pxagent/agent.toml`): parsing, defaults and validation.
//!
//! One TOML file, `deny_unknown_fields`, so a typo is an error that names the line and column
//! instead of a silently ignored setting. FHS paths used as defaults live here as constants.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Where `pxagent run` looks for its configuration when none is given.
pub const DEFAULT_CONFIG_PATH: &str = "/etc/pxagent/agent.toml";
/// Directory that `pxagent join` writes the key, certificate, CA and config into.
pub const DEFAULT_CONFIG_DIR: &str = "/etc/pxagent";
/// State directory: the operation journal lives below it.
pub const DEFAULT_STATE_DIR: &str = "/var/lib/pxagent";
/// Where the PVE tools (`pct`, `pvesh`, `pvesm`, `pveam`) are installed on a real node.
pub const DEFAULT_PVE_BIN_DIR: &str = "/usr/sbin";

/// Errors while reading or checking the configuration.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file cannot be read, or is not valid TOML for this struct (names file:line:column).
    #[error(transparent)]
    File(#[from] pxfleet_common::TomlFileError),
    #[error("{path}: field `{field}`: {message}")]
    Invalid {
        path: PathBuf,
        field: &'static str,
        message: String,
    },
}

/// The agent's configuration, as written in `agent.toml`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct AgentConfig {
    /// The controller's gRPC endpoint, `https://host:port`. Agents dial out, so this is the only address needed.
    pub controller: String,
    /// This node's PVE name; must match the name in the node certificate (`pxfleet://node/NAME`).
    pub node: String,
    /// PEM node certificate signed by the controller's CA (written by `pxagent join`).
    pub cert: PathBuf,
    /// PEM private key of the node certificate (0600; made on this node, never sent anywhere).
    pub key: PathBuf,
    /// PEM CA certificate of the controller (pinned at join time by its fingerprint).
    pub ca: PathBuf,
    /// Node labels reported in the inventory (matched by fleet.yaml `constraints`).
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// Journal and other local state.
    #[serde(default = "default_state_dir")]
    pub state_dir: PathBuf,
    /// Directory holding `pct`, `pvesh`, `pvesm`, `pveam`; tests point it at pvesim symlinks.
    #[serde(default = "default_pve_bin_dir")]
    pub pve_bin_dir: PathBuf,
    /// How many operations run at once on this node (one per vm_id at any time regardless).
    #[serde(default = "default_parallelism")]
    pub parallelism: usize,
    /// Seconds between heartbeats on the controller stream.
    #[serde(default = "default_heartbeat_secs")]
    pub heartbeat_secs: u64,
    /// Seconds between full observations (list of containers + configs of managed ones).
    #[serde(default = "default_observe_secs")]
    pub observe_secs: u64,
    /// Upper bound, in seconds, on waiting for a started container to get an address (DHCP).
    #[serde(default = "default_address_wait_secs")]
    pub address_wait_secs: u64,
    /// Timeout, in seconds, for one PVE tool invocation (pct create of a large template takes a while).
    #[serde(default = "default_command_timeout_secs")]
    pub command_timeout_secs: u64,
    /// Extra PEM CA bundle trusted for template downloads, besides the system bundle.
    #[serde(default)]
    pub template_ca_file: Option<PathBuf>,
    /// This node's container config directory, where the agent writes `lxc.idmap` lines (no PVE tool sets
    /// them) and `env`'s `lxc.environment.runtime` lines (`pct` cannot be given more than one variable).
    /// Default `/etc/pve/nodes/<node>/lxc`.
    #[serde(default)]
    pub pve_config_dir: Option<PathBuf>,
    /// Environment passed to the PVE tools (for example `PVESIM_STATE` in tests).
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// The largest template file downloaded, in bytes (default 16 GiB); a larger one fails its operation.
    #[serde(default = "default_template_max_bytes")]
    pub template_max_bytes: u64,
    /// The longest one template download may take, in seconds (default 7200).
    #[serde(default = "default_template_timeout_secs")]
    pub template_timeout_secs: u64,
}

fn default_template_max_bytes() -> u64 {
    crate::seed::DEFAULT_TEMPLATE_MAX_BYTES
}
fn default_template_timeout_secs() -> u64 {
    crate::seed::DEFAULT_TEMPLATE_TIMEOUT_SECS
}

fn default_state_dir() -> PathBuf {
    PathBuf::from(DEFAULT_STATE_DIR)
}
fn default_pve_bin_dir() -> PathBuf {
    PathBuf::from(DEFAULT_PVE_BIN_DIR)
}
fn default_parallelism() -> usize {
    4
}
fn default_heartbeat_secs() -> u64 {
    5
}
fn default_observe_secs() -> u64 {
    30
}
fn default_address_wait_secs() -> u64 {
    60
}
fn default_command_timeout_secs() -> u64 {
    600
}

impl AgentConfig {
    /// A configuration with every optional field at its default.
    pub fn new(controller: &str, node: &str, config_dir: &Path) -> Self {
        AgentConfig {
            controller: controller.to_string(),
            node: node.to_string(),
            cert: config_dir.join("node.pem"),
            key: config_dir.join("node.key"),
            ca: config_dir.join("ca.pem"),
            labels: BTreeMap::new(),
            state_dir: default_state_dir(),
            pve_bin_dir: default_pve_bin_dir(),
            pve_config_dir: None,
            parallelism: default_parallelism(),
            heartbeat_secs: default_heartbeat_secs(),
            observe_secs: default_observe_secs(),
            address_wait_secs: default_address_wait_secs(),
            command_timeout_secs: default_command_timeout_secs(),
            template_ca_file: None,
            env: BTreeMap::new(),
            template_max_bytes: default_template_max_bytes(),
            template_timeout_secs: default_template_timeout_secs(),
        }
    }

    /// The template download bounds this configuration sets.
    pub fn template_limits(&self) -> crate::seed::DownloadLimits {
        crate::seed::DownloadLimits {
            max_bytes: self.template_max_bytes,
            timeout: std::time::Duration::from_secs(self.template_timeout_secs),
        }
    }

    /// Reads and validates a config file.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        Self::parse(&pxfleet_common::toml_file::read(path)?, path)
    }

    /// Parses and validates config text; `path` is used only in error messages.
    pub fn parse(text: &str, path: &Path) -> Result<Self, ConfigError> {
        let config: AgentConfig = pxfleet_common::toml_file::parse(path, text)?;
        config.validate(path)?;
        Ok(config)
    }

    /// Checks values that TOML types alone do not constrain.
    pub fn validate(&self, path: &Path) -> Result<(), ConfigError> {
        let invalid = |field: &'static str, message: String| ConfigError::Invalid {
            path: path.to_path_buf(),
            field,
            message,
        };
        if !(self.controller.starts_with("https://") || self.controller.starts_with("http://")) {
            return Err(invalid(
                "controller",
                format!(
                    "`{}` is not a URL; expected https://HOST:PORT",
                    self.controller
                ),
            ));
        }
        if self.node.is_empty()
            || !self
                .node
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.')
        {
            return Err(invalid(
                "node",
                format!(
                    "`{}` is not a PVE node name; expected letters, digits, `-` and `.`",
                    self.node
                ),
            ));
        }
        if self.parallelism == 0 || self.parallelism > 256 {
            return Err(invalid(
                "parallelism",
                format!("{} is out of range; expected 1..=256", self.parallelism),
            ));
        }
        if self.template_max_bytes == 0 {
            return Err(invalid(
                "template_max_bytes",
                "0 is not allowed; expected at least 1".into(),
            ));
        }
        if self.template_timeout_secs == 0 {
            return Err(invalid(
                "template_timeout_secs",
                "0 is not allowed; expected at least 1".into(),
            ));
        }
        if self.heartbeat_secs == 0 {
            return Err(invalid(
                "heartbeat_secs",
                "0 is not allowed; expected at least 1".into(),
            ));
        }
        if self.observe_secs == 0 {
            return Err(invalid(
                "observe_secs",
                "0 is not allowed; expected at least 1".into(),
            ));
        }
        if self.command_timeout_secs == 0 {
            return Err(invalid(
                "command_timeout_secs",
                "0 is not allowed; expected at least 1".into(),
            ));
        }
        Ok(())
    }

    /// Serialises the config as TOML (what `pxagent join` writes).
    pub fn to_toml(&self) -> String {
        toml::to_string_pretty(self).expect("AgentConfig always serialises")
    }

    pub fn heartbeat(&self) -> Duration {
        Duration::from_secs(self.heartbeat_secs)
    }
    pub fn observe_interval(&self) -> Duration {
        Duration::from_secs(self.observe_secs)
    }
    pub fn address_wait(&self) -> Duration {
        Duration::from_secs(self.address_wait_secs)
    }
    pub fn command_timeout(&self) -> Duration {
        Duration::from_secs(self.command_timeout_secs)
    }
    /// The sled journal's directory.
    pub fn journal_dir(&self) -> PathBuf {
        self.state_dir.join("journal")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shipped_example_parses() {
        let path = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/examples/agent.toml"));
        let c = AgentConfig::load(path).unwrap();
        assert_eq!(c.node, "pve1");
        assert_eq!(c.parallelism, 4);
        assert_eq!(c.heartbeat(), Duration::from_secs(5));
        assert_eq!(c.journal_dir(), PathBuf::from("/var/lib/pxagent/journal"));
    }

    #[test]
    fn minimal_config_gets_defaults() {
        let text = "controller = \"https://127.0.0.1:7443\"\nnode = \"n1\"\ncert = \"/c\"\nkey = \"/k\"\nca = \"/ca\"\n";
        let c = AgentConfig::parse(text, Path::new("a.toml")).unwrap();
        assert_eq!(c.pve_bin_dir, PathBuf::from("/usr/sbin"));
        assert_eq!(c.state_dir, PathBuf::from("/var/lib/pxagent"));
        assert!(c.env.is_empty());
    }

    #[test]
    fn unknown_field_names_line_and_column() {
        let text = "controller = \"https://x:1\"\nnode = \"n1\"\ncert = \"/c\"\nkey = \"/k\"\nca = \"/ca\"\nparalelism = 3\n";
        let err = AgentConfig::parse(text, Path::new("a.toml"))
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("a.toml:6:1:"), "{err}");
        assert!(err.contains("paralelism"), "{err}");
    }

    #[test]
    fn bad_values_name_the_field() {
        let text =
            "controller = \"x:1\"\nnode = \"n1\"\ncert = \"/c\"\nkey = \"/k\"\nca = \"/ca\"\n";
        let err = AgentConfig::parse(text, Path::new("a.toml"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("`controller`"), "{err}");
        let text = "controller = \"https://x:1\"\nnode = \"n 1\"\ncert = \"/c\"\nkey = \"/k\"\nca = \"/ca\"\nparallelism = 0\n";
        let err = AgentConfig::parse(text, Path::new("a.toml"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("`node`"), "{err}");
    }

    #[test]
    fn round_trips_through_toml() {
        let mut c = AgentConfig::new("https://127.0.0.1:1", "n1", Path::new("/etc/pxagent"));
        c.env.insert("PVESIM_STATE".into(), "/tmp/s".into());
        let back = AgentConfig::parse(&c.to_toml(), Path::new("x")).unwrap();
        assert_eq!(back, c);
    }
}
