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
//! | [`bloom_filter_refused_inserts_total`](names::FILTER_REFUSED_INSERTS) | counter | `filter` | inserts a full cuckoo filter had no room for: it then lets every key through until a rebuild replaces it |
//! | [`bloom_filter_keys`](names::FILTER_KEYS) | gauge | `filter` | distinct keys in the serving filter (approximate) |
//! | [`bloom_filter_verifying`](names::FILTER_VERIFYING) | gauge | `filter` | 1 while the serving filter is a snapshot awaiting a full rebuild (it lets every key through), else 0 |
//! | [`bloom_filter_unverified_passes_total`](names::FILTER_UNVERIFIED_PASSES) | counter | `filter` | keys a verifying filter let through that it would have rejected |
//! | [`bloom_filter_caught_up_keys_total`](names::FILTER_CAUGHT_UP_KEYS) | counter | `filter` | keys read from the source since a snapshot's watermark at start |
//! | [`bloom_filter_followed_keys_total`](names::FILTER_FOLLOWED_KEYS) | counter | `filter` | keys read by [`SharedFilter::follow`](crate::SharedFilter::follow)'s steps (a key read twice counts twice) |
//! | [`bloom_filter_follow_errors_total`](names::FILTER_FOLLOW_ERRORS) | counter | `filter` | follow steps that failed (retried from the same position) |
//! | [`bloom_filter_rebuild_duration_seconds`](names::FILTER_REBUILD_DURATION) | histogram | `filter` | how long each rebuild that swapped in a new filter took (seconds) |
//! | [`bloom_filter_rejections_total`](names::FILTER_REJECTIONS) | counter | `filter` | lookups of the filter answered "definitely absent", by a guard or by a cache over it |
//! | [`bloom_filter_false_positives_total`](names::FILTER_FALSE_POSITIVES) | counter | `filter` | lookups it let through for keys a [`GuardedCache`](crate::GuardedCache)'s loader did not find |
//! | [`bloom_filter_measured_fpr`](names::FILTER_MEASURED_FPR) | gauge | `filter` | live measured false-positive rate: `false_positives / (false_positives + rejections)`; only once a `GuardedCache` is built on the filter (nothing else learns of false positives) |
//! | [`bloom_filter_target_fpr`](names::FILTER_TARGET_FPR) | gauge | `filter` | the false-positive rate the filter is sized for; exported with `bloom_filter_measured_fpr` |
//! | [`bloom_cache_filter_rejections_total`](names::CACHE_FILTER_REJECTIONS) | counter | `cache` | [`GuardedCache`](crate::GuardedCache) lookups the filter answered "absent" |
//! | [`bloom_cache_hits_total`](names::CACHE_HITS) | counter | `cache` | lookups answered from the cache |
//! | [`bloom_cache_negative_hits_total`](names::CACHE_NEGATIVE_HITS) | counter | `cache` | lookups answered from the negative cache |
//! | [`bloom_cache_loads_total`](names::CACHE_LOADS) | counter | `cache` | loader runs |
//! | [`bloom_cache_load_errors_total`](names::CACHE_LOAD_ERRORS) | counter | `cache` | loader runs that failed, timed out or panicked |
//! | [`bloom_cache_coalesced_waiters_total`](names::CACHE_COALESCED_WAITERS) | counter | `cache` | lookups that waited for another's load |
//! | [`bloom_cache_false_positives_total`](names::CACHE_FALSE_POSITIVES) | counter | `cache` | lookups the filter let through for keys the loader did not find |
//! | [`bloom_cache_load_duration_seconds`](names::CACHE_LOAD_DURATION) | histogram | `cache` | how long each loader run took (seconds), whatever its outcome |
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
//! This module holds the list of names and their descriptions: the contract dashboards and
//! alerts rely on. Each component counts in its own module, next to its stats type:
//! [`GuardStats`], [`FilterStats`], [`CacheStats`](crate::guarded_cache::CacheStats) and
//! [`ResponseCacheStats`](crate::response_cache::ResponseCacheStats).
//!
//! # The measured false-positive rate
//!
//! A [`BloomGuard`](crate::BloomGuard) in front of a [`GuardedCache`](crate::GuardedCache)
//! stops absent keys before the cache sees them, so the cache alone only ever sees the
//! filter's false positives. Both therefore count their rejections into the filter they share
//! (`bloom_filter_rejections_total`), the cache reports false positives there too, and the
//! rate is computed per filter, over every rejection of it: right with a guard, a cache, or
//! both. [`FilterStats::measured_fpr`] and [`CacheStats::measured_fpr`](crate::guarded_cache::CacheStats::measured_fpr)
//! are the same figure. For alerts prefer the counters' rates over a window (see
//! `docs/alerts.yml` in the repository) to the gauge, which covers the whole process life.
//!
//! # Descriptions, units, exporters
//!
//! Every series is described (`# HELP`, and a [`metrics::Unit`]) to the recorder once per
//! process, the first time this crate emits anything, so install the recorder before building
//! filters and serving, or call [`describe`] after installing it. Names already carry their
//! unit (`_seconds`, `_total`): leave the Prometheus exporter's unit suffixes off. Histograms
//! are rendered as summaries by `metrics-exporter-prometheus` unless buckets are set for them
//! (`PrometheusBuilder::set_buckets_for_metric`; the `user_service` example does).
//!
//! [`BloomGuard::stats`]: crate::BloomGuard::stats
//! [`BloomGuard::name`]: crate::BloomGuard::name
//! [`SharedFilter::stats`]: crate::SharedFilter::stats
//! [`SharedFilterBuilder::name`]: crate::shared_filter::SharedFilterBuilder::name

