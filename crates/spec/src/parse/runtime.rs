//! The runtime fields of a container (PVE 9.1+): `env` (the `lxc.environment.runtime` lines of the config file)
//! and `entrypoint` (`--entrypoint`, `lxc.init.cmd`), checked as PVE's schema checks them.

use std::collections::BTreeMap;

use super::{quote, Cx};
use crate::yaml::Node;

/// A character PVE's `env` / `entrypoint` patterns refuse (control characters; a tab is fine). Stricter than the
/// schema's pattern, which lets a newline through that would then break the config file's line.
fn refused_char(s: &str) -> Option<char> {
    s.chars().find(|c| c.is_control() && *c != '\t')
}

/// PVE's `\w+` for a variable name, in ASCII: letters, digits, `_`.
pub(crate) fn is_env_name(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

impl Cx<'_> {
    /// `env:` a mapping `NAME: value`, any number of variables. The agent writes them into the container's
    /// config file as `lxc.environment.runtime: NAME=value` lines, one per variable, as PVE stores `env`.
    pub(super) fn env(&mut self, n: &Node, path: &str) -> Option<BTreeMap<String, String>> {
        let es = self.map(n, path)?;
        let mut out = BTreeMap::new();
        let mut ok = true;
        for e in es {
            let Some(p) = self.keyed_entry(
                e,
                path,
                is_env_name(&e.key),
                "environment variable name",
                "letters, digits and '_' only (PVE's `\\w+`), e.g. APP_PORT",
            ) else {
                ok = false;
                continue;
            };
            let value = if e.value.is_null() {
                Some(String::new())
            } else {
                self.string(&e.value, &p)
            };
            let Some(v) = value else {
                ok = false;
                continue;
            };
            if let Some(c) = refused_char(&v) {
                self.err(
                    e.value.span,
                    &p,
                    format!(
                        "the value of {} has a control character (U+{:04X})",
                        e.key, c as u32
                    ),
                    Some("PVE refuses control characters other than tab in env values"),
                );
                ok = false;
                continue;
            }
            out.insert(e.key.clone(), v);
        }
        ok.then_some(out)
    }

    /// `entrypoint:` the command line PVE runs as init.
    pub(super) fn entrypoint(&mut self, n: &Node, path: &str) -> Option<String> {
        let s = self.string(n, path)?;
        if s.is_empty() {
            return Some(s); // explicitly none: PVE's /sbin/init
        }
        if s.trim().is_empty() {
            self.err(
                n.span,
                path,
                "entrypoint is blank",
                Some("a command such as /usr/local/bin/app --serve; \"\" for none (PVE's /sbin/init, removing one set on the node); left out, it is not compared"),
            );
            return None;
        }
        if let Some(c) = refused_char(&s) {
            self.err(
                n.span,
                path,
                format!(
                    "entrypoint {} has a control character (U+{:04X})",
                    quote(&s),
                    c as u32
                ),
                Some("one line without control characters (a tab is fine)"),
            );
            return None;
        }
        Some(s)
    }
}
