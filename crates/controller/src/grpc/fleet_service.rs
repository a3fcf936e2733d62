//! FleetService (for pxctl), the gRPC edge of the controller's use cases: every handler checks the caller's
//! certificate identity ([`crate::authz`]), turns the request into controller types, calls the use case
//! ([`crate::submit`], [`crate::listing`], [`crate::nodes`], [`crate::certs`]) and turns its answer into the
//! response; errors become statuses in one place ([`crate::error`]). Validation problems come back as
//! diagnostics, not gRPC errors.

use std::pin::Pin;
use std::sync::Arc;

use futures::Stream;
use pxfleet_proto::v1 as pb;
use pxfleet_proto::v1::fleet_service_server::FleetService;
use pxfleet_tls::{Identity, Role};
use tonic::{Request, Response, Status};

use crate::authz::{check_fleet, Need};
use crate::error::Error;
use crate::grpc::convert;
use crate::nodes::NodeView;
use crate::query::ContainerRow;
use crate::state::State;
use crate::submit::{PowerAction, Source, SubmitOptions};

pub struct FleetApi {
    pub state: Arc<State>,
}

impl FleetApi {
    /// The caller, checked on every call: a certificate revoked after its connection was opened is refused.
    fn who<T>(&self, req: &Request<T>) -> Result<Option<Identity>, Status> {
        Ok(crate::authz::caller_of(&self.state, req)?)
    }
}

/// The right to change the fleet a file names, checked once the file is parsed.
fn may_change(id: Option<&Identity>) -> impl Fn(&str) -> Result<(), Error> + '_ {
    move |fleet| Ok(check_fleet(id, Need::Change(fleet))?)
}

fn container_info(r: &ContainerRow) -> pb::ContainerInfo {
    let d = r.desired.as_ref();
    pb::ContainerInfo {
        fleet: r.fleet.clone(),
        name: r.name.clone(),
        vm_id: r.vm_id(),
        node: r.node(),
        hostname: d
            .map(|d| d.container.hostname.clone())
            .or_else(|| r.observed.as_ref().map(|o| o.hostname.clone()))
            .unwrap_or_default(),
        state: convert::container_state_pb(r.status) as i32,
        power: match &r.observed {
            Some(o) if o.running => pb::PowerState::Running as i32,
            Some(_) => pb::PowerState::Stopped as i32,
            None => pb::PowerState::Unspecified as i32,
        },
        addresses: r
            .observed
            .as_ref()
            .map(|o| o.addresses.clone())
            .unwrap_or_default(),
        template: d.map(|d| d.container.template.clone()).unwrap_or_default(),
        cores: d.and_then(|d| d.container.cores),
        memory_mib: d.map(|d| d.container.memory).unwrap_or_default(),
        disk_size_gib: d.map(|d| d.container.disk_size).unwrap_or_default(),
        last_error: r.error().unwrap_or_default(),
        drifted: r.drifted,
        pending_restart: r.pending_restart.clone(),
        revision: d.map(|d| d.revision).unwrap_or_default(),
        waiting: r.waiting.clone().unwrap_or_default(),
    }
}

fn node_info(v: NodeView) -> pb::NodeInfo {
    let n = v.record;
    pb::NodeInfo {
        status: convert::node_status_pb(v.status) as i32,
        status_reason: v.status_reason,
        inventory: Some(convert::inventory_pb(&n.name, &n.inventory)),
        last_heartbeat_unix_ms: n.last_seen_ms as i64,
        cordon_reason: n.cordon_reason,
        container_count: v.container_count,
        cert_serial: n.cert_serial,
        name: n.name,
    }
}

fn operation_infos<'a>(
    ops: impl IntoIterator<Item = &'a crate::model::Operation>,
) -> Vec<pb::OperationInfo> {
    ops.into_iter().map(convert::operation_info).collect()
}

fn changed_pb(c: crate::submit::Changed) -> pb::DestroyResponse {
    pb::DestroyResponse {
        revision: c.revision,
        operations: operation_infos(c.operations.iter().map(|o| &**o)),
    }
}

