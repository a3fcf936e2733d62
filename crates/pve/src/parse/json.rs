//! Typed views of `pvesh get ... --output-format json` results (CONTRACT §4.3), lenient about number types.

use std::collections::BTreeSet;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer};
use serde_json::Value;

use super::{json_payload, ParseError};

/// Parses pvesh JSON output (see [`json_payload`]) into `T`; `what` names the endpoint for errors.
pub fn parse_json<T: DeserializeOwned>(what: &str, stdout: &str) -> Result<T, ParseError> {
    let payload = json_payload(stdout);
    serde_json::from_str(payload).map_err(|e| ParseError::new(what, e.to_string()))
}

/// Parses a list endpoint and sorts it with `key` (PVE array order is arbitrary).
pub fn parse_json_list<T: DeserializeOwned, K: Ord>(
    what: &str,
    stdout: &str,
    key: impl FnMut(&T) -> K,
) -> Result<Vec<T>, ParseError> {
    let mut v: Vec<T> = parse_json(what, stdout)?;
    v.sort_by_key(key);
    Ok(v)
}

fn value_to_f64(v: &Value) -> Option<f64> {
    match v {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => s.trim().parse().ok(),
        Value::Bool(b) => Some(if *b { 1.0 } else { 0.0 }),
        _ => None,
    }
}

fn value_to_u64(v: &Value) -> Option<u64> {
    match v {
        Value::Number(n) => n.as_u64().or_else(|| {
            n.as_f64()
                .filter(|f| *f >= 0.0 && f.is_finite())
                .map(|f| f as u64)
        }),
        Value::String(s) => {
            let s = s.trim();
            s.parse::<u64>().ok().or_else(|| {
                s.parse::<f64>()
                    .ok()
                    .filter(|f| *f >= 0.0 && f.is_finite())
                    .map(|f| f as u64)
            })
        }
        Value::Bool(b) => Some(u64::from(*b)),
        _ => None,
    }
}

/// Renders a JSON scalar as PVE's config text would (`2`, `"nesting=1"` -> `nesting=1`).
pub fn value_to_string(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(if *b { "1" } else { "0" }.to_string()),
        Value::Null => None,
        other => Some(other.to_string()),
    }
}

fn bad<E: serde::de::Error>(v: &Value, want: &str) -> E {
    E::custom(format!("expected {want}, got {v}"))
}

/// `123` or `"123"` (or `123.0`) -> u64.
pub fn de_u64<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    let v = Value::deserialize(d)?;
    value_to_u64(&v).ok_or_else(|| bad(&v, "an unsigned number"))
}

/// Like [`de_u64`], `null`/absent -> `None`.
pub fn de_opt_u64<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    let v = Option::<Value>::deserialize(d)?;
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if s.trim().is_empty() => Ok(None),
        Some(v) => value_to_u64(&v)
            .map(Some)
            .ok_or_else(|| bad(&v, "an unsigned number")),
    }
}

/// `1.5` or `"1.5"` -> f64, `null`/absent -> `None`.
pub fn de_opt_f64<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    let v = Option::<Value>::deserialize(d)?;
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if s.trim().is_empty() => Ok(None),
        Some(v) => value_to_f64(&v)
            .map(Some)
            .ok_or_else(|| bad(&v, "a number")),
    }
}

/// `1`, `"1"`, `true` -> true; absent -> false.
pub fn de_flag<'de, D: Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
    let v = Option::<Value>::deserialize(d)?;
    Ok(match v {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => b,
        Some(Value::String(s)) => super::parse_bool(&s).unwrap_or(false),
        Some(v) => value_to_f64(&v).map(|f| f != 0.0).unwrap_or(false),
    })
}

/// `"a,b"` / `"a;b c"` -> set.
fn de_list<'de, D: Deserializer<'de>>(d: D) -> Result<BTreeSet<String>, D::Error> {
    let v = Option::<String>::deserialize(d)?;
    Ok(v.map(|s| split_list(&s).collect()).unwrap_or_default())
}

/// Splits a PVE list on `,`, `;` and whitespace.
pub fn split_list(s: &str) -> impl Iterator<Item = String> + '_ {
    s.split([',', ';', ' ', '\t', '\n'])
        .filter(|x| !x.is_empty())
        .map(str::to_string)
}

/// `running`, `stopped`, or whatever else PVE reports (`unknown`).
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(from = "String")]
pub enum RunState {
    Running,
    Stopped,
    Other(String),
}

