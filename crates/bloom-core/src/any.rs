//! [`AnyFilter`]: one of the four filters, for code that serves whichever the user chose
//! (a shared handle, a snapshot on disk) and reads back whichever a file holds (that
//! reading, by the header's kind byte, is in `format/any.rs`).

use std::fmt;

use crate::{
    BloomFilter, CountingBloomFilter, CuckooFilter, FilterFull, Key, Layout, ScalableBloomFilter,
    WindowedFilter,
};

/// Forwards to the filter inside whichever variant `$self` is: `$f` names it in `$body`.
/// Used by every method that does the same thing for each kind; the few whose arms differ
/// (`insert`, `remove`, `kind`, the `as_*` accessors, `layout`, `capacity`, `num_bits`, the
/// estimates) match by hand.
macro_rules! dispatch {
    ($self:expr, $f:ident => $body:expr) => {
        match $self {
            AnyFilter::Plain($f) => $body,
            AnyFilter::Counting($f) => $body,
            AnyFilter::Scalable($f) => $body,
            AnyFilter::Cuckoo($f) => $body,
            AnyFilter::Windowed($f) => $body,
        }
    };
}

/// A [`BloomFilter`], a [`CountingBloomFilter`], a [`ScalableBloomFilter`], a
/// [`CuckooFilter`] or a [`WindowedFilter`].
///
/// Every variant inserts and answers lookups with the same keyed hashing and the same
/// "never a false negative" contract; they differ in what else they can do (the measured
/// memory of each: `benches/README.md`):
///
/// | variant  | memory at p = 1 %                | can remove | needs the key count up front | merges (bit OR, Redis sharing) |
/// |----------|----------------------------------|------------|------------------------------|-------|
/// | plain    | ≈ 10 bits per key                | no         | yes                          | yes   |
/// | counting | 4× plain (a 4-bit counter a bit) | yes        | yes                          | no    |
/// | scalable | more than plain: each new stage is sized for a stricter rate, and the newest is partly empty | no | no: it adds stages | no |
/// | cuckoo   | ≈ 9.5 bits per key (fewer than plain below p ≈ 3 %) | yes | yes: a full one refuses inserts ([`try_insert`](Self::try_insert)) | no |
/// | windowed | `N + 1` plain filters of a period's keys each | no: keys fade out after the window | the keys per window | no |
///
/// [`read_from`](Self::read_from) reads a file of any kind.
///
/// ```
/// use bloom_core::{AnyFilter, ScalableBloomFilter};
///
/// let filter = AnyFilter::from(ScalableBloomFilter::new(1_000, 0.01)?);
/// filter.insert("alice");
/// let copy = AnyFilter::from_bytes(&filter.to_bytes())?;
/// assert!(copy.contains("alice"));
/// assert!(copy.as_scalable().is_some());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub enum AnyFilter {
    /// A fixed-size filter of bits.
    Plain(BloomFilter),
    /// A fixed-size filter of 4-bit counters: supports [`remove`](Self::remove).
    Counting(CountingBloomFilter),
    /// A list of plain filters that grows as keys arrive.
    Scalable(ScalableBloomFilter),
    /// Fingerprints in buckets: supports [`remove`](Self::remove), refuses inserts when full.
    Cuckoo(CuckooFilter),
    /// Keys seen within a window of time or of inserts.
    Windowed(WindowedFilter),
}

impl AnyFilter {
    /// Adds `key`. Returns `true` if the filter changed (the key was not maybe-present).
    ///
    /// ```
    /// use bloom_core::{AnyFilter, BloomFilter, CountingBloomFilter, ScalableBloomFilter};
    ///
    /// let f = AnyFilter::from(BloomFilter::new(1_000, 0.01)?);
    /// assert!(f.insert("a"));
    /// assert!(!f.insert("a")); // already (maybe) present
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// A cuckoo filter stores the key again (each insert is undone by one
    /// [`remove`](Self::remove)) and returns `true`; if it is full it stores nothing and
    /// returns `false`, which [`try_insert`](Self::try_insert) tells apart: call that
    /// wherever the filter may be a cuckoo filter.
    #[inline]
    pub fn insert<K: Key + ?Sized>(&self, key: &K) -> bool {
        self.try_insert(key).unwrap_or(false)
    }

