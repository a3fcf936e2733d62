//! `pxctl adopt FILE --node N --vm-id ID [--name NAME]`: takes a container that exists without pxfleet's mark
//! (made by hand, by Terraform) under management where it is. The fleet file stays the source of truth: the
//! command reads the container's configuration as its node reports it ([`pb::UnmanagedContainer`]), writes an
//! entry with `adopt: true` and the container's own values into FILE (so that adopting changes nothing but the
//! mark), has the controller plan the result (the file is written only when that plan is valid), then submits
//! FILE exactly like `pxctl submit`: the plan is shown and confirmed, the container is never recreated.

use std::path::Path;

use pxfleet_proto::v1 as pb;
use pxfleet_spec::observed::ObservedConfig;
use pxfleet_spec::{Interface, Ipv4Config, Ipv6Config, MountPoint};
use serde_json::{json, Map, Value};

use crate::args::{AdoptArgs, SubmitArgs};
use crate::client::Client;
use crate::error::{CliError, Result};
use crate::import::emit::flow;
use crate::source::FleetSource;
use crate::term::Io;
use crate::validate::{validate_text, FsFiles, Outcome};

pub async fn run(client: &mut Client, a: &AdoptArgs, io: &mut Io<'_>) -> Result<u8> {
    let path = Path::new(&a.file);
    let shown = a.file.to_string_lossy().into_owned();
    let text = std::fs::read_to_string(path).map_err(|source| CliError::Io {
        action: "reading",
        path: path.to_path_buf(),
        source,
    })?;
    let fleet = match validate_text(&shown, &text, &FsFiles) {
        Outcome::Valid(f) => f,
        Outcome::Invalid(problems) => {
            for p in &problems {
                writeln!(io.err, "{p}")?;
            }
            return Err(CliError::Invalid {
                file: shown,
                count: problems.len(),
            });
        }
    };
    let unmanaged = client
        .api
        .get_unmanaged(pb::GetUnmanagedRequest {
            node: a.node.clone(),
        })
        .await?
        .into_inner()
        .containers;
    let Some(found) = unmanaged.iter().find(|u| u.vm_id == a.vm_id) else {
        let there: Vec<String> = unmanaged
            .iter()
            .map(|u| format!("{} ({})", u.vm_id, u.hostname))
            .collect();
        return Err(CliError::Usage(format!(
            "no container {} without pxfleet's mark on node {}: {}; a container pxfleet already manages cannot \
             be adopted again (`pxctl get containers --node {}` lists those)",
            a.vm_id,
            a.node,
            if there.is_empty() {
                "the node reports none (is the node's agent connected? `pxctl get nodes`)".to_string()
            } else {
                format!("it reports {}", there.join(", "))
            },
            a.node
        )));
    };
    if !found.lock.is_empty() {
        return Err(CliError::Usage(format!(
            "container {} on node {} is locked ({}): wait until that finishes (`pct unlock` only if nothing runs)",
            a.vm_id, a.node, found.lock
        )));
    }
    let config: ObservedConfig = serde_json::from_str(&found.config_json).map_err(|_| {
        CliError::Usage(format!(
            "node {} has not reported the configuration of container {} yet; try again in a few seconds",
            a.node, a.vm_id
        ))
    })?;
    let name = a.name.clone().unwrap_or_else(|| found.hostname.clone());
    if fleet.containers.contains_key(&name) {
        return Err(CliError::Usage(format!(
            "{shown}: fleet {} already has a container {name}; pick another with --name",
            fleet.name
        )));
    }
    let (fields, notes) = entry_fields(&a.node, a.vm_id, found.running, &name, &config);
    let entry = format!("{name}: {}", flow(&Value::Object(fields)));
    let new_text = insert_entry(&text, &entry).map_err(|why| {
        CliError::Usage(format!(
            "{shown}: {why}; add this entry under `containers:` yourself and run `pxctl submit {shown}`:\n  {entry}"
        ))
    })?;
    if let Outcome::Invalid(problems) = validate_text(&shown, &new_text, &FsFiles) {
        for p in &problems {
            writeln!(io.err, "{p}")?;
        }
        return Err(CliError::Usage(format!(
            "{shown} with the entry `{entry}` is not valid (above); the file was not changed"
        )));
    }
    // The controller's plan decides whether it can be adopted (a difference that needs a new container is
    // refused): only then is the file written.
    let src = FleetSource::from_text(&shown, new_text.clone());
    super::remote_plan::fetch(client, &src, false, io)
        .await
        .map_err(|e| match e {
            CliError::Invalid { file, count } => CliError::Usage(format!(
                "{count} problem(s) adopting container {} on {} into {file} (above); the file was not changed",
                a.vm_id, a.node
            )),
            e => e,
        })?;
    std::fs::write(path, &new_text).map_err(|source| CliError::Io {
        action: "writing",
        path: path.to_path_buf(),
        source,
    })?;
    writeln!(
        io.out,
        "Added container {name} (vm_id {} on {}) to {shown} with adopt: true.",
        a.vm_id, a.node
    )?;
    for n in &notes {
        writeln!(io.err, "note: {n}")?;
    }
    super::submit::run(
        client,
        &SubmitArgs {
            file: a.file.clone(),
            yes: a.yes,
            no_wait: a.no_wait,
            timeout: a.timeout,
            retry_failed: false,
        },
        io,
    )
    .await
}

