//! The PVE API schema (copied from ../shared/pve/schema/) and validation of parameters against it, with PVE's
//! messages: types, enums, ranges, lengths, patterns, named formats and property strings with sub-keys.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, OnceLock};

use regex::Regex;
use serde_json::{Map, Value};

use crate::error::{Result, SimError};

static SCHEMA_TEXT: &str = include_str!("../schema/pve-api-lxc-subset.json");

/// The schema's paths, each with the text of its methods. Every pvesim invocation is a process of its own and
/// needs one or two paths of the 71: decoding all 267 KB was half of a `pvesh get`'s CPU time, so the text is
/// only split here (strings and nesting followed, nothing decoded) and a path is decoded when asked for.
fn index() -> &'static BTreeMap<&'static str, &'static str> {
    static INDEX: OnceLock<BTreeMap<&'static str, &'static str>> = OnceLock::new();
    INDEX.get_or_init(|| split_top_level(SCHEMA_TEXT))
}

/// The top-level members of a JSON object text: key (as written, the schema's keys have no escapes) -> value
/// text. Empty for text that is not an object.
fn split_top_level(text: &'static str) -> BTreeMap<&'static str, &'static str> {
    let b = text.as_bytes();
    let mut out = BTreeMap::new();
    let mut depth = 0usize;
    let mut key: Option<&'static str> = None;
    let mut value_start: Option<usize> = None;
    let mut finish = |key: &mut Option<&'static str>, start: &mut Option<usize>, end: usize| {
        if let (Some(k), Some(s)) = (key.take(), start.take()) {
            if let Some(v) = text.get(s..end) {
                out.insert(k, v.trim());
            }
        }
    };
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'"' => {
                let begin = i + 1;
                i += 1;
                while i < b.len() && b[i] != b'"' {
                    i += if b[i] == b'\\' { 2 } else { 1 };
                }
                if depth == 1 && value_start.is_none() {
                    key = text.get(begin..i.min(b.len()));
                }
            }
            b':' if depth == 1 && value_start.is_none() => value_start = Some(i + 1),
            b'{' | b'[' => depth += 1,
            b'}' | b']' => {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    finish(&mut key, &mut value_start, i);
                }
            }
            b',' if depth == 1 => finish(&mut key, &mut value_start, i),
            _ => {}
        }
        i += 1;
    }
    out
}

/// One path of the schema (its methods), decoded on first use and kept for the process's life.
fn path_schema(path: &str) -> Option<&'static Value> {
    static DECODED: OnceLock<Mutex<HashMap<&'static str, &'static Value>>> = OnceLock::new();
    let (key, text) = index().get_key_value(path)?;
    let cache = DECODED.get_or_init(Default::default);
    let mut cache = cache.lock().ok()?;
    if let Some(v) = cache.get(key) {
        return Some(v);
    }
    let value: &'static Value = Box::leak(Box::new(serde_json::from_str(text).ok()?));
    cache.insert(key, value);
    Some(value)
}

/// How many instances an indexed option (`net[n]`) has in PVE.
fn index_count(base: &str) -> usize {
    match base {
        "net" => 32,
        "mp" | "dev" | "unused" => 256,
        _ => 32,
    }
}

/// The parameter properties of one API method, with `name[n]` entries expanded to `name0..nameN`.
/// Returns `None` when the schema has no such path or method. Expanded once per process and shared: the
/// create method alone expands to ~1,300 entries, and a `pct create` asks for it several times.
pub fn method_params(path: &str, method: &str) -> Option<Arc<BTreeMap<String, Value>>> {
    type Params = Arc<BTreeMap<String, Value>>;
    static CACHE: OnceLock<Mutex<HashMap<(String, String), Params>>> = OnceLock::new();
    let cache = CACHE.get_or_init(Default::default);
    let key = (path.to_string(), method.to_string());
    if let Some(hit) = cache.lock().ok().and_then(|c| c.get(&key).cloned()) {
        return Some(hit);
    }
    let info = path_schema(path)?.get(method)?;
    let props = info
        .get("parameters")
        .and_then(|p| p.get("properties"))
        .and_then(Value::as_object)
        .map(expand)
        .unwrap_or_default();
    let props = Arc::new(props);
    if let Ok(mut c) = cache.lock() {
        c.insert(key, Arc::clone(&props));
    }
    Some(props)
}

