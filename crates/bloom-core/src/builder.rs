//! Building a filter: from (expected items, false-positive rate) or from an explicit size.
//! The checks and setters every builder shares are in `sizing.rs`.

use std::fmt;
use std::marker::PhantomData;

use crate::hasher::KeyHasher;
use crate::params::{self, SPLIT_HASHES};
use crate::{BloomFilter, CountingBloomFilter, Layout, sizing};

/// Why a filter could not be built. Every message says what to change.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BuildError {
    /// `expected_items` was 0.
    #[error(
        "expected items must be at least 1: size the filter for the number of keys you will insert"
    )]
    ZeroItems,
    /// The false-positive rate was not strictly between 0 and 1 (or was NaN).
    #[error("false-positive rate must be strictly between 0 and 1 (e.g. 0.01 for 1%), got {0}")]
    InvalidFalsePositiveRate(f64),
    /// An explicit size of 0 bits.
    #[error("number of bits must be at least 1")]
    ZeroBits,
    /// An explicit `k` of 0.
    #[error("number of hashes must be at least 1")]
    ZeroHashes,
    /// More hash probes per key than supported.
    #[error(
        "number of hashes {hashes} exceeds the maximum of {max}: use a larger false-positive rate or fewer hashes"
    )]
    TooManyHashes {
        /// The requested `k`.
        hashes: u32,
        /// [`params::MAX_HASHES`].
        max: u32,
    },
    /// `hashes(k)` with a layout whose `k` is fixed ([`Layout::SplitBlock`]: one bit per word).
    #[error(
        "the {layout} layout sets exactly {fixed} bits per key (one per 64-bit word of its block), not {hashes}: drop .hashes(k), or pick the blocked layout"
    )]
    HashesFixedByLayout {
        /// The layout.
        layout: Layout,
        /// The requested `k`.
        hashes: u32,
        /// The `k` the layout always uses.
        fixed: u32,
    },
    /// The filter would need more bits than supported (or than fit in memory).
    #[error(
        "the filter would need {bits:.0} bits, more than the maximum of {max} (128 GiB): lower the expected items or raise the false-positive rate"
    )]
    TooLarge {
        /// Bits the parameters ask for.
        bits: f64,
        /// [`params::MAX_BITS`].
        max: u64,
    },
    /// Neither way of sizing the filter was given.
    #[error(
        "no size given: call .expected_items(n) and .false_positive_rate(p), or .bits(m) and .hashes(k)"
    )]
    MissingSize,
    /// `expected_items` without `false_positive_rate`.
    #[error(
        "expected items given without a false-positive rate: call .false_positive_rate(p), e.g. 0.01"
    )]
    MissingFalsePositiveRate,
    /// `false_positive_rate` without `expected_items`.
    #[error("false-positive rate given without expected items: call .expected_items(n)")]
    MissingExpectedItems,
    /// `bits` without `hashes` (and no `expected_items` to derive it from), in a layout
    /// whose `k` is not fixed.
    #[error(
        "bits given without hashes: call .hashes(k), or .expected_items(n) to derive the best k"
    )]
    MissingHashes,
    /// Both `bits` and `false_positive_rate` were given.
    #[error(
        "both .bits(m) and .false_positive_rate(p) given: size the filter one way or the other"
    )]
    ConflictingSize,
    /// A windowed filter asked for [`RingLayout::Interleaved`](crate::windowed::RingLayout)
    /// with the Classic layout, which has no lines to interleave.
    #[error("an interleaved ring needs a layout with lines (SplitBlock or Blocked), not Classic")]
    InterleavedClassic,
    /// A scalable filter's growth factor below 1 (or not finite).
    #[error("growth factor must be at least 1 (2 doubles each stage), got {0}")]
    InvalidGrowthFactor(f64),
    /// A scalable filter's tightening ratio outside (0, 1).
    #[error("tightening ratio must be strictly between 0 and 1 (e.g. 0.5), got {0}")]
    InvalidTighteningRatio(f64),
    /// The operating system's random source failed while choosing the secret hash key (the
    /// cause is the error's [`source`](std::error::Error::source)).
    #[error("could not draw a random hash key from the operating system: set one with .seed(..)")]
    Random(#[source] getrandom::Error),
    /// A cuckoo filter's rate below what its widest fingerprint (17 bits) reaches.
    #[error(
        "a cuckoo filter reaches a false-positive rate of {min:.1e} at the lowest (17-bit fingerprints), not {fpr}: raise the rate, or use a Bloom filter"
    )]
    CuckooRateTooLow {
        /// The requested rate.
        fpr: f64,
        /// The lowest rate a cuckoo filter is sized for.
        min: f64,
    },
    /// A cuckoo filter's fingerprint width outside the supported range.
    #[error("fingerprint bits must be from {min} to {max}, got {bits}")]
    FingerprintBits {
        /// The requested width.
        bits: u32,
        /// The narrowest.
        min: u32,
        /// The widest.
        max: u32,
    },
    /// A cuckoo filter's `buckets` without `fingerprint_bits`.
    #[error("buckets given without a fingerprint width: call .fingerprint_bits(f), e.g. 12")]
    MissingFingerprintBits,
    /// A cuckoo filter sized both ways (`expected_items` and `buckets`, or
    /// `false_positive_rate` and `fingerprint_bits`).
    #[error(
        "size a cuckoo filter one way: .expected_items(n) with .false_positive_rate(p), or .buckets(m) with .fingerprint_bits(f)"
    )]
    ConflictingCuckooSize,
    /// An explicit cuckoo filter of 0 buckets.
    #[error("number of buckets must be at least 1")]
    ZeroBuckets,
    /// A windowed filter's generations outside the supported range.
    #[error("generations must be from {min} to {max}, got {generations}")]
    Generations {
        /// The requested number.
        generations: u32,
        /// The fewest.
        min: u32,
        /// The most.
        max: u32,
    },
    /// A windowed filter's window of no time (or no inserts).
    #[error("the window must be at least one millisecond (or one insert) per generation")]
    ZeroWindow,
}

