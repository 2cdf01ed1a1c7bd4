//! Saturation: a filter holding more keys than it was sized for lets more and more absent
//! keys through. Detected cheaply on every insert (the distinct-key count passing the
//! capacity) and exactly by [`SharedFilter::check_saturation`] (a scan of the bits).

use std::f64::consts::LN_2;
use std::sync::atomic::Ordering::Relaxed;

use super::{Generation, Shared, SharedFilter};

/// The most keys [auto-grow](crate::shared_filter::SharedFilterBuilder::auto_grow) sizes a rebuild for:
/// 2³² (about 4.3 billion keys, 5 GiB of bits at a 1% false-positive rate). Any rate
/// bloom-core can build (at most 64 probes, so at most 64 / ln 2 ≈ 92 bits per key) fits that
/// many keys well within its largest filter, [`MAX_BITS`](bloom_core::params::MAX_BITS). A
/// larger configured capacity is kept; auto-grow only never asks for more.
pub(super) const MAX_AUTO_GROW_CAPACITY: u64 = 1 << 32;

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

impl<K: ?Sized> SharedFilter<K> {
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
            let grown = grown_capacity(items, filter.capacity(), filter.num_bits(), self.fpr);
            self.capacity.fetch_max(grown, Relaxed);
            self.grow.notify_one();
        }
    }
}

impl Shared {
    /// Logs (once per generation, at `error`) that a cuckoo filter refused an insert for want
    /// of room and now lets every key through, and counts it as the generation's saturation:
    /// with auto-grow, the next rebuild is sized larger and runs now.
    pub(super) fn report_full(&self, generation: &Generation) {
        if generation.saturation_reported.load(Relaxed) {
            return;
        }
        let filter = &generation.filter;
        tracing::error!(
            filter = %self.name,
            items = filter.estimated_items(),
            capacity = filter.capacity(),
            auto_grow = self.auto_grow,
            "cuckoo filter full: an insert found no room, so the filter lets every key through until a rebuild replaces it; rebuild it larger",
        );
        self.report_saturation(generation, filter.estimated_items(), None);
    }
}

/// The capacity auto-grow asks the next rebuild for, when a filter of `num_bits` bits, sized
/// for `capacity` keys (`None`: sized by bits, or scalable), holds `items` keys by its own
/// count or estimate; `fpr` is the rate rebuilds are sized for.
///
/// Twice the larger of the filter's capacity (or the keys its bits hold at `fpr`) and
/// `items`, within `1 ..= MAX_AUTO_GROW_CAPACITY`.
/// `items` only counts when it is finite and at most `m · ln m`, the largest estimate bits
/// with a single one still clear can give: an all-ones filter estimates +∞ keys, and a count
/// taken from one saturates at `u64::MAX`, which say only "more than the bits can tell", not
/// how many. Growth then doubles the capacity, and a next generation still saturated reports
/// (and doubles) again, so it still converges geometrically, and a source's count hint sizes
/// the rebuild directly anyway.
fn grown_capacity(items: f64, capacity: Option<u64>, num_bits: u64, fpr: f64) -> u64 {
    let bits = num_bits as f64;
    let credible = bits * bits.ln().max(1.0);
    // `!(x <= credible)` is also true for NaN.
    let items = if items.is_finite() && items <= credible {
        items
    } else {
        0.0
    };
    let bits_per_key = -fpr.ln() / (LN_2 * LN_2);
    let sized_for = capacity.map_or(bits / bits_per_key, |capacity| capacity as f64);
    // Float to int saturates (and NaN is 0), and the clamp bounds both ends.
    let doubled = (items.max(sized_for) * 2.0).ceil() as u64;
    doubled.clamp(1, MAX_AUTO_GROW_CAPACITY)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_infinite_or_absurd_count_grows_from_the_capacity() {
        // A 100-key filter at 1%: 959 bits.
        for items in [f64::INFINITY, f64::NAN, u64::MAX as f64, 1e30, -1.0] {
            assert_eq!(grown_capacity(items, Some(100), 959, 0.01), 200, "{items}");
        }
        // A credible estimate above the capacity is grown from.
        assert_eq!(grown_capacity(1_000.0, Some(100), 959, 0.01), 2_000);
        assert_eq!(grown_capacity(150.4, Some(100), 959, 0.01), 301);
    }

    #[test]
    fn a_filter_sized_by_bits_grows_from_what_its_bits_hold() {
        // 9_586 bits hold 1_000 keys at 1%.
        let grown = grown_capacity(f64::INFINITY, None, 9_586, 0.01);
        assert!((1_999..=2_001).contains(&grown), "{grown}");
        assert_eq!(grown_capacity(0.0, None, 0, 0.01), 1);
    }

    #[test]
    fn growth_is_clamped_to_a_buildable_maximum() {
        let huge = u64::MAX / 4;
        for items in [1e12, u64::MAX as f64, f64::INFINITY] {
            assert_eq!(
                grown_capacity(items, Some(huge), 1 << 40, 0.01),
                MAX_AUTO_GROW_CAPACITY
            );
        }
        // The maximum builds at the usual rates and at 1e-18 (60 probes, near the 64 limit).
        for p in [0.01, 1e-18] {
            let bits = bloom_core::params::optimal(MAX_AUTO_GROW_CAPACITY, p)
                .unwrap()
                .bits;
            assert!(bits <= bloom_core::params::MAX_BITS / 2, "{p}: {bits}");
        }
        // Nonsense rates still give a value in range rather than a panic.
        for fpr in [0.0, 1.0, f64::NAN, -1.0] {
            for capacity in [Some(100), None] {
                let grown = grown_capacity(f64::INFINITY, capacity, 959, fpr);
                assert!(
                    (1..=MAX_AUTO_GROW_CAPACITY).contains(&grown),
                    "{fpr}: {grown}"
                );
            }
        }
    }
}
