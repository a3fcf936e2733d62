//! An HTTP server for hook tests: started on 127.0.0.1:0 by the test, it records every request it gets.

use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper::service::service_fn;

#[derive(Clone, Debug)]
pub struct Seen {
    pub method: String,
    pub uri: String,
    /// The `X-Api-Key` header.
    pub api_key: String,
    pub body: String,
}

/// A server on 127.0.0.1:0 that records every request; `/fail...` answers 500 (echoing the query, token
/// included, to check it is scrubbed), the rest 200 with Technitium's `{"status":"ok"}`.
pub async fn server() -> (u16, Arc<Mutex<Vec<Seen>>>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            let log = log.clone();
            tokio::spawn(async move {
                let svc = service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                    let log = log.clone();
                    async move {
                        let method = req.method().to_string();
                        let uri = req.uri().to_string();
                        let api_key = req
                            .headers()
                            .get("x-api-key")
                            .and_then(|v| v.to_str().ok())
                            .unwrap_or_default()
                            .to_owned();
                        let body = req.into_body().collect().await.unwrap().to_bytes();
                        log.lock().unwrap().push(Seen {
                            method,
                            uri: uri.clone(),
                            api_key,
                            body: String::from_utf8_lossy(&body).into_owned(),
                        });
                        let resp = if uri.starts_with("/fail") {
                            hyper::Response::builder()
                                .status(500)
                                .body(Full::new(Bytes::from(format!("boom for {uri}"))))
                        } else {
                            hyper::Response::builder()
                                .header("content-type", "application/json")
                                .body(Full::new(Bytes::from_static(br#"{"status":"ok"}"#)))
                        };
                        Ok::<_, std::convert::Infallible>(resp.unwrap())
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    (port, seen)
}

pub fn requests(seen: &Arc<Mutex<Vec<Seen>>>, prefix: &str) -> Vec<Seen> {
    seen.lock()
        .unwrap()
        .iter()
        .filter(|s| s.uri.starts_with(prefix))
        .cloned()
        .collect()
}
