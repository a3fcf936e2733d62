//! Real handshakes on 127.0.0.1: a tonic AgentService served with `serve_tls` and our server config, called
//! through `connect` with each of our client configs (and some hostile ones). The test service's Enroll answers
//! with the identity the server saw, so the tests check what the controller's services will rely on.

mod common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use pxfleet_proto::v1::agent_service_client::AgentServiceClient;
use pxfleet_proto::v1::agent_service_server::AgentServiceServer;
use pxfleet_proto::v1::{AgentMessage, EnrollRequest, EnrollResponse};
use pxfleet_tls::{
    anonymous_client_config, client_config, connect, generate_key_and_csr, pinned_client_config,
    serve_tls, verify_ca_fingerprint, Bundle, BundlePaths, Ca, Identity, RevocationList, Role,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio::net::{TcpListener, TcpStream};

use common::{Server, Whoami};

/// Connects and calls Enroll; returns who the server says we are, or the error text.
async fn whoami(url: &str, config: Arc<rustls::ClientConfig>) -> Result<EnrollResponse, String> {
    let channel = connect(url, config)
        .await
        .map_err(|e| format!("connect: {e}"))?;
    AgentServiceClient::new(channel)
        .enroll(EnrollRequest::default())
        .await
        .map(|r| r.into_inner())
        .map_err(|e| format!("rpc: {e}"))
}

#[tokio::test]
async fn a_valid_client_certificate_is_seen_with_its_identity_and_serial() {
    let server = Server::start(Arc::new(RevocationList::default())).await;
    let alice = Identity::user("alice", Role::Operator, &["dev"]).unwrap();
    let bundle = server.client_bundle(&alice);
    let serial = pxfleet_tls::CertInfo::from_pem(&bundle.cert_pem)
        .unwrap()
        .serial;
    let resp = whoami(&server.url(), client_config(&bundle).unwrap())
        .await
        .unwrap();
    assert_eq!(
        resp.cert_pem,
        "pxfleet://user/alice?role=operator&fleets=dev"
    );
    assert_eq!(resp.serial, serial.to_string());
    server.stop().await;
}

#[tokio::test]
async fn without_a_client_certificate_the_handshake_succeeds_and_identity_is_none() {
    let server = Server::start(Arc::new(RevocationList::default())).await;
    let resp = whoami(
        &server.url(),
        anonymous_client_config(server.ca.cert_pem()).unwrap(),
    )
    .await
    .unwrap();
    assert_eq!(resp.cert_pem, "anonymous");
    assert_eq!(resp.serial, "");

    // RPCs other than enrolment refuse the anonymous caller; with a certificate they get through.
    let anon = connect(
        &server.url(),
        anonymous_client_config(server.ca.cert_pem()).unwrap(),
    )
    .await
    .unwrap();
    let status = AgentServiceClient::new(anon)
        .connect(tokio_stream::empty::<AgentMessage>())
        .await
        .unwrap_err();
    assert_eq!(status.code(), tonic::Code::Unauthenticated, "{status}");
    let node = server.client_bundle(&Identity::node("mk33").unwrap());
    let authed = connect(&server.url(), client_config(&node).unwrap())
        .await
        .unwrap();
    let status = AgentServiceClient::new(authed)
        .connect(tokio_stream::empty::<AgentMessage>())
        .await
        .unwrap_err();
    assert_eq!(status.code(), tonic::Code::Unimplemented, "{status}");
    assert!(status.message().contains("pxfleet://node/mk33"), "{status}");
    server.stop().await;
}

#[tokio::test]
async fn a_certificate_from_another_ca_is_refused() {
    let server = Server::start(Arc::new(RevocationList::default())).await;
    let other = Ca::generate("someone else's CA").unwrap();
    // Same identity, trusting our CA for the server, but signed by the other CA.
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
    let err = whoami(&server.url(), client_config(&bundle).unwrap())
        .await
        .unwrap_err();
    assert!(!err.contains("pxfleet://"), "{err}");
    // The server keeps serving others.
    let ok = whoami(
        &server.url(),
        anonymous_client_config(server.ca.cert_pem()).unwrap(),
    )
    .await;
    assert_eq!(ok.unwrap().cert_pem, "anonymous");
    server.stop().await;
}

#[tokio::test]
async fn a_revoked_certificate_is_refused_at_the_next_handshake() {
    let revoked = Arc::new(RevocationList::default());
    let server = Server::start(revoked.clone()).await;
    let node = Identity::node("mk33").unwrap();
    let bundle = server.client_bundle(&node);
    let config = client_config(&bundle).unwrap();
    assert_eq!(
        whoami(&server.url(), config.clone())
            .await
            .unwrap()
            .cert_pem,
        "pxfleet://node/mk33"
    );

    let serial = pxfleet_tls::CertInfo::from_pem(&bundle.cert_pem)
        .unwrap()
        .serial;
    revoked.revoke(serial);
    assert!(whoami(&server.url(), config).await.is_err());

    // Another certificate for the same node, not revoked, still works.
    let fresh = server.client_bundle(&node);
    assert_eq!(
        whoami(&server.url(), client_config(&fresh).unwrap())
            .await
            .unwrap()
            .cert_pem,
        "pxfleet://node/mk33"
    );
    server.stop().await;
}

#[tokio::test]
async fn an_expired_client_certificate_is_refused() {
    let server = Server::start(Arc::new(RevocationList::default())).await;
    let creds = server
        .ca
        .issue_client(&Identity::node("mk33").unwrap(), Duration::ZERO)
        .unwrap();
    server.clock.advance(Duration::from_secs(2)); // past its end, which is to the second
    let bundle = creds.into_bundle(server.ca.cert_pem());
    assert!(whoami(&server.url(), client_config(&bundle).unwrap())
        .await
        .is_err());
    server.stop().await;
}

#[tokio::test]
async fn a_tls12_only_client_is_refused() {
    let server = Server::start(Arc::new(RevocationList::default())).await;
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_slice(server.ca.cert_pem().as_bytes()).unwrap())
        .unwrap();
    let config = rustls::ClientConfig::builder_with_provider(pxfleet_tls::provider())
        .with_protocol_versions(&[&rustls::version::TLS12])
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let tcp = TcpStream::connect(server.addr).await.unwrap();
    let result = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(ServerName::try_from("127.0.0.1").unwrap(), tcp)
        .await;
    let err = match result {
        Ok(_) => panic!("a TLS 1.2 handshake must fail"),
        Err(e) => e.to_string(),
    };
    assert!(
        err.to_lowercase().contains("version") || err.to_lowercase().contains("alert"),
        "{err}"
    );
    server.stop().await;
}

