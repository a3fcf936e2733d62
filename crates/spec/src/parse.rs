//! The `fleet.yaml` decoder: from the positioned YAML tree ([`crate::yaml`]) to the resolved
//! [`Fleet`], checking every field on the way (types, ranges, syntax) and recording where each
//! came from. `defaults` and each container decode into the same partial form, merged
//! field by field (container over defaults, nested mappings merged key by key), then resolved.
//! Cross-container rules live in [`crate::check`].

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnet::{Ipv4Net, Ipv6Net};
use sha2::Digest as _;

use crate::diag::{did_you_mean, Diagnostic, Diagnostics};
use crate::files::{resolve_relative, FileSource};
use crate::model::*;
use crate::syntax;
use crate::yaml::{self, Entry, Node, Value};

mod hooks;

pub(crate) const TOP_FIELDS: &[&str] = &[
    "fleet",
    "drift",
    "allow_privileged",
    "defaults",
    "templates",
    "containers",
    "policies",
    "hooks",
];
pub(crate) const TEMPLATE_FIELDS: &[&str] =
    &["url", "sha256", "sha512", "storage", "pveam", "seed"];
pub(crate) const EXTRA_NET_FIELDS: &[&str] = &[
    "name",
    "bridge",
    "ip_address",
    "gateway",
    "ipv6",
    "gateway6",
    "vlan_id",
    "mtu",
    "mac_address",
    "firewall",
    "rate_limit",
];
pub(crate) const CONTAINER_FIELDS: &[&str] = &[
    "vm_id",
    "hostname",
    "node",
    "cores",
    "cpu_limit",
    "cpu_units",
    "memory",
    "swap",
    "disk_size",
    "datastore_id",
    "template",
    "template_url",
    "unprivileged",
    "features",
    "bridge",
    "ip_address",
    "gateway",
    "ipv6",
    "gateway6",
    "vlan_id",
    "mtu",
    "mac_address",
    "firewall",
    "rate_limit",
    "extra_interfaces",
    "dns",
    "ssh_public_keys",
    "password",
    "startup",
    "start_on_boot",
    "protection",
    "tags",
    "description",
    "labels",
    "constraints",
    "mount_points",
    "state",
    "adopt",
    "restart_policy",
    "drift",
    "ostype",
];
const FEATURE_FIELDS: &[&str] = &["nesting", "fuse", "keyctl", "mount"];
const DNS_FIELDS: &[&str] = &["servers", "domain"];
const STARTUP_FIELDS: &[&str] = &["order", "up_delay", "down_delay"];
const CONSTRAINT_FIELDS: &[&str] = &["nodes", "node_labels", "anti_affinity"];
const VOLUME_FIELDS: &[&str] = &[
    "datastore_id",
    "size",
    "path",
    "backup",
    "read_only",
    "host_path",
];
/// The longest `description` accepted: PVE keeps 8 KiB, less room for the agent's `managed-by:` mark line.
pub const MAX_DESCRIPTION_BYTES: usize = 8192 - 512;

/// Fields that cannot come from `defaults`: each container needs its own.
const NOT_DEFAULTABLE: &[&str] = &["vm_id", "hostname", "mac_address"];

/// Most network interfaces PVE gives a container (net0..net31).
pub const MAX_INTERFACES: usize = 32;
/// Most mount points PVE gives a container (mp0..mp255).
pub const MAX_MOUNT_POINTS: usize = 256;

/// Parse, resolve and validate a fleet file. `file_name` is used in diagnostics and to resolve
/// `file:` SSH keys (relative to its directory, read through `files`). Returns every problem at
/// once.
pub fn parse_fleet(
    file_name: &str,
    text: &str,
    files: &dyn FileSource,
) -> Result<Fleet, Diagnostics> {
    let mut diags = Vec::new();
    let root = yaml::parse(file_name, text, &mut diags);
    // About one recorded path per 13 bytes of YAML, each about 30 bytes long.
    let mut recorded = Spans::default();
    recorded.reserve(text.len() / 13, text.len() * 30 / 13);
    let mut cx = Cx {
        file: file_name,
        files,
        diags,
        spans: Spans::default(),
        recorded,
        container_start: 0,
    };
    let fleet = match root {
        Some(root) if !root.is_null() => cx.fleet(&root),
        _ => {
            if cx.diags.is_empty() {
                cx.err(
                    Span { line: 1, column: 1 },
                    "",
                    "the file is empty",
                    Some("a fleet file is a mapping starting with `fleet: NAME` and `containers:`"),
                );
            }
            None
        }
    };
    let mut fleet = match fleet {
        Some(f) => f,
        None => {
            let mut d = Diagnostics(cx.diags);
            d.sort();
            return Err(d);
        }
    };
    cx.finish_spans();
    crate::check::check_fleet(file_name, &fleet, &cx.spans, &mut cx.diags);
    if cx.diags.is_empty() {
        fleet.spans = cx.spans;
        Ok(fleet)
    } else {
        let mut d = Diagnostics(cx.diags);
        d.sort();
        Err(d)
    }
}

struct Cx<'a> {
    file: &'a str,
    files: &'a dyn FileSource,
    diags: Vec<Diagnostic>,
    spans: Spans,
    /// Positions recorded while decoding, turned into `spans` in one sorted bulk build at
    /// the end (much cheaper than inserting 300,000 paths one by one into a tree).
    recorded: Spans,
    /// Where the container being decoded starts in `recorded`.
    container_start: usize,
}

/// Names people bring from PVE, Terraform or other tools, and what pxfleet calls them.
fn alias(key: &str) -> Option<(&'static str, Option<&'static str>)> {
    Some(match key {
        "ip" | "ipv4" | "address" => ("ip_address", None),
        "gw" => ("gateway", None),
        "ip6" => ("ipv6", None),
        "gw6" => ("gateway6", None),
        "cpu" | "cpus" | "vcpus" => ("cores", None),
        "cpulimit" => ("cpu_limit", None),
        "cpuunits" => ("cpu_units", None),
        "ram" | "mem" => ("memory", Some("in MiB")),
        "disk" | "rootfs" | "size" => ("disk_size", Some("in GiB")),
        "storage" | "datastore" => ("datastore_id", None),
        "vmid" | "id" => ("vm_id", None),
        "onboot" | "autostart" => ("start_on_boot", None),
        "hwaddr" | "mac" => ("mac_address", None),
        "tag" | "vlan" => ("vlan_id", Some("`tags` is the list of PVE tags; `vlan_id` is the VLAN (PVE's net tag=)")),
        "ssh_keys" | "ssh_authorized_keys" | "ssh-public-keys" => ("ssh_public_keys", None),
        "nameserver" | "nameservers" => ("dns.servers", Some("write `dns: {servers: [...]}`")),
        "searchdomain" => ("dns.domain", Some("write `dns: {domain: ...}`")),
        "nesting" | "fuse" | "keyctl" => ("features", Some("features go under `features:`, e.g. `features: {nesting: true}`")),
        "mp" | "mountpoints" | "mounts" | "volumes" => ("mount_points", None),
        "interfaces" | "networks" | "nics" => ("extra_interfaces", Some("net0 is the container's own `ip_address`, `bridge`, ...; more go under `extra_interfaces`")),
        "os_template" | "ostemplate" => ("template", None),
        _ => return None,
    })
}

