//! tonic over our rustls configurations. Server side: [`tls_incoming`] accepts TCP connections and performs
//! the handshakes (concurrently, with a timeout) with the [`crate::server_config`] verifier, and tonic serves
//! the resulting streams; the peer certificate then reaches every RPC and [`peer_identity`] reads it.
//! Client side: [`connect`] dials `https://HOST:PORT` through tokio-rustls with any of our client configs.

use std::future::Future;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use hyper_util::rt::TokioIo;
use rustls::pki_types::ServerName;
use rustls::{ClientConfig, ServerConfig};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::{client, server, TlsAcceptor, TlsConnector};
use tokio_stream::Stream;
use tonic::transport::{Channel, Endpoint, Uri};

use crate::{CertInfo, Identity, TlsError};

/// How long a client has to complete the TLS handshake.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Handshakes in progress at once; further connections wait in the listen backlog.
pub const MAX_PENDING_HANDSHAKES: usize = 256;
/// Handshakes in progress at once from one IP address: beyond it a new connection from that address is closed
/// at once, so that one client's sockets that never send a hello cannot take every handshake slot.
pub const MAX_PENDING_PER_PEER: usize = 32;
/// Established connections at once from one IP address (agents behind one NAT, a CI runner, the benchmark's
/// thousand in-process agents on loopback stay below it); beyond it new ones are closed after the handshake.
pub const MAX_CONNECTIONS_PER_PEER: usize = 2048;
/// How long an established connection has to send its first bytes (the HTTP/2 preface): an idle TLS socket
/// is closed after it instead of holding a file descriptor forever.
pub const PREFACE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long [`connect`] waits for TCP + TLS.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// HTTP/2 keepalive of both ends ([`KeepAlive::default`]): a PING after this long without a frame from the
/// peer...
pub const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(10);
/// ...and the connection is closed when its answer has not come within this. A connection whose packets
/// vanish (a cut network, a firewall that lost its state) is noticed within the sum, instead of never: TCP
/// alone does not notice a peer that sends nothing, and retransmits for about 15 minutes when it does.
pub const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(20);

/// HTTP/2 keepalive pings of a client connection (also while no call is open).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeepAlive {
    pub interval: Duration,
    pub timeout: Duration,
}

impl Default for KeepAlive {
    fn default() -> Self {
        KeepAlive {
            interval: KEEPALIVE_INTERVAL,
            timeout: KEEPALIVE_TIMEOUT,
        }
    }
}

/// Connections per peer address: handshakes in progress and established connections.
#[derive(Default)]
struct Peers {
    by_ip: std::sync::Mutex<std::collections::HashMap<IpAddr, (usize, usize)>>,
}

/// One counted connection of a peer: pending (`open` false) or established; uncounted when dropped.
struct PeerSlot {
    peers: Arc<Peers>,
    ip: IpAddr,
    open: bool,
}

impl Peers {
    fn lock(&self) -> std::sync::MutexGuard<'_, std::collections::HashMap<IpAddr, (usize, usize)>> {
        self.by_ip.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A pending slot for `ip`, or `None` when it has too many handshakes or connections already.
    fn pending(self: &Arc<Self>, ip: IpAddr) -> Option<PeerSlot> {
        let mut map = self.lock();
        let (pending, open) = map.entry(ip).or_default();
        if *pending >= MAX_PENDING_PER_PEER || *open >= MAX_CONNECTIONS_PER_PEER {
            return None;
        }
        *pending += 1;
        Some(PeerSlot {
            peers: self.clone(),
            ip,
            open: false,
        })
    }
}

impl PeerSlot {
    /// The handshake succeeded: the slot now counts an established connection.
    fn established(mut self) -> PeerSlot {
        let mut map = self.peers.lock();
        let e = map.entry(self.ip).or_default();
        e.0 = e.0.saturating_sub(1);
        e.1 += 1;
        drop(map);
        self.open = true;
        self
    }
}

impl Drop for PeerSlot {
    fn drop(&mut self) {
        let mut map = self.peers.lock();
        if let Some(e) = map.get_mut(&self.ip) {
            if self.open {
                e.1 = e.1.saturating_sub(1);
            } else {
                e.0 = e.0.saturating_sub(1);
            }
            if *e == (0, 0) {
                map.remove(&self.ip);
            }
        }
    }
}

