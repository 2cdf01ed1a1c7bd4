//! An operator's view: an axum [`Router`] of the filters' stats, rebuilds and snapshots, as
//! JSON (feature `admin`, off by default).
//!
//! # ⚠ It has no authentication
//!
//! Anyone who can reach it can read the filters' sizes and counters, start rebuilds (each
//! one reads the whole [`KeySource`]: a full scan of your table) and write snapshots. Mount it
//! behind your own authentication, or serve it on a separate listener bound to localhost or
//! an internal network only, never on the public port.
//!
//! | route | answer |
//! | --- | --- |
//! | `GET /filters` | `{"filters": [..]}`: each registered filter's stats (below) |
//! | `GET /filters/{name}` | that filter's stats |
//! | `POST /filters/{name}/rebuild` | [`SharedFilter::reload_from`] its registered source: `200` `{"outcome": "rebuilt", "keys": n}`; `"joined"` when a rebuild was already running (this call waited for it, as `reload_from` does); `202` `"elsewhere"` when the filter is shared through a replication layer (`bloom-redis`) and another instance runs the rebuild; `500` `{"error": ..}` with the error and its causes if it failed (the old filter keeps serving) |
//! | `POST /filters/{name}/snapshot` | [`SharedFilter::save_snapshot`]: `200` `{"snapshot": path}`; `409` when the filter has no snapshot path; `500` if writing failed |
//! | `GET /caches` | `{"caches": [..]}`: each registered [`GuardedCache`]'s [`CacheStats`] |
//! | `GET /guards` | `{"guards": [..]}`: each registered [`BloomGuard`]'s [`GuardStats`] (`name`, `checked`, `passed`, `rejected`, `missing_key`) |
//!
//! An unknown filter is a `404` with `{"error": ..}`. A filter's stats are its
//! [`FilterStats`](crate::stats::FilterStats) (`name`, `kind`, `bits`, `bytes`, `capacity`,
//! `approx_items`, `inserts`, `removes`, `rebuilds`, `failed_rebuilds`, `cancelled_rebuilds`,
//! `last_rebuild` as `{"keys", "seconds"}`, `saturation_warnings`, `rebuilding`, `verifying`,
//! `unverified_passes`, `rejections`, `false_positives`, `measured_fpr`), where its snapshot goes (`snapshot`), whether a replication layer
//! owns its rebuilds (`replicated`), and its fill from a scan of its bits (`fill_ratio`,
//! `estimated_items`, `estimated_fpr`, `target_fpr`); the scan is O(size) and runs on
//! Tokio's blocking pool. Reading stats changes nothing (no saturation warning, no
//! auto-grow, unlike [`SharedFilter::check_saturation`]).
//!
//! A rebuild runs in its own task: a client that hangs up or times out does not cancel it.
//! Every answer has `cache-control: no-store`.
//!
//! # Example
//!
//! ```
//! use axum::Router;
//! use bloom_tower::{BloomFilter, SharedFilter, admin, key_source};
//! use http::{Request, StatusCode};
//! use http_body_util::BodyExt;
//! use tower::ServiceExt;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let dir = tempfile::tempdir()?;
//! let users = SharedFilter::<u64>::builder()
//!     .name("users")
//!     .snapshot(dir.path().join("users.bloom"))
//!     .build(BloomFilter::new(10_000, 0.01)?);
//! // What a rebuild reads: the same source as `rebuild_every`'s ("SELECT id FROM users").
//! let user_ids = key_source::from_iter(|| 1..=1_000u64);
//!
//! let admin = admin::router(admin::Admin::new().filter(users.clone(), user_ids));
//! // Behind your own authentication (`.layer(..)`), or on its own localhost listener:
//! //   axum::serve(TcpListener::bind("127.0.0.1:9090").await?, admin).await?;
//! let app: Router = Router::new().nest("/admin", admin);
//!
//! let post = Request::post("/admin/filters/users/rebuild").body(axum::body::Body::empty())?;
//! let response = app.clone().oneshot(post).await?;
//! assert_eq!(response.status(), StatusCode::OK);
//! let body = response.into_body().collect().await?.to_bytes();
//! let answer: serde_json::Value = serde_json::from_slice(&body)?;
//! assert_eq!(answer, serde_json::json!({"filter": "users", "outcome": "rebuilt", "keys": 1000}));
//! assert!(users.contains(&1_000u64));
//!
//! let get = Request::get("/admin/filters/users").body(axum::body::Body::empty())?;
//! let body = app.oneshot(get).await?.into_body().collect().await?.to_bytes();
//! let stats: serde_json::Value = serde_json::from_slice(&body)?;
//! assert_eq!(stats["rebuilds"], 1);
//! # Ok(())
//! # }
//! ```

//!
//! Files: `registry.rs` ([`Admin`], what is registered), `router.rs` ([`router`], the
//! routes), `handlers.rs` (each route's answer).
//!
//! [`Router`]: axum::Router
//! [`KeySource`]: crate::KeySource
//! [`SharedFilter::reload_from`]: crate::SharedFilter::reload_from
//! [`SharedFilter::save_snapshot`]: crate::SharedFilter::save_snapshot
//! [`SharedFilter::check_saturation`]: crate::SharedFilter::check_saturation
//! [`GuardedCache`]: crate::GuardedCache
//! [`CacheStats`]: crate::guarded_cache::CacheStats
//! [`BloomGuard`]: crate::BloomGuard
//! [`GuardStats`]: crate::stats::GuardStats

mod handlers;
mod registry;
mod router;

pub use registry::Admin;
use registry::FilterEntry;
pub use router::router;
