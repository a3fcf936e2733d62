//! What pxctl prints for listings: stable records (the field names scripts rely on, documented in
//! docs/pxctl.md) built from the protocol messages, and their three renderings: aligned tables, JSON
//! (an array of records, or for `output` an object keyed by container name) and YAML.

pub mod table;
pub mod yaml;

/// `text` as it may be printed on a terminal: control characters (escape sequences that would recolour,
/// retitle or clear the user's terminal, carriage returns that would overwrite a line) shown escaped
/// (`\u{1b}`), line breaks and tabs kept. Everything that comes from users or nodes (names, file names,
/// descriptions, errors) goes through this before it is printed.
pub fn printable(text: &str) -> std::borrow::Cow<'_, str> {
    if !text
        .chars()
        .any(|c| c.is_control() && c != '\n' && c != '\t')
    {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if c.is_control() && c != '\n' && c != '\t' {
            out.extend(c.escape_unicode());
        } else {
            out.push(c);
        }
    }
    std::borrow::Cow::Owned(out)
}

use std::collections::BTreeMap;
use std::net::IpAddr;

use pxfleet_proto::v1 as pb;
use serde::Serialize;
use serde_json::Value;

use crate::args::ListFormat;
use table::Table;

/// A container as `get containers -o json` prints it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ContainerRecord {
    pub fleet: String,
    pub name: String,
    /// Null until the scheduler placed it.
    pub node: Option<String>,
    /// Null until allocated.
    pub vm_id: Option<u32>,
    pub hostname: String,
    /// pending, creating, running, stopped, updating, destroying, failed.
    pub status: &'static str,
    /// What PVE says: running, stopped, or null when not observed.
    pub power: Option<&'static str>,
    /// First IPv4 address seen (no prefix length), or null.
    pub ipv4: Option<String>,
    /// First global IPv6 address seen (no prefix length), or null.
    pub ipv6: Option<String>,
    pub template: String,
    pub cores: Option<u32>,
    pub memory_mib: u64,
    pub disk_size_gib: u64,
    /// Observed differs from desired: a repair is due.
    pub drifted: bool,
    /// Fields waiting for the container's next restart (`restart_policy: never`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pending_restart: Vec<String>,
    pub revision: u64,
    /// Error of the last failed operation, or null.
    pub error: Option<String>,
    /// Why a container not created yet waits (its clone source is not ready); left out when it does not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting: Option<String>,
}

/// A node as `get nodes -o json` prints it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NodeRecord {
    pub name: String,
    /// ready, down, cordoned, stalled.
    pub status: &'static str,
    /// Why it is down or stalled.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status_reason: Option<String>,
    pub containers: u32,
    pub cores: u32,
    pub memory_mib: u64,
    pub memory_free_mib: u64,
    pub pve_version: String,
    pub cluster: Option<String>,
    pub last_heartbeat: Option<String>,
    pub cordon_reason: Option<String>,
    pub labels: BTreeMap<String, String>,
}

/// An operation as `get operations -o json` prints it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OperationRecord {
    pub op_id: String,
    pub fleet: String,
    pub container: String,
    pub vm_id: Option<u32>,
    pub node: String,
    /// create, update, resize, start, stop, destroy, migrate, seed_template, hook, snapshot.
    pub kind: &'static str,
    /// pending, dispatched, running, succeeded, failed, cancelled.
    pub state: &'static str,
    pub attempts: u32,
    pub created: Option<String>,
    pub updated: Option<String>,
    pub reason: String,
    pub message: String,
    pub error: Option<String>,
}

/// A container's snapshot as `snapshot list -o json` prints it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SnapshotRecord {
    pub name: String,
    /// The snapshot it was taken after (None for the first).
    pub parent: Option<String>,
    /// When it was taken (RFC 3339, UTC), when PVE knows.
    pub taken: Option<String>,
    pub description: String,
}

impl SnapshotRecord {
    pub fn from_pb(s: &pb::Snapshot) -> Self {
        SnapshotRecord {
            name: s.name.clone(),
            parent: some(&s.parent),
            taken: timestamp(s.snaptime.saturating_mul(1000) as i64),
            description: s.description.clone(),
        }
    }
}

/// A fleet as `get fleets -o json` prints it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FleetRecord {
    pub name: String,
    pub revision: u64,
    pub containers: u32,
    pub states: BTreeMap<String, u32>,
    pub updated: Option<String>,
    pub author: String,
}