impl From<String> for RunState {
    fn from(s: String) -> Self {
        match s.as_str() {
            "running" => RunState::Running,
            "stopped" => RunState::Stopped,
            _ => RunState::Other(s),
        }
    }
}

impl RunState {
    pub fn parse(s: &str) -> Self {
        RunState::from(s.trim().to_string())
    }
}

/// HA state of one CT (`status/current` only).
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct HaStatus {
    #[serde(default, deserialize_with = "de_flag")]
    pub managed: bool,
    #[serde(default)]
    pub state: Option<String>,
}

/// One item of `GET /nodes/{node}/lxc`, or `GET .../lxc/{vmid}/status/current`.
#[derive(Clone, Debug, PartialEq, Deserialize)]
pub struct ContainerStatus {
    #[serde(deserialize_with = "de_u64")]
    pub vmid: u64,
    pub status: RunState,
    /// Hostname, or `CT<vmid>`.
    #[serde(default)]
    pub name: Option<String>,
    /// `create`, `destroyed`, `migrate`, ... when locked.
    #[serde(default)]
    pub lock: Option<String>,
    /// Tags, split from PVE's `;` list.
    #[serde(default, deserialize_with = "de_list")]
    pub tags: BTreeSet<String>,
    #[serde(default, deserialize_with = "de_flag")]
    pub template: bool,
    #[serde(default, deserialize_with = "de_opt_f64")]
    pub cpus: Option<f64>,
    /// Bytes.
    #[serde(default, deserialize_with = "de_opt_u64")]
    pub maxmem: Option<u64>,
    #[serde(default, deserialize_with = "de_opt_u64")]
    pub mem: Option<u64>,
    #[serde(default, deserialize_with = "de_opt_u64")]
    pub maxswap: Option<u64>,
    #[serde(default, deserialize_with = "de_opt_u64")]
    pub maxdisk: Option<u64>,
    #[serde(default, deserialize_with = "de_opt_u64")]
    pub disk: Option<u64>,
    /// Seconds.
    #[serde(default, deserialize_with = "de_opt_u64")]
    pub uptime: Option<u64>,
    #[serde(default, deserialize_with = "de_opt_u64")]
    pub pid: Option<u64>,
    #[serde(default)]
    pub ha: Option<HaStatus>,
}

/// One address of a running CT's interface.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
pub struct IpAddress {
    #[serde(rename = "ip-address")]
    pub address: String,
    /// `inet` or `inet6`.
    #[serde(rename = "ip-address-type")]
    pub family: String,
    #[serde(deserialize_with = "de_u64")]
    pub prefix: u64,
}

#[derive(Deserialize)]
struct RawInterface {
    name: String,
    #[serde(default)]
    hwaddr: Option<String>,
    #[serde(default, rename = "hardware-address")]
    hardware_address: Option<String>,
    #[serde(default)]
    inet: Option<String>,
    #[serde(default)]
    inet6: Option<String>,
    #[serde(default, rename = "ip-addresses")]
    ip_addresses: Option<Vec<IpAddress>>,
}

/// One interface from `GET .../lxc/{vmid}/interfaces`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Interface {
    pub name: String,
    /// Lower-case, as iproute2 prints it (the config uses upper case).
    pub hwaddr: Option<String>,
    /// All addresses; built from `inet`/`inet6` on PVE before 8.4, which lack `ip-addresses`.
    pub addresses: Vec<IpAddress>,
}

/// Parses `interfaces`: `null` (stopped CT) gives an empty list. Sorted by name.
pub fn parse_interfaces(stdout: &str) -> Result<Vec<Interface>, ParseError> {
    const W: &str = "GET /nodes/{node}/lxc/{vmid}/interfaces";
    let raw: Option<Vec<RawInterface>> = parse_json(W, stdout)?;
    let mut out: Vec<Interface> = raw
        .unwrap_or_default()
        .into_iter()
        .map(|r| {
            let addresses = match r.ip_addresses {
                Some(a) => a,
                None => [(r.inet, "inet"), (r.inet6, "inet6")]
                    .into_iter()
                    .filter_map(|(cidr, fam)| {
                        let cidr = cidr?;
                        let (a, p) = cidr.split_once('/')?;
                        Some(IpAddress {
                            address: a.to_string(),
                            family: fam.to_string(),
                            prefix: p.parse().ok()?,
                        })
                    })
                    .collect(),
            };
            Interface {
                name: r.name,
                hwaddr: r
                    .hardware_address
                    .or(r.hwaddr)
                    .map(|m| m.to_ascii_lowercase()),
                addresses,
            }
        })
        .collect();
    out.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(out)
}

