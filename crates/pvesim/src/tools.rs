//! The `pvesm` and `pveam` commands (argument parsing with PVE's rules, output formats of CONTRACT §5/§6).

use std::collections::BTreeMap;

use serde_json::{json, Value};

use crate::error::{Result, SimError};
use crate::getopt::parse_and_validate;
use crate::node::Node;
use crate::schema::expand;
use crate::task::stderr_after;
use crate::{pveam, storage, Outcome};

fn props(v: Value) -> BTreeMap<String, Value> {
    expand(v.as_object().expect("object literal"))
}

fn parse(
    tool: &str,
    cmd: &str,
    args: &[String],
    p: Value,
    pos: &[&str],
) -> std::result::Result<BTreeMap<String, String>, Outcome> {
    let pr = props(p);
    let mut u = format!("{tool} {cmd}");
    for a in pos {
        u.push_str(&format!(" <{a}>"));
    }
    if pr.keys().any(|k| !pos.contains(&k.as_str())) {
        u.push_str(" [OPTIONS]");
    }
    parse_and_validate(&pr, args, pos, &BTreeMap::new())
        .map_err(|(w, e)| Outcome::err(&format!("{w}{}", e.render(Some(&u))), e.exit_code()))
}

fn finish(r: Result<String>) -> Outcome {
    match r {
        Ok(s) => Outcome {
            stdout: s,
            stderr: String::new(),
            code: 0,
        },
        Err(e) => Outcome::err(&e.render(None), e.exit_code()),
    }
}

fn sid() -> Value {
    json!({"type": "string", "format": "pve-storage-id"})
}

/// Runs `pvesm <args>`.
pub fn pvesm(node: &Node, args: &[String]) -> Outcome {
    let cmd = args.first().map(String::as_str).unwrap_or("");
    let rest = if args.is_empty() { &[][..] } else { &args[1..] };
    let content = json!({"type": "string", "optional": 1});
    match cmd {
        "status" => {
            let p = match parse(
                "pvesm",
                cmd,
                rest,
                json!({"storage": {"type": "string", "format": "pve-storage-id", "optional": 1},
                "content": content, "enabled": {"type": "boolean", "optional": 1}, "target": {"type": "string", "optional": 1},
                "format": {"type": "boolean", "optional": 1}}),
                &[],
            ) {
                Ok(p) => p,
                Err(o) => return o,
            };
            finish(storage::status_text(
                node,
                p.get("storage").map(String::as_str),
                p.get("content").map(String::as_str),
            ))
        }
        "list" => {
            let p = match parse(
                "pvesm",
                cmd,
                rest,
                json!({"storage": sid(), "content": content,
                "vmid": {"type": "integer", "format": "pve-vmid", "optional": 1}}),
                &["storage"],
            ) {
                Ok(p) => p,
                Err(o) => return o,
            };
            finish((|| {
                let st = storage::get(node, &p["storage"])?;
                let vmid = p.get("vmid").and_then(|v| v.parse().ok());
                Ok(storage::list_text(&storage::list(
                    node,
                    st,
                    p.get("content").map(String::as_str),
                    vmid,
                )))
            })())
        }
        "path" => {
            let p = match parse(
                "pvesm",
                cmd,
                rest,
                json!({"volume": {"type": "string"}}),
                &["volume"],
            ) {
                Ok(p) => p,
                Err(o) => return o,
            };
            finish(storage::display_path(node, &p["volume"]).map(|p| format!("{}\n", p.display())))
        }
        "alloc" => {
            let p = match parse(
                "pvesm",
                cmd,
                rest,
                json!({"storage": sid(), "vmid": {"type": "integer", "format": "pve-vmid"},
                "filename": {"type": "string"}, "size": {"type": "string", "pattern": "\\d+[MG]?"},
                "format": {"type": "string", "enum": ["raw", "qcow2", "subvol", "vmdk"], "optional": 1}}),
                &["storage", "vmid", "filename", "size"],
            ) {
                Ok(p) => p,
                Err(o) => return o,
            };
            finish((|| {
                let size = storage::parse_alloc_size(&p["size"]).ok_or_else(|| {
                    SimError::param("size", "value does not match the regex pattern")
                })?;
                let vmid: u32 = p["vmid"].parse().unwrap_or(0);
                let fname = &p["filename"];
                if !fname.is_empty()
                    && !fname.starts_with(&format!("vm-{vmid}-"))
                    && !fname.starts_with(&format!("subvol-{vmid}-"))
                {
                    return Err(SimError::die(format!(
                        "illegal name '{fname}' - should be 'vm-{vmid}-*'"
                    )));
                }
                let mut log = Vec::new();
                let volid = storage::alloc_named(
                    node,
                    &p["storage"],
                    vmid,
                    Some(fname.as_str()),
                    size,
                    &mut log,
                )?;
                Ok(format!("successfully created '{volid}'\n"))
            })())
        }
        "free" => {
            let p = match parse(
                "pvesm",
                cmd,
                rest,
                json!({"volume": {"type": "string"}}),
                &["volume"],
            ) {
                Ok(p) => p,
                Err(o) => return o,
            };
            finish(storage::free(node, &p["volume"]).map(|_| String::new()))
        }
        other => Outcome::err(
            &format!(
                "ERROR: unknown command 'pvesm {other}'\nUSAGE: pvesm <COMMAND> [ARGS] [OPTIONS]\n"
            ),
            255,
        ),
    }
}

