//! Where pxctl finds its controller and credentials. Sources, strongest first: command-line flags,
//! `PXCTL_*` environment variables, then the TOML file named by `--config`, else `$PXCTL_CONFIG`, else
//! `~/.config/pxctl/config.toml`. Relative paths in the file are resolved against the file's directory.
//!
//! ```toml
//! controller = "https://127.0.0.1:8443"
//! ca = "ca.pem"
//! cert = "admin.pem"
//! key = "admin.key"
//! # server_name = "pxcontroller.lab"   # name checked against the server certificate (default: the URL's host)
//! ```

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::error::{CliError, Result};

/// Environment variable naming the config file.
pub const ENV_CONFIG: &str = "PXCTL_CONFIG";
/// Environment variables overriding single settings.
pub const ENV_CONTROLLER: &str = "PXCTL_CONTROLLER";
pub const ENV_CA: &str = "PXCTL_CA";
pub const ENV_CERT: &str = "PXCTL_CERT";
pub const ENV_KEY: &str = "PXCTL_KEY";
pub const ENV_SERVER_NAME: &str = "PXCTL_SERVER_NAME";

/// The config file as written. Unknown keys are refused.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    /// `https://HOST:PORT` of pxcontroller.
    pub controller: Option<String>,
    /// The controller's CA certificate (PEM).
    pub ca: Option<PathBuf>,
    /// This user's certificate (PEM), issued by that CA.
    pub cert: Option<PathBuf>,
    /// This user's private key (PEM, mode 0600).
    pub key: Option<PathBuf>,
    /// Name to verify the server certificate against, when it differs from the URL's host.
    pub server_name: Option<String>,
}

impl FileConfig {
    /// Parses config text; `path` names the file in errors and anchors relative paths.
    pub fn parse(path: &Path, text: &str) -> Result<FileConfig> {
        let mut c: FileConfig =
            pxfleet_common::toml_file::parse(path, text).map_err(|e| match e {
                pxfleet_common::TomlFileError::Parse {
                    path,
                    line,
                    column,
                    message,
                } => CliError::ConfigParse {
                    path,
                    line,
                    column,
                    message,
                },
                pxfleet_common::TomlFileError::Read { path, source } => {
                    CliError::ConfigRead { path, source }
                }
            })?;
        let dir = path.parent().unwrap_or(Path::new(""));
        for p in [&mut c.ca, &mut c.cert, &mut c.key].into_iter().flatten() {
            if p.is_relative() {
                *p = dir.join(&*p);
            }
        }
        Ok(c)
    }
}

/// What the command line said about the connection (all optional).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Overrides {
    pub config: Option<PathBuf>,
    pub controller: Option<String>,
    pub ca: Option<PathBuf>,
    pub cert: Option<PathBuf>,
    pub key: Option<PathBuf>,
    pub server_name: Option<String>,
}

/// The resolved connection settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    pub controller: String,
    pub ca: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
    pub server_name: Option<String>,
    /// The config file that was read, if any (for messages).
    pub config_file: Option<PathBuf>,
}

/// Resolves settings from flags, then `env` (a lookup such as `|k| std::env::var(k).ok()`), then the file.
/// `home` is the user's home directory, for the default file location.
pub fn resolve(
    flags: &Overrides,
    env: &dyn Fn(&str) -> Option<String>,
    home: Option<&Path>,
) -> Result<Settings> {
    let env_nonempty = |k: &str| env(k).filter(|v| !v.is_empty());
    let (path, explicit) = match (&flags.config, env_nonempty(ENV_CONFIG)) {
        (Some(p), _) => (Some(p.clone()), true),
        (None, Some(p)) => (Some(PathBuf::from(p)), true),
        (None, None) => (home.map(default_config_path), false),
    };
    let mut file = FileConfig::default();
    let mut config_file = None;
    if let Some(path) = path {
        match std::fs::read_to_string(&path) {
            Ok(text) => {
                file = FileConfig::parse(&path, &text)?;
                config_file = Some(path);
            }
            Err(e) if !explicit && e.kind() == std::io::ErrorKind::NotFound => {}
            Err(source) => return Err(CliError::ConfigRead { path, source }),
        }
    }
    let hint = |flag: &str, env: &str, key: &str| {
        format!(
            "pass {flag}, set {env}, or put `{key} = ...` in {}",
            config_file
                .as_deref()
                .map(|p| p.display().to_string())
                .unwrap_or_else(|| "~/.config/pxctl/config.toml".to_string())
        )
    };
    let controller = flags
        .controller
        .clone()
        .or_else(|| env_nonempty(ENV_CONTROLLER))
        .or(file.controller)
        .ok_or_else(|| CliError::ConfigMissing {
            field: "controller",
            hint: hint(
                "--controller https://HOST:8443",
                ENV_CONTROLLER,
                "controller",
            ),
        })?;
    let pick = |flag: &Option<PathBuf>, env: &str, file: Option<PathBuf>, name: &'static str| {
        flag.clone()
            .or_else(|| env_nonempty(env).map(PathBuf::from))
            .or(file)
            .ok_or_else(|| CliError::ConfigMissing {
                field: name,
                hint: hint(&format!("--{name} PATH"), env, name),
            })
    };
    let ca = pick(&flags.ca, ENV_CA, file.ca, "ca")?;
    let cert = pick(&flags.cert, ENV_CERT, file.cert, "cert")?;
    let key = pick(&flags.key, ENV_KEY, file.key, "key")?;
    let server_name = flags
        .server_name
        .clone()
        .or_else(|| env_nonempty(ENV_SERVER_NAME))
        .or(file.server_name);
    Ok(Settings {
        controller,
        ca,
        cert,
        key,
        server_name,
        config_file,
    })
}

