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
    let (Some(capacity), Some(target)) = (filter.capacity(), filter.target_fpr()) else {
        return;
    };
    // current_fpr (another pass, per block) only when the count says it looks full.
    if estimated_items <= capacity as f64 * 1.05 {
        return;
    }
    let fpr = filter.current_fpr();
    if fpr > target * SATURATED {
        let _ = writeln!(
            io::stderr().lock(),
            "bloom: warning: {what} holds about {estimated_items:.0} distinct keys, more than \
             the {capacity} it was sized for: its false-positive rate is now {} (target {}); \
             rebuild it with a larger --items",
            fmt_rate(fpr),
            fmt_rate(target),
        );
    }
}
