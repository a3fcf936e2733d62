//! PVE's named formats (`pve-node`, `ipv4`, `dns-name`, `pve-configid`, ...) and its list splitting.

use std::sync::OnceLock;

use regex::Regex;

fn re(pat: &'static str) -> Regex {
    Regex::new(pat).expect("static regex")
}

fn ipv4_ok(s: &str) -> bool {
    s.parse::<std::net::Ipv4Addr>().is_ok()
}

fn ipv6_ok(s: &str) -> bool {
    s.parse::<std::net::Ipv6Addr>().is_ok()
}

fn cidr_ok(s: &str, v6: bool) -> bool {
    let Some((ip, len)) = s.split_once('/') else {
        return false;
    };
    let Ok(len) = len.parse::<u32>() else {
        return false;
    };
    if v6 {
        ipv6_ok(ip) && (8..=128).contains(&len)
    } else {
        ipv4_ok(ip) && (8..=32).contains(&len)
    }
}

fn dns_name_ok(s: &str) -> bool {
    static RE: OnceLock<Regex> = OnceLock::new();
    RE.get_or_init(|| {
        re(r"^(([a-zA-Z0-9]([a-zA-Z0-9\-]*[a-zA-Z0-9])?)\.)*([a-zA-Z0-9]([a-zA-Z0-9\-]*[a-zA-Z0-9])?)$")
    })
    .is_match(s)
}

/// Whether `/usr/share/zoneinfo/zone.tab` lists `zone` (its third column), as PVE reads it; a machine without
/// tzdata (a PVE node always has it) reads the list crates/pve embeds from tzdata.
fn zone_tab_has(zone: &str) -> bool {
    match std::fs::read_to_string("/usr/share/zoneinfo/zone.tab") {
        Ok(tab) => tab
            .lines()
            .filter(|l| !l.trim_start().starts_with('#'))
            .any(|l| l.split('\t').nth(2) == Some(zone)),
        Err(_) => include_str!("../../../pvekeys/src/zones.txt")
            .lines()
            .any(|l| !l.starts_with('#') && l == zone),
    }
}

/// Splits a PVE list (`split_list`: separators `,;` and whitespace, and NUL).
pub fn split_list(s: &str) -> Vec<String> {
    s.split(|c: char| c == ',' || c == ';' || c.is_whitespace() || c == '\0')
        .filter(|p| !p.is_empty())
        .map(str::to_string)
        .collect()
}

/// The named formats the container API uses. Unknown names are accepted, as PVE accepts formats
/// without a registered checker.
pub fn check_named_format(name: &str, v: &str) -> std::result::Result<(), String> {
    let fail = |m: &str| Err(m.to_string());
    match name {
        "pve-vmid" => {
            if re(r"^[1-9][0-9]{2,8}$").is_match(v) {
                Ok(())
            } else {
                fail("value does not look like a valid VM ID")
            }
        }
        "pve-node" => {
            if re(r"^([a-zA-Z0-9]([a-zA-Z0-9\-]*[a-zA-Z0-9])?)$").is_match(v) {
                Ok(())
            } else {
                fail("value does not look like a valid node name")
            }
        }
        "pve-storage-id" => {
            if re(r"(?i)^[a-z][a-z0-9\-_.]*[a-z0-9]$").is_match(v) {
                Ok(())
            } else {
                Err(format!("storage ID '{v}' contains illegal characters"))
            }
        }
        "pve-storage-id-list" => split_list(v)
            .iter()
            .try_for_each(|s| check_named_format("pve-storage-id", s)),
        "pve-configid" => {
            if re(r"(?i)^[a-z][a-z0-9_-]+$").is_match(v) {
                Ok(())
            } else {
                Err(format!("invalid configuration ID '{v}'"))
            }
        }
        "pve-configid-list" => split_list(v)
            .iter()
            .try_for_each(|s| check_named_format("pve-configid", s)),
        "dns-name" => {
            if dns_name_ok(v) {
                Ok(())
            } else {
                fail("value does not look like a valid DNS name")
            }
        }
        "dns-name-list" => {
            for p in split_list(v) {
                if !dns_name_ok(&p) {
                    return Err(format!("unable to parse dns name '{p}'"));
                }
            }
            Ok(())
        }
        "mac-addr" => {
            if re(r"(?i)^[a-f0-9][02468ace](?::[a-f0-9]{2}){5}$").is_match(v) {
                Ok(())
            } else {
                fail("value does not look like a valid unicast MAC address")
            }
        }
        "ipv4" => {
            if ipv4_ok(v) {
                Ok(())
            } else {
                fail("value does not look like a valid IPv4 address")
            }
        }
        "ipv6" => {
            if ipv6_ok(v) {
                Ok(())
            } else {
                fail("value does not look like a valid IPv6 address")
            }
        }
        "pve-ipv4-config" => {
            if v == "dhcp" || v == "manual" || cidr_ok(v, false) {
                Ok(())
            } else {
                fail("value does not look like a valid ipv4 network configuration")
            }
        }
        "pve-ipv6-config" => {
            if v == "dhcp" || v == "manual" || v == "auto" || cidr_ok(v, true) {
                Ok(())
            } else {
                fail("value does not look like a valid ipv6 network configuration")
            }
        }
        "lxc-ip-with-ll-iface-list" => {
            for p in split_list(v) {
                let ip = match p.split_once('%') {
                    Some((ip, _)) if ip.to_ascii_lowercase().starts_with("fe80") => ip.to_string(),
                    _ => p.clone(),
                };
                if !ipv4_ok(&ip) && !ipv6_ok(&ip) {
                    return Err(format!("unable to parse IP address '{p}'"));
                }
            }
            Ok(())
        }
        "pve-tag-list" => {
            let tags = split_list(v);
            if tags.is_empty() {
                return fail("empty tag list");
            }
            for t in tags {
                if !re(r"(?i)^[a-z0-9_][a-z0-9_\-+.]*$").is_match(&t) {
                    return Err(format!("invalid tag: '{t}'"));
                }
            }
            Ok(())
        }
        "pve-startup-order" => {
            for p in v.split(',') {
                let ok = re(r"^(order=)?\d+$").is_match(p) || re(r"^(up|down)=\d+$").is_match(p);
                if !ok {
                    return Err(format!("unable to parse startup options '{v}'"));
                }
            }
            Ok(())
        }
        "disk-size" => {
            if re(r"^(\d+(\.\d+)?)([KMGT])?$").is_match(v) {
                Ok(())
            } else {
                Err(format!("unable to parse size '{v}'"))
            }
        }
        "pve-volume-id" => {
            if re(r"^[a-zA-Z][a-zA-Z0-9\-_.]*[a-zA-Z0-9]:.+$").is_match(v) || v.starts_with('/') {
                Ok(())
            } else {
                Err(format!("unable to parse volume ID '{v}'"))
            }
        }
        "pve-lxc-mp-string" => {
            if re(r"(^|/)\.\.?(/|$)").is_match(v) {
                fail("invalid path")
            } else {
                Ok(())
            }
        }
        // verify_ct_timezone: `host`, else pve_verify_timezone: `UTC` or the third column of a zone.tab line
        "pve-ct-timezone" => {
            if v == "host" || v == "UTC" || zone_tab_has(v) {
                Ok(())
            } else {
                Err(format!("invalid time zone '{v}'"))
            }
        }
        "pve-lxc-dev-string" => {
            if v.starts_with("/dev/") {
                Ok(())
            } else {
                Err(format!("not a device path: '{v}'"))
            }
        }
        _ => Ok(()),
    }
}
