//! Container config files in PVE's format (`/etc/pve/nodes/<node>/lxc/<vmid>.conf`): parsing, writing
//! (description comments first, sorted keys, `env` as `lxc.environment.runtime` lines, raw `lxc.*` lines,
//! `[pve:pending]`), and `encode_text`.

use std::collections::BTreeMap;

use sha2::{Digest, Sha256};

/// The raw key `env` is written as, one line per variable (CONTRACT §7).
const ENV_LINE: &str = "lxc.environment.runtime";

/// One container config.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CtConf {
    /// Description with its trailing newline, as PVE keeps it.
    pub description: String,
    pub opts: BTreeMap<String, String>,
    /// Raw `lxc.*` entries in file order.
    pub lxc: Vec<(String, String)>,
    pub pending: BTreeMap<String, String>,
    pub pending_delete: Vec<String>,
    /// Snapshot sections (`[name]`) in file order, each a config of its own (with `snaptime`, `parent`, and its
    /// description as comment lines), as `write_pct_config` writes them.
    pub snapshots: Vec<(String, CtConf)>,
}

/// The `[name]` sections from a section header on: each parsed like a main section (description comments, keys).
fn parse_snapshots(lines: &[&str]) -> Vec<(String, CtConf)> {
    let mut out: Vec<(String, Vec<&str>)> = Vec::new();
    for line in lines {
        let t = line.trim();
        if t.starts_with('[') && t.ends_with(']') {
            out.push((t[1..t.len() - 1].to_string(), Vec::new()));
        } else if let Some((_, body)) = out.last_mut() {
            body.push(line);
        }
    }
    out.into_iter()
        .map(|(name, body)| (name, CtConf::parse(&body.join("\n"))))
        .collect()
}

/// `PVE::Tools::encode_text`: control characters, `%` and `:` become `%XX`.
pub fn encode_text(s: &str) -> String {
    let mut out = String::new();
    for c in s.chars() {
        if (c as u32) < 0x20 || c == '%' || c == ':' || c == '\x7f' {
            out.push_str(&format!("%{:02X}", c as u32));
        } else {
            out.push(c);
        }
    }
    out
}

/// What PVE keeps of a description it is given (`write_pct_config` then `parse_pct_config`, CONTRACT §3.7):
/// the text split on `\n` as Perl's `split` does (trailing empty lines dropped, empty lines inside kept, nothing
/// trimmed), each line followed by `\n`. Empty when nothing is left.
pub fn stored_description(s: &str) -> String {
    let mut lines: Vec<&str> = s.split('\n').collect();
    while lines.last().is_some_and(|l| l.is_empty()) {
        lines.pop();
    }
    lines.iter().map(|l| format!("{l}\n")).collect()
}

/// `PVE::Tools::decode_text`.
pub fn decode_text(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            if let Some(v) = std::str::from_utf8(&b[i + 1..i + 3])
                .ok()
                .and_then(|h| u8::from_str_radix(h, 16).ok())
            {
                out.push(v);
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).to_string()
}

impl CtConf {
    /// Parses a config file. Unknown lines are kept out (PVE warns and ignores them).
    pub fn parse(text: &str) -> CtConf {
        let mut c = CtConf::default();
        let mut section = "main".to_string();
        for (idx, line) in text.lines().enumerate() {
            let t = line.trim();
            if t.is_empty() {
                continue;
            }
            // `^\#(.*)$` on the line as it is: a description line keeps its trailing spaces.
            if section == "main" {
                if let Some(d) = line.strip_prefix('#') {
                    c.description.push_str(&decode_text(d));
                    c.description.push('\n');
                    continue;
                }
            }
            if t.starts_with('[') && t.ends_with(']') {
                section = t[1..t.len() - 1].to_string();
                if section != "pve:pending" {
                    // Snapshot sections follow the main one (and its pending section) to the end of the file.
                    let rest: Vec<&str> = text.lines().skip(idx).collect();
                    c.snapshots = parse_snapshots(&rest);
                    break;
                }
                continue;
            }
            let Some((k, v)) = t.split_once(':').or_else(|| t.split_once('=')) else {
                continue;
            };
            let (k, v) = (k.trim().to_string(), v.trim().to_string());
            if section == "pve:pending" {
                if k == "delete" {
                    c.pending_delete = crate::schema::split_list(&v);
                } else {
                    c.pending.insert(k, v);
                }
            } else if k == ENV_LINE {
                // `env` is kept as one line per variable; PVE's parser joins them with NUL.
                let env = c.opts.entry("env".into()).or_default();
                if !env.is_empty() {
                    env.push('\0');
                }
                env.push_str(&v);
            } else if k.starts_with("lxc.") {
                c.lxc.push((k, v));
            } else {
                c.opts.insert(k, v);
            }
        }
        c
    }

