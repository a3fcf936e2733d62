//! Conversions between pxfleet.v1 protobuf messages and the controller's domain types. Everything that crosses
//! the wire passes through here; nothing else in the crate builds or reads protobuf containers by hand.

use std::collections::BTreeMap;

use pxfleet_proto::v1 as pb;
use pxfleet_spec::observed::{
    normalise_tags, ManagedMark, ObservedConfig, ObservedContainer as SpecObserved,
    ObservedInterface, PowerState,
};
use pxfleet_spec::{
    Container, Dns, Features, Interface, Ipv4Config, Ipv6Config, Startup, Template, TemplateSource,
};

use crate::model::{
    ContainerStatus, ManagedBy, NodeInventory, NodeStatus, ObservedContainer, OpState, Operation,
    OperationKind, StorageInfo,
};

/// A spec diagnostic as pxctl shows it (the hint appended to the message).
pub fn diagnostic_pb(d: &pxfleet_spec::Diagnostic) -> pb::Diagnostic {
    let mut message = d.message.clone();
    if let Some(h) = &d.hint {
        message.push_str("; ");
        message.push_str(h);
    }
    pb::Diagnostic {
        severity: pb::Severity::Error as i32,
        message,
        file: d.file.clone(),
        line: d.line,
        column: d.column,
        field: d.path.clone(),
    }
}

/// Spec diagnostics as the PlanResponse and SubmitResponse carry them.
pub fn diagnostics_pb(ds: &[pxfleet_spec::Diagnostic]) -> Vec<pb::Diagnostic> {
    ds.iter().map(diagnostic_pb).collect()
}

/// What the fleet's policies found, as pxctl shows it.
pub fn policy_report_pb(r: &crate::policy::PolicyReport) -> pb::PolicyReport {
    pb::PolicyReport {
        policies: r.policies.clone(),
        findings: r
            .findings
            .iter()
            .map(|f| pb::PolicyFinding {
                deny: f.level == pxfleet_policy::Level::Deny,
                policy: f.policy.clone(),
                rule: f.rule.clone(),
                container: f.container.clone().unwrap_or_default(),
                message: f.message.clone(),
            })
            .collect(),
    }
}

/// The volume id a template has on a node: `<storage>:vztmpl/<file>`.
pub fn template_volid(t: &Template) -> String {
    format!("{}:vztmpl/{}", t.storage, t.file_name())
}

pub fn inventory_from_pb(inv: &pb::Inventory) -> NodeInventory {
    NodeInventory {
        pve_version: inv.pve_version.clone(),
        cluster_name: inv.cluster_name.clone(),
        cores: inv.cores,
        memory_mib: inv.memory_total_bytes >> 20,
        memory_free_mib: inv.memory_free_bytes >> 20,
        storages: inv.storages.iter().map(storage_from_pb).collect(),
        bridges: inv.bridges.iter().map(|b| b.name.clone()).collect(),
        templates: inv.templates.iter().map(|t| t.volid.clone()).collect(),
        labels: inv
            .labels
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
    }
}

pub fn storage_from_pb(s: &pb::Storage) -> StorageInfo {
    StorageInfo {
        id: s.id.clone(),
        content: s.content.clone(),
        enabled: s.enabled,
        active: s.active,
        total_bytes: s.total_bytes,
        avail_bytes: s.avail_bytes,
    }
}

fn static_addr(ip: &Option<pb::IpConfig>) -> Option<String> {
    let ip = ip.as_ref()?;
    (ip.mode == pb::IpMode::Static as i32 && !ip.address.is_empty()).then(|| {
        ip.address
            .split('/')
            .next()
            .unwrap_or(&ip.address)
            .to_string()
    })
}

