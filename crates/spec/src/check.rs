//! Rules across containers of one fleet: no two containers share a vm_id, a hostname, a static
//! address or a MAC address. (Per-field and per-container rules are checked while decoding, in
//! [`crate::parse`].)

use std::collections::HashMap;
use std::net::IpAddr;

use crate::diag::Diagnostic;
use crate::model::{Fleet, Spans};

pub(crate) fn check_fleet(file: &str, fleet: &Fleet, spans: &Spans, diags: &mut Vec<Diagnostic>) {
    let mut vm_ids: HashMap<u32, &str> = HashMap::new();
    let mut hostnames: HashMap<String, &str> = HashMap::new();
    let mut addrs: HashMap<IpAddr, String> = HashMap::new();
    let mut macs: HashMap<[u8; 6], String> = HashMap::new();
    for (key, c) in &fleet.containers {
        let cpath = format!("containers.{key}");
        if c.adopt && (c.node.is_none() || c.vm_id.is_none()) {
            let path = format!("{cpath}.adopt");
            diags.push(
                Diagnostic::new(
                    file,
                    spans.lookup(&path),
                    path,
                    "`adopt: true` needs `node` and `vm_id`: where the existing container is",
                )
                .with_hint("set `node: NODE` and `vm_id: ID` of the container to take over"),
            );
        }
    }
    clone_sources(file, fleet, spans, diags);
    volume_sources(file, fleet, spans, diags);
    let mut dup = |path: String, what: String, other: &str| {
        let span = spans.lookup(&path);
        let other_line = spans.lookup(other).line;
        diags.push(
            Diagnostic::new(
                file,
                span,
                path,
                format!("{what} is also used by {other} (line {other_line})"),
            )
            .with_hint("each container needs its own; change one of them"),
        );
    };
    for (key, c) in &fleet.containers {
        let cpath = format!("containers.{key}");
        if let Some(id) = c.vm_id {
            if let Some(other) = vm_ids.insert(id, key) {
                vm_ids.insert(id, other);
                dup(
                    format!("{cpath}.vm_id"),
                    format!("vm_id {id}"),
                    &format!("containers.{other}"),
                );
            }
        }
        let h = c.hostname.to_ascii_lowercase();
        if let Some(other) = hostnames.get(&h) {
            let field = if spans.get(&format!("{cpath}.hostname")).is_some() {
                ".hostname"
            } else {
                ""
            };
            dup(
                format!("{cpath}{field}"),
                format!("hostname {}", c.hostname),
                &format!("containers.{other}"),
            );
        } else {
            hostnames.insert(h, key);
        }
        for (i, iface) in c.interfaces.iter().enumerate() {
            let ipath = if i == 0 {
                cpath.clone()
            } else {
                format!("{cpath}.extra_interfaces.{}", i - 1)
            };
            let v4 = iface
                .ipv4
                .static_addr()
                .map(IpAddr::V4)
                .map(|a| (a, "ip_address"));
            let v6 = iface
                .ipv6
                .static_addr()
                .map(IpAddr::V6)
                .map(|a| (a, "ipv6"));
            for (addr, field) in v4.into_iter().chain(v6) {
                let path = format!("{ipath}.{field}");
                if let Some(other) = addrs.get(&addr) {
                    dup(path, format!("address {addr}"), other);
                } else {
                    addrs.insert(addr, path);
                }
            }
            if let Some(mac) = iface.mac_address {
                let path = format!("{ipath}.mac_address");
                if let Some(other) = macs.get(&mac.0) {
                    dup(path, format!("mac_address {mac}"), other);
                } else {
                    macs.insert(mac.0, path);
                }
            }
        }
    }
}

