//! Hooks for synchronising a [`SharedFilter`] with something outside the process (another
//! instance's filter, through Redis say): an insert hook, and rebuilds whose new filter is
//! filled by the caller rather than streamed from a [`KeySource`](crate::KeySource).

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;

use bloom_core::AnyFilter;
use tokio::sync::OwnedMutexGuard;

use super::rebuild::{Finished, Slot};
use super::{CurrentFilter, Generation, SharedFilter};
use crate::stats::RebuildOutcome;

/// The function type of an insert hook.
pub type HookFn = dyn Fn(&[u8]) + Send + Sync;

/// A function [`SharedFilter::insert`] calls with the inserted key's bytes
/// ([`Key::key_bytes`](bloom_core::Key::key_bytes)); see [`SharedFilter::set_insert_hook`].
pub type InsertHook = Arc<HookFn>;

/// [`SharedFilter::start_building`] was called while a rebuild (or another [`Building`])
/// is running.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("a rebuild of this filter is already running")]
pub struct AlreadyBuilding;

impl SharedFilter {
    /// Sets (or with `None` removes) the function every [`insert`](Self::insert) calls, on
    /// every clone, with the key's bytes, after the key is in the local filter(s). Meant for
    /// forwarding inserts to other copies of the filter (a replication layer); it runs on the
    /// inserting thread, so it must be quick and must not block (queue the work).
    ///
    /// Since `Key for [u8]` hashes the bytes themselves, `filter.insert(bytes)` and
    /// `BloomFilter::for_each_bit(bytes, ..)` on the hook's argument act on the same key.
    pub fn set_insert_hook(&self, hook: Option<InsertHook>) {
        self.shared.hook.store(hook.map(Arc::new));
    }

    /// Starts a rebuild whose new filter the caller fills: `next` (usually empty) is published
    /// as the filter being built, so from now on every [`insert`](Self::insert) writes it as
    /// well as the serving one, exactly as during [`reload_from`](Self::reload_from) (the
    /// [module docs](self) say why no insert is lost). [`Building::finish`] swaps it in;
    /// dropping the [`Building`] abandons it and the serving filter stays.
    ///
    /// Fails if a rebuild is running. `next` may have any shape or kind: lookups only ever
    /// read one filter.
    pub fn start_building(&self, next: impl Into<AnyFilter>) -> Result<Building, AlreadyBuilding> {
        let slot = Arc::clone(&self.shared.rebuild)
            .try_lock_owned()
            .map_err(|_| AlreadyBuilding)?;
        let next = Arc::new(self.shared.next_generation(next.into()));
        *self.shared.write_building() = Some(Arc::clone(&next));
        Ok(Building {
            filter: self.clone(),
            next,
            slot: Some(slot),
        })
    }
}

/// A rebuild started by [`SharedFilter::start_building`]: every insert also writes
/// [`filter`](Self::filter) until [`finish`](Self::finish) swaps it in or the value is dropped.
pub struct Building {
    filter: SharedFilter,
    next: Arc<Generation>,
    slot: Option<OwnedMutexGuard<Slot>>,
}

impl Building {
    /// The filter being built. Add keys and merge bits into it freely (it is lock-free).
    pub fn filter(&self) -> &AnyFilter {
        &self.next.filter
    }

    /// An owned handle on the filter being built, usable after this [`Building`] is gone
    /// (and, after [`finish`](Self::finish), the same filter as the serving one).
    pub fn handle(&self) -> CurrentFilter {
        CurrentFilter(Arc::clone(&self.next))
    }

    /// Swaps the built filter in: from now on it serves, and inserts write it alone.
    pub fn finish(mut self) {
        let shared = &*self.filter.shared;
        {
            let mut building = shared.write_building();
            shared.current.store(Arc::clone(&self.next));
            *building = None;
        }
        // Counted from the bits: keys merged in from elsewhere were not counted on insert.
        let estimate = self.next.filter.estimated_items().round() as u64;
        self.next.items.store(estimate, Relaxed);
        shared
            .counters
            .rebuild_finished(&shared.name, RebuildOutcome::Ok);
        shared.counters.keys(&shared.name, estimate);
        if let Some(mut slot) = self.slot.take() {
            slot.last = Some(Finished::Rebuilt { keys: estimate });
        }
    }
}

impl Drop for Building {
    fn drop(&mut self) {
        if let Some(mut slot) = self.slot.take() {
            // Abandoned: stop writing a filter that will never serve; every insert also went
            // into the serving one.
            *self.filter.shared.write_building() = None;
            let shared = &*self.filter.shared;
            shared
                .counters
                .rebuild_finished(&shared.name, RebuildOutcome::Cancelled);
            slot.last = Some(Finished::Cancelled);
        }
    }
}

impl fmt::Debug for Building {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Building")
            .field("filter", &self.next.filter)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use bloom_core::BloomFilter;
    use std::sync::Mutex;

    use super::*;

    fn seeded() -> BloomFilter {
        BloomFilter::builder()
            .bits(8192)
            .hashes(4)
            .seed(3)
            .build()
            .unwrap()
    }

    #[test]
    fn the_hook_sees_every_insert_after_it_is_local() {
        let filter = SharedFilter::new(seeded());
        let seen = Arc::new(Mutex::new(Vec::new()));
        let (log, probe) = (Arc::clone(&seen), filter.clone());
        filter.set_insert_hook(Some(Arc::new(move |bytes: &[u8]| {
            assert!(probe.contains(bytes));
            log.lock().unwrap().push(bytes.to_vec());
        })));
        filter.clone().insert("a");
        filter.insert(&7u16);
        assert_eq!(*seen.lock().unwrap(), [b"a".to_vec(), vec![7, 0]]);
        filter.set_insert_hook(None);
        filter.insert("b");
        assert_eq!(seen.lock().unwrap().len(), 2);
    }

    #[tokio::test]
    async fn an_external_build_double_writes_then_swaps() {
        let filter = SharedFilter::new(seeded());
        filter.insert("old");
        let building = filter.start_building(seeded()).unwrap();
        assert_eq!(
            filter.start_building(seeded()).unwrap_err(),
            AlreadyBuilding
        );
        assert!(filter.stats().rebuilding);
        filter.insert("during");
        building.filter().insert("from elsewhere");
        let handle = building.handle();
        assert!(building.filter().contains("during"));
        assert!(!filter.contains("from elsewhere"));
        building.finish();
        assert!(filter.contains("during") && filter.contains("from elsewhere"));
        assert!(std::ptr::eq(&*handle, &*filter.current()));
        assert!(
            !filter.contains("old"),
            "a rebuild drops what it was not given"
        );
        let stats = filter.stats();
        assert_eq!((stats.rebuilds, stats.rebuilding), (1, false));
        // A normal rebuild still works afterwards.
        filter.reload_from(&vec!["x"]).await.unwrap();
        assert!(filter.contains("x"));
    }

    #[tokio::test]
    async fn dropping_an_external_build_keeps_the_serving_filter() {
        let filter = SharedFilter::new(seeded());
        let building = filter.start_building(seeded()).unwrap();
        filter.insert("during");
        drop(building);
        assert!(filter.contains("during"));
        assert!(!filter.stats().rebuilding);
        assert_eq!(filter.stats().cancelled_rebuilds, 1);
        let again = filter.start_building(seeded()).unwrap();
        again.finish();
    }
}
