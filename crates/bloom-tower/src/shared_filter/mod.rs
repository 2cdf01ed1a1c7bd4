//! [`SharedFilter`]: the filter every guard reads, replaceable while it serves.
//!
//! # How a rebuild cannot lose a key
//!
//! The serving filter is an [`ArcSwap`]: lookups load it with no lock. A rebuild fills a new
//! filter off to the side and swaps it in; the danger is a key inserted *while* it runs, which
//! the source may not contain. So while a rebuild runs, its filter is published in `building`
//! and every insert writes both filters. `building` sits in a [`RwLock`] whose read side each
//! insert holds across *both* of its writes, and the rebuild takes the write side for the
//! only two moments that matter:
//!
//! 1. **publish**: `building = Some(next)`, before it calls
//!    [`KeySource::keys`](crate::KeySource::keys);
//! 2. **swap**: `current = next; building = None`, after the last key is streamed in.
//!
//! Every insert's critical section is therefore wholly before the publish, between the two, or
//! after the swap; there is no "read `building` as empty, then the swap happens" interleaving.
//!
//! * Before the publish: it returned before `keys()` was called, so the source yields the key
//!   (the [`KeySource`](crate::KeySource) contract) and the stream puts it into `next`.
//! * Between: it saw `building == Some(next)` and wrote `next` itself.
//! * After the swap: `next` is the current filter, which it wrote.
//!
//! So when `next` starts serving it holds every key inserted before or during the rebuild:
//! zero false negatives. Every insert also writes the current filter, so a rebuild that fails
//! or is dropped midway only has to unpublish `next` (a drop guard does) and the old filter
//! keeps serving with nothing lost. Lookups never take the lock: they read whichever filter is
//! current, and both the old and the new one hold every inserted key. Inserts pay one
//! uncontended read lock; the write side is held only for a pointer store, so inserts wait at
//! most that long and never for the stream.
//!
//! The alternative of OR-ing the old filter into the new one after the swap would also lose
//! nothing, but it would carry every deleted key over forever, and dropping deleted keys is
//! what rebuilds are for.
//!
//! # Which filter
//!
//! Any [`AnyFilter`]: a plain [`BloomFilter`] (the fastest, the smallest); a
//! [`ScalableBloomFilter`] when the number of keys is not
//! known up front (it adds stages as keys arrive, and a rebuild sizes the new one's first
//! stage for the source's count, so it goes back to one stage); or a
//! [`CountingBloomFilter`](bloom_core::CountingBloomFilter), 4× the memory, when deleted
//! records must stop passing the guard before the next rebuild ([`SharedFilter::remove`]).
//! Rebuilt filters are of the same kind.
//!
//! # Why a removal touches only the filter that served before the delete
//!
//! A counting filter can only lose a key safely if the key is in it: decrementing the
//! counters of a key that was never inserted takes counts other keys need, which is a false
//! negative. The filter serving before the record was deleted holds its key (the argument
//! above), so [`SharedFilter::remove`] decrements that one, and only while it still serves.
//! A filter being built, or swapped in since, may have read its source after the delete and
//! not hold the key, so a removal leaves it alone; at worst it keeps the deleted key as a
//! false positive until the rebuild after.
//!
//! Inserts have the mirror problem: the second insert after a commit (for a rebuild whose
//! source missed the open transaction) would count the key twice in a counting filter, and
//! one removal would no longer take it out. [`SharedFilter::insert_after_commit`] therefore
//! writes only the filters published since the first insert: none, unless a rebuild started
//! in between.

mod accuracy;
mod external;
mod follow;
mod pending;
mod pipeline;
mod rebuild;
mod remote;
mod saturation;
mod snapshot;
mod start;
pub(crate) mod stats;

use std::borrow::Cow;
use std::fmt;
use std::marker::PhantomData;
use std::ops::Deref;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, PoisonError, RwLock, RwLockWriteGuard, Weak};
use std::time::Duration;

