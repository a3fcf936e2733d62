//! No lock-out by unauthenticated clients (issue 24, item 4): what one address may hold of the server is
//! bounded (handshakes in progress, connections), and a connection that sends nothing after its handshake is
//! closed. Real sockets on loopback; the attacker dials from other loopback addresses (127.0.0.2, 127.0.0.3),
//! since the bounds are per address.

mod common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use pxfleet_proto::v1::agent_service_client::AgentServiceClient;
use pxfleet_proto::v1::EnrollRequest;
use pxfleet_tls::{
    anonymous_client_config, client_config, connect, Identity, RevocationList, Role,
    MAX_PENDING_PER_PEER, PREFACE_TIMEOUT,
};
use rustls::pki_types::ServerName;
use tokio::io::AsyncReadExt;
use tokio::net::{TcpSocket, TcpStream};

use common::Server;

async fn dial_from(source: &str, to: SocketAddr) -> TcpStream {
    let s = TcpSocket::new_v4().unwrap();
    s.bind(format!("{source}:0").parse().unwrap()).unwrap();
    s.connect(to).await.unwrap()
}

/// Whether the server closed `s` within `wait` (a read ends with nothing or an error).
async fn closed_within(s: &mut TcpStream, wait: Duration) -> bool {
    let mut buf = [0u8; 64];
    matches!(
        tokio::time::timeout(wait, s.read(&mut buf)).await,
        Ok(Ok(0)) | Ok(Err(_))
    )
}

#[tokio::test]
async fn silent_sockets_of_one_address_take_only_its_own_handshake_slots() {
    let server = Server::start(Arc::new(RevocationList::default())).await;
    let mut silent = Vec::new();
    for _ in 0..MAX_PENDING_PER_PEER + 40 {
        silent.push(dial_from("127.0.0.2", server.addr).await);
    }
    // Beyond the address's slots, each is closed at once.
    let mut closed = 0;
    for s in silent.iter_mut().skip(MAX_PENDING_PER_PEER) {
        if closed_within(s, Duration::from_secs(2)).await {
            closed += 1;
        }
    }
    assert_eq!(
        closed, 40,
        "connections beyond the address's handshake slots stay open"
    );
    // Another client is served meanwhile, at once.
    let alice = server.client_bundle(&Identity::user("alice", Role::Viewer, &[]).unwrap());
    let answer = tokio::time::timeout(Duration::from_secs(5), async {
        let channel = connect(&server.url(), client_config(&alice).unwrap())
            .await
            .unwrap();
        AgentServiceClient::new(channel)
            .enroll(EnrollRequest::default())
            .await
    })
    .await
    .expect("a client waited behind another address's silent sockets");
    assert!(answer.is_ok(), "{answer:?}");
}

#[tokio::test]
async fn a_connection_that_sends_nothing_after_its_handshake_is_closed() {
    let server = Server::start(Arc::new(RevocationList::default())).await;
    let tcp = dial_from("127.0.0.3", server.addr).await;
    let config = anonymous_client_config(server.ca.cert_pem()).unwrap();
    let connector = tokio_rustls::TlsConnector::from(config);
    let mut tls = connector
        .connect(ServerName::try_from("127.0.0.1").unwrap(), tcp)
        .await
        .expect("the handshake completes");
    // Nothing sent: closed after the preface deadline (plus the server's own scheduling), not kept. What the
    // server sends first (its HTTP/2 SETTINGS) is read and skipped.
    let closed = tokio::time::timeout(PREFACE_TIMEOUT + Duration::from_secs(5), async {
        let mut buf = [0u8; 256];
        loop {
            match tls.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => continue,
            }
        }
    })
    .await;
    assert!(
        closed.is_ok(),
        "an idle TLS connection was kept past the deadline"
    );
}
