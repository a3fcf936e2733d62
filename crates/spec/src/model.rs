//! The resolved fleet model: what a `fleet.yaml` means once parsed, defaulted and validated.
//!
//! Everything downstream (planner, controller, agent operations) works on these types, never on
//! YAML. Every [`Container`] is fully resolved: `defaults` are applied, `hostname` defaults to the
//! container's key, a `template_url` shortcut is turned into an entry of [`Fleet::templates`] with a
//! derived name, the bridge defaults to `vmbr0`, `unprivileged` defaults to `true`, and `file:` SSH
//! keys are replaced by the key text. Fields stay `Option` only where PVE itself has no value (no
//! node: the scheduler places the container; no vm_id: the controller allocates one; no cores:
//! all host CPUs).
//!
//! Defaults taken from PVE where the file says nothing: memory 512 MiB, swap 512 MiB, disk_size
//! 4 GiB, bridge `vmbr0`, unprivileged true, start_on_boot false, protection false, firewall false,
//! ip_address `dhcp` on every interface, ipv6 none.
//!
//! Source positions are kept beside the model in [`Spans`] (path -> line:column), so checks made
//! later (against the world, in the planner) can still point at the line that caused them.

use std::collections::BTreeMap;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

use ipnet::{Ipv4Net, Ipv6Net};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

mod mounts;
mod spans;

pub use mounts::*;
pub use spans::{Span, Spans};

/// Memory when neither the container nor `defaults` say (PVE's default), in MiB.
pub const DEFAULT_MEMORY_MIB: u64 = 512;
/// Swap when neither the container nor `defaults` say (PVE's default), in MiB.
pub const DEFAULT_SWAP_MIB: u64 = 512;
/// Root disk size when neither the container nor `defaults` say (PVE's default), in GiB.
pub const DEFAULT_DISK_GIB: u64 = 4;
/// Bridge of an interface that names none.
pub const DEFAULT_BRIDGE: &str = "vmbr0";
/// Storage where template files are cached on each node, when a template names none.
pub const DEFAULT_TEMPLATE_STORAGE: &str = "local";

/// One fleet: one `fleet.yaml`, authoritative for the containers it names.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Fleet {
    /// Fleet name: lower-case letters, digits and `-`.
    pub name: String,
    /// Whether containers of this fleet may set `unprivileged: false`.
    #[serde(default)]
    pub allow_privileged: bool,
    /// Templates by name: the declared ones plus those derived from `template_url` shortcuts.
    #[serde(default)]
    pub templates: BTreeMap<String, Template>,
    /// Containers by key (the name in the file, also used in the PVE description mark).
    #[serde(default)]
    pub containers: BTreeMap<String, Container>,
    /// What the controller does when a container is ready or destroyed (docs/hooks.md).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hooks: Vec<crate::hooks::Hook>,
    /// Where each field came from in the source file. Not part of the fleet's meaning: two fleets
    /// that differ only in layout compare equal (see [`Spans`]'s `PartialEq`).
    #[serde(default, skip_serializing_if = "Spans::is_empty")]
    pub spans: Spans,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Template {
    pub source: TemplateSource,
    /// PVE storage (with `vztmpl` content) where the file is cached on each node. Default `local`.
    pub storage: String,
    /// When nodes get the file: on demand (before the first create that needs it), or kept on every ready node.
    #[serde(default, skip_serializing_if = "TemplateSeed::is_on_demand")]
    pub seed: TemplateSeed,
}

/// `templates.NAME.seed`: when the controller puts a template's file on the nodes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TemplateSeed {
    /// Before the first create on a node that does not have it (the default).
    #[default]
    OnDemand,
    /// On every ready, uncordoned node, also nodes that join later, whether or not a container is placed there.
    AllNodes,
}

