//! `pxctl import terraform DIR`: a fleet.yaml from a Terraform environment using the bpg/proxmox provider.
//!
//! The environment's `*.tf` files are parsed with a real HCL parser (`hcl-edit`, spans kept for messages); its
//! `variable` defaults and `locals` are evaluated where they are static; each local `module` is loaded with its
//! inputs and its variables' type defaults (`optional(number, 2)`); every `proxmox_virtual_environment_container`
//! resource (in the environment or its modules) is evaluated per `for_each` entry and mapped to a container
//! ([`bpg`]). What cannot be mapped becomes a comment in the output and a warning naming FILE:LINE:COL.
//! With a state file ([`state`]), vm_ids, nodes and MAC addresses of the existing containers are pinned.

mod bpg;
mod bpg_clone;
pub mod emit;
mod hcl;
mod pin;
mod resources;
pub mod state;
mod types;
mod variables;

use std::collections::BTreeSet;
use std::path::{Component, Path, PathBuf};

use ::hcl::{Map, Value as HclValue};
use serde_json::{json, Value};

pub use self::hcl::Loc;
use self::hcl::{blocks, label, load_dir, resolve_locals, Scope, TfFile};
use emit::Ct;
use pin::apply_state;
use resources::collect;
use variables::{ancestor_decl, variables};

#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    #[error("reading {}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{file}:{line}:{column}: {message}")]
    Parse {
        file: String,
        line: usize,
        column: usize,
        message: String,
    },
    #[error("{}: {message}", path.display())]
    State { path: PathBuf, message: String },
    #[error("{0}: no proxmox_virtual_environment_container resource found (in the directory or its local modules)")]
    NoContainers(String),
}

/// What to import.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// The environment's directory (where `terraform plan` runs).
    pub dir: PathBuf,
    /// A `terraform state pull` JSON file: existing containers are taken over (vm_id, node, MACs kept).
    pub state: Option<PathBuf>,
    /// The fleet's name; the directory's name by default.
    pub fleet: Option<String>,
    /// Variable files read after terraform.tfvars and *.auto.tfvars (`-var-file`).
    pub var_files: Vec<PathBuf>,
}

/// The result: the fleet file's text and the warnings (each `FILE:LINE:COL: message`).
#[derive(Debug, Clone)]
pub struct Imported {
    pub yaml: String,
    pub warnings: Vec<String>,
}

/// Warnings with their place, without repeats (a module's resource is evaluated once per container).
#[derive(Default)]
pub struct Notes {
    items: Vec<(Option<Loc>, String)>,
    seen: BTreeSet<(Option<Loc>, String)>,
}

impl Notes {
    pub fn add(&mut self, loc: Loc, message: String) {
        self.push(Some(loc), message);
    }
    fn push(&mut self, loc: Option<Loc>, message: String) {
        if self.seen.insert((loc.clone(), message.clone())) {
            self.items.push((loc, message));
        }
    }
    fn lines(&self) -> Vec<String> {
        self.items
            .iter()
            .map(|(l, m)| match l {
                Some(l) => format!("{l}: {m}"),
                None => m.clone(),
            })
            .collect()
    }
}

/// Lexical clean-up of `a/b/../../c` (no file system access: shown in messages).
fn normalize(p: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::ParentDir
                if matches!(out.components().next_back(), Some(Component::Normal(_))) =>
            {
                out.pop();
            }
            Component::CurDir => {}
            c => out.push(c),
        }
    }
    out
}

fn shown_dir(p: &Path) -> String {
    let s = normalize(p).display().to_string();
    if s.is_empty() {
        String::new()
    } else {
        format!("{s}/")
    }
}

fn fleet_name(dir: &Path) -> String {
    let base = std::fs::canonicalize(dir)
        .ok()
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .unwrap_or_else(|| "imported".into());
    let mut s: String = base
        .to_ascii_lowercase()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    s = s.trim_matches('-').to_string();
    s.truncate(63);
    if s.is_empty() {
        "imported".into()
    } else {
        s
    }
}

