//! A container's PVE configuration, as pve's typed [`ContainerConfig`], read back into an observed
//! `ContainerSpec`.

use super::*;

use pxfleet_pve::parse::{MountPoint, NetConfig};
use pxfleet_pve::DeviceSpec;

fn ip_config(v: Option<&String>, gw: Option<&String>) -> Option<v1::IpConfig> {
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

fn gib(bytes: Option<u64>) -> u64 {
    bytes.map(|b| b.div_ceil(1 << 30)).unwrap_or(0)
}

fn interface(index: u32, n: &NetConfig) -> v1::NetworkInterface {
    v1::NetworkInterface {
        name: n.name.clone(),
        bridge: n.bridge.clone().unwrap_or_default(),
        ipv4: ip_config(n.ip.as_ref(), n.gw.as_ref()),
        ipv6: ip_config(n.ip6.as_ref(), n.gw6.as_ref()),
        vlan_id: n.tag.map(u32::from),
        mtu: n.mtu,
        mac: n.hwaddr.clone().unwrap_or_default(),
        firewall: n.firewall.unwrap_or(false),
        rate_mbps: n.rate,
        index,
        host_managed: n.host_managed.unwrap_or(false),
        link_down: n.link_down.unwrap_or(false),
        // PVE's `vlanid[;vlanid...]`; a part that is no number reads as 0 (never valid, so it shows as drift)
        trunks: n
            .trunks
            .as_deref()
            .unwrap_or("")
            .split(';')
            .filter(|t| !t.is_empty())
            .map(|t| t.trim().parse().unwrap_or(0))
            .collect(),
    }
}

fn mount_point(index: u32, m: &MountPoint) -> v1::MountPoint {
    let bind = m.volume.starts_with('/');
    let (datastore_id, host_path, volume) = if bind {
        (String::new(), m.volume.clone(), String::new())
    } else {
        let ds = m.volume.split(':').next().unwrap_or("").to_string();
        (ds, String::new(), m.volume.clone())
    };
    v1::MountPoint {
        index,
        datastore_id,
        size_gib: gib(m.size),
        path: m.mp.clone().unwrap_or_default(),
        host_path,
        backup: m.backup.unwrap_or(false),
        read_only: m.ro.unwrap_or(false),
        mount_options: m.mount_option_list(),
        volume,
        acl: m.acl,
        quota: m.quota.unwrap_or(false),
        replicate: m.replicate,
        shared: m.shared.unwrap_or(false),
        existing: false,
        keepattrs: m.keepattrs.unwrap_or(false),
        idmap: m.idmap.clone().unwrap_or_default(),
    }
}

fn device(index: u32, d: &DeviceSpec) -> v1::Device {
    v1::Device {
        index,
        path: d.path.clone(),
        mode: d.mode.clone().unwrap_or_default(),
        uid: d.uid,
        gid: d.gid,
        deny_write: d.deny_write.unwrap_or(false),
    }
}

/// An `lxc.idmap` value (`u 0 100000 65536`); `None` for one pxfleet cannot express.
fn idmap_entry(line: &str) -> Option<v1::IdMapEntry> {
    let mut it = line.split_whitespace();
    let kind = it.next().filter(|k| *k == "u" || *k == "g")?.to_string();
    let mut n = || it.next()?.parse::<u32>().ok();
    Some(v1::IdMapEntry {
        kind,
        container_id: n()?,
        host_id: n()?,
        size: n()?,
    })
}

/// Reads a container's PVE config back into a `ContainerSpec` (no password, no template).
pub fn config_to_spec(vmid: u32, cfg: &ContainerConfig) -> v1::ContainerSpec {
    let mark = cfg
        .description
        .as_deref()
        .and_then(ManagedMark::from_description);
    // The user's part: only pxfleet's own mark line is taken out (a `managed-by:` line of the user's stays).
    let description = cfg
        .description
        .as_deref()
        .and_then(ManagedMark::strip_from_description)
        .unwrap_or_default();
    let (datastore_id, disk_size_gib) = cfg
        .rootfs
        .as_ref()
        .map(|r| {
            let ds = r.volume.split(':').next().unwrap_or("").to_string();
            (ds, gib(r.size))
        })
        .unwrap_or_default();
    // Present (even with every flag off) when the key is.
    let features = cfg.raw.contains_key("features").then(|| v1::Features {
        nesting: cfg.features.nesting,
        keyctl: cfg.features.keyctl,
        fuse: cfg.features.fuse,
        mknod: cfg.features.mknod,
        force_rw_sys: cfg.features.force_rw_sys,
        mount: cfg.features.mount.clone(),
    });
    let interfaces = cfg.nets.iter().map(|(i, n)| interface(*i, n)).collect();
    let mount_points = cfg
        .mount_points
        .iter()
        .map(|(i, m)| mount_point(*i, m))
        .collect();
    let dns =
        (cfg.raw.contains_key("nameserver") || cfg.raw.contains_key("searchdomain")).then(|| {
            v1::Dns {
                servers: cfg.nameserver.clone(),
                domain: cfg.searchdomain.join(" "),
            }
        });
    let startup = cfg.startup.as_ref().map(|s| v1::Startup {
        order: s.order,
        up_delay: s.up,
        down_delay: s.down,
    });
    v1::ContainerSpec {
        fleet: mark.as_ref().map(|m| m.fleet.clone()).unwrap_or_default(),
        name: mark.as_ref().map(|m| m.name.clone()).unwrap_or_default(),
        vm_id: vmid,
        hostname: cfg.hostname.clone().unwrap_or_default(),
        cores: cfg.cores,
        cpu_limit: cfg.cpulimit,
        cpu_units: cfg.cpuunits,
        memory_mib: cfg.memory.unwrap_or(512),
        swap_mib: cfg.swap.unwrap_or(0),
        disk_size_gib,
        datastore_id,
        template_volid: String::new(),
        unprivileged: cfg.unprivileged,
        features,
        interfaces,
        dns,
        ssh_public_keys: vec![],
        password: None,
        startup,
        onboot: cfg.onboot,
        protection: cfg.protection,
        tags: cfg
            .tags
            .iter()
            .filter(|t| *t != crate::node::MANAGED_TAG)
            .cloned()
            .collect(),
        description,
        mount_points,
        template: String::new(),
        template_flag: cfg.template,
        // not in the config: the observation fills it in from the cluster's user.cfg
        pool: String::new(),
        ostype: cfg.ostype.clone().unwrap_or_default(),
        devices: cfg.devices.iter().map(|(i, d)| device(*i, d)).collect(),
        idmap: cfg.idmap.iter().filter_map(|l| idmap_entry(l)).collect(),
        entrypoint: cfg.entrypoint.clone().unwrap_or_default(),
        env: cfg
            .env
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
        // Create only; a config does not say where it was cloned from.
        clone_source: None,
        arch: cfg.arch.clone().unwrap_or_default(),
        timezone: cfg.timezone.clone().unwrap_or_default(),
        // what is in effect: PVE's defaults for absent keys
        console: Some(cfg.console.unwrap_or(true)),
        tty: Some(cfg.tty.unwrap_or(2)),
        cmode: cfg.cmode.clone().unwrap_or_else(|| "tty".into()),
        hookscript: cfg.hookscript.clone().unwrap_or_default(),
        // desired only
        env_set: false,
        entrypoint_set: false,
        rootfs: cfg.rootfs.as_ref().map(|r| v1::MountPoint {
            mount_options: r.mount_option_list(),
            acl: r.acl,
            quota: r.quota.unwrap_or(false),
            replicate: Some(r.replicate.unwrap_or(true)),
            volume: r.volume.clone(),
            ..Default::default()
        }),
    }
}