/// A revision as `history -o json` prints it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RevisionRecord {
    pub revision: u64,
    pub author: String,
    pub time: Option<String>,
    pub summary: String,
    pub file_name: String,
    pub source_sha256: String,
}

/// One container's outputs (`output -o json` is an object of these keyed by container name).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OutputRecord {
    pub vm_id: Option<u32>,
    pub node: Option<String>,
    pub hostname: String,
    pub ipv4: Option<String>,
    pub ipv6: Option<String>,
    /// Present only with `--show-sensitive`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub password: Option<String>,
    /// Whether a password exists (printed as `(sensitive)` in tables without `--show-sensitive`).
    #[serde(skip)]
    pub has_password: bool,
    /// The container's volumes (rootfs, then mp0..): what `mount_points: [{volume: ...}]` of another container
    /// names to mount one.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub volumes: Vec<VolumeRecord>,
}

/// One volume of a container in `pxctl output`.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct VolumeRecord {
    pub disk: String,
    pub path: String,
    pub volume: String,
    pub size_gib: f64,
}

pub fn container_state(s: i32) -> &'static str {
    match pb::ContainerState::try_from(s).unwrap_or(pb::ContainerState::Unspecified) {
        pb::ContainerState::Unspecified => "unknown",
        pb::ContainerState::Pending => "pending",
        pb::ContainerState::Creating => "creating",
        pb::ContainerState::Running => "running",
        pb::ContainerState::Stopped => "stopped",
        pb::ContainerState::Updating => "updating",
        pb::ContainerState::Destroying => "destroying",
        pb::ContainerState::Failed => "failed",
    }
}

pub fn power_state(s: i32) -> Option<&'static str> {
    match pb::PowerState::try_from(s).ok()? {
        pb::PowerState::Running => Some("running"),
        pb::PowerState::Stopped => Some("stopped"),
        pb::PowerState::Unspecified => None,
    }
}

pub fn node_status(s: i32) -> &'static str {
    match pb::NodeStatus::try_from(s).unwrap_or(pb::NodeStatus::Unspecified) {
        pb::NodeStatus::Ready => "ready",
        pb::NodeStatus::Down | pb::NodeStatus::Unspecified => "down",
        pb::NodeStatus::Cordoned => "cordoned",
        pb::NodeStatus::Stalled => "stalled",
    }
}

pub fn op_kind(k: i32) -> &'static str {
    match pb::OperationKind::try_from(k).unwrap_or(pb::OperationKind::Unspecified) {
        pb::OperationKind::Unspecified => "unknown",
        pb::OperationKind::Create => "create",
        pb::OperationKind::Update => "update",
        pb::OperationKind::Resize => "resize",
        pb::OperationKind::Start => "start",
        pb::OperationKind::Stop => "stop",
        pb::OperationKind::Destroy => "destroy",
        pb::OperationKind::Migrate => "migrate",
        pb::OperationKind::SeedTemplate => "seed_template",
        pb::OperationKind::Hook => "hook",
        pb::OperationKind::Snapshot => "snapshot",
    }
}

pub fn op_state(s: i32) -> &'static str {
    match pb::OperationState::try_from(s).unwrap_or(pb::OperationState::Unspecified) {
        pb::OperationState::Unspecified => "unknown",
        pb::OperationState::Pending => "pending",
        pb::OperationState::Dispatched => "dispatched",
        pb::OperationState::Running => "running",
        pb::OperationState::Succeeded => "succeeded",
        pb::OperationState::Failed => "failed",
        pb::OperationState::Cancelled => "cancelled",
    }
}

/// `2026-12-02T15:30:22Z`, or None for 0 (unknown).
pub fn timestamp(unix_ms: i64) -> Option<String> {
    if unix_ms <= 0 {
        return None;
    }
    let t = time::OffsetDateTime::from_unix_timestamp(unix_ms / 1000).ok()?;
    t.format(&time::format_description::well_known::Rfc3339)
        .ok()
}

fn some(s: &str) -> Option<String> {
    (!s.is_empty()).then(|| s.to_string())
}

fn nonzero(n: u32) -> Option<u32> {
    (n != 0).then_some(n)
}

