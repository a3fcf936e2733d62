//! The controller as the benchmark sees it through the FleetService API: connecting, waiting
//! for the nodes to be ready, what is up, and the stall summary when containers do not come up.
// the bench measures real time (and drives real processes)
#![allow(clippy::disallowed_methods)]

use std::path::Path;
use std::time::{Duration, Instant};

use pxfleet_proto::v1 as pb;
use pxfleet_proto::v1::fleet_service_client::FleetServiceClient;
use pxfleet_tls::Bundle;
use tonic::transport::Channel;

use super::{BenchError, MAX_MESSAGE};

pub(super) async fn api(
    url: &str,
    admin: &Bundle,
) -> Result<FleetServiceClient<Channel>, BenchError> {
    let tls = pxfleet_tls::client_config(admin)?;
    let channel = pxfleet_tls::connect(url, tls).await?;
    Ok(FleetServiceClient::new(channel)
        .max_decoding_message_size(MAX_MESSAGE)
        .max_encoding_message_size(MAX_MESSAGE))
}

pub(super) async fn wait_nodes_ready(
    api: &mut FleetServiceClient<Channel>,
    n: usize,
    timeout: Duration,
    log: &Path,
) -> Result<(), BenchError> {
    let deadline = Instant::now() + timeout;
    let mut last = String::new();
    while Instant::now() < deadline {
        match api.get_nodes(pb::GetNodesRequest {}).await {
            Ok(r) => {
                let ready = r
                    .into_inner()
                    .nodes
                    .iter()
                    .filter(|n| n.status == pb::NodeStatus::Ready as i32)
                    .count();
                if ready >= n {
                    return Ok(());
                }
                last = format!("{ready} of {n} nodes ready");
            }
            Err(e) => last = e.to_string(),
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    Err(BenchError::Setup {
        what: format!("{n} nodes ready within {} s", timeout.as_secs()),
        message: format!(
            "{last}; controller log:\n{}",
            crate::controller::tail(log, 20)
        ),
    })
}

pub(super) fn is_up(c: &pb::ContainerInfo) -> bool {
    c.state == pb::ContainerState::Running as i32
        && !c.node.is_empty()
        && c.vm_id != 0
        && !c.addresses.is_empty()
}

/// What is not running yet, for the stall report: counts by state, the active operations by node and state,
/// and the first few stuck operations.
pub(super) async fn stall_summary(
    api: &mut FleetServiceClient<Channel>,
    running: Option<usize>,
    total: usize,
) -> String {
    let mut s = match running {
        Some(r) => format!("{r} of {total} containers running; "),
        None => String::new(),
    };
    match api
        .get_operations(pb::GetOperationsRequest {
            fleet: String::new(),
            active_only: true,
            limit: 100_000,
            ..Default::default()
        })
        .await
    {
        Ok(r) => {
            let ops = r.into_inner().operations;
            let mut by_state: std::collections::BTreeMap<String, usize> = Default::default();
            let mut by_node: std::collections::BTreeMap<String, usize> = Default::default();
            for o in &ops {
                let st = pb::OperationState::try_from(o.state)
                    .map(|s| s.as_str_name().to_string())
                    .unwrap_or_else(|_| o.state.to_string());
                *by_state.entry(st).or_default() += 1;
                *by_node.entry(o.node.clone()).or_default() += 1;
            }
            s.push_str(&format!(
                "{} active operations by state {by_state:?} on {} nodes; ",
                ops.len(),
                by_node.len()
            ));
            let mut nodes: Vec<(&String, &usize)> = by_node.iter().collect();
            nodes.sort_by(|a, b| b.1.cmp(a.1));
            s.push_str(&format!(
                "busiest nodes {:?}; oldest: ",
                nodes.iter().take(5).collect::<Vec<_>>()
            ));
            for o in ops.iter().take(5) {
                s.push_str(&format!(
                    "[{} {} on {} vm_id {} state {} attempts {} created {} updated {} msg {:?} err {:?}] ",
                    o.op_id,
                    pb::OperationKind::try_from(o.kind)
                        .map(|k| k.as_str_name())
                        .unwrap_or("?"),
                    o.node,
                    o.vm_id,
                    pb::OperationState::try_from(o.state)
                        .map(|k| k.as_str_name())
                        .unwrap_or("?"),
                    o.attempts,
                    o.created_unix_ms,
                    o.updated_unix_ms,
                    o.message,
                    o.error
                ));
            }
        }
        Err(e) => s.push_str(&format!("GetOperations failed: {e}")),
    }
    s
}

pub(super) fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}
