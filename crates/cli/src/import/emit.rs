//! Writing the imported fleet as YAML, with comments: header, `defaults:` (the fields every container shares),
//! then the containers in the order Terraform listed them.

use serde_json::Value;

/// One container as imported: fields in pxfleet's names, in output order, and comment lines.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Ct {
    pub key: String,
    pub fields: Vec<(String, Value)>,
    pub notes: Vec<String>,
}

impl Ct {
    pub fn set(&mut self, field: &str, v: Value) {
        if let Some(slot) = self.fields.iter_mut().find(|(k, _)| k == field) {
            slot.1 = v;
        } else {
            self.fields.push((field.to_string(), v));
        }
    }

    pub fn get(&self, field: &str) -> Option<&Value> {
        self.fields.iter().find(|(k, _)| k == field).map(|(_, v)| v)
    }

    pub fn remove(&mut self, field: &str) -> Option<Value> {
        let i = self.fields.iter().position(|(k, _)| k == field)?;
        Some(self.fields.remove(i).1)
    }
}

/// Output order of container fields (fields not listed keep their order, after these).
const ORDER: &[&str] = &[
    "vm_id",
    "hostname",
    "node",
    "adopt",
    "cores",
    "cpu_units",
    "memory",
    "swap",
    "disk_size",
    "datastore_id",
    "template_url",
    "template",
    "unprivileged",
    "features",
    "bridge",
    "mac_address",
    "ip_address",
    "gateway",
    "ipv6",
    "gateway6",
    "vlan_id",
    "mtu",
    "firewall",
    "rate_limit",
    "extra_interfaces",
    "dns",
    "ssh_public_keys",
    "startup",
    "start_on_boot",
    "state",
    "wait_for_ip",
    "pool",
    "protection",
    "tags",
    "description",
    "mount_points",
    "devices",
    "idmap",
];

/// Fields `defaults:` may not hold.
const NOT_IN_DEFAULTS: &[&str] = &["vm_id", "hostname", "mac_address", "adopt"];

pub struct Document<'a> {
    pub fleet: &'a str,
    pub header: &'a [String],
    pub notes: &'a [String],
    pub allow_privileged: bool,
    pub templates: &'a [(String, Value)],
    pub containers: &'a [Ct],
}

pub fn render(doc: &Document<'_>) -> String {
    let mut containers: Vec<Ct> = doc.containers.to_vec();
    for c in &mut containers {
        c.fields
            .sort_by_key(|(k, _)| ORDER.iter().position(|o| o == k).unwrap_or(ORDER.len()));
    }
    // Fields every container has with the same value go to `defaults:` (two containers or more).
    let mut defaults: Vec<(String, Value)> = Vec::new();
    if containers.len() >= 2 {
        let first = containers[0].fields.clone();
        for (k, v) in first {
            if NOT_IN_DEFAULTS.contains(&k.as_str()) {
                continue;
            }
            if containers.iter().all(|c| c.get(&k) == Some(&v)) {
                for c in &mut containers {
                    c.remove(&k);
                }
                defaults.push((k, v));
            }
        }
    }

    let mut out = String::new();
    for h in doc.header {
        comment(&mut out, "", h);
    }
    if !doc.notes.is_empty() {
        comment(&mut out, "", "");
        comment(
            &mut out,
            "",
            "Not imported (each also a warning on stderr):",
        );
        for n in doc.notes {
            comment(&mut out, "", &format!("- {n}"));
        }
    }
    out.push_str(&format!("fleet: {}\n", scalar(&Value::from(doc.fleet))));
    if doc.allow_privileged {
        out.push_str("allow_privileged: true\n");
    }
    if !defaults.is_empty() {
        out.push_str("defaults:\n");
        for (k, v) in &defaults {
            out.push_str(&format!("  {k}: {}\n", flow(v)));
        }
    }
    if !doc.templates.is_empty() {
        out.push_str("templates:\n");
        for (k, v) in doc.templates {
            out.push_str(&format!(
                "  {}: {}\n",
                scalar(&Value::from(k.as_str())),
                flow(v)
            ));
        }
    }
    if containers.is_empty() {
        out.push_str("containers: {}\n");
        return out;
    }
    out.push_str("containers:\n");
    for c in &containers {
        out.push_str(&format!("  {}:", scalar(&Value::from(c.key.as_str()))));
        if c.fields.is_empty() && c.notes.is_empty() {
            out.push_str(" {}\n");
            continue;
        }
        out.push('\n');
        for n in &c.notes {
            comment(&mut out, "    ", n);
        }
        if c.fields.is_empty() {
            // a container with only notes still needs a mapping
            out.push_str("    {}\n");
        }
        for (k, v) in &c.fields {
            out.push_str(&format!("    {k}: {}\n", flow(v)));
        }
    }
    out
}

