//! The table of filters: which keys are in memory, being loaded or being stored, in
//! least-recently-used order; and the guards that undo a state change whose future is
//! dropped.
//!
//! A key is in one of three states. **Absent** from the table: its filter is in the store,
//! if anywhere. **Resident**: its [`Entry`] is in memory, at a place in its shard's LRU list
//! (a tick from one counter shared by all shards, so the oldest of the shards' oldest is the
//! least recently used of all). **Busy**: a load or an eviction is running; callers hold a
//! receiver and wait for its sender to be dropped, then look again.
//!
//! Only the caller that turned a key Busy (holding its [`LoadGuard`] or [`EvictGuard`])
//! changes that key's state again, and it always does, because the guard's `Drop` does it if
//! the caller is cancelled or unwinds: an abandoned load leaves the key Absent (nothing was
//! in memory), an abandoned or failed eviction puts the filter back Resident and dirty (the
//! store may not have it). The state changes before the sender is dropped, so a woken waiter
//! finds the new state. Guarded by `tests/filter_set.rs`
//! `a_cancelled_load_releases_its_waiters` and `a_failed_eviction_keeps_the_filter`.

use std::collections::{BTreeMap, HashMap};
use std::hash::{BuildHasher, Hash, RandomState};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock};

use bloom_core::AnyFilter;
use tokio::sync::watch;

/// A filter in memory.
pub(crate) struct Entry {
    filter: Arc<AnyFilter>,
    /// Set once by the eviction that owns the entry, under the write lock: an operation that
    /// finds it set has not touched the filter and looks the key up again.
    evicted: RwLock<bool>,
    /// Set after every write, under the read lock; cleared by the copy that will be stored.
    dirty: AtomicBool,
    /// What the entry counts against the budget.
    pub(crate) bytes: usize,
    /// Held from taking a copy to the end of storing it, so a key's stores land in the order
    /// their copies were taken (a flush's older copy never overwrites an eviction's newer one).
    pub(crate) store_turn: tokio::sync::Mutex<()>,
}

/// The entry was evicted: look the key up again.
pub(crate) struct Evicted;

impl Entry {
    pub(crate) fn new(filter: AnyFilter, bytes: usize) -> Self {
        Self::with_state(Arc::new(filter), bytes, false)
    }

    fn with_state(filter: Arc<AnyFilter>, bytes: usize, dirty: bool) -> Self {
        Self {
            filter,
            evicted: RwLock::new(false),
            dirty: AtomicBool::new(dirty),
            bytes,
            store_turn: tokio::sync::Mutex::new(()),
        }
    }

    /// Runs `f` on the filter, unless the entry was evicted (then `f` is not run); `write`
    /// marks the entry dirty after `f`.
    pub(crate) fn run<R>(&self, write: bool, f: impl FnOnce(&AnyFilter) -> R) -> Option<R> {
        let evicted = self.evicted.read().unwrap_or_else(PoisonError::into_inner);
        if *evicted {
            return None;
        }
        let r = f(&self.filter);
        if write {
            // After the write's bits: a copy that reads `true` sees them.
            self.dirty.store(true, Ordering::SeqCst);
        }
        Some(r)
    }

    /// The filter's bytes if it changed since the last copy. Operations go on meanwhile: one
    /// that writes after the flag is cleared sets it again, so its write is stored next time.
    pub(crate) fn copy_if_dirty(&self) -> Result<Option<Vec<u8>>, Evicted> {
        let evicted = self.evicted.read().unwrap_or_else(PoisonError::into_inner);
        if *evicted {
            return Err(Evicted);
        }
        Ok(self
            .dirty
            .swap(false, Ordering::SeqCst)
            .then(|| self.filter.to_bytes()))
    }

    /// Marks the entry evicted, once no operation is running on it, and returns its bytes
    /// if it changed since the last copy. No operation reaches the filter afterwards.
    pub(crate) fn evict(&self) -> Option<Vec<u8>> {
        let mut evicted = self.evicted.write().unwrap_or_else(PoisonError::into_inner);
        *evicted = true;
        self.dirty
            .swap(false, Ordering::SeqCst)
            .then(|| self.filter.to_bytes())
    }

    /// Marks the filter changed (its copy did not reach the store).
    pub(crate) fn mark_dirty(&self) {
        self.dirty.store(true, Ordering::SeqCst);
    }

