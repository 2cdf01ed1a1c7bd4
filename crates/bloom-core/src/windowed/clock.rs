//! Where a time window reads the time: [`Clock`], the wall clock [`SystemClock`], and
//! [`ManualClock`] for tests and simulations.

use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The time a [`WindowedFilter`](super::WindowedFilter) with a time window rotates by: a
/// count of milliseconds on a shared scale, so that a filter saved to a file and loaded
/// by another process (a crawler restarted every hour) knows which of its generations
/// expired meanwhile. It must not go backwards by more than a generation's period.
pub trait Clock: Send + Sync + 'static {
    /// Milliseconds since the Unix epoch (or any fixed origin all users of a file share).
    fn now_millis(&self) -> u64;
}

/// The system's wall clock: milliseconds since the Unix epoch.
///
/// ```
/// use bloom_core::windowed::{Clock, SystemClock};
///
/// assert!(SystemClock.now_millis() > 1_700_000_000_000); // after November 2023
/// ```
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_millis(&self) -> u64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or(Duration::ZERO)
            .as_millis() as u64
    }
}

/// A clock that moves only when told to: for tests and simulated time.
///
/// ```
/// use std::time::Duration;
/// use bloom_core::windowed::{Clock, ManualClock};
///
/// let clock = ManualClock::new(1_000);
/// clock.advance(Duration::from_secs(2));
/// assert_eq!(clock.now_millis(), 3_000);
/// ```
#[derive(Debug, Default)]
pub struct ManualClock(AtomicU64);

impl ManualClock {
    /// A clock reading `millis`.
    pub fn new(millis: u64) -> Self {
        Self(AtomicU64::new(millis))
    }

    /// Moves the clock forward by `by`.
    pub fn advance(&self, by: Duration) {
        self.0.fetch_add(by.as_millis() as u64, SeqCst);
    }

    /// Sets the clock to `millis`.
    pub fn set(&self, millis: u64) {
        self.0.store(millis, SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_millis(&self) -> u64 {
        self.0.load(SeqCst)
    }
}

impl<C: Clock> Clock for std::sync::Arc<C> {
    fn now_millis(&self) -> u64 {
        (**self).now_millis()
    }
}