/// The first address of the wanted family, without its prefix length; loopback and link-local are skipped.
pub fn first_address(addresses: &[String], v6: bool) -> Option<String> {
    addresses.iter().find_map(|a| {
        let bare = a.split('/').next().unwrap_or(a).trim();
        let ip: IpAddr = bare.parse().ok()?;
        let usable = match ip {
            IpAddr::V4(v4) if !v6 => {
                !v4.is_loopback() && !v4.is_link_local() && !v4.is_unspecified()
            }
            IpAddr::V6(v6a) if v6 => {
                !v6a.is_loopback()
                    && !v6a.is_unspecified()
                    && (v6a.segments()[0] & 0xffc0) != 0xfe80
            }
            _ => false,
        };
        usable.then(|| ip.to_string())
    })
}

impl From<&pb::ContainerInfo> for ContainerRecord {
    fn from(c: &pb::ContainerInfo) -> Self {
        ContainerRecord {
            fleet: c.fleet.clone(),
            name: c.name.clone(),
            node: some(&c.node),
            vm_id: nonzero(c.vm_id),
            hostname: c.hostname.clone(),
            status: container_state(c.state),
            power: power_state(c.power),
            ipv4: first_address(&c.addresses, false),
            ipv6: first_address(&c.addresses, true),
            template: c.template.clone(),
            cores: c.cores,
            memory_mib: c.memory_mib,
            disk_size_gib: c.disk_size_gib,
            drifted: c.drifted,
            pending_restart: c.pending_restart.clone(),
            revision: c.revision,
            error: some(&c.last_error),
            waiting: some(&c.waiting),
        }
    }
}

impl From<&pb::NodeInfo> for NodeRecord {
    fn from(n: &pb::NodeInfo) -> Self {
        let inv = n.inventory.clone().unwrap_or_default();
        NodeRecord {
            name: n.name.clone(),
            status: node_status(n.status),
            status_reason: some(&n.status_reason),
            containers: n.container_count,
            cores: inv.cores,
            memory_mib: inv.memory_total_bytes / (1024 * 1024),
            memory_free_mib: inv.memory_free_bytes / (1024 * 1024),
            pve_version: inv.pve_version.clone(),
            cluster: some(&inv.cluster_name),
            last_heartbeat: timestamp(n.last_heartbeat_unix_ms),
            cordon_reason: some(&n.cordon_reason),
            labels: inv.labels.into_iter().collect(),
        }
    }
}

impl From<&pb::OperationInfo> for OperationRecord {
    fn from(o: &pb::OperationInfo) -> Self {
        OperationRecord {
            op_id: o.op_id.clone(),
            fleet: o.fleet.clone(),
            container: o.container.clone(),
            vm_id: nonzero(o.vm_id),
            node: o.node.clone(),
            kind: op_kind(o.kind),
            state: op_state(o.state),
            attempts: o.attempts,
            created: timestamp(o.created_unix_ms),
            updated: timestamp(o.updated_unix_ms),
            reason: o.reason.clone(),
            message: o.message.clone(),
            error: some(&o.error),
        }
    }
}

impl From<&pb::FleetSummary> for FleetRecord {
    fn from(f: &pb::FleetSummary) -> Self {
        FleetRecord {
            name: f.name.clone(),
            revision: f.revision,
            containers: f.container_count,
            states: f.states.iter().map(|(k, v)| (k.clone(), *v)).collect(),
            updated: timestamp(f.updated_unix_ms),
            author: f.author.clone(),
        }
    }
}

impl From<&pb::RevisionInfo> for RevisionRecord {
    fn from(r: &pb::RevisionInfo) -> Self {
        RevisionRecord {
            revision: r.revision,
            author: r.author.clone(),
            time: timestamp(r.unix_ms),
            summary: r.summary.clone(),
            file_name: r.file_name.clone(),
            source_sha256: r.source_sha256.clone(),
        }
    }
}

impl OutputRecord {
    pub fn from_pb(c: &pb::ContainerOutput, show_sensitive: bool) -> Self {
        OutputRecord {
            vm_id: nonzero(c.vm_id),
            node: some(&c.node),
            hostname: c.hostname.clone(),
            ipv4: first_address(&c.addresses, false),
            ipv6: first_address(&c.addresses, true),
            password: if show_sensitive {
                c.password.as_ref().map(|s| s.value.clone())
            } else {
                None
            },
            has_password: c.has_password,
            volumes: c
                .volumes
                .iter()
                .map(|v| VolumeRecord {
                    disk: v.disk.clone(),
                    path: v.path.clone(),
                    volume: v.volume.clone(),
                    size_gib: v.size_gib,
                })
                .collect(),
        }
    }
}

