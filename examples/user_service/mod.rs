//! The user service: axum 0.8 over the [`db`] layer, guarded by a Bloom filter.
//!
//! | route | what it does |
//! | --- | --- |
//! | `GET /users/{id}` | `BloomGuard` (route layer) → `GuardedCache` → `SELECT … WHERE id = $1` |
//! | `DELETE /users/{id}` | deletes the row and forgets the cached user; with `--cuckoo` or `--counting`, removes the id from the filter too |
//! | `POST /users` | `{"name", "email"}` → `201` with the user; the id is in the filter before the row is visible |
//! | `GET /metrics` | Prometheus text: guard, cache, filter and database counters, live FPR, fill |
//! | `GET /health` | `ok` when the database answers |
//!
//! Start it with [`App::new`] and [`App::serve`] (or [`spawn`] for a service on
//! `127.0.0.1:0` you can stop, as the demo and the tests do).
//!
//! # What a restart guarantees
//!
//! Every user that exists when the service starts listening is let through by the guard,
//! whether the last stop was graceful (Ctrl-C, SIGTERM), a crash or `kill -9`, and whatever
//! other writers added while it was down. The filter comes from the snapshot `users.bloom`
//! in the data directory when the snapshot was made for this filter (name, kind, and the
//! `--filter-seed` if one is set), after the users committed since its watermark (a position
//! in the `users` table's change log, which a trigger writes in every writer's transaction)
//! are read in; otherwise it is built from the whole table (streamed by
//! [`UserIds`](crate::db::UserIds)) before the service listens. If that catch-up query fails,
//! the snapshot serves verifying (no id is rejected) while a full rebuild is retried. The
//! snapshot is rewritten after every rebuild (every [`Config::rebuild_every`]), every
//! [`Config::snapshot_every`], and on graceful shutdown.
//!
//! # Other writers
//!
//! Users written by anything else (an admin tool, an import, another service) are read from
//! the change log every [`Config::follow_every`] (on PostgreSQL also at once, on the trigger's
//! `NOTIFY`) and let through from then on; see bloom-tower's `SharedFilter::follow`. With
//! `--redis` one instance of the fleet reads the log, under a lease in Redis, and the others
//! receive the ids through Redis. Ids come from the database (PostgreSQL's identity column,
//! SQLite's `AUTOINCREMENT` counter), so any number of instances create users on one table.
//! With `--cuckoo` or `--counting` the service follows no other writer (its own creates, read
//! back from the log, would be counted twice, and a delete would not take them out).
//!
//! With `--redis` the filter is the fleet's: an instance joins it through Redis, and when
//! the snapshot holds a filter of the fleet's shape (size, k, layout, hash key) its bits are
//! merged in first (`RedisSyncBuilder::warm_start`), so that joining downloads only the
//! segments that differ from them (and uploads the ids only this instance had, if it stopped
//! before publishing them). The snapshot is saved every [`Config::snapshot_every`] and on
//! graceful shutdown.
//!
//! With [`Config::no_guard`] the same routes run with no filter and no cache: every
//! `GET /users/{id}` is a database query (the demo's baseline).

mod handlers;
pub mod metrics;

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use anyhow::Context as _;
use axum::Router;
use axum::response::Response;
use axum::routing::{get, post};
use bloom_core::BloomFilter;
use bloom_tower::key::{self, Parse, PathParam};
use bloom_tower::reject::{REJECTION_HEADER, RejectedKey, RejectionHeader};
use bloom_tower::shared_filter::{BackgroundTask, Follow, Started};
use bloom_tower::stats::GuardStats;
use bloom_tower::{BloomGuard, GuardedCache, SharedFilter};
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::db::{self, Db, User};