/// Whether the method returns null (pvesh prints nothing for those).
pub fn method_returns_null(path: &str, method: &str) -> bool {
    path_schema(path)
        .and_then(|p| p.get(method))
        .and_then(|m| m.get("returns"))
        .and_then(|r| r.get("type"))
        .and_then(Value::as_str)
        .map(|t| t == "null")
        .unwrap_or(false)
}

/// Expands `name[n]` keys.
pub fn expand(props: &Map<String, Value>) -> BTreeMap<String, Value> {
    let mut out = BTreeMap::new();
    for (k, v) in props {
        if let Some(base) = k.strip_suffix("[n]") {
            for i in 0..index_count(base) {
                out.insert(format!("{base}{i}"), v.clone());
            }
        } else {
            out.insert(k.clone(), v.clone());
        }
    }
    out
}

/// Finds the schema path template matching a concrete API path, with the captured path parameters.
pub fn match_path(path: &str) -> Option<(String, BTreeMap<String, String>)> {
    let want: Vec<&str> = path
        .trim_matches('/')
        .split('/')
        .filter(|s| !s.is_empty())
        .collect();
    let mut best: Option<(String, BTreeMap<String, String>, usize)> = None;
    for tmpl in index().keys() {
        let parts: Vec<&str> = tmpl
            .trim_matches('/')
            .split('/')
            .filter(|s| !s.is_empty())
            .collect();
        if parts.len() != want.len() {
            continue;
        }
        let mut caps = BTreeMap::new();
        let mut literal = 0;
        let ok = parts.iter().zip(&want).all(|(p, w)| {
            if p.starts_with('{') && p.ends_with('}') {
                caps.insert(p[1..p.len() - 1].to_string(), (*w).to_string());
                true
            } else {
                literal += 1;
                p == w
            }
        });
        if ok && best.as_ref().map(|b| literal > b.2).unwrap_or(true) {
            best = Some((tmpl.to_string(), caps, literal));
        }
    }
    best.map(|(t, c, _)| (t, c))
}

/// Methods the schema defines for a path template.
pub fn path_methods(tmpl: &str) -> Vec<String> {
    path_schema(tmpl)
        .and_then(Value::as_object)
        .map(|m| m.keys().cloned().collect())
        .unwrap_or_default()
}

/// `parse_boolean` of PVE.
pub fn parse_boolean(v: &str) -> Option<bool> {
    match v.to_ascii_lowercase().as_str() {
        "1" | "on" | "yes" | "true" => Some(true),
        "0" | "off" | "no" | "false" => Some(false),
        _ => None,
    }
}

fn is_integer(v: &str) -> bool {
    static RE: OnceLock<Regex> = OnceLock::new();
    RE.get_or_init(|| Regex::new(r"^[+-]?\d+$").expect("static regex"))
        .is_match(v)
}

fn is_number(v: &str) -> bool {
    static RE: OnceLock<Regex> = OnceLock::new();
    RE.get_or_init(|| {
        Regex::new(r"^[+-]?(\d+\.\d+|\d+\.|\.\d+|\d+)([eE][+-]?\d+)?$").expect("static regex")
    })
    .is_match(v)
}

/// Converts a Perl pattern from the schema into an anchored Rust regex.
fn perl_regex(pat: &str) -> Option<Regex> {
    let p = pat.replace("(?^:", "(?:").replace("\\0", "\\x00");
    Regex::new(&format!("^(?:{p})$")).ok()
}

/// Validates all parameters (`PVE::JSONSchema::validate`): every error is collected, then one
/// `400 Parameter verification failed.` is raised.
pub fn validate(props: &BTreeMap<String, Value>, params: &BTreeMap<String, String>) -> Result<()> {
    validate_except(props, params, "")
}

