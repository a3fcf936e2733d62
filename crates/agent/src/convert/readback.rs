//! A container's stored PVE configuration read back into an observed `ContainerSpec`.

use super::*;

use super::options::{is_true, prop_map};

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