use arc_swap::{ArcSwap, ArcSwapOption};
use bloom_core::{AnyFilter, BloomFilter, BuildError, Key, ScalableBloomFilter};
use tokio::sync::{Notify, watch};

use crate::key::{AnyKey, KeyFor};
use crate::key_source::Watermark;
use stats::{FilterCounters, FilterStats};

pub use external::{
    AlreadyBuilding, Building, ErasedKeySource, ExternalRebuild, InsertHook, RejectionOverride,
};
pub use follow::{Follow, Follower, MAX_BACKOFF};
#[cfg(feature = "guarded-cache")]
pub(crate) use pending::AfterCommit;
pub use pending::PendingInsert;
#[cfg(feature = "admin")]
pub(crate) use rebuild::Chain;
pub use rebuild::{BackgroundTask, ReloadError, ReloadErrorKind, Reloaded};
pub(crate) use remote::ForgetByDigest;
pub use saturation::SaturationReport;
pub use snapshot::{MergeRefused, MergedSnapshot, SnapshotError};
pub use start::Started;

/// False-positive rate for rebuilds when neither the builder nor the filter says one.
const DEFAULT_FPR: f64 = 0.01;

/// A Bloom filter shared by guards and writers, rebuilt and swapped with zero downtime.
///
/// Cloning is cheap (an `Arc`); every clone is the same filter. Lookups are lock-free.
///
/// * [`insert`](Self::insert) a key **before the write that creates its record becomes
///   visible** (before the commit): once readers can find the record, the guard must let
///   them through.
/// * [`reload_from`](Self::reload_from) rebuilds from a [`KeySource`](crate::KeySource) and swaps atomically;
///   inserts made meanwhile go into both filters, so no key inserted before or during a
///   rebuild is ever rejected afterwards (the [module docs](self) prove it).
///   [`rebuild_every`](Self::rebuild_every) does it periodically in the background.
/// * [`save`](Self::save) / [`load`](Self::load) snapshot it to disk for a fast restart.
///
/// ```
/// use bloom_tower::{BloomFilter, SharedFilter};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let filter = SharedFilter::<u64>::new(BloomFilter::new(100_000, 0.01)?);
/// filter.reload_from(&vec![1u64, 2, 3]).await?;
/// filter.insert(&4u64);                 // a record created after the load
/// assert!(filter.contains(&4u64));
/// assert!(!filter.contains(&5u64) || filter.check_saturation().current_fpr > 0.0);
/// # Ok(())
/// # }
/// ```
///
/// A transaction that is still open when a rebuild reads its source is not in that
/// snapshot: create records through [`prepare_insert`](Self::prepare_insert), whose
/// [`PendingInsert`] writes the key into any filter a rebuild published meanwhile once the
/// write is committed, even if the request is cancelled after the commit.
///
/// # What a restart guarantees
///
/// Start with [`SharedFilterBuilder::start`]: a snapshot is used only if it was made for this
/// filter (name, kind, layout, hash key), and only after the keys the source added since the
/// snapshot's watermark are read in. A snapshot that cannot be caught up serves *verifying*
/// (every would-be rejection is let through and counted in
/// [`FilterStats::unverified_passes`]) until a full rebuild swaps in;
/// [`rebuild_every`](Self::rebuild_every) starts that rebuild at once.
pub struct SharedFilter<K: ?Sized> {
    shared: Arc<Shared>,
    /// The key type is only a compile-time check: every handle is the same untyped filter.
    _key: PhantomData<fn(&K)>,
}

impl<K: ?Sized> Clone for SharedFilter<K> {
    fn clone(&self) -> Self {
        Self::from_shared(Arc::clone(&self.shared))
    }
}

