//! [`GuardedCacheBuilder`]: a guarded cache's capacity, lifetimes and load timeout.

use std::hash::Hash;
use std::marker::PhantomData;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Weak};
use std::time::Duration;

use bloom_core::Key;

use super::cache::{GuardedCache, Inner};
use super::clock::Clock;
use super::remote::RemoteForgets;
use super::stats::CacheCounters;
use crate::SharedFilter;
use crate::cache_settings::CacheSettings;
use crate::flight::Flights;
use crate::shared_filter::ForgetByDigest;

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
    crate::setters::setters! {
        /// Most values kept, and, apart, most negative entries kept; 10,000 each by default.
        /// Negative entries have a bound of their own so that a flood of keys the filter lets
        /// through by mistake cannot evict values.
        pub fn max_capacity(entries: u64) => max_capacity = entries;

        /// How long a loaded value is served before it is loaded again; 5 minutes by default.
        /// Each entry lives a random 90–100% of it, so keys loaded together (a hot set after a
        /// deploy) do not all expire, and stampede the database, together.
        pub fn time_to_live(ttl: Duration) => settings.time_to_live = ttl;

        /// How long "not found" is remembered; 30 seconds by default. Keep it short: it is how
        /// long a key created elsewhere without [`GuardedCache::invalidate`] (or, for another
        /// instance, [`SharedFilter::forget_remote`]) stays invisible.
        pub fn negative_ttl(ttl: Duration) => settings.negative_ttl = ttl;

        /// How long a load may run before it and everyone waiting for it get
        /// [`LoadErrorKind::Timeout`](super::LoadErrorKind::Timeout); 10 seconds by default.
        pub fn load_timeout(timeout: Duration) => load_timeout = Some(timeout);

        /// The name used as the `cache` metric label; `"default"` by default.
        pub fn name(name: impl Into<std::borrow::Cow<'static, str>>) => settings.name = name.into();
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
}
