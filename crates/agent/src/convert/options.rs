//! A `ContainerSpec` as pve's typed [`CreateSpec`] (what `pct create` takes, and what an update is diffed
//! against).

use pxfleet_pve::parse::{Features, NetConfig, Startup};
use pxfleet_pve::spec::{MountVolume, RootfsOptions};
use pxfleet_pve::{CreateSpec, DeviceSpec, MountPointSpec, RootfsSpec};

use super::*;

/// A field of the spec that does not fit PVE's type for it.
fn too_big(field: &str, value: impl std::fmt::Display) -> String {
    format!("{field}: {value} is out of range")
}

fn ip(c: Option<&v1::IpConfig>, v6: bool) -> (Option<String>, Option<String>) {
    let Some(c) = c else {
        return (None, None);
    };
    let mode = match v1::IpMode::try_from(c.mode).unwrap_or(v1::IpMode::Unspecified) {
        v1::IpMode::Dhcp => Some("dhcp".to_string()),
        v1::IpMode::Static => Some(c.address.clone()),
        v1::IpMode::Manual => Some("manual".to_string()),
        v1::IpMode::Auto if v6 => Some("auto".to_string()),
        _ => None,
    };
    (mode, Some(c.gateway.clone()).filter(|g| !g.is_empty()))
}

/// One interface as pve's typed `netN` (`type=veth`; no MAC: PVE generates one).
pub fn net_config(i: &v1::NetworkInterface) -> Result<NetConfig, String> {
    let (ip4, gw) = ip(i.ipv4.as_ref(), false);
    let (ip6, gw6) = ip(i.ipv6.as_ref(), true);
    Ok(NetConfig {
        name: i.name.clone(),
        bridge: Some(i.bridge.clone()).filter(|b| !b.is_empty()),
        hwaddr: Some(i.mac.to_ascii_uppercase()).filter(|m| !m.is_empty()),
        ip: ip4,
        gw,
        ip6,
        gw6,
        firewall: i.firewall.then_some(true),
        tag: i
            .vlan_id
            .map(|t| u16::try_from(t).map_err(|_| too_big("vlan_id", t)))
            .transpose()?,
        mtu: i.mtu,
        rate: i.rate_mbps,
        host_managed: i.host_managed.then_some(true),
        link_down: i.link_down.then_some(true),
        trunks: (!i.trunks.is_empty()).then(|| {
            i.trunks
                .iter()
                .map(u32::to_string)
                .collect::<Vec<_>>()
                .join(";")
        }),
        kind: Some("veth".into()),
        ..NetConfig::default()
    })
}

fn u32_of(field: &str, v: u64) -> Result<u32, String> {
    u32::try_from(v).map_err(|_| too_big(field, v))
}

/// Splits a list PVE keeps as one string (`a b`, also `,` or `;`).
fn words<'a>(items: impl IntoIterator<Item = &'a String>) -> Vec<String> {
    items
        .into_iter()
        .flat_map(|s| s.split([' ', ',', ';']))
        .filter(|s| !s.is_empty())
        .map(String::from)
        .collect()
}

