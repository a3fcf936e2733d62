//! What both TLS test binaries share: an AgentService whose Enroll answers with the identity the server saw
//! ([`Whoami`]), served with `serve_tls` and our server config on 127.0.0.1:0 behind a fresh test CA ([`Server`]),
//! checking certificate expiry against a manual clock the tests move forward.
// each test binary uses part of it
#![allow(dead_code)]

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use pxfleet_common::ManualClock;
use pxfleet_proto::v1::agent_service_server::{AgentService, AgentServiceServer};
use pxfleet_proto::v1::{AgentMessage, ControllerMessage, EnrollRequest, EnrollResponse};
use pxfleet_tls::{
    peer_cert_info, peer_identity, require_identity, serve_tls, server_config_with_client_cas,
    Bundle, Ca, Identity, RevocationCheck,
};
use tokio::net::TcpListener;
use tokio_stream::Stream;
use tonic::{Request, Response, Status, Streaming};

/// Enroll answers `cert_pem` = the caller's identity URI (or "anonymous") and `serial` = its certificate serial.
pub struct Whoami;

#[tonic::async_trait]
impl AgentService for Whoami {
    async fn enroll(
        &self,
        request: Request<EnrollRequest>,
    ) -> Result<Response<EnrollResponse>, Status> {
        let who = peer_identity(&request)
            .map(|i| i.uri())
            .unwrap_or_else(|| "anonymous".into());
        let serial = peer_cert_info(&request)
            .map(|c| c.serial.to_string())
            .unwrap_or_default();
        Ok(Response::new(EnrollResponse {
            cert_pem: who,
            serial,
            ..Default::default()
        }))
    }

    async fn renew(
        &self,
        _request: tonic::Request<pxfleet_proto::v1::RenewRequest>,
    ) -> Result<tonic::Response<pxfleet_proto::v1::EnrollResponse>, tonic::Status> {
        Err(tonic::Status::unimplemented(
            "renew is not part of this test",
        ))
    }

    type ConnectStream = Pin<Box<dyn Stream<Item = Result<ControllerMessage, Status>> + Send>>;

    async fn connect(
        &self,
        request: Request<Streaming<AgentMessage>>,
    ) -> Result<Response<Self::ConnectStream>, Status> {
        let who = require_identity(&request)?;
        Err(Status::unimplemented(format!("no stream here, {who}")))
    }
}

pub struct Server {
    pub addr: SocketAddr,
    pub ca: Ca,
    /// The server's time for certificate expiry.
    pub clock: ManualClock,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<Result<(), pxfleet_tls::TlsError>>>,
}

impl Server {
    pub async fn start(revocation: Arc<dyn RevocationCheck>) -> Server {
        Server::start_named(revocation, &["127.0.0.1", "localhost"]).await
    }

    pub async fn start_named(revocation: Arc<dyn RevocationCheck>, sans: &[&str]) -> Server {
        let ca = Ca::generate("pxfleet test CA").unwrap();
        let sans: Vec<String> = sans.iter().map(|s| s.to_string()).collect();
        let bundle = ca.issue_server(&sans).unwrap().into_bundle(ca.cert_pem());
        let clock = ManualClock::new();
        let config =
            server_config_with_client_cas(&bundle, &[], revocation, clock.clock()).unwrap();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let router =
            tonic::transport::Server::builder().add_service(AgentServiceServer::new(Whoami));
        let task = tokio::spawn(serve_tls(router, listener, config, async {
            let _ = stopped.await;
        }));
        Server {
            addr,
            ca,
            clock,
            stop: Some(stop),
            task: Some(task),
        }
    }

    pub fn url(&self) -> String {
        format!("https://127.0.0.1:{}", self.addr.port())
    }

    pub fn client_bundle(&self, identity: &Identity) -> Bundle {
        self.ca
            .issue_client(identity, Duration::from_secs(3600))
            .unwrap()
            .into_bundle(self.ca.cert_pem())
    }

    pub async fn stop(mut self) {
        let _ = self.stop.take().unwrap().send(());
        self.task.take().unwrap().await.unwrap().unwrap();
    }
}
