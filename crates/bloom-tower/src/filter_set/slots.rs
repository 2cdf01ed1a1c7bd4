//! The table of filters: which keys are in memory, being loaded or being stored, in
//! (approximately) least-recently-used order; and the guards that undo a state change whose
//! future is dropped.
//!
//! A key is in one of three states. **Absent** from the table: its filter is in the store,
//! if anywhere. **Resident**: its [`Entry`] is in memory. **Busy**: a load or an eviction is
//! running; callers hold a receiver and wait for its sender to be dropped, then look again.
//!
//! **The hot path** (an operation on a resident key) takes its shard's *read* lock, runs the
//! operation on the filter under it, and touches nothing shared by all keys: it reads the
//! set's LRU clock ([`Slots::epoch`]) and writes the entry's recency stamp only when the
//! clock moved since the entry's last use. The clock advances when a filter becomes resident
//! (a load, a create, a failed eviction putting one back), not per operation, so a working
//! set that fits the budget writes no stamp at all. An eviction turns its victim Busy under
//! the shard's *write* lock, so it waits for the operations running on it, and none starts
//! afterwards.
//!
//! **The LRU order** is each shard's index of resident keys by `(stamp, id)` (`id`: the
//! clock value when the entry became resident, unique). A hit does not move the key in the
//! index; the index is brought up to date lazily: the victim search re-files a head whose
//! entry's stamp moved on, until each shard's head is current, then takes the oldest head of
//! all shards. The order is that of the last use at the clock's granularity (uses between
//! two loads tie, and ties go to the key resident first): exact for the order of loads and
//! of uses separated by a load, approximate within.
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
use std::sync::{Arc, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

use bloom_core::AnyFilter;
use tokio::sync::watch;

/// A filter in memory.
pub(crate) struct Entry {
    filter: Arc<AnyFilter>,
    /// Set once by the eviction that owns the entry, holding [`store_turn`](Self::store_turn)
    /// (as every copy does): a flush that finds it set looks the key up again.
    evicted: AtomicBool,
    /// Set after every write; cleared by the copy that will be stored.
    dirty: AtomicBool,
    /// The LRU clock at the entry's last use (written only when it moves).
    stamp: AtomicU64,
    /// What the entry counts against the budget.
    pub(crate) bytes: usize,
    /// Held from taking a copy to the end of storing it, so a key's stores land in the order
    /// their copies were taken (a flush's older copy never overwrites an eviction's or
    /// another flush's newer one, however many stores run at once).
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
            evicted: AtomicBool::new(false),
            dirty: AtomicBool::new(dirty),
            stamp: AtomicU64::new(0),
            bytes,
            store_turn: tokio::sync::Mutex::new(()),
        }
    }

    /// Runs `f` on the filter; `write` marks the entry dirty after `f`. The caller pins the
    /// entry (a shard lock, or a key it holds Busy), so no eviction copies it meanwhile.
    pub(crate) fn run<R>(&self, write: bool, f: impl FnOnce(&AnyFilter) -> R) -> R {
        let r = f(&self.filter);
        if write {
            // After the write's bits: a copy that reads `true` sees them.
            self.dirty.store(true, Ordering::SeqCst);
        }
        r
    }

    /// Records a use at clock `now`: a store only when the stamp moves, so a hot entry's
    /// cache line stays shared between the threads that read it.
    fn touch(&self, now: u64) {
        if self.stamp.load(Ordering::Relaxed) < now {
            self.stamp.fetch_max(now, Ordering::Relaxed);
        }
    }

    /// The filter's bytes if it changed since the last copy; the caller holds
    /// [`store_turn`](Self::store_turn). Operations go on meanwhile: one that writes after
    /// the flag is cleared sets it again, so its write is stored next time.
    pub(crate) fn copy_if_dirty(&self) -> Result<Option<Vec<u8>>, Evicted> {
        if self.evicted.load(Ordering::SeqCst) {
            return Err(Evicted);
        }
        Ok(self
            .dirty
            .swap(false, Ordering::SeqCst)
            .then(|| self.filter.to_bytes()))
    }

    /// Marks the entry evicted and returns its bytes if it changed since the last copy; the
    /// caller holds [`store_turn`](Self::store_turn) and the key Busy (no operation runs on
    /// the filter any more).
    pub(crate) fn evict(&self) -> Option<Vec<u8>> {
        self.evicted.store(true, Ordering::SeqCst);
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

/// A resident key's place in its shard's LRU index: (stamp when filed, unique id).
type At = (u64, u64);

enum Slot {
    Resident { entry: Arc<Entry>, at: At },
    Busy(watch::Receiver<()>),
}

struct Shard<K> {
    map: HashMap<K, Slot>,
    /// Resident keys by the stamp they were filed under (possibly older than their entry's).
    lru: BTreeMap<At, (K, Arc<Entry>)>,
}

impl<K: Hash + Eq + Clone> Shard<K> {
    /// Re-files stale heads until the head's place is its entry's stamp; the head's place.
    fn refresh_head(&mut self) -> Option<At> {
        loop {
            let (&at, (_, entry)) = self.lru.first_key_value()?;
            let stamp = entry.stamp.load(Ordering::Relaxed);
            if stamp <= at.0 {
                return Some(at);
            }
            let (key, entry) = self.lru.remove(&at).expect("the head is in the index");
            let new_at = (stamp, at.1);
            if let Some(Slot::Resident { at, .. }) = self.map.get_mut(&key) {
                *at = new_at;
            }
            self.lru.insert(new_at, (key, entry));
        }
    }

    /// Whether the head needs re-filing (checked under the read lock).
    fn head(&self) -> Option<(At, bool)> {
        let (&at, (_, entry)) = self.lru.first_key_value()?;
        Some((at, entry.stamp.load(Ordering::Relaxed) > at.0))
    }
}

/// What a lookup found.
pub(crate) enum Found<'a, K: Hash + Eq + Clone, R> {
    /// In memory: the operation ran, here is its answer.
    Ran(R),
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
    shards: Box<[RwLock<Shard<K>>]>,
    hasher: RandomState,
    /// The LRU clock: advanced (one `fetch_add`) each time a filter becomes resident; an
    /// operation only reads it.
    epoch: AtomicU64,
    /// Bytes of resident and busy entries, and of loads that reserved theirs.
    bytes: AtomicUsize,
    /// Resident and busy-evicting entries.
    filters: AtomicUsize,
}

