//! The WARN a guard logs when it protects nothing: it rejects everyone (an empty filter, keys
//! of another form than the inserted ones), or its extractor finds no key in most requests;
//! and the one it logs when its policies have no answer of their own for an ambiguous key.
//!
//! Rule: a guard that answers every request the same way for a reason in its configuration
//! says so at WARN within its first [`SUSPICIOUS_REJECTIONS`] requests, not only at DEBUG.
//! Typed filters make the common key mismatches compile errors; these checks catch the rest
//! (a closure that formats keys differently, a filter that was never loaded, a
//! `.parse::<u128>()` of UUID text). Tests: `tests/typed_keys.rs` and
//! `tests/empty_filter_warning.rs`.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::time::{SystemTime, UNIX_EPOCH};

use bloom_core::AnyFilter;

use crate::shared_filter::SharedFilter;

/// How many checks, all rejected, make the guard suspect its keys.
pub(crate) const SUSPICIOUS_REJECTIONS: u64 = 100;

/// How often, at most, the guard repeats that its filter is empty.
const EMPTY_WARNING_EVERY_SECS: u64 = 60;

/// The requests one verdict on missing keys looks at (at least; see
/// [`Diagnosis::after_missing_key`]).
pub(crate) const MISSING_KEY_WINDOW: u64 = 100;

/// Requests without a key, in tenths of a window, from which the guard warns that it
/// protects nothing…
const MOSTLY_MISSING_TENTHS: u64 = 9;

/// …and up to which it counts as recovered, free to warn again.
const RECOVERED_TENTHS: u64 = 5;

/// What a guard has warned about already.
#[derive(Default)]
pub(crate) struct Diagnosis {
    /// Seconds since the epoch of the last "empty filter" warning; 0 before the first.
    empty_warned_at: AtomicU64,
    mismatch_warned: AtomicBool,
    /// The guard's request count when the current missing-key window opened.
    window_requests: AtomicU64,
    /// Its missing-key count then.
    window_missing: AtomicU64,
    /// Set by the "no key" warning, cleared by a window with few keys missing.
    missing_warned: AtomicBool,
    /// Set by the first ambiguous key neither policy had an answer for.
    ambiguous_warned: AtomicBool,
}

impl Diagnosis {
    /// After an ambiguous key that neither the rejection policy (a closure, or an `OnReject`
    /// without `on_ambiguous_key`) nor the missing-key policy (one that passes) answered, so
    /// the rejection policy's answer for an absent key went out: warns once, naming the fix.
    /// Test: `tests/ambiguous_keys.rs`
    /// `a_closure_rejection_on_a_pass_through_guard_is_told_the_key_is_ambiguous`.
    #[cold]
    pub(crate) fn after_unanswered_ambiguous_key(&self, guard: &str, ambiguous: u64) {
        if !self.ambiguous_warned.swap(true, Relaxed) {
            tracing::warn!(
                guard = %guard,
                ambiguous_key = ambiguous,
                "a request whose key is ambiguous (given more than once, the values differing) \
                 got the guard's rejection policy's answer, with a RejectedKey that is_ambiguous(): \
                 its on_reject closure has no answer of its own for that and its missing-key \
                 policy passes requests; answer it in the closure (a 400 when \
                 key.is_ambiguous()), or set .on_missing_key(StatusCode::BAD_REQUEST), or use an \
                 OnReject with on_ambiguous_key",
            );
        }
    }

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

    /// After the guard's `missing`-th request without a key, its `requests`-th in all. The
    /// requests since the window opened, once there are [`MISSING_KEY_WINDOW`] of them, are
    /// one verdict: at least [`MOSTLY_MISSING_TENTHS`] in ten without a key warns (once), at
    /// most [`RECOVERED_TENTHS`] in ten re-arms the warning. Only requests without a key
    /// close a window, so one spanning a healthy stretch counts as recovered.
    #[inline]
    pub(crate) fn after_missing_key(&self, guard: &str, missing: u64, requests: u64) {
        let opened = self.window_requests.load(Relaxed);
        if requests < opened + MISSING_KEY_WINDOW {
            return;
        }
        self.close_missing_window(guard, missing, requests, opened);
    }

    #[cold]
    fn close_missing_window(&self, guard: &str, missing: u64, requests: u64, opened: u64) {
        // One caller closes each window.
        if self
            .window_requests
            .compare_exchange(opened, requests, Relaxed, Relaxed)
            .is_err()
        {
            return;
        }
        let span = requests - opened;
        let without_key = missing
            .saturating_sub(self.window_missing.swap(missing, Relaxed))
            .min(span);
        if without_key * 10 >= span * MOSTLY_MISSING_TENTHS {
            if !self.missing_warned.swap(true, Relaxed) {
                tracing::warn!(
                    guard = %guard,
                    missing_key = without_key,
                    requests = span,
                    "the key extractor found no key in {without_key} of the last {span} requests: \
                     the guard protects nothing (they all go to its missing-key policy); check \
                     the extractor against the requests (text that .parse::<T>() cannot read, \
                     such as a UUID parsed as an integer, is no key; or another route, query or \
                     header), or layer the guard only on routes that carry the key",
                );
            }
        } else if without_key * 10 <= span * RECOVERED_TENTHS {
            self.missing_warned.store(false, Relaxed);
        }
    }

    /// The filter counts as empty only if its key count is 0 *and* it has no set bit: the
    /// count of a filter whose bits were OR-ed in (a `RedisSync` join or pull, `union_words`)
    /// comes from those bits, and any other way bits arrive without a count must not read as
    /// empty either (`empty_filter_warning.rs`:
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