/// The state behind every clone of one [`SharedFilter`].
struct Shared {
    name: Cow<'static, str>,
    /// The serving filter.
    current: ArcSwap<Generation>,
    /// The filter a running rebuild is filling. See the module docs for why a lock.
    building: RwLock<Option<Arc<Generation>>>,
    /// Held for a whole rebuild (or an external [`Building`]): one at a time.
    rebuild: Arc<tokio::sync::Mutex<pipeline::Slot>>,
    /// Called with every inserted key's bytes, after the local writes (see
    /// [`SharedFilter::set_insert_hook`]).
    hook: ArcSwapOption<InsertHook>,
    /// Asked before every rejection whether to let the key through instead (see
    /// [`SharedFilter::set_rejection_override`]).
    rejection_override: ArcSwapOption<RejectionOverride>,
    /// Called with a key's bytes by a [`PendingInsert`] once its after-commit work is done
    /// (see [`SharedFilter::set_commit_hook`]).
    commit_hook: ArcSwapOption<InsertHook>,
    /// Runs this filter's rebuilds instead of [`SharedFilter::reload_from`] when set (see
    /// [`SharedFilter::set_external_rebuild`]).
    external: ArcSwapOption<Arc<dyn ExternalRebuild>>,
    /// [`SharedFilter::key_digest`]'s keyed hash: derived from the hash key of the filter
    /// this was built with, and kept when a rebuild rotates that key (instances rotate
    /// independently; their digests must still agree).
    digest: siphasher::sip::SipHasher13,
    /// The caches built on this filter, for [`SharedFilter::forget_remote`]; weak, so a
    /// dropped cache is not kept alive (pruned when next touched).
    caches: Mutex<Vec<Weak<dyn ForgetByDigest>>>,
    /// The number of the newest generation created; they are created and published one at a
    /// time (under `rebuild`), so a larger number means published later.
    generations: AtomicU64,
    /// Keys to size rebuilt filters for; 0 when unknown. Doubles on auto-grow.
    capacity: AtomicU64,
    fpr: f64,
    rotate_seed: bool,
    auto_grow: bool,
    /// Wakes `rebuild_every` tasks early when auto-grow wants a bigger filter.
    grow: Arc<Notify>,
    /// Dropped with the last handle, which stops the `rebuild_every` tasks.
    closed: watch::Sender<()>,
    counters: FilterCounters,
    last_rebuild: Mutex<Option<(u64, Duration)>>,
    /// Where snapshots go: after every rebuild, by [`SharedFilter::save_every`] and
    /// [`SharedFilter::save_snapshot`].
    snapshot: Option<PathBuf>,
}

/// One filter and what is known about its fill.
struct Generation {
    filter: AnyFilter,
    /// Its place in publication order (see [`Inserted`]).
    number: u64,
    /// Distinct keys inserted (inserts that set at least one new bit).
    items: AtomicU64,
    /// Set once this generation's saturation has been reported.
    saturation_reported: AtomicBool,
    /// Loaded from a snapshot that could not be caught up with its source: it may miss keys,
    /// so a "definitely absent" from it is let through (see [`SharedFilter::contains`]).
    verifying: bool,
    /// The source position up to which every key is in this filter, if the source can say:
    /// what a snapshot of it records. Set by the rebuild that filled it, moved by catch-ups.
    watermark: Mutex<Option<Watermark>>,
}

impl Generation {
    fn empty(filter: AnyFilter, number: u64) -> Self {
        Self {
            filter,
            number,
            items: AtomicU64::new(0),
            saturation_reported: AtomicBool::new(false),
            verifying: false,
            watermark: Mutex::new(None),
        }
    }

