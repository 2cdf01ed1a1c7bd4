//! Removing a deleted record's key from a counting or cuckoo filter: [`SharedFilter::remove`], only ever
//! from the filter that served before the delete (the [module docs](super) say why).

use std::sync::atomic::Ordering::Relaxed;

use super::SharedFilter;
use crate::key::KeyFor;

impl<K: ?Sized> SharedFilter<K> {
    /// The serving filter's generation: take it **before** deleting a record, and pass it to
    /// [`remove`](Self::remove) after the delete is committed.
    pub fn generation(&self) -> FilterGeneration {
        FilterGeneration(self.shared.current.load().number)
    }

    /// Removes one insertion of `key` from a counting or cuckoo filter, so the guard rejects
    /// it again.
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
    ///
    /// A [`CuckooFilter`](bloom_core::CuckooFilter) follows the same rules: removing a key it
    /// does not hold could take another key's fingerprint (a false negative), so only the
    /// generation that served before the delete is touched, once per deleted record.
    pub fn remove<Q: KeyFor<K> + ?Sized>(
        &self,
        key: &Q,
        before_delete: FilterGeneration,
    ) -> Result<RemoveOutcome, CannotRemove> {
        let shared = &*self.shared;
        let current = shared.current.load();
        let filter = &current.filter;
        if !filter.can_remove() {
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
}

/// Which filter served when [`SharedFilter::generation`] was called; for
/// [`SharedFilter::remove`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FilterGeneration(pub(super) u64);

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
    "a {kind} Bloom filter cannot remove keys; share a CuckooFilter or a CountingBloomFilter to remove deleted keys"
)]
pub struct CannotRemove {
    kind: &'static str,
}