/// A spec's PVE settings as pve's typed [`CreateSpec`] (create and update): `vmid` and `template` left empty
/// (the operation's), tags, description, password and keys left out (the operation's own fields); `rootfs`
/// with an empty storage when the spec has no datastore or size.
pub fn create_spec(spec: &v1::ContainerSpec) -> Result<CreateSpec, String> {
    let rootfs = if !spec.datastore_id.is_empty() && spec.disk_size_gib > 0 {
        RootfsSpec {
            storage: spec.datastore_id.clone(),
            size_gib: u32_of("disk_size_gib", spec.disk_size_gib)?,
        }
    } else {
        RootfsSpec {
            storage: String::new(),
            size_gib: 0,
        }
    };
    let mut s = CreateSpec::new(0, "", rootfs);
    s.hostname = Some(spec.hostname.clone()).filter(|h| !h.is_empty());
    s.cores = spec.cores;
    s.cpulimit = spec.cpu_limit.filter(|l| *l > 0.0);
    s.cpuunits = spec.cpu_units;
    if spec.memory_mib > 0 {
        s.memory = Some(u32_of("memory_mib", spec.memory_mib)?);
    }
    s.swap = Some(u32_of("swap_mib", spec.swap_mib)?);
    s.unprivileged = spec.unprivileged;
    if let Some(f) = &spec.features {
        s.features = Features {
            nesting: f.nesting,
            fuse: f.fuse,
            keyctl: f.keyctl,
            mknod: f.mknod,
            force_rw_sys: f.force_rw_sys,
            mount: words(&f.mount),
        };
    }
    for i in &spec.interfaces {
        s.nets.insert(i.index, net_config(i)?);
    }
    if let Some(dns) = &spec.dns {
        s.nameservers = words(&dns.servers);
        s.searchdomains = words([&dns.domain]);
    }
    s.startup = spec
        .startup
        .as_ref()
        .map(|st| Startup {
            order: st.order,
            up: st.up_delay,
            down: st.down_delay,
        })
        .filter(|st| *st != Startup::default());
    s.onboot = spec.onboot.then_some(true);
    s.protection = spec.protection.then_some(true);
    s.ostype = Some(spec.ostype.clone()).filter(|o| !o.is_empty());
    // given (possibly empty: none), or, from a controller that does not say, given when not empty
    s.env = (spec.env_set || !spec.env.is_empty()).then(|| {
        spec.env
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    });
    s.entrypoint = Some(spec.entrypoint.clone()).filter(|e| spec.entrypoint_set || !e.is_empty());
    if let Some(r) = &spec.rootfs {
        s.rootfs_options = RootfsOptions {
            mount_options: r.mount_options.clone(),
            acl: r.acl,
            quota: r.quota.then_some(true),
            replicate: r.replicate.filter(|r| !*r),
        };
    }
    s.arch = Some(spec.arch.clone()).filter(|a| !a.is_empty());
    s.hookscript = Some(spec.hookscript.clone()).filter(|h| !h.is_empty());
    s.pool = Some(spec.pool.clone()).filter(|p| !p.is_empty());
    s.timezone = Some(spec.timezone.clone()).filter(|t| !t.is_empty());
    s.console = spec.console;
    s.tty = spec.tty;
    s.cmode = Some(spec.cmode.clone()).filter(|m| !m.is_empty());
    for m in &spec.mount_points {
        let volume = if m.existing {
            if m.volume.is_empty() {
                return Err(format!(
                    "mount_points[{}].volume: an existing volume without its volume id",
                    m.index
                ));
            }
            MountVolume::Existing {
                volume: m.volume.clone(),
            }
        } else if m.host_path.is_empty() {
            MountVolume::Storage {
                storage: m.datastore_id.clone(),
                size_gib: u32_of("mount_points.size_gib", m.size_gib)?,
            }
        } else {
            MountVolume::Bind {
                host_path: m.host_path.clone(),
            }
        };
        s.mount_points.insert(
            m.index,
            MountPointSpec {
                volume,
                path: m.path.clone(),
                backup: m.backup.then_some(true),
                read_only: m.read_only.then_some(true),
                mount_options: words(&m.mount_options),
                acl: m.acl,
                quota: m.quota.then_some(true),
                replicate: m.replicate.filter(|r| !r),
                shared: m.shared.then_some(true),
                keepattrs: m.keepattrs.then_some(true),
                idmap: Some(m.idmap.clone()).filter(|i| !i.is_empty()),
            },
        );
    }
    s.idmap = spec
        .idmap
        .iter()
        .map(|m| format!("{} {} {} {}", m.kind, m.container_id, m.host_id, m.size))
        .collect();
    for d in &spec.devices {
        s.devices.insert(
            d.index,
            DeviceSpec {
                path: d.path.clone(),
                mode: Some(d.mode.clone()).filter(|m| !m.is_empty()),
                uid: d.uid,
                gid: d.gid,
                deny_write: d.deny_write.then_some(true),
            },
        );
    }
    Ok(s)
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
