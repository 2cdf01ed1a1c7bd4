//! [`FilterSetStats`] and the counters behind it, mirrored to the `metrics` facade (the
//! `bloom_filter_set_*` series of [`crate::stats::names`], labelled `set`).

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

#[cfg(feature = "metrics")]
use crate::stats::names;

/// A snapshot of a [`FilterSet`](super::FilterSet): what is in memory, and its counters since
/// it was built.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
#[non_exhaustive]
pub struct FilterSetStats {
    /// Filters in memory (including those being evicted).
    pub filters_in_memory: usize,
    /// Bytes they count against the budget (filters, table overhead, loads in flight).
    pub bytes_in_memory: usize,
    /// The budget.
    pub budget_bytes: usize,
    /// Filters read back from the store.
    pub loads: u64,
    /// Filters created empty on a key's first write (nothing in the store).
    pub creates: u64,
    /// Loads that failed: the store failed, or its bytes were not a filter.
    pub load_errors: u64,
    /// Filters evicted (their bytes stored first if they changed).
    pub evictions: u64,
    /// Filters written to the store (by evictions and flushes).
    pub stores: u64,
    /// Writes to the store that failed (the filter stayed in memory).
    pub store_errors: u64,
    /// Operations that waited for another caller's load or eviction of the same key.
    pub coalesced_waiters: u64,
    /// Mean time of a load (store read and decode).
    pub load_latency_mean: Duration,
    /// Longest load.
    pub load_latency_max: Duration,
}

crate::stats::series! {
    pub(crate) struct Counters {
        loads: AtomicU64,
        coalesced_waiters: AtomicU64,
        load_nanos: AtomicU64,
        load_nanos_max: AtomicU64,
    }
    with SetMetrics labelled "set" {
        events {
            fn create => creates: counter(names::FILTER_SET_CREATES);
            fn load_error => load_errors: counter(names::FILTER_SET_LOAD_ERRORS);
            fn eviction => evictions: counter(names::FILTER_SET_EVICTIONS);
            fn store => stores: counter(names::FILTER_SET_STORES);
            fn store_error => store_errors: counter(names::FILTER_SET_STORE_ERRORS);
        }
        series {
            filters: gauge(names::FILTER_SET_FILTERS),
            bytes: gauge(names::FILTER_SET_BYTES),
            loads: counter(names::FILTER_SET_LOADS),
            load_duration: histogram(names::FILTER_SET_LOAD_DURATION),
        }
    }
}

// Without `metrics` the set's name labels nothing.
#[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
impl Counters {
    /// The budget gauge, set once when the set is built.
    pub(crate) fn budget(&self, set: &str, budget: usize) {
        #[cfg(feature = "metrics")]
        metrics::gauge!(names::FILTER_SET_BUDGET_BYTES, "set" => set.to_owned()).set(budget as f64);
    }

    /// What is in memory now.
    pub(crate) fn memory(&self, set: &str, filters: usize, bytes: usize) {
        #[cfg(feature = "metrics")]
        {
            let m = self.metrics(set);
            m.filters.set(filters as f64);
            m.bytes.set(bytes as f64);
        }
    }

    pub(crate) fn load(&self, set: &str, took: Duration) {
        let nanos = took.as_nanos().min(u128::from(u64::MAX)) as u64;
        self.loads.fetch_add(1, Relaxed);
        self.load_nanos.fetch_add(nanos, Relaxed);
        self.load_nanos_max.fetch_max(nanos, Relaxed);
        #[cfg(feature = "metrics")]
        {
            let m = self.metrics(set);
            m.loads.increment(1);
            m.load_duration.record(took.as_secs_f64());
        }
    }

    pub(crate) fn coalesced_waiter(&self) {
        self.coalesced_waiters.fetch_add(1, Relaxed);
    }

    pub(crate) fn snapshot(&self, filters: usize, bytes: usize, budget: usize) -> FilterSetStats {
        let loads = self.loads.load(Relaxed);
        FilterSetStats {
            filters_in_memory: filters,
            bytes_in_memory: bytes,
            budget_bytes: budget,
            loads,
            creates: self.creates.load(Relaxed),
            load_errors: self.load_errors.load(Relaxed),
            evictions: self.evictions.load(Relaxed),
            stores: self.stores.load(Relaxed),
            store_errors: self.store_errors.load(Relaxed),
            coalesced_waiters: self.coalesced_waiters.load(Relaxed),
            load_latency_mean: Duration::from_nanos(
                self.load_nanos
                    .load(Relaxed)
                    .checked_div(loads)
                    .unwrap_or(0),
            ),
            load_latency_max: Duration::from_nanos(self.load_nanos_max.load(Relaxed)),
        }
    }
}
