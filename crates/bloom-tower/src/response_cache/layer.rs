//! The [`ResponseCache`] layer and its configuration.

use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tower_layer::Layer;

use super::ResponseCacheService;
use super::in_flight::InFlight;
use super::policy::Lifetimes;
use super::stats::{ResponseCacheCounters, ResponseCacheStats};
use super::store::Store;
use crate::cache_settings::CacheSettings;

/// An HTTP shared cache (a subset of RFC 9111) for whole `GET` responses, in front of the
/// handler; unlike [`GuardedCache`](crate::GuardedCache), a value cache you call inside a
/// handler. Use this one for read-mostly responses that are the same for everyone allowed to
/// see them, `GuardedCache` when the handler must run anyway (per-user checks or fields).
///
/// * The cache key is authority + path + query and the request's values of the `Vary`
///   headers, unless [`share_by_key_only`](ResponseCacheBuilder::share_by_key_only). The
///   extractor's key groups a record's responses: [`invalidate`](Self::invalidate) drops all
///   of them, and fences off the loads in flight.
/// * A request with `Authorization` gets, and stores, only `public` or `s-maxage` responses.
///   `private`, `no-store`, `no-cache`, `Set-Cookie` and `Vary: *` responses are not stored;
///   `max-age`/`s-maxage` shorten the TTL. Statuses `200` and `404` only.
/// * Concurrent misses of one URL make one call to the inner service; the others wait, at
///   most [`wait_timeout`](ResponseCacheBuilder::wait_timeout).
/// * Bounded in bytes ([`max_bytes`](ResponseCacheBuilder::max_bytes)); bodies over
///   [`max_body_bytes`](ResponseCacheBuilder::max_body_bytes) reach the client whole and are
///   not stored.
///
/// Cheap to clone: clones (and every service the layer makes) share one cache.
///
/// ```
/// use std::time::Duration;
/// use axum::{Router, extract::Path, routing::get};
/// use bloom_tower::{ResponseCache, key};
///
/// let users = ResponseCache::builder(key::path_param("id"))
///     .max_bytes(16 * 1024 * 1024)
///     .time_to_live(Duration::from_secs(30))
///     .build();
/// let app: Router = Router::new()
///     .route("/users/{id}", get(|Path(id): Path<u64>| async move { format!("user {id}") }))
///     .route_layer(users.clone());
/// // After changing user 7 elsewhere (a queue consumer, a cron job):
/// //     users.invalidate("7").await;
/// # let _ = app;
/// ```
pub struct ResponseCache<E> {
    pub(crate) extractor: Arc<E>,
    pub(crate) shared: Arc<Shared>,
}

/// What a layer, its clones and every service it made share.
pub(crate) struct Shared {
    pub(crate) store: Store,
    pub(crate) in_flight: InFlight,
    pub(crate) config: Config,
    /// The `cache` label of its series.
    pub(crate) name: Cow<'static, str>,
    pub(crate) counters: ResponseCacheCounters,
}

/// The builder's settings that requests read.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Config {
    pub(crate) lifetimes: Lifetimes,
    pub(crate) max_body_bytes: u64,
    pub(crate) max_bytes: u64,
    pub(crate) wait_timeout: Duration,
    pub(crate) share_by_key_only: bool,
}

impl<E> ResponseCache<E> {
    /// A cache whose records are grouped by `extractor`'s key (any
    /// [`KeyExtractor`](crate::KeyExtractor), typically the `BloomGuard`'s), with the
    /// defaults of [`ResponseCacheBuilder`].
    ///
    /// ```
    /// use bloom_tower::{ResponseCache, key};
    ///
    /// let cache = ResponseCache::new(key::path_param("id"));
    /// assert_eq!(cache.stats().loads, 0);
    /// ```
    pub fn new(extractor: E) -> Self {
        Self::builder(extractor).build()
    }

    /// Starts configuring a cache grouped by `extractor`'s key.
    ///
    /// ```
    /// use std::time::Duration;
    /// use bloom_tower::{ResponseCache, key};
    ///
    /// let cache = ResponseCache::builder(key::path_param("id"))
    ///     .name("users")
    ///     .max_bytes(8 * 1024 * 1024)
    ///     .max_body_bytes(256 * 1024)
    ///     .time_to_live(Duration::from_secs(30))
    ///     .negative_ttl(Duration::from_secs(5))
    ///     .wait_timeout(Duration::from_secs(2))
    ///     .build();
    /// # let _ = cache;
    /// ```
    pub fn builder(extractor: E) -> ResponseCacheBuilder<E> {
        ResponseCacheBuilder {
            extractor,
            settings: CacheSettings::new(Duration::from_secs(60), Duration::from_secs(10)),
            max_bytes: 64 * 1024 * 1024,
            max_body_bytes: 64 * 1024,
            wait_timeout: Duration::from_secs(5),
            share_by_key_only: false,
        }
    }

