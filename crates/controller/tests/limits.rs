//! The controller's limits against a bad or hostile client (controller.toml `[limits]`), each tried against
//! the real controller on 127.0.0.1:0 with real mutual TLS and small limits: the error names the config key.

use std::time::Duration;

use pxfleet_controller::limits::LimitsConfig;
use pxfleet_controller::test_harness::TestController;
use pxfleet_proto::v1 as pb;
use pxfleet_proto::v1::agent_service_client::AgentServiceClient;
use pxfleet_proto::v1::fleet_service_client::FleetServiceClient;
use pxfleet_tls::Bundle;
use tonic::transport::Channel;
use tonic::Code;

/// The in-process controller of [`pxfleet_controller::test_harness`] with the helpers these tests use.
struct Env(TestController);

impl std::ops::Deref for Env {
    type Target = TestController;
    fn deref(&self) -> &TestController {
        &self.0
    }
}

async fn start(limits: LimitsConfig) -> Env {
    Env(TestController::start_with(|c| c.limits = limits).await)
}

impl Env {
    async fn admin(&self) -> FleetServiceClient<Channel> {
        self.0
            .admin_client()
            .await
            .max_encoding_message_size(64 << 20)
    }
    async fn enroller(&self) -> AgentServiceClient<Channel> {
        AgentServiceClient::new(self.anonymous().await)
    }
    async fn token(&self, node: &str) -> String {
        self.admin()
            .await
            .create_join_token(pb::CreateJoinTokenRequest {
                ttl_seconds: 60,
                node: node.into(),
            })
            .await
            .unwrap()
            .into_inner()
            .token
    }
    async fn stop(self) {
        self.0.stop(Duration::from_secs(30)).await;
    }
}

fn fleet_with(containers: usize, padding: usize) -> String {
    let mut s = format!(
        "# {}\nfleet: dev\ntemplates:\n  ubuntu:\n    url: http://192.0.2.1:1/ubuntu.tar.xz\n    sha256: {}\ncontainers:\n",
        "x".repeat(padding),
        "ab".repeat(32)
    );
    for i in 0..containers {
        s.push_str(&format!(
            "  c{i}:\n    template: ubuntu\n    datastore_id: local-lvm\n"
        ));
    }
    s
}

