//! The users table, on SQLite (embedded, the default) or PostgreSQL, through one code path.
//!
//! Everything goes through [`sqlx::AnyPool`]: the same SQL (with `$1` placeholders, which
//! both SQLite and PostgreSQL accept), the same row types, the same streaming [`UserIds`]
//! key source. Only the connection URL differs: `sqlite://…/users.sqlite` by default,
//! `postgres://…` when `DATABASE_URL` says so.
//!
//! Every statement the service sends is counted ([`Db::queries`], and the
//! `user_service_db_queries_total{service=…}` counter of the `metrics` facade), which is how
//! the demo and the tests see what the guard spares the database.

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use anyhow::Context as _;
use bloom_tower::key::KeyFor;
use bloom_tower::key_source::{self, Watermark};
use bloom_tower::{Key, KeySource};
use futures_util::Stream;
use serde::{Deserialize, Serialize};
use sqlx::any::{AnyConnectOptions, AnyPoolOptions};
use sqlx::{AnyPool, Connection as _, Executor as _};

/// Metric: statements sent to the database, labelled `service`.
pub const DB_QUERIES: &str = "user_service_db_queries_total";
/// Metric: `find_user` queries that found no row (for a guarded service: the filter's false
/// positives, and ids deleted since the last rebuild), labelled `service`.
pub const DB_MISSES: &str = "user_service_db_misses_total";

/// Rows per `INSERT` (and transaction) when seeding.
const SEED_BATCH: u64 = 50_000;

/// A user row.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct User {
    /// The primary key.
    pub id: u64,
    /// Display name.
    pub name: String,
    /// E-mail address.
    pub email: String,
}

/// Which database server is behind the pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// Embedded SQLite (a file).
    Sqlite,
    /// A PostgreSQL server.
    Postgres,
}

/// The database: a connection pool, the query counters, and the next id to hand out.
#[derive(Clone)]
pub struct Db {
    pool: AnyPool,
    backend: Backend,
    counters: Arc<Counters>,
}

struct Counters {
    queries: AtomicU64,
    misses: AtomicU64,
    next_id: AtomicU64,
    /// Ids handed out whose `INSERT` has not finished: they hold the watermark back (see
    /// [`UserIds`]'s `watermark`).
    in_flight: Mutex<BTreeSet<u64>>,
    queries_metric: metrics::Counter,
    misses_metric: metrics::Counter,
}

impl Counters {
    /// The lowest id handed out whose `INSERT` has not finished, if any.
    fn lowest_in_flight(&self) -> Option<i64> {
        let in_flight = self
            .in_flight
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        in_flight.first().map(|&id| id as i64)
    }
}

impl std::fmt::Debug for Db {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Db")
            .field("backend", &self.backend)
            .field("queries", &self.queries())
            .finish_non_exhaustive()
    }
}

/// The SQLite URL for `users.sqlite` in `data_dir` (created if missing).
pub fn sqlite_url(data_dir: &Path) -> anyhow::Result<String> {
    std::fs::create_dir_all(data_dir)
        .with_context(|| format!("creating the data directory {}", data_dir.display()))?;
    let file = data_dir.join("users.sqlite");
    Ok(format!("sqlite://{}?mode=rwc", file.display()))
}

impl Db {
    /// Connects to `url` (`sqlite://…` or `postgres://…`) with up to `max_connections`
    /// connections and creates the `users` table if it is missing. `service` labels the
    /// query counters in the `metrics` facade.
    pub async fn connect(url: &str, max_connections: u32, service: &str) -> anyhow::Result<Db> {
        sqlx::any::install_default_drivers();
        // Before the counters below are registered, so that they reach `/metrics`.
        crate::user_service::metrics::prometheus();
        let options: AnyConnectOptions = url
            .parse()
            .with_context(|| format!("parsing the database URL {}", redact(url)))?;
        let backend = if url.starts_with("sqlite:") {
            Backend::Sqlite
        } else if url.starts_with("postgres:") || url.starts_with("postgresql:") {
            Backend::Postgres
        } else {
            anyhow::bail!(
                "unsupported database URL {} (sqlite:// or postgres://)",
                redact(url)
            );
        };
        let pool = AnyPoolOptions::new()
            .max_connections(max_connections)
            .acquire_timeout(Duration::from_secs(30))
            .after_connect(move |conn, _meta| {
                Box::pin(async move {
                    if backend == Backend::Sqlite {
                        // WAL: readers do not block each other or the writer. NORMAL sync is
                        // durable across application crashes, which is what an example needs.
                        conn.execute("PRAGMA journal_mode = WAL").await?;
                        conn.execute("PRAGMA synchronous = NORMAL").await?;
                        conn.execute("PRAGMA busy_timeout = 10000").await?;
                    }
                    Ok(())
                })
            })
            .connect_with(options)
            .await
            .with_context(|| format!("connecting to {}", redact(url)))?;
        let service = service.to_owned();
        let db = Db {
            pool,
            backend,
            counters: Arc::new(Counters {
                queries: AtomicU64::new(0),
                misses: AtomicU64::new(0),
                next_id: AtomicU64::new(1),
                in_flight: Mutex::new(BTreeSet::new()),
                queries_metric: metrics::counter!(DB_QUERIES, "service" => service.clone()),
                misses_metric: metrics::counter!(DB_MISSES, "service" => service),
            }),
        };
        db.migrate().await?;
        db.sync_next_id().await?;
        Ok(db)
    }

