//! Template seeding: downloads a template over HTTP(S) into a storage's template cache, streamed to
//! a temporary file (`.<name>.tmp.<random>`) while hashing, verified, fsynced and renamed into place.
//! A single-flight map makes concurrent requests for one destination share one download; a checksum
//! mismatch fails every waiter with the expected and actual digests and leaves no file behind.
//! A template without a declared checksum (fleet.yaml `template_url`) takes the same path, unverified;
//! either way the file's sha256 is computed while streaming and returned, so the controller can record
//! (and compare across nodes) what each node really got.
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
const MAX_REDIRECTS: usize = 5;
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);
/// A download that receives nothing for this long is abandoned.
const IDLE_TIMEOUT: Duration = Duration::from_secs(120);

/// Bounds on one template download, so a hostile or broken URL cannot fill the node's disk or hold an
/// operation forever (agent.toml `template_max_bytes`, `template_timeout_secs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DownloadLimits {
    /// The largest template accepted, in bytes (checked against Content-Length and while streaming).
    pub max_bytes: u64,
    /// The longest a whole download (connect, redirects, body) may take.
    pub timeout: Duration,
}

/// Default [`DownloadLimits::max_bytes`]: 16 GiB, far above any LXC template.
pub const DEFAULT_TEMPLATE_MAX_BYTES: u64 = 16 << 30;
/// Default [`DownloadLimits::timeout`]: 2 hours.
pub const DEFAULT_TEMPLATE_TIMEOUT_SECS: u64 = 7200;

impl Default for DownloadLimits {
    fn default() -> Self {
        DownloadLimits {
            max_bytes: DEFAULT_TEMPLATE_MAX_BYTES,
            timeout: Duration::from_secs(DEFAULT_TEMPLATE_TIMEOUT_SECS),
        }
    }
}

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
    #[error("template {url}: download failed: {message}")]
    Http { url: String, message: String },
    #[error("template {url}: download failed: HTTP status {status}")]
    Status { url: String, status: u16 },
    #[error("template file {path}: {message}")]
    Io { path: PathBuf, message: String },
    #[error("template CA file {path}: {message}")]
    Tls { path: PathBuf, message: String },
    #[error("template file name `{name}` is not a plain file name")]
    BadName { name: String },
    #[error(
        "template {url}: larger than {limit} bytes, the most this agent downloads (agent.toml \
         template_max_bytes); nothing was kept"
    )]
    TooLarge { url: String, limit: u64 },
    #[error(
        "template {url}: the download did not finish within {secs} s (agent.toml template_timeout_secs); \
         nothing was kept"
    )]
    TimedOut { url: String, secs: u64 },
}

/// A template file in place.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seeded {
    pub path: PathBuf,
    /// Lower-case hex sha256 of the file, whatever checksum (if any) was declared.
    pub sha256: String,
}

type Flight = Shared<BoxFuture<'static, Result<Seeded, SeedError>>>;

/// Downloads templates, one at a time per destination file.
#[derive(Clone)]
pub struct Seeder {
    inner: Arc<SeederInner>,
}

struct SeederInner {
    extra_ca: Option<PathBuf>,
    limits: DownloadLimits,
    flights: Mutex<HashMap<PathBuf, Flight>>,
    /// Files hashed by this process (skip re-hashing an existing file every time): path -> digests.
    verified: Mutex<HashMap<PathBuf, Digests>>,
    downloads: AtomicUsize,
}

impl Seeder {
    /// `extra_ca`: a PEM file trusted for HTTPS downloads besides the system bundle.
    pub fn new(extra_ca: Option<PathBuf>) -> Self {
        Seeder::with_limits(extra_ca, DownloadLimits::default())
    }