    fn watermark(&self) -> Option<Watermark> {
        self.watermark
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn set_watermark(&self, watermark: Option<Watermark>) {
        *self
            .watermark
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = watermark;
    }

    /// A filter read from a snapshot: counted, and verifying or complete up to `watermark`.
    fn loaded(filter: AnyFilter, verifying: bool, watermark: Option<Watermark>) -> Self {
        let mut generation = Self::counted(filter);
        generation.verifying = verifying;
        generation.set_watermark(watermark);
        generation
    }

    /// A filter that may already hold keys: estimate how many from its bits (one scan).
    fn counted(filter: AnyFilter) -> Self {
        let estimate = filter.estimated_items();
        let generation = Self::empty(filter, 0);
        // An all-ones filter's estimate is infinite: count it as one key per bit (no filter
        // holds more distinct keys than bits), which also leaves room for the counter to grow.
        let estimate = estimate.min(generation.filter.num_bits() as f64);
        generation.items.store(estimate.round() as u64, Relaxed);
        generation
    }

    /// Inserts `key`; the new distinct-key count if it set a new bit.
    #[inline]
    fn insert<K: Key + ?Sized>(&self, key: &K) -> Option<u64> {
        self.filter
            .insert(key)
            .then(|| self.items.fetch_add(1, Relaxed) + 1)
    }

    fn is_over_capacity(&self, items: u64) -> bool {
        self.filter
            .capacity()
            .is_some_and(|capacity| items > capacity)
    }
}

impl<K: ?Sized> SharedFilter<K> {
    fn from_shared(shared: Arc<Shared>) -> Self {
        Self {
            shared,
            _key: PhantomData,
        }
    }

    /// The same filter, asked about and filled with keys of any type: for code that handles
    /// every filter alike (an admin page, a replication task) or a filter of mixed keys.
    ///
    /// ```
    /// use bloom_tower::{BloomFilter, SharedFilter, key::AnyKey};
    ///
    /// let orders = SharedFilter::<i64>::new(BloomFilter::new(1_000, 0.01)?);
    /// orders.insert(&42i64);
    /// let any: SharedFilter<AnyKey> = orders.untyped();
    /// assert!(any.contains(&42i64));
    /// # Ok::<(), bloom_core::BuildError>(())
    /// ```
    pub fn untyped(&self) -> SharedFilter<AnyKey> {
        SharedFilter::from_shared(Arc::clone(&self.shared))
    }

    /// Shares `filter` (a [`BloomFilter`], a [`CountingBloomFilter`](bloom_core::CountingBloomFilter)
    /// or a [`ScalableBloomFilter`]) with the default settings; see [`builder`](Self::builder)
    /// for the rest.
    ///
    /// Rebuilt filters are of the same kind, with the same layout and hash key, sized for
    /// `filter`'s capacity and false-positive rate (or for the source's count hint, if larger).
    pub fn new(filter: impl Into<AnyFilter>) -> Self {
        Self::builder().build(filter)
    }

    /// Configures a shared filter: name, rebuild sizing, auto-grow, hash key rotation.
    pub fn builder() -> SharedFilterBuilder<K> {
        SharedFilterBuilder::default()
    }

    /// `false`: `key` was definitely never inserted. `true`: it probably was. Lock-free.
    ///
    /// While the serving filter is *verifying* (a snapshot that could not be caught up with its
    /// source, see [`SharedFilterBuilder::start`]) it answers `true` for every key, and counts
    /// in [`FilterStats::unverified_passes`] the keys it would have rejected.
    #[inline]
    pub fn contains<Q: KeyFor<K> + ?Sized>(&self, key: &Q) -> bool {
        let current = self.shared.current.load();
        current.filter.contains(key)
            || (current.verifying && self.shared.let_through())
            || self.shared.doubt_rejection()
    }

    /// Whether the serving filter is a snapshot still waiting for a full rebuild (and so
    /// lets every key through); see [`contains`](Self::contains).
    pub fn is_verifying(&self) -> bool {
        self.shared.current.load().verifying
    }

    /// Adds `key`, to the serving filter and, while a rebuild runs, to the one it is building.
    ///
    /// Call it **before the write that creates the record becomes visible**, so that nobody
    /// can read the record while the guard still rejects its key; then, if rebuilds may run
    /// while writes are in flight, pass what it returns to
    /// [`insert_after_commit`](Self::insert_after_commit) once the write is committed.
    pub fn insert<Q: KeyFor<K> + ?Sized>(&self, key: &Q) -> Inserted {
        self.write(key, None)
    }

