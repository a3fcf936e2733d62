//! `pxagent join` and the controller stream against a minimal in-test AgentService over real mutual
//! TLS on 127.0.0.1:0: enrolment with a pinned CA, hello with inventory, an operation executed and
//! reported, heartbeats, and a full resync after the controller drops the stream.

mod common;

use std::sync::Arc;
use std::time::Duration;

use pxfleet_agent::AgentConfig;
use pxfleet_proto::v1::{
    self, agent_message, agent_service_server::AgentService, controller_message, AgentMessage,
    ControllerMessage,
};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};

type Outbound = mpsc::Sender<Result<ControllerMessage, Status>>;

struct TestController {
    ca: pxfleet_tls::Ca,
    token: String,
    conns: mpsc::UnboundedSender<(Outbound, mpsc::UnboundedReceiver<AgentMessage>)>,
}

#[tonic::async_trait]
impl AgentService for TestController {
    async fn enroll(
        &self,
        request: Request<v1::EnrollRequest>,
    ) -> Result<Response<v1::EnrollResponse>, Status> {
        let r = request.into_inner();
        if r.token != self.token {
            return Err(Status::permission_denied("unknown join token"));
        }
        let id = pxfleet_tls::Identity::node(&r.node)
            .map_err(|e| Status::invalid_argument(e.to_string()))?;
        let cert = self
            .ca
            .sign_csr(&r.csr_pem, &id, pxfleet_tls::DEFAULT_CLIENT_VALIDITY)
            .map_err(|e| Status::invalid_argument(e.to_string()))?;
        Ok(Response::new(v1::EnrollResponse {
            cert_pem: cert.cert_pem,
            ca_pem: self.ca.cert_pem().to_string(),
            serial: "01".into(),
            not_after_unix_ms: 0,
        }))
    }

    async fn renew(
        &self,
        _request: tonic::Request<v1::RenewRequest>,
    ) -> Result<tonic::Response<v1::EnrollResponse>, tonic::Status> {
        Err(tonic::Status::unimplemented(
            "renew is not part of this test",
        ))
    }

    type ConnectStream = ReceiverStream<Result<ControllerMessage, Status>>;

    async fn connect(
        &self,
        request: Request<Streaming<AgentMessage>>,
    ) -> Result<Response<Self::ConnectStream>, Status> {
        pxfleet_tls::require_identity(&request)?;
        let mut inbound = request.into_inner();
        let (in_tx, in_rx) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            while let Ok(Some(m)) = inbound.message().await {
                if in_tx.send(m).is_err() {
                    break;
                }
            }
        });
        let (out_tx, out_rx) = mpsc::channel(16);
        self.conns.send((out_tx, in_rx)).unwrap();
        Ok(Response::new(ReceiverStream::new(out_rx)))
    }
}

async fn next_matching<T>(
    rx: &mut mpsc::UnboundedReceiver<AgentMessage>,
    mut f: impl FnMut(agent_message::Msg) -> Option<T>,
) -> T {
    tokio::time::timeout(Duration::from_secs(15), async {
        loop {
            let m = rx.recv().await.expect("stream open");
            if let Some(t) = m.msg.and_then(&mut f) {
                return t;
            }
        }
    })
    .await
    .expect("expected message within 15 s")
}