    /// The same filter in a fresh entry, dirty: an eviction that did not complete.
    fn reinstated(&self) -> Self {
        Self::with_state(self.filter.clone(), self.bytes, true)
    }
}

enum Slot {
    Resident { entry: Arc<Entry>, tick: u64 },
    Busy(watch::Receiver<()>),
}

struct Shard<K> {
    map: HashMap<K, Slot>,
    lru: BTreeMap<u64, K>,
}

/// What a lookup found.
pub(crate) enum Found<'a, K: Hash + Eq + Clone> {
    /// In memory.
    Resident(Arc<Entry>),
    /// A load or eviction runs: wait with [`wait`], then look again.
    Busy(watch::Receiver<()>),
    /// Absent: the caller loads it and completes the guard.
    Lead(LoadGuard<'a, K>),
}

/// What a look without loading found.
pub(crate) enum Peek {
    Resident(Arc<Entry>),
    Busy(watch::Receiver<()>),
    Absent,
}

/// Waits until the busy key's load or eviction ends.
pub(crate) async fn wait(mut busy: watch::Receiver<()>) {
    // Nothing is ever sent: this returns when the sender is dropped.
    let _ = busy.changed().await;
}

pub(crate) struct Slots<K> {
    shards: Box<[Mutex<Shard<K>>]>,
    hasher: RandomState,
    tick: AtomicU64,
    /// Bytes of resident and busy entries, and of loads that reserved theirs.
    bytes: AtomicUsize,
    /// Resident and busy-evicting entries.
    filters: AtomicUsize,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Nothing runs user code under a shard lock; a poisoned one holds a consistent table.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl<K> Slots<K> {
    pub(crate) fn bytes(&self) -> usize {
        self.bytes.load(Ordering::Relaxed)
    }

    pub(crate) fn filters(&self) -> usize {
        self.filters.load(Ordering::Relaxed)
    }
}

impl<K: Hash + Eq + Clone> Slots<K> {
    pub(crate) fn new(shards: usize) -> Self {
        Self {
            shards: (0..shards.max(1))
                .map(|_| {
                    Mutex::new(Shard {
                        map: HashMap::new(),
                        lru: BTreeMap::new(),
                    })
                })
                .collect(),
            hasher: RandomState::new(),
            tick: AtomicU64::new(0),
            bytes: AtomicUsize::new(0),
            filters: AtomicUsize::new(0),
        }
    }

    fn shard(&self, key: &K) -> &Mutex<Shard<K>> {
        let i = self.hasher.hash_one(key) as usize % self.shards.len();
        &self.shards[i]
    }

    fn next_tick(&self) -> u64 {
        self.tick.fetch_add(1, Ordering::Relaxed)
    }

    /// Finds `key`, marking it most recently used, or makes the caller its loader.
    pub(crate) fn find(&self, key: &K) -> Found<'_, K> {
        let mut shard = lock(self.shard(key));
        let shard = &mut *shard;
        match shard.map.get_mut(key) {
            Some(Slot::Resident { entry, tick }) => {
                let entry = entry.clone();
                let now = self.next_tick();
                if let Some(k) = shard.lru.remove(tick) {
                    shard.lru.insert(now, k);
                }
                *tick = now;
                Found::Resident(entry)
            }
            Some(Slot::Busy(busy)) => Found::Busy(busy.clone()),
            None => {
                let (sender, busy) = watch::channel(());
                shard.map.insert(key.clone(), Slot::Busy(busy));
                Found::Lead(LoadGuard {
                    slots: self,
                    key: key.clone(),
                    sender: Some(sender),
                    reserved: 0,
                })
            }
        }
    }

    /// Looks `key` up without loading it or changing its place in the LRU order.
    pub(crate) fn peek(&self, key: &K) -> Peek {
        match lock(self.shard(key)).map.get(key) {
            Some(Slot::Resident { entry, .. }) => Peek::Resident(entry.clone()),
            Some(Slot::Busy(busy)) => Peek::Busy(busy.clone()),
            None => Peek::Absent,
        }
    }

    /// Every key that is resident or busy right now.
    pub(crate) fn keys(&self) -> Vec<K> {
        let mut keys = Vec::new();
        for shard in self.shards.iter() {
            keys.extend(lock(shard).map.keys().cloned());
        }
        keys
    }

