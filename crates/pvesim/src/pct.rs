//! The `pct` command: argument parsing per subcommand against the API schema, output formats of
//! `list|status|config`, exit codes (`$upid_exit` commands exit 255 on task failure). `pct exec` on the memory
//! backend runs nothing: it checks the CT is running and exits 0 with empty output, except `chpasswd`, which
//! reads `user:password` lines from stdin like the real one (see [`ct::chpasswd`]).

use std::collections::BTreeMap;

use serde_json::{json, Value};

use crate::ct;
use crate::error::{Result, SimError};
use crate::getopt::parse_and_validate_with;
use crate::node::Node;
use crate::schema::{expand, method_params};
use crate::task::{stderr_after, TaskOutcome};
use crate::Outcome;

struct Spec {
    path: &'static str,
    method: &'static str,
    args: &'static [&'static str],
}

fn spec(cmd: &str) -> Option<Spec> {
    let s = |path, method, args| Some(Spec { path, method, args });
    match cmd {
        "create" => s("/nodes/{node}/lxc", "POST", &["vmid", "ostemplate"]),
        "set" => s("/nodes/{node}/lxc/{vmid}/config", "PUT", &["vmid"]),
        "config" => s("/nodes/{node}/lxc/{vmid}/config", "GET", &["vmid"]),
        "pending" => s("/nodes/{node}/lxc/{vmid}/pending", "GET", &["vmid"]),
        "resize" => s(
            "/nodes/{node}/lxc/{vmid}/resize",
            "PUT",
            &["vmid", "disk", "size"],
        ),
        "start" => s("/nodes/{node}/lxc/{vmid}/status/start", "POST", &["vmid"]),
        "stop" => s("/nodes/{node}/lxc/{vmid}/status/stop", "POST", &["vmid"]),
        "shutdown" => s(
            "/nodes/{node}/lxc/{vmid}/status/shutdown",
            "POST",
            &["vmid"],
        ),
        "reboot" => s("/nodes/{node}/lxc/{vmid}/status/reboot", "POST", &["vmid"]),
        "destroy" => s("/nodes/{node}/lxc/{vmid}", "DELETE", &["vmid"]),
        "migrate" => s(
            "/nodes/{node}/lxc/{vmid}/migrate",
            "POST",
            &["vmid", "target"],
        ),
        "clone" => s("/nodes/{node}/lxc/{vmid}/clone", "POST", &["vmid", "newid"]),
        "template" => s("/nodes/{node}/lxc/{vmid}/template", "POST", &["vmid"]),
        "snapshot" => s(
            "/nodes/{node}/lxc/{vmid}/snapshot",
            "POST",
            &["vmid", "snapname"],
        ),
        "delsnapshot" => s(
            "/nodes/{node}/lxc/{vmid}/snapshot/{snapname}",
            "DELETE",
            &["vmid", "snapname"],
        ),
        "rollback" => s(
            "/nodes/{node}/lxc/{vmid}/snapshot/{snapname}/rollback",
            "POST",
            &["vmid", "snapname"],
        ),
        "status" => s("local:status", "", &["vmid"]),
        "listsnapshot" => s("local:listsnapshot", "", &["vmid"]),
        "list" => s("local:list", "", &[]),
        "exec" => s("local:exec", "", &["vmid", "extra-args"]),
        "unlock" => s("local:unlock", "", &["vmid"]),
        _ => None,
    }
}

fn local_props(name: &str) -> BTreeMap<String, Value> {
    let vmid =
        json!({"type": "integer", "format": "pve-vmid", "minimum": 100, "maximum": 999999999});
    let v = match name {
        "local:status" => json!({"vmid": vmid, "verbose": {"type": "boolean", "optional": 1}}),
        "local:exec" => {
            json!({"vmid": vmid, "keep-env": {"type": "boolean", "optional": 1}, "extra-args": {"type": "array", "optional": 1}})
        }
        "local:unlock" => json!({"vmid": vmid}),
        "local:listsnapshot" => json!({"vmid": vmid}),
        _ => json!({}),
    };
    expand(v.as_object().expect("object literal"))
}

