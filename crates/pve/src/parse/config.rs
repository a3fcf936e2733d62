//! A container's configuration, from any of its three renderings: `pvesh get .../config` JSON,
//! `pct config` text (`key: value`, description `%XX`-encoded) and the file `/etc/pve/lxc/<vmid>.conf`.

use std::collections::BTreeMap;

use serde_json::Value;

use super::json::{split_list, value_to_string};
use super::propstr::{parse_bool, Features, MountPoint, NetConfig, Startup};
use super::{json_payload, ParseError};
use crate::spec::DeviceSpec;

/// Typed view of a CT config; every key is also kept as text in `raw`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ContainerConfig {
    pub hostname: Option<String>,
    pub arch: Option<String>,
    pub ostype: Option<String>,
    /// `timezone` (`host`, `UTC` or a zone of zone.tab).
    pub timezone: Option<String>,
    /// `console` (PVE's default when absent: 1).
    pub console: Option<bool>,
    /// `tty` (PVE's default when absent: 2).
    pub tty: Option<u32>,
    /// `cmode` (PVE's default when absent: `tty`).
    pub cmode: Option<String>,
    /// `hookscript` (a snippets volume).
    pub hookscript: Option<String>,
    /// `env` (PVE 9.1+): the `lxc.environment.runtime` variables; empty when none.
    pub env: BTreeMap<String, String>,
    /// `entrypoint` (PVE 9.1+).
    pub entrypoint: Option<String>,
    pub cores: Option<u32>,
    pub cpulimit: Option<f64>,
    pub cpuunits: Option<u32>,
    /// MiB.
    pub memory: Option<u64>,
    /// MiB.
    pub swap: Option<u64>,
    pub rootfs: Option<MountPoint>,
    /// `mp0`.. by index.
    pub mount_points: BTreeMap<u32, MountPoint>,
    /// `net0`.. by index.
    pub nets: BTreeMap<u32, NetConfig>,
    /// `dev0`.. by index.
    pub devices: BTreeMap<u32, DeviceSpec>,
    /// Values of the raw `lxc.idmap` lines (`u 0 100000 65536`), in file order.
    pub idmap: Vec<String>,
    /// All off when the key is absent.
    pub features: Features,
    pub startup: Option<Startup>,
    pub onboot: bool,
    pub protection: bool,
    /// `false` when absent (PVE's default for an existing config).
    pub unprivileged: bool,
    pub template: bool,
    /// As stored: lower-case, sorted, de-duplicated.
    pub tags: Vec<String>,
    /// Decoded, with its trailing newline.
    pub description: Option<String>,
    pub nameserver: Vec<String>,
    pub searchdomain: Vec<String>,
    /// `create` marks a half-created CT.
    pub lock: Option<String>,
    /// SHA-1 of the file (JSON only).
    pub digest: Option<String>,
    /// Every key as text (raw `lxc.*` keys included, last value wins).
    pub raw: BTreeMap<String, String>,
}

fn idx(key: &str, prefix: &str) -> Option<u32> {
    key.strip_prefix(prefix)?.parse().ok()
}