impl TemplateSeed {
    pub fn is_on_demand(&self) -> bool {
        *self == TemplateSeed::OnDemand
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum TemplateSource {
    /// Downloaded by the agent, verified against the checksum while streaming.
    /// `checksum` is `None` only for templates derived from a container's `template_url`
    /// shortcut (the Terraform field carries no checksum).
    Url {
        url: String,
        checksum: Option<Checksum>,
    },
    /// An appliance from PVE's catalogue, fetched with `pveam download`,
    /// e.g. `debian-12-standard_12.7-1_amd64.tar.zst`.
    Pveam { appliance: String },
    /// A volume already in storage (bpg `template_file_id`), `STORAGE:vztmpl/FILE`: nothing is downloaded; the
    /// agent checks that it is there before creating. [`Template::storage`] is the volume's storage.
    Volume { volid: String },
    /// A copy of an existing container `vm_id` on `node` (`pct clone`): nothing is downloaded or seeded. `full`:
    /// the disks are copied (to `datastore_id` when given, else to the container's datastore); otherwise a
    /// linked clone of a template (`template: 1`), whose root disk stays on the template's storage. A container
    /// using it is placed on `node` (resolved into its `node`; a different `node` is an error).
    Clone {
        vm_id: u32,
        node: String,
        full: bool,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        datastore_id: Option<String>,
    },
}

impl TemplateSource {
    /// `clone of CT 9000 on pve1 (full)`: where a clone template's containers come from; `None` for files.
    pub fn clone_text(&self) -> Option<String> {
        match self {
            TemplateSource::Clone {
                vm_id, node, full, ..
            } => Some(format!(
                "clone of CT {vm_id} on {node} ({})",
                if *full { "full" } else { "linked" }
            )),
            _ => None,
        }
    }

    pub fn is_clone(&self) -> bool {
        matches!(self, TemplateSource::Clone { .. })
    }
}

impl Template {
    /// The file name the template has in the storage's `template/cache/` directory.
    pub fn file_name(&self) -> &str {
        match &self.source {
            TemplateSource::Url { url, .. } => url_file_name(url),
            TemplateSource::Pveam { appliance } => appliance,
            TemplateSource::Volume { volid } => volid
                .split_once(":vztmpl/")
                .map_or(volid.as_str(), |(_, f)| f),
            // No file: a clone copies a container.
            TemplateSource::Clone { .. } => "",
        }
    }
}

/// Last path segment of a URL (without query or fragment).
pub fn url_file_name(url: &str) -> &str {
    let end = url.find(['?', '#']).unwrap_or(url.len());
    let path = &url[..end];
    path.rsplit('/').next().unwrap_or(path)
}

/// A template checksum, lower-case hex.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Checksum {
    Sha256(String),
    Sha512(String),
}

impl Checksum {
    pub fn algorithm(&self) -> &'static str {
        match self {
            Checksum::Sha256(_) => "sha256",
            Checksum::Sha512(_) => "sha512",
        }
    }

    pub fn hex(&self) -> &str {
        match self {
            Checksum::Sha256(h) | Checksum::Sha512(h) => h,
        }
    }
}

