//! Limits against a bad or hostile client (controller.toml `[limits]`): the largest fleet accepted, gRPC
//! message sizes, Watch streams per identity, request deadlines, and enrolment failures per peer address and
//! overall (so join tokens cannot be brute-forced, nor the store hammered). Each refusal names the limit's
//! config key.

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use pxfleet_common::Clock;
use tokio::time::Instant;

use crate::error::Error;
use serde::Deserialize;

/// `[limits]` in controller.toml. Every key has a default.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct LimitsConfig {
    /// The largest fleet accepted by Plan and Submit: the file plus the files it includes, in bytes.
    pub max_fleet_bytes: u64,
    /// The most containers one fleet may declare.
    pub max_fleet_containers: u64,
    /// The largest gRPC message the controller decodes (both services), in bytes.
    pub max_message_bytes: u64,
    /// Watch streams one identity (user or node certificate) may hold open at once.
    pub max_watch_streams_per_identity: u32,
    /// The longest the controller works on one request before answering it (a streaming call: until its
    /// response starts), in seconds. Longer requests are cancelled.
    pub request_timeout_secs: u64,
    /// Failed enrolments (bad or used token, wrong node, bad CSR) accepted from one peer address per minute;
    /// beyond that every enrolment from that address is refused until the minute has passed.
    pub enroll_failures_per_peer_per_minute: u32,
    /// Failed enrolments accepted from all peers together per minute (an attacker with many addresses).
    pub enroll_failures_per_minute: u32,
}

impl Default for LimitsConfig {
    fn default() -> Self {
        LimitsConfig {
            max_fleet_bytes: 4 << 20,
            max_fleet_containers: 10_000,
            max_message_bytes: 16 << 20,
            max_watch_streams_per_identity: 16,
            request_timeout_secs: 300,
            enroll_failures_per_peer_per_minute: 10,
            enroll_failures_per_minute: 100,
        }
    }
}

impl LimitsConfig {
    /// The first key whose value is not allowed, with why.
    pub fn invalid(&self) -> Option<(&'static str, String)> {
        let at_least_1 = [
            ("limits.max_fleet_bytes", self.max_fleet_bytes),
            ("limits.max_fleet_containers", self.max_fleet_containers),
            (
                "limits.max_watch_streams_per_identity",
                u64::from(self.max_watch_streams_per_identity),
            ),
            ("limits.request_timeout_secs", self.request_timeout_secs),
            (
                "limits.enroll_failures_per_peer_per_minute",
                u64::from(self.enroll_failures_per_peer_per_minute),
            ),
            (
                "limits.enroll_failures_per_minute",
                u64::from(self.enroll_failures_per_minute),
            ),
        ];
        for (field, v) in at_least_1 {
            if v == 0 {
                return Some((field, "must be at least 1".into()));
            }
        }
        if self.max_message_bytes < 64 * 1024 || self.max_message_bytes > u64::from(u32::MAX) {
            return Some((
                "limits.max_message_bytes",
                format!(
                    "{} is out of range; expected 65536..=4294967295",
                    self.max_message_bytes
                ),
            ));
        }
        None
    }

    pub fn request_timeout(&self) -> Duration {
        Duration::from_secs(self.request_timeout_secs)
    }

    /// Refuses a Plan/Submit whose files are larger than `max_fleet_bytes`, before parsing them.
    pub fn check_fleet_bytes<'a>(
        &self,
        file_name: &str,
        texts: impl IntoIterator<Item = &'a str>,
    ) -> Result<(), Error> {
        let total: u64 = texts.into_iter().map(|t| t.len() as u64).sum();
        if total > self.max_fleet_bytes {
            return Err(Error::InvalidArgument(format!(
                "{file_name}: the fleet and its files are {total} bytes; this controller accepts at most {} \
                 (limits.max_fleet_bytes)",
                self.max_fleet_bytes
            )));
        }
        Ok(())
    }

    /// Refuses a fleet with more than `max_fleet_containers` containers.
    pub fn check_fleet_containers(&self, fleet: &str, containers: usize) -> Result<(), Error> {
        if containers as u64 > self.max_fleet_containers {
            return Err(Error::InvalidArgument(format!(
                "fleet {fleet} declares {containers} containers; this controller accepts at most {} per fleet \
                 (limits.max_fleet_containers)",
                self.max_fleet_containers
            )));
        }
        Ok(())
    }
}