/// An observed container from the agent; `node` is the reporting node (authoritative over the message).
pub fn observed_from_pb(node: &str, o: &pb::ObservedContainer) -> ObservedContainer {
    let cfg = o.config.clone().unwrap_or_default();
    let managed = (o.managed && !cfg.fleet.is_empty()).then(|| ManagedBy {
        fleet: cfg.fleet.clone(),
        name: cfg.name.clone(),
    });
    ObservedContainer {
        node: node.to_string(),
        vm_id: o.vm_id,
        hostname: cfg.hostname.clone(),
        running: o.power == pb::PowerState::Running as i32,
        managed,
        cores: cfg.cores,
        memory_mib: cfg.memory_mib,
        swap_mib: cfg.swap_mib,
        disk_gib: cfg.disk_size_gib,
        static_addresses: cfg
            .interfaces
            .iter()
            .flat_map(|i| [static_addr(&i.ipv4), static_addr(&i.ipv6)])
            .flatten()
            .collect(),
        addresses: o.addresses.clone(),
        lock: (!o.lock.is_empty()).then(|| o.lock.clone()),
        raw_config: o
            .raw_config
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
        config: o.config.as_ref().map(observed_config_from_pb),
    }
}

/// A container's configuration as the agent read it back from `pct config`, in fleet terms: what drift is
/// detected on. PVE's "absent" becomes its meaning (no `features` = all off, no `nameserver` = none); tags and
/// description are normalised the way the planner compares them; an address or MAC that does not parse counts
/// as unset (and so shows up as drift rather than being hidden).
pub fn observed_config_from_pb(c: &pb::ContainerSpec) -> ObservedConfig {
    let mut interfaces: Vec<&pb::NetworkInterface> = c.interfaces.iter().collect();
    interfaces.sort_by_key(|i| i.index);
    let mut mounts: Vec<&pb::MountPoint> = c.mount_points.iter().collect();
    mounts.sort_by_key(|m| m.index);
    let features = c.features.clone().unwrap_or_default();
    let dns = c.dns.clone().unwrap_or_default();
    let non_empty = |s: &str| (!s.is_empty()).then(|| s.to_string());
    ObservedConfig {
        hostname: c.hostname.clone(),
        cores: c.cores,
        cpu_limit: c.cpu_limit,
        cpu_units: c.cpu_units,
        memory: c.memory_mib,
        swap: c.swap_mib,
        disk_size_gib: c.disk_size_gib as f64,
        datastore_id: non_empty(&c.datastore_id),
        template: non_empty(&c.template),
        ostype: non_empty(&c.ostype),
        env: c.env.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
        entrypoint: non_empty(&c.entrypoint),
        arch: non_empty(&c.arch),
        timezone: non_empty(&c.timezone),
        console: pxfleet_spec::Console {
            enabled: c.console,
            tty_count: c.tty,
            mode: non_empty(&c.cmode),
        },
        rootfs: c
            .rootfs
            .as_ref()
            .map(mounts::flags_from_pb)
            .unwrap_or_default(),
        hookscript: non_empty(&c.hookscript),
        rootfs_volume: c.rootfs.as_ref().and_then(|r| non_empty(&r.volume)),
        is_template: c.template_flag,
        pool: non_empty(&c.pool),
        unprivileged: c.unprivileged,
        features: Features {
            nesting: features.nesting,
            fuse: features.fuse,
            keyctl: features.keyctl,
            mount: features.mount,
            mknod: features.mknod,
            force_rw_sys: features.force_rw_sys,
        },
        interfaces: interfaces
            .into_iter()
            .map(|i| ObservedInterface {
                slot: i.index,
                config: interface_from_pb(i),
                addresses: Vec::new(),
            })
            .collect(),
        dns: Dns {
            servers: dns.servers.iter().filter_map(|s| s.parse().ok()).collect(),
            domain: non_empty(&dns.domain),
        },
        startup: c.startup.as_ref().map(|s| Startup {
            order: s.order,
            up_delay: s.up_delay,
            down_delay: s.down_delay,
        }),
        start_on_boot: c.onboot,
        protection: c.protection,
        tags: normalise_tags(&c.tags),
        // The agent sends the user's part, its mark line already taken out; only this container's own mark
        // line would be taken out here again (a mark-like line of the user's own stays).
        description: ManagedMark {
            fleet: c.fleet.clone(),
            name: c.name.clone(),
        }
        .strip_own(&c.description),
        mount_points: mounts.into_iter().map(mounts::observed_mount).collect(),
        devices: mounts::devices_from_pb(&c.devices),
        idmap: mounts::idmap_from_pb(&c.idmap),
    }
}

