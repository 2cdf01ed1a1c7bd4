//! [`ResponseCacheStats`] and the counters behind it, mirrored to the `metrics` facade (the
//! `bloom_response_cache_*` series of [`crate::stats`]).

use std::sync::atomic::Ordering::Relaxed;

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

crate::stats::series! {
    /// The counters behind [`ResponseCacheStats`]. They hold no configuration: each event is
    /// passed the cache's name, which labels the series.
    pub(crate) struct ResponseCacheCounters {
    }
    with ResponseCacheMetrics labelled "cache" {
        events {
            /// Answered with a stored `200`.
            fn hit => hits: counter(names::RESPONSE_CACHE_HITS, "status" => "200");
            /// Answered with a stored `404`.
            fn negative_hit => negative_hits: counter(names::RESPONSE_CACHE_HITS, "status" => "404");
            /// A call to the inner service to fill the cache.
            fn load => loads: counter(names::RESPONSE_CACHE_LOADS);
            /// A request waits for another request's load of its URL.
            fn coalesced_waiter => coalesced_waiters: counter(names::RESPONSE_CACHE_COALESCED);
            /// A request the cache does not answer (not `GET`, or no key).
            fn passed_through => passed_through: counter(names::RESPONSE_CACHE_PASSED_THROUGH);
            /// A `GET` that skips the shared cache because of its own headers.
            fn bypassed => bypassed: counter(names::RESPONSE_CACHE_BYPASSED);
            /// A response that may not, or cannot, be stored.
            fn not_stored => not_stored: counter(names::RESPONSE_CACHE_NOT_STORED);
            /// A waiter gave up on another request's load.
            fn wait_timeout => wait_timeouts: counter(names::RESPONSE_CACHE_WAIT_TIMEOUTS);
            /// A response discarded because its key was invalidated during its load.
            fn stale_load_discarded => stale_loads_discarded:
                counter(names::RESPONSE_CACHE_STALE_DISCARDED);
        }
        series {}
    }
}

impl ResponseCacheCounters {
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