type EventStream = Pin<Box<dyn Stream<Item = Result<pb::FleetEvent, Status>> + Send>>;

#[tonic::async_trait]
impl FleetService for FleetApi {
    async fn plan(
        &self,
        req: Request<pb::PlanRequest>,
    ) -> Result<Response<pb::PlanResponse>, Status> {
        let id = self.who(&req)?;
        // before the file is parsed: a viewer's file costs the controller nothing
        check_fleet(id.as_ref(), Need::ChangeSome)?;
        let r = req.into_inner();
        let source = Source {
            file_name: r.file_name,
            text: r.source,
            files: r.files,
        };
        let caller = id.clone().expect("checked above");
        let p = crate::submit::plan(
            &self.state,
            source,
            r.destroy,
            may_change(id.as_ref()),
            &caller,
        )
        .await?;
        Ok(Response::new(pb::PlanResponse {
            fleet: p.fleet,
            base_revision: p.base_revision,
            plan_json: p.plan_json,
            diagnostics: convert::diagnostics_pb(&p.diagnostics),
            has_changes: p.has_changes,
            policy: p.policy.as_ref().map(convert::policy_report_pb),
        }))
    }

    async fn submit(
        &self,
        req: Request<pb::SubmitRequest>,
    ) -> Result<Response<pb::SubmitResponse>, Status> {
        let id = self.who(&req)?;
        check_fleet(id.as_ref(), Need::ChangeSome)?;
        let author = id.clone().expect("checked above");
        let r = req.into_inner();
        let source = Source {
            file_name: r.file_name,
            text: r.source,
            files: r.files,
        };
        let options = SubmitOptions {
            expected_revision: r.expected_revision,
            plan_json: r.plan_json,
            retry_failed: r.retry_failed,
            omit_plan: r.omit_plan,
        };
        let s = crate::submit::submit(
            &self.state,
            &author,
            source,
            options,
            may_change(id.as_ref()),
        )
        .await?;
        Ok(Response::new(pb::SubmitResponse {
            fleet: s.fleet,
            revision: s.revision,
            operations: operation_infos(s.operations.iter().map(|o| &**o)),
            diagnostics: convert::diagnostics_pb(&s.diagnostics),
            plan_json: s.plan_json,
            policy: s.policy.as_ref().map(convert::policy_report_pb),
        }))
    }

    type WatchStream = EventStream;

    async fn watch(
        &self,
        req: Request<pb::WatchRequest>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        let id = self.who(&req)?;
        check_fleet(id.as_ref(), Need::Read)?;
        let permit = self
            .state
            .limiter
            .watch_permit(&id.map(|i| i.uri()).unwrap_or_default())?;
        let serial = pxfleet_tls::peer_cert_info(&req).map(|c| c.serial);
        let r = req.into_inner();
        let state = self.state.clone();
        let stream = async_stream(self.state.limiter.closing(), move |tx| async move {
            // held while the stream lives; async_stream ends it when the client goes away
            let _permit = permit;
            let revocations = state.revocations.clone();
            let events = crate::watch::run(state, r.fleet, r.until_settled, |ev| {
                let tx = tx.clone();
                async move {
                    let ev = ev
                        .map(crate::grpc::convert_streams::fleet_event_pb)
                        .map_err(Status::from);
                    tx.send(ev).await.is_ok()
                }
            });
            // A certificate revoked while it watches: the stream ends within a second, with the reason.
            let revoked = async {
                let Some(serial) = serial else {
                    return std::future::pending().await;
                };
                while !pxfleet_tls::RevocationCheck::is_revoked(&*revocations, &serial) {
                    tokio::time::sleep(REVOCATION_POLL).await;
                }
                let e = crate::authz::AuthzError::Revoked {
                    serial: serial.as_str().to_string(),
                };
                let _ = tx.send(Err(e.into())).await;
            };
            tokio::select! {
                _ = events => {}
                _ = revoked => {}
            }
        });
        Ok(Response::new(stream))
    }

