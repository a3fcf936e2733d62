//! One `proxmox_virtual_environment_container` resource (bpg/proxmox) evaluated for one `for_each` entry and
//! mapped to pxfleet's container fields. The provider's own defaults (v0.108) are written out where they differ
//! from pxfleet's, so the fleet describes the same container.

use hcl::edit::structure::{Attribute, Block, Body};
use serde_json::{json, Value};

use super::emit::Ct;
use super::hcl::{blocks, label, Loc, Scope, TfFile};
use super::Notes;

pub const CONTAINER: &str = "proxmox_virtual_environment_container";
pub const DOWNLOAD: &str = "proxmox_virtual_environment_download_file";

/// What evaluating the resources needs besides the scope.
pub struct Cx<'a> {
    /// The files the resource was found in (its module's), to find `download_file` resources.
    pub files: &'a [TfFile],
    /// Inputs that could not be evaluated (`var.NAME` → where and why), to explain an attribute using them.
    pub unresolved: &'a [(String, Loc, String)],
}

pub(super) struct Eval<'a> {
    file: &'a TfFile,
    scope: &'a Scope,
    cx: &'a Cx<'a>,
    pub(super) ct: &'a mut Ct,
    pub(super) notes: &'a mut Notes,
}

impl Eval<'_> {
    /// The attribute's value as JSON, or `None` (absent, null, or not static: then a note).
    pub(super) fn value(&mut self, path: &str, a: &Attribute) -> Option<Value> {
        match self.scope.eval(&a.value) {
            Ok(hcl::Value::Null) => None,
            Ok(v) => Some(to_json(v)),
            Err(why) => {
                let src = self.file.source(&a.value);
                let mut because = String::new();
                for (name, loc, what) in self.cx.unresolved {
                    if src.contains(&format!("var.{name}")) {
                        because = format!(" (`var.{name}` is {what} at {loc})");
                    }
                }
                if because.is_empty() {
                    because = format!(" ({why})");
                }
                self.notes.add(
                    self.file.loc(a),
                    format!("{path} = {src}: not imported, its value is not static{because}"),
                );
                None
            }
        }
    }

    pub(super) fn unmapped(&mut self, path: &str, what: &dyn hcl::edit::Span, why: &str) {
        let src = self.file.source(what);
        let src = src.lines().next().unwrap_or_default().to_string();
        self.notes.add(
            self.file.loc(what),
            format!("{path}: not imported ({why}): {src}"),
        );
    }

    pub(super) fn attrs<'b>(
        &mut self,
        prefix: &str,
        body: &'b Body,
    ) -> Vec<(String, &'b Attribute)> {
        body.attributes()
            .map(|a| (format!("{prefix}{}", a.key.as_str()), a))
            .collect()
    }
}

fn to_json(v: hcl::Value) -> Value {
    serde_json::to_value(v).unwrap_or(Value::Null)
}