/// Runs `pveam <args>`.
pub fn pveam(node: &Node, args: &[String]) -> Outcome {
    let cmd = args.first().map(String::as_str).unwrap_or("");
    let rest = if args.is_empty() { &[][..] } else { &args[1..] };
    match cmd {
        "available" => {
            let p = match parse(
                "pveam",
                cmd,
                rest,
                json!({"section": {"type": "string", "enum": ["system", "mail", "turnkeylinux"], "optional": 1}}),
                &[],
            ) {
                Ok(p) => p,
                Err(o) => return o,
            };
            finish(Ok(pveam::available_text(
                node,
                p.get("section").map(String::as_str),
            )))
        }
        "list" => {
            let p = match parse(
                "pveam",
                cmd,
                rest,
                json!({"storage": sid(), "section": {"type": "string", "optional": 1}}),
                &["storage"],
            ) {
                Ok(p) => p,
                Err(o) => return o,
            };
            finish(pveam::list_text(node, &p["storage"]))
        }
        "update" => match pveam::install_index(node) {
            Ok(()) => Outcome {
                stdout: "update successful\n".into(),
                stderr: String::new(),
                code: 0,
            },
            Err(e) => {
                tracing::warn!(error = %e, "pveam update failed");
                Outcome {
                    stdout: String::new(),
                    stderr: "update failed - see /var/log/pveam.log for details\n".into(),
                    code: 0,
                }
            }
        },
        "download" => {
            let p = match parse(
                "pveam",
                cmd,
                rest,
                json!({"storage": sid(), "template": {"type": "string", "maxLength": 255}}),
                &["storage", "template"],
            ) {
                Ok(p) => p,
                Err(o) => return o,
            };
            let mut out = String::new();
            match pveam::download(node, &p["storage"], &p["template"], &mut out) {
                Ok(t) => Outcome {
                    stdout: out,
                    stderr: stderr_after(&t),
                    code: 0,
                },
                Err(e) => Outcome {
                    stdout: out,
                    stderr: e.render(Some("pveam download <storage> <template>")),
                    code: e.exit_code(),
                },
            }
        }
        "remove" => {
            let p = match parse(
                "pveam",
                cmd,
                rest,
                json!({"template_path": {"type": "string"}}),
                &["template_path"],
            ) {
                Ok(p) => p,
                Err(o) => return o,
            };
            finish((|| {
                let v = &p["template_path"];
                if !v.contains(":vztmpl/") {
                    return Err(SimError::die(format!(
                        "Wrong volume ID '{v}' - not a template"
                    )));
                }
                storage::free_template(node, v)?;
                Ok(String::new())
            })())
        }
        other => Outcome::err(
            &format!(
                "ERROR: unknown command 'pveam {other}'\nUSAGE: pveam <COMMAND> [ARGS] [OPTIONS]\n"
            ),
            255,
        ),
    }
}
