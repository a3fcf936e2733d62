//! FleetService (for pxctl): plan, submit, watch, listings, outputs, destroy, history, join tokens, cordon,
//! user certificates. Every call checks the caller's certificate identity first ([`crate::authz`]).
//! Validation problems come back as diagnostics, not gRPC errors.

use std::collections::BTreeMap;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use futures::Stream;
use pxfleet_proto::v1 as pb;
use pxfleet_proto::v1::fleet_service_server::FleetService;
use pxfleet_spec::{Fleet, MemFiles};
use pxfleet_tls::{Identity, JoinToken, Role, Serial};
use sha2::Digest as _;
use tonic::{Request, Response, Status};

use crate::authz::{check_fleet, Need};
use crate::convert;
use crate::model::{now_ms, AuditEntry, Revision};
use crate::planning::{prepare, Prepared, Snapshot};
use crate::query::{self, ContainerRow};
use crate::reconcile;
use crate::state::State;
use crate::store::{SerialRecord, StoreError, SubmitTx, TokenRecord};

/// The one mapping of store errors to gRPC status codes.
impl From<StoreError> for Status {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::RevisionMoved { .. } => Status::aborted(e.to_string()),
            StoreError::Invalid { .. } => Status::invalid_argument(e.to_string()),
            StoreError::TokenRefused => Status::permission_denied(e.to_string()),
            _ => crate::store_status::disk_status(&e)
                .unwrap_or_else(|| Status::internal(e.to_string())),
        }
    }
}

pub struct FleetApi {
    pub state: Arc<State>,
}

fn who<T>(req: &Request<T>) -> Option<Identity> {
    pxfleet_tls::peer_identity(req)
}

pub(crate) fn diag_pb(d: &pxfleet_spec::Diagnostic) -> pb::Diagnostic {
    let mut message = d.message.clone();
    if let Some(h) = &d.hint {
        message.push_str("; ");
        message.push_str(h);
    }
    pb::Diagnostic {
        severity: pb::Severity::Error as i32,
        message,
        file: d.file.clone(),
        line: d.line,
        column: d.column,
        field: d.path.clone(),
    }
}

fn files_of(files: &std::collections::HashMap<String, String>) -> MemFiles {
    MemFiles(files.iter().map(|(k, v)| (k.into(), v.clone())).collect())
}

/// A random root password: 24 characters from an unambiguous alphabet.
pub fn generate_password() -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz23456789";
    (0..24)
        .map(|_| ALPHABET[rand::random_range(0..ALPHABET.len())] as char)
        .collect()
}

enum Parsed {
    Fleet(Box<Fleet>),
    Diagnostics(Vec<pb::Diagnostic>),
}

fn parse(
    file_name: &str,
    source: &str,
    files: &std::collections::HashMap<String, String>,
) -> Parsed {
    let name = if file_name.is_empty() {
        "fleet.yaml"
    } else {
        file_name
    };
    match pxfleet_spec::parse_fleet(name, source, &files_of(files)) {
        Ok(f) => Parsed::Fleet(Box::new(f)),
        Err(d) => Parsed::Diagnostics(d.iter().map(diag_pb).collect()),
    }
}

impl FleetApi {
    /// `limits.max_fleet_bytes`, before anything is parsed.
    #[allow(clippy::result_large_err)]
    fn check_size(
        &self,
        file_name: &str,
        source: &str,
        files: &std::collections::HashMap<String, String>,
    ) -> Result<(), Status> {
        self.state.limiter.config().check_fleet_bytes(
            file_name,
            std::iter::once(source)
                .chain(files.keys().map(String::as_str))
                .chain(files.values().map(String::as_str)),
        )
    }

    fn snapshot(&self, fleet: &str) -> Result<Snapshot, StoreError> {
        let st = &self.state;
        Snapshot::take(&st.store, fleet, |n| st.node_status(n))
    }

    /// Prepares `fleet` (or its destruction: no containers) against the current state.
    /// Prepares a stored spec changed by the controller itself (power, destroy): any diagnostic refuses it.
    fn prepare_stored(&self, fleet: Fleet) -> Result<Prepared, Status> {
        let (_, prepared) = self.prepare("(stored spec)", fleet)?;
        prepared.map_err(|d| {
            Status::failed_precondition(
                d.iter()
                    .map(|d| d.message.clone())
                    .collect::<Vec<_>>()
                    .join("; "),
            )
        })
    }

    fn prepare(
        &self,
        file: &str,
        fleet: Fleet,
    ) -> Result<(Snapshot, Result<Prepared, Vec<pb::Diagnostic>>), Status> {
        let snap = self.snapshot(&fleet.name)?;
        let prepared = prepare(
            file,
            fleet,
            &snap,
            self.state.config.vm_ids,
            snap.revision + 1,
        )
        .map_err(|d| d.iter().map(diag_pb).collect());
        Ok((snap, prepared))
    }

    fn rows(&self) -> Result<Vec<ContainerRow>, Status> {
        Ok(query::container_rows(&self.state)?)
    }

