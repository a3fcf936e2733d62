//! Who may do what over the real mutual-TLS port: roles, node certificates on the fleet API, clients without
//! a certificate or with one from another CA, and one-time, expiring join tokens.

use std::time::Duration;

use pxfleet_proto::v1::fleet_service_client::FleetServiceClient;
use pxfleet_tests::{fleet_yaml, v1 as pb, Cluster, HarnessError};
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
    let viewer = c.issue_user("vera", Role::Viewer).unwrap();
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
    let operator = c.issue_user("otto", Role::Operator).unwrap();
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
