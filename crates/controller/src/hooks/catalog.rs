//! Hooks defined in the controller's configuration (`[hooks.NAME]`): what runs on the controller, and which
//! of its secrets a request carries, is the admin's decision. A fleet uses such a hook by name (`use: NAME`),
//! saying when, for which containers, and the plain-text values of its `${param:KEY}` placeholders. And no
//! `${file:...}`, an admin's included, reads the controller's own data: its data directory (store, PKI), the
//! seal key, the CA and server keys ([`Protected`]).

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};

use pxfleet_spec::hooks::{Hook, HookAction, Placeholder};
use pxfleet_spec::{Diagnostic, Fleet};

/// The hooks the configuration defines, by name.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HookCatalog {
    defs: BTreeMap<String, Hook>,
}

impl HookCatalog {
    /// The definitions of `[hooks.NAME]` tables (`raw`), checked like a fleet's hooks (docs/hooks.md); the
    /// error names the file and the field.
    pub fn parse(path: &Path, raw: &BTreeMap<String, toml::Value>) -> Result<HookCatalog, String> {
        if raw.is_empty() {
            return Ok(HookCatalog::default());
        }
        let text = serde_json::to_string(raw).map_err(|e| e.to_string())?;
        let file = path.display().to_string();
        let hooks = pxfleet_spec::parse_hook_definitions(&file, &text).map_err(|d| {
            d.0.iter()
                .map(|d| format!("{}: {}", d.path, d.message))
                .collect::<Vec<_>>()
                .join("; ")
        })?;
        Ok(HookCatalog {
            defs: hooks.into_iter().map(|h| (h.name.clone(), h)).collect(),
        })
    }

    pub fn names(&self) -> Vec<&str> {
        self.defs.keys().map(String::as_str).collect()
    }

    pub fn definitions(&self) -> impl Iterator<Item = &Hook> {
        self.defs.values()
    }

    /// What `h` runs: itself, or for a hook used by name the definition's action, timeout and retries with the
    /// fleet's name, events and containers, and the params the fleet gave.
    pub fn resolve(&self, h: &Hook) -> Result<(Hook, BTreeMap<String, String>), String> {
        let HookAction::Use { hook, params } = &h.action else {
            return Ok((h.clone(), BTreeMap::new()));
        };
        let def = self.defs.get(hook).ok_or_else(|| {
            format!(
                "the controller's configuration no longer defines hook {hook} (defined: {})",
                self.names().join(", ")
            )
        })?;
        Ok((
            Hook {
                name: h.name.clone(),
                on: h.on.clone(),
                action: def.action.clone(),
                timeout_secs: def.timeout_secs,
                retries: def.retries,
                containers: h.containers.clone(),
            },
            params.clone(),
        ))
    }

