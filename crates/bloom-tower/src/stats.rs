//! Counters: always kept in memory (read them with [`BloomGuard::stats`] and
//! [`SharedFilter::stats`]) and, with the `metrics` feature (on by default), also emitted
//! through the [`metrics`](https://docs.rs/metrics) facade to whatever recorder the
//! application installed (Prometheus, StatsD, …).
//!
//! | metric | kind | labels | counts |
//! | --- | --- | --- | --- |
//! | [`bloom_guard_checked_total`](names::GUARD_CHECKED) | counter | `guard` | requests whose key was looked up |
//! | [`bloom_guard_passed_total`](names::GUARD_PASSED) | counter | `guard` | lookups that found the key maybe present (inner service called) |
//! | [`bloom_guard_rejected_total`](names::GUARD_REJECTED) | counter | `guard` | lookups that found the key definitely absent (answered by the guard) |
//! | [`bloom_guard_missing_key_total`](names::GUARD_MISSING_KEY) | counter | `guard` | requests with no usable key |
//! | [`bloom_filter_rebuilds_total`](names::FILTER_REBUILDS) | counter | `filter`, `outcome` = `ok` / `error` / `cancelled` | rebuilds |
//! | [`bloom_filter_saturated_total`](names::FILTER_SATURATED) | counter | `filter` | saturation warnings (at most one per filter generation) |
//! | [`bloom_filter_keys`](names::FILTER_KEYS) | gauge | `filter` | distinct keys in the serving filter (approximate) |
//! | [`bloom_filter_verifying`](names::FILTER_VERIFYING) | gauge | `filter` | 1 while the serving filter is a snapshot awaiting a full rebuild (it lets every key through), else 0 |
//! | [`bloom_filter_unverified_passes_total`](names::FILTER_UNVERIFIED_PASSES) | counter | `filter` | keys a verifying filter let through that it would have rejected |
//! | [`bloom_filter_caught_up_keys_total`](names::FILTER_CAUGHT_UP_KEYS) | counter | `filter` | keys read from the source since a snapshot's watermark at start |
//! | [`bloom_cache_filter_rejections_total`](names::CACHE_FILTER_REJECTIONS) | counter | `cache` | [`GuardedCache`](crate::GuardedCache) lookups the filter answered "absent" |
//! | [`bloom_cache_hits_total`](names::CACHE_HITS) | counter | `cache` | lookups answered from the cache |
//! | [`bloom_cache_negative_hits_total`](names::CACHE_NEGATIVE_HITS) | counter | `cache` | lookups answered from the negative cache |
//! | [`bloom_cache_loads_total`](names::CACHE_LOADS) | counter | `cache` | loader runs |
//! | [`bloom_cache_load_errors_total`](names::CACHE_LOAD_ERRORS) | counter | `cache` | loader runs that failed, timed out or panicked |
//! | [`bloom_cache_coalesced_waiters_total`](names::CACHE_COALESCED_WAITERS) | counter | `cache` | lookups that waited for another's load |
//! | [`bloom_cache_false_positives_total`](names::CACHE_FALSE_POSITIVES) | counter | `cache` | lookups the filter let through for keys the loader did not find |
//! | [`bloom_cache_measured_fpr`](names::CACHE_MEASURED_FPR) | gauge | `cache` | live measured false-positive rate: `false_positives / (false_positives + filter_rejections)` |
//! | [`bloom_response_cache_hits_total`](names::RESPONSE_CACHE_HITS) | counter | `cache`, `status` = `200` / `404` | [`ResponseCache`](crate::ResponseCache) requests answered with a stored response |
//! | [`bloom_response_cache_loads_total`](names::RESPONSE_CACHE_LOADS) | counter | `cache` | calls to the inner service made to fill the cache |
//! | [`bloom_response_cache_coalesced_total`](names::RESPONSE_CACHE_COALESCED) | counter | `cache` | requests that waited for another's load of the same URL |
//! | [`bloom_response_cache_passed_through_total`](names::RESPONSE_CACHE_PASSED_THROUGH) | counter | `cache` | requests the cache does not answer (not `GET`, or no key) |
//! | [`bloom_response_cache_bypassed_total`](names::RESPONSE_CACHE_BYPASSED) | counter | `cache` | `GET`s that skipped the shared cache (`Cache-Control: no-store`/`no-cache`, or `Authorization`) |
//! | [`bloom_response_cache_not_stored_total`](names::RESPONSE_CACHE_NOT_STORED) | counter | `cache` | responses that could not be stored (status, directives, `Set-Cookie`, `Vary: *`, size) |
//! | [`bloom_response_cache_wait_timeouts_total`](names::RESPONSE_CACHE_WAIT_TIMEOUTS) | counter | `cache` | waiters that gave up on another's load and called the inner service |
//! | [`bloom_response_cache_stale_loads_discarded_total`](names::RESPONSE_CACHE_STALE_DISCARDED) | counter | `cache` | responses discarded because their key was invalidated during the load |
//!
//! `guard` is [`BloomGuard::name`], `filter` is [`SharedFilterBuilder::name`]; both default
//! to `"default"`. The guard registers its counters with the recorder on its first request,
//! so install the recorder before serving.
//!
//! [`BloomGuard::stats`]: crate::BloomGuard::stats
//! [`BloomGuard::name`]: crate::BloomGuard::name
//! [`SharedFilter::stats`]: crate::SharedFilter::stats
//! [`SharedFilterBuilder::name`]: crate::SharedFilterBuilder::name

