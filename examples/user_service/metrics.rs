//! `GET /metrics`: the process's Prometheus recorder, installed once.
//!
//! The `metrics` facade has one global recorder per process, and tests (and the demo) run
//! several services in one process, so the recorder is installed once, on first use, and
//! every service renders the same handle; each service's series carry its own name in their
//! `service` / `guard` / `cache` / `filter` label.

use std::sync::OnceLock;

use metrics::{Unit, describe_counter, describe_gauge};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

/// Gauge: the filter's live measured false-positive rate: of the lookups for ids that do
/// not exist, the fraction the filter let through to the database. Computed by the app from
/// the guard's and the cache's counters: the same figure as the library's
/// `bloom_filter_measured_fpr{filter}`, kept as a cross-check (the end-to-end tests compare
/// the two).
pub const MEASURED_FPR: &str = "user_service_measured_fpr";
/// Gauge: fraction of the serving filter's bits that are set.
pub const FILTER_FILL: &str = "user_service_filter_fill_ratio";
/// Gauge: the false-positive rate the serving filter's bits imply now.
pub const FILTER_ESTIMATED_FPR: &str = "user_service_filter_estimated_fpr";
/// Gauge: distinct keys in the serving filter, estimated from its bits.
pub const FILTER_ESTIMATED_KEYS: &str = "user_service_filter_estimated_keys";
/// Gauge: the number of keys the serving filter was sized for.
pub const FILTER_CAPACITY: &str = "user_service_filter_capacity";
/// Gauge: the serving filter's size in bytes.
pub const FILTER_BYTES: &str = "user_service_filter_bytes";

/// Histogram buckets (seconds) for the loader and publish latencies: 0.5 ms to 10 s.
const LATENCY_BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];
/// Histogram buckets (seconds) for filter rebuilds: 10 ms to 10 min.
const REBUILD_BUCKETS: &[f64] = &[
    0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0,
];

/// The process's Prometheus handle; installs the recorder on the first call. If another
/// recorder was installed first (by code outside this crate), the handle renders only what
/// reaches it, which is nothing, and a warning is logged.
///
/// The libraries describe their own series (`# HELP`, unit) the first time they emit; this
/// describes the service's. Their histograms get buckets here: without them the exporter
/// renders summaries. Unit suffixes stay off: every name already ends in its unit.
pub fn prometheus() -> &'static PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE.get_or_init(|| {
        let full = |name: &str| Matcher::Full(name.to_owned());
        let recorder = PrometheusBuilder::new()
            .set_buckets_for_metric(
                full(bloom_tower::stats::names::FILTER_REBUILD_DURATION),
                REBUILD_BUCKETS,
            )
            .and_then(|builder| {
                builder.set_buckets_for_metric(
                    full(bloom_tower::stats::names::CACHE_LOAD_DURATION),
                    LATENCY_BUCKETS,
                )
            })
            .and_then(|builder| {
                builder.set_buckets_for_metric(
                    full(bloom_redis::names::PUBLISH_LATENCY),
                    LATENCY_BUCKETS,
                )
            })
            .expect("non-empty bucket lists")
            .build_recorder();
        let handle = recorder.handle();
        if metrics::set_global_recorder(recorder).is_err() {
            tracing::warn!("a metrics recorder was already installed; /metrics will be empty");
        }
        describe();
        handle
    })
}

/// Describes the service's own series to the recorder (`# HELP` text and unit).
fn describe() {
    describe_gauge!(
        MEASURED_FPR,
        Unit::Percent,
        "Measured false-positive rate of the user id filter, as a ratio: absent ids the filter let through / all lookups of absent ids (guard and cache)."
    );
    describe_gauge!(
        FILTER_FILL,
        Unit::Percent,
        "Fraction of the serving filter's bits that are set."
    );
    describe_gauge!(
        FILTER_ESTIMATED_FPR,
        Unit::Percent,
        "False-positive rate the serving filter's bits imply now, as a ratio."
    );
    describe_gauge!(
        FILTER_ESTIMATED_KEYS,
        Unit::Count,
        "Distinct ids in the serving filter, estimated from its bits."
    );
    describe_gauge!(
        FILTER_CAPACITY,
        Unit::Count,
        "Number of ids the serving filter was sized for."
    );
    describe_gauge!(
        FILTER_BYTES,
        Unit::Bytes,
        "Size of the serving filter in bytes."
    );
    describe_counter!(
        crate::db::DB_QUERIES,
        Unit::Count,
        "Statements the service sent to the database."
    );
    describe_counter!(
        crate::db::DB_MISSES,
        Unit::Count,
        "User lookups that found no row in the database."
    );
}
