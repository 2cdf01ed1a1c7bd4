//! [`GuardStats`] and the counters behind it, mirrored to the `metrics` facade (the
//! `bloom_guard_*` series of [`crate::stats`]).

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use super::diagnose::Diagnosis;
use crate::SharedFilter;
#[cfg(feature = "metrics")]
use crate::stats::names;

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
    /// Requests whose key was [ambiguous](crate::key::Extracted::Ambiguous) (a value given
    /// more than once, the values differing): answered by the guard, nothing looked up. Not
    /// in `checked` nor `missing_key`; in `stats()` only, no metric series yet.
    pub ambiguous_key: u64,
}

crate::stats::series! {
    /// The counters behind [`GuardStats`]: those of one guard name. They hold no configuration;
    /// each event is passed the guard's name, which labels the series. A renamed guard gets new
    /// counters ([`BloomGuard::name`](crate::BloomGuard::name)), so every event of one
    /// `GuardCounters` passes the same name.
    pub(crate) struct GuardCounters {
        passed: AtomicU64,
        rejected: AtomicU64,
        missing_key: AtomicU64,
        ambiguous_key: AtomicU64,
        diagnosis: Diagnosis,
    }
    with GuardMetrics labelled "guard" {
        events {}
        series {
            checked: counter(names::GUARD_CHECKED),
            passed: counter(names::GUARD_PASSED),
            rejected: counter(names::GUARD_REJECTED),
            missing_key: counter(names::GUARD_MISSING_KEY),
        }
    }
}

// Without `metrics` the guard's name only labels the warnings of `rejected` and `missing_key`.
#[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
impl GuardCounters {
    /// The filter found the key maybe present.
    #[inline]
    pub(crate) fn passed(&self, guard: &str) {
        self.passed.fetch_add(1, Relaxed);
        #[cfg(feature = "metrics")]
        {
            let metrics = self.metrics(guard);
            metrics.checked.increment(1);
            metrics.passed.increment(1);
        }
    }

    /// The filter found the key definitely absent; warns if the guard seems to reject
    /// everyone (see [`Diagnosis`]).
    #[inline]
    pub(crate) fn rejected<K: ?Sized>(&self, guard: &str, filter: &SharedFilter<K>) {
        let rejected = self.rejected.fetch_add(1, Relaxed) + 1;
        #[cfg(feature = "metrics")]
        {
            let metrics = self.metrics(guard);
            metrics.checked.increment(1);
            metrics.rejected.increment(1);
        }
        self.diagnosis
            .after_rejection(guard, filter, rejected, || self.passed.load(Relaxed));
    }

    /// The extractor found no key; warns if it finds none in most requests (see
    /// [`Diagnosis`]).
    #[inline]
    pub(crate) fn missing_key(&self, guard: &str) {
        let missing = self.missing_key.fetch_add(1, Relaxed) + 1;
        #[cfg(feature = "metrics")]
        self.metrics(guard).missing_key.increment(1);
        let requests = missing + self.passed.load(Relaxed) + self.rejected.load(Relaxed);
        self.diagnosis.after_missing_key(guard, missing, requests);
    }

    /// The extractor found an ambiguous key; `unanswered`: neither policy had an answer of
    /// its own for it, so the rejection policy's answer went out (warned about once, see
    /// [`Diagnosis::after_unanswered_ambiguous_key`]).
    #[inline]
    pub(crate) fn ambiguous_key(&self, guard: &str, unanswered: bool) {
        let ambiguous = self.ambiguous_key.fetch_add(1, Relaxed) + 1;
        if unanswered {
            self.diagnosis
                .after_unanswered_ambiguous_key(guard, ambiguous);
        }
    }

    pub(crate) fn snapshot(&self) -> GuardStats {
        let passed = self.passed.load(Relaxed);
        let rejected = self.rejected.load(Relaxed);
        GuardStats {
            checked: passed + rejected,
            passed,
            rejected,
            missing_key: self.missing_key.load(Relaxed),
            ambiguous_key: self.ambiguous_key.load(Relaxed),
        }
    }
}
