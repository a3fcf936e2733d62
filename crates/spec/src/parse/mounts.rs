//! `mount_points:`: each volume or bind mount of a container, with its datastore, size,
//! path and options.

use std::collections::BTreeMap;

use super::{join, quote, Cx, MAX_MOUNT_POINTS, VOLUME_FIELDS};
use crate::model::*;
use crate::yaml::Node;

impl Cx<'_> {
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
            let (mut ds, mut size, mut mpath, mut backup, mut ro, mut host) =
                (None, None, None, None, None, None);
            let mut ok = true;
            for e in es {
                let p = join(&ip, &e.key);
                self.record(&p, e.value.span);
                if Self::given_empty(e, VOLUME_FIELDS) {
                    continue;
                }
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
                    "path" | "host_path" => {
                        let Some(s) = self.string(&e.value, &p) else {
                            ok = false;
                            continue;
                        };
                        if !s.starts_with('/')
                            || s.contains(',')
                            || s.contains("/../")
                            || s.ends_with("/..")
                        {
                            self.err(
                                e.value.span,
                                &p,
                                format!("{} {} must be an absolute path", e.key, quote(&s)),
                                Some("e.g. /srv/data (no ',' and no '..')"),
                            );
                            ok = false;
                        } else if e.key == "path" && s == "/" {
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
                    "backup" => backup = self.boolean(&e.value, &p),
                    "read_only" => ro = self.boolean(&e.value, &p),
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
            if let Some(first) = seen.insert(mpath.clone(), i) {
                self.err(
                    mspan,
                    &join(&ip, "path"),
                    format!("path {mpath} is already used by mount_points.{first}"),
                    None,
                );
                continue;
            }
            let read_only = ro.unwrap_or(false);
            match (host, ds, size) {
                (Some(host_path), None, None) => {
                    if backup.is_some() {
                        self.err(item.span, &ip, "`backup` applies to volumes, not bind mounts", None);
                        continue;
                    }
                    out.push(MountPoint::Bind { host_path, path: mpath, read_only });
                }
                (None, Some(datastore_id), Some(size_gib)) => out.push(MountPoint::Volume {
                    datastore_id,
                    size_gib,
                    path: mpath,
                    backup: backup.unwrap_or(false),
                    read_only,
                }),
                (Some(_), _, _) => self.err(item.span, &ip, "a bind mount has `host_path` and `path` only; `datastore_id` and `size` are for volumes", None),
                (None, _, _) => self.err(
                    item.span,
                    &ip,
                    "a volume mount point needs `datastore_id` and `size` (GiB); a bind mount needs `host_path`",
                    Some("e.g. {datastore_id: local-zfs, size: 10, path: /data} or {host_path: /srv/x, path: /data}"),
                ),
            }
        }
        Some(out)
    }
}