pub use crate::guard::stats::GuardStats;
pub use crate::shared_filter::stats::FilterStats;
// Where the rebuild code imports it from.
pub(crate) use crate::shared_filter::stats::RebuildOutcome;
pub(crate) use series::series;
#[cfg(feature = "metrics")]
pub(crate) use series::{counter, gauge, histogram};

mod series;

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
    /// Counter: inserts a full cuckoo filter refused.
    pub const FILTER_REFUSED_INSERTS: &str = "bloom_filter_refused_inserts_total";
    /// Gauge: approximate number of distinct keys in the serving filter.
    pub const FILTER_KEYS: &str = "bloom_filter_keys";
    /// Gauge: 1 while the serving filter is a snapshot that could not be caught up with its
    /// source and awaits a full rebuild (it lets every key through), else 0.
    pub const FILTER_VERIFYING: &str = "bloom_filter_verifying";
    /// Counter: lookups a verifying filter let through that it would have rejected.
    pub const FILTER_UNVERIFIED_PASSES: &str = "bloom_filter_unverified_passes_total";
    /// Counter: keys read from the source since a snapshot's watermark when starting from it.
    pub const FILTER_CAUGHT_UP_KEYS: &str = "bloom_filter_caught_up_keys_total";
    /// Counter: keys read by the steps of a filter following its source's changes.
    pub const FILTER_FOLLOWED_KEYS: &str = "bloom_filter_followed_keys_total";
    /// Counter: steps of a filter following its source's changes that failed.
    pub const FILTER_FOLLOW_ERRORS: &str = "bloom_filter_follow_errors_total";
    /// Histogram: seconds each rebuild that swapped in a new filter took.
    pub const FILTER_REBUILD_DURATION: &str = "bloom_filter_rebuild_duration_seconds";
    /// Counter: lookups the filter answered "definitely absent", by a guard or a cache.
    pub const FILTER_REJECTIONS: &str = "bloom_filter_rejections_total";
    /// Counter: lookups the filter let through for keys a cache's loader did not find.
    pub const FILTER_FALSE_POSITIVES: &str = "bloom_filter_false_positives_total";
    /// Gauge: the filter's live measured false-positive rate, `false_positives /
    /// (false_positives + rejections)`, once a cache reports false positives.
    pub const FILTER_MEASURED_FPR: &str = "bloom_filter_measured_fpr";
    /// Gauge: the false-positive rate the filter is sized for (exported with the measured one).
    pub const FILTER_TARGET_FPR: &str = "bloom_filter_target_fpr";
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
    /// Histogram: seconds each loader run took, whatever its outcome (a timeout: the limit).
    pub const CACHE_LOAD_DURATION: &str = "bloom_cache_load_duration_seconds";
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
    /// Gauge: filters a `FilterSet` holds in memory.
    pub const FILTER_SET_FILTERS: &str = "bloom_filter_set_filters";
    /// Gauge: bytes a `FilterSet`'s filters in memory count against its budget.
    pub const FILTER_SET_BYTES: &str = "bloom_filter_set_bytes";
    /// Gauge: a `FilterSet`'s budget in bytes.
    pub const FILTER_SET_BUDGET_BYTES: &str = "bloom_filter_set_budget_bytes";
    /// Counter: filters a `FilterSet` read back from its store.
    pub const FILTER_SET_LOADS: &str = "bloom_filter_set_loads_total";
    /// Counter: filters a `FilterSet` created on a key's first write.
    pub const FILTER_SET_CREATES: &str = "bloom_filter_set_creates_total";
    /// Counter: loads that failed (the store failed, or its bytes were not a filter).
    pub const FILTER_SET_LOAD_ERRORS: &str = "bloom_filter_set_load_errors_total";
    /// Counter: filters a `FilterSet` evicted to its store.
    pub const FILTER_SET_EVICTIONS: &str = "bloom_filter_set_evictions_total";
    /// Counter: filters written to the store (evictions and flushes).
    pub const FILTER_SET_STORES: &str = "bloom_filter_set_stores_total";
    /// Counter: writes to the store that failed (the filter stayed in memory).
    pub const FILTER_SET_STORE_ERRORS: &str = "bloom_filter_set_store_errors_total";
    /// Histogram: seconds to read a filter back from the store and decode it.
    pub const FILTER_SET_LOAD_DURATION: &str = "bloom_filter_set_load_duration_seconds";
}

