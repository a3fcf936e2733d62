//! The connection to pxcontroller: reads the user's credential bundle, dials `https://HOST:PORT` with mutual
//! TLS (rustls, ring) and wraps the generated FleetService client. Commands take a [`Client`].

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use hyper_util::rt::TokioIo;
use pxfleet_proto::v1::fleet_service_client::FleetServiceClient;
use pxfleet_tls::{Bundle, BundlePaths, TlsError};
use rustls::pki_types::ServerName;
use tokio::net::TcpStream;
use tokio_rustls::{client::TlsStream, TlsConnector};
use tonic::transport::{Channel, Endpoint, Uri};

use crate::config::Settings;
use crate::error::Result;

/// A connected FleetService client and the URL it talks to.
#[derive(Debug, Clone)]
pub struct Client {
    pub api: FleetServiceClient<Channel>,
    /// The controller URL, for hints such as `pxagent join --controller URL`.
    pub url: String,
}

impl Client {
    /// Wraps an existing channel (tests).
    pub fn from_channel(channel: Channel, url: impl Into<String>) -> Client {
        Client {
            api: FleetServiceClient::new(channel),
            url: url.into(),
        }
    }

    /// Reads the credentials named by `settings` and connects.
    pub async fn connect(settings: &Settings) -> Result<Client> {
        let bundle = Bundle::read(&BundlePaths {
            ca: settings.ca.clone(),
            cert: settings.cert.clone(),
            key: settings.key.clone(),
        })?;
        let config = pxfleet_tls::client_config(&bundle)?;
        let channel = match &settings.server_name {
            None => pxfleet_tls::connect(&settings.controller, config).await?,
            Some(name) => connect_as(&settings.controller, name, config).await?,
        };
        tracing::debug!(url = %settings.controller, "connected to the controller");
        Ok(Client::from_channel(channel, settings.controller.clone()))
    }
}

/// Like [`pxfleet_tls::connect`] but verifies the server certificate against `server_name` instead of the
/// URL's host (a controller reached through an address its certificate does not name).
async fn connect_as(
    url: &str,
    server_name: &str,
    config: Arc<rustls::ClientConfig>,
) -> Result<Channel, TlsError> {
    let bad = |reason: &str| TlsError::Url {
        url: url.to_string(),
        reason: reason.to_string(),
    };
    let uri: Uri = url
        .parse()
        .map_err(|_| bad("not a URL; expected https://HOST:PORT"))?;
    if uri.scheme_str() != Some("https") {
        return Err(bad("expected https://HOST:PORT (pxfleet always uses TLS)"));
    }
    let host = uri.host().ok_or_else(|| bad("no host"))?.to_string();
    let port = uri
        .port_u16()
        .ok_or_else(|| bad("no port; expected https://HOST:PORT"))?;
    let name = ServerName::try_from(server_name.to_string()).map_err(|_| TlsError::InvalidSan {
        san: server_name.to_string(),
        reason: "server_name is neither a DNS name nor an IP address".into(),
    })?;
    let endpoint = Endpoint::from_shared(format!("http://{host}:{port}"))
        .map_err(|_| bad("not a valid endpoint"))?
        .origin(uri)
        .connect_timeout(pxfleet_tls::CONNECT_TIMEOUT);
    let connector = NamedTls {
        host: host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_string(),
        port,
        name,
        tls: TlsConnector::from(config),
    };
    endpoint
        .connect_with_connector(connector)
        .await
        .map_err(|source| TlsError::Connect {
            url: url.to_string(),
            source,
        })
}

#[derive(Clone)]
struct NamedTls {
    host: String,
    port: u16,
    name: ServerName<'static>,
    tls: TlsConnector,
}

type Connecting =
    Pin<Box<dyn Future<Output = std::io::Result<TokioIo<TlsStream<TcpStream>>>> + Send>>;

impl tonic::codegen::Service<Uri> for NamedTls {
    type Response = TokioIo<TlsStream<TcpStream>>;
    type Error = std::io::Error;
    type Future = Connecting;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: Uri) -> Self::Future {
        let this = self.clone();
        Box::pin(async move {
            let tcp = TcpStream::connect((this.host.as_str(), this.port)).await?;
            tcp.set_nodelay(true)?;
            Ok(TokioIo::new(this.tls.connect(this.name, tcp).await?))
        })
    }
}