    fn container_info(&self, r: &ContainerRow) -> pb::ContainerInfo {
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
        }
    }

    fn ops_of(&self, fleet: &str, revision: Option<u64>) -> Result<Vec<pb::OperationInfo>, Status> {
        Ok(self
            .state
            .store
            .ops()?
            .iter()
            .filter(|o| {
                o.fleet == fleet && o.state.is_active() && revision.is_none_or(|r| o.revision <= r)
            })
            .map(convert::operation_info)
            .collect())
    }

    /// The fleet's head revision and its stored spec, made ready to be prepared again: passwords from the
    /// secrets tree, and `node` left open again where the scheduler (not the file) chose it, so that a
    /// container moved by hand stays adoptable.
    fn stored_spec(&self, fleet: &str) -> Result<(Revision, Fleet), Status> {
        let st = &self.state.store;
        let head = st
            .revision(fleet, st.fleet(fleet)?.map(|f| f.revision).unwrap_or(0))?
            .ok_or_else(|| Status::not_found(format!("no fleet {fleet}")))?;
        let mut spec: Fleet = serde_json::from_value(head.spec.clone()).map_err(|e| {
            Status::internal(format!("stored spec of fleet {fleet} unreadable: {e}"))
        })?;
        let secrets = st.secrets(fleet)?;
        let placed: BTreeMap<String, bool> = st
            .desired(fleet)?
            .into_iter()
            .map(|d| (d.name, d.node_pinned))
            .collect();
        for (k, c) in spec.containers.iter_mut() {
            c.password = secrets.get(k).map(|p| pxfleet_spec::Secret::new(p.clone()));
            if placed.get(k) == Some(&false) {
                c.node = None;
            }
        }
        Ok((head, spec))
    }

    /// Stores a new revision of `prepared` (under the fleet lock), then runs a reconcile pass so the
    /// operations exist when the caller returns.
    fn store_revision(
        &self,
        author: &Identity,
        source_fleet: &Fleet,
        prepared: &Prepared,
        expected: Option<u64>,
        action: &str,
        source: Option<(&str, &str)>,
    ) -> Result<u64, Status> {
        let st = &self.state;
        let name = &prepared.fleet.name;
        let old_secrets = st.store.secrets(name)?;
        let secrets: BTreeMap<String, String> = source_fleet
            .containers
            .iter()
            .map(|(k, c)| {
                let pw = match &c.password {
                    Some(p) => p.expose().to_string(),
                    None => old_secrets
                        .get(k)
                        .cloned()
                        .unwrap_or_else(generate_password),
                };
                (k.clone(), pw)
            })
            .collect();
        let summary = prepared
            .plan
            .summary
            .parts()
            .iter()
            .filter(|(_, n)| *n > 0)
            .map(|(l, n)| format!("{n} {l}"))
            .collect::<Vec<_>>()
            .join(", ");
        let tx = SubmitTx {
            fleet: name.clone(),
            expected_revision: expected,
            author: author.uri(),
            time_ms: now_ms(),
            spec: serde_json::to_value(&prepared.fleet)
                .map_err(|e| Status::internal(e.to_string()))?,
            summary: if summary.is_empty() {
                "no changes".into()
            } else {
                summary
            },
            desired: prepared.desired.clone(),
            secrets,
            audit_action: action.into(),
            file_name: source.map(|(f, _)| f.to_string()).unwrap_or_default(),
            source_sha256: source
                .map(|(_, text)| hex::encode(sha2::Sha256::digest(text.as_bytes())))
                .unwrap_or_default(),
            retry: crate::realise::failed_containers(st, name)?,
        };
        let rev = st.store.submit(&tx)?;
        reconcile::pass(st, now_ms())?;
        st.changed();
        Ok(rev)
    }
}

type EventStream = Pin<Box<dyn Stream<Item = Result<pb::FleetEvent, Status>> + Send>>;

#[tonic::async_trait]
impl FleetService for FleetApi {
    async fn plan(
        &self,
        req: Request<pb::PlanRequest>,
    ) -> Result<Response<pb::PlanResponse>, Status> {
        let id = who(&req);
        check_fleet(id.as_ref(), Need::Read)?;
        let r = req.into_inner();
        self.check_size(&r.file_name, &r.source, &r.files)?;
        let mut fleet = match parse(&r.file_name, &r.source, &r.files) {
            Parsed::Fleet(f) => *f,
            Parsed::Diagnostics(diagnostics) => {
                return Ok(Response::new(pb::PlanResponse {
                    diagnostics,
                    ..Default::default()
                }))
            }
        };
        check_fleet(id.as_ref(), Need::Change(&fleet.name))?;
        self.state
            .limiter
            .config()
            .check_fleet_containers(&fleet.name, fleet.containers.len())?;
        if r.destroy {
            fleet.containers.clear();
        }
        let name = fleet.name.clone();
        let (snap, prepared) = self.prepare(&r.file_name, fleet)?;
        Ok(Response::new(match prepared {
            Ok(p) => match crate::policy::check(
                &r.file_name,
                &r.source,
                &files_of(&r.files),
                &p.fleet,
                &p.plan,
            ) {
                Ok(policy) => pb::PlanResponse {
                    fleet: name,
                    base_revision: snap.revision,
                    plan_json: pxfleet_spec::render::json::render(&p.plan),
                    diagnostics: vec![],
                    has_changes: !p.plan.is_empty(),
                    policy,
                },
                Err(diagnostics) => pb::PlanResponse {
                    fleet: name,
                    base_revision: snap.revision,
                    diagnostics,
                    ..Default::default()
                },
            },
            Err(diagnostics) => pb::PlanResponse {
                fleet: name,
                base_revision: snap.revision,
                diagnostics,
                ..Default::default()
            },
        }))
    }

