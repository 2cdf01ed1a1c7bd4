//! Middleware that answers requests for definitely-absent keys without calling the service.
//!
//! [`BloomGuard`] is the layer, [`BloomGuardService`] the service it makes. For each request
//! the guard extracts a key ([`KeyExtractor`](crate::KeyExtractor)) and asks the
//! [`SharedFilter`](crate::SharedFilter):
//!
//! * **definitely absent** → the inner service is *not* called; the guard answers with the
//!   rejection ([`NotFound`](crate::reject::NotFound): `404`, by default; see
//!   [`on_reject`](BloomGuard::on_reject));
//! * **maybe present** → the inner service is called;
//! * **no key** → the [missing-key policy](crate::reject::OnMissingKey) decides
//!   ([`PassThrough`](crate::reject::PassThrough) by default);
//! * **an ambiguous key** (a query parameter or header given more than once, the values
//!   differing: [`Extracted::Ambiguous`](crate::key::Extracted::Ambiguous)) → the inner service
//!   is *not* called and no value is looked up: the guard answers `400 Bad Request`
//!   ([`OnReject::on_ambiguous_key`](crate::reject::OnReject::on_ambiguous_key)), whatever the
//!   missing-key policy (the full rule, for `on_reject` closures: [`crate::reject`]).
//!
//! On a filter shared with other instances (bloom-redis), a would-be rejection may wait for
//! proof that the local view is current ([`Rejection::Confirm`](crate::shared_filter::Rejection::Confirm)):
//! the readied inner service goes into the response future (a clone stays behind, hence
//! `S: Clone`), the filter is looked at again once the proof is back, and the request is
//! rejected or passed on then. Hits never wait.
//!
//! Rejections are responses, never errors, and `poll_ready` is the inner service's. To tell a
//! guard's rejection from the handler's own `404`, have the guard mark its rejections with a
//! header ([`rejection_header`](BloomGuard::rejection_header), off by default).
//!
//! # Where to put it in axum
//!
//! * **Around the whole router**, naming the route with [`key::route`](crate::key::route):
//!   `BloomGuard::new(filter, key::route("/orders/{id}", "id")?.parse::<i64>()).layer(router)`.
//!   The guard matches the template itself, so a rejection costs less than axum's own 404 for
//!   an unknown route; requests for other routes have no key and pass (add a few tens of
//!   nanoseconds). The cheapest rejection, for services under attack.
//! * **On the route**, with `route_layer` and [`key::path_param`](crate::key::path_param):
//!   the guard sits next to its handler and reads axum's matched route. A rejection then also
//!   pays axum's routing and what any route layer costs (about 2× axum's 404).
//!
//! The measured figures are in `benches/README.md` (`benches/guard.rs`).
//!
//! # Example: an HTTP service
//!
//! ```
//! use bloom_tower::{BloomFilter, BloomGuard, SharedFilter, key};
//! use http::{Request, Response, StatusCode};
//! use tower::{ServiceBuilder, ServiceExt, service_fn};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let filter = SharedFilter::<u64>::new(BloomFilter::new(10_000, 0.01)?);
//! filter.reload_from(&vec![42u64]).await?;
//!
//! let service = ServiceBuilder::new()
//!     // `/users/{id}`: segment 1, a u64 like the keys inserted; not a number → 400.
//!     .layer(
//!         BloomGuard::new(filter.clone(), key::path_segment(1).parse::<u64>())
//!             .on_missing_key(StatusCode::BAD_REQUEST),
//!     )
//!     .service(service_fn(|_req: Request<String>| async {
//!         Ok::<_, std::convert::Infallible>(Response::new(String::from("a user")))
//!     }));
//!
//! let status = |uri: &str| {
//!     let service = service.clone();
//!     let req = Request::get(uri).body(String::new()).unwrap();
//!     async move { service.oneshot(req).await.unwrap().status() }
//! };
//! assert_eq!(status("/users/42").await, StatusCode::OK);
//! assert_eq!(status("/users/x").await, StatusCode::BAD_REQUEST);
//! // Any id the filter has never seen: 404, and the inner service is not called.
//! let absent = (0..).find(|id: &u64| !filter.contains(id)).unwrap();
//! assert_eq!(status(&format!("/users/{absent}")).await, StatusCode::NOT_FOUND);
//! # Ok(())
//! # }
//! ```
//!
//! # Example: any `tower::Service`, not just HTTP
//!
//! Here the request *is* a user id and the response an `Option<User>`; an id the filter has
//! never seen is answered with `None` without touching the database.
//!
//! ```
//! use bloom_tower::{BloomFilter, BloomGuard, SharedFilter, key};
//! use tower::{Service, ServiceBuilder, ServiceExt, service_fn};
//!
//! #[derive(Debug, PartialEq)]
//! struct User(u64);
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let filter = SharedFilter::<u64>::new(BloomFilter::builder()
//!     .expected_items(10_000).false_positive_rate(0.01).seed(1).build()?);
//! filter.insert(&7u64);
//!
//! let guard = BloomGuard::new(filter.clone(), key::identity())
//!     .on_reject(|_key| None); // the response for an absent id
//! let mut users = ServiceBuilder::new().layer(guard.clone()).service(service_fn(
//!     |id: u64| async move { Ok::<_, std::convert::Infallible>(Some(User(id))) },
//! ));
//!
//! assert_eq!(users.ready().await?.call(7).await?, Some(User(7)));
//! let absent = (8..).find(|id| !filter.contains(id)).unwrap();
//! assert_eq!(users.ready().await?.call(absent).await?, None);
//! assert_eq!(guard.stats().rejected, 1);
//! # Ok(())
//! # }
//! ```

mod diagnose;
mod future;
mod layer;
mod service;
pub(crate) mod stats;

pub use future::{Deferred, ResponseFuture};
pub use layer::BloomGuard;
pub use service::{BloomGuardService, Confirming};