fn interface_fields(i: &Interface, m: &mut Map<String, Value>) {
    m.insert("bridge".into(), json!(i.bridge));
    if let Some(mac) = &i.mac_address {
        m.insert("mac_address".into(), json!(mac.to_string()));
    }
    match &i.ipv4 {
        Ipv4Config::Dhcp => {
            m.insert("ip_address".into(), json!("dhcp"));
        }
        Ipv4Config::None => {
            m.insert("ip_address".into(), json!("none"));
        }
        Ipv4Config::Static { addr, gateway } => {
            m.insert("ip_address".into(), json!(addr.to_string()));
            m.insert(
                "gateway".into(),
                json!(gateway.map_or("none".to_string(), |g| g.to_string())),
            );
        }
    }
    match &i.ipv6 {
        Ipv6Config::None => {}
        Ipv6Config::Auto => {
            m.insert("ipv6".into(), json!("auto"));
        }
        Ipv6Config::Dhcp => {
            m.insert("ipv6".into(), json!("dhcp"));
        }
        Ipv6Config::Static { addr, gateway } => {
            m.insert("ipv6".into(), json!(addr.to_string()));
            if let Some(g) = gateway {
                m.insert("gateway6".into(), json!(g.to_string()));
            }
        }
    }
    if let Some(v) = i.vlan_id {
        m.insert("vlan_id".into(), json!(v));
    }
    if let Some(v) = i.mtu {
        m.insert("mtu".into(), json!(v));
    }
    if i.firewall {
        m.insert("firewall".into(), json!(true));
    }
    if let Some(v) = i.rate_limit {
        m.insert("rate_limit".into(), json!(v));
    }
    if i.host_managed {
        m.insert("host_managed".into(), json!(true));
    }
    if i.link_down {
        m.insert("link_down".into(), json!(true));
    }
    if !i.trunks.is_empty() {
        m.insert("trunks".into(), json!(i.trunks));
    }
}

