//! Wire-level checks of the generated pxfleet.v1 code: messages round-trip through protobuf encoding, secrets are
//! redacted in `Debug`, and the generated AgentService client and server talk to each other over a real socket.

use std::pin::Pin;

use pxfleet_proto::v1::{
    self, agent_message,
    agent_service_client::AgentServiceClient,
    agent_service_server::{AgentService, AgentServiceServer},
    controller_message,
    fleet_service_client::FleetServiceClient,
    operation, seed_template, AgentMessage, ContainerSpec, ControllerMessage, EnrollRequest,
    EnrollResponse, IpConfig, IpMode, NetworkInterface, Operation, Secret,
};
use pxfleet_proto::Message;
use tokio_stream::{Stream, StreamExt};
use tonic::{Request, Response, Status, Streaming};

fn spec() -> ContainerSpec {
    ContainerSpec {
        fleet: "dev".into(),
        name: "dev-nextcloud".into(),
        vm_id: 2100,
        hostname: "dev-nextcloud".into(),
        cores: Some(4),
        memory_mib: 4096,
        swap_mib: 0,
        disk_size_gib: 16,
        datastore_id: "local-zfs".into(),
        template_volid: "local:vztmpl/ubuntu-25.04.tar.xz".into(),
        unprivileged: true,
        interfaces: vec![NetworkInterface {
            name: "eth0".into(),
            bridge: "vmbr0".into(),
            ipv4: Some(IpConfig {
                mode: IpMode::Static as i32,
                address: "192.168.7.100/24".into(),
                gateway: "192.168.7.1".into(),
            }),
            vlan_id: Some(7),
            ..Default::default()
        }],
        password: Some(Secret {
            value: "hunter2-very-secret".into(),
        }),
        tags: vec!["web".into()],
        ..Default::default()
    }
}

#[test]
fn operation_round_trips_through_the_wire_format() {
    let msg = ControllerMessage {
        msg: Some(controller_message::Msg::Operation(Operation {
            op_id: "op-1".into(),
            vm_id: 2100,
            deadline_unix_ms: 1_700_000_000_000,
            attempt: 1,
            kind: Some(operation::Kind::Create(v1::CreateContainer {
                spec: Some(spec()),
                start: true,
                wait_ipv4: true,
                wait_ipv6: false,
            })),
        })),
    };
    let bytes = msg.encode_to_vec();
    let back = ControllerMessage::decode(bytes.as_slice()).expect("decode");
    assert_eq!(back, msg);
    let Some(controller_message::Msg::Operation(op)) = back.msg else {
        panic!("not an operation: {back:?}");
    };
    let Some(operation::Kind::Create(create)) = op.kind else {
        panic!("not a create");
    };
    let spec = create.spec.expect("spec");
    assert_eq!(
        spec.interfaces[0].ipv4.as_ref().unwrap().mode(),
        IpMode::Static
    );
    assert_eq!(spec.password.unwrap().value, "hunter2-very-secret");
}

#[test]
fn seed_template_checksum_oneof_round_trips() {
    let op = Operation {
        op_id: "seed-1".into(),
        kind: Some(operation::Kind::SeedTemplate(v1::SeedTemplate {
            url: "http://127.0.0.1:8080/t.tar.xz".into(),
            checksum: Some(seed_template::Checksum::Sha512("ab".repeat(64))),
            storage: "local".into(),
            file_name: "t.tar.xz".into(),
            existing: false,
        })),
        ..Default::default()
    };
    let back = Operation::decode(op.encode_to_vec().as_slice()).unwrap();
    assert_eq!(back, op);
}

#[test]
fn hello_with_inventory_round_trips() {
    let hello = AgentMessage {
        msg: Some(agent_message::Msg::Hello(v1::Hello {
            node: "mk33".into(),
            protocol_version: pxfleet_proto::PROTOCOL_VERSION,
            inventory: Some(v1::Inventory {
                node: "mk33".into(),
                pve_version: "9.0.3".into(),
                cores: 16,
                memory_total_bytes: 64 << 30,
                storages: vec![v1::Storage {
                    id: "local-zfs".into(),
                    r#type: "zfspool".into(),
                    content: vec!["rootdir".into(), "images".into()],
                    avail_bytes: 100 << 30,
                    ..Default::default()
                }],
                containers: vec![v1::ObservedContainer {
                    vm_id: 100,
                    power: v1::PowerState::Running as i32,
                    managed: false,
                    ..Default::default()
                }],
                ..Default::default()
            }),
            ..Default::default()
        })),
    };
    let back = AgentMessage::decode(hello.encode_to_vec().as_slice()).unwrap();
    assert_eq!(back, hello);
}

#[test]
fn secrets_are_redacted_in_debug_output() {
    let text = format!("{:?}", spec());
    assert!(!text.contains("hunter2"), "password leaked: {text}");
    assert!(text.contains("<redacted>"));
    assert!(text.contains("dev-nextcloud"));
}

