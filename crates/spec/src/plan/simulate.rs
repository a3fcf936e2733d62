//! A pure simulator of plan execution: applies a plan's actions to a list of observed containers the way a
//! perfect agent would, changing only what each action names. Used by the property tests (applying a plan and
//! planning again must give an empty plan) and available to other crates' tests.

use super::diff::field;
use super::{ActionKind, Plan};
use crate::model::{Container, Fleet, MacAddr, MountPoint};
use crate::observed::{
    normalise_description, normalise_tags, observed_interface, observed_mount, ObservedConfig,
    ObservedContainer, PowerState,
};

/// Where the simulator puts what the plan leaves to apply time.
#[derive(Debug, Clone)]
pub struct SimOptions {
    /// Node for containers without `node`.
    pub default_node: String,
    /// Storage for containers without `datastore_id`.
    pub default_datastore: String,
}

impl Default for SimOptions {
    fn default() -> Self {
        SimOptions {
            default_node: "pve1".to_owned(),
            default_datastore: "local-lvm".to_owned(),
        }
    }
}

/// The MAC a simulated PVE generates for interface `i` of `vm_id` (`BC:24:11` prefix, like PVE's default).
pub fn generated_mac(vm_id: u32, i: usize) -> MacAddr {
    let b = vm_id.to_be_bytes();
    MacAddr([0xBC, 0x24, 0x11, b[2] ^ b[0], b[3] ^ b[1], i as u8])
}

/// Applies `plan` (made for `desired`) to `observed` and returns what the nodes would report afterwards.
pub fn apply_to_observed(
    plan: &Plan,
    desired: &Fleet,
    observed: &[ObservedContainer],
    opts: &SimOptions,
) -> Vec<ObservedContainer> {
    let mut world: Vec<ObservedContainer> = observed.to_vec();
    for action in &plan.actions {
        let find = |world: &Vec<ObservedContainer>| {
            world.iter().position(|o| {
                Some(o.vm_id) == action.vm_id && Some(&o.node) == action.node.as_ref()
            })
        };
        let d = desired.containers.get(&action.container);
        match &action.kind {
            ActionKind::Destroy { .. } => {
                if let Some(i) = find(&world) {
                    world.remove(i);
                }
            }
            ActionKind::Replace { .. } | ActionKind::Create { .. } => {
                if matches!(action.kind, ActionKind::Replace { .. }) {
                    if let Some(i) = find(&world) {
                        world.remove(i);
                    }
                }
                if let Some(d) = d {
                    let vm_id = d.vm_id.unwrap_or_else(|| next_free_id(&world));
                    let node = d.node.clone().unwrap_or_else(|| opts.default_node.clone());
                    world.push(ObservedContainer::from_desired(
                        &desired.name,
                        d,
                        vm_id,
                        &node,
                        if d.state.is_running() {
                            PowerState::Running
                        } else {
                            PowerState::Stopped
                        },
                        &opts.default_datastore,
                        |i| generated_mac(vm_id, i),
                    ));
                }
            }
            ActionKind::Move { to, .. } => {
                if let Some(i) = find(&world) {
                    world[i].node = to.clone();
                }
            }
            ActionKind::Resize { disk, to_gib, .. } => {
                if let Some(i) = find(&world) {
                    resize(&mut world[i].config, disk, *to_gib);
                }
            }
            ActionKind::Update { changes, .. } | ActionKind::Repair { drift: changes, .. } => {
                if let (Some(i), Some(d)) = (find(&world), d) {
                    let vm_id = world[i].vm_id;
                    for c in changes {
                        if c.field == super::ADOPT_FIELD {
                            world[i].managed = Some(crate::observed::ManagedMark {
                                fleet: desired.name.clone(),
                                name: action.container.clone(),
                            });
                            continue;
                        }
                        adopt(&mut world[i].config, &c.field, d, vm_id);
                    }
                }
            }
            ActionKind::Start => {
                if let Some(i) = find(&world) {
                    world[i].status = PowerState::Running;
                }
            }
            ActionKind::Stop => {
                if let Some(i) = find(&world) {
                    world[i].status = PowerState::Stopped;
                }
            }
        }
    }
    world
}

fn next_free_id(world: &[ObservedContainer]) -> u32 {
    world
        .iter()
        .map(|o| o.vm_id + 1)
        .max()
        .unwrap_or(100)
        .max(100)
}

fn resize(cfg: &mut ObservedConfig, disk: &str, to_gib: f64) {
    if disk == "rootfs" {
        cfg.disk_size_gib = to_gib;
        return;
    }
    let Some(slot) = disk.strip_prefix("mp").and_then(|n| n.parse::<u32>().ok()) else {
        return;
    };
    if let Some(m) = cfg.mount_points.iter_mut().find(|m| m.slot == slot) {
        m.size_gib = Some(to_gib);
        if let MountPoint::Volume { size_gib, .. } = &mut m.mount {
            *size_gib = to_gib.ceil() as u64;
        }
    }
}

