//! AgentService (for pxagent): enrolment with a one-time token, and the Connect stream (hello, heartbeats,
//! observations, operation updates in; welcome, operations, acks out). A node certificate speaks only for its
//! own node.

use std::collections::BTreeSet;
use std::pin::Pin;
use std::sync::Arc;

use futures::{FutureExt, Stream, StreamExt};
use pxfleet_proto::v1 as pb;
use pxfleet_proto::v1::agent_service_server::AgentService;
use pxfleet_tls::{Identity, JoinToken};
use tonic::{Request, Response, Status, Streaming};

use crate::agents::ToAgent;
use crate::authz::check_node;
use crate::error::{Error, Result};
use crate::grpc::convert;
use crate::grpc::convert_streams;
use crate::model::AuditEntry;
use crate::reconcile;
use crate::state::State;
use crate::store::StoreError;

/// How often agents heartbeat; 30 s without one marks the node down.
pub const HEARTBEAT_INTERVAL_SECS: u32 = 5;
/// Operations an agent runs at once.
pub const MAX_PARALLEL_OPERATIONS: u32 = 4;

pub struct AgentApi {
    pub state: Arc<State>,
}

type ConnectStream =
    Pin<Box<dyn Stream<Item = std::result::Result<pb::ControllerMessage, Status>> + Send>>;

fn refused() -> Error {
    Error::PermissionDenied(
        "join token is unknown, already used, expired, or for another node".into(),
    )
}

#[tonic::async_trait]
impl AgentService for AgentApi {
    async fn enroll(
        &self,
        req: Request<pb::EnrollRequest>,
    ) -> std::result::Result<Response<pb::EnrollResponse>, Status> {
        let peer = req.remote_addr().map(|a| a.ip());
        self.state.limiter.enroll_allowed(peer)?;
        let result = self
            .enroll_checked(req.into_inner())
            .await
            .map(Response::new)
            .map_err(Status::from);
        if let Err(e) = &result {
            if e.code() != tonic::Code::Internal && e.code() != tonic::Code::Unavailable {
                self.state.limiter.enroll_failed(peer);
                tracing::info!(peer = ?peer, error = %e.message(), "enrolment refused");
            }
        }
        result
    }

    type ConnectStream = ConnectStream;

    async fn connect(
        &self,
        req: Request<Streaming<pb::AgentMessage>>,
    ) -> std::result::Result<Response<Self::ConnectStream>, Status> {
        Ok(self.connect_checked(req).await?)
    }

    async fn renew(
        &self,
        req: Request<pb::RenewRequest>,
    ) -> std::result::Result<Response<pb::EnrollResponse>, Status> {
        renew(&self.state, req).await
    }
}

