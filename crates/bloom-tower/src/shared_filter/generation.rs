//! [`Generation`]: one filter and what is known about its fill; [`CurrentFilter`], the one
//! serving when asked.

use std::fmt;
use std::ops::Deref;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use bloom_core::{AnyFilter, BloomFilter, Key};

#[cfg(doc)]
use super::{Inserted, SharedFilter};
use crate::key_source::Watermark;

/// One filter and what is known about its fill.
pub(super) struct Generation {
    pub(super) filter: AnyFilter,
    /// Its place in publication order (see [`Inserted`]).
    pub(super) number: u64,
    /// Distinct keys: inserts that set at least one new bit, and, once bits were merged in
    /// from elsewhere (keys that arrive as bits set no counter), the estimate from the set
    /// bits (see [`items`](Self::items)).
    pub(super) items: AtomicU64,
    /// The filter's [`merge_count`](BloomFilter::merge_count) when `items` last counted its
    /// bits.
    counted_merges: AtomicU64,
    /// When `items` last counted the bits, in ms since `created`; for
    /// [`items_every`](Self::items_every).
    counted_at_ms: AtomicU64,
    created: Instant,
    /// Set once this generation's saturation has been reported.
    pub(super) saturation_reported: AtomicBool,
    /// Set once a cuckoo filter refused an insert for want of room: it misses a key, so a
    /// "definitely absent" from it is let through until a rebuild replaces it (see
    /// [`SharedFilter::contains`]; `shared_filter/tests` `a_full_cuckoo_filter_lets_every_key_through_until_rebuilt`).
    pub(super) full: AtomicBool,
    /// Loaded from a snapshot that could not be caught up with its source: it may miss keys,
    /// so a "definitely absent" from it is let through (see [`SharedFilter::contains`]).
    pub(super) verifying: bool,
    /// The source position up to which every key is in this filter, if the source can say:
    /// what a snapshot of it records. Set by the rebuild that filled it, moved by catch-ups.
    pub(super) watermark: Mutex<Option<Watermark>>,
}

impl Generation {
    pub(super) fn empty(filter: AnyFilter, number: u64) -> Self {
        Self {
            counted_merges: AtomicU64::new(merges(&filter)),
            filter,
            number,
            items: AtomicU64::new(0),
            counted_at_ms: AtomicU64::new(0),
            created: Instant::now(),
            saturation_reported: AtomicBool::new(false),
            full: AtomicBool::new(false),
            verifying: false,
            watermark: Mutex::new(None),
        }
    }

