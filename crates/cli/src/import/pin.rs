//! Pinning from a state file: the vm_ids, nodes and MAC addresses of existing containers are
//! written into the imported ones, with a note for each that cannot be matched.

use serde_json::{json, Value};

use super::emit::Ct;
use super::state;
use super::Notes;

pub(super) fn apply_state(
    st: &[state::StateCt],
    containers: &mut [Ct],
    notes: &mut Notes,
    file: &str,
) {
    let mut used = vec![false; containers.len()];
    for s in st {
        let found = containers
            .iter()
            .position(|c| s.key.as_deref() == Some(c.key.as_str()))
            .or_else(|| {
                containers.iter().position(|c| {
                    s.vm_id.is_some() && c.get("vm_id").and_then(Value::as_u64) == s.vm_id
                })
            })
            .or_else(|| {
                containers.iter().position(|c| {
                    s.hostname.is_some()
                        && c.get("hostname").and_then(Value::as_str) == s.hostname.as_deref()
                })
            });
        let Some(i) = found.filter(|i| !used[*i]) else {
            notes.push(
                None,
                format!(
                    "{file}: {} (vm_id {}, node {}): no container of the configuration matches it: not imported",
                    s.address,
                    s.vm_id.map(|v| v.to_string()).unwrap_or("?".into()),
                    s.node.as_deref().unwrap_or("?")
                ),
            );
            continue;
        };
        used[i] = true;
        let c = &mut containers[i];
        if let Some(v) = s.vm_id {
            if let Some(cur) = c.get("vm_id").and_then(Value::as_u64) {
                if cur != v {
                    notes.push(None, format!("{file}: {}: vm_id is {v} in the state, {cur} in the configuration: the state's is kept (the container exists)", s.address));
                }
            }
            c.set("vm_id", json!(v));
        }
        if let Some(n) = &s.node {
            if let Some(cur) = c.get("node").and_then(Value::as_str) {
                if cur != n {
                    notes.push(None, format!("{file}: {}: node is {n} in the state, {cur} in the configuration: the state's is kept (the container runs there)", s.address));
                }
            }
            c.set("node", json!(n));
        }
        for (idx, mac) in s.macs.iter().enumerate() {
            let Some(mac) = mac else { continue };
            if idx == 0 {
                c.set("mac_address", json!(mac.to_ascii_uppercase()));
            } else if let Some(Value::Array(extra)) = c.get("extra_interfaces").cloned() {
                let mut extra = extra;
                if let Some(Value::Object(m)) = extra.get_mut(idx - 1) {
                    m.insert("mac_address".into(), json!(mac.to_ascii_uppercase()));
                }
                c.set("extra_interfaces", Value::Array(extra));
            }
        }
        c.notes.push(format!(
            "in the state as {}: vm_id, node and MAC kept",
            s.address
        ));
    }
    for (i, c) in containers.iter_mut().enumerate() {
        if !used[i] {
            c.notes
                .push("not in the state: pxfleet creates it".to_string());
        }
    }
}