    /// Takes the least recently used resident entry for eviction: it turns Busy.
    pub(crate) fn pick_victim(&self) -> Option<EvictGuard<'_, K>> {
        // The oldest head can move between the scan and the take; try again then.
        for _ in 0..8 {
            let mut oldest: Option<(u64, usize)> = None;
            for (i, shard) in self.shards.iter().enumerate() {
                if let Some((&tick, _)) = lock(shard).lru.first_key_value() {
                    if oldest.is_none_or(|(t, _)| tick < t) {
                        oldest = Some((tick, i));
                    }
                }
            }
            let (tick, i) = oldest?;
            let mut shard = lock(&self.shards[i]);
            let Some(key) = shard.lru.remove(&tick) else {
                continue;
            };
            let (sender, busy) = watch::channel(());
            match shard.map.insert(key.clone(), Slot::Busy(busy)) {
                Some(Slot::Resident { entry, .. }) => {
                    return Some(EvictGuard {
                        slots: self,
                        key,
                        entry,
                        sender: Some(sender),
                    });
                }
                // The LRU list names only resident keys.
                _ => unreachable!("a key in the LRU list was not resident"),
            }
        }
        None
    }
}

/// The loader's hold on a Busy key. [`complete`](Self::complete) makes it Resident; dropping
/// the guard makes it Absent again and releases the bytes it reserved.
pub(crate) struct LoadGuard<'a, K: Hash + Eq + Clone> {
    slots: &'a Slots<K>,
    key: K,
    sender: Option<watch::Sender<()>>,
    reserved: usize,
}

impl<K: Hash + Eq + Clone> LoadGuard<'_, K> {
    /// Counts `bytes` against the budget before the filter is resident.
    pub(crate) fn reserve(&mut self, bytes: usize) {
        self.slots.bytes.fetch_add(bytes, Ordering::Relaxed);
        self.reserved += bytes;
    }

    /// Makes the key resident with `entry` (whose bytes were reserved) and wakes the waiters.
    pub(crate) fn complete(mut self, entry: Arc<Entry>) {
        let sender = self.sender.take();
        {
            let mut shard = lock(self.slots.shard(&self.key));
            let tick = self.slots.next_tick();
            shard.lru.insert(tick, self.key.clone());
            shard
                .map
                .insert(self.key.clone(), Slot::Resident { entry, tick });
        }
        self.slots.filters.fetch_add(1, Ordering::Relaxed);
        self.reserved = 0;
        drop(sender);
    }
}

impl<K: Hash + Eq + Clone> Drop for LoadGuard<'_, K> {
    fn drop(&mut self) {
        if let Some(sender) = self.sender.take() {
            lock(self.slots.shard(&self.key)).map.remove(&self.key);
            self.slots.bytes.fetch_sub(self.reserved, Ordering::Relaxed);
            drop(sender);
        }
    }
}

/// An eviction's hold on a Busy key. [`finish`](Self::finish) makes it Absent (the store has
/// the filter); dropping the guard puts the filter back Resident and dirty.
pub(crate) struct EvictGuard<'a, K: Hash + Eq + Clone> {
    slots: &'a Slots<K>,
    key: K,
    entry: Arc<Entry>,
    sender: Option<watch::Sender<()>>,
}

impl<K: Hash + Eq + Clone> EvictGuard<'_, K> {
    pub(crate) fn key(&self) -> &K {
        &self.key
    }

    pub(crate) fn entry(&self) -> &Arc<Entry> {
        &self.entry
    }

    /// The store has the filter: the key is Absent, its bytes are free.
    pub(crate) fn finish(mut self) {
        let sender = self.sender.take();
        lock(self.slots.shard(&self.key)).map.remove(&self.key);
        self.slots
            .bytes
            .fetch_sub(self.entry.bytes, Ordering::Relaxed);
        self.slots.filters.fetch_sub(1, Ordering::Relaxed);
        drop(sender);
    }
}

impl<K: Hash + Eq + Clone> Drop for EvictGuard<'_, K> {
    fn drop(&mut self) {
        if let Some(sender) = self.sender.take() {
            let mut shard = lock(self.slots.shard(&self.key));
            let tick = self.slots.next_tick();
            let entry = Arc::new(self.entry.reinstated());
            shard.lru.insert(tick, self.key.clone());
            shard
                .map
                .insert(self.key.clone(), Slot::Resident { entry, tick });
            drop(shard);
            drop(sender);
        }
    }
}
