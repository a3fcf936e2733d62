//! Test support: an in-memory PVE node implementing `NodeApi`, and a tiny HTTP server on 127.0.0.1:0.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http_body_util::Full;
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use pxfleet_agent::node::{
    typed_config, ConfigChange, ContainerConfig, CreateSpec, CtConfig, CtSummary, Interface,
    NodeApi, NodeFacts, PveError, Secret,
};
use pxfleet_agent::pve_options::{create_options, set_options};

/// A failure of this in-memory node, as crates/pve reports a failed command.
fn permanent(message: impl Into<String>) -> PveError {
    PveError::Command {
        argv: "fake".into(),
        status: Some(255),
        stderr: message.into(),
        retryable: false,
    }
}

/// A failure worth another attempt (as a lock timeout would be).
fn transient(message: impl Into<String>) -> PveError {
    PveError::Command {
        argv: "fake".into(),
        status: Some(255),
        stderr: message.into(),
        retryable: true,
    }
}

#[derive(Default)]
pub struct FakeState {
    pub cts: BTreeMap<u32, (String, CtConfig)>,
    pub calls: Vec<String>,
    /// Next create stops after writing `lock: create` and reports failure (a killed pct).
    pub crash_next_create: bool,
    pub running_now: usize,
    pub max_running: usize,
    pub passwords: Vec<String>,
}

pub struct FakeNode {
    pub state: Mutex<FakeState>,
    pub template_dir: PathBuf,
    /// Delay of start/create, to observe concurrency.
    pub delay: Duration,
}

impl FakeNode {
    pub fn new(template_dir: PathBuf) -> Arc<Self> {
        Arc::new(FakeNode {
            state: Mutex::new(FakeState::default()),
            template_dir,
            delay: Duration::ZERO,
        })
    }
    pub fn with_delay(template_dir: PathBuf, delay: Duration) -> Arc<Self> {
        Arc::new(FakeNode {
            state: Mutex::new(FakeState::default()),
            template_dir,
            delay,
        })
    }
    pub fn calls(&self, prefix: &str) -> usize {
        self.state
            .lock()
            .unwrap()
            .calls
            .iter()
            .filter(|c| c.starts_with(prefix))
            .count()
    }
    pub fn insert(&self, vmid: u32, status: &str, cfg: &[(&str, &str)]) {
        let cfg = cfg
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        self.state
            .lock()
            .unwrap()
            .cts
            .insert(vmid, (status.to_string(), cfg));
    }
    pub fn get(&self, vmid: u32) -> Option<(String, CtConfig)> {
        self.state.lock().unwrap().cts.get(&vmid).cloned()
    }
    fn call(&self, c: String) {
        self.state.lock().unwrap().calls.push(c);
    }
    async fn busy(&self) {
        {
            let mut s = self.state.lock().unwrap();
            s.running_now += 1;
            s.max_running = s.max_running.max(s.running_now);
        }
        tokio::time::sleep(self.delay).await;
        self.state.lock().unwrap().running_now -= 1;
    }
    fn missing(vmid: u32) -> PveError {
        permanent(format!(
            "Configuration file 'nodes/pve1/lxc/{vmid}.conf' does not exist"
        ))
    }
}

