//! `pxagent join`: enrolment. The key is made here and never leaves the node; the controller signs
//! a CSR in exchange for a one-time token, and the controller's CA is pinned by the fingerprint the
//! token carries. Writes the key (0600), certificate, CA and `agent.toml` into the config directory.

use std::path::{Path, PathBuf};

use pxfleet_proto::v1;

use crate::config::AgentConfig;

#[derive(Debug, thiserror::Error)]
pub enum JoinError {
    #[error("join token: {0}")]
    Token(pxfleet_tls::TlsError),
    #[error("{0}")]
    Tls(#[from] pxfleet_tls::TlsError),
    #[error("controller {url} refused enrolment: {}", status.message())]
    Refused { url: String, status: tonic::Status },
    #[error("{source}. To fix: {fix}")]
    Handshake {
        #[source]
        source: pxfleet_tls::TlsError,
        fix: String,
    },
    #[error("the CA returned by {url} does not match the token's fingerprint: {source}")]
    CaMismatch {
        url: String,
        #[source]
        source: pxfleet_tls::TlsError,
    },
    #[error("writing {path}: {source}")]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{0}")]
    Config(#[from] crate::config::ConfigError),
}

/// What `join` wrote.
#[derive(Debug, Clone)]
pub struct Joined {
    pub config_path: PathBuf,
    pub config: AgentConfig,
    pub serial: String,
}

/// Enrols this node with the controller and writes its credentials and config into `config_dir`.
pub async fn join(
    controller: &str,
    token: &str,
    node: &str,
    config_dir: &Path,
) -> Result<Joined, JoinError> {
    let parsed: pxfleet_tls::JoinToken = token.parse().map_err(JoinError::Token)?;
    let mut config = AgentConfig::new(controller, node, config_dir);
    config.validate(Path::new("<command line>"))?;
    let key = pxfleet_tls::generate_key_and_csr(node)?;
    let tls = pxfleet_tls::pinned_client_config(&parsed.ca_fingerprint)?;
    let channel = pxfleet_tls::connect(controller, tls)
        .await
        .map_err(|e| match &e {
            pxfleet_tls::TlsError::Handshake { refusal, .. } => JoinError::Handshake {
                fix: refusal.fix(&pxfleet_tls::Audience::Join),
                source: e,
            },
            _ => JoinError::Tls(e),
        })?;
    let mut client = v1::agent_service_client::AgentServiceClient::new(channel);
    let resp = client
        .enroll(v1::EnrollRequest {
            token: token.to_string(),
            node: node.to_string(),
            csr_pem: key.csr_pem.clone(),
        })
        .await
        .map_err(|status| JoinError::Refused {
            url: controller.to_string(),
            status,
        })?
        .into_inner();
    pxfleet_tls::verify_ca_fingerprint(&resp.ca_pem, &parsed.ca_fingerprint).map_err(|source| {
        JoinError::CaMismatch {
            url: controller.to_string(),
            source,
        }
    })?;
    let bundle = pxfleet_tls::Bundle {
        ca_pem: resp.ca_pem,
        cert_pem: resp.cert_pem,
        key_pem: key.key_pem,
    };
    bundle.write(&pxfleet_tls::BundlePaths {
        ca: config.ca.clone(),
        cert: config.cert.clone(),
        key: config.key.clone(),
    })?;
    let config_path = config_dir.join("agent.toml");
    if config_dir != Path::new(crate::config::DEFAULT_CONFIG_DIR) {
        // A non-default directory (tests, side-by-side installs) keeps its state beside the config.
        config.state_dir = config_dir.join("state");
    }
    std::fs::write(&config_path, config.to_toml()).map_err(|source| JoinError::Write {
        path: config_path.clone(),
        source,
    })?;
    tracing::info!(node, serial = %resp.serial, path = %config_path.display(), "enrolled");
    Ok(Joined {
        config_path,
        config,
        serial: resp.serial,
    })
}
