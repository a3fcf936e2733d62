//! The FleetService API of a [`Cluster`] as its admin (or as another certificate): clients, user
//! certificates, submit and plan, listings, and the waits for nodes and containers.

use std::time::Duration;

use pxfleet_proto::v1 as pb;
use pxfleet_proto::v1::fleet_service_client::FleetServiceClient;
use pxfleet_tls::{Bundle, Role};
use tonic::transport::Channel;

use crate::api;
use crate::cluster::Cluster;
use crate::error::{grpc, Result};
use crate::process::tail;

impl Cluster {
    /// A FleetService client with the admin certificate.
    pub async fn api(&self) -> Result<FleetServiceClient<Channel>> {
        self.api_as(&self.admin).await
    }

    /// A FleetService client presenting `bundle`.
    pub async fn api_as(&self, bundle: &Bundle) -> Result<FleetServiceClient<Channel>> {
        let tls = pxfleet_tls::client_config(bundle)?;
        let channel = pxfleet_tls::connect(&self.url, tls).await?;
        Ok(FleetServiceClient::new(channel))
    }

    /// A user certificate issued by this cluster's controller (as `pxctl user issue` does: a key and CSR made
    /// here, signed and recorded by the controller through the admin's API).
    pub async fn issue_user(&self, name: &str, role: Role) -> Result<Bundle> {
        self.issue_user_for(name, role, &[]).await
    }

    /// [`Cluster::issue_user`] for an operator limited to `fleets`.
    pub async fn issue_user_for(&self, name: &str, role: Role, fleets: &[&str]) -> Result<Bundle> {
        api::issue_user(self.api().await?, name, role, fleets).await
    }

    /// Submit through the API as admin; diagnostics (validation errors) come back in the response.
    pub async fn submit(&self, yaml: &str) -> Result<pb::SubmitResponse> {
        let mut api = self.api().await?;
        Ok(api
            .submit(pb::SubmitRequest {
                file_name: "fleet.yaml".into(),
                source: yaml.into(),
                ..Default::default()
            })
            .await
            .map_err(grpc("Submit"))?
            .into_inner())
    }

    /// Plan through the API as admin.
    pub async fn plan(&self, yaml: &str) -> Result<pb::PlanResponse> {
        let mut api = self.api().await?;
        Ok(api
            .plan(pb::PlanRequest {
                file_name: "fleet.yaml".into(),
                source: yaml.into(),
                ..Default::default()
            })
            .await
            .map_err(grpc("Plan"))?
            .into_inner())
    }

    /// Every container of `fleet`, as the controller reports it.
    pub async fn containers(&self, fleet: &str) -> Result<Vec<pb::ContainerInfo>> {
        api::containers(self.api().await?, fleet).await
    }

    /// The root passwords of `fleet`'s containers as the admin API gives them (`output --show-sensitive`), by
    /// container name; containers without one are left out.
    pub async fn passwords(&self, fleet: &str) -> Result<Vec<(String, String)>> {
        Ok(self
            .api()
            .await?
            .output(pb::OutputRequest {
                fleet: fleet.into(),
                show_sensitive: true,
            })
            .await
            .map_err(grpc("Output"))?
            .into_inner()
            .containers
            .into_iter()
            .filter_map(|o| Some((o.name, o.password?.value)))
            .collect())
    }

    pub async fn nodes_info(&self) -> Result<Vec<pb::NodeInfo>> {
        api::nodes(self.api().await?).await
    }

    pub async fn operations(&self, fleet: &str) -> Result<Vec<pb::OperationInfo>> {
        api::operations(self.api().await?, fleet).await
    }

    /// Waits until every node of the cluster is `ready`.
    pub async fn wait_nodes_ready(&self, timeout: Duration) -> Result<()> {
        let names: Vec<String> = self.nodes.iter().map(|n| n.name.clone()).collect();
        let logs = || {
            self.nodes
                .iter()
                .map(|n| format!("--- {}:\n{}", n.name, tail(&n.log)))
                .collect::<Vec<_>>()
                .join("\n")
        };
        api::wait_nodes_ready(&names, timeout, || self.api(), logs).await
    }

    /// Waits until the fleet has exactly `names` and each is running with a node, a vm_id and an address,
    /// and does not differ from what was submitted (not drifted).
    pub async fn wait_running(
        &self,
        fleet: &str,
        names: &[&str],
        timeout: Duration,
    ) -> Vec<pb::ContainerInfo> {
        let up = |c: &pb::ContainerInfo| api::is_up(c) && !c.drifted;
        api::wait_running(fleet, names, timeout, up, || self.api()).await
    }
}