impl AgentApi {
    /// Enrolment once the rate limit let it through (every error counts as a failure).
    async fn enroll_checked(&self, r: pb::EnrollRequest) -> Result<pb::EnrollResponse> {
        let token: JoinToken = r.token.parse().map_err(|_| refused())?;
        let identity =
            Identity::node(&r.node).map_err(|e| Error::InvalidArgument(e.to_string()))?;
        let st = &self.state;
        let fingerprint = st.ca.fingerprint_sha256();
        let explain = |st: &State| {
            let rec = st.store.token(&token.id).ok().flatten();
            let reason = crate::identities::token_refusal(
                rec.as_ref(),
                &token,
                &r.node,
                st.now_ms(),
                &fingerprint,
            );
            tracing::warn!(node = %r.node, token = %token.id, %reason, "enrolment refused");
            Error::PermissionDenied(reason)
        };
        if token.ca_fingerprint != fingerprint {
            return Err(explain(st));
        }
        // A token not bound to a node enrols new nodes only: under an enrolled node's name it would take over
        // that node's identity (and its stream). Replacing a node takes a token made for it.
        let unbound = st
            .store
            .token(&token.id)?
            .is_some_and(|t| t.node.is_empty() && token.matches_hash(&t.hash));
        if unbound && st.store.node(&r.node)?.is_some_and(|n| n.enrolled_ms > 0) {
            let reason = format!(
                "node {} is already enrolled, and join token {} is not bound to a node: it cannot enrol under an \
                 enrolled node's name (that would take over the node). To replace the node, an admin makes a token \
                 for it: `pxctl node token create --node {}`; to add a new node, choose another --node name",
                r.node, token.id, r.node
            );
            tracing::warn!(node = %r.node, token = %token.id, %reason, "enrolment refused");
            return Err(Error::PermissionDenied(reason));
        }
        st.store
            .consume_token(&token.id, st.now_ms(), |t| {
                token.matches_hash(&t.hash) && (t.node.is_empty() || t.node == r.node)
            })
            .map_err(|e| match e {
                StoreError::TokenRefused => explain(st),
                e => Error::Store(e),
            })?;
        let validity = std::time::Duration::from_secs(st.config.tls.node_cert_validity_secs);
        let cert = st
            .ca
            .sign_csr(&r.csr_pem, &identity, validity)
            .map_err(|e| Error::InvalidArgument(e.to_string()))?;
        st.store.put_serial(&crate::identities::serial_record(
            &cert,
            &identity,
            st.now_ms(),
        ))?;
        st.store
            .update_node(&r.node, |n| n.enrolled_ms = st.now_ms())?;
        st.store.audit(&AuditEntry {
            time_ms: st.now_ms(),
            actor: identity.uri(),
            action: "enroll".into(),
            target: r.node.clone(),
            detail: format!("token {}, serial {}", token.id, cert.serial.as_str()),
        })?;
        st.store.flush().await?;
        tracing::info!(node = %r.node, serial = cert.serial.as_str(), "node enrolled");
        Ok(pb::EnrollResponse {
            cert_pem: cert.cert_pem,
            ca_pem: st.ca.cert_pem().to_string(),
            serial: cert.serial.as_str().to_string(),
            not_after_unix_ms: cert.not_after.unix_timestamp() * 1000,
        })
    }

