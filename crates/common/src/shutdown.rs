//! The shutdown signal both daemons wait for: SIGINT (Ctrl-C) or SIGTERM (what systemd and dev mode send).
//!
//! When the SIGTERM handler cannot be installed (it practically cannot fail), the daemon keeps running and
//! stops on SIGINT only, with a warning: refusing to serve over a missing signal handler would turn a clean-stop
//! nicety into an outage, and a stop by the service manager then ends in its SIGKILL, which the stores survive
//! (their writes are flushed as they are made).

use std::future::Future;

use tokio::signal::unix::{signal, SignalKind};

/// Which signal asked for the shutdown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shutdown {
    /// SIGINT (Ctrl-C).
    Interrupt,
    /// SIGTERM.
    Terminate,
}

impl Shutdown {
    pub fn name(self) -> &'static str {
        match self {
            Shutdown::Interrupt => "SIGINT",
            Shutdown::Terminate => "SIGTERM",
        }
    }
}

/// Installs the handlers now (so a signal that arrives before the future is first polled is not lost) and
/// returns a future that resolves on the first SIGINT or SIGTERM, logging "shutting down". `who` names the
/// program in the warning when SIGTERM cannot be handled. Call it inside a Tokio runtime.
pub fn shutdown_signal(who: &'static str) -> impl Future<Output = Shutdown> + Send + 'static {
    let term = signal(SignalKind::terminate())
        .inspect_err(|e| {
            tracing::warn!(
                "{who}: cannot install the SIGTERM handler: {e}; only SIGINT (Ctrl-C) stops it cleanly"
            )
        })
        .ok();
    let int = signal(SignalKind::interrupt())
        .inspect_err(|e| tracing::warn!("{who}: cannot install the SIGINT handler: {e}"))
        .ok();
    async move {
        let got = wait(term, int).await;
        tracing::info!("shutting down ({})", got.name());
        got
    }
}

async fn wait(
    term: Option<tokio::signal::unix::Signal>,
    int: Option<tokio::signal::unix::Signal>,
) -> Shutdown {
    async fn recv(s: Option<tokio::signal::unix::Signal>) {
        match s {
            Some(mut s) => {
                // `None` means the driver is gone: never resolve rather than stop the daemon for nothing
                if s.recv().await.is_none() {
                    std::future::pending::<()>().await
                }
            }
            None => std::future::pending::<()>().await,
        }
    }
    tokio::select! {
        _ = recv(int) => Shutdown::Interrupt,
        _ = recv(term) => Shutdown::Terminate,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn raise(sig: rustix::process::Signal) {
        rustix::process::kill_process(rustix::process::getpid(), sig).unwrap();
    }

    // One test for both signals: the handlers are process-wide, so two tests running at once would see each
    // other's signals.
    #[tokio::test]
    async fn sigterm_and_sigint_resolve_it() {
        let stop = shutdown_signal("test");
        let mut stop = std::pin::pin!(stop);
        let waited = tokio::time::timeout(Duration::from_millis(50), &mut stop).await;
        assert!(waited.is_err(), "resolved without a signal");
        raise(rustix::process::Signal::TERM);
        let got = tokio::time::timeout(Duration::from_secs(10), stop).await;
        assert_eq!(got.unwrap(), Shutdown::Terminate);

        let stop = shutdown_signal("test");
        raise(rustix::process::Signal::INT);
        let got = tokio::time::timeout(Duration::from_secs(10), stop).await;
        assert_eq!(got.unwrap(), Shutdown::Interrupt);
    }
}