    pub(super) fn watermark(&self) -> Option<Watermark> {
        self.watermark
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    pub(super) fn set_watermark(&self, watermark: Option<Watermark>) {
        *self
            .watermark
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = watermark;
    }

    /// A filter read from a snapshot: counted, and verifying or complete up to `watermark`.
    pub(super) fn loaded(filter: AnyFilter, verifying: bool, watermark: Option<Watermark>) -> Self {
        let mut generation = Self::counted(filter);
        generation.verifying = verifying;
        generation.set_watermark(watermark);
        generation
    }

    /// A filter that may already hold keys: estimate how many from its bits (one scan).
    pub(super) fn counted(filter: AnyFilter) -> Self {
        let generation = Self::empty(filter, 0);
        generation.items.store(generation.bit_estimate(), Relaxed);
        generation
    }

    /// The distinct keys its bits hold (one scan; the layout's estimator,
    /// [`AnyFilter::estimated_items`]). An all-ones filter's estimate is infinite: it counts
    /// as one key per bit (no filter holds more distinct keys than bits), which also leaves
    /// room for the counter to grow.
    pub(super) fn bit_estimate(&self) -> u64 {
        let estimate = self.filter.estimated_items();
        estimate.min(self.filter.num_bits() as f64).round() as u64
    }

    /// Distinct keys. While every key went in through [`insert`](Self::insert) that is the
    /// counter (one load); once bits were merged in since it was last counted (a replication
    /// layer's `union_words`, a merged snapshot) the bits are counted again (one scan) and the
    /// counter raised to their estimate, never lowered. `true` with a new count.
    ///
    /// Rule: `approx_items` and the `bloom_filter_keys` gauge report keys that arrived as bits
    /// (bloom-redis `tests/approx_items.rs`,
    /// `keys_inserted_on_one_instance_are_counted_on_the_other`).
    pub(super) fn items(&self) -> (u64, bool) {
        let merges = merges(&self.filter);
        if merges == self.counted_merges.load(Relaxed) {
            return (self.items.load(Relaxed), false);
        }
        (self.count_bits(merges), true)
    }

    /// [`items`](Self::items), but counting the bits at most once per `every`: the new count
    /// if it counted them now.
    pub(super) fn items_every(&self, every: Duration) -> Option<u64> {
        if merges(&self.filter) == self.counted_merges.load(Relaxed) {
            return None;
        }
        let now = self.created.elapsed().as_millis() as u64 + 1; // 0 is "never"
        let last = self.counted_at_ms.load(Relaxed);
        let due = last == 0 || now >= last + every.as_millis() as u64;
        if !due
            || self
                .counted_at_ms
                .compare_exchange(last, now, Relaxed, Relaxed)
                .is_err()
        {
            return None;
        }
        let (items, counted) = self.items();
        counted.then_some(items)
    }

    #[cold]
    fn count_bits(&self, merges: u64) -> u64 {
        // Recorded before the scan: bits merged during it are counted by the next one.
        self.counted_merges.store(merges, Relaxed);
        let estimate = self.bit_estimate();
        self.items.fetch_max(estimate, Relaxed).max(estimate)
    }

    /// Inserts `key`: [`Insert::New`] with the new distinct-key count if it set a new bit (or
    /// stored a fingerprint), [`Insert::Refused`] if a full cuckoo filter had no room (the
    /// generation is then [`full`](Self::full) for good).
    #[inline]
    pub(super) fn insert<K: Key + ?Sized>(&self, key: &K) -> Insert {
        match self.filter.try_insert(key) {
            Ok(true) => Insert::New(self.items.fetch_add(1, Relaxed) + 1),
            Ok(false) => Insert::Known,
            Err(_) => {
                self.full.store(true, Relaxed);
                Insert::Refused
            }
        }
    }

    /// Whether a key was refused for want of room (a cuckoo filter only).
    #[inline]
    pub(super) fn is_full(&self) -> bool {
        self.full.load(Relaxed)
    }

    pub(super) fn is_over_capacity(&self, items: u64) -> bool {
        self.filter
            .capacity()
            .is_some_and(|capacity| items > capacity)
    }
}

/// What [`Generation::insert`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Insert {
    /// The key is new to the filter, which now counts this many keys.
    New(u64),
    /// The filter answered "maybe" for the key already; nothing changed.
    Known,
    /// A full cuckoo filter had no room; nothing changed, and the generation is now full.
    Refused,
}

/// How often bits were merged into `filter` (see [`BloomFilter::merge_count`]); 0 for the
/// kinds that cannot merge.
fn merges(filter: &AnyFilter) -> u64 {
    filter.as_plain().map_or(0, BloomFilter::merge_count)
}

/// The filter that was serving when [`SharedFilter::current`](super::SharedFilter::current) was called.
pub struct CurrentFilter(pub(super) Arc<Generation>);

impl Deref for CurrentFilter {
    type Target = AnyFilter;

    fn deref(&self) -> &AnyFilter {
        &self.0.filter
    }
}

impl fmt::Debug for CurrentFilter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0.filter, f)
    }
}

#[cfg(test)]
mod tests {
    use crate::SharedFilter;
    use crate::shared_filter::shared::tests::seeded;

    #[test]
    fn a_prefilled_filter_is_counted_from_its_bits() {
        let prefilled = seeded(10_000);
        for key in 0..1_000u64 {
            prefilled.insert(&key);
        }
        let stats = SharedFilter::<u64>::new(prefilled).stats();
        assert!((950..1_050).contains(&stats.approx_items), "{stats:?}");
    }

    /// Keys that arrive as bits (a replication layer's `union_words`) set no counter: the
    /// count is estimated from the bits once they were merged in.
    #[test]
    fn keys_merged_in_as_bits_are_counted_from_them() {
        let elsewhere = seeded(10_000);
        for key in 0..1_000u64 {
            elsewhere.insert(&key);
        }
        let filter = SharedFilter::<u64>::new(seeded(10_000));
        assert_eq!(filter.stats().approx_items, 0);
        let words: Vec<u64> = elsewhere.words().collect();
        assert!(filter.current().as_plain().unwrap().union_words(0, &words));
        let stats = filter.stats();
        assert!((950..1_050).contains(&stats.approx_items), "{stats:?}");
    }
}
