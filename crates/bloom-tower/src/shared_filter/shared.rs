//! [`Shared`]: the state behind every clone of one [`SharedFilter`], and
//! how a rebuild's next filter is sized.

use std::borrow::Cow;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, PoisonError, RwLock, RwLockWriteGuard, Weak};
use std::time::Duration;

use arc_swap::{ArcSwap, ArcSwapOption};
use bloom_core::{AnyFilter, BloomFilter, BuildError, CuckooFilter, ScalableBloomFilter};
use tokio::sync::{Notify, watch};

use super::stats::FilterCounters;
#[cfg(doc)]
use super::{Building, PendingInsert, SharedFilter};
use super::{
    ExternalRebuild, ForgetByDigest, Generation, InsertHook, Rejection, RejectionOverride, pipeline,
};

/// False-positive rate for rebuilds when neither the builder nor the filter says one.
pub(super) const DEFAULT_FPR: f64 = 0.01;

/// The state behind every clone of one [`SharedFilter`].
pub(super) struct Shared {
    pub(super) name: Cow<'static, str>,
    /// The serving filter.
    pub(super) current: ArcSwap<Generation>,
    /// The filter a running rebuild is filling. See the module docs for why a lock.
    pub(super) building: RwLock<Option<Arc<Generation>>>,
    /// Held for a whole rebuild (or an external [`Building`]): one at a time.
    pub(super) rebuild: Arc<tokio::sync::Mutex<pipeline::Slot>>,
    /// Called with every inserted key's bytes, after the local writes (see
    /// [`SharedFilter::set_insert_hook`]).
    pub(super) hook: ArcSwapOption<InsertHook>,
    /// Asked before every rejection whether to let the key through instead (see
    /// [`SharedFilter::set_rejection_override`]).
    pub(super) rejection_override: ArcSwapOption<RejectionOverride>,
    /// Called with a key's bytes by a [`PendingInsert`] once its after-commit work is done
    /// (see [`SharedFilter::set_commit_hook`]).
    pub(super) commit_hook: ArcSwapOption<InsertHook>,
    /// Runs this filter's rebuilds instead of [`SharedFilter::reload_from`] when set (see
    /// [`SharedFilter::set_external_rebuild`]).
    pub(super) external: ArcSwapOption<Arc<dyn ExternalRebuild>>,
    /// [`SharedFilter::key_digest`]'s keyed hash: derived from the hash key of the filter
    /// this was built with, and kept when a rebuild rotates that key (instances rotate
    /// independently; their digests must still agree).
    pub(super) digest: siphasher::sip::SipHasher13,
    /// The caches built on this filter, for [`SharedFilter::forget_remote`]; weak, so a
    /// dropped cache is not kept alive (pruned when next touched).
    pub(super) caches: Mutex<Vec<Weak<dyn ForgetByDigest>>>,
    /// The number of the newest generation created; they are created and published one at a
    /// time (under `rebuild`), so a larger number means published later.
    pub(super) generations: AtomicU64,
    /// Keys to size rebuilt filters for; 0 when unknown. Doubles on auto-grow.
    pub(super) capacity: AtomicU64,
    pub(super) fpr: f64,
    pub(super) rotate_seed: bool,
    pub(super) auto_grow: bool,
    /// Wakes `rebuild_every` tasks early when auto-grow wants a bigger filter.
    pub(super) grow: Arc<Notify>,
    /// Dropped with the last handle, which stops the `rebuild_every` tasks.
    pub(super) closed: watch::Sender<()>,
    pub(super) counters: FilterCounters,
    pub(super) last_rebuild: Mutex<Option<(u64, Duration)>>,
    /// Where snapshots go: after every rebuild, by [`SharedFilter::save_every`] and
    /// [`SharedFilter::save_snapshot`].
    pub(super) snapshot: Option<PathBuf>,
}

impl Shared {
    /// A would-be rejection by a verifying filter: counted, and let through.
    #[cold]
    pub(super) fn let_through(&self) -> bool {
        self.counters.unverified_pass(&self.name);
        true
    }

    /// A would-be rejection: what the installed override makes of it (none: it stands).
    #[inline]
    pub(super) fn rejection(&self) -> Rejection {
        let gate = self.rejection_override.load();
        match gate.as_deref() {
            Some(gate) => gate(),
            None => Rejection::Stands,
        }
    }

    /// `generation`'s distinct keys ([`Generation::items`]); a count of keys that arrived as
    /// bits is published as the `bloom_filter_keys` gauge too.
    pub(super) fn items_of(&self, generation: &Generation) -> u64 {
        let (items, counted) = generation.items();
        if counted {
            self.counters.keys(&self.name, items);
        }
        items
    }

    /// A new, empty generation, numbered after every earlier one.
    pub(super) fn next_generation(&self, filter: AnyFilter) -> Generation {
        Generation::empty(filter, self.generations.fetch_add(1, Relaxed) + 1)
    }