/// The service's settings; also its command-line flags (`#[command(flatten)]` them).
#[derive(Clone, Debug, clap::Args)]
pub struct Config {
    /// Name of this instance: the `service`, `guard`, `cache` and `filter` label of its
    /// metrics (give each instance in one process its own).
    #[arg(long, default_value = "users")]
    pub name: String,
    /// Directory for the SQLite database (`users.sqlite`) and the filter snapshot
    /// (`users.bloom`).
    #[arg(long, default_value = "data")]
    pub data_dir: PathBuf,
    /// `postgres://…` to use PostgreSQL instead of the embedded SQLite (or `sqlite://…`).
    #[arg(long, env = "DATABASE_URL")]
    pub database_url: Option<String>,
    /// Rebuild the filter from the database this often, in seconds (drops deleted ids).
    #[arg(long = "rebuild-secs", value_name = "SECONDS", default_value = "600", value_parser = parse_secs)]
    pub rebuild_every: Duration,
    /// Save the filter snapshot this often, in seconds (also after every rebuild and on
    /// shutdown). A restart reads the users created since the snapshot from the database, so
    /// this only bounds how much it reads.
    #[arg(long = "snapshot-secs", value_name = "SECONDS", default_value = "60", value_parser = parse_secs)]
    pub snapshot_every: Duration,
    /// Serve without Bloom filter and cache: every lookup queries the database.
    #[arg(long)]
    pub no_guard: bool,
    /// The filter's target false-positive rate.
    #[arg(long, default_value_t = 0.01)]
    pub false_positive_rate: f64,
    /// Users (and "not found" entries) kept in the cache.
    #[arg(long, default_value_t = 100_000)]
    pub cache_capacity: u64,
    /// How long a "not found" answer is cached, in seconds.
    #[arg(long = "negative-ttl-secs", value_name = "SECONDS", default_value = "30", value_parser = parse_secs)]
    pub negative_ttl: Duration,
    /// Database connections in the pool.
    #[arg(long, default_value_t = 8)]
    pub max_connections: u32,
    /// `redis://…`: share one filter with every instance started with the same URL (a user
    /// created through one is let through by the others at once). Needs `--filter-seed`.
    #[arg(long, env = "REDIS_URL", requires = "filter_seed")]
    pub redis: Option<String>,
    /// The filter's hash key (decimal or 0x-hex; a random one if not given). Every instance
    /// sharing the filter through Redis must use the same. A secret: whoever has it can
    /// craft keys the filter lets through.
    #[arg(long, env = "BLOOM_FILTER_SEED", value_parser = parse_seed)]
    pub filter_seed: Option<u128>,
    /// Keys the shared filter is sized for (with `--redis`: every instance must agree, so it
    /// is configured rather than derived from this instance's count of users).
    #[arg(long, default_value_t = 10_000_000)]
    pub filter_capacity: u64,
    /// Read the ids other writers committed this often, in seconds (an admin tool, a batch
    /// import, another service: anything that writes `users` without this service). On
    /// PostgreSQL the service also `LISTEN`s, and reads a commit at once; this is then the
    /// safety net. With `--redis` one instance of the fleet reads, under a lease.
    #[arg(long = "follow-secs", value_name = "SECONDS", default_value = "0.25", value_parser = parse_secs)]
    pub follow_every: Duration,
    /// Use a counting Bloom filter, so `DELETE /users/{id}` takes the id out at once and the
    /// guard rejects it again. Costs 4× the filter's memory (a 4-bit counter per bit);
    /// without it a deleted id passes the filter until the next rebuild. Not with `--redis`,
    /// which shares a plain filter's bits.
    #[arg(long, conflicts_with_all = ["redis", "cuckoo"])]
    pub counting: bool,
    /// Use a cuckoo filter, so `DELETE /users/{id}` takes the id out at once and the guard
    /// rejects it again, at about the plain filter's memory (a third of `--counting`'s). A
    /// full filter lets every id through until the rebuild it triggers replaces it. Not with
    /// `--redis`, which shares a plain filter's bits.
    #[arg(long, conflicts_with = "redis")]
    pub cuckoo: bool,
}

fn parse_seed(text: &str) -> Result<u128, String> {
    let parsed = match text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")) {
        Some(hex) => u128::from_str_radix(hex, 16),
        None => text.parse(),
    };
    parsed.map_err(|_| format!("expected a decimal or 0x-hex 128-bit number, got {text:?}"))
}

