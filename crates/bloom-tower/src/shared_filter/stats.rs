//! [`FilterStats`] and the counters behind it, mirrored to the `metrics` facade (the
//! `bloom_filter_*` series of [`crate::stats`]).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use super::Generation;
#[cfg(feature = "metrics")]
use crate::stats::{describe_once, names};

/// Adds `$n` to the total `$total` and, with `metrics`, to the counter `names::$metric`
/// labelled with the filter's name.
macro_rules! count {
    ($total:expr, $n:expr, $metric:ident, $filter:expr) => {{
        let n = $n;
        $total.fetch_add(n, Relaxed);
        #[cfg(feature = "metrics")]
        crate::stats::counter(names::$metric, "filter", $filter).increment(n);
    }};
}

/// A [`SharedFilter`](crate::SharedFilter)'s state and history. Cheap: no scan of the bits
/// (for the exact fill, see [`SharedFilter::check_saturation`](crate::SharedFilter::check_saturation)).
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct FilterStats {
    /// The name used as the `filter` metric label.
    pub name: String,
    /// The serving filter's kind: `"plain"`, `"counting"` or `"scalable"`.
    pub kind: &'static str,
    /// The number of keys the serving filter was sized for, if it was sized by count (never
    /// for a scalable filter, which grows).
    pub capacity: Option<u64>,
    /// The serving filter's size in bits (counters for a counting filter; all stages for a
    /// scalable one).
    pub num_bits: u64,
    /// Distinct keys in the serving filter, counted as they go in (an insert that finds all
    /// its bits set already is not counted, so this slightly undercounts). Keys that arrive
    /// as bits (merged from another instance's filter, as `bloom-redis` does, or from a
    /// snapshot) set no counter: once bits were merged in, this is the estimate from the set
    /// bits (`BloomFilter::estimated_items`, `-(m/k)·ln(1 - X/m)` per block), never lowered.
    pub approx_items: u64,
    /// Calls to [`SharedFilter::insert`](crate::SharedFilter::insert).
    pub inserts: u64,
    /// Keys removed by [`SharedFilter::remove`](crate::SharedFilter::remove) (counting filters).
    pub removes: u64,
    /// Rebuilds that completed and swapped in a new filter.
    pub rebuilds: u64,
    /// Rebuilds that failed (source error, bad size); the old filter kept serving.
    pub failed_rebuilds: u64,
    /// Rebuilds whose future was dropped midway; the old filter kept serving.
    pub cancelled_rebuilds: u64,
    /// Keys read by the last completed rebuild, and how long it took.
    pub last_rebuild: Option<(u64, Duration)>,
    /// Saturation warnings so far (at most one per filter generation).
    pub saturation_warnings: u64,
    /// Inserts a full [`CuckooFilter`](bloom_core::CuckooFilter) had no room for (each also
    /// raises [`saturation_warnings`](Self::saturation_warnings) once per filter).
    pub refused_inserts: u64,
    /// The serving filter refused an insert (a full cuckoo filter): it misses that key, so it
    /// answers "maybe" for every key until a rebuild replaces it.
    pub full: bool,
    /// Whether a rebuild is running now.
    pub rebuilding: bool,
    /// Whether the serving filter is a snapshot that could not be caught up with its source:
    /// it lets every key through until a full rebuild swaps in.
    pub verifying: bool,
    /// Lookups a verifying filter let through that it would have rejected.
    pub unverified_passes: u64,
    /// Lookups answered "definitely absent" for a [`BloomGuard`](crate::BloomGuard) or a
    /// [`GuardedCache`](crate::GuardedCache) over this filter (direct
    /// [`SharedFilter::contains`](crate::SharedFilter::contains) calls are not counted).
    pub rejections: u64,
    /// Lookups let through for keys a [`GuardedCache`](crate::GuardedCache) over this filter
    /// then did not find: false positives, and keys deleted since the filter was built.
    pub false_positives: u64,
    /// The live measured false-positive rate: of the guard and cache lookups for keys that do
    /// not exist, the fraction the filter let through, `false_positives / (false_positives +
    /// rejections)`, 0 before any. A guard in front of a cache stops most absent keys before
    /// the cache sees them; counting its rejections here keeps the rate right. `None` until a
    /// [`GuardedCache`](crate::GuardedCache) is built on the filter: nothing else learns of
    /// false positives.
    pub measured_fpr: Option<f64>,
    /// Keys read by [`SharedFilter::follow`](crate::SharedFilter::follow)'s steps (or a
    /// [`Follower`](crate::shared_filter::Follower)'s), a key read twice counted twice.
    pub followed_keys: u64,
    /// Follow steps that failed; each is retried from the same position.
    pub follow_errors: u64,
}

