//! Template seeding: downloads a template over HTTP(S) into a storage's template cache, streamed to
//! a temporary file (`.<name>.tmp.<random>`) while hashing, verified, fsynced and renamed into place.
//! A single-flight map makes concurrent requests for one destination share one download; a checksum
//! mismatch fails every waiter with the expected and actual digests and leaves no file behind.
//! TLS is rustls (ring) with the system CA bundle plus an optional extra CA file.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::{BoxFuture, FutureExt, Shared};
use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use sha2::Digest as _;
use tokio::io::AsyncWriteExt;

use crate::ops::Digest;

/// System CA bundles tried in order (Debian first).
const SYSTEM_CA_BUNDLES: &[&str] = &[
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
];
const MAX_REDIRECTS: usize = 5;
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);
/// A download that receives nothing for this long is abandoned.
const IDLE_TIMEOUT: Duration = Duration::from_secs(120);

/// Why a template could not be seeded. Cloneable: one failed download fails every waiter.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum SeedError {
    #[error("template {url}: checksum mismatch: expected {algorithm} {expected}, got {actual}")]
    Mismatch {
        url: String,
        algorithm: &'static str,
        expected: String,
        actual: String,
    },
    #[error("template {url}: {message}")]
    Http { url: String, message: String },
    #[error("template {url}: HTTP status {status}")]
    Status { url: String, status: u16 },
    #[error("template file {path}: {message}")]
    Io { path: PathBuf, message: String },
    #[error("template CA file {path}: {message}")]
    Tls { path: PathBuf, message: String },
    #[error("template file name `{name}` is not a plain file name")]
    BadName { name: String },
}

type Flight = Shared<BoxFuture<'static, Result<PathBuf, SeedError>>>;

/// Downloads templates, one at a time per destination file.
#[derive(Clone)]
pub struct Seeder {
    inner: Arc<SeederInner>,
}

struct SeederInner {
    extra_ca: Option<PathBuf>,
    flights: Mutex<HashMap<PathBuf, Flight>>,
    /// Files verified by this process (skip re-hashing an existing file every time).
    verified: Mutex<HashMap<PathBuf, String>>,
    downloads: AtomicUsize,
}

impl Seeder {
    /// `extra_ca`: a PEM file trusted for HTTPS downloads besides the system bundle.
    pub fn new(extra_ca: Option<PathBuf>) -> Self {
        Seeder {
            inner: Arc::new(SeederInner {
                extra_ca,
                flights: Mutex::new(HashMap::new()),
                verified: Mutex::new(HashMap::new()),
                downloads: AtomicUsize::new(0),
            }),
        }
    }

    /// How many downloads this seeder has started (for tests and metrics).
    pub fn downloads(&self) -> usize {
        self.inner.downloads.load(Ordering::SeqCst)
    }

    /// Makes sure `dir/file_name` exists with the expected digest, downloading it from `url` if needed.
    /// Concurrent calls for the same file share one download and one result.
    pub async fn ensure(
        &self,
        dir: &Path,
        file_name: &str,
        url: &str,
        digest: &Digest,
    ) -> Result<PathBuf, SeedError> {
        if file_name.is_empty()
            || file_name.contains('/')
            || file_name.starts_with('.')
            || file_name.contains('\0')
        {
            return Err(SeedError::BadName {
                name: file_name.to_string(),
            });
        }
        let dest = dir.join(file_name);
        let flight = {
            let mut flights = self.inner.flights.lock().expect("flights lock");
            if let Some(f) = flights.get(&dest) {
                f.clone()
            } else {
                let inner = self.inner.clone();
                let (d, u, g) = (dest.clone(), url.to_string(), digest.clone());
                let task = tokio::spawn(async move {
                    let result = seed_one(&inner, &d, &u, &g).await;
                    inner.flights.lock().expect("flights lock").remove(&d);
                    result
                });
                let url_for_err = url.to_string();
                let f: Flight = async move {
                    task.await.unwrap_or_else(|e| {
                        Err(SeedError::Http {
                            url: url_for_err,
                            message: format!("download task failed: {e}"),
                        })
                    })
                }
                .boxed()
                .shared();
                flights.insert(dest.clone(), f.clone());
                f
            }
        };
        flight.await
    }
}