    async fn connect_checked(
        &self,
        req: Request<Streaming<pb::AgentMessage>>,
    ) -> Result<Response<ConnectStream>> {
        let cert = pxfleet_tls::peer_cert_info(&req);
        let id = crate::authz::caller_of(&self.state, &req)?;
        let node = check_node(id.as_ref(), "")?.to_string();
        let serial = cert
            .map(|c| c.serial.as_str().to_string())
            .unwrap_or_default();
        let mut inbound = req.into_inner();
        let first = inbound
            .next()
            .await
            .ok_or_else(|| Error::InvalidArgument("stream ended before Hello".into()))?
            .map_err(Error::Stream)?;
        let Some(pb::agent_message::Msg::Hello(hello)) = first.msg else {
            return Err(Error::InvalidArgument(
                "the first message must be Hello".into(),
            ));
        };
        check_node(id.as_ref(), &hello.node)?;
        let st = self.state.clone();
        let finals = handle_hello(&st, &node, &hello, &serial)?;
        let (conn, rx) = st.sessions.register_with_serial(&node, &serial);
        st.sessions
            .send(&node, ToAgent::Welcome { node: node.clone() });
        if !finals.is_empty() {
            st.sessions.send(
                &node,
                ToAgent::Ack {
                    heartbeat_seq: 0,
                    op_ids: finals,
                },
            );
        }
        st.changed();
        tracing::info!(%node, agent_version = %hello.agent_version, "agent connected");
        let st2 = st.clone();
        let node2 = node.clone();
        tokio::spawn(async move {
            // Messages are handled in batches on the blocking pool: handling takes the operations lock, which a
            // reconcile pass holds for its whole length, and an async worker must not sit waiting for it.
            let mut ended = false;
            while !ended {
                let Some(first) = inbound.next().await else {
                    break;
                };
                // A stream whose session is gone (its certificate revoked, or the node connected again) is not
                // listened to any more: its heartbeats would keep a cut-off agent looking alive.
                if st2.sessions.current_conn(&node2) != Some(conn) {
                    tracing::info!(node = %node2, "agent stream closed by the controller; its messages are ignored");
                    break;
                }
                let mut batch = Vec::new();
                let mut next = Some(first);
                while let Some(msg) = next.take() {
                    match msg {
                        Ok(m) => batch.push(m),
                        Err(e) => {
                            tracing::info!(node = %node2, error = %e, "agent stream error");
                            ended = true;
                            break;
                        }
                    }
                    if batch.len() < BATCH {
                        // what has already arrived joins the batch; `None` from the stream ends it after this one
                        match inbound.next().now_or_never() {
                            Some(Some(m)) => next = Some(m),
                            Some(None) => ended = true,
                            None => {}
                        }
                    }
                }
                let (st3, node3) = (st2.clone(), node2.clone());
                let handled = tokio::task::spawn_blocking(move || {
                    for msg in batch {
                        if let Err(e) = handle_message(&st3, &node3, msg) {
                            tracing::error!(node = %node3, error = %e, "handling an agent message failed");
                        }
                    }
                })
                .await;
                if let Err(e) = handled {
                    tracing::error!(node = %node2, error = %e, "handling agent messages panicked");
                }
            }
            if st2.sessions.unregister(&node2, conn) {
                if let Err(e) = reconcile::requeue_node(&st2, &node2, &BTreeSet::new()) {
                    tracing::error!(node = %node2, error = %e, "requeueing operations failed");
                }
                tracing::info!(node = %node2, "agent disconnected; its operations wait for it");
            }
        });
        Ok(Response::new(Box::pin(
            tokio_stream::wrappers::ReceiverStream::new(rx)
                .map(|m| Ok(convert_streams::controller_message_pb(m))),
        )))
    }
}

/// Messages handled in one go at most.
const BATCH: usize = 256;

/// AgentService.Renew: a new certificate for the calling node's new key, for the identity of the certificate
/// it called with. The handshake already checked that certificate (our CA, not expired, not revoked).
async fn renew(
    state: &State,
    req: Request<pb::RenewRequest>,
) -> Result<Response<pb::EnrollResponse>, Status> {
    let cert = pxfleet_tls::peer_cert_info(&req);
    let id = crate::authz::caller_of(state, &req)?;
    let node = check_node(id.as_ref(), "")?.to_string();
    let identity = Identity::Node(node.clone());
    let old_serial = cert
        .map(|c| c.serial.as_str().to_string())
        .unwrap_or_default();
    let validity = std::time::Duration::from_secs(state.config.tls.node_cert_validity_secs);
    let issued = state
        .ca
        .sign_csr(&req.into_inner().csr_pem, &identity, validity)
        .map_err(|e| crate::error::Error::InvalidArgument(e.to_string()))?;
    state.store.put_serial(&crate::identities::serial_record(
        &issued,
        &identity,
        state.now_ms(),
    ))?;
    state.store.audit(&AuditEntry {
        time_ms: state.now_ms(),
        actor: identity.uri(),
        action: "renew_certificate".into(),
        target: node.clone(),
        detail: format!("serial {} replaces {old_serial}", issued.serial.as_str()),
    })?;
    state.store.flush().await?;
    tracing::info!(%node, serial = issued.serial.as_str(), old = %old_serial, "node certificate renewed");
    Ok(Response::new(pb::EnrollResponse {
        cert_pem: issued.cert_pem,
        ca_pem: state.ca.cert_pem().to_string(),
        serial: issued.serial.as_str().to_string(),
        not_after_unix_ms: issued.not_after.unix_timestamp() * 1000,
    }))
}