impl ContainerConfig {
    /// Builds from `(key, value)` pairs already decoded to text.
    pub fn from_pairs<I>(pairs: I) -> Result<Self, ParseError>
    where
        I: IntoIterator<Item = (String, String)>,
    {
        const W: &str = "container config";
        let mut c = ContainerConfig::default();
        let num = |k: &str, v: &str| -> Result<f64, ParseError> {
            v.trim()
                .parse::<f64>()
                .map_err(|_| ParseError::new(W, format!("{k}: `{v}` is not a number")))
        };
        let flag = |k: &str, v: &str| -> Result<bool, ParseError> {
            parse_bool(v.trim()).ok_or_else(|| ParseError::new(W, format!("{k}: `{v}` is not 0/1")))
        };
        for (k, v) in pairs {
            match k.as_str() {
                "hostname" => c.hostname = Some(v.clone()),
                "arch" => c.arch = Some(v.clone()),
                "ostype" => c.ostype = Some(v.clone()),
                "timezone" => c.timezone = Some(v.clone()),
                "console" => c.console = Some(flag(&k, &v)?),
                "tty" => c.tty = Some(num(&k, &v)? as u32),
                "cmode" => c.cmode = Some(v.clone()),
                "hookscript" => c.hookscript = Some(v.clone()),
                "env" => c.env = crate::runtime::parse_env(&v),
                "entrypoint" => c.entrypoint = Some(v.clone()),
                "cores" => c.cores = Some(num(&k, &v)? as u32),
                "cpulimit" => c.cpulimit = Some(num(&k, &v)?),
                "cpuunits" => c.cpuunits = Some(num(&k, &v)? as u32),
                "memory" => c.memory = Some(num(&k, &v)? as u64),
                "swap" => c.swap = Some(num(&k, &v)? as u64),
                "rootfs" => c.rootfs = Some(MountPoint::parse(&v)?),
                "features" => c.features = Features::parse(&v)?,
                "startup" => c.startup = Some(Startup::parse(&v)?),
                "onboot" => c.onboot = flag(&k, &v)?,
                "protection" => c.protection = flag(&k, &v)?,
                "unprivileged" => c.unprivileged = flag(&k, &v)?,
                "template" => c.template = flag(&k, &v)?,
                "tags" => c.tags = split_list(&v).collect(),
                "description" => c.description = Some(v.clone()),
                "nameserver" => c.nameserver = split_list(&v).collect(),
                "searchdomain" => c.searchdomain = split_list(&v).collect(),
                "lock" => c.lock = Some(v.clone()),
                "digest" => c.digest = Some(v.clone()),
                _ => {
                    if let Some(i) = idx(&k, "net") {
                        c.nets.insert(i, NetConfig::parse(&v)?);
                    } else if let Some(i) = idx(&k, "mp") {
                        c.mount_points.insert(i, MountPoint::parse(&v)?);
                    } else if let Some(i) = idx(&k, "dev") {
                        c.devices.insert(i, DeviceSpec::parse(&v)?);
                    } else if k == "lxc.idmap" {
                        c.idmap.push(v.trim().to_string());
                    } else if k == crate::conffile::ENV_KEY {
                        // The config file's form of `env`: one `NAME=value` line per variable.
                        c.env.extend(crate::runtime::parse_env(v.trim()));
                    }
                }
            }
            c.raw.insert(k, v);
        }
        Ok(c)
    }

    /// From `pvesh get /nodes/{node}/lxc/{vmid}/config --output-format json`.
    pub fn from_json(stdout: &str) -> Result<Self, ParseError> {
        const W: &str = "GET /nodes/{node}/lxc/{vmid}/config";
        let v: serde_json::Map<String, Value> = serde_json::from_str(json_payload(stdout))
            .map_err(|e| ParseError::new(W, e.to_string()))?;
        let mut pairs = Vec::new();
        for (k, val) in v {
            if k == "lxc" {
                // [[key, value], ...] raw entries.
                if let Value::Array(items) = val {
                    for it in items {
                        if let Some([a, b]) = it.as_array().map(Vec::as_slice) {
                            if let (Some(a), Some(b)) = (value_to_string(a), value_to_string(b)) {
                                pairs.push((a, b));
                            }
                        }
                    }
                }
                continue;
            }
            if let Some(s) = value_to_string(&val) {
                pairs.push((k, s));
            }
        }
        Self::from_pairs(pairs)
    }

    /// From `pct config <vmid>` text.
    pub fn from_pct_config(text: &str) -> Result<Self, ParseError> {
        let mut pairs = super::text::parse_key_values("pct config", text)?;
        for (k, v) in pairs.iter_mut() {
            if k == "description" {
                *v = decode_text(v);
            }
        }
        Self::from_pairs(pairs)
    }