async fn seed_one(
    inner: &SeederInner,
    dest: &Path,
    url: &str,
    digest: &Digest,
) -> Result<PathBuf, SeedError> {
    let expected = digest.hex().to_ascii_lowercase();
    let known = inner
        .verified
        .lock()
        .expect("verified lock")
        .get(dest)
        .cloned();
    if known.as_deref() == Some(expected.as_str()) && dest.exists() {
        return Ok(dest.to_path_buf());
    }
    if dest.exists() {
        match hash_file(dest, digest).await {
            Ok(actual) if actual == expected => {
                tracing::debug!(path = %dest.display(), "template already present and verified");
                remember(inner, dest, &expected);
                return Ok(dest.to_path_buf());
            }
            Ok(actual) => {
                tracing::warn!(path = %dest.display(), %expected, %actual, "cached template has a different digest; downloading again");
            }
            Err(e) => return Err(e),
        }
    }
    inner.downloads.fetch_add(1, Ordering::SeqCst);
    let dir = dest.parent().unwrap_or(Path::new("."));
    tokio::fs::create_dir_all(dir)
        .await
        .map_err(|e| io_err(dir, e))?;
    let name = dest
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(".{name}.tmp.{:016x}", rand::random::<u64>()));
    let result = download_to(inner, url, &tmp, digest).await;
    let actual = match result {
        Ok(actual) => actual,
        Err(e) => {
            let _ = tokio::fs::remove_file(&tmp).await;
            return Err(e);
        }
    };
    if actual != expected {
        let _ = tokio::fs::remove_file(&tmp).await;
        return Err(SeedError::Mismatch {
            url: url.to_string(),
            algorithm: digest.algorithm(),
            expected,
            actual,
        });
    }
    if let Err(e) = tokio::fs::rename(&tmp, dest).await {
        let _ = tokio::fs::remove_file(&tmp).await;
        return Err(io_err(dest, e));
    }
    if let Ok(d) = tokio::fs::File::open(dir).await {
        let _ = d.sync_all().await;
    }
    tracing::info!(path = %dest.display(), %url, "template downloaded and verified");
    remember(inner, dest, &expected);
    Ok(dest.to_path_buf())
}

fn remember(inner: &SeederInner, dest: &Path, hex: &str) {
    inner
        .verified
        .lock()
        .expect("verified lock")
        .insert(dest.to_path_buf(), hex.to_string());
}

fn io_err(path: &Path, e: std::io::Error) -> SeedError {
    SeedError::Io {
        path: path.to_path_buf(),
        message: e.to_string(),
    }
}

enum Hasher {
    Sha256(sha2::Sha256),
    Sha512(sha2::Sha512),
}

impl Hasher {
    fn new(d: &Digest) -> Self {
        match d {
            Digest::Sha256(_) => Hasher::Sha256(sha2::Sha256::new()),
            Digest::Sha512(_) => Hasher::Sha512(sha2::Sha512::new()),
        }
    }
    fn update(&mut self, data: &[u8]) {
        match self {
            Hasher::Sha256(h) => h.update(data),
            Hasher::Sha512(h) => h.update(data),
        }
    }
    fn finish(self) -> String {
        match self {
            Hasher::Sha256(h) => hex::encode(h.finalize()),
            Hasher::Sha512(h) => hex::encode(h.finalize()),
        }
    }
}

async fn hash_file(path: &Path, digest: &Digest) -> Result<String, SeedError> {
    use tokio::io::AsyncReadExt;
    let mut f = tokio::fs::File::open(path)
        .await
        .map_err(|e| io_err(path, e))?;
    let mut h = Hasher::new(digest);
    let mut buf = vec![0u8; 256 * 1024];
    loop {
        let n = f.read(&mut buf).await.map_err(|e| io_err(path, e))?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(h.finish())
}

trait Io: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin {}
impl<T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin> Io for T {}

/// Streams `url` into `tmp` (created new), hashing as it goes; returns the hex digest.
async fn download_to(
    inner: &SeederInner,
    url: &str,
    tmp: &Path,
    digest: &Digest,
) -> Result<String, SeedError> {
    let http = |message: String| SeedError::Http {
        url: url.to_string(),
        message,
    };
    let mut current = url.to_string();
    for _ in 0..=MAX_REDIRECTS {
        let uri: hyper::Uri = current
            .parse()
            .map_err(|e| http(format!("bad URL `{current}`: {e}")))?;
        let https = match uri.scheme_str() {
            Some("https") => true,
            Some("http") => false,
            other => {
                return Err(http(format!(
                    "unsupported scheme {other:?}; expected http or https"
                )))
            }
        };
        let host = uri
            .host()
            .ok_or_else(|| http("URL has no host".into()))?
            .to_string();
        let port = uri.port_u16().unwrap_or(if https { 443 } else { 80 });
        // Build the TLS config first so a bad CA file is reported as such, not as a network error.
        let tls_config = if https {
            Some(tls_config(inner.extra_ca.as_deref())?)
        } else {
            None
        };
        let tcp = tokio::time::timeout(
            CONNECT_TIMEOUT,
            tokio::net::TcpStream::connect((host.trim_matches(['[', ']']), port)),
        )
        .await
        .map_err(|_| http(format!("connecting to {host}:{port} timed out")))?
        .map_err(|e| http(format!("cannot connect to {host}:{port}: {e}")))?;
        let stream: Box<dyn Io> = if let Some(config) = tls_config {
            let name =
                rustls::pki_types::ServerName::try_from(host.trim_matches(['[', ']']).to_string())
                    .map_err(|e| http(format!("bad TLS server name {host}: {e}")))?;
            let tls = tokio_rustls::TlsConnector::from(Arc::new(config))
                .connect(name, tcp)
                .await
                .map_err(|e| http(format!("TLS handshake with {host}: {e}")))?;
            Box::new(tls)
        } else {
            Box::new(tcp)
        };
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| http(format!("HTTP handshake: {e}")))?;
        tokio::spawn(async move {
            let _ = conn.await;
        });
        let path = uri
            .path_and_query()
            .map(|p| p.as_str())
            .unwrap_or("/")
            .to_string();
        let authority = uri
            .authority()
            .map(|a| a.as_str().to_string())
            .unwrap_or(host.clone());
        let req = hyper::Request::get(path)
            .header(hyper::header::HOST, authority)
            .header(hyper::header::USER_AGENT, "pxagent")
            .body(Empty::<Bytes>::new())
            .map_err(|e| http(format!("building request: {e}")))?;
        let resp = sender
            .send_request(req)
            .await
            .map_err(|e| http(format!("request failed: {e}")))?;
        let status = resp.status();
        if status.is_redirection() {
            let location = resp
                .headers()
                .get(hyper::header::LOCATION)
                .and_then(|v| v.to_str().ok())
                .ok_or_else(|| http(format!("redirect {status} without Location")))?;
            current = resolve_location(&uri, location);
            tracing::debug!(from = %uri, to = %current, "following redirect");
            continue;
        }
        if !status.is_success() {
            return Err(SeedError::Status {
                url: url.to_string(),
                status: status.as_u16(),
            });
        }
        let mut file = tokio::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(tmp)
            .await
            .map_err(|e| io_err(tmp, e))?;
        let mut hasher = Hasher::new(digest);
        let mut body = resp.into_body();
        loop {
            let frame = tokio::time::timeout(IDLE_TIMEOUT, body.frame())
                .await
                .map_err(|_| http(format!("no data for {}s", IDLE_TIMEOUT.as_secs())))?;
            let Some(frame) = frame else { break };
            let frame = frame.map_err(|e| http(format!("reading body: {e}")))?;
            if let Some(data) = frame.data_ref() {
                hasher.update(data);
                file.write_all(data).await.map_err(|e| io_err(tmp, e))?;
            }
        }
        file.flush().await.map_err(|e| io_err(tmp, e))?;
        file.sync_all().await.map_err(|e| io_err(tmp, e))?;
        return Ok(hasher.finish());
    }
    Err(http(format!("more than {MAX_REDIRECTS} redirects")))
}

