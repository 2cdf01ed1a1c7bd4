//! [`GuardedCache`]: filter → cache → one loader per key, with negative caching.
//!
//! # Why dashmap + per-key locks rather than moka's own coalescing
//!
//! moka's `try_get_with` also runs one init per key and survives a cancelled or panicking
//! init, but it cannot do everything this cache needs: keep "not found" (`Ok(None)`) as a
//! short-lived negative entry while handing it to every waiter, count the waiters, bound
//! each load with a timeout that all waiters see, and show there is no leak by exposing the
//! table of loads in flight ([`GuardedCache::loads_in_flight`]). So answers live in two
//! `moka::sync::Cache`s, and the loads in flight live in the crate's private `flight` module: a
//! `DashMap` from key to a write-locked slot, removed as soon as the load ends, whose `Drop`
//! guard releases the waiters if the leader is cancelled or panics.
//!
//! # Why `moka::sync` rather than `moka::future`
//!
//! This cache needs none of moka's async API: it coalesces loads itself, keeps its own
//! deadlines and has no eviction listener. With `moka::sync` a hit is a plain function call,
//! with no future state to build and poll (a bare `moka::sync` `get` costs about 20% less than
//! a `moka::future` one on the same keys). The housekeeping is the same: both run it inline on
//! the calling thread, at the same points (a read or write that finds 64 operations logged, or
//! 300 ms gone since the last run, takes the housekeeping lock with a `try_lock`, and goes on
//! without it if another caller holds it), and without an eviction listener `moka::future`'s
//! housekeeping never yields either: the async locks it awaits are only ever taken under that
//! housekeeping lock, so they are always free. One difference: a write (a load's insert, an
//! invalidation) that finds moka's write log full (384 operations queued while another thread
//! runs the housekeeping) sleeps its thread in 50 µs steps until there is room, where
//! `moka::future` would yield to the runtime; only hundreds of loads or invalidations landing
//! during one housekeeping run get there.
//!
//! # Why two moka caches, and deadlines of our own
//!
//! A hit must cost little more than a bare moka `get`. moka's per-entry expiry (its `Expiry`
//! policy) costs every read about 300 instructions of `Instant` arithmetic, and one moka
//! cache with a single TTL cannot give values a jittered lifetime and "not found" a shorter
//! one. So:
//!
//! * values live in one cache whose moka TTL is `time_to_live`, each with its own deadline
//!   (a random 90–100% of it), checked on every hit against a coarse clock (see `clock`): a
//!   value past its deadline is a miss, and the load it leads to overwrites it; moka drops it
//!   at the latest when the full TTL ends;
//! * negative entries live in another, whose moka TTL is `negative_ttl`, so moka itself drops
//!   them on time: a flood of keys the filter lets through by mistake cannot fill the cache
//!   with dead "not found"s for the whole `time_to_live`, nor evict values (each cache has its
//!   own `max_capacity`).
//!
//! A lookup asks the value cache, then the negative one.

mod clock;
mod error;
mod remote;
#[cfg(feature = "axum")]
mod response;
mod stats;

use std::any::TypeId;
use std::future::Future;
use std::hash::Hash;
use std::marker::PhantomData;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use bloom_core::Key;
use futures_util::FutureExt;

use clock::Clock;
use error::ErasedError;
pub use error::{LoadError, LoadErrorKind};
use remote::RemoteForgets;
#[cfg(feature = "axum")]
#[cfg_attr(docsrs, doc(cfg(feature = "axum")))]
pub use response::CacheResponse;
use stats::CacheCounters;
pub use stats::CacheStats;

use crate::SharedFilter;
use crate::cache_settings::CacheSettings;
use crate::flight::{Flights, Role, wait};
use crate::shared_filter::{AfterCommit, ForgetByDigest, PendingInsert};

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
    inner: Arc<Inner<K, V>>,
}

struct Inner<K, V> {
    filter: SharedFilter<K>,
    /// Loaded values; moka drops them after `time_to_live`, a hit after their own (jittered,
    /// earlier) deadline is a miss.
    values: moka::sync::Cache<K, Fresh<V>>,
    /// Negative entries; moka drops them after `negative_ttl`.
    absent: moka::sync::Cache<K, Absent>,
    /// What value deadlines are read on.
    clock: Clock,
    /// The value lifetime, before jitter.
    time_to_live: Duration,
    flights: Flights<(K, TypeId), Outcome<V>>,
    load_timeout: Option<Duration>,
    /// The `cache` label of its series.
    name: std::borrow::Cow<'static, str>,
    counters: CacheCounters,
    /// Bumped by every invalidation, so a load that raced with one does not leave a stale
    /// entry behind (see `lead`).
    invalidations: AtomicU64,
    /// Keys created on other instances ([`SharedFilter::forget_remote`]), by digest.
    remote: RemoteForgets,
}

/// A cached value.
#[derive(Clone)]
struct Fresh<V> {
    value: V,
    /// When it stops being served, on [`Inner::clock`]: a random 90–100% of `time_to_live`
    /// after it was cached.
    deadline: u64,
}

