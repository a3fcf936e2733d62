//! PVE property strings (`net[n]`, `rootfs`/`mp[n]`, `features`, `startup`) and disk sizes: parsing what PVE
//! stores, and printing in PVE's stored form (CONTRACT §2.3–2.5) so a value read back compares equal.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use super::ParseError;

/// Parses a PVE boolean (`1|0|yes|no|on|off|true|false`, case-insensitive).
pub fn parse_bool(v: &str) -> Option<bool> {
    match v.to_ascii_lowercase().as_str() {
        "1" | "yes" | "on" | "true" => Some(true),
        "0" | "no" | "off" | "false" => Some(false),
        _ => None,
    }
}

fn b(v: bool) -> &'static str {
    if v {
        "1"
    } else {
        "0"
    }
}

/// Splits `k=v,k=v`; a first element without `=` is given to `default_key` when there is one.
pub fn split_kv(
    what: &'static str,
    s: &str,
    default_key: Option<&str>,
) -> Result<Vec<(String, String)>, ParseError> {
    let mut out = Vec::new();
    for (i, part) in s.split(',').enumerate() {
        let part = part.trim();
        if part.is_empty() {
            continue;
        }
        match part.split_once('=') {
            Some((k, v)) => out.push((k.trim().to_string(), v.trim().to_string())),
            None => match default_key {
                Some(dk) if i == 0 => out.push((dk.to_string(), part.to_string())),
                _ => {
                    return Err(ParseError::new(
                        what,
                        format!("`{part}` in `{s}` is not key=value"),
                    ))
                }
            },
        }
    }
    Ok(out)
}

fn pbool(what: &'static str, k: &str, v: &str) -> Result<bool, ParseError> {
    parse_bool(v).ok_or_else(|| ParseError::new(what, format!("{k}={v}: expected 0 or 1")))
}

fn pnum<T: std::str::FromStr>(what: &'static str, k: &str, v: &str) -> Result<T, ParseError> {
    v.parse()
        .map_err(|_| ParseError::new(what, format!("{k}={v}: expected a number")))
}

/// Parses a PVE disk size (`8G`, `512M`, `0T`, `1.5G`, plain bytes) into bytes.
pub fn parse_size(s: &str) -> Result<u64, ParseError> {
    let s = s.trim();
    let (num, mult) = match s.chars().last() {
        Some('K') | Some('k') => (&s[..s.len() - 1], 1u64 << 10),
        Some('M') | Some('m') => (&s[..s.len() - 1], 1 << 20),
        Some('G') | Some('g') => (&s[..s.len() - 1], 1 << 30),
        Some('T') | Some('t') => (&s[..s.len() - 1], 1 << 40),
        _ => (s, 1),
    };
    let n: f64 = num.parse().map_err(|_| {
        ParseError::new("disk size", format!("`{s}` is not like 8G, 512M or bytes"))
    })?;
    if n.is_nan() || n < 0.0 {
        return Err(ParseError::new("disk size", format!("`{s}` is negative")));
    }
    Ok((n * mult as f64).round() as u64)
}

/// The `size=` of a `rootfs` / `mpN` property string, in bytes; `None` when it has none or does not parse.
pub fn disk_size(prop: &str) -> Option<u64> {
    MountPoint::parse(prop).ok()?.size
}

/// Prints bytes like PVE's `format_size`: the largest exact binary unit (`8G`, `512M`), `0T` for zero.
pub fn format_size(bytes: u64) -> String {
    if bytes == 0 {
        return "0T".into();
    }
    for (unit, shift) in [("T", 40), ("G", 30), ("M", 20), ("K", 10)] {
        if bytes.trailing_zeros() >= shift {
            return format!("{}{unit}", bytes >> shift);
        }
    }
    bytes.to_string()
}

/// Prints a number without a needless `.0` (`rate=10`, `cpulimit=1.5`).
pub fn format_number(n: f64) -> String {
    if n.fract() == 0.0 && n.abs() < 1e15 {
        format!("{}", n as i64)
    } else {
        format!("{n}")
    }
}

