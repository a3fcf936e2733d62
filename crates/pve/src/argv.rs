//! Pure argv builders for `pct create` and `pct set`, with the validation PVE's schema would apply
//! (CONTRACT §2.2–2.5), so bad input fails here with the field named instead of as a 400 from PVE.

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::Path;

use crate::error::PveError;
use crate::parse::propstr::format_number;
use crate::parse::NetConfig;
use crate::spec::{ConfigChange, CreateSpec, RootfsSpec};

mod mounts;
mod system;
pub use mounts::{device_value, mount_point_value, MOUNT_OPTIONS};
use system::{check_arch, check_hookscript, system};
pub use system::{is_hookscript_volid, ARCHES, CMODES, MAX_TTY};

type R<T> = Result<T, PveError>;

/// Checks a vmid (100..=999999999).
pub fn check_vmid(vmid: u32) -> R<()> {
    if (100..=999_999_999).contains(&vmid) {
        Ok(())
    } else {
        Err(PveError::invalid(
            None,
            "vmid",
            vmid,
            "an integer from 100 to 999999999",
        ))
    }
}

fn is_dns_label(l: &str) -> bool {
    !l.is_empty()
        && l.len() <= 63
        && l.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
        && !l.starts_with('-')
        && !l.ends_with('-')
}

/// PVE's `dns-name` format.
pub fn is_dns_name(s: &str) -> bool {
    !s.is_empty() && s.len() <= 255 && s.split('.').all(is_dns_label)
}

pub use pxfleet_pvekeys::is_storage_id;

fn is_tag(s: &str) -> bool {
    let mut cs = s.chars();
    matches!(cs.next(), Some(c) if c.is_ascii_alphanumeric() || c == '_')
        && cs.all(|c| c.is_ascii_alphanumeric() || "_-+.".contains(c))
}

/// A template volid `STORAGE:vztmpl/FILE` with a vztmpl extension, or an absolute path.
pub fn is_template_volid(s: &str) -> bool {
    let lower = s.to_ascii_lowercase();
    let ext_ok = [".tar", ".tar.gz", ".tar.xz", ".tar.zst", ".tar.bz2"]
        .iter()
        .any(|e| lower.ends_with(e));
    if s.starts_with('/') {
        return ext_ok;
    }
    match s.split_once(":vztmpl/") {
        Some((st, file)) => is_storage_id(st) && !file.is_empty() && !file.contains('/') && ext_ok,
        None => false,
    }
}

fn is_mac_unicast(s: &str) -> bool {
    let parts: Vec<&str> = s.split(':').collect();
    parts.len() == 6
        && parts
            .iter()
            .all(|p| p.len() == 2 && p.chars().all(|c| c.is_ascii_hexdigit()))
        && u8::from_str_radix(parts[0], 16).is_ok_and(|b| b & 1 == 0)
}

fn check_cidr(s: &str, v6: bool) -> bool {
    let Some((a, p)) = s.split_once('/') else {
        return false;
    };
    let Ok(p) = p.parse::<u8>() else { return false };
    if v6 {
        a.parse::<Ipv6Addr>().is_ok() && (8..=128).contains(&p)
    } else {
        a.parse::<Ipv4Addr>().is_ok() && (8..=32).contains(&p)
    }
}

/// A mount path inside the container as PVE's `verify_lxc_mp_string` takes it: no `.` or `..` component (PVE:
/// `/./`, `/../`, a trailing `/.` or `/..`, a leading `../`), no `,` (the property string's separator); relative
/// to the container's root when it does not start with `/` (bpg's own tests mount `mnt/local`).
pub(crate) fn check_mp_path(p: &str) -> bool {
    !p.trim_matches('/').is_empty()
        && !p.split('/').any(|c| c == "." || c == "..")
        && !p.contains(',')
}

