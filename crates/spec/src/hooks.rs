//! Hooks: what the controller does when a container becomes ready (running, its address known) or is
//! destroyed: an HTTP request or a command on the controller (see docs/hooks.md). This module holds the
//! model and the templating; the parsing is in `parse` (`hooks:` at the top level of fleet.yaml), the
//! running in the controller.
//!
//! Templates are strings with placeholders: `${name}`, `${hostname}`, `${fleet}`, `${node}`, `${vm_id}`,
//! `${ipv4}`, `${ipv6}` (the container's values) and, in HTTP hooks only, `${env:NAME}` (the controller's
//! environment) and `${file:/path}` (a file on the controller, trimmed). The file keeps the templates;
//! secrets are read only when the hook runs and never stored, planned or logged.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

/// The container values a template may use.
pub const CONTAINER_PLACEHOLDERS: &[&str] =
    &["name", "hostname", "fleet", "node", "vm_id", "ipv4", "ipv6"];

/// Default time one attempt of a hook may take.
pub const DEFAULT_TIMEOUT_SECS: u64 = 10;
/// Default number of retries after a failed first attempt.
pub const DEFAULT_RETRIES: u32 = 3;
/// Most retries a hook may ask for.
pub const MAX_RETRIES: u32 = 20;
/// Longest timeout a hook may ask for.
pub const MAX_TIMEOUT_SECS: u64 = 600;

/// When a hook runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HookEvent {
    /// The container was created and runs, with its address known.
    Ready,
    /// The container was destroyed.
    Destroyed,
}

impl HookEvent {
    pub fn as_str(self) -> &'static str {
        match self {
            HookEvent::Ready => "ready",
            HookEvent::Destroyed => "destroyed",
        }
    }

    pub fn parse(s: &str) -> Option<HookEvent> {
        match s {
            "ready" => Some(HookEvent::Ready),
            "destroyed" => Some(HookEvent::Destroyed),
            _ => None,
        }
    }
}

impl fmt::Display for HookEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One hook of a fleet.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Hook {
    /// Its key under `hooks:`.
    pub name: String,
    /// The events it runs on.
    pub on: Vec<HookEvent>,
    pub action: HookAction,
    /// Deadline of one attempt, in seconds.
    pub timeout_secs: u64,
    /// Further attempts after a failed one (with exponential backoff).
    pub retries: u32,
    /// Containers it runs for (by name); empty: all of the fleet's.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub containers: Vec<String>,
}

impl Hook {
    /// Every placeholder of its templates, with the field it is in (`hooks.NAME.http.url`, `...http.body`).
    pub fn placeholders(&self) -> Vec<(String, Placeholder<'_>)> {
        let mut out = Vec::new();
        for (field, t) in self.action.templates() {
            for p in scan(t).into_iter().flatten().filter_map(Result::err) {
                out.push((format!("hooks.{}.{field}", self.name), p));
            }
        }
        out
    }

