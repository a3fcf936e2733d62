//! Conversions at the edge: protobuf (`pxfleet.v1`) operations into the agent's [`Operation`]s,
//! a `ContainerSpec` into PVE options (`net0=name=eth0,bridge=...`), and back: a container's PVE
//! config into an observed `ContainerSpec`, results and inventory into protobuf messages.

use std::collections::BTreeMap;
use std::time::{SystemTime, UNIX_EPOCH};

use pxfleet_proto::v1;
use pxfleet_pve::parse::{disk_size, parse_bool};

use crate::node::{CtConfig, ManagedMark, NodeFacts, Secret};
use crate::observe::ObservedContainer;
use crate::ops::{CreateOp, Digest, OpKind, OpUpdate, Operation, TemplateSource, TemplateSpec};

/// An operation the agent cannot understand.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
#[error("operation {op_id}: field `{field}`: {message}")]
pub struct ConvertError {
    pub op_id: String,
    pub field: &'static str,
    pub message: String,
}

pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

fn bool01(b: bool) -> String {
    if b { "1" } else { "0" }.to_string()
}

/// Renders one interface as PVE stores it: `name=...,<other keys alphabetical>,type=veth`.
pub fn net_string(i: &v1::NetworkInterface) -> String {
    let mut kv: BTreeMap<&str, String> = BTreeMap::new();
    if !i.bridge.is_empty() {
        kv.insert("bridge", i.bridge.clone());
    }
    if i.firewall {
        kv.insert("firewall", "1".into());
    }
    if !i.mac.is_empty() {
        kv.insert("hwaddr", i.mac.to_ascii_uppercase());
    }
    if let Some(ip) = &i.ipv4 {
        match v1::IpMode::try_from(ip.mode).unwrap_or(v1::IpMode::Unspecified) {
            v1::IpMode::Dhcp => {
                kv.insert("ip", "dhcp".into());
            }
            v1::IpMode::Static => {
                kv.insert("ip", ip.address.clone());
            }
            v1::IpMode::Manual => {
                kv.insert("ip", "manual".into());
            }
            _ => {}
        }
        if !ip.gateway.is_empty() {
            kv.insert("gw", ip.gateway.clone());
        }
    }
    if let Some(ip) = &i.ipv6 {
        match v1::IpMode::try_from(ip.mode).unwrap_or(v1::IpMode::Unspecified) {
            v1::IpMode::Dhcp => {
                kv.insert("ip6", "dhcp".into());
            }
            v1::IpMode::Static => {
                kv.insert("ip6", ip.address.clone());
            }
            v1::IpMode::Manual => {
                kv.insert("ip6", "manual".into());
            }
            v1::IpMode::Auto => {
                kv.insert("ip6", "auto".into());
            }
            _ => {}
        }
        if !ip.gateway.is_empty() {
            kv.insert("gw6", ip.gateway.clone());
        }
    }
    if let Some(m) = i.mtu {
        kv.insert("mtu", m.to_string());
    }
    if let Some(r) = i.rate_mbps {
        kv.insert("rate", r.to_string());
    }
    if let Some(t) = i.vlan_id {
        kv.insert("tag", t.to_string());
    }
    let mut out = format!("name={}", i.name);
    for (k, v) in kv {
        out.push_str(&format!(",{k}={v}"));
    }
    out.push_str(",type=veth");
    out
}

/// A PVE boolean that is set: `1/yes/on/true` as PVE reads it (pve's parser, the only one).
fn is_true(v: &str) -> bool {
    parse_bool(v.trim()) == Some(true)
}

