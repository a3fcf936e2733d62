//! A black-holing TCP proxy on loopback: a network cut between one agent and the controller (issue 12, fault 3).
//! SIGSTOP is not a cut (the kernel still answers for the stopped process, and the stopped side does nothing);
//! here both processes keep running and only their packets vanish.
//!
//! The agent dials the proxy, the proxy dials the controller and copies bytes both ways. [`Blackhole::cut`]
//! stops the copying in both directions WITHOUT closing a socket: what either side writes stays unread (its
//! sends pile up, then block, like TCP retransmitting into a pulled cable), nothing it waits for arrives, and a
//! close is not passed on either (a FIN lost on the wire). New connections are still accepted (loopback always
//! completes the TCP handshake) but are black-holed too: not even the TLS handshake gets through.
//!
//! [`Blackhole::restore`] plugs the cable back in, with one of two outcomes for the connections that were open
//! during the cut ([`Restore`]):
//! - [`Restore::Resume`]: they carry on where they stopped, held bytes and closes delivered late. This is real
//!   TCP after a cut shorter than its retransmission limit (about 15 minutes with Linux's `tcp_retries2`) on a
//!   plain routed path.
//! - [`Restore::StayDead`]: they stay black-holed for good; only connections made after the restore work.
//!   This is real TCP after a longer cut (the kernel gave up), or after a stateful firewall or NAT on the path
//!   lost its connection table: the old connection is dead, and an endpoint learns it only if it asks (a
//!   keepalive ping with a deadline). The harsher case, and the one that shows whether the agent and the
//!   controller notice a dead connection at all.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinSet;

/// What happens to the connections that were open during a cut when the link comes back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Restore {
    /// They resume (held bytes delivered): TCP after a short cut.
    Resume,
    /// They stay black-holed; new connections work: TCP after a long cut, or a firewall that lost its state.
    StayDead,
}

/// The link: up in some generation (connections of that generation forward), or cut.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Link {
    Up(u64),
    Cut,
}

/// A proxy from [`Blackhole::addr`] to an upstream address; dropping it closes every connection it holds.
pub struct Blackhole {
    addr: SocketAddr,
    link: Arc<watch::Sender<Link>>,
    generation: AtomicU64,
    /// Connections accepted so far (for the test's report).
    accepted: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl Blackhole {
    /// Listens on 127.0.0.1 (a free port) and forwards to `upstream`.
    pub async fn start(upstream: SocketAddr) -> std::io::Result<Blackhole> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let (tx, _) = watch::channel(Link::Up(0));
        let link = Arc::new(tx);
        let accepted = Arc::new(AtomicU64::new(0));
        let task = tokio::spawn(accept_loop(
            listener,
            upstream,
            link.clone(),
            accepted.clone(),
        ));
        Ok(Blackhole {
            addr,
            link,
            generation: AtomicU64::new(0),
            accepted,
            task,
        })
    }

    /// Where clients dial.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Pulls the cable: nothing passes in either direction, no socket is closed.
    pub fn cut(&self) {
        self.link.send_replace(Link::Cut);
    }

    /// Plugs it back in; `how` decides the fate of the connections the cut stalled.
    pub fn restore(&self, how: Restore) {
        let g = match how {
            Restore::Resume => self.generation.load(Ordering::SeqCst),
            Restore::StayDead => self.generation.fetch_add(1, Ordering::SeqCst) + 1,
        };
        self.link.send_replace(Link::Up(g));
    }

    pub fn is_cut(&self) -> bool {
        *self.link.borrow() == Link::Cut
    }

    /// TCP connections accepted since the start (each agent reconnect attempt is one).
    pub fn accepted(&self) -> u64 {
        self.accepted.load(Ordering::SeqCst)
    }
}

impl Drop for Blackhole {
    fn drop(&mut self) {
        // The accept loop owns the connections' JoinSet: aborting it drops (closes) every socket.
        self.task.abort();
    }
}

async fn accept_loop(
    listener: TcpListener,
    upstream: SocketAddr,
    link: Arc<watch::Sender<Link>>,
    accepted: Arc<AtomicU64>,
) {
    let mut conns = JoinSet::new();
    loop {
        tokio::select! {
            a = listener.accept() => {
                let Ok((client, _)) = a else { continue };
                accepted.fetch_add(1, Ordering::SeqCst);
                conns.spawn(connection(client, upstream, link.subscribe()));
            }
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
        }
    }
}

/// Waits until the link is up in any generation and returns it (a connection adopts the generation it
/// first sees).
async fn any_up(rx: &mut watch::Receiver<Link>) -> Option<u64> {
    let link = *rx.wait_for(|l| matches!(l, Link::Up(_))).await.ok()?;
    match link {
        Link::Up(g) => Some(g),
        Link::Cut => None,
    }
}