/// Sets one named field of `cfg` to the value `d` wants (what `pct set` would do).
fn adopt(cfg: &mut ObservedConfig, name: &str, d: &Container, vm_id: u32) {
    match name {
        field::HOSTNAME => cfg.hostname = d.hostname.clone(),
        field::OSTYPE => cfg.ostype = d.ostype.clone(),
        field::ENV => cfg.env = d.env.clone().unwrap_or_default(),
        field::ENTRYPOINT => cfg.entrypoint = d.entrypoint.clone().filter(|e| !e.is_empty()),
        field::ARCH => cfg.arch = d.arch.clone(),
        field::TIMEZONE => cfg.timezone = d.timezone.clone(),
        field::CONSOLE_ENABLED => cfg.console.enabled = d.console.enabled,
        field::CONSOLE_TTY_COUNT => cfg.console.tty_count = d.console.tty_count,
        field::CONSOLE_TYPE => cfg.console.mode = d.console.mode.clone(),
        field::ROOTFS_MOUNT_OPTIONS => cfg.rootfs.mount_options = d.rootfs.mount_options.clone(),
        field::ROOTFS_ACL => cfg.rootfs.acl = d.rootfs.acl,
        field::HOOKSCRIPT => cfg.hookscript = d.hookscript.clone(),
        field::POOL => cfg.pool = d.pool.clone(),
        field::ROOTFS_QUOTA => cfg.rootfs.quota = d.rootfs.quota,
        field::ROOTFS_REPLICATE => cfg.rootfs.replicate = d.rootfs.replicate,
        field::CORES => cfg.cores = d.cores,
        field::CPU_LIMIT => cfg.cpu_limit = d.cpu_limit,
        field::CPU_UNITS => cfg.cpu_units = d.cpu_units,
        field::MEMORY => cfg.memory = d.memory,
        field::SWAP => cfg.swap = d.swap,
        field::NESTING => cfg.features.nesting = d.features.nesting,
        field::FUSE => cfg.features.fuse = d.features.fuse,
        field::KEYCTL => cfg.features.keyctl = d.features.keyctl,
        field::MKNOD => cfg.features.mknod = d.features.mknod,
        field::FORCE_RW_SYS => cfg.features.force_rw_sys = d.features.force_rw_sys,
        field::MOUNT => cfg.features.mount = d.features.mount.clone(),
        field::DNS_SERVERS => cfg.dns.servers = d.dns.servers.clone(),
        field::DNS_DOMAIN => cfg.dns.domain = d.dns.domain.clone(),
        field::STARTUP => cfg.startup = d.startup.clone(),
        field::START_ON_BOOT => cfg.start_on_boot = d.start_on_boot,
        field::STATE => cfg.is_template = d.state.is_template(),
        field::PROTECTION => cfg.protection = d.protection,
        field::TAGS => cfg.tags = normalise_tags(&d.tags),
        field::IDMAP => cfg.idmap = d.idmap.clone(),
        field::DESCRIPTION => {
            cfg.description = d.description.as_deref().and_then(normalise_description)
        }
        // Not observable: set inside the container by the agent.
        field::PASSWORD | field::SSH_PUBLIC_KEYS => {}
        other => {
            if let Some((i, sub)) = field::parse_interface(other) {
                adopt_interface(cfg, i, sub, d, vm_id);
            } else if let Some(path) = field::parse_mount_point(other) {
                adopt_mount(cfg, &path, d);
            } else if let Some(path) = field::parse_device(other) {
                adopt_device(cfg, &path, d);
            }
        }
    }
}

fn adopt_interface(cfg: &mut ObservedConfig, i: usize, sub: &str, d: &Container, vm_id: u32) {
    let Some(want) = d.interfaces.get(i) else {
        // The file has no such interface any more: `pct set --delete netN`.
        cfg.interfaces.truncate(i);
        return;
    };
    if cfg.interfaces.len() <= i {
        // A new interface: hot-plugged with everything the file says (the planner lists every sub-field).
        let mac = |n| generated_mac(vm_id, n);
        while cfg.interfaces.len() <= i {
            let n = cfg.interfaces.len();
            let src = d.interfaces.get(n).unwrap_or(want);
            cfg.interfaces.push(observed_interface(n, src, &mac));
        }
        return;
    }
    let have = &mut cfg.interfaces[i].config;
    match sub {
        "name" => have.name = want.name.clone(),
        "bridge" => have.bridge = want.bridge.clone(),
        "ip_address" | "gateway" => have.ipv4 = want.ipv4.clone(),
        "ipv6" | "gateway6" => have.ipv6 = want.ipv6.clone(),
        "vlan_id" => have.vlan_id = want.vlan_id,
        "mtu" => have.mtu = want.mtu,
        "mac_address" if want.mac_address.is_some() => have.mac_address = want.mac_address,
        "firewall" => have.firewall = want.firewall,
        "rate_limit" => have.rate_limit = want.rate_limit,
        "host_managed" => have.host_managed = want.host_managed,
        "link_down" => have.link_down = want.link_down,
        "trunks" => have.trunks = want.trunks.clone(),
        _ => {}
    }
}

fn adopt_mount(cfg: &mut ObservedConfig, path: &str, d: &Container) {
    let want = d.mount_points.iter().find(|m| m.path() == path);
    let at = cfg.mount_points.iter().position(|m| m.mount.path() == path);
    match (want, at) {
        (None, Some(i)) => {
            cfg.mount_points.remove(i);
        }
        (Some(w), Some(i)) => {
            let slot = cfg.mount_points[i].slot;
            cfg.mount_points[i] = observed_mount(slot, w);
        }
        (Some(w), None) => {
            let slot = (0..)
                .find(|s| !cfg.mount_points.iter().any(|m| m.slot == *s))
                .unwrap_or(0);
            cfg.mount_points.push(observed_mount(slot, w));
            cfg.mount_points.sort_by_key(|m| m.slot);
        }
        (None, None) => {}
    }
}

fn adopt_device(cfg: &mut ObservedConfig, path: &str, d: &Container) {
    let want = d.devices.iter().find(|x| x.path == path);
    let at = cfg.devices.iter().position(|x| x.path == path);
    match (want, at) {
        (None, Some(i)) => {
            cfg.devices.remove(i);
        }
        (Some(w), Some(i)) => cfg.devices[i] = w.clone(),
        (Some(w), None) => cfg.devices.push(w.clone()),
        (None, None) => {}
    }
}
