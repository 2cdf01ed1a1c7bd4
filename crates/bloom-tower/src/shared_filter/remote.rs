//! Cross-instance invalidation of cached "not found" answers.
//!
//! A record created on instance A stays invisible on instance B for as long as B keeps a
//! cached "not found" for its key (a [`GuardedCache`](crate::GuardedCache) negative entry).
//! A replication layer closes that gap: A's [commit hook](SharedFilter::set_commit_hook)
//! publishes a [keyed digest](SharedFilter::key_digest) of the key (never the key itself: the
//! channel may be readable by more parties than the data), and B calls
//! [`forget_remote`](SharedFilter::forget_remote) with it.

use std::sync::{PoisonError, Weak};

use siphasher::sip::SipHasher13;

use super::SharedFilter;
use crate::key::KeyFor;

/// XOR-ed into the filter's hash key to key the digests: the same secret, but a different
/// PRF key, so a digest reveals nothing about the filter's bit positions and vice versa.
const DIGEST_DOMAIN: u128 = u128::from_le_bytes(*b"bloom-tower:dgst");

/// The digest function of a filter whose hash key is `seed`.
pub(super) fn digester(seed: u128) -> SipHasher13 {
    SipHasher13::new_with_key(&(seed ^ DIGEST_DOMAIN).to_le_bytes())
}

/// Something that caches answers per key and can forget those of every key with a digest:
/// a [`GuardedCache`](crate::GuardedCache) built on the filter.
pub(crate) trait ForgetByDigest: Send + Sync {
    /// A record whose key has `digest` was committed elsewhere: stop answering "not found"
    /// for it. Synchronous and quick: it runs on the caller's thread, runtime or not.
    fn forget_digest(&self, digest: u64);
}

impl<K: ?Sized> SharedFilter<K> {
    /// A keyed 64-bit digest of `key` ([`Key::key_bytes`](bloom_core::Key::key_bytes)): SipHash-1-3 under a key derived
    /// from the hash key of the filter this `SharedFilter` was built with. Meant for telling
    /// other instances *which* key changed without sending the key: instances built with the
    /// same hash key compute the same digest, and without the hash key nobody can compute it
    /// or tell which key a digest stands for (short of a collision, 2⁻⁶⁴ per pair).
    ///
    /// Fixed for this filter's life: a rebuild with
    /// [`rotate_seed`](crate::shared_filter::SharedFilterBuilder::rotate_seed) changes the bit hashing, not
    /// this (instances rotate independently, their digests must still agree).
    ///
    /// ```
    /// use bloom_tower::{BloomFilter, SharedFilter};
    ///
    /// let filter = || {
    ///     BloomFilter::builder()
    ///         .expected_items(1_000)
    ///         .false_positive_rate(0.01)
    ///         .seed(42) // shared by the instances, like the filter's bits
    ///         .build()
    /// };
    /// let (a, b) = (SharedFilter::<u64>::new(filter()?), SharedFilter::<u64>::new(filter()?));
    /// assert_eq!(a.key_digest(&7u64), b.key_digest(&7u64)); // same hash key, same digest
    /// assert_ne!(a.key_digest(&7u64), a.key_digest(&8u64));
    /// # Ok::<(), bloom_core::BuildError>(())
    /// ```
    pub fn key_digest<Q: KeyFor<K> + ?Sized>(&self, key: &Q) -> u64 {
        self.shared.digest.hash(key.key_bytes().as_ref())
    }