    async fn submit(
        &self,
        req: Request<pb::SubmitRequest>,
    ) -> Result<Response<pb::SubmitResponse>, Status> {
        let id = who(&req);
        check_fleet(id.as_ref(), Need::Read)?;
        let author = id.clone().expect("checked above");
        let r = req.into_inner();
        self.check_size(&r.file_name, &r.source, &r.files)?;
        let fleet = match parse(&r.file_name, &r.source, &r.files) {
            Parsed::Fleet(f) => *f,
            Parsed::Diagnostics(diagnostics) => {
                return Ok(Response::new(pb::SubmitResponse {
                    diagnostics,
                    ..Default::default()
                }))
            }
        };
        check_fleet(id.as_ref(), Need::Change(&fleet.name))?;
        self.state
            .limiter
            .config()
            .check_fleet_containers(&fleet.name, fleet.containers.len())?;
        let name = fleet.name.clone();
        let lock = self.state.fleet_lock(&name);
        let _guard = lock.lock().await;
        let _placing = self.state.placement_lock.lock().await;
        let (snap, prepared) = self.prepare(&r.file_name, fleet.clone())?;
        let prepared = match prepared {
            Ok(p) => p,
            Err(diagnostics) => {
                return Ok(Response::new(pb::SubmitResponse {
                    fleet: name,
                    diagnostics,
                    ..Default::default()
                }))
            }
        };
        let plan_json = pxfleet_spec::render::json::render(&prepared.plan);
        // Policies first: a denial stores nothing, so nothing is applied.
        let policy = match crate::policy::check(
            &r.file_name,
            &r.source,
            &files_of(&r.files),
            &prepared.fleet,
            &prepared.plan,
        ) {
            Ok(policy) => policy,
            Err(diagnostics) => {
                return Ok(Response::new(pb::SubmitResponse {
                    fleet: name,
                    diagnostics,
                    ..Default::default()
                }))
            }
        };
        if let Some(report) = policy
            .as_ref()
            .filter(|p| p.findings.iter().any(|f| f.deny))
        {
            tracing::info!(fleet = %name, "submit refused by policy");
            return Ok(Response::new(pb::SubmitResponse {
                fleet: name,
                diagnostics: crate::policy::denials(report),
                plan_json,
                policy,
                ..Default::default()
            }));
        }
        if !r.plan_json.is_empty() {
            let saved = pxfleet_spec::render::json::parse(&r.plan_json).map_err(|e| {
                Status::invalid_argument(format!("the saved plan is not a pxfleet plan: {e}"))
            })?;
            if r.expected_revision.is_some_and(|e| e != snap.revision) {
                return Err(StoreError::RevisionMoved {
                    fleet: name,
                    expected: r.expected_revision.unwrap_or_default(),
                    actual: snap.revision,
                }
                .into());
            }
            if saved.actions != prepared.plan.actions {
                return Err(Status::failed_precondition(format!(
                    "fleet {name}: the saved plan no longer matches what would be done (something changed since it \
                     was made); plan again"
                )));
            }
        }
        let expected = r.expected_revision.or(Some(snap.revision));
        if expected.is_some_and(|e| e != snap.revision) {
            return Err(StoreError::RevisionMoved {
                fleet: name,
                expected: expected.unwrap_or_default(),
                actual: snap.revision,
            }
            .into());
        }
        if snap.revision > 0
            && !r.retry_failed
            && (prepared.plan.is_empty() || !self.has_failed(&name)?)
            && self.unchanged(&fleet, &prepared, &snap)?
        {
            // Nothing new to record: no revision, no operations. Also when the plan is not empty only because
            // the stored revision is still being applied (a second submit of the same file while the first is in
            // flight finds nothing to add); a fleet with failed containers is retried by a new revision.
            return Ok(Response::new(pb::SubmitResponse {
                fleet: name,
                revision: snap.revision,
                operations: vec![],
                diagnostics: vec![],
                plan_json,
                policy,
            }));
        }
        let revision = self.store_revision(
            &author,
            &fleet,
            &prepared,
            expected,
            "submit",
            Some((&r.file_name, &r.source)),
        )?;
        tracing::info!(fleet = %name, revision, author = %author.uri(), "fleet submitted");
        Ok(Response::new(pb::SubmitResponse {
            fleet: name.clone(),
            revision,
            operations: self.ops_of(&name, Some(revision))?,
            diagnostics: vec![],
            plan_json,
            policy,
        }))
    }