#[tokio::test]
async fn the_server_name_must_match_the_certificate() {
    let server = Server::start(Arc::new(RevocationList::default())).await;
    // The certificate names 127.0.0.1 and localhost, not 127.0.0.2 (which also reaches loopback on Linux).
    let url = format!("https://127.0.0.2:{}", server.addr.port());
    let listener_is_on_127_0_0_1 =
        whoami(&url, anonymous_client_config(server.ca.cert_pem()).unwrap()).await;
    assert!(listener_is_on_127_0_0_1.is_err());
    let ok = whoami(
        &format!("https://localhost:{}", server.addr.port()),
        anonymous_client_config(server.ca.cert_pem()).unwrap(),
    )
    .await;
    assert_eq!(ok.unwrap().cert_pem, "anonymous");
    server.stop().await;
}

#[tokio::test]
async fn pinned_enrolment_accepts_the_right_ca_and_refuses_a_wrong_fingerprint() {
    let server = Server::start(Arc::new(RevocationList::default())).await;
    let right = pinned_client_config(&server.ca.fingerprint_sha256()).unwrap();
    assert_eq!(
        whoami(&server.url(), right).await.unwrap().cert_pem,
        "anonymous"
    );

    let wrong_fp = Ca::generate("other").unwrap().fingerprint_sha256();
    let err = whoami(&server.url(), pinned_client_config(&wrong_fp).unwrap())
        .await
        .unwrap_err();
    assert!(err.starts_with("connect:"), "{err}");
    server.stop().await;
}

