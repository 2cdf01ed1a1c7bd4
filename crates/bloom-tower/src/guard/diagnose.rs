//! The WARN a guard logs when it rejects everyone: an empty filter, or keys of another form.
//!
//! A key-type mismatch (`path_param("id")` yields the text `"42"`, the filter holds the
//! integer `42`) once rejected every existing id with only DEBUG logs. Typed filters make the
//! common cases compile errors; these checks catch the rest (a closure that formats keys
//! differently, a filter that was never loaded) at the first requests, where an operator
//! looks.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::time::{SystemTime, UNIX_EPOCH};

use bloom_core::AnyFilter;

use crate::shared_filter::SharedFilter;

/// How many checks, all rejected, make the guard suspect its keys.
pub(crate) const SUSPICIOUS_REJECTIONS: u64 = 100;

/// How often, at most, the guard repeats that its filter is empty.
const EMPTY_WARNING_EVERY_SECS: u64 = 60;

/// What a guard has warned about already.
#[derive(Default)]
pub(crate) struct Diagnosis {
    /// Seconds since the epoch of the last "empty filter" warning; 0 before the first.
    empty_warned_at: AtomicU64,
    mismatch_warned: AtomicBool,
}

impl Diagnosis {
    /// After the guard's `rejected`-th rejection (`passed`: how many it let through). Cheap
    /// on the common path: it reads the filter only at the first rejection, every 1024th, and
    /// at the [`SUSPICIOUS_REJECTIONS`]th while nothing has passed.
    #[inline]
    pub(crate) fn after_rejection<K: ?Sized>(
        &self,
        guard: &str,
        filter: &SharedFilter<K>,
        rejected: u64,
        passed: impl FnOnce() -> u64,
    ) {
        let suspicious = rejected == SUSPICIOUS_REJECTIONS && passed() == 0;
        if rejected != 1 && rejected % 1024 != 0 && !suspicious {
            return;
        }
        self.diagnose(guard, filter, suspicious);
    }

    /// The filter counts as empty only if its key counter is 0 *and* it has no set bit:
    /// bits OR-ed straight into the bit array (a `RedisSync` join or pull, `union_words`)
    /// leave the counter at 0 (`empty_filter_warning.rs`:
    /// `a_filter_filled_through_its_bit_array_is_not_reported_empty`). The bits are only
    /// looked at when the counter is 0 and a warning is due: at most one full scan of an
    /// empty filter per [`EMPTY_WARNING_EVERY_SECS`], and a filled one stops at its first
    /// non-zero word.
    #[cold]
    fn diagnose<K: ?Sized>(&self, guard: &str, filter: &SharedFilter<K>, suspicious: bool) {
        let mut keys = filter.approx_items();
        if keys == 0 {
            let now = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(1, |since| since.as_secs().max(1));
            let last = self.empty_warned_at.load(Relaxed);
            let due = last == 0 || now >= last + EMPTY_WARNING_EVERY_SECS;
            if !due && !suspicious {
                return;
            }
            let current = filter.current();
            if !holds_bits(&current) {
                if due
                    && self
                        .empty_warned_at
                        .compare_exchange(last, now, Relaxed, Relaxed)
                        .is_ok()
                {
                    tracing::warn!(
                        guard = %guard,
                        filter = %filter.name(),
                        "the guard's filter holds no keys, so it rejects every request: load it \
                         (SharedFilterBuilder::start, reload_from) before serving, or check that \
                         the key source is not empty",
                    );
                }
                return;
            }
            if !suspicious || self.mismatch_warned.load(Relaxed) {
                return;
            }
            // Once per guard (the SUSPICIOUS_REJECTIONS-th rejection): one scan to count.
            keys = current
                .estimated_items()
                .clamp(1.0, current.num_bits() as f64)
                .round() as u64;
        }
        if suspicious && !self.mismatch_warned.swap(true, Relaxed) {
            tracing::warn!(
                guard = %guard,
                filter = %filter.name(),
                filter_keys = keys,
                checks = SUSPICIOUS_REJECTIONS,
                "the guard rejected every one of its first {SUSPICIOUS_REJECTIONS} checks against a \
                 filter of about {keys} keys: the extractor likely yields keys of another form than \
                 the ones inserted (the text \"42\" is not the integer 42: extract with \
                 .parse::<T>() for the type you insert; or another part of the request, or \
                 differently formatted text)",
            );
        }
    }
}

/// Whether `filter` has any set bit (any non-zero counter, for a counting filter). A plain
/// filter stops at its first non-zero word; the other kinds count every bit.
fn holds_bits(filter: &AnyFilter) -> bool {
    match filter.as_plain() {
        Some(plain) => plain.words().any(|word| word != 0),
        None => filter.fill_ratio() > 0.0,
    }
}