    /// Adds `key` to every filter published since `inserted` was returned by
    /// [`insert`](Self::insert): the ones a rebuild may have filled from a snapshot of the
    /// source taken before the record was committed (an open transaction is in no snapshot).
    /// Call it after the commit. It writes nothing when no rebuild started in between, so a
    /// [`CountingBloomFilter`](bloom_core::CountingBloomFilter) counts each record once and
    /// [`remove`](Self::remove) can take it out again.
    pub fn insert_after_commit<Q: KeyFor<K> + ?Sized>(&self, key: &Q, inserted: Inserted) {
        self.write(key, Some(inserted.newest));
    }

    /// Writes `key` into the serving and the building filter, or with `after`, into those of
    /// them published after generation `after`.
    fn write<Q: Key + ?Sized>(&self, key: &Q, after: Option<u64>) -> Inserted {
        let shared = &*self.shared;
        let is_new = |generation: &Generation| after.is_none_or(|n| generation.number > n);
        let (newest, wrote, became) = {
            // The read lock spans both writes: see the module docs.
            let building = shared
                .building
                .read()
                .unwrap_or_else(PoisonError::into_inner);
            let current = shared.current.load_full();
            let newest = building
                .as_deref()
                .map_or(current.number, |next| next.number.max(current.number));
            let mut wrote = false;
            if let Some(next) = building.as_deref().filter(|next| is_new(next)) {
                next.insert(key);
                wrote = true;
            }
            let became = if is_new(&current) {
                wrote = true;
                current.insert(key).map(|items| (current, items))
            } else {
                None
            };
            (newest, wrote, became)
        };
        let inserted = Inserted { newest };
        if !wrote {
            return inserted;
        }
        shared.counters.inserted();
        // After the local writes: whatever the hook forwards, this instance already answers
        // "maybe" for the key.
        if let Some(hook) = shared.hook.load().as_deref() {
            hook(key.key_bytes().as_ref());
        }
        // Reported outside the lock: a slow log subscriber must not delay a rebuild's swap.
        if let Some((current, items)) = became {
            if current.is_over_capacity(items) {
                shared.report_saturation(&current, items as f64, None);
            }
        }
        inserted
    }

    /// The serving filter's generation: take it **before** deleting a record, and pass it to
    /// [`remove`](Self::remove) after the delete is committed.
    pub fn generation(&self) -> FilterGeneration {
        FilterGeneration(self.shared.current.load().number)
    }

    /// Removes one insertion of `key` from a counting filter, so the guard rejects it again.
    /// Call it **after the delete of the record is committed** (the mirror of
    /// [`insert`](Self::insert)), with the [`generation`](Self::generation) taken before the
    /// delete, and only for a key that was inserted (a record that existed):
    ///
    /// ```
    /// # use bloom_tower::{CountingBloomFilter, shared_filter::RemoveOutcome, SharedFilter};
    /// # let filter = SharedFilter::<u64>::new(CountingBloomFilter::new(1_000, 0.01)?);
    /// # filter.insert(&7u64);
    /// let before = filter.generation();
    /// // DELETE FROM users WHERE id = 7 … committed, one row affected
    /// assert_eq!(filter.remove(&7u64, before)?, RemoveOutcome::Removed);
    /// assert!(!filter.contains(&7u64));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// A filter is only ever decremented for a key it holds: decrementing a key that is not
    /// in it takes counts other keys need (a false negative). The filter serving before the
    /// delete holds the key; one swapped in since may have been built after the delete, so
    /// then nothing is removed ([`RemoveOutcome::FilterReplaced`]: that rebuild dropped the
    /// key, or keeps it as a false positive until the next one). The
    /// [insert hook](Self::set_insert_hook) is not called: removals stay local.
    ///
    /// # Errors
    /// [`CannotRemove`] if the filter is a plain or a scalable one.
    pub fn remove<Q: KeyFor<K> + ?Sized>(
        &self,
        key: &Q,
        before_delete: FilterGeneration,
    ) -> Result<RemoveOutcome, CannotRemove> {
        let shared = &*self.shared;
        let current = shared.current.load();
        let filter = &current.filter;
        if filter.as_counting().is_none() {
            return Err(CannotRemove {
                kind: filter.kind(),
            });
        }
        if current.number != before_delete.0 {
            return Ok(RemoveOutcome::FilterReplaced);
        }
        if filter.remove(key) != Some(true) {
            return Ok(RemoveOutcome::Absent);
        }
        shared.counters.removed();
        // Keep the distinct-key estimate honest; never below zero.
        let _ = current
            .items
            .fetch_update(Relaxed, Relaxed, |n| n.checked_sub(1));
        Ok(RemoveOutcome::Removed)
    }

