//! FleetService queries and waits shared by both harnesses (the loopback [`crate::Cluster`] and the LXC
//! [`crate::e2e::E2e`]): each takes an already connected admin client, so the two differ only in how they
//! connect and what they print when something does not come up.
// test code driving separate processes: real time
#![allow(clippy::disallowed_methods)]

use std::future::Future;
use std::time::Duration;

use pxfleet_proto::v1 as pb;
use pxfleet_proto::v1::fleet_service_client::FleetServiceClient;
use tonic::transport::Channel;

use crate::error::grpc;
use crate::{describe, wait_until, HarnessError, Result};

/// A user certificate issued and recorded by the controller through the admin client `api` (as `pxctl user
/// issue` does: the key and CSR made here); an operator limited to `fleets` when not empty.
pub async fn issue_user(
    mut api: FleetServiceClient<Channel>,
    name: &str,
    role: pxfleet_tls::Role,
    fleets: &[&str],
) -> Result<pxfleet_tls::Bundle> {
    let kc = pxfleet_tls::generate_key_and_csr(name)?;
    let role = match role {
        pxfleet_tls::Role::Admin => pb::UserRole::Admin,
        pxfleet_tls::Role::Operator => pb::UserRole::Operator,
        pxfleet_tls::Role::Viewer => pb::UserRole::Viewer,
    };
    let issued = api
        .issue_user_certificate(pb::IssueUserCertificateRequest {
            name: name.into(),
            role: role as i32,
            fleets: fleets.iter().map(|f| f.to_string()).collect(),
            csr_pem: kc.csr_pem,
            validity_days: 0,
        })
        .await
        .map_err(grpc("IssueUserCertificate"))?
        .into_inner();
    Ok(pxfleet_tls::Bundle {
        ca_pem: issued.ca_pem,
        cert_pem: issued.cert_pem,
        key_pem: kc.key_pem,
    })
}

/// Every container of `fleet` as the controller reports it.
pub async fn containers(
    mut api: FleetServiceClient<Channel>,
    fleet: &str,
) -> Result<Vec<pb::ContainerInfo>> {
    let req = pb::GetContainersRequest {
        fleet: fleet.into(),
        node: String::new(),
    };
    let resp = api
        .get_containers(req)
        .await
        .map_err(grpc("GetContainers"))?;
    Ok(resp.into_inner().containers)
}

/// Every node the controller knows.
pub async fn nodes(mut api: FleetServiceClient<Channel>) -> Result<Vec<pb::NodeInfo>> {
    let resp = api
        .get_nodes(pb::GetNodesRequest {})
        .await
        .map_err(grpc("GetNodes"))?;
    Ok(resp.into_inner().nodes)
}

/// Every operation of `fleet`.
pub async fn operations(
    mut api: FleetServiceClient<Channel>,
    fleet: &str,
) -> Result<Vec<pb::OperationInfo>> {
    let req = pb::GetOperationsRequest {
        fleet: fleet.into(),
        ..Default::default()
    };
    let resp = api
        .get_operations(req)
        .await
        .map_err(grpc("GetOperations"))?;
    Ok(resp.into_inner().operations)
}

/// Polls `connect` + GetNodes until every name in `names` is `ready`; on timeout the error carries the last
/// answer and `logs()` (the agents' logs, so a failing test says why).
pub async fn wait_nodes_ready<C, Fut>(
    names: &[String],
    timeout: Duration,
    connect: C,
    logs: impl FnOnce() -> String,
) -> Result<()>
where
    C: Fn() -> Fut,
    Fut: Future<Output = Result<FleetServiceClient<Channel>>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    let mut last = String::new();
    while tokio::time::Instant::now() < deadline {
        match async { nodes(connect().await?).await }.await {
            Ok(nodes) => {
                let ready: Vec<&str> = nodes
                    .iter()
                    .filter(|n| n.status == pb::NodeStatus::Ready as i32)
                    .map(|n| n.name.as_str())
                    .collect();
                if names.iter().all(|n| ready.contains(&n.as_str())) {
                    return Ok(());
                }
                last = format!("ready: {ready:?}");
            }
            Err(e) => last = e.to_string(),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Err(HarnessError::Setup {
        what: format!("nodes {names:?} ready within {} s", timeout.as_secs()),
        message: format!("{last}\n{}", logs()),
    })
}

/// Running with a node, a vm_id and an address.
pub fn is_up(c: &pb::ContainerInfo) -> bool {
    c.state == pb::ContainerState::Running as i32
        && !c.node.is_empty()
        && c.vm_id != 0
        && !c.addresses.is_empty()
}

/// Waits until `fleet` has exactly `names` and every one passes `up` (see [`is_up`]); panics after `timeout`
/// with what was seen instead.
pub async fn wait_running<C, Fut>(
    fleet: &str,
    names: &[&str],
    timeout: Duration,
    up: fn(&pb::ContainerInfo) -> bool,
    connect: C,
) -> Vec<pb::ContainerInfo>
where
    C: Fn() -> Fut,
    Fut: Future<Output = Result<FleetServiceClient<Channel>>>,
{
    let mut want: Vec<String> = names.iter().map(|s| s.to_string()).collect();
    want.sort();
    wait_until(
        &format!("fleet {fleet}: {want:?} running"),
        timeout,
        || async {
            let cs = async { containers(connect().await?, fleet).await }
                .await
                .map_err(|e| e.to_string())?;
            let mut have: Vec<String> = cs.iter().map(|c| c.name.clone()).collect();
            have.sort();
            if have == want && cs.iter().all(up) {
                Ok(cs)
            } else {
                Err(describe(&cs))
            }
        },
    )
    .await
}