/// A `clone:` template whose source is a container of this fleet (declared with `state: template`, bpg's
/// `template = true` next to the resources cloning it): the source must be on the template's node (pinned, so the
/// scheduler cannot put it elsewhere), a linked clone's source must be a template (PVE makes linked clones of
/// templates only), and no container is its own source. The clones are created once the source is.
fn clone_sources(file: &str, fleet: &Fleet, spans: &Spans, diags: &mut Vec<Diagnostic>) {
    use crate::model::TemplateSource;
    for (tname, t) in &fleet.templates {
        let TemplateSource::Clone {
            vm_id, node, full, ..
        } = &t.source
        else {
            continue;
        };
        let Some((skey, src)) = fleet
            .containers
            .iter()
            .find(|(_, c)| c.vm_id == Some(*vm_id))
        else {
            continue;
        };
        let mut err = |path: String, what: String, hint: String| {
            diags.push(Diagnostic::new(file, spans.lookup(&path), path, what).with_hint(hint));
        };
        match &src.node {
            Some(n) if n != node => err(
                format!("templates.{tname}.clone.node"),
                format!("template {tname} clones CT {vm_id} on node {node}, but container {skey} (vm_id {vm_id}) is on node {n}"),
                format!("make the two nodes the same: `node: {n}` here or `node: {node}` on {skey}"),
            ),
            Some(_) => {}
            None => err(
                format!("containers.{skey}"),
                format!("container {skey} is the source of clone template {tname} (vm_id {vm_id}) but has no `node`: the scheduler could place it elsewhere than {node}"),
                format!("set `node: {node}` on {skey}"),
            ),
        }
        if !*full && !src.state.is_template() {
            err(
                format!("templates.{tname}.clone.full"),
                format!("template {tname} is a linked clone of container {skey}, which is not a template (state: {}): PVE makes linked clones of templates only", src.state.as_str()),
                format!("set `state: template` on {skey}, or `full: true` for a full copy"),
            );
        }
        for (ckey, c) in &fleet.containers {
            if c.template == *tname && ckey == skey {
                err(
                    format!("containers.{ckey}.template"),
                    format!("container {ckey} would be cloned from itself (template {tname} copies vm_id {vm_id})"),
                    "give the container another template, or the template another source".into(),
                );
            }
        }
    }
}

/// `volume_of:` mounts another container's volume: that container is in this fleet and is not the one mounting
/// it, it has a new volume (`datastore_id`/`size`) at that path, and both are pinned to the same node (a local
/// volume is on one node; the scheduler must not put either elsewhere, and a move would take the volume along).
fn volume_sources(file: &str, fleet: &Fleet, spans: &Spans, diags: &mut Vec<Diagnostic>) {
    use crate::model::MountPoint;
    let same = |a: &str, b: &str| a.trim_start_matches('/') == b.trim_start_matches('/');
    for (key, c) in &fleet.containers {
        for (i, m) in c.mount_points.iter().enumerate() {
            let MountPoint::VolumeOf {
                container,
                source_path,
                ..
            } = m
            else {
                continue;
            };
            let path = format!("containers.{key}.mount_points.{i}.volume_of");
            let mut err = |field: &str, what: String, hint: String| {
                let p = format!("{path}{field}");
                diags.push(Diagnostic::new(file, spans.lookup(&p), p, what).with_hint(hint));
            };
            if container == key {
                err(
                    ".container",
                    format!("container {key} would mount its own volume"),
                    "name another container of this fleet".into(),
                );
                continue;
            }
            let Some(src) = fleet.containers.get(container) else {
                let names: Vec<&str> = fleet.containers.keys().map(String::as_str).collect();
                err(
                    ".container",
                    format!("fleet {} has no container {container}", fleet.name),
                    format!("a container of this fleet: {}", names.join(", ")),
                );
                continue;
            };
            match src.mount_points.iter().find(|sm| same(sm.path(), source_path)) {
                Some(MountPoint::Volume { .. }) => {}
                Some(MountPoint::Existing { volume, .. }) => err(
                    ".path",
                    format!("{container}'s mount point {source_path} is the existing volume {volume}, not one of its own"),
                    format!("mount it directly: `volume: {volume}`"),
                ),
                Some(MountPoint::Bind { host_path, .. }) => err(
                    ".path",
                    format!("{container}'s mount point {source_path} is a bind mount of {host_path}, not a volume"),
                    format!("bind the same directory: `host_path: {host_path}`"),
                ),
                Some(MountPoint::VolumeOf { container: c2, source_path: p2, .. }) => err(
                    ".path",
                    format!("{container}'s mount point {source_path} is itself the volume of {c2} at {p2}"),
                    format!("name the container that has the volume: `volume_of: {{container: {c2}, path: {p2}}}`"),
                ),
                None => {
                    let paths: Vec<&str> = src
                        .mount_points
                        .iter()
                        .filter(|m| matches!(m, MountPoint::Volume { .. }))
                        .map(|m| m.path())
                        .collect();
                    err(
                        ".path",
                        format!("container {container} has no mount point at {source_path}"),
                        if paths.is_empty() {
                            format!("{container} has no volume mount points (`datastore_id` and `size`)")
                        } else {
                            format!("its volumes are mounted at {}", paths.join(", "))
                        },
                    )
                }
            }
            match (&src.node, &c.node) {
                (Some(a), Some(b)) if a == b => {}
                (Some(a), _) => err(
                    "",
                    format!("the volume of {container} is on node {a}; container {key} must be there too"),
                    format!("set `node: {a}` on {key}"),
                ),
                (None, _) => err(
                    "",
                    format!("container {container} has no `node`: the volume {key} mounts could be placed anywhere"),
                    format!("pin both containers to one node (`node: NAME` on {container} and {key})"),
                ),
            }
        }
    }
}
