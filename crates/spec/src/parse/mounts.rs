//! `mount_points:`: each new volume, existing volume or bind mount of a container, with its datastore, size,
//! path and options (`mount_options`, `acl`, `quota`, `replicate`, `shared`, `backup`, `read_only`).

use std::collections::BTreeMap;

use super::{join, quote, Cx, MAX_MOUNT_POINTS, VOLUME_FIELDS};
use crate::model::*;
use crate::syntax;
use crate::yaml::Node;

/// Whether `s` names a volume in storage (`local-lvm:vm-100-disk-1`, `local:100/vm-100-disk-1.raw`), not a new
/// allocation (`local-lvm:8`) nor a path.
fn is_volume_id(s: &str) -> bool {
    let Some((st, name)) = s.split_once(':') else {
        return false;
    };
    syntax::is_storage_id(st)
        && !name.is_empty()
        && name.parse::<f64>().is_err()
        && !name.contains([',', ' ', '\t', '='])
        && !name.starts_with('/')
        && !name.split('/').any(|p| p == "..")
}

impl Cx<'_> {
    pub(super) fn mount_options(&mut self, n: &Node, path: &str) -> Option<Vec<String>> {
        let list = self.strings(n, path)?;
        let mut out: Vec<String> = Vec::new();
        for (i, (o, span)) in list.into_iter().enumerate() {
            if !MOUNT_OPTIONS.contains(&o.as_str()) {
                self.err(
                    span,
                    &join(path, &i.to_string()),
                    format!("mount option {} is not one PVE accepts", quote(&o)),
                    Some(&format!("PVE accepts {}", MOUNT_OPTIONS.join(", "))),
                );
                return None;
            }
            if !out.contains(&o) {
                out.push(o);
            }
        }
        out.sort();
        Some(out)
    }

    /// A mount point's `idmap:` `passthrough`, or a list of `{type: uid|gid, container_id, disk_id, size}`
    /// entries, none overlapping another of its type on either side (PVE's `validate_id_maps`); PVE's text form.
    fn mount_idmap(&mut self, n: &Node, path: &str) -> Option<String> {
        if let crate::yaml::Value::Scalar { text, .. } = &n.value {
            if text == "passthrough" {
                return Some(text.clone());
            }
            self.err(
                n.span,
                path,
                format!("idmap {} is neither passthrough nor a list of entries", quote(text)),
                Some("`idmap: passthrough`, or `idmap: [{type: uid, container_id: 1000, disk_id: 1000, size: 1}]`"),
            );
            return None;
        }
        let items = self.seq(n, path)?;
        let mut entries: Vec<(char, u64, u64, u64)> = Vec::new();
        for (i, item) in items.iter().enumerate() {
            let ip = join(path, &i.to_string());
            let es = self.map(item, &ip)?;
            let (mut kind, mut ct, mut disk, mut size) = (None, None, None, None);
            for e in es {
                let p = join(&ip, &e.key);
                match e.key.as_str() {
                    "type" => match self.string(&e.value, &p).as_deref() {
                        Some("uid") => kind = Some('u'),
                        Some("gid") => kind = Some('g'),
                        Some(o) => {
                            self.err(
                                e.value.span,
                                &p,
                                format!("type {} is not uid or gid", quote(o)),
                                None,
                            );
                            return None;
                        }
                        None => return None,
                    },
                    "container_id" => {
                        ct = Some(self.int(&e.value, &p, 0, i64::from(u32::MAX), "")? as u64)
                    }
                    "disk_id" => {
                        disk = Some(self.int(&e.value, &p, 0, i64::from(u32::MAX), "")? as u64)
                    }
                    "size" => {
                        size = Some(self.int(&e.value, &p, 1, i64::from(u32::MAX), "")? as u64)
                    }
                    _ => {
                        self.unknown_field(e, &ip, &["type", "container_id", "disk_id", "size"]);
                        return None;
                    }
                }
            }
            let (Some(kind), Some(ct), Some(disk), Some(size)) = (kind, ct, disk, size) else {
                self.err(
                    item.span,
                    &ip,
                    "an idmap entry needs type, container_id, disk_id and size",
                    None,
                );
                return None;
            };
            // validate_id_maps: no id mapped twice on either side
            for (side, start, other) in [("container", ct, 1), ("disk", disk, 2)] {
                let clash = entries.iter().find(|e| {
                    let s = if other == 1 { e.1 } else { e.2 };
                    e.0 == kind && start < s + e.3 && s < start + size
                });
                if let Some(c) = clash {
                    self.err(
                        item.span,
                        &ip,
                        format!(
                            "{side} {kind}id {start} is also mapped by entry {}:{}:{}:{}",
                            c.0, c.1, c.2, c.3
                        ),
                        Some("each id may be mapped once per side"),
                    );
                    return None;
                }
            }
            entries.push((kind, ct, disk, size));
        }
        if entries.is_empty() {
            self.err(
                n.span,
                path,
                "idmap is an empty list",
                Some("leave idmap out for the container's own map"),
            );
            return None;
        }
        Some(
            entries
                .iter()
                .map(|(k, c, d, s)| format!("{k}:{c}:{d}:{s}"))
                .collect::<Vec<_>>()
                .join(";"),
        )
    }

    /// `volume_of: {container: NAME, path: PATH}`: the container (of this fleet) and the path of its mount point.
    fn volume_of(&mut self, n: &Node, path: &str) -> Option<(String, String)> {
        let es = self.map(n, path)?;
        let (mut container, mut source) = (None, None);
        for e in es {
            let p = join(path, &e.key);
            self.record(&p, e.value.span);
            match e.key.as_str() {
                "container" => container = Some(self.string(&e.value, &p)?),
                "path" => {
                    let s = self.string(&e.value, &p)?;
                    if s.trim_matches('/').is_empty() || s.contains(',') {
                        self.err(
                            e.value.span,
                            &p,
                            format!("path {} is not a mount point path", quote(&s)),
                            Some("the `path` of one of that container's mount_points (its root disk cannot be shared)"),
                        );
                        return None;
                    }
                    source = Some(s);
                }
                _ => {
                    self.unknown_field(e, path, &["container", "path"]);
                    return None;
                }
            }
        }
        match (container, source) {
            (Some(c), Some(s)) => Some((c, s)),
            _ => {
                self.err(
                    n.span,
                    path,
                    "`volume_of` needs `container` (a container of this fleet) and `path` (the path of its mount point)",
                    Some("e.g. volume_of: {container: db, path: /srv/data}"),
                );
                None
            }
        }
    }

    pub(super) fn mount_points(&mut self, n: &Node, path: &str) -> Option<Vec<MountPoint>> {
        let items = self.seq(n, path)?;
        if items.len() > MAX_MOUNT_POINTS {
            self.err(
                n.span,
                path,
                format!(
                    "a container has at most {MAX_MOUNT_POINTS} mount points, got {}",
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
            let (mut ds, mut size, mut mpath, mut backup, mut ro, mut host, mut volume) =
                (None, None, None, None, None, None, None);
            let mut volume_of: Option<(String, String)> = None;
            let mut flags = MountFlags::default();
            let mut shared_span = None;
            let mut ok = true;
            for e in es {
                let p = join(&ip, &e.key);
                self.record(&p, e.value.span);
                if Self::given_empty(e, VOLUME_FIELDS) {
                    continue;
                }
                let flag = |cx: &mut Self| cx.boolean(&e.value, &p);
                match e.key.as_str() {
                    "datastore_id" => {
                        ds = self.storage_id(&e.value, &p).or_else(|| {
                            ok = false;
                            None
                        })
                    }
                    "size" => {
                        size = self
                            .int(&e.value, &p, 1, 131_072, " (GiB)")
                            .map(|v| v as u64)
                            .or_else(|| {
                                ok = false;
                                None
                            })
                    }
                    "volume" => {
                        let Some(s) = self.string(&e.value, &p) else {
                            ok = false;
                            continue;
                        };
                        if is_volume_id(&s) {
                            volume = Some(s);
                        } else {
                            let hint = if s.starts_with('/') {
                                "a host directory is a bind mount: use `host_path`"
                            } else if s
                                .split_once(':')
                                .is_some_and(|(_, n)| n.parse::<f64>().is_ok())
                            {
                                "to allocate a new volume use `datastore_id` and `size`"
                            } else {
                                "a volume id STORAGE:NAME such as local-lvm:vm-100-disk-1 (see `pvesm list STORAGE`)"
                            };
                            self.err(
                                e.value.span,
                                &p,
                                format!("volume {} is not a PVE volume id", quote(&s)),
                                Some(hint),
                            );
                            ok = false;
                        }
                    }
                    "volume_of" => match self.volume_of(&e.value, &p) {
                        Some(v) => volume_of = Some(v),
                        None => ok = false,
                    },
                    "path" | "host_path" => {
                        let Some(s) = self.string(&e.value, &p) else {
                            ok = false;
                            continue;
                        };
                        // PVE's verify_lxc_mp_string: no `.`/`..` component; a container path may be
                        // relative to the container's root (`mnt/data` is mounted at /mnt/data), a host path not.
                        let dots = s.split('/').any(|c| c == "." || c == "..");
                        if e.key == "host_path" && (!s.starts_with('/') || s.contains(',') || dots)
                        {
                            self.err(
                                e.value.span,
                                &p,
                                format!("{} {} must be an absolute path", e.key, quote(&s)),
                                Some("e.g. /srv/data (no ',' and no '.' or '..' component)"),
                            );
                            ok = false;
                        } else if e.key == "path" && (s.is_empty() || s.contains(',') || dots) {
                            self.err(
                                e.value.span,
                                &p,
                                format!("path {} is not a mount path PVE accepts", quote(&s)),
                                Some("e.g. /srv/data (no ',' and no '.' or '..' component; PVE takes it relative to the container's root when it does not start with '/')"),
                            );
                            ok = false;
                        } else if e.key == "path" && s.trim_matches('/').is_empty() {
                            self.err(
                                e.value.span,
                                &p,
                                "path '/' is the root file system; mount points go below it",
                                None,
                            );
                            ok = false;
                        } else if e.key == "path" {
                            mpath = Some((s, e.value.span));
                        } else {
                            host = Some(s);
                        }
                    }
                    "keepattrs" => match flag(self) {
                        Some(v) => flags.keepattrs = v,
                        None => ok = false,
                    },
                    "idmap" => match self.mount_idmap(&e.value, &p) {
                        Some(v) => flags.idmap = Some(v),
                        None => ok = false,
                    },
                    "backup" | "read_only" | "acl" | "quota" | "replicate" | "shared" => {
                        let Some(v) = flag(self) else {
                            ok = false;
                            continue;
                        };
                        match e.key.as_str() {
                            "backup" => backup = Some(v),
                            "read_only" => ro = Some(v),
                            "acl" => flags.acl = Some(v),
                            "quota" => flags.quota = v,
                            "replicate" => flags.replicate = v,
                            _ => {
                                flags.shared = v;
                                shared_span = Some(e.value.span);
                            }
                        }
                    }
                    "mount_options" => match self.mount_options(&e.value, &p) {
                        Some(o) => flags.mount_options = o,
                        None => ok = false,
                    },
                    _ => {
                        self.unknown_field(e, &ip, VOLUME_FIELDS);
                        ok = false;
                    }
                }
            }
            if !ok {
                continue;
            }
            let Some((mpath, mspan)) = mpath else {
                self.err(
                    item.span,
                    &ip,
                    "a mount point needs `path` (where it appears in the container)",
                    None,
                );
                continue;
            };
            // `mnt/data` and `/mnt/data` are one place in the container.
            if let Some(first) = seen.insert(format!("/{}", mpath.trim_start_matches('/')), i) {
                self.err(
                    mspan,
                    &join(&ip, "path"),
                    format!("path {mpath} is already used by mount_points.{first}"),
                    None,
                );
                continue;
            }
            let read_only = ro.unwrap_or(false);
            if flags.shared && host.is_none() {
                self.err(
                    shared_span.unwrap_or(item.span),
                    &join(&ip, "shared"),
                    "`shared` marks a bind mount (host_path) as present on every node; PVE volumes are not marked shared",
                    Some("storage volumes follow their storage's `shared` setting"),
                );
                continue;
            }
            if let Some((container, source_path)) = volume_of {
                if host.is_some() || volume.is_some() || ds.is_some() || size.is_some() {
                    self.err(
                        item.span,
                        &ip,
                        "`volume_of` mounts another container's volume as it is: `volume`, `host_path`, `datastore_id` and `size` do not go with it",
                        Some("pxfleet never resizes or deletes a volume it did not allocate for this container"),
                    );
                    continue;
                }
                out.push(MountPoint::VolumeOf {
                    container,
                    source_path,
                    path: mpath,
                    backup: backup.unwrap_or(false),
                    read_only,
                    flags,
                });
                continue;
            }
            match (host, volume, ds, size) {
                (Some(host_path), None, None, None) => {
                    if backup.is_some() {
                        self.err(item.span, &ip, "`backup` applies to volumes, not bind mounts", None);
                        continue;
                    }
                    out.push(MountPoint::Bind { host_path, path: mpath, read_only, flags });
                }
                (None, Some(volume), None, None) => out.push(MountPoint::Existing {
                    volume,
                    path: mpath,
                    backup: backup.unwrap_or(false),
                    read_only,
                    flags,
                }),
                (None, None, Some(datastore_id), Some(size_gib)) => out.push(MountPoint::Volume {
                    datastore_id,
                    size_gib,
                    path: mpath,
                    backup: backup.unwrap_or(false),
                    read_only,
                    flags,
                }),
                (Some(_), _, _, _) => self.err(item.span, &ip, "a bind mount has `host_path` and `path` only; `volume`, `datastore_id` and `size` are for volumes", None),
                (None, Some(_), _, _) => self.err(
                    item.span,
                    &ip,
                    "an existing `volume` is mounted as it is: `datastore_id` and `size` are for new volumes",
                    Some("pxfleet never resizes or deletes a volume it did not allocate"),
                ),
                (None, None, _, _) => self.err(
                    item.span,
                    &ip,
                    "a volume mount point needs `datastore_id` and `size` (GiB), or an existing `volume`; a bind mount needs `host_path`",
                    Some("e.g. {datastore_id: local-zfs, size: 10, path: /data}, {volume: local-lvm:vm-100-disk-1, path: /data} or {host_path: /srv/x, path: /data}"),
                ),
            }
        }
        Some(out)
    }
}
