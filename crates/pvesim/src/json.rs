//! JSON output as PVE's `to_json(..., {canonical})` prints it: sorted keys, compact or Perl's 3-space pretty form.

use serde_json::Value;

/// Compact canonical JSON (`--output-format json`), without the trailing newline.
pub fn compact(v: &Value) -> String {
    let mut out = String::new();
    write_compact(v, &mut out);
    out
}

fn write_compact(v: &Value, out: &mut String) {
    match v {
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_compact(item, out);
            }
            out.push(']');
        }
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (i, k) in keys.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String((*k).clone()).to_string());
                out.push(':');
                write_compact(&map[k.as_str()], out);
            }
            out.push('}');
        }
        scalar => out.push_str(&scalar.to_string()),
    }
}

/// Pretty canonical JSON (`--output-format json-pretty`), as Perl's JSON module indents it.
pub fn pretty(v: &Value) -> String {
    let mut out = String::new();
    write_pretty(v, 0, &mut out);
    out
}

fn write_pretty(v: &Value, depth: usize, out: &mut String) {
    let pad = "   ".repeat(depth + 1);
    let end_pad = "   ".repeat(depth);
    match v {
        Value::Array(items) if !items.is_empty() => {
            out.push_str("[\n");
            for (i, item) in items.iter().enumerate() {
                out.push_str(&pad);
                write_pretty(item, depth + 1, out);
                if i + 1 < items.len() {
                    out.push(',');
                }
                out.push('\n');
            }
            out.push_str(&end_pad);
            out.push(']');
        }
        Value::Object(map) if !map.is_empty() => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push_str("{\n");
            for (i, k) in keys.iter().enumerate() {
                out.push_str(&pad);
                out.push_str(&Value::String((*k).clone()).to_string());
                out.push_str(" : ");
                write_pretty(&map[k.as_str()], depth + 1, out);
                if i + 1 < keys.len() {
                    out.push(',');
                }
                out.push('\n');
            }
            out.push_str(&end_pad);
            out.push('}');
        }
        other => write_compact(other, out),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn compact_sorts_keys() {
        let v = json!([{"b": 1, "a": "x", "c": {"z": null, "y": [1, 2]}}]);
        assert_eq!(compact(&v), r#"[{"a":"x","b":1,"c":{"y":[1,2],"z":null}}]"#);
    }

    #[test]
    fn pretty_matches_perl_layout() {
        let v = json!({"ha": {"managed": 0}, "cpu": 0});
        assert_eq!(
            pretty(&v),
            "{\n   \"cpu\" : 0,\n   \"ha\" : {\n      \"managed\" : 0\n   }\n}"
        );
    }
}
