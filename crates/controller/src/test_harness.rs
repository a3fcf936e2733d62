//! Test support (cargo feature `test-harness`, enabled from dev-dependencies only): a real controller in this
//! process on 127.0.0.1:0 with real mutual TLS, on a temporary data directory initialised by [`pki::init`] (CA,
//! server certificate, admin bundle). The one place the controller's, pxctl's and the workspace's tests start an
//! in-process controller. Its clock is a [`ManualClock`] that tests move forward (expired tokens, nodes gone
//! down) instead of sleeping. Failures panic with what failed: this is test code's fixture.

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use pxfleet_common::ManualClock;
use pxfleet_proto::v1::fleet_service_client::FleetServiceClient;
use pxfleet_tls::{Bundle, BundlePaths};
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tonic::transport::Channel;

use crate::{pki, Config};

/// A controller running in this process; dropping it asks the server to stop.
pub struct TestController {
    /// The data directory (pki/, admin/ with the admin bundle and its pxctl.toml, the store).
    pub dir: tempfile::TempDir,
    /// `https://127.0.0.1:PORT`.
    pub url: String,
    /// The metrics listener's address.
    pub metrics: SocketAddr,
    /// The admin bundle `init` wrote.
    pub admin: Bundle,
    /// The CA's fingerprint, as join tokens carry it.
    pub ca_fingerprint: String,
    /// The controller's clock: real time until a test advances it.
    pub clock: ManualClock,
    stop: Option<oneshot::Sender<()>>,
    server: Option<tokio::task::JoinHandle<()>>,
}

/// A fresh temporary data directory with the PKI `pxcontroller init` makes; returns it and the CA fingerprint.
pub fn init_data_dir() -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().expect("temp dir");
    let report = pki::init(dir.path(), &[], "https://127.0.0.1:0").expect("pki init");
    (dir, report.ca_fingerprint)
}

/// The configuration the tests start from: `dir` as the data dir, the seal key inside it, defaults otherwise.
pub fn base_config(dir: &Path) -> Config {
    Config {
        data_dir: dir.to_path_buf(),
        seal_key: Some(dir.join("seal.key")),
        ..Config::default()
    }
}

/// Shorter reconcile interval and retry backoff, for tests that wait for convergence.
pub fn fast_reconciler(config: &mut Config) {
    config.reconciler.interval_ms = 50;
    config.reconciler.backoff_base_ms = 10;
}

impl TestController {
    /// A new data directory, [`base_config`] changed by `tweak`, started.
    pub async fn start_with(tweak: impl FnOnce(&mut Config)) -> TestController {
        let (dir, fingerprint) = init_data_dir();
        let mut config = base_config(dir.path());
        tweak(&mut config);
        TestController::start_in(dir, fingerprint, config).await
    }

    /// Starts (or restarts) a controller with `config` on the initialised data directory `dir` (the
    /// config's `data_dir`), both listeners on 127.0.0.1:0.
    pub async fn start_in(
        dir: tempfile::TempDir,
        fingerprint: String,
        config: Config,
    ) -> TestController {
        let admin = Bundle::read(&BundlePaths::in_dir(&dir.path().join("admin"), "admin"))
            .expect("the admin bundle init wrote");
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let metrics_listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let url = format!(
            "https://127.0.0.1:{}",
            listener.local_addr().expect("local address").port()
        );
        let metrics = metrics_listener.local_addr().expect("local address");
        let (tx, rx) = oneshot::channel::<()>();
        let clock = ManualClock::new();
        let server_clock = clock.clock();
        let server = tokio::spawn(async move {
            crate::run_with_clock(config, server_clock, listener, metrics_listener, async {
                let _ = rx.await;
            })
            .await
            .expect("controller run");
        });
        TestController {
            dir,
            url,
            metrics,
            admin,
            ca_fingerprint: fingerprint,
            clock,
            stop: Some(tx),
            server: Some(server),
        }
    }

    /// The CA certificate (PEM).
    pub fn ca_pem(&self) -> &str {
        &self.admin.ca_pem
    }

    /// A mutual-TLS channel presenting `bundle`.
    pub async fn channel(&self, bundle: &Bundle) -> Channel {
        pxfleet_tls::connect(
            &self.url,
            pxfleet_tls::client_config(bundle).expect("client config"),
        )
        .await
        .expect("connect")
    }

    /// A channel without a client certificate (what enrolment uses).
    pub async fn anonymous(&self) -> Channel {
        pxfleet_tls::connect(
            &self.url,
            pxfleet_tls::anonymous_client_config(self.ca_pem()).expect("anonymous client config"),
        )
        .await
        .expect("connect")
    }

    /// The FleetService client of the admin bundle.
    pub async fn admin_client(&self) -> FleetServiceClient<Channel> {
        FleetServiceClient::new(self.channel(&self.admin).await)
    }

    /// A user certificate issued by this controller through the admin's API (recorded, as `pxctl user issue`
    /// does): the only kind it accepts.
    pub async fn issue_user(&self, name: &str, role: pxfleet_tls::Role) -> Bundle {
        use pxfleet_proto::v1 as pb;
        let kc = pxfleet_tls::generate_key_and_csr(name).expect("key and CSR");
        let role = match role {
            pxfleet_tls::Role::Admin => pb::UserRole::Admin,
            pxfleet_tls::Role::Operator => pb::UserRole::Operator,
            pxfleet_tls::Role::Viewer => pb::UserRole::Viewer,
        };
        let issued = self
            .admin_client()
            .await
            .issue_user_certificate(pb::IssueUserCertificateRequest {
                name: name.into(),
                role: role as i32,
                fleets: vec![],
                csr_pem: kc.csr_pem,
                validity_days: 0,
            })
            .await
            .expect("IssueUserCertificate")
            .into_inner();
        Bundle {
            ca_pem: issued.ca_pem,
            cert_pem: issued.cert_pem,
            key_pem: kc.key_pem,
        }
    }

    /// Stops the server and waits (at most `wait`) for it to finish; returns the data directory and the CA
    /// fingerprint for a restart.
    pub async fn stop(mut self, wait: Duration) -> (tempfile::TempDir, String) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        if let Some(server) = self.server.take() {
            tokio::time::timeout(wait, server)
                .await
                .expect("the controller stops in time")
                .expect("the controller task");
        }
        let dir = std::mem::replace(&mut self.dir, tempfile::tempdir().expect("temp dir"));
        (dir, std::mem::take(&mut self.ca_fingerprint))
    }
}

impl Drop for TestController {
    fn drop(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
    }
}
