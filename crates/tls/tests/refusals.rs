//! Every handshake refusal says which side refused and why: the client's verifier error for the controller's
//! certificate, the TLS alert the controller sends for the client's (real handshakes on 127.0.0.1).

mod common;

use std::sync::Arc;
use std::time::Duration;

use pxfleet_proto::v1::agent_service_client::AgentServiceClient;
use pxfleet_proto::v1::EnrollRequest;
use pxfleet_tls::{
    anonymous_client_config, client_config, connect, Audience, Bundle, Ca, Identity, RefusalCause,
    RefusedBy, RevocationList, Role, TlsError,
};

use common::Server;

fn refusal(r: Result<tonic::transport::Channel, TlsError>) -> pxfleet_tls::Refusal {
    match r {
        Err(TlsError::Handshake { refusal, .. }) => refusal,
        Err(e) => panic!("not classified as a handshake refusal: {e}"),
        Ok(_) => panic!("the handshake succeeded"),
    }
}

#[tokio::test]
async fn a_client_certificate_from_another_ca_is_refused_by_the_controller_with_unknown_ca() {
    let server = Server::start(Arc::new(RevocationList::default())).await;
    let other = Ca::generate("another controller's CA").unwrap();
    let forged = other
        .issue_client(
            &Identity::user("admin", Role::Admin, &[]).unwrap(),
            Duration::from_secs(3600),
        )
        .unwrap();
    let bundle = Bundle {
        ca_pem: server.ca.cert_pem().to_string(),
        cert_pem: forged.cert.cert_pem,
        key_pem: forged.key_pem,
    };
    let r = refusal(connect(&server.url(), client_config(&bundle).unwrap()).await);
    assert_eq!(
        (r.by, &r.cause),
        (RefusedBy::Controller, &RefusalCause::UnknownCa)
    );
    let text = r.to_string();
    assert!(
        text.contains("controller refused") && text.contains("unknown_ca"),
        "{text}"
    );
    assert!(
        r.fix(&Audience::Pxctl).contains("another controller"),
        "{}",
        r.fix(&Audience::Pxctl)
    );
    server.stop().await;
}

#[tokio::test]
async fn an_expired_client_certificate_is_refused_with_certificate_expired() {
    let server = Server::start(Arc::new(RevocationList::default())).await;
    let creds = server
        .ca
        .issue_client(&Identity::node("mk33").unwrap(), Duration::ZERO)
        .unwrap();
    server.clock.advance(Duration::from_secs(2)); // past its end, which is to the second
    let bundle = creds.into_bundle(server.ca.cert_pem());
    let r = refusal(connect(&server.url(), client_config(&bundle).unwrap()).await);
    assert_eq!(r.by, RefusedBy::Controller);
    assert!(matches!(r.cause, RefusalCause::Expired { .. }), "{r:?}");
    assert!(r.to_string().contains("certificate_expired"), "{r}");
    let fix = r.fix(&Audience::Agent {
        node: "mk33".into(),
    });
    assert!(
        fix.contains("new token") && fix.contains("--node mk33"),
        "{fix}"
    );
    server.stop().await;
}

#[tokio::test]
async fn a_revoked_client_certificate_is_refused_with_certificate_revoked() {
    let revoked = Arc::new(RevocationList::default());
    let server = Server::start(revoked.clone()).await;
    let bundle = server.client_bundle(&Identity::user("bob", Role::Viewer, &[]).unwrap());
    revoked.revoke(
        pxfleet_tls::CertInfo::from_pem(&bundle.cert_pem)
            .unwrap()
            .serial,
    );
    let r = refusal(connect(&server.url(), client_config(&bundle).unwrap()).await);
    assert_eq!(
        (r.by, &r.cause),
        (RefusedBy::Controller, &RefusalCause::Revoked)
    );
    assert!(r.to_string().contains("certificate_revoked"), "{r}");
    assert!(
        r.fix(&Audience::Pxctl).contains("revoked"),
        "{}",
        r.fix(&Audience::Pxctl)
    );
    server.stop().await;
}

#[tokio::test]
async fn a_client_trusting_another_ca_refuses_the_controller() {
    let server = Server::start(Arc::new(RevocationList::default())).await;
    let other = Ca::generate("another controller's CA").unwrap();
    let r = refusal(
        connect(
            &server.url(),
            anonymous_client_config(other.cert_pem()).unwrap(),
        )
        .await,
    );
    assert_eq!(
        (r.by, &r.cause),
        (RefusedBy::Client, &RefusalCause::UnknownCa)
    );
    assert!(
        r.to_string().contains("this client refused the controller"),
        "{r}"
    );
    assert!(r
        .fix(&Audience::Pxctl)
        .contains("`ca` file in your pxctl config"));
    server.stop().await;
}

#[tokio::test]
async fn a_server_name_mismatch_names_both_names() {
    // The certificate names only ctl.example and 127.0.0.1; "localhost" reaches the listener but is not named.
    let server = Server::start_named(
        Arc::new(RevocationList::default()),
        &["ctl.example", "127.0.0.1"],
    )
    .await;
    let url = format!("https://localhost:{}", server.addr.port());
    let r = refusal(connect(&url, anonymous_client_config(server.ca.cert_pem()).unwrap()).await);
    let RefusalCause::NameMismatch {
        expected,
        presented,
    } = &r.cause
    else {
        panic!("{r:?}")
    };
    assert_eq!(expected, "localhost");
    assert!(
        presented.iter().any(|p| p.contains("ctl.example")),
        "{presented:?}"
    );
    let fix = r.fix(&Audience::Pxctl);
    assert!(
        fix.contains("server_name") && fix.contains("reissue-server-cert"),
        "{fix}"
    );
    server.stop().await;
}

#[tokio::test]
async fn an_accepted_client_still_works_after_the_first_bytes_were_read() {
    let server = Server::start(Arc::new(RevocationList::default())).await;
    let bundle = server.client_bundle(&Identity::user("al", Role::Admin, &[]).unwrap());
    let channel = connect(&server.url(), client_config(&bundle).unwrap())
        .await
        .unwrap();
    let mut api = AgentServiceClient::new(channel);
    for _ in 0..3 {
        let who = api
            .enroll(EnrollRequest::default())
            .await
            .unwrap()
            .into_inner();
        assert_eq!(who.cert_pem, "pxfleet://user/al?role=admin");
    }
    server.stop().await;
}
