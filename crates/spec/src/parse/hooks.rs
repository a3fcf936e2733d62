//! `hooks:` at the top level of fleet.yaml (see [`crate::hooks`] and docs/hooks.md).

use std::collections::BTreeMap;

use super::{join, quote, Cx};
use crate::hooks::{
    scan, Hook, HookAction, HookEvent, HttpHook, Placeholder, CONTAINER_PLACEHOLDERS,
    DEFAULT_RETRIES, DEFAULT_TIMEOUT_SECS, MAX_RETRIES, MAX_TIMEOUT_SECS,
};
use crate::syntax;
use crate::yaml::{self, Node, Value};

pub(crate) const HOOK_FIELDS: &[&str] = &[
    "on",
    "http",
    "command",
    "use",
    "params",
    "timeout",
    "retries",
    "containers",
];
/// What a fleet gives a hook it uses by name; the rest is the definition's.
const USE_FIELDS: &[&str] = &["on", "use", "params", "containers"];
const HTTP_FIELDS: &[&str] = &["url", "method", "headers", "body", "success_contains"];
const METHODS: &[&str] = &["GET", "POST", "PUT", "PATCH", "DELETE"];

fn placeholders_hint() -> String {
    let mut all: Vec<String> = CONTAINER_PLACEHOLDERS
        .iter()
        .map(|p| format!("${{{p}}}"))
        .collect();
    all.push("${env:NAME}".into());
    all.push("${file:/path}".into());
    all.push("${param:KEY} (hooks defined in the controller's configuration)".into());
    format!("placeholders: {}", all.join(", "))
}