use std::borrow::Cow;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

/// The metric names.
pub mod names {
    /// Counter: requests whose key was looked up (`passed + rejected`).
    pub const GUARD_CHECKED: &str = "bloom_guard_checked_total";
    /// Counter: lookups that found the key maybe present; the inner service was called.
    pub const GUARD_PASSED: &str = "bloom_guard_passed_total";
    /// Counter: lookups that found the key definitely absent; the guard answered.
    pub const GUARD_REJECTED: &str = "bloom_guard_rejected_total";
    /// Counter: requests in which the extractor found no key.
    pub const GUARD_MISSING_KEY: &str = "bloom_guard_missing_key_total";
    /// Counter: finished rebuilds, labelled `outcome` = `ok`, `error` or `cancelled`.
    pub const FILTER_REBUILDS: &str = "bloom_filter_rebuilds_total";
    /// Counter: saturation warnings.
    pub const FILTER_SATURATED: &str = "bloom_filter_saturated_total";
    /// Gauge: approximate number of distinct keys in the serving filter.
    pub const FILTER_KEYS: &str = "bloom_filter_keys";
    /// Gauge: 1 while the serving filter is a snapshot that could not be caught up with its
    /// source and awaits a full rebuild (it lets every key through), else 0.
    pub const FILTER_VERIFYING: &str = "bloom_filter_verifying";
    /// Counter: lookups a verifying filter let through that it would have rejected.
    pub const FILTER_UNVERIFIED_PASSES: &str = "bloom_filter_unverified_passes_total";
    /// Counter: keys read from the source since a snapshot's watermark when starting from it.
    pub const FILTER_CAUGHT_UP_KEYS: &str = "bloom_filter_caught_up_keys_total";
    /// Counter: guarded-cache lookups the filter answered "definitely absent".
    pub const CACHE_FILTER_REJECTIONS: &str = "bloom_cache_filter_rejections_total";
    /// Counter: guarded-cache lookups answered from the cache.
    pub const CACHE_HITS: &str = "bloom_cache_hits_total";
    /// Counter: guarded-cache lookups answered from the negative cache.
    pub const CACHE_NEGATIVE_HITS: &str = "bloom_cache_negative_hits_total";
    /// Counter: loader runs.
    pub const CACHE_LOADS: &str = "bloom_cache_loads_total";
    /// Counter: loader runs that failed, timed out or panicked.
    pub const CACHE_LOAD_ERRORS: &str = "bloom_cache_load_errors_total";
    /// Counter: lookups that waited for another lookup's load.
    pub const CACHE_COALESCED_WAITERS: &str = "bloom_cache_coalesced_waiters_total";
    /// Counter: lookups the filter let through for keys the loader did not find.
    pub const CACHE_FALSE_POSITIVES: &str = "bloom_cache_false_positives_total";
    /// Gauge: the live measured false-positive rate of the cache's filter.
    pub const CACHE_MEASURED_FPR: &str = "bloom_cache_measured_fpr";
    /// Counter: response-cache hits, labelled `status` = `200` or `404`.
    pub const RESPONSE_CACHE_HITS: &str = "bloom_response_cache_hits_total";
    /// Counter: calls to the inner service made to fill the response cache.
    pub const RESPONSE_CACHE_LOADS: &str = "bloom_response_cache_loads_total";
    /// Counter: requests that waited for another request's load of the same URL.
    pub const RESPONSE_CACHE_COALESCED: &str = "bloom_response_cache_coalesced_total";
    /// Counter: requests the response cache does not answer (not `GET`, or no key).
    pub const RESPONSE_CACHE_PASSED_THROUGH: &str = "bloom_response_cache_passed_through_total";
    /// Counter: `GET`s that skipped the shared cache because of their own headers.
    pub const RESPONSE_CACHE_BYPASSED: &str = "bloom_response_cache_bypassed_total";
    /// Counter: responses the response cache could not store.
    pub const RESPONSE_CACHE_NOT_STORED: &str = "bloom_response_cache_not_stored_total";
    /// Counter: waiters that gave up on another request's load after the wait timeout.
    pub const RESPONSE_CACHE_WAIT_TIMEOUTS: &str = "bloom_response_cache_wait_timeouts_total";
    /// Counter: responses discarded because their key was invalidated while they loaded.
    pub const RESPONSE_CACHE_STALE_DISCARDED: &str =
        "bloom_response_cache_stale_loads_discarded_total";
}

