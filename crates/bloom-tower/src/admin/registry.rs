//! [`Admin`]: the filters, guards and caches the admin routes show and act on.

use std::fmt;
use std::hash::Hash;
use std::sync::Arc;

use bloom_core::Key;

use crate::BloomGuard;
use crate::guarded_cache::{CacheStats, GuardedCache};
use crate::key::{AnyKey, KeyFor};
use crate::shared_filter::ErasedKeySource;
use crate::stats::GuardStats;
use crate::{KeySource, SharedFilter};

/// What the admin [`router`](fn@super::router) shows and acts on: filters (each with the source a rebuild reads)
/// and caches. Register each under a distinct name.
///
/// ```
/// use bloom_tower::{BloomFilter, GuardedCache, SharedFilter, admin::Admin};
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let filter = SharedFilter::<u64>::builder().name("users").build(BloomFilter::new(1_000, 0.01)?);
/// let cache: GuardedCache<u64, String> = GuardedCache::builder(filter.clone()).build();
/// let admin = Admin::new()
///     .filter(filter, vec![1u64, 2, 3])
///     .cache("users", cache);
/// assert_eq!(format!("{admin:?}"), r#"Admin { filters: ["users"], guards: [], caches: ["users"] }"#);
/// # Ok(())
/// # }
/// ```
#[derive(Default)]
#[must_use]
pub struct Admin {
    pub(super) filters: Vec<FilterEntry>,
    pub(super) guards: Vec<GuardEntry>,
    pub(super) caches: Vec<CacheEntry>,
}

pub(super) struct FilterEntry {
    pub(super) filter: SharedFilter<AnyKey>,
    /// Erased so that filters with different sources fit in one list; `Arc` so a rebuild's
    /// task can own it.
    pub(super) source: Arc<dyn ErasedKeySource>,
}

pub(super) struct GuardEntry {
    pub(super) name: String,
    /// The guard's shared counters behind a closure: its type parameters do not matter here.
    pub(super) stats: Box<dyn Fn() -> GuardStats + Send + Sync>,
}

pub(super) struct CacheEntry {
    pub(super) name: String,
    /// The cache behind a closure: its key and value types do not matter here.
    pub(super) stats: Box<dyn Fn() -> (CacheStats, usize) + Send + Sync>,
}

impl Admin {
    /// Nothing registered yet.
    ///
    /// ```
    /// let admin = bloom_tower::admin::Admin::new();
    /// # let _ = admin;
    /// ```
    pub fn new() -> Self {
        Self::default()
    }

    /// Shows `filter` under its [name](SharedFilter::name), and rebuilds it from `source` on
    /// `POST /filters/{name}/rebuild`: pass the source its scheduled rebuilds read (a clone,
    /// or an `Arc` of it). With a replication layer installed (`bloom-redis`'s `RedisSync`),
    /// the rebuild goes to the fleet, like any [`reload_from`](SharedFilter::reload_from).
    ///
    /// ```
    /// use bloom_tower::{BloomFilter, SharedFilter, admin::Admin, key_source};
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let orders = SharedFilter::<String>::builder().name("orders").build(BloomFilter::new(1_000, 0.01)?);
    /// let admin = Admin::new().filter(orders, key_source::from_iter(|| ["o-1", "o-2"]));
    /// # let _ = admin;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Panics
    ///
    /// If a filter of the same name is registered already (unnamed filters are all
    /// `"default"`: name them with [`SharedFilterBuilder::name`](crate::shared_filter::SharedFilterBuilder::name)),
    /// since `/filters/{name}` could reach only one of them.
    pub fn filter<K, S>(mut self, filter: SharedFilter<K>, source: S) -> Self
    where
        K: ?Sized,
        S: KeySource + Send + Sync + 'static,
        S::Key: KeyFor<K>,
    {
        let filter = filter.untyped();
        let name = filter.name();
        let taken = self.find(name).is_some();
        assert_new(
            taken,
            "filter",
            name,
            "; give each SharedFilter its own name",
        );
        self.filters.push(FilterEntry {
            filter,
            source: Arc::new(source),
        });
        self
    }

    /// Shows `cache`'s [`CacheStats`] (and its loads in flight) under `name` in `GET /caches`.
    ///
    /// ```
    /// use bloom_tower::{BloomFilter, GuardedCache, SharedFilter, admin::Admin};
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let filter = SharedFilter::<u64>::new(BloomFilter::new(1_000, 0.01)?);
    /// let users: GuardedCache<u64, String> = GuardedCache::builder(filter).build();
    /// let admin = Admin::new().cache("users", users.clone());
    /// # let _ = admin;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Panics
    ///
    /// If a cache of the same name is registered already.
    pub fn cache<K, V>(mut self, name: impl Into<String>, cache: GuardedCache<K, V>) -> Self
    where
        K: Key + Hash + Eq + Clone + Send + Sync + 'static,
        V: Clone + Send + Sync + 'static,
    {
        let name = name.into();
        let taken = self.caches.iter().any(|entry| entry.name == name);
        assert_new(taken, "cache", &name, "");
        self.caches.push(CacheEntry {
            name,
            stats: Box::new(move || (cache.stats(), cache.loads_in_flight())),
        });
        self
    }

    /// Shows `guard`'s [`GuardStats`] under its name in `GET /guards` (every service made from
    /// the guard and its clones counts into the same stats).
    ///
    /// ```
    /// use bloom_tower::{BloomFilter, BloomGuard, SharedFilter, admin::Admin, key};
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let filter = SharedFilter::<u64>::new(BloomFilter::new(1_000, 0.01)?);
    /// let guard = BloomGuard::new(filter, key::path_segment(1).parse::<u64>()).name("users");
    /// let admin = Admin::new().guard(&guard);
    /// # let _ = admin;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Panics
    ///
    /// If a guard of the same name is registered already (unnamed guards are all
    /// `"default"`: name them with [`BloomGuard::name`]).
    pub fn guard<K: ?Sized, E, R, M>(mut self, guard: &BloomGuard<K, E, R, M>) -> Self {
        let (name, counters) = guard.counters();
        let name = name.to_owned();
        let taken = self.guards.iter().any(|entry| entry.name == name);
        assert_new(taken, "guard", &name, "; give each BloomGuard its own name");
        self.guards.push(GuardEntry {
            name,
            stats: Box::new(move || counters.snapshot()),
        });
        self
    }

    pub(super) fn find(&self, name: &str) -> Option<&FilterEntry> {
        self.filters
            .iter()
            .find(|entry| entry.filter.name() == name)
    }
}

/// Panics if `name` is `taken`: a name shows one filter, one cache, one guard. `advice` ends
/// the message.
#[track_caller]
fn assert_new(taken: bool, what: &str, name: &str, advice: &str) {
    assert!(
        !taken,
        "admin: a {what} named {name:?} is registered already{advice}"
    );
}

impl fmt::Debug for Admin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let filters: Vec<&str> = self.filters.iter().map(|e| e.filter.name()).collect();
        let guards: Vec<&str> = self.guards.iter().map(|e| e.name.as_str()).collect();
        let caches: Vec<&str> = self.caches.iter().map(|e| e.name.as_str()).collect();
        f.debug_struct("Admin")
            .field("filters", &filters)
            .field("guards", &guards)
            .field("caches", &caches)
            .finish()
    }
}