/// One item of `GET /nodes/{node}/storage`.
#[derive(Clone, Debug, PartialEq, Deserialize)]
pub struct StorageInfo {
    pub storage: String,
    /// `dir`, `lvmthin`, `zfspool`, `nfs`, ...
    #[serde(rename = "type")]
    pub kind: String,
    /// Content types (`rootdir`, `vztmpl`, `images`, ...).
    #[serde(default, deserialize_with = "de_list")]
    pub content: BTreeSet<String>,
    #[serde(default, deserialize_with = "de_flag")]
    pub enabled: bool,
    #[serde(default, deserialize_with = "de_flag")]
    pub active: bool,
    #[serde(default, deserialize_with = "de_flag")]
    pub shared: bool,
    /// Bytes; 0 when inactive or disabled.
    #[serde(default, deserialize_with = "de_u64_default")]
    pub total: u64,
    #[serde(default, deserialize_with = "de_u64_default")]
    pub used: u64,
    #[serde(default, deserialize_with = "de_u64_default")]
    pub avail: u64,
}

impl StorageInfo {
    /// Whether containers' disks can live here.
    pub fn holds_rootdir(&self) -> bool {
        self.content.contains("rootdir")
    }
    /// Whether templates can be stored here.
    pub fn holds_vztmpl(&self) -> bool {
        self.content.contains("vztmpl")
    }
}

fn de_u64_default<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    Ok(de_opt_u64(d)?.unwrap_or(0))
}

/// One item of `GET /nodes/{node}/network?type=any_bridge`.
#[derive(Clone, Debug, PartialEq, Deserialize)]
pub struct Bridge {
    pub iface: String,
    /// `bridge`, `OVSBridge`, `vnet`, ...
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default, deserialize_with = "de_flag")]
    pub active: bool,
    #[serde(default, deserialize_with = "de_flag")]
    pub autostart: bool,
    #[serde(default)]
    pub cidr: Option<String>,
    #[serde(default)]
    pub address: Option<String>,
    #[serde(default)]
    pub gateway: Option<String>,
    #[serde(default)]
    pub cidr6: Option<String>,
    #[serde(default)]
    pub bridge_ports: Option<String>,
    #[serde(default, deserialize_with = "de_flag")]
    pub bridge_vlan_aware: bool,
    #[serde(default, deserialize_with = "de_opt_u64")]
    pub mtu: Option<u64>,
}

/// `GET /nodes/{node}/tasks/{upid}/status`.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
pub struct TaskStatus {
    pub upid: String,
    #[serde(default)]
    pub node: Option<String>,
    /// `running` or `stopped`.
    pub status: String,
    /// `OK`, `WARNINGS: n` or the error text; only once stopped.
    #[serde(default)]
    pub exitstatus: Option<String>,
    #[serde(rename = "type", default)]
    pub kind: Option<String>,
    #[serde(default)]
    pub id: Option<String>,
    #[serde(default)]
    pub user: Option<String>,
    #[serde(default, deserialize_with = "de_opt_u64")]
    pub starttime: Option<u64>,
}

impl TaskStatus {
    pub fn is_running(&self) -> bool {
        self.status == "running"
    }
    /// Stopped with `OK` or `WARNINGS: n`.
    pub fn succeeded(&self) -> bool {
        !self.is_running()
            && self
                .exitstatus
                .as_deref()
                .is_some_and(|e| e == "OK" || e.starts_with("WARNINGS"))
    }
}

/// `memory`, `swap` of node status.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct MemoryInfo {
    #[serde(default, deserialize_with = "de_u64_default")]
    pub total: u64,
    #[serde(default, deserialize_with = "de_u64_default")]
    pub used: u64,
    #[serde(default, deserialize_with = "de_u64_default")]
    pub free: u64,
    /// Absent for swap.
    #[serde(default, deserialize_with = "de_opt_u64")]
    pub available: Option<u64>,
}

/// `rootfs` of node status.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct FsInfo {
    #[serde(default, deserialize_with = "de_u64_default")]
    pub total: u64,
    #[serde(default, deserialize_with = "de_u64_default")]
    pub used: u64,
    #[serde(default, deserialize_with = "de_u64_default")]
    pub avail: u64,
}

/// `cpuinfo` of node status (its types are loose: `mhz` is a string).
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
pub struct CpuInfo {
    #[serde(default, deserialize_with = "de_opt_u64")]
    pub cpus: Option<u64>,
    #[serde(default, deserialize_with = "de_opt_u64")]
    pub cores: Option<u64>,
    #[serde(default, deserialize_with = "de_opt_u64")]
    pub sockets: Option<u64>,
    #[serde(default)]
    pub model: Option<String>,
    #[serde(default, deserialize_with = "de_opt_f64")]
    pub mhz: Option<f64>,
}