async fn send(out: &Outbound, m: controller_message::Msg) {
    out.send(Ok(ControllerMessage { msg: Some(m) }))
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn join_then_stream_executes_heartbeats_and_resyncs() {
    let ca = pxfleet_tls::Ca::generate("pxfleet test CA").unwrap();
    let server = ca
        .issue_server(&["127.0.0.1".to_string()])
        .unwrap()
        .into_bundle(ca.cert_pem());
    let server_tls =
        pxfleet_tls::server_config(&server, Arc::new(pxfleet_tls::NoRevocation)).unwrap();
    let token = pxfleet_tls::JoinToken::generate(&ca.fingerprint_sha256())
        .unwrap()
        .reveal();
    let (conns_tx, mut conns) = mpsc::unbounded_channel();
    let svc = TestController {
        ca,
        token: token.clone(),
        conns: conns_tx,
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("https://{}", listener.local_addr().unwrap());
    let router = tonic::transport::Server::builder()
        .add_service(v1::agent_service_server::AgentServiceServer::new(svc));
    tokio::spawn(pxfleet_tls::serve_tls(
        router,
        listener,
        server_tls,
        std::future::pending(),
    ));

    // --- join ---
    let dir = tempfile::tempdir().unwrap();
    let wrong = pxfleet_tls::JoinToken::generate(&"ab".repeat(32))
        .unwrap()
        .reveal();
    assert!(
        pxfleet_agent::join(&url, &wrong, "pve1", dir.path())
            .await
            .is_err(),
        "a token pinning another CA must fail"
    );
    let joined = pxfleet_agent::join(&url, &token, "pve1", dir.path())
        .await
        .unwrap();
    let mut config = AgentConfig::load(&joined.config_path).unwrap();
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&config.key).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    config.heartbeat_secs = 1;

    // --- run against an in-memory node ---
    let tmpl = tempfile::tempdir().unwrap();
    std::fs::write(tmpl.path().join("t.tar.zst"), b"t").unwrap();
    let node = common::fake_node(tmpl.path().to_path_buf(), Duration::ZERO);
    node.insert(150, "stopped", &[("hostname", "legacy"), ("memory", "256")]);
    let bundle = pxfleet_tls::Bundle::read(&pxfleet_tls::BundlePaths {
        ca: config.ca.clone(),
        cert: config.cert.clone(),
        key: config.key.clone(),
    })
    .unwrap();
    let tls = pxfleet_tls::client_config(&bundle).unwrap();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let agent = tokio::spawn(pxfleet_agent::run_with(config, node.clone(), tls, async {
        let _ = stop_rx.await;
    }));

    let (out, mut inbound) = tokio::time::timeout(Duration::from_secs(15), conns.recv())
        .await
        .unwrap()
        .unwrap();
    let hello = next_matching(&mut inbound, |m| match m {
        agent_message::Msg::Hello(h) => Some(h),
        _ => None,
    })
    .await;
    assert_eq!(hello.node, "pve1");
    let inv = hello.inventory.unwrap();
    assert_eq!(inv.pve_version, "9.0.3");
    assert_eq!(inv.containers.len(), 1);
    assert_eq!(inv.containers[0].vm_id, 150);
    assert!(!inv.containers[0].managed);

    send(
        &out,
        controller_message::Msg::Welcome(v1::Welcome {
            node: "pve1".into(),
            protocol_version: 1,
            heartbeat_interval_seconds: 1,
            max_parallel_operations: 4,
        }),
    )
    .await;
    let spec = v1::ContainerSpec {
        fleet: "dev".into(),
        name: "dev-web".into(),
        vm_id: 160,
        hostname: "dev-web".into(),
        memory_mib: 512,
        disk_size_gib: 4,
        datastore_id: "local-zfs".into(),
        template_volid: "local:vztmpl/t.tar.zst".into(),
        unprivileged: true,
        interfaces: vec![v1::NetworkInterface {
            name: "eth0".into(),
            bridge: "vmbr0".into(),
            ipv4: Some(v1::IpConfig {
                mode: v1::IpMode::Static as i32,
                address: "10.77.0.16/24".into(),
                gateway: String::new(),
            }),
            ..Default::default()
        }],
        ..Default::default()
    };
    send(
        &out,
        controller_message::Msg::Operation(v1::Operation {
            op_id: "op-1".into(),
            vm_id: 160,
            attempt: 1,
            kind: Some(v1::operation::Kind::Create(v1::CreateContainer {
                spec: Some(spec),
                start: true,
                ..Default::default()
            })),
            ..Default::default()
        }),
    )
    .await;
    // The final update and the observation delta for vm 160 both arrive (in either order).
    let mut done = None;
    let mut delta_seen = false;
    while done.is_none() || !delta_seen {
        let m = next_matching(&mut inbound, Some).await;
        match m {
            agent_message::Msg::OperationUpdate(u)
                if u.op_id == "op-1" && u.state != v1::OperationState::Running as i32 =>
            {
                done = Some(u)
            }
            agent_message::Msg::Observation(o) if !o.full => {
                delta_seen |= o.containers.iter().any(|c| c.vm_id == 160)
            }
            _ => {}
        }
    }
    let done = done.unwrap();
    assert_eq!(
        done.state,
        v1::OperationState::Succeeded as i32,
        "error: {}",
        done.error
    );
    assert_eq!(done.vm_id, 160);
    let ct = done.container.unwrap();
    assert!(ct.managed);
    assert_eq!(ct.power, v1::PowerState::Running as i32);
    assert_eq!(ct.addresses, vec!["10.77.0.16/24".to_string()]);
    assert_eq!(ct.config.as_ref().unwrap().name, "dev-web");

    let hb = next_matching(&mut inbound, |m| match m {
        agent_message::Msg::Heartbeat(h) => Some(h),
        _ => None,
    })
    .await;
    assert!(hb.seq >= 1);
    // the node's memory less what its two containers have (256 + 512 MiB)
    assert_eq!(
        hb.memory_free_bytes,
        pxfleet_agent::mem_node::NODE_MEMORY_BYTES - (768 << 20),
        "heartbeats carry free memory"
    );

    // The controller drops the stream: the agent reconnects and resyncs, re-reporting the unacknowledged result.
    drop(out);
    drop(inbound);
    let (out2, mut inbound2) = tokio::time::timeout(Duration::from_secs(15), conns.recv())
        .await
        .unwrap()
        .unwrap();
    let hello2 = next_matching(&mut inbound2, |m| match m {
        agent_message::Msg::Hello(h) => Some(h),
        _ => None,
    })
    .await;
    let vmids: Vec<u32> = hello2
        .inventory
        .unwrap()
        .containers
        .iter()
        .map(|c| c.vm_id)
        .collect();
    assert_eq!(vmids, vec![150, 160]);
    let op = hello2
        .operations
        .iter()
        .find(|o| o.op_id == "op-1")
        .expect("unacked op re-reported");
    assert_eq!(op.state, v1::OperationState::Succeeded as i32);

    // Re-sent after the reconnect: answered from the journal, no second create.
    send(
        &out2,
        controller_message::Msg::Ack(v1::Ack {
            heartbeat_seq: 0,
            op_ids: vec![],
        }),
    )
    .await;
    send(
        &out2,
        controller_message::Msg::Operation(v1::Operation {
            op_id: "op-1".into(),
            vm_id: 160,
            kind: Some(v1::operation::Kind::Start(v1::StartContainer {})),
            ..Default::default()
        }),
    )
    .await;
    let again = next_matching(&mut inbound2, |m| match m {
        agent_message::Msg::OperationUpdate(u) if u.op_id == "op-1" => Some(u),
        _ => None,
    })
    .await;
    assert_eq!(again.state, v1::OperationState::Succeeded as i32);
    assert_eq!(node.calls("create"), 1);

    stop_tx.send(()).unwrap();
    tokio::time::timeout(Duration::from_secs(10), agent)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
}