/// Validates one NIC for `netN`.
pub fn check_net(vmid: u32, index: u32, n: &NetConfig) -> R<()> {
    let v = Some(vmid);
    let f = |k: &str| format!("net{index}.{k}");
    if index > 31 {
        return Err(PveError::invalid(v, "net index", index, "net0 to net31"));
    }
    if n.name.is_empty()
        || !n
            .name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
    {
        return Err(PveError::invalid(
            v,
            &f("name"),
            &n.name,
            "an interface name like eth0",
        ));
    }
    if let Some(b) = &n.bridge {
        if b.is_empty() || b.contains([',', '=', ' ']) {
            return Err(PveError::invalid(
                v,
                &f("bridge"),
                b,
                "a bridge name like vmbr0",
            ));
        }
    }
    if let Some(t) = &n.trunks {
        // PVE's pattern `\d+(?:;\d+)*`; an id outside 1..4094 fails when the interface is plugged
        let ok = t.split(';').all(|id| {
            !id.is_empty()
                && id.bytes().all(|b| b.is_ascii_digit())
                && id.parse::<u16>().is_ok_and(|x| (1..=4094).contains(&x))
        });
        if !ok {
            return Err(PveError::invalid(
                v,
                &f("trunks"),
                t,
                "VLAN ids 1 to 4094 separated by ';' (10;20)",
            ));
        }
    }
    if let Some(m) = &n.hwaddr {
        if !is_mac_unicast(m) {
            return Err(PveError::invalid(
                v,
                &f("hwaddr"),
                m,
                "a unicast MAC like BC:24:11:00:00:01",
            ));
        }
    }
    if let Some(ip) = &n.ip {
        if !(ip == "dhcp" || ip == "manual" || check_cidr(ip, false)) {
            return Err(PveError::invalid(
                v,
                &f("ip"),
                ip,
                "dhcp, manual or IPv4/CIDR with prefix 8..32",
            ));
        }
    }
    if let Some(ip) = &n.ip6 {
        if !(ip == "auto" || ip == "dhcp" || ip == "manual" || check_cidr(ip, true)) {
            return Err(PveError::invalid(
                v,
                &f("ip6"),
                ip,
                "auto, dhcp, manual or IPv6/CIDR with prefix 8..128",
            ));
        }
    }
    if let Some(gw) = &n.gw {
        if gw.parse::<Ipv4Addr>().is_err() {
            return Err(PveError::invalid(v, &f("gw"), gw, "an IPv4 address"));
        }
    }
    if let Some(gw) = &n.gw6 {
        if gw.parse::<Ipv6Addr>().is_err() {
            return Err(PveError::invalid(v, &f("gw6"), gw, "an IPv6 address"));
        }
    }
    if let Some(t) = n.tag {
        if !(1..=4094).contains(&t) {
            return Err(PveError::invalid(
                v,
                &f("tag"),
                t,
                "a VLAN id from 1 to 4094",
            ));
        }
    }
    if let Some(m) = n.mtu {
        if !(64..=65535).contains(&m) {
            return Err(PveError::invalid(
                v,
                &f("mtu"),
                m,
                "an MTU from 64 to 65535",
            ));
        }
    }
    if let Some(r) = n.rate {
        if r.is_nan() || r < 0.0 {
            return Err(PveError::invalid(v, &f("rate"), r, "a rate in MB/s >= 0"));
        }
    }
    if n.host_managed == Some(true) && n.ip6.as_deref() == Some("auto") {
        return Err(PveError::invalid(
            v,
            &f("ip6"),
            "auto",
            "not auto together with host-managed=1",
        ));
    }
    Ok(())
}

fn rootfs_value(vmid: u32, r: &RootfsSpec, o: &crate::spec::RootfsOptions) -> R<String> {
    if !is_storage_id(&r.storage) {
        return Err(PveError::invalid(
            Some(vmid),
            "rootfs.storage",
            &r.storage,
            "a storage ID like local-lvm",
        ));
    }
    let m = o.applied_to(&crate::parse::MountPoint {
        volume: format!("{}:{}", r.storage, r.size_gib),
        ..Default::default()
    });
    check_rootfs_options(vmid, &m)?;
    Ok(m.to_property_string())
}

