//! `HotKeyCache`: one trip to the handler per key, however many requests want it.
//!
//! Place it after [`BloomGuard`](crate::BloomGuard): absent keys are rejected before they get
//! here. For a `GET` with a key:
//!
//! * a cached `200` (or `404`, kept for the shorter `negative_ttl`) is served without calling
//!   the inner service;
//! * on a miss, one request per key goes to the inner service while the others wait; a
//!   cacheable response (`200`/`404`, body size known and at most `max_body_bytes`, no
//!   `Cache-Control: no-store` or `private`, no `Set-Cookie`) is buffered to `Bytes`, cached
//!   with its headers, and each waiter gets a copy. A response that may not be shared is
//!   returned to its own request, and each waiter asks the inner service itself.
//! * If the loading request goes away (client disconnected) or the inner service fails, a
//!   waiter takes over: nobody waits on a load that will not finish.
//!
//! Other methods and requests without a key pass straight through.
//!
//! ```
//! use axum::{Router, extract::Path, routing::get};
//! use bloom_tower::{BloomFilter, BloomGuard, HotKeyCache, SharedFilter, key};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let filter = SharedFilter::new(BloomFilter::new(1_000_000, 0.01)?);
//! let hot = HotKeyCache::new(key::path_param("id"));
//! let app: Router = Router::new()
//!     .route("/users/{id}", get(|Path(id): Path<u64>| async move { format!("user {id}") }))
//!     // Layers run bottom-up on the way in: the guard first, then the hot-key cache.
//!     .route_layer(hot.clone())
//!     .route_layer(BloomGuard::new(filter, key::path_param("id")));
//! // `hot.stats()` reports hits, loads and coalesced waiters.
//! # let _ = app;
//! # Ok(())
//! # }
//! ```

mod body;
mod layer;
mod service;
mod store;

pub use body::HotKeyBody;
pub use layer::{HotKeyCache, HotKeyCacheBuilder};
pub use service::{HotKeyCacheService, HotKeyFuture};
pub use store::HotKeyStats;