/// One container, fully resolved (defaults applied). Field names follow the file (and the
/// Terraform `lxc_configs` names); the PVE option each maps to is given per field.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Container {
    /// The key in `containers:`.
    pub name: String,
    /// PVE vmid (100..=999999999). `None`: allocated fleet-wide by the controller.
    pub vm_id: Option<u32>,
    /// `--hostname`; defaults to the key.
    pub hostname: String,
    /// PVE node. `None`: the scheduler places the container.
    pub node: Option<String>,
    /// `--cores` (1..=8192). `None`: all host CPUs (PVE's default).
    pub cores: Option<u32>,
    /// `--cpulimit` (0..=8192, 0 = unlimited). `None`: PVE default (0).
    pub cpu_limit: Option<f64>,
    /// `--cpuunits` (0..=500000). `None`: PVE default (100 on cgroup v2).
    pub cpu_units: Option<u32>,
    /// `--memory`, MiB (>= 16). Default 512.
    pub memory: u64,
    /// `--swap`, MiB (>= 0). Default 512.
    pub swap: u64,
    /// Root disk size in GiB (> 0), `--rootfs <datastore_id>:<disk_size>`. Default 4.
    pub disk_size: u64,
    /// Storage of the root disk. `None`: the scheduler picks a storage of the node that holds
    /// `rootdir` content.
    pub datastore_id: Option<String>,
    /// Name of an entry of [`Fleet::templates`].
    pub template: String,
    /// `--unprivileged`. Default true.
    pub unprivileged: bool,
    /// `--features`.
    pub features: Features,
    /// `--net0`, `--net1`, ...: net0 from the top-level network fields, net1.. from
    /// `extra_interfaces`.
    pub interfaces: Vec<Interface>,
    /// `--nameserver`, `--searchdomain`.
    pub dns: Dns,
    /// OpenSSH public keys (text, one key per entry), `--ssh-public-keys`.
    pub ssh_public_keys: Vec<String>,
    /// Root password. `None`: the controller generates one and keeps it as a sensitive output.
    pub password: Option<Secret>,
    /// `--startup`.
    pub startup: Option<Startup>,
    /// `--onboot`. Default false.
    pub start_on_boot: bool,
    /// `--protection`. Default false. A protected container is not destroyed when it leaves the file.
    pub protection: bool,
    /// `--tags` (pxfleet adds its own `pxfleet` tag on top).
    pub tags: Vec<String>,
    /// `--description` (pxfleet appends its `managed-by:` line).
    pub description: Option<String>,
    /// Free-form labels of the container, used by placement constraints.
    pub labels: BTreeMap<String, String>,
    /// Placement constraints for the scheduler.
    pub constraints: Constraints,
    /// `--mp0`, `--mp1`, ...
    pub mount_points: Vec<MountPoint>,
    /// `--dev0`, `--dev1`, ...: device passthrough.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub devices: Vec<Device>,
    /// `lxc.idmap` lines (unprivileged containers only). Empty: PVE's default map (0..65536 to 100000..).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub idmap: Vec<IdMap>,
    /// Whether the container runs. Default running; a stopped one is created without starting and stays
    /// stopped (also through drift repair); a template is created stopped and made a template (`pct template`).
    #[serde(default)]
    pub state: DesiredState,
    /// `adopt: true`: the container already exists (made by hand, by Terraform) as `vm_id` on `node` without
    /// pxfleet's mark; pxfleet takes it under management where it is (writes its mark, then changes what
    /// differs from the file) instead of creating one. Never replaced or recreated by pxfleet.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub adopt: bool,
    /// `restart_policy`: what happens to a change PVE applies only at the next start of a running container.
    /// `auto` (default): the plan announces a restart and the agent restarts it; `never`: it stays pending
    /// until the container restarts for another reason, and the plan and `pxctl get` say so.
    #[serde(default, skip_serializing_if = "RestartPolicy::is_auto")]
    pub restart_policy: RestartPolicy,
    /// `drift`: what pxfleet does about a change made behind its back. `repair` (default): the plan repairs it
    /// and the controller puts the applied value back; `report`: shown (plan warning, `pxctl get` marks the
    /// container drifted) and left alone. Top-level `drift:` sets it for the fleet.
    #[serde(default, skip_serializing_if = "DriftPolicy::is_repair")]
    pub drift: DriftPolicy,
    /// `--ostype` (bpg `operating_system.type`): the OS setup PVE does inside the container. `None`: detected by
    /// PVE from the template (not compared).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ostype: Option<String>,
    /// `env` (bpg `environment_variables`): the container's runtime environment, `NAME: value`, any number of
    /// variables (written as `lxc.environment.runtime` lines). `None` (left out): not compared (an OCI image's own
    /// `Env` stands); `Some(empty)` (`env: {}`): no variables, so every one on the node is removed. PVE 9.1+.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env: Option<BTreeMap<String, String>>,
    /// `--entrypoint` (bpg `entrypoint`): the command PVE runs as init (`lxc.init.cmd`). `None` (left out): not
    /// compared (PVE's `/sbin/init`, or an OCI image's own entrypoint); `Some("")` (`entrypoint: ""`): none, so
    /// one set on the node is removed and PVE's `/sbin/init` runs. PVE 9.1+.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub entrypoint: Option<String>,
    /// `--arch`: the container's architecture. `None`: detected by PVE from the template (not compared).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arch: Option<String>,
    /// `--timezone` (bpg has none): `host` (the node's), `UTC` or a zone of zone.tab, set up inside the container
    /// at each start. `None`: PVE does nothing (not compared).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timezone: Option<String>,
    /// `console:` (bpg `console { enabled, tty_count, type }`): PVE's `console`, `tty` and `cmode`, each compared
    /// only when given.
    #[serde(default, skip_serializing_if = "Console::is_unset")]
    pub console: Console,
    /// `rootfs:` the root disk's options (bpg `disk { mount_options, acl, quota, replicate }`), compared like a
    /// mount point's: left out means PVE's defaults (no mount options, `acl` unset, no quota, replicated).
    /// `shared` is always off for a root disk.
    #[serde(default, skip_serializing_if = "MountFlags::is_default")]
    pub rootfs: MountFlags,
    /// `--hookscript` (bpg `hook_script_file_id`): a snippets volume (`local:snippets/hook.sh`) PVE runs as root on
    /// the node at the container's lifecycle events. A power over the host: an operator needs an admin's grant.
    /// `None`: no hook script (one set on the node is removed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hookscript: Option<String>,
    /// `wait_for_ip:` (bpg's `wait_for_ip { ipv4, ipv6 }`): which addresses a create that starts the container
    /// waits for. Not a PVE option: nothing on the node changes, so it is never compared.
    #[serde(default, skip_serializing_if = "WaitForIp::is_any")]
    pub wait_for_ip: WaitForIp,
    /// `--pool` (bpg `pool_id`): the PVE resource pool the container is in (which must exist). `None` (left out):
    /// not compared, a pool set in PVE stays.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool: Option<String>,
}

