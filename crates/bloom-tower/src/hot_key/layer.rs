//! The [`HotKeyCache`] layer and its configuration.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tower_layer::Layer;

use super::HotKeyCacheService;
use super::store::{HotKeyStats, Store};

/// Caches successful responses per key and lets only one request per key through to the
/// inner service on a miss. See the [module docs](super).
pub struct HotKeyCache<E> {
    pub(crate) extractor: Arc<E>,
    pub(crate) store: Arc<Store>,
}

impl<E> HotKeyCache<E> {
    /// A cache keyed by `extractor` (any [`KeyExtractor`](crate::KeyExtractor), typically
    /// the same as the `BloomGuard`'s), with the defaults of [`HotKeyCacheBuilder`].
    pub fn new(extractor: E) -> Self {
        Self::builder(extractor).build()
    }

    /// Starts configuring a cache keyed by `extractor`.
    pub fn builder(extractor: E) -> HotKeyCacheBuilder<E> {
        HotKeyCacheBuilder {
            extractor,
            max_capacity: 10_000,
            time_to_live: Duration::from_secs(60),
            negative_ttl: Duration::from_secs(10),
            max_body_bytes: 64 * 1024,
            name: "default".into(),
        }
    }

    /// Counters since the layer was built (shared by every service it made).
    pub fn stats(&self) -> HotKeyStats {
        self.store.counters.snapshot()
    }

    /// Forgets `key`'s cached response (say, after the record changed).
    pub async fn invalidate<K: bloom_core::Key + ?Sized>(&self, key: &K) {
        self.store.cache.invalidate(key.key_bytes().as_ref()).await;
    }
}

impl<E> Clone for HotKeyCache<E> {
    fn clone(&self) -> Self {
        Self {
            extractor: Arc::clone(&self.extractor),
            store: Arc::clone(&self.store),
        }
    }
}

impl<E> fmt::Debug for HotKeyCache<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HotKeyCache")
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

impl<S, E> Layer<S> for HotKeyCache<E> {
    type Service = HotKeyCacheService<S, E>;

    fn layer(&self, inner: S) -> Self::Service {
        HotKeyCacheService {
            inner,
            extractor: Arc::clone(&self.extractor),
            store: Arc::clone(&self.store),
        }
    }
}

/// Configures a [`HotKeyCache`]; start from [`HotKeyCache::builder`].
#[must_use]
pub struct HotKeyCacheBuilder<E> {
    extractor: E,
    max_capacity: u64,
    time_to_live: Duration,
    negative_ttl: Duration,
    max_body_bytes: u64,
    name: std::borrow::Cow<'static, str>,
}

impl<E> HotKeyCacheBuilder<E> {
    /// The name used as the `cache` metric label; `"default"` by default.
    pub fn name(mut self, name: impl Into<std::borrow::Cow<'static, str>>) -> Self {
        self.name = name.into();
        self
    }

    /// Most responses kept; 10,000 by default.
    pub fn max_capacity(mut self, entries: u64) -> Self {
        self.max_capacity = entries;
        self
    }

    /// How long a `200` is served from the cache; 60 seconds by default.
    pub fn time_to_live(mut self, ttl: Duration) -> Self {
        self.time_to_live = ttl;
        self
    }

    /// How long a `404` is served from the cache; 10 seconds by default.
    pub fn negative_ttl(mut self, ttl: Duration) -> Self {
        self.negative_ttl = ttl;
        self
    }

    /// Larger responses (or ones whose size is not known up front) are passed through, not
    /// cached; 64 KiB by default.
    pub fn max_body_bytes(mut self, bytes: u64) -> Self {
        self.max_body_bytes = bytes;
        self
    }

    /// Builds the layer.
    pub fn build(self) -> HotKeyCache<E> {
        HotKeyCache {
            extractor: Arc::new(self.extractor),
            store: Arc::new(Store::new(
                self.name,
                self.max_capacity,
                self.time_to_live,
                self.negative_ttl,
                self.max_body_bytes,
            )),
        }
    }
}