    /// Creates the `users` table if it does not exist (same DDL on both backends).
    async fn migrate(&self) -> anyhow::Result<()> {
        self.count_query();
        sqlx::query(
            "CREATE TABLE IF NOT EXISTS users (\
                id BIGINT PRIMARY KEY, \
                name TEXT NOT NULL, \
                email TEXT NOT NULL)",
        )
        .execute(&self.pool)
        .await
        .context("creating the users table")?;
        Ok(())
    }

    /// Sets the next id to hand out to `MAX(id) + 1`.
    async fn sync_next_id(&self) -> anyhow::Result<()> {
        self.count_query();
        let max: Option<i64> = sqlx::query_scalar("SELECT MAX(id) FROM users")
            .fetch_one(&self.pool)
            .await
            .context("reading the largest user id")?;
        let next = max.map_or(1, |max| max as u64 + 1);
        self.counters.next_id.fetch_max(next, Relaxed);
        Ok(())
    }

    /// Which server is behind the pool.
    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// The connection pool.
    pub fn pool(&self) -> &AnyPool {
        &self.pool
    }

    /// Statements sent so far through this `Db` (and its clones).
    pub fn queries(&self) -> u64 {
        self.counters.queries.load(Relaxed)
    }

    /// [`find_user`](Self::find_user) calls that found no row.
    pub fn misses(&self) -> u64 {
        self.counters.misses.load(Relaxed)
    }

    fn count_query(&self) {
        self.counters.queries.fetch_add(1, Relaxed);
        self.counters.queries_metric.increment(1);
    }

    /// `SELECT COUNT(*) FROM users`.
    pub async fn count_users(&self) -> Result<u64, sqlx::Error> {
        self.count_query();
        let count: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM users")
            .fetch_one(&self.pool)
            .await?;
        Ok(count as u64)
    }

    /// Adds `n` users with the next `n` ids (`user {id}`, `user{id}@example.com`), 50,000
    /// rows per `INSERT … SELECT` statement and transaction, the rows generated by the
    /// database itself (a recursive CTE, which SQLite and PostgreSQL both run): a million
    /// users take seconds, not the minutes of row-by-row inserts. `progress` is called with
    /// the number of rows written after each batch. Returns the ids' range.
    pub async fn seed(
        &self,
        n: u64,
        mut progress: impl FnMut(u64),
    ) -> anyhow::Result<std::ops::Range<u64>> {
        let first = self.counters.next_id.fetch_add(n, Relaxed);
        let ids = first..first + n;
        let mut next = ids.start;
        while next < ids.end {
            let last = (next + SEED_BATCH - 1).min(ids.end - 1);
            let mut tx = self.pool.begin().await.context("seeding: BEGIN")?;
            self.count_query();
            sqlx::query(
                "WITH RECURSIVE seq(n) AS (\
                    SELECT CAST($1 AS BIGINT) \
                    UNION ALL SELECT n + 1 FROM seq WHERE n < $2) \
                 INSERT INTO users (id, name, email) \
                 SELECT n, 'user ' || n, 'user' || n || '@example.com' FROM seq",
            )
            .bind(i64::try_from(next).context("user id out of range")?)
            .bind(i64::try_from(last).context("user id out of range")?)
            .execute(&mut *tx)
            .await
            .context("seeding: INSERT")?;
            tx.commit().await.context("seeding: COMMIT")?;
            next = last + 1;
            progress(next - ids.start);
        }
        Ok(ids)
    }