/// A `net[n]` value.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct NetConfig {
    /// Interface name inside the CT (`eth0`), the only required key.
    pub name: String,
    pub bridge: Option<String>,
    /// Upper-case MAC as PVE stores it. Leave `None` on create to get a generated one; on set the driver sends the
    /// existing one back (CONTRACT §2.3: a netN without hwaddr gets a new MAC).
    pub hwaddr: Option<String>,
    /// `dhcp`, `manual` or an IPv4 CIDR.
    pub ip: Option<String>,
    pub gw: Option<String>,
    /// `auto`, `dhcp`, `manual` or an IPv6 CIDR.
    pub ip6: Option<String>,
    pub gw6: Option<String>,
    pub firewall: Option<bool>,
    /// VLAN tag 1..4094.
    pub tag: Option<u16>,
    pub trunks: Option<String>,
    pub mtu: Option<u32>,
    /// Rate limit in MB/s.
    pub rate: Option<f64>,
    pub link_down: Option<bool>,
    pub host_managed: Option<bool>,
    /// `type` (always `veth` once stored).
    pub kind: Option<String>,
    /// Keys this driver does not know, kept verbatim.
    pub extra: BTreeMap<String, String>,
}

impl NetConfig {
    pub fn parse(s: &str) -> Result<Self, ParseError> {
        const W: &str = "net property string";
        let mut n = NetConfig::default();
        for (k, v) in split_kv(W, s, None)? {
            match k.as_str() {
                "name" => n.name = v,
                "bridge" => n.bridge = Some(v),
                "hwaddr" => n.hwaddr = Some(v),
                "ip" => n.ip = Some(v),
                "gw" => n.gw = Some(v),
                "ip6" => n.ip6 = Some(v),
                "gw6" => n.gw6 = Some(v),
                "firewall" => n.firewall = Some(pbool(W, &k, &v)?),
                "tag" => n.tag = Some(pnum(W, &k, &v)?),
                "trunks" => n.trunks = Some(v),
                "mtu" => n.mtu = Some(pnum(W, &k, &v)?),
                "rate" => n.rate = Some(pnum(W, &k, &v)?),
                "link_down" => n.link_down = Some(pbool(W, &k, &v)?),
                "host-managed" => n.host_managed = Some(pbool(W, &k, &v)?),
                "type" => n.kind = Some(v),
                _ => {
                    n.extra.insert(k, v);
                }
            }
        }
        if n.name.is_empty() {
            return Err(ParseError::new(W, format!("`{s}` has no name=")));
        }
        Ok(n)
    }

    /// PVE's stored form: `name` first, then every other key in alphabetical order.
    pub fn to_property_string(&self) -> String {
        let mut m: BTreeMap<&str, String> = BTreeMap::new();
        let mut put = |k: &'static str, v: Option<String>| {
            if let Some(v) = v {
                m.insert(k, v);
            }
        };
        put("bridge", self.bridge.clone());
        put("firewall", self.firewall.map(|x| b(x).into()));
        put("gw", self.gw.clone());
        put("gw6", self.gw6.clone());
        put("host-managed", self.host_managed.map(|x| b(x).into()));
        put("hwaddr", self.hwaddr.clone());
        put("ip", self.ip.clone());
        put("ip6", self.ip6.clone());
        put("link_down", self.link_down.map(|x| b(x).into()));
        put("mtu", self.mtu.map(|x| x.to_string()));
        put("rate", self.rate.map(format_number));
        put("tag", self.tag.map(|x| x.to_string()));
        put("trunks", self.trunks.clone());
        put("type", self.kind.clone());
        for (k, v) in &self.extra {
            m.insert(k.as_str(), v.clone());
        }
        let mut s = format!("name={}", self.name);
        for (k, v) in m {
            let _ = write!(s, ",{k}={v}");
        }
        s
    }
}