/// The fleet.yaml fields that describe the container as it is (so that adopting changes only the mark), and
/// notes about what the file cannot say exactly.
pub fn entry_fields(
    node: &str,
    vm_id: u32,
    running: bool,
    name: &str,
    c: &ObservedConfig,
) -> (Map<String, Value>, Vec<String>) {
    let mut m = Map::new();
    let mut notes = Vec::new();
    m.insert("node".into(), json!(node));
    m.insert("vm_id".into(), json!(vm_id));
    m.insert("adopt".into(), json!(true));
    if c.hostname != name {
        m.insert("hostname".into(), json!(c.hostname));
    }
    if let Some(v) = c.cores {
        m.insert("cores".into(), json!(v));
    }
    if let Some(v) = c.cpu_limit.filter(|v| *v > 0.0) {
        m.insert("cpu_limit".into(), json!(v));
    }
    if let Some(v) = c.cpu_units {
        m.insert("cpu_units".into(), json!(v));
    }
    m.insert("memory".into(), json!(c.memory));
    m.insert("swap".into(), json!(c.swap));
    let disk = c.disk_size_gib.ceil().max(1.0) as u64;
    if (disk as f64 - c.disk_size_gib).abs() > f64::EPSILON {
        notes.push(format!(
            "its root disk is {} GiB; fleet.yaml counts whole GiB, so the submit grows it to {disk} GiB",
            c.disk_size_gib
        ));
    }
    m.insert("disk_size".into(), json!(disk));
    if let Some(d) = &c.datastore_id {
        m.insert("datastore_id".into(), json!(d));
    }
    m.insert("unprivileged".into(), json!(c.unprivileged));
    let f = &c.features;
    if f.nesting || f.fuse || f.keyctl || f.mknod || f.force_rw_sys || !f.mount.is_empty() {
        let mut fm = Map::new();
        for (k, on) in [
            ("nesting", f.nesting),
            ("fuse", f.fuse),
            ("keyctl", f.keyctl),
            ("mknod", f.mknod),
            ("force_rw_sys", f.force_rw_sys),
        ] {
            if on {
                fm.insert(k.into(), json!(true));
            }
        }
        if !f.mount.is_empty() {
            fm.insert("mount".into(), json!(f.mount));
        }
        m.insert("features".into(), Value::Object(fm));
    }
    let mut ifaces = c.interfaces.iter();
    if let Some(net0) = ifaces.next() {
        if net0.config.name != "eth0" {
            notes.push(format!(
                "net0 is named {} inside the container; fleet.yaml names net0 eth0, so the submit renames it",
                net0.config.name
            ));
        }
        interface_fields(&net0.config, &mut m);
    }
    let extra: Vec<Value> = ifaces
        .map(|i| {
            let mut im = Map::new();
            im.insert("name".into(), json!(i.config.name));
            interface_fields(&i.config, &mut im);
            Value::Object(im)
        })
        .collect();
    if !extra.is_empty() {
        m.insert("extra_interfaces".into(), Value::Array(extra));
    }
    if !c.dns.servers.is_empty() || c.dns.domain.is_some() {
        let mut dm = Map::new();
        if !c.dns.servers.is_empty() {
            let servers: Vec<String> = c.dns.servers.iter().map(|s| s.to_string()).collect();
            dm.insert("servers".into(), json!(servers));
        }
        if let Some(d) = &c.dns.domain {
            dm.insert("domain".into(), json!(d));
        }
        m.insert("dns".into(), Value::Object(dm));
    }
    if let Some(s) = &c.startup {
        let mut sm = Map::new();
        for (k, v) in [
            ("order", s.order),
            ("up_delay", s.up_delay),
            ("down_delay", s.down_delay),
        ] {
            if let Some(v) = v {
                sm.insert(k.into(), json!(v));
            }
        }
        m.insert("startup".into(), Value::Object(sm));
    }
    if c.start_on_boot {
        m.insert("start_on_boot".into(), json!(true));
    }
    if c.is_template {
        m.insert("state".into(), json!("template"));
    } else if !running {
        m.insert("state".into(), json!("stopped"));
    }
    if c.protection {
        m.insert("protection".into(), json!(true));
    }
    if let Some(p) = &c.pool {
        m.insert("pool".into(), json!(p));
    }
    if let Some(o) = &c.ostype {
        m.insert("ostype".into(), json!(o));
    }
    if let Some(a) = &c.arch {
        m.insert("arch".into(), json!(a));
    }
    if let Some(t) = &c.timezone {
        m.insert("timezone".into(), json!(t));
    }
    if let Some(h) = &c.hookscript {
        m.insert("hookscript".into(), json!(h));
    }
    // console settings other than PVE's defaults
    let pve = pxfleet_spec::Console::pve_defaults();
    let mut cm = Map::new();
    if c.console.enabled.is_some() && c.console.enabled != pve.enabled {
        cm.insert("enabled".into(), json!(c.console.enabled));
    }
    if c.console.tty_count.is_some() && c.console.tty_count != pve.tty_count {
        cm.insert("tty_count".into(), json!(c.console.tty_count));
    }
    if c.console.mode.is_some() && c.console.mode != pve.mode {
        cm.insert("type".into(), json!(c.console.mode));
    }
    if !cm.is_empty() {
        m.insert("console".into(), Value::Object(cm));
    }
    if !c.tags.is_empty() {
        m.insert("tags".into(), json!(c.tags));
    }
    if let Some(d) = &c.description {
        m.insert("description".into(), json!(d));
    }
    let mounts: Vec<Value> = c
        .mount_points
        .iter()
        .map(|mp| {
            let mut v = match &mp.mount {
                MountPoint::Volume {
                    datastore_id,
                    size_gib,
                    path,
                    backup,
                    read_only,
                    ..
                } => json!({"datastore_id": datastore_id, "size": size_gib, "path": path,
                    "backup": backup, "read_only": read_only}),
                MountPoint::Bind {
                    host_path,
                    path,
                    read_only,
                    ..
                } => json!({"host_path": host_path, "path": path, "read_only": read_only}),
                MountPoint::Existing {
                    volume,
                    path,
                    backup,
                    read_only,
                    ..
                } => json!({"volume": volume, "path": path, "backup": backup,
                    "read_only": read_only}),
                MountPoint::VolumeOf {
                    container,
                    source_path,
                    path,
                    backup,
                    read_only,
                    ..
                } => json!({"volume_of": {"container": container, "path": source_path},
                    "path": path, "backup": backup, "read_only": read_only}),
            };
            let f = mp.mount.flags();
            if !f.mount_options.is_empty() {
                v["mount_options"] = json!(f.mount_options);
            }
            if let Some(acl) = f.acl {
                v["acl"] = json!(acl);
            }
            if f.quota {
                v["quota"] = json!(true);
            }
            if !f.replicate {
                v["replicate"] = json!(false);
            }
            if f.shared {
                v["shared"] = json!(true);
            }
            if f.keepattrs {
                v["keepattrs"] = json!(true);
            }
            if let Some(i) = &f.idmap {
                // PVE's u|g:CT:DISK:COUNT entries as fleet.yaml's list
                v["idmap"] = if i == "passthrough" {
                    json!(i)
                } else {
                    json!(i
                        .split(';')
                        .filter_map(|e| {
                            let p: Vec<&str> = e.split(':').collect();
                            let n = |s: &str| s.parse::<u64>().ok();
                            let kind = match *p.first()? {
                                "u" => "uid",
                                "g" => "gid",
                                _ => return None,
                            };
                            Some(json!({"type": kind, "container_id": n(p.get(1)?)?,
                                "disk_id": n(p.get(2)?)?, "size": n(p.get(3)?)?}))
                        })
                        .collect::<Vec<_>>())
                };
            }
            v
        })
        .collect();
    if !mounts.is_empty() {
        m.insert("mount_points".into(), Value::Array(mounts));
    }
    // the root disk's options other than PVE's defaults
    let r = &c.rootfs;
    let mut rm = Map::new();
    if !r.mount_options.is_empty() {
        rm.insert("mount_options".into(), json!(r.mount_options));
    }
    if let Some(acl) = r.acl {
        rm.insert("acl".into(), json!(acl));
    }
    if r.quota {
        rm.insert("quota".into(), json!(true));
    }
    if !r.replicate {
        rm.insert("replicate".into(), json!(false));
    }
    if !rm.is_empty() {
        m.insert("rootfs".into(), Value::Object(rm));
    }
    if !c.devices.is_empty() {
        m.insert("devices".into(), json!(c.devices));
    }
    if !c.idmap.is_empty() {
        m.insert("idmap".into(), json!(c.idmap));
    }
    (m, notes)
}

