//! A whole guarded service, from the database to shutdown.
//!
//! This page builds one complete axum service that serves `/orders/{id}` from SQLite,
//! and then explains it part by part. The code compiles and runs as this crate's doc test.
//! The service:
//!
//! * fills an `i64` filter from `SELECT id FROM orders`, from a snapshot that is caught up at
//!   restart;
//! * guards the route with it, so an id that was never created is answered `404` before the
//!   handler runs;
//! * keeps a [`GuardedCache`](crate::GuardedCache) in axum's `State`, so an id that exists
//!   costs one query per TTL, and concurrent misses for one id cost one query;
//! * creates orders so that the guard never rejects an order a reader can already see;
//! * rebuilds the filter every hour (which drops deleted ids) and saves a snapshot every minute;
//! * serves `/metrics` for Prometheus;
//! * on shutdown, stops the background tasks and saves a last snapshot.
//!
//! ```
//! use std::time::Duration;
//!
//! use axum::extract::{Path, State};
//! use axum::http::StatusCode;
//! use axum::routing::{get, post};
//! use axum::Router;
//! use bloom_tower::guarded_cache::CacheResponse;
//! use bloom_tower::{BloomFilter, BloomGuard, GuardedCache, SharedFilter, key, key_source};
//! use metrics_exporter_prometheus::PrometheusBuilder;
//! use sqlx::SqlitePool;
//!
//! #[derive(Clone)]
//! struct App {
//!     db: SqlitePool,
//!     orders: GuardedCache<i64, String>,
//! }
//!
//! /// `GET /orders/{id}`: the guard has already let `id` through (it may exist).
//! async fn get_order(State(app): State<App>, Path(id): Path<i64>) -> CacheResponse<String, sqlx::Error> {
//!     let db = app.db.clone();
//!     let load = |id: i64| async move {
//!         sqlx::query_scalar("SELECT item FROM orders WHERE id = ?").bind(id).fetch_optional(&db).await
//!     };
//!     app.orders.get_or_load(&id, load).await.into()
//! }
//!
//! /// `POST /orders` with the item as the body: the new order's id.
//! async fn create_order(State(app): State<App>, item: String) -> Result<(StatusCode, String), StatusCode> {
//!     let failed = |_| StatusCode::SERVICE_UNAVAILABLE;
//!     let mut tx = app.db.begin().await.map_err(failed)?;
//!     let id: i64 = sqlx::query_scalar("INSERT INTO orders (item) VALUES (?) RETURNING id")
//!         .bind(item)
//!         .fetch_one(&mut *tx)
//!         .await
//!         .map_err(failed)?;
//!     // Into the filter before the row is visible; after the commit, into any filter a
//!     // rebuild swapped in meanwhile, and out of the cache's "not found" entries.
//!     let pending = app.orders.prepare_insert(&id);
//!     tx.commit().await.map_err(failed)?;
//!     pending.committed().await;
//!     Ok((StatusCode::CREATED, id.to_string()))
//! }
//!
//! # #[tokio::main(flavor = "multi_thread", worker_threads = 2)]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let dir = tempfile::tempdir()?;
//! # let database_url = format!("sqlite://{}?mode=rwc", dir.path().join("orders.db").display());
//! # let snapshot_path = dir.path().join("orders.bloom");
//! let metrics = PrometheusBuilder::new().install_recorder()?;
//! let db = SqlitePool::connect(&database_url).await?;
//! # sqlx::query("CREATE TABLE orders (id INTEGER PRIMARY KEY AUTOINCREMENT, item TEXT NOT NULL)")
//! #     .execute(&db).await?;
//! # sqlx::query("INSERT INTO orders (item) VALUES ('tea'), ('cake')").execute(&db).await?;
//!
//! // Every order id, read afresh at each rebuild; and since a watermark, at restart.
//! let order_ids = key_source::sqlx::query::<i64, _>(db.clone(), "SELECT id FROM orders")
//!     .with_watermark("SELECT MAX(id) FROM orders", "SELECT id FROM orders WHERE id > ?")
//!     .counted()
//!     .await?;
//! let (filter, started) = SharedFilter::<i64>::builder()
//!     .name("orders")
//!     .snapshot(&snapshot_path)
//!     .start(BloomFilter::new(1_000_000, 0.001)?, &order_ids)
//!     .await?;
//! tracing::info!(?started, "order filter ready");
//! let rebuilds = filter.rebuild_every(Duration::from_secs(3600), order_ids);
//! let snapshots = filter.save_every(Duration::from_secs(60));
//!
//! let app = App {
//!     db: db.clone(),
//!     orders: GuardedCache::builder(filter.clone()).name("orders").build(),
//! };
//! let router = Router::new()
//!     .route("/orders/{id}", get(get_order))
//!     // The path's text parsed as the filter's key type (`i64`): without `.parse`, or with
//!     // another type, this line does not compile.
//!     .route_layer(BloomGuard::new(filter.clone(), key::path_param("id").parse::<i64>()).name("orders"))
//!     .route("/orders", post(create_order))
//!     .route("/metrics", get(move || async move { metrics.render() }))
//!     .with_state(app);
//!
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
//! # let addr = listener.local_addr()?;
//! let shutdown = async {
//!     tokio::signal::ctrl_c().await.ok();
//! };
//! # let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
//! # let shutdown = async { stopped.await.ok(); };
//! let server = tokio::spawn(async move {
//!     axum::serve(listener, router).with_graceful_shutdown(shutdown).await
//! });
//! # let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
//! #     .build_http::<String>();
//! # let call = |method: &str, path: &str, body: &str| {
//! #     let request = http::Request::builder().method(method).uri(format!("http://{addr}{path}"))
//! #         .body(body.to_owned()).unwrap();
//! #     let client = client.clone();
//! #     async move {
//! #         use http_body_util::BodyExt;
//! #         let response = client.request(request).await.unwrap();
//! #         let status = response.status();
//! #         let body = response.into_body().collect().await.unwrap().to_bytes();
//! #         (status, String::from_utf8(body.to_vec()).unwrap())
//! #     }
//! # };
//! # assert_eq!(call("GET", "/orders/1", "").await, (StatusCode::OK, "tea".into()));
//! # assert_eq!(call("GET", "/orders/123456789", "").await.0, StatusCode::NOT_FOUND);
//! # let (status, id) = call("POST", "/orders", "scones").await;
//! # assert_eq!(status, StatusCode::CREATED);
//! # assert_eq!(call("GET", &format!("/orders/{id}"), "").await, (StatusCode::OK, "scones".into()));
//! # let (_, exposition) = call("GET", "/metrics", "").await;
//! # assert!(exposition.contains(r#"bloom_guard_rejected_total{guard="orders"} 1"#), "{exposition}");
//! # stop.send(()).unwrap();
//!
//! // … on SIGINT: the server has finished its requests; stop the tasks, save a last snapshot.
//! server.await??;
//! rebuilds.shutdown().await;
//! snapshots.shutdown().await;
//! filter.save_snapshot().await?;
//! # assert!(snapshot_path.exists());
//! # Ok(())
//! # }
//! ```
//!
//! # The key type
//!
//! `SharedFilter<i64>` says what the filter holds, and everything that reads or fills it must
//! agree: the guard's extractor (`key::path_param("id").parse::<i64>()`), the cache's key
//! (`GuardedCache<i64, _>`), the source (`key_source::sqlx::query::<i64, _>`). Keys are
//! compared by their bytes, so the text `"42"`, the `i32` `42` and the `i64` `42` are three
//! different keys; before keys were typed, a guard extracting text over a filter of integers
//! rejected every request. See [`key::KeyFor`](crate::key::KeyFor) for which types count as
//! the same key, and [`key::AnyKey`](crate::key::AnyKey) for an untyped filter.
//!
//! Types cannot catch a closure that formats keys differently from how they were inserted
//! (`"order-42"` against `"42"`): a guard that rejects every one of its first 100 checks
//! logs a WARN naming that likely cause, and one over a filter with no keys at all says so
//! from its first rejection.
//!
//! # Filling the filter from the database
//!
//! [`key_source::sqlx::query`](crate::key_source::sqlx::query) (feature `sqlx`) streams a
//! query's rows at every rebuild; [`counted`](crate::key_source::sqlx::Query::counted) sizes the
//! filter for `COUNT(*)`. With a watermark (`MAX(id)` and the ids above it),
//! [`SharedFilterBuilder::start`](crate::shared_filter::SharedFilterBuilder::start) loads the
//! snapshot and reads only the orders created since it was saved, so a restarted instance
//! serves at once and rejects nothing that exists. Where ids can commit out of order
//! (PostgreSQL sequences with concurrent writers), add
//! [`hold_back`](crate::key_source::sqlx::Query::hold_back). Any other source implements
//! [`KeySource`](crate::KeySource), or wraps a stream with
//! [`key_source::from_stream`](crate::key_source::from_stream).
//!
//! # The guard
//!
//! [`BloomGuard`](crate::BloomGuard) goes on the route with `route_layer`, so that
//! [`key::path_param`](crate::key::path_param) can read axum's matched route. An absent id is
//! answered `404 Not Found` (the same bytes as the handler's own), the handler does not run,
//! and a request whose id does not parse passes through (or gets a status, with
//! [`on_missing_key`](crate::guard::BloomGuard::on_missing_key)). See the [`guard`](crate::guard)
//! module for the options.
//!
//! # The cache in `State`
//!
//! [`GuardedCache::get_or_load`](crate::GuardedCache::get_or_load) asks the filter again (so a
//! handler without the guard is protected too), serves cached values and cached "not found"
//! answers, and runs one load per key however many requests wait for it; a load that is
//! cancelled or panics hands over to a waiter. [`CacheResponse`](crate::guarded_cache::CacheResponse)
//! turns the result into a response: `404` for "not found", `503` for a failed or timed-out
//! load (the error is logged, never sent to the client).
//!
//! # The create path
//!
//! The key goes into the filter **before** the row is visible (inside the transaction),
//! through [`prepare_insert`](crate::GuardedCache::prepare_insert); after the commit,
//! [`committed`](crate::shared_filter::PendingInsert::committed) writes it into any filter a
//! rebuild swapped in meanwhile (whose source could not see the open transaction) and forgets
//! a "not found" the cache may hold for it. If the client disconnects after the commit, the
//! `PendingInsert`'s `Drop` does the same.
//!
//! # Rebuilds and snapshots
//!
//! [`rebuild_every`](crate::SharedFilter::rebuild_every) reads the source into a new filter
//! while the old one serves, and swaps it in; inserts made meanwhile go into both, so no key
//! is lost. A failed rebuild leaves the old filter serving and is retried at the next tick.
//! [`save_every`](crate::SharedFilter::save_every) writes the snapshot atomically (`0600`; it
//! holds the hash key).
//!
//! # Metrics
//!
//! The crate reports through the [`metrics`](https://docs.rs/metrics/0.24) facade, version
//! 0.24: install any recorder for it, such as `metrics-exporter-prometheus` 0.17, as above. Every
//! series is described (HELP and unit); [`stats::names`](crate::stats::names) lists them.
//! `docs/alerts.yml` in the repository has Prometheus alerts for saturation, a measured
//! false-positive rate above target, and failing rebuilds.
//!
//! # Shutdown
//!
//! `with_graceful_shutdown` lets the requests in flight finish; a create whose commit landed
//! has its after-commit work done by then. Stopping the
//! [`BackgroundTask`](crate::shared_filter::BackgroundTask)s drops a rebuild in progress
//! (the old filter was serving anyway), and a last snapshot makes the next start fast.
//!
//! # Several instances
//!
//! Behind a load balancer, each instance's filter only learns its own creates. The
//! `bloom-redis` crate shares one filter through Redis: creates reach every instance before
//! they are acknowledged, and rebuilds run once for the fleet.
//!
//! # An operator's view
//!
//! [`admin::router`](crate::admin::router) (feature `admin`) serves the filters' and caches'
//! stats as JSON, and rebuilds or snapshots a filter on request. It has no authentication:
//! mount it behind yours, or on a port only operators reach.