/// Configures and builds a filter of kind `F`: a [`BloomFilter`] (the default) from
/// [`BloomFilter::builder`], or a [`CountingBloomFilter`] from
/// [`CountingBloomFilter::builder`]. Both kinds take the same settings, and
/// [`build`](Self::build) returns the kind the builder was started for.
///
/// ```
/// use bloom_core::{BloomFilter, CountingBloomFilter, Layout};
///
/// let plain: BloomFilter = BloomFilter::builder()
///     .expected_items(1_000_000)
///     .false_positive_rate(0.01)
///     .layout(Layout::Blocked)
///     .seed(0x1234_u128)
///     .build()?;
/// let counting: CountingBloomFilter = CountingBloomFilter::builder()
///     .expected_items(1_000)
///     .false_positive_rate(0.01)
///     .build()?;
/// counting.insert("a");
/// assert!(counting.remove("a"));
/// # Ok::<(), bloom_core::BuildError>(())
/// ```
#[must_use]
pub struct Builder<F = BloomFilter> {
    expected_items: Option<u64>,
    false_positive_rate: Option<f64>,
    bits: Option<u64>,
    hashes: Option<u32>,
    layout: Layout,
    seed: Option<u128>,
    kind: PhantomData<fn() -> F>,
}

// Written out rather than derived: a derive would require `F: Clone` / `F: Default`, and
// the builder holds no `F`.
impl<F> Clone for Builder<F> {
    fn clone(&self) -> Self {
        Self {
            kind: PhantomData,
            ..*self
        }
    }
}

impl<F> Default for Builder<F> {
    fn default() -> Self {
        Self {
            expected_items: None,
            false_positive_rate: None,
            bits: None,
            hashes: None,
            layout: Layout::default(),
            seed: None,
            kind: PhantomData,
        }
    }
}