    async fn get_fleets(
        &self,
        req: Request<pb::GetFleetsRequest>,
    ) -> Result<Response<pb::GetFleetsResponse>, Status> {
        check_fleet(self.who(&req)?.as_ref(), Need::Read)?;
        let fleets = crate::listing::fleets(&self.state)?
            .into_iter()
            .map(|f| pb::FleetSummary {
                name: f.record.name,
                revision: f.record.revision,
                container_count: f.container_count,
                states: f.states.into_iter().collect(),
                updated_unix_ms: f.record.updated_ms as i64,
                author: f.record.author,
            })
            .collect();
        Ok(Response::new(pb::GetFleetsResponse { fleets }))
    }

    async fn get_containers(
        &self,
        req: Request<pb::GetContainersRequest>,
    ) -> Result<Response<pb::GetContainersResponse>, Status> {
        check_fleet(self.who(&req)?.as_ref(), Need::Read)?;
        let r = req.into_inner();
        let containers = crate::listing::containers(&self.state, &r.fleet, &r.node)?
            .iter()
            .map(container_info)
            .collect();
        Ok(Response::new(pb::GetContainersResponse { containers }))
    }

    async fn describe_container(
        &self,
        req: Request<pb::DescribeContainerRequest>,
    ) -> Result<Response<pb::DescribeContainerResponse>, Status> {
        check_fleet(self.who(&req)?.as_ref(), Need::Read)?;
        let r = req.into_inner();
        let d = crate::listing::describe(&self.state, &r.fleet, &r.name)?;
        Ok(Response::new(pb::DescribeContainerResponse {
            info: Some(container_info(&d.row)),
            desired: d.row.desired.as_ref().map(|d| {
                convert::container_spec(&d.fleet, &d.container, d.vm_id, &d.template, None)
            }),
            observed: d.row.observed.as_deref().map(convert::observed_pb),
            operations: operation_infos(&d.operations),
            drift: d.drift,
            hooks: d.hooks.iter().map(convert::hook_result_pb).collect(),
        }))
    }

    async fn get_nodes(
        &self,
        req: Request<pb::GetNodesRequest>,
    ) -> Result<Response<pb::GetNodesResponse>, Status> {
        check_fleet(self.who(&req)?.as_ref(), Need::Read)?;
        let nodes = crate::nodes::nodes(&self.state)?
            .into_iter()
            .map(node_info)
            .collect();
        Ok(Response::new(pb::GetNodesResponse { nodes }))
    }

    async fn get_operations(
        &self,
        req: Request<pb::GetOperationsRequest>,
    ) -> Result<Response<pb::GetOperationsResponse>, Status> {
        check_fleet(self.who(&req)?.as_ref(), Need::Read)?;
        let r = req.into_inner();
        if !r.op_id.is_empty() {
            let ops = crate::listing::operation(&self.state, &r.fleet, &r.node, &r.op_id)?;
            return Ok(Response::new(pb::GetOperationsResponse {
                operations: operation_infos(&ops),
            }));
        }
        let ops =
            crate::listing::operations(&self.state, &r.fleet, &r.node, r.active_only, r.limit)?;
        let mut operations = operation_infos(&ops);
        // Hook runs (crate::hooks::runs) are listed with the operations, in the order they started.
        let limit = if r.limit == 0 { 200 } else { r.limit as usize };
        let runs = crate::hooks::runs::list(&self.state, &r.fleet, &r.node, r.active_only, limit)?;
        if !runs.is_empty() {
            operations.extend(runs.iter().map(convert::hook_run_info));
            operations.sort_by_key(|o| o.created_unix_ms);
            if operations.len() > limit {
                operations.drain(..operations.len() - limit);
            }
        }
        Ok(Response::new(pb::GetOperationsResponse { operations }))
    }