    /// `write_pct_config`.
    pub fn write(&self) -> String {
        let mut raw = String::new();
        // Every line of the description, empty ones inside included (`#`), trailing empty ones not.
        let description = stored_description(&self.description);
        for l in description.lines() {
            raw.push('#');
            raw.push_str(&encode_text(l));
            raw.push('\n');
        }
        for (k, v) in self.opts.iter().filter(|(k, _)| *k != "env") {
            raw.push_str(&format!("{k}: {v}\n"));
        }
        for var in self.opts.get("env").into_iter().flat_map(|e| e.split('\0')) {
            raw.push_str(&format!("{ENV_LINE}: {var}\n"));
        }
        for (k, v) in &self.lxc {
            raw.push_str(&format!("{k}: {v}\n"));
        }
        if !self.pending.is_empty() || !self.pending_delete.is_empty() {
            raw.push_str("\n[pve:pending]\n");
            for (k, v) in &self.pending {
                raw.push_str(&format!("{k}: {v}\n"));
            }
            if !self.pending_delete.is_empty() {
                raw.push_str(&format!("delete: {}\n", self.pending_delete.join(",")));
            }
        }
        for (name, snap) in &self.snapshots {
            raw.push_str(&format!("\n[{name}]\n"));
            raw.push_str(&snap.write());
        }
        raw
    }

    /// The snapshot `name`, if there is one.
    pub fn snapshot(&self, name: &str) -> Option<&CtConf> {
        self.snapshots
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, s)| s)
    }

    /// The values `pct config` shows: pending merged in unless `current`.
    pub fn effective(&self, current: bool) -> BTreeMap<String, String> {
        let mut m = self.opts.clone();
        if !self.description.is_empty() {
            m.insert("description".into(), self.description.clone());
        }
        if !current {
            for (k, v) in &self.pending {
                m.insert(k.clone(), v.clone());
            }
            for d in &self.pending_delete {
                m.remove(d);
            }
        }
        m
    }

    pub fn lock(&self) -> Option<&str> {
        self.opts.get("lock").map(String::as_str)
    }
}

/// The `digest` of a config file (40 hex digits; PVE uses SHA-1, the simulator a truncated SHA-256).
pub fn digest(raw: &str) -> String {
    let h = Sha256::digest(raw.as_bytes());
    hex::encode(h)[..40].to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXAMPLE: &str = "#Web server\narch: amd64\ncores: 2\nfeatures: nesting=1\nhostname: web1\nmemory: 1024\nswap: 512\nunprivileged: 1\n";

    #[test]
    fn roundtrip_example() {
        let c = CtConf::parse(EXAMPLE);
        assert_eq!(c.description, "Web server\n");
        assert_eq!(c.opts["hostname"], "web1");
        assert_eq!(c.write(), EXAMPLE);
    }

    #[test]
    fn env_is_written_as_runtime_lines() {
        let mut c = CtConf::default();
        c.opts.insert("memory".into(), "512".into());
        c.opts.insert("env".into(), "A=1\0B=x y".into());
        c.lxc.push(("lxc.init.cwd".into(), "/srv".into()));
        let text = c.write();
        assert_eq!(
            text,
            "memory: 512\nlxc.environment.runtime: A=1\nlxc.environment.runtime: B=x y\nlxc.init.cwd: /srv\n"
        );
        assert_eq!(CtConf::parse(&text), c);
    }

    #[test]
    fn several_runtime_lines_round_trip_in_place() {
        // As the agent writes them: after the keys, before raw lxc.* lines; `=` read as PVE reads it.
        let text = "#app\narch: amd64\nhostname: app\nlxc.environment.runtime: A=1\nlxc.environment.runtime = B=x=y z\nlxc.environment.runtime: C=\nlxc.idmap: u 0 100000 65536\n";
        let c = CtConf::parse(text);
        assert_eq!(c.opts["env"], "A=1\0B=x=y z\0C=");
        assert_eq!(
            c.lxc,
            vec![("lxc.idmap".to_string(), "u 0 100000 65536".to_string())]
        );
        assert_eq!(c.write(), text.replace(" = B", ": B"));
    }

    /// CONTRACT §3.7: `"a \n\nb"` is stored as `#a `, `#`, `#b` and reads back as `"a \n\nb\n"`; `"a\n\n"`
    /// reads back as `"a\n"`; a line that looks like `key: value` stays a description line.
    #[test]
    fn a_description_round_trips_as_pve_keeps_it() {
        let mut c = CtConf {
            description: stored_description("a \n\nb"),
            ..CtConf::default()
        };
        let text = c.write();
        assert_eq!(text, "#a \n#\n#b\n");
        assert_eq!(CtConf::parse(&text).description, "a \n\nb\n");
        assert_eq!(stored_description("a\n\n"), "a\n");
        assert_eq!(stored_description("\n\n"), "");
        assert_eq!(stored_description("\n x\t \n"), "\n x\t \n");
        c.description = stored_description("managed-by: team\nmemory: 4\n");
        let back = CtConf::parse(&c.write());
        assert_eq!(back.description, "managed-by: team\nmemory: 4\n");
        assert!(!back.opts.contains_key("memory"));
    }

    #[test]
    fn encode_description() {
        assert_eq!(encode_text("Web server\n"), "Web server%0A");
        assert_eq!(encode_text("a:b%"), "a%3Ab%25");
        assert_eq!(decode_text("a%3Ab%25"), "a:b%");
    }

    #[test]
    fn pending_section() {
        let mut c = CtConf::parse("memory: 512\n");
        c.pending.insert("cores".into(), "2".into());
        c.pending_delete.push("swap".into());
        let raw = c.write();
        assert_eq!(
            raw,
            "memory: 512\n\n[pve:pending]\ncores: 2\ndelete: swap\n"
        );
        assert_eq!(CtConf::parse(&raw), c);
    }
}