impl<F> fmt::Debug for Builder<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Builder")
            .field("kind", &std::any::type_name::<F>())
            .field("expected_items", &self.expected_items)
            .field("false_positive_rate", &self.false_positive_rate)
            .field("bits", &self.bits)
            .field("hashes", &self.hashes)
            .field("layout", &self.layout)
            .field("seed", &self.seed.map(|_| "<secret>"))
            .finish()
    }
}

impl<F> Builder<F> {
    sizing::setters! {
        /// The number of distinct keys the filter is sized for (n).
        ///
        /// ```
        /// let f = bloom_core::BloomFilter::builder()
        ///     .expected_items(10_000)
        ///     .false_positive_rate(0.01)
        ///     .build()?;
        /// assert_eq!(f.capacity(), Some(10_000));
        /// # Ok::<(), bloom_core::BuildError>(())
        /// ```
        expected_items(n: u64) => Some(n);

        /// The false-positive rate wanted at `expected_items` keys (p), e.g. `0.01`.
        ///
        /// ```
        /// let f = bloom_core::BloomFilter::builder()
        ///     .expected_items(10_000)
        ///     .false_positive_rate(0.001)
        ///     .build()?;
        /// assert_eq!(f.target_fpr(), Some(0.001));
        /// # Ok::<(), bloom_core::BuildError>(())
        /// ```
        false_positive_rate(p: f64) => Some(p);

        /// An explicit number of bits (m) instead of a false-positive rate. Blocked filters round
        /// it up to a whole number of 512-bit blocks. A filter sized this way has no
        /// [`target_fpr`](BloomFilter::target_fpr).
        ///
        /// ```
        /// let f = bloom_core::BloomFilter::builder().bits(1_000).hashes(3).build()?;
        /// assert_eq!(f.num_bits(), 1_024); // two 512-bit blocks
        /// assert_eq!(f.target_fpr(), None);
        /// # Ok::<(), bloom_core::BuildError>(())
        /// ```
        bits(m: u64) => Some(m);

        /// An explicit number of hash probes per key (k). Not needed with [`Layout::SplitBlock`],
        /// whose `k` is always [`SPLIT_HASHES`] (any other value is
        /// [`BuildError::HashesFixedByLayout`]); `.bits(m)` alone sizes such a filter.
        ///
        /// ```
        /// let f = bloom_core::BloomFilter::builder().bits(4_096).hashes(5).build()?;
        /// assert_eq!(f.num_hashes(), 5);
        /// # Ok::<(), bloom_core::BuildError>(())
        /// ```
        hashes(k: u32) => Some(k);

        /// The layout; [`Layout::Blocked`] by default.
        ///
        /// ```
        /// use bloom_core::{BloomFilter, Layout};
        ///
        /// let f = BloomFilter::builder()
        ///     .expected_items(1_000)
        ///     .false_positive_rate(0.01)
        ///     .layout(Layout::Classic)
        ///     .build()?;
        /// assert_eq!(f.layout(), Layout::Classic);
        /// # Ok::<(), bloom_core::BuildError>(())
        /// ```
        layout(layout: Layout) => layout;

        /// A fixed 128-bit hash key, for filters that must agree across processes or runs.
        ///
        /// Without it the key is drawn from the operating system's random source, so nobody can
        /// compute colliding keys offline. A fixed key that leaks lets an attacker craft keys that
        /// the filter wrongly lets through: treat it like a password.
        ///
        /// ```
        /// let f = bloom_core::BloomFilter::builder()
        ///     .expected_items(1_000)
        ///     .false_positive_rate(0.01)
        ///     .seed(42)
        ///     .build()?;
        /// assert_eq!(f.seed(), 42);
        /// # Ok::<(), bloom_core::BuildError>(())
        /// ```
        seed(seed: u128) => Some(seed);
    }

    /// The same settings, for building another kind of filter.
    fn of_kind<G>(self) -> Builder<G> {
        Builder {
            expected_items: self.expected_items,
            false_positive_rate: self.false_positive_rate,
            bits: self.bits,
            hashes: self.hashes,
            layout: self.layout,
            seed: self.seed,
            kind: PhantomData,
        }
    }

