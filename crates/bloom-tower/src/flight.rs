//! One load per key at a time: the table of loads in flight, and the guard that guarantees
//! waiters are released whatever happens to the leader.
//!
//! The first caller for a key becomes the *leader*: it creates the key's slot already
//! write-locked, publishes it in the table, runs the load, stores the outcome in the slot and
//! releases the lock. Later callers find the slot and wait on a read lock, so they wake exactly
//! when the leader is done and read its outcome. The slot is removed from the table before the
//! lock is released, so the table only ever holds keys being loaded right now.
//!
//! If the leader's future is dropped mid-load (the client went away) or unwinds, [`Flight`]'s
//! `Drop` marks the slot [`Slot::Abandoned`], removes it and releases the lock: the waiters
//! wake, see that no outcome was stored, and race to become the next leader. Nobody waits on a
//! slot whose leader is gone, and no lock is poisoned (tokio's locks do not poison).

use std::hash::Hash;
use std::sync::Arc;

use dashmap::DashMap;
use dashmap::mapref::entry::Entry;
use tokio::sync::{OwnedRwLockWriteGuard, RwLock};

/// What a waiter finds once the leader lets go of the slot.
pub(crate) enum Slot<V> {
    /// The leader is still loading; never seen by a waiter, which only reads after the
    /// leader has released its write lock.
    Loading,
    /// The leader finished; every waiter gets a clone.
    Done(V),
    /// The leader went away without an outcome; a waiter must try to lead.
    Abandoned,
}

type SlotRef<V> = Arc<RwLock<Slot<V>>>;

/// The loads in flight, one per key.
pub(crate) struct Flights<K, V> {
    slots: DashMap<K, SlotRef<V>>,
}

/// A caller's part in a key's load.
pub(crate) enum Role<'a, K: Hash + Eq, V> {
    /// Run the load and [`Flight::complete`] it.
    Leader(Flight<'a, K, V>),
    /// Wait for the leader with [`wait`].
    Waiter(SlotRef<V>),
}

impl<K: Hash + Eq + Clone, V: Clone> Flights<K, V> {
    pub(crate) fn new() -> Self {
        Self {
            slots: DashMap::new(),
        }
    }

    /// Joins the key's load in flight, or starts one.
    pub(crate) fn join(&self, key: &K) -> Role<'_, K, V> {
        if let Some(slot) = self.slots.get(key) {
            return Role::Waiter(slot.clone());
        }
        let slot = Arc::new(RwLock::new(Slot::Loading));
        let Ok(write) = slot.clone().try_write_owned() else {
            unreachable!("a lock nobody else has seen is free")
        };
        match self.slots.entry(key.clone()) {
            Entry::Occupied(e) => Role::Waiter(e.get().clone()),
            Entry::Vacant(e) => {
                e.insert(slot.clone());
                Role::Leader(Flight {
                    flights: self,
                    key: key.clone(),
                    slot,
                    write: Some(write),
                })
            }
        }
    }

    /// Loads in flight right now.
    pub(crate) fn len(&self) -> usize {
        self.slots.len()
    }
}

/// Waits for the leader; `None` if it went away without an outcome (then try to lead).
pub(crate) async fn wait<V: Clone>(slot: SlotRef<V>) -> Option<V> {
    match &*slot.read().await {
        Slot::Done(v) => Some(v.clone()),
        Slot::Loading | Slot::Abandoned => None,
    }
}

/// The leader's hold on a key's slot. Dropping it without [`complete`](Self::complete)
/// abandons the load and releases the waiters.
pub(crate) struct Flight<'a, K: Hash + Eq, V> {
    flights: &'a Flights<K, V>,
    key: K,
    slot: SlotRef<V>,
    write: Option<OwnedRwLockWriteGuard<Slot<V>>>,
}

impl<K: Hash + Eq, V> Flight<'_, K, V> {
    /// Hands `outcome` to every waiter. Store anything later callers should find (the cache
    /// entry) *before* this: once the slot leaves the table a new caller starts a new load.
    pub(crate) fn complete(mut self, outcome: V) {
        self.release(Slot::Done(outcome));
    }

    fn release(&mut self, state: Slot<V>) {
        if let Some(mut write) = self.write.take() {
            *write = state;
            self.flights
                .slots
                .remove_if(&self.key, |_, s| Arc::ptr_eq(s, &self.slot));
            drop(write); // wakes the waiters, after the slot has left the table
        }
    }
}

impl<K: Hash + Eq, V> Drop for Flight<'_, K, V> {
    fn drop(&mut self) {
        self.release(Slot::Abandoned);
    }
}