    type WatchStream = EventStream;

    async fn watch(
        &self,
        req: Request<pb::WatchRequest>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        let id = who(&req);
        check_fleet(id.as_ref(), Need::Read)?;
        let permit = self
            .state
            .limiter
            .watch_permit(&id.map(|i| i.uri()).unwrap_or_default())?;
        let r = req.into_inner();
        let state = self.state.clone();
        let stream = async_stream(self.state.limiter.closing(), move |tx| async move {
            // held while the stream lives; async_stream ends it when the client goes away
            let _permit = permit;
            crate::watch::run(state, r.fleet, r.until_settled, |ev| {
                let tx = tx.clone();
                async move {
                    let ev = ev
                        .map(crate::convert_streams::fleet_event_pb)
                        .map_err(Status::from);
                    tx.send(ev).await.is_ok()
                }
            })
            .await
        });
        Ok(Response::new(stream))
    }

    async fn get_fleets(
        &self,
        req: Request<pb::GetFleetsRequest>,
    ) -> Result<Response<pb::GetFleetsResponse>, Status> {
        check_fleet(who(&req).as_ref(), Need::Read)?;
        let rows = self.rows()?;
        let fleets = self
            .state
            .store
            .fleets()?
            .into_iter()
            .map(|f| {
                let mine: Vec<&ContainerRow> = rows
                    .iter()
                    .filter(|r| r.fleet == f.name && r.desired.is_some())
                    .collect();
                let mut states: BTreeMap<String, u32> = BTreeMap::new();
                for r in &mine {
                    *states.entry(r.status.as_str().into()).or_default() += 1;
                }
                pb::FleetSummary {
                    name: f.name.clone(),
                    revision: f.revision,
                    container_count: mine.len() as u32,
                    states: states.into_iter().collect(),
                    updated_unix_ms: f.updated_ms as i64,
                    author: f.author,
                }
            })
            .collect();
        Ok(Response::new(pb::GetFleetsResponse { fleets }))
    }

    async fn get_containers(
        &self,
        req: Request<pb::GetContainersRequest>,
    ) -> Result<Response<pb::GetContainersResponse>, Status> {
        check_fleet(who(&req).as_ref(), Need::Read)?;
        let r = req.into_inner();
        let containers = self
            .rows()?
            .iter()
            .filter(|row| r.fleet.is_empty() || row.fleet == r.fleet)
            .filter(|row| r.node.is_empty() || row.node() == r.node)
            .map(|row| self.container_info(row))
            .collect();
        Ok(Response::new(pb::GetContainersResponse { containers }))
    }

    async fn describe_container(
        &self,
        req: Request<pb::DescribeContainerRequest>,
    ) -> Result<Response<pb::DescribeContainerResponse>, Status> {
        check_fleet(who(&req).as_ref(), Need::Read)?;
        let r = req.into_inner();
        let rows = self.rows()?;
        let row = rows
            .iter()
            .find(|row| row.fleet == r.fleet && row.name == r.name)
            .ok_or_else(|| {
                Status::not_found(format!("fleet {} has no container {}", r.fleet, r.name))
            })?;
        let operations = self
            .state
            .store
            .ops()?
            .iter()
            .filter(|o| o.fleet == r.fleet && o.container == r.name)
            .map(convert::operation_info)
            .collect();
        let drift = match (&row.desired, &row.observed) {
            (Some(d), Some(o)) => {
                let applied = self.state.store.applied(&r.fleet, &r.name)?;
                crate::realise::change_texts(&crate::reconcile::decide::View {
                    desired: Some(d),
                    applied: applied.as_ref(),
                    observed: Some(o),
                    template_ready: true,
                })
            }
            _ => vec![],
        };
        Ok(Response::new(pb::DescribeContainerResponse {
            info: Some(self.container_info(row)),
            desired: row.desired.as_ref().map(|d| {
                convert::container_spec(&d.fleet, &d.container, d.vm_id, &d.template, None)
            }),
            observed: row.observed.as_ref().map(convert::observed_pb),
            operations,
            drift,
            hooks: crate::hooks::results(&self.state, &r.fleet, &r.name)?
                .iter()
                .map(crate::hooks::HookResult::to_pb)
                .collect(),
        }))
    }

    async fn get_nodes(
        &self,
        req: Request<pb::GetNodesRequest>,
    ) -> Result<Response<pb::GetNodesResponse>, Status> {
        check_fleet(who(&req).as_ref(), Need::Read)?;
        let observed = self.state.store.all_observed()?;
        let active: Vec<crate::model::Operation> = self
            .state
            .store
            .ops()?
            .into_iter()
            .filter(|o| o.state.is_active())
            .collect();
        let nodes = self
            .state
            .store
            .nodes()?
            .iter()
            .map(|n| self.node_info(n, &observed, &active))
            .collect();
        Ok(Response::new(pb::GetNodesResponse { nodes }))
    }

