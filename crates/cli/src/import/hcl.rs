//! Reading Terraform files: every `*.tf` of a directory parsed with `hcl-edit` (which keeps byte spans, so every
//! warning names FILE:LINE:COL), and static evaluation of expressions with `hcl-rs`'s evaluator (`var.`,
//! `local.`, `each.`; anything else, such as `file()` or another resource's attribute, is "not static").

use std::path::{Path, PathBuf};

use hcl::edit::structure::{Attribute, Block, Body};
use hcl::edit::Span;
use hcl::eval::{Context, Evaluate};
use hcl::{Map, Value};

use super::ImportError;

/// One parsed `.tf` file.
pub struct TfFile {
    /// The path as shown in messages (relative to the directory the import was asked for when below it).
    pub shown: String,
    pub text: String,
    pub body: Body,
    line_starts: Vec<usize>,
}

/// A place in a `.tf` file.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Loc {
    pub file: String,
    pub line: usize,
    pub column: usize,
}

impl std::fmt::Display for Loc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}:{}", self.file, self.line, self.column)
    }
}

impl TfFile {
    pub fn parse(path: &Path, shown: String) -> Result<TfFile, ImportError> {
        let text = std::fs::read_to_string(path).map_err(|source| ImportError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        let body = hcl::edit::parser::parse_body(&text).map_err(|e| ImportError::Parse {
            file: shown.clone(),
            line: e.location().line(),
            column: e.location().column(),
            message: e.message().to_string(),
        })?;
        let mut line_starts = vec![0];
        line_starts.extend(text.match_indices('\n').map(|(i, _)| i + 1));
        Ok(TfFile {
            shown,
            text,
            body,
            line_starts,
        })
    }

    /// FILE:LINE:COL of something parsed from this file (line 1 when it has no span).
    pub fn loc(&self, item: &dyn Span) -> Loc {
        let offset = item.span().map(|r| r.start).unwrap_or(0);
        let line = self.line_starts.partition_point(|&s| s <= offset);
        let start = self.line_starts[line - 1];
        let column = self.text[start..offset.min(self.text.len())]
            .chars()
            .count()
            + 1;
        Loc {
            file: self.shown.clone(),
            line,
            column,
        }
    }

    /// The source text of something parsed from this file (for messages).
    pub fn source(&self, item: &dyn Span) -> String {
        match item.span() {
            Some(r) if r.end <= self.text.len() => self.text[r].trim().to_string(),
            _ => String::new(),
        }
    }
}

/// Every `*.tf` file of `dir`, sorted by name. `shown_prefix` is put before each file name in messages.
pub fn load_dir(dir: &Path, shown_prefix: &str) -> Result<Vec<TfFile>, ImportError> {
    let entries = std::fs::read_dir(dir).map_err(|source| ImportError::Read {
        path: dir.to_path_buf(),
        source,
    })?;
    let mut paths: Vec<PathBuf> = Vec::new();
    for e in entries {
        let e = e.map_err(|source| ImportError::Read {
            path: dir.to_path_buf(),
            source,
        })?;
        let p = e.path();
        if p.extension().is_some_and(|x| x == "tf") && p.is_file() {
            paths.push(p);
        }
    }
    paths.sort();
    paths
        .iter()
        .map(|p| {
            let name = p.file_name().unwrap_or_default().to_string_lossy();
            TfFile::parse(p, format!("{shown_prefix}{name}"))
        })
        .collect()
}

/// The first label of a block (`variable "NAME"`), or "".
pub fn label(b: &Block, i: usize) -> &str {
    b.labels.get(i).map(|l| l.as_str()).unwrap_or("")
}

/// Blocks named `ident` at the top of every file, with their file.
pub fn blocks<'a>(
    files: &'a [TfFile],
    ident: &'a str,
) -> impl Iterator<Item = (&'a TfFile, &'a Block)> {
    files
        .iter()
        .flat_map(move |f| f.body.get_blocks(ident).map(move |b| (f, b)))
}

/// The variables an expression may use.
#[derive(Default, Clone)]
pub struct Scope {
    pub vars: Map<String, Value>,
    pub locals: Map<String, Value>,
    pub each: Option<(Value, Value)>,
    /// Other resources' literal attributes, by type and label (`proxmox_virtual_environment_container.gold.id`).
    pub resources: Map<String, Value>,
}

impl Scope {
    fn context(&self) -> Context<'static> {
        let mut cx = Context::new();
        cx.declare_var("var", Value::Object(self.vars.clone()));
        cx.declare_var("local", Value::Object(self.locals.clone()));
        for (kind, by_label) in &self.resources {
            cx.declare_var(kind.clone(), by_label.clone());
        }
        if let Some((k, v)) = &self.each {
            let mut each = Map::new();
            each.insert("key".to_string(), k.clone());
            each.insert("value".to_string(), v.clone());
            cx.declare_var("each", Value::Object(each));
        }
        cx
    }

    /// Evaluates `expr` statically; `Err` says why it is not static.
    pub fn eval(&self, expr: &hcl::edit::expr::Expression) -> Result<Value, String> {
        let e: hcl::Expression = expr.clone().into();
        e.evaluate(&self.context()).map_err(|e| e.to_string())
    }
}

/// Every `locals` value of `files` that evaluates statically in `scope` (locals may use each other: evaluated
/// until nothing more resolves). Returns the ones that did not resolve, with their place and reason.
pub fn resolve_locals(files: &[TfFile], scope: &mut Scope) -> Vec<(Loc, String, String)> {
    let mut pending: Vec<(&TfFile, &Attribute)> = blocks(files, "locals")
        .flat_map(|(f, b)| b.body.attributes().map(move |a| (f, a)))
        .collect();
    loop {
        let before = pending.len();
        let mut still = Vec::new();
        for (f, a) in pending {
            match scope.eval(&a.value) {
                Ok(v) => {
                    scope.locals.insert(a.key.to_string(), v);
                }
                Err(_) => still.push((f, a)),
            }
        }
        pending = still;
        if pending.len() == before || pending.is_empty() {
            break;
        }
    }
    pending
        .into_iter()
        .map(|(f, a)| {
            let why = scope.eval(&a.value).err().unwrap_or_default();
            (f.loc(a), a.key.to_string(), why)
        })
        .collect()
}