    /// Counters and state; cheap (no scan of the bits).
    pub fn stats(&self) -> FilterStats {
        let shared = &*self.shared;
        let current = shared.current.load();
        let rebuilding = shared
            .building
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .is_some();
        let last_rebuild = *shared
            .last_rebuild
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        shared
            .counters
            .snapshot(&shared.name, &current, last_rebuild, rebuilding)
    }

    /// Distinct keys in the serving filter (as in [`FilterStats::approx_items`]); one load.
    pub(crate) fn approx_items(&self) -> u64 {
        self.shared.current.load().items.load(Relaxed)
    }

    /// The name used in logs and as the `filter` metric label.
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    /// The serving filter, as of now (a later rebuild does not change what this returns).
    pub fn current(&self) -> CurrentFilter {
        CurrentFilter(self.shared.current.load_full())
    }
}

impl<K: ?Sized> fmt::Debug for SharedFilter<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SharedFilter")
            .field("name", &self.shared.name)
            .field("current", &self.shared.current.load().filter)
            .finish_non_exhaustive()
    }
}

/// The filter that was serving when [`SharedFilter::current`] was called.
pub struct CurrentFilter(Arc<Generation>);

impl Deref for CurrentFilter {
    type Target = AnyFilter;

    fn deref(&self) -> &AnyFilter {
        &self.0.filter
    }
}

/// Which filters one [`SharedFilter::insert`] wrote; for
/// [`SharedFilter::insert_after_commit`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Inserted {
    /// The newest generation written: every later one was published after the insert.
    newest: u64,
}

/// Which filter served when [`SharedFilter::generation`] was called; for
/// [`SharedFilter::remove`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FilterGeneration(u64);

/// What [`SharedFilter::remove`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum RemoveOutcome {
    /// The key's counts were taken out: lookups for it are rejected again (unless it collides
    /// with other keys, as any absent key may).
    Removed,
    /// The filter refused: the key is definitely absent already. Nothing changed.
    Absent,
    /// A rebuild swapped in another filter since the generation was taken; that one may not
    /// hold the key, so nothing was removed (see [`SharedFilter::remove`]).
    FilterReplaced,
}

/// [`SharedFilter::remove`] on a filter that cannot remove keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error(
    "a {kind} Bloom filter cannot remove keys; share a CountingBloomFilter to remove deleted keys"
)]
pub struct CannotRemove {
    kind: &'static str,
}

impl fmt::Debug for CurrentFilter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0.filter, f)
    }
}

impl Shared {
    /// A would-be rejection by a verifying filter: counted, and let through.
    #[cold]
    fn let_through(&self) -> bool {
        self.counters.unverified_pass(&self.name);
        true
    }

    /// A would-be rejection: whether the installed override lets it through.
    #[inline]
    fn doubt_rejection(&self) -> bool {
        let gate = self.rejection_override.load();
        gate.as_deref().is_some_and(|gate| gate())
    }

    /// A new, empty generation, numbered after every earlier one.
    fn next_generation(&self, filter: AnyFilter) -> Generation {
        Generation::empty(filter, self.generations.fetch_add(1, Relaxed) + 1)
    }