    /// [`Seeder::new`] with explicit download bounds.
    pub fn with_limits(extra_ca: Option<PathBuf>, limits: DownloadLimits) -> Self {
        Seeder {
            inner: Arc::new(SeederInner {
                extra_ca,
                limits,
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

    /// Makes sure `dir/file_name` exists (with the expected digest when one is given), downloading it
    /// from `url` if needed; returns its path and sha256. Without a digest an existing file is kept as is.
    /// Concurrent calls for the same file share one download and one result.
    pub async fn ensure(
        &self,
        dir: &Path,
        file_name: &str,
        url: &str,
        digest: Option<&Digest>,
    ) -> Result<Seeded, SeedError> {
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
                let (d, u, g) = (dest.clone(), url.to_string(), digest.cloned());
                let task = tokio::spawn(async move {
                    let result = seed_one(&inner, &d, &u, g.as_ref()).await;
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
    digest: Option<&Digest>,
) -> Result<Seeded, SeedError> {
    let expected = digest.map(|d| d.hex().to_ascii_lowercase());
    let seeded = |d: &Digests| Seeded {
        path: dest.to_path_buf(),
        sha256: d.sha256.clone(),
    };
    let known = inner
        .verified
        .lock()
        .expect("verified lock")
        .get(dest)
        .cloned();
    if let Some(k) = known.filter(|_| dest.exists()) {
        if expected.is_none() || k.of(digest).as_deref() == expected.as_deref() {
            return Ok(seeded(&k));
        }
    }
    if dest.exists() {
        let found = hash_file(dest, digest).await?;
        match &expected {
            None => {
                tracing::debug!(path = %dest.display(), sha256 = %found.sha256, "template already present (no checksum declared)");
                remember(inner, dest, &found);
                return Ok(seeded(&found));
            }
            Some(e) if found.of(digest).as_deref() == Some(e.as_str()) => {
                tracing::debug!(path = %dest.display(), "template already present and verified");
                remember(inner, dest, &found);
                return Ok(seeded(&found));
            }
            Some(e) => {
                tracing::warn!(path = %dest.display(), expected = %e, actual = ?found.of(digest), "cached template has a different digest; downloading again");
            }
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
    let limit = inner.limits.timeout;
    let got = match tokio::time::timeout(limit, download_to(inner, url, &tmp, digest))
        .await
        .unwrap_or_else(|_| {
            Err(SeedError::TimedOut {
                url: url.to_string(),
                secs: limit.as_secs(),
            })
        }) {
        Ok(got) => got,
        Err(e) => {
            let _ = tokio::fs::remove_file(&tmp).await;
            return Err(e);
        }
    };
    if let (Some(d), Some(expected)) = (digest, expected) {
        let actual = got.of(Some(d)).unwrap_or_default();
        if actual != expected {
            let _ = tokio::fs::remove_file(&tmp).await;
            return Err(SeedError::Mismatch {
                url: url.to_string(),
                algorithm: d.algorithm(),
                expected,
                actual,
            });
        }
    }
    if let Err(e) = tokio::fs::rename(&tmp, dest).await {
        let _ = tokio::fs::remove_file(&tmp).await;
        return Err(io_err(dest, e));
    }
    if let Ok(d) = tokio::fs::File::open(dir).await {
        let _ = d.sync_all().await;
    }
    if digest.is_some() {
        tracing::info!(path = %dest.display(), %url, sha256 = %got.sha256, "template downloaded and verified");
    } else {
        tracing::warn!(path = %dest.display(), %url, sha256 = %got.sha256, "template downloaded without a declared checksum");
    }
    remember(inner, dest, &got);
    Ok(seeded(&got))
}

/// The digests of one file: always sha256, sha512 when a sha512 was declared.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Digests {
    sha256: String,
    sha512: Option<String>,
}

impl Digests {
    /// The digest in the algorithm of `declared` (None when that one was not computed).
    fn of(&self, declared: Option<&Digest>) -> Option<String> {
        match declared {
            Some(Digest::Sha512(_)) => self.sha512.clone(),
            _ => Some(self.sha256.clone()),
        }
    }
}

fn remember(inner: &SeederInner, dest: &Path, digests: &Digests) {
    inner
        .verified
        .lock()
        .expect("verified lock")
        .insert(dest.to_path_buf(), digests.clone());
}

fn io_err(path: &Path, e: std::io::Error) -> SeedError {
    SeedError::Io {
        path: path.to_path_buf(),
        message: e.to_string(),
    }
}

/// Hashes a stream: sha256 always, sha512 as well when that is the declared algorithm.
struct Hasher {
    sha256: sha2::Sha256,
    sha512: Option<sha2::Sha512>,
}

impl Hasher {
    fn new(d: Option<&Digest>) -> Self {
        Hasher {
            sha256: sha2::Sha256::new(),
            sha512: matches!(d, Some(Digest::Sha512(_))).then(sha2::Sha512::new),
        }
    }
    fn update(&mut self, data: &[u8]) {
        self.sha256.update(data);
        if let Some(h) = &mut self.sha512 {
            h.update(data);
        }
    }
    fn finish(self) -> Digests {
        Digests {
            sha256: hex::encode(self.sha256.finalize()),
            sha512: self.sha512.map(|h| hex::encode(h.finalize())),
        }
    }
}

async fn hash_file(path: &Path, digest: Option<&Digest>) -> Result<Digests, SeedError> {
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

/// Streams `url` into `tmp` (created new), hashing as it goes; returns the hex digests.
async fn download_to(
    inner: &SeederInner,
    url: &str,
    tmp: &Path,
    digest: Option<&Digest>,
) -> Result<Digests, SeedError> {
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
        // One text whether the port was closed, filtered or slow: a template URL must not become a way to
        // learn which ports of the node's network are open.
        .map_err(|_| http(format!("could not connect to {host}:{port}")))?
        .map_err(|_| http(format!("could not connect to {host}:{port}")))?;
        let stream: Box<dyn Io> = if let Some(config) = tls_config {
            let name =
                rustls::pki_types::ServerName::try_from(host.trim_matches(['[', ']']).to_string())
                    .map_err(|e| http(format!("bad TLS server name {host}: {e}")))?;
            let tls = tokio_rustls::TlsConnector::from(Arc::new(config))
                .connect(name, tcp)
                .await
                .map_err(|_| http(format!("no TLS answer from {host}:{port}")))?;
            Box::new(tls)
        } else {
            Box::new(tcp)
        };
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|_| http(format!("no HTTP answer from {host}:{port}")))?;
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
        let max = inner.limits.max_bytes;
        let too_large = || SeedError::TooLarge {
            url: url.to_string(),
            limit: max,
        };
        let announced = resp
            .headers()
            .get(hyper::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        if announced.is_some_and(|n| n > max) {
            return Err(too_large());
        }
        let mut received: u64 = 0;
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
                received += data.len() as u64;
                if received > max {
                    return Err(too_large());
                }
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
    pxfleet_tls::public_client_config(extra_ca).map_err(|e| SeedError::Tls {
        path: e.path,
        message: e.message,
    })
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
                .ensure(Path::new("/tmp"), bad, "http://127.0.0.1:1/x", Some(&d))
                .await
                .unwrap_err();
            assert!(matches!(e, SeedError::BadName { .. }), "{bad}: {e}");
        }
    }
}
