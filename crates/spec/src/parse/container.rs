//! One container (or `defaults`) as written: every field decoded into the partial
//! [`ContainerInput`], with the nested `features` mapping and the `ssh_public_keys` list.
//! Network fields are decoded in [`super::network`], mount points in [`super::mounts`].

use std::net::IpAddr;

use super::input::{ContainerInput, FeaturesInput, NetInput, TemplateChoice};
use super::{
    join, leaf, quote, Cx, CONSTRAINT_FIELDS, CONTAINER_FIELDS, DNS_FIELDS, EXTRA_NET_FIELDS,
    FEATURE_FIELDS, MAX_DESCRIPTION_BYTES, MAX_INTERFACES, NOT_DEFAULTABLE, STARTUP_FIELDS,
};
use crate::files::resolve_relative;
use crate::model::*;
use crate::syntax;
use crate::yaml::{Entry, Node, Value};

impl Cx<'_> {
    pub(super) fn container_input(
        &mut self,
        es: &[Entry],
        path: &str,
        is_defaults: bool,
    ) -> ContainerInput {
        let mut c = ContainerInput::default();
        for e in es {
            let p = join(path, &e.key);
            let n = &e.value;
            self.record(&p, n.span);
            if n.is_null() && e.key != "gateway" && e.key != "gateway6" {
                continue; // `field:` with nothing: as if absent
            }
            if is_defaults && NOT_DEFAULTABLE.contains(&e.key.as_str()) {
                self.err(
                    e.key_span,
                    &p,
                    format!(
                        "{} cannot be set in defaults: every container needs its own",
                        e.key
                    ),
                    Some("set it on each container instead"),
                );
                continue;
            }
            if self.net_field(&mut c.net, e, &p) {
                continue;
            }
            match e.key.as_str() {
                "vm_id" => c.vm_id = self.int(n, &p, 100, 999_999_999, "").map(|v| v as u32),
                "hostname" => {
                    if let Some(h) = self.string(n, &p) {
                        if syntax::is_dns_label(&h) {
                            c.hostname = Some(h);
                        } else {
                            self.err(n.span, &p, format!("hostname {} is not an RFC 1123 label", quote(&h)), Some("letters, digits and '-', 1 to 63 characters, not starting or ending with '-' (no dots: set the domain in dns.domain)"));
                        }
                    }
                }
                "node" => {
                    if let Some(h) = self.string(n, &p) {
                        if syntax::is_dns_label(&h) {
                            c.node = Some(h);
                        } else {
                            self.err(n.span, &p, format!("node {} is not a PVE node name", quote(&h)), Some("the node's short host name, e.g. mk33; omit `node` to let the scheduler place the container"));
                        }
                    }
                }
                "cores" => c.cores = self.int(n, &p, 1, 8192, "").map(|v| v as u32),
                "cpu_limit" => c.cpu_limit = self.number(n, &p, 0.0, 8192.0),
                "cpu_units" => c.cpu_units = self.int(n, &p, 0, 500_000, "").map(|v| v as u32),
                "memory" => {
                    c.memory = self
                        .int(n, &p, 16, i64::from(u32::MAX), " (MiB)")
                        .map(|v| v as u64)
                }
                "swap" => {
                    c.swap = self
                        .int(n, &p, 0, i64::from(u32::MAX), " (MiB)")
                        .map(|v| v as u64)
                }
                "disk_size" => {
                    c.disk_size = self.int(n, &p, 1, 131_072, " (GiB)").map(|v| v as u64)
                }
                "datastore_id" => c.datastore_id = self.storage_id(n, &p),
                "template" => {
                    if let Some(t) = self.string(n, &p) {
                        self.set_template(
                            &mut c,
                            TemplateChoice::Name(t, n.span, p.clone()),
                            e.key_span,
                            &p,
                        );
                    }
                }
                "template_url" => {
                    if let Some(u) = self.string(n, &p) {
                        match syntax::check_template_url(&u) {
                            Ok(()) => {
                                self.set_template(&mut c, TemplateChoice::Url(u), e.key_span, &p)
                            }
                            Err(right) => self.err(
                                n.span,
                                &p,
                                format!("template_url {} is not a usable template URL", quote(&u)),
                                Some(&format!("expected {right}")),
                            ),
                        }
                    }
                }
                "unprivileged" => c.unprivileged = self.boolean(n, &p),
                "interface_name" => {
                    if let Some(s) = self.iface_name(n, &p) {
                        c.net.name = Some(s);
                    }
                }
                "env" => c.env = self.env(n, &p),
                "entrypoint" => c.entrypoint = self.entrypoint(n, &p),
                "arch" => c.arch = self.arch(n, &p).or(c.arch.take()),
                "timezone" => c.timezone = self.timezone(n, &p).or(c.timezone.take()),
                "console" => self.console(n, &p, &mut c.console),
                "wait_for_ip" => self.wait_for_ip(n, &p, &mut c.wait_for_ip),
                "rootfs" => self.rootfs(n, &p, &mut c.rootfs),
                "hookscript" => c.hookscript = self.hookscript(n, &p).or(c.hookscript.take()),
                "pool" => c.pool = self.pool(n, &p).or(c.pool.take()),
                "features" => self.features(&mut c.features, n, &p),
                "extra_interfaces" => {
                    if let Some(items) = self.seq(n, &p) {
                        let mut list = Vec::with_capacity(items.len());
                        for (i, item) in items.iter().enumerate() {
                            let ip = join(&p, &i.to_string());
                            self.record(&ip, item.span);
                            let mut net = NetInput {
                                path: Some(ip.clone()),
                                ..NetInput::default()
                            };
                            if let Some(nes) = self.map(item, &ip) {
                                for ne in nes {
                                    let np = join(&ip, &ne.key);
                                    self.record(&np, ne.value.span);
                                    if Self::given_empty(ne, EXTRA_NET_FIELDS) {
                                        continue;
                                    }
                                    if ne.key == "name" {
                                        if let Some(s) = self.iface_name(&ne.value, &np) {
                                            net.name = Some(s);
                                        }
                                    } else if !self.net_field(&mut net, ne, &np) {
                                        self.unknown_field(ne, &ip, EXTRA_NET_FIELDS);
                                    }
                                }
                            }
                            list.push((net, item.span));
                        }
                        if list.len() + 1 > MAX_INTERFACES {
                            self.err(n.span, &p, format!("a container has at most {MAX_INTERFACES} interfaces (net0..net31), got {}", list.len() + 1), None);
                        } else {
                            c.extra_interfaces = Some(list);
                        }
                    }
                }
                "dns" => {
                    if let Some(des) = self.map(n, &p) {
                        for de in des {
                            let dp = join(&p, &de.key);
                            self.record(&dp, de.value.span);
                            if Self::given_empty(de, DNS_FIELDS) {
                                continue;
                            }
                            match de.key.as_str() {
                                "servers" => {
                                    if let Some(list) = self.strings(&de.value, &dp) {
                                        let mut servers = Vec::new();
                                        for (i, (s, sp)) in list.iter().enumerate() {
                                            match s.parse::<IpAddr>() {
                                                Ok(a) => servers.push(a),
                                                Err(_) => self.err(*sp, &join(&dp, &i.to_string()), format!("DNS server {} is not an IP address", quote(s)), Some("an IPv4 or IPv6 address such as 192.168.7.1")),
                                            }
                                        }
                                        c.dns_servers = Some(servers);
                                    }
                                }
                                "domain" => {
                                    if let Some(s) = self.string(&de.value, &dp) {
                                        if syntax::is_dns_name(&s) {
                                            c.dns_domain = Some(s);
                                        } else {
                                            self.err(
                                                de.value.span,
                                                &dp,
                                                format!(
                                                    "search domain {} is not a DNS name",
                                                    quote(&s)
                                                ),
                                                Some("dot-separated labels, e.g. lab.example.org"),
                                            );
                                        }
                                    }
                                }
                                _ => self.unknown_field(de, &p, DNS_FIELDS),
                            }
                        }
                    }
                }
                "ssh_public_keys" => c.ssh_public_keys = self.ssh_keys(n, &p),
                "password" => match &n.value {
                    Value::Scalar { text, .. } => {
                        if text.chars().count() < 5 {
                            self.err(n.span, &p, "password must be at least 5 characters (PVE's minimum)", Some("or omit it: a random password is generated and kept as a sensitive output"));
                        } else {
                            c.password = Some(Secret::new(text.clone()));
                        }
                    }
                    _ => self.err(
                        n.span,
                        &p,
                        format!("password must be a string, got {}", n.kind()),
                        None,
                    ),
                },
                "startup" => {
                    if let Some(ses) = self.map(n, &p) {
                        for se in ses {
                            let sp = join(&p, &se.key);
                            self.record(&sp, se.value.span);
                            if Self::given_empty(se, STARTUP_FIELDS) {
                                continue;
                            }
                            let v = match se.key.as_str() {
                                "order" | "up_delay" | "down_delay" => self
                                    .int(&se.value, &sp, 0, i64::from(u32::MAX), "")
                                    .map(|v| v as u32),
                                _ => {
                                    self.unknown_field(se, &p, STARTUP_FIELDS);
                                    continue;
                                }
                            };
                            match se.key.as_str() {
                                "order" => c.startup.order = v.or(c.startup.order),
                                "up_delay" => c.startup.up_delay = v.or(c.startup.up_delay),
                                _ => c.startup.down_delay = v.or(c.startup.down_delay),
                            }
                        }
                    }
                }
                "start_on_boot" => c.start_on_boot = self.boolean(n, &p),
                "state" => match self.string(n, &p).as_deref() {
                    Some("running") => c.state = Some(DesiredState::Running),
                    Some("stopped") => c.state = Some(DesiredState::Stopped),
                    Some("template") => c.state = Some(DesiredState::Template),
                    Some(other) => self.err(
                        n.span,
                        &p,
                        format!("state {} is not running, stopped or template", quote(other)),
                        Some(
                            "`state: running` (the default), `state: stopped` or `state: template`",
                        ),
                    ),
                    None => {}
                },
                "protection" => c.protection = self.boolean(n, &p),
                "adopt" => c.adopt = self.boolean(n, &p),
                "drift" => c.drift = self.drift_policy(n, &p),
                "ostype" => {
                    if let Some(v) = self.string(n, &p) {
                        if OSTYPES.contains(&v.as_str()) {
                            c.ostype = Some(v);
                        } else {
                            self.err(
                                n.span,
                                &p,
                                format!("ostype {} is not one PVE knows", quote(&v)),
                                Some(&format!("one of {}", OSTYPES.join(", "))),
                            );
                        }
                    }
                }
                "restart_policy" => match self.string(n, &p).as_deref() {
                    Some("auto") => c.restart_policy = Some(RestartPolicy::Auto),
                    Some("never") => c.restart_policy = Some(RestartPolicy::Never),
                    Some(other) => self.err(
                        n.span,
                        &p,
                        format!("restart_policy {} is not auto or never", quote(other)),
                        Some("`restart_policy: auto` (the default) or `restart_policy: never`"),
                    ),
                    None => {}
                },
                "tags" => {
                    if let Some(list) = self.strings(n, &p) {
                        let mut tags = Vec::new();
                        for (i, (t, sp)) in list.into_iter().enumerate() {
                            if syntax::is_pve_tag(&t) {
                                tags.push(t);
                            } else {
                                self.err(sp, &join(&p, &i.to_string()), format!("tag {} does not follow PVE's tag syntax", quote(&t)), Some("start with a letter, digit or '_', then letters, digits, '_', '-', '+', '.'"));
                            }
                        }
                        c.tags = Some(tags);
                    }
                }
                "description" => {
                    if let Some(d) = self.string(n, &p) {
                        if d.len() > MAX_DESCRIPTION_BYTES {
                            self.err(
                                n.span,
                                &p,
                                format!(
                                    "description is {} bytes; at most {MAX_DESCRIPTION_BYTES} are accepted",
                                    d.len()
                                ),
                                Some("PVE keeps at most 8 KiB of description, and pxfleet adds its own mark line"),
                            );
                        } else {
                            c.description = Some(d);
                        }
                    }
                }
                "labels" => c.labels = self.string_map(n, &p),
                "constraints" => {
                    if let Some(kes) = self.map(n, &p) {
                        for ke in kes {
                            let kp = join(&p, &ke.key);
                            self.record(&kp, ke.value.span);
                            if Self::given_empty(ke, CONSTRAINT_FIELDS) {
                                continue;
                            }
                            match ke.key.as_str() {
                                "nodes" => {
                                    if let Some(list) = self.strings(&ke.value, &kp) {
                                        let mut nodes = Vec::new();
                                        for (i, (s, sp)) in list.into_iter().enumerate() {
                                            if syntax::is_dns_label(&s) {
                                                nodes.push(s);
                                            } else {
                                                self.err(
                                                    sp,
                                                    &join(&kp, &i.to_string()),
                                                    format!(
                                                        "node {} is not a PVE node name",
                                                        quote(&s)
                                                    ),
                                                    None,
                                                );
                                            }
                                        }
                                        c.constraints.nodes = Some(nodes);
                                    }
                                }
                                "node_labels" => {
                                    c.constraints.node_labels = self.string_map(&ke.value, &kp)
                                }
                                "anti_affinity" => {
                                    if let Some(list) = self.strings(&ke.value, &kp) {
                                        c.constraints.anti_affinity =
                                            Some(list.into_iter().map(|(s, _)| s).collect());
                                    }
                                }
                                _ => self.unknown_field(ke, &p, CONSTRAINT_FIELDS),
                            }
                        }
                    }
                }
                "mount_points" => c.mount_points = self.mount_points(n, &p),
                "devices" => c.devices = self.devices(n, &p),
                "idmap" => c.idmap = self.idmap(n, &p),
                _ => self.unknown_field(e, path, CONTAINER_FIELDS),
            }
        }
        c
    }

    pub(super) fn set_template(
        &mut self,
        c: &mut ContainerInput,
        choice: TemplateChoice,
        key_span: Span,
        path: &str,
    ) {
        if c.template.is_some() {
            self.err(
                key_span,
                path,
                "give either `template` or `template_url`, not both",
                Some("template names an entry of `templates:`; template_url is a shortcut for an inline one"),
            );
        } else {
            c.template = Some(choice);
        }
    }

    pub(super) fn storage_id(&mut self, n: &Node, path: &str) -> Option<String> {
        let s = self.string(n, path)?;
        if syntax::is_storage_id(&s) {
            Some(s)
        } else {
            self.err(
                n.span,
                path,
                format!("{} {} is not a PVE storage id", leaf(path), quote(&s)),
                Some(
                    "a storage id such as local-zfs or local-lvm (letters, digits, '-', '_', '.')",
                ),
            );
            None
        }
    }

    pub(super) fn features(&mut self, f: &mut FeaturesInput, n: &Node, path: &str) {
        let Some(es) = self.map(n, path) else { return };
        for e in es {
            let p = join(path, &e.key);
            self.record(&p, e.value.span);
            if Self::given_empty(e, FEATURE_FIELDS) {
                continue;
            }
            match e.key.as_str() {
                "nesting" => f.nesting = self.boolean(&e.value, &p),
                "fuse" => f.fuse = self.boolean(&e.value, &p),
                "keyctl" => f.keyctl = self.boolean(&e.value, &p),
                "mknod" => f.mknod = self.boolean(&e.value, &p),
                "force_rw_sys" => f.force_rw_sys = self.boolean(&e.value, &p),
                "mount" => {
                    if let Some(list) = self.strings(&e.value, &p) {
                        let mut out = Vec::new();
                        for (i, (s, sp)) in list.into_iter().enumerate() {
                            if !s.is_empty()
                                && s.bytes()
                                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'.')
                            {
                                out.push(s);
                            } else {
                                self.err(
                                    sp,
                                    &join(&p, &i.to_string()),
                                    format!(
                                        "mount type {} is not a file-system type name",
                                        quote(&s)
                                    ),
                                    Some("file-system types such as nfs or cifs"),
                                );
                            }
                        }
                        f.mount = Some(out);
                    }
                }
                _ => self.unknown_field(e, path, FEATURE_FIELDS),
            }
        }
    }

    pub(super) fn ssh_keys(&mut self, n: &Node, path: &str) -> Option<Vec<String>> {
        let list = self.strings(n, path)?;
        let mut out = Vec::new();
        for (i, (s, sp)) in list.into_iter().enumerate() {
            let p = join(path, &i.to_string());
            if let Some(fp) = s.strip_prefix("file:") {
                let resolved = resolve_relative(self.file, fp.trim());
                match self.files.read(&resolved) {
                    Ok(text) => {
                        let mut found = 0;
                        for (ln, line) in text.lines().enumerate() {
                            let line = line.trim();
                            if line.is_empty() || line.starts_with('#') {
                                continue;
                            }
                            found += 1;
                            match syntax::check_ssh_key(line) {
                                Ok(k) => out.push(k),
                                Err(right) => self.err(
                                    sp,
                                    &p,
                                    format!(
                                        "line {} of {} is not a valid SSH public key",
                                        ln + 1,
                                        resolved.display()
                                    ),
                                    Some(&format!("expected {right}")),
                                ),
                            }
                        }
                        if found == 0 {
                            self.err(sp, &p, format!("{} holds no SSH public key", resolved.display()), Some("point at a .pub file such as ~/.ssh/id_ed25519.pub (copied next to the fleet file)"));
                        }
                    }
                    Err(e) => self.err(
                        sp,
                        &p,
                        format!("cannot read SSH key file {}: {e}", resolved.display()),
                        Some("file: paths are relative to the fleet file's directory"),
                    ),
                }
            } else {
                match syntax::check_ssh_key(&s) {
                    Ok(k) => out.push(k),
                    Err(right) => self.err(
                        sp,
                        &p,
                        "not a valid SSH public key",
                        Some(&format!("expected {right}, or file:PATH")),
                    ),
                }
            }
        }
        Some(out)
    }
}
