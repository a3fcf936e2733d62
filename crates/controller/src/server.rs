//! Running the controller: open the store, load the PKI, serve FleetService and AgentService on one mutual-TLS
//! port, `/metrics` and `/healthz` on another, and run the reconciler, until shutdown.

use std::future::Future;
use std::sync::Arc;

use pxfleet_common::Clock;
use pxfleet_proto::v1::agent_service_server::AgentServiceServer;
use pxfleet_proto::v1::fleet_service_server::FleetServiceServer;
use pxfleet_tls::{RevocationList, Serial};
use tokio::net::TcpListener;

use crate::config::Config;
use crate::datadir::{self, DataDirError, DataDirLock};
use crate::grpc::agent_service::AgentApi;
use crate::grpc::fleet_service::FleetApi;
use crate::pki::{self, PkiError};
use crate::state::State;
use crate::store::{Store, StoreError};

#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error(transparent)]
    Pki(#[from] PkiError),
    #[error(transparent)]
    DataDir(#[from] DataDirError),
    #[error("opening the database in {path}: {source}")]
    Store {
        path: std::path::PathBuf,
        #[source]
        source: StoreError,
    },
    #[error(transparent)]
    StoreOp(#[from] StoreError),
    #[error("TLS: {0}")]
    Tls(#[from] pxfleet_tls::TlsError),
    #[error("metrics listener: {0}")]
    Metrics(#[source] std::io::Error),
}

/// How long shutdown waits for the last task holding the controller's state (and so the store) to end.
const RELEASE_LIMIT: std::time::Duration = std::time::Duration::from_secs(30);

/// Serves until `shutdown` resolves. Tests pass listeners bound to 127.0.0.1:0. Refuses at once when another
/// controller holds the data directory; returns only after the store is closed (sled's lock released), so a
/// restart on the same data directory, in this process or another, opens it cleanly.
pub async fn run(
    config: Config,
    listener: TcpListener,
    metrics_listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServerError> {
    run_with_clock(
        config,
        Clock::system(),
        listener,
        metrics_listener,
        shutdown,
    )
    .await
}

/// [`run`] on `clock`: every timestamp, expiry and timeout of this controller reads it (tests pass a
/// [`pxfleet_common::ManualClock`]'s and move it forward instead of sleeping).
pub async fn run_with_clock(
    config: Config,
    clock: Clock,
    listener: TcpListener,
    metrics_listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServerError> {
    let dir_lock = DataDirLock::acquire(&config.data_dir)?;
    let db = config.db_path();
    // No other controller holds the data dir now, but sled's own threads may hold the database a moment
    // after its last handle in this process was dropped (`pxcontroller dev` stores join tokens just before,
    // a test restarts on the same dir): opening it then fails with "could not acquire lock".
    datadir::wait_store_released(&db, RELEASE_LIMIT).await?;
    let store =
        Store::open_sealed(&db, &config.seal_key_path()).map_err(|source| ServerError::Store {
            path: db.clone(),
            source,
        })?;
    let result = serve(config, clock, store, listener, metrics_listener, shutdown).await;
    // `serve` dropped its state; tasks it spawned may still hold a clone for a moment.
    let released = datadir::wait_store_released(&db, RELEASE_LIMIT).await;
    drop(dir_lock);
    result?;
    released?;
    Ok(())
}

async fn serve(
    config: Config,
    clock: Clock,
    store: Store,
    listener: TcpListener,
    metrics_listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServerError> {
    let (ca, server_bundle) = pki::load(&config)?;
    let revoked: Vec<Serial> = store
        .serials()?
        .into_iter()
        .filter(|s| s.revoked)
        .filter_map(|s| Serial::from_hex(&s.serial).ok())
        .collect();
    let revocations = Arc::new(RevocationList::new(revoked));
    let extra_cas = pki::extra_client_cas(&config)?;
    let tls = pxfleet_tls::server_config_with_client_cas(
        &server_bundle,
        &extra_cas,
        revocations.clone(),
        clock.clone(),
    )?;
    let state = State::new(config, store, ca, revocations, clock);

    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let stop_tx = Arc::new(stop_tx);
    let stopped = move || {
        let mut rx = stop_rx.clone();
        async move {
            let _ = rx.wait_for(|v| *v).await;
        }
    };
    let reconciler = tokio::spawn(crate::reconcile::run(state.clone(), stopped()));
    tokio::spawn(crate::hooks::run(state.clone(), stopped()));
    crate::backup::schedule::spawn(&state, stopped());
    let scrape_state = Arc::downgrade(&state);
    let metrics = tokio::spawn(crate::metrics::serve(
        metrics_listener,
        move || {
            scrape_state
                .upgrade()
                .map(|s| crate::metrics::scrape(&s))
                .unwrap_or_default()
        },
        stopped(),
    ));
    {
        let stop_tx = stop_tx.clone();
        tokio::spawn(async move {
            shutdown.await;
            let _ = stop_tx.send(true);
        });
    }
    {
        // End the agents' Connect streams at shutdown, so graceful shutdown does not wait for them.
        let state = Arc::downgrade(&state);
        let stopped = stopped();
        tokio::spawn(async move {
            stopped.await;
            if let Some(state) = state.upgrade() {
                state.sessions.close_all();
                state.limiter.close_streams();
            }
        });
    }
    tracing::info!(addr = ?listener.local_addr().ok(), "pxcontroller serving");
    // HTTP/2 keepalive: an agent cut off by the network is disconnected (its stream ends, its operations are
    // requeued for its return) instead of being held as its node's session forever.
    let limits = state.config.limits.clone();
    let max_message = limits.max_message_bytes as usize;
    let router = pxfleet_tls::server_builder()
        .timeout(limits.request_timeout())
        .add_service(
            FleetServiceServer::new(FleetApi {
                state: state.clone(),
            })
            .max_decoding_message_size(max_message),
        )
        .add_service(
            AgentServiceServer::new(AgentApi {
                state: state.clone(),
            })
            .max_decoding_message_size(max_message),
        );
    let served = pxfleet_tls::serve_tls(router, listener, tls, stopped()).await;
    // also when serving failed before the shutdown signal
    let _ = stop_tx.send(true);
    let _ = reconciler.await;
    let metrics_result = metrics.await;
    let flushed = state.store.flush().await;
    drop(state);
    flushed?;
    served?;
    if let Ok(Err(e)) = metrics_result {
        return Err(ServerError::Metrics(e));
    }
    Ok(())
}