/// `wait_for_ip:` which addresses the create of a running container waits for before it is done: `ipv4` at least
/// one IPv4 address, `ipv6` at least one IPv6 address (neither loopback nor link-local), both: both. Neither (the
/// default): any one address, and the create is done without one when none comes in time; a required one that does
/// not come in time fails the create (the container is kept, and the retry waits again).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WaitForIp {
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub ipv4: bool,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub ipv6: bool,
}

impl WaitForIp {
    /// Neither family required: any address will do.
    pub fn is_any(&self) -> bool {
        !self.ipv4 && !self.ipv6
    }
}

/// `console:` of a container: PVE's `console` (a `/dev/console` device), `tty` (how many ttys) and `cmode` (what
/// `pct console` attaches to). `None`: not given (desired: not compared) or PVE's default (observed: 1, 2, tty).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Console {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tty_count: Option<u32>,
    /// `tty`, `console` or `shell` (fleet.yaml `type`).
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
}

impl Console {
    pub fn is_unset(&self) -> bool {
        *self == Console::default()
    }

    /// What a container config without these keys has: PVE's defaults.
    pub fn pve_defaults() -> Console {
        Console {
            enabled: Some(true),
            tty_count: Some(2),
            mode: Some("tty".into()),
        }
    }
}

/// The `ostype` values PVE accepts (CONTRACT §3.1).
pub const OSTYPES: &[&str] = &[
    "debian",
    "devuan",
    "ubuntu",
    "centos",
    "fedora",
    "opensuse",
    "archlinux",
    "alpine",
    "gentoo",
    "nixos",
    "unmanaged",
];

/// `drift:` of the fleet (top level or `defaults`) or of a container.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DriftPolicy {
    #[default]
    Repair,
    Report,
}

impl DriftPolicy {
    pub fn is_repair(&self) -> bool {
        *self == DriftPolicy::Repair
    }
}

/// `restart_policy:` of a container (or of the fleet, in `defaults`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RestartPolicy {
    #[default]
    Auto,
    Never,
}

impl RestartPolicy {
    pub fn is_auto(&self) -> bool {
        *self == RestartPolicy::Auto
    }
}

/// `state:` of a container.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DesiredState {
    #[default]
    Running,
    Stopped,
    /// A template (`pct template`, bpg's `template = true`): created stopped and converted, never started; the
    /// source a `clone:` template copies. PVE cannot turn a template back into a container.
    Template,
}

impl DesiredState {
    pub fn is_running(self) -> bool {
        self == DesiredState::Running
    }

    pub fn is_template(self) -> bool {
        self == DesiredState::Template
    }

    /// `running`, `stopped` or `template`, as the file writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            DesiredState::Running => "running",
            DesiredState::Stopped => "stopped",
            DesiredState::Template => "template",
        }
    }
}

/// `--features`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Features {
    pub nesting: bool,
    pub fuse: bool,
    pub keyctl: bool,
    /// Allowed file-system types for mount(2) inside the container (`mount=nfs;cifs`).
    pub mount: Vec<String>,
    /// `mknod=1`: an unprivileged container may create certain device nodes (PVE: experimental; root only).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub mknod: bool,
    /// `force_rw_sys=1`: /sys mounted read-write in an unprivileged container (PVE: root only).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub force_rw_sys: bool,
}

/// One network interface (`netN`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Interface {
    /// `eth0`, `eth1`, ... (the position in [`Container::interfaces`] gives `netN`); net0's is `interface_name`.
    pub name: String,
    /// `bridge=`. Default `vmbr0`.
    pub bridge: String,
    /// `ip=` / `gw=`.
    pub ipv4: Ipv4Config,
    /// `ip6=` / `gw6=`.
    pub ipv6: Ipv6Config,
    /// `tag=` (1..=4094).
    pub vlan_id: Option<u16>,
    /// `mtu=` (576..=65520).
    pub mtu: Option<u16>,
    /// `hwaddr=`. `None`: the controller allocates one (`BC:24:11:..`) and keeps it for the container name.
    pub mac_address: Option<MacAddr>,
    /// `firewall=`. Default false.
    pub firewall: bool,
    /// `rate=`, MB/s.
    pub rate_limit: Option<f64>,
    /// `host-managed=` (PVE 9.1+): the host runs DHCP for the interface instead of the container. Default false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub host_managed: bool,
    /// `link_down=`: the interface is disconnected, as if its cable were pulled. Default false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub link_down: bool,
    /// `trunks=`: VLAN ids (1..=4094) passed through the interface, in the file's order. Default none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub trunks: Vec<u16>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "mode")]
