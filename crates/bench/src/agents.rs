//! The simulated nodes' agents: one real agent session per node in this process, each with its
//! own node certificate, stopped together.

use std::path::Path;
use std::time::Duration;

use pxfleet_agent::AgentConfig;
use pxfleet_tls::{Ca, Identity};
use tokio::task::JoinHandle;

use super::{node_names, BenchError, BenchOptions};
use crate::sim::sim_node;

/// The agents running in this process; dropping it (or [`Agents::stop`]) ends them.
pub(super) struct Agents {
    stop: tokio::sync::watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
}

impl Agents {
    pub(super) async fn stop(self) {
        let _ = self.stop.send(true);
        for t in self.tasks {
            let _ = tokio::time::timeout(Duration::from_secs(10), t).await;
        }
    }
}

/// A node certificate from `ca` for every node of the run, each recorded in the controller's store at `db` as
/// one it issued (the store must not be open in a controller yet).
pub(super) fn node_bundles(
    opts: &BenchOptions,
    ca: &Ca,
    db: &Path,
) -> Result<Vec<(String, pxfleet_tls::Bundle)>, BenchError> {
    let store_err = |source| BenchError::Store {
        path: db.to_path_buf(),
        source,
    };
    let store = pxfleet_controller::store::Store::open(db).map_err(store_err)?;
    let validity = pxfleet_tls::DEFAULT_CLIENT_VALIDITY;
    let mut out = Vec::with_capacity(opts.nodes);
    for name in node_names(opts.nodes) {
        let identity = Identity::node(&name)?;
        let creds = ca.issue_client(&identity, validity)?;
        // issued now: its expiry less its validity
        let now = pxfleet_controller::identities::millis(creds.cert.not_after)
            .saturating_sub(validity.as_millis() as u64);
        store
            .put_serial(&pxfleet_controller::identities::serial_record(
                &creds.cert,
                &identity,
                now,
            ))
            .map_err(store_err)?;
        out.push((name, creds.into_bundle(ca.cert_pem())));
    }
    drop(store);
    Ok(out)
}

/// Starts one agent session per node in this process, each with its own node certificate (`bundles`).
pub(super) fn start_agents(
    opts: &BenchOptions,
    url: &str,
    bundles: Vec<(String, pxfleet_tls::Bundle)>,
    root: &Path,
    template_dir: &Path,
) -> Result<Agents, BenchError> {
    let (stop, stop_rx) = tokio::sync::watch::channel(false);
    let mut tasks = Vec::with_capacity(opts.nodes);
    for (name, bundle) in bundles {
        let tls = pxfleet_tls::client_config(&bundle)?;
        let dir = root.join("agents").join(&name);
        let mut config = AgentConfig::new(url, &name, &dir);
        config.state_dir = dir;
        config.parallelism = opts.parallelism;
        config.address_wait_secs = 5;
        let driver = sim_node(&name, opts.latency, template_dir.to_path_buf());
        let mut rx = stop_rx.clone();
        tasks.push(tokio::spawn(async move {
            let shutdown = async move {
                let _ = rx.wait_for(|v| *v).await;
            };
            if let Err(e) = pxfleet_agent::run_with(config, driver, tls, shutdown).await {
                tracing::error!(node = %name, error = %e, "agent stopped");
            }
        }));
    }
    Ok(Agents { stop, tasks })
}
