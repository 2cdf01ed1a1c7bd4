//! [`GuardedCache`]: the lookup path (filter, cache, one load per key) and its state.

use std::any::TypeId;
use std::future::Future;
use std::hash::Hash;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bloom_core::Key;
use futures_util::FutureExt;

#[cfg(doc)]
use super::GuardedCacheBuilder;
use super::LoadError;
use super::clock::Clock;
use super::error::ErasedError;
use super::remote::RemoteForgets;
use super::stats::{CacheCounters, CacheStats};
use crate::SharedFilter;
use crate::flight::{Flights, Role, wait};
use crate::shared_filter::{ForgetByDigest, Rejection};

/// What a load hands to its waiters.
type Outcome<V> = Result<Option<V>, ErasedError>;

/// Each value lives a random 90–100% of the time to live (see
/// [`GuardedCacheBuilder::time_to_live`]).
const TTL_JITTER: f64 = 0.1;

/// A cache in front of a loader (your database), guarded by a Bloom filter, that runs at
/// most one load per key at a time. Cheap to clone: clones share everything.
///
/// ```
/// use std::time::Duration;
/// use bloom_tower::{BloomFilter, GuardedCache, SharedFilter};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// #[derive(Clone)]
/// struct User { name: String }
/// # struct Db;
/// # impl Db { async fn find_user(&self, id: u64) -> Result<Option<User>, std::io::Error> {
/// #     Ok((id == 42).then(|| User { name: "Ada".into() })) } }
/// # let db = std::sync::Arc::new(Db);
///
/// let filter = SharedFilter::<u64>::new(BloomFilter::new(1_000_000, 0.01)?);
/// filter.insert(&42u64);
/// let users: GuardedCache<u64, User> = GuardedCache::builder(filter.clone())
///     .max_capacity(100_000)
///     .time_to_live(Duration::from_secs(300))
///     .negative_ttl(Duration::from_secs(30))
///     .load_timeout(Duration::from_secs(2))
///     .build();
///
/// let id = 42u64;
/// let db2 = db.clone();
/// let user = users.get_or_load(&id, |id| async move { db2.find_user(id).await }).await?;
/// assert_eq!(user.map(|u| u.name).as_deref(), Some("Ada"));
/// let nobody = users.get_or_load(&7, |id| async move { db.find_user(id).await }).await?;
/// assert!(nobody.is_none()); // the filter answered: the loader did not run
/// # Ok(())
/// # }
/// ```
pub struct GuardedCache<K, V> {
    pub(super) inner: Arc<Inner<K, V>>,
}

pub(super) struct Inner<K, V> {
    pub(super) filter: SharedFilter<K>,
    /// Loaded values; moka drops them after `time_to_live`, a hit after their own (jittered,
    /// earlier) deadline is a miss.
    pub(super) values: moka::sync::Cache<K, Fresh<V>>,
    /// Negative entries; moka drops them after `negative_ttl`.
    pub(super) absent: moka::sync::Cache<K, Absent>,
    /// What value deadlines are read on.
    pub(super) clock: Clock,
    /// The value lifetime, before jitter.
    pub(super) time_to_live: Duration,
    pub(super) flights: Flights<(K, TypeId), Outcome<V>>,
    pub(super) load_timeout: Option<Duration>,
    /// The `cache` label of its series.
    pub(super) name: std::borrow::Cow<'static, str>,
    pub(super) counters: CacheCounters,
    /// Bumped by every invalidation, so a load that raced with one does not leave a stale
    /// entry behind (see `lead`).
    pub(super) invalidations: AtomicU64,
    /// Keys created on other instances ([`SharedFilter::forget_remote`]), by digest.
    pub(super) remote: RemoteForgets,
}

/// A cached value.
#[derive(Clone)]
pub(super) struct Fresh<V> {
    value: V,
    /// When it stops being served, on [`Inner::clock`]: a random 90–100% of `time_to_live`
    /// after it was cached.
    deadline: u64,
}

/// A negative entry: the loader found nothing.
#[derive(Clone, Copy)]
pub(super) struct Absent {
    /// The [`RemoteForgets`] epoch its load began at: a remote forget of its key after that
    /// makes it stale.
    since: u64,
}