fn interface_from_pb(i: &pb::NetworkInterface) -> Interface {
    fn mode(ip: &Option<pb::IpConfig>) -> Option<(pb::IpMode, &pb::IpConfig)> {
        ip.as_ref().map(|ip| {
            (
                pb::IpMode::try_from(ip.mode).unwrap_or(pb::IpMode::Unspecified),
                ip,
            )
        })
    }
    let ipv4 = match mode(&i.ipv4) {
        Some((pb::IpMode::Dhcp, _)) => Ipv4Config::Dhcp,
        Some((pb::IpMode::Static, ip)) => match ip.address.parse() {
            Ok(addr) => Ipv4Config::Static {
                addr,
                gateway: ip.gateway.parse().ok(),
            },
            Err(_) => Ipv4Config::None,
        },
        _ => Ipv4Config::None,
    };
    let ipv6 = match mode(&i.ipv6) {
        Some((pb::IpMode::Dhcp, _)) => Ipv6Config::Dhcp,
        Some((pb::IpMode::Auto, _)) => Ipv6Config::Auto,
        Some((pb::IpMode::Static, ip)) => match ip.address.parse() {
            Ok(addr) => Ipv6Config::Static {
                addr,
                gateway: ip.gateway.parse().ok(),
            },
            Err(_) => Ipv6Config::None,
        },
        _ => Ipv6Config::None,
    };
    Interface {
        name: i.name.clone(),
        bridge: i.bridge.clone(),
        ipv4,
        ipv6,
        vlan_id: i.vlan_id.and_then(|v| u16::try_from(v).ok()),
        mtu: i.mtu.and_then(|v| u16::try_from(v).ok()),
        mac_address: i.mac.parse().ok(),
        firewall: i.firewall,
        rate_limit: i.rate_mbps,
        host_managed: i.host_managed,
        link_down: i.link_down,
        // an id PVE could not have stored counts as a change (drift) rather than being hidden
        trunks: i
            .trunks
            .iter()
            .map(|t| u16::try_from(*t).unwrap_or(u16::MAX))
            .collect(),
    }
}

/// The planner's view of one observed container of fleet entry `name`. With a reported config that is the
/// config itself; without one (an older record, or right after a create) it is what was applied (else what is
/// desired) with the observed hostname, size and power, so only those can differ.
pub fn spec_observed(
    fleet: &str,
    name: &str,
    o: &ObservedContainer,
    fallback: Option<&Container>,
) -> Option<SpecObserved> {
    let status = if o.running {
        PowerState::Running
    } else {
        PowerState::Stopped
    };
    let config = match (&o.config, fallback) {
        (Some(c), _) => c.clone(),
        (None, Some(a)) => {
            let mut s = SpecObserved::from_desired(
                fleet,
                a,
                o.vm_id,
                &o.node,
                status,
                a.datastore_id.as_deref().unwrap_or_default(),
                |_| pxfleet_spec::MacAddr([0xbc, 0x24, 0x11, 0, 0, 0]),
            )
            .config;
            s.hostname = o.hostname.clone();
            s.cores = o.cores;
            s.memory = o.memory_mib;
            s.swap = o.swap_mib;
            s.disk_size_gib = o.disk_gib as f64;
            // the MACs are unknown: keep the applied ones so they compare equal
            for (i, iface) in s.interfaces.iter_mut().enumerate() {
                iface.config.mac_address = a.interfaces.get(i).and_then(|x| x.mac_address);
            }
            s
        }
        (None, None) => return None,
    };
    Some(SpecObserved {
        vm_id: o.vm_id,
        node: o.node.clone(),
        status,
        lock: o.lock.clone(),
        // Without a mark (a container `adopt: true` takes over), it stays unmarked for the planner.
        managed: o.managed.as_ref().map(|_| ManagedMark {
            fleet: fleet.to_string(),
            name: name.to_string(),
        }),
        config,
    })
}

