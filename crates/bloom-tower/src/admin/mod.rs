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

mod handlers;

use std::fmt;
use std::hash::Hash;
use std::sync::Arc;

use axum::Router;
use axum::routing::{get, post};
use bloom_core::Key;

use crate::BloomGuard;
use crate::guarded_cache::{CacheStats, GuardedCache};
use crate::key::{AnyKey, KeyFor};
use crate::shared_filter::ErasedKeySource;
use crate::stats::GuardStats;
use crate::{KeySource, SharedFilter};

/// What the admin [`router`] shows and acts on: filters (each with the source a rebuild reads)
/// and caches. Register each under a distinct name.
///
/// ```
/// use bloom_tower::{BloomFilter, GuardedCache, SharedFilter, admin::Admin};
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let filter = SharedFilter::<u64>::builder().name("users").build(BloomFilter::new(1_000, 0.01)?);
/// let cache: GuardedCache<u64, String> = GuardedCache::builder(filter.clone()).build();
/// let admin = Admin::new()
///     .filter(filter, vec![1u64, 2, 3])
///     .cache("users", cache);
/// assert_eq!(format!("{admin:?}"), r#"Admin { filters: ["users"], guards: [], caches: ["users"] }"#);
/// # Ok(())
/// # }
/// ```
#[derive(Default)]
#[must_use]
pub struct Admin {
    filters: Vec<FilterEntry>,
    guards: Vec<GuardEntry>,
    caches: Vec<CacheEntry>,
}

struct FilterEntry {
    filter: SharedFilter<AnyKey>,
    /// Erased so that filters with different sources fit in one list; `Arc` so a rebuild's
    /// task can own it.
    source: Arc<dyn ErasedKeySource>,
}

struct GuardEntry {
    name: String,
    /// The guard's shared counters behind a closure: its type parameters do not matter here.
    stats: Box<dyn Fn() -> GuardStats + Send + Sync>,
}

struct CacheEntry {
    name: String,
    /// The cache behind a closure: its key and value types do not matter here.
    stats: Box<dyn Fn() -> (CacheStats, usize) + Send + Sync>,
}

impl Admin {
    /// Nothing registered yet.
    ///
    /// ```
    /// let admin = bloom_tower::admin::Admin::new();
    /// # let _ = admin;
    /// ```
    pub fn new() -> Self {
        Self::default()
    }

    /// Shows `filter` under its [name](SharedFilter::name), and rebuilds it from `source` on
    /// `POST /filters/{name}/rebuild`: pass the source its scheduled rebuilds read (a clone,
    /// or an `Arc` of it). With a replication layer installed (`bloom-redis`'s `RedisSync`),
    /// the rebuild goes to the fleet, like any [`reload_from`](SharedFilter::reload_from).
    ///
    /// ```
    /// use bloom_tower::{BloomFilter, SharedFilter, admin::Admin, key_source};
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let orders = SharedFilter::<String>::builder().name("orders").build(BloomFilter::new(1_000, 0.01)?);
    /// let admin = Admin::new().filter(orders, key_source::from_iter(|| ["o-1", "o-2"]));
    /// # let _ = admin;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Panics
    ///
    /// If a filter of the same name is registered already (unnamed filters are all
    /// `"default"`: name them with [`SharedFilterBuilder::name`](crate::shared_filter::SharedFilterBuilder::name)),
    /// since `/filters/{name}` could reach only one of them.
    pub fn filter<K, S>(mut self, filter: SharedFilter<K>, source: S) -> Self
    where
        K: ?Sized,
        S: KeySource + Send + Sync + 'static,
        S::Key: KeyFor<K>,
    {
        let filter = filter.untyped();
        let name = filter.name();
        assert!(
            self.find(name).is_none(),
            "admin: a filter named {name:?} is registered already; give each SharedFilter its own name",
        );
        self.filters.push(FilterEntry {
            filter,
            source: Arc::new(source),
        });
        self
    }