impl<K, V> Clone for GuardedCache<K, V> {
    fn clone(&self) -> Self {
        Self {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl<K, V> GuardedCache<K, V>
where
    K: Key + Hash + Eq + Clone + Send + Sync + 'static,
    V: Clone + Send + Sync + 'static,
{
    /// The value for `key`: `Ok(None)` if it does not exist.
    ///
    /// In order: the filter says absent → `Ok(None)` (cache and loader untouched); a cached
    /// value → it; a negative entry → `Ok(None)`; otherwise one caller per key runs `load`
    /// while the others wait for its outcome. `Ok(Some(v))` is cached, `Ok(None)` is
    /// negative-cached (a filter false positive, or a deleted row), an error is returned to
    /// the caller that ran the load and to every waiter, and not cached.
    pub async fn get_or_load<F, Fut, E>(&self, key: &K, load: F) -> Result<Option<V>, LoadError<E>>
    where
        F: FnOnce(K) -> Fut,
        Fut: Future<Output = Result<Option<V>, E>>,
        E: Send + Sync + 'static,
    {
        let inner = &*self.inner;
        if !inner.filter.check(key).await {
            inner.counters.filter_rejection(&inner.name, &inner.filter);
            return Ok(None);
        }
        // Whether a negative entry may answer: not once its confirmation failed.
        let mut negative = true;
        if let Some(entry) = self.cached(key) {
            let entry = match entry {
                Some(value) => Some(Some(value)),
                None => self.confirm_absent(key).await,
            };
            match entry {
                Some(entry) => return Ok(self.served_from_cache(entry)),
                None => negative = false,
            }
        }
        // The miss path's state (the flight, the loader, its timeout, the cache writes) is
        // large: boxing it, on a miss only, keeps the hit path's future small.
        Box::pin(self.load_missed(key, load, negative)).await
    }

    /// [`get_or_load`](Self::get_or_load) after the filter let `key` through and the cache
    /// missed: wait for the key's load in flight, or run one. `negative`: a negative entry
    /// found meanwhile may answer (not after its confirmation failed).
    async fn load_missed<F, Fut, E>(
        &self,
        key: &K,
        load: F,
        negative: bool,
    ) -> Result<Option<V>, LoadError<E>>
    where
        F: FnOnce(K) -> Fut,
        Fut: Future<Output = Result<Option<V>, E>>,
        E: Send + Sync + 'static,
    {
        let inner = &*self.inner;
        let flight_key = (key.clone(), TypeId::of::<E>());
        let cached = |key: &K| self.cached(key).filter(|entry| negative || entry.is_some());
        let flight = loop {
            if let Some(entry) = cached(key) {
                return Ok(self.served_from_cache(entry));
            }
            match inner.flights.join(&flight_key) {
                Role::Leader(flight) => {
                    // A load that finished between our cache miss and `join` cached its
                    // outcome before leaving the table: read it instead of loading again.
                    if let Some(entry) = cached(key) {
                        flight.complete(Ok(entry.clone()));
                        return Ok(self.served_from_cache(entry));
                    }
                    break flight;
                }
                Role::Waiter(slot) => {
                    inner.counters.coalesced_waiter(&inner.name);
                    match wait(slot).await {
                        Some(outcome) => {
                            if let Ok(None) = outcome {
                                inner.counters.false_positive(&inner.name, &inner.filter);
                            }
                            return outcome.map_err(ErasedError::restore);
                        }
                        // The leader went away mid-load: look again, and lead if nobody has.
                        None => continue,
                    }
                }
            }
        };

        let epoch = inner.invalidations.load(Ordering::SeqCst);
        let (since, began) = (inner.remote.epoch(), Instant::now());
        inner.counters.load(&inner.name);
        let outcome = self.run_load(key.clone(), load).await;
        inner.counters.load_took(&inner.name, began.elapsed());
        match &outcome {
            Ok(value) => {
                if value.is_none() {
                    inner.counters.false_positive(&inner.name, &inner.filter);
                }
                // A create elsewhere that raced with this load: its "not found" is stale.
                // (One forgotten during the insert below is caught by `since` on lookup.)
                let cache = value.is_some()
                    || inner
                        .remote
                        .may_cache_absent(since, began, || inner.filter.key_digest(key));
                match value {
                    Some(value) => {
                        let lifetime = inner
                            .time_to_live
                            .mul_f64(1.0 - TTL_JITTER * fastrand::f64());
                        let fresh = Fresh {
                            value: value.clone(),
                            deadline: inner.clock.deadline(lifetime),
                        };
                        inner.values.insert(key.clone(), fresh);
                    }
                    None if cache => inner.absent.insert(key.clone(), Absent { since }),
                    None => {}
                }
                // An invalidation that raced with this load (a user created after the loader
                // read "absent") must win: if one happened since the load began, drop what we
                // just cached. Whichever order the two run in, the entry does not survive.
                if inner.invalidations.load(Ordering::SeqCst) != epoch {
                    inner.invalidate(key);
                }
            }
            Err(_) => inner.counters.load_error(&inner.name),
        }
        flight.complete(outcome.clone().map_err(ErasedError::erase));
        outcome
    }

    /// The cached answer for `key`: its value, unless past its deadline, else a "not found",
    /// unless a remote create made it stale ([`SharedFilter::forget_remote`]). Anything else
    /// is a miss, and the load it leads to overwrites what was there.
    fn cached(&self, key: &K) -> Option<Option<V>> {
        let inner = &*self.inner;
        if let Some(fresh) = inner.values.get(key) {
            if !inner.clock.is_past(fresh.deadline) {
                return Some(Some(fresh.value));
            }
            // Past its deadline: a miss, unless "not found" was cached since.
        }
        let absent = inner.absent.get(key)?;
        if inner
            .remote
            .is_stale(absent.since, || inner.filter.key_digest(key))
        {
            return None;
        }
        Some(None)
    }

    /// A negative entry is about to answer "not found": on a filter shared with other
    /// instances, the answer waits for proof that the view is current, as the filter's own
    /// rejections do ([`Rejection::Confirm`]), and the cache is then looked at again (a
    /// create elsewhere may have made the entry stale meanwhile). `None`: a miss (load).
    async fn confirm_absent(&self, key: &K) -> Option<Option<V>> {
        match self.inner.filter.rejection() {
            Rejection::Stands => Some(None),
            Rejection::LetThrough => None,
            Rejection::Confirm(confirmation) => {
                if confirmation.await {
                    self.cached(key)
                } else {
                    None
                }
            }
        }
    }

    /// Counts a lookup answered by the cache: a value, or a negative entry.
    fn served_from_cache(&self, entry: Option<V>) -> Option<V> {
        let Inner {
            name,
            counters,
            filter,
            ..
        } = &*self.inner;
        match entry {
            Some(value) => {
                counters.hit(name);
                Some(value)
            }
            None => {
                counters.negative_hit(name);
                counters.false_positive(name, filter);
                None
            }
        }
    }

    async fn run_load<F, Fut, E>(&self, key: K, load: F) -> Result<Option<V>, LoadError<E>>
    where
        F: FnOnce(K) -> Fut,
        Fut: Future<Output = Result<Option<V>, E>>,
    {
        // A panicking loader must not take the waiters down with it, nor leave the key locked.
        let guarded = AssertUnwindSafe(async move { load(key).await }).catch_unwind();
        let finished = match self.inner.load_timeout {
            Some(limit) => match tokio::time::timeout(limit, guarded).await {
                Ok(finished) => finished,
                Err(_) => return Err(LoadError::timed_out(limit)),
            },
            None => guarded.await,
        };
        match finished {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(e)) => Err(LoadError::loader(Arc::new(e))),
            Err(_panic) => Err(LoadError::panicked()),
        }
    }

    /// Forgets `key`'s cached value or negative entry; the next lookup loads it again.
    pub async fn invalidate(&self, key: &K) {
        self.inner.invalidations.fetch_add(1, Ordering::SeqCst);
        self.inner.invalidate(key);
    }

    /// Counters since the cache was built.
    pub fn stats(&self) -> CacheStats {
        self.inner.counters.snapshot(&self.inner.filter)
    }

    /// Loads in flight right now (one per key): 0 when idle, whatever happened before.
    pub fn loads_in_flight(&self) -> usize {
        self.inner.flights.len()
    }
}

impl<K, V> Inner<K, V>
where
    K: Hash + Eq + Send + Sync + 'static,
    V: Clone + Send + Sync + 'static,
{
    /// Drops `key`'s value and negative entry, if any.
    pub(super) fn invalidate(&self, key: &K) {
        self.values.invalidate(key);
        self.absent.invalidate(key);
    }
}

impl<K, V> ForgetByDigest for Inner<K, V>
where
    K: Send + Sync,
    V: Send + Sync,
{
    fn forget_digest(&self, digest: u64) {
        self.remote.forget(digest);
    }
}

#[cfg(test)]
mod tests {
    //! Value deadlines, on a clock the tests move (moka still sees the real time, so these
    //! fail if the deadline check is skipped; the real-time expiry is in tests/guarded_cache.rs).

    use super::*;
    use crate::BloomFilter;
    use crate::guarded_cache::clock::test_skew;

    const TTL: Duration = Duration::from_secs(1_000);

    fn cache(keys: u64) -> GuardedCache<u64, u64> {
        let filter = SharedFilter::new(BloomFilter::new(1_000, 0.01).unwrap());
        for key in 0..keys {
            filter.insert(&key);
        }
        GuardedCache::builder(filter)
            .time_to_live(TTL)
            .negative_ttl(Duration::from_secs(1))
            .build()
    }

    /// Looks every key in `0..keys` up, loading `version`; how many loads ran.
    async fn look_up(cache: &GuardedCache<u64, u64>, keys: u64, version: u64) -> u64 {
        let before = cache.stats().loads;
        for key in 0..keys {
            let found = cache
                .get_or_load(
                    &key,
                    |_| async move { Ok::<_, std::io::Error>(Some(version)) },
                )
                .await
                .unwrap();
            assert!(found.is_some());
        }
        cache.stats().loads - before
    }

    #[tokio::test]
    async fn each_value_lives_a_random_90_to_100_percent_of_the_time_to_live() {
        const KEYS: u64 = 200;
        let cache = cache(KEYS);
        assert_eq!(look_up(&cache, KEYS, 1).await, KEYS);
        // Short of 90% by far more than the clock's lag: every value is still served.
        test_skew::advance(TTL.mul_f64(0.89));
        assert_eq!(look_up(&cache, KEYS, 2).await, 0, "none expired before 90%");
        // At 95%: some expired, some not (all on one side: a chance of 2 in 2^200).
        test_skew::advance(TTL.mul_f64(0.06));
        let expired = look_up(&cache, KEYS, 3).await;
        assert!(
            0 < expired && expired < KEYS,
            "{expired} of {KEYS} expired at 95%"
        );
        // At the full time to live (moka's TTL has not run out: it sees the real time), every
        // value loaded at the start is gone; the ones reloaded at 95% are not.
        test_skew::advance(TTL.mul_f64(0.05));
        assert_eq!(look_up(&cache, KEYS, 4).await, KEYS - expired);
    }

    #[tokio::test]
    async fn a_value_past_its_deadline_is_reloaded_and_served_anew() {
        let cache = cache(1);
        assert_eq!(look_up(&cache, 1, 1).await, 1);
        test_skew::advance(TTL);
        let found = cache
            .get_or_load(&0, |_| async { Ok::<_, std::io::Error>(Some(2)) })
            .await
            .unwrap();
        assert_eq!(found, Some(2), "the expired value is not served");
        let stats = cache.stats();
        assert_eq!((stats.loads, stats.hits), (2, 0));
        // The reload replaced it: served from the cache now.
        let again = cache
            .get_or_load(&0, |_| async { Ok::<_, std::io::Error>(Some(3)) })
            .await
            .unwrap();
        assert_eq!(again, Some(2));
        assert_eq!(cache.stats().hits, 1);
    }

    /// A create cancelled after its commit (its `PendingInsert` dropped) forgets the cached
    /// "not found" in `Drop` itself: the very next lookup, which does not yield to the runtime
    /// before reading the cache, loads the new record instead of answering "absent".
    #[tokio::test]
    async fn a_dropped_pending_insert_forgets_the_cached_not_found_at_once() {
        let cache = cache(1);
        let load = |answer: Option<u64>| move |_| async move { Ok::<_, std::io::Error>(answer) };
        assert_eq!(cache.get_or_load(&0, load(None)).await.unwrap(), None);
        assert_eq!(
            cache.get_or_load(&0, load(Some(1))).await.unwrap(),
            None,
            "the \"not found\" is cached"
        );
        drop(cache.prepare_insert(&0));
        assert_eq!(cache.get_or_load(&0, load(Some(1))).await.unwrap(), Some(1));
    }
}
