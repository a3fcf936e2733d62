//! Builders for unit tests: a minimal resolved spec container and template, nodes with inventory.

use std::collections::BTreeMap;

use pxfleet_spec::{
    Constraints, Container, Dns, Features, Interface, Ipv4Config, Ipv6Config, Template,
    TemplateSource,
};

use crate::model::{NodeInventory, NodeRecord, StorageInfo};

pub fn template() -> Template {
    Template {
        source: TemplateSource::Url {
            url: "http://127.0.0.1/ubuntu.tar.xz".into(),
            checksum: None,
        },
        storage: "local".into(),
        seed: Default::default(),
    }
}

pub fn container(name: &str) -> Container {
    Container {
        name: name.into(),
        vm_id: None,
        hostname: name.into(),
        node: None,
        cores: Some(1),
        cpu_limit: None,
        cpu_units: None,
        memory: 512,
        swap: 512,
        disk_size: 4,
        datastore_id: Some("local-lvm".into()),
        template: "ubuntu".into(),
        unprivileged: true,
        features: Features::default(),
        interfaces: vec![Interface {
            name: "eth0".into(),
            bridge: "vmbr0".into(),
            ipv4: Ipv4Config::Dhcp,
            ipv6: Ipv6Config::None,
            vlan_id: None,
            mtu: None,
            mac_address: None,
            firewall: false,
            rate_limit: None,
        }],
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
        protection: false,
        tags: vec![],
        description: None,
        labels: BTreeMap::new(),
        constraints: Constraints::default(),
        mount_points: vec![],
    }
}

/// A ready node with `local-lvm` (rootdir, 100 GiB free), `local` (vztmpl) and `vmbr0`.
pub fn node(name: &str, memory_free_mib: u64) -> NodeRecord {
    NodeRecord {
        name: name.into(),
        inventory: NodeInventory {
            pve_version: "9.0.3".into(),
            cores: 8,
            memory_mib: 16384,
            memory_free_mib,
            storages: vec![
                StorageInfo {
                    id: "local-lvm".into(),
                    content: vec!["rootdir".into(), "images".into()],
                    enabled: true,
                    active: true,
                    total_bytes: 200 << 30,
                    avail_bytes: 100 << 30,
                },
                StorageInfo {
                    id: "local".into(),
                    content: vec!["vztmpl".into(), "iso".into()],
                    enabled: true,
                    active: true,
                    total_bytes: 50 << 30,
                    avail_bytes: 40 << 30,
                },
            ],
            bridges: vec!["vmbr0".into()],
            templates: vec![],
            labels: BTreeMap::new(),
        },
        cordoned: false,
        cordon_reason: String::new(),
        cert_serial: String::new(),
        last_seen_ms: 1,
        last_op_update_ms: 0,
        enrolled_ms: 1,
        seeded: BTreeMap::new(),
        template_digests: BTreeMap::new(),
    }
}