#[tokio::test]
async fn pinned_enrolment_refuses_an_impostor_that_shows_the_real_ca_certificate() {
    // The impostor has the real CA's (public) certificate and puts it in its chain, but its own server
    // certificate is signed by another CA: chain verification against the pinned CA must fail.
    let real = Ca::generate("real").unwrap();
    let evil = Ca::generate("evil").unwrap();
    let leaf = evil.issue_server(&["127.0.0.1".into()]).unwrap();
    let chain = vec![
        CertificateDer::from_pem_slice(leaf.cert.cert_pem.as_bytes()).unwrap(),
        CertificateDer::from_pem_slice(real.cert_pem().as_bytes()).unwrap(),
    ];
    let mut config = rustls::ServerConfig::builder_with_provider(pxfleet_tls::provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(
            chain,
            PrivateKeyDer::from_pem_slice(leaf.key_pem.as_bytes()).unwrap(),
        )
        .unwrap();
    config.alpn_protocols = vec![b"h2".to_vec()];
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let router = tonic::transport::Server::builder().add_service(AgentServiceServer::new(Whoami));
    let task = tokio::spawn(serve_tls(router, listener, Arc::new(config), async {
        let _ = stopped.await;
    }));

    let url = format!("https://127.0.0.1:{}", addr.port());
    let err = whoami(
        &url,
        pinned_client_config(&real.fingerprint_sha256()).unwrap(),
    )
    .await
    .unwrap_err();
    assert!(err.starts_with("connect:"), "{err}");

    let _ = stop.send(());
    task.await.unwrap().unwrap();
}

#[tokio::test]
async fn full_enrolment_flow_key_on_node_csr_signed_then_mutual_tls_as_the_node() {
    let server = Server::start(Arc::new(RevocationList::default())).await;
    let fingerprint = server.ca.fingerprint_sha256();

    // Agent: key and CSR, pinned connection (anonymous on the server side).
    let kc = generate_key_and_csr("mk33").unwrap();
    let pinned = pinned_client_config(&fingerprint).unwrap();
    assert_eq!(
        whoami(&server.url(), pinned).await.unwrap().cert_pem,
        "anonymous"
    );

    // Controller: signs the CSR for the node named in the token exchange.
    let issued = server
        .ca
        .sign_csr(
            &kc.csr_pem,
            &Identity::node("mk33").unwrap(),
            Duration::from_secs(3600),
        )
        .unwrap();

    // Agent: checks the CA it received, writes its bundle, reads it back, connects as the node.
    verify_ca_fingerprint(server.ca.cert_pem(), &fingerprint).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let paths = BundlePaths::in_dir(dir.path(), "node");
    Bundle {
        ca_pem: server.ca.cert_pem().to_string(),
        cert_pem: issued.cert_pem.clone(),
        key_pem: kc.key_pem,
    }
    .write(&paths)
    .unwrap();
    let bundle = Bundle::read(&paths).unwrap();
    let resp = whoami(&server.url(), client_config(&bundle).unwrap())
        .await
        .unwrap();
    assert_eq!(resp.cert_pem, "pxfleet://node/mk33");
    assert_eq!(resp.serial, issued.serial.to_string());
    server.stop().await;
}

#[tokio::test]
async fn connect_explains_bad_urls() {
    let config = anonymous_client_config(Ca::generate("x").unwrap().cert_pem()).unwrap();
    for (url, expected) in [
        ("http://127.0.0.1:1", "https://HOST:PORT"),
        ("https://127.0.0.1", "no port"),
        ("not a url", "not a URL"),
    ] {
        let err = connect(url, config.clone()).await.unwrap_err().to_string();
        assert!(err.contains(expected) && err.contains(url), "{url}: {err}");
    }
}

#[tokio::test]
async fn a_server_name_override_verifies_against_that_name() {
    let server = Server::start(Arc::new(RevocationList::default())).await;
    // Dialled at 127.0.0.1 (which the certificate names), verified as the given name instead.
    let url = server.url();
    let config = || anonymous_client_config(server.ca.cert_pem()).unwrap();
    let channel = pxfleet_tls::connect_with_server_name(&url, "localhost", config())
        .await
        .unwrap();
    let resp = AgentServiceClient::new(channel)
        .enroll(EnrollRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert_eq!(resp.cert_pem, "anonymous");
    // A name the certificate does not carry is refused, although the dialled address alone would pass.
    let wrong = pxfleet_tls::connect_with_server_name(&url, "ctl.example.org", config()).await;
    assert!(wrong.is_err());
    // A name that is no name at all is an error naming it.
    let bad = pxfleet_tls::connect_with_server_name(&url, "not a name", config())
        .await
        .unwrap_err();
    assert!(bad.to_string().contains("not a name"), "{bad}");
    server.stop().await;
}

/// A TCP forwarder to `upstream` that can be frozen: from then on nothing passes either way and no socket is
/// closed (packets vanishing on a cut network).
async fn freezable(upstream: SocketAddr) -> (SocketAddr, tokio::sync::watch::Sender<bool>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    async fn copy(
        mut from: tokio::net::tcp::OwnedReadHalf,
        mut to: tokio::net::tcp::OwnedWriteHalf,
        frozen: tokio::sync::watch::Receiver<bool>,
    ) {
        let mut buf = [0u8; 8192];
        loop {
            let n = match from.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            if *frozen.borrow() {
                // hold both sockets open, pass nothing
                std::future::pending::<()>().await;
            }
            if to.write_all(&buf[..n]).await.is_err() {
                return;
            }
        }
    }
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let Ok(server) = TcpStream::connect(upstream).await else {
                continue;
            };
            let (cr, cw) = client.into_split();
            let (sr, sw) = server.into_split();
            tokio::spawn(copy(cr, sw, rx.clone()));
            tokio::spawn(copy(sr, cw, rx.clone()));
        }
    });
    (addr, tx)
}