/// The wire form of a stored observation (the config as far as the controller keeps it, plus the raw
/// `pct config` pairs).
pub fn observed_pb(o: &ObservedContainer) -> pb::ObservedContainer {
    let (fleet, name) = o
        .managed
        .as_ref()
        .map(|m| (m.fleet.clone(), m.name.clone()))
        .unwrap_or_default();
    pb::ObservedContainer {
        vm_id: o.vm_id,
        power: if o.running {
            pb::PowerState::Running
        } else {
            pb::PowerState::Stopped
        } as i32,
        lock: o.lock.clone().unwrap_or_default(),
        managed: o.managed.is_some(),
        config: Some(pb::ContainerSpec {
            fleet,
            name,
            vm_id: o.vm_id,
            hostname: o.hostname.clone(),
            cores: o.cores,
            memory_mib: o.memory_mib,
            swap_mib: o.swap_mib,
            disk_size_gib: o.disk_gib,
            template_flag: o.config.as_ref().is_some_and(|c| c.is_template),
            pool: o
                .config
                .as_ref()
                .and_then(|c| c.pool.clone())
                .unwrap_or_default(),
            ..Default::default()
        }),
        addresses: o.addresses.clone(),
        disk_used_bytes: None,
        raw_config: o
            .raw_config
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
        node: o.node.clone(),
    }
}

fn ip_pb(mode: pb::IpMode, address: String, gateway: String) -> pb::IpConfig {
    pb::IpConfig {
        mode: mode as i32,
        address,
        gateway,
    }
}

