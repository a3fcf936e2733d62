//! Builders shared by the planner's integration tests: fleets as values (no YAML) and their observation.
#![allow(dead_code)]

use std::collections::BTreeMap;

use pxfleet_spec::model::*;
use pxfleet_spec::observed::{ObservedContainer, PowerState};
use pxfleet_spec::plan::simulate::generated_mac;

pub fn iface(name: &str) -> Interface {
    Interface {
        name: name.to_owned(),
        bridge: "vmbr0".to_owned(),
        ipv4: Ipv4Config::Dhcp,
        ipv6: Ipv6Config::None,
        vlan_id: None,
        mtu: None,
        mac_address: None,
        firewall: false,
        rate_limit: None,
        host_managed: false,
        link_down: false,
        trunks: vec![],
    }
}

pub fn static_iface(name: &str, cidr: &str, gw: &str) -> Interface {
    Interface {
        ipv4: Ipv4Config::Static {
            addr: cidr.parse().unwrap(),
            gateway: Some(gw.parse().unwrap()),
        },
        ..iface(name)
    }
}

/// A container with the defaults a parsed file would give, placed on pve1.
pub fn container(name: &str, vm_id: Option<u32>) -> Container {
    Container {
        name: name.to_owned(),
        vm_id,
        hostname: name.to_owned(),
        node: Some("pve1".to_owned()),
        cores: Some(2),
        cpu_limit: None,
        cpu_units: None,
        memory: 1024,
        swap: 512,
        disk_size: 8,
        datastore_id: Some("local-lvm".to_owned()),
        template: "debian-13".to_owned(),
        unprivileged: true,
        features: Features {
            nesting: true,
            ..Features::default()
        },
        interfaces: vec![iface("eth0")],
        dns: Dns::default(),
        ssh_public_keys: vec![],
        password: None,
        startup: None,
        start_on_boot: false,
        state: Default::default(),
        adopt: false,
        restart_policy: Default::default(),
        drift: Default::default(),
        ostype: None,
        env: Default::default(),
        entrypoint: None,
        arch: None,
        timezone: None,
        console: Default::default(),
        rootfs: Default::default(),
        hookscript: None,
        wait_for_ip: Default::default(),
        pool: None,
        protection: false,
        tags: vec![],
        description: None,
        labels: BTreeMap::new(),
        constraints: Constraints::default(),
        mount_points: vec![],
        devices: vec![],
        idmap: vec![],
    }
}

pub fn fleet(name: &str, containers: Vec<Container>) -> Fleet {
    let mut templates = BTreeMap::new();
    for t in ["debian-13", "ubuntu-25.04"] {
        templates.insert(
            t.to_owned(),
            Template {
                source: TemplateSource::Pveam {
                    appliance: format!("{t}-standard_amd64.tar.zst"),
                },
                storage: "local".to_owned(),
                seed: Default::default(),
            },
        );
    }
    Fleet {
        name: name.to_owned(),
        allow_privileged: false,
        templates,
        containers: containers
            .into_iter()
            .map(|c| (c.name.clone(), c))
            .collect(),
        hooks: vec![],
        spans: Spans::default(),
    }
}

/// What the nodes report once `f` is applied perfectly: containers without vm_id get 1000, 1001, ...;
/// without node, `pve1`.
pub fn observe(f: &Fleet, status: PowerState) -> Vec<ObservedContainer> {
    let mut next = 1000;
    f.containers
        .values()
        .map(|c| {
            let vm_id = c.vm_id.unwrap_or_else(|| {
                next += 1;
                next - 1
            });
            let node = c.node.clone().unwrap_or_else(|| "pve1".to_owned());
            ObservedContainer::from_desired(&f.name, c, vm_id, &node, status, "local-lvm", |i| {
                generated_mac(vm_id, i)
            })
        })
        .collect()
}
