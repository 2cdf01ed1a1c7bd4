//! `ResponseCache`: an HTTP shared cache (a subset of RFC 9111) that stores whole `GET`
//! responses (status, headers, body) in front of the handler and answers repeat requests
//! without calling it. [`GuardedCache`](crate::GuardedCache) is different: a value cache you
//! call *inside* a handler (`get_or_load(&id, load)`), keeping your typed values (rows), with
//! no HTTP semantics. Use `ResponseCache` for read-mostly resources whose response is the
//! same for everyone allowed to see it (public records, catalog pages): it saves the handler,
//! the database and the serialization. Use `GuardedCache` when the handler must run anyway
//! (per-user authorization or fields, several representations of one record) or to cache
//! anything that is not a response. Both run one load per key at a time, and both belong
//! behind a [`BloomGuard`](crate::BloomGuard), which rejects absent keys before either.
//!
//! # What is stored, and who it is served to
//!
//! * **Only `GET` with a key** (from the [`KeyExtractor`](crate::KeyExtractor)) is cached.
//!   `HEAD`, other methods and requests without a key pass through; a successful `POST`,
//!   `PUT`, `PATCH` or `DELETE` with a key invalidates that key (RFC 9111 §4.4). So does a
//!   `3xx` answer to one, as §4.4 requires ("a non-error status code"): whoever may send an
//!   unsafe request for a key can evict its responses (a load more, never a wrong answer);
//!   keep unauthenticated unsafe routes outside the layer if that matters.
//! * **The cache key is what identifies the resource**: authority (`Host`) + path + query,
//!   `X-Forwarded-Host` if the request has one, and the request's values of the headers the
//!   response names in `Vary` (a request that sends other values misses). A request whose
//!   target names another authority than its `Host` is not cached. With
//!   [`share_by_key_only`](ResponseCacheBuilder::share_by_key_only), every URL whose extracted
//!   key is equal gets the same response. Either way the extractor's key groups a record's
//!   responses, so [`invalidate`](ResponseCache::invalidate) drops all of them at once.
//! * **Credentials** (RFC 9111 §3.5): a request with `Authorization` is answered from the
//!   cache, and its response stored, only if that response says `public` or `s-maxage`.
//!   Such a request never waits on another request's load.
//! * **Not stored** (§3, §5.2): statuses other than `200` and `404`; `Cache-Control:
//!   no-store`, `no-cache` (we cannot revalidate) or `private`; `Set-Cookie`; `Vary: *`;
//!   trailers; a body over [`max_body_bytes`](ResponseCacheBuilder::max_body_bytes); a
//!   response that alone weighs more than [`max_bytes`](ResponseCacheBuilder::max_bytes).
//!   A request with `Cache-Control: no-store` or `no-cache` bypasses the cache.
//! * **For how long**: [`time_to_live`](ResponseCacheBuilder::time_to_live) for a `200`,
//!   [`negative_ttl`](ResponseCacheBuilder::negative_ttl) for a `404`, each capped (never
//!   extended) by the response's `s-maxage`, else `max-age`, less its `Age`. `Expires` is not
//!   read. Served copies carry an `Age` header.
//! * **How much**: the byte budget [`max_bytes`](ResponseCacheBuilder::max_bytes) weighs
//!   bodies, headers and keys. A body is read with the limit enforced frame by frame, not
//!   trusted from `size_hint`; a body found too large still reaches its client whole.
//!   Responses personalised by a cookie must say `private` or `Vary: Cookie`.
//!
//! # One load per URL
//!
//! On a miss, one request per URL calls the inner service while the others wait
//! (coalescing, through the crate's private `flight` module); a stored response is handed to each
//! waiter whose `Vary` values match. If the loading request goes away or its inner service
//! fails, a waiter takes over; a response that may not be shared sends each waiter to the
//! inner service itself; a waiter that has waited
//! [`wait_timeout`](ResponseCacheBuilder::wait_timeout) stops waiting and calls it too, so a
//! hung handler strands nobody.
//!
//! # Invalidation races
//!
//! Each key has an invalidation epoch (striped), read when a load begins. A response whose
//! load began before an [`invalidate`](ResponseCache::invalidate) of its key is not stored,
//! or is removed right after being stored, whichever order the two run in; so a `404` read
//! just before a create committed never outlives the create's `invalidate`.
//!
//! ```
//! use axum::{Router, extract::Path, routing::get};
//! use bloom_tower::{BloomFilter, BloomGuard, ResponseCache, SharedFilter, key};
//! use tower::ServiceExt;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let filter = SharedFilter::<String>::new(BloomFilter::new(1_000_000, 0.01)?);
//! filter.insert("7");
//! let users = ResponseCache::new(key::path_param("id"));
//! let app: Router = Router::new()
//!     .route("/users/{id}", get(|Path(id): Path<u64>| async move { format!("user {id}") }))
//!     // Layers run bottom-up on the way in: the guard first, then the response cache.
//!     .route_layer(users.clone())
//!     .route_layer(BloomGuard::new(filter, key::path_param("id")));
//!
//! let get = |uri: &'static str| {
//!     let request = http::Request::get(uri).body(axum::body::Body::empty());
//!     app.clone().oneshot(request.unwrap())
//! };
//! assert_eq!(get("/users/7").await?.status(), 200); // the handler ran
//! assert_eq!(get("/users/7").await?.status(), 200); // served from the cache
//! assert_eq!((users.stats().loads, users.stats().hits), (1, 1));
//!
//! users.invalidate("7").await; // after user 7 changed
//! assert_eq!(get("/users/7").await?.status(), 200); // the handler ran again
//! assert_eq!(users.stats().loads, 2);
//! # Ok(())
//! # }
//! ```

mod body;
mod future;
mod in_flight;
mod layer;
mod policy;
mod service;
mod stats;
mod store;

pub use body::ResponseBody;
pub use future::ResponseFuture;
pub use layer::{ResponseCache, ResponseCacheBuilder};
pub use service::ResponseCacheService;
pub use stats::ResponseCacheStats;
