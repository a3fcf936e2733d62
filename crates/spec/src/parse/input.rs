//! The partial (unmerged) form of a container or `defaults`: every field optional, as
//! written, and the field-by-field merge of a container over `defaults`.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnet::{Ipv4Net, Ipv6Net};

use crate::model::*;

#[derive(Clone, Debug)]
pub(super) enum TemplateChoice {
    Name(String, Span, String),
    Url(String),
}

#[derive(Clone, Debug)]
pub(super) enum IpSpec {
    Dhcp,
    None,
    Static(Ipv4Net),
}

#[derive(Clone, Debug)]
pub(super) enum Ip6Spec {
    Auto,
    Dhcp,
    None,
    Static(Ipv6Net),
}

#[derive(Clone, Copy, Debug)]
pub(super) enum Gw {
    None,
    Addr(Ipv4Addr),
}

#[derive(Clone, Debug, Default)]
pub(super) struct NetInput {
    /// Path of an extra_interfaces item (for diagnostics).
    pub(super) path: Option<String>,
    pub(super) name: Option<String>,
    pub(super) bridge: Option<String>,
    pub(super) ip: Option<IpSpec>,
    pub(super) gateway: Option<Gw>,
    pub(super) ip6: Option<Ip6Spec>,
    pub(super) gateway6: Option<Ipv6Addr>,
    pub(super) vlan_id: Option<u16>,
    pub(super) mtu: Option<u16>,
    pub(super) mac: Option<MacAddr>,
    pub(super) firewall: Option<bool>,
    pub(super) rate_limit: Option<f64>,
    pub(super) host_managed: Option<bool>,
    pub(super) link_down: Option<bool>,
    pub(super) trunks: Option<Vec<u16>>,
}

/// `rootfs:` as given (each sub-field may come from `defaults`).
#[derive(Clone, Debug, Default)]
pub(super) struct RootfsInput {
    pub(super) mount_options: Option<Vec<String>>,
    pub(super) acl: Option<bool>,
    pub(super) quota: Option<bool>,
    pub(super) replicate: Option<bool>,
}

