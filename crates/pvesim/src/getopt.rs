//! Command-line parsing as PVE does it (`JSONSchema::get_options` on top of Getopt::Long): `--opt value` or
//! `-opt value`, `--opt=value`, optional values for booleans, unique prefixes, list options joined with `,`,
//! positional arguments anywhere, `--` ending options, and interactive parameters (`pct create --password` with no
//! value reads the password from stdin, as `PVE::CLIHandler`'s `pve-password` mapping does).

use std::collections::BTreeMap;

use serde_json::Value;

use crate::error::SimError;
use crate::schema::parse_boolean;

/// Result of parsing: the parameters and the Getopt warnings (already printed by Perl before the error).
#[derive(Debug, Default)]
pub struct Parsed {
    pub params: BTreeMap<String, String>,
    /// Lines Getopt::Long prints on stderr (`Unknown option: foo`).
    pub warnings: String,
}

fn is_list(pd: &Value) -> bool {
    pd.get("format")
        .and_then(Value::as_str)
        .map(|f| f.contains("-list"))
        .unwrap_or(false)
        || pd.get("type").and_then(Value::as_str) == Some("array")
}

fn is_bool(pd: &Value) -> bool {
    pd.get("type").and_then(Value::as_str) == Some("boolean")
}

/// Parses `args` against the properties of a method. `arg_params` are the positional parameter names
/// (`extra-args` takes the rest); `fixed` are preset (for example `node`). On failure the Getopt warnings
/// are returned with the error so the caller prints both.
pub fn get_options(
    props: &BTreeMap<String, Value>,
    args: &[String],
    arg_params: &[&str],
    fixed: &BTreeMap<String, String>,
) -> std::result::Result<Parsed, (String, SimError)> {
    get_options_with(props, args, arg_params, fixed, &[])
}

/// [`get_options`] where the `interactive` parameters take an optional value (Getopt's `:s`, as booleans do): given
/// without one, they are present with an empty value, for the caller to prompt for.
fn get_options_with(
    props: &BTreeMap<String, Value>,
    args: &[String],
    arg_params: &[&str],
    fixed: &BTreeMap<String, String>,
    interactive: &[&str],
) -> std::result::Result<Parsed, (String, SimError)> {
    let mut parsed = Parsed::default();
    let names: Vec<&String> = props.keys().filter(|k| !fixed.contains_key(*k)).collect();
    let mut lists: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut positional: Vec<String> = Vec::new();
    let mut failed = false;
    let mut i = 0;
    while i < args.len() {
        let a = &args[i];
        i += 1;
        if a == "--" {
            positional.extend(args[i..].iter().cloned());
            break;
        }
        let body = if let Some(b) = a.strip_prefix("--") {
            b
        } else if let Some(b) = a.strip_prefix('-') {
            b
        } else {
            positional.push(a.clone());
            continue;
        };
        if body.is_empty() {
            positional.push(a.clone());
            continue;
        }
        let (name, inline) = match body.split_once('=') {
            Some((n, v)) => (n, Some(v.to_string())),
            None => (body, None),
        };
        let lname = name.to_ascii_lowercase();
        let opt = names
            .iter()
            .find(|n| n.to_ascii_lowercase() == lname)
            .copied()
            .or_else(|| {
                let cands: Vec<&&String> = names
                    .iter()
                    .filter(|n| n.to_ascii_lowercase().starts_with(&lname))
                    .collect();
                (cands.len() == 1).then(|| *cands[0])
            });
        let Some(opt) = opt else {
            parsed
                .warnings
                .push_str(&format!("Unknown option: {name}\n"));
            failed = true;
            continue;
        };
        let pd = &props[opt];
        let value = if is_bool(pd) || interactive.contains(&opt.as_str()) {
            match inline {
                Some(v) => v,
                None => match args.get(i) {
                    Some(next) if !next.starts_with('-') => {
                        i += 1;
                        next.clone()
                    }
                    _ => String::new(),
                },
            }
        } else {
            match inline {
                Some(v) => v,
                None => match args.get(i) {
                    Some(next) => {
                        i += 1;
                        next.clone()
                    }
                    None => {
                        parsed
                            .warnings
                            .push_str(&format!("Option {name} requires an argument\n"));
                        failed = true;
                        continue;
                    }
                },
            }
        };
        if is_list(pd) {
            lists.entry(opt.clone()).or_default().push(value);
        } else {
            parsed.params.insert(opt.clone(), value);
        }
    }
    let bad = |msg: &str, w: &str| {
        (
            w.to_string(),
            SimError::BadRequest {
                msg: msg.to_string(),
            },
        )
    };
    if failed {
        return Err(bad("unable to parse option", &parsed.warnings));
    }
    for (k, v) in lists {
        parsed.params.insert(k, v.join(","));
    }
    let mut rest = positional.into_iter();
    let mut leftover = false;
    for (idx, name) in arg_params.iter().enumerate() {
        if *name == "extra-args" {
            let extra: Vec<String> = rest.by_ref().collect();
            parsed.params.insert(
                "extra-args".into(),
                serde_json::to_string(&extra).unwrap_or_default(),
            );
            continue;
        }
        match rest.next() {
            Some(v) => {
                parsed.params.insert((*name).to_string(), v);
            }
            None => {
                let all_optional = arg_params[idx..].iter().all(|p| {
                    *p == "extra-args"
                        || parsed.params.contains_key(*p)
                        || props
                            .get(*p)
                            .and_then(|d| d.get("optional"))
                            .map(|o| o != &Value::from(0))
                            .unwrap_or(false)
                });
                if !all_optional {
                    return Err(bad("not enough arguments", &parsed.warnings));
                }
                break;
            }
        }
    }
    if rest.next().is_some() {
        leftover = true;
    }
    if leftover {
        return Err(bad("too many arguments", &parsed.warnings));
    }
    for (k, v) in parsed.params.iter_mut() {
        if let Some(pd) = props.get(k) {
            if is_bool(pd) {
                if v.is_empty() {
                    *v = "1".into();
                } else {
                    match parse_boolean(v) {
                        Some(b) => *v = if b { "1".into() } else { "0".into() },
                        None => return Err(bad("unable to parse boolean option", "")),
                    }
                }
            }
        }
    }
    for (k, v) in fixed {
        parsed.params.insert(k.clone(), v.clone());
    }
    Ok(parsed)
}