    /// From the file `/etc/pve/nodes/<node>/lxc/<vmid>.conf`: `#` lines are the description, only the main
    /// section is read (pending and snapshot sections are skipped).
    pub fn from_conf_file(text: &str) -> Result<Self, ParseError> {
        let mut pairs = Vec::new();
        let mut descr = String::new();
        for (n, line) in text.lines().enumerate() {
            if line.starts_with('[') {
                break;
            }
            if let Some(d) = line.strip_prefix('#') {
                descr.push_str(&decode_text(d));
                descr.push('\n');
                continue;
            }
            if line.trim().is_empty() {
                continue;
            }
            let (k, v) = line
                .split_once(':')
                .or_else(|| line.split_once('=').filter(|(k, _)| k.starts_with("lxc.")))
                .ok_or_else(|| {
                    ParseError::new(
                        "config file",
                        format!("line {}: `{line}` is not `key: value`", n + 1),
                    )
                })?;
            pairs.push((k.trim().to_string(), v.trim().to_string()));
        }
        if !descr.is_empty() {
            pairs.push(("description".into(), descr));
        }
        Self::from_pairs(pairs)
    }

    /// The MAC of `netN`, if it has one.
    pub fn hwaddr(&self, index: u32) -> Option<&str> {
        self.nets.get(&index)?.hwaddr.as_deref()
    }

    /// Root disk size in bytes, when known.
    pub fn rootfs_size(&self) -> Option<u64> {
        self.rootfs.as_ref()?.size
    }

    /// Size in bytes of `rootfs` or `mpN`.
    pub fn disk_size(&self, disk: &str) -> Option<u64> {
        if disk == "rootfs" {
            return self.rootfs_size();
        }
        self.mount_points.get(&idx(disk, "mp")?)?.size
    }
}

/// Decodes PVE's `encode_text` (`%XX` escapes) as used for `description` in `pct config`.
pub fn decode_text(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            let hex = |c: u8| (c as char).to_digit(16);
            if let (Some(h), Some(l)) = (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                out.push((h * 16 + l) as u8);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decode() {
        assert_eq!(decode_text("Web server%0A"), "Web server\n");
        assert_eq!(decode_text("a%3Ab%25"), "a:b%");
        assert_eq!(decode_text("100%"), "100%");
        assert_eq!(decode_text("%zz"), "%zz");
    }

    #[test]
    fn numbers_as_strings_in_json() {
        let c = ContainerConfig::from_json(
            r#"{"cores":"2","cpulimit":"1.5","memory":512,"onboot":"1"}"#,
        )
        .unwrap();
        assert_eq!(c.cores, Some(2));
        assert_eq!(c.cpulimit, Some(1.5));
        assert!(c.onboot);
    }

    #[test]
    fn bad_values_are_errors() {
        let e = ContainerConfig::from_json(r#"{"memory":"lots"}"#).unwrap_err();
        assert!(e.detail.contains("memory"), "{e}");
    }

    #[test]
    fn lock_only_config() {
        let c = ContainerConfig::from_conf_file("lock: create\n").unwrap();
        assert_eq!(c.lock.as_deref(), Some("create"));
        assert!(c.hostname.is_none());
    }

    #[test]
    fn several_env_variables_read_back_from_every_form() {
        let want = BTreeMap::from([
            ("A".to_string(), "1".to_string()),
            ("B".to_string(), "x=y z".to_string()),
            ("C".to_string(), String::new()),
        ]);
        // `pvesh get .../config`: one `env` value, NUL-separated (JSON `\u0000`).
        let c = ContainerConfig::from_json(r#"{"env":"A=1\u0000B=x=y z\u0000C="}"#).unwrap();
        assert_eq!(c.env, want);
        // `pct config`: `env: ` and the raw NULs.
        let c = ContainerConfig::from_pct_config("arch: amd64\nenv: A=1\0B=x=y z\0C=\n").unwrap();
        assert_eq!(c.env, want);
        // The config file: one `lxc.environment.runtime` line per variable.
        let c = ContainerConfig::from_conf_file(
            "arch: amd64\nlxc.environment.runtime: A=1\nlxc.environment.runtime: B=x=y z\nlxc.environment.runtime: C=\nlxc.idmap: u 0 100000 65536\n",
        )
        .unwrap();
        assert_eq!(c.env, want);
        assert_eq!(c.idmap, vec!["u 0 100000 65536"]);
    }
}
