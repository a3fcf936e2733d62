//! Protobuf at the edge of the two streams: the controller's [`FleetEvent`]s become `pb::FleetEvent`s for
//! Watch, [`ToAgent`] messages become `pb::ControllerMessage`s on an agent's Connect stream, and the agent's
//! `pb::OperationUpdate`s become [`OperationUpdate`]s for the reconcile loop.

use pxfleet_proto::v1 as pb;

use crate::agents::ToAgent;
use crate::grpc::agent_service::{HEARTBEAT_INTERVAL_SECS, MAX_PARALLEL_OPERATIONS};
use crate::grpc::convert;
use crate::model::{FleetEvent, OpKind, OperationUpdate, UpdateState};

pub fn op_kind_tag_pb(k: OpKind) -> pb::OperationKind {
    match k {
        OpKind::SeedTemplate => pb::OperationKind::SeedTemplate,
        OpKind::Create => pb::OperationKind::Create,
        OpKind::Update => pb::OperationKind::Update,
        OpKind::Resize => pb::OperationKind::Resize,
        OpKind::Start => pb::OperationKind::Start,
        OpKind::Stop => pb::OperationKind::Stop,
        OpKind::Destroy => pb::OperationKind::Destroy,
        OpKind::Migrate => pb::OperationKind::Migrate,
        OpKind::Snapshot => pb::OperationKind::Snapshot,
    }
}

pub fn fleet_event_pb(e: FleetEvent) -> pb::FleetEvent {
    let (op_id, kind, op_state) = match e.op {
        Some(op) => (
            op.id,
            op_kind_tag_pb(op.kind) as i32,
            convert::op_state_pb(op.state) as i32,
        ),
        None => (String::new(), 0, 0),
    };
    pb::FleetEvent {
        unix_ms: e.unix_ms as i64,
        fleet: e.fleet,
        container: e.container,
        vm_id: e.vm_id,
        node: e.node,
        state: e
            .status
            .map_or(0, |s| convert::container_state_pb(s) as i32),
        op_id,
        kind,
        op_state,
        message: e.message,
        percent: None,
        error: e.error,
        revision: e.revision,
        settled: e.settled,
    }
}

pub fn controller_message_pb(m: ToAgent) -> pb::ControllerMessage {
    let msg = match m {
        ToAgent::Welcome { node } => pb::controller_message::Msg::Welcome(pb::Welcome {
            node,
            protocol_version: pxfleet_proto::PROTOCOL_VERSION,
            heartbeat_interval_seconds: HEARTBEAT_INTERVAL_SECS,
            max_parallel_operations: MAX_PARALLEL_OPERATIONS,
        }),
        ToAgent::Ack {
            heartbeat_seq,
            op_ids,
        } => pb::controller_message::Msg::Ack(pb::Ack {
            heartbeat_seq,
            op_ids,
        }),
        ToAgent::Operation { op, password } => {
            pb::controller_message::Msg::Operation(convert::operation_pb(&op, password.as_deref()))
        }
    };
    pb::ControllerMessage { msg: Some(msg) }
}

/// An agent's report from `node` (taken by value: its strings move, nothing is copied).
pub fn operation_update_from_pb(node: &str, u: pb::OperationUpdate) -> OperationUpdate {
    let state =
        match pb::OperationState::try_from(u.state).unwrap_or(pb::OperationState::Unspecified) {
            pb::OperationState::Succeeded => UpdateState::Succeeded,
            pb::OperationState::Failed | pb::OperationState::Cancelled => UpdateState::Failed,
            _ => UpdateState::Progress,
        };
    OperationUpdate {
        op_id: u.op_id,
        state,
        message: u.message,
        error: u.error,
        container: u
            .container
            .as_ref()
            .map(|c| convert::observed_from_pb(node, c)),
        template_sha256: u.template_sha256,
        snapshots: u
            .snapshots
            .into_iter()
            .map(convert::snapshot_from_pb)
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{ContainerStatus, OpEvent, OpState};

    #[test]
    fn events_keep_every_field_and_unset_parts_stay_unspecified() {
        let op = fleet_event_pb(FleetEvent {
            unix_ms: 7,
            fleet: "dev".into(),
            container: "web".into(),
            vm_id: 1000,
            node: "n1".into(),
            op: Some(OpEvent {
                id: "op1".into(),
                kind: OpKind::Create,
                state: OpState::Dispatched,
            }),
            message: "dispatched".into(),
            revision: 3,
            ..Default::default()
        });
        assert_eq!(op.kind, pb::OperationKind::Create as i32);
        assert_eq!(op.op_state, pb::OperationState::Dispatched as i32);
        assert_eq!(op.state, 0);
        assert_eq!((op.op_id.as_str(), op.unix_ms, op.revision), ("op1", 7, 3));
        let status = fleet_event_pb(FleetEvent {
            status: Some(ContainerStatus::Running),
            settled: true,
            ..Default::default()
        });
        assert_eq!(status.state, pb::ContainerState::Running as i32);
        assert_eq!((status.kind, status.op_state), (0, 0));
        assert!(status.settled);
    }

    #[test]
    fn a_cancelled_operation_failed_and_a_received_one_is_in_progress() {
        let mut u = pb::OperationUpdate {
            op_id: "op1".into(),
            state: pb::OperationState::Cancelled as i32,
            ..Default::default()
        };
        assert_eq!(
            operation_update_from_pb("n1", u.clone()).state,
            UpdateState::Failed
        );
        u.state = pb::OperationState::Running as i32;
        assert_eq!(
            operation_update_from_pb("n1", u.clone()).state,
            UpdateState::Progress
        );
        u.state = 99;
        assert_eq!(
            operation_update_from_pb("n1", u.clone()).state,
            UpdateState::Progress
        );
    }
}