/// `target` as seen from `dir` when the directory was given relative (`../../variables.tf`), else absolute.
fn pathdiff(target: &Path, dir: &Path) -> String {
    if dir.is_absolute() {
        return target.display().to_string();
    }
    let (Ok(t), Ok(d)) = (std::fs::canonicalize(target), std::fs::canonicalize(dir)) else {
        return target.display().to_string();
    };
    let mut up = PathBuf::new();
    let mut base = d.as_path();
    loop {
        if let Ok(rest) = t.strip_prefix(base) {
            let shown = normalize(&dir.join(&up).join(rest));
            return shown.display().to_string();
        }
        match base.parent() {
            Some(p) => {
                base = p;
                up.push("..");
            }
            None => return target.display().to_string(),
        }
    }
}

/// Imports the environment in `opts.dir`.
pub fn terraform(opts: &Options) -> Result<Imported, ImportError> {
    let dir = opts.dir.as_path();
    let env_files = load_dir(dir, &shown_dir(dir))?;
    let mut notes = Notes::default();
    let mut containers: Vec<Ct> = Vec::new();
    let mut privileged = false;

    // The environment's own variables: their defaults, then the values of terraform.tfvars, *.auto.tfvars
    // (by name) and --var-file files, in Terraform's order (later wins); then its locals.
    let mut scope = Scope::default();
    let env_vars = variables(&env_files);
    for (name, d) in &env_vars {
        if let Some(v) = d.default.clone() {
            let mut borrowed = Vec::new();
            let v = types::apply(&d.ty, v, None, "", &mut borrowed);
            scope.vars.insert(name.clone(), v);
        }
    }
    let mut var_files: Vec<PathBuf> = Vec::new();
    if dir.join("terraform.tfvars").is_file() {
        var_files.push(dir.join("terraform.tfvars"));
    }
    let mut auto: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|source| ImportError::Read {
            path: dir.to_path_buf(),
            source,
        })?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.to_string_lossy().ends_with(".auto.tfvars") && p.is_file())
        .collect();
    auto.sort();
    var_files.extend(auto);
    var_files.extend(opts.var_files.iter().cloned());
    for path in &var_files {
        let f = TfFile::parse(path, normalize(path).display().to_string())?;
        for a in f.body.attributes() {
            let name = a.key.as_str();
            let Some((_, d)) = env_vars.iter().find(|(n, _)| n == name) else {
                notes.add(
                    f.loc(a),
                    format!("`{name}` is not a variable of {}: ignored", dir.display()),
                );
                continue;
            };
            match Scope::default().eval(&a.value) {
                Ok(v) => {
                    let mut borrowed = Vec::new();
                    let v = types::apply(&d.ty, v, None, "", &mut borrowed);
                    scope.vars.insert(name.to_string(), v);
                }
                Err(why) => notes.add(
                    f.loc(a),
                    format!("`{name}`: not imported, its value is not static ({why})"),
                ),
            }
        }
    }
    let _ = resolve_locals(&env_files, &mut scope);
    let cx = bpg::Cx {
        files: &env_files,
        unresolved: &[],
    };
    collect(
        &env_files,
        &scope,
        &cx,
        &mut notes,
        &mut containers,
        &mut privileged,
    );

    for (f, m) in blocks(&env_files, "module") {
        let name = label(m, 0);
        let source = m
            .body
            .get_attribute("source")
            .and_then(|a| scope.eval(&a.value).ok())
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default();
        if !(source.starts_with("./") || source.starts_with("../")) {
            notes.add(
                f.loc(m),
                format!(
                    "module {name:?}: source {source:?} is not a local directory: not imported"
                ),
            );
            continue;
        }
        let mdir = dir.join(&source);
        let mfiles = load_dir(&mdir, &shown_dir(&mdir))?;
        let decls = variables(&mfiles);
        let declared: Vec<&str> = decls.iter().map(|(n, _)| n.as_str()).collect();

        // Inputs: the module block's attributes, evaluated in the environment's scope.
        let mut inputs: Map<String, HclValue> = Map::new();
        let mut unresolved: Vec<(String, Loc, String)> = Vec::new();
        let given: Vec<&str> = m.body.attributes().map(|a| a.key.as_str()).collect();
        for a in m.body.attributes() {
            let key = a.key.as_str();
            if matches!(
                key,
                "source" | "version" | "count" | "for_each" | "providers" | "depends_on"
            ) {
                continue;
            }
            let mut target = key.to_string();
            if !declared.contains(&key) {
                let guess = declared
                    .iter()
                    .filter(|d| !given.contains(d))
                    .map(|d| (strsim::levenshtein(d, key), *d))
                    .filter(|(dist, _)| *dist <= 2)
                    .min();
                match guess {
                    Some((_, g)) => {
                        notes.add(
                            f.loc(a),
                            format!(
                                "module {name:?}: input `{key}` is not a variable of {} (did you mean `{g}`?); its value is used for `{g}`",
                                shown_dir(&mdir).trim_end_matches('/')
                            ),
                        );
                        target = g.to_string();
                    }
                    None => {
                        notes.add(
                            f.loc(a),
                            format!(
                                "module {name:?}: input `{key}` is not a variable of {}: ignored",
                                shown_dir(&mdir).trim_end_matches('/')
                            ),
                        );
                        continue;
                    }
                }
            }
            match scope.eval(&a.value) {
                Ok(v) => {
                    inputs.insert(target, v);
                }
                Err(_) => unresolved.push((
                    target,
                    f.loc(a),
                    format!("`{}`, not static", f.source(&a.value)),
                )),
            }
        }

        // The module's scope: inputs or defaults, with the types' defaults put in.
        let mut mscope = Scope::default();
        for (vname, d) in &decls {
            let v = inputs.get(vname).cloned().or_else(|| d.default.clone());
            let Some(v) = v else {
                if !unresolved.iter().any(|(n, _, _)| n == vname) {
                    unresolved.push((
                        vname.clone(),
                        d.file.loc(d.block),
                        format!("required by module {name:?} and not given"),
                    ));
                }
                continue;
            };
            let fallback = ancestor_decl(dir, vname);
            let mut borrowed = Vec::new();
            let v = types::apply(
                &d.ty,
                v,
                fallback.as_ref().map(|(t, _)| t),
                "",
                &mut borrowed,
            );
            let mut reported = BTreeSet::new();
            for b in borrowed {
                let field = b.path.rsplit('.').next().unwrap_or_default().to_string();
                if reported.insert(field.clone()) {
                    let (_, floc) = fallback.as_ref().expect("borrowed only with a fallback");
                    notes.add(
                        d.file.loc(d.block),
                        format!(
                            "variable `{vname}`: `{field}` has no default here (Terraform would pass null); the default of the same variable in {floc} is used: {}",
                            serde_json::to_string(&b.value).unwrap_or_default()
                        ),
                    );
                }
            }
            mscope.vars.insert(vname.clone(), v);
        }
        let _ = resolve_locals(&mfiles, &mut mscope);
        let mcx = bpg::Cx {
            files: &mfiles,
            unresolved: &unresolved,
        };
        collect(
            &mfiles,
            &mscope,
            &mcx,
            &mut notes,
            &mut containers,
            &mut privileged,
        );
    }

    if containers.is_empty() {
        return Err(ImportError::NoContainers(dir.display().to_string()));
    }

    // The state: existing containers keep vm_id, node and MACs.
    let mut header = vec![
        format!(
            "Imported by `pxctl import terraform {}`{}.",
            dir.display(),
            opts.state
                .as_ref()
                .map(|s| format!(" --state {}", s.display()))
                .unwrap_or_default()
        ),
        "Check it with `pxctl validate`, then `pxctl plan` against the cluster before the first submit.".into(),
    ];
    let fleet = opts.fleet.clone().unwrap_or_else(|| fleet_name(dir));
    if let Some(path) = &opts.state {
        let st = state::read(path)?;
        apply_state(
            &st,
            &mut containers,
            &mut notes,
            &path.display().to_string(),
        );
        header.push(String::new());
        if spec_knows_adopt() {
            // fleet.yaml's `adopt: true` (with node and vm_id): the plan takes each over where it is.
            header.push("The containers found in the state keep their vm_id, node and MAC addresses and carry".into());
            header.push("`adopt: true`: the first submit takes them under management where they are (never recreated);".into());
            header.push("`pxctl plan` shows what it would change on them (the mark, and any field that differs).".into());
            for c in containers.iter_mut() {
                if c.notes.iter().any(|n| n.starts_with("in the state as")) {
                    c.set("adopt", json!(true));
                }
            }
        } else {
            header.push("The containers found in the state keep their vm_id, node and MAC addresses. pxfleet manages a".into());
            header.push(format!(
                "container whose description carries `managed-by: pxfleet fleet={fleet} name=KEY`: this pxctl has no"
            ));
            header.push("`adopt:`, so mark each existing one on its node before the first submit (else the plan refuses the taken vm_id):".into());
            for c in &containers {
                if let (Some(id), true) = (
                    c.get("vm_id"),
                    c.notes.iter().any(|n| n.starts_with("in the state as")),
                ) {
                    let desc = c
                        .get("description")
                        .and_then(Value::as_str)
                        .map(|d| format!("{d}\n"))
                        .unwrap_or_default();
                    header.push(format!(
                        "  pct set {id} --description {}",
                        shell_quote(&format!(
                            "{desc}managed-by: pxfleet fleet={fleet} name={}",
                            c.key
                        ))
                    ));
                }
            }
        }
    }

    // Internal fields out; inline appliances to `templates:`; static addresses without a gateway get `none`.
    let mut templates: Vec<(String, Value)> = Vec::new();
    for c in &mut containers {
        c.remove("_ip_configs");
        c.remove("_interfaces");
        if let Some(t) = c.remove("_template_def") {
            if let Some(Value::String(n)) = c.get("template") {
                if !templates.iter().any(|(k, _)| k == n) {
                    templates.push((n.clone(), t));
                }
            }
        }
        let static_v4 = c
            .get("ip_address")
            .and_then(Value::as_str)
            .is_some_and(|a| a.contains('/'));
        if static_v4 && c.get("gateway").is_none() {
            c.set("gateway", json!("none"));
        }
        if c.get("template_url").is_none() && c.get("template").is_none() {
            c.notes.push(
                "no template could be imported: add `template_url:` (see the warnings)".into(),
            );
        }
    }

    let note_lines = notes.lines();
    let yaml = emit::render(&emit::Document {
        fleet: &fleet,
        header: &header,
        notes: &note_lines,
        allow_privileged: privileged,
        templates: &templates,
        containers: &containers,
    });
    let mut warnings = note_lines;
    // The written file must be valid; if it is not, say so (the user finishes it by hand).
    if let Err(d) = pxfleet_spec::parse_fleet("fleet.yaml", &yaml, &pxfleet_spec::NoFiles) {
        for line in d.to_string().lines() {
            warnings.push(format!("the written fleet does not validate: {line}"));
        }
    }
    Ok(Imported { yaml, warnings })
}