    async fn output(
        &self,
        req: Request<pb::OutputRequest>,
    ) -> Result<Response<pb::OutputResponse>, Status> {
        let id = self.who(&req)?;
        let r = req.into_inner();
        check_fleet(
            id.as_ref(),
            if r.show_sensitive {
                Need::ReadSecrets(&r.fleet)
            } else {
                Need::Read
            },
        )?;
        let out = crate::listing::output(&self.state, id.as_ref(), &r.fleet, r.show_sensitive)?;
        Ok(Response::new(pb::OutputResponse {
            fleet: out.fleet,
            revision: out.revision,
            containers: out
                .containers
                .into_iter()
                .map(|c| pb::ContainerOutput {
                    name: c.name,
                    vm_id: c.vm_id,
                    node: c.node,
                    hostname: c.hostname,
                    addresses: c.addresses,
                    password: c.password.map(|value| pb::Secret { value }),
                    has_password: c.has_password,
                    volumes: c
                        .volumes
                        .into_iter()
                        .map(|(disk, path, volume, size_gib)| pb::VolumeOutput {
                            disk,
                            path,
                            volume,
                            size_gib,
                        })
                        .collect(),
                })
                .collect(),
        }))
    }

    async fn set_power(
        &self,
        req: Request<pb::SetPowerRequest>,
    ) -> Result<Response<pb::DestroyResponse>, Status> {
        let id = self.who(&req)?;
        let r = req.into_inner();
        check_fleet(id.as_ref(), Need::Change(&r.fleet))?;
        let author = id.expect("checked above");
        let action = match pb::PowerAction::try_from(r.action) {
            Ok(pb::PowerAction::Start) => PowerAction::Start,
            Ok(pb::PowerAction::Stop) => PowerAction::Stop,
            Ok(pb::PowerAction::Restart) => PowerAction::Restart,
            _ => {
                return Err(
                    Error::InvalidArgument("action must be start, stop or restart".into()).into(),
                )
            }
        };
        let changed = crate::submit::set_power(
            &self.state,
            &author,
            &r.fleet,
            &r.containers,
            action,
            r.expected_revision,
        )
        .await?;
        Ok(Response::new(changed_pb(changed)))
    }

    async fn destroy(
        &self,
        req: Request<pb::DestroyRequest>,
    ) -> Result<Response<pb::DestroyResponse>, Status> {
        let id = self.who(&req)?;
        let r = req.into_inner();
        check_fleet(id.as_ref(), Need::Change(&r.fleet))?;
        let author = id.expect("checked above");
        let changed = crate::submit::destroy(
            &self.state,
            &author,
            &r.fleet,
            &r.containers,
            r.expected_revision,
        )
        .await?;
        Ok(Response::new(changed_pb(changed)))
    }

    async fn history(
        &self,
        req: Request<pb::HistoryRequest>,
    ) -> Result<Response<pb::HistoryResponse>, Status> {
        check_fleet(self.who(&req)?.as_ref(), Need::Read)?;
        let r = req.into_inner();
        let revisions = crate::listing::history(&self.state, &r.fleet, r.limit)?
            .into_iter()
            .map(|rev| pb::RevisionInfo {
                revision: rev.revision,
                author: rev.author,
                unix_ms: rev.created_ms as i64,
                summary: rev.summary,
                file_name: rev.file_name,
                source_sha256: rev.source_sha256,
            })
            .collect();
        Ok(Response::new(pb::HistoryResponse { revisions }))
    }

    async fn create_join_token(
        &self,
        req: Request<pb::CreateJoinTokenRequest>,
    ) -> Result<Response<pb::CreateJoinTokenResponse>, Status> {
        let id = self.who(&req)?;
        check_fleet(id.as_ref(), Need::Admin)?;
        let r = req.into_inner();
        let t = crate::certs::create_join_token(
            &self.state,
            id.as_ref(),
            &r.node,
            r.ttl_seconds as u64,
        )
        .await?;
        Ok(Response::new(pb::CreateJoinTokenResponse {
            token: t.token,
            token_id: t.token_id,
            expires_unix_ms: t.expires_ms as i64,
            ca_fingerprint: t.ca_fingerprint,
        }))
    }