impl NodeApi for FakeNode {
    async fn list(&self) -> Result<Vec<CtSummary>, PveError> {
        let s = self.state.lock().unwrap();
        Ok(s.cts
            .iter()
            .map(|(vmid, (status, cfg))| CtSummary {
                vmid: *vmid,
                status: status.clone(),
                lock: cfg.get("lock").cloned(),
                // like PVE's listing: memory, cores and tags, not the rest of the config
                listing: format!(
                    "{:?} {:?} {:?}",
                    cfg.get("memory"),
                    cfg.get("cores"),
                    cfg.get("tags")
                ),
                name: cfg
                    .get("hostname")
                    .cloned()
                    .unwrap_or_else(|| format!("CT{vmid}")),
            })
            .collect())
    }
    async fn config(&self, vmid: u32) -> Result<Option<ContainerConfig>, PveError> {
        self.call(format!("config {vmid}"));
        self.state
            .lock()
            .unwrap()
            .cts
            .get(&vmid)
            .map(|c| typed_config(&c.1))
            .transpose()
    }
    async fn create(
        &self,
        spec: &CreateSpec,
        password: Option<&Secret>,
        _start_after: bool,
    ) -> Result<bool, PveError> {
        self.call(format!("create {}", spec.vmid));
        {
            let mut s = self.state.lock().unwrap();
            if let Some(p) = password {
                s.passwords.push(p.0.clone());
            }
            if s.cts.contains_key(&spec.vmid) {
                return Err(permanent(format!(
                    "CT {} already exists on node 'pve1'",
                    spec.vmid
                )));
            }
            let mut lock = CtConfig::new();
            lock.insert("lock".into(), "create".into());
            s.cts.insert(spec.vmid, ("stopped".into(), lock));
            if s.crash_next_create {
                s.crash_next_create = false;
                return Err(transient("pct create: killed"));
            }
        }
        self.busy().await;
        let (storage, file) = spec.template.split_once(":vztmpl/").unwrap();
        assert_eq!(storage, "local");
        if !self.template_dir.join(file).exists() {
            self.state.lock().unwrap().cts.remove(&spec.vmid);
            return Err(permanent(format!(
                "unable to create CT {} - can't find file '{}'",
                spec.vmid, spec.template
            )));
        }
        let mut cfg: CtConfig = create_options(spec)?.into_iter().collect();
        if let Some(net) = cfg.get_mut("net0") {
            if !net.contains("hwaddr=") {
                *net = net.replace(",ip=", ",hwaddr=BC:24:11:00:00:01,ip=");
            }
        }
        if let Some(r) = cfg.get("rootfs").cloned() {
            let (ds, size) = r.split_once(':').unwrap();
            cfg.insert(
                "rootfs".into(),
                format!("{ds}:subvol-{}-disk-0,size={size}G", spec.vmid),
            );
        }
        self.state
            .lock()
            .unwrap()
            .cts
            .insert(spec.vmid, ("stopped".into(), cfg));
        Ok(false)
    }
    async fn set(&self, vmid: u32, change: &ConfigChange) -> Result<(), PveError> {
        let (options, delete) = set_options(vmid, change)?;
        self.call(format!("set {vmid}"));
        let mut s = self.state.lock().unwrap();
        let ct = s.cts.get_mut(&vmid).ok_or_else(|| Self::missing(vmid))?;
        for (k, v) in &options {
            ct.1.insert(k.clone(), v.clone());
        }
        for k in &delete {
            ct.1.remove(k);
        }
        Ok(())
    }
    async fn resize(&self, vmid: u32, disk: &str, size_gib: u64) -> Result<(), PveError> {
        self.call(format!("resize {vmid}"));
        let mut s = self.state.lock().unwrap();
        let ct = s.cts.get_mut(&vmid).ok_or_else(|| Self::missing(vmid))?;
        let cur = ct.1.get(disk).cloned().unwrap();
        let base = cur.split(",size=").next().unwrap();
        ct.1.insert(disk.into(), format!("{base},size={size_gib}G"));
        Ok(())
    }
    async fn start(&self, vmid: u32) -> Result<(), PveError> {
        self.call(format!("start {vmid}"));
        self.busy().await;
        let mut s = self.state.lock().unwrap();
        let ct = s.cts.get_mut(&vmid).ok_or_else(|| Self::missing(vmid))?;
        if ct.0 == "running" {
            return Err(permanent(format!("CT {vmid} already running")));
        }
        ct.0 = "running".into();
        Ok(())
    }
    async fn stop(&self, vmid: u32) -> Result<(), PveError> {
        self.call(format!("stop {vmid}"));
        let mut s = self.state.lock().unwrap();
        let ct = s.cts.get_mut(&vmid).ok_or_else(|| Self::missing(vmid))?;
        ct.0 = "stopped".into();
        Ok(())
    }
    async fn shutdown(&self, vmid: u32, _timeout_secs: u32) -> Result<bool, PveError> {
        self.call(format!("shutdown {vmid}"));
        self.busy().await;
        let mut s = self.state.lock().unwrap();
        let ct = s.cts.get_mut(&vmid).ok_or_else(|| Self::missing(vmid))?;
        ct.0 = "stopped".into();
        Ok(true)
    }
    async fn destroy(&self, vmid: u32, _purge: bool) -> Result<(), PveError> {
        self.call(format!("destroy {vmid}"));
        let mut s = self.state.lock().unwrap();
        let ct = s.cts.get(&vmid).ok_or_else(|| Self::missing(vmid))?;
        if let Some(l) = ct.1.get("lock") {
            return Err(permanent(format!("CT is locked ({l})")));
        }
        if ct.0 == "running" {
            return Err(permanent(format!(
                "unable to destroy CT {vmid} - container is running"
            )));
        }
        s.cts.remove(&vmid);
        Ok(())
    }
    async fn unlock(&self, vmid: u32) -> Result<(), PveError> {
        self.call(format!("unlock {vmid}"));
        let mut s = self.state.lock().unwrap();
        let ct = s.cts.get_mut(&vmid).ok_or_else(|| Self::missing(vmid))?;
        ct.1.remove("lock");
        Ok(())
    }
    async fn migrate(&self, vmid: u32, _target: &str, _restart: bool) -> Result<(), PveError> {
        self.call(format!("migrate {vmid}"));
        self.state.lock().unwrap().cts.remove(&vmid);
        Ok(())
    }
    async fn interfaces(&self, vmid: u32) -> Result<Option<Vec<Interface>>, PveError> {
        let s = self.state.lock().unwrap();
        let ct = s.cts.get(&vmid).ok_or_else(|| Self::missing(vmid))?;
        if ct.0 != "running" {
            return Ok(None);
        }
        let ip =
            ct.1.get("net0")
                .and_then(|n| n.split(',').find_map(|p| p.strip_prefix("ip=")))
                .map(|ip| {
                    if ip == "dhcp" {
                        "10.77.0.50/24".to_string()
                    } else {
                        ip.to_string()
                    }
                });
        Ok(Some(vec![
            Interface {
                name: "lo".into(),
                hwaddr: "00:00:00:00:00:00".into(),
                addresses: vec!["127.0.0.1/8".into()],
            },
            Interface {
                name: "eth0".into(),
                hwaddr: "bc:24:11:00:00:01".into(),
                addresses: ip.into_iter().collect(),
            },
        ]))
    }
    async fn facts(&self) -> Result<NodeFacts, PveError> {
        Ok(NodeFacts {
            pve_version: "9.0.3".into(),
            cluster_name: "lab".into(),
            cores: 8,
            memory_bytes: 32 << 30,
            memory_free_bytes: 16 << 30,
            ..Default::default()
        })
    }
    async fn template_dir(&self, storage: &str) -> Result<PathBuf, PveError> {
        assert_eq!(storage, "local");
        Ok(self.template_dir.clone())
    }
    async fn pveam_download(&self, _storage: &str, name: &str) -> Result<(), PveError> {
        self.call(format!("pveam {name}"));
        std::fs::write(self.template_dir.join(name), b"appliance").unwrap();
        Ok(())
    }
}

