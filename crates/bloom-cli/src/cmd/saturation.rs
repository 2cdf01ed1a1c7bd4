//! The warning a command prints when the filter it wrote holds more keys than it was sized for.

use std::io::{self, Write};

use bloom_core::BloomFilter;

use crate::args::fmt_rate;

/// How far above its target rate a filter's current rate must be to count as saturated: at
/// exactly its capacity a filter's rate scatters a few percent around the target.
pub const SATURATED: f64 = 1.1;

/// A one-line warning on stderr when `filter` holds more distinct keys than it was sized
/// for, so its false-positive rate is past the target. `estimated_items` is
/// [`BloomFilter::estimated_items`] (a pass over the bits), passed in so callers that also
/// report it count the bits once.
pub fn warn_if_saturated(filter: &BloomFilter, estimated_items: f64, what: &str) {
    warn_if_over_capacity(
        what,
        estimated_items,
        filter.capacity(),
        filter.target_fpr(),
        || filter.current_fpr(),
    );
}

/// [`warn_if_saturated`] for any kind of filter: `items` (estimated or exact) against the
/// `capacity` and `target` rate it was sized for (no warning when they are not recorded);
/// `current_fpr` is called only when `items` is past the capacity.
pub fn warn_if_over_capacity(
    what: &str,
    items: f64,
    capacity: Option<u64>,
    target: Option<f64>,
    current_fpr: impl FnOnce() -> f64,
) {
    let (Some(capacity), Some(target)) = (capacity, target) else {
        return;
    };
    // current_fpr (another pass, per block) only when the count says it looks full.
    if items <= capacity as f64 * 1.05 {
        return;
    }
    let fpr = current_fpr();
    if fpr > target * SATURATED {
        let _ = writeln!(
            io::stderr().lock(),
            "bloom: warning: {what} holds about {items:.0} distinct keys, more than \
             the {capacity} it was sized for: its false-positive rate is now {} (target {}); \
             rebuild it with a larger --items",
            fmt_rate(fpr),
            fmt_rate(target),
        );
    }
}
