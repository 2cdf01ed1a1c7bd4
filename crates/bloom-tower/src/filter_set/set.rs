//! [`FilterSet`]: the operations, the load of an absent key, eviction under the budget, and
//! flushes.

use std::fmt::{self, Display};
use std::hash::Hash;
use std::sync::Arc;
use std::time::Instant;

use bloom_core::windowed::RingLayout;
use bloom_core::{AnyFilter, DecodeError, Key};
use futures_util::{StreamExt as _, stream};
use tokio::sync::Semaphore;

use super::builder::FilterSetBuilder;
use super::error::FilterSetError;
use super::slots::{self, Entry, EvictGuard, Found, LoadGuard, Peek, Slots};
use super::stats::{Counters, FilterSetStats};
use super::store::{FilterStore, StoreError};

/// Entries whose copy went to the store and has not been acknowledged: dropped before their
/// store turns are released (on an error, or with a cancelled flush), it marks them changed
/// again, so a later flush stores them (`a_cancelled_flush_leaves_its_filters_to_the_next`).
struct Unstored<'a>(Vec<&'a Arc<Entry>>);

impl Drop for Unstored<'_> {
    fn drop(&mut self) {
        for entry in &self.0 {
            entry.mark_dirty();
        }
    }
}

pub(crate) type NewFilter<K> = Arc<dyn Fn(&K) -> AnyFilter + Send + Sync>;
pub(crate) type Decode = Arc<dyn Fn(&[u8]) -> Result<AnyFilter, DecodeError> + Send + Sync>;

/// The most stores (to the [`FilterStore`]) a set runs at once, flushes and evictions
/// together: a flush stores this many filters at a time, and evictions by concurrent loads
/// run side by side up to it.
pub(crate) const MAX_CONCURRENT_STORES: usize = 8;

/// What an entry takes beyond its filters' bits: the entry, its place in the table and the
/// LRU list.
const ENTRY_OVERHEAD_BYTES: usize = 256;
/// What each plain filter inside a filter takes beyond its bits: a windowed filter whose ring
/// is separate holds `generations + 1`, each its own allocation; an interleaved ring counts
/// two (its one allocation of bits, and the ring's own bookkeeping).
const SUB_FILTER_OVERHEAD_BYTES: usize = 256;

/// The bytes a filter counts against a [`FilterSet`]'s budget (plus its key's name): its bits,
/// and an upper bound of the heap its structures and its place in the set take (guarded by
/// `tests/filter_set_memory.rs` `the_budget_counts_at_least_the_real_heap_of_its_filters`).
/// Counted when the filter is created or loaded.
///
/// ```
/// use bloom_core::{AnyFilter, BloomFilter};
/// use bloom_tower::filter_set::counted_bytes;
///
/// let f = AnyFilter::from(BloomFilter::new(1_000, 0.01)?);
/// assert!(counted_bytes(&f) > f.size_in_bytes());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn counted_bytes(filter: &AnyFilter) -> usize {
    let sub_filters = match filter.as_windowed() {
        Some(w) if w.ring_layout() == RingLayout::Separate => w.generations() as usize + 1,
        Some(_) => 2,
        None => 1,
    };
    filter.size_in_bytes() + ENTRY_OVERHEAD_BYTES + SUB_FILTER_OVERHEAD_BYTES * sub_filters
}

/// One small filter per key (user, tenant, feed) under one memory budget, the least recently
/// used evicted to a [`FilterStore`] and loaded again on their next use. See the
/// [module docs](super) for the guarantees.
///
/// ```
/// use bloom_tower::filter_set::{DirectoryStore, FilterSet};
///
/// # tokio::runtime::Builder::new_current_thread().enable_all().build()?.block_on(async {
/// let dir = tempfile::tempdir()?;
/// let seen = FilterSet::<u64, _>::builder(DirectoryStore::new(dir.path())?)
///     .plain(1_000, 0.01)?
///     .build();
/// assert!(!seen.seen_or_insert(&7, "item-1").await?);
/// assert!(seen.seen_or_insert(&7, "item-1").await?);
/// assert!(!seen.contains(&8, "item-1").await?); // user 8 has no filter: none is created
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # })?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct FilterSet<K, S> {
    store: S,
    budget: usize,
    name: String,
    slots: Slots<K>,
    new_filter: NewFilter<K>,
    decode: Decode,
    counters: Counters,
    /// Bounds the stores running at once ([`MAX_CONCURRENT_STORES`]).
    store_permits: Semaphore,
}