    /// [`insert`](Self::insert), with a full cuckoo filter's refusal as an error; the Bloom
    /// kinds never fail.
    ///
    /// ```
    /// use bloom_core::{AnyFilter, CuckooFilter};
    ///
    /// let f = AnyFilter::from(CuckooFilter::builder().buckets(1).fingerprint_bits(8).build()?);
    /// for key in 0..4u64 {
    ///     assert_eq!(f.try_insert(&key), Ok(true));
    /// }
    /// assert!(f.try_insert(&4u64).is_err()); // full: nothing stored, nothing lost
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[inline]
    pub fn try_insert<K: Key + ?Sized>(&self, key: &K) -> Result<bool, FilterFull> {
        match self {
            Self::Plain(f) => Ok(f.insert(key)),
            Self::Counting(f) => Ok(f.insert(key)),
            Self::Scalable(f) => Ok(f.insert(key)),
            Self::Cuckoo(f) => f.insert(key).map(|()| true),
            Self::Windowed(f) => Ok(f.insert(key)),
        }
    }

    /// `false` means `key` was definitely never inserted.
    ///
    /// ```
    /// use bloom_core::{AnyFilter, BloomFilter, CountingBloomFilter, ScalableBloomFilter};
    ///
    /// let f = AnyFilter::from(ScalableBloomFilter::new(1_000, 0.01)?);
    /// f.insert("a");
    /// assert!(f.contains("a"));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[inline]
    pub fn contains<K: Key + ?Sized>(&self, key: &K) -> bool {
        dispatch!(self, f => f.contains(key))
    }

    /// Removes one insertion of `key` from a counting or cuckoo filter (see
    /// [`CountingBloomFilter::remove`], [`CuckooFilter::remove`]): `Some(true)` if removed,
    /// `Some(false)` if refused because `key` is definitely absent, `None` if this kind of
    /// filter cannot remove.
    ///
    /// ```
    /// use bloom_core::{AnyFilter, BloomFilter, CountingBloomFilter, ScalableBloomFilter};
    ///
    /// let counting = AnyFilter::from(CountingBloomFilter::new(1_000, 0.01)?);
    /// counting.insert("a");
    /// assert_eq!(counting.remove("a"), Some(true));
    /// assert_eq!(counting.remove("a"), Some(false)); // now definitely absent
    /// let plain = AnyFilter::from(BloomFilter::new(1_000, 0.01)?);
    /// assert_eq!(plain.remove("a"), None); // a plain filter cannot remove
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn remove<K: Key + ?Sized>(&self, key: &K) -> Option<bool> {
        // Not `dispatch!`: only a counting or a cuckoo filter can remove.
        match self {
            Self::Counting(f) => Some(f.remove(key)),
            Self::Cuckoo(f) => Some(f.remove(key)),
            Self::Plain(_) | Self::Scalable(_) | Self::Windowed(_) => None,
        }
    }