/// A `rootfs` or `mp[n]` value as stored.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MountPoint {
    /// `local-lvm:vm-100-disk-0`, or a host path for bind mounts, or `STORAGE:GiB` before allocation.
    pub volume: String,
    /// Path inside the CT (mpN only).
    pub mp: Option<String>,
    /// Bytes.
    pub size: Option<u64>,
    pub backup: Option<bool>,
    pub ro: Option<bool>,
    pub acl: Option<bool>,
    pub quota: Option<bool>,
    pub replicate: Option<bool>,
    pub shared: Option<bool>,
    pub mountoptions: Option<String>,
    /// `keepattrs=` (mpN, PVE 9.2).
    pub keepattrs: Option<bool>,
    /// `idmap=` (PVE 9.2).
    pub idmap: Option<String>,
    pub extra: BTreeMap<String, String>,
}

impl MountPoint {
    pub fn parse(s: &str) -> Result<Self, ParseError> {
        const W: &str = "rootfs/mp property string";
        let mut m = MountPoint::default();
        for (k, v) in split_kv(W, s, Some("volume"))? {
            match k.as_str() {
                "volume" => m.volume = v,
                "mp" => m.mp = Some(v),
                "size" => m.size = Some(parse_size(&v)?),
                "backup" => m.backup = Some(pbool(W, &k, &v)?),
                "ro" => m.ro = Some(pbool(W, &k, &v)?),
                "acl" => m.acl = Some(pbool(W, &k, &v)?),
                "quota" => m.quota = Some(pbool(W, &k, &v)?),
                "replicate" => m.replicate = Some(pbool(W, &k, &v)?),
                "shared" => m.shared = Some(pbool(W, &k, &v)?),
                "mountoptions" => m.mountoptions = Some(v),
                "keepattrs" => m.keepattrs = Some(pbool(W, &k, &v)?),
                "idmap" => m.idmap = Some(v),
                _ => {
                    m.extra.insert(k, v);
                }
            }
        }
        if m.volume.is_empty() {
            return Err(ParseError::new(W, format!("`{s}` has no volume")));
        }
        Ok(m)
    }

    /// Stored form: volume, `mp=`, then the other keys alphabetically.
    pub fn to_property_string(&self) -> String {
        let mut s = self.volume.clone();
        if let Some(mp) = &self.mp {
            let _ = write!(s, ",mp={mp}");
        }
        let mut m: BTreeMap<&str, String> = BTreeMap::new();
        for (k, v) in [
            ("acl", self.acl),
            ("backup", self.backup),
            ("keepattrs", self.keepattrs),
            ("quota", self.quota),
            ("replicate", self.replicate),
            ("ro", self.ro),
            ("shared", self.shared),
        ] {
            if let Some(v) = v {
                m.insert(k, b(v).into());
            }
        }
        if let Some(o) = &self.mountoptions {
            m.insert("mountoptions", o.clone());
        }
        if let Some(i) = &self.idmap {
            m.insert("idmap", i.clone());
        }
        if let Some(sz) = self.size {
            m.insert("size", format_size(sz));
        }
        for (k, v) in &self.extra {
            m.insert(k.as_str(), v.clone());
        }
        for (k, v) in m {
            let _ = write!(s, ",{k}={v}");
        }
        s
    }

    /// `mountoptions=` as a list (empty when none).
    pub fn mount_option_list(&self) -> Vec<String> {
        self.mountoptions
            .as_deref()
            .unwrap_or("")
            .split(';')
            .filter(|o| !o.is_empty())
            .map(str::to_string)
            .collect()
    }

    /// The storage ID of a storage volume (`local-lvm` in `local-lvm:vm-100-disk-0`); `None` for bind/device mounts.
    pub fn storage(&self) -> Option<&str> {
        if self.volume.starts_with('/') {
            None
        } else {
            self.volume.split_once(':').map(|(s, _)| s)
        }
    }
}