/// A negative entry: the loader found nothing.
#[derive(Clone, Copy)]
struct Absent {
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

/// Configures a [`GuardedCache`]; start from [`GuardedCache::builder`].
#[must_use]
pub struct GuardedCacheBuilder<K, V> {
    _types: PhantomData<fn() -> (K, V)>,
    filter: SharedFilter<K>,
    settings: CacheSettings,
    max_capacity: u64,
    load_timeout: Option<Duration>,
}

impl<K, V> GuardedCacheBuilder<K, V>
where
    K: Key + Hash + Eq + Clone + Send + Sync + 'static,
    V: Clone + Send + Sync + 'static,
{
    /// Most values kept, and, apart, most negative entries kept; 10,000 each by default.
    /// Negative entries have a bound of their own so that a flood of keys the filter lets
    /// through by mistake cannot evict values.
    pub fn max_capacity(mut self, entries: u64) -> Self {
        self.max_capacity = entries;
        self
    }

    /// How long a loaded value is served before it is loaded again; 5 minutes by default.
    /// Each entry lives a random 90–100% of it, so keys loaded together (a hot set after a
    /// deploy) do not all expire, and stampede the database, together.
    pub fn time_to_live(mut self, ttl: Duration) -> Self {
        self.settings.time_to_live = ttl;
        self
    }

    /// How long "not found" is remembered; 30 seconds by default. Keep it short: it is how
    /// long a key created elsewhere without [`GuardedCache::invalidate`] (or, for another
    /// instance, [`SharedFilter::forget_remote`]) stays invisible.
    pub fn negative_ttl(mut self, ttl: Duration) -> Self {
        self.settings.negative_ttl = ttl;
        self
    }

    /// How long a load may run before it and everyone waiting for it get
    /// [`LoadErrorKind::Timeout`]; 10 seconds by default.
    pub fn load_timeout(mut self, timeout: Duration) -> Self {
        self.load_timeout = Some(timeout);
        self
    }

    /// The name used as the `cache` metric label; `"default"` by default.
    pub fn name(mut self, name: impl Into<std::borrow::Cow<'static, str>>) -> Self {
        self.settings.name = name.into();
        self
    }

    /// Builds the cache.
    pub fn build(self) -> GuardedCache<K, V> {
        let CacheSettings {
            name,
            time_to_live,
            negative_ttl,
        } = self.settings;
        let values = moka::sync::Cache::builder()
            .max_capacity(self.max_capacity)
            .time_to_live(time_to_live.min(MOKA_MAX_TTL))
            .build();
        let absent = moka::sync::Cache::builder()
            .max_capacity(self.max_capacity)
            .time_to_live(negative_ttl.min(MOKA_MAX_TTL))
            .build();
        // From now on the filter's measured rate means something.
        self.filter.reports_false_positives();
        let inner = Arc::new(Inner {
            filter: self.filter,
            values,
            absent,
            clock: Clock::new(),
            time_to_live,
            flights: Flights::new(),
            load_timeout: self.load_timeout,
            name,
            counters: CacheCounters::default(),
            invalidations: AtomicU64::new(0),
            remote: RemoteForgets::new(negative_ttl),
        });
        let forget: Weak<dyn ForgetByDigest> = Arc::downgrade(&inner) as Weak<_>;
        inner.filter.register_cache(forget);
        GuardedCache { inner }
    }
}

/// The longest TTL moka accepts (its builder panics beyond): longer is as good as forever.
const MOKA_MAX_TTL: Duration = Duration::from_secs(1_000 * 365 * 24 * 3600);

impl<K, V> GuardedCache<K, V>
where
    K: Key + Hash + Eq + Clone + Send + Sync + 'static,
    V: Clone + Send + Sync + 'static,
{
    /// Starts configuring a cache guarded by `filter`.
    pub fn builder(filter: SharedFilter<K>) -> GuardedCacheBuilder<K, V> {
        GuardedCacheBuilder {
            _types: PhantomData,
            filter,
            settings: CacheSettings::new(Duration::from_secs(300), Duration::from_secs(30)),
            max_capacity: 10_000,
            load_timeout: Some(Duration::from_secs(10)),
        }
    }

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
        if !inner.filter.contains(key) {
            inner.counters.filter_rejection(&inner.name, &inner.filter);
            return Ok(None);
        }
        if let Some(entry) = self.cached(key) {
            return Ok(self.served_from_cache(entry));
        }
        // The miss path's state (the flight, the loader, its timeout, the cache writes) is
        // large: boxing it, on a miss only, keeps the hit path's future small.
        Box::pin(self.load_missed(key, load)).await
    }

    /// [`get_or_load`](Self::get_or_load) after the filter let `key` through and the cache
    /// missed: wait for the key's load in flight, or run one.
    async fn load_missed<F, Fut, E>(&self, key: &K, load: F) -> Result<Option<V>, LoadError<E>>
    where
        F: FnOnce(K) -> Fut,
        Fut: Future<Output = Result<Option<V>, E>>,
        E: Send + Sync + 'static,
    {
        let inner = &*self.inner;
        let flight_key = (key.clone(), TypeId::of::<E>());
        let flight = loop {
            if let Some(entry) = self.cached(key) {
                return Ok(self.served_from_cache(entry));
            }
            match inner.flights.join(&flight_key) {
                Role::Leader(flight) => {
                    // A load that finished between our cache miss and `join` cached its
                    // outcome before leaving the table: read it instead of loading again.
                    if let Some(entry) = self.cached(key) {
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
    fn invalidate(&self, key: &K) {
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

#[cfg(test)]
mod tests {
    //! Value deadlines, on a clock the tests move (moka still sees the real time, so these
    //! fail if the deadline check is skipped; the real-time expiry is in tests/guarded_cache.rs).

    use super::clock::test_skew;
    use super::*;
    use crate::BloomFilter;

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