    /// Whether [`remove`](Self::remove) can take keys out: a counting or a cuckoo filter.
    ///
    /// ```
    /// use bloom_core::{AnyFilter, BloomFilter, CuckooFilter};
    ///
    /// assert!(AnyFilter::from(CuckooFilter::new(100, 0.01)?).can_remove());
    /// assert!(!AnyFilter::from(BloomFilter::new(100, 0.01)?).can_remove());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn can_remove(&self) -> bool {
        matches!(self, Self::Counting(_) | Self::Cuckoo(_))
    }

    /// "plain", "counting", "scalable", "cuckoo" or "windowed": for logs and metric labels.
    ///
    /// ```
    /// use bloom_core::{AnyFilter, BloomFilter, CountingBloomFilter, ScalableBloomFilter};
    ///
    /// assert_eq!(AnyFilter::from(BloomFilter::new(100, 0.01)?).kind(), "plain");
    /// assert_eq!(AnyFilter::from(CountingBloomFilter::new(100, 0.01)?).kind(), "counting");
    /// assert_eq!(AnyFilter::from(ScalableBloomFilter::new(100, 0.01)?).kind(), "scalable");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn kind(&self) -> &'static str {
        // Not `dispatch!`: a label per variant, not a forwarded call.
        match self {
            Self::Plain(_) => "plain",
            Self::Counting(_) => "counting",
            Self::Scalable(_) => "scalable",
            Self::Cuckoo(_) => "cuckoo",
            Self::Windowed(_) => "windowed",
        }
    }

    /// The plain filter, if this is one.
    ///
    /// ```
    /// use bloom_core::{AnyFilter, BloomFilter, CountingBloomFilter, ScalableBloomFilter};
    ///
    /// let f = AnyFilter::from(BloomFilter::new(100, 0.01)?);
    /// assert!(f.as_plain().is_some());
    /// assert!(f.as_counting().is_none());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn as_plain(&self) -> Option<&BloomFilter> {
        match self {
            Self::Plain(f) => Some(f),
            _ => None,
        }
    }

    /// The counting filter, if this is one.
    ///
    /// ```
    /// use bloom_core::{AnyFilter, BloomFilter, CountingBloomFilter, ScalableBloomFilter};
    ///
    /// let f = AnyFilter::from(CountingBloomFilter::new(100, 0.01)?);
    /// assert!(f.as_counting().is_some());
    /// assert!(f.as_plain().is_none());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn as_counting(&self) -> Option<&CountingBloomFilter> {
        match self {
            Self::Counting(f) => Some(f),
            _ => None,
        }
    }

    /// The scalable filter, if this is one.
    ///
    /// ```
    /// use bloom_core::{AnyFilter, BloomFilter, CountingBloomFilter, ScalableBloomFilter};
    ///
    /// let f = AnyFilter::from(ScalableBloomFilter::new(100, 0.01)?);
    /// assert_eq!(f.as_scalable().map(|s| s.num_stages()), Some(1));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn as_scalable(&self) -> Option<&ScalableBloomFilter> {
        match self {
            Self::Scalable(f) => Some(f),
            _ => None,
        }
    }

    /// The cuckoo filter, if this is one.
    ///
    /// ```
    /// use bloom_core::{AnyFilter, CuckooFilter};
    ///
    /// let f = AnyFilter::from(CuckooFilter::new(100, 0.01)?);
    /// assert_eq!(f.as_cuckoo().map(|c| c.fingerprint_bits()), Some(10));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn as_cuckoo(&self) -> Option<&CuckooFilter> {
        match self {
            Self::Cuckoo(f) => Some(f),
            _ => None,
        }
    }

    /// The windowed filter, if this is one.
    ///
    /// ```
    /// use bloom_core::AnyFilter;
    /// use bloom_core::windowed::{Window, WindowedFilter};
    ///
    /// let f = AnyFilter::from(WindowedFilter::builder(Window::Count(10)).expected_items(10).false_positive_rate(0.01).build()?);
    /// assert_eq!(f.as_windowed().map(|w| w.window()), Some(Window::Count(10)));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn as_windowed(&self) -> Option<&WindowedFilter> {
        match self {
            Self::Windowed(f) => Some(f),
            _ => None,
        }
    }

    /// The Bloom layout (of every stage, for a scalable filter); `None` for a cuckoo filter,
    /// which has none.
    ///
    /// ```
    /// use bloom_core::{AnyFilter, BloomFilter, Layout};
    ///
    /// let f = AnyFilter::from(
    ///     BloomFilter::builder()
    ///         .expected_items(100)
    ///         .false_positive_rate(0.01)
    ///         .layout(Layout::Classic)
    ///         .build()?,
    /// );
    /// assert_eq!(f.layout(), Some(Layout::Classic));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn layout(&self) -> Option<Layout> {
        match self {
            Self::Plain(f) => Some(f.layout()),
            Self::Counting(f) => Some(f.layout()),
            Self::Scalable(f) => Some(f.layout()),
            Self::Windowed(f) => Some(f.layout()),
            Self::Cuckoo(_) => None,
        }
    }

    /// The secret hash key. Never log it.
    ///
    /// ```
    /// use bloom_core::{AnyFilter, ScalableBloomFilter};
    ///
    /// let f = AnyFilter::from(ScalableBloomFilter::builder(100, 0.01).seed(7).build()?);
    /// assert_eq!(f.seed(), 7);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn seed(&self) -> u128 {
        dispatch!(self, f => f.seed())
    }

    /// The number of keys a fixed-size filter was sized for; `None` if it was sized by bits,
    /// and always `None` for a scalable filter, which has no limit.
    ///
    /// ```
    /// use bloom_core::{AnyFilter, BloomFilter, CountingBloomFilter, ScalableBloomFilter};
    ///
    /// assert_eq!(AnyFilter::from(BloomFilter::new(100, 0.01)?).capacity(), Some(100));
    /// assert_eq!(AnyFilter::from(ScalableBloomFilter::new(100, 0.01)?).capacity(), None);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn capacity(&self) -> Option<u64> {
        // Not `dispatch!`: a scalable filter has no capacity (it adds stages).
        match self {
            Self::Plain(f) => f.capacity(),
            Self::Counting(f) => f.capacity(),
            Self::Cuckoo(f) => f.capacity(),
            Self::Windowed(f) => Some(f.expected_items()),
            Self::Scalable(_) => None,
        }
    }

    /// The false-positive rate it was sized for (the compound bound for a scalable filter);
    /// `None` for a plain or counting filter built from an explicit size instead of a rate.
    ///
    /// ```
    /// use bloom_core::{AnyFilter, BloomFilter, CountingBloomFilter, ScalableBloomFilter};
    ///
    /// assert_eq!(AnyFilter::from(CountingBloomFilter::new(100, 0.01)?).target_fpr(), Some(0.01));
    /// assert_eq!(AnyFilter::from(ScalableBloomFilter::new(100, 0.01)?).target_fpr(), Some(0.01));
    /// let sized = AnyFilter::from(BloomFilter::builder().bits(1_024).hashes(3).build()?);
    /// assert_eq!(sized.target_fpr(), None); // built from a size: no target
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn target_fpr(&self) -> Option<f64> {
        match self {
            Self::Plain(f) => f.target_fpr(),
            Self::Counting(f) => f.target_fpr(),
            Self::Scalable(f) => f.target_fpr(),
            Self::Cuckoo(f) => f.target_fpr(),
            Self::Windowed(f) => Some(f.target_fpr()),
        }
    }

    /// Bits (slots, for a counting filter; summed over stages, for a scalable one; the
    /// buckets' bits, `m·(4f − 4)`, for a cuckoo filter).
    ///
    /// ```
    /// use bloom_core::{AnyFilter, BloomFilter, CountingBloomFilter, ScalableBloomFilter};
    ///
    /// let f = AnyFilter::from(CountingBloomFilter::builder().bits(1_024).hashes(3).build()?);
    /// assert_eq!(f.num_bits(), 1_024); // slots, for a counting filter
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn num_bits(&self) -> u64 {
        // Not `dispatch!`: a counting filter calls its bits `num_slots`.
        match self {
            Self::Plain(f) => f.num_bits(),
            Self::Counting(f) => f.num_slots(),
            Self::Scalable(f) => f.num_bits(),
            Self::Cuckoo(f) => f.num_buckets() * u64::from(4 * f.fingerprint_bits() - 4),
            Self::Windowed(f) => f.num_bits(),
        }
    }

    /// Memory held, in bytes.
    ///
    /// ```
    /// use bloom_core::{AnyFilter, BloomFilter, CountingBloomFilter, ScalableBloomFilter};
    ///
    /// let plain = AnyFilter::from(BloomFilter::builder().bits(1_024).hashes(3).build()?);
    /// let counting = AnyFilter::from(CountingBloomFilter::builder().bits(1_024).hashes(3).build()?);
    /// assert_eq!(plain.size_in_bytes(), 128);
    /// assert_eq!(counting.size_in_bytes(), 4 * 128);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn size_in_bytes(&self) -> usize {
        dispatch!(self, f => f.size_in_bytes())
    }

    /// The fraction of bits set (non-zero counters; over all stages; slots used, for a
    /// cuckoo filter). One scan (none for a cuckoo filter).
    ///
    /// ```
    /// use bloom_core::{AnyFilter, BloomFilter, CountingBloomFilter, ScalableBloomFilter};
    ///
    /// let f = AnyFilter::from(BloomFilter::new(1_000, 0.01)?);
    /// assert_eq!(f.fill_ratio(), 0.0);
    /// f.insert("a");
    /// assert!(f.fill_ratio() > 0.0);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn fill_ratio(&self) -> f64 {
        // Not `dispatch!`: a scalable filter has no `fill_ratio`; compute it from its stages.
        match self {
            Self::Plain(f) => f.fill_ratio(),
            Self::Counting(f) => f.fill_ratio(),
            Self::Scalable(f) => f.count_ones() as f64 / f.num_bits() as f64,
            Self::Cuckoo(f) => f.load_factor(),
            Self::Windowed(f) => f.fill_ratio(),
        }
    }

    /// Distinct keys, estimated from the bits (one scan); a cuckoo filter's exact count of
    /// fingerprints (no scan).
    ///
    /// ```
    /// use bloom_core::{AnyFilter, BloomFilter, CountingBloomFilter, ScalableBloomFilter};
    ///
    /// let f = AnyFilter::from(ScalableBloomFilter::new(1_000, 0.01)?);
    /// for i in 0..5_000u64 {
    ///     f.insert(&i);
    /// }
    /// assert!((f.estimated_items() - 5_000.0).abs() < 500.0);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn estimated_items(&self) -> f64 {
        match self {
            Self::Plain(f) => f.estimated_items(),
            Self::Counting(f) => f.estimated_items(),
            Self::Scalable(f) => f.estimated_items(),
            Self::Cuckoo(f) => f.len() as f64,
            Self::Windowed(f) => f.estimated_items(),
        }
    }

    /// The false-positive rate the bits imply now (one scan).
    ///
    /// ```
    /// use bloom_core::{AnyFilter, BloomFilter, CountingBloomFilter, ScalableBloomFilter};
    ///
    /// let f = AnyFilter::from(BloomFilter::new(1_000, 0.01)?);
    /// assert_eq!(f.current_fpr(), 0.0);
    /// for i in 0..1_000u64 {
    ///     f.insert(&i);
    /// }
    /// assert!(f.current_fpr() < 0.02);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn current_fpr(&self) -> f64 {
        dispatch!(self, f => f.current_fpr())
    }
}

