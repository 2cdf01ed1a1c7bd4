//! The filter's measured false-positive rate, counted where every lookup of it meets: a
//! [`BloomGuard`](crate::BloomGuard) in front of a [`GuardedCache`](crate::GuardedCache)
//! stops most absent keys before the cache sees them, so neither alone can tell the rate.

use super::SharedFilter;

impl<K: ?Sized> SharedFilter<K> {
    /// A lookup on behalf of a request that this filter answered "definitely absent".
    #[inline]
    pub(crate) fn count_rejection(&self) {
        let shared = &*self.shared;
        shared.counters.rejected(&shared.name, shared.fpr);
    }

    /// A lookup this filter let through for a key a cache's loader then did not find.
    #[cfg(feature = "guarded-cache")]
    pub(crate) fn count_false_positive(&self) {
        let shared = &*self.shared;
        shared.counters.false_positive(&shared.name, shared.fpr);
    }

    /// A cache that reports this filter's false positives was built on it.
    #[cfg(feature = "guarded-cache")]
    pub(crate) fn reports_false_positives(&self) {
        self.shared.counters.reports_false_positives();
    }

    /// [`FilterStats::measured_fpr`](crate::stats::FilterStats::measured_fpr), without the rest.
    #[cfg(feature = "guarded-cache")]
    pub(crate) fn measured_fpr(&self) -> Option<f64> {
        self.shared.counters.measured_fpr()
    }
}