    /// The fleet's uses of defined hooks: each names a defined hook and gives exactly the params its definition
    /// uses. One diagnostic per problem, at its field.
    pub fn check_fleet(&self, file: &str, fleet: &Fleet) -> Vec<Diagnostic> {
        let mut out = Vec::new();
        let mut err = |path: String, message: String, hint: String| {
            let mut d = Diagnostic::new(file, fleet.spans.lookup(&path), path, message);
            d.hint = Some(hint);
            out.push(d);
        };
        for h in &fleet.hooks {
            let HookAction::Use { hook, params } = &h.action else {
                continue;
            };
            let Some(def) = self.defs.get(hook) else {
                let defined = match self.defs.is_empty() {
                    true => "it defines none".to_string(),
                    false => format!("it defines {}", self.names().join(", ")),
                };
                err(
                    format!("hooks.{}.use", h.name),
                    format!("the controller's configuration defines no hook {hook} ({defined})"),
                    "an admin defines hooks in the controller's configuration ([hooks.NAME], docs/hooks.md)"
                        .into(),
                );
                continue;
            };
            let wanted = def.action.params_used();
            for k in wanted.iter().filter(|k| !params.contains_key(*k)) {
                err(
                    format!("hooks.{}.params", h.name),
                    format!("hook {hook} needs the parameter {k}"),
                    format!(
                        "give `params: {{{}}}`",
                        wanted
                            .iter()
                            .map(|k| format!("{k}: ..."))
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                );
            }
            for k in params.keys().filter(|k| !wanted.contains(*k)) {
                err(
                    format!("hooks.{}.params.{k}", h.name),
                    format!("hook {hook} has no parameter {k}"),
                    match wanted.is_empty() {
                        true => format!("hook {hook} takes no parameters"),
                        false => format!(
                            "its parameters: {}",
                            wanted.iter().cloned().collect::<Vec<_>>().join(", ")
                        ),
                    },
                );
            }
            // what the definition reads must be there (the admin's to fix; said before the fleet relies on it)
            if let Ok((resolved, _)) = self.resolve(h) {
                for (_, problem) in
                    pxfleet_spec::hooks::check_secrets(std::slice::from_ref(&resolved), &Probe)
                {
                    err(
                        format!("hooks.{}.use", h.name),
                        format!(
                            "hook {hook} (defined in the controller's configuration): {problem}"
                        ),
                        "ask an admin to provide it on the controller (docs/hooks.md, \"Secrets\")"
                            .into(),
                    );
                }
            }
        }
        out
    }
}

/// Whether the secrets a definition reads exist, without keeping them.
struct Probe;

impl pxfleet_spec::hooks::SecretSource for Probe {
    fn env(&self, name: &str) -> Option<String> {
        std::env::var(name).ok().map(|_| String::new())
    }
    fn file(&self, path: &str) -> Result<String, String> {
        std::fs::File::open(path)
            .map(|_| String::new())
            .map_err(|e| e.to_string())
    }
}

/// What no `${file:...}` may read: the controller's data directory and its keys.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Protected {
    paths: Vec<PathBuf>,
}

/// `p` with `.` and `..` resolved lexically (`..` above `/` stays at `/`).
fn lexical(p: &Path) -> PathBuf {
    let mut out = PathBuf::from("/");
    for c in p.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::Normal(n) => out.push(n),
            _ => {}
        }
    }
    out
}

/// `p` with every symlink of its existing leading part resolved (what a read of it would open).
fn resolved(p: &Path) -> PathBuf {
    let p = lexical(p);
    let mut head = p.clone();
    let mut tail = Vec::new();
    loop {
        if let Ok(real) = std::fs::canonicalize(&head) {
            let mut out = real;
            for t in tail.iter().rev() {
                out.push(t);
            }
            return out;
        }
        match (head.file_name().map(|n| n.to_owned()), head.parent()) {
            (Some(n), Some(parent)) => {
                tail.push(n);
                head = parent.to_path_buf();
            }
            _ => return p,
        }
    }
}

impl Protected {
    /// The data directory, the seal key and the TLS keys of `cfg`, as written and with symlinks resolved.
    pub fn of(cfg: &crate::config::Config) -> Protected {
        let data = if cfg.data_dir.is_absolute() {
            cfg.data_dir.clone()
        } else {
            std::env::current_dir()
                .unwrap_or_else(|_| PathBuf::from("/"))
                .join(&cfg.data_dir)
        };
        let mut paths = vec![data.clone(), cfg.seal_key_path()];
        for k in [&cfg.tls.ca_key, &cfg.tls.server_key] {
            paths.push(data.join(k));
        }
        let mut all: Vec<PathBuf> = paths.iter().map(|p| lexical(p)).collect();
        all.extend(paths.iter().map(|p| resolved(p)));
        all.sort();
        all.dedup();
        Protected { paths: all }
    }

    /// Why `${file:path}` may not be read, or `None` when it may.
    pub fn refusal(&self, path: &str) -> Option<String> {
        let p = Path::new(path);
        let (plain, real) = (lexical(p), resolved(p));
        self.paths
            .iter()
            .any(|q| plain.starts_with(q) || real.starts_with(q))
            .then(|| {
                format!(
                    "{path} is the controller's own data (its data directory, seal key or TLS keys), which no \
                     hook may read"
                )
            })
    }