    async fn get_operations(
        &self,
        req: Request<pb::GetOperationsRequest>,
    ) -> Result<Response<pb::GetOperationsResponse>, Status> {
        check_fleet(who(&req).as_ref(), Need::Read)?;
        let r = req.into_inner();
        let mut ops: Vec<pb::OperationInfo> = self
            .state
            .store
            .ops()?
            .iter()
            .filter(|o| r.fleet.is_empty() || o.fleet == r.fleet)
            .filter(|o| r.node.is_empty() || o.node == r.node)
            .filter(|o| !r.active_only || o.state.is_active())
            .map(convert::operation_info)
            .collect();
        let limit = if r.limit == 0 { 200 } else { r.limit as usize };
        if ops.len() > limit {
            ops.drain(..ops.len() - limit);
        }
        Ok(Response::new(pb::GetOperationsResponse { operations: ops }))
    }

    async fn output(
        &self,
        req: Request<pb::OutputRequest>,
    ) -> Result<Response<pb::OutputResponse>, Status> {
        let id = who(&req);
        let r = req.into_inner();
        check_fleet(
            id.as_ref(),
            if r.show_sensitive {
                Need::ReadSecrets(&r.fleet)
            } else {
                Need::Read
            },
        )?;
        let head = self
            .state
            .store
            .fleet(&r.fleet)?
            .ok_or_else(|| Status::not_found(format!("no fleet {}", r.fleet)))?;
        let secrets = self.state.store.secrets(&r.fleet)?;
        if r.show_sensitive {
            self.state.store.audit(&AuditEntry {
                time_ms: now_ms(),
                actor: id.as_ref().map(|i| i.uri()).unwrap_or_default(),
                action: "output_sensitive".into(),
                target: r.fleet.clone(),
                detail: String::new(),
            })?;
        }
        let containers = self
            .rows()?
            .iter()
            .filter(|row| row.fleet == r.fleet && row.desired.is_some())
            .map(|row| {
                let pw = secrets.get(&row.name);
                pb::ContainerOutput {
                    name: row.name.clone(),
                    vm_id: row.vm_id(),
                    node: row.node(),
                    hostname: row
                        .desired
                        .as_ref()
                        .map(|d| d.container.hostname.clone())
                        .unwrap_or_default(),
                    addresses: row
                        .observed
                        .as_ref()
                        .map(|o| o.addresses.clone())
                        .unwrap_or_default(),
                    password: pw
                        .filter(|_| r.show_sensitive)
                        .map(|p| pb::Secret { value: p.clone() }),
                    has_password: pw.is_some(),
                }
            })
            .collect();
        Ok(Response::new(pb::OutputResponse {
            fleet: r.fleet,
            revision: head.revision,
            containers,
        }))
    }

    async fn set_power(
        &self,
        req: Request<pb::SetPowerRequest>,
    ) -> Result<Response<pb::DestroyResponse>, Status> {
        let id = who(&req);
        let r = req.into_inner();
        check_fleet(id.as_ref(), Need::Change(&r.fleet))?;
        let author = id.expect("checked above");
        let action = pb::PowerAction::try_from(r.action)
            .ok()
            .filter(|a| *a != pb::PowerAction::Unspecified)
            .ok_or_else(|| Status::invalid_argument("action must be start, stop or restart"))?;
        let lock = self.state.fleet_lock(&r.fleet);
        let _guard = lock.lock().await;
        let (head, mut fleet) = self.stored_spec(&r.fleet)?;
        for c in &r.containers {
            if !fleet.containers.contains_key(c) {
                return Err(Status::not_found(format!(
                    "fleet {} has no container {c}",
                    r.fleet
                )));
            }
        }
        let state = if action == pb::PowerAction::Stop {
            pxfleet_spec::DesiredState::Stopped
        } else {
            pxfleet_spec::DesiredState::Running
        };
        let chosen: Vec<String> = fleet
            .containers
            .keys()
            .filter(|k| r.containers.is_empty() || r.containers.contains(k))
            .cloned()
            .collect();
        for k in &chosen {
            if let Some(c) = fleet.containers.get_mut(k) {
                c.state = state;
            }
        }
        let prepared = self.prepare_stored(fleet.clone())?;
        let verb = match action {
            pb::PowerAction::Stop => "stop",
            pb::PowerAction::Restart => "restart",
            _ => "start",
        };
        let revision = self.store_revision(
            &author,
            &fleet,
            &prepared,
            r.expected_revision.or(Some(head.revision)),
            verb,
            None,
        )?;
        // A restart of a running container: stopped here, started again by the reconciler (its state is
        // running). Only once the revision is stored, so a refused one stops nothing.
        if action == pb::PowerAction::Restart {
            reconcile::queue_restarts(&self.state, &r.fleet, &chosen, revision)?;
            self.state.changed();
        }
        tracing::info!(fleet = %r.fleet, revision, action = verb, containers = ?chosen, "power state changed");
        Ok(Response::new(pb::DestroyResponse {
            revision,
            operations: self.ops_of(&r.fleet, Some(revision))?,
        }))
    }