fn comment(out: &mut String, indent: &str, text: &str) {
    for line in text.lines().chain(text.is_empty().then_some("")) {
        if line.is_empty() {
            out.push_str(&format!("{indent}#\n"));
        } else {
            out.push_str(&format!("{indent}# {line}\n"));
        }
    }
}

/// A value in YAML flow style: `{nesting: true, fuse: false}`, `[dev, web]`.
pub fn flow(v: &Value) -> String {
    match v {
        Value::Array(a) => format!("[{}]", a.iter().map(flow).collect::<Vec<_>>().join(", ")),
        Value::Object(m) => format!(
            "{{{}}}",
            m.iter()
                .map(|(k, v)| format!("{}: {}", scalar(&Value::from(k.as_str())), flow(v)))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        v => scalar(v),
    }
}

/// A scalar: plain when YAML reads it back as the same string, else double-quoted (JSON quoting is valid YAML).
pub fn scalar(v: &Value) -> String {
    match v {
        Value::String(s) if plain_ok(s) => s.clone(),
        Value::String(s) => serde_json::to_string(s).unwrap_or_default(),
        Value::Null => "null".into(),
        v => v.to_string(),
    }
}

fn plain_ok(s: &str) -> bool {
    let Some(first) = s.chars().next() else {
        return false;
    };
    let reserved = [
        "true", "false", "null", "~", "yes", "no", "on", "off", "y", "n",
    ];
    if reserved.contains(&s.to_ascii_lowercase().as_str()) || s.parse::<f64>().is_ok() {
        return false;
    }
    if s.starts_with("0x") || s.starts_with("0o") || s.starts_with('.') {
        return false;
    }
    if !(first.is_ascii_alphanumeric() || first == '/' || first == '_') {
        return false;
    }
    if s.ends_with(' ') || s.contains(": ") || s.contains(" #") || s.ends_with(':') {
        return false;
    }
    s.chars().all(|c| {
        c.is_alphanumeric() || " -_./:@+=~%()".contains(c) || (!c.is_ascii() && !c.is_control())
    }) && !s.contains([
        '{', '}', '[', ']', ',', '&', '*', '!', '|', '>', '\'', '"', '`',
    ])
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn scalars_that_yaml_would_misread_are_quoted() {
        assert_eq!(scalar(&json!("mk33")), "mk33");
        assert_eq!(scalar(&json!("192.168.7.100/24")), "192.168.7.100/24");
        assert_eq!(
            scalar(&json!("https://x.example/a-b_1.tar.xz")),
            "https://x.example/a-b_1.tar.xz"
        );
        assert_eq!(scalar(&json!("true")), "\"true\"");
        assert_eq!(scalar(&json!("3")), "\"3\"");
        assert_eq!(scalar(&json!("a: b")), "\"a: b\"");
        assert_eq!(scalar(&json!("")), "\"\"");
        assert_eq!(scalar(&json!("x # y")), "\"x # y\"");
        assert_eq!(
            flow(&json!({"nesting": true, "fuse": false})),
            "{nesting: true, fuse: false}"
        );
    }
}
