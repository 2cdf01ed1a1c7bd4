//! The cache's part of a [`PendingInsert`]: a create forgets the "not found" cached for its
//! key, even when the request is cancelled after the commit.

use std::hash::Hash;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use bloom_core::Key;

use super::cache::{GuardedCache, Inner};
use crate::shared_filter::{AfterCommit, PendingInsert};

impl<K, V> GuardedCache<K, V>
where
    K: Key + Hash + Eq + Clone + Send + Sync + 'static,
    V: Clone + Send + Sync + 'static,
{
    /// Inserts `key` now, before the write that creates its record becomes visible, and
    /// returns a [`PendingInsert`]: call [`PendingInsert::committed`] once the write is
    /// committed. It writes `key` into every filter a rebuild published since the insert (the
    /// rebuild's source may have missed the open transaction; with no rebuild in between it
    /// writes nothing, so a counting filter counts the key once), and on a
    /// [`GuardedCache`] it also forgets any "not found" cached for the key
    /// meanwhile, so the very next lookup finds the record. If the request is cancelled after
    /// the commit, the `PendingInsert`'s `Drop` does that work instead. The same on
    /// [`SharedFilter::prepare_insert`](crate::SharedFilter::prepare_insert) and
    /// [`GuardedCache::prepare_insert`](crate::GuardedCache::prepare_insert).
    ///
    /// ```
    /// # use bloom_tower::{BloomFilter, GuardedCache, SharedFilter};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let filter = SharedFilter::<u64>::new(BloomFilter::new(1_000, 0.01)?);
    /// # let users: GuardedCache<u64, String> = GuardedCache::builder(filter).build();
    /// let pending = users.prepare_insert(&42);
    /// // INSERT INTO users (id, …) VALUES (42, …): committed
    /// pending.committed().await;
    /// let found = users.get_or_load(&42, |_| async { Ok::<_, std::io::Error>(Some("Ada".to_owned())) }).await?;
    /// assert_eq!(found.as_deref(), Some("Ada"));
    /// # Ok(())
    /// # }
    /// ```
    pub fn prepare_insert(&self, key: &K) -> PendingInsert {
        let forget = Forget {
            inner: Arc::clone(&self.inner),
            key: key.clone(),
        };
        PendingInsert::new(&self.inner.filter, key, Some(Box::new(forget)))
    }
}

/// The cache's part of a [`PendingInsert`]: the epoch bump and the invalidation of one key.
struct Forget<K, V> {
    inner: Arc<Inner<K, V>>,
    key: K,
}

impl<K, V> AfterCommit for Forget<K, V>
where
    K: Key + Hash + Eq + Clone + Send + Sync + 'static,
    V: Clone + Send + Sync + 'static,
{
    fn fence(&self) {
        self.inner.invalidations.fetch_add(1, Ordering::SeqCst);
    }

    fn forget(&self) {
        self.inner.invalidate(&self.key);
    }
}