/// An established connection as tonic serves it: counted for its peer while it lives, and closed when it sends
/// nothing within [`PREFACE_TIMEOUT`] of the handshake. The peer certificate reaches the RPCs as before
/// ([`tonic::transport::server::Connected`] is the TLS stream's).
pub struct PeerStream {
    inner: server::TlsStream<TcpStream>,
    _slot: PeerSlot,
    /// Until the first bytes arrive.
    preface: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl tokio::io::AsyncRead for PeerStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = &mut *self;
        let before = buf.filled().len();
        let r = Pin::new(&mut this.inner).poll_read(cx, buf);
        if let Some(deadline) = this.preface.as_mut() {
            match &r {
                Poll::Ready(Ok(())) if buf.filled().len() > before => this.preface = None,
                Poll::Pending if deadline.as_mut().poll(cx).is_ready() => {
                    return Poll::Ready(Err(std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        "no HTTP/2 preface within the deadline after the TLS handshake",
                    )));
                }
                _ => {}
            }
        }
        r
    }
}

impl tokio::io::AsyncWrite for PeerStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }
    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

impl tonic::transport::server::Connected for PeerStream {
    type ConnectInfo =
        <server::TlsStream<TcpStream> as tonic::transport::server::Connected>::ConnectInfo;
    fn connect_info(&self) -> Self::ConnectInfo {
        self.inner.connect_info()
    }
}

/// A stream of established TLS connections for `Server::serve_with_incoming*`. Handshakes run in their own
/// tasks (a slow client does not hold up others; at most [`MAX_PENDING_HANDSHAKES`] at once, at most
/// [`MAX_PENDING_PER_PEER`] of one address, each within [`HANDSHAKE_TIMEOUT`]); refused handshakes are logged
/// and skipped, never yielded. An address with [`MAX_CONNECTIONS_PER_PEER`] connections gets no more, and a
/// connection that sends nothing within [`PREFACE_TIMEOUT`] is closed ([`PeerStream`]).
/// The accept loop ends when the stream is dropped.
pub fn tls_incoming(
    listener: TcpListener,
    config: Arc<ServerConfig>,
) -> impl Stream<Item = Result<PeerStream, std::io::Error>> + Send + 'static {
    let (tx, rx) = tokio::sync::mpsc::channel(64);
    let acceptor = TlsAcceptor::from(config);
    let pending = Arc::new(tokio::sync::Semaphore::new(MAX_PENDING_HANDSHAKES));
    let peers = Arc::new(Peers::default());
    tokio::spawn(async move {
        loop {
            let Ok(permit) = pending.clone().acquire_owned().await else {
                break;
            };
            let (tcp, peer) = tokio::select! {
                _ = tx.closed() => break,
                accepted = listener.accept() => match accepted {
                    Ok(pair) => pair,
                    Err(e) => {
                        tracing::warn!(error = %e, "accepting a connection failed");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                },
            };
            let Some(slot) = peers.pending(peer.ip()) else {
                tracing::warn!(%peer, "connection closed: too many handshakes or connections from this address");
                drop(tcp);
                continue;
            };
            let acceptor = acceptor.clone();
            let tx = tx.clone();
            tokio::spawn(async move {
                let _ = tcp.set_nodelay(true);
                let handshake = tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await;
                drop(permit);
                match handshake {
                    Ok(Ok(tls)) => {
                        let stream = PeerStream {
                            inner: tls,
                            _slot: slot.established(),
                            preface: Some(Box::pin(tokio::time::sleep(PREFACE_TIMEOUT))),
                        };
                        let _ = tx.send(Ok(stream)).await;
                    }
                    Ok(Err(e)) => tracing::info!(%peer, error = %e, "TLS handshake refused"),
                    Err(_) => tracing::info!(%peer, "TLS handshake timed out"),
                }
            });
        }
    });
    tokio_stream::wrappers::ReceiverStream::new(rx)
}

/// Serves `router` on `listener` with mutual TLS until `shutdown` completes.
pub async fn serve_tls(
    router: tonic::transport::server::Router,
    listener: TcpListener,
    config: Arc<ServerConfig>,
    shutdown: impl Future<Output = ()>,
) -> Result<(), TlsError> {
    router
        .serve_with_incoming_shutdown(tls_incoming(listener, config), shutdown)
        .await
        .map_err(|source| TlsError::Serve { source })
}