    /// The user with this id, if any.
    pub async fn find_user(&self, id: u64) -> Result<Option<User>, sqlx::Error> {
        let Ok(key) = i64::try_from(id) else {
            return Ok(None); // not a BIGINT: no such row, and no query needed
        };
        self.count_query();
        let row: Option<(i64, String, String)> =
            sqlx::query_as("SELECT id, name, email FROM users WHERE id = $1")
                .bind(key)
                .fetch_optional(&self.pool)
                .await?;
        if row.is_none() {
            self.counters.misses.fetch_add(1, Relaxed);
            self.counters.misses_metric.increment(1);
        }
        Ok(row.map(|(id, name, email)| User {
            id: id as u64,
            name,
            email,
        }))
    }

    /// Hands out the id the next [`insert_user`](Self::insert_user) will use. Ids come from
    /// a counter started at `MAX(id) + 1`, so the caller knows a new user's id before its row
    /// exists (and can put it in the Bloom filter first). One writing process per database
    /// is assumed; `insert_user` re-synchronises and fails on a collision with another one.
    ///
    /// Keep the returned value until the `INSERT` has returned: while it lives, the id holds
    /// the filter's watermark back, so a snapshot never claims to be complete past a row that
    /// may still commit.
    pub fn allocate_id(&self) -> AllocatedId {
        // Allocation and registration under one lock: a watermark read in between must not
        // see a larger id committed while this one is neither committed nor registered.
        let mut in_flight = self
            .counters
            .in_flight
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let id = self.counters.next_id.fetch_add(1, Relaxed);
        in_flight.insert(id);
        AllocatedId {
            id,
            counters: Arc::clone(&self.counters),
        }
    }

    /// Inserts a user with an id from [`allocate_id`](Self::allocate_id) (auto-commit: the row
    /// is visible when this returns).
    pub async fn insert_user(&self, id: u64, name: &str, email: &str) -> anyhow::Result<User> {
        let key = i64::try_from(id).context("user id out of range")?;
        self.count_query();
        let result = sqlx::query("INSERT INTO users (id, name, email) VALUES ($1, $2, $3)")
            .bind(key)
            .bind(name)
            .bind(email)
            .execute(&self.pool)
            .await;
        if let Err(sqlx::Error::Database(error)) = &result {
            if error.is_unique_violation() {
                // Another writer took this id: catch up, so the next allocation is free.
                self.sync_next_id().await?;
            }
        }
        result.context("inserting the user")?;
        Ok(User {
            id,
            name: name.to_owned(),
            email: email.to_owned(),
        })
    }

    /// Deletes the user; whether there was one.
    pub async fn delete_user(&self, id: u64) -> Result<bool, sqlx::Error> {
        let Ok(key) = i64::try_from(id) else {
            return Ok(false);
        };
        self.count_query();
        let done = sqlx::query("DELETE FROM users WHERE id = $1")
            .bind(key)
            .execute(&self.pool)
            .await?;
        Ok(done.rows_affected() > 0)
    }

    /// A [`KeySource`] streaming every user id, for the Bloom filter's (re)builds; its count
    /// hint is taken now with `SELECT COUNT(*)` and refreshed by every complete read.
    pub async fn user_ids(&self) -> Result<UserIds, sqlx::Error> {
        let counters = Arc::clone(&self.counters);
        self.count_query();
        let ids = key_source::sqlx::query::<RowId, _>(self.pool.clone(), "SELECT id FROM users")
            .with_watermark(
                "SELECT MAX(id) FROM users",
                "SELECT id FROM users WHERE id > $1",
            )
            // Never past an id whose INSERT is still running (see `allocate_id`).
            .hold_back(move || counters.lowest_in_flight())
            .counted_with("SELECT COUNT(*) FROM users")
            .await?;
        Ok(UserIds {
            db: self.clone(),
            ids,
        })
    }

    /// Checks the connection: `SELECT 1` on a fresh pooled connection.
    pub async fn ping(&self) -> Result<(), sqlx::Error> {
        let mut conn = self.pool.acquire().await?;
        conn.ping().await
    }

    /// Closes the pool, waiting for connections in use to be returned.
    pub async fn close(&self) {
        self.pool.close().await;
    }
}

/// An id from [`Db::allocate_id`]; until it is dropped, it holds the watermark below it.
pub struct AllocatedId {
    id: u64,
    counters: Arc<Counters>,
}

