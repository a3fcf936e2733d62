//! Prometheus metrics, hand-written text format, and the plain-HTTP listener serving `/metrics` and `/healthz`
//! (hyper, localhost by default). Counters live here; gauges (nodes and containers by status) are computed
//! from the store at scrape time.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::future::Future;
use std::sync::Mutex;

use bytes::Bytes;
use http_body_util::Full;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

use crate::model::{ContainerStatus, NodeStatus, Operation};
use crate::state::State;
use crate::store::StoreError;

/// Upper bounds (seconds) of the reconcile latency histogram.
const BUCKETS: [f64; 8] = [0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0];

#[derive(Default)]
struct Inner {
    /// (kind, result) -> count of finished operations.
    ops: BTreeMap<(String, String), u64>,
    latency_buckets: [u64; BUCKETS.len()],
    latency_count: u64,
    latency_sum: f64,
    /// Operations handed to agents, and of those, ones sent again for want of an acknowledgement.
    dispatched: u64,
    resent: u64,
}

#[derive(Default)]
pub struct Metrics {
    inner: Mutex<Inner>,
}

/// Gauges computed by the caller at scrape time.
#[derive(Debug, Default, Clone)]
pub struct Gauges {
    pub nodes_by_status: BTreeMap<&'static str, u64>,
    pub containers_by_status: BTreeMap<&'static str, u64>,
}

impl Metrics {
    pub fn op_finished(&self, kind: &str, result: &str) {
        let mut i = self.inner.lock().expect("metrics lock");
        *i.ops
            .entry((kind.to_string(), result.to_string()))
            .or_default() += 1;
    }

    pub fn op_dispatched(&self) {
        self.inner.lock().expect("metrics lock").dispatched += 1;
    }

    pub fn op_resent(&self) {
        self.inner.lock().expect("metrics lock").resent += 1;
    }

    pub fn reconcile_took(&self, secs: f64) {
        let mut i = self.inner.lock().expect("metrics lock");
        for (b, bound) in BUCKETS.iter().enumerate() {
            if secs <= *bound {
                i.latency_buckets[b] += 1;
            }
        }
        i.latency_count += 1;
        i.latency_sum += secs;
    }

    /// The Prometheus text exposition.
    pub fn render(&self, g: &Gauges) -> String {
        let i = self.inner.lock().expect("metrics lock");
        let mut out = String::new();
        out.push_str("# HELP pxfleet_nodes Nodes by status.\n# TYPE pxfleet_nodes gauge\n");
        for (s, n) in &g.nodes_by_status {
            let _ = writeln!(out, "pxfleet_nodes{{status=\"{s}\"}} {n}");
        }
        out.push_str("# HELP pxfleet_containers Managed containers by status.\n# TYPE pxfleet_containers gauge\n");
        for (s, n) in &g.containers_by_status {
            let _ = writeln!(out, "pxfleet_containers{{status=\"{s}\"}} {n}");
        }
        out.push_str(
            "# HELP pxfleet_operations_total Finished operations by kind and result.\n\
             # TYPE pxfleet_operations_total counter\n",
        );
        for ((kind, result), n) in &i.ops {
            let _ = writeln!(
                out,
                "pxfleet_operations_total{{kind=\"{kind}\",result=\"{result}\"}} {n}"
            );
        }
        let _ = writeln!(
            out,
            "# HELP pxfleet_operations_dispatched_total Operations sent to agents.\n\
             # TYPE pxfleet_operations_dispatched_total counter\n\
             pxfleet_operations_dispatched_total {}",
            i.dispatched
        );
        let _ = writeln!(
            out,
            "# HELP pxfleet_operations_resent_total Operations sent again: the agent had not acknowledged them.\n\
             # TYPE pxfleet_operations_resent_total counter\n\
             pxfleet_operations_resent_total {}",
            i.resent
        );
        out.push_str(
            "# HELP pxfleet_reconcile_seconds Duration of one reconcile pass.\n\
             # TYPE pxfleet_reconcile_seconds histogram\n",
        );
        for (b, bound) in BUCKETS.iter().enumerate() {
            let _ = writeln!(
                out,
                "pxfleet_reconcile_seconds_bucket{{le=\"{bound}\"}} {}",
                i.latency_buckets[b]
            );
        }
        let _ = writeln!(
            out,
            "pxfleet_reconcile_seconds_bucket{{le=\"+Inf\"}} {}",
            i.latency_count
        );
        let _ = writeln!(out, "pxfleet_reconcile_seconds_sum {}", i.latency_sum);
        let _ = writeln!(out, "pxfleet_reconcile_seconds_count {}", i.latency_count);
        out
    }
}