    async fn destroy(
        &self,
        req: Request<pb::DestroyRequest>,
    ) -> Result<Response<pb::DestroyResponse>, Status> {
        let id = who(&req);
        let r = req.into_inner();
        check_fleet(id.as_ref(), Need::Change(&r.fleet))?;
        let author = id.expect("checked above");
        let lock = self.state.fleet_lock(&r.fleet);
        let _guard = lock.lock().await;
        let (head, mut fleet) = self.stored_spec(&r.fleet)?;
        for c in &r.containers {
            if !fleet.containers.contains_key(c) {
                return Err(Status::not_found(format!(
                    "fleet {} has no container {c}",
                    r.fleet
                )));
            }
        }
        if r.containers.is_empty() {
            fleet.containers.clear();
        } else {
            fleet.containers.retain(|k, _| !r.containers.contains(k));
        }
        let prepared = self.prepare_stored(fleet.clone())?;
        let revision = self.store_revision(
            &author,
            &fleet,
            &prepared,
            r.expected_revision.or(Some(head.revision)),
            "destroy",
            None,
        )?;
        Ok(Response::new(pb::DestroyResponse {
            revision,
            operations: self.ops_of(&r.fleet, None)?,
        }))
    }

    async fn history(
        &self,
        req: Request<pb::HistoryRequest>,
    ) -> Result<Response<pb::HistoryResponse>, Status> {
        check_fleet(who(&req).as_ref(), Need::Read)?;
        let r = req.into_inner();
        let mut revisions: Vec<pb::RevisionInfo> = self
            .state
            .store
            .revisions(&r.fleet)?
            .into_iter()
            .rev()
            .map(|rev| pb::RevisionInfo {
                revision: rev.revision,
                author: rev.author,
                unix_ms: rev.created_ms as i64,
                summary: rev.summary,
                file_name: rev.file_name,
                source_sha256: rev.source_sha256,
            })
            .collect();
        if r.limit > 0 {
            revisions.truncate(r.limit as usize);
        }
        Ok(Response::new(pb::HistoryResponse { revisions }))
    }

    async fn create_join_token(
        &self,
        req: Request<pb::CreateJoinTokenRequest>,
    ) -> Result<Response<pb::CreateJoinTokenResponse>, Status> {
        let id = who(&req);
        check_fleet(id.as_ref(), Need::Admin)?;
        let r = req.into_inner();
        let fp = self.state.ca.fingerprint_sha256();
        let token = JoinToken::generate(&fp).map_err(|e| Status::internal(e.to_string()))?;
        let ttl = if r.ttl_seconds == 0 {
            self.state.config.join_token_ttl_secs
        } else {
            r.ttl_seconds as u64
        };
        let now = now_ms();
        let rec = TokenRecord {
            id: token.id.clone(),
            hash: token.secret_hash(),
            node: r.node.clone(),
            created_by: id.as_ref().map(|i| i.uri()).unwrap_or_default(),
            created_ms: now,
            expires_ms: now + ttl * 1000,
            used_ms: None,
        };
        self.state.store.put_token(&rec)?;
        self.state.store.audit(&AuditEntry {
            time_ms: now,
            actor: rec.created_by.clone(),
            action: "create_join_token".into(),
            target: if r.node.is_empty() {
                "any node".into()
            } else {
                r.node.clone()
            },
            detail: format!("token {} valid {ttl} s", token.id),
        })?;
        self.state.store.flush().await?;
        Ok(Response::new(pb::CreateJoinTokenResponse {
            token: token.reveal(),
            token_id: token.id,
            expires_unix_ms: rec.expires_ms as i64,
            ca_fingerprint: fp,
        }))
    }

    async fn cordon_node(
        &self,
        req: Request<pb::CordonNodeRequest>,
    ) -> Result<Response<pb::NodeInfo>, Status> {
        let id = who(&req);
        check_fleet(id.as_ref(), Need::Admin)?;
        let r = req.into_inner();
        self.set_cordon(id.as_ref(), &r.node, Some(&r.reason))
            .map(Response::new)
    }

    async fn uncordon_node(
        &self,
        req: Request<pb::UncordonNodeRequest>,
    ) -> Result<Response<pb::NodeInfo>, Status> {
        let id = who(&req);
        check_fleet(id.as_ref(), Need::Admin)?;
        let r = req.into_inner();
        self.set_cordon(id.as_ref(), &r.node, None)
            .map(Response::new)
    }