fn usage(cmd: &str, sp: &Spec, props: &BTreeMap<String, Value>) -> String {
    let mut s = format!("pct {cmd}");
    for a in sp.args {
        s.push_str(&format!(" <{a}>"));
        if *a == "extra-args" {
            s = s.replace(" <extra-args>", " [<extra-args>]");
        }
    }
    let has_opts = props
        .keys()
        .any(|k| k != "node" && !sp.args.contains(&k.as_str()));
    if has_opts {
        s.push_str(" [OPTIONS]");
    }
    s
}

fn upid_exit(t: &TaskOutcome, out: String, mut err: String) -> Outcome {
    err.push_str(&stderr_after(t));
    Outcome {
        stdout: out,
        stderr: err,
        code: if t.ok() { 0 } else { 255 },
    }
}

fn vmid_of(p: &BTreeMap<String, String>) -> u32 {
    p.get("vmid").and_then(|v| v.parse().ok()).unwrap_or(0)
}

/// Runs `pct <args>`; `stdin` is read only by `pct exec ... -- chpasswd` and by `pct create --password` given
/// without a value (two lines: the password and its confirmation, as PVE reads them when stdin is no terminal).
pub fn run(node: &Node, args: &[String], stdin: &mut dyn std::io::Read) -> Outcome {
    let Some(cmd) = args.first() else {
        return Outcome::err(
            "ERROR: no command specified\nUSAGE: pct <COMMAND> [ARGS] [OPTIONS]\n",
            255,
        );
    };
    let Some(sp) = spec(cmd) else {
        return Outcome::err(
            &format!("ERROR: unknown command 'pct {cmd}'\nUSAGE: pct <COMMAND> [ARGS] [OPTIONS]\n"),
            255,
        );
    };
    let props = if sp.path.starts_with("local:") {
        std::sync::Arc::new(local_props(sp.path))
    } else {
        method_params(sp.path, sp.method).unwrap_or_default()
    };
    let u = usage(cmd, &sp, &props);
    let fixed = if props.contains_key("node") {
        BTreeMap::from([("node".to_string(), node.name().to_string())])
    } else {
        BTreeMap::new()
    };
    // pct's param_mapping: create_vm's `password` is the interactive `pve-password` mapping
    let interactive: &[&str] = if cmd == "create" { &["password"] } else { &[] };
    let mut lines: Option<std::vec::IntoIter<String>> = None;
    let mut prompt = |_: &str| -> std::result::Result<String, SimError> {
        let lines = lines.get_or_insert_with(|| {
            let mut text = String::new();
            let _ = stdin.read_to_string(&mut text);
            text.split_inclusive('\n')
                .map(|l| l.trim_end_matches('\n').to_string())
                .collect::<Vec<_>>()
                .into_iter()
        });
        let mut read = || {
            lines
                .next()
                .ok_or_else(|| SimError::die("EOF while reading password"))
        };
        let (first, again) = (read()?, read()?);
        if first != again {
            return Err(SimError::die("passwords do not match"));
        }
        Ok(first)
    };
    let parsed = parse_and_validate_with(
        &props,
        &args[1..],
        sp.args,
        &fixed,
        interactive,
        &mut prompt,
    );
    let mut p = match parsed {
        Ok(p) => p,
        Err((warn, e)) => {
            return Outcome::err(&format!("{warn}{}", e.render(Some(&u))), e.exit_code())
        }
    };
    if cmd == "create" {
        if let Some(f) = p.get("ssh-public-keys").cloned() {
            match std::fs::read_to_string(&f) {
                Ok(k) => {
                    p.insert("ssh-public-keys".into(), k);
                }
                Err(e) => return Outcome::err(&format!("unable to open file '{f}' - {e}\n"), 255),
            }
        }
    }
    let mut out = String::new();
    let mut err = String::new();
    let r = dispatch(node, cmd, &p, &mut out, &mut err, stdin);
    match r {
        Ok(Some(code)) => Outcome {
            stdout: out,
            stderr: err,
            code,
        },
        Ok(None) => Outcome {
            stdout: out,
            stderr: err,
            code: 0,
        },
        Err(e) => {
            err.push_str(&e.render(Some(&u)));
            Outcome {
                stdout: out,
                stderr: err,
                code: e.exit_code(),
            }
        }
    }
}