/// The full spec an agent needs to create or update `c` (which must be placed: node, vm_id, datastore set).
pub fn container_spec(
    fleet: &str,
    c: &Container,
    vm_id: u32,
    template: &Template,
    password: Option<&str>,
) -> pb::ContainerSpec {
    pb::ContainerSpec {
        fleet: fleet.to_string(),
        name: c.name.clone(),
        vm_id,
        hostname: c.hostname.clone(),
        cores: c.cores,
        cpu_limit: c.cpu_limit,
        cpu_units: c.cpu_units,
        memory_mib: c.memory,
        swap_mib: c.swap,
        disk_size_gib: c.disk_size,
        datastore_id: c.datastore_id.clone().unwrap_or_default(),
        ostype: c.ostype.clone().unwrap_or_default(),
        entrypoint: c.entrypoint.clone().unwrap_or_default(),
        entrypoint_set: c.entrypoint.is_some(),
        env: c
            .env
            .iter()
            .flatten()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
        env_set: c.env.is_some(),
        arch: c.arch.clone().unwrap_or_default(),
        timezone: c.timezone.clone().unwrap_or_default(),
        console: c.console.enabled,
        tty: c.console.tty_count,
        cmode: c.console.mode.clone().unwrap_or_default(),
        rootfs: Some(mounts::flags_pb(&c.rootfs)),
        hookscript: c.hookscript.clone().unwrap_or_default(),
        template_volid: if template.source.is_clone() {
            String::new()
        } else {
            template_volid(template)
        },
        clone_source: match &template.source {
            TemplateSource::Clone { vm_id, full, .. } => Some(pb::CloneSource {
                vm_id: *vm_id,
                full: *full,
            }),
            _ => None,
        },
        unprivileged: c.unprivileged,
        features: Some(pb::Features {
            nesting: c.features.nesting,
            keyctl: c.features.keyctl,
            fuse: c.features.fuse,
            mknod: c.features.mknod,
            force_rw_sys: c.features.force_rw_sys,
            mount: c.features.mount.clone(),
        }),
        interfaces: c
            .interfaces
            .iter()
            .enumerate()
            .map(|(i, iface)| pb::NetworkInterface {
                name: iface.name.clone(),
                bridge: iface.bridge.clone(),
                ipv4: Some(match &iface.ipv4 {
                    Ipv4Config::Dhcp => ip_pb(pb::IpMode::Dhcp, String::new(), String::new()),
                    Ipv4Config::Static { addr, gateway } => ip_pb(
                        pb::IpMode::Static,
                        addr.to_string(),
                        gateway.map(|g| g.to_string()).unwrap_or_default(),
                    ),
                    Ipv4Config::None => {
                        ip_pb(pb::IpMode::Unspecified, String::new(), String::new())
                    }
                }),
                ipv6: Some(match &iface.ipv6 {
                    Ipv6Config::Auto => ip_pb(pb::IpMode::Auto, String::new(), String::new()),
                    Ipv6Config::Dhcp => ip_pb(pb::IpMode::Dhcp, String::new(), String::new()),
                    Ipv6Config::Static { addr, gateway } => ip_pb(
                        pb::IpMode::Static,
                        addr.to_string(),
                        gateway.map(|g| g.to_string()).unwrap_or_default(),
                    ),
                    Ipv6Config::None => {
                        ip_pb(pb::IpMode::Unspecified, String::new(), String::new())
                    }
                }),
                vlan_id: iface.vlan_id.map(u32::from),
                mtu: iface.mtu.map(u32::from),
                mac: iface.mac_address.map(|m| m.to_string()).unwrap_or_default(),
                firewall: iface.firewall,
                rate_mbps: iface.rate_limit,
                index: i as u32,
                host_managed: iface.host_managed,
                link_down: iface.link_down,
                trunks: iface.trunks.iter().map(|t| u32::from(*t)).collect(),
            })
            .collect(),
        dns: Some(pb::Dns {
            servers: c.dns.servers.iter().map(|s| s.to_string()).collect(),
            domain: c.dns.domain.clone().unwrap_or_default(),
        }),
        ssh_public_keys: c.ssh_public_keys.clone(),
        password: password.map(|p| pb::Secret {
            value: p.to_string(),
        }),
        startup: c.startup.as_ref().map(|s| pb::Startup {
            order: s.order,
            up_delay: s.up_delay,
            down_delay: s.down_delay,
        }),
        onboot: c.start_on_boot,
        protection: c.protection,
        tags: c.tags.clone(),
        description: c.description.clone().unwrap_or_default(),
        mount_points: c
            .mount_points
            .iter()
            .enumerate()
            .map(|(i, m)| mounts::mount_pb(i as u32, m))
            .collect(),
        devices: mounts::devices_pb(&c.devices),
        idmap: mounts::idmap_pb(&c.idmap),
        template: c.template.clone(),
        template_flag: c.state.is_template(),
        pool: c.pool.clone().unwrap_or_default(),
    }
}

pub fn seed_pb(t: &Template) -> pb::SeedTemplate {
    let (url, checksum) = match &t.source {
        TemplateSource::Url { url, checksum } => (
            url.clone(),
            checksum.as_ref().map(|c| match c {
                pxfleet_spec::Checksum::Sha256(h) => pb::seed_template::Checksum::Sha256(h.clone()),
                pxfleet_spec::Checksum::Sha512(h) => pb::seed_template::Checksum::Sha512(h.clone()),
            }),
        ),
        // A catalogue appliance: the agent fetches it with pveam; no URL.
        TemplateSource::Pveam { .. } => (String::new(), None),
        // A volume in storage: the agent only checks that it is there.
        TemplateSource::Volume { .. } => (String::new(), None),
        // Never seeded (always ready, see templates.rs); kept total.
        TemplateSource::Clone { .. } => (String::new(), None),
    };
    pb::SeedTemplate {
        url,
        checksum,
        storage: t.storage.clone(),
        file_name: t.file_name().to_string(),
        existing: matches!(t.source, TemplateSource::Volume { .. }),
    }
}