fn parse_secs(text: &str) -> Result<Duration, String> {
    text.parse::<f64>()
        .ok()
        .filter(|secs| secs.is_finite() && *secs > 0.0)
        .map(Duration::from_secs_f64)
        .ok_or_else(|| format!("expected a positive number of seconds, got {text:?}"))
}

impl Default for Config {
    fn default() -> Self {
        Self {
            name: "users".into(),
            data_dir: "data".into(),
            database_url: None,
            rebuild_every: Duration::from_secs(600),
            snapshot_every: Duration::from_secs(60),
            no_guard: false,
            false_positive_rate: 0.01,
            cache_capacity: 100_000,
            negative_ttl: Duration::from_secs(30),
            max_connections: 8,
            redis: None,
            filter_seed: None,
            filter_capacity: 10_000_000,
            follow_every: Duration::from_millis(250),
            counting: false,
            cuckoo: false,
        }
    }
}

impl Config {
    /// Where the filter snapshot lives: `users.bloom` in the data directory.
    pub fn snapshot_path(&self) -> PathBuf {
        self.data_dir.join("users.bloom")
    }

    /// The database URL: [`database_url`](Self::database_url), or the SQLite file in the
    /// data directory (created if missing).
    pub fn resolved_database_url(&self) -> anyhow::Result<String> {
        match &self.database_url {
            Some(url) if !url.is_empty() => Ok(url.clone()),
            _ => db::sqlite_url(&self.data_dir),
        }
    }
}

/// The guard's type: `{id}` parsed as `u64`, absent ids answered by [`no_such_user`].
type Guard =
    BloomGuard<u64, Parse<PathParam, u64>, RejectionHeader<fn(RejectedKey<'_>) -> Response>>;

/// The service: database, filter, guard and cache. Cheap to clone (an `Arc`).
#[derive(Clone)]
pub struct App {
    inner: Arc<Inner>,
}

struct Inner {
    config: Config,
    db: Db,
    guarded: Option<Guarded>,
}

struct Guarded {
    filter: SharedFilter<u64>,
    guard: Guard,
    cache: GuardedCache<u64, User>,
    /// Scheduled rebuilds and snapshots, stopped on shutdown.
    tasks: Mutex<Vec<BackgroundTask>>,
    /// With `--redis`: the sync that shares the filter (and runs the scheduled rebuilds, one
    /// instance at a time).
    redis: Option<bloom_redis::RedisSync<u64>>,
    /// What the admin router's rebuilds read: the scheduled rebuilds' source.
    source: crate::db::UserIds,
}

/// Counters of one service instance, for the demo's table.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ServiceStats {
    /// Statements sent to the database (lookups, inserts, the filter's rebuild queries…).
    pub db_queries: u64,
    /// Lookups that found no row in the database.
    pub db_misses: u64,
    /// The guard's counters (zero when unguarded).
    pub guard: GuardStats,
    /// Lookups answered from the cache with a user.
    pub cache_hits: u64,
    /// Lookups answered from the negative cache.
    pub negative_hits: u64,
    /// Loader runs (database lookups made by the cache).
    pub cache_loads: u64,
    /// Lookups the filter let through for ids that do not exist.
    pub false_positives: u64,
    /// `false_positives / (false_positives + rejected)`, over lookups of absent ids.
    pub measured_fpr: f64,
}

impl std::fmt::Debug for App {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("App")
            .field("name", &self.inner.config.name)
            .field("guarded", &self.inner.guarded.is_some())
            .field("db", &self.inner.db)
            .finish()
    }
}

impl App {
    /// Connects to the database (creating the table), and unless
    /// [`no_guard`](Config::no_guard) loads the filter from the snapshot or builds it from
    /// the database, and starts its scheduled rebuilds.
    pub async fn new(config: Config) -> anyhow::Result<App> {
        metrics::prometheus();
        let url = config.resolved_database_url()?;
        let db = Db::connect(&url, config.max_connections, &config.name).await?;
        App::with_parts(config, db, None).await
    }