fn resolve_location(base: &hyper::Uri, location: &str) -> String {
    if location.starts_with("http://") || location.starts_with("https://") {
        location.to_string()
    } else {
        let scheme = base.scheme_str().unwrap_or("http");
        let auth = base.authority().map(|a| a.as_str()).unwrap_or("");
        if location.starts_with('/') {
            format!("{scheme}://{auth}{location}")
        } else {
            let path = base.path();
            let dir = &path[..path.rfind('/').map(|i| i + 1).unwrap_or(0)];
            format!("{scheme}://{auth}{dir}{location}")
        }
    }
}

fn tls_config(extra_ca: Option<&Path>) -> Result<rustls::ClientConfig, SeedError> {
    let mut roots = rustls::RootCertStore::empty();
    for bundle in SYSTEM_CA_BUNDLES {
        if let Ok(pem) = std::fs::read(bundle) {
            for cert in rustls_pemfile::certs(&mut pem.as_slice()).flatten() {
                let _ = roots.add(cert);
            }
            break;
        }
    }
    if let Some(path) = extra_ca {
        let tls_err = |message: String| SeedError::Tls {
            path: path.to_path_buf(),
            message,
        };
        let pem = std::fs::read(path).map_err(|e| tls_err(e.to_string()))?;
        let mut n = 0;
        for cert in rustls_pemfile::certs(&mut pem.as_slice()) {
            let cert = cert.map_err(|e| tls_err(format!("bad PEM: {e}")))?;
            roots
                .add(cert)
                .map_err(|e| tls_err(format!("unusable certificate: {e}")))?;
            n += 1;
        }
        if n == 0 {
            return Err(tls_err("no certificates found (expected PEM)".into()));
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| SeedError::Tls {
            path: PathBuf::from("<rustls>"),
            message: e.to_string(),
        })?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_redirects_resolve_against_the_base() {
        let base: hyper::Uri = "http://127.0.0.1:8080/a/b.tar".parse().unwrap();
        assert_eq!(
            resolve_location(&base, "/x/y.tar"),
            "http://127.0.0.1:8080/x/y.tar"
        );
        assert_eq!(
            resolve_location(&base, "c.tar"),
            "http://127.0.0.1:8080/a/c.tar"
        );
        assert_eq!(resolve_location(&base, "https://h/z"), "https://h/z");
    }

    #[tokio::test]
    async fn rejects_names_that_escape_the_cache() {
        let s = Seeder::new(None);
        let d = Digest::Sha256("00".into());
        for bad in ["", "../x.tar", ".hidden.tar", "a/b.tar"] {
            let e = s
                .ensure(Path::new("/tmp"), bad, "http://127.0.0.1:1/x", &d)
                .await
                .unwrap_err();
            assert!(matches!(e, SeedError::BadName { .. }), "{bad}: {e}");
        }
    }
}