    async fn drain_node(
        &self,
        req: Request<pb::DrainNodeRequest>,
    ) -> Result<Response<pb::DrainNodeResponse>, Status> {
        let id = who(&req);
        check_fleet(id.as_ref(), Need::Admin)?;
        let r = req.into_inner();
        let reason = if r.reason.is_empty() {
            "drained".to_string()
        } else {
            r.reason.clone()
        };
        let _placing = self.state.placement_lock.lock().await;
        let info = self.set_cordon(id.as_ref(), &r.node, Some(&reason))?;
        let snap = self.snapshot("")?;
        let plan = crate::drain::plan(&snap, &r.node);
        for m in &plan.moves {
            self.state.store.move_desired(&m.fleet, &m.name, &m.to)?;
            tracing::info!(node = %r.node, fleet = %m.fleet, container = %m.name, to = %m.to, "drain: moving");
        }
        self.state.store.audit(&AuditEntry {
            time_ms: now_ms(),
            actor: id.as_ref().map(|i| i.uri()).unwrap_or_default(),
            action: "drain".into(),
            target: r.node.clone(),
            detail: format!("{} to move, {} left", plan.moves.len(), plan.stuck.len()),
        })?;
        reconcile::pass(&self.state, now_ms())?;
        self.state.changed();
        Ok(Response::new(pb::DrainNodeResponse {
            node: Some(info),
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
        let id = who(&req);
        check_fleet(id.as_ref(), Need::Admin)?;
        let r = req.into_inner();
        let role = match pb::UserRole::try_from(r.role) {
            Ok(pb::UserRole::Admin) => Role::Admin,
            Ok(pb::UserRole::Operator) => Role::Operator,
            Ok(pb::UserRole::Viewer) => Role::Viewer,
            _ => {
                return Err(Status::invalid_argument(
                    "role: expected admin, operator or viewer",
                ))
            }
        };
        let fleets: Vec<&str> = r.fleets.iter().map(String::as_str).collect();
        let identity = Identity::user(&r.name, role, &fleets)
            .map_err(|e| Status::invalid_argument(e.to_string()))?;
        let validity = if r.validity_days == 0 {
            pxfleet_tls::DEFAULT_CLIENT_VALIDITY
        } else {
            Duration::from_secs(r.validity_days as u64 * 86400)
        };
        let cert = self
            .state
            .ca
            .sign_csr(&r.csr_pem, &identity, validity)
            .map_err(|e| Status::invalid_argument(e.to_string()))?;
        self.state
            .store
            .put_serial(&crate::identities::serial_record(&cert, &identity))?;
        self.state.store.audit(&AuditEntry {
            time_ms: now_ms(),
            actor: id.as_ref().map(|i| i.uri()).unwrap_or_default(),
            action: "issue_user_certificate".into(),
            target: identity.uri(),
            detail: format!("serial {}", cert.serial.as_str()),
        })?;
        Ok(Response::new(pb::IssueUserCertificateResponse {
            cert_pem: cert.cert_pem,
            ca_pem: self.state.ca.cert_pem().to_string(),
            serial: cert.serial.as_str().to_string(),
            not_after_unix_ms: cert.not_after.unix_timestamp() * 1000,
            identity: identity.uri(),
        }))
    }

    async fn revoke_certificate(
        &self,
        req: Request<pb::RevokeCertificateRequest>,
    ) -> Result<Response<pb::RevokeCertificateResponse>, Status> {
        let id = who(&req);
        check_fleet(id.as_ref(), Need::Admin)?;
        let r = req.into_inner();
        let serial =
            Serial::from_hex(&r.serial).map_err(|e| Status::invalid_argument(e.to_string()))?;
        let mut rec = self
            .state
            .store
            .serials()?
            .into_iter()
            .find(|s| s.serial == serial.as_str())
            .unwrap_or(SerialRecord {
                serial: serial.as_str().to_string(),
                subject: String::new(),
                issued_ms: 0,
                revoked: false,
                not_after_ms: 0,
            });
        rec.revoked = true;
        self.state.store.put_serial(&rec)?;
        self.state.revocations.revoke(serial);
        self.state.store.audit(&AuditEntry {
            time_ms: now_ms(),
            actor: id.as_ref().map(|i| i.uri()).unwrap_or_default(),
            action: "revoke_certificate".into(),
            target: rec.serial.clone(),
            detail: r.reason,
        })?;
        self.state.store.flush().await?;
        Ok(Response::new(pb::RevokeCertificateResponse {}))
    }

    async fn list_certificates(
        &self,
        req: Request<pb::ListCertificatesRequest>,
    ) -> Result<Response<pb::ListCertificatesResponse>, Status> {
        check_fleet(who(&req).as_ref(), Need::Admin)?;
        let mut serials = self.state.store.serials()?;
        serials.sort_by(|a, b| (a.issued_ms, &a.serial).cmp(&(b.issued_ms, &b.serial)));
        Ok(Response::new(pb::ListCertificatesResponse {
            certificates: serials
                .iter()
                .map(crate::identities::certificate_info)
                .collect(),
        }))
    }

    async fn get_audit(
        &self,
        req: Request<pb::GetAuditRequest>,
    ) -> Result<Response<pb::GetAuditResponse>, Status> {
        check_fleet(who(&req).as_ref(), Need::Admin)?;
        let entries = crate::audit::entries(&self.state.store, &req.into_inner())?;
        Ok(Response::new(pb::GetAuditResponse { entries }))
    }

    type BackupStream = Pin<Box<dyn Stream<Item = Result<pb::BackupChunk, Status>> + Send>>;

    async fn backup(
        &self,
        req: Request<pb::BackupRequest>,
    ) -> Result<Response<Self::BackupStream>, Status> {
        let id = who(&req);
        check_fleet(id.as_ref(), Need::Admin)?;
        let bytes = crate::backup::online(&self.state)
            .await
            .map_err(|e| Status::internal(format!("backup: {e}")))?;
        tracing::info!(bytes = bytes.len(), "online backup taken");
        self.state.store.audit(&AuditEntry {
            time_ms: crate::model::now_ms(),
            actor: id.as_ref().map(|i| i.uri()).unwrap_or_default(),
            action: "backup".into(),
            target: "state".into(),
            detail: format!("{} bytes", bytes.len()),
        })?;
        let chunks: Vec<Result<pb::BackupChunk, Status>> = bytes
            .chunks(crate::backup::CHUNK)
            .map(|c| Ok(pb::BackupChunk { data: c.to_vec() }))
            .collect();
        Ok(Response::new(Box::pin(futures::stream::iter(chunks))))
    }
}

impl FleetApi {
    /// Whether `prepared` equals what is stored: same placed containers, and no password given that differs.
    /// Whether a container of `fleet` is stuck failed (a resubmit of the same file retries it).
    fn has_failed(&self, fleet: &str) -> Result<bool, Status> {
        Ok(query::container_rows(&self.state)?
            .iter()
            .any(|r| r.fleet == fleet && r.status == crate::model::ContainerStatus::Failed))
    }

    fn unchanged(
        &self,
        source: &Fleet,
        prepared: &Prepared,
        snap: &Snapshot,
    ) -> Result<bool, Status> {
        let name = &prepared.fleet.name;
        let key = |d: &crate::model::DesiredContainer| {
            (
                d.name.clone(),
                d.node.clone(),
                d.vm_id,
                d.container.clone(),
                d.template.clone(),
            )
        };
        let mut old: Vec<_> = snap
            .desired
            .iter()
            .filter(|d| d.fleet == *name)
            .map(key)
            .collect();
        let mut new: Vec<_> = prepared.desired.iter().map(key).collect();
        old.sort_by(|a, b| a.0.cmp(&b.0));
        new.sort_by(|a, b| a.0.cmp(&b.0));
        let secrets = self.state.store.secrets(name)?;
        let passwords_same = source.containers.iter().all(|(k, c)| {
            c.password
                .as_ref()
                .is_none_or(|p| secrets.get(k).map(String::as_str) == Some(p.expose()))
        });
        Ok(old == new && passwords_same)
    }

    fn node_info(
        &self,
        n: &crate::model::NodeRecord,
        observed: &[crate::model::ObservedContainer],
        active: &[crate::model::Operation],
    ) -> pb::NodeInfo {
        let mine: Vec<&crate::model::Operation> =
            active.iter().filter(|o| o.node == n.name).collect();
        let (status, mut status_reason) = self.state.node_health(n, &mine, now_ms());
        if status == crate::model::NodeStatus::Down {
            let serials = self.state.store.serials().unwrap_or_default();
            if let Some(why) = crate::identities::node_cert_problem(&serials, &n.name, now_ms()) {
                status_reason = why;
            }
        }
        pb::NodeInfo {
            name: n.name.clone(),
            status: convert::node_status_pb(status) as i32,
            status_reason,
            inventory: Some(convert::inventory_pb(&n.name, &n.inventory)),
            last_heartbeat_unix_ms: n.last_seen_ms as i64,
            cordon_reason: n.cordon_reason.clone(),
            container_count: observed.iter().filter(|o| o.node == n.name).count() as u32,
            cert_serial: n.cert_serial.clone(),
        }
    }

    fn set_cordon(
        &self,
        id: Option<&Identity>,
        node: &str,
        cordon_reason: Option<&str>,
    ) -> Result<pb::NodeInfo, Status> {
        let cordoned = cordon_reason.is_some();
        if self.state.store.node(node)?.is_none() {
            return Err(Status::not_found(format!("no node {node} is enrolled")));
        }
        let rec = self.state.store.update_node(node, |n| {
            n.cordoned = cordoned;
            n.cordon_reason = cordon_reason.unwrap_or_default().to_string();
        })?;
        self.state.store.audit(&AuditEntry {
            time_ms: now_ms(),
            actor: id.map(|i| i.uri()).unwrap_or_default(),
            action: if cordoned { "cordon" } else { "uncordon" }.into(),
            target: node.into(),
            detail: cordon_reason.unwrap_or_default().to_string(),
        })?;
        let observed = self.state.store.all_observed()?;
        let active: Vec<crate::model::Operation> = self
            .state
            .store
            .ops()?
            .into_iter()
            .filter(|o| o.state.is_active() && o.node == node)
            .collect();
        Ok(self.node_info(&rec, &observed, &active))
    }
}

/// A stream fed by a task through a channel; the task stops when the client goes away or `closing` resolves
/// (shutdown).
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