impl Cx<'_> {
    /// All hooks of the `hooks:` mapping.
    pub(super) fn hooks(&mut self, n: &Node) -> Vec<Hook> {
        let Some(es) = self.map(n, "hooks") else {
            return vec![];
        };
        let mut out = Vec::new();
        for e in es {
            let path = join("hooks", &e.key);
            self.record(&path, e.key_span);
            if !syntax::is_simple_name(&e.key) {
                self.err(
                    e.key_span,
                    &path,
                    format!("hook name {} is not valid", quote(&e.key)),
                    Some("use letters, digits, '.', '_', '-'"),
                );
                continue;
            }
            if let Some(h) = self.hook(&e.key, &e.value, &path) {
                out.push(h);
            }
        }
        out
    }

    /// A template string: its placeholders must be known; `secrets` says whether `${env:}`/`${file:}` may
    /// appear.
    fn template_string(&mut self, n: &Node, path: &str, secrets: bool) -> Option<String> {
        let s = self.string(n, path)?;
        match scan(&s) {
            Err(e) => {
                self.err(n.span, path, e.to_string(), Some(&placeholders_hint()));
                None
            }
            Ok(parts) => {
                if !self.hook_definitions
                    && parts
                        .iter()
                        .any(|p| matches!(p, Err(Placeholder::Param(_))))
                {
                    self.err(
                        n.span,
                        path,
                        "'${param:...}' is for hooks defined in the controller's configuration",
                        Some(
                            "use such a hook with `use: NAME` and give its values under `params:`",
                        ),
                    );
                    return None;
                }
                let secret = parts
                    .iter()
                    .any(|p| matches!(p, Err(Placeholder::Env(_) | Placeholder::File(_))));
                if secret && !secrets {
                    self.err(
                        n.span,
                        path,
                        "'${env:...}' and '${file:...}' are not allowed in a command's arguments (anyone on the controller can read a command line)",
                        Some("the command inherits the controller's environment: read the secret from there"),
                    );
                    return None;
                }
                Some(s)
            }
        }
    }

    fn hook(&mut self, name: &str, n: &Node, path: &str) -> Option<Hook> {
        let es = self.map(n, path)?;
        let mut on = None;
        let mut action = None;
        let mut timeout = DEFAULT_TIMEOUT_SECS;
        let mut retries = DEFAULT_RETRIES;
        let mut containers = vec![];
        let mut ok = true;
        let mut actions = 0;
        let mut params = None;
        for e in es {
            let p = join(path, &e.key);
            self.record(&p, e.value.span);
            if Self::given_empty(e, HOOK_FIELDS) {
                continue;
            }
            if self.hook_definitions && USE_FIELDS.contains(&e.key.as_str()) {
                self.err(
                    e.key_span,
                    &p,
                    format!(
                        "`{}` is not part of a hook definition: a fleet that uses the hook gives `on`, `containers` and `params`",
                        e.key
                    ),
                    Some("a definition has `http` or `command`, `timeout` and `retries`"),
                );
                ok = false;
                continue;
            }
            match e.key.as_str() {
                "use" => {
                    actions += 1;
                    match self.string(&e.value, &p) {
                        Some(h) if syntax::is_simple_name(&h) => {
                            action = Some(HookAction::Use {
                                hook: h,
                                params: BTreeMap::new(),
                            })
                        }
                        Some(h) => {
                            self.err(
                                e.value.span,
                                &p,
                                format!("hook name {} is not valid", quote(&h)),
                                Some(
                                    "the name of a hook defined in the controller's configuration",
                                ),
                            );
                            ok = false;
                        }
                        None => ok = false,
                    }
                }
                "params" => match self.params(&e.value, &p) {
                    Some(v) => params = Some(v),
                    None => ok = false,
                },
                "on" => on = self.events(&e.value, &p),
                "http" => {
                    actions += 1;
                    match self.http(&e.value, &p) {
                        Some(h) => action = Some(HookAction::Http(h)),
                        None => ok = false,
                    }
                }
                "command" => {
                    actions += 1;
                    match self.command(&e.value, &p) {
                        Some(argv) => action = Some(HookAction::Command { argv }),
                        None => ok = false,
                    }
                }
                "timeout" => match self.int(&e.value, &p, 1, MAX_TIMEOUT_SECS as i64, " (seconds)")
                {
                    Some(v) => timeout = v as u64,
                    None => ok = false,
                },
                "retries" => match self.int(&e.value, &p, 0, MAX_RETRIES as i64, "") {
                    Some(v) => retries = v as u32,
                    None => ok = false,
                },
                "containers" => match self.strings(&e.value, &p) {
                    Some(v) => containers = v.into_iter().map(|(s, _)| s).collect(),
                    None => ok = false,
                },
                _ => {
                    self.unknown_field(e, path, HOOK_FIELDS);
                    ok = false;
                }
            }
        }
        if actions > 1 {
            self.err_at(
                path,
                "a hook is one of `http`, `command` or `use`",
                Some("write two hooks"),
            );
            return None;
        }
        if let Some(HookAction::Use { params: given, .. }) = &mut action {
            if let Some(e) = es.iter().find(|e| !USE_FIELDS.contains(&e.key.as_str())) {
                self.err(
                    e.key_span,
                    &join(path, &e.key),
                    format!(
                        "`{}` is set by the definition of a hook used by name, not by the fleet",
                        e.key
                    ),
                    Some("with `use`, a fleet gives `on`, `containers` and `params` only"),
                );
                return None;
            }
            *given = params.take().unwrap_or_default();
        } else if params.is_some() {
            self.err_at(
                &join(path, "params"),
                "`params` go with `use: NAME` (a hook defined in the controller's configuration)",
                None,
            );
            return None;
        }
        if actions == 0 && ok {
            self.err_at(
                path,
                "missing `http`, `command` or `use` (what the hook does)",
                Some("e.g. `http: {url: \"http://dns:5380/...\"}` or `command: [/usr/local/bin/notify, \"${name}\"]`"),
            );
            return None;
        }
        if self.hook_definitions {
            on = Some(vec![]);
        }
        if on.is_none() && !es.iter().any(|e| e.key == "on") {
            self.err_at(
                path,
                "missing field 'on' (when the hook runs)",
                Some("add `on: ready`, `on: destroyed` or `on: [ready, destroyed]`"),
            );
            return None;
        }
        Some(Hook {
            name: name.to_owned(),
            on: on?,
            action: action?,
            timeout_secs: timeout,
            retries,
            containers,
        })
        .filter(|_| ok)
    }

    /// `params:` of a hook used by name: KEY -> plain text (no placeholders: a fleet gives no secret source).
    fn params(&mut self, n: &Node, path: &str) -> Option<BTreeMap<String, String>> {
        let es = self.map(n, path)?;
        let mut out = BTreeMap::new();
        let mut ok = true;
        for e in es {
            let Some(p) = self.keyed_entry(
                e,
                path,
                crate::hooks::is_param_name(&e.key),
                "parameter name",
                "lower-case letters, digits, '_' and '-'",
            ) else {
                ok = false;
                continue;
            };
            match self.string(&e.value, &p) {
                Some(v) if v.contains("${") => {
                    self.err(
                        e.value.span,
                        &p,
                        "a parameter is plain text: placeholders are the hook definition's",
                        Some(
                            "the definition may use ${name}, ${hostname}, ... around ${param:KEY}",
                        ),
                    );
                    ok = false;
                }
                Some(v) => {
                    out.insert(e.key.clone(), v);
                }
                None => ok = false,
            }
        }
        ok.then_some(out)
    }

    fn events(&mut self, n: &Node, path: &str) -> Option<Vec<HookEvent>> {
        let items: Vec<(String, crate::model::Span)> = match &n.value {
            Value::Seq(_) => self.strings(n, path)?,
            _ => vec![(self.string(n, path)?, n.span)],
        };
        let mut out = Vec::new();
        for (s, span) in items {
            match HookEvent::parse(&s) {
                Some(e) if !out.contains(&e) => out.push(e),
                Some(_) => {}
                None => {
                    self.err(
                        span,
                        path,
                        format!("unknown event {}", quote(&s)),
                        Some("hooks run on `ready` or `destroyed`"),
                    );
                    return None;
                }
            }
        }
        if out.is_empty() {
            self.err(
                n.span,
                path,
                "on needs at least one event",
                Some("`ready` or `destroyed`"),
            );
            return None;
        }
        Some(out)
    }

    fn http(&mut self, n: &Node, path: &str) -> Option<HttpHook> {
        let es = self.map(n, path)?;
        let mut url = None;
        let mut method = None;
        let mut headers = BTreeMap::new();
        let mut body = None;
        let mut success_contains = None;
        let mut ok = true;
        for e in es {
            let p = join(path, &e.key);
            self.record(&p, e.value.span);
            if Self::given_empty(e, HTTP_FIELDS) {
                continue;
            }
            match e.key.as_str() {
                "url" => match self.template_string(&e.value, &p, true) {
                    Some(u) => match check_url(&u) {
                        Ok(()) => url = Some(u),
                        Err(why) => {
                            self.err(
                                e.value.span,
                                &p,
                                format!("url {} is not a usable URL: {why}", quote(&u)),
                                Some("write http://HOST[:PORT]/PATH or https://HOST[:PORT]/PATH"),
                            );
                            ok = false;
                        }
                    },
                    None => ok = false,
                },
                "method" => match self.string(&e.value, &p) {
                    Some(m) if METHODS.contains(&m.to_ascii_uppercase().as_str()) => {
                        method = Some(m.to_ascii_uppercase())
                    }
                    Some(m) => {
                        self.err(
                            e.value.span,
                            &p,
                            format!("unknown HTTP method {}", quote(&m)),
                            Some(&format!("one of {}", METHODS.join(", "))),
                        );
                        ok = false;
                    }
                    None => ok = false,
                },
                "headers" => {
                    let Some(hes) = self.map(&e.value, &p) else {
                        ok = false;
                        continue;
                    };
                    for he in hes {
                        let hp = join(&p, &he.key);
                        self.record(&hp, he.value.span);
                        let token = !he.key.is_empty()
                            && he.key.bytes().all(|b| {
                                b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
                            });
                        if !token {
                            self.err(
                                he.key_span,
                                &hp,
                                format!("header name {} is not valid", quote(&he.key)),
                                None,
                            );
                            ok = false;
                            continue;
                        }
                        match self.template_string(&he.value, &hp, true) {
                            Some(v) => {
                                headers.insert(he.key.clone(), v);
                            }
                            None => ok = false,
                        }
                    }
                }
                "success_contains" => match self.string(&e.value, &p) {
                    Some(s) => success_contains = Some(s),
                    None => ok = false,
                },
                "body" => match self.json(&e.value, &p) {
                    Some(b) => body = Some(b),
                    None => ok = false,
                },
                _ => {
                    self.unknown_field(e, path, HTTP_FIELDS);
                    ok = false;
                }
            }
        }
        if url.is_none() && ok && !es.iter().any(|e| e.key == "url") {
            self.err_at(
                path,
                "missing field 'url'",
                Some("e.g. url: \"http://dns.lan:5380/api/...\""),
            );
            return None;
        }
        let method =
            method.unwrap_or_else(|| if body.is_some() { "POST" } else { "GET" }.to_owned());
        Some(HttpHook {
            url: url?,
            method,
            headers,
            body,
            success_contains,
        })
        .filter(|_| ok)
    }

    /// A YAML value as JSON; every string is a template.
    fn json(&mut self, n: &Node, path: &str) -> Option<serde_json::Value> {
        use serde_json::Value as J;
        Some(match &n.value {
            _ if n.is_null() => J::Null,
            Value::Scalar { text, plain: true } => {
                if let Some(b) = yaml::parse_bool(text) {
                    J::Bool(b)
                } else if let Ok(i) = text.parse::<i64>() {
                    J::from(i)
                } else if let Some(f) = text
                    .parse::<f64>()
                    .ok()
                    .and_then(serde_json::Number::from_f64)
                {
                    J::Number(f)
                } else {
                    J::String(self.template_string(n, path, true)?)
                }
            }
            Value::Scalar { .. } => J::String(self.template_string(n, path, true)?),
            Value::Seq(items) => {
                let mut out = Vec::with_capacity(items.len());
                for (i, item) in items.iter().enumerate() {
                    out.push(self.json(item, &join(path, &i.to_string()))?);
                }
                J::Array(out)
            }
            Value::Map(es) => {
                let mut out = serde_json::Map::new();
                for e in es {
                    let p = join(path, &e.key);
                    self.record(&p, e.value.span);
                    out.insert(e.key.clone(), self.json(&e.value, &p)?);
                }
                J::Object(out)
            }
        })
    }

    fn command(&mut self, n: &Node, path: &str) -> Option<Vec<String>> {
        let items = self.seq(n, path)?;
        let mut argv = Vec::with_capacity(items.len());
        for (i, item) in items.iter().enumerate() {
            argv.push(self.template_string(item, &join(path, &i.to_string()), false)?);
        }
        match argv.first() {
            None => {
                self.err(
                    n.span,
                    path,
                    "command is empty",
                    Some("an argv list: [/usr/local/bin/notify, \"${name}\"]"),
                );
                None
            }
            Some(p) if !p.starts_with('/') || p.contains("${") => {
                self.err(
                    items[0].span,
                    &join(path, "0"),
                    format!("the program {} must be an absolute path", quote(p)),
                    Some("commands run without a shell and without a PATH search: write /usr/local/bin/NAME"),
                );
                None
            }
            Some(_) => Some(argv),
        }
    }

    /// After the containers are known: each hook's `containers` names one of them.
    pub(super) fn check_hook_containers(&mut self, hooks: &[Hook], names: &[&str]) {
        for h in hooks {
            for (i, c) in h.containers.iter().enumerate() {
                if !names.contains(&c.as_str()) {
                    let p = join(&join(&join("hooks", &h.name), "containers"), &i.to_string());
                    self.err_at(&p, format!("no container named {}", quote(c)), None);
                }
            }
        }
    }
}