fn opt<T: ToString>(v: &Option<T>) -> String {
    v.as_ref().map(ToString::to_string).unwrap_or_default()
}

fn containers_table(rs: &[ContainerRecord]) -> Table {
    let mut t = Table::new(&["fleet", "name", "node", "vm_id", "status", "ipv4", "error"]);
    for r in rs {
        let status = if r.drifted && r.status == "running" {
            "running (drifted)".to_string()
        } else if !r.pending_restart.is_empty() && r.status == "running" {
            format!(
                "running (pending restart: {})",
                r.pending_restart.join(", ")
            )
        } else if let Some(why) = &r.waiting {
            format!("{} ({why})", r.status)
        } else {
            r.status.to_string()
        };
        t.row(vec![
            r.fleet.clone(),
            r.name.clone(),
            opt(&r.node),
            opt(&r.vm_id),
            status,
            opt(&r.ipv4),
            opt(&r.error),
        ]);
    }
    t
}

fn nodes_table(rs: &[NodeRecord]) -> Table {
    let mut t = Table::new(&[
        "name",
        "status",
        "containers",
        "cores",
        "memory",
        "free",
        "pve",
        "reason",
    ]);
    for r in rs {
        t.row(vec![
            r.name.clone(),
            r.status.to_string(),
            r.containers.to_string(),
            r.cores.to_string(),
            format!("{} MiB", r.memory_mib),
            format!("{} MiB", r.memory_free_mib),
            r.pve_version.clone(),
            opt(&r.status_reason.clone().or_else(|| r.cordon_reason.clone())),
        ]);
    }
    t
}

fn operations_table(rs: &[OperationRecord]) -> Table {
    let mut t = Table::new(&[
        "op_id",
        "fleet",
        "container",
        "node",
        "kind",
        "state",
        "attempts",
        "updated",
        "detail",
    ]);
    for r in rs {
        let detail = r.error.clone().unwrap_or_else(|| {
            if r.message.is_empty() {
                r.reason.clone()
            } else {
                r.message.clone()
            }
        });
        t.row(vec![
            r.op_id.clone(),
            r.fleet.clone(),
            r.container.clone(),
            r.node.clone(),
            r.kind.to_string(),
            r.state.to_string(),
            r.attempts.to_string(),
            opt(&r.updated),
            detail,
        ]);
    }
    t
}

fn fleets_table(rs: &[FleetRecord]) -> Table {
    let mut t = Table::new(&[
        "name",
        "revision",
        "containers",
        "states",
        "updated",
        "author",
    ]);
    for r in rs {
        let states: Vec<String> = r
            .states
            .iter()
            .filter(|(_, n)| **n > 0)
            .map(|(s, n)| format!("{n} {s}"))
            .collect();
        t.row(vec![
            r.name.clone(),
            r.revision.to_string(),
            r.containers.to_string(),
            states.join(", "),
            opt(&r.updated),
            r.author.clone(),
        ]);
    }
    t
}

fn history_table(rs: &[RevisionRecord]) -> Table {
    let mut t = Table::new(&["revision", "time", "author", "summary", "file"]);
    for r in rs {
        t.row(vec![
            r.revision.to_string(),
            opt(&r.time),
            r.author.clone(),
            r.summary.clone(),
            r.file_name.clone(),
        ]);
    }
    t
}

fn outputs_table(rs: &BTreeMap<String, OutputRecord>, show_sensitive: bool) -> Table {
    let mut t = Table::new(&[
        "name", "vm_id", "node", "ipv4", "ipv6", "password", "volumes",
    ]);
    for (name, r) in rs {
        let password = match (&r.password, r.has_password) {
            (Some(p), _) if show_sensitive => p.clone(),
            (_, true) => pxfleet_spec::render::SENSITIVE.to_string(),
            _ => String::new(),
        };
        t.row(vec![
            name.clone(),
            opt(&r.vm_id),
            opt(&r.node),
            opt(&r.ipv4),
            opt(&r.ipv6),
            password,
            r.volumes
                .iter()
                .map(|v| format!("{}={}", v.disk, v.volume))
                .collect::<Vec<_>>()
                .join(" "),
        ]);
    }
    t
}