/// Stores the hello's inventory and containers, applies the operation results it carries, and requeues the
/// node's other unfinished operations (they are re-sent with the same id). Returns the op ids to acknowledge.
fn handle_hello(
    st: &State,
    node: &str,
    hello: &pb::Hello,
    cert_serial: &str,
) -> Result<Vec<String>> {
    let now = st.now_ms();
    let inv = hello.inventory.clone().unwrap_or_default();
    let inventory = convert::inventory_from_pb(&inv);
    st.store.update_node(node, |n| {
        n.inventory = inventory.clone();
        n.last_seen_ms = now;
        if !cert_serial.is_empty() {
            n.cert_serial = cert_serial.to_string();
        }
    })?;
    st.store.forget_written_memory(node);
    let observed: Vec<_> = inv
        .containers
        .iter()
        .map(|c| convert::observed_from_pb(node, c))
        .collect();
    st.store.replace_observed(node, &observed)?;
    let mut finals = Vec::new();
    let mut known = BTreeSet::new();
    for u in &hello.operations {
        known.insert(u.op_id.clone());
        if reconcile::on_update(
            st,
            node,
            &convert_streams::operation_update_from_pb(node, u.clone()),
        )? {
            finals.push(u.op_id.clone());
        }
    }
    reconcile::requeue_node(st, node, &known)?;
    Ok(finals)
}

fn handle_message(st: &State, node: &str, msg: pb::AgentMessage) -> Result<(), StoreError> {
    let now = st.now_ms();
    match msg.msg {
        Some(pb::agent_message::Msg::Heartbeat(hb)) => {
            // liveness in memory; the record is written only when the free memory moved (store/nodes.rs)
            let memory = (hb.memory_free_bytes > 0).then_some(hb.memory_free_bytes >> 20);
            st.store.touch_node(node, now, false, memory)?;
            st.sessions.send(
                node,
                ToAgent::Ack {
                    heartbeat_seq: hb.seq,
                    op_ids: vec![],
                },
            );
        }
        Some(pb::agent_message::Msg::OperationUpdate(u)) => {
            st.store.touch_node(node, now, true, None)?;
            let u = convert_streams::operation_update_from_pb(node, u);
            if reconcile::on_update(st, node, &u)? {
                st.sessions.send(
                    node,
                    ToAgent::Ack {
                        heartbeat_seq: 0,
                        op_ids: vec![u.op_id],
                    },
                );
            }
        }
        Some(pb::agent_message::Msg::Observation(obs)) => {
            let storages: Vec<_> = obs.storages.iter().map(convert::storage_from_pb).collect();
            let templates: Vec<String> = obs.templates.iter().map(|t| t.volid.clone()).collect();
            let set_templates = obs.full || !templates.is_empty();
            let same = st.store.node(node)?.is_some_and(|n| {
                (storages.is_empty() || n.inventory.storages == storages)
                    && (!set_templates || n.inventory.templates == templates)
            });
            let mut changed = !same;
            if same {
                st.store.touch_node(node, now, false, None)?;
            } else {
                st.store.update_node(node, |n| {
                    n.last_seen_ms = n.last_seen_ms.max(now);
                    if !storages.is_empty() {
                        n.inventory.storages = storages.clone();
                    }
                    if set_templates {
                        n.inventory.templates = templates.clone();
                    }
                })?;
            }
            let containers: Vec<_> = obs
                .containers
                .iter()
                .map(|c| convert::observed_from_pb(node, c))
                .collect();
            if obs.full {
                changed |= st.store.replace_observed(node, &containers)?;
            } else {
                for c in &containers {
                    changed |= st.store.set_observed(node, c.vm_id, Some(c))?;
                }
                for vm_id in &obs.removed_vm_ids {
                    changed |= st.store.set_observed(node, *vm_id, None)?;
                }
            }
            // an observation that changed nothing (the periodic full resync, mostly) wakes no pass
            if changed {
                st.changed();
            }
        }
        Some(pb::agent_message::Msg::Hello(_)) => {
            tracing::warn!(node, "a second Hello on one stream is ignored");
        }
        None => {}
    }
    Ok(())
}