/// `mountoptions=` of a rootfs value: only what PVE accepts.
fn check_rootfs_options(vmid: u32, m: &crate::parse::MountPoint) -> R<()> {
    for o in m.mountoptions.as_deref().unwrap_or("").split(';') {
        if !o.is_empty() && !mounts::MOUNT_OPTIONS.contains(&o) {
            return Err(PveError::invalid(
                Some(vmid),
                "rootfs.mountoptions",
                o,
                &format!("one of {}", mounts::MOUNT_OPTIONS.join(", ")),
            ));
        }
    }
    Ok(())
}

fn check_tags(vmid: u32, tags: &[String]) -> R<String> {
    for t in tags {
        if !is_tag(t) {
            return Err(PveError::invalid(
                Some(vmid),
                "tags",
                t,
                "tags of [a-z0-9_][a-z0-9_+.-]*",
            ));
        }
    }
    let set: BTreeSet<String> = tags.iter().map(|t| t.to_ascii_lowercase()).collect();
    Ok(set.into_iter().collect::<Vec<_>>().join(";"))
}

fn check_nameservers(vmid: u32, ns: &[String]) -> R<String> {
    for n in ns {
        let addr = n.split('%').next().unwrap_or("");
        if addr.parse::<IpAddr>().is_err() {
            return Err(PveError::invalid(
                Some(vmid),
                "nameserver",
                n,
                "an IP address",
            ));
        }
    }
    Ok(ns.join(" "))
}

fn check_searchdomains(vmid: u32, d: &[String]) -> R<String> {
    for x in d {
        if !is_dns_name(x) {
            return Err(PveError::invalid(
                Some(vmid),
                "searchdomain",
                x,
                "a DNS name",
            ));
        }
    }
    Ok(d.join(" "))
}

fn check_hostname(vmid: u32, h: &str) -> R<()> {
    if is_dns_name(h) {
        Ok(())
    } else {
        Err(PveError::invalid(
            Some(vmid),
            "hostname",
            h,
            "a DNS name (letters, digits, '-', dots; no '_')",
        ))
    }
}

fn check_description(vmid: u32, d: &str) -> R<()> {
    if d.len() > 8192 {
        Err(PveError::invalid(
            Some(vmid),
            "description",
            format!("<{} bytes>", d.len()),
            "at most 8192 bytes",
        ))
    } else {
        Ok(())
    }
}

fn check_features(vmid: u32, f: &crate::parse::Features) -> R<()> {
    for m in &f.mount {
        if m.is_empty() || !m.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return Err(PveError::invalid(
                Some(vmid),
                "features.mount",
                m,
                "filesystem types like nfs or cifs",
            ));
        }
    }
    Ok(())
}

struct Args(Vec<String>);

impl Args {
    fn opt(&mut self, k: &str, v: impl Into<String>) {
        self.0.push(format!("--{k}"));
        self.0.push(v.into());
    }
    fn flag(&mut self, k: &str, v: bool) {
        self.opt(k, if v { "1" } else { "0" });
    }
}

/// Common numeric checks shared by create and set.
fn resources(
    a: &mut Args,
    vmid: u32,
    cores: Option<u32>,
    cpulimit: Option<f64>,
    cpuunits: Option<u32>,
    memory: Option<u32>,
    swap: Option<u32>,
) -> R<()> {
    let v = Some(vmid);
    if let Some(c) = cores {
        if !(1..=8192).contains(&c) {
            return Err(PveError::invalid(v, "cores", c, "1 to 8192"));
        }
        a.opt("cores", c.to_string());
    }
    if let Some(l) = cpulimit {
        if !(0.0..=8192.0).contains(&l) {
            return Err(PveError::invalid(v, "cpulimit", l, "0 (unlimited) to 8192"));
        }
        a.opt("cpulimit", format_number(l));
    }
    if let Some(u) = cpuunits {
        if u > 500_000 {
            return Err(PveError::invalid(
                v,
                "cpuunits",
                u,
                "0 to 500000 (cgroup v2 stores at most 10000)",
            ));
        }
        a.opt("cpuunits", u.to_string());
    }
    if let Some(m) = memory {
        if m < 16 {
            return Err(PveError::invalid(v, "memory", m, "at least 16 MiB"));
        }
        a.opt("memory", m.to_string());
    }
    if let Some(s) = swap {
        a.opt("swap", s.to_string());
    }
    Ok(())
}