/// `text` with `entry` (one line, `name: {...}`) added as the last entry of the top-level `containers:` block
/// (indented like the entries already there), or a new `containers:` block at the end.
pub fn insert_entry(text: &str, entry: &str) -> std::result::Result<String, String> {
    let lines: Vec<&str> = text.lines().collect();
    let Some(start) = lines
        .iter()
        .position(|l| l.strip_prefix("containers:").is_some())
    else {
        let mut out = text.trim_end_matches('\n').to_string();
        out.push_str(&format!("\ncontainers:\n  {entry}\n"));
        return Ok(out);
    };
    let rest = lines[start]["containers:".len()..].trim();
    if !(rest.is_empty() || rest.starts_with('#')) {
        return Err(format!(
            "its `containers:` is written on one line (`containers: {rest}`), which this command does not edit"
        ));
    }
    let block_end = lines[start + 1..]
        .iter()
        .position(|l| {
            !l.trim().is_empty()
                && !l.starts_with(' ')
                && !l.starts_with('\t')
                && !l.starts_with('#')
        })
        .map_or(lines.len(), |i| start + 1 + i);
    let body = &lines[start + 1..block_end];
    let indent = body
        .iter()
        .find(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#'))
        .map_or("  ".to_string(), |l| {
            l[..l.len() - l.trim_start().len()].to_string()
        });
    if indent.contains('\t') {
        return Err("its `containers:` block is indented with tabs".into());
    }
    let last = body
        .iter()
        .rposition(|l| !l.trim().is_empty())
        .map_or(start, |i| start + 1 + i);
    let mut out: Vec<String> = lines.iter().map(|l| l.to_string()).collect();
    out.insert(last + 1, format!("{indent}{entry}"));
    let mut s = out.join("\n");
    s.push('\n');
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_entry_goes_last_into_the_containers_block_with_its_indentation() {
        let text = "fleet: f\ncontainers:\n    web: {}\n    # a comment\n    db:\n      memory: 512\n\ndefaults:\n  memory: 256\n";
        let out = insert_entry(text, "legacy: {vm_id: 105}").unwrap();
        assert_eq!(
            out,
            "fleet: f\ncontainers:\n    web: {}\n    # a comment\n    db:\n      memory: 512\n    legacy: {vm_id: 105}\n\ndefaults:\n  memory: 256\n"
        );
        let out = insert_entry("fleet: f\n", "legacy: {vm_id: 105}").unwrap();
        assert_eq!(out, "fleet: f\ncontainers:\n  legacy: {vm_id: 105}\n");
        let err = insert_entry("fleet: f\ncontainers: {web: {}}\n", "x: {}").unwrap_err();
        assert!(err.contains("one line"), "{err}");
    }

    #[test]
    fn the_entry_says_what_the_container_has() {
        let c: ObservedConfig = serde_json::from_value(json!({
            "hostname": "legacy", "cores": 2, "cpu_limit": null, "cpu_units": null, "memory": 256, "swap": 512,
            "disk_size_gib": 4.0, "datastore_id": "local-lvm", "template": null, "unprivileged": true,
            "features": {"nesting": true, "fuse": false, "keyctl": false, "mount": []},
            "interfaces": [{"slot": 0, "config": {"name": "eth0", "bridge": "vmbr0", "ipv4": {"mode": "static",
                "addr": "10.0.0.5/24", "gateway": "10.0.0.1"}, "ipv6": {"mode": "none"}, "vlan_id": null,
                "mtu": null, "mac_address": "BC:24:11:00:00:01", "firewall": false, "rate_limit": null},
                "addresses": []}],
            "dns": {"servers": [], "domain": null}, "startup": null, "start_on_boot": false, "protection": false,
            "tags": ["web"], "description": null, "mount_points": [], "ostype": "debian"
        }))
        .unwrap();
        let (m, notes) = entry_fields("pve1", 105, false, "old", &c);
        assert!(notes.is_empty(), "{notes:?}");
        assert_eq!(
            flow(&Value::Object(m)),
            "{node: pve1, vm_id: 105, adopt: true, hostname: legacy, cores: 2, memory: 256, swap: 512, \
             disk_size: 4, datastore_id: local-lvm, unprivileged: true, features: {nesting: true}, \
             bridge: vmbr0, mac_address: BC:24:11:00:00:01, ip_address: 10.0.0.5/24, gateway: 10.0.0.1, \
             state: stopped, ostype: debian, tags: [web]}"
        );
        // A template made by hand is adopted as one (never started, never converted back).
        let mut t = c.clone();
        t.is_template = true;
        let (m, _) = entry_fields("pve1", 9000, false, "gold", &t);
        assert_eq!(m["state"], json!("template"));
    }
}
