//! [`PendingInsert`]: the create path as one value, so that the work due after a commit is
//! done even when the request is cancelled after it.
//!
//! A create must insert its key before the record becomes visible (so no reader finds a record
//! the guard rejects), and again after the commit into any filter a rebuild published
//! meanwhile (its source read may have missed the open transaction), and it must drop any
//! "not found" cached in between. Written by hand as three steps around an `.await`, the last
//! two are lost whenever the request future is dropped after the commit (a client that
//! disconnects, a timeout layer): the user is then rejected until the next rebuild, or
//! answered "not found" from the cache. The `Drop` of a [`PendingInsert`] does them instead.

use std::fmt;
use std::time::Duration;

use bloom_core::Key;

use super::{Inserted, SharedFilter};
use crate::key::{AnyKey, KeyFor};

/// How long after a cancelled create its after-commit insert is repeated: a commit whose
/// future was dropped may still be applied by the database a moment later, after the first
/// pass, and a rebuild that read the table in between would miss it.
const LATE_COMMIT_GRACE: Duration = Duration::from_secs(5);

/// What else a committed create must do: forget cached "not found" answers for the key.
pub(crate) trait AfterCommit: Send + Sync {
    /// Stops any load in flight from caching a stale answer; synchronous, so `Drop` can do it.
    fn fence(&self);
    /// Drops the cached answers for the key; synchronous too.
    fn forget(&self);
}

/// A key inserted before its record was committed: call [`committed`](Self::committed) once
/// the write is committed. From [`SharedFilter::prepare_insert`] or
/// [`GuardedCache::prepare_insert`](crate::GuardedCache::prepare_insert).
///
/// ```
/// use bloom_tower::{BloomFilter, SharedFilter};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let filter = SharedFilter::<u64>::new(BloomFilter::new(1_000, 0.01)?);
/// let pending = filter.prepare_insert(&42u64); // 1. before the record is visible
/// // 2. INSERT INTO users … COMMIT
/// pending.committed().await;                   // 3. after the commit
/// assert!(filter.contains(&42u64));
/// # Ok(())
/// # }
/// ```
///
/// **Dropped without `committed`** (the request was cancelled, or the write failed), it does
/// the same work anyway: the filter writes and the cache invalidation at once, and both once
/// more a few seconds later in a task spawned on the current Tokio runtime (a commit whose
/// future was dropped may still land after the first pass). For a write that failed this
/// leaves the key in the filter: a false positive until the next rebuild, which is harmless
/// (the lookup finds no record).
#[must_use = "call .committed().await after the commit (dropping it does the same work, later)"]
pub struct PendingInsert {
    filter: SharedFilter<AnyKey>,
    key: Box<[u8]>,
    inserted: Inserted,
    cache: Option<Box<dyn AfterCommit>>,
    done: bool,
}

impl<K: ?Sized> SharedFilter<K> {
    /// Inserts `key` now, before the write that creates its record becomes visible, and
    /// returns a [`PendingInsert`]: call [`PendingInsert::committed`] once the write is
    /// committed. It writes `key` into every filter a rebuild published since the insert (the
    /// rebuild's source may have missed the open transaction; with no rebuild in between it
    /// writes nothing, so a counting filter counts the key once), and on a
    /// [`GuardedCache`](crate::GuardedCache) it also forgets any "not found" cached for the key
    /// meanwhile, so the very next lookup finds the record. If the request is cancelled after
    /// the commit, the `PendingInsert`'s `Drop` does that work instead. The same on
    /// [`SharedFilter::prepare_insert`](crate::SharedFilter::prepare_insert) and
    /// [`GuardedCache::prepare_insert`](crate::GuardedCache::prepare_insert).
    ///
    /// ```
    /// # use bloom_tower::{BloomFilter, SharedFilter};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let filter = SharedFilter::<String>::new(BloomFilter::new(1_000, 0.01)?);
    /// let pending = filter.prepare_insert("order:7");
    /// // the write, committed
    /// pending.committed().await;
    /// assert!(filter.contains("order:7"));
    /// # Ok(())
    /// # }
    /// ```
    pub fn prepare_insert<Q: KeyFor<K> + ?Sized>(&self, key: &Q) -> PendingInsert {
        PendingInsert::new(self, key, None)
    }
}

impl PendingInsert {
    pub(crate) fn new<K: ?Sized, Q: Key + ?Sized>(
        filter: &SharedFilter<K>,
        key: &Q,
        cache: Option<Box<dyn AfterCommit>>,
    ) -> Self {
        // `Key for [u8]` hashes the bytes themselves: the owned copy is the same key.
        let key: Box<[u8]> = key.key_bytes().as_ref().into();
        let filter = filter.untyped();
        let inserted = filter.insert(&*key);
        Self {
            filter,
            key,
            inserted,
            cache,
            done: false,
        }
    }

    /// The write is committed: writes the key into every filter a rebuild published since
    /// the insert, and forgets the cached "not found" answers for it. If this future is
    /// dropped before it finishes, the value's `Drop` finishes the work.
    pub async fn committed(mut self) {
        self.inserted = self.filter.write(&*self.key, Some(self.inserted.newest));
        if let Some(cache) = &self.cache {
            cache.fence();
            cache.forget();
        }
        self.filter.committed_hook(&self.key);
        self.done = true;
    }
}

impl<K: ?Sized> SharedFilter<K> {
    /// Tells the [commit hook](Self::set_commit_hook), if any, that `key`'s after-commit work
    /// is done.
    fn committed_hook(&self, key: &[u8]) {
        if let Some(hook) = self.shared.commit_hook.load().as_deref() {
            hook(key);
        }
    }
}

impl Drop for PendingInsert {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let filter = self.filter.clone();
        let key = std::mem::take(&mut self.key);
        let after = filter.write(&*key, Some(self.inserted.newest));
        let cache = self.cache.take();
        if let Some(cache) = &cache {
            cache.fence();
            cache.forget();
        }
        // Now rather than in the task below, which a runtime shutting down may never run:
        // other instances must hear of the commit, and they do not wait for this cache.
        filter.committed_hook(&key);
        // No runtime (a program shutting down): the work above is what matters.
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        runtime.spawn(async move {
            tokio::time::sleep(LATE_COMMIT_GRACE).await;
            filter.write(&*key, Some(after.newest));
            if let Some(cache) = &cache {
                cache.fence();
                cache.forget();
            }
            filter.committed_hook(&key);
        });
    }
}

impl fmt::Debug for PendingInsert {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PendingInsert")
            .field("filter", &self.filter.name())
            .field("inserted", &self.inserted)
            .finish_non_exhaustive()
    }
}