/// A minimal agent service: Enroll echoes the node, Connect answers Hello with Welcome and each heartbeat with Ack.
struct Echo;

type ControllerStream = Pin<Box<dyn Stream<Item = Result<ControllerMessage, Status>> + Send>>;

#[tonic::async_trait]
impl AgentService for Echo {
    async fn enroll(
        &self,
        request: Request<EnrollRequest>,
    ) -> Result<Response<EnrollResponse>, Status> {
        let req = request.into_inner();
        if req.token.is_empty() {
            return Err(Status::unauthenticated("token required"));
        }
        Ok(Response::new(EnrollResponse {
            cert_pem: format!("cert for {}", req.node),
            ..Default::default()
        }))
    }

    async fn renew(
        &self,
        _request: tonic::Request<pxfleet_proto::v1::RenewRequest>,
    ) -> Result<tonic::Response<EnrollResponse>, tonic::Status> {
        Err(tonic::Status::unimplemented(
            "renew is not part of this test",
        ))
    }

    type ConnectStream = ControllerStream;

    async fn connect(
        &self,
        request: Request<Streaming<AgentMessage>>,
    ) -> Result<Response<Self::ConnectStream>, Status> {
        let mut inbound = request.into_inner();
        let out = async_stream_like(move |tx| async move {
            while let Some(Ok(msg)) = inbound.next().await {
                let reply = match msg.msg {
                    Some(agent_message::Msg::Hello(h)) => {
                        controller_message::Msg::Welcome(v1::Welcome {
                            node: h.node,
                            protocol_version: pxfleet_proto::PROTOCOL_VERSION,
                            heartbeat_interval_seconds: 5,
                            max_parallel_operations: 4,
                        })
                    }
                    Some(agent_message::Msg::Heartbeat(hb)) => {
                        controller_message::Msg::Ack(v1::Ack {
                            heartbeat_seq: hb.seq,
                            op_ids: vec![],
                        })
                    }
                    _ => continue,
                };
                if tx
                    .send(Ok(ControllerMessage { msg: Some(reply) }))
                    .await
                    .is_err()
                {
                    break;
                }
            }
        });
        Ok(Response::new(out))
    }
}

fn async_stream_like<F, Fut>(f: F) -> ControllerStream
where
    F: FnOnce(tokio::sync::mpsc::Sender<Result<ControllerMessage, Status>>) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let (tx, rx) = tokio::sync::mpsc::channel(8);
    tokio::spawn(f(tx));
    Box::pin(tokio_stream::wrappers::ReceiverStream::new(rx))
}

#[tokio::test]
async fn generated_agent_client_and_server_talk_over_a_socket() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(AgentServiceServer::new(Echo))
            .serve_with_incoming_shutdown(
                tokio_stream::wrappers::TcpListenerStream::new(listener),
                async {
                    let _ = stop_rx.await;
                },
            ),
    );

    let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut client = AgentServiceClient::new(channel);

    let resp = client
        .enroll(EnrollRequest {
            token: "t".into(),
            node: "mk33".into(),
            csr_pem: String::new(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(resp.cert_pem, "cert for mk33");
    let err = client.enroll(EnrollRequest::default()).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::Unauthenticated);

    let outbound = tokio_stream::iter(vec![
        AgentMessage {
            msg: Some(agent_message::Msg::Hello(v1::Hello {
                node: "mk33".into(),
                ..Default::default()
            })),
        },
        AgentMessage {
            msg: Some(agent_message::Msg::Heartbeat(v1::Heartbeat {
                seq: 41,
                ..Default::default()
            })),
        },
    ]);
    let mut inbound = client.connect(outbound).await.unwrap().into_inner();
    let first = inbound.next().await.unwrap().unwrap();
    match first.msg {
        Some(controller_message::Msg::Welcome(w)) => assert_eq!(w.node, "mk33"),
        other => panic!("expected Welcome, got {other:?}"),
    }
    let second = inbound.next().await.unwrap().unwrap();
    match second.msg {
        Some(controller_message::Msg::Ack(a)) => assert_eq!(a.heartbeat_seq, 41),
        other => panic!("expected Ack, got {other:?}"),
    }

    let _ = stop_tx.send(());
    server.await.unwrap().unwrap();
}

#[test]
fn fleet_service_client_and_state_enums_are_generated() {
    // The fleet API's generated client is a usable type (pxctl builds on it); enums keep their proto names.
    let _ = FleetServiceClient::<tonic::transport::Channel>::new;
    assert_eq!(
        v1::ContainerState::from_str_name("CONTAINER_STATE_RUNNING"),
        Some(v1::ContainerState::Running)
    );
    assert_eq!(
        v1::NodeStatus::Cordoned.as_str_name(),
        "NODE_STATUS_CORDONED"
    );
}