    /// Each `${file:...}` of `hooks` that reads protected data: (field, why).
    pub fn refusals<'h>(&self, hooks: impl IntoIterator<Item = &'h Hook>) -> Vec<(String, String)> {
        let mut out = Vec::new();
        for h in hooks {
            for (field, p) in h.placeholders() {
                if let Placeholder::File(f) = p {
                    if let Some(why) = self.refusal(f) {
                        out.push((field, why));
                    }
                }
            }
        }
        out
    }

    /// A diagnostic per `${file:...}` of the fleet's hooks that reads protected data.
    pub fn check_fleet(&self, file: &str, fleet: &Fleet) -> Vec<Diagnostic> {
        self.refusals(&fleet.hooks)
            .into_iter()
            .map(|(path, why)| {
                let mut d = Diagnostic::new(file, fleet.spans.lookup(&path), path, why);
                d.hint = Some(
                    "keep a hook's secret in a file of its own (e.g. /etc/pxfleet/NAME.token, mode 0600)"
                        .into(),
                );
                d
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(text: &str) -> BTreeMap<String, toml::Value> {
        toml::from_str(text).unwrap()
    }

    #[test]
    fn definitions_resolve_with_the_fleets_params_and_events() {
        let cat = HookCatalog::parse(
            Path::new("controller.toml"),
            &raw("[dns-add]\nretries = 1\nhttp.url = \"https://dns.lan/add?zone=${param:zone}&n=${hostname}\"\n"),
        )
        .unwrap();
        assert_eq!(cat.names(), ["dns-add"]);
        let fleet = pxfleet_spec::parse_fleet(
            "f.yaml",
            "fleet: dev\ntemplates:\n  deb: {pveam: debian-12-standard_12.7-1_amd64.tar.zst}\ncontainers:\n  a: {template: deb}\nhooks:\n  dns:\n    use: dns-add\n    on: ready\n    params: {zone: lan}\n",
            &pxfleet_spec::NoFiles,
        )
        .unwrap();
        assert!(cat.check_fleet("f.yaml", &fleet).is_empty());
        let (h, params) = cat.resolve(&fleet.hooks[0]).unwrap();
        assert_eq!((h.name.as_str(), h.retries), ("dns", 1));
        assert!(matches!(h.action, HookAction::Http(_)));
        assert_eq!(params["zone"], "lan");
        let e = HookCatalog::parse(
            Path::new("controller.toml"),
            &raw("[x]\ncommand = [\"notify\"]\n"),
        )
        .unwrap_err();
        assert!(e.contains("hooks.x.command.0"), "{e}");
    }

    #[test]
    fn the_data_dir_and_keys_are_protected_also_through_dot_dot_and_symlinks() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        std::fs::create_dir_all(data.join("pki")).unwrap();
        std::fs::write(data.join("pki/ca.key"), "k").unwrap();
        let link = dir.path().join("innocent");
        std::os::unix::fs::symlink(data.join("pki"), &link).unwrap();
        let cfg = crate::config::Config {
            data_dir: data.clone(),
            seal_key: Some(dir.path().join("seal.key")),
            ..Default::default()
        };
        let p = Protected::of(&cfg);
        let s = |p: &Path| p.display().to_string();
        assert!(p.refusal(&s(&data.join("pki/ca.key"))).is_some());
        assert!(p.refusal(&s(&data.join("db/conf"))).is_some());
        assert!(p
            .refusal(&s(&dir.path().join("x/../data/pki/ca.key")))
            .is_some());
        assert!(p.refusal(&s(&link.join("ca.key"))).is_some());
        assert!(p.refusal(&s(&dir.path().join("seal.key"))).is_some());
        assert!(p.refusal(&s(&dir.path().join("dns.token"))).is_none());
        assert!(p.refusal("/etc/pxfleet/dns.token").is_none());
    }
}