/// The limits' running state, shared by the services.
#[derive(Debug)]
pub struct Limiter {
    config: LimitsConfig,
    /// Set at shutdown: open Watch streams end, so a client holding one cannot hold up a graceful shutdown.
    closing: tokio::sync::watch::Sender<bool>,
    watches: Arc<Mutex<HashMap<String, u32>>>,
    enroll: Mutex<EnrollFailures>,
    /// The enrolment failure windows' time.
    clock: Clock,
}

#[derive(Debug, Default)]
struct EnrollFailures {
    per_peer: HashMap<IpAddr, VecDeque<Instant>>,
    all: VecDeque<Instant>,
}

const WINDOW: Duration = Duration::from_secs(60);

fn trim(q: &mut VecDeque<Instant>, now: Instant) {
    while q.front().is_some_and(|t| now.duration_since(*t) >= WINDOW) {
        q.pop_front();
    }
}

/// One open Watch stream of an identity; dropping it frees the slot.
#[derive(Debug)]
pub struct WatchPermit {
    identity: String,
    watches: Arc<Mutex<HashMap<String, u32>>>,
}

impl Drop for WatchPermit {
    fn drop(&mut self) {
        let mut w = self.watches.lock().expect("watch counts");
        if let Some(n) = w.get_mut(&self.identity) {
            *n -= 1;
            if *n == 0 {
                w.remove(&self.identity);
            }
        }
    }
}

impl Limiter {
    pub fn new(config: LimitsConfig, clock: Clock) -> Limiter {
        Limiter {
            clock,
            config,
            closing: tokio::sync::watch::channel(false).0,
            watches: Default::default(),
            enroll: Default::default(),
        }
    }

    pub fn config(&self) -> &LimitsConfig {
        &self.config
    }

    /// A slot for one more Watch stream of `identity`, or `ResourceExhausted`.
    pub fn watch_permit(&self, identity: &str) -> Result<WatchPermit, Error> {
        let mut w = self.watches.lock().expect("watch counts");
        let n = w.entry(identity.to_string()).or_default();
        if *n >= self.config.max_watch_streams_per_identity {
            return Err(Error::ResourceExhausted(format!(
                "{identity} already has {n} Watch streams open, the most this controller allows \
                 (limits.max_watch_streams_per_identity); close one first"
            )));
        }
        *n += 1;
        Ok(WatchPermit {
            identity: identity.to_string(),
            watches: self.watches.clone(),
        })
    }

    /// Ends every open Watch stream (at shutdown).
    pub fn close_streams(&self) {
        self.closing.send_replace(true);
    }

    /// Resolves once [`Limiter::close_streams`] was called.
    pub fn closing(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        let mut rx = self.closing.subscribe();
        async move {
            let _ = rx.wait_for(|c| *c).await;
        }
    }

    /// Open Watch streams of `identity` (for tests and metrics).
    pub fn watch_streams(&self, identity: &str) -> u32 {
        self.watches
            .lock()
            .expect("watch counts")
            .get(identity)
            .copied()
            .unwrap_or(0)
    }

    /// Whether an enrolment from `peer` may be tried now: refused while `peer` (or everybody together) has
    /// used up its failures of the last minute.
    pub fn enroll_allowed(&self, peer: Option<IpAddr>) -> Result<(), Error> {
        let now = self.clock.instant();
        let mut e = self.enroll.lock().expect("enrolment failures");
        trim(&mut e.all, now);
        if let Some(q) = peer.and_then(|p| e.per_peer.get_mut(&p)) {
            trim(q, now);
            if q.len() >= self.config.enroll_failures_per_peer_per_minute as usize {
                let wait = WINDOW.saturating_sub(now.duration_since(q[0])).as_secs() + 1;
                return Err(Error::ResourceExhausted(format!(
                    "too many failed enrolments from {}: at most {} per minute \
                     (limits.enroll_failures_per_peer_per_minute); retry in {wait} s with a valid token",
                    peer.map(|p| p.to_string()).unwrap_or_default(),
                    self.config.enroll_failures_per_peer_per_minute
                )));
            }
        }
        if e.all.len() >= self.config.enroll_failures_per_minute as usize {
            let wait = WINDOW
                .saturating_sub(now.duration_since(e.all[0]))
                .as_secs()
                + 1;
            return Err(Error::ResourceExhausted(format!(
                "too many failed enrolments overall: at most {} per minute (limits.enroll_failures_per_minute); \
                 retry in {wait} s",
                self.config.enroll_failures_per_minute
            )));
        }
        Ok(())
    }