    pub(super) fn write_building(&self) -> RwLockWriteGuard<'_, Option<Arc<Generation>>> {
        self.building
            .write()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// A fresh, empty filter for a rebuild: the current one's kind and layout (and hash key
    /// unless rotating), sized for the larger of the configured capacity and the source's
    /// count plus a quarter of headroom for the inserts until the next rebuild; with neither
    /// known, the current filter's exact shape (a scalable filter: its first stage's; a cuckoo
    /// filter: its buckets and fingerprint width).
    pub(super) fn next_filter(&self, count_hint: Option<u64>) -> Result<AnyFilter, BuildError> {
        let current = self.current.load();
        let seed = (!self.rotate_seed).then(|| current.filter.seed());
        let configured = Some(self.capacity.load(Relaxed)).filter(|&n| n > 0);
        let wanted = match (configured, count_hint.map(|n| n.saturating_add(n / 4))) {
            (Some(configured), Some(hinted)) => Some(configured.max(hinted)),
            (configured, hinted) => configured.or(hinted),
        };
        let mut builder =
            BloomFilter::builder().layout(current.filter.layout().unwrap_or_default());
        if let Some(seed) = seed {
            builder = builder.seed(seed);
        }
        let sized = |items: u64| {
            builder
                .clone()
                .expected_items(items.max(1))
                .false_positive_rate(self.fpr)
        };
        match (&current.filter, wanted) {
            (AnyFilter::Scalable(scalable), wanted) => {
                let first_stage = wanted.unwrap_or(scalable.initial_capacity()).max(1);
                let mut next = ScalableBloomFilter::builder(first_stage, self.fpr)
                    .layout(scalable.layout())
                    .growth_factor(scalable.growth_factor())
                    .tightening_ratio(scalable.tightening_ratio());
                if let Some(seed) = seed {
                    next = next.seed(seed);
                }
                next.build().map(AnyFilter::from)
            }
            (AnyFilter::Plain(_), Some(items)) => sized(items).build().map(AnyFilter::from),
            (AnyFilter::Counting(_), Some(items)) => {
                sized(items).build_counting().map(AnyFilter::from)
            }
            (AnyFilter::Plain(plain), None) => builder
                .bits(plain.num_bits())
                .hashes(plain.num_hashes())
                .build()
                .map(AnyFilter::from),
            (AnyFilter::Counting(counting), None) => builder
                .bits(counting.num_slots())
                .hashes(counting.num_hashes())
                .build_counting()
                .map(AnyFilter::from),
            (AnyFilter::Cuckoo(cuckoo), wanted) => {
                let next = CuckooFilter::builder();
                let next = match wanted {
                    Some(items) => next
                        .expected_items(items.max(1))
                        .false_positive_rate(self.fpr),
                    None => next
                        .buckets(cuckoo.num_buckets())
                        .fingerprint_bits(cuckoo.fingerprint_bits()),
                };
                match seed {
                    Some(seed) => next.seed(seed),
                    None => next,
                }
                .build()
                .map(AnyFilter::from)
            }
            // The source's keys go in as seen now: each rebuild restarts their window.
            (AnyFilter::Windowed(windowed), wanted) => {
                let next = windowed
                    .to_builder()
                    .expected_items(wanted.unwrap_or(windowed.expected_items()).max(1));
                match seed {
                    Some(seed) => next.seed(seed),
                    None => next,
                }
                .build()
                .map(AnyFilter::from)
            }
        }
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::SharedFilter;

    pub(in crate::shared_filter) fn seeded(n: u64) -> BloomFilter {
        BloomFilter::builder()
            .expected_items(n)
            .false_positive_rate(0.01)
            .seed(7)
            .build()
            .unwrap()
    }

    #[test]
    fn rebuild_sizing_takes_the_larger_of_capacity_and_hint() {
        let filter = SharedFilter::<u64>::new(seeded(1_000));
        let shared = &filter.shared;
        assert_eq!(shared.next_filter(None).unwrap().capacity(), Some(1_000));
        assert_eq!(
            shared.next_filter(Some(100)).unwrap().capacity(),
            Some(1_000)
        );
        assert_eq!(
            shared.next_filter(Some(8_000)).unwrap().capacity(),
            Some(10_000)
        );
        assert_eq!(shared.next_filter(None).unwrap().seed(), 7);
    }

    #[test]
    fn a_filter_sized_by_bits_is_rebuilt_in_the_same_shape() {
        let by_bits = BloomFilter::builder().bits(4096).hashes(3).seed(1).build();
        let filter = SharedFilter::<u64>::new(by_bits.unwrap());
        let next = filter.shared.next_filter(None).unwrap();
        let next = next.as_plain().unwrap();
        assert_eq!((next.num_bits(), next.num_hashes()), (4096, 3));
        let hinted = filter.shared.next_filter(Some(1_000)).unwrap();
        assert_eq!(hinted.capacity(), Some(1_250));
        assert_eq!(hinted.target_fpr(), Some(DEFAULT_FPR));
    }

    #[test]
    fn rotating_the_seed_draws_a_new_hash_key() {
        let filter = SharedFilter::<u64>::builder()
            .rotate_seed(true)
            .build(seeded(100));
        assert_ne!(filter.shared.next_filter(None).unwrap().seed(), 7);
    }
}
