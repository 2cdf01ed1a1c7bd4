//! What the hot-key cache keeps: responses by key, the loads in flight, and its counters.

use std::borrow::Cow;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{HeaderMap, Response, StatusCode, Version, header};
use http_body::Body;

use super::HotKeyBody;
use crate::flight::Flights;
use crate::stats::names;

/// A buffered response, shared by every request it answers.
pub(crate) struct CachedResponse {
    status: StatusCode,
    version: Version,
    headers: HeaderMap,
    body: Bytes,
}

impl CachedResponse {
    pub(crate) fn new(parts: http::response::Parts, body: Bytes) -> Self {
        Self {
            status: parts.status,
            version: parts.version,
            headers: parts.headers,
            body,
        }
    }

    pub(crate) fn is_not_found(&self) -> bool {
        self.status == StatusCode::NOT_FOUND
    }

    pub(crate) fn to_response<B, E>(&self) -> Response<HotKeyBody<B, E>> {
        let mut response = Response::new(HotKeyBody::cached(self.body.clone()));
        *response.status_mut() = self.status;
        *response.version_mut() = self.version;
        *response.headers_mut() = self.headers.clone();
        response
    }
}

/// What a load hands its waiters.
#[derive(Clone)]
pub(crate) enum Shared {
    /// A cacheable response (200, or 404 as a negative entry): serve a copy.
    Response(Arc<CachedResponse>),
    /// The response may not be shared (no-store, private, Set-Cookie, too large, another
    /// status): each waiter asks the inner service itself.
    Uncacheable,
}

pub(crate) struct Store {
    pub(crate) cache: moka::future::Cache<Bytes, Arc<CachedResponse>>,
    pub(crate) flights: Flights<Bytes, Shared>,
    pub(crate) max_body_bytes: u64,
    pub(crate) counters: Counters,
}

impl Store {
    pub(crate) fn new(
        name: Cow<'static, str>,
        max_capacity: u64,
        ttl: Duration,
        negative_ttl: Duration,
        max_body_bytes: u64,
    ) -> Self {
        let cache = moka::future::Cache::builder()
            .max_capacity(max_capacity)
            .expire_after(ByStatus { ttl, negative_ttl })
            .build();
        Self {
            cache,
            flights: Flights::new(),
            max_body_bytes,
            counters: Counters::new(name),
        }
    }

    /// May this response be cached and shared with other requests for the same key?
    pub(crate) fn cacheable<B: Body>(&self, response: &Response<B>) -> bool {
        let status_ok = matches!(response.status(), StatusCode::OK | StatusCode::NOT_FOUND);
        let headers = response.headers();
        let forbidden = headers.get_all(header::CACHE_CONTROL).iter().any(|v| {
            v.to_str().is_ok_and(|v| {
                v.split(',')
                    .map(|d| d.trim().to_ascii_lowercase())
                    .any(|d| d == "no-store" || d == "private")
            })
        });
        // A response that sets a cookie belongs to one client: never hand it to another.
        let personal = headers.contains_key(header::SET_COOKIE);
        let small = response
            .body()
            .size_hint()
            .upper()
            .is_some_and(|n| n <= self.max_body_bytes);
        status_ok && !forbidden && !personal && small
    }
}

struct ByStatus {
    ttl: Duration,
    negative_ttl: Duration,
}

impl moka::Expiry<Bytes, Arc<CachedResponse>> for ByStatus {
    fn expire_after_create(
        &self,
        _: &Bytes,
        value: &Arc<CachedResponse>,
        _: Instant,
    ) -> Option<Duration> {
        Some(if value.status == StatusCode::NOT_FOUND {
            self.negative_ttl
        } else {
            self.ttl
        })
    }
}

/// A snapshot of a [`HotKeyCache`](super::HotKeyCache)'s counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct HotKeyStats {
    /// Requests answered with a cached `200`.
    pub hits: u64,
    /// Requests answered with a cached `404`.
    pub negative_hits: u64,
    /// Requests that went to the inner service as the one loader for their key.
    pub loads: u64,
    /// Requests that waited for another request's load and got a copy of its response.
    pub coalesced_waiters: u64,
    /// Responses that could not be cached (status, `no-store`/`private`, `Set-Cookie`,
    /// size), and requests without a key or not `GET`: passed through.
    pub passed_through: u64,
}

/// The counters behind [`HotKeyStats`], mirrored to the `metrics` facade.
pub(crate) struct Counters {
    #[cfg_attr(not(feature = "metrics"), allow(dead_code))]
    name: Cow<'static, str>,
    hits: AtomicU64,
    negative_hits: AtomicU64,
    loads: AtomicU64,
    coalesced_waiters: AtomicU64,
    passed_through: AtomicU64,
    #[cfg(feature = "metrics")]
    handles: std::sync::OnceLock<[metrics::Counter; 5]>,
}

/// What happened to a request, for [`Counters::count`].
#[derive(Clone, Copy)]
pub(crate) enum Event {
    Hit = 0,
    NegativeHit = 1,
    Load = 2,
    Coalesced = 3,
    PassedThrough = 4,
}

impl Counters {
    pub(crate) fn new(name: Cow<'static, str>) -> Self {
        Self {
            name,
            hits: AtomicU64::new(0),
            negative_hits: AtomicU64::new(0),
            loads: AtomicU64::new(0),
            coalesced_waiters: AtomicU64::new(0),
            passed_through: AtomicU64::new(0),
            #[cfg(feature = "metrics")]
            handles: std::sync::OnceLock::new(),
        }
    }

    pub(crate) fn count(&self, event: Event) {
        let counter = match event {
            Event::Hit => &self.hits,
            Event::NegativeHit => &self.negative_hits,
            Event::Load => &self.loads,
            Event::Coalesced => &self.coalesced_waiters,
            Event::PassedThrough => &self.passed_through,
        };
        counter.fetch_add(1, Relaxed);
        #[cfg(feature = "metrics")]
        self.handles.get_or_init(|| {
            let cache = self.name.clone().into_owned();
            [
                metrics::counter!(names::HOT_KEY_HITS, "cache" => cache.clone(), "status" => "200"),
                metrics::counter!(names::HOT_KEY_HITS, "cache" => cache.clone(), "status" => "404"),
                metrics::counter!(names::HOT_KEY_LOADS, "cache" => cache.clone()),
                metrics::counter!(names::HOT_KEY_COALESCED, "cache" => cache.clone()),
                metrics::counter!(names::HOT_KEY_PASSED_THROUGH, "cache" => cache),
            ]
        })[event as usize]
            .increment(1);
    }

    pub(crate) fn snapshot(&self) -> HotKeyStats {
        HotKeyStats {
            hits: self.hits.load(Relaxed),
            negative_hits: self.negative_hits.load(Relaxed),
            loads: self.loads.load(Relaxed),
            coalesced_waiters: self.coalesced_waiters.load(Relaxed),
            passed_through: self.passed_through.load(Relaxed),
        }
    }
}