#[derive(Clone, Debug, Default)]
pub(super) struct FeaturesInput {
    pub(super) nesting: Option<bool>,
    pub(super) fuse: Option<bool>,
    pub(super) keyctl: Option<bool>,
    pub(super) mknod: Option<bool>,
    pub(super) force_rw_sys: Option<bool>,
    pub(super) mount: Option<Vec<String>>,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub(super) struct StartupInput {
    pub(super) order: Option<u32>,
    pub(super) up_delay: Option<u32>,
    pub(super) down_delay: Option<u32>,
}

#[derive(Clone, Debug, Default)]
pub(super) struct ConstraintsInput {
    pub(super) nodes: Option<Vec<String>>,
    pub(super) node_labels: Option<BTreeMap<String, String>>,
    pub(super) anti_affinity: Option<Vec<String>>,
}

/// A container (or `defaults`) as written: every field optional.
#[derive(Clone, Debug, Default)]
pub(super) struct ContainerInput {
    pub(super) vm_id: Option<u32>,
    pub(super) hostname: Option<String>,
    pub(super) node: Option<String>,
    pub(super) cores: Option<u32>,
    pub(super) cpu_limit: Option<f64>,
    pub(super) cpu_units: Option<u32>,
    pub(super) memory: Option<u64>,
    pub(super) swap: Option<u64>,
    pub(super) disk_size: Option<u64>,
    pub(super) datastore_id: Option<String>,
    pub(super) template: Option<TemplateChoice>,
    /// A `template` / `template_url` was given but was invalid (already reported).
    pub(super) template_invalid: bool,
    pub(super) unprivileged: Option<bool>,
    pub(super) features: FeaturesInput,
    pub(super) net: NetInput,
    pub(super) extra_interfaces: Option<Vec<(NetInput, Span)>>,
    pub(super) dns_servers: Option<Vec<IpAddr>>,
    pub(super) dns_domain: Option<String>,
    pub(super) ssh_public_keys: Option<Vec<String>>,
    pub(super) password: Option<Secret>,
    pub(super) startup: StartupInput,
    pub(super) start_on_boot: Option<bool>,
    pub(super) state: Option<DesiredState>,
    pub(super) protection: Option<bool>,
    pub(super) adopt: Option<bool>,
    pub(super) restart_policy: Option<RestartPolicy>,
    pub(super) drift: Option<DriftPolicy>,
    pub(super) ostype: Option<String>,
    pub(super) env: Option<BTreeMap<String, String>>,
    pub(super) entrypoint: Option<String>,
    pub(super) arch: Option<String>,
    pub(super) timezone: Option<String>,
    pub(super) console: Console,
    /// `wait_for_ip:` ipv4, ipv6, each merged from `defaults` on its own.
    pub(super) wait_for_ip: (Option<bool>, Option<bool>),
    pub(super) rootfs: RootfsInput,
    pub(super) hookscript: Option<String>,
    pub(super) pool: Option<String>,
    pub(super) tags: Option<Vec<String>>,
    pub(super) description: Option<String>,
    pub(super) labels: Option<BTreeMap<String, String>>,
    pub(super) constraints: ConstraintsInput,
    pub(super) mount_points: Option<Vec<MountPoint>>,
    pub(super) devices: Option<Vec<Device>>,
    pub(super) idmap: Option<Vec<IdMap>>,
}

pub(super) fn or<T: Clone>(a: Option<T>, b: &Option<T>) -> Option<T> {
    a.or_else(|| b.clone())
}

impl ContainerInput {
    /// This container's fields over `d` (the defaults): scalars and lists replace, the nested
    /// mappings (features, dns, startup, labels, constraints, the net0 fields) merge key by key.
    pub(super) fn over(self, d: &ContainerInput) -> ContainerInput {
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
                mknod: or(self.features.mknod, &d.features.mknod),
                force_rw_sys: or(self.features.force_rw_sys, &d.features.force_rw_sys),
                mount: or(self.features.mount, &d.features.mount),
            },
            net: NetInput {
                path: None,
                name: or(self.net.name, &d.net.name),
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
                host_managed: or(self.net.host_managed, &d.net.host_managed),
                link_down: or(self.net.link_down, &d.net.link_down),
                trunks: or(self.net.trunks, &d.net.trunks),
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
            env: or(self.env, &d.env),
            entrypoint: or(self.entrypoint, &d.entrypoint),
            arch: or(self.arch, &d.arch),
            timezone: or(self.timezone, &d.timezone),
            console: Console {
                enabled: or(self.console.enabled, &d.console.enabled),
                tty_count: or(self.console.tty_count, &d.console.tty_count),
                mode: or(self.console.mode, &d.console.mode),
            },
            hookscript: or(self.hookscript, &d.hookscript),
            pool: or(self.pool, &d.pool),
            wait_for_ip: (
                or(self.wait_for_ip.0, &d.wait_for_ip.0),
                or(self.wait_for_ip.1, &d.wait_for_ip.1),
            ),
            rootfs: RootfsInput {
                mount_options: or(self.rootfs.mount_options, &d.rootfs.mount_options),
                acl: or(self.rootfs.acl, &d.rootfs.acl),
                quota: or(self.rootfs.quota, &d.rootfs.quota),
                replicate: or(self.rootfs.replicate, &d.rootfs.replicate),
            },
            tags: or(self.tags, &d.tags),
            description: or(self.description, &d.description),
            labels,
            constraints: ConstraintsInput {
                nodes: or(self.constraints.nodes, &d.constraints.nodes),
                node_labels: or(self.constraints.node_labels, &d.constraints.node_labels),
                anti_affinity: or(self.constraints.anti_affinity, &d.constraints.anti_affinity),
            },
            mount_points: or(self.mount_points, &d.mount_points),
            devices: or(self.devices, &d.devices),
            idmap: or(self.idmap, &d.idmap),
        }
    }
}