/// Waits until the link is up in generation `g` (forever, for a connection a later generation left dead).
async fn up_in(rx: &mut watch::Receiver<Link>, g: u64) -> Option<()> {
    rx.wait_for(|l| *l == Link::Up(g)).await.ok().map(|_| ())
}

async fn connection(client: TcpStream, upstream: SocketAddr, mut rx: watch::Receiver<Link>) {
    // A connection made during a cut: its SYN "vanished"; it goes through only if the link comes back while
    // the client still waits.
    let Some(g) = any_up(&mut rx).await else {
        return;
    };
    let Ok(server) = TcpStream::connect(upstream).await else {
        return; // client dropped: the upstream is gone
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (cr, cw) = client.into_split();
    let (sr, sw) = server.into_split();
    tokio::join!(pipe(cr, sw, rx.clone(), g), pipe(sr, cw, rx, g));
}

/// Copies `from` to `to` while the link is up in generation `g`; a close is passed on (as a write shutdown)
/// only while the link is up too.
async fn pipe(
    mut from: OwnedReadHalf,
    mut to: OwnedWriteHalf,
    mut rx: watch::Receiver<Link>,
    g: u64,
) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        if up_in(&mut rx, g).await.is_none() {
            return;
        }
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        // bytes read just before a cut are held, not dropped (TCP never delivers a stream with a hole)
        if up_in(&mut rx, g).await.is_none() {
            return;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            break;
        }
    }
    if up_in(&mut rx, g).await.is_some() {
        let _ = to.shutdown().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// An echo server; returns its address.
    async fn echo() -> SocketAddr {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        tokio::spawn(async move {
            loop {
                let (mut s, _) = l.accept().await.unwrap();
                tokio::spawn(async move {
                    let mut buf = [0u8; 1024];
                    loop {
                        match s.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => {
                                if s.write_all(&buf[..n]).await.is_err() {
                                    return;
                                }
                            }
                        }
                    }
                });
            }
        });
        addr
    }

    async fn roundtrip(s: &mut TcpStream, msg: &[u8], wait: Duration) -> Option<Vec<u8>> {
        s.write_all(msg).await.ok()?;
        let mut buf = vec![0u8; msg.len()];
        tokio::time::timeout(wait, s.read_exact(&mut buf))
            .await
            .ok()?
            .ok()?;
        Some(buf)
    }

    #[tokio::test]
    async fn a_cut_holds_bytes_and_resume_delivers_them() {
        let p = Blackhole::start(echo().await).await.unwrap();
        let mut s = TcpStream::connect(p.addr()).await.unwrap();
        assert_eq!(
            roundtrip(&mut s, b"one", Duration::from_secs(10)).await,
            Some(b"one".to_vec())
        );
        p.cut();
        assert!(p.is_cut());
        // nothing comes back while cut, and the socket stays open (no EOF, no reset)
        assert_eq!(
            roundtrip(&mut s, b"two", Duration::from_millis(300)).await,
            None
        );
        // a new connection is accepted but black-holed as well
        let mut fresh = TcpStream::connect(p.addr()).await.unwrap();
        assert_eq!(
            roundtrip(&mut fresh, b"new", Duration::from_millis(300)).await,
            None
        );
        p.restore(Restore::Resume);
        // the held "two" arrives late, then the connection works on
        let mut buf = [0u8; 3];
        tokio::time::timeout(Duration::from_secs(10), s.read_exact(&mut buf))
            .await
            .expect("held bytes delivered after the restore")
            .unwrap();
        assert_eq!(&buf, b"two");
        assert_eq!(
            roundtrip(&mut s, b"three", Duration::from_secs(10)).await,
            Some(b"three".to_vec())
        );
        assert_eq!(p.accepted(), 2);
    }

    #[tokio::test]
    async fn stay_dead_keeps_old_connections_black_holed_and_new_ones_work() {
        let p = Blackhole::start(echo().await).await.unwrap();
        let mut old = TcpStream::connect(p.addr()).await.unwrap();
        assert!(roundtrip(&mut old, b"a", Duration::from_secs(10))
            .await
            .is_some());
        p.cut();
        // dialled during the cut, still waiting when the link comes back: it goes through
        let mut during = TcpStream::connect(p.addr()).await.unwrap();
        p.restore(Restore::StayDead);
        assert_eq!(
            roundtrip(&mut old, b"b", Duration::from_millis(500)).await,
            None,
            "the old connection stays dead"
        );
        assert_eq!(
            roundtrip(&mut during, b"c", Duration::from_secs(10)).await,
            Some(b"c".to_vec())
        );
        let mut new = TcpStream::connect(p.addr()).await.unwrap();
        assert_eq!(
            roundtrip(&mut new, b"d", Duration::from_secs(10)).await,
            Some(b"d".to_vec())
        );
    }
}
