//! The injected clock: the one place pxfleet's daemons read the time. [`Clock`] gives wall time (Unix
//! milliseconds, for what is stored and compared across processes: token expiry, heartbeats, operation
//! deadlines, certificate validity) and monotonic instants (for what is measured or waited for inside this
//! process: rate-limit windows, timeouts). [`Stopwatch`] measures real durations (metrics, pacing). Production
//! code uses [`Clock::system`]; tests use a [`ManualClock`], moved forward by hand, so expiry and timeout tests
//! advance time instead of sleeping.
//!
//! Monotonic instants are [`tokio::time::Instant`]s and a [`ManualClock`]'s wall time follows tokio's clock plus
//! what [`ManualClock::advance`] added, so a test on a paused tokio runtime (tokio's `test-util` feature, which
//! the workspace does not enable today) would move every clock with tokio's. Outside a paused runtime tokio's
//! clock is the real one. `clippy.toml` refuses `SystemTime::now` / `Instant::now` elsewhere.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Where time comes from; cheap to clone (clones share the source, so advancing a [`ManualClock`] moves every
/// clone of its [`ManualClock::clock`]).
#[derive(Clone, Debug, Default)]
pub struct Clock {
    manual: Option<Arc<Manual>>,
}

#[derive(Debug)]
struct Manual {
    /// Wall time at `start`, in Unix milliseconds.
    start_ms: u64,
    start: tokio::time::Instant,
    /// What [`ManualClock::advance`] added, in milliseconds.
    ahead_ms: AtomicU64,
}

impl Manual {
    fn ahead(&self) -> Duration {
        Duration::from_millis(self.ahead_ms.load(Ordering::SeqCst))
    }
}

impl Clock {
    /// The system's clocks: what the daemons run on.
    pub fn system() -> Clock {
        Clock { manual: None }
    }

    /// Wall time: milliseconds since the Unix epoch (0 for a system clock set before 1970).
    pub fn now_ms(&self) -> u64 {
        match &self.manual {
            None => system_ms(),
            Some(m) => {
                #[allow(clippy::disallowed_methods)] // the clock itself
                let elapsed = tokio::time::Instant::now().saturating_duration_since(m.start);
                m.start_ms
                    .saturating_add(elapsed.as_millis() as u64)
                    .saturating_add(m.ahead_ms.load(Ordering::SeqCst))
            }
        }
    }

    /// Wall time as a [`SystemTime`] (for certificate validity and `time`'s types).
    pub fn system_time(&self) -> SystemTime {
        match &self.manual {
            #[allow(clippy::disallowed_methods)] // the clock itself
            None => SystemTime::now(),
            Some(_) => UNIX_EPOCH + Duration::from_millis(self.now_ms()),
        }
    }

    /// A monotonic instant, for deadlines in this process (tokio's, plus what a [`ManualClock`] was advanced).
    pub fn instant(&self) -> tokio::time::Instant {
        #[allow(clippy::disallowed_methods)] // the clock itself
        let now = tokio::time::Instant::now();
        match &self.manual {
            None => now,
            Some(m) => now + m.ahead(),
        }
    }
}

#[allow(clippy::disallowed_methods)] // the clock itself
fn system_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// Measures how long something really took (durations for metrics, logs and pacing, waits for another thread
/// or process to let go of a resource): real time, never advanced by a test's clock, so a test moving its
/// [`ManualClock`] forward does not make a pass look slow or a wait give up.
#[derive(Clone, Copy, Debug)]
pub struct Stopwatch(std::time::Instant);

impl Stopwatch {
    /// Starts measuring now.
    pub fn start() -> Stopwatch {
        #[allow(clippy::disallowed_methods)] // the clock itself
        let now = std::time::Instant::now();
        Stopwatch(now)
    }

    /// Real time since [`Stopwatch::start`].
    pub fn elapsed(&self) -> Duration {
        self.0.elapsed()
    }
}

/// A test clock: starts at a given wall time (or the real one), follows tokio's clock (real time unless the
/// runtime is paused), and jumps forward with [`ManualClock::advance`]. Hand its
/// [`ManualClock::clock`] to the code under test.
#[derive(Debug)]
pub struct ManualClock {
    clock: Clock,
}

impl ManualClock {
    /// A clock that reads the real wall time now and moves on from there.
    pub fn new() -> ManualClock {
        ManualClock::starting_at(system_ms())
    }

    /// A clock that reads `unix_ms` now.
    pub fn starting_at(unix_ms: u64) -> ManualClock {
        #[allow(clippy::disallowed_methods)] // the clock itself
        let start = tokio::time::Instant::now();
        ManualClock {
            clock: Clock {
                manual: Some(Arc::new(Manual {
                    start_ms: unix_ms,
                    start,
                    ahead_ms: AtomicU64::new(0),
                })),
            },
        }
    }

    /// The clock to pass to the code under test.
    pub fn clock(&self) -> Clock {
        self.clock.clone()
    }

    /// Moves wall time and instants forward by `by` (whole milliseconds), for every clone of [`Self::clock`].
    /// Sleeps already running in tokio are not shortened: advance tokio's paused clock for those.
    pub fn advance(&self, by: Duration) {
        if let Some(m) = &self.clock.manual {
            m.ahead_ms
                .fetch_add(by.as_millis() as u64, Ordering::SeqCst);
        }
    }

    /// Wall time now, as [`Clock::now_ms`].
    pub fn now_ms(&self) -> u64 {
        self.clock.now_ms()
    }
}

impl Default for ManualClock {
    fn default() -> Self {
        ManualClock::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_manual_clock_starts_where_told_and_moves_only_when_advanced_or_as_time_passes() {
        let manual = ManualClock::starting_at(1_000_000);
        let clock = manual.clock();
        let t0 = clock.now_ms();
        let i0 = clock.instant();
        assert!((1_000_000..1_000_000 + 5_000).contains(&t0), "{t0}");
        manual.advance(Duration::from_secs(90));
        let t1 = clock.now_ms();
        assert!(t1 >= t0 + 90_000, "{t0} -> {t1}");
        assert!(clock.instant() >= i0 + Duration::from_secs(90));
        assert_eq!(
            clock.system_time(),
            UNIX_EPOCH + Duration::from_millis(clock.now_ms())
        );
    }

    #[test]
    fn a_stopwatch_measures_real_time_whatever_a_manual_clock_does() {
        let manual = ManualClock::new();
        let watch = Stopwatch::start();
        manual.advance(Duration::from_secs(3600));
        assert!(
            watch.elapsed() < Duration::from_secs(60),
            "{:?}",
            watch.elapsed()
        );
    }

    #[test]
    fn the_system_clock_reads_the_real_time() {
        let a = Clock::system().now_ms();
        assert!(a > 1_600_000_000_000, "{a}");
        let b = Clock::default().now_ms();
        assert!(b >= a);
    }
}
