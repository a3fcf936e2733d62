//! `devices:` (PVE's `devN` device passthrough) and `idmap:` (`lxc.idmap` lines of an unprivileged container).

use std::collections::BTreeMap;

use super::{join, quote, Cx, DEVICE_FIELDS, IDMAP_FIELDS, MAX_DEVICES};
use crate::model::*;
use crate::yaml::Node;

/// PVE's `pve-lxc-dev-string`: an absolute path under /dev without `.` or `..` components.
fn is_dev_path(s: &str) -> bool {
    s.starts_with("/dev/")
        && s.len() > 5
        && !s.contains([',', ' ', '\t', '='])
        && !s.split('/').any(|p| p == "." || p == "..")
}

/// Largest id `lxc.idmap` takes (ids are 32-bit, and the end of a range must fit).
const MAX_ID: i64 = u32::MAX as i64;

impl Cx<'_> {
    pub(super) fn devices(&mut self, n: &Node, path: &str) -> Option<Vec<Device>> {
        let items = self.seq(n, path)?;
        if items.len() > MAX_DEVICES {
            self.err(
                n.span,
                path,
                format!(
                    "a container has at most {MAX_DEVICES} devices, got {}",
                    items.len()
                ),
                None,
            );
            return None;
        }
        let mut out = Vec::new();
        let mut seen: BTreeMap<String, usize> = BTreeMap::new();
        for (i, item) in items.iter().enumerate() {
            let ip = join(path, &i.to_string());
            self.record(&ip, item.span);
            let Some(es) = self.map(item, &ip) else {
                continue;
            };
            let mut d = Device {
                path: String::new(),
                mode: None,
                uid: None,
                gid: None,
                deny_write: false,
            };
            let mut ok = true;
            let mut pspan = item.span;
            for e in es {
                let p = join(&ip, &e.key);
                self.record(&p, e.value.span);
                if Self::given_empty(e, DEVICE_FIELDS) {
                    continue;
                }
                match e.key.as_str() {
                    "path" => match self.string(&e.value, &p) {
                        Some(s) if is_dev_path(&s) => {
                            d.path = s;
                            pspan = e.value.span;
                        }
                        Some(s) => {
                            self.err(
                                e.value.span,
                                &p,
                                format!("device path {} is not a device under /dev", quote(&s)),
                                Some("e.g. /dev/ttyUSB0 or /dev/dri/renderD128"),
                            );
                            ok = false;
                        }
                        None => ok = false,
                    },
                    "mode" => match self.string(&e.value, &p) {
                        Some(s)
                            if s.len() == 4
                                && s.starts_with('0')
                                && s.bytes().all(|b| (b'0'..=b'7').contains(&b)) =>
                        {
                            d.mode = Some(s)
                        }
                        Some(s) => {
                            self.err(
                                e.value.span,
                                &p,
                                format!("mode {} is not an octal access mode", quote(&s)),
                                Some("four octal digits starting with 0, quoted: mode: \"0660\""),
                            );
                            ok = false;
                        }
                        None => ok = false,
                    },
                    "uid" | "gid" => match self.int(&e.value, &p, 0, MAX_ID, "") {
                        Some(v) if e.key == "uid" => d.uid = Some(v as u32),
                        Some(v) => d.gid = Some(v as u32),
                        None => ok = false,
                    },
                    "deny_write" => match self.boolean(&e.value, &p) {
                        Some(b) => d.deny_write = b,
                        None => ok = false,
                    },
                    _ => {
                        self.unknown_field(e, &ip, DEVICE_FIELDS);
                        ok = false;
                    }
                }
            }
            if !ok {
                continue;
            }
            if d.path.is_empty() {
                self.err(
                    item.span,
                    &ip,
                    "a device needs `path` (the device node under /dev)",
                    Some("e.g. {path: /dev/ttyUSB0, mode: \"0660\"}"),
                );
                continue;
            }
            if let Some(first) = seen.insert(d.path.clone(), i) {
                self.err(
                    pspan,
                    &join(&ip, "path"),
                    format!(
                        "device {} is already passed through by devices.{first}",
                        d.path
                    ),
                    None,
                );
                continue;
            }
            out.push(d);
        }
        Some(out)
    }

    pub(super) fn idmap(&mut self, n: &Node, path: &str) -> Option<Vec<IdMap>> {
        let items = self.seq(n, path)?;
        let mut out: Vec<(IdMap, String)> = Vec::new();
        let mut all_ok = true;
        for (i, item) in items.iter().enumerate() {
            let ip = join(path, &i.to_string());
            self.record(&ip, item.span);
            let Some(es) = self.map(item, &ip) else {
                all_ok = false;
                continue;
            };
            let (mut kind, mut ct, mut host, mut size) = (None, None, None, None);
            let mut ok = true;
            for e in es {
                let p = join(&ip, &e.key);
                self.record(&p, e.value.span);
                match e.key.as_str() {
                    "type" => match self.string(&e.value, &p).as_deref() {
                        Some("uid" | "u") => kind = Some(IdKind::Uid),
                        Some("gid" | "g") => kind = Some(IdKind::Gid),
                        Some(other) => {
                            self.err(
                                e.value.span,
                                &p,
                                format!("idmap type {} is not uid or gid", quote(other)),
                                None,
                            );
                            ok = false;
                        }
                        None => ok = false,
                    },
                    "container_id" => {
                        ct = self.int(&e.value, &p, 0, MAX_ID - 1, "");
                        ok &= ct.is_some();
                    }
                    "host_id" => {
                        host = self.int(&e.value, &p, 0, MAX_ID - 1, "");
                        ok &= host.is_some();
                    }
                    "size" => {
                        size = self.int(&e.value, &p, 1, MAX_ID, "");
                        ok &= size.is_some();
                    }
                    _ => {
                        self.unknown_field(e, &ip, IDMAP_FIELDS);
                        ok = false;
                    }
                }
            }
            let (Some(kind), Some(ct), Some(host), Some(size), true) = (kind, ct, host, size, ok)
            else {
                if ok {
                    self.err(
                        item.span,
                        &ip,
                        "an idmap entry needs `type` (uid or gid), `container_id`, `host_id` and `size`",
                        Some("e.g. {type: uid, container_id: 0, host_id: 100000, size: 65536}"),
                    );
                }
                all_ok = false;
                continue;
            };
            for (what, start) in [("container_id", ct), ("host_id", host)] {
                if start + size > MAX_ID + 1 {
                    self.err(
                        item.span,
                        &join(&ip, "size"),
                        format!("{what} {start} + size {size} goes past the largest id {MAX_ID}"),
                        None,
                    );
                    ok = false;
                }
            }
            if !ok {
                all_ok = false;
                continue;
            }
            let m = IdMap {
                kind,
                container_id: ct as u32,
                host_id: host as u32,
                size: size as u32,
            };
            for (other, op) in &out {
                if other.kind != m.kind {
                    continue;
                }
                let overlap = |a: u32, b: u32| {
                    (a as u64) < b as u64 + other.size as u64
                        && (b as u64) < a as u64 + m.size as u64
                };
                let side = if overlap(m.container_id, other.container_id) {
                    Some("container")
                } else if overlap(m.host_id, other.host_id) {
                    Some("host")
                } else {
                    None
                };
                if let Some(side) = side {
                    self.err(
                        item.span,
                        &ip,
                        format!(
                            "this {} range overlaps the {side} ids of {op}",
                            m.kind.letter().to_owned() + "id"
                        ),
                        Some("each container id and each host id may be mapped once"),
                    );
                    ok = false;
                    break;
                }
            }
            if ok {
                out.push((m, ip));
            } else {
                all_ok = false;
            }
        }
        if !all_ok {
            return None;
        }
        if !out.is_empty() {
            for kind in [IdKind::Uid, IdKind::Gid] {
                let root = out
                    .iter()
                    .any(|(m, _)| m.kind == kind && m.container_id == 0);
                if !root {
                    let what = match kind {
                        IdKind::Uid => "uid",
                        IdKind::Gid => "gid",
                    };
                    self.err(
                        n.span,
                        path,
                        format!("idmap maps no {what} range starting at container id 0"),
                        Some("custom idmap lines replace PVE's default map, and LXC cannot start a container whose root is unmapped: map container id 0 for both uid and gid"),
                    );
                    return None;
                }
            }
        }
        Some(out.into_iter().map(|(m, _)| m).collect())
    }
}