    /// A record whose key has this [digest](Self::key_digest) was committed on another
    /// instance: every [`GuardedCache`](crate::GuardedCache) built on this filter (on any
    /// clone of it) stops answering "not found" for every key with that digest, from its
    /// cache and from a load in flight, so the next lookup loads the key again. Values
    /// already cached stay (a create does not change an existing record).
    ///
    /// Synchronous and cheap (no I/O, no runtime needed); a digest no cache knows is
    /// harmless. Call it with the digests a replication layer receives from the other
    /// instances' [commit hooks](Self::set_commit_hook).
    ///
    /// ```
    /// # use bloom_tower::{BloomFilter, GuardedCache, SharedFilter};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let filter = SharedFilter::<u64>::new(BloomFilter::new(1_000, 0.01)?);
    /// filter.insert(&7u64); // replicated from the instance that created it
    /// let users: GuardedCache<u64, String> = GuardedCache::builder(filter.clone()).build();
    /// let absent = |_| async { Ok::<_, std::io::Error>(None) };
    /// assert_eq!(users.get_or_load(&7, absent).await?, None); // not committed yet: cached
    /// filter.forget_remote(filter.key_digest(&7u64));          // committed elsewhere
    /// let found = |_| async { Ok::<_, std::io::Error>(Some("Ada".to_owned())) };
    /// assert_eq!(users.get_or_load(&7, found).await?.as_deref(), Some("Ada"));
    /// # Ok(())
    /// # }
    /// ```
    pub fn forget_remote(&self, digest: u64) {
        // Called outside the lock: a cache must be free to register or drop meanwhile.
        let caches: Vec<_> = {
            let mut caches = self.caches();
            caches.retain(|cache| cache.strong_count() > 0);
            caches.iter().filter_map(Weak::upgrade).collect()
        };
        for cache in caches {
            cache.forget_digest(digest);
        }
    }

    /// Registers a cache for [`forget_remote`](Self::forget_remote); it stays registered
    /// until it is dropped (only a weak reference is kept).
    #[cfg(feature = "guarded-cache")]
    pub(crate) fn register_cache(&self, cache: Weak<dyn ForgetByDigest>) {
        let mut caches = self.caches();
        caches.retain(|cache| cache.strong_count() > 0);
        caches.push(cache);
    }

    fn caches(&self) -> std::sync::MutexGuard<'_, Vec<Weak<dyn ForgetByDigest>>> {
        self.shared
            .caches
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use bloom_core::BloomFilter;

    use super::*;

    fn seeded(seed: u128) -> BloomFilter {
        BloomFilter::builder()
            .bits(4096)
            .hashes(3)
            .seed(seed)
            .build()
            .unwrap()
    }

    #[test]
    fn the_digest_is_not_the_filters_own_hash() {
        // The filter hashes with SipHash-1-3 under the seed itself; the digest must not be
        // that value, or digests would give away bit positions.
        let filter = SharedFilter::<u64>::new(seeded(9));
        let plain = SipHasher13::new_with_key(&9u128.to_le_bytes()).hash(&7u64.to_le_bytes());
        assert_ne!(filter.key_digest(&7u64), plain);
        assert_eq!(
            filter.key_digest(&7u64),
            digester(9).hash(&7u64.to_le_bytes())
        );
    }

    #[tokio::test]
    async fn a_rotating_rebuild_keeps_the_digest() {
        let filter = SharedFilter::<String>::builder()
            .rotate_seed(true)
            .build(seeded(9));
        let before = filter.key_digest("k");
        filter.reload_from(&vec!["k"]).await.unwrap();
        assert_ne!(filter.current().seed(), 9);
        assert_eq!(filter.key_digest("k"), before);
    }

    // Caches register only with the `guarded-cache` feature.
    #[cfg(feature = "guarded-cache")]
    #[test]
    fn dropped_caches_are_pruned() {
        struct Counting(std::sync::atomic::AtomicU64);
        impl ForgetByDigest for Counting {
            fn forget_digest(&self, _: u64) {
                self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
        }
        let filter = SharedFilter::<u64>::new(seeded(1));
        let kept = std::sync::Arc::new(Counting(0.into()));
        let dropped = std::sync::Arc::new(Counting(0.into()));
        let weak = |c: &std::sync::Arc<Counting>| {
            let c: std::sync::Arc<dyn ForgetByDigest> = c.clone();
            std::sync::Arc::downgrade(&c)
        };
        filter.register_cache(weak(&kept));
        filter.register_cache(weak(&dropped));
        drop(dropped);
        filter.clone().forget_remote(3);
        assert_eq!(kept.0.load(std::sync::atomic::Ordering::Relaxed), 1);
        assert_eq!(filter.caches().len(), 1);
    }
}
