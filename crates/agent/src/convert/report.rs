//! What the agent reports, as protobuf: observed containers, operation updates, the node inventory.

use super::*;

/// An observed container as protobuf.
pub fn observed_to_proto(o: &ObservedContainer, node: &str) -> v1::ObservedContainer {
    let power = match o.status.as_str() {
        "running" => v1::PowerState::Running,
        "stopped" => v1::PowerState::Stopped,
        _ => v1::PowerState::Unspecified,
    };
    v1::ObservedContainer {
        vm_id: o.vmid,
        power: power as i32,
        lock: o.lock.clone().unwrap_or_default(),
        managed: o.managed.is_some(),
        config: Some(v1::ContainerSpec {
            pool: o.pool.clone().unwrap_or_default(),
            ..config_to_spec(o.vmid, &o.config)
        }),
        addresses: o.addresses.clone(),
        disk_used_bytes: None,
        raw_config: o
            .config
            .raw
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
        node: node.to_string(),
    }
}

/// An operation update as protobuf, stamped `unix_ms`.
pub fn update_to_proto(u: &OpUpdate, vmid: u32, node: &str, unix_ms: i64) -> v1::OperationUpdate {
    let mut out = v1::OperationUpdate {
        op_id: u.op_id().to_string(),
        vm_id: vmid,
        unix_ms,
        ..Default::default()
    };
    match u {
        OpUpdate::Progress { message, .. } => {
            out.state = v1::OperationState::Running as i32;
            out.message = message.clone();
        }
        OpUpdate::Succeeded { result, .. } => {
            out.state = v1::OperationState::Succeeded as i32;
            out.message = match &result.template_volid {
                Some(v) => format!("{}: {v}", result.message),
                None => result.message.clone(),
            };
            out.container = result
                .container
                .as_ref()
                .map(|c| observed_to_proto(c, node));
            out.template_sha256 = result.template_sha256.clone().unwrap_or_default();
            out.snapshots = result
                .snapshots
                .iter()
                .flatten()
                .map(|s| v1::Snapshot {
                    name: s.name.clone(),
                    description: s.description.clone(),
                    snaptime: s.snaptime,
                    parent: s.parent.clone().unwrap_or_default(),
                })
                .collect();
        }
        OpUpdate::Failed { failure, .. } => {
            out.state = v1::OperationState::Failed as i32;
            out.message = if failure.retryable {
                "failed (retryable)".into()
            } else {
                "failed".into()
            };
            out.error = failure.error.clone();
        }
    }
    out
}

/// The node's inventory for a hello.
pub fn inventory(
    node: &str,
    facts: &NodeFacts,
    containers: &[ObservedContainer],
    labels: &BTreeMap<String, String>,
) -> v1::Inventory {
    v1::Inventory {
        node: node.to_string(),
        pve_version: facts.pve_version.clone(),
        cluster_name: facts.cluster_name.clone(),
        cores: facts.cores,
        memory_total_bytes: facts.memory_bytes,
        memory_free_bytes: facts.memory_free_bytes,
        storages: storages(facts),
        bridges: facts
            .bridges
            .iter()
            .map(|b| v1::Bridge {
                name: b.name.clone(),
                mtu: b.mtu,
                active: b.active,
                cidrs: b.cidrs.clone(),
            })
            .collect(),
        templates: templates(facts),
        containers: containers
            .iter()
            .map(|c| observed_to_proto(c, node))
            .collect(),
        labels: labels.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
        agent_version: env!("CARGO_PKG_VERSION").to_string(),
    }
}

pub fn storages(facts: &NodeFacts) -> Vec<v1::Storage> {
    facts
        .storages
        .iter()
        .map(|s| v1::Storage {
            id: s.id.clone(),
            r#type: s.kind.clone(),
            content: s.content.clone(),
            total_bytes: s.total_bytes,
            avail_bytes: s.avail_bytes,
            used_bytes: s.used_bytes,
            path: s.path.clone().unwrap_or_default(),
            active: s.active,
            enabled: s.enabled,
            shared: s.shared,
        })
        .collect()
}

pub fn templates(facts: &NodeFacts) -> Vec<v1::CachedTemplate> {
    facts
        .templates
        .iter()
        .map(|t| v1::CachedTemplate {
            volid: t.volid.clone(),
            storage: t.storage.clone(),
            file_name: t.file_name.clone(),
            size_bytes: t.size_bytes,
        })
        .collect()
}