/// A tiny HTTP server: serves `body` at every path after `delay`; counts requests.
pub struct TestServer {
    pub url: String,
    pub hits: Arc<AtomicUsize>,
}

pub async fn serve(body: Vec<u8>, delay: Duration) -> TestServer {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let hits = Arc::new(AtomicUsize::new(0));
    let body = Bytes::from(body);
    let h = hits.clone();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            let body = body.clone();
            let h = h.clone();
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(
                    move |req: hyper::Request<hyper::body::Incoming>| {
                        let body = body.clone();
                        let h = h.clone();
                        async move {
                            h.fetch_add(1, Ordering::SeqCst);
                            tokio::time::sleep(delay).await;
                            if req.uri().path().starts_with("/redirect") {
                                return Ok::<_, Infallible>(
                                    hyper::Response::builder()
                                        .status(302)
                                        .header("location", "/t.tar.zst")
                                        .body(Full::new(Bytes::new()))
                                        .unwrap(),
                                );
                            }
                            if req.uri().path().starts_with("/missing") {
                                return Ok(hyper::Response::builder()
                                    .status(404)
                                    .body(Full::new(Bytes::new()))
                                    .unwrap());
                            }
                            Ok(hyper::Response::new(Full::new(body)))
                        }
                    },
                );
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    TestServer {
        url: format!("http://{addr}"),
        hits,
    }
}

pub fn sha256_hex(data: &[u8]) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(data))
}