/// The counters behind [`FilterStats`], kept by the filter's shared state. They hold no
/// configuration: each event is passed the filter's name, which labels the series.
#[derive(Default)]
pub(crate) struct FilterCounters {
    inserts: AtomicU64,
    removes: AtomicU64,
    rebuilds: AtomicU64,
    failed_rebuilds: AtomicU64,
    cancelled_rebuilds: AtomicU64,
    saturation_warnings: AtomicU64,
    refused_inserts: AtomicU64,
    unverified_passes: AtomicU64,
    rejections: AtomicU64,
    false_positives: AtomicU64,
    followed_keys: AtomicU64,
    follow_errors: AtomicU64,
    /// Set once a cache that reports false positives is built on the filter.
    fp_reported: AtomicBool,
    #[cfg(feature = "metrics")]
    accuracy: std::sync::OnceLock<AccuracyMetrics>,
}

/// The per-lookup metrics, registered once (not per lookup).
#[cfg(feature = "metrics")]
struct AccuracyMetrics {
    filter: String,
    target_fpr: f64,
    rejections: metrics::Counter,
    /// Registered once false positives are reported: without a cache, a false-positive count
    /// of 0 and a measured rate of 0 would be claims nobody measured.
    reported: std::sync::OnceLock<ReportedMetrics>,
}

#[cfg(feature = "metrics")]
struct ReportedMetrics {
    #[cfg_attr(not(feature = "guarded-cache"), allow(dead_code))]
    false_positives: metrics::Counter,
    measured_fpr: metrics::Gauge,
}

/// How a rebuild ended, for the `outcome` label.
#[derive(Clone, Copy, Debug)]
pub(crate) enum RebuildOutcome {
    Ok,
    Error,
    Cancelled,
}

// Without `metrics` the filter's name labels nothing.
#[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
impl FilterCounters {
    /// An insert wrote its key into at least one filter.
    #[inline]
    pub(crate) fn inserted(&self) {
        self.inserts.fetch_add(1, Relaxed);
    }

    /// A key was removed from a counting filter.
    pub(crate) fn removed(&self) {
        self.removes.fetch_add(1, Relaxed);
    }

    /// The stats of the filter called `name`, serving `serving`.
    pub(super) fn snapshot(
        &self,
        name: &str,
        serving: &Generation,
        last_rebuild: Option<(u64, Duration)>,
        rebuilding: bool,
    ) -> FilterStats {
        FilterStats {
            name: name.to_owned(),
            kind: serving.filter.kind(),
            capacity: serving.filter.capacity(),
            num_bits: serving.filter.num_bits(),
            approx_items: serving.items.load(Relaxed),
            inserts: self.inserts.load(Relaxed),
            removes: self.removes.load(Relaxed),
            rebuilds: self.rebuilds.load(Relaxed),
            failed_rebuilds: self.failed_rebuilds.load(Relaxed),
            cancelled_rebuilds: self.cancelled_rebuilds.load(Relaxed),
            last_rebuild,
            saturation_warnings: self.saturation_warnings.load(Relaxed),
            refused_inserts: self.refused_inserts.load(Relaxed),
            full: serving.is_full(),
            rebuilding,
            verifying: serving.verifying,
            unverified_passes: self.unverified_passes.load(Relaxed),
            rejections: self.rejections.load(Relaxed),
            false_positives: self.false_positives.load(Relaxed),
            measured_fpr: self.measured_fpr(),
            followed_keys: self.followed_keys.load(Relaxed),
            follow_errors: self.follow_errors.load(Relaxed),
        }
    }

    /// Rebuilds that have ended, however.
    pub(crate) fn finished_rebuilds(&self) -> u64 {
        self.rebuilds.load(Relaxed)
            + self.failed_rebuilds.load(Relaxed)
            + self.cancelled_rebuilds.load(Relaxed)
    }

    pub(crate) fn rebuild_finished(&self, filter: &str, outcome: RebuildOutcome) {
        let (counter, label) = match outcome {
            RebuildOutcome::Ok => (&self.rebuilds, "ok"),
            RebuildOutcome::Error => (&self.failed_rebuilds, "error"),
            RebuildOutcome::Cancelled => (&self.cancelled_rebuilds, "cancelled"),
        };
        counter.fetch_add(1, Relaxed);
        #[cfg(feature = "metrics")]
        {
            describe_once();
            metrics::counter!(names::FILTER_REBUILDS, "filter" => filter.to_owned(), "outcome" => label)
                .increment(1);
        }
    }

    pub(crate) fn saturated(&self, filter: &str) {
        count!(self.saturation_warnings, 1, FILTER_SATURATED, filter);
    }

    /// A full cuckoo filter refused an insert.
    pub(crate) fn refused_insert(&self, filter: &str) {
        count!(self.refused_inserts, 1, FILTER_REFUSED_INSERTS, filter);
    }

    pub(crate) fn unverified_pass(&self, filter: &str) {
        count!(self.unverified_passes, 1, FILTER_UNVERIFIED_PASSES, filter);
    }