/// Parses and validates in one go, returning the parameters or the error (with Getopt's warnings).
pub fn parse_and_validate(
    props: &BTreeMap<String, Value>,
    args: &[String],
    arg_params: &[&str],
    fixed: &BTreeMap<String, String>,
) -> std::result::Result<BTreeMap<String, String>, (String, SimError)> {
    parse_and_validate_with(props, args, arg_params, fixed, &[], &mut |_| {
        Err(SimError::die("no interactive parameters"))
    })
}

/// [`parse_and_validate`] with `interactive` parameters: one given without a value gets what `prompt` returns for
/// it (before validation, as `get_options` calls the mapping's function); an error of `prompt` is the command's.
pub fn parse_and_validate_with(
    props: &BTreeMap<String, Value>,
    args: &[String],
    arg_params: &[&str],
    fixed: &BTreeMap<String, String>,
    interactive: &[&str],
    prompt: &mut dyn FnMut(&str) -> Result<String, SimError>,
) -> std::result::Result<BTreeMap<String, String>, (String, SimError)> {
    let mut parsed = get_options_with(props, args, arg_params, fixed, interactive)?;
    for name in interactive {
        // PVE: `return $value if $value; return get_confirmed_password()` (so "" and "0" prompt)
        if let Some("" | "0") = parsed.params.get(*name).map(String::as_str) {
            let v = prompt(name).map_err(|e| (parsed.warnings.clone(), e))?;
            parsed.params.insert((*name).to_string(), v);
        }
    }
    let mut check = parsed.params.clone();
    check.remove("extra-args");
    crate::schema::validate_except(props, &check, "extra-args")
        .map_err(|e| (parsed.warnings.clone(), e))?;
    Ok(parsed.params)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::method_params;

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(str::to_string).collect()
    }

    fn create_props() -> BTreeMap<String, Value> {
        (*method_params("/nodes/{node}/lxc", "POST").unwrap()).clone()
    }

    #[test]
    fn positional_and_options() {
        let fixed = BTreeMap::from([("node".to_string(), "pve1".to_string())]);
        let p = get_options(
            &create_props(),
            &args("100 local:vztmpl/x.tar.zst -memory 512 --start"),
            &["vmid", "ostemplate"],
            &fixed,
        )
        .unwrap();
        assert_eq!(p.params["vmid"], "100");
        assert_eq!(p.params["memory"], "512");
        assert_eq!(p.params["start"], "1");
        assert_eq!(p.params["node"], "pve1");
    }

    #[test]
    fn unknown_option_warns_and_fails() {
        let (w, e) = get_options(
            &create_props(),
            &args("100 t --foo bar"),
            &["vmid", "ostemplate"],
            &BTreeMap::new(),
        )
        .unwrap_err();
        assert_eq!(w, "Unknown option: foo\n");
        assert_eq!(
            e.render(Some("pct create <vmid> <ostemplate> [OPTIONS]")),
            "400 unable to parse option\npct create <vmid> <ostemplate> [OPTIONS]\n"
        );
    }

    #[test]
    fn bad_boolean() {
        let (_, e) = get_options(
            &create_props(),
            &args("100 t --start maybe"),
            &["vmid", "ostemplate"],
            &BTreeMap::new(),
        )
        .unwrap_err();
        assert_eq!(e.to_string(), "400 unable to parse boolean option");
    }

    #[test]
    fn missing_positional() {
        let (_, e) = get_options(
            &create_props(),
            &args("100"),
            &["vmid", "ostemplate"],
            &BTreeMap::new(),
        )
        .unwrap_err();
        assert_eq!(e.to_string(), "400 not enough arguments");
    }
}