/// Describes every series in [`names`] (`# HELP` text and [`metrics::Unit`]) to the installed
/// recorder. Done once per process, automatically, the first time this crate emits a metric;
/// call it yourself only if the recorder was installed after that.
#[cfg(feature = "metrics")]
pub fn describe() {
    use metrics::{Unit, describe_counter, describe_gauge, describe_histogram};

    describe_counter!(
        names::GUARD_CHECKED,
        Unit::Count,
        "Requests whose key a BloomGuard looked up in its filter (passed + rejected)."
    );
    describe_counter!(
        names::GUARD_PASSED,
        Unit::Count,
        "Requests whose key the filter found maybe present: the inner service was called."
    );
    describe_counter!(
        names::GUARD_REJECTED,
        Unit::Count,
        "Requests whose key the filter found definitely absent: answered by the guard."
    );
    describe_counter!(
        names::GUARD_MISSING_KEY,
        Unit::Count,
        "Requests in which the guard's extractor found no usable key."
    );
    describe_counter!(
        names::FILTER_REBUILDS,
        Unit::Count,
        "Finished filter rebuilds, by outcome (ok, error, cancelled)."
    );
    describe_counter!(
        names::FILTER_SATURATED,
        Unit::Count,
        "Saturation warnings: the serving filter holds more keys than it was sized for (at most one per filter generation)."
    );
    describe_counter!(
        names::FILTER_REFUSED_INSERTS,
        Unit::Count,
        "Inserts a full cuckoo filter had no room for; it lets every key through until a rebuild replaces it."
    );
    describe_gauge!(
        names::FILTER_KEYS,
        Unit::Count,
        "Distinct keys in the serving filter (approximate), as of its last rebuild."
    );
    describe_gauge!(
        names::FILTER_VERIFYING,
        "1 while the serving filter is a snapshot awaiting a full rebuild (it lets every key through), else 0."
    );
    describe_counter!(
        names::FILTER_UNVERIFIED_PASSES,
        Unit::Count,
        "Lookups a verifying filter let through that it would have rejected."
    );
    describe_counter!(
        names::FILTER_CAUGHT_UP_KEYS,
        Unit::Count,
        "Keys read from the source since a snapshot's watermark when starting from the snapshot."
    );
    describe_counter!(
        names::FILTER_FOLLOWED_KEYS,
        Unit::Count,
        "Keys read by the steps of a filter following its source's changes."
    );
    describe_counter!(
        names::FILTER_FOLLOW_ERRORS,
        Unit::Count,
        "Steps of a filter following its source's changes that failed (retried from the same position)."
    );
    describe_histogram!(
        names::FILTER_REBUILD_DURATION,
        Unit::Seconds,
        "Seconds each filter rebuild that swapped in a new filter took."
    );
    describe_counter!(
        names::FILTER_REJECTIONS,
        Unit::Count,
        "Lookups the filter answered definitely absent, by a BloomGuard or a GuardedCache over it."
    );
    describe_counter!(
        names::FILTER_FALSE_POSITIVES,
        Unit::Count,
        "Lookups the filter let through for keys a GuardedCache's loader did not find."
    );
    describe_gauge!(
        names::FILTER_MEASURED_FPR,
        Unit::Percent,
        "Measured false-positive rate of the filter since start, as a ratio: false positives / (false positives + rejections by guard and cache)."
    );
    describe_gauge!(
        names::FILTER_TARGET_FPR,
        Unit::Percent,
        "False-positive rate the filter is sized for, as a ratio."
    );
    describe_counter!(
        names::CACHE_FILTER_REJECTIONS,
        Unit::Count,
        "GuardedCache lookups its filter answered definitely absent (cache and loader untouched)."
    );
    describe_counter!(
        names::CACHE_HITS,
        Unit::Count,
        "GuardedCache lookups answered from the cache with a value."
    );
    describe_counter!(
        names::CACHE_NEGATIVE_HITS,
        Unit::Count,
        "GuardedCache lookups answered from the negative (not found) cache."
    );
    describe_counter!(names::CACHE_LOADS, Unit::Count, "GuardedCache loader runs.");
    describe_counter!(
        names::CACHE_LOAD_ERRORS,
        Unit::Count,
        "GuardedCache loader runs that failed, timed out or panicked."
    );
    describe_counter!(
        names::CACHE_COALESCED_WAITERS,
        Unit::Count,
        "GuardedCache lookups that waited for another lookup's load of the same key."
    );
    describe_counter!(
        names::CACHE_FALSE_POSITIVES,
        Unit::Count,
        "GuardedCache lookups the filter let through for keys the loader did not find."
    );
    describe_histogram!(
        names::CACHE_LOAD_DURATION,
        Unit::Seconds,
        "Seconds each GuardedCache loader run took, whatever its outcome."
    );
    describe_counter!(
        names::RESPONSE_CACHE_HITS,
        Unit::Count,
        "ResponseCache requests answered with a stored response, by status (200, 404)."
    );
    describe_counter!(
        names::RESPONSE_CACHE_LOADS,
        Unit::Count,
        "Calls to the inner service made to fill the ResponseCache."
    );
    describe_counter!(
        names::RESPONSE_CACHE_COALESCED,
        Unit::Count,
        "ResponseCache requests that waited for another request's load of the same URL."
    );
    describe_counter!(
        names::RESPONSE_CACHE_PASSED_THROUGH,
        Unit::Count,
        "Requests the ResponseCache does not answer (not GET, or no key)."
    );
    describe_counter!(
        names::RESPONSE_CACHE_BYPASSED,
        Unit::Count,
        "GETs that skipped the ResponseCache because of their own headers (no-store, no-cache, Authorization)."
    );
    describe_counter!(
        names::RESPONSE_CACHE_NOT_STORED,
        Unit::Count,
        "Responses the ResponseCache could not store (status, directives, Set-Cookie, Vary: *, size)."
    );
    describe_counter!(
        names::RESPONSE_CACHE_WAIT_TIMEOUTS,
        Unit::Count,
        "ResponseCache waiters that gave up on another request's load and called the inner service."
    );
    describe_counter!(
        names::RESPONSE_CACHE_STALE_DISCARDED,
        Unit::Count,
        "ResponseCache responses discarded because their key was invalidated while they loaded."
    );
    describe_gauge!(
        names::FILTER_SET_FILTERS,
        Unit::Count,
        "Filters a FilterSet holds in memory."
    );
    describe_gauge!(
        names::FILTER_SET_BYTES,
        Unit::Bytes,
        "Bytes a FilterSet's filters in memory count against its budget."
    );
    describe_gauge!(
        names::FILTER_SET_BUDGET_BYTES,
        Unit::Bytes,
        "A FilterSet's memory budget."
    );
    describe_counter!(
        names::FILTER_SET_LOADS,
        Unit::Count,
        "Filters a FilterSet read back from its store."
    );
    describe_counter!(
        names::FILTER_SET_CREATES,
        Unit::Count,
        "Filters a FilterSet created on a key's first write."
    );
    describe_counter!(
        names::FILTER_SET_LOAD_ERRORS,
        Unit::Count,
        "FilterSet loads that failed: the store failed, or its bytes were not a filter."
    );
    describe_counter!(
        names::FILTER_SET_EVICTIONS,
        Unit::Count,
        "Filters a FilterSet evicted to its store to stay within its budget."
    );
    describe_counter!(
        names::FILTER_SET_STORES,
        Unit::Count,
        "Filters a FilterSet wrote to its store (evictions and flushes)."
    );
    describe_counter!(
        names::FILTER_SET_STORE_ERRORS,
        Unit::Count,
        "FilterSet writes to the store that failed; the filter stayed in memory."
    );
    describe_histogram!(
        names::FILTER_SET_LOAD_DURATION,
        Unit::Seconds,
        "Time to read a filter back from a FilterSet's store and decode it."
    );
}

/// [`describe`], once per process: called before this crate registers any metric.
#[cfg(feature = "metrics")]
#[inline]
pub(crate) fn describe_once() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(describe);
}
