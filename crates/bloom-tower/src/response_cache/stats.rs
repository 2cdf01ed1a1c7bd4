//! [`ResponseCacheStats`] and the counters behind it, mirrored to the `metrics` facade (the
//! `bloom_response_cache_*` series of [`crate::stats`]).

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

#[cfg(feature = "metrics")]
use crate::stats::names;

/// A snapshot of a [`ResponseCache`](super::ResponseCache)'s counters, shared by every
/// service the layer made.
///
/// ```
/// use bloom_tower::{ResponseCache, key};
///
/// let cache = ResponseCache::new(key::path_param("id"));
/// let stats = cache.stats();
/// assert_eq!((stats.hits, stats.loads, stats.bytes), (0, 0, 0));
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ResponseCacheStats {
    /// Requests answered with a stored `200`.
    pub hits: u64,
    /// Requests answered with a stored `404`.
    pub negative_hits: u64,
    /// Calls to the inner service made to fill the cache: a URL's one loader, a waiter that
    /// stopped waiting, or a request with credentials.
    pub loads: u64,
    /// Requests that waited for another request's load of the same URL.
    pub coalesced_waiters: u64,
    /// Requests the cache does not answer: any method but `GET` (`HEAD` included), or no key.
    pub passed_through: u64,
    /// `GET` requests that skipped the shared cache because of their own headers:
    /// `Cache-Control: no-store`/`no-cache`, or `Authorization` with no `public` response
    /// stored for them.
    pub bypassed: u64,
    /// Responses not stored: a status other than `200`/`404`, `no-store`/`no-cache`/
    /// `private`, `Set-Cookie`, `Vary: *`, a response to credentials that is not `public`,
    /// no time to live left, a body over `max_body_bytes`, or over the byte budget.
    pub not_stored: u64,
    /// Waiters that gave up on another request's load after `wait_timeout` and called the
    /// inner service themselves.
    pub wait_timeouts: u64,
    /// Responses dropped because an invalidation ran while they were being loaded: of their
    /// key, or (rarely) of a key that shares its epoch stripe, one in 64.
    pub stale_loads_discarded: u64,
    /// Bytes held (bodies, headers and keys), as the byte budget counts them. Evictions are
    /// applied in the background: call
    /// [`run_pending_tasks`](super::ResponseCache::run_pending_tasks) first for an exact
    /// figure.
    pub bytes: u64,
}

/// The counters behind [`ResponseCacheStats`]. They hold no configuration: each event is
/// passed the cache's name, which labels the series.
#[derive(Default)]
pub(crate) struct ResponseCacheCounters {
    hits: AtomicU64,
    negative_hits: AtomicU64,
    loads: AtomicU64,
    coalesced_waiters: AtomicU64,
    passed_through: AtomicU64,
    bypassed: AtomicU64,
    not_stored: AtomicU64,
    wait_timeouts: AtomicU64,
    stale_loads_discarded: AtomicU64,
    /// Registering a series looks it up in the recorder: done once, on the first request.
    #[cfg(feature = "metrics")]
    metrics: std::sync::OnceLock<ResponseCacheMetrics>,
}

#[cfg(feature = "metrics")]
struct ResponseCacheMetrics {
    hits: metrics::Counter,
    negative_hits: metrics::Counter,
    loads: metrics::Counter,
    coalesced_waiters: metrics::Counter,
    passed_through: metrics::Counter,
    bypassed: metrics::Counter,
    not_stored: metrics::Counter,
    wait_timeouts: metrics::Counter,
    stale_loads_discarded: metrics::Counter,
}