/// Checks the parts of a URL template that do not depend on placeholders.
fn check_url(u: &str) -> Result<(), String> {
    let rest = u
        .strip_prefix("http://")
        .or_else(|| u.strip_prefix("https://"))
        .ok_or("it must start with http:// or https://")?;
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    if authority.is_empty() {
        return Err("it has no host".into());
    }
    if authority.contains('@') {
        return Err("user:password@ is not supported (use a header)".into());
    }
    if authority.contains("${") {
        return Ok(());
    }
    let (host, port) = match authority.rsplit_once(':') {
        Some((h, _)) if !h.ends_with(']') && h.contains(':') => (authority, None), // bare IPv6: refused below
        Some((h, p)) => (h, Some(p)),
        None => (authority, None),
    };
    if let Some(p) = port {
        if p.parse::<u16>().ok().filter(|p| *p > 0).is_none() {
            return Err(format!("port '{p}' is not a number from 1 to 65535"));
        }
    }
    let host_ok = if let Some(v6) = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        v6.parse::<std::net::Ipv6Addr>().is_ok()
    } else {
        !host.is_empty()
            && host
                .split('.')
                .all(|l| !l.is_empty() && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-'))
    };
    if host_ok {
        Ok(())
    } else {
        Err(format!("host '{host}' is not a host name or address"))
    }
}

#[cfg(test)]
mod tests {
    use super::check_url;

    #[test]
    fn urls() {
        assert!(check_url("http://dns.lan:5380/api/zones/records/add?token=${env:T}").is_ok());
        assert!(check_url("https://[fd00::1]:8443/x").is_ok());
        assert!(check_url("https://${env:DNS_HOST}/x").is_ok());
        assert!(check_url("ftp://x/").is_err());
        assert!(check_url("http:///x").is_err());
        assert!(check_url("http://dns:99999/").is_err());
        assert!(check_url("http://d ns/").is_err());
    }
}
