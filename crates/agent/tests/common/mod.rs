//! Test support: the agent's in-memory PVE node (`pxfleet_agent::mem_node`) as the tests use it, and a tiny
//! HTTP server on 127.0.0.1:0.
#![allow(dead_code)]

use std::convert::Infallible;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use http_body_util::Full;
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use pxfleet_agent::mem_node::{Latency, MemNode, MemNodeOptions};

/// The in-memory node of the agent's tests: `pve1`, templates in `template_dir` (`pveam` downloads there), no
/// config locks (the executor's own ordering is what the tests check), `delay` for create, start, shutdown and
/// destroy.
pub fn fake_node(template_dir: PathBuf, delay: Duration) -> Arc<MemNode> {
    MemNode::new(MemNodeOptions {
        latency: Latency::uniform(delay),
        ..MemNodeOptions::new("pve1", template_dir)
    })
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