/// Whether this build's fleet parser has `adopt: true` (taking an existing container over where it is). The
/// importer uses it when it exists and otherwise says how to mark the containers by hand.
pub fn spec_knows_adopt() -> bool {
    let probe = "fleet: probe\ncontainers:\n  a: {adopt: true, node: n, vm_id: 100, template_url: https://example.invalid/t.tar.xz}\n";
    match pxfleet_spec::parse_fleet("probe.yaml", probe, &pxfleet_spec::NoFiles) {
        Ok(_) => true,
        Err(d) => !d
            .iter()
            .any(|d| d.path.ends_with("adopt") || d.message.contains("'adopt'")),
    }
}

/// Bash's `$'...'` quoting (newlines as `\n`), for the `pct set` lines a user copies.
fn shell_quote(s: &str) -> String {
    format!(
        "$'{}'",
        s.replace('\\', "\\\\")
            .replace('\'', "\\'")
            .replace('\n', "\\n")
    )
}

/// `pxctl import terraform`: the fleet on `out`, warnings on `err`; the exit status.
pub fn run(
    args: &crate::args::ImportTerraformArgs,
    out: &mut dyn std::io::Write,
    err: &mut dyn std::io::Write,
) -> u8 {
    let opts = Options {
        dir: args.dir.clone(),
        state: args.state.clone(),
        fleet: args.fleet.clone(),
        var_files: args.var_file.clone(),
    };
    match terraform(&opts) {
        Ok(imported) => {
            for w in &imported.warnings {
                let _ = writeln!(err, "warning: {w}");
            }
            if out.write_all(imported.yaml.as_bytes()).is_err() {
                return 1;
            }
            0
        }
        Err(e) => {
            let _ = writeln!(err, "error: {e}");
            1
        }
    }
}
