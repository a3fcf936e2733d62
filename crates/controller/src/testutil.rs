//! Builders for unit tests: a minimal resolved spec container and template, nodes with inventory, the
//! desired/applied records of container `web` of fleet `dev`, and a controller state on a temporary store with
//! helpers to submit, read what was dispatched to an agent, and report results back.

use std::collections::BTreeMap;

use pxfleet_spec::{
    Constraints, Container, Dns, Features, Interface, Ipv4Config, Ipv6Config, Template,
    TemplateSource,
};

use std::sync::Arc;

use pxfleet_common::Clock;
use pxfleet_proto::v1 as pb;

use crate::config::Config;
use crate::model::{AppliedContainer, DesiredContainer, NodeInventory, NodeRecord, StorageInfo};
use crate::state::State;
use crate::store::{Store, SubmitTx};

pub fn template() -> Template {
    Template {
        source: TemplateSource::Url {
            url: "http://127.0.0.1/ubuntu.tar.xz".into(),
            checksum: None,
        },
        storage: "local".into(),
        seed: Default::default(),
    }
}

pub fn container(name: &str) -> Container {
    Container {
        name: name.into(),
        vm_id: None,
        hostname: name.into(),
        node: None,
        cores: Some(1),
        cpu_limit: None,
        cpu_units: None,
        memory: 512,
        swap: 512,
        disk_size: 4,
        datastore_id: Some("local-lvm".into()),
        template: "ubuntu".into(),
        unprivileged: true,
        features: Features::default(),
        interfaces: vec![Interface {
            name: "eth0".into(),
            bridge: "vmbr0".into(),
            ipv4: Ipv4Config::Dhcp,
            ipv6: Ipv6Config::None,
            vlan_id: None,
            mtu: None,
            mac_address: None,
            firewall: false,
            rate_limit: None,
            host_managed: false,
            link_down: false,
            trunks: vec![],
        }],
        dns: Dns::default(),
        ssh_public_keys: vec![],
        password: None,
        startup: None,
        start_on_boot: false,
        state: Default::default(),
        adopt: false,
        restart_policy: Default::default(),
        drift: Default::default(),
        ostype: None,
        env: Default::default(),
        entrypoint: None,
        arch: None,
        timezone: None,
        console: Default::default(),
        rootfs: Default::default(),
        hookscript: None,
        wait_for_ip: Default::default(),
        pool: None,
        protection: false,
        tags: vec![],
        description: None,
        labels: BTreeMap::new(),
        constraints: Constraints::default(),
        mount_points: vec![],
        devices: vec![],
        idmap: vec![],
    }
}

/// A ready node with `local-lvm` (rootdir, 100 GiB free), `local` (vztmpl) and `vmbr0`.
pub fn node(name: &str, memory_free_mib: u64) -> NodeRecord {
    NodeRecord {
        name: name.into(),
        inventory: NodeInventory {
            pve_version: "9.0.3".into(),
            cluster_name: "lab".into(),
            cores: 8,
            memory_mib: 16384,
            memory_free_mib,
            storages: vec![
                StorageInfo {
                    id: "local-lvm".into(),
                    content: vec!["rootdir".into(), "images".into()],
                    enabled: true,
                    active: true,
                    total_bytes: 200 << 30,
                    avail_bytes: 100 << 30,
                },
                StorageInfo {
                    id: "local".into(),
                    content: vec!["vztmpl".into(), "iso".into()],
                    enabled: true,
                    active: true,
                    total_bytes: 50 << 30,
                    avail_bytes: 40 << 30,
                },
            ],
            bridges: vec!["vmbr0".into()],
            templates: vec![],
            labels: BTreeMap::new(),
        },
        cordoned: false,
        cordon_reason: String::new(),
        cert_serial: String::new(),
        last_seen_ms: 1,
        last_op_update_ms: 0,
        enrolled_ms: 1,
        seeded: BTreeMap::new(),
        template_digests: BTreeMap::new(),
    }
}

/// Container `web` of fleet `dev` as desired (revision 1, node pinned), where `c` says it is.
pub fn desired_of(c: Container) -> DesiredContainer {
    DesiredContainer {
        fleet: "dev".into(),
        name: "web".into(),
        node: c.node.clone().unwrap_or_default(),
        vm_id: c.vm_id.unwrap_or_default(),
        container: c,
        template: template(),
        revision: 1,
        node_pinned: true,
    }
}

/// Container `web` of fleet `dev` as applied, where `c` says it is.
pub fn applied_of(c: Container) -> AppliedContainer {
    AppliedContainer {
        fleet: "dev".into(),
        name: "web".into(),
        node: c.node.clone().unwrap_or_default(),
        vm_id: c.vm_id.unwrap_or_default(),
        container: c,
        template: template(),
    }
}

/// A controller on a temporary store, retrying without backoff.
pub fn test_state() -> Arc<State> {
    let mut config = Config::default();
    config.reconciler.backoff_base_ms = 0;
    config.reconciler.backoff_max_ms = 0;
    let store = Store::temporary().unwrap();
    let ca = pxfleet_tls::Ca::generate("test").unwrap();
    State::new(config, store, ca, Default::default(), Clock::system())
}

/// Submits fleet `dev` (its next revision) with `spec`, `desired` and `secrets`.
pub fn submit_dev(
    st: &State,
    spec: serde_json::Value,
    desired: Vec<DesiredContainer>,
    secrets: BTreeMap<String, String>,
) {
    let rev = st
        .store
        .fleet("dev")
        .unwrap()
        .map(|f| f.revision)
        .unwrap_or(0);
    st.store
        .submit(&SubmitTx {
            fleet: "dev".into(),
            expected_revision: Some(rev),
            author: "test".into(),
            time_ms: 0,
            spec: crate::store::spec_json(&spec).unwrap(),
            summary: String::new(),
            desired,
            secrets,
            audit_action: "submit".into(),
            file_name: String::new(),
            source_sha256: String::new(),
            retry: Vec::new(),
        })
        .unwrap();
}

/// The receiving end of an agent's session.
pub type AgentRx = tokio::sync::mpsc::Receiver<crate::agents::ToAgent>;

/// The next message queued for the agent, as it goes on the wire.
pub fn next_message(rx: &mut AgentRx) -> Option<pb::ControllerMessage> {
    rx.try_recv()
        .ok()
        .map(crate::grpc::convert_streams::controller_message_pb)
}

/// Every operation queued for the agent so far, as it goes on the wire.
pub fn operations_sent(rx: &mut AgentRx) -> Vec<pb::Operation> {
    let mut out = Vec::new();
    while let Some(m) = next_message(rx) {
        if let Some(pb::controller_message::Msg::Operation(op)) = m.msg {
            out.push(op);
        }
    }
    out
}

/// Hands the reconcile loop an agent's update from `node` as it comes off the wire.
pub fn on_update_pb(
    st: &State,
    node: &str,
    u: &pb::OperationUpdate,
) -> Result<bool, crate::store::StoreError> {
    let u = crate::grpc::convert_streams::operation_update_from_pb(node, u.clone());
    crate::reconcile::on_update(st, node, &u)
}

/// An agent's final result for operation `op`: succeeded, or failed with `error`.
pub fn result(op: &pb::Operation, error: Option<&str>) -> pb::OperationUpdate {
    pb::OperationUpdate {
        op_id: op.op_id.clone(),
        state: if error.is_none() {
            pb::OperationState::Succeeded
        } else {
            pb::OperationState::Failed
        } as i32,
        error: error.unwrap_or_default().to_string(),
        ..Default::default()
    }
}