// Without `metrics` the cache's name labels nothing.
#[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
impl ResponseCacheCounters {
    #[cfg(feature = "metrics")]
    fn metrics(&self, cache: &str) -> &ResponseCacheMetrics {
        self.metrics.get_or_init(|| {
            crate::stats::describe_once();
            let counter = |name: &'static str| metrics::counter!(name, "cache" => cache.to_owned());
            let hits = |status: &'static str| {
                metrics::counter!(names::RESPONSE_CACHE_HITS, "cache" => cache.to_owned(), "status" => status)
            };
            ResponseCacheMetrics {
                hits: hits("200"),
                negative_hits: hits("404"),
                loads: counter(names::RESPONSE_CACHE_LOADS),
                coalesced_waiters: counter(names::RESPONSE_CACHE_COALESCED),
                passed_through: counter(names::RESPONSE_CACHE_PASSED_THROUGH),
                bypassed: counter(names::RESPONSE_CACHE_BYPASSED),
                not_stored: counter(names::RESPONSE_CACHE_NOT_STORED),
                wait_timeouts: counter(names::RESPONSE_CACHE_WAIT_TIMEOUTS),
                stale_loads_discarded: counter(names::RESPONSE_CACHE_STALE_DISCARDED),
            }
        })
    }

    /// Answered with a stored `200`.
    pub(crate) fn hit(&self, cache: &str) {
        self.hits.fetch_add(1, Relaxed);
        #[cfg(feature = "metrics")]
        self.metrics(cache).hits.increment(1);
    }

    /// Answered with a stored `404`.
    pub(crate) fn negative_hit(&self, cache: &str) {
        self.negative_hits.fetch_add(1, Relaxed);
        #[cfg(feature = "metrics")]
        self.metrics(cache).negative_hits.increment(1);
    }

    /// A call to the inner service to fill the cache.
    pub(crate) fn load(&self, cache: &str) {
        self.loads.fetch_add(1, Relaxed);
        #[cfg(feature = "metrics")]
        self.metrics(cache).loads.increment(1);
    }

    /// A request waits for another request's load of its URL.
    pub(crate) fn coalesced_waiter(&self, cache: &str) {
        self.coalesced_waiters.fetch_add(1, Relaxed);
        #[cfg(feature = "metrics")]
        self.metrics(cache).coalesced_waiters.increment(1);
    }

    /// A request the cache does not answer (not `GET`, or no key).
    pub(crate) fn passed_through(&self, cache: &str) {
        self.passed_through.fetch_add(1, Relaxed);
        #[cfg(feature = "metrics")]
        self.metrics(cache).passed_through.increment(1);
    }

    /// A `GET` that skips the shared cache because of its own headers.
    pub(crate) fn bypassed(&self, cache: &str) {
        self.bypassed.fetch_add(1, Relaxed);
        #[cfg(feature = "metrics")]
        self.metrics(cache).bypassed.increment(1);
    }

    /// A response that may not, or cannot, be stored.
    pub(crate) fn not_stored(&self, cache: &str) {
        self.not_stored.fetch_add(1, Relaxed);
        #[cfg(feature = "metrics")]
        self.metrics(cache).not_stored.increment(1);
    }

    /// A waiter gave up on another request's load.
    pub(crate) fn wait_timeout(&self, cache: &str) {
        self.wait_timeouts.fetch_add(1, Relaxed);
        #[cfg(feature = "metrics")]
        self.metrics(cache).wait_timeouts.increment(1);
    }

    /// A response discarded because its key was invalidated during its load.
    pub(crate) fn stale_load_discarded(&self, cache: &str) {
        self.stale_loads_discarded.fetch_add(1, Relaxed);
        #[cfg(feature = "metrics")]
        self.metrics(cache).stale_loads_discarded.increment(1);
    }

    /// The stats of a cache holding `bytes`.
    pub(crate) fn snapshot(&self, bytes: u64) -> ResponseCacheStats {
        ResponseCacheStats {
            hits: self.hits.load(Relaxed),
            negative_hits: self.negative_hits.load(Relaxed),
            loads: self.loads.load(Relaxed),
            coalesced_waiters: self.coalesced_waiters.load(Relaxed),
            passed_through: self.passed_through.load(Relaxed),
            bypassed: self.bypassed.load(Relaxed),
            not_stored: self.not_stored.load(Relaxed),
            wait_timeouts: self.wait_timeouts.load(Relaxed),
            stale_loads_discarded: self.stale_loads_discarded.load(Relaxed),
            bytes,
        }
    }
}
