//! Sizing a windowed filter: the window, the keys that arrive in one window, the rate, and
//! how many generations divide it.
//!
//! With `N` generations read by a lookup (and one more, the spare, being cleared), each
//! covers a period `T = W / (N − 1)` and holds the keys of one period: `n / (N − 1)` at the
//! sized rate. A lookup tests `N` generations, each sized for `p_g = 1 − (1 − p)^(1/N)`, so
//! it answers a wrong "seen" with probability at most `1 − (1 − p_g)^N = p`, however long
//! the stream. Memory is `N + 1` generations of `n / (N − 1)` keys at `p_g`, each allocated
//! when a key first goes into it.

use std::sync::Arc;
use std::time::Duration;

use crate::{BloomFilter, BuildError, Layout, sizing};

use super::clock::{Clock, SystemClock};
use super::filter::WindowedFilter;
use super::ring::RingLayout;

/// How long a key is remembered.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Window {
    /// Keys inserted within this much time (by the filter's [`Clock`]).
    Time(Duration),
    /// Keys among this many most recent inserts.
    Count(u64),
}

impl Window {
    /// The window's length: milliseconds for a time window, inserts for a count window.
    pub(crate) fn length(self) -> u64 {
        match self {
            Self::Time(d) => d.as_millis() as u64,
            Self::Count(n) => n,
        }
    }
}

/// Configures a [`WindowedFilter`]: the window, `expected_items` (keys per window) and
/// `false_positive_rate` are required; `generations` (default 4), `layout`, `seed` and
/// `clock` are optional.
///
/// ```
/// use std::time::Duration;
/// use bloom_core::windowed::{Window, WindowedFilter};
///
/// let urls = WindowedFilter::builder(Window::Time(Duration::from_secs(24 * 3600)))
///     .expected_items(10_000_000) // URLs fetched per day
///     .false_positive_rate(0.001)
///     .build()?;
/// assert_eq!(urls.generations(), 4);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct WindowedBuilder {
    window: Window,
    expected_items: Option<u64>,
    false_positive_rate: Option<f64>,
    generations: u32,
    layout: Layout,
    ring_layout: Option<RingLayout>,
    seed: Option<u128>,
    clock: Arc<dyn Clock>,
}

/// The fewest generations: one being filled, one full.
pub const MIN_GENERATIONS: u32 = 2;
/// The most generations: a lookup tests each.
pub const MAX_GENERATIONS: u32 = 64;

impl WindowedBuilder {
    pub(crate) fn new(window: Window) -> Self {
        Self {
            window,
            expected_items: None,
            false_positive_rate: None,
            generations: 4,
            layout: Layout::SplitBlock,
            ring_layout: None,
            seed: None,
            clock: Arc::new(SystemClock),
        }
    }

