//! Counters of a [`GuardedCache`](super::GuardedCache), readable with `stats()` and mirrored
//! to the `metrics` facade.

use std::borrow::Cow;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use crate::SharedFilter;
use crate::key::AnyKey;
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

/// The counters behind [`CacheStats`], mirrored to the `metrics` facade.
pub(crate) struct Counters {
    #[cfg_attr(not(feature = "metrics"), allow(dead_code))]
    name: Cow<'static, str>,
    /// The filter the cache is guarded by: its rejections and false positives are counted
    /// there too, where a guard's rejections meet them (see [`CacheStats::measured_fpr`]).
    filter: SharedFilter<AnyKey>,
    filter_rejections: AtomicU64,
    hits: AtomicU64,
    negative_hits: AtomicU64,
    loads: AtomicU64,
    load_errors: AtomicU64,
    coalesced_waiters: AtomicU64,
    false_positives: AtomicU64,
    #[cfg(feature = "metrics")]
    handles: std::sync::OnceLock<CacheMetrics>,
}

#[cfg(feature = "metrics")]
struct CacheMetrics {
    filter_rejections: metrics::Counter,
    hits: metrics::Counter,
    negative_hits: metrics::Counter,
    loads: metrics::Counter,
    load_errors: metrics::Counter,
    coalesced_waiters: metrics::Counter,
    false_positives: metrics::Counter,
    load_duration: metrics::Histogram,
}

macro_rules! event {
    ($name:ident $(, then $after:ident)?) => {
        pub(crate) fn $name(&self) {
            self.$name.fetch_add(1, Relaxed);
            #[cfg(feature = "metrics")]
            self.metrics().$name.increment(1);
            $(self.$after();)?
        }
    };
}

impl Counters {
    pub(crate) fn new(name: Cow<'static, str>, filter: SharedFilter<AnyKey>) -> Self {
        filter.reports_false_positives();
        Self {
            name,
            filter,
            filter_rejections: AtomicU64::new(0),
            hits: AtomicU64::new(0),
            negative_hits: AtomicU64::new(0),
            loads: AtomicU64::new(0),
            load_errors: AtomicU64::new(0),
            coalesced_waiters: AtomicU64::new(0),
            false_positives: AtomicU64::new(0),
            #[cfg(feature = "metrics")]
            handles: std::sync::OnceLock::new(),
        }
    }

    /// Registering a metric looks it up in the recorder: done once, not per lookup.
    #[cfg(feature = "metrics")]
    fn metrics(&self) -> &CacheMetrics {
        self.handles.get_or_init(|| {
            crate::stats::describe_once();
            let cache = self.name.clone().into_owned();
            let counter = |name: &'static str| metrics::counter!(name, "cache" => cache.clone());
            CacheMetrics {
                filter_rejections: counter(names::CACHE_FILTER_REJECTIONS),
                hits: counter(names::CACHE_HITS),
                negative_hits: counter(names::CACHE_NEGATIVE_HITS),
                loads: counter(names::CACHE_LOADS),
                load_errors: counter(names::CACHE_LOAD_ERRORS),
                coalesced_waiters: counter(names::CACHE_COALESCED_WAITERS),
                false_positives: counter(names::CACHE_FALSE_POSITIVES),
                load_duration: metrics::histogram!(names::CACHE_LOAD_DURATION, "cache" => cache.clone()),
            }
        })
    }

    event!(filter_rejections, then count_rejection);
    event!(hits);
    event!(negative_hits);
    event!(loads);
    event!(load_errors);
    event!(coalesced_waiters);
    event!(false_positives, then count_false_positive);

    /// Counted by the filter too, where a guard's rejections are.
    fn count_rejection(&self) {
        self.filter.count_rejection();
    }

    fn count_false_positive(&self) {
        self.filter.count_false_positive();
    }

    /// A loader run finished (or timed out) after `took`.
    pub(crate) fn load_took(&self, took: Duration) {
        #[cfg(feature = "metrics")]
        self.metrics().load_duration.record(took);
        #[cfg(not(feature = "metrics"))]
        let _ = took;
    }

    pub(crate) fn snapshot(&self) -> CacheStats {
        CacheStats {
            filter_rejections: self.filter_rejections.load(Relaxed),
            hits: self.hits.load(Relaxed),
            negative_hits: self.negative_hits.load(Relaxed),
            loads: self.loads.load(Relaxed),
            load_errors: self.load_errors.load(Relaxed),
            coalesced_waiters: self.coalesced_waiters.load(Relaxed),
            false_positives: self.false_positives.load(Relaxed),
            measured_fpr: self.filter.measured_fpr().unwrap_or(0.0),
        }
    }
}