fn de_loadavg<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<f64>, D::Error> {
    let v = Option::<Vec<Value>>::deserialize(d)?.unwrap_or_default();
    v.iter()
        .map(|x| value_to_f64(x).ok_or_else(|| bad(x, "a load average")))
        .collect()
}

/// `GET /nodes/{node}/status`.
#[derive(Clone, Debug, PartialEq, Deserialize)]
pub struct NodeStatus {
    #[serde(default, deserialize_with = "de_opt_u64")]
    pub uptime: Option<u64>,
    /// Three values (strings in PVE's JSON).
    #[serde(default, deserialize_with = "de_loadavg")]
    pub loadavg: Vec<f64>,
    #[serde(default)]
    pub memory: MemoryInfo,
    #[serde(default)]
    pub swap: MemoryInfo,
    #[serde(default)]
    pub rootfs: FsInfo,
    #[serde(default)]
    pub cpuinfo: CpuInfo,
    /// `pve-manager/<ver>/<repoid>`.
    #[serde(default)]
    pub pveversion: Option<String>,
    #[serde(default)]
    pub kversion: Option<String>,
}

/// `GET /version`.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
pub struct Version {
    /// `9.1.2`
    pub version: String,
    /// `9.1`
    #[serde(default)]
    pub release: Option<String>,
    #[serde(default)]
    pub repoid: Option<String>,
}

impl Version {
    /// Major version number (`9` for `9.1.2`).
    pub fn major(&self) -> Option<u32> {
        self.version.split('.').next()?.parse().ok()
    }
}

/// One item of `GET /nodes/{node}/storage/{storage}/content`.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
pub struct StorageContent {
    pub volid: String,
    #[serde(default)]
    pub format: Option<String>,
    #[serde(default)]
    pub content: Option<String>,
    #[serde(default, deserialize_with = "de_u64_default")]
    pub size: u64,
    #[serde(default, deserialize_with = "de_opt_u64")]
    pub ctime: Option<u64>,
    #[serde(default, deserialize_with = "de_opt_u64")]
    pub vmid: Option<u64>,
}

/// One item of `GET /nodes/{node}/aplinfo` (the `pveam available` index).
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
pub struct AplInfo {
    /// File name for `pveam download`.
    pub template: String,
    #[serde(default)]
    pub package: Option<String>,
    #[serde(default)]
    pub version: Option<String>,
    #[serde(default)]
    pub os: Option<String>,
    #[serde(default)]
    pub section: Option<String>,
    #[serde(default)]
    pub architecture: Option<String>,
    /// Absolute download URL.
    #[serde(default)]
    pub location: Option<String>,
    #[serde(default)]
    pub sha512sum: Option<String>,
    #[serde(default)]
    pub md5sum: Option<String>,
    #[serde(default)]
    pub headline: Option<String>,
    #[serde(rename = "type", default)]
    pub kind: Option<String>,
}

/// One item of `GET /nodes`.
#[derive(Clone, Debug, PartialEq, Deserialize)]
pub struct ClusterNode {
    pub node: String,
    /// `online`, `offline`, `unknown`.
    pub status: String,
    #[serde(default, deserialize_with = "de_opt_u64")]
    pub maxcpu: Option<u64>,
    #[serde(default, deserialize_with = "de_opt_u64")]
    pub maxmem: Option<u64>,
    #[serde(default, deserialize_with = "de_opt_u64")]
    pub mem: Option<u64>,
    #[serde(default, deserialize_with = "de_opt_f64")]
    pub cpu: Option<f64>,
    #[serde(default)]
    pub ssl_fingerprint: Option<String>,
}

/// One item of `GET /cluster/resources?type=vm`.
#[derive(Clone, Debug, PartialEq, Deserialize)]
pub struct ClusterResource {
    pub id: String,
    #[serde(default, deserialize_with = "de_opt_u64")]
    pub vmid: Option<u64>,
    #[serde(default)]
    pub node: Option<String>,
    /// `lxc` or `qemu`.
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default)]
    pub status: Option<String>,
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default, deserialize_with = "de_list")]
    pub tags: BTreeSet<String>,
    #[serde(default)]
    pub lock: Option<String>,
    #[serde(default, deserialize_with = "de_opt_f64")]
    pub cpu: Option<f64>,
    #[serde(default, deserialize_with = "de_opt_u64")]
    pub maxmem: Option<u64>,
    #[serde(default, deserialize_with = "de_opt_u64")]
    pub mem: Option<u64>,
    /// The resource pool the guest is in.
    #[serde(default)]
    pub pool: Option<String>,
}

