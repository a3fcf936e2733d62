//! The real controller on 127.0.0.1:0 with real mutual TLS: an admin client (from `init`'s bundle), a fake agent
//! that enrols with a join token and speaks the Connect stream, and the role refusals.

use std::time::Duration;

use pxfleet_controller::test_harness::{self, TestController};
use pxfleet_controller::Config;
use pxfleet_proto::v1 as pb;
use pxfleet_proto::v1::agent_service_client::AgentServiceClient;
use pxfleet_proto::v1::fleet_service_client::FleetServiceClient;
use pxfleet_tls::{Bundle, Ca};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::mpsc;
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

async fn start() -> Env {
    let (dir, fingerprint) = test_harness::init_data_dir();
    start_in(dir, fingerprint).await
}

/// Starts (or restarts) a controller on an initialised data directory.
async fn start_in(dir: tempfile::TempDir, fingerprint: String) -> Env {
    let mut config = test_harness::base_config(dir.path());
    test_harness::fast_reconciler(&mut config);
    config.reconciler.heartbeat_timeout_secs = 1;
    Env(TestController::start_in(dir, fingerprint, config).await)
}

impl Env {
    async fn admin(&self) -> FleetServiceClient<Channel> {
        self.0.admin_client().await
    }
    /// Enrols `node` with a fresh token; returns the node bundle.
    async fn enroll(&self, node: &str) -> Bundle {
        let token = self
            .admin()
            .await
            .create_join_token(pb::CreateJoinTokenRequest {
                ttl_seconds: 60,
                node: node.into(),
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(token.ca_fingerprint, self.ca_fingerprint);
        let kc = pxfleet_tls::generate_key_and_csr(node).unwrap();
        let mut agent = AgentServiceClient::new(self.anonymous().await);
        let resp = agent
            .enroll(pb::EnrollRequest {
                token: token.token.clone(),
                node: node.into(),
                csr_pem: kc.csr_pem.clone(),
            })
            .await
            .unwrap()
            .into_inner();
        // the token is single-use
        let again = agent
            .enroll(pb::EnrollRequest {
                token: token.token,
                node: node.into(),
                csr_pem: kc.csr_pem,
            })
            .await
            .unwrap_err();
        assert_eq!(again.code(), Code::PermissionDenied, "{again:?}");
        Bundle {
            ca_pem: resp.ca_pem,
            cert_pem: resp.cert_pem,
            key_pem: kc.key_pem,
        }
    }
    /// Stops the server; returns the data directory (and CA fingerprint) for a restart.
    async fn stop(self) -> (tempfile::TempDir, String) {
        self.0.stop(Duration::from_secs(10)).await
    }
}

fn inventory(node: &str, unmanaged_vm_id: u32) -> pb::Inventory {
    pb::Inventory {
        node: node.into(),
        pve_version: "9.0.3".into(),
        cores: 8,
        memory_total_bytes: 16 << 30,
        memory_free_bytes: 12 << 30,
        storages: vec![
            pb::Storage {
                id: "local-lvm".into(),
                content: vec!["rootdir".into(), "images".into()],
                total_bytes: 100 << 30,
                avail_bytes: 80 << 30,
                active: true,
                enabled: true,
                ..Default::default()
            },
            pb::Storage {
                id: "local".into(),
                content: vec!["vztmpl".into(), "iso".into()],
                total_bytes: 50 << 30,
                avail_bytes: 40 << 30,
                active: true,
                enabled: true,
                ..Default::default()
            },
        ],
        bridges: vec![pb::Bridge {
            name: "vmbr0".into(),
            active: true,
            ..Default::default()
        }],
        containers: vec![pb::ObservedContainer {
            vm_id: unmanaged_vm_id,
            power: pb::PowerState::Running as i32,
            config: Some(pb::ContainerSpec {
                hostname: "handmade".into(),
                ..Default::default()
            }),
            node: node.into(),
            ..Default::default()
        }],
        ..Default::default()
    }
}

/// A fake agent: sends Hello, then answers every operation with success.
struct FakeAgent {
    tx: mpsc::Sender<pb::AgentMessage>,
    rx: tonic::Streaming<pb::ControllerMessage>,
}

impl FakeAgent {
    async fn connect(env: &Env, bundle: &Bundle, node: &str) -> Result<FakeAgent, tonic::Status> {
        let mut client = AgentServiceClient::new(env.channel(bundle).await);
        let (tx, rx) = mpsc::channel(16);
        tx.send(msg(pb::agent_message::Msg::Hello(pb::Hello {
            node: node.into(),
            agent_version: "test".into(),
            protocol_version: 1,
            inventory: Some(inventory(node, 1000)),
            operations: vec![],
        })))
        .await
        .unwrap();
        let rx = client
            .connect(tokio_stream::wrappers::ReceiverStream::new(rx))
            .await?
            .into_inner();
        Ok(FakeAgent { tx, rx })
    }

    /// The next Operation (skipping acks), within 10 s.
    async fn next_op(&mut self) -> pb::Operation {
        loop {
            let m = tokio::time::timeout(Duration::from_secs(10), self.rx.message())
                .await
                .expect("an operation within 10 s")
                .unwrap()
                .expect("stream open");
            if let Some(pb::controller_message::Msg::Operation(op)) = m.msg {
                return op;
            }
        }
    }

    async fn finish(&self, op: &pb::Operation, container: Option<pb::ObservedContainer>) {
        self.tx
            .send(msg(pb::agent_message::Msg::OperationUpdate(
                pb::OperationUpdate {
                    op_id: op.op_id.clone(),
                    state: pb::OperationState::Succeeded as i32,
                    vm_id: op.vm_id,
                    container,
                    ..Default::default()
                },
            )))
            .await
            .unwrap();
    }
}

fn msg(m: pb::agent_message::Msg) -> pb::AgentMessage {
    pb::AgentMessage { msg: Some(m) }
}

const FLEET: &str = "fleet: dev
templates:
  ubuntu:
    url: http://192.0.2.1:1/ubuntu.tar.xz
    sha256: 3b1f00000000000000000000000000000000000000000000000000000000abcd
containers:
  web:
    template: ubuntu
    datastore_id: local-lvm
    memory: 1024
    ip_address: 10.0.0.5/24
    gateway: 10.0.0.1
";

fn submit_req(source: &str) -> pb::SubmitRequest {
    pb::SubmitRequest {
        file_name: "fleet.yaml".into(),
        source: source.into(),
        ..Default::default()
    }
}

async fn metrics_text(addr: std::net::SocketAddr) -> String {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).await.unwrap();
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn enrol_connect_submit_dispatch_and_converge() {
    let env = start().await;
    let node_bundle = env.enroll("n1").await;
    let mut agent = FakeAgent::connect(&env, &node_bundle, "n1").await.unwrap();
    let mut admin = env.admin().await;

    // the node is ready and shows its inventory
    let nodes = admin
        .get_nodes(pb::GetNodesRequest {})
        .await
        .unwrap()
        .into_inner()
        .nodes;
    assert_eq!(nodes.len(), 1);
    assert_eq!(nodes[0].status, pb::NodeStatus::Ready as i32);

    // a vm_id held by an unmanaged container is refused at plan
    let taken = FLEET.replace(
        "    template: ubuntu\n",
        "    template: ubuntu\n    vm_id: 1000\n",
    );
    let plan = admin
        .plan(pb::PlanRequest {
            file_name: "fleet.yaml".into(),
            source: taken,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(plan.plan_json.is_empty());
    assert!(
        plan.diagnostics.iter().any(|d| d.message.contains("1000")),
        "{:?}",
        plan.diagnostics
    );

    // submit: the template is seeded first, then the container created with a generated password
    let resp = admin.submit(submit_req(FLEET)).await.unwrap().into_inner();
    assert!(resp.diagnostics.is_empty(), "{:?}", resp.diagnostics);
    assert_eq!(resp.revision, 1);
    // the answer carries the plan it applied unless the client says it has it (pxctl)
    assert!(resp.plan_json.contains("\"web\""), "{}", resp.plan_json);
    let seed = agent.next_op().await;
    let Some(pb::operation::Kind::SeedTemplate(s)) = &seed.kind else {
        panic!("expected a seed: {seed:?}")
    };
    assert_eq!(s.file_name, "ubuntu.tar.xz");
    agent.finish(&seed, None).await;
    let create = agent.next_op().await;
    let Some(pb::operation::Kind::Create(c)) = &create.kind else {
        panic!("expected a create: {create:?}")
    };
    let spec = c.spec.clone().unwrap();
    // 1000 is taken by the unmanaged container: the allocator skips it
    assert_eq!(
        (spec.vm_id, spec.fleet.as_str(), spec.name.as_str()),
        (1001, "dev", "web")
    );
    assert_eq!(spec.template_volid, "local:vztmpl/ubuntu.tar.xz");
    assert!(spec.password.as_ref().is_some_and(|p| p.value.len() >= 16));
    let observed = pb::ObservedContainer {
        vm_id: 1001,
        power: pb::PowerState::Running as i32,
        managed: true,
        config: Some(pb::ContainerSpec {
            password: None,
            ..spec.clone()
        }),
        addresses: vec!["10.0.0.5/24".into()],
        node: "n1".into(),
        ..Default::default()
    };
    agent.finish(&create, Some(observed)).await;

    // converged: running, address reported; output hides the password unless asked
    let mut running = None;
    for _ in 0..100 {
        let cs = admin
            .get_containers(pb::GetContainersRequest::default())
            .await
            .unwrap()
            .into_inner()
            .containers;
        if cs
            .first()
            .is_some_and(|c| c.state == pb::ContainerState::Running as i32)
        {
            running = Some(cs[0].clone());
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let c = running.expect("container running");
    // Watch until settled ends with a settled event after the container's state
    let mut watch = admin
        .watch(pb::WatchRequest {
            fleet: "dev".into(),
            until_settled: true,
        })
        .await
        .unwrap()
        .into_inner();
    let mut events = vec![];
    while let Some(ev) = tokio::time::timeout(Duration::from_secs(10), watch.message())
        .await
        .unwrap()
        .unwrap()
    {
        events.push(ev);
    }
    assert!(events
        .iter()
        .any(|e| e.container == "web" && e.state == pb::ContainerState::Running as i32));
    assert!(events.last().is_some_and(|e| e.settled), "{events:?}");
    assert_eq!(
        (c.node.as_str(), c.vm_id, c.hostname.as_str()),
        ("n1", 1001, "web")
    );
    assert_eq!(c.addresses, vec!["10.0.0.5/24".to_string()]);
    let out = admin
        .output(pb::OutputRequest {
            fleet: "dev".into(),
            show_sensitive: false,
        })
        .await
        .unwrap()
        .into_inner();
    assert!(out.containers[0].has_password && out.containers[0].password.is_none());
    let out = admin
        .output(pb::OutputRequest {
            fleet: "dev".into(),
            show_sensitive: true,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        out.containers[0].password.as_ref().unwrap().value,
        spec.password.unwrap().value
    );

    // an unchanged resubmit plans nothing and sends no operation
    let plan = admin
        .plan(pb::PlanRequest {
            file_name: "fleet.yaml".into(),
            source: FLEET.into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(!plan.has_changes, "{}", plan.plan_json);
    assert_eq!(plan.base_revision, 1);
    let resp = admin.submit(submit_req(FLEET)).await.unwrap().into_inner();
    assert_eq!(
        (resp.revision, resp.operations.len()),
        (1, 0),
        "unchanged resubmit stored something"
    );

    // memory changed: an update with the new spec (answered without the plan: the client asked so)
    let resp = admin
        .submit(pb::SubmitRequest {
            omit_plan: true,
            ..submit_req(&FLEET.replace("memory: 1024", "memory: 2048"))
        })
        .await
        .unwrap()
        .into_inner();
    assert!(resp.diagnostics.is_empty(), "{:?}", resp.diagnostics);
    assert_eq!((resp.revision, resp.operations.len()), (2, 1));
    assert!(resp.plan_json.is_empty(), "{}", resp.plan_json);
    let update = agent.next_op().await;
    let Some(pb::operation::Kind::Update(u)) = &update.kind else {
        panic!("expected an update: {update:?}")
    };
    assert_eq!(u.spec.as_ref().unwrap().memory_mib, 2048);

    // the plan saved at revision 1 is refused now that the fleet is at revision 2
    let stale = admin
        .submit(pb::SubmitRequest {
            plan_json: plan.plan_json.clone(),
            expected_revision: Some(plan.base_revision),
            ..submit_req(FLEET)
        })
        .await
        .unwrap_err();
    assert_eq!(stale.code(), Code::Aborted, "{stale:?}");
    assert!(stale.message().contains("revision 1"), "{stale:?}");

    // metrics
    let text = metrics_text(env.metrics).await;
    assert!(text.contains("pxfleet_nodes{status=\"ready\"} 1"), "{text}");
    assert!(
        text.contains("pxfleet_operations_total{kind=\"create\",result=\"succeeded\"} 1"),
        "{text}"
    );

    // history keeps both revisions with their author
    let h = admin
        .history(pb::HistoryRequest {
            fleet: "dev".into(),
            limit: 0,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        h.revisions.iter().map(|r| r.revision).collect::<Vec<_>>(),
        vec![2, 1]
    );
    assert_eq!(h.revisions[0].author, "pxfleet://user/admin?role=admin");
    drop(agent);
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn roles_and_certificates_are_enforced() {
    let env = start().await;
    let node_bundle = env.enroll("n1").await;

    // a node certificate cannot call the fleet API
    let mut as_node = FleetServiceClient::new(env.channel(&node_bundle).await);
    let e = as_node.get_nodes(pb::GetNodesRequest {}).await.unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied, "{e:?}");

    // a node certificate speaks only for its own node
    let e = FakeAgent::connect(&env, &node_bundle, "n2")
        .await
        .err()
        .expect("refused");
    assert_eq!(e.code(), Code::PermissionDenied, "{e:?}");

    // a viewer can read but not submit
    let kc = pxfleet_tls::generate_key_and_csr("viewer").unwrap();
    let issued = env
        .admin()
        .await
        .issue_user_certificate(pb::IssueUserCertificateRequest {
            name: "val".into(),
            role: pb::UserRole::Viewer as i32,
            csr_pem: kc.csr_pem,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let viewer = Bundle {
        ca_pem: issued.ca_pem,
        cert_pem: issued.cert_pem,
        key_pem: kc.key_pem,
    };
    let mut as_viewer = FleetServiceClient::new(env.channel(&viewer).await);
    as_viewer
        .get_containers(pb::GetContainersRequest::default())
        .await
        .unwrap();
    let e = as_viewer.submit(submit_req(FLEET)).await.unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied, "{e:?}");
    let e = as_viewer
        .create_join_token(pb::CreateJoinTokenRequest::default())
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied, "{e:?}");

    // no client certificate: only enrolment is possible
    let mut anon = FleetServiceClient::new(env.anonymous().await);
    let e = anon.get_nodes(pb::GetNodesRequest {}).await.unwrap_err();
    assert_eq!(e.code(), Code::Unauthenticated, "{e:?}");

    // a certificate from another CA is refused at the handshake
    let other = Ca::generate("other").unwrap();
    let rogue = other
        .issue_client(
            &pxfleet_tls::Identity::user("admin", pxfleet_tls::Role::Admin, &[]).unwrap(),
            Duration::from_secs(3600),
        )
        .unwrap()
        .into_bundle(env.ca_pem());
    let refused =
        match pxfleet_tls::connect(&env.url, pxfleet_tls::client_config(&rogue).unwrap()).await {
            Err(_) => true,
            Ok(ch) => FleetServiceClient::new(ch)
                .get_nodes(pb::GetNodesRequest {})
                .await
                .is_err(),
        };
    assert!(refused, "a foreign certificate was accepted");

    // an expired token is refused
    let mut admin = env.admin().await;
    let token = admin
        .create_join_token(pb::CreateJoinTokenRequest {
            ttl_seconds: 1,
            node: String::new(),
        })
        .await
        .unwrap()
        .into_inner();
    env.clock.advance(Duration::from_millis(1100)); // the controller's clock, past the token's second
    let kc = pxfleet_tls::generate_key_and_csr("n3").unwrap();
    let e = AgentServiceClient::new(env.anonymous().await)
        .enroll(pb::EnrollRequest {
            token: token.token,
            node: "n3".into(),
            csr_pem: kc.csr_pem,
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied, "{e:?}");
    env.stop().await;
}

async fn node_status(admin: &mut FleetServiceClient<Channel>) -> i32 {
    admin
        .get_nodes(pb::GetNodesRequest {})
        .await
        .unwrap()
        .into_inner()
        .nodes[0]
        .status
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn down_node_gets_its_operations_when_it_returns_and_restart_keeps_state() {
    let env = start().await;
    let node_bundle = env.enroll("n1").await;
    let agent = FakeAgent::connect(&env, &node_bundle, "n1").await.unwrap();
    let mut admin = env.admin().await;
    assert_eq!(node_status(&mut admin).await, pb::NodeStatus::Ready as i32);
    drop(agent);
    // no heartbeat for longer than the timeout (1 s here, 30 s by default) on the controller's clock: down
    let mut down = false;
    for _ in 0..40 {
        env.clock.advance(Duration::from_millis(500));
        if node_status(&mut admin).await == pb::NodeStatus::Down as i32 {
            down = true;
            break;
        }
    }
    assert!(down, "node not marked down");
    // a submit while it is down (placement on a down node is named explicitly) stores its operations as pending
    let fleet = FLEET.replace(
        "    template: ubuntu\n",
        "    template: ubuntu\n    node: n1\n",
    );
    let resp = admin.submit(submit_req(&fleet)).await.unwrap().into_inner();
    assert!(resp.diagnostics.is_empty(), "{:?}", resp.diagnostics);
    assert_eq!(resp.operations.len(), 1);
    assert_eq!(resp.operations[0].state, pb::OperationState::Pending as i32);

    // the controller restarts: state intact
    let (dir, fp) = env.stop().await;
    let env = start_in(dir, fp).await;
    let mut admin = env.admin().await;
    let h = admin
        .history(pb::HistoryRequest {
            fleet: "dev".into(),
            limit: 0,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(h.revisions.len(), 1);
    let cs = admin
        .get_containers(pb::GetContainersRequest::default())
        .await
        .unwrap()
        .into_inner()
        .containers;
    assert_eq!((cs.len(), cs[0].vm_id), (1, 1001));

    // the node returns: its pending operation goes out
    let mut agent = FakeAgent::connect(&env, &node_bundle, "n1").await.unwrap();
    let op = agent.next_op().await;
    assert!(
        matches!(op.kind, Some(pb::operation::Kind::SeedTemplate(_))),
        "{op:?}"
    );
    assert_eq!(op.op_id, resp.operations[0].op_id);
    drop(agent);
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_controller_on_a_held_data_dir_is_refused_and_a_stopped_one_lets_go() {
    let env = start().await;
    // the first one serves (and so holds the data dir)
    let mut admin = env.admin().await;
    admin.get_nodes(pb::GetNodesRequest {}).await.unwrap();
    let config = Config {
        data_dir: env.dir.path().to_path_buf(),
        ..Config::default()
    };
    let second = pxfleet_controller::run(
        config,
        TcpListener::bind("127.0.0.1:0").await.unwrap(),
        TcpListener::bind("127.0.0.1:0").await.unwrap(),
        std::future::pending(),
    );
    // refused at once: the shutdown future never resolves, so only a refusal returns
    let err = tokio::time::timeout(Duration::from_secs(30), second)
        .await
        .expect("the second controller must not start serving")
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("is in use by another pxcontroller")
            && err.contains(&format!("pid {}?", std::process::id())),
        "{err}"
    );
    // the first one still serves
    admin.get_nodes(pb::GetNodesRequest {}).await.unwrap();
    drop(admin);
    // once stopped, its store is closed: sled's lock is free and a restart works
    let (dir, fp) = env.stop().await;
    assert!(pxfleet_controller::datadir::store_lock_free(&dir.path().join("db")).unwrap());
    let env = start_in(dir, fp).await;
    env.admin()
        .await
        .get_nodes(pb::GetNodesRequest {})
        .await
        .unwrap();
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn describe_history_and_nodes_carry_observed_source_and_serial() {
    let env = start().await;
    let node_bundle = env.enroll("n1").await;
    let serial = pxfleet_tls::CertInfo::from_pem(&node_bundle.cert_pem)
        .unwrap()
        .serial;
    let mut agent = FakeAgent::connect(&env, &node_bundle, "n1").await.unwrap();
    let mut admin = env.admin().await;

    // NodeInfo: the serial of the certificate the agent connected with; the cordon reason
    let n = admin
        .cordon_node(pb::CordonNodeRequest {
            node: "n1".into(),
            reason: "disk swap on friday".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(n.cordon_reason, "disk swap on friday");
    assert_eq!(n.cert_serial, serial.as_str());
    let n = admin
        .uncordon_node(pb::UncordonNodeRequest { node: "n1".into() })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(n.cordon_reason, "");
    let nodes = admin
        .get_nodes(pb::GetNodesRequest {})
        .await
        .unwrap()
        .into_inner()
        .nodes;
    assert_eq!(nodes[0].cert_serial, serial.as_str());

    // History: the file name and the sha256 of the submitted text
    let resp = admin.submit(submit_req(FLEET)).await.unwrap().into_inner();
    assert!(resp.diagnostics.is_empty(), "{:?}", resp.diagnostics);
    let h = admin
        .history(pb::HistoryRequest {
            fleet: "dev".into(),
            limit: 0,
        })
        .await
        .unwrap()
        .into_inner()
        .revisions;
    assert_eq!(h[0].file_name, "fleet.yaml");
    {
        use sha2::Digest as _;
        assert_eq!(
            h[0].source_sha256,
            hex::encode(sha2::Sha256::digest(FLEET.as_bytes()))
        );
    }

    // Describe: the observation as the agent reported it
    let seed = agent.next_op().await;
    agent.finish(&seed, None).await;
    let create = agent.next_op().await;
    let Some(pb::operation::Kind::Create(c)) = &create.kind else {
        panic!("expected a create: {create:?}")
    };
    let spec = c.spec.clone().unwrap();
    let observed = pb::ObservedContainer {
        vm_id: spec.vm_id,
        power: pb::PowerState::Running as i32,
        managed: true,
        config: Some(pb::ContainerSpec {
            password: None,
            ..spec.clone()
        }),
        addresses: vec!["10.0.0.5/24".into()],
        raw_config: [("memory".to_string(), "1024".to_string())].into(),
        node: "n1".into(),
        ..Default::default()
    };
    agent.finish(&create, Some(observed)).await;
    let mut got = None;
    for _ in 0..100 {
        let d = admin
            .describe_container(pb::DescribeContainerRequest {
                fleet: "dev".into(),
                name: "web".into(),
            })
            .await
            .unwrap()
            .into_inner();
        if d.observed.is_some() {
            got = d.observed;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let o = got.expect("describe shows the observation");
    assert_eq!((o.vm_id, o.node.as_str()), (spec.vm_id, "n1"));
    assert_eq!(o.power, pb::PowerState::Running as i32);
    assert_eq!(o.addresses, vec!["10.0.0.5/24".to_string()]);
    assert_eq!(o.raw_config.get("memory").map(String::as_str), Some("1024"));
    let cfg = o.config.unwrap();
    assert_eq!(
        (cfg.fleet.as_str(), cfg.name.as_str(), cfg.memory_mib),
        ("dev", "web", 1024)
    );
}

/// Runs the fake agent until `n` creates came (finishing seeds, destroys and starts on the way); finishes each
/// create with an observation of what it created. Returns the create specs by container name.
async fn creates(agent: &mut FakeAgent, node: &str, n: usize) -> Vec<pb::ContainerSpec> {
    let mut out = vec![];
    while out.len() < n {
        let op = agent.next_op().await;
        match &op.kind {
            Some(pb::operation::Kind::Create(c)) => {
                let spec = c.spec.clone().unwrap();
                let observed = pb::ObservedContainer {
                    vm_id: spec.vm_id,
                    power: pb::PowerState::Running as i32,
                    managed: true,
                    config: Some(pb::ContainerSpec {
                        password: None,
                        ..spec.clone()
                    }),
                    node: node.into(),
                    ..Default::default()
                };
                agent.finish(&op, Some(observed)).await;
                out.push(spec);
            }
            _ => agent.finish(&op, None).await,
        }
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn macs_are_allocated_avoid_reported_ones_and_survive_destroy() {
    let env = start().await;
    let node_bundle = env.enroll("n1").await;
    let mut client = AgentServiceClient::new(env.channel(&node_bundle).await);
    let (tx, rx) = mpsc::channel(16);
    // a container the controller does not manage holds the MAC web would get first
    let first = pxfleet_controller::scheduler::candidate_mac("dev", "web", 0, 0).to_string();
    let mut inv = inventory("n1", 900);
    let handmade = inv.containers[0].config.as_mut().unwrap();
    handmade.interfaces = vec![pb::NetworkInterface {
        name: "eth0".into(),
        bridge: "vmbr0".into(),
        mac: first.to_lowercase(),
        ..Default::default()
    }];
    tx.send(msg(pb::agent_message::Msg::Hello(pb::Hello {
        node: "n1".into(),
        agent_version: "test".into(),
        protocol_version: 1,
        inventory: Some(inv),
        operations: vec![],
    })))
    .await
    .unwrap();
    let rx = client
        .connect(tokio_stream::wrappers::ReceiverStream::new(rx))
        .await
        .unwrap()
        .into_inner();
    let mut agent = FakeAgent { tx, rx };
    let mut admin = env.admin().await;
    let fleet = format!(
        "{FLEET}  db:\n    template: ubuntu\n    datastore_id: local-lvm\n    memory: 512\n    ip_address: dhcp\n"
    );
    // the plan already shows the MACs the creates will carry
    let plan = admin
        .plan(pb::PlanRequest {
            file_name: "fleet.yaml".into(),
            source: fleet.clone(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(plan.diagnostics.is_empty(), "{:?}", plan.diagnostics);
    let resp = admin.submit(submit_req(&fleet)).await.unwrap().into_inner();
    assert!(resp.diagnostics.is_empty(), "{:?}", resp.diagnostics);
    let made = creates(&mut agent, "n1", 2).await;
    let mac = |s: &pb::ContainerSpec| s.interfaces[0].mac.to_uppercase();
    let placed: Vec<(String, u32, String)> = made
        .iter()
        .map(|s| (s.name.clone(), s.vm_id, mac(s)))
        .collect();
    for (name, _, m) in &placed {
        assert!(m.starts_with("BC:24:11:"), "{name}: {m}");
        assert!(plan.plan_json.contains(m.as_str()), "{m} not in the plan");
    }
    assert_ne!(placed[0].2, placed[1].2, "two containers share a MAC");
    assert_ne!(placed[1].2, first, "web got the MAC the node reports");
    // destroy the whole fleet; the agent destroys them
    admin
        .destroy(pb::DestroyRequest {
            fleet: "dev".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    for _ in 0..2 {
        let op = agent.next_op().await;
        assert!(
            matches!(op.kind, Some(pb::operation::Kind::Destroy(_))),
            "{op:?}"
        );
        agent.finish(&op, None).await;
    }
    // wait until the controller forgot them
    for _ in 0..100 {
        let cs = admin
            .get_containers(pb::GetContainersRequest::default())
            .await
            .unwrap()
            .into_inner()
            .containers;
        if cs.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // the same file again: same vm_ids, same MACs
    let resp = admin.submit(submit_req(&fleet)).await.unwrap().into_inner();
    assert!(resp.diagnostics.is_empty(), "{:?}", resp.diagnostics);
    let again: Vec<(String, u32, String)> = creates(&mut agent, "n1", 2)
        .await
        .iter()
        .map(|s| (s.name.clone(), s.vm_id, mac(s)))
        .collect();
    assert_eq!(again, placed);
    drop(agent);
    env.stop().await;
}