    /// Shows `cache`'s [`CacheStats`] (and its loads in flight) under `name` in `GET /caches`.
    ///
    /// ```
    /// use bloom_tower::{BloomFilter, GuardedCache, SharedFilter, admin::Admin};
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let filter = SharedFilter::<u64>::new(BloomFilter::new(1_000, 0.01)?);
    /// let users: GuardedCache<u64, String> = GuardedCache::builder(filter).build();
    /// let admin = Admin::new().cache("users", users.clone());
    /// # let _ = admin;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Panics
    ///
    /// If a cache of the same name is registered already.
    pub fn cache<K, V>(mut self, name: impl Into<String>, cache: GuardedCache<K, V>) -> Self
    where
        K: Key + Hash + Eq + Clone + Send + Sync + 'static,
        V: Clone + Send + Sync + 'static,
    {
        let name = name.into();
        assert!(
            self.caches.iter().all(|entry| entry.name != name),
            "admin: a cache named {name:?} is registered already",
        );
        self.caches.push(CacheEntry {
            name,
            stats: Box::new(move || (cache.stats(), cache.loads_in_flight())),
        });
        self
    }

    /// Shows `guard`'s [`GuardStats`] under its name in `GET /guards` (every service made from
    /// the guard and its clones counts into the same stats).
    ///
    /// ```
    /// use bloom_tower::{BloomFilter, BloomGuard, SharedFilter, admin::Admin, key};
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let filter = SharedFilter::<u64>::new(BloomFilter::new(1_000, 0.01)?);
    /// let guard = BloomGuard::new(filter, key::path_segment(1).parse::<u64>()).name("users");
    /// let admin = Admin::new().guard(&guard);
    /// # let _ = admin;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Panics
    ///
    /// If a guard of the same name is registered already (unnamed guards are all
    /// `"default"`: name them with [`BloomGuard::name`]).
    pub fn guard<K: ?Sized, E, R, M>(mut self, guard: &BloomGuard<K, E, R, M>) -> Self {
        let (name, counters) = guard.counters();
        let name = name.to_owned();
        assert!(
            self.guards.iter().all(|entry| entry.name != name),
            "admin: a guard named {name:?} is registered already; give each BloomGuard its own name",
        );
        self.guards.push(GuardEntry {
            name,
            stats: Box::new(move || counters.snapshot()),
        });
        self
    }

    fn find(&self, name: &str) -> Option<&FilterEntry> {
        self.filters
            .iter()
            .find(|entry| entry.filter.name() == name)
    }
}

impl fmt::Debug for Admin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let filters: Vec<&str> = self.filters.iter().map(|e| e.filter.name()).collect();
        let guards: Vec<&str> = self.guards.iter().map(|e| e.name.as_str()).collect();
        let caches: Vec<&str> = self.caches.iter().map(|e| e.name.as_str()).collect();
        f.debug_struct("Admin")
            .field("filters", &filters)
            .field("guards", &guards)
            .field("caches", &caches)
            .finish()
    }
}

/// The admin routes over what `admin` registered (see the [module docs](self) for the
/// routes and their answers). **No authentication**: mount it behind yours, e.g.
/// `app.nest("/admin", admin::router(admin).layer(your_auth))`, or serve it on a listener
/// bound to localhost.
///
/// ```
/// use bloom_tower::{BloomFilter, SharedFilter, admin};
/// use http::{Request, StatusCode};
/// use tower::ServiceExt;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let filter = SharedFilter::<u64>::builder().name("users").build(BloomFilter::new(1_000, 0.01)?);
/// let router = admin::router(admin::Admin::new().filter(filter, vec![1u64]));
/// let missing = Request::post("/filters/orders/rebuild").body(axum::body::Body::empty())?;
/// assert_eq!(router.oneshot(missing).await?.status(), StatusCode::NOT_FOUND);
/// # Ok(())
/// # }
/// ```
pub fn router(admin: Admin) -> Router {
    Router::new()
        .route("/filters", get(handlers::filters))
        .route("/filters/{name}", get(handlers::filter))
        .route("/filters/{name}/rebuild", post(handlers::rebuild))
        .route("/filters/{name}/snapshot", post(handlers::snapshot))
        .route("/guards", get(handlers::guards))
        .route("/caches", get(handlers::caches))
        .with_state(Arc::new(admin))
}
