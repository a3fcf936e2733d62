//! `policies:` at the top of a fleet file: Rego files (paths relative to the fleet file) that are evaluated
//! against the fleet and its plan at plan and at submit time (crate `pxfleet-policy`). Read here, through the
//! same [`FileSource`] as `file:` SSH keys, so pxctl sends them with the fleet and the controller reads them
//! from the request.

use crate::diag::{Diagnostic, Diagnostics};
use crate::files::{resolve_relative, FileSource};
use crate::yaml::{self, Value};

/// One policy named by the fleet: its path as written, its text, and where the fleet names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PolicyFile {
    pub path: String,
    pub source: String,
    pub line: u32,
    pub column: u32,
}

/// The policies `text` names, read through `files`. No `policies:` key: an empty list.
pub fn read_policies(
    file_name: &str,
    text: &str,
    files: &dyn FileSource,
) -> Result<Vec<PolicyFile>, Diagnostics> {
    let mut diags = Vec::new();
    let Some(root) = yaml::parse(file_name, text, &mut diags) else {
        return Err(Diagnostics(diags));
    };
    let Value::Map(entries) = &root.value else {
        return Ok(Vec::new());
    };
    let Some(e) = entries.iter().find(|e| e.key == "policies") else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    let items: Vec<&yaml::Node> = match &e.value.value {
        Value::Seq(items) => items.iter().collect(),
        _ if e.value.is_null() => Vec::new(),
        _ => {
            diags.push(
                Diagnostic::new(
                    file_name,
                    e.value.span,
                    "policies",
                    "policies must be a list of .rego files",
                )
                .with_hint("policies: [policies/no-privileged.rego]"),
            );
            return Err(Diagnostics(diags));
        }
    };
    for (i, n) in items.into_iter().enumerate() {
        let path = format!("policies.{i}");
        let Value::Scalar { text: p, .. } = &n.value else {
            diags.push(Diagnostic::new(
                file_name,
                n.span,
                &path,
                "expected a file path",
            ));
            continue;
        };
        if !p.ends_with(".rego") {
            diags.push(
                Diagnostic::new(file_name, n.span, &path, format!("{p} is not a .rego file"))
                    .with_hint("policies are Rego modules (OPA), one file each"),
            );
            continue;
        }
        let resolved = resolve_relative(file_name, p);
        match files.read(&resolved) {
            Ok(source) => out.push(PolicyFile {
                path: p.clone(),
                source,
                line: n.span.line,
                column: n.span.column,
            }),
            Err(err) => diags.push(
                Diagnostic::new(
                    file_name,
                    n.span,
                    &path,
                    format!("cannot read policy {}: {err}", resolved.display()),
                )
                .with_hint("policy paths are relative to the fleet file's directory"),
            ),
        }
    }
    if diags.is_empty() {
        Ok(out)
    } else {
        Err(Diagnostics(diags))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::files::MemFiles;

    #[test]
    fn policies_are_read_relative_to_the_fleet_file() {
        let files = MemFiles::default().with("ops/p/a.rego", "package a\n");
        let text = "fleet: dev\npolicies: [p/a.rego]\ncontainers: {}\n";
        let got = read_policies("ops/fleet.yaml", text, &files).unwrap();
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].path, "p/a.rego");
        assert_eq!(got[0].source, "package a\n");
        assert_eq!((got[0].line, got[0].column), (2, 12));
        let err = read_policies(
            "ops/fleet.yaml",
            "fleet: dev\npolicies: [p/b.rego, x.txt]\n",
            &files,
        )
        .unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("ops/fleet.yaml:2:12: policies.0: cannot read policy ops/p/b.rego"),
            "{text}"
        );
        assert!(text.contains("x.txt is not a .rego file"), "{text}");
        // and the fleet parser accepts the key
        let files = MemFiles::default().with("a.rego", "package a\n");
        crate::parse_fleet(
            "fleet.yaml",
            "fleet: dev\npolicies: [a.rego]\ncontainers: {}\n",
            &files,
        )
        .unwrap();
    }
}