/// JSON text of any record set (pretty, trailing newline).
pub fn json<T: Serialize + ?Sized>(v: &T) -> String {
    let mut s = serde_json::to_string_pretty(v)
        .unwrap_or_else(|e| format!("{{\"error\": {}}}", Value::String(e.to_string())));
    s.push('\n');
    s
}

fn yaml_of<T: Serialize + ?Sized>(v: &T) -> String {
    yaml::to_yaml(&serde_json::to_value(v).unwrap_or(Value::Null))
}

fn emit<T: Serialize>(
    format: ListFormat,
    records: &[T],
    table: impl FnOnce(&[T]) -> Table,
    empty: &str,
) -> String {
    match format {
        ListFormat::Json => json(records),
        ListFormat::Yaml => yaml_of(records),
        ListFormat::Table if records.is_empty() => format!("{empty}\n"),
        ListFormat::Table => table(records).render(),
    }
}

pub fn containers(format: ListFormat, rs: &[ContainerRecord]) -> String {
    emit(format, rs, containers_table, "No containers.")
}

pub fn nodes(format: ListFormat, rs: &[NodeRecord]) -> String {
    emit(
        format,
        rs,
        nodes_table,
        "No nodes. Enrol one: pxctl node token create, then pxagent join on the node.",
    )
}

pub fn operations(format: ListFormat, rs: &[OperationRecord]) -> String {
    emit(format, rs, operations_table, "No operations.")
}

pub fn fleets(format: ListFormat, rs: &[FleetRecord]) -> String {
    emit(
        format,
        rs,
        fleets_table,
        "No fleets. Submit one: pxctl submit fleet.yaml",
    )
}

/// A container without pxfleet's mark as `get unmanaged -o json` prints it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct UnmanagedRecord {
    pub node: String,
    pub vm_id: u32,
    pub hostname: String,
    /// running or stopped.
    pub state: &'static str,
    /// `lock:` of its config (create, migrate, ...) or null.
    pub lock: Option<String>,
}

impl From<&pb::UnmanagedContainer> for UnmanagedRecord {
    fn from(u: &pb::UnmanagedContainer) -> Self {
        UnmanagedRecord {
            node: u.node.clone(),
            vm_id: u.vm_id,
            hostname: u.hostname.clone(),
            state: if u.running { "running" } else { "stopped" },
            lock: some(&u.lock),
        }
    }
}

fn unmanaged_table(rs: &[UnmanagedRecord]) -> Table {
    let mut t = Table::new(&["node", "vm_id", "hostname", "state", "lock"]);
    for r in rs {
        t.row(vec![
            r.node.clone(),
            r.vm_id.to_string(),
            r.hostname.clone(),
            r.state.to_string(),
            opt(&r.lock),
        ]);
    }
    t
}

pub fn unmanaged(format: ListFormat, rs: &[UnmanagedRecord]) -> String {
    emit(
        format,
        rs,
        unmanaged_table,
        "No containers without pxfleet's mark.",
    )
}

pub fn snapshots(format: ListFormat, rs: &[SnapshotRecord]) -> String {
    emit(
        format,
        rs,
        |rs| {
            let mut t = Table::new(&["NAME", "PARENT", "TAKEN", "DESCRIPTION"]);
            for r in rs {
                t.row(vec![
                    printable(&r.name).into_owned(),
                    r.parent
                        .as_deref()
                        .map(printable)
                        .unwrap_or_default()
                        .into_owned(),
                    r.taken.clone().unwrap_or_default(),
                    printable(r.description.lines().next().unwrap_or("")).into_owned(),
                ]);
            }
            t
        },
        "No snapshots.",
    )
}

pub fn history(format: ListFormat, rs: &[RevisionRecord]) -> String {
    emit(format, rs, history_table, "No revisions.")
}

pub fn outputs(
    format: ListFormat,
    rs: &BTreeMap<String, OutputRecord>,
    show_sensitive: bool,
) -> String {
    match format {
        ListFormat::Json => json(rs),
        ListFormat::Yaml => yaml_of(rs),
        ListFormat::Table if rs.is_empty() => "No containers.\n".into(),
        ListFormat::Table => outputs_table(rs, show_sensitive).render(),
    }
}