    pub(crate) fn verifying(&self, filter: &str, verifying: bool) {
        #[cfg(feature = "metrics")]
        crate::stats::gauge(names::FILTER_VERIFYING, "filter", filter).set(if verifying {
            1.0
        } else {
            0.0
        });
    }

    /// A follow step read `keys` keys.
    pub(crate) fn followed(&self, filter: &str, keys: u64) {
        count!(self.followed_keys, keys, FILTER_FOLLOWED_KEYS, filter);
    }

    /// A follow step failed.
    pub(crate) fn follow_failed(&self, filter: &str) {
        count!(self.follow_errors, 1, FILTER_FOLLOW_ERRORS, filter);
    }

    pub(crate) fn caught_up(&self, filter: &str, keys: u64) {
        #[cfg(feature = "metrics")]
        crate::stats::counter(names::FILTER_CAUGHT_UP_KEYS, "filter", filter).increment(keys);
    }

    /// A [`BloomGuard`](crate::BloomGuard) or [`GuardedCache`](crate::GuardedCache) lookup
    /// the filter answered "definitely absent".
    #[inline]
    pub(crate) fn rejected(&self, filter: &str, target_fpr: f64) {
        self.rejections.fetch_add(1, Relaxed);
        #[cfg(feature = "metrics")]
        {
            let metrics = self.accuracy(filter, target_fpr);
            metrics.rejections.increment(1);
            self.publish_fpr(metrics);
        }
    }

    /// A lookup the filter let through for a key a cache's loader did not find.
    #[cfg(feature = "guarded-cache")]
    pub(crate) fn false_positive(&self, filter: &str, target_fpr: f64) {
        self.false_positives.fetch_add(1, Relaxed);
        self.fp_reported.store(true, Relaxed);
        #[cfg(feature = "metrics")]
        {
            let metrics = self.accuracy(filter, target_fpr);
            if let Some(reported) = self.reported(metrics) {
                reported.false_positives.increment(1);
            }
            self.publish_fpr(metrics);
        }
    }

    /// A cache that reports false positives was built on the filter: from now on the measured
    /// rate means something.
    #[cfg(feature = "guarded-cache")]
    pub(crate) fn reports_false_positives(&self) {
        self.fp_reported.store(true, Relaxed);
    }

    /// `false_positives / (false_positives + rejections)`, once false positives are reported.
    pub(crate) fn measured_fpr(&self) -> Option<f64> {
        if !self.fp_reported.load(Relaxed) {
            return None;
        }
        let false_positives = self.false_positives.load(Relaxed);
        let absent = false_positives + self.rejections.load(Relaxed);
        Some(if absent == 0 {
            0.0
        } else {
            false_positives as f64 / absent as f64
        })
    }

    #[cfg(feature = "metrics")]
    fn accuracy(&self, filter: &str, target_fpr: f64) -> &AccuracyMetrics {
        self.accuracy.get_or_init(|| {
            describe_once();
            AccuracyMetrics {
                filter: filter.to_owned(),
                target_fpr,
                rejections: metrics::counter!(names::FILTER_REJECTIONS, "filter" => filter.to_owned()),
                reported: std::sync::OnceLock::new(),
            }
        })
    }

    #[cfg(feature = "metrics")]
    fn reported<'a>(&self, metrics: &'a AccuracyMetrics) -> Option<&'a ReportedMetrics> {
        if !self.fp_reported.load(Relaxed) {
            return None;
        }
        Some(metrics.reported.get_or_init(|| {
            let filter = metrics.filter.clone();
            metrics::gauge!(names::FILTER_TARGET_FPR, "filter" => filter.clone())
                .set(metrics.target_fpr);
            ReportedMetrics {
                false_positives: metrics::counter!(names::FILTER_FALSE_POSITIVES, "filter" => filter.clone()),
                measured_fpr: metrics::gauge!(names::FILTER_MEASURED_FPR, "filter" => filter),
            }
        }))
    }

    /// The measured rate changes only with a rejection or a false positive: refresh the gauge
    /// then (a relaxed store in the usual recorders).
    #[cfg(feature = "metrics")]
    #[inline]
    fn publish_fpr(&self, metrics: &AccuracyMetrics) {
        if let (Some(reported), Some(fpr)) = (self.reported(metrics), self.measured_fpr()) {
            reported.measured_fpr.set(fpr);
        }
    }

    /// A rebuild that swapped in its filter took `took`.
    pub(crate) fn rebuilt_in(&self, filter: &str, took: Duration) {
        #[cfg(feature = "metrics")]
        crate::stats::histogram(names::FILTER_REBUILD_DURATION, "filter", filter).record(took);
    }

    pub(crate) fn keys(&self, filter: &str, keys: u64) {
        #[cfg(feature = "metrics")]
        crate::stats::gauge(names::FILTER_KEYS, "filter", filter).set(keys as f64);
    }
}