pub enum Ipv4Config {
    /// `ip=dhcp`
    Dhcp,
    /// `ip=<cidr>`, `gw=<gateway>`; `gateway: None` only when the file says `gateway: none`.
    Static {
        addr: Ipv4Net,
        gateway: Option<Ipv4Addr>,
    },
    /// No IPv4 configuration (`ip_address: none`).
    None,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "mode")]
pub enum Ipv6Config {
    /// `ip6=auto` (SLAAC)
    Auto,
    /// `ip6=dhcp`
    Dhcp,
    /// `ip6=<cidr>`, `gw6=<gateway>`.
    Static {
        addr: Ipv6Net,
        gateway: Option<Ipv6Addr>,
    },
    /// No IPv6 configuration (the default).
    None,
}

impl Ipv4Config {
    /// The static address (without prefix), if any.
    pub fn static_addr(&self) -> Option<Ipv4Addr> {
        match self {
            Ipv4Config::Static { addr, .. } => Some(addr.addr()),
            _ => None,
        }
    }
}

impl Ipv6Config {
    /// The static address (without prefix), if any.
    pub fn static_addr(&self) -> Option<Ipv6Addr> {
        match self {
            Ipv6Config::Static { addr, .. } => Some(addr.addr()),
            _ => None,
        }
    }
}

/// A MAC address; displayed upper-case with colons, as PVE writes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct MacAddr(pub [u8; 6]);

impl MacAddr {
    /// Whether the multicast bit is clear (an interface address must be unicast).
    pub fn is_unicast(&self) -> bool {
        self.0[0] & 1 == 0
    }
}

impl fmt::Display for MacAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = self.0;
        write!(
            f,
            "{:02X}:{:02X}:{:02X}:{:02X}:{:02X}:{:02X}",
            b[0], b[1], b[2], b[3], b[4], b[5]
        )
    }
}

/// Error parsing a MAC address.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "'{0}' is not a MAC address; expected six hex pairs separated by ':', e.g. BC:24:11:2A:3B:4C"
)]
pub struct MacParseError(pub String);

impl FromStr for MacAddr {
    type Err = MacParseError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let mut out = [0u8; 6];
        let parts: Vec<&str> = s.split([':', '-']).collect();
        if parts.len() != 6 {
            return Err(MacParseError(s.to_owned()));
        }
        for (i, p) in parts.iter().enumerate() {
            if p.len() != 2 || !p.bytes().all(|c| c.is_ascii_hexdigit()) {
                return Err(MacParseError(s.to_owned()));
            }
            out[i] = u8::from_str_radix(p, 16).map_err(|_| MacParseError(s.to_owned()))?;
        }
        Ok(MacAddr(out))
    }
}

impl Serialize for MacAddr {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for MacAddr {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// `--nameserver` / `--searchdomain`. Empty: PVE uses the host's settings.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Dns {
    pub servers: Vec<IpAddr>,
    pub domain: Option<String>,
}

/// `--startup order=..,up=..,down=..` (seconds for the delays).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Startup {
    pub order: Option<u32>,
    pub up_delay: Option<u32>,
    pub down_delay: Option<u32>,
}

/// Where the scheduler may place a container that names no `node`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Constraints {
    /// Only these nodes (empty: any node).
    pub nodes: Vec<String>,
    /// The node must carry all of these labels with these values.
    pub node_labels: BTreeMap<String, String>,
    /// Container label keys: containers of the fleet that share a value for one of these
    /// labels are spread onto different nodes.
    pub anti_affinity: Vec<String>,
}

/// A sensitive string (a password). Its `Debug`, `Display` and `Serialize` print `(sensitive)`,
/// so it cannot leak into plans, logs or errors; [`Secret::expose`] is the one way to read it.
/// Consequence: serializing a [`Fleet`] drops passwords; whoever stores them (the controller's
/// secrets tree) takes them with `expose()`.
#[derive(Clone, PartialEq, Eq, Default)]
pub struct Secret(String);

/// What a [`Secret`] prints as.
pub const REDACTED: &str = "(sensitive)";

impl Secret {
    pub fn new(s: impl Into<String>) -> Self {
        Secret(s.into())
    }

    /// The secret's value. Call only where it is really needed (handing it to `pct`'s stdin,
    /// storing it in the secrets tree).
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(REDACTED)
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(REDACTED)
    }
}

impl Serialize for Secret {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(REDACTED)
    }
}

impl<'de> Deserialize<'de> for Secret {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(Secret(String::deserialize(d)?))
    }
}

#[cfg(test)]
mod tests;