    /// Whether it runs for container `name` on `event`.
    pub fn applies(&self, name: &str, event: HookEvent) -> bool {
        self.on.contains(&event)
            && (self.containers.is_empty() || self.containers.iter().any(|c| c == name))
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HookAction {
    Http(HttpHook),
    /// An argv run on the controller (never through a shell), with the container's values also as
    /// `PXFLEET_NAME`, `PXFLEET_HOSTNAME`, ... environment variables.
    Command {
        argv: Vec<String>,
    },
    /// A hook the controller's configuration defines (`[hooks.NAME]`), used by name: what it does, and any
    /// secret it reads, is the admin's; the fleet gives when, for which containers, and its `${param:KEY}`
    /// values (plain text, never a secret source).
    Use {
        hook: String,
        #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
        params: BTreeMap<String, String>,
    },
}

impl HookAction {
    /// Every template of the action: (field below the hook, template).
    pub fn templates(&self) -> Vec<(String, &str)> {
        fn strings<'a>(v: &'a serde_json::Value, out: &mut Vec<(String, &'a str)>) {
            match v {
                serde_json::Value::String(s) => out.push(("http.body".into(), s)),
                serde_json::Value::Array(a) => a.iter().for_each(|v| strings(v, out)),
                serde_json::Value::Object(o) => o.values().for_each(|v| strings(v, out)),
                _ => {}
            }
        }
        let mut out = Vec::new();
        match self {
            HookAction::Http(h) => {
                out.push(("http.url".into(), h.url.as_str()));
                for (k, v) in &h.headers {
                    out.push((format!("http.headers.{k}"), v.as_str()));
                }
                if let Some(b) = &h.body {
                    strings(b, &mut out);
                }
            }
            HookAction::Command { argv } => {
                for (i, a) in argv.iter().enumerate() {
                    out.push((format!("command.{i}"), a.as_str()));
                }
            }
            HookAction::Use { .. } => {}
        }
        out
    }

    /// The `${param:KEY}` keys its templates use: the params a fleet must give when it uses the hook.
    pub fn params_used(&self) -> std::collections::BTreeSet<String> {
        self.templates()
            .into_iter()
            .filter_map(|(_, t)| scan(t).ok())
            .flatten()
            .filter_map(|p| match p {
                Err(Placeholder::Param(k)) => Some(k.to_string()),
                _ => None,
            })
            .collect()
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HttpHook {
    /// `http://` or `https://` URL template.
    pub url: String,
    /// Upper-case HTTP method; `POST` when there is a body, else `GET`.
    pub method: String,
    /// Header name -> value template.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// JSON body; every string in it is a template.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body: Option<serde_json::Value>,
    /// Text the answer's body must contain for success, besides a 2xx status (APIs such as Technitium's
    /// answer 200 with `"status":"error"`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub success_contains: Option<String>,
}

/// A container's values for templates.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HookContext {
    pub fleet: String,
    pub name: String,
    pub hostname: String,
    pub node: String,
    pub vm_id: u32,
    /// net0's IPv4 address without prefix length; empty when unknown.
    pub ipv4: String,
    /// net0's IPv6 address without prefix length; empty when unknown.
    pub ipv6: String,
    /// The `params` a fleet gave a hook it uses by name (`${param:KEY}`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub params: BTreeMap<String, String>,
}

impl HookContext {
    /// The value of a container placeholder.
    pub fn value(&self, key: &str) -> Option<String> {
        Some(match key {
            "name" => self.name.clone(),
            "hostname" => self.hostname.clone(),
            "fleet" => self.fleet.clone(),
            "node" => self.node.clone(),
            "vm_id" => self.vm_id.to_string(),
            "ipv4" => self.ipv4.clone(),
            "ipv6" => self.ipv6.clone(),
            _ => return None,
        })
    }

    /// The values as environment variables for command hooks: `PXFLEET_NAME`, `PXFLEET_VM_ID`, ...
    pub fn env(&self, event: HookEvent) -> Vec<(String, String)> {
        let mut v: Vec<(String, String)> = CONTAINER_PLACEHOLDERS
            .iter()
            .map(|k| {
                (
                    format!("PXFLEET_{}", k.to_ascii_uppercase()),
                    self.value(k).unwrap_or_default(),
                )
            })
            .collect();
        v.push(("PXFLEET_EVENT".into(), event.as_str().into()));
        v
    }
}

/// One `${...}` of a template.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Placeholder<'a> {
    Container(&'a str),
    Env(&'a str),
    File(&'a str),
    /// `${param:KEY}`: a value the fleet gives a hook defined in the controller's configuration.
    Param(&'a str),
}

/// Why a template is not valid.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TemplateError {
    #[error("unknown placeholder '${{{0}}}'")]
    Unknown(String),
    #[error("'${{' without a closing '}}'")]
    Unclosed,
    #[error("'${{env:{0}}}' is not a valid environment variable name")]
    BadEnvName(String),
    #[error("'${{file:{0}}}' needs an absolute path")]
    RelativeFile(String),
    #[error(
        "'${{param:{0}}}' is not a valid parameter name (lower-case letters, digits, '_', '-')"
    )]
    BadParamName(String),
}

/// Why a template could not be filled in when the hook ran. Never contains a secret's value.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ExpandError {
    #[error(transparent)]
    Template(#[from] TemplateError),
    #[error("environment variable {0} is not set on the controller")]
    MissingEnv(String),
    #[error("secret file {path} cannot be read: {error}")]
    File { path: String, error: String },
    #[error("parameter {0} was not given (the fleet's `params`)")]
    MissingParam(String),
}

/// Splits a template into literal text and placeholders, checking each placeholder.
pub fn scan(template: &str) -> Result<Vec<Result<&str, Placeholder<'_>>>, TemplateError> {
    let mut out = Vec::new();
    let mut rest = template;
    while let Some(i) = rest.find("${") {
        if i > 0 {
            out.push(Ok(&rest[..i]));
        }
        let after = &rest[i + 2..];
        let end = after.find('}').ok_or(TemplateError::Unclosed)?;
        let inner = &after[..end];
        let p = if let Some(name) = inner.strip_prefix("env:") {
            let ok = !name.is_empty()
                && !name.starts_with(|c: char| c.is_ascii_digit())
                && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
            if !ok {
                return Err(TemplateError::BadEnvName(name.into()));
            }
            Placeholder::Env(name)
        } else if let Some(path) = inner.strip_prefix("file:") {
            if !path.starts_with('/') {
                return Err(TemplateError::RelativeFile(path.into()));
            }
            Placeholder::File(path)
        } else if let Some(key) = inner.strip_prefix("param:") {
            if !is_param_name(key) {
                return Err(TemplateError::BadParamName(key.into()));
            }
            Placeholder::Param(key)
        } else if CONTAINER_PLACEHOLDERS.contains(&inner) {
            Placeholder::Container(inner)
        } else {
            return Err(TemplateError::Unknown(inner.into()));
        };
        out.push(Err(p));
        rest = &after[end + 1..];
    }
    if !rest.is_empty() {
        out.push(Ok(rest));
    }
    Ok(out)
}

/// A `params` key: lower-case letters, digits, `_` and `-`, at most 64.
pub fn is_param_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 64
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-')
}

/// Where `${env:...}` and `${file:...}` come from when a hook runs.
pub trait SecretSource {
    fn env(&self, name: &str) -> Option<String>;
    fn file(&self, path: &str) -> Result<String, String>;
}

/// How a value is written into its place.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Escape {
    /// As is (headers, JSON strings: the JSON encoder escapes).
    None,
    /// Percent-encoded, for the query and path of a URL (RFC 3986 unreserved characters kept).
    Url,
}