// Nothing panics under a shard lock but the caller's operation, which cannot leave the table
// half-changed: a poisoned lock holds a consistent table.
fn read<T>(m: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    m.read().unwrap_or_else(PoisonError::into_inner)
}

fn write<T>(m: &RwLock<T>) -> RwLockWriteGuard<'_, T> {
    m.write().unwrap_or_else(PoisonError::into_inner)
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
                    RwLock::new(Shard {
                        map: HashMap::new(),
                        lru: BTreeMap::new(),
                    })
                })
                .collect(),
            hasher: RandomState::new(),
            epoch: AtomicU64::new(1),
            bytes: AtomicUsize::new(0),
            filters: AtomicUsize::new(0),
        }
    }

    fn shard(&self, key: &K) -> &RwLock<Shard<K>> {
        let i = self.hasher.hash_one(key) as usize % self.shards.len();
        &self.shards[i]
    }

    /// The key's place in the LRU index once it becomes resident now, and its stamp.
    fn file(&self, entry: &Entry) -> At {
        let t = self.epoch.fetch_add(1, Ordering::Relaxed);
        entry.stamp.store(t, Ordering::Relaxed);
        (t, t)
    }

    /// Runs `run` on `key`'s entry if it is resident (under the shard's read lock, marking
    /// the use), or reports the load or eviction under way, or makes the caller its loader.
    pub(crate) fn find<R>(&self, key: &K, run: impl FnOnce(&Entry) -> R) -> Found<'_, K, R> {
        let shard = self.shard(key);
        {
            let s = read(shard);
            match s.map.get(key) {
                Some(Slot::Resident { entry, .. }) => {
                    entry.touch(self.epoch.load(Ordering::Relaxed));
                    return Found::Ran(run(entry));
                }
                Some(Slot::Busy(busy)) => return Found::Busy(busy.clone()),
                None => {}
            }
        }
        let mut s = write(shard);
        match s.map.get(key) {
            Some(Slot::Resident { entry, .. }) => {
                entry.touch(self.epoch.load(Ordering::Relaxed));
                Found::Ran(run(entry))
            }
            Some(Slot::Busy(busy)) => Found::Busy(busy.clone()),
            None => {
                let (sender, busy) = watch::channel(());
                s.map.insert(key.clone(), Slot::Busy(busy));
                Found::Lead(LoadGuard {
                    slots: self,
                    key: key.clone(),
                    sender: Some(sender),
                    reserved: 0,
                })
            }
        }
    }

    /// Looks `key` up without loading it or marking a use.
    pub(crate) fn peek(&self, key: &K) -> Peek {
        match read(self.shard(key)).map.get(key) {
            Some(Slot::Resident { entry, .. }) => Peek::Resident(entry.clone()),
            Some(Slot::Busy(busy)) => Peek::Busy(busy.clone()),
            None => Peek::Absent,
        }
    }

    /// Every key that is resident or busy right now.
    pub(crate) fn keys(&self) -> Vec<K> {
        let mut keys = Vec::new();
        for shard in self.shards.iter() {
            keys.extend(read(shard).map.keys().cloned());
        }
        keys
    }

    /// Takes the least recently used resident entry for eviction: it turns Busy.
    pub(crate) fn pick_victim(&self) -> Option<EvictGuard<'_, K>> {
        // The oldest head can move between the scan and the take; try again then.
        for _ in 0..8 {
            let mut oldest: Option<(At, usize)> = None;
            for (i, shard) in self.shards.iter().enumerate() {
                // The read guard is dropped before a write lock is taken.
                let head = read(shard).head();
                let head = match head {
                    Some((at, false)) => Some(at),
                    Some((_, true)) => write(shard).refresh_head(),
                    None => None,
                };
                if let Some(at) = head {
                    if oldest.is_none_or(|(o, _)| at < o) {
                        oldest = Some((at, i));
                    }
                }
            }
            let (at, i) = oldest?;
            let mut shard = write(&self.shards[i]);
            if shard.refresh_head() != Some(at) {
                continue;
            }
            let (key, entry) = shard.lru.remove(&at).expect("the head is in the index");
            let (sender, busy) = watch::channel(());
            match shard.map.insert(key.clone(), Slot::Busy(busy)) {
                Some(Slot::Resident { .. }) => {
                    return Some(EvictGuard {
                        slots: self,
                        key,
                        entry,
                        sender: Some(sender),
                    });
                }
                // The LRU index names only resident keys.
                _ => unreachable!("a key in the LRU index was not resident"),
            }
        }
        None
    }

    /// Makes `key` (held Busy by the caller) resident with `entry`.
    fn make_resident(&self, key: &K, entry: Arc<Entry>) {
        let at = self.file(&entry);
        let mut shard = write(self.shard(key));
        shard.lru.insert(at, (key.clone(), entry.clone()));
        shard.map.insert(key.clone(), Slot::Resident { entry, at });
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
        self.slots.make_resident(&self.key, entry);
        self.slots.filters.fetch_add(1, Ordering::Relaxed);
        self.reserved = 0;
        drop(sender);
    }
}

impl<K: Hash + Eq + Clone> Drop for LoadGuard<'_, K> {
    fn drop(&mut self) {
        if let Some(sender) = self.sender.take() {
            write(self.slots.shard(&self.key)).map.remove(&self.key);
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
        write(self.slots.shard(&self.key)).map.remove(&self.key);
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
            let entry = Arc::new(self.entry.reinstated());
            self.slots.make_resident(&self.key, entry);
            drop(sender);
        }
    }
}