/// The verified client certificate's facts, or `None` when the client sent no certificate (enrolment).
pub fn peer_cert_info<T>(request: &tonic::Request<T>) -> Option<CertInfo> {
    let certs = request.peer_certs()?;
    CertInfo::from_der(certs.first()?).ok()
}

/// The caller's identity from its verified client certificate; `None` without one. Every RPC but Enroll
/// must refuse `None`.
pub fn peer_identity<T>(request: &tonic::Request<T>) -> Option<Identity> {
    peer_cert_info(request)?.identity
}

/// [`peer_identity`] for RPCs that need one: `Unauthenticated` when the caller sent no client certificate.
#[allow(clippy::result_large_err)]
pub fn require_identity<T>(request: &tonic::Request<T>) -> Result<Identity, tonic::Status> {
    peer_identity(request).ok_or_else(|| {
        tonic::Status::unauthenticated(
            "a client certificate is required for this call (only enrolment works without one)",
        )
    })
}

/// Connects to `url` (`https://HOST:PORT`) with one of our client configs; the server name checked against
/// the certificate is HOST (a DNS name or an IP address). HTTP/2 keepalive pings ([`KeepAlive::default`])
/// close a connection whose peer stopped answering, so calls and streams on it fail instead of hanging.
pub async fn connect(url: &str, config: Arc<ClientConfig>) -> Result<Channel, TlsError> {
    connect_keepalive(url, config, KeepAlive::default()).await
}

/// [`connect`] with other keepalive timings (tests use short ones).
pub async fn connect_keepalive(
    url: &str,
    config: Arc<ClientConfig>,
    keepalive: KeepAlive,
) -> Result<Channel, TlsError> {
    let (endpoint, connector) = endpoint(url, config, None)?;
    let endpoint = with_keepalive(endpoint, keepalive);
    endpoint
        .connect_with_connector(connector)
        .await
        .map_err(|source| connect_error(url, source))
}

/// Like [`connect`] but verifies the server certificate against `server_name` (a DNS name or an IP address)
/// instead of the URL's host: a controller reached through an address its certificate does not name
/// (a tunnel, a NAT address).
pub async fn connect_with_server_name(
    url: &str,
    server_name: &str,
    config: Arc<ClientConfig>,
) -> Result<Channel, TlsError> {
    let (endpoint, connector) = endpoint(url, config, Some(server_name))?;
    with_keepalive(endpoint, KeepAlive::default())
        .connect_with_connector(connector)
        .await
        .map_err(|source| connect_error(url, source))
}

/// A handshake refusal becomes [`TlsError::Handshake`] (which side refused and why); anything else stays
/// [`TlsError::Connect`].
fn connect_error(url: &str, source: tonic::transport::Error) -> TlsError {
    match crate::Refusal::find(&source) {
        Some(refusal) => TlsError::Handshake {
            url: url.to_string(),
            refusal,
        },
        None => TlsError::Connect {
            url: url.to_string(),
            source,
        },
    }
}

/// Like [`connect`] but connects on first use (and reconnects after failures) instead of now.
pub fn connect_lazy(url: &str, config: Arc<ClientConfig>) -> Result<Channel, TlsError> {
    let (endpoint, connector) = endpoint(url, config, None)?;
    Ok(with_keepalive(endpoint, KeepAlive::default()).connect_with_connector_lazy(connector))
}

fn with_keepalive(endpoint: Endpoint, k: KeepAlive) -> Endpoint {
    endpoint
        .http2_keep_alive_interval(k.interval)
        .keep_alive_timeout(k.timeout)
        .keep_alive_while_idle(true)
}

/// A tonic server builder with HTTP/2 keepalive ([`KEEPALIVE_INTERVAL`], [`KEEPALIVE_TIMEOUT`]): the server
/// closes connections whose client stopped answering (a cut network), ending their streams.
pub fn server_builder() -> tonic::transport::Server {
    tonic::transport::Server::builder()
        .http2_keepalive_interval(Some(KEEPALIVE_INTERVAL))
        .http2_keepalive_timeout(Some(KEEPALIVE_TIMEOUT))
}

