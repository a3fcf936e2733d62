//! Validation of parameters against the schema's properties, with PVE's messages: types, enums, ranges,
//! lengths, patterns and property strings with their sub-keys.

use std::collections::BTreeMap;
use std::sync::OnceLock;

use regex::Regex;
use serde_json::{Map, Value};

use super::formats::check_named_format;
use super::path_schema;
use crate::error::{Result, SimError};

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