pub(super) fn as_u64(v: &Value) -> Option<u64> {
    match v {
        Value::Number(n) => n.as_u64().or_else(|| n.as_f64().map(|f| f as u64)),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

pub(super) fn as_bool(v: &Value) -> Option<bool> {
    match v {
        Value::Bool(b) => Some(*b),
        Value::String(s) => s.parse().ok(),
        _ => None,
    }
}

/// Maps one container resource for one entry. `key` is the container's name in the fleet.
pub fn container(
    file: &TfFile,
    res: &Block,
    scope: &Scope,
    cx: &Cx<'_>,
    key: &str,
    notes: &mut Notes,
) -> (Ct, bool) {
    let mut ct = Ct {
        key: key.to_string(),
        ..Ct::default()
    };
    let mut privileged = false;
    {
        let mut ev = Eval {
            file,
            scope,
            cx,
            ct: &mut ct,
            notes,
        };
        // The provider's defaults where pxfleet's differ: cores 1, swap 0, datastore `local`, cpu units 1024,
        // privileged, start on boot.
        ev.ct.set("cores", json!(1));
        ev.ct.set("cpu_units", json!(1024));
        ev.ct.set("swap", json!(0));
        ev.ct.set("datastore_id", json!("local"));
        ev.ct.set("unprivileged", json!(false));
        ev.ct.set("start_on_boot", json!(true));
        for (path, a) in ev.attrs("", &res.body) {
            match path.as_str() {
                "for_each" | "depends_on" | "provider" => {}
                "node_name" => set(&mut ev, &path, a, "node", Value::is_string),
                "vm_id" => set_num(&mut ev, &path, a, "vm_id"),
                "description" => set(&mut ev, &path, a, "description", Value::is_string),
                "unprivileged" => set_bool(&mut ev, &path, a, "unprivileged"),
                "start_on_boot" => set_bool(&mut ev, &path, a, "start_on_boot"),
                "protection" => set_bool(&mut ev, &path, a, "protection"),
                "tags" => {
                    if let Some(v) = ev.value(&path, a) {
                        ev.ct.set("tags", v);
                    }
                }
                "environment_variables" => set(&mut ev, &path, a, "env", Value::is_object),
                "entrypoint" => set(&mut ev, &path, a, "entrypoint", Value::is_string),
                // a snippets volume (a power over the host: an operator's submit needs an admin's grant)
                "hook_script_file_id" => set(&mut ev, &path, a, "hookscript", Value::is_string),
                // the pool must exist in PVE (pxfleet does not create pools)
                "pool_id" => set(&mut ev, &path, a, "pool", Value::is_string),
                "started" => {
                    if let Some(false) = ev.value(&path, a).as_ref().and_then(as_bool) {
                        // a template does not run either; `template = true` says more
                        if ev.ct.get("state") != Some(&json!("template")) {
                            ev.ct.set("state", json!("stopped"));
                        }
                    }
                }
                // `pct template` after the create: the source its clones name
                "template" => match ev.value(&path, a).as_ref().map(as_bool) {
                    Some(Some(true)) => ev.ct.set("state", json!("template")),
                    Some(Some(false)) | None => {}
                    Some(None) => ev.unmapped(&path, a, "not a boolean"),
                },
                _ => ev.unmapped(&path, a, "no pxfleet field"),
            }
        }
        for b in res.body.blocks() {
            let name = b.ident.as_str();
            match name {
                "features" => {
                    let mut f = serde_json::Map::new();
                    for (path, a) in ev.attrs("features.", &b.body) {
                        let k = a.key.as_str();
                        match k {
                            "nesting" | "fuse" | "keyctl" | "mknod" => {
                                if let Some(v) = ev.value(&path, a).as_ref().and_then(as_bool) {
                                    f.insert(k.to_string(), json!(v));
                                }
                            }
                            "mount" => {
                                if let Some(v) = ev.value(&path, a) {
                                    f.insert("mount".into(), v);
                                }
                            }
                            _ => ev.unmapped(&path, a, "no pxfleet field"),
                        }
                    }
                    ev.ct.set("features", Value::Object(f));
                }
                "cpu" => {
                    for (path, a) in ev.attrs("cpu.", &b.body) {
                        match a.key.as_str() {
                            "cores" => set_num(&mut ev, &path, a, "cores"),
                            "units" => set_num(&mut ev, &path, a, "cpu_units"),
                            "limit" => set_num(&mut ev, &path, a, "cpu_limit"),
                            "architecture" => set(&mut ev, &path, a, "arch", Value::is_string),
                            _ => ev.unmapped(&path, a, "no pxfleet field"),
                        }
                    }
                }
                "memory" => {
                    for (path, a) in ev.attrs("memory.", &b.body) {
                        match a.key.as_str() {
                            "dedicated" => set_num(&mut ev, &path, a, "memory"),
                            "swap" => set_num(&mut ev, &path, a, "swap"),
                            _ => ev.unmapped(&path, a, "no pxfleet field"),
                        }
                    }
                }
                "disk" => {
                    let mut rootfs = serde_json::Map::new();
                    for (path, a) in ev.attrs("disk.", &b.body) {
                        match a.key.as_str() {
                            "datastore_id" => {
                                set(&mut ev, &path, a, "datastore_id", Value::is_string)
                            }
                            "size" => set_num(&mut ev, &path, a, "disk_size"),
                            // the root disk's options: fleet.yaml's `rootfs:`
                            "acl" | "quota" | "replicate" => {
                                match ev.value(&path, a).as_ref().map(as_bool) {
                                    Some(Some(b)) => rootfs.insert(a.key.to_string(), json!(b)),
                                    Some(None) => {
                                        ev.unmapped(&path, a, "not a bool");
                                        None
                                    }
                                    None => None,
                                };
                            }
                            "mount_options" => {
                                if let Some(v) = ev.value(&path, a) {
                                    rootfs.insert("mount_options".into(), v);
                                }
                            }
                            _ => ev.unmapped(&path, a, "no pxfleet field"),
                        }
                    }
                    if !rootfs.is_empty() {
                        ev.ct.set("rootfs", Value::Object(rootfs));
                    }
                }
                "initialization" => initialization(&mut ev, b),
                "network_interface" => network_interface(&mut ev, b),
                "operating_system" => operating_system(&mut ev, b),
                "clone" => super::bpg_clone::clone_block(&mut ev, b),
                "startup" => {
                    let mut s = serde_json::Map::new();
                    for (path, a) in ev.attrs("startup.", &b.body) {
                        let k = a.key.as_str();
                        match k {
                            "order" | "up_delay" | "down_delay" => {
                                if let Some(n) = ev.value(&path, a).as_ref().and_then(as_u64) {
                                    s.insert(k.to_string(), json!(n));
                                }
                            }
                            _ => ev.unmapped(&path, a, "no pxfleet field"),
                        }
                    }
                    if !s.is_empty() {
                        ev.ct.set("startup", Value::Object(s));
                    }
                }
                "console" => {
                    // bpg's console block: PVE's console, tty, cmode
                    let mut s = serde_json::Map::new();
                    for (path, a) in ev.attrs("console.", &b.body) {
                        let k = a.key.as_str();
                        let v = ev.value(&path, a);
                        match (k, v) {
                            (_, None) => {}
                            ("enabled", Some(v)) => match as_bool(&v) {
                                Some(b) => {
                                    s.insert("enabled".into(), json!(b));
                                }
                                None => ev.unmapped(&path, a, "not a boolean"),
                            },
                            ("tty_count", Some(v)) => match as_u64(&v) {
                                Some(n) => {
                                    s.insert("tty_count".into(), json!(n));
                                }
                                None => ev.unmapped(&path, a, "not a number"),
                            },
                            ("type", Some(Value::String(t))) => {
                                s.insert("type".into(), json!(t));
                            }
                            ("type", Some(_)) => ev.unmapped(&path, a, "not a string"),
                            _ => ev.unmapped(&path, a, "no pxfleet field"),
                        }
                    }
                    if !s.is_empty() {
                        ev.ct.set("console", Value::Object(s));
                    }
                }
                "wait_for_ip" => {
                    // which addresses a create waits for; false is pxfleet's default (left out)
                    let mut w = serde_json::Map::new();
                    for (path, a) in ev.attrs("wait_for_ip.", &b.body) {
                        let k = a.key.as_str();
                        match (k, ev.value(&path, a).as_ref().map(as_bool)) {
                            (_, None) => {}
                            ("ipv4" | "ipv6", Some(Some(v))) => {
                                if v {
                                    w.insert(k.to_string(), json!(true));
                                }
                            }
                            ("ipv4" | "ipv6", Some(None)) => ev.unmapped(&path, a, "not a boolean"),
                            _ => ev.unmapped(&path, a, "no pxfleet field"),
                        }
                    }
                    if !w.is_empty() {
                        ev.ct.set("wait_for_ip", Value::Object(w));
                    }
                }
                "mount_point" => mount_point(&mut ev, b),
                "device_passthrough" => device_passthrough(&mut ev, b),
                "idmap" => idmap(&mut ev, b),
                "lifecycle" => {}
                _ => ev.unmapped(name, b, "no pxfleet field"),
            }
        }
        super::bpg_clone::clone_datastore(&mut ev, file.loc(res), label(res, 1));
        if ev.ct.get("unprivileged") == Some(&json!(false)) {
            privileged = true;
            if !res.body.has_attribute("unprivileged") {
                ev.notes.add(
                    file.loc(res),
                    format!(
                        "{CONTAINER}.{}: `unprivileged` not set: the provider makes a privileged container (written as `unprivileged: false`, with `allow_privileged: true`)",
                        label(res, 1)
                    ),
                );
            }
        } else {
            ev.ct.remove("unprivileged"); // pxfleet's default
        }
        if ev.ct.get("state") == Some(&json!("running")) {
            ev.ct.remove("state");
        }
    }
    // The hostname is the key by default in pxfleet; keep it written out (as the Terraform map had it).
    (ct, privileged)
}

fn set(ev: &mut Eval<'_>, path: &str, a: &Attribute, field: &str, ok: fn(&Value) -> bool) {
    if let Some(v) = ev.value(path, a) {
        if ok(&v) {
            ev.ct.set(field, v);
        } else {
            ev.unmapped(path, a, "unexpected type");
        }
    }
}

fn set_num(ev: &mut Eval<'_>, path: &str, a: &Attribute, field: &str) {
    if let Some(v) = ev.value(path, a) {
        match as_u64(&v) {
            Some(n) => ev.ct.set(field, json!(n)),
            None if v.is_number() => ev.ct.set(field, v),
            None => ev.unmapped(path, a, "not a number"),
        }
    }
}

fn set_bool(ev: &mut Eval<'_>, path: &str, a: &Attribute, field: &str) {
    if let Some(v) = ev.value(path, a) {
        match as_bool(&v) {
            Some(b) => ev.ct.set(field, json!(b)),
            None => ev.unmapped(path, a, "not a bool"),
        }
    }
}

fn initialization(ev: &mut Eval<'_>, b: &Block) {
    for (path, a) in ev.attrs("initialization.", &b.body) {
        match a.key.as_str() {
            "hostname" => set(ev, &path, a, "hostname", Value::is_string),
            // where the provider has it (PVE's `entrypoint`, the command run as init)
            "entrypoint" => set(ev, &path, a, "entrypoint", Value::is_string),
            _ => ev.unmapped(&path, a, "no pxfleet field"),
        }
    }
    for inner in b.body.blocks() {
        let name = inner.ident.as_str();
        match name {
            "dns" => {
                let mut dns = serde_json::Map::new();
                for (path, a) in ev.attrs("initialization.dns.", &inner.body) {
                    match a.key.as_str() {
                        // The provider sends no search domain and no server for an empty (or blank) value: the
                        // node's own, which is what leaving them out of fleet.yaml means too.
                        "domain" => match ev.value(&path, a) {
                            Some(Value::String(d)) if d.trim().is_empty() => {}
                            Some(v) => {
                                dns.insert("domain".into(), v);
                            }
                            None => {}
                        },
                        "servers" => {
                            if let Some(Value::Array(list)) = ev.value(&path, a) {
                                let list: Vec<Value> = list
                                    .into_iter()
                                    .filter(|s| s.as_str().is_none_or(|s| !s.trim().is_empty()))
                                    .collect();
                                if !list.is_empty() {
                                    dns.insert("servers".into(), Value::Array(list));
                                }
                            }
                        }
                        "server" => match ev.value(&path, a) {
                            Some(Value::String(s)) if s.trim().is_empty() => {}
                            // the provider's deprecated form: `servers` wins when both are given
                            Some(v) => {
                                dns.entry("servers").or_insert_with(|| json!([v]));
                            }
                            None => {}
                        },
                        _ => ev.unmapped(&path, a, "no pxfleet field"),
                    }
                }
                if !dns.is_empty() {
                    ev.ct.set("dns", Value::Object(dns));
                }
            }
            "ip_config" => {
                // ip_config blocks follow network_interface blocks in order; the first is net0.
                let index = ev.ct.get("_ip_configs").and_then(as_u64).unwrap_or(0) as usize;
                ev.ct.set("_ip_configs", json!(index + 1));
                let mut net = serde_json::Map::new();
                for fam in inner.body.blocks() {
                    let (addr_field, gw_field) = match fam.ident.as_str() {
                        "ipv4" => ("ip_address", "gateway"),
                        "ipv6" => ("ipv6", "gateway6"),
                        other => {
                            ev.unmapped(
                                &format!("initialization.ip_config.{other}"),
                                fam,
                                "unknown block",
                            );
                            continue;
                        }
                    };
                    for (path, a) in ev.attrs(
                        &format!("initialization.ip_config.{}.", fam.ident.as_str()),
                        &fam.body,
                    ) {
                        match a.key.as_str() {
                            "address" => {
                                if let Some(v) = ev.value(&path, a) {
                                    net.insert(addr_field.into(), v);
                                }
                            }
                            "gateway" => {
                                if let Some(v) = ev.value(&path, a) {
                                    net.insert(gw_field.into(), v);
                                }
                            }
                            _ => ev.unmapped(&path, a, "no pxfleet field"),
                        }
                    }
                }
                merge_interface(ev.ct, index, net);
            }
            "user_account" => {
                for (path, a) in ev.attrs("initialization.user_account.", &inner.body) {
                    match a.key.as_str() {
                        "keys" => {
                            if let Some(v) = ev.value(&path, a) {
                                ev.ct.set("ssh_public_keys", v);
                            } else if ev.ct.get("ssh_public_keys").is_none() {
                                ev.notes.add(
                                    ev.file.loc(a),
                                    "ssh_public_keys: write them in the fleet (`ssh_public_keys: [\"file:PATH\"]`, PATH relative to fleet.yaml); they only matter to containers pxfleet creates".into(),
                                );
                            }
                        }
                        "password" => {
                            // A password in the fleet file would be a secret in a repository; pxfleet generates
                            // one (kept as a sensitive output) unless `password:` is written.
                            ev.notes.add(
                                ev.file.loc(a),
                                format!(
                                    "{path} = {}: not imported; pxfleet generates a root password for new containers (`pxctl output --show-sensitive`); existing containers keep theirs",
                                    ev.file.source(&a.value)
                                ),
                            );
                        }
                        _ => ev.unmapped(&path, a, "no pxfleet field"),
                    }
                }
            }
            _ => ev.unmapped(&format!("initialization.{name}"), inner, "no pxfleet field"),
        }
    }
}

/// Puts network fields into net0 (index 0: the container's own fields) or `extra_interfaces[index-1]`.
fn merge_interface(ct: &mut Ct, index: usize, fields: serde_json::Map<String, Value>) {
    if index == 0 {
        for (k, v) in fields {
            ct.set(&k, v);
        }
        return;
    }
    let mut extra = match ct.remove("extra_interfaces") {
        Some(Value::Array(a)) => a,
        _ => Vec::new(),
    };
    while extra.len() < index {
        extra.push(json!({}));
    }
    if let Some(Value::Object(m)) = extra.get_mut(index - 1) {
        m.extend(fields);
    }
    ct.set("extra_interfaces", Value::Array(extra));
}

fn network_interface(ev: &mut Eval<'_>, b: &Block) {
    let index = ev.ct.get("_interfaces").and_then(as_u64).unwrap_or(0) as usize;
    ev.ct.set("_interfaces", json!(index + 1));
    let mut net = serde_json::Map::new();
    for (path, a) in ev.attrs("network_interface.", &b.body) {
        let k = a.key.as_str();
        let field = match k {
            "bridge" => "bridge",
            "mac_address" => "mac_address",
            "vlan_id" => "vlan_id",
            "mtu" => "mtu",
            "firewall" => "firewall",
            "rate_limit" => "rate_limit",
            "host_managed" => "host_managed",
            "name" => "name",
            "enabled" => {
                if ev.value(&path, a).as_ref().and_then(as_bool) == Some(false) {
                    ev.unmapped(
                        &path,
                        a,
                        "the provider deletes a disabled interface: leave it out of the file (or keep it disconnected with `link_down: true`)",
                    );
                }
                continue;
            }
            _ => {
                ev.unmapped(&path, a, "no pxfleet field");
                continue;
            }
        };
        let Some(v) = ev.value(&path, a) else {
            continue;
        };
        if field == "name" {
            if v.as_str() == Some(format!("eth{index}").as_str()) {
                continue; // pxfleet's default name
            }
            if index == 0 {
                net.insert("interface_name".into(), v); // net0's fields are the container's own
                continue;
            }
        }
        let v = match field {
            "vlan_id" | "mtu" => as_u64(&v).map(|n| json!(n)).unwrap_or(v),
            _ => v,
        };
        net.insert(field.to_string(), v);
    }
    merge_interface(ev.ct, index, net);
}

fn operating_system(ev: &mut Eval<'_>, b: &Block) {
    for (path, a) in ev.attrs("operating_system.", &b.body) {
        match a.key.as_str() {
            "template_file_id" => template(ev, &path, a),
            // `ostype` (`--ostype`): PVE's setup inside the container; left out, PVE detects it
            "type" => match ev.value(&path, a) {
                Some(Value::String(t)) => ev.ct.set("ostype", json!(t)),
                Some(_) => ev.unmapped(&path, a, "not a string"),
                None => {}
            },
            _ => ev.unmapped(&path, a, "no pxfleet field"),
        }
    }
}

/// `template_file_id`: a reference to a `download_file` resource becomes its `url` (`template_url`); a static
/// volume id `STORAGE:vztmpl/FILE` becomes a `templates:` entry with `volume:` (used as it is in storage).
fn template(ev: &mut Eval<'_>, path: &str, a: &Attribute) {
    let e: hcl::Expression = a.value.clone().into();
    if let hcl::Expression::Traversal(t) = &e {
        if let (
            hcl::Expression::Variable(root),
            Some(hcl::expr::TraversalOperator::GetAttr(name)),
        ) = (&t.expr, t.operators.first())
        {
            if root.as_str() == super::bpg::DOWNLOAD {
                let found = blocks(ev.cx.files, "resource")
                    .find(|(_, r)| label(r, 0) == DOWNLOAD && label(r, 1) == name.as_str());
                let Some((f, r)) = found else {
                    ev.unmapped(
                        path,
                        a,
                        "the download_file resource it names is not in the module",
                    );
                    return;
                };
                for attr in r.body.attributes() {
                    let p = format!("{DOWNLOAD}.{}.{}", label(r, 1), attr.key.as_str());
                    match attr.key.as_str() {
                        "url" => match ev.scope.eval(&attr.value) {
                            Ok(hcl::Value::String(u)) => ev.ct.set("template_url", json!(u)),
                            Ok(_) => ev.notes.add(
                                f.loc(attr),
                                format!("{p}: not imported: the URL is null (no template); write `template_url:`"),
                            ),
                            Err(why) => ev.notes.add(
                                f.loc(attr),
                                format!("{p}: not imported, not static ({why}); write `template_url:`"),
                            ),
                        },
                        "datastore_id" => {
                            if let Ok(hcl::Value::String(s)) = ev.scope.eval(&attr.value) {
                                if s != "local" {
                                    ev.notes.add(f.loc(attr), format!("{p} = {s:?}: not imported: an inline `template_url` is cached in `local`; declare it under `templates:` with `storage: {s}`"));
                                }
                            }
                        }
                        "file_name" => {
                            let src = f.source(&attr.value);
                            ev.notes.add(f.loc(attr), format!("{p} = {src}: not imported: pxfleet caches the template under the URL's file name (existing containers are not affected)"));
                        }
                        "checksum" | "checksum_algorithm" => ev.notes.add(
                            f.loc(attr),
                            format!("{p}: not imported: declare the template under `templates:` with `sha256:`/`sha512:` to have it verified"),
                        ),
                        _ => {}
                    }
                }
                return;
            }
        }
    }
    match ev.value(path, a) {
        Some(Value::String(id)) => match id.split_once(":vztmpl/") {
            Some((_, file)) => {
                // The volume as it is in storage, as the provider uses it: nothing downloaded.
                ev.ct.set("template", json!(file));
                ev.ct.set("_template_def", json!({"volume": id}));
            }
            None => ev.unmapped(path, a, "not a STORAGE:vztmpl/FILE volume id"),
        },
        Some(_) => ev.unmapped(path, a, "not a string"),
        None => {}
    }
}

/// What `<container>.mount_point[N].path_in_datastore` evaluates to while importing: the volume container `name`
/// has at `path`, which only the node knows; [`mount_point`] turns it into `volume_of: {container, path}`.
pub(super) fn volume_of_marker(name: &str, path: &str) -> String {
    format!("{VOLUME_OF}{name}\u{0}{path}")
}

const VOLUME_OF: &str = "\u{0}volume_of\u{0}";

fn mount_point(ev: &mut Eval<'_>, b: &Block) {
    let mut mp = serde_json::Map::new();
    for (path, a) in ev.attrs("mount_point.", &b.body) {
        let Some(v) = ev.value(&path, a) else {
            continue;
        };
        match a.key.as_str() {
            "path" => {
                mp.insert("path".into(), v);
            }
            // bpg's three forms: a host path (bind mount), a full volume id (mount an existing volume), a storage
            // id (allocate a new volume of `size`).
            "volume" => {
                let s = v.as_str().unwrap_or_default().to_string();
                if let Some((name, source)) = s
                    .strip_prefix(VOLUME_OF)
                    .and_then(|r| r.split_once('\u{0}'))
                {
                    mp.insert(
                        "volume_of".into(),
                        json!({"container": name, "path": source}),
                    );
                } else if s.starts_with('/') {
                    mp.insert("host_path".into(), json!(s));
                } else if s.contains(':') {
                    mp.insert("volume".into(), json!(s));
                } else {
                    mp.insert("datastore_id".into(), json!(s));
                }
            }
            "size" => {
                let n = v
                    .as_str()
                    .map(|s| s.trim_end_matches(['G', 'g']).to_string())
                    .and_then(|s| s.parse::<u64>().ok())
                    .or_else(|| as_u64(&v));
                match n {
                    Some(n) => {
                        mp.insert("size".into(), json!(n));
                    }
                    None => ev.unmapped(&path, a, "size is not in GiB"),
                }
            }
            "backup" | "read_only" | "acl" | "quota" | "replicate" | "shared" => {
                match as_bool(&v) {
                    Some(b) => {
                        mp.insert(a.key.as_str().into(), json!(b));
                    }
                    None => ev.unmapped(&path, a, "not a bool"),
                }
            }
            "mount_options" => {
                mp.insert("mount_options".into(), v);
            }
            _ => ev.unmapped(&path, a, "no pxfleet field"),
        }
    }
    // An existing volume is mounted as it is: bpg's `size` there is the volume's, not a request.
    if mp.contains_key("volume") || mp.contains_key("volume_of") {
        mp.remove("size");
    }
    // Without its volume (an expression that is not static, such as another container's
    // `mount_point[0].path_in_datastore`) the mount point would be a different one, or none: left out whole.
    if !["volume", "volume_of", "datastore_id", "host_path"]
        .iter()
        .any(|k| mp.contains_key(*k))
    {
        ev.unmapped(
            "mount_point",
            b,
            "its volume is not known, so the whole mount point is left out; for another container's volume write \
             `volume_of: {container: NAME, path: ITS_MOUNT_PATH}`, else the volume id (`pxctl output` shows them)",
        );
        return;
    }
    let mut all = match ev.ct.remove("mount_points") {
        Some(Value::Array(a)) => a,
        _ => Vec::new(),
    };
    all.push(Value::Object(mp));
    ev.ct.set("mount_points", Value::Array(all));
}

/// Appends `item` to the list field `field` of the container.
fn push_item(ev: &mut Eval<'_>, field: &str, item: serde_json::Map<String, Value>) {
    let mut all = match ev.ct.remove(field) {
        Some(Value::Array(a)) => a,
        _ => Vec::new(),
    };
    all.push(Value::Object(item));
    ev.ct.set(field, Value::Array(all));
}

/// bpg `device_passthrough { path, mode, uid, gid, deny_write }` -> `devices:` (PVE `devN`).
fn device_passthrough(ev: &mut Eval<'_>, b: &Block) {
    let mut d = serde_json::Map::new();
    for (path, a) in ev.attrs("device_passthrough.", &b.body) {
        let Some(v) = ev.value(&path, a) else {
            continue;
        };
        match a.key.as_str() {
            "path" | "mode" => {
                d.insert(a.key.as_str().into(), v);
            }
            "uid" | "gid" => match as_u64(&v) {
                Some(n) => {
                    d.insert(a.key.as_str().into(), json!(n));
                }
                None => ev.unmapped(&path, a, "not a number"),
            },
            "deny_write" => match as_bool(&v) {
                Some(b) => {
                    d.insert("deny_write".into(), json!(b));
                }
                None => ev.unmapped(&path, a, "not a bool"),
            },
            _ => ev.unmapped(&path, a, "no pxfleet field"),
        }
    }
    push_item(ev, "devices", d);
}

/// bpg `idmap { type, container_id, host_id, size }` -> `idmap:` (`lxc.idmap` lines).
fn idmap(ev: &mut Eval<'_>, b: &Block) {
    let mut m = serde_json::Map::new();
    for (path, a) in ev.attrs("idmap.", &b.body) {
        let Some(v) = ev.value(&path, a) else {
            continue;
        };
        match a.key.as_str() {
            "type" => {
                m.insert("type".into(), v);
            }
            "container_id" | "host_id" | "size" => match as_u64(&v) {
                Some(n) => {
                    m.insert(a.key.as_str().into(), json!(n));
                }
                None => ev.unmapped(&path, a, "not a number"),
            },
            _ => ev.unmapped(&path, a, "no pxfleet field"),
        }
    }
    push_item(ev, "idmap", m);
}