fn dispatch(
    node: &Node,
    cmd: &str,
    p: &BTreeMap<String, String>,
    out: &mut String,
    err: &mut String,
    stdin: &mut dyn std::io::Read,
) -> Result<Option<i32>> {
    let vmid = vmid_of(p);
    let flag = |k: &str| p.get(k).map(|v| v == "1").unwrap_or(false);
    let task = |t: TaskOutcome, out: &mut String, err: &mut String| {
        let o = upid_exit(&t, std::mem::take(out), std::mem::take(err));
        *out = o.stdout;
        *err = o.stderr;
        Ok(Some(o.code))
    };
    match cmd {
        "create" => {
            let t = ct::create(node, p, out, err)?;
            task(t, out, err)
        }
        "start" => {
            let t = ct::start(node, vmid, flag("skiplock"), out, err)?;
            task(t, out, err)
        }
        "stop" => {
            let t = ct::stop(node, vmid, false, flag("skiplock"), out, err)?;
            task(t, out, err)
        }
        "shutdown" => {
            let timeout = p.get("timeout").and_then(|t| t.parse().ok()).unwrap_or(60);
            let t = ct::shutdown(node, vmid, timeout, flag("forceStop"), out, err)?;
            task(t, out, err)
        }
        "reboot" => {
            let t = ct::reboot(node, vmid, out, err)?;
            task(t, out, err)
        }
        "destroy" => {
            let t = ct::destroy(
                node,
                vmid,
                flag("force"),
                flag("purge"),
                flag("destroy-unreferenced-disks"),
                out,
                err,
            )?;
            task(t, out, err)
        }
        "migrate" => {
            let t = ct::migrate(
                node,
                vmid,
                &p["target"],
                flag("restart"),
                flag("online"),
                out,
                err,
            )?;
            task(t, out, err)
        }
        "resize" => {
            let t = ct::resize(node, vmid, &p["disk"], &p["size"], out, err)?;
            err.push_str(&stderr_after(&t));
            Ok(Some(0))
        }
        "clone" => {
            let t = ct::clone(node, vmid, p, out, err)?;
            task(t, out, err)
        }
        "template" => ct::template(node, vmid, err).map(|_| None),
        "snapshot" => {
            let t = ct::snapshot(
                node,
                vmid,
                &p["snapname"],
                p.get("description").map(String::as_str),
                out,
                err,
            )?;
            task(t, out, err)
        }
        "delsnapshot" => {
            let t = ct::delsnapshot(node, vmid, &p["snapname"], out, err)?;
            task(t, out, err)
        }
        "rollback" => {
            let t = ct::rollback(node, vmid, &p["snapname"], flag("start"), out, err)?;
            task(t, out, err)
        }
        "set" => ct::set(node, vmid, p, err).map(|_| None),
        "unlock" => ct::unlock(node, vmid, err).map(|_| None),
        "listsnapshot" => {
            out.push_str(&ct::snapshot_tree(&ct::snapshots(node, vmid)?));
            Ok(None)
        }
        "list" => {
            let cts = ct::list(node);
            if !cts.is_empty() {
                out.push_str(&format!(
                    "{:<10} {:<10} {:<12} {:<20}\n",
                    "VMID", "Status", "Lock", "Name"
                ));
            }
            for (id, conf) in cts {
                let st = ct::vmstatus(node, id, &conf);
                out.push_str(&format!(
                    "{:<10} {:<10} {:<12} {:<20}\n",
                    id,
                    st["status"].as_str().unwrap_or(""),
                    st.get("lock").and_then(Value::as_str).unwrap_or(""),
                    st["name"].as_str().unwrap_or("")
                ));
            }
            Ok(None)
        }
        "status" => {
            let (conf, _) = ct::read_conf(node, vmid)?;
            let st = ct::vmstatus(node, vmid, &conf);
            if flag("verbose") {
                let mut keys: Vec<(&String, &Value)> = st
                    .as_object()
                    .map(|m| m.iter().collect())
                    .unwrap_or_default();
                keys.sort_by(|a, b| a.0.cmp(b.0));
                for (k, v) in keys {
                    if k == "cpu" {
                        continue;
                    }
                    let s = match v {
                        Value::String(s) => s.clone(),
                        other => other.to_string(),
                    };
                    out.push_str(&format!("{k}: {s}\n"));
                }
            } else {
                out.push_str(&format!(
                    "status: {}\n",
                    st["status"].as_str().unwrap_or("unknown")
                ));
            }
            Ok(None)
        }
        "config" => {
            let (conf, _) = ct::read_conf(node, vmid)?;
            for (k, v) in conf.effective(flag("current")) {
                let v = if k == "description" {
                    crate::ctconf::encode_text(&v)
                } else {
                    v
                };
                out.push_str(&format!("{k}: {v}\n"));
            }
            for (k, v) in &conf.lxc {
                out.push_str(&format!("{k}: {v}\n"));
            }
            Ok(None)
        }
        "pending" => {
            let (conf, _) = ct::read_conf(node, vmid)?;
            for (k, v) in &conf.opts {
                match conf.pending.get(k) {
                    Some(n) => {
                        out.push_str(&format!("cur {k}: {v}\nnew {k}: {n}\n"));
                    }
                    None if conf.pending_delete.contains(k) => {
                        out.push_str(&format!("del {k}: {v}\n"))
                    }
                    None => out.push_str(&format!("cur {k}: {v}\n")),
                }
            }
            for (k, n) in &conf.pending {
                if !conf.opts.contains_key(k) {
                    out.push_str(&format!("new {k}: {n}\n"));
                }
            }
            Ok(None)
        }
        "exec" => {
            ct::read_conf(node, vmid)?;
            let extra: Vec<String> = p
                .get("extra-args")
                .and_then(|e| serde_json::from_str(e).ok())
                .unwrap_or_default();
            if !ct::runtime(node, vmid).running {
                return Err(SimError::die(format!("container '{vmid}' not running!")));
            }
            if extra.is_empty() {
                return Err(SimError::die("missing command"));
            }
            if crate::lxc::is_lxc(node) {
                let mut input = Vec::new();
                stdin
                    .read_to_end(&mut input)
                    .map_err(|e| SimError::die(format!("pct exec: cannot read stdin: {e}")))?;
                let o = crate::lxc::exec(node, vmid, &extra, Some(&input))?;
                out.push_str(&o.stdout);
                err.push_str(&o.stderr);
                return Ok(Some(o.code));
            }
            if extra[0] == "chpasswd" {
                let mut input = String::new();
                stdin
                    .read_to_string(&mut input)
                    .map_err(|e| SimError::die(format!("chpasswd: cannot read stdin: {e}")))?;
                let (code, msg) = ct::chpasswd(node, vmid, &input)?;
                err.push_str(&msg);
                return Ok(Some(code));
            }
            tracing::info!(vmid, argv = ?extra, "pct exec on the memory backend runs nothing");
            Ok(None)
        }
        other => Err(SimError::die(format!("unknown command '{other}'"))),
    }
}