impl crate::spec::DeviceSpec {
    /// A `devN` value: `[path=]/dev/..[,deny-write=0|1][,gid=N][,mode=0NNN][,uid=N]`.
    pub fn parse(s: &str) -> Result<Self, ParseError> {
        const W: &str = "dev property string";
        let mut d = crate::spec::DeviceSpec::default();
        for (k, v) in split_kv(W, s, Some("path"))? {
            match k.as_str() {
                "path" => d.path = v,
                "mode" => d.mode = Some(v),
                "uid" => d.uid = Some(pnum(W, &k, &v)?),
                "gid" => d.gid = Some(pnum(W, &k, &v)?),
                "deny-write" => d.deny_write = Some(pbool(W, &k, &v)?),
                _ => return Err(ParseError::new(W, format!("unknown key `{k}` in `{s}`"))),
            }
        }
        if d.path.is_empty() {
            return Err(ParseError::new(W, format!("`{s}` has no path")));
        }
        Ok(d)
    }

    /// Stored form: `path=` first, then the other keys alphabetically.
    pub fn to_property_string(&self) -> String {
        let mut s = format!("path={}", self.path);
        if let Some(v) = self.deny_write {
            let _ = write!(s, ",deny-write={}", b(v));
        }
        if let Some(v) = self.gid {
            let _ = write!(s, ",gid={v}");
        }
        if let Some(v) = &self.mode {
            let _ = write!(s, ",mode={v}");
        }
        if let Some(v) = self.uid {
            let _ = write!(s, ",uid={v}");
        }
        s
    }
}

/// The `features` value. Every flag defaults to off, as in PVE.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Features {
    pub nesting: bool,
    pub fuse: bool,
    pub keyctl: bool,
    pub mknod: bool,
    pub force_rw_sys: bool,
    /// Allowed filesystem types for mount (`nfs`, `cifs`, ...).
    pub mount: Vec<String>,
}

impl Features {
    pub fn parse(s: &str) -> Result<Self, ParseError> {
        const W: &str = "features property string";
        let mut f = Features::default();
        for (k, v) in split_kv(W, s, None)? {
            match k.as_str() {
                "nesting" => f.nesting = pbool(W, &k, &v)?,
                "fuse" => f.fuse = pbool(W, &k, &v)?,
                "keyctl" => f.keyctl = pbool(W, &k, &v)?,
                "mknod" => f.mknod = pbool(W, &k, &v)?,
                "force_rw_sys" => f.force_rw_sys = pbool(W, &k, &v)?,
                "mount" => {
                    f.mount = v
                        .split([';', ' '])
                        .filter(|x| !x.is_empty())
                        .map(str::to_string)
                        .collect()
                }
                _ => {
                    return Err(ParseError::new(
                        W,
                        format!("unknown feature `{k}` in `{s}`"),
                    ))
                }
            }
        }
        Ok(f)
    }

    /// True when nothing is enabled (then the option is left out or deleted).
    pub fn is_empty(&self) -> bool {
        *self == Features::default()
    }

    /// Only the enabled flags, alphabetically (`keyctl=1,nesting=1`); empty when nothing is enabled.
    pub fn to_property_string(&self) -> String {
        let mut parts = Vec::new();
        for (k, v) in [
            ("force_rw_sys", self.force_rw_sys),
            ("fuse", self.fuse),
            ("keyctl", self.keyctl),
            ("mknod", self.mknod),
        ] {
            if v {
                parts.push(format!("{k}=1"));
            }
        }
        if !self.mount.is_empty() {
            parts.push(format!("mount={}", self.mount.join(";")));
        }
        if self.nesting {
            parts.push("nesting=1".into());
        }
        parts.join(",")
    }
}

/// The `startup` value: boot order and delays in seconds.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Startup {
    pub order: Option<u32>,
    pub up: Option<u32>,
    pub down: Option<u32>,
}

impl Startup {
    pub fn parse(s: &str) -> Result<Self, ParseError> {
        const W: &str = "startup property string";
        let mut st = Startup::default();
        for (k, v) in split_kv(W, s, Some("order"))? {
            match k.as_str() {
                "order" => st.order = Some(pnum(W, &k, &v)?),
                "up" => st.up = Some(pnum(W, &k, &v)?),
                "down" => st.down = Some(pnum(W, &k, &v)?),
                _ => return Err(ParseError::new(W, format!("unknown key `{k}` in `{s}`"))),
            }
        }
        Ok(st)
    }