    async fn cordon_node(
        &self,
        req: Request<pb::CordonNodeRequest>,
    ) -> Result<Response<pb::NodeInfo>, Status> {
        let id = self.who(&req)?;
        check_fleet(id.as_ref(), Need::Admin)?;
        let r = req.into_inner();
        let view = crate::nodes::set_cordon(&self.state, id.as_ref(), &r.node, Some(&r.reason))?;
        Ok(Response::new(node_info(view)))
    }

    async fn uncordon_node(
        &self,
        req: Request<pb::UncordonNodeRequest>,
    ) -> Result<Response<pb::NodeInfo>, Status> {
        let id = self.who(&req)?;
        check_fleet(id.as_ref(), Need::Admin)?;
        let r = req.into_inner();
        let view = crate::nodes::set_cordon(&self.state, id.as_ref(), &r.node, None)?;
        Ok(Response::new(node_info(view)))
    }

    async fn drain_node(
        &self,
        req: Request<pb::DrainNodeRequest>,
    ) -> Result<Response<pb::DrainNodeResponse>, Status> {
        let id = self.who(&req)?;
        check_fleet(id.as_ref(), Need::Admin)?;
        let r = req.into_inner();
        let (view, plan) =
            crate::nodes::drain(&self.state, id.as_ref(), &r.node, &r.reason).await?;
        Ok(Response::new(pb::DrainNodeResponse {
            node: Some(node_info(view)),
            moves: plan
                .moves
                .into_iter()
                .map(|m| pb::DrainMove {
                    fleet: m.fleet,
                    container: m.name,
                    vm_id: m.vm_id,
                    to: m.to,
                })
                .collect(),
            stuck: plan
                .stuck
                .into_iter()
                .map(|(fleet, container, reason)| pb::DrainStuck {
                    fleet,
                    container,
                    reason,
                })
                .collect(),
        }))
    }

    async fn issue_user_certificate(
        &self,
        req: Request<pb::IssueUserCertificateRequest>,
    ) -> Result<Response<pb::IssueUserCertificateResponse>, Status> {
        let id = self.who(&req)?;
        check_fleet(id.as_ref(), Need::Admin)?;
        let r = req.into_inner();
        let role = match pb::UserRole::try_from(r.role) {
            Ok(pb::UserRole::Admin) => Role::Admin,
            Ok(pb::UserRole::Operator) => Role::Operator,
            Ok(pb::UserRole::Viewer) => Role::Viewer,
            _ => {
                return Err(Error::InvalidArgument(
                    "role: expected admin, operator or viewer".into(),
                )
                .into())
            }
        };
        let c = crate::certs::issue_user_certificate(
            &self.state,
            id.as_ref(),
            &r.name,
            role,
            &r.fleets,
            &r.csr_pem,
            r.validity_days,
        )?;
        Ok(Response::new(pb::IssueUserCertificateResponse {
            cert_pem: c.cert_pem,
            ca_pem: c.ca_pem,
            serial: c.serial,
            not_after_unix_ms: c.not_after_ms,
            identity: c.identity,
        }))
    }

    async fn revoke_certificate(
        &self,
        req: Request<pb::RevokeCertificateRequest>,
    ) -> Result<Response<pb::RevokeCertificateResponse>, Status> {
        let id = self.who(&req)?;
        check_fleet(id.as_ref(), Need::Admin)?;
        let r = req.into_inner();
        crate::certs::revoke_certificate(&self.state, id.as_ref(), &r.serial, r.reason).await?;
        Ok(Response::new(pb::RevokeCertificateResponse {}))
    }

    async fn list_certificates(
        &self,
        req: Request<pb::ListCertificatesRequest>,
    ) -> Result<Response<pb::ListCertificatesResponse>, Status> {
        check_fleet(self.who(&req)?.as_ref(), Need::Admin)?;
        Ok(Response::new(pb::ListCertificatesResponse {
            certificates: crate::certs::certificates(&self.state)?
                .iter()
                .map(convert::certificate_info)
                .collect(),
        }))
    }

