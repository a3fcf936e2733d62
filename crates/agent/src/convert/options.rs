//! A `ContainerSpec` as the PVE options `pct create` / `pct set` take (`net0=name=eth0,bridge=...`).

use super::*;

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

pub(super) fn mark_of(spec: &v1::ContainerSpec) -> Option<ManagedMark> {
    if spec.fleet.is_empty() || spec.name.is_empty() {
        None
    } else {
        Some(ManagedMark {
            fleet: spec.fleet.clone(),
            name: spec.name.clone(),
        })
    }
}
