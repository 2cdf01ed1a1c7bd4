//! [`CacheStats`] and the counters behind it, mirrored to the `metrics` facade (the
//! `bloom_cache_*` series of [`crate::stats`]).

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use crate::SharedFilter;
#[cfg(feature = "metrics")]
use crate::stats::names;

/// A snapshot of a guarded cache's counters since it was built.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
#[non_exhaustive]
pub struct CacheStats {
    /// Lookups the Bloom filter answered "definitely absent": cache and loader untouched.
    pub filter_rejections: u64,
    /// Lookups answered from the cache with a value.
    pub hits: u64,
    /// Lookups answered from the negative cache (the key was recently found absent).
    pub negative_hits: u64,
    /// Loader runs.
    pub loads: u64,
    /// Loader runs that failed (error, timeout or panic).
    pub load_errors: u64,
    /// Lookups that waited for another caller's load instead of running their own.
    pub coalesced_waiters: u64,
    /// Lookups the filter let through for keys the loader then did not find (filter false
    /// positives, and keys deleted since the filter was built): negative-cache hits plus
    /// lookups answered `None` by a load.
    pub false_positives: u64,
    /// The live measured false-positive rate of the cache's filter: of the lookups for keys
    /// that do not exist, the fraction the filter failed to stop. Counted over every rejection
    /// of that filter, including those of a [`BloomGuard`](crate::BloomGuard) in front of the
    /// cache, which stops most absent keys before the cache sees them:
    /// [`FilterStats::measured_fpr`](crate::stats::FilterStats::measured_fpr), the same figure. With
    /// no guard (and no other cache) on the filter it is `false_positives / (false_positives +
    /// filter_rejections)`. 0 before any such lookup.
    pub measured_fpr: f64,
}

crate::stats::series! {
    /// The counters behind [`CacheStats`]. They hold no configuration: each event is passed the
    /// cache's name, which labels the series, and the filter the cache is guarded by, where
    /// rejections and false positives are counted too (see [`CacheStats::measured_fpr`]).
    pub(crate) struct CacheCounters {
        filter_rejections: AtomicU64,
        false_positives: AtomicU64,
    }
    with CacheMetrics labelled "cache" {
        events {
            /// Answered from the cache with a value.
            fn hit => hits: counter(names::CACHE_HITS);
            /// Answered from the negative cache.
            fn negative_hit => negative_hits: counter(names::CACHE_NEGATIVE_HITS);
            /// A loader run begins.
            fn load => loads: counter(names::CACHE_LOADS);
            /// A loader run failed, timed out or panicked.
            fn load_error => load_errors: counter(names::CACHE_LOAD_ERRORS);
            /// A lookup waits for another lookup's load.
            fn coalesced_waiter => coalesced_waiters: counter(names::CACHE_COALESCED_WAITERS);
        }
        series {
            filter_rejections: counter(names::CACHE_FILTER_REJECTIONS),
            false_positives: counter(names::CACHE_FALSE_POSITIVES),
            load_duration: histogram(names::CACHE_LOAD_DURATION),
        }
    }
}

// Without `metrics` the cache's name labels nothing.
#[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
impl CacheCounters {
    /// The filter answered "definitely absent": counted by the filter too, where a guard's
    /// rejections are.
    pub(crate) fn filter_rejection<K>(&self, cache: &str, filter: &SharedFilter<K>) {
        self.filter_rejections.fetch_add(1, Relaxed);
        #[cfg(feature = "metrics")]
        self.metrics(cache).filter_rejections.increment(1);
        filter.count_rejection();
    }

    /// The filter let through a key the loader did not find: counted by the filter too.
    pub(crate) fn false_positive<K>(&self, cache: &str, filter: &SharedFilter<K>) {
        self.false_positives.fetch_add(1, Relaxed);
        #[cfg(feature = "metrics")]
        self.metrics(cache).false_positives.increment(1);
        filter.count_false_positive();
    }

    /// A loader run finished (or timed out) after `took`.
    pub(crate) fn load_took(&self, cache: &str, took: Duration) {
        #[cfg(feature = "metrics")]
        self.metrics(cache).load_duration.record(took);
    }

    /// The stats of a cache guarded by `filter`.
    pub(crate) fn snapshot<K>(&self, filter: &SharedFilter<K>) -> CacheStats {
        CacheStats {
            filter_rejections: self.filter_rejections.load(Relaxed),
            hits: self.hits.load(Relaxed),
            negative_hits: self.negative_hits.load(Relaxed),
            loads: self.loads.load(Relaxed),
            load_errors: self.load_errors.load(Relaxed),
            coalesced_waiters: self.coalesced_waiters.load(Relaxed),
            false_positives: self.false_positives.load(Relaxed),
            measured_fpr: filter.measured_fpr().unwrap_or(0.0),
        }
    }
}