    sizing::setters! {
        /// Keys inserted per window (at most; more raise the false-positive rate).
        expected_items(n: u64) => Some(n);

        /// The rate of wrong "seen" answers, for any length of stream at `expected_items` per
        /// window.
        false_positive_rate(p: f64) => Some(p);

        /// `N`, the generations a lookup tests (2 to 64, default 4): keys fade out between `W`
        /// and `W·N/(N − 1)` after their insert; more generations fade them closer to `W` at the
        /// cost of a probe each.
        ///
        /// ```
        /// use bloom_core::windowed::{Window, WindowedFilter};
        ///
        /// let f = WindowedFilter::builder(Window::Count(1_000))
        ///     .expected_items(1_000)
        ///     .false_positive_rate(0.01)
        ///     .generations(9)
        ///     .build()?;
        /// assert_eq!(f.period(), 125); // keys fade between 1,000 and 1,125 inserts later
        /// # Ok::<(), Box<dyn std::error::Error>>(())
        /// ```
        generations(n: u32) => n;

        /// The Bloom layout of every generation (default SplitBlock: a lookup tests `N`
        /// generations, and SplitBlock's test of a line is the cheapest, its eight bits found
        /// by one multiply; at the same rate it takes about the memory Blocked takes, whose
        /// `k` bits are cut one by one from the hash: the module docs, "Lookup cost").
        layout(layout: Layout) => layout;

        /// How the generations lie in memory: one allocation each, made at its first key
        /// ([`RingLayout::Separate`]), or one for the ring with a key's lines side by side
        /// ([`RingLayout::Interleaved`]: out of cache a lookup costs about one miss instead of
        /// `N`; the whole ring is allocated with the filter). Default: interleaved when the
        /// ring takes at least [`INTERLEAVE_FROM_BYTES`](super::INTERLEAVE_FROM_BYTES) and the
        /// layout is not Classic, separate otherwise. Interleaved with Classic is an error.
        ///
        /// ```
        /// use bloom_core::windowed::{RingLayout, Window, WindowedFilter};
        ///
        /// let f = WindowedFilter::builder(Window::Count(1_000)).expected_items(1_000).false_positive_rate(0.01)
        ///     .ring_layout(RingLayout::Interleaved)
        ///     .build()?;
        /// f.insert("a");
        /// assert!(f.contains("a") && f.ring_layout() == RingLayout::Interleaved);
        /// # Ok::<(), Box<dyn std::error::Error>>(())
        /// ```
        ring_layout(ring_layout: RingLayout) => Some(ring_layout);

        /// The secret hash key; random if not set.
        seed(seed: u128) => Some(seed);

        /// The clock a time window rotates by (default [`SystemClock`]).
        ///
        /// ```
        /// use std::sync::Arc;
        /// use std::time::Duration;
        /// use bloom_core::windowed::{ManualClock, Window, WindowedFilter};
        ///
        /// let clock = Arc::new(ManualClock::new(0));
        /// let f = WindowedFilter::builder(Window::Time(Duration::from_secs(3)))
        ///     .expected_items(100)
        ///     .false_positive_rate(0.01)
        ///     .clock(clock.clone())
        ///     .seed(1)
        ///     .build()?;
        /// f.insert("a");
        /// clock.advance(Duration::from_secs(3));
        /// assert!(f.contains("a")); // within 3 s … 4 s it fades out
        /// clock.advance(Duration::from_secs(1));
        /// assert!(!f.contains("a"));
        /// # Ok::<(), Box<dyn std::error::Error>>(())
        /// ```
        clock(clock: Arc<dyn Clock>) => clock;
    }

    /// Builds the filter, or says which setting to change.
    pub fn build(self) -> Result<WindowedFilter, BuildError> {
        let (n, p) = sizing::items_and_rate(self.expected_items, self.false_positive_rate)?
            .ok_or(BuildError::MissingExpectedItems)?;
        sizing::check_rate(p)?;
        sizing::check_items(n)?;
        let generations = self.generations;
        if !(MIN_GENERATIONS..=MAX_GENERATIONS).contains(&generations) {
            return Err(BuildError::Generations {
                generations,
                min: MIN_GENERATIONS,
                max: MAX_GENERATIONS,
            });
        }
        let period = self.window.length().div_ceil(u64::from(generations - 1));
        if period == 0 {
            return Err(BuildError::ZeroWindow);
        }
        let per_generation = n.div_ceil(u64::from(generations - 1));
        let p_generation = generation_rate(p, generations);
        let seed = sizing::hasher(self.seed)?.seed();
        // Sized once (the layout's model is a search); each generation is allocated when a
        // key first goes into it.
        let shape = BloomFilter::builder()
            .expected_items(per_generation)
            .false_positive_rate(p_generation)
            .layout(self.layout)
            .seed(seed)
            .resolve()?;
        let ring_bytes = (generations as usize + 1) * shape.slots.div_ceil(64) as usize * 8;
        let ring_layout = match self.ring_layout {
            Some(RingLayout::Interleaved) if self.layout == Layout::Classic => {
                return Err(BuildError::InterleavedClassic);
            }
            Some(chosen) => chosen,
            None => RingLayout::default_for(self.layout, ring_bytes),
        };
        Ok(WindowedFilter::from_parts(
            super::filter::Parts {
                window: self.window,
                period,
                expected_items: n,
                fpr: p,
                clock: self.clock,
            },
            shape,
            (0..=generations).map(|_| None).collect(),
            None,
            None,
            ring_layout,
        ))
    }
}

/// `p_g`: the rate of each of `generations` filters so that a lookup testing all of them
/// errs with probability `p`.
pub(crate) fn generation_rate(p: f64, generations: u32) -> f64 {
    1.0 - (1.0 - p).powf(1.0 / f64::from(generations))
}