fn submit(source: String) -> pb::SubmitRequest {
    pb::SubmitRequest {
        file_name: "fleet.yaml".into(),
        source,
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_fleets_and_messages_are_refused_with_the_limit_named() {
    let env = start(LimitsConfig {
        max_fleet_bytes: 4096,
        max_fleet_containers: 3,
        max_message_bytes: 64 * 1024,
        ..LimitsConfig::default()
    })
    .await;
    let mut admin = env.admin().await;
    // bytes: refused before it is parsed
    let err = admin.submit(submit(fleet_with(1, 5000))).await.unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
    assert!(err.message().contains("limits.max_fleet_bytes"), "{err:?}");
    let err = admin
        .plan(pb::PlanRequest {
            file_name: "fleet.yaml".into(),
            source: fleet_with(1, 5000),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert!(err.message().contains("limits.max_fleet_bytes"), "{err:?}");
    // containers
    let err = admin.submit(submit(fleet_with(4, 0))).await.unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
    assert!(
        err.message().contains("declares 4 containers")
            && err.message().contains("limits.max_fleet_containers"),
        "{err:?}"
    );
    // a whole gRPC message above max_message_bytes never reaches a handler
    let err = admin
        .submit(submit(fleet_with(1, 100 * 1024)))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::OutOfRange, "{err:?}");
    assert!(err.message().contains("too large"), "{err:?}");
    // nothing was stored, and the controller still answers
    let fleets = admin
        .get_fleets(pb::GetFleetsRequest {})
        .await
        .unwrap()
        .into_inner();
    assert!(fleets.fleets.is_empty(), "{fleets:?}");
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_streams_per_identity_are_bounded_and_freed_when_closed() {
    let env = start(LimitsConfig {
        max_watch_streams_per_identity: 2,
        ..LimitsConfig::default()
    })
    .await;
    let mut admin = env.admin().await;
    let watch = || pb::WatchRequest {
        fleet: "dev".into(),
        until_settled: false,
    };
    let first = admin.watch(watch()).await.unwrap().into_inner();
    let second = admin.watch(watch()).await.unwrap().into_inner();
    let err = admin.watch(watch()).await.unwrap_err();
    assert_eq!(err.code(), Code::ResourceExhausted, "{err:?}");
    assert!(
        err.message()
            .contains("limits.max_watch_streams_per_identity"),
        "{err:?}"
    );
    // closing one frees its slot (the controller notices the stream is gone)
    drop(first);
    let mut freed = false;
    for _ in 0..100 {
        match admin.watch(watch()).await {
            Ok(_) => {
                freed = true;
                break;
            }
            Err(e) if e.code() == Code::ResourceExhausted => {
                tokio::time::sleep(Duration::from_millis(50)).await
            }
            Err(e) => panic!("{e:?}"),
        }
    }
    assert!(freed, "a closed Watch stream kept its slot");
    // a stream still open does not hold up the controller's graceful shutdown: it ends
    let mut second = second;
    env.stop().await;
    assert!(
        matches!(second.message().await, Ok(None) | Err(_)),
        "the Watch stream outlived the controller"
    );
    drop(admin);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_enrolments_from_one_address_are_rate_limited_even_for_a_good_token() {
    let env = start(LimitsConfig {
        enroll_failures_per_peer_per_minute: 3,
        ..LimitsConfig::default()
    })
    .await;
    let good = env.token("n1").await;
    let mut agent = env.enroller().await;
    let kc = pxfleet_tls::generate_key_and_csr("n1").unwrap();
    let enroll = |token: String| pb::EnrollRequest {
        token,
        node: "n1".into(),
        csr_pem: kc.csr_pem.clone(),
    };
    // a guessing attacker: same id, wrong secrets
    let parts: Vec<&str> = good.split('.').collect();
    for i in 0..3 {
        let guess = format!(
            "{}.{}.{}.{}",
            parts[0],
            parts[1],
            &format!("{i:x}").repeat(64)[..64],
            parts[3]
        );
        let err = agent.enroll(enroll(guess)).await.unwrap_err();
        assert_eq!(err.code(), Code::PermissionDenied, "{err:?}");
    }
    let err = agent.enroll(enroll(good.clone())).await.unwrap_err();
    assert_eq!(err.code(), Code::ResourceExhausted, "{err:?}");
    assert!(
        err.message().contains("127.0.0.1")
            && err
                .message()
                .contains("limits.enroll_failures_per_peer_per_minute"),
        "{err:?}"
    );
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_that_does_not_finish_in_request_timeout_secs_is_cancelled() {
    let env = start(LimitsConfig {
        request_timeout_secs: 1,
        ..LimitsConfig::default()
    })
    .await;
    // a node that opens its Connect stream and never says Hello holds the handler until the deadline
    let token = env.token("n1").await;
    let kc = pxfleet_tls::generate_key_and_csr("n1").unwrap();
    let resp = env
        .enroller()
        .await
        .enroll(pb::EnrollRequest {
            token,
            node: "n1".into(),
            csr_pem: kc.csr_pem.clone(),
        })
        .await
        .unwrap()
        .into_inner();
    let node = Bundle {
        ca_pem: resp.ca_pem,
        cert_pem: resp.cert_pem,
        key_pem: kc.key_pem,
    };
    let mut client = AgentServiceClient::new(env.channel(&node).await);
    let silent = futures::stream::pending::<pb::AgentMessage>();
    let err = tokio::time::timeout(Duration::from_secs(60), client.connect(silent))
        .await
        .expect("the controller answered a silent stream")
        .unwrap_err();
    assert_eq!(err.code(), Code::Cancelled, "{err:?}");
    assert!(err.message().contains("Timeout expired"), "{err:?}");
    drop(client);
    // the deadline bounds the time until a response starts, not a stream's life: an agent stream opened
    // properly is still answered after it
    let mut client = AgentServiceClient::new(env.channel(&node).await);
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    let msg = |m| pb::AgentMessage { msg: Some(m) };
    tx.send(msg(pb::agent_message::Msg::Hello(pb::Hello {
        node: "n1".into(),
        agent_version: "test".into(),
        protocol_version: pxfleet_proto::PROTOCOL_VERSION,
        inventory: Some(pb::Inventory {
            node: "n1".into(),
            ..Default::default()
        }),
        operations: vec![],
    })))
    .await
    .unwrap();
    let mut inbound = client
        .connect(tokio_stream::wrappers::ReceiverStream::new(rx))
        .await
        .expect("a Hello in time is served")
        .into_inner();
    tokio::time::sleep(Duration::from_millis(2500)).await;
    tx.send(msg(pb::agent_message::Msg::Heartbeat(pb::Heartbeat {
        seq: 7,
        ..Default::default()
    })))
    .await
    .unwrap();
    loop {
        let m = tokio::time::timeout(Duration::from_secs(60), inbound.message())
            .await
            .expect("no answer within a minute")
            .expect("the agent stream was cut")
            .expect("the agent stream ended");
        if let Some(pb::controller_message::Msg::Ack(a)) = m.msg {
            if a.heartbeat_seq == 7 {
                break;
            }
        }
    }
    drop(tx);
    drop(inbound);
    env.stop().await;
}