    /// Counters since the layer was built (shared by every service it made), and the bytes
    /// held.
    ///
    /// ```
    /// use bloom_tower::{ResponseCache, key};
    ///
    /// let cache = ResponseCache::new(key::path_param("id"));
    /// let stats = cache.stats();
    /// assert_eq!(stats.hits + stats.negative_hits, 0);
    /// ```
    pub fn stats(&self) -> ResponseCacheStats {
        let shared = &*self.shared;
        shared.counters.snapshot(shared.store.bytes())
    }

    /// Forgets every stored response for `key` (every URL, query and `Vary` variant of the
    /// record), and makes sure a response whose load began before this call is not stored
    /// after it. Call it after the change is committed.
    ///
    /// `PUT`, `PATCH`, `DELETE` and `POST` requests that pass through this layer with a key
    /// and succeed invalidate their key by themselves (RFC 9111 §4.4).
    ///
    /// ```
    /// use bloom_tower::{ResponseCache, key};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let users = ResponseCache::new(key::path_param("id"));
    /// // UPDATE users SET name = … WHERE id = 7: committed
    /// users.invalidate("7").await;
    /// # }
    /// ```
    pub async fn invalidate<K: bloom_core::Key + ?Sized>(&self, key: &K) {
        self.shared.store.invalidate(key.key_bytes().as_ref()).await;
    }

    /// Loads in flight right now (one per URL): 0 when idle, whatever happened before.
    ///
    /// ```
    /// use bloom_tower::{ResponseCache, key};
    ///
    /// assert_eq!(ResponseCache::new(key::path_param("id")).loads_in_flight(), 0);
    /// ```
    pub fn loads_in_flight(&self) -> usize {
        self.shared.in_flight.len()
    }

    /// Applies the evictions and expirations moka has queued, so that
    /// [`stats().bytes`](ResponseCacheStats::bytes) is exact. The cache does this by itself
    /// as it is used; call it before reading the figure (tests, a metrics scrape).
    ///
    /// ```
    /// use bloom_tower::{ResponseCache, key};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let cache = ResponseCache::new(key::path_param("id"));
    /// cache.run_pending_tasks().await;
    /// assert_eq!(cache.stats().bytes, 0);
    /// # }
    /// ```
    pub async fn run_pending_tasks(&self) {
        self.shared.store.run_pending_tasks().await;
    }
}

