//! The security suite: one test per attack, each against a real cluster (controller, agents and pvesim nodes on
//! loopback, real mutual TLS). Who may do what (roles, node certificates on the fleet API, clients without a
//! certificate or with one from another CA), one-time expiring join tokens, a node speaking for another node,
//! fleet values aimed at pct's arguments, path traversal in templates, oversized inputs, and what a copy of
//! the controller's data directory reveals. docs/security.md maps each threat to its test.

use std::path::{Path, PathBuf};
use std::time::Duration;

use pxfleet_proto::v1::agent_service_client::AgentServiceClient;
use pxfleet_proto::v1::fleet_service_client::FleetServiceClient;
use pxfleet_tests::{fleet_yaml, v1 as pb, wait_until, Cluster, ClusterOptions, HarnessError};
use pxfleet_tls::{Bundle, Ca, Identity, Role};
use tonic::Code;

fn small_fleet(name: &str) -> String {
    fleet_yaml(name, "  x-1: {node: mk33, memory: 512, disk_size: 4}\n")
}

fn submit_req(yaml: &str) -> pb::SubmitRequest {
    pb::SubmitRequest {
        file_name: "fleet.yaml".into(),
        source: yaml.into(),
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn viewer_reads_but_cannot_submit_or_destroy() {
    let c = Cluster::start(1).await.expect("cluster");
    let viewer = c.issue_user("vera", Role::Viewer).await.unwrap();
    let mut api = c.api_as(&viewer).await.unwrap();
    let e = api.submit(submit_req(&small_fleet("v"))).await.unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied, "{e:?}");
    let e = api
        .destroy(pb::DestroyRequest {
            fleet: "v".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied, "{e:?}");
    // Reading is what a viewer is for.
    let nodes = api
        .get_nodes(pb::GetNodesRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(nodes.nodes.len(), 1);
    // What the viewer sees with pxctl: a refusal that names the problem, and a non-zero exit.
    let vdir = c.dir.path().join("viewer");
    let paths = pxfleet_tls::BundlePaths::in_dir(&vdir, "vera");
    viewer.write(&paths).unwrap();
    let cfg = vdir.join("pxctl.toml");
    std::fs::write(
        &cfg,
        format!(
            "controller = \"{}\"\nca = {:?}\ncert = {:?}\nkey = {:?}\n",
            c.url, paths.ca, paths.cert, paths.key
        ),
    )
    .unwrap();
    let fleet = c.write_fleet("viewer-fleet.yaml", &small_fleet("v"));
    let (code, out, err) = c
        .pxctl(&[
            "--config",
            cfg.to_str().unwrap(),
            "submit",
            fleet.to_str().unwrap(),
            "-y",
        ])
        .await;
    assert_ne!(code, 0, "a viewer's pxctl submit succeeded: {out}");
    assert!(
        err.to_lowercase().contains("permission") || err.to_lowercase().contains("not allowed"),
        "unclear refusal: {err}"
    );
    let (code, out, err) = c
        .pxctl(&["--config", cfg.to_str().unwrap(), "get", "nodes"])
        .await;
    assert_eq!(code, 0, "a viewer cannot list nodes: {out}\n{err}");
    // Nothing was stored by the refused submits.
    assert!(c.containers("v").await.unwrap().is_empty());
    // An operator may submit (the same request, another role).
    let operator = c.issue_user("otto", Role::Operator).await.unwrap();
    let r = c
        .api_as(&operator)
        .await
        .unwrap()
        .submit(submit_req(&small_fleet("v")))
        .await
        .unwrap()
        .into_inner();
    assert!(r.diagnostics.is_empty(), "{:?}", r.diagnostics);
    assert_eq!(r.revision, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_certificate_cannot_call_the_fleet_api() {
    let c = Cluster::start(1).await.expect("cluster");
    let node = c.node("mk33").bundle().unwrap();
    let mut api = c.api_as(&node).await.unwrap();
    let e = api
        .get_containers(pb::GetContainersRequest::default())
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied, "{e:?}");
    let e = api.submit(submit_req(&small_fleet("n"))).await.unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied, "{e:?}");
    let e = api
        .create_join_token(pb::CreateJoinTokenRequest {
            ttl_seconds: 60,
            node: "evil".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied, "{e:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_without_certificate_or_from_another_ca_is_refused() {
    let c = Cluster::start(1).await.expect("cluster");
    let ca_pem = c.admin().ca_pem.clone();

    // No client certificate: the TLS session is allowed (enrolment needs it), the fleet API is not.
    let tls = pxfleet_tls::anonymous_client_config(&ca_pem).unwrap();
    let channel = pxfleet_tls::connect(&c.url, tls).await.unwrap();
    let e = FleetServiceClient::new(channel)
        .get_containers(pb::GetContainersRequest::default())
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::Unauthenticated, "{e:?}");

    // An admin certificate from another CA: refused at the handshake, so no call gets through.
    let other = Ca::generate("someone else's CA").unwrap();
    let id = Identity::user("admin", Role::Admin, &[]).unwrap();
    let creds = other
        .issue_client(&id, pxfleet_tls::DEFAULT_CLIENT_VALIDITY)
        .unwrap();
    let forged = Bundle {
        ca_pem: ca_pem.clone(), // trusts the real server, presents the foreign client certificate
        ..creds.into_bundle(other.cert_pem())
    };
    let result = match c.api_as(&forged).await {
        Err(e) => Err(e.to_string()),
        Ok(mut api) => api
            .get_containers(pb::GetContainersRequest::default())
            .await
            .map(|_| ())
            .map_err(|e| format!("{e:?}")),
    };
    let err = result.expect_err("a certificate from another CA was accepted");
    assert!(
        !err.contains("PermissionDenied"),
        "refused too late (after the handshake): {err}"
    );

    // pxctl with no certificate configured says what is missing instead of connecting anonymously.
    let cfg = c.dir.path().join("anon.toml");
    std::fs::write(
        &cfg,
        format!(
            "controller = \"{}\"\nca = \"{}\"\n",
            c.url,
            c.controller_dir.join("pki/ca.pem").display()
        ),
    )
    .unwrap();
    let (code, out, err) = c
        .pxctl(&["--config", cfg.to_str().unwrap(), "get", "containers"])
        .await;
    assert_ne!(code, 0, "pxctl without a certificate succeeded: {out}");
    assert!(err.contains("cert"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn used_expired_or_other_node_join_tokens_are_refused() {
    let c = Cluster::start(1).await.expect("cluster");
    let dir = c.dir.path().to_path_buf();

    let token = c.join_token("mk90", 600).await.unwrap();
    c.join("mk90", &dir.join("first"), &token.token)
        .await
        .expect("a fresh token enrols");
    assert!(dir.join("first/node.pem").exists());
    let again = c.join("mk90", &dir.join("second"), &token.token).await;
    assert_refused(again, "a used token");
    assert!(!dir.join("second/node.pem").exists());

    let short = c.join_token("mk91", 1).await.unwrap();
    tokio::time::sleep(Duration::from_millis(2100)).await;
    assert_refused(
        c.join("mk91", &dir.join("late"), &short.token).await,
        "an expired token",
    );
    assert!(!dir.join("late/node.pem").exists());

    let other = c.join_token("mk92", 600).await.unwrap();
    assert_refused(
        c.join("mk93", &dir.join("wrong"), &other.token).await,
        "a token for another node",
    );

    // The refusals left no node behind.
    let names: Vec<String> = c
        .nodes_info()
        .await
        .unwrap()
        .into_iter()
        .map(|n| n.name)
        .collect();
    assert!(
        !names.iter().any(|n| n == "mk91" || n == "mk93"),
        "{names:?}"
    );
}

fn assert_refused(r: Result<String, HarnessError>, what: &str) {
    match r {
        Ok(out) => panic!("{what} was accepted: {out}"),
        Err(HarnessError::Command { stderr, .. }) => {
            assert!(
                stderr.contains("refused") || stderr.contains("denied"),
                "{what}: unclear error: {stderr}"
            );
            assert!(
                !stderr.contains("pxf1."),
                "{what}: the token leaked into the error: {stderr}"
            );
        }
        Err(e) => panic!("{what}: unexpected harness error {e}"),
    }
}

/// Every file under `dir`, recursively.
fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            let t = e.file_type().unwrap();
            if t.is_dir() {
                todo.push(e.path());
            } else if t.is_file() {
                out.push(e.path());
            }
        }
    }
    out
}

fn copy_dir(from: &Path, to: &Path) {
    for f in files_under(from) {
        let dest = to.join(f.strip_prefix(from).unwrap());
        std::fs::create_dir_all(dest.parent().unwrap()).unwrap();
        std::fs::copy(&f, &dest).unwrap();
    }
}

async fn passwords(c: &Cluster, fleet: &str) -> Vec<String> {
    let pws = c.passwords(fleet).await.unwrap();
    pws.into_iter().map(|(_, pw)| pw).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_of_the_data_dir_reveals_no_password() {
    let mut c = Cluster::start(1).await.expect("cluster");
    let yaml = fleet_yaml(
        "sealed",
        "  s-1: {node: mk33, memory: 512, disk_size: 4}\n  s-2: {node: mk33, memory: 512, disk_size: 4}\n",
    );
    let r = c.submit(&yaml).await.unwrap();
    assert!(r.diagnostics.is_empty(), "{:?}", r.diagnostics);
    c.wait_running("sealed", &["s-1", "s-2"], Duration::from_secs(60))
        .await;
    let pws = passwords(&c, "sealed").await;
    assert_eq!(pws.len(), 2, "generated passwords: {pws:?}");
    // the controller stops (flushing everything), someone copies its data directory
    c.stop_controller().await;
    let copy = c.dir.path().join("stolen-data-dir");
    copy_dir(&c.controller_dir, &copy);
    let files = files_under(&copy);
    assert!(files.len() > 3, "{files:?}");
    for f in &files {
        let bytes = std::fs::read(f).unwrap();
        for pw in &pws {
            assert!(
                !bytes.windows(pw.len()).any(|w| w == pw.as_bytes()),
                "the password of a container is readable in {}",
                f.display()
            );
        }
        assert!(
            !bytes
                .windows(pxfleet_controller::seal::KEY_FILE_HEADER.len())
                .any(|w| w == pxfleet_controller::seal::KEY_FILE_HEADER.as_bytes()),
            "the seal key is inside the data dir: {}",
            f.display()
        );
    }
    // with its key next to controller.toml the controller reads them again
    let key = c.controller_config.parent().unwrap().join("seal.key");
    assert!(key.exists(), "no seal key at {}", key.display());
    c.start_controller().await.unwrap();
    assert_eq!(passwords(&c, "sealed").await, pws);
    // without it, it refuses to start and says why
    c.stop_controller().await;
    let moved = c.dir.path().join("seal.key.elsewhere");
    std::fs::rename(&key, &moved).unwrap();
    let err = c
        .start_controller()
        .await
        .expect_err("started without its seal key")
        .to_string();
    assert!(
        err.contains("seal key file") && err.contains("is missing"),
        "{err}"
    );
    assert!(!key.exists(), "a new key was made over sealed data");
    std::fs::rename(&moved, &key).unwrap();
    c.start_controller().await.unwrap();
    assert_eq!(passwords(&c, "sealed").await, pws);
}

fn hello(node: &str, operations: Vec<pb::OperationUpdate>) -> pb::AgentMessage {
    pb::AgentMessage {
        msg: Some(pb::agent_message::Msg::Hello(pb::Hello {
            node: node.into(),
            agent_version: "impostor".into(),
            protocol_version: pxfleet_proto::PROTOCOL_VERSION,
            inventory: Some(pb::Inventory {
                node: node.into(),
                ..Default::default()
            }),
            operations,
        })),
    }
}

type Session = (
    tonic::Streaming<pb::ControllerMessage>,
    tokio::sync::mpsc::Sender<pb::AgentMessage>,
);

/// Opens AgentService.Connect with `bundle` and sends `first`; the controller's answer, and the sender that
/// keeps the stream open.
async fn connect_as(
    c: &Cluster,
    bundle: &Bundle,
    first: pb::AgentMessage,
) -> Result<Session, tonic::Status> {
    let tls = pxfleet_tls::client_config(bundle).unwrap();
    let channel = pxfleet_tls::connect(&c.url, tls).await.unwrap();
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    tx.send(first).await.unwrap();
    let outbound = tonic::codegen::tokio_stream::wrappers::ReceiverStream::new(rx);
    AgentServiceClient::new(channel)
        .connect(outbound)
        .await
        .map(|r| (r.into_inner(), tx))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_cannot_speak_for_another_node() {
    let mut c = Cluster::start(2).await.expect("cluster");
    let mk33 = c.node("mk33").bundle().unwrap();
    // mk33's certificate claiming to be mk34: refused, so it never receives mk34's operations
    let e = connect_as(&c, &mk33, hello("mk34", vec![]))
        .await
        .expect_err("mk33's certificate opened mk34's stream");
    assert_eq!(e.code(), Code::PermissionDenied, "{e:?}");
    // an operation waiting for mk34 (its agent is down) ...
    c.kill_agent("mk34").await;
    c.kill_agent("mk33").await;
    let r = c
        .submit(&fleet_yaml(
            "other",
            "  o-1: {node: mk34, memory: 512, disk_size: 4}\n",
        ))
        .await
        .unwrap();
    assert!(r.diagnostics.is_empty(), "{:?}", r.diagnostics);
    let op = r.operations.first().expect("an operation for mk34").clone();
    assert_eq!(op.node, "mk34");
    // ... which mk33 (with its own, valid identity) reports as done, with a container on it
    let forged = pb::OperationUpdate {
        op_id: op.op_id.clone(),
        state: pb::OperationState::Succeeded as i32,
        vm_id: op.vm_id,
        container: Some(pb::ObservedContainer {
            vm_id: op.vm_id,
            node: "mk34".into(),
            power: pb::PowerState::Running as i32,
            ..Default::default()
        }),
        ..Default::default()
    };
    let _stream = connect_as(&c, &mk33, hello("mk33", vec![forged]))
        .await
        .expect("mk33 speaking for itself is accepted");
    let log = c.controller_log.clone();
    wait_until(
        "the controller to ignore mk33's update of mk34's operation",
        Duration::from_secs(30),
        || {
            let log = log.clone();
            async move {
                let text = std::fs::read_to_string(&log).unwrap_or_default();
                if text.contains("update for another node's operation ignored") {
                    Ok(())
                } else {
                    Err(pxfleet_tests::tail(&log))
                }
            }
        },
    )
    .await;
    let ops = c.operations("other").await.unwrap();
    let now = ops.iter().find(|o| o.op_id == op.op_id).unwrap();
    assert_ne!(
        now.state,
        pb::OperationState::Succeeded as i32,
        "mk33 finished mk34's operation: {now:?}"
    );
    let o = c.containers("other").await.unwrap();
    assert!(
        o.iter()
            .all(|ct| ct.state != pb::ContainerState::Running as i32),
        "a container reported by the wrong node counts as running: {o:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_cannot_touch_fleets_outside_its_list() {
    let c = Cluster::start(1).await.expect("cluster");
    let r = c.submit(&small_fleet("prod")).await.unwrap();
    assert!(r.diagnostics.is_empty(), "{:?}", r.diagnostics);
    let operator = c
        .issue_user_for("devops", Role::Operator, &["dev"])
        .await
        .unwrap();
    let mut api = c.api_as(&operator).await.unwrap();
    let denied = |r: Result<(), tonic::Status>, what: &str| {
        let e = r.expect_err(what);
        assert_eq!(e.code(), Code::PermissionDenied, "{what}: {e:?}");
        assert!(e.message().contains("prod"), "{what}: {e:?}");
    };
    denied(
        api.submit(submit_req(&small_fleet("prod")))
            .await
            .map(|_| ()),
        "submit to prod",
    );
    denied(
        api.plan(pb::PlanRequest {
            file_name: "fleet.yaml".into(),
            source: small_fleet("prod"),
            ..Default::default()
        })
        .await
        .map(|_| ()),
        "plan of prod",
    );
    denied(
        api.destroy(pb::DestroyRequest {
            fleet: "prod".into(),
            ..Default::default()
        })
        .await
        .map(|_| ()),
        "destroy of prod",
    );
    denied(
        api.set_power(pb::SetPowerRequest {
            fleet: "prod".into(),
            action: pb::PowerAction::Stop as i32,
            ..Default::default()
        })
        .await
        .map(|_| ()),
        "stop of prod",
    );
    denied(
        api.output(pb::OutputRequest {
            fleet: "prod".into(),
            show_sensitive: true,
        })
        .await
        .map(|_| ()),
        "prod's passwords",
    );
    // its own fleet it may change, and prod it may read (without secrets)
    let r = api
        .submit(submit_req(&fleet_yaml(
            "dev",
            "  d-1: {node: mk33, memory: 512, disk_size: 4}\n",
        )))
        .await
        .unwrap()
        .into_inner();
    assert!(r.diagnostics.is_empty(), "{:?}", r.diagnostics);
    let out = api
        .output(pb::OutputRequest {
            fleet: "prod".into(),
            show_sensitive: false,
        })
        .await
        .unwrap()
        .into_inner();
    assert!(out.containers.iter().all(|o| o.password.is_none()));
    assert_eq!(c.containers("prod").await.unwrap().len(), 1);
}

/// Plans `containers` (YAML under `containers:`) as admin; the diagnostics' text.
async fn plan_errors(c: &Cluster, yaml: &str) -> String {
    let r = c.plan(yaml).await.unwrap();
    r.diagnostics
        .iter()
        .map(|d| format!("{}: {}", d.field, d.message))
        .collect::<Vec<_>>()
        .join("\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fleet_values_cannot_inject_into_pct_arguments() {
    let c = Cluster::start_with(ClusterOptions {
        nodes: 1,
        ..ClusterOptions::default()
    })
    .await
    .expect("cluster");
    // values with no business containing separators are refused, naming the field
    let refused = [
        ("hostname", "  h-1: {node: mk33, hostname: \"-o=evil\"}\n"),
        ("hostname", "  h-2: {node: mk33, hostname: \"a;reboot\"}\n"),
        (
            "tags",
            "  t-1: {node: mk33, tags: [\"ok\", \"x;pct destroy 100\"]}\n",
        ),
        ("tags", "  t-2: {node: mk33, tags: [\"a,b\"]}\n"),
        (
            "mount_points",
            "  m-1: {node: mk33, mount_points: [{path: \"/mnt/a,backup=1\", size: 1}]}\n",
        ),
        (
            "mount_points",
            "  m-2: {node: mk33, mount_points: [{path: \"/mnt/../../etc\", size: 1}]}\n",
        ),
        (
            "template_url",
            "  u-1: {node: mk33, template_url: \"http://127.0.0.1:1/a b.tar.xz\"}\n",
        ),
        (
            "template_url",
            "  u-2: {node: mk33, template_url: \"file:///etc/shadow\"}\n",
        ),
    ];
    for (field, body) in refused {
        let errors = plan_errors(&c, &fleet_yaml("inj", body)).await;
        assert!(
            errors.contains(field),
            "not refused (or refused without naming {field}): {body}\n{errors}"
        );
    }
    // free text goes to pct as one argv element: stored literally, nothing else changed
    let hostile = "x --delete net0 --protection 1; touch /tmp/pxfleet-pwned $(id) `id` \\\" '";
    let yaml = fleet_yaml(
        "inj",
        &format!(
            "  d-1: {{node: mk33, memory: 512, disk_size: 4, description: {}}}\n",
            serde_json::to_string(hostile).unwrap()
        ),
    );
    let r = c.submit(&yaml).await.unwrap();
    assert!(r.diagnostics.is_empty(), "{:?}", r.diagnostics);
    let up = c
        .wait_running("inj", &["d-1"], Duration::from_secs(60))
        .await;
    let cfg = c.pct_config("mk33", up[0].vm_id);
    let description = cfg.get("description").cloned().unwrap_or_default();
    let decoded = description.replace("%20", " ");
    assert!(
        description.contains(hostile) || decoded.contains("--delete net0 --protection 1;"),
        "description not stored literally: {cfg:?}"
    );
    assert!(cfg.contains_key("net0"), "net0 was deleted: {cfg:?}");
    assert_ne!(
        cfg.get("protection").map(String::as_str),
        Some("1"),
        "{cfg:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn template_names_and_urls_cannot_traverse_paths() {
    let c = Cluster::start(1).await.expect("cluster");
    let cases = [
        "  a: {node: mk33, template_url: \"http://127.0.0.1:1/x/..\"}\n",
        "  b: {node: mk33, template_url: \"http://127.0.0.1:1/x/.hidden.tar.xz\"}\n",
        "  c: {node: mk33, template_url: \"http://127.0.0.1:1/%2e%2e%2f%2e%2e%2fetc%2fpasswd\"}\n",
    ];
    for body in cases {
        let errors = plan_errors(&c, &fleet_yaml("trav", body)).await;
        assert!(
            errors.contains("template_url"),
            "a template URL aiming outside the template cache was not refused: {body}\n{errors}"
        );
    }
    let yaml = "fleet: trav\ntemplates:\n  evil: {pveam: ../../../etc/passwd}\ncontainers:\n  \
                d: {node: mk33, template: evil, datastore_id: local-lvm}\n";
    let errors = plan_errors(&c, yaml).await;
    assert!(
        errors.contains("pveam"),
        "a pveam name with a path was not refused:\n{errors}"
    );
    let yaml = "fleet: trav\ntemplates:\n  evil: {url: \"http://127.0.0.1:1/../../etc/cron.d/x\", sha256: \
                \"00000000000000000000000000000000000000000000000000000000000000aa\"}\ncontainers:\n  \
                d: {node: mk33, template: evil, datastore_id: local-lvm}\n";
    let errors = plan_errors(&c, yaml).await;
    // the URL's last segment is the file name; `..` segments never reach the file system
    if errors.is_empty() {
        let plan = c.plan(yaml).await.unwrap();
        assert!(
            !plan.plan_json.contains("../"),
            "a traversal reached the plan: {}",
            plan.plan_json
        );
    }
    assert!(c.containers("trav").await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_inputs_are_refused() {
    let c = Cluster::start(1).await.expect("cluster");
    let mut api = c.api().await.unwrap().max_encoding_message_size(64 << 20);
    // a fleet file above limits.max_fleet_bytes (4 MiB): refused before it is parsed
    let big = format!("# {}\n{}", "x".repeat(5 << 20), small_fleet("big"));
    let e = api.submit(submit_req(&big)).await.unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
    assert!(e.message().contains("limits.max_fleet_bytes"), "{e:?}");
    // a message above limits.max_message_bytes (16 MiB) never reaches a handler
    let huge = format!("# {}\n{}", "x".repeat(20 << 20), small_fleet("big"));
    let e = api.submit(submit_req(&huge)).await.unwrap_err();
    assert_eq!(e.code(), Code::OutOfRange, "{e:?}");
    // one huge value inside a small file
    let long = fleet_yaml(
        "big",
        &format!(
            "  b-1: {{node: mk33, description: \"{}\"}}\n",
            "d".repeat(70_000)
        ),
    );
    let errors = plan_errors(&c, &long).await;
    assert!(
        errors.contains("description"),
        "a 70,000-character description was accepted"
    );
    // a fleet with more containers than limits.max_fleet_containers (10,000)
    let mut many = String::new();
    for i in 0..10_001 {
        many.push_str(&format!("  c{i}: {{node: mk33}}\n"));
    }
    let e = api
        .submit(submit_req(&fleet_yaml("big", &many)))
        .await
        .unwrap_err();
    assert!(e.message().contains("limits.max_fleet_containers"), "{e:?}");
    // the controller is still fine and stored nothing
    assert!(c.containers("big").await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_audit_trail_names_who_did_what_and_only_admins_read_it() {
    let c = Cluster::start(1).await.expect("cluster");
    let r = c.submit(&small_fleet("aud")).await.unwrap();
    assert!(r.diagnostics.is_empty(), "{:?}", r.diagnostics);
    let pw = passwords(&c, "aud").await;
    assert_eq!(pw.len(), 1);
    // an operator reads the secrets, the admin stops the fleet, cordons, makes a token, destroys
    let operator = c.issue_user("otto", Role::Operator).await.unwrap();
    c.api_as(&operator)
        .await
        .unwrap()
        .output(pb::OutputRequest {
            fleet: "aud".into(),
            show_sensitive: true,
        })
        .await
        .unwrap();
    let (code, _, err) = c.pxctl(&["stop", "aud", "--no-wait"]).await;
    assert_eq!(code, 0, "{err}");
    let (code, _, err) = c
        .pxctl(&["node", "cordon", "mk33", "--reason", "disk"])
        .await;
    assert_eq!(code, 0, "{err}");
    let (code, _, err) = c.pxctl(&["node", "uncordon", "mk33"]).await;
    assert_eq!(code, 0, "{err}");
    c.join_token("mk99", 60).await.unwrap();
    let (code, _, err) = c.pxctl(&["destroy", "aud", "-y", "--no-wait"]).await;
    assert_eq!(code, 0, "{err}");

    let all = c.pxctl_json(&["audit"]).await;
    let entries = all.as_array().expect("an array");
    let find = |action: &str, actor: &str, target: &str| {
        entries
            .iter()
            .find(|e| e["action"] == action && e["actor"] == actor && e["target"] == target)
            .unwrap_or_else(|| {
                panic!("no {action} by {actor} of {target} in the audit trail: {all:#}")
            })
    };
    let admin = "pxfleet://user/admin?role=admin";
    for (action, actor, target) in [
        ("submit", admin, "aud"),
        (
            "output_sensitive",
            "pxfleet://user/otto?role=operator",
            "aud",
        ),
        ("stop", admin, "aud"),
        ("cordon", admin, "mk33"),
        ("uncordon", admin, "mk33"),
        ("create_join_token", admin, "mk99"),
        ("destroy", admin, "aud"),
        ("enroll", "pxfleet://node/mk33", "mk33"),
    ] {
        let e = find(action, actor, target);
        assert!(
            e["time"].as_str().is_some_and(|t| t.starts_with("20")),
            "{e}"
        );
    }
    // no secret in the trail
    assert!(pw.iter().all(|p| !all.to_string().contains(p.as_str())));
    // --fleet keeps what was done to the fleet; --since in the future keeps nothing
    let actions = c.audit_actions("aud").await;
    assert_eq!(
        actions,
        vec![
            "submit",
            "output_sensitive",
            "output_sensitive",
            "stop",
            "destroy"
        ],
        "{actions:?}"
    );
    let none = c
        .pxctl_json(&["audit", "--since", "2100-01-01T00:00:00Z"])
        .await;
    assert_eq!(none, serde_json::json!([]));
    // a viewer and an operator may not read it
    for who in [
        c.issue_user("vera", Role::Viewer).await.unwrap(),
        operator.clone(),
    ] {
        let e = c
            .api_as(&who)
            .await
            .unwrap()
            .get_audit(pb::GetAuditRequest::default())
            .await
            .unwrap_err();
        assert_eq!(e.code(), Code::PermissionDenied, "{e:?}");
    }
}