/// The wire form of an operation; `password` is the container's root password for a create.
pub fn operation_pb(op: &Operation, password: Option<&str>) -> pb::Operation {
    use pb::operation::Kind;
    let kind = match &op.kind {
        OperationKind::SeedTemplate { template, .. } => Kind::SeedTemplate(seed_pb(template)),
        OperationKind::Create {
            container,
            template,
        } => Kind::Create(pb::CreateContainer {
            spec: Some(container_spec(
                &op.fleet, container, op.vm_id, template, password,
            )),
            start: container.state.is_running(),
            wait_ipv4: container.wait_for_ip.ipv4,
            wait_ipv6: container.wait_for_ip.ipv6,
        }),
        OperationKind::Update {
            container,
            template,
            fields,
            restart,
            ..
        } => Kind::Update(pb::UpdateContainer {
            spec: Some(container_spec(
                &op.fleet, container, op.vm_id, template, None,
            )),
            changed_fields: fields.clone(),
            restart_allowed: *restart,
            adopt: fields.iter().any(|f| f == pxfleet_spec::plan::ADOPT_FIELD),
        }),
        OperationKind::Resize { disk, disk_gib } => Kind::Resize(pb::ResizeDisk {
            disk: disk.clone(),
            size_gib: *disk_gib,
        }),
        OperationKind::Start => Kind::Start(pb::StartContainer {}),
        OperationKind::Stop => Kind::Stop(pb::StopContainer {
            force: false,
            timeout_seconds: 60,
        }),
        OperationKind::Destroy => Kind::Destroy(pb::DestroyContainer {
            fleet: op.fleet.clone(),
            name: op.container.clone(),
            purge: true,
        }),
        OperationKind::Migrate { target, restart } => Kind::Migrate(pb::MigrateContainer {
            target_node: target.clone(),
            restart: *restart,
        }),
        OperationKind::Snapshot(s) => Kind::Snapshot(pb::SnapshotContainer {
            action: s.action.as_str().into(),
            name: s.name.clone(),
            description: s.description.clone(),
            start: s.start,
        }),
    };
    pb::Operation {
        op_id: op.id.clone(),
        vm_id: op.vm_id,
        deadline_unix_ms: op.deadline_ms.unwrap_or(0) as i64,
        attempt: op.attempt,
        kind: Some(kind),
    }
}

pub fn op_kind_pb(k: &OperationKind) -> pb::OperationKind {
    match k {
        OperationKind::SeedTemplate { .. } => pb::OperationKind::SeedTemplate,
        OperationKind::Create { .. } => pb::OperationKind::Create,
        OperationKind::Update { .. } => pb::OperationKind::Update,
        OperationKind::Resize { .. } => pb::OperationKind::Resize,
        OperationKind::Start => pb::OperationKind::Start,
        OperationKind::Stop => pb::OperationKind::Stop,
        OperationKind::Destroy => pb::OperationKind::Destroy,
        OperationKind::Migrate { .. } => pb::OperationKind::Migrate,
        OperationKind::Snapshot(_) => pb::OperationKind::Snapshot,
    }
}

pub fn snapshot_from_pb(s: pb::Snapshot) -> pxfleet_pve::Snapshot {
    pxfleet_pve::Snapshot {
        name: s.name,
        description: s.description,
        snaptime: s.snaptime,
        parent: Some(s.parent).filter(|p| !p.is_empty()),
    }
}

pub fn snapshot_pb(s: &pxfleet_pve::Snapshot) -> pb::Snapshot {
    pb::Snapshot {
        name: s.name.clone(),
        description: s.description.clone(),
        snaptime: s.snaptime,
        parent: s.parent.clone().unwrap_or_default(),
    }
}

