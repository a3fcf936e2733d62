//! The `fleet.yaml` decoder: from the positioned YAML tree ([`crate::yaml`]) to the resolved
//! [`Fleet`], checking every field on the way (types, ranges, syntax) and recording where each
//! came from. `defaults` and each container decode into the same partial form, merged
//! field by field (container over defaults, nested mappings merged key by key), then resolved.
//! Cross-container rules live in [`crate::check`].
//!
//! Per section: `fleet` (the top level), `templates`, `container` (one container or
//! `defaults`), `network`, `mounts`, `hooks`; `input` holds the partial form and its merge,
//! `resolve` turns a merged container into a [`Container`], `reader` the typed node readers.

use crate::diag::{Diagnostic, Diagnostics};
use crate::files::{FileSource, NoFiles};
use crate::hooks::Hook;
use crate::model::*;
use crate::yaml;

mod container;
mod devices;
mod fleet;
mod hooks;
mod input;
mod mounts;
mod network;
mod reader;
mod resolve;
mod runtime;
mod system;
mod templates;

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
pub(crate) const TEMPLATE_FIELDS: &[&str] = &[
    "url", "sha256", "sha512", "storage", "pveam", "volume", "clone", "seed",
];
pub(crate) const CLONE_FIELDS: &[&str] = &["vm_id", "node", "full", "datastore_id"];
/// The fields of an entry of `extra_interfaces`: every interface field (the planner compares the same ones).
pub(crate) const EXTRA_NET_FIELDS: &[&str] = &crate::plan::diff::field::IFACE_FIELDS;
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
    "link_down",
    "trunks",
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
    "devices",
    "idmap",
    "state",
    "adopt",
    "restart_policy",
    "drift",
    "ostype",
    "env",
    "entrypoint",
    "arch",
    "timezone",
    "console",
    "rootfs",
    "hookscript",
    "wait_for_ip",
    "pool",
    "interface_name",
    "host_managed",
];
const ROOTFS_FIELDS: &[&str] = &["mount_options", "acl", "quota", "replicate"];
const CONSOLE_FIELDS: &[&str] = &["enabled", "tty_count", "type"];
const WAIT_FOR_IP_FIELDS: &[&str] = &["ipv4", "ipv6"];
const FEATURE_FIELDS: &[&str] = &[
    "nesting",
    "fuse",
    "keyctl",
    "mount",
    "mknod",
    "force_rw_sys",
];
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
    "volume",
    "volume_of",
    "mount_options",
    "acl",
    "quota",
    "replicate",
    "shared",
    "keepattrs",
    "idmap",
];
const DEVICE_FIELDS: &[&str] = &["path", "mode", "uid", "gid", "deny_write"];
const IDMAP_FIELDS: &[&str] = &["type", "container_id", "host_id", "size"];
/// The longest `description` accepted: PVE keeps 8 KiB, less room for the agent's `managed-by:` mark line.
pub const MAX_DESCRIPTION_BYTES: usize = 8192 - 512;

/// Fields that cannot come from `defaults`: each container needs its own.
const NOT_DEFAULTABLE: &[&str] = &["vm_id", "hostname", "mac_address"];

/// Most network interfaces PVE gives a container (net0..net31).
pub const MAX_INTERFACES: usize = 32;
/// Most mount points PVE gives a container (mp0..mp255).
pub const MAX_MOUNT_POINTS: usize = 256;
/// Most passed-through devices PVE gives a container (dev0..dev255).
pub const MAX_DEVICES: usize = 256;

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
        hook_definitions: false,
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
    /// Decoding the controller's hook definitions (`[hooks.NAME]`), not a fleet's `hooks:`: `${param:KEY}`
    /// placeholders allowed; `on`, `containers`, `use` and `params` are the fleet's.
    hook_definitions: bool,
}

/// The hooks the controller's configuration defines (`[hooks.NAME]`, given here as the YAML or JSON text of
/// the mapping NAME -> definition), with the checks of a fleet's `hooks:`; a definition has no `on`,
/// `containers`, `use` or `params` (a fleet that uses it gives those) and may use `${param:KEY}`.
pub fn parse_hook_definitions(file_name: &str, text: &str) -> Result<Vec<Hook>, Diagnostics> {
    let mut diags = Vec::new();
    let root = yaml::parse(file_name, text, &mut diags);
    let mut cx = Cx {
        file: file_name,
        files: &NoFiles,
        diags,
        spans: Spans::default(),
        recorded: Spans::default(),
        container_start: 0,
        hook_definitions: true,
    };
    let hooks = match root {
        Some(root) if !root.is_null() => cx.hooks(&root),
        _ => vec![],
    };
    if cx.diags.is_empty() {
        Ok(hooks)
    } else {
        let mut d = Diagnostics(cx.diags);
        d.sort();
        Err(d)
    }
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
        "mp" | "mountpoints" | "mounts" | "volumes" | "mount_point" => ("mount_points", None),
        "device_passthrough" | "dev" | "devs" => ("devices", None),
        "idmaps" | "id_map" | "lxc.idmap" => ("idmap", None),
        "mountoptions" | "mount_option" => ("mount_options", None),
        "ro" | "readonly" => ("read_only", None),
        "deny-write" | "denywrite" => ("deny_write", None),
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
