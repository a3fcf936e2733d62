//! What the inside of a running container shows on the memory backend: passwords set with
//! `chpasswd`, and the interfaces with their addresses (`GET .../interfaces`).

use std::collections::BTreeMap;

use serde_json::{json, Value};

use super::values::{is_net_key, parse_prop};
use super::{read_conf, runtime, save_runtime};
use crate::error::Result;
use crate::lock;
use crate::node::Node;

/// `chpasswd` inside a running CT (memory backend): every non-blank stdin line must be `user:password` for a
/// known user (only `root` exists); the password is recorded as its SHA-256 in the runtime state. Returns the
/// exit code and stderr of chpasswd (1 and `chpasswd: line N: ...` on bad input, nothing changed).
pub fn chpasswd(node: &Node, vmid: u32, input: &str) -> Result<(i32, String)> {
    let mut errors = String::new();
    let mut set = BTreeMap::new();
    for (i, line) in input.lines().enumerate() {
        if line.is_empty() {
            continue;
        }
        let n = i + 1;
        match line.split_once(':') {
            None => errors.push_str(&format!("chpasswd: line {n}: missing new password\n")),
            Some((user, _)) if user != "root" => errors.push_str(&format!(
                "chpasswd: line {n}: user '{user}' does not exist\n"
            )),
            Some((user, pw)) => {
                set.insert(user.to_string(), password_hash(pw));
            }
        }
    }
    if !errors.is_empty() {
        errors.push_str("chpasswd: error detected, changes ignored\n");
        return Ok((1, errors));
    }
    let _held = lock::lock_blocking(&node.state.join("lock").join(format!("runtime-{vmid}.lock")))?;
    let mut rt = runtime(node, vmid);
    rt.passwords.extend(set);
    save_runtime(node, vmid, &rt)?;
    Ok((0, String::new()))
}

/// What the memory backend keeps of a password in the CT's "shadow file": its SHA-256, hex.
pub(super) fn password_hash(password: &str) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(password.as_bytes()))
}

pub(super) fn mac_to_ll(mac: &str) -> String {
    let b: Vec<u8> = mac
        .split(':')
        .filter_map(|x| u8::from_str_radix(x, 16).ok())
        .collect();
    if b.len() != 6 {
        return "fe80::1".into();
    }
    format!(
        "fe80::{:x}:{:x}:{:x}:{:x}",
        ((b[0] ^ 2) as u16) << 8 | b[1] as u16,
        (b[2] as u16) << 8 | 0xff,
        0xfe00 | b[3] as u16,
        (b[4] as u16) << 8 | b[5] as u16
    )
}

/// `GET .../interfaces`: null when stopped; addresses from the config (static) or the simulated DHCP lease.
pub fn interfaces(node: &Node, vmid: u32) -> Result<Value> {
    let (conf, _) = read_conf(node, vmid)?;
    let rt = runtime(node, vmid);
    if !rt.running {
        return Ok(Value::Null);
    }
    if crate::lxc::is_lxc(node) {
        return Ok(crate::lxc::interfaces(node, vmid)?);
    }
    let mut out = vec![json!({
        "name": "lo", "hwaddr": "00:00:00:00:00:00", "hardware-address": "00:00:00:00:00:00",
        "inet": "127.0.0.1/8", "inet6": "::1/128",
        "ip-addresses": [
            {"ip-address": "127.0.0.1", "ip-address-type": "inet", "prefix": 8},
            {"ip-address": "::1", "ip-address-type": "inet6", "prefix": 128}
        ]
    })];
    for (k, v) in &conf.opts {
        if !is_net_key(k) {
            continue;
        }
        let Ok(m) = parse_prop(k, v) else { continue };
        let name = m.get("name").cloned().unwrap_or_default();
        let mac = m.get("hwaddr").cloned().unwrap_or_default().to_lowercase();
        let mut addrs: Vec<(String, &str, u32)> = Vec::new();
        let v4 = match m.get("ip").map(String::as_str) {
            Some("dhcp") => rt.leases.get(&name).cloned(),
            Some(ip) if ip.contains('/') => Some(ip.to_string()),
            _ => None,
        };
        if let Some(c) = v4 {
            let (a, p) = c.split_once('/').unwrap_or((&c, "32"));
            addrs.push((a.to_string(), "inet", p.parse().unwrap_or(32)));
        }
        if let Some(ip6) = m.get("ip6").filter(|x| x.contains('/')) {
            let (a, p) = ip6.split_once('/').unwrap_or((ip6, "128"));
            addrs.push((a.to_string(), "inet6", p.parse().unwrap_or(128)));
        }
        addrs.push((mac_to_ll(&mac), "inet6", 64));
        let mut e = json!({"name": name, "hwaddr": mac, "hardware-address": mac});
        if let Some((a, _, p)) = addrs.iter().rfind(|x| x.1 == "inet") {
            e["inet"] = json!(format!("{a}/{p}"));
        }
        if let Some((a, _, p)) = addrs.iter().rfind(|x| x.1 == "inet6") {
            e["inet6"] = json!(format!("{a}/{p}"));
        }
        e["ip-addresses"] = Value::Array(
            addrs
                .iter()
                .map(|(a, t, p)| json!({"ip-address": a, "ip-address-type": t, "prefix": p}))
                .collect(),
        );
        out.push(e);
    }
    Ok(Value::Array(out))
}