#[tokio::test]
async fn a_call_on_a_connection_whose_packets_vanish_fails_instead_of_hanging() {
    let server = Server::start(Arc::new(RevocationList::default())).await;
    let (addr, freeze) = freezable(server.addr).await;
    let node = Identity::node("mk33").unwrap();
    let config = client_config(&server.client_bundle(&node)).unwrap();
    let keepalive = pxfleet_tls::KeepAlive {
        interval: Duration::from_millis(200),
        timeout: Duration::from_millis(500),
    };
    let url = format!("https://127.0.0.1:{}", addr.port());
    let channel = pxfleet_tls::connect_keepalive(&url, config, keepalive)
        .await
        .unwrap();
    let mut client = AgentServiceClient::new(channel);
    client
        .enroll(EnrollRequest::default())
        .await
        .expect("works before the cut");
    freeze.send_replace(true);
    // the keepalive ping goes unanswered: the connection is closed and the call fails (without keepalive it
    // waits forever; the outer limit only keeps a regression from hanging the test run)
    let outcome = tokio::time::timeout(
        Duration::from_secs(120),
        client.enroll(EnrollRequest::default()),
    )
    .await;
    match outcome {
        Ok(Err(status)) => assert!(
            !status.message().is_empty() || status.code() != tonic::Code::Ok,
            "{status:?}"
        ),
        Ok(Ok(r)) => panic!("a call went through a frozen connection: {r:?}"),
        Err(_) => panic!("the call hung on a dead connection (no keepalive)"),
    }
    // not stopped gracefully: the frozen forwarder holds the server's side of the connection open
    drop(server);
}