/// Serves `/metrics` (text from `scrape`) and `/healthz` until `shutdown` resolves.
pub async fn serve<F>(
    listener: TcpListener,
    scrape: F,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()>
where
    F: Fn() -> String + Clone + Send + Sync + 'static,
{
    tokio::pin!(shutdown);
    loop {
        let (stream, _) = tokio::select! {
            _ = &mut shutdown => return Ok(()),
            r = listener.accept() => r?,
        };
        let scrape = scrape.clone();
        tokio::spawn(async move {
            let svc = service_fn(move |req: Request<hyper::body::Incoming>| {
                let scrape = scrape.clone();
                async move {
                    let (status, ctype, body) = match req.uri().path() {
                        "/metrics" => (StatusCode::OK, "text/plain; version=0.0.4", scrape()),
                        "/healthz" => (StatusCode::OK, "text/plain", "ok\n".to_string()),
                        _ => (
                            StatusCode::NOT_FOUND,
                            "text/plain",
                            "not found\n".to_string(),
                        ),
                    };
                    Response::builder()
                        .status(status)
                        .header("content-type", ctype)
                        .body(Full::new(Bytes::from(body)))
                }
            });
            if let Err(e) = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), svc)
                .await
            {
                tracing::debug!(error = %e, "metrics connection ended");
            }
        });
    }
}

/// Gauges for /metrics.
pub fn gauges(state: &State) -> Result<Gauges, StoreError> {
    let mut g = Gauges::default();
    for s in [
        NodeStatus::Ready,
        NodeStatus::Down,
        NodeStatus::Cordoned,
        NodeStatus::Stalled,
    ] {
        g.nodes_by_status.insert(s.as_str(), 0);
    }
    let ops = state.store.ops()?;
    let now = state.now_ms();
    for n in state.store.nodes()? {
        let mine: Vec<&Operation> = ops.iter().filter(|o| o.node == n.name).collect();
        *g.nodes_by_status
            .entry(crate::nodes::health(state, &n, &mine, now).0.as_str())
            .or_default() += 1;
    }
    for s in ContainerStatus::ALL {
        g.containers_by_status.insert(s.as_str(), 0);
    }
    for c in crate::query::container_rows(state)? {
        *g.containers_by_status.entry(c.status.as_str()).or_default() += 1;
    }
    Ok(g)
}

/// The /metrics text.
pub fn scrape(state: &State) -> String {
    match gauges(state) {
        Ok(g) => state.metrics.render(&g),
        Err(e) => {
            tracing::error!(error = %e, "metrics scrape failed");
            state.metrics.render(&Gauges::default())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_prometheus_text() {
        let m = Metrics::default();
        m.op_finished("create", "succeeded");
        m.op_finished("create", "succeeded");
        m.op_finished("destroy", "failed");
        m.reconcile_took(0.003);
        let g = Gauges {
            nodes_by_status: [("ready", 2), ("down", 1)].into(),
            containers_by_status: [("running", 3)].into(),
        };
        let t = m.render(&g);
        assert!(t.contains("pxfleet_nodes{status=\"ready\"} 2\n"), "{t}");
        assert!(t.contains("pxfleet_nodes{status=\"down\"} 1\n"), "{t}");
        assert!(
            t.contains("pxfleet_containers{status=\"running\"} 3\n"),
            "{t}"
        );
        assert!(
            t.contains("pxfleet_operations_total{kind=\"create\",result=\"succeeded\"} 2\n"),
            "{t}"
        );
        assert!(
            t.contains("pxfleet_operations_total{kind=\"destroy\",result=\"failed\"} 1\n"),
            "{t}"
        );
        assert!(
            t.contains("pxfleet_reconcile_seconds_bucket{le=\"0.001\"} 0\n"),
            "{t}"
        );
        assert!(
            t.contains("pxfleet_reconcile_seconds_bucket{le=\"0.005\"} 1\n"),
            "{t}"
        );
        assert!(t.contains("pxfleet_reconcile_seconds_count 1\n"), "{t}");
    }
}
