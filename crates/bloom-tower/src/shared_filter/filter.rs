//! [`SharedFilter`]: the handle every guard and writer holds; lookups, inserts, stats.

use std::fmt;
use std::marker::PhantomData;
use std::sync::{Arc, PoisonError};
use std::time::Duration;

use bloom_core::{AnyFilter, Key};

use super::{
    Confirmation, CurrentFilter, Generation, Insert, Rejection, Shared, SharedFilterBuilder,
};
use crate::key::{AnyKey, KeyFor};
use crate::shared_filter::stats::FilterStats;

/// How often, at most, [`SharedFilter::current`] counts bits merged in since the last count.
const RECOUNT_EVERY: Duration = Duration::from_secs(1);

/// A Bloom filter shared by guards and writers, rebuilt and swapped with zero downtime.
///
/// Cloning is cheap (an `Arc`); every clone is the same filter. Lookups are lock-free.
///
/// * [`insert`](Self::insert) a key **before the write that creates its record becomes
///   visible** (before the commit): once readers can find the record, the guard must let
///   them through.
/// * [`reload_from`](Self::reload_from) rebuilds from a [`KeySource`](crate::KeySource) and swaps atomically;
///   inserts made meanwhile go into both filters, so no key inserted before or during a
///   rebuild is ever rejected afterwards (the [module docs](super) prove it).
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
/// [`PendingInsert`](super::PendingInsert) writes the key into any filter a rebuild published meanwhile once the
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
    pub(super) shared: Arc<Shared>,
    /// The key type is only a compile-time check: every handle is the same untyped filter.
    pub(super) _key: PhantomData<fn(&K)>,
}

impl<K: ?Sized> Clone for SharedFilter<K> {
    fn clone(&self) -> Self {
        Self::from_shared(Arc::clone(&self.shared))
    }
}