impl<K, S> FilterSet<K, S>
where
    K: Hash + Eq + Clone + Display + Send + Sync + 'static,
    S: FilterStore,
{
    /// Starts configuring a set over `store`.
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// use bloom_tower::filter_set::{DirectoryStore, FilterSet};
    ///
    /// let set = FilterSet::<String, _>::builder(DirectoryStore::new(dir.path())?)
    ///     .plain(10_000, 0.001)?
    ///     .budget_bytes(32 << 20)
    ///     .build();
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn builder(store: S) -> FilterSetBuilder<K, S> {
        FilterSetBuilder::new(store)
    }

    pub(crate) fn from_parts(
        store: S,
        budget: usize,
        name: String,
        shards: usize,
        new_filter: NewFilter<K>,
        decode: Decode,
    ) -> Self {
        let counters = Counters::default();
        counters.budget(&name, budget);
        Self {
            store,
            budget,
            name,
            slots: Slots::new(shards),
            new_filter,
            decode,
            counters,
            store_permits: Semaphore::new(MAX_CONCURRENT_STORES),
        }
    }

    /// Adds `item` to `key`'s filter, creating the filter on the key's first write: `true`
    /// if the filter changed (as [`AnyFilter::insert`]).
    ///
    /// ```
    /// # use bloom_tower::filter_set::{DirectoryStore, FilterSet};
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build()?.block_on(async {
    /// # let dir = tempfile::tempdir()?;
    /// let set = FilterSet::<&str, _>::builder(DirectoryStore::new(dir.path())?).plain(100, 0.01)?.build();
    /// set.insert(&"tenant-a", "order-1").await?;
    /// assert!(set.contains(&"tenant-a", "order-1").await?);
    /// assert!(!set.contains(&"tenant-b", "order-1").await?);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # })?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub async fn insert<T: Key + ?Sized>(&self, key: &K, item: &T) -> Result<bool, FilterSetError> {
        self.update(key, |f| f.insert(item)).await
    }

    /// Whether `key`'s filter may hold `item` (`false`: it certainly does not). A key with no
    /// filter answers `false` and gets none.
    ///
    /// ```
    /// # use bloom_tower::filter_set::{DirectoryStore, FilterSet};
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build()?.block_on(async {
    /// # let dir = tempfile::tempdir()?;
    /// let set = FilterSet::<u32, _>::builder(DirectoryStore::new(dir.path())?).plain(100, 0.01)?.build();
    /// assert!(!set.contains(&1, "x").await?);
    /// assert_eq!(set.stats().filters_in_memory, 0);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # })?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub async fn contains<T: Key + ?Sized>(
        &self,
        key: &K,
        item: &T,
    ) -> Result<bool, FilterSetError> {
        Ok(self.read(key, |f| f.contains(item)).await?.unwrap_or(false))
    }

    /// [`contains`](Self::contains), then [`insert`](Self::insert) if it was not there, under
    /// one lookup: `true` if `item` was (probably) seen. For a windowed filter the seen
    /// item's time is not renewed.
    ///
    /// ```
    /// # use bloom_tower::filter_set::{DirectoryStore, FilterSet};
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build()?.block_on(async {
    /// # let dir = tempfile::tempdir()?;
    /// let shown = FilterSet::<u64, _>::builder(DirectoryStore::new(dir.path())?).plain(100, 0.01)?.build();
    /// assert!(!shown.seen_or_insert(&42, "item-9").await?);
    /// assert!(shown.seen_or_insert(&42, "item-9").await?);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # })?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub async fn seen_or_insert<T: Key + ?Sized>(
        &self,
        key: &K,
        item: &T,
    ) -> Result<bool, FilterSetError> {
        self.update(key, |f| match f.as_windowed() {
            Some(w) => w.seen_or_insert(item),
            None => f.contains(item) || !f.insert(item),
        })
        .await
    }

    /// Runs `f` on `key`'s filter, creating it on the key's first use, and marks it changed
    /// (to be stored). `f` runs with the filter pinned in memory (a resident filter under
    /// its shard's read lock, which evictions and loads of the shard's keys wait for): keep
    /// it short, it must not block.
    ///
    /// ```
    /// # use bloom_tower::filter_set::{DirectoryStore, FilterSet};
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build()?.block_on(async {
    /// # let dir = tempfile::tempdir()?;
    /// let shown = FilterSet::<u64, _>::builder(DirectoryStore::new(dir.path())?).plain(100, 0.01)?.build();
    /// let fresh: Vec<&str> = shown
    ///     .update(&42, |f| ["a", "b", "a"].into_iter().filter(|item| f.insert(*item)).collect())
    ///     .await?;
    /// assert_eq!(fresh, ["a", "b"]);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # })?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub async fn update<R>(
        &self,
        key: &K,
        f: impl FnOnce(&AnyFilter) -> R,
    ) -> Result<R, FilterSetError> {
        match self.access(key, true, f).await? {
            Some(r) => Ok(r),
            None => unreachable!("an access that creates always finds a filter"),
        }
    }

    /// Runs `f` on `key`'s filter if it has one (loading it if it was evicted); `None` if the
    /// key has none. Creates nothing and marks nothing changed.
    ///
    /// ```
    /// # use bloom_tower::filter_set::{DirectoryStore, FilterSet};
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build()?.block_on(async {
    /// # let dir = tempfile::tempdir()?;
    /// let set = FilterSet::<u64, _>::builder(DirectoryStore::new(dir.path())?).plain(100, 0.01)?.build();
    /// assert_eq!(set.read(&1, |f| f.kind()).await?, None);
    /// set.insert(&1, "a").await?;
    /// assert_eq!(set.read(&1, |f| f.kind()).await?, Some("plain"));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # })?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub async fn read<R>(
        &self,
        key: &K,
        f: impl FnOnce(&AnyFilter) -> R,
    ) -> Result<Option<R>, FilterSetError> {
        self.access(key, false, f).await
    }

    /// Stores every filter that changed, and waits for evictions under way: when it returns
    /// `Ok`, every write that returned before the call is in the store. Returns how many
    /// filters it stored. On an error it still tries every filter; those that failed stay in
    /// memory, changed, and the first error is returned.
    ///
    /// ```
    /// # use bloom_tower::filter_set::{DirectoryStore, FilterSet};
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build()?.block_on(async {
    /// # let dir = tempfile::tempdir()?;
    /// let set = FilterSet::<u64, _>::builder(DirectoryStore::new(dir.path())?).plain(100, 0.01)?.build();
    /// set.insert(&1, "a").await?;
    /// set.insert(&2, "b").await?;
    /// assert_eq!(set.flush().await?, 2);
    /// assert_eq!(set.flush().await?, 0); // nothing changed since
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # })?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub async fn flush(&self) -> Result<usize, FilterSetError> {
        let keys = self.slots.keys();
        let mut stored = 0;
        let mut first_error = None;
        // Owned batches: a future that borrows its batch from `keys` is not `Send` for every
        // lifetime, which `tokio::spawn` of a flush needs.
        let batches: Vec<Vec<K>> = keys
            .chunks(S::MAX_BATCH.max(1))
            .map(<[K]>::to_vec)
            .collect();
        let mut flushes = stream::iter(batches)
            .map(|batch| async move { self.flush_batch(&batch).await })
            .buffer_unordered(MAX_CONCURRENT_STORES);
        while let Some((n, error)) = flushes.next().await {
            stored += n;
            if let Some(e) = error {
                first_error.get_or_insert(e);
            }
        }
        match first_error {
            None => Ok(stored),
            Some(e) => Err(e),
        }
    }

    /// Stores the changed filters of `keys` in one [`FilterStore::store_many`], holding each
    /// one's store turn across it (a key's stores land in the order their copies were taken).
    /// A key whose turn is taken (a store of it under way) or that is not resident goes
    /// through [`flush_key`](Self::flush_key) after the batch released its turns
    /// (`a_flush_waits_for_a_store_of_a_key_under_way_and_stores_what_came_after`). So a batch
    /// never waits for a turn while it holds others, and two flushes whose key orders differ
    /// (a shard's table grew between their snapshots) cannot deadlock. Returns how many
    /// filters it stored and its first error.
    async fn flush_batch(&self, keys: &[K]) -> (usize, Option<FilterSetError>) {
        let mut resident = Vec::with_capacity(keys.len());
        let mut later = Vec::new();
        for key in keys {
            match self.slots.peek(key) {
                Peek::Absent => {}
                Peek::Resident(entry) => resident.push((key, entry)),
                Peek::Busy(_) => later.push(key),
            }
        }
        let mut stored = 0;
        let mut first_error = None;
        {
            let mut turns = Vec::with_capacity(resident.len());
            let mut copies = Vec::with_capacity(resident.len());
            let mut unstored = Unstored(Vec::with_capacity(resident.len()));
            for (key, entry) in &resident {
                let Ok(turn) = entry.store_turn.try_lock() else {
                    later.push(key);
                    continue;
                };
                match entry.copy_if_dirty() {
                    Err(slots::Evicted) => later.push(key),
                    Ok(None) => {}
                    Ok(Some(bytes)) => {
                        turns.push(turn);
                        unstored.0.push(entry);
                        copies.push((key.to_string(), bytes));
                    }
                }
            }
            if !copies.is_empty() {
                let first_name = copies[0].0.clone();
                let result = {
                    // The semaphore is never closed.
                    let _permit = self.store_permits.acquire().await;
                    self.store.store_many(copies).await
                };
                match result {
                    Ok(()) => {
                        stored = unstored.0.len();
                        unstored.0.clear();
                        for _ in 0..stored {
                            self.counters.store(&self.name);
                        }
                    }
                    Err(source) => {
                        for _ in &unstored.0 {
                            self.counters.store_error(&self.name);
                        }
                        first_error = Some(FilterSetError::Store {
                            name: first_name,
                            source,
                        });
                    }
                }
            }
            // `unstored` marks what was not stored changed again before the turns are
            // released (it is declared after them, so it drops first).
        }
        for key in later {
            match self.flush_key(key).await {
                Ok(true) => stored += 1,
                Ok(false) => {}
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        (stored, first_error)
    }

    /// Stores `key`'s filter if it changed, or waits for its eviction under way: when it
    /// returns `Ok`, every write to `key` that returned before the call is in the store.
    /// `true` if it stored the filter. What a service calls before it acknowledges a write
    /// that must survive a crash.
    ///
    /// ```
    /// # use bloom_tower::filter_set::{DirectoryStore, FilterSet};
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build()?.block_on(async {
    /// # let dir = tempfile::tempdir()?;
    /// let store = DirectoryStore::new(dir.path())?;
    /// let set = FilterSet::<u64, _>::builder(store.clone()).plain(100, 0.01)?.build();
    /// set.insert(&7, "shown").await?;
    /// assert!(set.flush_key(&7).await?);
    /// assert!(store.path_of("7").exists());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # })?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub async fn flush_key(&self, key: &K) -> Result<bool, FilterSetError> {
        loop {
            match self.slots.peek(key) {
                Peek::Absent => return Ok(false),
                // A load has nothing unstored; an eviction stores the filter or puts it back.
                Peek::Busy(busy) => slots::wait(busy).await,
                Peek::Resident(entry) => {
                    let _turn = entry.store_turn.lock().await;
                    let Ok(copy) = entry.copy_if_dirty() else {
                        continue; // evicted meanwhile: wait for that eviction
                    };
                    let Some(bytes) = copy else {
                        return Ok(false);
                    };
                    let name = key.to_string();
                    let mut unstored = Unstored(vec![&entry]);
                    return match self.store_bytes(&name, bytes).await {
                        Ok(()) => {
                            unstored.0.clear();
                            self.counters.store(&self.name);
                            Ok(true)
                        }
                        Err(source) => {
                            self.counters.store_error(&self.name);
                            Err(FilterSetError::Store { name, source })
                        }
                    };
                }
            }
        }
    }

    /// Filters and bytes in memory, the budget, and the counters.
    ///
    /// ```
    /// # use bloom_tower::filter_set::{DirectoryStore, FilterSet};
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build()?.block_on(async {
    /// # let dir = tempfile::tempdir()?;
    /// let set = FilterSet::<u64, _>::builder(DirectoryStore::new(dir.path())?).plain(100, 0.01)?.build();
    /// set.insert(&1, "a").await?;
    /// let stats = set.stats();
    /// assert_eq!((stats.filters_in_memory, stats.creates, stats.loads), (1, 1, 0));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # })?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn stats(&self) -> FilterSetStats {
        self.counters
            .snapshot(self.slots.filters(), self.slots.bytes(), self.budget)
    }

    /// The `set` label of the metrics.
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// use bloom_tower::filter_set::{DirectoryStore, FilterSet};
    ///
    /// let set = FilterSet::<u64, _>::builder(DirectoryStore::new(dir.path())?).build();
    /// assert_eq!(set.name(), "default");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The store the set evicts to.
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// use bloom_tower::filter_set::{DirectoryStore, FilterSet};
    ///
    /// let set = FilterSet::<u64, _>::builder(DirectoryStore::new(dir.path())?).build();
    /// assert!(set.store().path_of("1").starts_with(dir.path()));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn store(&self) -> &S {
        &self.store
    }

    /// Runs `f` on `key`'s filter: under its shard's read lock if it is resident, after
    /// waiting for a load or eviction under way, or after loading it if absent; `None` if the
    /// key has no filter and `create` is false.
    async fn access<R>(
        &self,
        key: &K,
        create: bool,
        f: impl FnOnce(&AnyFilter) -> R,
    ) -> Result<Option<R>, FilterSetError> {
        let mut f = Some(f);
        loop {
            let found = self.slots.find(key, |entry| {
                let f = f.take().expect("an operation runs once");
                entry.run(create, f)
            });
            match found {
                Found::Ran(r) => return Ok(Some(r)),
                Found::Busy(busy) => {
                    self.counters.coalesced_waiter();
                    slots::wait(busy).await;
                }
                Found::Lead(guard) => {
                    let f = f.take().expect("an operation runs once");
                    return self.load(key, guard, create, f).await;
                }
            }
        }
    }

    /// Reads `key`'s filter from the store (or creates it), makes room for it, runs `f` on it
    /// (the key is still Busy: no eviction can reach it) and makes it resident. `None`: the
    /// store has none and `create` is false (the key stays absent). Loads of different keys
    /// run at once; a key has one load at a time (its other callers wait on the Busy key).
    async fn load<R>(
        &self,
        key: &K,
        mut guard: LoadGuard<'_, K>,
        create: bool,
        f: impl FnOnce(&AnyFilter) -> R,
    ) -> Result<Option<R>, FilterSetError> {
        let name = key.to_string();
        let started = Instant::now();
        let filter = match self.store.load(&name).await {
            Err(source) => {
                self.counters.load_error(&self.name);
                return Err(FilterSetError::Load { name, source });
            }
            Ok(Some(bytes)) => match (self.decode)(&bytes) {
                Ok(filter) => {
                    self.counters.load(&self.name, started.elapsed());
                    filter
                }
                Err(source) => {
                    self.counters.load_error(&self.name);
                    return Err(FilterSetError::Corrupt { name, source });
                }
            },
            Ok(None) if create => {
                self.counters.create(&self.name);
                (self.new_filter)(key)
            }
            Ok(None) => return Ok(None),
        };
        let bytes = counted_bytes(&filter) + name.len();
        guard.reserve(bytes);
        self.make_room().await;
        let entry = Arc::new(Entry::new(filter, bytes));
        let r = entry.run(create, f);
        guard.complete(entry);
        self.counters
            .memory(&self.name, self.slots.filters(), self.slots.bytes());
        Ok(Some(r))
    }

    /// Evicts the least recently used filters until the bytes fit the budget. A failed store
    /// stops it (the filter stays in memory; the set runs over budget until a store works).
    async fn make_room(&self) {
        while self.slots.bytes() > self.budget {
            let Some(victim) = self.slots.pick_victim() else {
                return; // everything else is loading or being stored
            };
            if let Err(error) = self.evict(victim).await {
                tracing::warn!(set = %self.name, %error, "filter set over budget: an eviction could not store its filter");
                return;
            }
        }
        self.counters
            .memory(&self.name, self.slots.filters(), self.slots.bytes());
    }

    /// Stores `bytes` under `name`, once one of the [`MAX_CONCURRENT_STORES`] permits is free
    /// (flushes and evictions share them).
    async fn store_bytes(&self, name: &str, bytes: Vec<u8>) -> Result<(), StoreError> {
        // The semaphore is never closed.
        let _permit = self.store_permits.acquire().await;
        self.store.store(name, bytes).await
    }

    /// Stores the victim's filter if it changed, then frees it. If the store fails or this
    /// future is dropped, the guard puts the filter back in memory, changed.
    async fn evict(&self, victim: EvictGuard<'_, K>) -> Result<(), FilterSetError> {
        let entry = victim.entry().clone();
        let _turn = entry.store_turn.lock().await;
        if let Some(bytes) = entry.evict() {
            let name = victim.key().to_string();
            if let Err(source) = self.store_bytes(&name, bytes).await {
                self.counters.store_error(&self.name);
                return Err(FilterSetError::Store { name, source });
            }
            self.counters.store(&self.name);
        }
        victim.finish();
        self.counters.eviction(&self.name);
        Ok(())
    }
}

impl<K, S> fmt::Debug for FilterSet<K, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FilterSet")
            .field("name", &self.name)
            .field("budget", &self.budget)
            .field("filters", &self.slots.filters())
            .field("bytes", &self.slots.bytes())
            .finish_non_exhaustive()
    }
}