fn endpoint(
    url: &str,
    config: Arc<ClientConfig>,
    verify_as: Option<&str>,
) -> Result<(Endpoint, TlsConnect), TlsError> {
    let bad = |reason: &str| TlsError::Url {
        url: url.to_string(),
        reason: reason.to_string(),
    };
    let uri: Uri = url
        .parse()
        .map_err(|_| bad("not a URL; expected https://HOST:PORT"))?;
    if uri.scheme_str() != Some("https") {
        return Err(bad("expected https://HOST:PORT (pxfleet always uses TLS)"));
    }
    let host = uri.host().ok_or_else(|| bad("no host"))?.to_string();
    let port = uri
        .port_u16()
        .ok_or_else(|| bad("no port; expected https://HOST:PORT"))?;
    let bare_host = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_string();
    let server_name = match verify_as {
        None => ServerName::try_from(bare_host.clone())
            .map_err(|_| bad("the host is neither a DNS name nor an IP address"))?,
        Some(name) => ServerName::try_from(name.to_string()).map_err(|_| TlsError::InvalidSan {
            san: name.to_string(),
            reason: "server_name is neither a DNS name nor an IP address".into(),
        })?,
    };
    // tonic refuses https:// URIs when it does not do TLS itself; our connector does, so tonic sees http://
    // for dialing while requests carry the real https origin.
    let dial = format!("http://{host}:{port}");
    let endpoint = Endpoint::from_shared(dial)
        .map_err(|_| bad("not a valid endpoint"))?
        .origin(uri)
        .connect_timeout(CONNECT_TIMEOUT);
    let connector = TlsConnect {
        host: bare_host,
        port,
        server_name,
        connector: TlsConnector::from(config),
    };
    Ok((endpoint, connector))
}

/// tower connector: TCP to the configured host and port, then a TLS handshake.
#[derive(Clone)]
struct TlsConnect {
    host: String,
    port: u16,
    server_name: ServerName<'static>,
    connector: TlsConnector,
}

type ConnectFuture = Pin<Box<dyn Future<Output = Result<TokioIo<Peeked>, std::io::Error>> + Send>>;

/// How long [`connect`] waits after the handshake for the controller's first bytes (its HTTP/2 SETTINGS, or
/// the TLS alert with which it refuses our certificate). Nothing within this time is not an error.
pub const FIRST_BYTES_TIMEOUT: Duration = Duration::from_secs(5);

/// In TLS 1.3 the client finishes its handshake before the server has checked the client certificate, so a
/// refusal arrives as an alert on the first read. Reading once here turns it into a connect error that says
/// why (see [`crate::Refusal`]) instead of a cancelled request later; the bytes read are replayed to hyper.
async fn first_bytes(tls: &mut client::TlsStream<TcpStream>) -> Result<Vec<u8>, std::io::Error> {
    use tokio::io::AsyncReadExt;
    let mut buf = vec![0u8; 16 * 1024];
    match tokio::time::timeout(FIRST_BYTES_TIMEOUT, tls.read(&mut buf)).await {
        Err(_) => Ok(Vec::new()),
        Ok(Err(e)) => Err(e),
        Ok(Ok(0)) => Err(std::io::Error::new(
            std::io::ErrorKind::ConnectionAborted,
            "the controller closed the connection right after the TLS handshake",
        )),
        Ok(Ok(n)) => {
            buf.truncate(n);
            Ok(buf)
        }
    }
}

/// A client TLS stream whose first bytes were already read by [`first_bytes`]; it hands them out first.
struct Peeked {
    inner: client::TlsStream<TcpStream>,
    buf: Vec<u8>,
    pos: usize,
}

impl tokio::io::AsyncRead for Peeked {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        out: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        if self.pos < self.buf.len() {
            let n = (self.buf.len() - self.pos).min(out.remaining());
            let start = self.pos;
            out.put_slice(&self.buf[start..start + n]);
            self.pos += n;
            if self.pos == self.buf.len() {
                self.buf = Vec::new();
                self.pos = 0;
            }
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.inner).poll_read(cx, out)
    }
}

impl tokio::io::AsyncWrite for Peeked {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, data)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

impl tonic::codegen::Service<Uri> for TlsConnect {
    type Response = TokioIo<Peeked>;
    type Error = std::io::Error;
    type Future = ConnectFuture;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: Uri) -> Self::Future {
        let this = self.clone();
        Box::pin(async move {
            let tcp = TcpStream::connect((this.host.as_str(), this.port)).await?;
            tcp.set_nodelay(true)?;
            let mut tls = this.connector.connect(this.server_name, tcp).await?;
            let first = first_bytes(&mut tls).await?;
            Ok(TokioIo::new(Peeked {
                inner: tls,
                buf: first,
                pos: 0,
            }))
        })
    }
}
