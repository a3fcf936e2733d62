//! Collection of every `proxmox_virtual_environment_container` resource of a set of files,
//! evaluated per `for_each` entry.

use ::hcl::Value as HclValue;

use super::bpg;
use super::emit::Ct;
use super::hcl::{blocks, label, Scope, TfFile};
use super::Notes;

/// Every container resource of `files`, per `for_each` entry.
pub(super) fn collect(
    files: &[TfFile],
    scope: &Scope,
    cx: &bpg::Cx<'_>,
    notes: &mut Notes,
    out: &mut Vec<Ct>,
    privileged: &mut bool,
) {
    let scope = &with_container_ids(files, scope);
    for (f, r) in blocks(files, "resource") {
        let kind = label(r, 0);
        let rname = label(r, 1);
        if kind != bpg::CONTAINER {
            if !matches!(kind, bpg::DOWNLOAD | "random_password") {
                notes.add(
                    f.loc(r),
                    format!(
                        "resource {kind}.{rname}: not imported (pxfleet manages LXC containers)"
                    ),
                );
            }
            continue;
        }
        if let Some(c) = r.body.get_attribute("count") {
            notes.add(
                f.loc(c),
                format!("{kind}.{rname}: `count` is not imported: write `for_each` over a map, or the containers by hand"),
            );
            continue;
        }
        let entries: Vec<(String, HclValue)> = match r.body.get_attribute("for_each") {
            None => vec![(rname.replace('_', "-"), HclValue::Null)],
            Some(fe) => {
                match scope.eval(&fe.value) {
                    Ok(HclValue::Object(m)) => m.into_iter().collect(),
                    Ok(HclValue::Array(a)) => a
                        .into_iter()
                        .filter_map(|v| v.as_str().map(|s| (s.to_string(), v.clone())))
                        .collect(),
                    Ok(other) => {
                        notes.add(
                        f.loc(fe),
                        format!("{kind}.{rname}: for_each is {other:?}, not a map or set: not imported"),
                    );
                        continue;
                    }
                    Err(why) => {
                        let src = f.source(&fe.value);
                        let mut because = why;
                        for (n, loc, what) in cx.unresolved {
                            if src.contains(&format!("var.{n}")) {
                                because = format!("`var.{n}` is {what} at {loc}");
                            }
                        }
                        notes.add(
                        f.loc(fe),
                        format!("{kind}.{rname}: for_each = {src} is not static ({because}): not imported"),
                    );
                        continue;
                    }
                }
            }
        };
        for (key, value) in entries {
            let mut s = scope.clone();
            if !value.is_null() {
                s.each = Some((HclValue::from(key.clone()), value));
            }
            let (ct, p) = bpg::container(f, r, &s, cx, &key, notes);
            *privileged |= p;
            out.push(ct);
        }
    }
}

/// `scope` with each single container resource's static `vm_id` (as `id`, a string as the provider has it, and
/// `vm_id`), `node_name` and `mount_point[N].path_in_datastore` (see [`bpg::volume_of_marker`]), so that another container's `clone { vm_id = proxmox_virtual_environment_container.gold.id }`
/// evaluates to the template declared next to it. A resource with `count` or `for_each`, or whose vm_id is not
/// static, is left out (a reference to it stays "not static").
fn with_container_ids(files: &[TfFile], scope: &Scope) -> Scope {
    let mut by_label = ::hcl::Map::new();
    for (_, r) in blocks(files, "resource") {
        if label(r, 0) != bpg::CONTAINER
            || r.body.get_attribute("count").is_some()
            || r.body.get_attribute("for_each").is_some()
        {
            continue;
        }
        let mut attrs = ::hcl::Map::new();
        let vm_id = r
            .body
            .get_attribute("vm_id")
            .and_then(|a| scope.eval(&a.value).ok())
            .and_then(|v| match v {
                HclValue::Number(n) => n.as_u64(),
                HclValue::String(s) => s.trim().parse().ok(),
                _ => None,
            });
        if let Some(vm_id) = vm_id {
            attrs.insert("id".into(), HclValue::from(vm_id.to_string()));
            attrs.insert("vm_id".into(), HclValue::from(vm_id));
        }
        if let Some(HclValue::String(n)) = r
            .body
            .get_attribute("node_name")
            .and_then(|a| scope.eval(&a.value).ok())
        {
            attrs.insert("node_name".into(), HclValue::from(n));
        }
        // `mount_point[N].path_in_datastore` (the volume id the provider reads back) stands for "the volume this
        // container has at its N-th mount point's path": `volume_of` in fleet.yaml.
        let mounts: Vec<HclValue> = r
            .body
            .get_blocks("mount_point")
            .map(|m| {
                let mut mp = ::hcl::Map::new();
                if let Some(HclValue::String(path)) = m
                    .body
                    .get_attribute("path")
                    .and_then(|a| scope.eval(&a.value).ok())
                {
                    let name = label(r, 1).replace('_', "-");
                    mp.insert(
                        "path_in_datastore".into(),
                        HclValue::from(bpg::volume_of_marker(&name, &path)),
                    );
                }
                HclValue::Object(mp)
            })
            .collect();
        if !mounts.is_empty() {
            attrs.insert("mount_point".into(), HclValue::Array(mounts));
        }
        if attrs.is_empty() {
            continue;
        }
        by_label.insert(label(r, 1).to_string(), HclValue::Object(attrs));
    }
    let mut s = scope.clone();
    if !by_label.is_empty() {
        s.resources
            .insert(bpg::CONTAINER.to_string(), HclValue::Object(by_label));
    }
    s
}