/// A guard's request counters, shared by the layer and every service made from it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct GuardStats {
    /// Requests whose key was looked up: `passed + rejected`.
    pub checked: u64,
    /// Lookups that found the key maybe present (the inner service was called).
    pub passed: u64,
    /// Lookups that found the key definitely absent (the guard answered).
    pub rejected: u64,
    /// Requests with no usable key (handled by the missing-key policy).
    pub missing_key: u64,
}

/// The counters behind [`GuardStats`].
pub(crate) struct GuardCounters {
    name: Cow<'static, str>,
    /// Whether rejection events carry the key (off: keys can be personal data).
    log_keys: bool,
    passed: AtomicU64,
    rejected: AtomicU64,
    missing_key: AtomicU64,
    #[cfg(feature = "metrics")]
    handles: std::sync::OnceLock<GuardMetrics>,
}

#[cfg(feature = "metrics")]
struct GuardMetrics {
    checked: metrics::Counter,
    passed: metrics::Counter,
    rejected: metrics::Counter,
    missing_key: metrics::Counter,
}

impl GuardCounters {
    pub(crate) fn new(name: Cow<'static, str>, log_keys: bool) -> Self {
        Self {
            name,
            log_keys,
            passed: AtomicU64::new(0),
            rejected: AtomicU64::new(0),
            missing_key: AtomicU64::new(0),
            #[cfg(feature = "metrics")]
            handles: std::sync::OnceLock::new(),
        }
    }

    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    pub(crate) fn log_keys(&self) -> bool {
        self.log_keys
    }

    /// Registering a counter looks the key up in the recorder: done once, not per request.
    #[cfg(feature = "metrics")]
    fn metrics(&self) -> &GuardMetrics {
        self.handles.get_or_init(|| {
            let guard = self.name.clone().into_owned();
            GuardMetrics {
                checked: metrics::counter!(names::GUARD_CHECKED, "guard" => guard.clone()),
                passed: metrics::counter!(names::GUARD_PASSED, "guard" => guard.clone()),
                rejected: metrics::counter!(names::GUARD_REJECTED, "guard" => guard.clone()),
                missing_key: metrics::counter!(names::GUARD_MISSING_KEY, "guard" => guard),
            }
        })
    }

    #[inline]
    pub(crate) fn passed(&self) {
        self.passed.fetch_add(1, Relaxed);
        #[cfg(feature = "metrics")]
        {
            let metrics = self.metrics();
            metrics.checked.increment(1);
            metrics.passed.increment(1);
        }
    }

