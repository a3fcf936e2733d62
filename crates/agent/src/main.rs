//! `pxagent`: command-line entry point. Parses arguments and calls into the library.

use std::path::PathBuf;

use anyhow::Context;
use clap::{Parser, Subcommand};
use pxfleet_agent::config::{AgentConfig, DEFAULT_CONFIG_DIR, DEFAULT_CONFIG_PATH};

#[derive(Parser)]
#[command(
    name = "pxagent",
    version,
    about = "pxfleet node agent (runs on every PVE node)"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Enrol this node: make a key, have the controller sign it with a one-time token, write the config.
    Join {
        /// Controller URL, https://HOST:PORT.
        #[arg(long)]
        controller: String,
        /// One-time join token from `pxctl node token` (carries the CA fingerprint to pin).
        #[arg(long, env = "PXAGENT_JOIN_TOKEN", hide_env_values = true)]
        token: String,
        /// This node's PVE name.
        #[arg(long)]
        node: String,
        #[arg(long, default_value = DEFAULT_CONFIG_DIR)]
        config_dir: PathBuf,
    },
    /// Connect to the controller and execute operations until stopped.
    Run {
        #[arg(long, default_value = DEFAULT_CONFIG_PATH)]
        config: PathBuf,
    },
    /// Renew the node certificate now (the running agent also renews by itself when a third of its
    /// lifetime is left). Uses the current certificate; a node whose certificate expired needs a new token.
    Renew {
        #[arg(long, default_value = DEFAULT_CONFIG_PATH)]
        config: PathBuf,
    },
    /// Check a config file and exit.
    ValidateConfig {
        #[arg(long, default_value = DEFAULT_CONFIG_PATH)]
        config: PathBuf,
    },
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    pxfleet_common::logging::init(tracing::level_filters::LevelFilter::INFO);
    match Cli::parse().command {
        Command::Join {
            controller,
            token,
            node,
            config_dir,
        } => {
            let joined = pxfleet_agent::join(&controller, &token, &node, &config_dir)
                .await
                .context("pxagent join failed")?;
            println!(
                "enrolled node {node} (certificate serial {}); config written to {}",
                joined.serial,
                joined.config_path.display()
            );
            println!(
                "the pxagent service starts by itself where the Debian package is installed (systemd watches {}); \
                 otherwise start it with: pxagent run --config {}",
                joined.config_path.display(),
                joined.config_path.display()
            );
        }
        Command::Run { config } => {
            let config = AgentConfig::load(&config)?;
            pxfleet_agent::run(config, stop_signal()).await?;
        }
        Command::Renew { config } => {
            let config = AgentConfig::load(&config)?;
            let info = pxfleet_agent::renew::renew_now(&config)
                .await
                .inspect_err(|e| {
                    if let pxfleet_agent::renew::RenewError::Tls(t) = e {
                        pxfleet_agent::renew::log_refusal(t, &config.node);
                    }
                })?;
            println!(
                "renewed the certificate of node {}: serial {}, valid until {}; written to {}",
                config.node,
                info.serial,
                info.not_after,
                config.cert.display()
            );
            println!(
                "a running pxagent presents it from its next connection (restart it to switch now)"
            );
        }
        Command::ValidateConfig { config } => {
            AgentConfig::load(&config)?;
            println!("{}: ok", config.display());
        }
    }
    Ok(())
}

/// SIGINT or SIGTERM (what systemd and dev mode send): the daemon stops cleanly on either.
fn stop_signal() -> impl std::future::Future<Output = ()> {
    // the handlers are installed now, at startup, not when the future is first polled
    let stop = pxfleet_common::shutdown_signal("pxagent");
    async move {
        stop.await;
    }
}