impl AllocatedId {
    /// The id.
    pub fn id(&self) -> u64 {
        self.id
    }
}

impl std::fmt::Debug for AllocatedId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("AllocatedId").field(&self.id).finish()
    }
}

impl Drop for AllocatedId {
    fn drop(&mut self) {
        self.counters
            .in_flight
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&self.id);
    }
}

/// Every user id, streamed from `SELECT id FROM users` by bloom-tower's
/// [`key_source::sqlx::query`] (rows are decoded as they arrive; the ids are never collected
/// into a `Vec`), every statement counted in [`Db::queries`]. Works on SQLite and PostgreSQL
/// alike. The `BIGINT` ids are decoded into the `u64` ids the service inserts and looks up
/// ([`RowId`]), so the source fills a `SharedFilter<u64>`.
///
/// The query runs inside [`KeySource::keys`], so a rebuild sees every user whose id was
/// inserted into the filter before it started, as [`bloom_tower::key_source`] requires.
///
/// Its watermark is the highest id below which every row is committed (`MAX(id)`, held below
/// any id [`Db::allocate_id`] handed out whose `INSERT` is still running), and
/// `keys_since(w)` is `SELECT id FROM users WHERE id > w`: a restart from a snapshot reads
/// only the users created since (by this service before it was killed, or by any other
/// writer while it was down), provided other writers also give new rows ids above every
/// committed one (a sequence, or `MAX(id) + 1`), as this service does.
#[derive(Clone, Debug)]
pub struct UserIds {
    db: Db,
    ids: key_source::sqlx::Query<RowId, sqlx::Any>,
}

impl KeySource for UserIds {
    type Key = RowId;
    type Error = sqlx::Error;

    fn keys(
        &self,
    ) -> impl Stream<Item = Result<impl KeyFor<RowId> + Send + '_, sqlx::Error>> + Send + '_ {
        self.db.count_query();
        self.ids.keys()
    }

    fn count_hint(&self) -> Option<u64> {
        self.ids.count_hint()
    }

    async fn watermark(&self) -> Result<Option<Watermark>, sqlx::Error> {
        self.db.count_query();
        self.ids.watermark().await
    }

    fn keys_since<'a>(
        &'a self,
        since: &'a Watermark,
    ) -> impl Stream<Item = Result<impl KeyFor<RowId> + Send + 'a, sqlx::Error>> + Send + 'a {
        self.db.count_query();
        self.ids.keys_since(since)
    }
}

/// A user id as [`UserIds`] reads it from the `users` table: the `BIGINT` column decoded into
/// the `u64` id the service uses everywhere else (the filter, the guard's `{id}`, the cache),
/// so a `SharedFilter<u64>` is rebuilt from these rows; an `i64` source is not, since a typed
/// filter never mixes integer types. Every id the service hands out is positive; a negative
/// one written by someone else keeps its two's-complement bits (`as u64`): an id no
/// `GET /users/{id}` can name ([`Db::find_user`] finds no row above `i64::MAX`), where an
/// error would fail every rebuild over it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RowId(pub u64);

impl Key for RowId {
    #[inline]
    fn key_bytes(&self) -> impl AsRef<[u8]> {
        self.0.key_bytes()
    }
}

impl KeyFor<u64> for RowId {}

impl sqlx::Type<sqlx::Any> for RowId {
    fn type_info() -> sqlx::any::AnyTypeInfo {
        <i64 as sqlx::Type<sqlx::Any>>::type_info()
    }

    fn compatible(ty: &sqlx::any::AnyTypeInfo) -> bool {
        <i64 as sqlx::Type<sqlx::Any>>::compatible(ty)
    }
}

impl<'r> sqlx::Decode<'r, sqlx::Any> for RowId {
    fn decode(value: sqlx::any::AnyValueRef<'r>) -> Result<Self, sqlx::error::BoxDynError> {
        let id = <i64 as sqlx::Decode<'r, sqlx::Any>>::decode(value)?;
        Ok(RowId(id as u64))
    }
}

/// `url` without its password, for messages.
pub fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            let userinfo = &url[scheme + 3..at];
            match userinfo.split_once(':') {
                Some((user, _)) => format!("{}{user}:***{}", &url[..scheme + 3], &url[at..]),
                None => url.to_owned(),
            }
        }
        _ => url.to_owned(),
    }
}
