//! PVE 9.1's runtime options of a container (CONTRACT §2.2): `env` (a NUL-separated `NAME=value` list that PVE
//! writes as `lxc.environment.runtime:` lines) and `entrypoint` (`lxc.init.cmd`): the checks of their schema
//! patterns, the `lxc.environment.runtime` entries and the `--entrypoint` value, and the parse of `env` as
//! `pct config` shows it.

use std::collections::BTreeMap;

use crate::error::PveError;

/// PVE's `\w` for a variable name (ASCII letters, digits, `_`).
pub fn is_env_name(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// A value PVE's patterns accept: no control character but tab (the schema's pattern also lets `\n` through,
/// which would break the line of the config file; refused here).
fn is_runtime_text(s: &str) -> bool {
    !s.chars().any(|c| c.is_control() && c != '\t')
}

/// The `NAME=value` entries of `env`, checked, in name order: the values of the config file's
/// `lxc.environment.runtime` lines (CONTRACT §2.2, §7). `env` is never passed as an argument: PVE's separator
/// is a NUL and a command line cannot carry one, so the caller writes these lines into the config file
/// ([`crate::conffile::write_env`]) for any number of variables.
pub fn env_entries(vmid: u32, env: &BTreeMap<String, String>) -> Result<Vec<String>, PveError> {
    let v = Some(vmid);
    let mut out = Vec::with_capacity(env.len());
    for (k, val) in env {
        if !is_env_name(k) {
            return Err(PveError::invalid(
                v,
                "env",
                k,
                "a name of letters, digits and '_'",
            ));
        }
        if !is_runtime_text(val) {
            return Err(PveError::invalid(
                v,
                &format!("env.{k}"),
                val.escape_debug(),
                "a value without control characters",
            ));
        }
        out.push(format!("{k}={val}"));
    }
    Ok(out)
}

/// Checks an `--entrypoint` value.
pub fn check_entrypoint(vmid: u32, e: &str) -> Result<(), PveError> {
    if e.trim().is_empty() || !is_runtime_text(e) {
        return Err(PveError::invalid(
            Some(vmid),
            "entrypoint",
            e.escape_debug(),
            "a command line without control characters",
        ));
    }
    Ok(())
}

/// `env` as `pct config` / the API give it (NUL-separated `NAME=value`, one entry per
/// `lxc.environment.runtime` line), as a map.
pub fn parse_env(v: &str) -> BTreeMap<String, String> {
    v.split('\0')
        .filter(|s| !s.is_empty())
        .map(|kv| match kv.split_once('=') {
            Some((k, v)) => (k.to_string(), v.to_string()),
            None => (kv.to_string(), String::new()),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::argv::{create_args, set_args};
    use crate::parse::NetConfig;
    use crate::spec::{ConfigChange, CreateSpec, RootfsSpec};

    fn after<'a>(argv: &'a [String], flag: &str) -> Option<&'a str> {
        let i = argv.iter().position(|a| a == flag)?;
        argv.get(i + 1).map(String::as_str)
    }

    #[test]
    fn create_and_set_carry_env_entrypoint_and_host_managed() {
        let mut s = CreateSpec::new(
            120,
            "local:vztmpl/debian-13-standard_13.1-2_amd64.tar.zst",
            RootfsSpec {
                storage: "local-lvm".into(),
                size_gib: 4,
            },
        );
        s.env = Some(BTreeMap::from([(
            "APP_PORT".to_string(),
            "8080".to_string(),
        )]));
        s.entrypoint = Some("/usr/local/bin/app --serve".into());
        s.nets.insert(
            0,
            NetConfig {
                name: "lan0".into(),
                bridge: Some("vmbr0".into()),
                ip: Some("dhcp".into()),
                host_managed: Some(true),
                ..NetConfig::default()
            },
        );
        let argv = create_args(&s, None).unwrap();
        // env goes into the config file (lxc.environment.runtime lines), never on the command line.
        assert_eq!(after(&argv, "--env"), None);
        assert_eq!(
            after(&argv, "--entrypoint"),
            Some("/usr/local/bin/app --serve")
        );
        assert_eq!(
            after(&argv, "--net0"),
            Some("name=lan0,bridge=vmbr0,host-managed=1,ip=dhcp")
        );
        // PVE refuses SLAAC on a host-managed NIC; so does the builder, before running anything.
        s.nets.get_mut(&0).unwrap().ip6 = Some("auto".into());
        assert!(create_args(&s, None).is_err());

        let set = ConfigChange {
            env: Some(BTreeMap::new()),
            entrypoint: Some("/app".into()),
            ..ConfigChange::default()
        };
        let argv = set_args(120, &set).unwrap();
        assert_eq!(after(&argv, "--entrypoint"), Some("/app"));
        assert_eq!(after(&argv, "--delete"), None);
        assert_eq!(after(&argv, "--env"), None);
        // Still checked before anything runs: a bad name is refused naming the field.
        let bad = ConfigChange {
            env: Some(BTreeMap::from([("A-B".to_string(), "1".to_string())])),
            ..ConfigChange::default()
        };
        let e = set_args(120, &bad).unwrap_err().to_string();
        assert!(e.contains("env") && e.contains("A-B"), "{e}");
    }

    #[test]
    fn env_entries_are_checked_name_value_lines() {
        let three = BTreeMap::from([
            ("B".to_string(), "x=y z".to_string()),
            ("A".to_string(), "1".to_string()),
            ("C".to_string(), String::new()),
        ]);
        assert_eq!(
            env_entries(100, &three).unwrap(),
            vec!["A=1", "B=x=y z", "C="]
        );
        let bad = BTreeMap::from([("A-B".to_string(), "1".to_string())]);
        assert!(env_entries(100, &bad).is_err());
        let nl = BTreeMap::from([("A".to_string(), "1\n2".to_string())]);
        let e = env_entries(100, &nl).unwrap_err().to_string();
        assert!(e.contains("env.A"), "{e}");
        assert!(check_entrypoint(100, "/app --serve\targ").is_ok());
        assert!(check_entrypoint(100, " ").is_err());
        assert_eq!(
            parse_env("A=1\0B=x=y"),
            BTreeMap::from([
                ("A".to_string(), "1".to_string()),
                ("B".to_string(), "x=y".to_string())
            ])
        );
    }
}