impl<K: ?Sized> SharedFilter<K> {
    pub(super) fn from_shared(shared: Arc<Shared>) -> Self {
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

    /// Shares `filter` (a [`BloomFilter`](bloom_core::BloomFilter), a
    /// [`CountingBloomFilter`](bloom_core::CountingBloomFilter) or a
    /// [`ScalableBloomFilter`](bloom_core::ScalableBloomFilter)) with the default settings; see [`builder`](Self::builder)
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
    /// in [`FilterStats::unverified_passes`] the keys it would have rejected. So does a
    /// [`CuckooFilter`](bloom_core::CuckooFilter) that refused an insert for want of room
    /// ([`FilterStats::full`]) until a rebuild replaces it: it misses that key.
    ///
    /// A filter synchronised with other instances (bloom-redis) may have a would-be rejection
    /// wait for proof that its view is current ([`Rejection::Confirm`]): `contains` cannot
    /// wait, and answers `true` then. [`check`](Self::check) waits; the guard and
    /// `GuardedCache` use it.
    #[inline]
    pub fn contains<Q: KeyFor<K> + ?Sized>(&self, key: &Q) -> bool {
        !matches!(self.admission(key), Admission::Absent)
    }

    /// [`contains`](Self::contains), waiting where a would-be rejection asks to be confirmed
    /// ([`Rejection::Confirm`]): then the filter is looked at again once the view is proved
    /// current, and a key that arrived meanwhile is found. Without such an override it
    /// answers at once, as `contains` does.
    ///
    /// ```
    /// # use bloom_tower::{BloomFilter, SharedFilter};
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    /// let filter = SharedFilter::<u64>::new(BloomFilter::new(1_000, 0.01)?);
    /// filter.insert(&7u64);
    /// assert!(filter.check(&7u64).await);
    /// # Ok::<(), bloom_core::BuildError>(())
    /// # }).unwrap();
    /// ```
    pub async fn check<Q: KeyFor<K> + ?Sized>(&self, key: &Q) -> bool {
        match self.admission(key) {
            Admission::Maybe => true,
            Admission::Absent => false,
            Admission::Confirm(confirmation) => !confirmation.await || self.holds(key),
        }
    }

    /// What the local filter and the rejection override make of `key`.
    #[inline]
    pub(crate) fn admission<Q: KeyFor<K> + ?Sized>(&self, key: &Q) -> Admission {
        if self.holds(key) {
            return Admission::Maybe;
        }
        match self.shared.rejection() {
            Rejection::Stands => Admission::Absent,
            Rejection::LetThrough => Admission::Maybe,
            Rejection::Confirm(confirmation) => Admission::Confirm(confirmation),
        }
    }

    /// What the rejection override makes of an "absent" answer about to be given (a cache's
    /// negative entry, say): [`Rejection::Stands`] without one.
    #[cfg(feature = "guarded-cache")]
    #[inline]
    pub(crate) fn rejection(&self) -> Rejection {
        self.shared.rejection()
    }

    /// Whether the serving filter answers "maybe": it holds the key, or lets every key through
    /// (verifying, or a full cuckoo filter).
    #[inline]
    pub(crate) fn holds<Q: KeyFor<K> + ?Sized>(&self, key: &Q) -> bool {
        let current = self.shared.current.load();
        current.filter.contains(key)
            || (current.verifying && self.shared.let_through())
            || current.is_full()
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
    pub(super) fn write<Q: Key + ?Sized>(&self, key: &Q, after: Option<u64>) -> Inserted {
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
                if next.insert(key) == Insert::Refused {
                    shared.counters.refused_insert(&shared.name);
                }
                wrote = true;
            }
            let became = if is_new(&current) {
                wrote = true;
                match current.insert(key) {
                    Insert::New(items) => Some((current, Some(items))),
                    Insert::Known => None,
                    Insert::Refused => {
                        shared.counters.refused_insert(&shared.name);
                        Some((current, None))
                    }
                }
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
        match became {
            Some((current, Some(items))) if current.is_over_capacity(items) => {
                shared.report_saturation(&current, items as f64, None);
            }
            Some((current, None)) => shared.report_full(&current),
            _ => {}
        }
        inserted
    }

    /// Counters and state; cheap: no scan of the bits, but one after bits were merged in from
    /// elsewhere, to estimate the keys that arrived as bits ([`FilterStats::approx_items`]).
    pub fn stats(&self) -> FilterStats {
        let shared = &*self.shared;
        let current = shared.current.load();
        shared.items_of(&current);
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

    /// Distinct keys in the serving filter (as in [`FilterStats::approx_items`]): one load, or
    /// one scan of the bits after bits were merged in.
    pub(crate) fn approx_items(&self) -> u64 {
        self.shared.items_of(&self.shared.current.load())
    }

    /// The name used in logs and as the `filter` metric label.
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    /// The serving filter, as of now (a later rebuild does not change what this returns).
    ///
    /// A replication layer merges bits through it (`union_words`): with bits merged since the
    /// last count, at most once a second it counts the bits again (one scan) and
    /// publishes the estimate as the `bloom_filter_keys` gauge, so the gauge follows keys that
    /// arrive as bits without anyone reading [`stats`](Self::stats).
    pub fn current(&self) -> CurrentFilter {
        let current = self.shared.current.load_full();
        if let Some(items) = current.items_every(RECOUNT_EVERY) {
            self.shared.counters.keys(&self.shared.name, items);
        }
        CurrentFilter(current)
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

/// What a lookup on behalf of a request found ([`SharedFilter::admission`]).
#[derive(Debug)]
pub(crate) enum Admission {
    /// Maybe present (or let through): call the service.
    Maybe,
    /// Definitely absent: the rejection stands.
    Absent,
    /// Absent here; wait for the confirmation, then look again
    /// ([`Rejection::Confirm`]).
    Confirm(Confirmation),
}

/// Which filters one [`SharedFilter::insert`] wrote; for
/// [`SharedFilter::insert_after_commit`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Inserted {
    /// The newest generation written: every later one was published after the insert.
    pub(super) newest: u64,
}