fn percent_encode(s: &str, out: &mut String) {
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
}

/// Fills in a template.
pub fn expand(
    template: &str,
    cx: &HookContext,
    secrets: &dyn SecretSource,
    escape: Escape,
) -> Result<String, ExpandError> {
    let mut out = String::with_capacity(template.len());
    for part in scan(template)? {
        let value = match part {
            Ok(text) => {
                out.push_str(text);
                continue;
            }
            Err(Placeholder::Container(k)) => cx.value(k).unwrap_or_default(),
            Err(Placeholder::Env(n)) => secrets
                .env(n)
                .ok_or_else(|| ExpandError::MissingEnv(n.into()))?,
            Err(Placeholder::File(p)) => secrets.file(p).map_err(|error| ExpandError::File {
                path: p.into(),
                error,
            })?,
            Err(Placeholder::Param(k)) => cx
                .params
                .get(k)
                .cloned()
                .ok_or_else(|| ExpandError::MissingParam(k.into()))?,
        };
        match escape {
            Escape::None => out.push_str(&value),
            Escape::Url => percent_encode(&value, &mut out),
        }
    }
    Ok(out)
}

/// Fills in every string of a JSON body.
pub fn expand_json(
    v: &serde_json::Value,
    cx: &HookContext,
    secrets: &dyn SecretSource,
) -> Result<serde_json::Value, ExpandError> {
    use serde_json::Value as J;
    Ok(match v {
        J::String(s) => J::String(expand(s, cx, secrets, Escape::None)?),
        J::Array(a) => J::Array(
            a.iter()
                .map(|x| expand_json(x, cx, secrets))
                .collect::<Result<_, _>>()?,
        ),
        J::Object(o) => J::Object(
            o.iter()
                .map(|(k, x)| Ok((k.clone(), expand_json(x, cx, secrets)?)))
                .collect::<Result<_, ExpandError>>()?,
        ),
        other => other.clone(),
    })
}