    fn write_building(&self) -> RwLockWriteGuard<'_, Option<Arc<Generation>>> {
        self.building
            .write()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// A fresh, empty filter for a rebuild: the current one's kind and layout (and hash key
    /// unless rotating), sized for the larger of the configured capacity and the source's
    /// count plus a quarter of headroom for the inserts until the next rebuild; with neither
    /// known, the current filter's exact shape (a scalable filter: its first stage's).
    fn next_filter(&self, count_hint: Option<u64>) -> Result<AnyFilter, BuildError> {
        let current = self.current.load();
        let seed = (!self.rotate_seed).then(|| current.filter.seed());
        let configured = Some(self.capacity.load(Relaxed)).filter(|&n| n > 0);
        let wanted = match (configured, count_hint.map(|n| n.saturating_add(n / 4))) {
            (Some(configured), Some(hinted)) => Some(configured.max(hinted)),
            (configured, hinted) => configured.or(hinted),
        };
        let mut builder = BloomFilter::builder().layout(current.filter.layout());
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
        }
    }
}

/// Configures a [`SharedFilter`]; from [`SharedFilter::builder`].
///
/// ```
/// use bloom_tower::{BloomFilter, SharedFilter};
///
/// let filter = SharedFilter::<u64>::builder()
///     .name("users")
///     .capacity(2_000_000)      // rebuilds size for at least this many keys
///     .false_positive_rate(0.001)
///     .auto_grow(true)          // saturated → next rebuild at double capacity
///     .build(BloomFilter::new(1_000_000, 0.001)?);
/// assert_eq!(filter.name(), "users");
/// # Ok::<(), bloom_core::BuildError>(())
/// ```
#[must_use]
pub struct SharedFilterBuilder<K: ?Sized> {
    _key: PhantomData<fn(&K)>,
    name: Option<Cow<'static, str>>,
    capacity: Option<u64>,
    fpr: Option<f64>,
    auto_grow: bool,
    rotate_seed: bool,
    snapshot: Option<PathBuf>,
    hash_key: Option<u128>,
}

impl<K: ?Sized> Default for SharedFilterBuilder<K> {
    fn default() -> Self {
        Self {
            _key: PhantomData,
            name: None,
            capacity: None,
            fpr: None,
            auto_grow: false,
            rotate_seed: false,
            snapshot: None,
            hash_key: None,
        }
    }
}

impl<K: ?Sized> Clone for SharedFilterBuilder<K> {
    fn clone(&self) -> Self {
        Self {
            _key: PhantomData,
            name: self.name.clone(),
            capacity: self.capacity,
            fpr: self.fpr,
            auto_grow: self.auto_grow,
            rotate_seed: self.rotate_seed,
            snapshot: self.snapshot.clone(),
            hash_key: self.hash_key,
        }
    }
}

impl<K: ?Sized> fmt::Debug for SharedFilterBuilder<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SharedFilterBuilder")
            .field("key", &std::any::type_name::<K>())
            .field("name", &self.name)
            .field("capacity", &self.capacity)
            .field("false_positive_rate", &self.fpr)
            .field("auto_grow", &self.auto_grow)
            .field("rotate_seed", &self.rotate_seed)
            .field("snapshot", &self.snapshot)
            .finish_non_exhaustive()
    }
}