    async fn get_audit(
        &self,
        req: Request<pb::GetAuditRequest>,
    ) -> Result<Response<pb::GetAuditResponse>, Status> {
        check_fleet(self.who(&req)?.as_ref(), Need::Admin)?;
        let r = req.into_inner();
        let entries = crate::audit::entries(
            &self.state.store,
            &r.fleet,
            u64::try_from(r.since_unix_ms).unwrap_or(0),
            r.limit as usize,
        )?
        .into_iter()
        .map(convert::audit_record_pb)
        .collect();
        Ok(Response::new(pb::GetAuditResponse { entries }))
    }

    type BackupStream = Pin<Box<dyn Stream<Item = Result<pb::BackupChunk, Status>> + Send>>;

    async fn backup(
        &self,
        req: Request<pb::BackupRequest>,
    ) -> Result<Response<Self::BackupStream>, Status> {
        let id = self.who(&req)?;
        check_fleet(id.as_ref(), Need::Admin)?;
        let bytes = crate::backup::online_audited(&self.state, id.as_ref()).await?;
        let chunks: Vec<Result<pb::BackupChunk, Status>> = bytes
            .chunks(crate::backup::CHUNK)
            .map(|c| Ok(pb::BackupChunk { data: c.to_vec() }))
            .collect();
        Ok(Response::new(Box::pin(futures::stream::iter(chunks))))
    }

    async fn get_unmanaged(
        &self,
        req: Request<pb::GetUnmanagedRequest>,
    ) -> Result<Response<pb::GetUnmanagedResponse>, Status> {
        check_fleet(self.who(&req)?.as_ref(), Need::Read)?;
        let r = req.into_inner();
        let containers = crate::adopt::unmanaged(&self.state.store.all_observed_shared()?, &r.node)
            .iter()
            .map(|o| convert::unmanaged_pb(o))
            .collect();
        Ok(Response::new(pb::GetUnmanagedResponse { containers }))
    }

    async fn grant_host_power(
        &self,
        req: Request<pb::GrantHostPowerRequest>,
    ) -> Result<Response<pb::HostPowerGrant>, Status> {
        let id = self.who(&req)?;
        check_fleet(id.as_ref(), Need::Admin)?;
        let r = req.into_inner();
        let g = crate::grants::add(&self.state, id.as_ref(), &r.fleet, &r.power, &r.reason).await?;
        Ok(Response::new(grant_pb(g)))
    }

    async fn list_grants(
        &self,
        req: Request<pb::ListGrantsRequest>,
    ) -> Result<Response<pb::ListGrantsResponse>, Status> {
        check_fleet(self.who(&req)?.as_ref(), Need::Read)?;
        let r = req.into_inner();
        let fleet = (!r.fleet.is_empty()).then_some(r.fleet.as_str());
        let grants = self.state.store.grants(fleet).map_err(Error::from)?;
        Ok(Response::new(pb::ListGrantsResponse {
            grants: grants.into_iter().map(grant_pb).collect(),
        }))
    }

    async fn revoke_grant(
        &self,
        req: Request<pb::RevokeGrantRequest>,
    ) -> Result<Response<pb::HostPowerGrant>, Status> {
        let id = self.who(&req)?;
        check_fleet(id.as_ref(), Need::Admin)?;
        let g = crate::grants::revoke(&self.state, id.as_ref(), req.into_inner().id).await?;
        Ok(Response::new(grant_pb(g)))
    }

    async fn install_policy(
        &self,
        req: Request<pb::InstallPolicyRequest>,
    ) -> Result<Response<pb::AdminPolicyInfo>, Status> {
        let id = self.who(&req)?;
        check_fleet(id.as_ref(), Need::Admin)?;
        let r = req.into_inner();
        let p = crate::policy::install(&self.state, id.as_ref(), &r.name, &r.source).await?;
        Ok(Response::new(admin_policy_pb(p)))
    }

