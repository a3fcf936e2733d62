//! bpg's `clone` block on a container (`pct clone` of an existing container) into a `clone:` template.

use hcl::edit::structure::Block;
use serde_json::{json, Value};

use super::bpg::{as_bool, as_u64, Eval, CONTAINER};
use super::hcl::Loc;

/// `clone { vm_id, node_name, datastore_id, full }`: a `templates:` entry `clone-VMID` with `clone:` (the
/// provider's `node_name` defaults to the container's node, `full` to true).
pub(super) fn clone_block(ev: &mut Eval<'_>, b: &Block) {
    let mut def = serde_json::Map::new();
    for (path, a) in ev.attrs("clone.", &b.body) {
        let Some(v) = ev.value(&path, a) else {
            continue;
        };
        match a.key.as_str() {
            "vm_id" => match as_u64(&v) {
                Some(n) => {
                    def.insert("vm_id".into(), json!(n));
                }
                None => ev.unmapped(&path, a, "not a number"),
            },
            "node_name" => {
                def.insert("node".into(), v);
            }
            "datastore_id" => {
                def.insert("datastore_id".into(), v);
            }
            "full" => match as_bool(&v) {
                Some(f) => {
                    def.insert("full".into(), json!(f));
                }
                None => ev.unmapped(&path, a, "not a boolean"),
            },
            _ => ev.unmapped(&path, a, "no pxfleet field"),
        }
    }
    let Some(vm_id) = def.get("vm_id").and_then(as_u64) else {
        ev.unmapped("clone", b, "no static vm_id of the container to clone");
        return;
    };
    if !def.contains_key("node") {
        match ev.ct.get("node").cloned() {
            Some(n) => {
                def.insert("node".into(), n);
            }
            None => {
                ev.unmapped(
                    "clone",
                    b,
                    "no node_name (neither in clone nor on the container)",
                );
                return;
            }
        }
    }
    if def.get("full") == Some(&json!(true)) {
        def.remove("full"); // pxfleet's default
    }
    ev.ct.set("template", json!(format!("clone-{vm_id}")));
    ev.ct
        .set("_template_def", json!({ "clone": Value::Object(def) }));
}

/// A clone's root disk: a linked clone's stays on the template's storage (the container's `disk.datastore_id`
/// is dropped); a full clone's goes to `clone.datastore_id`, which wins over `disk.datastore_id`.
pub(super) fn clone_datastore(ev: &mut Eval<'_>, at: Loc, name: &str) {
    let Some(clone) = ev
        .ct
        .get("_template_def")
        .and_then(|t| t.get("clone"))
        .cloned()
    else {
        return;
    };
    let full = clone.get("full").and_then(as_bool).unwrap_or(true);
    let Some(Value::String(mine)) = ev.ct.get("datastore_id").cloned() else {
        return;
    };
    let why = match (full, clone.get("datastore_id").and_then(Value::as_str)) {
        (false, _) => "a linked clone's disk stays on the template's storage".to_string(),
        (true, Some(theirs)) if theirs != mine => {
            format!("the clone's datastore_id {theirs:?} is where the disk goes")
        }
        _ => return,
    };
    ev.ct.remove("datastore_id");
    ev.notes.add(
        at,
        format!("{CONTAINER}.{name}: disk.datastore_id = {mine:?} not imported: {why}"),
    );
}
