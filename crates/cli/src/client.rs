//! The connection to pxcontroller: reads the user's credential bundle, dials `https://HOST:PORT` with mutual
//! TLS (rustls, ring) and wraps the generated FleetService client. Commands take a [`Client`].

use pxfleet_proto::v1::fleet_service_client::FleetServiceClient;
use pxfleet_tls::{Bundle, BundlePaths};
use tonic::transport::Channel;

use crate::config::Settings;
use crate::error::{CliError, Result};

/// A connected FleetService client and the URL it talks to.
#[derive(Debug, Clone)]
pub struct Client {
    pub api: FleetServiceClient<Channel>,
    /// The controller URL, for hints such as `pxagent join --controller URL`.
    pub url: String,
}

/// The largest answer pxctl reads. tonic's default of 4 MiB is less than the plan of a few thousand containers
/// (about 1.8 KB each in `plan_json`, 18 MB at 10,000) or their `get containers` rows.
pub const MAX_ANSWER_BYTES: usize = 512 << 20;

impl Client {
    /// Wraps an existing channel (tests).
    pub fn from_channel(channel: Channel, url: impl Into<String>) -> Client {
        Client {
            api: FleetServiceClient::new(channel).max_decoding_message_size(MAX_ANSWER_BYTES),
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
        let connected = match &settings.server_name {
            None => pxfleet_tls::connect(&settings.controller, config).await,
            Some(name) => {
                pxfleet_tls::connect_with_server_name(&settings.controller, name, config).await
            }
        };
        let channel = connected.map_err(|e| match e {
            pxfleet_tls::TlsError::Handshake { url, refusal } => CliError::Handshake {
                url,
                fix: refusal.fix(&pxfleet_tls::Audience::Pxctl),
                refusal: Box::new(refusal),
            },
            e => CliError::from(e),
        })?;
        tracing::debug!(url = %settings.controller, "connected to the controller");
        Ok(Client::from_channel(channel, settings.controller.clone()))
    }
}
