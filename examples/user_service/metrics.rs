//! `GET /metrics`: the process's Prometheus recorder, installed once.
//!
//! The `metrics` facade has one global recorder per process, and tests (and the demo) run
//! several services in one process, so the recorder is installed once, on first use, and
//! every service renders the same handle; each service's series carry its own name in their
//! `service` / `guard` / `cache` / `filter` label.

use std::sync::OnceLock;

use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};

/// Gauge: the filter's live measured false-positive rate: of the lookups for ids that do
/// not exist, the fraction the filter let through to the database.
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

/// The process's Prometheus handle; installs the recorder on the first call. If another
/// recorder was installed first (by code outside this crate), the handle renders only what
/// reaches it, which is nothing, and a warning is logged.
pub fn prometheus() -> &'static PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE.get_or_init(|| {
        let recorder = PrometheusBuilder::new().build_recorder();
        let handle = recorder.handle();
        if metrics::set_global_recorder(recorder).is_err() {
            tracing::warn!("a metrics recorder was already installed; /metrics will be empty");
        }
        handle
    })
}