    async fn list_policies(
        &self,
        req: Request<pb::ListPoliciesRequest>,
    ) -> Result<Response<pb::ListPoliciesResponse>, Status> {
        check_fleet(self.who(&req)?.as_ref(), Need::Read)?;
        let policies = self.state.store.policies().map_err(Error::from)?;
        Ok(Response::new(pb::ListPoliciesResponse {
            policies: policies.into_iter().map(admin_policy_pb).collect(),
        }))
    }

    async fn remove_policy(
        &self,
        req: Request<pb::RemovePolicyRequest>,
    ) -> Result<Response<pb::AdminPolicyInfo>, Status> {
        let id = self.who(&req)?;
        check_fleet(id.as_ref(), Need::Admin)?;
        let p = crate::policy::remove(&self.state, id.as_ref(), &req.into_inner().name).await?;
        Ok(Response::new(admin_policy_pb(p)))
    }

    async fn snapshot(
        &self,
        req: Request<pb::SnapshotRequest>,
    ) -> Result<Response<pb::OperationInfo>, Status> {
        use crate::model::SnapshotAction;
        let id = self.who(&req)?;
        let r = req.into_inner();
        let action = match pb::SnapshotAction::try_from(r.action) {
            Ok(pb::SnapshotAction::Create) => SnapshotAction::Create,
            Ok(pb::SnapshotAction::Delete) => SnapshotAction::Delete,
            Ok(pb::SnapshotAction::Rollback) => SnapshotAction::Rollback,
            Ok(pb::SnapshotAction::List) => SnapshotAction::List,
            _ => {
                return Err(Error::InvalidArgument(
                    "action must be create, delete, rollback or list".into(),
                )
                .into())
            }
        };
        // Listing reads (any role); taking, deleting and rolling back change the fleet's containers.
        let need = if action == SnapshotAction::List {
            Need::Read
        } else {
            Need::Change(&r.fleet)
        };
        check_fleet(id.as_ref(), need)?;
        let actor = id.map(|i| i.uri()).unwrap_or_default();
        let st = self.state.clone();
        let op = tokio::task::spawn_blocking(move || {
            crate::reconcile::queue_snapshot(
                &st,
                &actor,
                &r.fleet,
                &r.container,
                action,
                &r.name,
                &r.description,
            )
        })
        .await
        .map_err(|e| Status::internal(format!("snapshot task failed: {e}")))??;
        Ok(Response::new(convert::operation_info(&op)))
    }
}

fn admin_policy_pb(p: crate::store::AdminPolicy) -> pb::AdminPolicyInfo {
    pb::AdminPolicyInfo {
        sha256: p.sha256(),
        name: p.name,
        source: p.source,
        installed_by: p.installed_by,
        installed_unix_ms: p.installed_ms as i64,
    }
}

fn grant_pb(g: crate::grants::Grant) -> pb::HostPowerGrant {
    pb::HostPowerGrant {
        id: g.id,
        power: g.power.to_string(),
        reason: g.reason,
        granted_by: g.granted_by,
        granted_unix_ms: g.granted_ms as i64,
        fleet: g.fleet,
    }
}

/// A stream fed by a task through a channel; the task stops when the client goes away or `closing` resolves
/// (shutdown).
/// How often a long-lived stream checks whether its caller's certificate was revoked.
const REVOCATION_POLL: std::time::Duration = std::time::Duration::from_millis(500);

fn async_stream<F, Fut>(
    closing: impl std::future::Future<Output = ()> + Send + 'static,
    f: F,
) -> EventStream
where
    F: FnOnce(tokio::sync::mpsc::Sender<Result<pb::FleetEvent, Status>>) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let (tx, rx) = tokio::sync::mpsc::channel(64);
    let gone = tx.clone();
    let fut = f(tx);
    tokio::spawn(async move {
        tokio::select! {
            _ = fut => {}
            _ = gone.closed() => {}
            _ = closing => {}
        }
    });
    Box::pin(tokio_stream::wrappers::ReceiverStream::new(rx))
}