/// [`validate`] as if the schema had no property `ignored` (the CLI's `extra-args`, which is not a parameter
/// of the API method), without copying the schema.
pub fn validate_except(
    props: &BTreeMap<String, Value>,
    params: &BTreeMap<String, String>,
    ignored: &str,
) -> Result<()> {
    let mut errors = BTreeMap::new();
    for (k, schema) in props.iter().filter(|(k, _)| k.as_str() != ignored) {
        check_prop(params.get(k).map(String::as_str), schema, k, &mut errors);
    }
    for k in params.keys() {
        if k != ignored && !props.contains_key(k) {
            errors.insert(
                k.clone(),
                "property is not defined in schema and the schema does not allow additional properties".into(),
            );
        }
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(SimError::Param { errors })
    }
}

fn add_error(errors: &mut BTreeMap<String, String>, path: &str, msg: String) {
    errors
        .entry(path.to_string())
        .and_modify(|e| *e = format!("{e}\\n{msg}"))
        .or_insert(msg);
}

fn num(v: &Value) -> Option<f64> {
    v.as_f64()
        .or_else(|| v.as_str().and_then(|s| s.parse().ok()))
}

fn fmt_num(v: &Value) -> String {
    match v {
        Value::Number(n) => n.to_string(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// `check_prop` for a scalar value.
pub fn check_prop(
    value: Option<&str>,
    schema: &Value,
    path: &str,
    errors: &mut BTreeMap<String, String>,
) {
    let Some(value) = value else {
        let optional = schema.get("optional").map(truthy).unwrap_or(false);
        if !optional {
            add_error(
                errors,
                path,
                "property is missing and it is not optional".into(),
            );
        }
        return;
    };
    let ty = schema
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or("string");
    let type_ok = match ty {
        "boolean" => value == "0" || value == "1",
        "integer" => is_integer(value),
        "number" => is_number(value),
        _ => true,
    };
    if !type_ok {
        add_error(
            errors,
            path,
            format!("type check ('{ty}') failed - got '{value}'"),
        );
        return;
    }
    match schema.get("format") {
        Some(Value::Object(sub)) => {
            if let Err(e) = parse_property_string(sub, value, path) {
                add_error(errors, path, format!("invalid format - {e}"));
                return;
            }
        }
        Some(Value::String(name)) => {
            if let Err(e) = check_named_format(name, value) {
                add_error(errors, path, format!("invalid format - {e}\n"));
                return;
            }
        }
        _ => {}
    }
    if let Some(pat) = schema.get("pattern").and_then(Value::as_str) {
        if let Some(re) = perl_regex(pat) {
            if !re.is_match(value) {
                add_error(
                    errors,
                    path,
                    "value does not match the regex pattern".into(),
                );
                return;
            }
        }
    }
    if let Some(max) = schema.get("maxLength").and_then(num) {
        if value.chars().count() as f64 > max {
            add_error(
                errors,
                path,
                format!(
                    "value may only be {} characters long",
                    fmt_num(&schema["maxLength"])
                ),
            );
            return;
        }
    }
    if let Some(min) = schema.get("minLength").and_then(num) {
        if (value.chars().count() as f64) < min {
            add_error(
                errors,
                path,
                format!(
                    "value must be at least {} characters long",
                    fmt_num(&schema["minLength"])
                ),
            );
            return;
        }
    }
    if is_number(value) {
        let x: f64 = value.parse().unwrap_or(0.0);
        if let Some(max) = schema.get("maximum").and_then(num) {
            if x > max {
                add_error(
                    errors,
                    path,
                    format!(
                        "value must have a maximum value of {}",
                        fmt_num(&schema["maximum"])
                    ),
                );
                return;
            }
        }
        if let Some(min) = schema.get("minimum").and_then(num) {
            if x < min {
                add_error(
                    errors,
                    path,
                    format!(
                        "value must have a minimum value of {}",
                        fmt_num(&schema["minimum"])
                    ),
                );
                return;
            }
        }
    }
    if let Some(Value::Array(en)) = schema.get("enum") {
        let names: Vec<String> = en.iter().map(fmt_num).collect();
        if !names.iter().any(|n| n == value) {
            add_error(
                errors,
                path,
                format!(
                    "value '{value}' does not have a value in the enumeration '{}'",
                    names.join(", ")
                ),
            );
        }
    }
}

fn truthy(v: &Value) -> bool {
    match v {
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64().unwrap_or(0.0) != 0.0,
        Value::String(s) => s == "1",
        _ => false,
    }
}

/// The sub-key schema of a property-string option (`net0`, `rootfs`, `mp0`, `features`), if it has one: read
/// in place from the create method's schema (`net0` is the schema's `net[n]`), nothing copied.
pub fn property_format(param: &str) -> Option<&'static Map<String, Value>> {
    create_param(param)?.get("format")?.as_object()
}

/// The schema of one parameter of the create method (`POST /nodes/{node}/lxc`, which has every config option),
/// read in place: `net3` is the schema's `net[n]`.
pub fn create_param(param: &str) -> Option<&'static Value> {
    let props = path_schema("/nodes/{node}/lxc")?
        .get("POST")?
        .get("parameters")?
        .get("properties")?;
    props.get(param).or_else(|| {
        let base = param.trim_end_matches(|c: char| c.is_ascii_digit());
        (base.len() < param.len())
            .then(|| props.get(format!("{base}[n]")))
            .flatten()
    })
}

/// `parse_property_string`: splits `k=v,...` (with the default key), normalises booleans and checks every
/// sub-key. The error text is what PVE's exception stringifies to (it ends with a newline).
pub fn parse_property_string(
    format: &Map<String, Value>,
    data: &str,
    path: &str,
) -> std::result::Result<BTreeMap<String, String>, String> {
    let mut res: BTreeMap<String, String> = BTreeMap::new();
    let default_key = format
        .iter()
        .find(|(_, v)| v.get("default_key").map(truthy).unwrap_or(false))
        .map(|(k, _)| k.clone());
    let mut used_default = false;
    for part in data.split(',') {
        if part.trim().is_empty() {
            continue;
        }
        if let Some((k, v)) = part
            .split_once('=')
            .filter(|(k, v)| !k.is_empty() && !v.is_empty())
        {
            if res.contains_key(k) {
                return Err(format!(
                    "duplicate key in comma-separated list property: {k}\n"
                ));
            }
            let Some(sub) = format.get(k) else {
                return Err(format!(
                    "invalid key in comma-separated list property: {k}\n"
                ));
            };
            let mut v = v.to_string();
            if sub.get("type").and_then(Value::as_str) == Some("boolean") {
                if let Some(b) = parse_boolean(&v) {
                    v = if b { "1".into() } else { "0".into() };
                }
            }
            res.insert(k.to_string(), v);
        } else if !part.contains('=') {
            let Some(dk) = &default_key else {
                return Err("value without key, but schema does not define a default key\n".into());
            };
            if used_default || res.contains_key(dk) {
                return Err(format!(
                    "duplicate key in comma-separated list property: {dk}\n"
                ));
            }
            used_default = true;
            res.insert(dk.clone(), part.to_string());
        } else {
            return Err("missing key in comma-separated list property\n".into());
        }
    }
    let mut errors = BTreeMap::new();
    for (k, sub) in format {
        check_prop(
            res.get(k).map(String::as_str),
            sub,
            &format!("{path}.{k}"),
            &mut errors,
        );
    }
    if errors.is_empty() {
        Ok(res)
    } else {
        let mut msg = String::from("format error\n");
        for (k, v) in errors {
            msg.push_str(&format!("{k}: {v}\n"));
        }
        Err(msg)
    }
}

fn re(pat: &'static str) -> Regex {
    Regex::new(pat).expect("static regex")
}

fn ipv4_ok(s: &str) -> bool {
    s.parse::<std::net::Ipv4Addr>().is_ok()
}

fn ipv6_ok(s: &str) -> bool {
    s.parse::<std::net::Ipv6Addr>().is_ok()
}

fn cidr_ok(s: &str, v6: bool) -> bool {
    let Some((ip, len)) = s.split_once('/') else {
        return false;
    };
    let Ok(len) = len.parse::<u32>() else {
        return false;
    };
    if v6 {
        ipv6_ok(ip) && (8..=128).contains(&len)
    } else {
        ipv4_ok(ip) && (8..=32).contains(&len)
    }
}

fn dns_name_ok(s: &str) -> bool {
    static RE: OnceLock<Regex> = OnceLock::new();
    RE.get_or_init(|| {
        re(r"^(([a-zA-Z0-9]([a-zA-Z0-9\-]*[a-zA-Z0-9])?)\.)*([a-zA-Z0-9]([a-zA-Z0-9\-]*[a-zA-Z0-9])?)$")
    })
    .is_match(s)
}

/// Splits a PVE list (`split_list`: separators `,;` and whitespace, and NUL).
pub fn split_list(s: &str) -> Vec<String> {
    s.split(|c: char| c == ',' || c == ';' || c.is_whitespace() || c == '\0')
        .filter(|p| !p.is_empty())
        .map(str::to_string)
        .collect()
}

/// The named formats the container API uses. Unknown names are accepted, as PVE accepts formats
/// without a registered checker.
pub fn check_named_format(name: &str, v: &str) -> std::result::Result<(), String> {
    let fail = |m: &str| Err(m.to_string());
    match name {
        "pve-vmid" => {
            if re(r"^[1-9][0-9]{2,8}$").is_match(v) {
                Ok(())
            } else {
                fail("value does not look like a valid VM ID")
            }
        }
        "pve-node" => {
            if re(r"^([a-zA-Z0-9]([a-zA-Z0-9\-]*[a-zA-Z0-9])?)$").is_match(v) {
                Ok(())
            } else {
                fail("value does not look like a valid node name")
            }
        }
        "pve-storage-id" => {
            if re(r"(?i)^[a-z][a-z0-9\-_.]*[a-z0-9]$").is_match(v) {
                Ok(())
            } else {
                Err(format!("storage ID '{v}' contains illegal characters"))
            }
        }
        "pve-storage-id-list" => split_list(v)
            .iter()
            .try_for_each(|s| check_named_format("pve-storage-id", s)),
        "pve-configid" => {
            if re(r"(?i)^[a-z][a-z0-9_-]+$").is_match(v) {
                Ok(())
            } else {
                Err(format!("invalid configuration ID '{v}'"))
            }
        }
        "pve-configid-list" => split_list(v)
            .iter()
            .try_for_each(|s| check_named_format("pve-configid", s)),
        "dns-name" => {
            if dns_name_ok(v) {
                Ok(())
            } else {
                fail("value does not look like a valid DNS name")
            }
        }
        "dns-name-list" => {
            for p in split_list(v) {
                if !dns_name_ok(&p) {
                    return Err(format!("unable to parse dns name '{p}'"));
                }
            }
            Ok(())
        }
        "mac-addr" => {
            if re(r"(?i)^[a-f0-9][02468ace](?::[a-f0-9]{2}){5}$").is_match(v) {
                Ok(())
            } else {
                fail("value does not look like a valid unicast MAC address")
            }
        }
        "ipv4" => {
            if ipv4_ok(v) {
                Ok(())
            } else {
                fail("value does not look like a valid IPv4 address")
            }
        }
        "ipv6" => {
            if ipv6_ok(v) {
                Ok(())
            } else {
                fail("value does not look like a valid IPv6 address")
            }
        }
        "pve-ipv4-config" => {
            if v == "dhcp" || v == "manual" || cidr_ok(v, false) {
                Ok(())
            } else {
                fail("value does not look like a valid ipv4 network configuration")
            }
        }
        "pve-ipv6-config" => {
            if v == "dhcp" || v == "manual" || v == "auto" || cidr_ok(v, true) {
                Ok(())
            } else {
                fail("value does not look like a valid ipv6 network configuration")
            }
        }
        "lxc-ip-with-ll-iface-list" => {
            for p in split_list(v) {
                let ip = match p.split_once('%') {
                    Some((ip, _)) if ip.to_ascii_lowercase().starts_with("fe80") => ip.to_string(),
                    _ => p.clone(),
                };
                if !ipv4_ok(&ip) && !ipv6_ok(&ip) {
                    return Err(format!("unable to parse IP address '{p}'"));
                }
            }
            Ok(())
        }
        "pve-tag-list" => {
            let tags = split_list(v);
            if tags.is_empty() {
                return fail("empty tag list");
            }
            for t in tags {
                if !re(r"(?i)^[a-z0-9_][a-z0-9_\-+.]*$").is_match(&t) {
                    return Err(format!("invalid tag: '{t}'"));
                }
            }
            Ok(())
        }
        "pve-startup-order" => {
            for p in v.split(',') {
                let ok = re(r"^(order=)?\d+$").is_match(p) || re(r"^(up|down)=\d+$").is_match(p);
                if !ok {
                    return Err(format!("unable to parse startup options '{v}'"));
                }
            }
            Ok(())
        }
        "disk-size" => {
            if re(r"^(\d+(\.\d+)?)([KMGT])?$").is_match(v) {
                Ok(())
            } else {
                Err(format!("unable to parse size '{v}'"))
            }
        }
        "pve-volume-id" => {
            if re(r"^[a-zA-Z][a-zA-Z0-9\-_.]*[a-zA-Z0-9]:.+$").is_match(v) || v.starts_with('/') {
                Ok(())
            } else {
                Err(format!("unable to parse volume ID '{v}'"))
            }
        }
        "pve-lxc-mp-string" => {
            if re(r"(^|/)\.\.?(/|$)").is_match(v) {
                fail("invalid path")
            } else {
                Ok(())
            }
        }
        "pve-ct-timezone" => {
            if v == "host"
                || v == "UTC"
                || re(r"^[A-Za-z][A-Za-z0-9_+\-]*(/[A-Za-z0-9_+\-]+)*$").is_match(v)
            {
                Ok(())
            } else {
                Err(format!("invalid time zone '{v}'"))
            }
        }
        "pve-lxc-dev-string" => {
            if v.starts_with("/dev/") {
                Ok(())
            } else {
                Err(format!("not a device path: '{v}'"))
            }
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_split_schema_decodes_to_the_whole_schema() {
        let whole: Map<String, Value> = serde_json::from_str(SCHEMA_TEXT).unwrap();
        assert_eq!(index().len(), whole.len());
        for (path, methods) in &whole {
            assert_eq!(path_schema(path), Some(methods), "{path}");
        }
        let odd = split_top_level(r#"{"a": {"x": "},\"", "y": [1, {"z": 2}]}, "b": 3 , "c":"d"}"#);
        assert_eq!(odd.get("a"), Some(&r#"{"x": "},\"", "y": [1, {"z": 2}]}"#));
        assert_eq!((odd.get("b"), odd.get("c")), (Some(&"3"), Some(&r#""d""#)));
    }

    #[test]
    fn create_schema_has_expanded_options() {
        let p = method_params("/nodes/{node}/lxc", "POST").unwrap();
        assert!(p.contains_key("net0") && p.contains_key("net31") && !p.contains_key("net32"));
        assert!(p.contains_key("mp255") && p.contains_key("hostname"));
    }

    #[test]
    fn memory_minimum_message() {
        let p = method_params("/nodes/{node}/lxc", "POST").unwrap();
        let mut errs = BTreeMap::new();
        check_prop(Some("8"), &p["memory"], "memory", &mut errs);
        assert_eq!(errs["memory"], "value must have a minimum value of 16");
    }

    #[test]
    fn net_unknown_key_is_rejected() {
        let f = property_format("net0").unwrap();
        let e = parse_property_string(f, "name=eth0,foo=1", "net0").unwrap_err();
        assert_eq!(e, "invalid key in comma-separated list property: foo\n");
        let e = parse_property_string(f, "bridge=vmbr0", "net0").unwrap_err();
        assert_eq!(
            e,
            "format error\nnet0.name: property is missing and it is not optional\n"
        );
    }

    #[test]
    fn rootfs_default_key() {
        let f = property_format("rootfs").unwrap();
        let r = parse_property_string(f, "local-lvm:8,ro=yes", "rootfs").unwrap();
        assert_eq!(r["volume"], "local-lvm:8");
        assert_eq!(r["ro"], "1");
    }

    #[test]
    fn path_matching_prefers_literals() {
        let (t, caps) = match_path("/nodes/pve1/lxc/100/status/current").unwrap();
        assert_eq!(t, "/nodes/{node}/lxc/{vmid}/status/current");
        assert_eq!(caps["vmid"], "100");
    }
}
