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