/// Arguments after `pct` for `pct create`. `ssh_keys_file` is the 0600 file holding `spec.ssh_public_keys`
/// (required when there are keys). Option order is fixed (golden-tested).
pub fn create_args(spec: &CreateSpec, ssh_keys_file: Option<&Path>) -> R<Vec<String>> {
    let vmid = spec.vmid;
    check_vmid(vmid)?;
    if !is_template_volid(&spec.template) {
        return Err(PveError::invalid(
            Some(vmid),
            "template",
            &spec.template,
            "a volume ID like local:vztmpl/debian-13-standard_13.6-1_amd64.tar.zst",
        ));
    }
    let mut a = Args(vec![
        "create".into(),
        vmid.to_string(),
        spec.template.clone(),
    ]);
    if let Some(h) = &spec.hostname {
        check_hostname(vmid, h)?;
        a.opt("hostname", h.clone());
    }
    if let Some(x) = &spec.arch {
        check_arch(vmid, x)?;
        a.opt("arch", x.clone());
    }
    if let Some(x) = &spec.ostype {
        a.opt("ostype", x.clone());
    }
    resources(
        &mut a,
        vmid,
        spec.cores,
        spec.cpulimit,
        spec.cpuunits,
        spec.memory,
        spec.swap,
    )?;
    a.opt(
        "rootfs",
        rootfs_value(vmid, &spec.rootfs, &spec.rootfs_options)?,
    );
    for (i, m) in &spec.mount_points {
        a.opt(&format!("mp{i}"), mount_point_value(vmid, *i, m)?);
    }
    for (i, d) in &spec.devices {
        a.opt(&format!("dev{i}"), device_value(vmid, *i, d)?);
    }
    for (i, n) in &spec.nets {
        check_net(vmid, *i, n)?;
        a.opt(&format!("net{i}"), n.to_property_string());
    }
    if !spec.features.is_empty() {
        check_features(vmid, &spec.features)?;
        a.opt("features", spec.features.to_property_string());
    }
    if !spec.nameservers.is_empty() {
        a.opt("nameserver", check_nameservers(vmid, &spec.nameservers)?);
    }
    if !spec.searchdomains.is_empty() {
        a.opt(
            "searchdomain",
            check_searchdomains(vmid, &spec.searchdomains)?,
        );
    }
    if let Some(o) = spec.onboot {
        a.flag("onboot", o);
    }
    if let Some(p) = spec.protection {
        a.flag("protection", p);
    }
    if let Some(s) = &spec.startup {
        if *s != Default::default() {
            a.opt("startup", s.to_property_string());
        }
    }
    if !spec.tags.is_empty() {
        a.opt("tags", check_tags(vmid, &spec.tags)?);
    }
    if let Some(d) = &spec.description {
        check_description(vmid, d)?;
        a.opt("description", d.clone());
    }
    if let Some(h) = &spec.hookscript {
        check_hookscript(vmid, h)?;
        a.opt("hookscript", h.clone());
    }
    if let Some(p) = &spec.pool {
        if !crate::node::is_pool_id(p) {
            return Err(PveError::invalid(
                Some(vmid),
                "pool",
                p,
                "a pool name: letters, digits, '.', '-', '_', starting with a letter (up to 3 levels with '/')",
            ));
        }
        a.opt("pool", p.clone());
    }
    system(
        &mut a,
        vmid,
        spec.timezone.as_ref(),
        spec.console,
        spec.tty,
        spec.cmode.as_ref(),
    )?;
    // env is written into the config file after the create (lxc.environment.runtime lines): checked here.
    if let Some(env) = &spec.env {
        crate::runtime::env_entries(vmid, env)?;
    }
    if let Some(e) = spec.entrypoint.as_ref().filter(|e| !e.is_empty()) {
        crate::runtime::check_entrypoint(vmid, e)?;
        a.opt("entrypoint", e.clone());
    }
    a.flag("unprivileged", spec.unprivileged);
    if !spec.ssh_public_keys.is_empty() {
        for k in &spec.ssh_public_keys {
            if k.trim().is_empty() || k.contains('\n') {
                return Err(PveError::invalid(
                    Some(vmid),
                    "ssh_public_keys",
                    k,
                    "one public key per entry, no newlines",
                ));
            }
        }
        let path = ssh_keys_file.ok_or_else(|| {
            PveError::invalid(
                Some(vmid),
                "ssh_public_keys",
                "<keys>",
                "a key file (internal: none was written)",
            )
        })?;
        a.opt("ssh-public-keys", path.display().to_string());
    }
    Ok(a.0)
}

