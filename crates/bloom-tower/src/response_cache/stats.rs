//! [`ResponseCacheStats`] and the counters behind it, mirrored to the `metrics` facade.

use std::borrow::Cow;
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

/// What happened, for [`Counters::count`]; the discriminant indexes the counters.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Event {
    Hit = 0,
    NegativeHit = 1,
    Load = 2,
    Coalesced = 3,
    PassedThrough = 4,
    Bypassed = 5,
    NotStored = 6,
    WaitTimeout = 7,
    StaleDiscarded = 8,
}

const EVENTS: usize = 9;

pub(crate) struct Counters {
    #[cfg_attr(not(feature = "metrics"), allow(dead_code))]
    name: Cow<'static, str>,
    counts: [AtomicU64; EVENTS],
    /// Registering a counter looks it up in the recorder: done once, on first use.
    #[cfg(feature = "metrics")]
    handles: std::sync::OnceLock<[metrics::Counter; EVENTS]>,
}

impl Counters {
    pub(crate) fn new(name: Cow<'static, str>) -> Self {
        Self {
            name,
            counts: Default::default(),
            #[cfg(feature = "metrics")]
            handles: std::sync::OnceLock::new(),
        }
    }

    pub(crate) fn count(&self, event: Event) {
        self.counts[event as usize].fetch_add(1, Relaxed);
        #[cfg(feature = "metrics")]
        self.handles.get_or_init(|| {
            crate::stats::describe_once();
            let cache = self.name.clone().into_owned();
            let counter = |name: &'static str| metrics::counter!(name, "cache" => cache.clone());
            [
                metrics::counter!(names::RESPONSE_CACHE_HITS, "cache" => cache.clone(), "status" => "200"),
                metrics::counter!(names::RESPONSE_CACHE_HITS, "cache" => cache.clone(), "status" => "404"),
                counter(names::RESPONSE_CACHE_LOADS),
                counter(names::RESPONSE_CACHE_COALESCED),
                counter(names::RESPONSE_CACHE_PASSED_THROUGH),
                counter(names::RESPONSE_CACHE_BYPASSED),
                counter(names::RESPONSE_CACHE_NOT_STORED),
                counter(names::RESPONSE_CACHE_WAIT_TIMEOUTS),
                counter(names::RESPONSE_CACHE_STALE_DISCARDED),
            ]
        })[event as usize]
            .increment(1);
    }

    pub(crate) fn snapshot(&self, bytes: u64) -> ResponseCacheStats {
        let count = |event: Event| self.counts[event as usize].load(Relaxed);
        ResponseCacheStats {
            hits: count(Event::Hit),
            negative_hits: count(Event::NegativeHit),
            loads: count(Event::Load),
            coalesced_waiters: count(Event::Coalesced),
            passed_through: count(Event::PassedThrough),
            bypassed: count(Event::Bypassed),
            not_stored: count(Event::NotStored),
            wait_timeouts: count(Event::WaitTimeout),
            stale_loads_discarded: count(Event::StaleDiscarded),
            bytes,
        }
    }
}