/// Last segment of a path (`containers.web-1.memory` -> `memory`).
fn leaf(path: &str) -> &str {
    path.rsplit('.').next().unwrap_or(path)
}

fn join(prefix: &str, key: &str) -> String {
    if prefix.is_empty() {
        key.to_owned()
    } else {
        let mut s = String::with_capacity(prefix.len() + key.len() + 1);
        s.push_str(prefix);
        s.push('.');
        s.push_str(key);
        s
    }
}

/// Shorten a user's value for quoting in a message.
fn quote(s: &str) -> String {
    let mut out: String = s.chars().take(60).collect();
    if out.len() < s.len() {
        out.push_str("...");
    }
    format!("'{out}'")
}

impl Cx<'_> {
    fn err(&mut self, span: Span, path: &str, message: impl Into<String>, hint: Option<&str>) {
        let mut d = Diagnostic::new(self.file, span, path, message);
        d.hint = hint.map(str::to_owned);
        self.diags.push(d);
    }

    /// An error at the best known position of `path`.
    fn err_at(&mut self, path: &str, message: impl Into<String>, hint: Option<&str>) {
        let span = self.lookup(path);
        self.err(span, path, message, hint);
    }

    /// A known field written with nothing after it (`domain:`), which counts as not given. `gateway` and
    /// `gateway6` are the exception: an empty one is an error of its own.
    fn given_empty(e: &Entry, known: &[&str]) -> bool {
        e.value.is_null() && known.contains(&e.key.as_str()) && !e.key.starts_with("gateway")
    }

    fn unknown_field(&mut self, e: &Entry, path: &str, known: &[&str]) {
        let p = join(path, &e.key);
        if let Some((target, why)) =
            alias(&e.key).filter(|(t, _)| known.contains(&t.split('.').next().unwrap_or(t)))
        {
            let msg = format!("unknown field {}; did you mean '{target}'?", quote(&e.key));
            self.err(e.key_span, &p, msg, why);
            return;
        }
        match did_you_mean(&e.key, known) {
            Some(s) => self.err(
                e.key_span,
                &p,
                format!("unknown field {}; did you mean '{s}'?", quote(&e.key)),
                None,
            ),
            None => {
                let hint = format!("fields allowed here: {}", known.join(", "));
                self.err(
                    e.key_span,
                    &p,
                    format!("unknown field {}", quote(&e.key)),
                    Some(&hint),
                );
            }
        }
    }

    fn wrong_type(&mut self, n: &Node, path: &str, expected: &str) {
        let got = match &n.value {
            Value::Scalar { text, .. } if !n.is_null() => format!("{} {}", n.kind(), quote(text)),
            _ => n.kind().to_owned(),
        };
        let quoted_value = matches!(&n.value, Value::Scalar { text, plain: false }
            if text.parse::<f64>().is_ok() || yaml::parse_bool(text).is_some());
        let hint = quoted_value.then_some("quotes make a string: write the value without quotes");
        self.err(
            n.span,
            path,
            format!("{} must be {expected}, got {got}", leaf(path)),
            hint,
        );
    }

    fn map<'n>(&mut self, n: &'n Node, path: &str) -> Option<&'n [Entry]> {
        match &n.value {
            Value::Map(es) => Some(es),
            _ if n.is_null() => Some(&[]),
            _ => {
                self.wrong_type(n, path, "a mapping (`key: value` lines)");
                None
            }
        }
    }

    fn seq<'n>(&mut self, n: &'n Node, path: &str) -> Option<&'n [Node]> {
        match &n.value {
            Value::Seq(v) => Some(v),
            _ if n.is_null() => Some(&[]),
            _ => {
                self.wrong_type(n, path, "a list (`[a, b]` or `- a` lines)");
                None
            }
        }
    }

    fn string(&mut self, n: &Node, path: &str) -> Option<String> {
        match &n.value {
            Value::Scalar { text, .. } if !n.is_null() => Some(text.clone()),
            _ => {
                self.wrong_type(n, path, "a string");
                None
            }
        }
    }

    /// `drift: repair | report`.
    fn drift_policy(&mut self, n: &Node, path: &str) -> Option<DriftPolicy> {
        match self.string(n, path).as_deref() {
            Some("repair") => Some(DriftPolicy::Repair),
            Some("report") => Some(DriftPolicy::Report),
            Some(other) => {
                self.err(
                    n.span,
                    path,
                    format!("drift {} is not repair or report", quote(other)),
                    Some("`drift: repair` (the default) or `drift: report`"),
                );
                None
            }
            None => None,
        }
    }

    fn boolean(&mut self, n: &Node, path: &str) -> Option<bool> {
        if let Value::Scalar { text, plain: true } = &n.value {
            if let Some(b) = yaml::parse_bool(text) {
                return Some(b);
            }
        }
        self.wrong_type(n, path, "true or false");
        None
    }

    /// An integer in `min..=max`; `what` describes the range in PVE's words.
    fn int(&mut self, n: &Node, path: &str, min: i64, max: i64, unit: &str) -> Option<i64> {
        let v = match &n.value {
            Value::Scalar { text, plain: true } => text.parse::<i64>().ok(),
            _ => None,
        };
        let Some(v) = v else {
            self.wrong_type(n, path, &format!("an integer{unit}"));
            return None;
        };
        let field = leaf(path);
        if v < min {
            self.err(
                n.span,
                path,
                format!("{field} must be at least {min}{unit}, got {v}"),
                Some(&format!("PVE accepts {field} from {min} to {max}")),
            );
            None
        } else if v > max {
            self.err(
                n.span,
                path,
                format!("{field} must be at most {max}{unit}, got {v}"),
                Some(&format!("PVE accepts {field} from {min} to {max}")),
            );
            None
        } else {
            Some(v)
        }
    }

    fn number(&mut self, n: &Node, path: &str, min: f64, max: f64) -> Option<f64> {
        let v = match &n.value {
            Value::Scalar { text, plain: true } => {
                text.parse::<f64>().ok().filter(|v| v.is_finite())
            }
            _ => None,
        };
        let Some(v) = v else {
            self.wrong_type(n, path, "a number");
            return None;
        };
        if !(min..=max).contains(&v) {
            self.err(
                n.span,
                path,
                format!("{} must be between {min} and {max}, got {v}", leaf(path)),
                None,
            );
            return None;
        }
        Some(v)
    }

    fn strings(&mut self, n: &Node, path: &str) -> Option<Vec<(String, Span)>> {
        let items = self.seq(n, path)?;
        let mut out = Vec::with_capacity(items.len());
        let mut ok = true;
        for (i, item) in items.iter().enumerate() {
            match self.string(item, &join(path, &i.to_string())) {
                Some(s) => out.push((s, item.span)),
                None => ok = false,
            }
        }
        ok.then_some(out)
    }

    fn string_map(&mut self, n: &Node, path: &str) -> Option<BTreeMap<String, String>> {
        let es = self.map(n, path)?;
        let mut out = BTreeMap::new();
        for e in es {
            let p = join(path, &e.key);
            if !syntax::is_simple_name(&e.key) {
                self.err(
                    e.key_span,
                    &p,
                    format!(
                        "label key {} has characters outside letters, digits, '.', '_', '-', '/'",
                        quote(&e.key)
                    ),
                    None,
                );
                continue;
            }
            if let Some(v) = self.string(&e.value, &p) {
                out.insert(e.key.clone(), v);
            }
        }
        Some(out)
    }

    fn record(&mut self, path: &str, span: Span) {
        self.recorded.push_unsorted(path, span);
    }

    /// Everything but the containers is decoded: keep those positions apart (their sorted
    /// index stays small) and record the containers' from scratch.
    fn set_aside_spans(&mut self) {
        self.spans = Spans::from_unsorted(self.recorded.iter_raw());
        self.recorded.clear(); // keeps the room reserved for the containers' paths
    }

    /// All positions, set-aside and recorded, in `spans`.
    fn finish_spans(&mut self) {
        let mut all = std::mem::take(&mut self.recorded);
        all.extend_unsorted(self.spans.iter_raw());
        self.spans = all;
    }

    /// Best known position of `path` (see [`Spans::lookup`]): among the sorted positions, or
    /// those of the container being decoded (not sorted yet).
    fn lookup(&self, path: &str) -> Span {
        let (spans, rec, start) = (&self.spans, &self.recorded, self.container_start);
        Spans::lookup_by(path, |p| spans.get(p).or_else(|| rec.scan_from(start, p)))
    }

    // ---------------------------------------------------------------- top level

    fn fleet(&mut self, root: &Node) -> Option<Fleet> {
        let es = match &root.value {
            Value::Map(es) => es,
            _ => {
                self.err(
                    root.span,
                    "",
                    format!("a fleet file must be a mapping, got {}", root.kind()),
                    Some("start the file with `fleet: NAME`, then `containers:`"),
                );
                return None;
            }
        };
        let mut name = None;
        let mut allow_privileged = false;
        let mut defaults = None;
        let mut fleet_drift = None;
        let mut templates_node = None;
        let mut containers_node = None;
        let mut hooks_node = None;
        for e in es {
            let path = e.key.as_str();
            self.record(path, e.value.span);
            match path {
                "fleet" => {
                    if let Some(s) = self.string(&e.value, path) {
                        if syntax::is_fleet_name(&s) {
                            name = Some(s);
                        } else {
                            self.err(
                                e.value.span,
                                path,
                                format!("fleet name {} is not valid", quote(&s)),
                                Some("use lower-case letters, digits and '-' (at most 63), e.g. dev or prod-eu"),
                            );
                        }
                    }
                }
                "allow_privileged" => allow_privileged = self.boolean(&e.value, path).unwrap_or(false),
                "drift" => fleet_drift = self.drift_policy(&e.value, path),
                "defaults" => {
                    if let Some(des) = self.map(&e.value, path) {
                        defaults = Some(self.container_input(des, "defaults", true));
                    }
                }
                "templates" => templates_node = Some(&e.value),
                "containers" => containers_node = Some(e),
                // Read and checked by `policies::read_policies` (they are not part of the fleet's spec).
                "policies" => {}
                "hooks" => hooks_node = Some(&e.value),
                "lxc_configs" => self.err(
                    e.key_span,
                    path,
                    "unknown field 'lxc_configs'; did you mean 'containers'?",
                    Some("pxfleet calls the Terraform lxc_configs map `containers`; the fields inside keep their names"),
                ),
                _ => self.unknown_field(e, "", TOP_FIELDS),
            }
        }
        if name.is_none() && !es.iter().any(|e| e.key == "fleet") {
            self.err(
                root.span,
                "fleet",
                "missing field 'fleet' (the fleet's name)",
                Some("add `fleet: dev` (lower-case letters, digits, '-') at the top"),
            );
        }
        let mut templates = BTreeMap::new();
        if let Some(n) = templates_node {
            if let Some(tes) = self.map(n, "templates") {
                for e in tes {
                    let path = join("templates", &e.key);
                    self.record(&path, e.key_span);
                    if !syntax::is_simple_name(&e.key) {
                        self.err(
                            e.key_span,
                            &path,
                            format!("template name {} is not valid", quote(&e.key)),
                            Some("use letters, digits, '.', '_', '-'"),
                        );
                        continue;
                    }
                    if let Some(t) = self.template(&e.value, &path) {
                        templates.insert(e.key.clone(), t);
                    }
                }
            }
        }
        let hooks = hooks_node.map(|n| self.hooks(n)).unwrap_or_default();
        let mut defaults: ContainerInput = defaults.unwrap_or_default();
        // Top-level `drift:` is the fleet's; `defaults.drift` and a container's own override it.
        defaults.drift = defaults.drift.or(fleet_drift);
        // Everything but the containers is decoded: sort those positions now, so lookups
        // during container resolution find them (see `lookup`).
        self.set_aside_spans();
        let mut containers = BTreeMap::new();
        match containers_node {
            None => self.err(
                root.span,
                "containers",
                "missing field 'containers'",
                Some("add `containers:` with one entry per container (`containers: {}` for an empty fleet)"),
            ),
            Some(ce) => {
                if let Some(ces) = self.map(&ce.value, "containers") {
                    let declared: Vec<String> = templates.keys().cloned().collect();
                    for e in ces {
                        let path = join("containers", &e.key);
                        self.container_start = self.recorded.raw_len();
                        self.record(&path, e.key_span);
                        if !syntax::is_dns_label(&e.key) {
                            self.err(
                                e.key_span,
                                &path,
                                format!("container name {} is not a valid host name label", quote(&e.key)),
                                Some("use letters, digits and '-' (1 to 63, not starting or ending with '-'), e.g. web-1"),
                            );
                            continue;
                        }
                        let Some(cmap) = self.map(&e.value, &path) else {
                            continue;
                        };
                        let input = self.container_input(cmap, &path, false);
                        let merged = input.over(&defaults);
                        if let Some(c) = self.resolve(&e.key, &path, merged, allow_privileged, &declared, &mut templates) {
                            containers.insert(e.key.clone(), c);
                        }
                    }
                }
            }
        }
        let names: Vec<&str> = containers.keys().map(String::as_str).collect();
        self.check_hook_containers(&hooks, &names);
        Some(Fleet {
            name: name.unwrap_or_default(),
            allow_privileged,
            templates,
            containers,
            hooks,
            spans: Spans::default(),
        })
    }

    fn template(&mut self, n: &Node, path: &str) -> Option<Template> {
        let es = self.map(n, path)?;
        let mut url = None;
        let mut sha256 = None;
        let mut sha512 = None;
        let mut storage = None;
        let mut pveam = None;
        let mut seed = TemplateSeed::OnDemand;
        let mut ok = true;
        for e in es {
            let p = join(path, &e.key);
            self.record(&p, e.value.span);
            if Self::given_empty(e, TEMPLATE_FIELDS) {
                continue;
            }
            match e.key.as_str() {
                "url" => match self.string(&e.value, &p) {
                    Some(u) => match syntax::check_template_url(&u) {
                        Ok(()) => url = Some(u),
                        Err(right) => {
                            self.err(
                                e.value.span,
                                &p,
                                format!("url {} is not a usable template URL", quote(&u)),
                                Some(&format!("expected {right}")),
                            );
                            ok = false;
                        }
                    },
                    None => ok = false,
                },
                "sha256" | "sha512" => {
                    let len = if e.key == "sha256" { 64 } else { 128 };
                    match self.string(&e.value, &p) {
                        Some(h) => match syntax::check_hex(&h, len) {
                            Ok(h) => {
                                let c = if len == 64 {
                                    Checksum::Sha256(h)
                                } else {
                                    Checksum::Sha512(h)
                                };
                                if len == 64 {
                                    sha256 = Some((c, e.key_span));
                                } else {
                                    sha512 = Some((c, e.key_span));
                                }
                            }
                            Err(right) => {
                                self.err(e.value.span, &p, format!("{} checksum is not valid: expected {right}", e.key), Some("copy the checksum from the image's SHA256SUMS / SHA512SUMS file"));
                                ok = false;
                            }
                        },
                        None => ok = false,
                    }
                }
                "storage" => match self.string(&e.value, &p) {
                    Some(s) if syntax::is_storage_id(&s) => storage = Some(s),
                    Some(s) => {
                        self.err(
                            e.value.span,
                            &p,
                            format!("storage {} is not a PVE storage id", quote(&s)),
                            Some("a storage id such as local or nfs-templates"),
                        );
                        ok = false;
                    }
                    None => ok = false,
                },
                "seed" => match self.string(&e.value, &p).as_deref() {
                    Some("on_demand") => seed = TemplateSeed::OnDemand,
                    Some("all_nodes") => seed = TemplateSeed::AllNodes,
                    Some(other) => {
                        self.err(
                            e.value.span,
                            &p,
                            format!("seed {} is not a seeding mode", quote(other)),
                            Some("expected on_demand (the default) or all_nodes"),
                        );
                        ok = false;
                    }
                    None => ok = false,
                },
                "pveam" => match self.string(&e.value, &p) {
                    Some(a) => match syntax::check_template_file_name(&a) {
                        Ok(()) => pveam = Some(a),
                        Err(right) => {
                            self.err(
                                e.value.span,
                                &p,
                                format!("appliance {} is not a template file name", quote(&a)),
                                Some(&format!("expected {right} (see `pveam available`)")),
                            );
                            ok = false;
                        }
                    },
                    None => ok = false,
                },
                _ => {
                    self.unknown_field(e, path, TEMPLATE_FIELDS);
                    ok = false;
                }
            }
        }
        if !ok {
            return None;
        }
        let at = self.lookup(path);
        let storage = storage.unwrap_or_else(|| DEFAULT_TEMPLATE_STORAGE.to_owned());
        match (url, pveam) {
            (Some(_), Some(_)) => {
                self.err(
                    at,
                    path,
                    "a template has either `url` or `pveam`, not both",
                    None,
                );
                None
            }
            (None, None) => {
                self.err(
                    at,
                    path,
                    "a template needs `url` (with `sha256` or `sha512`) or `pveam` (an appliance name)",
                    Some("e.g. `pveam: debian-12-standard_12.7-1_amd64.tar.zst`"),
                );
                None
            }
            (Some(url), None) => {
                let checksum = match (sha256, sha512) {
                    (Some(_), Some((_, sp))) => {
                        self.err(
                            sp,
                            &join(path, "sha512"),
                            "give one checksum, `sha256` or `sha512`, not both",
                            None,
                        );
                        return None;
                    }
                    (Some((c, _)), None) | (None, Some((c, _))) => c,
                    (None, None) => {
                        self.err(
                            at,
                            path,
                            "a url template needs a checksum: `sha256` or `sha512`",
                            Some("the agent verifies the download against it; take it from the image's SHA256SUMS"),
                        );
                        return None;
                    }
                };
                Some(Template {
                    source: TemplateSource::Url {
                        url,
                        checksum: Some(checksum),
                    },
                    storage,
                    seed,
                })
            }
            (None, Some(appliance)) => {
                if let Some((_, sp)) = sha256.or(sha512) {
                    self.err(sp, path, "a checksum applies to `url` templates only; pveam verifies its appliances itself", None);
                    return None;
                }
                Some(Template {
                    source: TemplateSource::Pveam { appliance },
                    storage,
                    seed,
                })
            }
        }
    }

    // ---------------------------------------------------------------- containers

    fn container_input(&mut self, es: &[Entry], path: &str, is_defaults: bool) -> ContainerInput {
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
                                        if let Some(s) = self.string(&ne.value, &np) {
                                            if syntax::is_bridge_name(&s) {
                                                net.name = Some(s);
                                            } else {
                                                self.err(ne.value.span, &np, format!("interface name {} is not valid", quote(&s)), Some("1 to 15 letters, digits, '-', '_', '.', e.g. eth1"));
                                            }
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
                    Some(other) => self.err(
                        n.span,
                        &p,
                        format!("state {} is not running or stopped", quote(other)),
                        Some("`state: running` (the default) or `state: stopped`"),
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
                _ => self.unknown_field(e, path, CONTAINER_FIELDS),
            }
        }
        c
    }

    fn set_template(
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

    fn storage_id(&mut self, n: &Node, path: &str) -> Option<String> {
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

    fn features(&mut self, f: &mut FeaturesInput, n: &Node, path: &str) {
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

    /// Decode one network field into `net`; false when `e` is not a network field.
    fn net_field(&mut self, net: &mut NetInput, e: &Entry, p: &str) -> bool {
        let n = &e.value;
        match e.key.as_str() {
            "bridge" => {
                if let Some(s) = self.string(n, p) {
                    if syntax::is_bridge_name(&s) {
                        net.bridge = Some(s);
                    } else {
                        self.err(n.span, p, format!("bridge {} is not a bridge name", quote(&s)), Some("a Linux bridge such as vmbr0 (1 to 15 letters, digits, '-', '_', '.')"));
                    }
                }
            }
            "ip_address" => {
                if let Some(s) = self.string(n, p) {
                    net.ip = match s.as_str() {
                        "dhcp" => Some(IpSpec::Dhcp),
                        "none" => Some(IpSpec::None),
                        _ => self.cidr4(&s, n.span, p).map(IpSpec::Static),
                    };
                }
            }
            "gateway" => {
                if n.is_null() {
                    self.err(n.span, p, "gateway is empty", Some("an IPv4 address such as 192.168.7.1, or `none` for a network without a router"));
                } else if let Some(s) = self.string(n, p) {
                    if s == "none" {
                        net.gateway = Some(Gw::None);
                    } else {
                        match s.parse::<Ipv4Addr>() {
                            Ok(a) => net.gateway = Some(Gw::Addr(a)),
                            Err(_) => self.err(
                                n.span,
                                p,
                                format!("gateway {} is not an IPv4 address", quote(&s)),
                                Some("an address without prefix, e.g. 192.168.7.1, or `none`"),
                            ),
                        }
                    }
                }
            }
            "ipv6" => {
                if let Some(s) = self.string(n, p) {
                    net.ip6 = match s.as_str() {
                        "auto" => Some(Ip6Spec::Auto),
                        "dhcp" => Some(Ip6Spec::Dhcp),
                        "none" => Some(Ip6Spec::None),
                        _ => match s.parse::<Ipv6Net>() {
                            Ok(c) => Some(Ip6Spec::Static(c)),
                            Err(_) => {
                                let hint = if s.parse::<Ipv6Addr>().is_ok() {
                                    "add the prefix length, e.g. 2001:db8::10/64"
                                } else {
                                    "`auto` (SLAAC), `dhcp`, `none` or an IPv6 CIDR such as 2001:db8::10/64"
                                };
                                self.err(
                                    n.span,
                                    p,
                                    format!("ipv6 {} is not valid", quote(&s)),
                                    Some(hint),
                                );
                                None
                            }
                        },
                    };
                }
            }
            "gateway6" => {
                if n.is_null() {
                    self.err(
                        n.span,
                        p,
                        "gateway6 is empty",
                        Some("an IPv6 address such as 2001:db8::1"),
                    );
                } else if let Some(s) = self.string(n, p) {
                    match s.parse::<Ipv6Addr>() {
                        Ok(a) => net.gateway6 = Some(a),
                        Err(_) => self.err(
                            n.span,
                            p,
                            format!("gateway6 {} is not an IPv6 address", quote(&s)),
                            Some("an address without prefix, e.g. 2001:db8::1"),
                        ),
                    }
                }
            }
            "vlan_id" => net.vlan_id = self.int(n, p, 1, 4094, "").map(|v| v as u16),
            "mtu" => net.mtu = self.int(n, p, 576, 65520, "").map(|v| v as u16),
            "mac_address" => {
                if let Some(s) = self.string(n, p) {
                    match s.parse::<MacAddr>() {
                        Ok(m) if m.is_unicast() => net.mac = Some(m),
                        Ok(_) => self.err(n.span, p, format!("mac_address {} is a multicast address", quote(&s)), Some("the first byte must be even, e.g. BC:24:11:xx:xx:xx (PVE's prefix)")),
                        Err(e) => self.err(n.span, p, e.to_string(), None),
                    }
                }
            }
            "firewall" => net.firewall = self.boolean(n, p),
            "rate_limit" => net.rate_limit = self.number(n, p, 0.0, 1e9),
            _ => return false,
        }
        true
    }

    fn cidr4(&mut self, s: &str, span: Span, p: &str) -> Option<Ipv4Net> {
        match s.parse::<Ipv4Net>() {
            Ok(c) => {
                if c.prefix_len() < 31 && (c.addr() == c.network() || c.addr() == c.broadcast()) {
                    let which = if c.addr() == c.network() {
                        "network"
                    } else {
                        "broadcast"
                    };
                    self.err(
                        span,
                        p,
                        format!("ip_address {s} is the {which} address of its subnet"),
                        Some("use a host address inside the subnet, e.g. .10 rather than .0"),
                    );
                    return None;
                }
                Some(c)
            }
            Err(_) => {
                let hint = if s.parse::<Ipv4Addr>().is_ok() {
                    format!("add the prefix length, e.g. {s}/24")
                } else {
                    "`dhcp`, `none` or an IPv4 CIDR such as 192.168.7.100/24".to_owned()
                };
                self.err(
                    span,
                    p,
                    format!("ip_address {} is not valid", quote(s)),
                    Some(&hint),
                );
                None
            }
        }
    }

    fn ssh_keys(&mut self, n: &Node, path: &str) -> Option<Vec<String>> {
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

    fn mount_points(&mut self, n: &Node, path: &str) -> Option<Vec<MountPoint>> {
        let items = self.seq(n, path)?;
        if items.len() > MAX_MOUNT_POINTS {
            self.err(
                n.span,
                path,
                format!(
                    "a container has at most {MAX_MOUNT_POINTS} mount points, got {}",
                    items.len()
                ),
                None,
            );
            return None;
        }
        let mut out = Vec::new();
        let mut seen: BTreeMap<String, usize> = BTreeMap::new();
        for (i, item) in items.iter().enumerate() {
            let ip = join(path, &i.to_string());
            self.record(&ip, item.span);
            let Some(es) = self.map(item, &ip) else {
                continue;
            };
            let (mut ds, mut size, mut mpath, mut backup, mut ro, mut host) =
                (None, None, None, None, None, None);
            let mut ok = true;
            for e in es {
                let p = join(&ip, &e.key);
                self.record(&p, e.value.span);
                if Self::given_empty(e, VOLUME_FIELDS) {
                    continue;
                }
                match e.key.as_str() {
                    "datastore_id" => {
                        ds = self.storage_id(&e.value, &p).or_else(|| {
                            ok = false;
                            None
                        })
                    }
                    "size" => {
                        size = self
                            .int(&e.value, &p, 1, 131_072, " (GiB)")
                            .map(|v| v as u64)
                            .or_else(|| {
                                ok = false;
                                None
                            })
                    }
                    "path" | "host_path" => {
                        let Some(s) = self.string(&e.value, &p) else {
                            ok = false;
                            continue;
                        };
                        if !s.starts_with('/')
                            || s.contains(',')
                            || s.contains("/../")
                            || s.ends_with("/..")
                        {
                            self.err(
                                e.value.span,
                                &p,
                                format!("{} {} must be an absolute path", e.key, quote(&s)),
                                Some("e.g. /srv/data (no ',' and no '..')"),
                            );
                            ok = false;
                        } else if e.key == "path" && s == "/" {
                            self.err(
                                e.value.span,
                                &p,
                                "path '/' is the root file system; mount points go below it",
                                None,
                            );
                            ok = false;
                        } else if e.key == "path" {
                            mpath = Some((s, e.value.span));
                        } else {
                            host = Some(s);
                        }
                    }
                    "backup" => backup = self.boolean(&e.value, &p),
                    "read_only" => ro = self.boolean(&e.value, &p),
                    _ => {
                        self.unknown_field(e, &ip, VOLUME_FIELDS);
                        ok = false;
                    }
                }
            }
            if !ok {
                continue;
            }
            let Some((mpath, mspan)) = mpath else {
                self.err(
                    item.span,
                    &ip,
                    "a mount point needs `path` (where it appears in the container)",
                    None,
                );
                continue;
            };
            if let Some(first) = seen.insert(mpath.clone(), i) {
                self.err(
                    mspan,
                    &join(&ip, "path"),
                    format!("path {mpath} is already used by mount_points.{first}"),
                    None,
                );
                continue;
            }
            let read_only = ro.unwrap_or(false);
            match (host, ds, size) {
                (Some(host_path), None, None) => {
                    if backup.is_some() {
                        self.err(item.span, &ip, "`backup` applies to volumes, not bind mounts", None);
                        continue;
                    }
                    out.push(MountPoint::Bind { host_path, path: mpath, read_only });
                }
                (None, Some(datastore_id), Some(size_gib)) => out.push(MountPoint::Volume {
                    datastore_id,
                    size_gib,
                    path: mpath,
                    backup: backup.unwrap_or(false),
                    read_only,
                }),
                (Some(_), _, _) => self.err(item.span, &ip, "a bind mount has `host_path` and `path` only; `datastore_id` and `size` are for volumes", None),
                (None, _, _) => self.err(
                    item.span,
                    &ip,
                    "a volume mount point needs `datastore_id` and `size` (GiB); a bind mount needs `host_path`",
                    Some("e.g. {datastore_id: local-zfs, size: 10, path: /data} or {host_path: /srv/x, path: /data}"),
                ),
            }
        }
        Some(out)
    }

    // ---------------------------------------------------------------- resolution

    fn resolve(
        &mut self,
        key: &str,
        path: &str,
        c: ContainerInput,
        allow_privileged: bool,
        declared: &[String],
        templates: &mut BTreeMap<String, Template>,
    ) -> Option<Container> {
        let errors_before = self.diags.len();
        let cspan = self.lookup(path);
        let template = match c.template {
            None if c.template_invalid => None,
            None => {
                self.err(
                    cspan,
                    path,
                    "no template: set `template` (a name under `templates:`) or `template_url`",
                    Some("or set `template` once in `defaults`"),
                );
                None
            }
            Some(TemplateChoice::Name(name, span, tp)) => {
                if templates.contains_key(&name) {
                    Some(name)
                } else {
                    let names: Vec<&str> = declared.iter().map(String::as_str).collect();
                    let msg = match did_you_mean(&name, &names) {
                        Some(s) => format!(
                            "template {} is not declared; did you mean '{s}'?",
                            quote(&name)
                        ),
                        None => format!("template {} is not declared", quote(&name)),
                    };
                    let hint = if names.is_empty() {
                        "declare it under `templates:` or use `template_url`".to_owned()
                    } else {
                        format!("declared templates: {}", names.join(", "))
                    };
                    self.err(span, &tp, msg, Some(&hint));
                    None
                }
            }
            Some(TemplateChoice::Url(url)) => Some(inline_template(url, templates)),
        };
        let unprivileged = c.unprivileged.unwrap_or(true);
        if !unprivileged && !allow_privileged {
            let p = join(path, "unprivileged");
            self.err_at(
                &p,
                "unprivileged: false needs `allow_privileged: true` at the top of the fleet",
                Some(
                    "privileged containers are root on the host; keep unprivileged unless you must",
                ),
            );
        }
        let features = Features {
            nesting: c.features.nesting.unwrap_or(false),
            fuse: c.features.fuse.unwrap_or(false),
            keyctl: c.features.keyctl.unwrap_or(false),
            mount: c.features.mount.unwrap_or_default(),
        };
        if features.keyctl && !unprivileged {
            let p = join(path, "features.keyctl");
            self.err_at(
                &p,
                "features.keyctl is for unprivileged containers only (PVE refuses it otherwise)",
                None,
            );
        }
        let mut interfaces =
            Vec::with_capacity(1 + c.extra_interfaces.as_ref().map_or(0, Vec::len));
        if let Some(i) = self.interface(&c.net, path, 0, true) {
            interfaces.push(i);
        }
        for (idx, (net, _)) in c.extra_interfaces.iter().flatten().enumerate() {
            let ipath = net
                .path
                .clone()
                .unwrap_or_else(|| join(path, &format!("extra_interfaces.{idx}")));
            if let Some(i) = self.interface(net, &ipath, idx + 1, false) {
                interfaces.push(i);
            }
        }
        let mut names = std::collections::BTreeSet::new();
        for (i, iface) in interfaces.iter().enumerate() {
            if !names.insert(iface.name.clone()) {
                let p = join(
                    path,
                    &format!("extra_interfaces.{}.name", i.saturating_sub(1)),
                );
                self.err_at(
                    &p,
                    format!("interface name {} is used twice", iface.name),
                    None,
                );
            }
        }
        if self.diags.len() > errors_before {
            return None;
        }
        let startup = if c.startup == StartupInput::default() {
            None
        } else {
            Some(Startup {
                order: c.startup.order,
                up_delay: c.startup.up_delay,
                down_delay: c.startup.down_delay,
            })
        };
        Some(Container {
            name: key.to_owned(),
            vm_id: c.vm_id,
            hostname: c.hostname.unwrap_or_else(|| key.to_owned()),
            node: c.node,
            cores: c.cores,
            cpu_limit: c.cpu_limit,
            cpu_units: c.cpu_units,
            memory: c.memory.unwrap_or(DEFAULT_MEMORY_MIB),
            swap: c.swap.unwrap_or(DEFAULT_SWAP_MIB),
            disk_size: c.disk_size.unwrap_or(DEFAULT_DISK_GIB),
            datastore_id: c.datastore_id,
            template: template?,
            unprivileged,
            features,
            interfaces,
            dns: Dns {
                servers: c.dns_servers.unwrap_or_default(),
                domain: c.dns_domain,
            },
            ssh_public_keys: c.ssh_public_keys.unwrap_or_default(),
            password: c.password,
            startup,
            start_on_boot: c.start_on_boot.unwrap_or(false),
            state: c.state.unwrap_or_default(),
            adopt: c.adopt.unwrap_or(false),
            restart_policy: c.restart_policy.unwrap_or_default(),
            drift: c.drift.unwrap_or_default(),
            ostype: c.ostype,
            protection: c.protection.unwrap_or(false),
            tags: c.tags.unwrap_or_default(),
            description: c.description,
            labels: c.labels.unwrap_or_default(),
            constraints: Constraints {
                nodes: c.constraints.nodes.unwrap_or_default(),
                node_labels: c.constraints.node_labels.unwrap_or_default(),
                anti_affinity: c.constraints.anti_affinity.unwrap_or_default(),
            },
            mount_points: c.mount_points.unwrap_or_default(),
        })
    }

    /// Resolve one interface; `path` is the container path for net0, the extra_interfaces item
    /// path otherwise.
    fn interface(
        &mut self,
        n: &NetInput,
        path: &str,
        index: usize,
        primary: bool,
    ) -> Option<Interface> {
        let ip_path = join(path, "ip_address");
        let gw_path = join(path, "gateway");
        let ipv4 = match (n.ip.clone().unwrap_or(IpSpec::Dhcp), n.gateway) {
            (IpSpec::Static(addr), Some(Gw::Addr(gw))) => {
                if !addr.contains(&gw) {
                    self.err_at(
                        &gw_path,
                        format!(
                            "gateway {gw} is outside the subnet {} of ip_address {addr}",
                            addr.trunc()
                        ),
                        Some(&format!(
                            "a gateway inside {}, such as {}",
                            addr.trunc(),
                            first_host(addr)
                        )),
                    );
                    return None;
                }
                if gw == addr.addr() {
                    self.err_at(
                        &gw_path,
                        format!("gateway {gw} is the container's own address"),
                        Some("the router's address on that subnet"),
                    );
                    return None;
                }
                Ipv4Config::Static {
                    addr,
                    gateway: Some(gw),
                }
            }
            (IpSpec::Static(addr), Some(Gw::None)) => Ipv4Config::Static {
                addr,
                gateway: None,
            },
            (IpSpec::Static(addr), None) => {
                if primary {
                    self.err_at(&ip_path,
                        format!("static address {addr} needs a gateway inside {}", addr.trunc()),
                        Some(&format!("add `gateway: {}` (your router), or `gateway: none` for a network without one", first_host(addr))),
                    );
                    return None;
                }
                Ipv4Config::Static {
                    addr,
                    gateway: None,
                }
            }
            (IpSpec::Dhcp, Some(_)) => {
                self.err_at(
                    &gw_path,
                    "a gateway with `ip_address: dhcp` is an error: DHCP provides the gateway",
                    Some("remove `gateway`, or give a static ip_address"),
                );
                return None;
            }
            (IpSpec::None, Some(_)) => {
                self.err_at(
                    &gw_path,
                    "a gateway with `ip_address: none` is an error",
                    Some("remove `gateway`, or give a static ip_address"),
                );
                return None;
            }
            (IpSpec::Dhcp, None) => Ipv4Config::Dhcp,
            (IpSpec::None, None) => Ipv4Config::None,
        };
        let gw6_path = join(path, "gateway6");
        let ipv6 = match (n.ip6.clone().unwrap_or(Ip6Spec::None), n.gateway6) {
            (Ip6Spec::Static(addr), gw) => {
                if let Some(gw) = gw {
                    if !addr.contains(&gw) && !is_link_local6(gw) {
                        self.err_at(
                            &gw6_path,
                            format!(
                                "gateway6 {gw} is outside the subnet {} of ipv6 {addr}",
                                addr.trunc()
                            ),
                            Some("a gateway inside the subnet, or a link-local fe80:: address"),
                        );
                        return None;
                    }
                }
                Ipv6Config::Static { addr, gateway: gw }
            }
            (other, Some(_)) => {
                let mode = match other {
                    Ip6Spec::Auto => "auto",
                    Ip6Spec::Dhcp => "dhcp",
                    _ => "none",
                };
                self.err_at(
                    &gw6_path,
                    format!("a gateway6 with `ipv6: {mode}` is an error"),
                    Some("remove `gateway6`, or give a static ipv6 CIDR"),
                );
                return None;
            }
            (Ip6Spec::Auto, None) => Ipv6Config::Auto,
            (Ip6Spec::Dhcp, None) => Ipv6Config::Dhcp,
            (Ip6Spec::None, None) => Ipv6Config::None,
        };
        Some(Interface {
            name: n.name.clone().unwrap_or_else(|| format!("eth{index}")),
            bridge: n
                .bridge
                .clone()
                .unwrap_or_else(|| DEFAULT_BRIDGE.to_owned()),
            ipv4,
            ipv6,
            vlan_id: n.vlan_id,
            mtu: n.mtu,
            mac_address: n.mac,
            firewall: n.firewall.unwrap_or(false),
            rate_limit: n.rate_limit,
        })
    }
}

fn first_host(net: Ipv4Net) -> Ipv4Addr {
    net.hosts().next().unwrap_or(net.addr())
}

fn is_link_local6(a: Ipv6Addr) -> bool {
    (a.segments()[0] & 0xffc0) == 0xfe80
}

/// Add (or find) the template a `template_url` shortcut stands for. Its name is the URL's file
/// name, with a short hash of the URL appended if that name is taken by a different template.
fn inline_template(url: String, templates: &mut BTreeMap<String, Template>) -> String {
    let t = Template {
        source: TemplateSource::Url {
            url: url.clone(),
            checksum: None,
        },
        storage: DEFAULT_TEMPLATE_STORAGE.to_owned(),
        seed: TemplateSeed::OnDemand,
    };
    let base = url_file_name(&url).to_owned();
    let hash = hex::encode(&sha2::Sha256::digest(url.as_bytes())[..4]);
    for name in [base.clone(), format!("{base}-{hash}")] {
        match templates.get(&name) {
            Some(existing) if *existing == t => return name,
            Some(_) => continue,
            None => {
                templates.insert(name.clone(), t);
                return name;
            }
        }
    }
    // Both taken by other templates: fall back to the full hash (cannot collide in practice).
    let name = format!(
        "{base}-{}",
        hex::encode(sha2::Sha256::digest(url.as_bytes()))
    );
    templates.insert(name.clone(), t);
    name
}

// ---------------------------------------------------------------- partial (unmerged) input

#[derive(Clone, Debug)]
enum TemplateChoice {
    Name(String, Span, String),
    Url(String),
}

#[derive(Clone, Debug)]
enum IpSpec {
    Dhcp,
    None,
    Static(Ipv4Net),
}

#[derive(Clone, Debug)]
enum Ip6Spec {
    Auto,
    Dhcp,
    None,
    Static(Ipv6Net),
}

#[derive(Clone, Copy, Debug)]
enum Gw {
    None,
    Addr(Ipv4Addr),
}

#[derive(Clone, Debug, Default)]
struct NetInput {
    /// Path of an extra_interfaces item (for diagnostics).
    path: Option<String>,
    name: Option<String>,
    bridge: Option<String>,
    ip: Option<IpSpec>,
    gateway: Option<Gw>,
    ip6: Option<Ip6Spec>,
    gateway6: Option<Ipv6Addr>,
    vlan_id: Option<u16>,
    mtu: Option<u16>,
    mac: Option<MacAddr>,
    firewall: Option<bool>,
    rate_limit: Option<f64>,
}

#[derive(Clone, Debug, Default)]
struct FeaturesInput {
    nesting: Option<bool>,
    fuse: Option<bool>,
    keyctl: Option<bool>,
    mount: Option<Vec<String>>,
}

#[derive(Clone, Debug, Default, PartialEq)]
struct StartupInput {
    order: Option<u32>,
    up_delay: Option<u32>,
    down_delay: Option<u32>,
}

#[derive(Clone, Debug, Default)]
struct ConstraintsInput {
    nodes: Option<Vec<String>>,
    node_labels: Option<BTreeMap<String, String>>,
    anti_affinity: Option<Vec<String>>,
}

/// A container (or `defaults`) as written: every field optional.
#[derive(Clone, Debug, Default)]
struct ContainerInput {
    vm_id: Option<u32>,
    hostname: Option<String>,
    node: Option<String>,
    cores: Option<u32>,
    cpu_limit: Option<f64>,
    cpu_units: Option<u32>,
    memory: Option<u64>,
    swap: Option<u64>,
    disk_size: Option<u64>,
    datastore_id: Option<String>,
    template: Option<TemplateChoice>,
    /// A `template` / `template_url` was given but was invalid (already reported).
    template_invalid: bool,
    unprivileged: Option<bool>,
    features: FeaturesInput,
    net: NetInput,
    extra_interfaces: Option<Vec<(NetInput, Span)>>,
    dns_servers: Option<Vec<IpAddr>>,
    dns_domain: Option<String>,
    ssh_public_keys: Option<Vec<String>>,
    password: Option<Secret>,
    startup: StartupInput,
    start_on_boot: Option<bool>,
    state: Option<DesiredState>,
    protection: Option<bool>,
    adopt: Option<bool>,
    restart_policy: Option<RestartPolicy>,
    drift: Option<DriftPolicy>,
    ostype: Option<String>,
    tags: Option<Vec<String>>,
    description: Option<String>,
    labels: Option<BTreeMap<String, String>>,
    constraints: ConstraintsInput,
    mount_points: Option<Vec<MountPoint>>,
}

fn or<T: Clone>(a: Option<T>, b: &Option<T>) -> Option<T> {
    a.or_else(|| b.clone())
}

impl ContainerInput {
    /// This container's fields over `d` (the defaults): scalars and lists replace, the nested
    /// mappings (features, dns, startup, labels, constraints, the net0 fields) merge key by key.
    fn over(self, d: &ContainerInput) -> ContainerInput {
        let labels = match (self.labels, &d.labels) {
            (Some(mine), Some(theirs)) => {
                let mut m = theirs.clone();
                m.extend(mine);
                Some(m)
            }
            (mine, theirs) => or(mine, theirs),
        };
        ContainerInput {
            vm_id: self.vm_id,
            hostname: self.hostname,
            node: or(self.node, &d.node),
            cores: or(self.cores, &d.cores),
            cpu_limit: or(self.cpu_limit, &d.cpu_limit),
            cpu_units: or(self.cpu_units, &d.cpu_units),
            memory: or(self.memory, &d.memory),
            swap: or(self.swap, &d.swap),
            disk_size: or(self.disk_size, &d.disk_size),
            datastore_id: or(self.datastore_id, &d.datastore_id),
            template: or(self.template, &d.template),
            template_invalid: self.template_invalid || d.template_invalid,
            unprivileged: or(self.unprivileged, &d.unprivileged),
            features: FeaturesInput {
                nesting: or(self.features.nesting, &d.features.nesting),
                fuse: or(self.features.fuse, &d.features.fuse),
                keyctl: or(self.features.keyctl, &d.features.keyctl),
                mount: or(self.features.mount, &d.features.mount),
            },
            net: NetInput {
                path: None,
                name: None,
                bridge: or(self.net.bridge, &d.net.bridge),
                ip: or(self.net.ip, &d.net.ip),
                gateway: or(self.net.gateway, &d.net.gateway),
                ip6: or(self.net.ip6, &d.net.ip6),
                gateway6: or(self.net.gateway6, &d.net.gateway6),
                vlan_id: or(self.net.vlan_id, &d.net.vlan_id),
                mtu: or(self.net.mtu, &d.net.mtu),
                mac: self.net.mac,
                firewall: or(self.net.firewall, &d.net.firewall),
                rate_limit: or(self.net.rate_limit, &d.net.rate_limit),
            },
            extra_interfaces: or(self.extra_interfaces, &d.extra_interfaces),
            dns_servers: or(self.dns_servers, &d.dns_servers),
            dns_domain: or(self.dns_domain, &d.dns_domain),
            ssh_public_keys: or(self.ssh_public_keys, &d.ssh_public_keys),
            password: or(self.password, &d.password),
            startup: StartupInput {
                order: or(self.startup.order, &d.startup.order),
                up_delay: or(self.startup.up_delay, &d.startup.up_delay),
                down_delay: or(self.startup.down_delay, &d.startup.down_delay),
            },
            start_on_boot: or(self.start_on_boot, &d.start_on_boot),
            state: or(self.state, &d.state),
            protection: or(self.protection, &d.protection),
            adopt: self.adopt,
            restart_policy: or(self.restart_policy, &d.restart_policy),
            drift: or(self.drift, &d.drift),
            ostype: or(self.ostype, &d.ostype),
            tags: or(self.tags, &d.tags),
            description: or(self.description, &d.description),
            labels,
            constraints: ConstraintsInput {
                nodes: or(self.constraints.nodes, &d.constraints.nodes),
                node_labels: or(self.constraints.node_labels, &d.constraints.node_labels),
                anti_affinity: or(self.constraints.anti_affinity, &d.constraints.anti_affinity),
            },
            mount_points: or(self.mount_points, &d.mount_points),
        }
    }
}