impl<K: ?Sized> SharedFilterBuilder<K> {
    /// The name in logs and the `filter` metric label; `"default"` if not set.
    pub fn name(mut self, name: impl Into<Cow<'static, str>>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// The number of keys rebuilt filters are sized for at least (a source's count hint
    /// can raise it). Defaults to the initial filter's capacity.
    pub fn capacity(mut self, keys: u64) -> Self {
        self.capacity = Some(keys);
        self
    }

    /// The false-positive rate rebuilt filters are sized for. Defaults to the initial
    /// filter's, or 1% if it was sized by bits.
    pub fn false_positive_rate(mut self, p: f64) -> Self {
        self.fpr = Some(p);
        self
    }

    /// When the filter saturates, double the capacity for the next rebuild and wake the
    /// [`rebuild_every`](SharedFilter::rebuild_every) task to run it now. Off by default:
    /// saturation is then only reported.
    ///
    /// The next capacity is twice the larger of the saturated filter's capacity (for one sized
    /// by bits, the keys its bits hold at the rebuild rate) and its key count, at most 2³²
    /// keys (a larger configured capacity is kept, never raised further). A key count its bits
    /// cannot vouch for is ignored: an all-ones filter estimates +∞ keys, so growing from it
    /// just doubles the capacity (and doubles again if the rebuilt filter saturates too), and
    /// never asks for an unbuildable size that would fail every later rebuild.
    pub fn auto_grow(mut self, on: bool) -> Self {
        self.auto_grow = on;
        self
    }

    /// Give every rebuilt filter a fresh random hash key instead of keeping the current one.
    /// Off by default, since a key set with `BloomFilter::builder().seed(..)` is usually meant
    /// to stay; turn it on to shake off anyone who has learned keys that collide.
    pub fn rotate_seed(mut self, on: bool) -> Self {
        self.rotate_seed = on;
        self
    }

    /// Where this filter's snapshot lives: [`start`](Self::start) loads it, every rebuild and
    /// [`SharedFilter::save_every`] / [`SharedFilter::save_snapshot`] write it (atomically).
    /// The file holds the secret hash key: keep it private.
    pub fn snapshot(mut self, path: impl Into<PathBuf>) -> Self {
        self.snapshot = Some(path.into());
        self
    }

    /// The hash key a snapshot must have been made with to be loaded by
    /// [`start`](Self::start): set it when the key is configured (shared between instances,
    /// or rotated on purpose). Without it a snapshot's own key is kept, which is what a filter
    /// with a random key needs across restarts.
    pub fn require_hash_key(mut self, seed: u128) -> Self {
        self.hash_key = Some(seed);
        self
    }

    /// Shares `filter` (any kind: see [`SharedFilter::new`]). Its bits are scanned once to
    /// estimate how many keys it holds.
    pub fn build(self, filter: impl Into<AnyFilter>) -> SharedFilter<K> {
        self.build_generation(Generation::counted(filter.into()))
    }

    fn build_generation(self, generation: Generation) -> SharedFilter<K> {
        let filter = &generation.filter;
        let capacity = self.capacity.or(filter.capacity()).unwrap_or(0);
        let fpr = self.fpr.or(filter.target_fpr()).unwrap_or(DEFAULT_FPR);
        let digest = remote::digester(filter.seed());
        let (closed, _) = watch::channel(());
        SharedFilter::from_shared(Arc::new(Shared {
            name: self.name.unwrap_or(Cow::Borrowed("default")),
            current: ArcSwap::from_pointee(generation),
            building: RwLock::new(None),
            rebuild: Arc::new(tokio::sync::Mutex::new(pipeline::Slot::default())),
            hook: ArcSwapOption::empty(),
            rejection_override: ArcSwapOption::empty(),
            commit_hook: ArcSwapOption::empty(),
            external: ArcSwapOption::empty(),
            digest,
            caches: Mutex::new(Vec::new()),
            generations: AtomicU64::new(0),
            capacity: AtomicU64::new(capacity),
            fpr,
            rotate_seed: self.rotate_seed,
            auto_grow: self.auto_grow,
            grow: Arc::new(Notify::new()),
            closed,
            counters: FilterCounters::default(),
            last_rebuild: Mutex::new(None),
            snapshot: self.snapshot,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seeded(n: u64) -> BloomFilter {
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

    #[test]
    fn a_prefilled_filter_is_counted_from_its_bits() {
        let prefilled = seeded(10_000);
        for key in 0..1_000u64 {
            prefilled.insert(&key);
        }
        let stats = SharedFilter::<u64>::new(prefilled).stats();
        assert!((950..1_050).contains(&stats.approx_items), "{stats:?}");
    }
}