    /// `order=3,up=60,down=60` (only the keys that are set).
    pub fn to_property_string(&self) -> String {
        let mut parts = Vec::new();
        if let Some(o) = self.order {
            parts.push(format!("order={o}"));
        }
        if let Some(u) = self.up {
            parts.push(format!("up={u}"));
        }
        if let Some(d) = self.down {
            parts.push(format!("down={d}"));
        }
        parts.join(",")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn net_round_trip_in_stored_order() {
        let s =
            "name=eth0,bridge=vmbr0,firewall=1,hwaddr=BC:24:11:5E:7A:01,ip=dhcp,ip6=auto,type=veth";
        let n = NetConfig::parse(s).unwrap();
        assert_eq!(n.bridge.as_deref(), Some("vmbr0"));
        assert_eq!(n.firewall, Some(true));
        assert_eq!(n.to_property_string(), s);
    }

    #[test]
    fn net_requires_name() {
        assert!(NetConfig::parse("bridge=vmbr0").is_err());
        assert!(NetConfig::parse("name=eth0,tag=abc").is_err());
    }

    #[test]
    fn mountpoint_forms() {
        let m =
            MountPoint::parse("local-lvm:vm-101-disk-1,mp=/var/lib/postgresql,backup=1,size=64G")
                .unwrap();
        assert_eq!(m.size, Some(64 << 30));
        assert_eq!(m.storage(), Some("local-lvm"));
        assert_eq!(
            m.to_property_string(),
            "local-lvm:vm-101-disk-1,mp=/var/lib/postgresql,backup=1,size=64G"
        );
        let bind = MountPoint::parse("volume=/mnt/bindmounts/shared,mp=/shared").unwrap();
        assert_eq!(bind.storage(), None);
        assert_eq!(
            bind.to_property_string(),
            "/mnt/bindmounts/shared,mp=/shared"
        );
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("8G").unwrap(), 8 << 30);
        assert_eq!(parse_size("512M").unwrap(), 512 << 20);
        assert_eq!(parse_size("0.5G").unwrap(), 512 << 20);
        assert_eq!(parse_size("1024").unwrap(), 1024);
        assert!(parse_size("8X").is_err());
        assert_eq!(format_size(8 << 30), "8G");
        assert_eq!(format_size(512 << 20), "512M");
        assert_eq!(format_size(0), "0T");
        assert_eq!(format_size(1 << 40), "1T");
        assert_eq!(format_size(1000), "1000");
        assert_eq!(disk_size("local-lvm:vm-100-disk-0,size=8G"), Some(8 << 30));
        assert_eq!(disk_size("local:100/x.raw,size=512M"), Some(512 << 20));
        assert_eq!(disk_size("local:subvol-1,size=1.5T"), Some(3 << 39));
        assert_eq!(disk_size("local:x"), None);
    }

    #[test]
    fn features_and_startup() {
        let f = Features::parse("nesting=1,keyctl=0,mount=nfs;cifs").unwrap();
        assert!(f.nesting && !f.keyctl);
        assert_eq!(f.mount, vec!["nfs", "cifs"]);
        assert_eq!(f.to_property_string(), "mount=nfs;cifs,nesting=1");
        assert!(Features::parse("bogus=1").is_err());
        assert!(Features::default().is_empty());
        assert_eq!(Startup::parse("3").unwrap().order, Some(3));
        let s = Startup::parse("order=1,up=30").unwrap();
        assert_eq!(
            s,
            Startup {
                order: Some(1),
                up: Some(30),
                down: None
            }
        );
        assert_eq!(s.to_property_string(), "order=1,up=30");
    }

    #[test]
    fn bools() {
        for t in ["1", "yes", "ON", "true"] {
            assert_eq!(parse_bool(t), Some(true));
        }
        for f in ["0", "no", "off", "False"] {
            assert_eq!(parse_bool(f), Some(false));
        }
        assert_eq!(parse_bool("2"), None);
    }
}