    /// Counts a failed enrolment from `peer`.
    pub fn enroll_failed(&self, peer: Option<IpAddr>) {
        let now = self.clock.instant();
        let mut e = self.enroll.lock().expect("enrolment failures");
        e.all.push_back(now);
        if let Some(p) = peer {
            let q = e.per_peer.entry(p).or_default();
            trim(q, now);
            q.push_back(now);
        }
        // forget peers whose failures are all older than the window
        e.per_peer.retain(|_, q| {
            trim(q, now);
            !q.is_empty()
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn watch_permits_are_counted_per_identity_and_freed_on_drop() {
        let l = Limiter::new(
            LimitsConfig {
                max_watch_streams_per_identity: 2,
                ..LimitsConfig::default()
            },
            Clock::system(),
        );
        let a = l.watch_permit("user/a").unwrap();
        let _b = l.watch_permit("user/a").unwrap();
        let err = tonic::Status::from(l.watch_permit("user/a").unwrap_err());
        assert_eq!(err.code(), tonic::Code::ResourceExhausted);
        assert!(
            err.message()
                .contains("limits.max_watch_streams_per_identity"),
            "{err:?}"
        );
        let _other = l.watch_permit("user/b").unwrap();
        drop(a);
        assert_eq!(l.watch_streams("user/a"), 1);
        l.watch_permit("user/a").unwrap();
    }

    #[test]
    fn enrolment_failures_are_limited_per_peer_and_overall_for_a_minute() {
        let clock = pxfleet_common::ManualClock::new();
        let l = Limiter::new(
            LimitsConfig {
                enroll_failures_per_peer_per_minute: 3,
                enroll_failures_per_minute: 5,
                ..LimitsConfig::default()
            },
            clock.clock(),
        );
        let a: IpAddr = "192.0.2.1".parse().unwrap();
        let b: IpAddr = "192.0.2.2".parse().unwrap();
        for _ in 0..3 {
            l.enroll_allowed(Some(a)).unwrap();
            l.enroll_failed(Some(a));
        }
        let err = tonic::Status::from(l.enroll_allowed(Some(a)).unwrap_err());
        assert_eq!(err.code(), tonic::Code::ResourceExhausted);
        assert!(err.message().contains("192.0.2.1"), "{err:?}");
        // another address is still served, until the overall limit
        l.enroll_allowed(Some(b)).unwrap();
        l.enroll_failed(Some(b));
        l.enroll_failed(Some(b));
        let err = tonic::Status::from(l.enroll_allowed(Some(b)).unwrap_err());
        assert!(
            err.message().contains("limits.enroll_failures_per_minute"),
            "{err:?}"
        );
        // a minute later the failures are forgotten: both addresses are served again
        clock.advance(Duration::from_secs(55));
        assert!(
            l.enroll_allowed(Some(a)).is_err(),
            "still within the minute"
        );
        clock.advance(Duration::from_secs(5));
        l.enroll_allowed(Some(a)).unwrap();
        l.enroll_allowed(Some(b)).unwrap();
    }

    #[test]
    fn fleet_size_limits_name_their_keys() {
        let c = LimitsConfig {
            max_fleet_bytes: 10,
            max_fleet_containers: 2,
            ..LimitsConfig::default()
        };
        c.check_fleet_bytes("f.yaml", ["12345", "12345"]).unwrap();
        let err = tonic::Status::from(
            c.check_fleet_bytes("f.yaml", ["12345", "123456"])
                .unwrap_err(),
        );
        assert!(err.message().contains("limits.max_fleet_bytes"), "{err:?}");
        c.check_fleet_containers("dev", 2).unwrap();
        let err = tonic::Status::from(c.check_fleet_containers("dev", 3).unwrap_err());
        assert!(
            err.message().contains("limits.max_fleet_containers"),
            "{err:?}"
        );
        assert!(LimitsConfig::default().invalid().is_none());
        assert!(LimitsConfig {
            max_message_bytes: 10,
            ..LimitsConfig::default()
        }
        .invalid()
        .is_some());
    }
}