    /// Assembles the service from a connected database and, for a guarded service, a filter
    /// that already holds every user id (the demo builds it with a progress bar). With
    /// `filter` `None` and [`no_guard`](Config::no_guard) off, the filter is loaded or built
    /// as in [`new`](Self::new).
    pub async fn with_parts(
        config: Config,
        db: Db,
        filter: Option<SharedFilter<u64>>,
    ) -> anyhow::Result<App> {
        metrics::prometheus();
        let guarded = if config.no_guard {
            None
        } else {
            let source = db.user_ids().await.context("counting the users")?;
            let admin_source = source.clone();
            let (filter, tasks, redis) = match (&config.redis, filter) {
                (Some(url), _) => {
                    let (filter, sync) = join_shared_filter(&config, url, &source).await?;
                    sync.follow(source.clone(), follow(&config, &db, &source)?);
                    let tasks = vec![
                        filter.save_every(config.snapshot_every),
                        source.prune_every(LOG_KEPT, LOG_PRUNED_EVERY),
                    ];
                    sync.rebuild_every(config.rebuild_every, source);
                    (filter, tasks, Some(sync))
                }
                (None, filter) => {
                    let filter = match filter {
                        Some(filter) => filter,
                        None => start_filter(&config, &source).await?,
                    };
                    // A verifying filter (a snapshot that could not be caught up) is rebuilt
                    // at once by this task, and retried until it swaps in.
                    let mut tasks = vec![filter.save_every(config.snapshot_every)];
                    // A counting or cuckoo filter would count the service's own creates
                    // twice (once when created, once when read back from the log), and one
                    // removal would then leave a deleted id in: it follows no other writer.
                    if !config.counting && !config.cuckoo {
                        let how = follow(&config, &db, &source)?;
                        tasks.push(filter.follow(source.clone(), how));
                    }
                    tasks.push(source.prune_every(LOG_KEPT, LOG_PRUNED_EVERY));
                    tasks.push(filter.rebuild_every(config.rebuild_every, source));
                    (filter, tasks, None)
                }
            };
            let guard: Guard =
                BloomGuard::new(filter.clone(), key::path_param("id").parse::<u64>())
                    .name(config.name.clone())
                    .on_reject(no_such_user as fn(RejectedKey<'_>) -> Response)
                    // `x-bloom-guard: rejected` on the guard's own 404s, so that an operator
                    // (or a client's logs) can tell them from the database's "no such user".
                    .rejection_header(REJECTION_HEADER);
            let cache = GuardedCache::builder(filter.clone())
                .name(config.name.clone())
                .max_capacity(config.cache_capacity)
                .time_to_live(Duration::from_secs(300))
                .negative_ttl(config.negative_ttl)
                .load_timeout(Duration::from_secs(5))
                .build();
            Some(Guarded {
                filter,
                guard,
                cache,
                tasks: Mutex::new(tasks),
                redis,
                source: admin_source,
            })
        };
        Ok(App {
            inner: Arc::new(Inner {
                config,
                db,
                guarded,
            }),
        })
    }

    /// The axum router: `/users/{id}` (guarded unless `no_guard`), `/users`, `/metrics`,
    /// `/health`.
    pub fn router(&self) -> Router {
        let users = Router::new().route(
            "/users/{id}",
            get(handlers::get_user).delete(handlers::delete_user),
        );
        // `route_layer`: the guard runs only for requests that matched `/users/{id}`, after
        // axum stored the path parameters that `key::path_param("id")` reads.
        let users = match &self.inner.guarded {
            Some(guarded) => users.route_layer(guarded.guard.clone()),
            None => users,
        };
        Router::new()
            .merge(users)
            .route("/users", post(handlers::create_user))
            .route("/metrics", get(handlers::metrics))
            .route("/health", get(handlers::health))
            .with_state(self.clone())
    }

    /// The operator's routes over the filter, the guard and the cache (`GET /filters`,
    /// `POST /filters/{name}/rebuild`, `POST /filters/{name}/snapshot`, `GET /guards`,
    /// `GET /caches`; see
    /// [`bloom_tower::admin`]); `None` when unguarded. **No authentication**: the service
    /// serves it only on `--admin-port`, a separate listener on 127.0.0.1.
    pub fn admin_router(&self) -> Option<Router> {
        let guarded = self.inner.guarded.as_ref()?;
        let admin = bloom_tower::admin::Admin::new()
            .filter(guarded.filter.clone(), guarded.source.clone())
            .guard(&guarded.guard)
            .cache(self.inner.config.name.clone(), guarded.cache.clone());
        Some(bloom_tower::admin::router(admin))
    }

    /// Serves on `listener` until `shutdown` resolves, then stops accepting, lets the open
    /// connections finish for at most [`GRACE`](crate::serve::GRACE) (an idle keep-alive
    /// connection closes at once; the rule and its test: [`crate::serve`]), stops the
    /// scheduled rebuilds and saves the filter snapshot.
    pub async fn serve(
        self,
        listener: TcpListener,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> anyhow::Result<()> {
        let stopped = crate::serve::serve(listener, self.router(), shutdown, crate::serve::GRACE)
            .await
            .context("serving")?;
        tracing::info!(
            open = stopped.open,
            dropped = stopped.dropped,
            "stopped serving"
        );
        self.shutdown().await
    }

    /// Stops the scheduled rebuilds and snapshots and saves the filter snapshot (what
    /// [`serve`](Self::serve) does after the last request). Idempotent.
    pub async fn shutdown(&self) -> anyhow::Result<()> {
        if let Some(guarded) = &self.inner.guarded {
            let tasks =
                std::mem::take(&mut *guarded.tasks.lock().unwrap_or_else(PoisonError::into_inner));
            for task in tasks {
                task.shutdown().await;
            }
            if let Some(sync) = &guarded.redis {
                // Tell the other instances, so they do not wait for this one's marks.
                sync.leave().await;
            }
            let path = self.inner.config.snapshot_path();
            guarded
                .filter
                .save(&path)
                .await
                .with_context(|| format!("saving the filter snapshot {}", path.display()))?;
            tracing::info!(path = %path.display(), "saved the filter snapshot");
        }
        Ok(())
    }

    /// Creates a user (what `POST /users` does; see `handlers::create_user` for why in this
    /// order). Cancellation-safe: if this future is dropped after the row is committed, the
    /// filter and cache work still happens.
    pub async fn create_user(&self, name: &str, email: &str) -> anyhow::Result<User> {
        let cache = self.cache();
        let sync = self.inner.guarded.as_ref().and_then(|g| g.redis.as_ref());
        let (user, pending) = self
            .db()
            .create_user(name, email, |id| async move {
                // Inside the transaction, before COMMIT: once the row is visible, the id is
                // in the filter (and any "not found" cached for it is dropped by `committed`).
                let pending = cache.map(|cache| cache.prepare_insert(&id));
                // With `--redis`: the id's bits reach Redis and every other instance before
                // the row is visible. If Redis does not answer in time the create goes on:
                // the other instances, no longer hearing from this one, let would-be
                // rejections through until it is back (the default stale policy).
                if let Some(sync) = sync {
                    let _ = sync.propagated().await;
                }
                pending
            })
            .await?;
        // On an error the id stays in the filter: a harmless false positive until the next
        // rebuild (dropping `pending` finishes its work all the same).
        if let Some(pending) = pending {
            pending.committed().await;
        }
        // With `--redis`, before the 201: every instance has the id (and has dropped any "not
        // found" it cached for it), or, if Redis did not answer, the follow bound has passed,
        // so that every instance holds the row as the fleet's follower read it. A read of the
        // new user on any instance then finds it (R1, R5 in docs/REDIS-SYNC.md).
        if let Some(sync) = sync {
            let _ = sync.visible().await;
        }
        Ok(user)
    }

    /// The settings.
    pub fn config(&self) -> &Config {
        &self.inner.config
    }

    /// The database.
    pub fn db(&self) -> &Db {
        &self.inner.db
    }

    /// The Bloom filter (`None` when unguarded).
    pub fn filter(&self) -> Option<&SharedFilter<u64>> {
        self.inner.guarded.as_ref().map(|guarded| &guarded.filter)
    }

    /// With `--redis`: the synchronisation's state and counters (what joining moved, the last
    /// pass, freshness).
    pub fn redis_stats(&self) -> Option<bloom_redis::RedisStats> {
        let guarded = self.inner.guarded.as_ref()?;
        guarded.redis.as_ref().map(bloom_redis::RedisSync::stats)
    }

    /// The cache (`None` when unguarded).
    pub fn cache(&self) -> Option<&GuardedCache<u64, User>> {
        self.inner.guarded.as_ref().map(|guarded| &guarded.cache)
    }

    /// This instance's counters.
    pub fn stats(&self) -> ServiceStats {
        let db = &self.inner.db;
        let mut stats = ServiceStats {
            db_queries: db.queries(),
            db_misses: db.misses(),
            ..ServiceStats::default()
        };
        if let Some(guarded) = &self.inner.guarded {
            let cache = guarded.cache.stats();
            stats.guard = guarded.guard.stats();
            stats.cache_hits = cache.hits;
            stats.negative_hits = cache.negative_hits;
            stats.cache_loads = cache.loads;
            stats.false_positives = cache.false_positives;
            // The guard stops absent ids before the cache sees them, so the cache's own
            // rejection count misses them: count both. The library does the same per filter
            // (`bloom_filter_measured_fpr`); this independent figure is its cross-check.
            let stopped = stats.guard.rejected + cache.filter_rejections;
            let absent = stopped + cache.false_positives;
            stats.measured_fpr = if absent == 0 {
                0.0
            } else {
                cache.false_positives as f64 / absent as f64
            };
        }
        stats
    }
}

/// The answer for an id the filter has never seen: the same `404` the handler gives for an
/// id it did not find.
fn no_such_user(_key: RejectedKey<'_>) -> Response {
    handlers::not_found()
}

/// How the filter follows the users other writers commit: every
/// [`Config::follow_every`], and on PostgreSQL also whenever a `NOTIFY` says a transaction
/// that wrote users committed.
/// How long the users' change log keeps a row: a day. A restart from a snapshot older than
/// that, or a follower stalled that long, reads the whole table instead (nothing is missed);
/// within it, they read only the rows since.
const LOG_KEPT: Duration = Duration::from_secs(24 * 3600);
/// How often the change log is pruned.
const LOG_PRUNED_EVERY: Duration = Duration::from_secs(3600);

fn follow(config: &Config, db: &Db, source: &crate::db::UserIds) -> anyhow::Result<Follow> {
    let how = Follow::every(config.follow_every);
    Ok(match db.backend() {
        db::Backend::Sqlite => how,
        db::Backend::Postgres => {
            let url = config.resolved_database_url()?;
            how.wake_on(source.notifications(&url))
        }
    })
}

/// Joins the filter shared through Redis: every instance builds the same empty filter (size,
/// k, layout and hash key from the configuration), merges in what Redis holds, and the first
/// one to find the shared filter empty fills it from the database.
async fn join_shared_filter(
    config: &Config,
    url: &str,
    source: &crate::db::UserIds,
) -> anyhow::Result<(SharedFilter<u64>, bloom_redis::RedisSync<u64>)> {
    let seed = config
        .filter_seed
        .context("--redis needs --filter-seed, the hash key every instance shares")?;
    let bits = BloomFilter::builder()
        .expected_items(config.filter_capacity)
        .false_positive_rate(config.false_positive_rate)
        .seed(seed)
        .build()?;
    let filter = SharedFilter::<u64>::builder()
        .name(config.name.clone())
        .snapshot(config.snapshot_path())
        .build(bits);
    let sync = bloom_redis::RedisSync::builder(url)
        .prefix("user_service:users")
        // The snapshot's bits first (if it holds a filter of the fleet's shape and hash key):
        // joining then moves only the segments that differ, and uploads the ids only this
        // instance had, if it stopped before publishing them.
        .warm_start(true)
        .connect(&filter)
        .await
        .context("joining the filter shared through Redis")?;
    // A shared filter holding clearly fewer ids than the table has never been filled, or Redis
    // lost data (restarted empty or from an old dump while the fleet was down): fill it from
    // the database before serving, or those users would be rejected. If another instance is
    // already rebuilding it, wait for its generation.
    let before = sync.stats().generation;
    match sync
        .refill_if_lost(source)
        .await
        .context("checking the shared filter against the database")?
    {
        Some(bloom_redis::Rebuilt::Skipped) => {
            tokio::time::timeout(Duration::from_secs(300), async {
                while sync.stats().generation == before {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            })
            .await
            .context("waiting for another instance to fill the shared filter")?;
        }
        Some(outcome) => tracing::info!(?outcome, "filled the shared filter from the database"),
        None => {}
    }
    Ok((filter, sync))
}

/// The filter from its snapshot, caught up with the users created since, or built from the
/// database; see the module docs for what that guarantees.
async fn start_filter(
    config: &Config,
    source: &crate::db::UserIds,
) -> anyhow::Result<SharedFilter<u64>> {
    let mut builder = SharedFilter::<u64>::builder()
        .name(config.name.clone())
        .false_positive_rate(config.false_positive_rate)
        .auto_grow(true)
        .snapshot(config.snapshot_path());
    // Small: a rebuild sizes the filter it builds (of the same kind) for the source's count
    // hint + 25%.
    let mut initial = BloomFilter::builder()
        .expected_items(1_000)
        .false_positive_rate(config.false_positive_rate);
    if let Some(seed) = config.filter_seed {
        initial = initial.seed(seed);
        builder = builder.require_hash_key(seed);
    }
    let initial: bloom_core::AnyFilter = if config.counting {
        initial.build_counting()?.into()
    } else if config.cuckoo {
        let cuckoo = bloom_core::CuckooFilter::builder()
            .expected_items(1_000)
            .false_positive_rate(config.false_positive_rate);
        match config.filter_seed {
            Some(seed) => cuckoo.seed(seed),
            None => cuckoo,
        }
        .build()?
        .into()
    } else {
        initial.build()?.into()
    };
    let (filter, started) = builder
        .start(initial, source)
        .await
        .context("building the filter from the database")?;
    match &started {
        Started::Verifying { reason } => tracing::warn!(
            %reason,
            "serving the snapshot verifying (no id is rejected) until a rebuild completes"
        ),
        started => tracing::info!(?started, "filter ready"),
    }
    Ok(filter)
}

/// A service running in a Tokio task; from [`spawn`].
#[derive(Debug)]
pub struct RunningService {
    /// The address it listens on.
    pub addr: SocketAddr,
    /// The app (for its counters, filter and database).
    pub app: App,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<anyhow::Result<()>>,
}

impl RunningService {
    /// `http://127.0.0.1:port`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Graceful shutdown: stops accepting, finishes requests in flight (within
    /// [`GRACE`](crate::serve::GRACE)), saves the snapshot.
    pub async fn shutdown(mut self) -> anyhow::Result<()> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        (&mut self.task)
            .await
            .context("the service task panicked")?
    }
}

/// Builds the app ([`App::new`]) and serves it on `127.0.0.1:port` (`0`: an ephemeral
/// port) in a Tokio task until [`RunningService::shutdown`].
pub async fn spawn(config: Config, port: u16) -> anyhow::Result<RunningService> {
    let app = App::new(config).await?;
    spawn_app(app, port).await
}

/// Serves an app built with [`App::with_parts`] on `127.0.0.1:port` in a Tokio task.
pub async fn spawn_app(app: App, port: u16) -> anyhow::Result<RunningService> {
    let listener = TcpListener::bind(("127.0.0.1", port))
        .await
        .with_context(|| format!("binding 127.0.0.1:{port}"))?;
    let addr = listener.local_addr()?;
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(app.clone().serve(listener, async move {
        let _ = stopped.await;
    }));
    Ok(RunningService {
        addr,
        app,
        stop: Some(stop),
        task,
    })
}
