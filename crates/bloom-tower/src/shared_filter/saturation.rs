//! Saturation: a filter holding more keys than it was sized for lets more and more absent
//! keys through. Detected cheaply on every insert (the distinct-key count passing the
//! capacity) and exactly by [`SharedFilter::check_saturation`] (a scan of the bits).

use std::sync::atomic::Ordering::Relaxed;

use super::{Generation, Shared, SharedFilter};

/// The fill of the serving filter, from [`SharedFilter::check_saturation`].
#[derive(Clone, Copy, Debug, PartialEq)]
#[non_exhaustive]
pub struct SaturationReport {
    /// Distinct keys, estimated from the set bits.
    pub estimated_items: f64,
    /// The number of keys the filter was sized for, if it was sized by count.
    pub capacity: Option<u64>,
    /// The false-positive rate its bits imply now.
    pub current_fpr: f64,
    /// The false-positive rate it was sized for.
    pub target_fpr: f64,
    /// `estimated_items > capacity` or `current_fpr > 2 × target_fpr`.
    pub saturated: bool,
}

impl SharedFilter {
    /// Scans the serving filter's bits (O(size); call it from a health check or a timer, not
    /// per request) and reports its fill. If it is saturated (more keys than its capacity, or
    /// a false-positive rate above twice the target) this also emits the saturation warning,
    /// unless this filter already did, and with auto-grow schedules a larger rebuild.
    pub fn check_saturation(&self) -> SaturationReport {
        let current = self.shared.current.load_full();
        let filter = &current.filter;
        let estimated_items = filter.estimated_items();
        let current_fpr = filter.current_fpr();
        let target_fpr = filter.target_fpr().unwrap_or(self.shared.fpr);
        let capacity = filter.capacity();
        let saturated = capacity.is_some_and(|capacity| estimated_items > capacity as f64)
            || current_fpr > 2.0 * target_fpr;
        if saturated {
            self.shared
                .report_saturation(&current, estimated_items, Some(current_fpr));
        }
        SaturationReport {
            estimated_items,
            capacity,
            current_fpr,
            target_fpr,
            saturated,
        }
    }
}

impl Shared {
    /// Warns (once per generation) that `generation` is saturated; with auto-grow, doubles the
    /// capacity for the next rebuild and wakes the `rebuild_every` task to run it now.
    pub(super) fn report_saturation(
        &self,
        generation: &Generation,
        items: f64,
        current_fpr: Option<f64>,
    ) {
        if generation.saturation_reported.swap(true, Relaxed) {
            return;
        }
        self.counters.saturated(&self.name);
        let filter = &generation.filter;
        tracing::warn!(
            filter = %self.name,
            items = items.round(),
            capacity = filter.capacity(),
            current_fpr,
            target_fpr = filter.target_fpr(),
            auto_grow = self.auto_grow,
            "bloom filter saturated: more absent keys get through than it was sized for; rebuild it larger",
        );
        if self.auto_grow {
            let base = filter
                .capacity()
                .map_or(items, |capacity| items.max(capacity as f64));
            // Float to int saturates, so an absurd estimate cannot wrap around.
            let doubled = (base * 2.0).ceil() as u64;
            self.capacity.fetch_max(doubled.max(1), Relaxed);
            self.grow.notify_one();
        }
    }
}