/// The content of the SSH key file: one key per line.
pub fn ssh_keys_file_content(keys: &[String]) -> String {
    let mut s = String::new();
    for k in keys {
        s.push_str(k.trim());
        s.push('\n');
    }
    s
}

/// Arguments after `pct` for `pct set`. NICs are sent as given (fill in `hwaddr` first; `Node::set` does).
pub fn set_args(vmid: u32, c: &ConfigChange) -> R<Vec<String>> {
    check_vmid(vmid)?;
    let mut a = Args(vec!["set".into(), vmid.to_string()]);
    let mut delete = c.delete.clone();
    if let Some(h) = &c.hostname {
        check_hostname(vmid, h)?;
        a.opt("hostname", h.clone());
    }
    resources(
        &mut a, vmid, c.cores, c.cpulimit, c.cpuunits, c.memory, c.swap,
    )?;
    if let Some(r) = &c.rootfs {
        check_rootfs_options(vmid, r)?;
        a.opt("rootfs", r.to_property_string());
    }
    for (i, m) in &c.mount_points {
        a.opt(&format!("mp{i}"), mount_point_value(vmid, *i, m)?);
    }
    for (i, d) in &c.devices {
        a.opt(&format!("dev{i}"), device_value(vmid, *i, d)?);
    }
    for (i, n) in &c.nets {
        check_net(vmid, *i, n)?;
        a.opt(&format!("net{i}"), n.to_property_string());
    }
    if let Some(f) = &c.features {
        if f.is_empty() {
            delete.insert("features".into());
        } else {
            check_features(vmid, f)?;
            a.opt("features", f.to_property_string());
        }
    }
    match &c.nameservers {
        Some(ns) if ns.is_empty() => {
            delete.insert("nameserver".into());
        }
        Some(ns) => a.opt("nameserver", check_nameservers(vmid, ns)?),
        None => {}
    }
    match &c.searchdomains {
        Some(d) if d.is_empty() => {
            delete.insert("searchdomain".into());
        }
        Some(d) => a.opt("searchdomain", check_searchdomains(vmid, d)?),
        None => {}
    }
    if let Some(o) = c.onboot {
        a.flag("onboot", o);
    }
    if let Some(p) = c.protection {
        a.flag("protection", p);
    }
    if let Some(o) = &c.ostype {
        a.opt("ostype", o.clone());
    }
    if let Some(x) = &c.arch {
        check_arch(vmid, x)?;
        a.opt("arch", x.clone());
    }
    if let Some(h) = &c.hookscript {
        check_hookscript(vmid, h)?;
        a.opt("hookscript", h.clone());
    }
    system(
        &mut a,
        vmid,
        c.timezone.as_ref(),
        c.console,
        c.tty,
        c.cmode.as_ref(),
    )?;
    // env is written into the config file by the caller (lxc.environment.runtime lines): checked here.
    if let Some(e) = &c.env {
        crate::runtime::env_entries(vmid, e)?;
    }
    if let Some(e) = &c.entrypoint {
        crate::runtime::check_entrypoint(vmid, e)?;
        a.opt("entrypoint", e.clone());
    }
    match &c.startup {
        Some(s) if *s == Default::default() => {
            delete.insert("startup".into());
        }
        Some(s) => a.opt("startup", s.to_property_string()),
        None => {}
    }
    match &c.tags {
        Some(t) if t.is_empty() => {
            delete.insert("tags".into());
        }
        Some(t) => a.opt("tags", check_tags(vmid, t)?),
        None => {}
    }
    match &c.description {
        Some(d) if d.is_empty() => {
            delete.insert("description".into());
        }
        Some(d) => {
            check_description(vmid, d)?;
            a.opt("description", d.clone());
        }
        None => {}
    }
    for d in &delete {
        if matches!(d.as_str(), "memory" | "rootfs" | "ostype") {
            return Err(PveError::invalid(
                Some(vmid),
                "delete",
                d,
                "a key other than memory, rootfs or ostype",
            ));
        }
    }
    if !delete.is_empty() {
        a.opt("delete", delete.into_iter().collect::<Vec<_>>().join(","));
    }
    if !c.revert.is_empty() {
        a.opt(
            "revert",
            c.revert.iter().cloned().collect::<Vec<_>>().join(","),
        );
    }
    if a.0.len() == 2 {
        return Err(PveError::invalid(
            Some(vmid),
            "change",
            "<empty>",
            "at least one option to set or delete",
        ));
    }
    Ok(a.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::{MountPointSpec, MountVolume};

    #[test]
    fn validators() {
        assert!(is_dns_name("web-1.example.com"));
        assert!(!is_dns_name("web_1"));
        assert!(!is_dns_name("-web"));
        assert!(is_template_volid(
            "local:vztmpl/debian-13-standard_13.6-1_amd64.tar.zst"
        ));
        assert!(is_template_volid("local:vztmpl/oci.tar"));
        assert!(!is_template_volid("local:vztmpl/x.tgz"));
        assert!(!is_template_volid("debian.tar.zst"));
        assert!(is_mac_unicast("BC:24:11:5E:7A:01"));
        assert!(!is_mac_unicast("01:24:11:5E:7A:01"));
        assert!(check_cidr("192.168.7.100/24", false));
        assert!(!check_cidr("192.168.7.100/4", false));
        assert!(check_cidr("fd00::5/64", true));
        assert!(is_storage_id("local-lvm"));
        assert!(is_storage_id("Local"), "PVE's parse_id is case-insensitive");
        assert!(check_mp_path("/var/lib/x"));
        assert!(!check_mp_path("/var/../etc"));
        assert!(
            check_mp_path("mnt/local"),
            "relative to the container's root, as PVE takes it"
        );
        assert!(!check_mp_path("../etc"));
        assert!(!check_mp_path("/"));
        assert!(!check_mp_path("/a/."));
    }

    #[test]
    fn mount_options_are_carried_and_checked() {
        let mut m = MountPointSpec {
            volume: MountVolume::Storage {
                storage: "local-zfs".into(),
                size_gib: 8,
            },
            path: "/data".into(),
            backup: Some(true),
            read_only: None,
            mount_options: vec!["noatime".into(), "nodev".into()],
            acl: None,
            quota: None,
            replicate: None,
            shared: None,
            keepattrs: None,
            idmap: None,
        };
        assert_eq!(
            mount_point_value(100, 0, &m).unwrap(),
            "local-zfs:8,mp=/data,backup=1,mountoptions=noatime;nodev"
        );
        m.mount_options = vec!["noatime".into(), "rw".into()];
        let e = mount_point_value(100, 0, &m).unwrap_err().to_string();
        assert!(e.contains("mp0.mountoptions"), "{e}");
        m.mount_options.clear();
        assert_eq!(
            mount_point_value(100, 0, &m).unwrap(),
            "local-zfs:8,mp=/data,backup=1"
        );
    }
}
