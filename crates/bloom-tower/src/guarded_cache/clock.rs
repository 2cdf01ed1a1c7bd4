//! The clock a value's deadline is checked against on every hit: cheap enough for the hit
//! path, and never late.
//!
//! On Linux it is `CLOCK_MONOTONIC_COARSE` (through `coarsetime`): the monotonic time as of the
//! last timer tick, read from the vDSO with no TSC read, a fraction of what `Instant::now`
//! costs (bench: `cache_hit/guarded_get_or_load` in benches/cache.rs). A reading lags the real time by up to a tick (1–10 ms, by the kernel's `HZ`), so
//! every deadline is set [`LAG`] (the longest tick) earlier: an entry is never served after its
//! lifetime has passed, and is dropped at most `2 × LAG` early. Elsewhere it is [`Instant`](std::time::Instant),
//! exact.

use std::time::Duration;
#[cfg(not(any(target_os = "linux", target_os = "android")))]
use std::{sync::OnceLock, time::Instant};

/// How far a reading may lag the real time: Linux's longest tick (`HZ=100`).
#[cfg(any(target_os = "linux", target_os = "android"))]
const LAG: Duration = Duration::from_millis(10);
#[cfg(not(any(target_os = "linux", target_os = "android")))]
const LAG: Duration = Duration::ZERO;

/// Readings of a monotonic clock, in ticks of its own from an arbitrary fixed origin.
#[derive(Clone, Copy, Debug)]
pub(super) struct Clock {
    /// [`LAG`] in ticks.
    lag: u64,
}

impl Clock {
    pub(super) fn new() -> Self {
        Self { lag: ticks(LAG) }
    }

    /// Now, in ticks.
    #[inline]
    pub(super) fn now(&self) -> u64 {
        #[cfg(test)]
        return now().saturating_add(ticks(test_skew::get()));
        #[cfg(not(test))]
        now()
    }

    /// The deadline of something that lives `lifetime` from now: a reading of at least it
    /// ([`is_past`](Self::is_past)) can only be taken once `lifetime` has passed.
    pub(super) fn deadline(&self, lifetime: Duration) -> u64 {
        self.now()
            .saturating_add(ticks(lifetime))
            .saturating_sub(self.lag)
    }

    /// Whether `deadline` (from [`deadline`](Self::deadline)) has passed.
    #[inline]
    pub(super) fn is_past(&self, deadline: u64) -> bool {
        self.now() >= deadline
    }
}

#[cfg(any(target_os = "linux", target_os = "android"))]
#[inline]
fn now() -> u64 {
    // Not `now()`, which also stores the reading in a global (for `recent()`): a write to one
    // cache line shared by every thread, on every hit.
    coarsetime::Instant::now_without_cache_update().as_ticks()
}

#[cfg(any(target_os = "linux", target_os = "android"))]
fn ticks(d: Duration) -> u64 {
    // Saturates: a lifetime of 2^32 s or more is forever.
    coarsetime::Duration::from(d).as_ticks()
}

#[cfg(not(any(target_os = "linux", target_os = "android")))]
#[inline]
fn now() -> u64 {
    static ORIGIN: OnceLock<Instant> = OnceLock::new();
    ticks(ORIGIN.get_or_init(Instant::now).elapsed())
}

#[cfg(not(any(target_os = "linux", target_os = "android")))]
fn ticks(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// Unit tests move this thread's clock forward instead of sleeping.
#[cfg(test)]
pub(super) mod test_skew {
    use std::cell::Cell;
    use std::time::Duration;

    thread_local! {
        static SKEW: Cell<Duration> = const { Cell::new(Duration::ZERO) };
    }

    /// How far this thread's clock has been moved forward.
    pub(in super::super) fn get() -> Duration {
        SKEW.with(Cell::get)
    }

    /// Moves this thread's clock forward by `by` (not moka's: it still sees the real time).
    pub(in super::super) fn advance(by: Duration) {
        SKEW.with(|skew| skew.set(skew.get() + by));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_is_served_past_its_lifetime() {
        let clock = Clock::new();
        let lifetime = Duration::from_millis(20);
        let deadline = clock.deadline(lifetime);
        let start = std::time::Instant::now();
        loop {
            // Read in this order: a deadline not yet past must mean less than `lifetime`
            // since it was set, whenever the real clock was read before.
            let elapsed = start.elapsed();
            if clock.is_past(deadline) {
                break;
            }
            assert!(
                elapsed < lifetime,
                "still alive {elapsed:?} after a {lifetime:?} deadline"
            );
            std::thread::yield_now();
        }
    }

    #[test]
    fn it_does_not_go_back_and_forever_is_never_past() {
        let clock = Clock::new();
        let a = clock.now();
        std::thread::sleep(Duration::from_millis(1));
        assert!(clock.now() >= a);
        assert!(
            clock.lag <= 1_000_000_000,
            "a coarse clock ticks at least once a second"
        );
        assert!(!clock.is_past(clock.deadline(Duration::MAX)));
        assert!(clock.is_past(clock.deadline(Duration::ZERO)));
    }
}