/// `From<filter>` for each variant: wrapping a filter in `AnyFilter` is its variant.
macro_rules! from_filters {
    ($($variant:ident($filter:ty)),* $(,)?) => {
        $(
            impl From<$filter> for AnyFilter {
                fn from(filter: $filter) -> Self {
                    Self::$variant(filter)
                }
            }
        )*
    };
}

from_filters!(
    Plain(BloomFilter),
    Counting(CountingBloomFilter),
    Scalable(ScalableBloomFilter),
    Cuckoo(CuckooFilter),
    Windowed(WindowedFilter),
);

impl fmt::Debug for AnyFilter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        dispatch!(self, filter => fmt::Debug::fmt(filter, f))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::DecodeError;
    use crate::format::KIND_OFFSET;

    fn each_kind() -> [AnyFilter; 5] {
        let (n, p, seed) = (1_000, 0.01, 3);
        let bloom = BloomFilter::builder()
            .expected_items(n)
            .false_positive_rate(p)
            .seed(seed);
        let cuckoo = CuckooFilter::builder()
            .expected_items(n)
            .false_positive_rate(p)
            .seed(seed);
        let windowed = WindowedFilter::builder(crate::windowed::Window::Count(5 * n))
            .expected_items(5 * n)
            .false_positive_rate(p)
            .seed(seed);
        [
            bloom.clone().build().unwrap().into(),
            bloom.build_counting().unwrap().into(),
            ScalableBloomFilter::builder(100, p)
                .seed(seed)
                .build()
                .unwrap()
                .into(),
            cuckoo.build().unwrap().into(),
            windowed.build().unwrap().into(),
        ]
    }

    #[test]
    fn every_kind_round_trips_through_bytes_and_streams() {
        for filter in each_kind() {
            for key in 0..1_000u64 {
                filter.insert(&key);
            }
            let bytes = filter.to_bytes();
            let streamed = AnyFilter::read_from(&mut &bytes[..]).unwrap();
            let decoded = AnyFilter::from_bytes(&bytes).unwrap();
            for copy in [&streamed, &decoded] {
                assert_eq!(copy.kind(), filter.kind());
                assert_eq!(copy.to_bytes(), bytes, "{}", filter.kind());
                assert!((0..1_000u64).all(|key| copy.contains(&key)));
            }
        }
    }

    #[test]
    fn damaged_input_is_an_error_of_the_kind_it_claims() {
        for filter in each_kind() {
            let bytes = filter.to_bytes();
            for len in [0, 5, KIND_OFFSET, KIND_OFFSET + 1, 64, bytes.len() - 1] {
                assert!(AnyFilter::from_bytes(&bytes[..len]).is_err());
                assert!(AnyFilter::read_from(&mut &bytes[..len]).is_err());
            }
            let mut flipped = bytes.clone();
            flipped[bytes.len() / 2] ^= 0x10;
            assert!(AnyFilter::from_bytes(&flipped).is_err());
        }
        let mut unknown = each_kind()[0].to_bytes();
        unknown[KIND_OFFSET] = 9;
        assert!(matches!(
            AnyFilter::read_from(&mut &unknown[..]),
            Err(DecodeError::UnsupportedKind { found: 9 })
        ));
    }

    #[test]
    fn only_a_counting_or_cuckoo_filter_removes() {
        let [plain, counting, scalable, cuckoo, windowed] = each_kind();
        assert_eq!(windowed.remove("k"), None);
        for filter in [&plain, &counting, &scalable, &cuckoo] {
            filter.insert("k");
        }
        assert_eq!(cuckoo.remove("k"), Some(true));
        assert!(!cuckoo.contains("k"));
        assert_eq!(cuckoo.remove("k"), Some(false));
        assert_eq!(plain.remove("k"), None);
        assert_eq!(scalable.remove("k"), None);
        assert_eq!(counting.remove("k"), Some(true));
        assert!(!counting.contains("k"));
        assert_eq!(counting.remove("k"), Some(false));
    }
}
