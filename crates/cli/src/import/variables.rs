//! The environment's declared variables (`variable "NAME" {}`: type and default), and the
//! declaration of a module's variable found in an ancestor directory.

use std::path::Path;

use ::hcl::Value as HclValue;

use super::hcl::Loc;
use super::hcl::{blocks, label, Scope, TfFile};
use super::pathdiff;
use super::types;

/// A declared variable's type and default value, from `variable "NAME" {}` blocks.
pub(super) struct VarDecl<'a> {
    pub(super) file: &'a TfFile,
    pub(super) block: &'a ::hcl::edit::structure::Block,
    pub(super) ty: types::Ty,
    pub(super) default: Option<HclValue>,
}

pub(super) fn variables(files: &[TfFile]) -> Vec<(String, VarDecl<'_>)> {
    let empty = Scope::default();
    blocks(files, "variable")
        .map(|(f, b)| {
            let ty = b
                .body
                .get_attribute("type")
                .map(|a| types::parse(&a.value.clone().into()))
                .unwrap_or(types::Ty::Plain);
            let default = b
                .body
                .get_attribute("default")
                .and_then(|a| empty.eval(&a.value).ok());
            (
                label(b, 0).to_string(),
                VarDecl {
                    file: f,
                    block: b,
                    ty,
                    default,
                },
            )
        })
        .collect()
}

/// The same variable declared in a `variables.tf` of a directory above `dir` (a project's root module):
/// its type may carry defaults the module's own declaration lacks.
pub(super) fn ancestor_decl(dir: &Path, name: &str) -> Option<(types::Ty, Loc)> {
    let abs = std::fs::canonicalize(dir).ok()?;
    for up in abs.ancestors().skip(1).take(3) {
        let p = up.join("variables.tf");
        if !p.is_file() {
            continue;
        }
        let shown = pathdiff(&p, dir);
        let Ok(f) = TfFile::parse(&p, shown) else {
            continue;
        };
        let files = [f];
        let found = variables(&files)
            .into_iter()
            .find(|(n, _)| n == name)
            .map(|(_, d)| (d.ty, d.file.loc(d.block)));
        if found.is_some() {
            return found;
        }
    }
    None
}