pub fn op_state_pb(s: OpState) -> pb::OperationState {
    match s {
        OpState::Pending => pb::OperationState::Pending,
        OpState::Dispatched => pb::OperationState::Dispatched,
        OpState::Running => pb::OperationState::Running,
        OpState::Succeeded => pb::OperationState::Succeeded,
        OpState::Failed => pb::OperationState::Failed,
    }
}

pub fn operation_info(op: &Operation) -> pb::OperationInfo {
    pb::OperationInfo {
        op_id: op.id.clone(),
        fleet: op.fleet.clone(),
        container: op.container.clone(),
        vm_id: op.vm_id,
        node: op.node.clone(),
        kind: op_kind_pb(&op.kind) as i32,
        state: op_state_pb(op.state) as i32,
        attempts: op.attempt,
        created_unix_ms: op.created_ms as i64,
        updated_unix_ms: op.finished_ms.or(op.dispatched_ms).unwrap_or(op.created_ms) as i64,
        deadline_unix_ms: op.deadline_ms.unwrap_or(0) as i64,
        message: String::new(),
        error: op.last_error.clone().unwrap_or_default(),
        reason: op.reason.clone(),
        snapshots: match &op.kind {
            OperationKind::Snapshot(s) => s.snapshots.iter().map(snapshot_pb).collect(),
            _ => Vec::new(),
        },
    }
}

pub fn container_state_pb(s: ContainerStatus) -> pb::ContainerState {
    match s {
        ContainerStatus::Pending => pb::ContainerState::Pending,
        ContainerStatus::Creating => pb::ContainerState::Creating,
        ContainerStatus::Running => pb::ContainerState::Running,
        ContainerStatus::Stopped => pb::ContainerState::Stopped,
        ContainerStatus::Updating => pb::ContainerState::Updating,
        ContainerStatus::Destroying => pb::ContainerState::Destroying,
        ContainerStatus::Failed => pb::ContainerState::Failed,
    }
}

pub fn node_status_pb(s: NodeStatus) -> pb::NodeStatus {
    match s {
        NodeStatus::Ready => pb::NodeStatus::Ready,
        NodeStatus::Down => pb::NodeStatus::Down,
        NodeStatus::Cordoned => pb::NodeStatus::Cordoned,
        NodeStatus::Stalled => pb::NodeStatus::Stalled,
    }
}

/// The inventory as the controller stores it, back in wire form (for `get nodes`).
pub fn inventory_pb(name: &str, inv: &NodeInventory) -> pb::Inventory {
    pb::Inventory {
        node: name.to_string(),
        pve_version: inv.pve_version.clone(),
        cluster_name: inv.cluster_name.clone(),
        cores: inv.cores,
        memory_total_bytes: inv.memory_mib << 20,
        memory_free_bytes: inv.memory_free_mib << 20,
        storages: inv
            .storages
            .iter()
            .map(|s| pb::Storage {
                id: s.id.clone(),
                content: s.content.clone(),
                total_bytes: s.total_bytes,
                avail_bytes: s.avail_bytes,
                used_bytes: s.total_bytes.saturating_sub(s.avail_bytes),
                active: s.active,
                enabled: s.enabled,
                ..Default::default()
            })
            .collect(),
        bridges: inv
            .bridges
            .iter()
            .map(|b| pb::Bridge {
                name: b.clone(),
                active: true,
                ..Default::default()
            })
            .collect(),
        templates: inv
            .templates
            .iter()
            .map(|v| pb::CachedTemplate {
                volid: v.clone(),
                ..Default::default()
            })
            .collect(),
        labels: inv
            .labels
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect::<BTreeMap<_, _>>()
            .into_iter()
            .collect(),
        ..Default::default()
    }
}

mod mounts;
mod rows;

pub use rows::{audit_record_pb, certificate_info, hook_result_pb, hook_run_info, unmanaged_pb};

#[cfg(test)]
mod tests;