fn prop_map(s: &str) -> BTreeMap<String, String> {
    s.split(',')
        .filter_map(|p| p.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn normalise_net(s: &str, ignore_hwaddr: bool) -> BTreeMap<String, String> {
    let mut m = prop_map(s);
    if ignore_hwaddr {
        m.remove("hwaddr");
    }
    m.entry("type".into()).or_insert_with(|| "veth".into());
    for k in ["firewall", "link_down"] {
        if m.get(k).map(String::as_str) == Some("0") {
            m.remove(k);
        }
    }
    if let Some(h) = m.get_mut("hwaddr") {
        *h = h.to_ascii_uppercase();
    }
    m
}

/// Whether a stored `netN` and a desired one mean the same (a desired value without `hwaddr`
/// accepts whatever MAC PVE generated).
pub fn same_net(current: &str, desired: &str) -> bool {
    let ignore = !prop_map(desired).contains_key("hwaddr");
    normalise_net(current, ignore) == normalise_net(desired, ignore)
}

/// A desired `netN` without `hwaddr` takes the current one, so `pct set` keeps the MAC.
pub fn keep_hwaddr(current: &str, desired: &str) -> String {
    if prop_map(desired).contains_key("hwaddr") {
        return desired.to_string();
    }
    match prop_map(current).get("hwaddr") {
        Some(mac) => {
            let mut m = prop_map(desired);
            m.insert("hwaddr".into(), mac.clone());
            let name = m.remove("name").unwrap_or_default();
            let ty = m.remove("type").unwrap_or_else(|| "veth".into());
            let mut out = format!("name={name}");
            for (k, v) in m {
                out.push_str(&format!(",{k}={v}"));
            }
            out.push_str(&format!(",type={ty}"));
            out
        }
        None => desired.to_string(),
    }
}

/// The PVE options for a spec (create and update), without tags, description, password and keys.
pub fn spec_options(spec: &v1::ContainerSpec) -> Vec<(String, String)> {
    let mut o: Vec<(String, String)> = Vec::new();
    let mut push = |k: &str, v: String| o.push((k.to_string(), v));
    if !spec.hostname.is_empty() {
        push("hostname", spec.hostname.clone());
    }
    if let Some(c) = spec.cores {
        push("cores", c.to_string());
    }
    if let Some(l) = spec.cpu_limit {
        if l > 0.0 {
            push("cpulimit", l.to_string());
        }
    }
    if let Some(u) = spec.cpu_units {
        push("cpuunits", u.to_string());
    }
    if spec.memory_mib > 0 {
        push("memory", spec.memory_mib.to_string());
    }
    push("swap", spec.swap_mib.to_string());
    if !spec.datastore_id.is_empty() && spec.disk_size_gib > 0 {
        push(
            "rootfs",
            format!("{}:{}", spec.datastore_id, spec.disk_size_gib),
        );
    }
    push("unprivileged", bool01(spec.unprivileged));
    if let Some(f) = &spec.features {
        let mut parts = Vec::new();
        if f.fuse {
            parts.push("fuse=1".to_string());
        }
        if f.keyctl {
            parts.push("keyctl=1".to_string());
        }
        if f.mknod {
            parts.push("mknod=1".to_string());
        }
        if !f.mount.is_empty() {
            parts.push(format!("mount={}", f.mount.join(";")));
        }
        if f.nesting {
            parts.push("nesting=1".to_string());
        }
        if !parts.is_empty() {
            push("features", parts.join(","));
        }
    }
    for i in &spec.interfaces {
        push(&format!("net{}", i.index), net_string(i));
    }
    if let Some(dns) = &spec.dns {
        if !dns.servers.is_empty() {
            push("nameserver", dns.servers.join(" "));
        }
        if !dns.domain.is_empty() {
            push("searchdomain", dns.domain.clone());
        }
    }
    if let Some(s) = &spec.startup {
        let mut parts = Vec::new();
        if let Some(x) = s.order {
            parts.push(format!("order={x}"));
        }
        if let Some(x) = s.up_delay {
            parts.push(format!("up={x}"));
        }
        if let Some(x) = s.down_delay {
            parts.push(format!("down={x}"));
        }
        if !parts.is_empty() {
            push("startup", parts.join(","));
        }
    }
    if spec.onboot {
        push("onboot", "1".into());
    }
    if !spec.ostype.is_empty() {
        push("ostype", spec.ostype.clone());
    }
    if spec.protection {
        push("protection", "1".into());
    }
    for m in &spec.mount_points {
        let mut v = if m.host_path.is_empty() {
            format!("{}:{}", m.datastore_id, m.size_gib)
        } else {
            m.host_path.clone()
        };
        v.push_str(&format!(",mp={}", m.path));
        if m.backup {
            v.push_str(",backup=1");
        }
        if !m.mount_options.is_empty() {
            v.push_str(&format!(",mountoptions={}", m.mount_options.join(";")));
        }
        if m.read_only {
            v.push_str(",ro=1");
        }
        push(&format!("mp{}", m.index), v);
    }
    o
}

fn mark_of(spec: &v1::ContainerSpec) -> Option<ManagedMark> {
    if spec.fleet.is_empty() || spec.name.is_empty() {
        None
    } else {
        Some(ManagedMark {
            fleet: spec.fleet.clone(),
            name: spec.name.clone(),
        })
    }
}

/// `STORAGE:vztmpl/FILE` into its parts.
pub fn parse_template_volid(volid: &str) -> Option<(String, String)> {
    let (storage, rest) = volid.split_once(':')?;
    let file = rest.strip_prefix("vztmpl/")?;
    if storage.is_empty() || file.is_empty() || file.contains('/') {
        return None;
    }
    Some((storage.to_string(), file.to_string()))
}

/// Converts a controller operation into the agent's own.
pub fn operation_from_proto(op: v1::Operation) -> Result<Operation, ConvertError> {
    use v1::operation::Kind;
    let op_id = op.op_id.clone();
    let err = |field: &'static str, message: String| ConvertError {
        op_id: op_id.clone(),
        field,
        message,
    };
    if op.op_id.is_empty() {
        return Err(err("op_id", "empty; every operation needs an id".into()));
    }
    let vmid = op.vm_id;
    let need_vmid = || {
        if vmid < 100 {
            Err(err(
                "vm_id",
                format!("{vmid} is not a container id (100..)"),
            ))
        } else {
            Ok(vmid)
        }
    };
    let kind = match op.kind {
        None => return Err(err("kind", "missing; expected create, update, ...".into())),
        Some(Kind::Create(c)) => {
            let spec = c.spec.ok_or_else(|| err("create.spec", "missing".into()))?;
            let mark = mark_of(&spec)
                .ok_or_else(|| err("create.spec.fleet", "fleet and name are required".into()))?;
            let vmid = if spec.vm_id != 0 {
                spec.vm_id
            } else {
                need_vmid()?
            };
            let (storage, file_name) =
                parse_template_volid(&spec.template_volid).ok_or_else(|| {
                    err(
                        "create.spec.template_volid",
                        format!(
                            "`{}` is not a template volume id; expected STORAGE:vztmpl/FILE",
                            spec.template_volid
                        ),
                    )
                })?;
            OpKind::Create(CreateOp {
                vmid,
                mark,
                template: TemplateSpec {
                    storage,
                    file_name,
                    source: TemplateSource::Existing,
                },
                options: spec_options(&spec),
                tags: spec.tags.clone(),
                description: Some(spec.description.clone()).filter(|d| !d.is_empty()),
                ssh_public_keys: spec.ssh_public_keys.clone(),
                password: spec
                    .password
                    .as_ref()
                    .filter(|p| !p.value.is_empty())
                    .map(|p| Secret(p.value.clone())),
                start: c.start,
            })
        }
        Some(Kind::Update(u)) => {
            let spec = u.spec.ok_or_else(|| err("update.spec", "missing".into()))?;
            OpKind::Update {
                vmid: if spec.vm_id != 0 {
                    spec.vm_id
                } else {
                    need_vmid()?
                },
                expect: mark_of(&spec),
                desired: spec_options(&spec),
                tags: spec.tags.clone(),
                description: Some(spec.description.clone()).filter(|d| !d.is_empty()),
                restart: u.restart_allowed,
                adopt: u.adopt,
            }
        }
        Some(Kind::Resize(r)) => {
            if r.disk != "rootfs"
                && !r
                    .disk
                    .strip_prefix("mp")
                    .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
            {
                return Err(err(
                    "resize.disk",
                    format!("`{}`; expected rootfs or mpN", r.disk),
                ));
            }
            OpKind::Resize {
                vmid: need_vmid()?,
                expect: None,
                disk: r.disk,
                size_gib: r.size_gib,
            }
        }
        Some(Kind::Start(_)) => OpKind::Start {
            vmid: need_vmid()?,
            expect: None,
        },
        Some(Kind::Stop(s)) => OpKind::Stop {
            vmid: need_vmid()?,
            expect: None,
            force: s.force,
            timeout_secs: if s.timeout_seconds == 0 {
                60
            } else {
                s.timeout_seconds
            },
        },
        Some(Kind::Destroy(d)) => OpKind::Destroy {
            vmid: need_vmid()?,
            expect: if d.fleet.is_empty() {
                None
            } else {
                Some(ManagedMark {
                    fleet: d.fleet,
                    name: d.name,
                })
            },
            purge: d.purge,
        },
        Some(Kind::Migrate(m)) => {
            if m.target_node.is_empty() {
                return Err(err("migrate.target_node", "empty".into()));
            }
            OpKind::Migrate {
                vmid: need_vmid()?,
                expect: None,
                target: m.target_node,
                restart: m.restart,
            }
        }
        Some(Kind::SeedTemplate(s)) => {
            let digest = match s.checksum {
                Some(v1::seed_template::Checksum::Sha256(h)) => {
                    Some(Digest::Sha256(h.to_ascii_lowercase()))
                }
                Some(v1::seed_template::Checksum::Sha512(h)) => {
                    Some(Digest::Sha512(h.to_ascii_lowercase()))
                }
                None if s.url.is_empty() => {
                    // An appliance name from the PVE index: pveam verifies it.
                    return Ok(Operation {
                        id: op.op_id,
                        kind: OpKind::SeedTemplate(TemplateSpec {
                            storage: s.storage,
                            file_name: s.file_name,
                            source: TemplateSource::Appliance,
                        }),
                    });
                }
                // A `template_url` without checksum: downloaded unverified, its sha256 reported.
                None => None,
            };
            if let Some(digest) = &digest {
                let expect_len = match digest {
                    Digest::Sha256(_) => 64,
                    Digest::Sha512(_) => 128,
                };
                if digest.hex().len() != expect_len
                    || !digest.hex().bytes().all(|b| b.is_ascii_hexdigit())
                {
                    return Err(err(
                        "seed_template.checksum",
                        format!(
                            "`{}` is not a {} hex digest",
                            digest.hex(),
                            digest.algorithm()
                        ),
                    ));
                }
            }
            OpKind::SeedTemplate(TemplateSpec {
                storage: s.storage,
                file_name: s.file_name,
                source: TemplateSource::Url { url: s.url, digest },
            })
        }
    };
    Ok(Operation { id: op.op_id, kind })
}

fn parse_ip(v: Option<&String>, gw: Option<&String>) -> Option<v1::IpConfig> {
    let v = v?;
    let mode = match v.as_str() {
        "dhcp" => v1::IpMode::Dhcp,
        "manual" => v1::IpMode::Manual,
        "auto" => v1::IpMode::Auto,
        _ => v1::IpMode::Static,
    };
    Some(v1::IpConfig {
        mode: mode as i32,
        address: if mode == v1::IpMode::Static {
            v.clone()
        } else {
            String::new()
        },
        gateway: gw.cloned().unwrap_or_default(),
    })
}

/// Reads a container's PVE config back into a `ContainerSpec` (no password, no template).
pub fn config_to_spec(vmid: u32, cfg: &CtConfig) -> v1::ContainerSpec {
    let mark = cfg
        .get("description")
        .and_then(|d| ManagedMark::from_description(d));
    let description = cfg
        .get("description")
        .map(|d| {
            d.lines()
                .filter(|l| ManagedMark::from_description(l).is_none())
                .collect::<Vec<_>>()
                .join("\n")
        })
        .unwrap_or_default();
    let num = |k: &str| cfg.get(k).and_then(|v| v.parse::<u64>().ok());
    let flag = |k: &str| cfg.get(k).is_some_and(|v| is_true(v));
    let (datastore_id, disk_size_gib) = cfg
        .get("rootfs")
        .map(|r| {
            let ds = r.split(':').next().unwrap_or("").to_string();
            let gib = disk_size(r).map(|b| b.div_ceil(1 << 30)).unwrap_or(0);
            (ds, gib)
        })
        .unwrap_or_default();
    let features = cfg.get("features").map(|f| {
        let m = prop_map(f);
        v1::Features {
            nesting: m.get("nesting").is_some_and(|v| is_true(v)),
            keyctl: m.get("keyctl").is_some_and(|v| is_true(v)),
            fuse: m.get("fuse").is_some_and(|v| is_true(v)),
            mknod: m.get("mknod").is_some_and(|v| is_true(v)),
            mount: m
                .get("mount")
                .map(|v| v.split(';').map(String::from).collect())
                .unwrap_or_default(),
        }
    });
    let mut interfaces = Vec::new();
    let mut mount_points = Vec::new();
    for (k, v) in cfg {
        if let Some(n) = k.strip_prefix("net").and_then(|n| n.parse::<u32>().ok()) {
            let m = prop_map(v);
            interfaces.push(v1::NetworkInterface {
                name: m.get("name").cloned().unwrap_or_default(),
                bridge: m.get("bridge").cloned().unwrap_or_default(),
                ipv4: parse_ip(m.get("ip"), m.get("gw")),
                ipv6: parse_ip(m.get("ip6"), m.get("gw6")),
                vlan_id: m.get("tag").and_then(|t| t.parse().ok()),
                mtu: m.get("mtu").and_then(|t| t.parse().ok()),
                mac: m.get("hwaddr").cloned().unwrap_or_default(),
                firewall: m.get("firewall").is_some_and(|v| is_true(v)),
                rate_mbps: m.get("rate").and_then(|t| t.parse().ok()),
                index: n,
            });
        } else if let Some(n) = k.strip_prefix("mp").and_then(|n| n.parse::<u32>().ok()) {
            let first = v.split(',').next().unwrap_or("");
            let m = prop_map(v);
            let bind = first.starts_with('/');
            mount_points.push(v1::MountPoint {
                index: n,
                datastore_id: if bind {
                    String::new()
                } else {
                    first.split(':').next().unwrap_or("").to_string()
                },
                size_gib: disk_size(v).map(|b| b.div_ceil(1 << 30)).unwrap_or(0),
                path: m.get("mp").cloned().unwrap_or_default(),
                host_path: if bind {
                    first.to_string()
                } else {
                    String::new()
                },
                backup: m.get("backup").is_some_and(|v| is_true(v)),
                read_only: m.get("ro").is_some_and(|v| is_true(v)),
                mount_options: m
                    .get("mountoptions")
                    .map(|v| v.split(';').map(String::from).collect())
                    .unwrap_or_default(),
                volume: if bind {
                    String::new()
                } else {
                    first.to_string()
                },
            });
        }
    }
    let dns = if cfg.contains_key("nameserver") || cfg.contains_key("searchdomain") {
        Some(v1::Dns {
            servers: cfg
                .get("nameserver")
                .map(|s| s.split_whitespace().map(String::from).collect())
                .unwrap_or_default(),
            domain: cfg.get("searchdomain").cloned().unwrap_or_default(),
        })
    } else {
        None
    };
    let startup = cfg.get("startup").map(|s| {
        let mut st = v1::Startup::default();
        for part in s.split(',') {
            match part.split_once('=') {
                Some(("order", v)) => st.order = v.parse().ok(),
                Some(("up", v)) => st.up_delay = v.parse().ok(),
                Some(("down", v)) => st.down_delay = v.parse().ok(),
                None => st.order = part.parse().ok(),
                _ => {}
            }
        }
        st
    });
    v1::ContainerSpec {
        fleet: mark.as_ref().map(|m| m.fleet.clone()).unwrap_or_default(),
        name: mark.as_ref().map(|m| m.name.clone()).unwrap_or_default(),
        vm_id: vmid,
        hostname: cfg.get("hostname").cloned().unwrap_or_default(),
        cores: cfg.get("cores").and_then(|v| v.parse().ok()),
        cpu_limit: cfg.get("cpulimit").and_then(|v| v.parse().ok()),
        cpu_units: cfg.get("cpuunits").and_then(|v| v.parse().ok()),
        memory_mib: num("memory").unwrap_or(512),
        swap_mib: num("swap").unwrap_or(0),
        disk_size_gib,
        datastore_id,
        template_volid: String::new(),
        unprivileged: flag("unprivileged"),
        features,
        interfaces,
        dns,
        ssh_public_keys: vec![],
        password: None,
        startup,
        onboot: flag("onboot"),
        protection: flag("protection"),
        tags: cfg
            .get("tags")
            .map(|t| {
                crate::observe::split_tags(t)
                    .into_iter()
                    .filter(|t| t != crate::node::MANAGED_TAG)
                    .collect()
            })
            .unwrap_or_default(),
        description,
        mount_points,
        template: String::new(),
        ostype: cfg.get("ostype").cloned().unwrap_or_default(),
    }
}

/// An observed container as protobuf.
pub fn observed_to_proto(o: &ObservedContainer, node: &str) -> v1::ObservedContainer {
    let power = match o.status.as_str() {
        "running" => v1::PowerState::Running,
        "stopped" => v1::PowerState::Stopped,
        _ => v1::PowerState::Unspecified,
    };
    v1::ObservedContainer {
        vm_id: o.vmid,
        power: power as i32,
        lock: o.lock.clone().unwrap_or_default(),
        managed: o.managed.is_some(),
        config: Some(config_to_spec(o.vmid, &o.config)),
        addresses: o.addresses.clone(),
        disk_used_bytes: None,
        raw_config: o
            .config
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
        node: node.to_string(),
    }
}

/// An operation update as protobuf.
pub fn update_to_proto(u: &OpUpdate, vmid: u32, node: &str) -> v1::OperationUpdate {
    let mut out = v1::OperationUpdate {
        op_id: u.op_id().to_string(),
        vm_id: vmid,
        unix_ms: now_ms(),
        ..Default::default()
    };
    match u {
        OpUpdate::Progress { message, .. } => {
            out.state = v1::OperationState::Running as i32;
            out.message = message.clone();
        }
        OpUpdate::Succeeded { result, .. } => {
            out.state = v1::OperationState::Succeeded as i32;
            out.message = match &result.template_volid {
                Some(v) => format!("{}: {v}", result.message),
                None => result.message.clone(),
            };
            out.container = result
                .container
                .as_ref()
                .map(|c| observed_to_proto(c, node));
            out.template_sha256 = result.template_sha256.clone().unwrap_or_default();
        }
        OpUpdate::Failed { failure, .. } => {
            out.state = v1::OperationState::Failed as i32;
            out.message = if failure.retryable {
                "failed (retryable)".into()
            } else {
                "failed".into()
            };
            out.error = failure.error.clone();
        }
    }
    out
}

/// The node's inventory for a hello.
pub fn inventory(
    node: &str,
    facts: &NodeFacts,
    containers: &[ObservedContainer],
    labels: &BTreeMap<String, String>,
) -> v1::Inventory {
    v1::Inventory {
        node: node.to_string(),
        pve_version: facts.pve_version.clone(),
        cluster_name: String::new(),
        cores: facts.cores,
        memory_total_bytes: facts.memory_bytes,
        memory_free_bytes: facts.memory_free_bytes,
        storages: storages(facts),
        bridges: facts
            .bridges
            .iter()
            .map(|b| v1::Bridge {
                name: b.name.clone(),
                mtu: b.mtu,
                active: b.active,
                cidrs: b.cidrs.clone(),
            })
            .collect(),
        templates: templates(facts),
        containers: containers
            .iter()
            .map(|c| observed_to_proto(c, node))
            .collect(),
        labels: labels.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
        agent_version: env!("CARGO_PKG_VERSION").to_string(),
    }
}

pub fn storages(facts: &NodeFacts) -> Vec<v1::Storage> {
    facts
        .storages
        .iter()
        .map(|s| v1::Storage {
            id: s.id.clone(),
            r#type: s.kind.clone(),
            content: s.content.clone(),
            total_bytes: s.total_bytes,
            avail_bytes: s.avail_bytes,
            used_bytes: s.used_bytes,
            path: s.path.clone().unwrap_or_default(),
            active: s.active,
            enabled: s.enabled,
            shared: s.shared,
        })
        .collect()
}

pub fn templates(facts: &NodeFacts) -> Vec<v1::CachedTemplate> {
    facts
        .templates
        .iter()
        .map(|t| v1::CachedTemplate {
            volid: t.volid.clone(),
            storage: t.storage.clone(),
            file_name: t.file_name.clone(),
            size_bytes: t.size_bytes,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> v1::ContainerSpec {
        v1::ContainerSpec {
            fleet: "dev".into(),
            name: "dev-web".into(),
            vm_id: 2100,
            hostname: "dev-web".into(),
            cores: Some(4),
            memory_mib: 4096,
            swap_mib: 0,
            disk_size_gib: 16,
            datastore_id: "local-zfs".into(),
            template_volid: "local:vztmpl/ubuntu.tar.xz".into(),
            unprivileged: true,
            features: Some(v1::Features {
                nesting: true,
                ..Default::default()
            }),
            interfaces: vec![v1::NetworkInterface {
                name: "eth0".into(),
                bridge: "vmbr0".into(),
                ipv4: Some(v1::IpConfig {
                    mode: v1::IpMode::Static as i32,
                    address: "192.168.7.100/24".into(),
                    gateway: "192.168.7.1".into(),
                }),
                index: 0,
                ..Default::default()
            }],
            startup: Some(v1::Startup {
                order: Some(3),
                up_delay: Some(60),
                down_delay: Some(60),
            }),
            tags: vec!["web".into()],
            password: Some(v1::Secret {
                value: "s3cret-pw".into(),
            }),
            ..Default::default()
        }
    }

    #[test]
    fn spec_renders_as_pve_stores_it() {
        let o: BTreeMap<_, _> = spec_options(&spec()).into_iter().collect();
        assert_eq!(
            o["net0"],
            "name=eth0,bridge=vmbr0,gw=192.168.7.1,ip=192.168.7.100/24,type=veth"
        );
        assert_eq!(o["rootfs"], "local-zfs:16");
        assert_eq!(o["features"], "nesting=1");
        assert_eq!(o["startup"], "order=3,up=60,down=60");
        assert_eq!(o["unprivileged"], "1");
        assert_eq!(o["swap"], "0");
        assert!(!o.contains_key("password"));
    }

    #[test]
    fn create_operation_converts_and_keeps_the_password_out_of_debug() {
        let op = v1::Operation {
            op_id: "op-1".into(),
            vm_id: 2100,
            kind: Some(v1::operation::Kind::Create(v1::CreateContainer {
                spec: Some(spec()),
                start: true,
            })),
            ..Default::default()
        };
        let op = operation_from_proto(op).unwrap();
        let OpKind::Create(c) = &op.kind else {
            panic!("not a create")
        };
        assert_eq!(c.template.volid(), "local:vztmpl/ubuntu.tar.xz");
        assert_eq!(
            c.mark.description_line(),
            "managed-by: pxfleet fleet=dev name=dev-web"
        );
        assert!(c.password.is_some());
        assert!(!format!("{op:?}").contains("s3cret-pw"));
    }

    #[test]
    fn a_seed_result_carries_the_template_sha256() {
        let u = OpUpdate::Succeeded {
            op_id: "op-9".into(),
            result: crate::ops::OpResult {
                message: "template present".into(),
                container: None,
                template_volid: Some("local:vztmpl/x.tar.xz".into()),
                template_sha256: Some("ab".repeat(32)),
            },
        };
        let pb = update_to_proto(&u, 0, "n1");
        assert_eq!(pb.template_sha256, "ab".repeat(32));
        assert_eq!(pb.state, v1::OperationState::Succeeded as i32);
    }

    #[test]
    fn bad_operations_name_the_field() {
        let op = v1::Operation {
            op_id: "op-2".into(),
            vm_id: 100,
            kind: Some(v1::operation::Kind::SeedTemplate(v1::SeedTemplate {
                url: "http://127.0.0.1/x.tar.xz".into(),
                checksum: Some(v1::seed_template::Checksum::Sha256("abc".into())),
                storage: "local".into(),
                file_name: "x.tar.xz".into(),
            })),
            ..Default::default()
        };
        let e = operation_from_proto(op).unwrap_err().to_string();
        assert!(e.contains("seed_template.checksum"), "{e}");
        // A URL without checksum (fleet.yaml `template_url`) is a download without verification.
        let op = operation_from_proto(v1::Operation {
            op_id: "op-4".into(),
            kind: Some(v1::operation::Kind::SeedTemplate(v1::SeedTemplate {
                url: "http://127.0.0.1/x.tar.xz".into(),
                checksum: None,
                storage: "local".into(),
                file_name: "x.tar.xz".into(),
            })),
            ..Default::default()
        })
        .unwrap();
        assert!(matches!(
            op.kind,
            OpKind::SeedTemplate(TemplateSpec {
                source: TemplateSource::Url { digest: None, .. },
                ..
            })
        ));
        let e = operation_from_proto(v1::Operation {
            op_id: "op-3".into(),
            ..Default::default()
        })
        .unwrap_err();
        assert_eq!(e.field, "kind");
    }

    #[test]
    fn config_reads_back_into_the_same_spec() {
        let s = spec();
        let mut cfg: CtConfig = spec_options(&s).into_iter().collect();
        cfg.insert(
            "rootfs".into(),
            "local-zfs:subvol-2100-disk-0,size=16G".into(),
        );
        cfg.insert(
            "description".into(),
            "managed-by: pxfleet fleet=dev name=dev-web\n".into(),
        );
        cfg.insert("tags".into(), "pxfleet;web".into());
        let back = config_to_spec(2100, &cfg);
        assert_eq!(back.fleet, "dev");
        assert_eq!(back.name, "dev-web");
        assert_eq!(back.disk_size_gib, 16);
        assert_eq!(back.datastore_id, "local-zfs");
        assert_eq!(back.tags, vec!["web".to_string()]);
        assert_eq!(back.description, "");
        assert_eq!(back.interfaces, s.interfaces);
        assert_eq!(back.startup, s.startup);
        assert_eq!(back.features, s.features);
        assert_eq!(back.cores, Some(4));
    }

    #[test]
    fn nets_compare_without_generated_mac() {
        let cur = "name=eth0,bridge=vmbr0,hwaddr=BC:24:11:00:00:01,ip=dhcp,type=veth";
        assert!(same_net(cur, "name=eth0,bridge=vmbr0,ip=dhcp,type=veth"));
        assert!(!same_net(cur, "name=eth0,bridge=vmbr1,ip=dhcp,type=veth"));
        assert_eq!(
            keep_hwaddr(cur, "name=eth0,bridge=vmbr1,ip=dhcp,type=veth"),
            "name=eth0,bridge=vmbr1,hwaddr=BC:24:11:00:00:01,ip=dhcp,type=veth"
        );
    }

    #[test]
    fn pve_booleans_read_back_like_pve_reads_them() {
        let mut cfg = CtConfig::new();
        cfg.insert("onboot".into(), "yes".into());
        cfg.insert("protection".into(), "on".into());
        cfg.insert("unprivileged".into(), "true".into());
        cfg.insert("features".into(), "nesting=yes,keyctl=off".into());
        cfg.insert(
            "net0".into(),
            "name=eth0,bridge=vmbr0,firewall=true,ip=dhcp,type=veth".into(),
        );
        cfg.insert(
            "mp0".into(),
            "local-lvm:vm-1-disk-1,mp=/data,backup=on,ro=yes,mountoptions=noatime;nodev,size=4G"
                .into(),
        );
        let s = config_to_spec(100, &cfg);
        assert!(s.onboot && s.protection && s.unprivileged);
        let f = s.features.unwrap();
        assert!(f.nesting && !f.keyctl);
        assert!(s.interfaces[0].firewall);
        let mp = &s.mount_points[0];
        assert!(mp.backup && mp.read_only);
        assert_eq!(mp.size_gib, 4);
        assert_eq!(mp.mount_options, vec!["noatime", "nodev"]);
    }
}