/// `~/.config/pxctl/config.toml`.
pub fn default_config_path(home: &Path) -> PathBuf {
    home.join(".config").join("pxctl").join("config.toml")
}

/// 1-based line and column of a byte offset.
#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let m: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| m.get(k).cloned()
    }

    fn write_config(dir: &Path, text: &str) -> PathBuf {
        let p = dir.join("pxctl.toml");
        std::fs::write(&p, text).unwrap();
        p
    }

    const FULL: &str = "controller = \"https://10.0.0.1:8443\"\nca = \"ca.pem\"\ncert = \"admin.pem\"\nkey = \"/abs/admin.key\"\n";

    #[test]
    fn file_paths_resolve_against_the_file_directory() {
        let dir = tempfile::tempdir().unwrap();
        let p = write_config(dir.path(), FULL);
        let s = resolve(
            &Overrides {
                config: Some(p.clone()),
                ..Default::default()
            },
            &env_of(&[]),
            None,
        )
        .unwrap();
        assert_eq!(s.controller, "https://10.0.0.1:8443");
        assert_eq!(s.ca, dir.path().join("ca.pem"));
        assert_eq!(s.cert, dir.path().join("admin.pem"));
        assert_eq!(s.key, PathBuf::from("/abs/admin.key"));
        assert_eq!(s.config_file, Some(p));
    }

    #[test]
    fn flag_beats_env_beats_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = write_config(dir.path(), FULL);
        let env = env_of(&[
            (ENV_CONFIG, p.to_str().unwrap()),
            (ENV_CONTROLLER, "https://env:1"),
            (ENV_CA, "/env/ca.pem"),
        ]);
        let s = resolve(
            &Overrides {
                controller: Some("https://flag:2".into()),
                ..Default::default()
            },
            &env,
            None,
        )
        .unwrap();
        assert_eq!(s.controller, "https://flag:2");
        assert_eq!(s.ca, PathBuf::from("/env/ca.pem"));
        assert_eq!(s.cert, dir.path().join("admin.pem"));
        let s = resolve(&Overrides::default(), &env, None).unwrap();
        assert_eq!(s.controller, "https://env:1");
    }

    #[test]
    fn config_flag_beats_env_config_and_home_default() {
        let dir = tempfile::tempdir().unwrap();
        let a = write_config(dir.path(), FULL);
        let home = dir.path().join("home");
        std::fs::create_dir_all(home.join(".config/pxctl")).unwrap();
        std::fs::write(
            default_config_path(&home),
            "controller = \"https://home:3\"\nca = \"c\"\ncert = \"d\"\nkey = \"e\"\n",
        )
        .unwrap();
        let s = resolve(&Overrides::default(), &env_of(&[]), Some(&home)).unwrap();
        assert_eq!(s.controller, "https://home:3");
        assert_eq!(s.ca, home.join(".config/pxctl/c"));
        let env = env_of(&[(ENV_CONFIG, a.to_str().unwrap())]);
        let s = resolve(&Overrides::default(), &env, Some(&home)).unwrap();
        assert_eq!(s.controller, "https://10.0.0.1:8443");
    }

    #[test]
    fn missing_default_file_is_fine_but_missing_named_file_is_not() {
        let dir = tempfile::tempdir().unwrap();
        let err = resolve(&Overrides::default(), &env_of(&[]), Some(dir.path())).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("no controller configured: pass --controller"),
            "{err}"
        );
        let err = resolve(
            &Overrides {
                config: Some(dir.path().join("nope.toml")),
                ..Default::default()
            },
            &env_of(&[]),
            None,
        )
        .unwrap_err();
        assert!(err.to_string().contains("nope.toml"), "{err}");
    }

    #[test]
    fn unknown_key_is_refused_with_its_position() {
        let err = FileConfig::parse(
            Path::new("/x/pxctl.toml"),
            "controller = \"https://a:1\"\ncontroler_url = 1\n",
        )
        .unwrap_err()
        .to_string();
        assert!(err.starts_with("/x/pxctl.toml:2:1: "), "{err}");
        assert!(err.contains("controler_url"), "{err}");
    }

    #[test]
    fn missing_key_names_the_flag_env_and_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = write_config(
            dir.path(),
            "controller = \"https://a:1\"\nca = \"ca.pem\"\n",
        );
        let err = resolve(
            &Overrides {
                config: Some(p),
                ..Default::default()
            },
            &env_of(&[]),
            None,
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.starts_with("no cert configured: pass --cert PATH, set PXCTL_CERT"),
            "{err}"
        );
        assert!(err.contains("pxctl.toml"), "{err}");
    }
}
