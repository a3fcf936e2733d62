//! The PVE API schema (copied from ../shared/pve/schema/) and validation of parameters against it, with PVE's
//! messages: types, enums, ranges, lengths, patterns, named formats and property strings with sub-keys.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, OnceLock};

use serde_json::{Map, Value};

mod formats;
mod validate;

pub use formats::{check_named_format, split_list};
pub use validate::{
    check_prop, create_param, parse_boolean, parse_property_string, property_format, validate,
    validate_except,
};

static SCHEMA_TEXT: &str = include_str!("../../schema/pve-api-lxc-subset.json");

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

/// The PVE release this process acts as (`(9, 1)` unless the node says otherwise, see [`set_release`]).
static RELEASE: OnceLock<(u32, u32)> = OnceLock::new();

/// `9.2.0` -> `(9, 2)`; `None` for anything else.
pub fn release_of(version: &str) -> Option<(u32, u32)> {
    let mut p = version.trim().split('.');
    let major = p.next()?.parse().ok()?;
    let minor = p.next()?.parse().ok()?;
    p.next()?.parse::<u32>().ok()?;
    Some((major, minor))
}

/// Sets the release the node acts as, once per process (every pvesim invocation loads one node); an unreadable
/// version leaves the schema's own (9.1).
pub fn set_release(version: &str) {
    if let Some(r) = release_of(version) {
        let _ = RELEASE.set(r);
    }
}

fn release() -> (u32, u32) {
    RELEASE.get().copied().unwrap_or((9, 1))
}

/// What a later release added to the schema (../shared/pve/schema is 9.1's): from 9.2, pve-container's
/// `$rootfs_desc` (and so every `mpN`) has `idmap`, a `passthrough` or `type:container:disk:range-size[;...]` list.
fn add_release_keys(v: &mut Value) {
    if release() < (9, 2) {
        return;
    }
    let idmap = serde_json::json!({
        "type": "string",
        "optional": 1,
        "description": "Map specific container UIDs/GIDs to underlying disk UIDs/GIDs for this mount point",
        "format_description": "type:container:disk:range-size[;type:container:disk:range-size;...]",
        "pattern": "^(?:passthrough|[ug]:[0-9]+:[0-9]+:[1-9][0-9]*(?:;[ug]:[0-9]+:[0-9]+:[1-9][0-9]*)*)$"
    });
    let Some(methods) = v.as_object_mut() else {
        return;
    };
    for m in methods.values_mut() {
        for section in ["parameters", "returns"] {
            let Some(props) = m
                .get_mut(section)
                .and_then(|p| p.get_mut("properties"))
                .and_then(Value::as_object_mut)
            else {
                continue;
            };
            for (k, p) in props.iter_mut() {
                if k != "rootfs" && k != "mp[n]" {
                    continue;
                }
                if let Some(f) = p.get_mut("format").and_then(Value::as_object_mut) {
                    f.entry("idmap").or_insert_with(|| idmap.clone());
                }
            }
        }
    }
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
    let mut decoded: Value = serde_json::from_str(text).ok()?;
    add_release_keys(&mut decoded);
    let value: &'static Value = Box::leak(Box::new(decoded));
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