    #[inline]
    pub(crate) fn rejected(&self) {
        self.rejected.fetch_add(1, Relaxed);
        #[cfg(feature = "metrics")]
        {
            let metrics = self.metrics();
            metrics.checked.increment(1);
            metrics.rejected.increment(1);
        }
    }

    #[inline]
    pub(crate) fn missing_key(&self) {
        self.missing_key.fetch_add(1, Relaxed);
        #[cfg(feature = "metrics")]
        self.metrics().missing_key.increment(1);
    }

    pub(crate) fn snapshot(&self) -> GuardStats {
        let passed = self.passed.load(Relaxed);
        let rejected = self.rejected.load(Relaxed);
        GuardStats {
            checked: passed + rejected,
            passed,
            rejected,
            missing_key: self.missing_key.load(Relaxed),
        }
    }
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
    /// its bits set already is not counted, so this slightly undercounts).
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
    /// Whether a rebuild is running now.
    pub rebuilding: bool,
    /// Whether the serving filter is a snapshot that could not be caught up with its source:
    /// it lets every key through until a full rebuild swaps in.
    pub verifying: bool,
    /// Lookups a verifying filter let through that it would have rejected.
    pub unverified_passes: u64,
}

/// Filter-level counters kept by the shared state.
#[derive(Default)]
pub(crate) struct FilterCounters {
    pub(crate) inserts: AtomicU64,
    pub(crate) removes: AtomicU64,
    pub(crate) rebuilds: AtomicU64,
    pub(crate) failed_rebuilds: AtomicU64,
    pub(crate) cancelled_rebuilds: AtomicU64,
    pub(crate) saturation_warnings: AtomicU64,
    pub(crate) unverified_passes: AtomicU64,
}

/// How a rebuild ended, for the `outcome` label.
#[derive(Clone, Copy, Debug)]
pub(crate) enum RebuildOutcome {
    Ok,
    Error,
    Cancelled,
}

impl FilterCounters {
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
        metrics::counter!(names::FILTER_REBUILDS, "filter" => filter.to_owned(), "outcome" => label)
            .increment(1);
        #[cfg(not(feature = "metrics"))]
        let _ = (filter, label);
    }

    pub(crate) fn saturated(&self, filter: &str) {
        self.saturation_warnings.fetch_add(1, Relaxed);
        #[cfg(feature = "metrics")]
        metrics::counter!(names::FILTER_SATURATED, "filter" => filter.to_owned()).increment(1);
        #[cfg(not(feature = "metrics"))]
        let _ = filter;
    }

    pub(crate) fn unverified_pass(&self, filter: &str) {
        self.unverified_passes.fetch_add(1, Relaxed);
        #[cfg(feature = "metrics")]
        metrics::counter!(names::FILTER_UNVERIFIED_PASSES, "filter" => filter.to_owned())
            .increment(1);
        #[cfg(not(feature = "metrics"))]
        let _ = filter;
    }

    pub(crate) fn verifying(&self, filter: &str, verifying: bool) {
        #[cfg(feature = "metrics")]
        metrics::gauge!(names::FILTER_VERIFYING, "filter" => filter.to_owned()).set(if verifying {
            1.0
        } else {
            0.0
        });
        #[cfg(not(feature = "metrics"))]
        let _ = (filter, verifying);
    }

    pub(crate) fn caught_up(&self, filter: &str, keys: u64) {
        #[cfg(feature = "metrics")]
        metrics::counter!(names::FILTER_CAUGHT_UP_KEYS, "filter" => filter.to_owned())
            .increment(keys);
        #[cfg(not(feature = "metrics"))]
        let _ = (filter, keys);
    }

    pub(crate) fn keys(&self, filter: &str, keys: u64) {
        #[cfg(feature = "metrics")]
        metrics::gauge!(names::FILTER_KEYS, "filter" => filter.to_owned()).set(keys as f64);
        #[cfg(not(feature = "metrics"))]
        let _ = (filter, keys);
    }
}