/// The environment and file secrets a hook needs (to check them before it runs): (field, placeholder).
pub fn secrets_needed(h: &Hook) -> Vec<(String, Placeholder<'_>)> {
    let add = secrets_in;
    let mut out = Vec::new();
    if let HookAction::Http(http) = &h.action {
        add(&mut out, format!("hooks.{}.http.url", h.name), &http.url);
        for (k, v) in &http.headers {
            add(&mut out, format!("hooks.{}.http.headers.{k}", h.name), v);
        }
        if let Some(body) = &http.body {
            body_strings(&mut out, format!("hooks.{}.http.body", h.name), body);
        }
    }
    out
}

/// The secrets (`${env:..}`, `${file:..}`) template `t` names, as `(field, placeholder)`.
fn secrets_in<'a>(out: &mut Vec<(String, Placeholder<'a>)>, field: String, t: &'a str) {
    if let Ok(parts) = scan(t) {
        for p in parts.into_iter().filter_map(Result::err) {
            if matches!(p, Placeholder::Env(_) | Placeholder::File(_)) {
                out.push((field.clone(), p));
            }
        }
    }
}

/// The secrets named by the strings of a JSON body (every string is a template), with their paths.
fn body_strings<'a>(
    out: &mut Vec<(String, Placeholder<'a>)>,
    field: String,
    v: &'a serde_json::Value,
) {
    match v {
        serde_json::Value::String(t) => secrets_in(out, field, t),
        serde_json::Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                body_strings(out, format!("{field}.{i}"), item);
            }
        }
        serde_json::Value::Object(m) => {
            for (k, item) in m {
                body_strings(out, format!("{field}.{k}"), item);
            }
        }
        _ => {}
    }
}

