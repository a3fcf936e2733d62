//! A small YAML emitter for the records pxctl prints (`-o yaml`): block mappings and sequences, scalars
//! plain when that is unambiguous and JSON-style double-quoted otherwise (a double-quoted JSON string is a
//! valid YAML scalar), so `10.0.0.5`, `true`-looking and timestamp-looking strings stay strings.

use serde_json::Value;

/// Renders `v` as a YAML document (no `---`), ending in a newline.
pub fn to_yaml(v: &Value) -> String {
    let mut out = String::new();
    match v {
        Value::Array(items) if !items.is_empty() => seq(&mut out, items, 0),
        Value::Object(map) if !map.is_empty() => mapping(&mut out, map, 0),
        other => {
            out.push_str(&inline(other));
            out.push('\n');
        }
    }
    out
}

fn pad(out: &mut String, indent: usize) {
    out.extend(std::iter::repeat_n(' ', indent));
}

/// Whether a value is written on the key's own line.
fn is_inline(v: &Value) -> bool {
    match v {
        Value::Array(a) => a.is_empty(),
        Value::Object(m) => m.is_empty(),
        _ => true,
    }
}

fn inline(v: &Value) -> String {
    match v {
        Value::Null => "null".into(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => scalar(s),
        Value::Array(_) => "[]".into(),
        Value::Object(_) => "{}".into(),
    }
}

fn mapping(out: &mut String, map: &serde_json::Map<String, Value>, indent: usize) {
    for (i, (k, v)) in map.iter().enumerate() {
        if i > 0 {
            pad(out, indent);
        }
        out.push_str(&scalar(k));
        out.push(':');
        if is_inline(v) {
            out.push(' ');
            out.push_str(&inline(v));
            out.push('\n');
        } else {
            out.push('\n');
            pad(out, indent + 2);
            match v {
                Value::Array(a) => seq(out, a, indent + 2),
                Value::Object(m) => mapping(out, m, indent + 2),
                _ => unreachable!("scalars are inline"),
            }
        }
    }
}

/// Writes a sequence whose first `- ` goes where the cursor is (already indented by `indent`).
fn seq(out: &mut String, items: &[Value], indent: usize) {
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            pad(out, indent);
        }
        out.push_str("- ");
        match item {
            Value::Object(m) if !m.is_empty() => mapping(out, m, indent + 2),
            Value::Array(a) if !a.is_empty() => seq(out, a, indent + 2),
            other => {
                out.push_str(&inline(other));
                out.push('\n');
            }
        }
    }
}

/// A string scalar: plain when it cannot be read as anything but that string, quoted otherwise.
fn scalar(s: &str) -> String {
    const RESERVED: &[&str] = &[
        "null", "~", "true", "false", "yes", "no", "on", "off", "y", "n",
    ];
    let plain = s
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '/' || c == '_')
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || " _./@:?=&%+,()-".contains(c))
        && !s.contains(": ")
        && !s.ends_with(':')
        && !s.ends_with(' ')
        && !RESERVED.contains(&s.to_ascii_lowercase().as_str());
    if plain {
        s.to_string()
    } else {
        Value::String(s.to_string()).to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn records_render_as_block_yaml() {
        let v = json!([
            {"name": "dev-web", "vm_id": 2100, "ipv4": "10.0.0.5", "error": null,
             "states": {"running": 2}, "tags": ["a", "b"], "empty": [], "flag": "yes",
             "msg": "pct: failed: x", "t": "2026-01-02T03:04:05Z"},
            {"name": "db", "states": {}}
        ]);
        assert_eq!(
            to_yaml(&v),
            "- name: dev-web\n  vm_id: 2100\n  ipv4: \"10.0.0.5\"\n  error: null\n  states:\n    running: 2\n  tags:\n    - a\n    - b\n  empty: []\n  flag: \"yes\"\n  msg: \"pct: failed: x\"\n  t: \"2026-01-02T03:04:05Z\"\n- name: db\n  states: {}\n"
        );
        assert_eq!(to_yaml(&json!([])), "[]\n");
        assert_eq!(
            to_yaml(&json!({"a": {"b": [{"c": 1, "d": 2}]}})),
            "a:\n  b:\n    - c: 1\n      d: 2\n"
        );
    }
}
