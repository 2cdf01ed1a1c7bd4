//! [`SharedFilterBuilder`]: a shared filter's name, rebuild sizing, auto-grow and snapshot.

use std::borrow::Cow;
use std::fmt;
use std::marker::PhantomData;
use std::path::PathBuf;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, RwLock};

use arc_swap::{ArcSwap, ArcSwapOption};
use bloom_core::AnyFilter;
use tokio::sync::{Notify, watch};

use super::shared::DEFAULT_FPR;
use super::stats::FilterCounters;
use super::{Generation, Shared, SharedFilter, pipeline, remote};

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
    pub(super) _key: PhantomData<fn(&K)>,
    pub(super) name: Option<Cow<'static, str>>,
    pub(super) capacity: Option<u64>,
    pub(super) fpr: Option<f64>,
    pub(super) auto_grow: bool,
    pub(super) rotate_seed: bool,
    pub(super) snapshot: Option<PathBuf>,
    pub(super) hash_key: Option<u128>,
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
    crate::setters::setters! {
        /// The name in logs and the `filter` metric label; `"default"` if not set.
        pub fn name(name: impl Into<Cow<'static, str>>) => name = Some(name.into());

        /// The number of keys rebuilt filters are sized for at least (a source's count hint
        /// can raise it). Defaults to the initial filter's capacity.
        pub fn capacity(keys: u64) => capacity = Some(keys);

        /// The false-positive rate rebuilt filters are sized for. Defaults to the initial
        /// filter's, or 1% if it was sized by bits.
        pub fn false_positive_rate(p: f64) => fpr = Some(p);

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
        pub fn auto_grow(on: bool) => auto_grow = on;

        /// Give every rebuilt filter a fresh random hash key instead of keeping the current one.
        /// Off by default, since a key set with `BloomFilter::builder().seed(..)` is usually meant
        /// to stay; turn it on to shake off anyone who has learned keys that collide.
        pub fn rotate_seed(on: bool) => rotate_seed = on;

        /// Where this filter's snapshot lives: [`start`](Self::start) loads it, every rebuild and
        /// [`SharedFilter::save_every`] / [`SharedFilter::save_snapshot`] write it (atomically).
        /// The file holds the secret hash key: keep it private.
        pub fn snapshot(path: impl Into<PathBuf>) => snapshot = Some(path.into());

        /// The hash key a snapshot must have been made with to be loaded by
        /// [`start`](Self::start): set it when the key is configured (shared between instances,
        /// or rotated on purpose). Without it a snapshot's own key is kept, which is what a filter
        /// with a random key needs across restarts.
        pub fn require_hash_key(seed: u128) => hash_key = Some(seed);
    }

    /// Shares `filter` (any kind: see [`SharedFilter::new`]). Its bits are scanned once to
    /// estimate how many keys it holds.
    pub fn build(self, filter: impl Into<AnyFilter>) -> SharedFilter<K> {
        self.build_generation(Generation::counted(filter.into()))
    }

    pub(super) fn build_generation(self, generation: Generation) -> SharedFilter<K> {
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