impl<E> Clone for ResponseCache<E> {
    fn clone(&self) -> Self {
        Self {
            extractor: Arc::clone(&self.extractor),
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<E> fmt::Debug for ResponseCache<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResponseCache")
            .field("config", &self.shared.config)
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

impl<S, E> Layer<S> for ResponseCache<E> {
    type Service = ResponseCacheService<S, E>;

    fn layer(&self, inner: S) -> Self::Service {
        ResponseCacheService {
            inner,
            extractor: Arc::clone(&self.extractor),
            shared: Arc::clone(&self.shared),
        }
    }
}

/// Configures a [`ResponseCache`]; start from [`ResponseCache::builder`].
///
/// ```
/// use bloom_tower::{ResponseCache, key, response_cache::ResponseCacheBuilder};
///
/// let builder: ResponseCacheBuilder<_> = ResponseCache::builder(key::path_param("id"));
/// let cache = builder.max_bytes(1024 * 1024).build();
/// # let _ = cache;
/// ```
#[must_use]
pub struct ResponseCacheBuilder<E> {
    extractor: E,
    settings: CacheSettings,
    max_bytes: u64,
    max_body_bytes: u64,
    wait_timeout: Duration,
    share_by_key_only: bool,
}

impl<E> ResponseCacheBuilder<E> {
    crate::setters::setters! {
        /// The name used as the `cache` metric label; `"default"` by default.
        ///
        /// ```
        /// # use bloom_tower::{ResponseCache, key};
        /// let cache = ResponseCache::builder(key::path_param("id")).name("users").build();
        /// # let _ = cache;
        /// ```
        pub fn name(name: impl Into<Cow<'static, str>>) => settings.name = name.into();

        /// The byte budget: bodies, headers and keys of every stored response, together; 64 MiB
        /// by default. Beyond it the least useful responses are evicted; a response that alone
        /// weighs more is never stored.
        ///
        /// ```
        /// # use bloom_tower::{ResponseCache, key};
        /// let cache = ResponseCache::builder(key::path_param("id")).max_bytes(256 << 20).build();
        /// # let _ = cache;
        /// ```
        pub fn max_bytes(bytes: u64) => max_bytes = bytes;

        /// How long a `200` is served from the cache; 60 seconds by default. A response's own
        /// `s-maxage` or `max-age` (less its `Age`) can shorten it, never lengthen it.
        ///
        /// ```
        /// # use std::time::Duration;
        /// # use bloom_tower::{ResponseCache, key};
        /// let cache = ResponseCache::builder(key::path_param("id"))
        ///     .time_to_live(Duration::from_secs(300))
        ///     .build();
        /// # let _ = cache;
        /// ```
        pub fn time_to_live(ttl: Duration) => settings.time_to_live = ttl;

        /// How long a `404` is served from the cache; 10 seconds by default. Keep it short: it is
        /// how long a record created without [`ResponseCache::invalidate`] stays invisible.
        ///
        /// ```
        /// # use std::time::Duration;
        /// # use bloom_tower::{ResponseCache, key};
        /// let cache = ResponseCache::builder(key::path_param("id"))
        ///     .negative_ttl(Duration::from_secs(2))
        ///     .build();
        /// # let _ = cache;
        /// ```
        pub fn negative_ttl(ttl: Duration) => settings.negative_ttl = ttl;

        /// The largest body stored; 64 KiB by default. A response that declares a larger one
        /// (`size_hint`) is passed through untouched; one that turns out larger while it is read
        /// reaches the client whole and is not stored.
        ///
        /// ```
        /// # use bloom_tower::{ResponseCache, key};
        /// let cache = ResponseCache::builder(key::path_param("id")).max_body_bytes(1 << 20).build();
        /// # let _ = cache;
        /// ```
        pub fn max_body_bytes(bytes: u64) => max_body_bytes = bytes;

        /// How long a request waits for another request's load of the same URL before it calls
        /// the inner service itself; 5 seconds by default.
        ///
        /// Why 5 s: well above a healthy handler's latency (a database lookup), so waiters almost
        /// never give up on a load that would have finished, and a burst still costs one call; yet
        /// well below the 30–60 s after which clients and proxies give up, so a hung or very slow
        /// leader costs its waiters 5 s and one call each, not their answer. Set it near your
        /// handler's worst acceptable latency.
        ///
        /// ```
        /// # use std::time::Duration;
        /// # use bloom_tower::{ResponseCache, key};
        /// let cache = ResponseCache::builder(key::path_param("id"))
        ///     .wait_timeout(Duration::from_millis(500))
        ///     .build();
        /// # let _ = cache;
        /// ```
        pub fn wait_timeout(timeout: Duration) => wait_timeout = timeout;

        /// Every URL whose extracted key is equal gets the same response: `/users/7`,
        /// `/users/7?fields=email` and `/v2/users/7` on any host share one stored response
        /// (still subject to `Vary` and credentials). Only for routes whose response depends on
        /// the key alone; by default the authority, path and query are part of the cache key.
        ///
        /// ```
        /// # use bloom_tower::{ResponseCache, key};
        /// // `/users/{id}` ignores its query string (tracking parameters), so share across it.
        /// let cache = ResponseCache::builder(key::path_param("id")).share_by_key_only().build();
        /// # let _ = cache;
        /// ```
        pub fn share_by_key_only() => share_by_key_only = true;
    }

    /// Builds the layer.
    ///
    /// ```
    /// # use bloom_tower::{ResponseCache, key};
    /// let cache = ResponseCache::builder(key::path_param("id")).build();
    /// # let _ = cache;
    /// ```
    pub fn build(self) -> ResponseCache<E> {
        let CacheSettings {
            name,
            time_to_live,
            negative_ttl,
        } = self.settings;
        let config = Config {
            lifetimes: Lifetimes {
                ok: time_to_live,
                not_found: negative_ttl,
            },
            max_body_bytes: self.max_body_bytes,
            max_bytes: self.max_bytes,
            wait_timeout: self.wait_timeout,
            share_by_key_only: self.share_by_key_only,
        };
        let shared = Shared {
            store: Store::new(config.max_bytes),
            in_flight: InFlight::new(),
            config,
            name,
            counters: ResponseCacheCounters::default(),
        };
        ResponseCache {
            extractor: Arc::new(self.extractor),
            shared: Arc::new(shared),
        }
    }
}

impl<E> fmt::Debug for ResponseCacheBuilder<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResponseCacheBuilder")
            .field("name", &self.settings.name)
            .field("max_bytes", &self.max_bytes)
            .field("max_body_bytes", &self.max_body_bytes)
            .field("time_to_live", &self.settings.time_to_live)
            .field("negative_ttl", &self.settings.negative_ttl)
            .field("wait_timeout", &self.wait_timeout)
            .field("share_by_key_only", &self.share_by_key_only)
            .finish_non_exhaustive()
    }
}