/// One item of `GET /cluster/status` (pve-manager `PVE/API2/Cluster.pm` `get_status`): a `cluster` entry (only
/// when the node is part of a cluster: `name`, `nodes`, `quorate`, `version`) and one `node` entry per member.
/// A standalone node answers a single `node` entry for itself (`nodeid` 0, `local` 1) and no `cluster` entry.
#[derive(Clone, Debug, PartialEq, Deserialize)]
pub struct ClusterStatusItem {
    /// `cluster` or `node`.
    #[serde(rename = "type")]
    pub kind: String,
    /// `cluster`, `node/<name>`.
    pub id: String,
    /// The cluster's name (corosync `cluster_name`) or the node's.
    pub name: String,
    #[serde(default, deserialize_with = "de_flag")]
    pub local: bool,
    #[serde(default, deserialize_with = "de_flag")]
    pub online: bool,
    #[serde(default, deserialize_with = "de_flag")]
    pub quorate: bool,
}

/// The cluster's name in a `GET /cluster/status` answer, `None` for a standalone node.
pub fn cluster_name(items: &[ClusterStatusItem]) -> Option<String> {
    items
        .iter()
        .find(|i| i.kind == "cluster")
        .map(|i| i.name.clone())
        .filter(|n| !n.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_as_strings_are_accepted() {
        let s: ContainerStatus = parse_json(
            "t",
            r#"{"vmid":"100","status":"running","maxmem":"1073741824","cpus":"1.5","template":"1"}"#,
        )
        .unwrap();
        assert_eq!(s.vmid, 100);
        assert_eq!(s.maxmem, Some(1 << 30));
        assert_eq!(s.cpus, Some(1.5));
        assert!(s.template);
        assert!(
            parse_json::<ContainerStatus>("t", r#"{"vmid":"abc","status":"running"}"#).is_err()
        );
    }

    #[test]
    fn null_interfaces_is_empty() {
        assert!(parse_interfaces("null\n").unwrap().is_empty());
    }

    #[test]
    fn interfaces_before_pve_8_4_use_inet() {
        let v = parse_interfaces(
            r#"[{"name":"eth0","hwaddr":"BC:24:11:00:00:01","inet":"10.0.0.5/24"}]"#,
        )
        .unwrap();
        assert_eq!(v[0].hwaddr.as_deref(), Some("bc:24:11:00:00:01"));
        assert_eq!(v[0].addresses[0].address, "10.0.0.5");
        assert_eq!(v[0].addresses[0].prefix, 24);
    }

    #[test]
    fn task_status_success_rules() {
        let mk = |status: &str, exit: Option<&str>| TaskStatus {
            upid: "u".into(),
            node: None,
            status: status.into(),
            exitstatus: exit.map(Into::into),
            kind: None,
            id: None,
            user: None,
            starttime: None,
        };
        assert!(mk("stopped", Some("OK")).succeeded());
        assert!(mk("stopped", Some("WARNINGS: 1")).succeeded());
        assert!(!mk("stopped", Some("unable to create CT 100 - x")).succeeded());
        assert!(!mk("running", None).succeeded());
    }

    #[test]
    fn cluster_status_names_the_cluster_or_none_when_standalone() {
        let clustered: Vec<ClusterStatusItem> = parse_json(
            "GET /cluster/status",
            concat!(
                r#"[{"type":"cluster","id":"cluster","name":"lab","nodes":2,"quorate":1,"version":3},"#,
                r#"{"type":"node","id":"node/pve1","name":"pve1","nodeid":1,"local":1,"online":1,"ip":"10.0.0.1","level":""},"#,
                r#"{"type":"node","id":"node/pve2","name":"pve2","nodeid":2,"local":0,"online":1,"ip":"10.0.0.2","level":""}]"#,
                "\n"
            ),
        )
        .unwrap();
        assert_eq!(cluster_name(&clustered).as_deref(), Some("lab"));
        assert!(clustered[0].quorate && clustered[1].local && !clustered[2].local);
        let standalone: Vec<ClusterStatusItem> = parse_json(
            "GET /cluster/status",
            r#"[{"type":"node","id":"node/pve1","name":"pve1","ip":"10.0.0.1","local":1,"nodeid":0,"online":1,"level":""}]"#,
        )
        .unwrap();
        assert_eq!(cluster_name(&standalone), None);
    }
}