/// The problems with the secrets the hooks need on the controller: one `(field, message)` per missing
/// environment variable or unreadable file.
pub fn check_secrets(hooks: &[Hook], secrets: &dyn SecretSource) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for h in hooks {
        for (field, p) in secrets_needed(h) {
            match p {
                Placeholder::Env(n) if secrets.env(n).is_none() => out.push((
                    field,
                    format!("environment variable {n} is not set on the controller"),
                )),
                Placeholder::File(path) => {
                    if let Err(e) = secrets.file(path) {
                        out.push((field, format!("secret file {path} cannot be read: {e}")));
                    }
                }
                _ => {}
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Fake;
    impl SecretSource for Fake {
        fn env(&self, name: &str) -> Option<String> {
            (name == "TOKEN").then(|| "s3cr&t".to_owned())
        }
        fn file(&self, path: &str) -> Result<String, String> {
            if path == "/etc/tok" {
                Ok("ftok".into())
            } else {
                Err("No such file or directory (os error 2)".into())
            }
        }
    }

    fn cx() -> HookContext {
        HookContext {
            fleet: "dev".into(),
            name: "web-1".into(),
            hostname: "web1".into(),
            node: "pve1".into(),
            vm_id: 1001,
            ipv4: "192.168.7.10".into(),
            ipv6: String::new(),
            params: [("zone".to_string(), "a&b".to_string())].into(),
        }
    }

    #[test]
    fn params_are_filled_in_like_container_values_and_missing_ones_are_named() {
        assert_eq!(
            expand("http://d/?z=${param:zone}", &cx(), &Fake, Escape::Url).unwrap(),
            "http://d/?z=a%26b"
        );
        assert_eq!(
            expand("${param:other}", &cx(), &Fake, Escape::None)
                .unwrap_err()
                .to_string(),
            "parameter other was not given (the fleet's `params`)"
        );
        assert!(scan("${param:Bad}").is_err());
    }

    #[test]
    fn expands_container_values_and_secrets() {
        let t = "http://dns:5380/api/zones/records/add?token=${env:TOKEN}&domain=${hostname}.lan&ipAddress=${ipv4}&n=${vm_id}";
        assert_eq!(
            expand(t, &cx(), &Fake, Escape::Url).unwrap(),
            "http://dns:5380/api/zones/records/add?token=s3cr%26t&domain=web1.lan&ipAddress=192.168.7.10&n=1001"
        );
        assert_eq!(
            expand(
                "Bearer ${file:/etc/tok} ${env:TOKEN}",
                &cx(),
                &Fake,
                Escape::None
            )
            .unwrap(),
            "Bearer ftok s3cr&t"
        );
    }

    #[test]
    fn json_body_strings_are_filled_in_and_escaped_by_json() {
        let body = serde_json::json!({"name": "${name}", "n": 3, "tags": ["${fleet}\"x"], "node": {"at": "${node}"}});
        let v = expand_json(&body, &cx(), &Fake).unwrap();
        assert_eq!(
            v.to_string(),
            r#"{"name":"web-1","n":3,"tags":["dev\"x"],"node":{"at":"pve1"}}"#
        );
    }

    #[test]
    fn bad_templates_are_refused() {
        assert_eq!(
            scan("${nmae}").unwrap_err().to_string(),
            "unknown placeholder '${nmae}'"
        );
        assert_eq!(scan("${name").unwrap_err(), TemplateError::Unclosed);
        assert!(matches!(
            scan("${env:1X}"),
            Err(TemplateError::BadEnvName(_))
        ));
        assert!(matches!(
            scan("${file:tok}"),
            Err(TemplateError::RelativeFile(_))
        ));
    }

    #[test]
    fn a_missing_secret_is_named_without_any_value() {
        let e = expand("${env:NOPE}", &cx(), &Fake, Escape::None).unwrap_err();
        assert_eq!(
            e.to_string(),
            "environment variable NOPE is not set on the controller"
        );
        let h = Hook {
            name: "dns".into(),
            on: vec![HookEvent::Ready],
            action: HookAction::Http(HttpHook {
                url: "http://x/?t=${env:NOPE}".into(),
                method: "GET".into(),
                headers: BTreeMap::from([("X-Key".into(), "${file:/missing}".into())]),
                body: Some(serde_json::json!({
                    "auth": {"token": "${env:TOKEN}", "other": ["ok", "${env:NOBODY}"]},
                    "ttl": 300
                })),
                success_contains: None,
            }),
            timeout_secs: 1,
            retries: 0,
            containers: vec![],
        };
        let problems = check_secrets(&[h], &Fake);
        assert_eq!(
            problems,
            vec![
                (
                    "hooks.dns.http.url".to_owned(),
                    "environment variable NOPE is not set on the controller".to_owned()
                ),
                (
                    "hooks.dns.http.headers.X-Key".to_owned(),
                    "secret file /missing cannot be read: No such file or directory (os error 2)"
                        .to_owned()
                ),
                // a JSON body's strings are templates too: the one missing variable is named at its path
                (
                    "hooks.dns.http.body.auth.other.1".to_owned(),
                    "environment variable NOBODY is not set on the controller".to_owned()
                ),
            ]
        );
    }
}