    /// Checks the settings and works out the size.
    pub(crate) fn resolve(self) -> Result<Parts, BuildError> {
        let layout = self.layout;
        let (bits, hashes) = match self.bits {
            Some(_) if self.false_positive_rate.is_some() => {
                return Err(BuildError::ConflictingSize);
            }
            Some(m) => {
                let k = match (self.hashes, self.expected_items) {
                    (Some(k), _) => k,
                    (None, Some(n)) => {
                        sizing::check_items(n)?;
                        params::optimal_hashes(layout, sizing::round_bits(layout, m)?, n)
                    }
                    // The layout fixes k: nothing to derive.
                    (None, None) if layout == Layout::SplitBlock => SPLIT_HASHES,
                    (None, None) => return Err(BuildError::MissingHashes),
                };
                (m, k)
            }
            None => {
                let (n, p) = sizing::items_and_rate(self.expected_items, self.false_positive_rate)?
                    .ok_or(BuildError::MissingSize)?;
                let best = params::for_layout(layout, n, p)?;
                (best.bits, self.hashes.unwrap_or(best.hashes))
            }
        };
        let bits = sizing::round_bits(layout, bits)?;
        sizing::check_hashes(layout, hashes)?;
        Ok(Parts {
            layout,
            slots: bits,
            hashes,
            hasher: sizing::hasher(self.seed)?,
            capacity: self.expected_items,
            target_fpr: self.false_positive_rate,
        })
    }
}

impl Builder<BloomFilter> {
    /// Builds the plain filter, or says which parameter to change.
    ///
    /// ```
    /// let f = bloom_core::BloomFilter::builder()
    ///     .expected_items(1_000)
    ///     .false_positive_rate(0.01)
    ///     .build()?;
    /// f.insert("a");
    /// assert!(f.contains("a"));
    /// assert!(bloom_core::BloomFilter::builder().build().is_err()); // no size given
    /// # Ok::<(), bloom_core::BuildError>(())
    /// ```
    pub fn build(self) -> Result<BloomFilter, BuildError> {
        Ok(BloomFilter::from_parts(self.resolve()?, None))
    }

    /// Builds a [`CountingBloomFilter`] with these settings instead: the same slots as
    /// [`build`](Self::build)'s filter, each a 4-bit counter (so 4× the memory). For code
    /// that keeps one configured builder and builds either kind from it; otherwise start
    /// from [`CountingBloomFilter::builder`].
    ///
    /// ```
    /// let sized = bloom_core::BloomFilter::builder()
    ///     .expected_items(1_000)
    ///     .false_positive_rate(0.01)
    ///     .seed(7);
    /// let plain = sized.clone().build()?;
    /// let counting = sized.build_counting()?;
    /// assert_eq!(plain.num_bits(), counting.num_slots());
    /// # Ok::<(), bloom_core::BuildError>(())
    /// ```
    pub fn build_counting(self) -> Result<CountingBloomFilter, BuildError> {
        self.of_kind::<CountingBloomFilter>().build()
    }
}

impl Builder<CountingBloomFilter> {
    /// Builds the counting filter, or says which parameter to change.
    ///
    /// ```
    /// let f = bloom_core::CountingBloomFilter::builder()
    ///     .expected_items(1_000)
    ///     .false_positive_rate(0.01)
    ///     .build()?;
    /// f.insert("a");
    /// assert!(f.remove("a"));
    /// # Ok::<(), bloom_core::BuildError>(())
    /// ```
    pub fn build(self) -> Result<CountingBloomFilter, BuildError> {
        Ok(CountingBloomFilter::from_parts(self.resolve()?, None))
    }
}

/// A plain or counting filter's settings, checked and sized: what a builder resolves to and
/// what a file's header records. Both kinds assemble themselves from it (`from_parts`).
#[derive(Clone)]
pub(crate) struct Parts {
    pub(crate) layout: Layout,
    pub(crate) slots: u64,
    pub(crate) hashes: u32,
    pub(crate) hasher: KeyHasher,
    pub(crate) capacity: Option<u64>,
    pub(crate) target_fpr: Option<f64>,
}
