//! Tests of the hooks: scrubbing secrets from quoted answers, HTTPS with a trusted CA, addresses.

use std::sync::OnceLock;

use tokio::sync::mpsc;

use super::*;
use crate::hooks::{spec_addresses, QUOTE};

/// Issue 24: a secret with characters a URL encodes showed percent-encoded in operations and logs; every form
/// it takes on the way (percent-encoded in either case, `+` for spaces, JSON-escaped, base64) is scrubbed.
#[test]
fn secrets_are_scrubbed_in_every_form_they_take() {
    use base64::Engine as _;
    let r = Recording::new();
    let secret = "s3cr/t &key=\"x\"";
    r.seen.borrow_mut().push(secret.into());
    let b64 = base64::engine::general_purpose::STANDARD.encode(secret);
    let b64url = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(secret);
    for text in [
        format!("GET /x?token={secret} failed"),
        "GET /x?token=s3cr%2Ft%20%26key%3D%22x%22 failed".to_string(),
        "GET /x?token=s3cr%2ft%20%26key%3d%22x%22 failed".to_string(),
        "form s3cr%2Ft+%26key%3D%22x%22 failed".to_string(),
        format!(
            "body {{\"k\":{}}}",
            serde_json::Value::String(secret.into())
        ),
        format!("Authorization: Basic {b64}"),
        format!("echo {b64url}"),
    ] {
        let out = r.scrub(&text);
        assert!(out.contains("***"), "{text} -> {out}");
        assert!(
            !out.contains("s3cr") && !out.contains(&b64) && !out.contains(&b64url),
            "{text} -> {out}"
        );
    }
}

#[test]
fn errors_quote_answers_without_secret_values_and_cut_long_ones() {
    let r = Recording::new();
    r.seen.borrow_mut().push("tok-123456".into());
    assert_eq!(
        r.scrub("  invalid token tok-123456 for /x?token=tok-123456\n"),
        "invalid token *** for /x?token=***"
    );
    let long = "é".repeat(400);
    let cut = r.scrub(&long);
    assert!(
        cut.ends_with("...") && cut.len() <= QUOTE + 3,
        "{}",
        cut.len()
    );
}

static TEST_CA: OnceLock<String> = OnceLock::new();

/// Client TLS that also trusts the PEM file `path` (the tests' own CA).
fn client_tls(path: &str) -> Result<Arc<rustls::ClientConfig>, String> {
    pxfleet_tls::public_client_config(Some(std::path::Path::new(path)))
        .map(Arc::new)
        .map_err(|e| e.to_string())
}

fn test_tls() -> Result<Arc<rustls::ClientConfig>, String> {
    client_tls(TEST_CA.get().expect("set by the test"))
}

#[tokio::test]
async fn https_with_a_trusted_server_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let ca = pxfleet_tls::Ca::generate("hooks test CA").unwrap();
    let ca_file = dir.path().join("ca.pem");
    std::fs::write(&ca_file, ca.cert_pem()).unwrap();
    TEST_CA.set(ca_file.display().to_string()).unwrap();
    let server = ca.issue_server(&["127.0.0.1".into()]).unwrap();
    let certs: Vec<_> = rustls_pemfile::certs(&mut server.cert.cert_pem.as_bytes())
        .map(Result::unwrap)
        .collect();
    let key = rustls_pemfile::private_key(&mut server.key_pem.as_bytes())
        .unwrap()
        .unwrap();
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(certs, key)
    .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let (tx, mut rx) = mpsc::channel::<(String, String)>(1);
    tokio::spawn(async move {
        let (tcp, _) = listener.accept().await.unwrap();
        let tls = acceptor.accept(tcp).await.unwrap();
        let svc = hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
            let tx = tx.clone();
            async move {
                let uri = req.uri().to_string();
                let body = req.into_body().collect().await.unwrap().to_bytes();
                let _ = tx
                    .send((uri, String::from_utf8_lossy(&body).into_owned()))
                    .await;
                Ok::<_, std::convert::Infallible>(hyper::Response::new(Full::new(
                    Bytes::from_static(b"{\"status\":\"ok\"}"),
                )))
            }
        });
        let _ = hyper::server::conn::http1::Builder::new()
            .serve_connection(hyper_util::rt::TokioIo::new(tls), svc)
            .await;
    });
    let http = HttpHook {
        url: format!("https://127.0.0.1:{port}/add?domain=${{hostname}}.lan"),
        method: "POST".into(),
        headers: Default::default(),
        body: Some(serde_json::json!({"ip": "${ipv4}"})),
        success_contains: Some("\"ok\"".into()),
    };
    let cx = HookContext {
        hostname: "www".into(),
        ipv4: "10.0.0.5".into(),
        ..Default::default()
    };
    assert_eq!(
        http_once_with(&http, &cx, test_tls, &Default::default()).await,
        Ok("HTTP 200".to_owned())
    );
    assert_eq!(
        rx.recv().await.unwrap(),
        (
            "/add?domain=www.lan".to_owned(),
            r#"{"ip":"10.0.0.5"}"#.to_owned()
        )
    );
    // A CA bundle that cannot be read is named in the error.
    let e = http_once_with(
        &http,
        &cx,
        || client_tls("/nonexistent/ca.pem"),
        &Default::default(),
    )
    .await
    .unwrap_err();
    assert!(e.contains("CA file /nonexistent/ca.pem"), "{e}");
}

#[test]
fn static_addresses_come_without_prefix_and_dhcp_is_flagged() {
    let f = pxfleet_spec::parse_fleet(
        "f.yaml",
        "fleet: t\ntemplates:\n  deb: {pveam: debian-12-standard_12.7-1_amd64.tar.zst}\ncontainers:\n  a: {template: deb, ip_address: 10.1.2.3/24, gateway: 10.1.2.1, ipv6: \"fd00::3/64\"}\n  b: {template: deb}\n",
        &pxfleet_spec::NoFiles,
    )
    .unwrap();
    assert_eq!(
        spec_addresses(&f.containers["a"]),
        ("10.1.2.3".into(), "fd00::3".into(), false)
    );
    assert_eq!(
        spec_addresses(&f.containers["b"]),
        (String::new(), String::new(), true)
    );
}
