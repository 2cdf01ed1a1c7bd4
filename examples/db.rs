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

use std::future::Future;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use anyhow::Context as _;
use bloom_tower::key::KeyFor;
use bloom_tower::key_source::Watermark;
use bloom_tower::key_source::change_log::ChangeLog;
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
    queries_metric: metrics::Counter,
    misses_metric: metrics::Counter,
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
                queries_metric: metrics::counter!(DB_QUERIES, "service" => service.clone()),
                misses_metric: metrics::counter!(DB_MISSES, "service" => service),
            }),
        };
        db.migrate().await?;
        Ok(db)
    }

    /// Creates the `users` table if it does not exist, with ids the database hands out
    /// (SQLite's `INTEGER PRIMARY KEY`, PostgreSQL's identity column), and its change log
    /// (a table and a trigger that record every new id in the writer's transaction: see
    /// [`ChangeLog`]). Idempotent; instances starting together on PostgreSQL take turns.
    async fn migrate(&self) -> anyhow::Result<()> {
        self.count_query();
        let ddl = match self.backend {
            Backend::Sqlite => {
                "CREATE TABLE IF NOT EXISTS users (\
                    id INTEGER PRIMARY KEY AUTOINCREMENT, name TEXT NOT NULL, email TEXT NOT NULL)"
            }
            Backend::Postgres => {
                "CREATE TABLE IF NOT EXISTS users (\
                    id BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY, \
                    name TEXT NOT NULL, email TEXT NOT NULL)"
            }
        };
        let mut tx = self
            .pool
            .begin()
            .await
            .context("creating the users table")?;
        if self.backend == Backend::Postgres {
            // `CREATE TABLE IF NOT EXISTS` races with itself across sessions.
            tx.execute("SELECT pg_advisory_xact_lock(727274)").await?;
        }
        tx.execute(ddl).await.context("creating the users table")?;
        tx.commit().await.context("creating the users table")?;
        self.count_query();
        self.change_log()?
            .install()
            .await
            .context("installing the users table's change log")?;
        Ok(())
    }

    /// The change log of `users.id`.
    fn change_log(&self) -> anyhow::Result<ChangeLog<RowId, sqlx::Any>> {
        let log = match self.backend {
            Backend::Sqlite => ChangeLog::sqlite(self.pool.clone(), "users", "id"),
            Backend::Postgres => ChangeLog::postgres(self.pool.clone(), "users", "id"),
        };
        Ok(log?)
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
        self.count_query();
        let max: Option<i64> = sqlx::query_scalar("SELECT MAX(id) FROM users")
            .fetch_one(&self.pool)
            .await
            .context("reading the largest user id")?;
        let first = max.map_or(1, |max| max as u64 + 1);
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
        if self.backend == Backend::Postgres && !ids.is_empty() {
            // Explicit ids do not move the identity's sequence: the next create must not
            // collide with a seeded row.
            self.count_query();
            sqlx::query(
                "SELECT setval(pg_get_serial_sequence('users', 'id'), \
                 (SELECT MAX(id) FROM users))",
            )
            .execute(&self.pool)
            .await
            .context("seeding: moving the id sequence past the seeded rows")?;
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

    /// Creates a user with an id the database hands out, calling `before_commit(id)` before
    /// the row becomes visible to any reader, and returns the user with what `before_commit`
    /// returned. Any number of instances and other writers share one table without id
    /// collisions:
    ///
    /// * PostgreSQL: one transaction, `INSERT … RETURNING id` (the identity's sequence), then
    ///   `before_commit`, then `COMMIT`; if this future is dropped before the commit, the
    ///   transaction rolls back.
    /// * SQLite: the id is reserved from the table's `AUTOINCREMENT` counter
    ///   (`sqlite_sequence`, which every writer's automatic ids come from, so none is handed
    ///   out twice) in a short transaction of its own, then `before_commit`, then the row is
    ///   inserted. SQLite writes one transaction at a time, so waiting in `before_commit`
    ///   (for Redis, say) inside the insert's transaction would hold every other writer up.
    pub async fn create_user<F, Fut, T>(
        &self,
        name: &str,
        email: &str,
        before_commit: F,
    ) -> anyhow::Result<(User, T)>
    where
        F: FnOnce(u64) -> Fut,
        Fut: Future<Output = T>,
    {
        let (id, done) = match self.backend {
            Backend::Postgres => {
                let mut tx = self.pool.begin().await.context("creating a user: BEGIN")?;
                self.count_query();
                let id: i64 = sqlx::query_scalar(
                    "INSERT INTO users (name, email) VALUES ($1, $2) RETURNING id",
                )
                .bind(name)
                .bind(email)
                .fetch_one(&mut *tx)
                .await
                .context("inserting the user")?;
                let done = before_commit(id as u64).await;
                self.count_query();
                tx.commit().await.context("creating a user: COMMIT")?;
                (id, done)
            }
            Backend::Sqlite => {
                let id = self.reserve_sqlite_id().await?;
                let done = before_commit(id as u64).await;
                self.count_query();
                sqlx::query("INSERT INTO users (id, name, email) VALUES ($1, $2, $3)")
                    .bind(id)
                    .bind(name)
                    .bind(email)
                    .execute(&self.pool)
                    .await
                    .context("inserting the user")?;
                (id, done)
            }
        };
        Ok((
            User {
                id: id as u64,
                name: name.to_owned(),
                email: email.to_owned(),
            },
            done,
        ))
    }

    /// The next id of SQLite's `AUTOINCREMENT` counter for `users`, taken: no automatic id
    /// (this service's or another writer's) is ever that one again.
    async fn reserve_sqlite_id(&self) -> anyhow::Result<i64> {
        let mut tx = self.pool.begin().await.context("reserving an id: BEGIN")?;
        self.count_query();
        // The counter's row exists once a row was inserted; an empty table has none yet.
        tx.execute(
            "INSERT INTO sqlite_sequence (name, seq) \
             SELECT 'users', COALESCE((SELECT MAX(id) FROM users), 0) \
             WHERE NOT EXISTS (SELECT 1 FROM sqlite_sequence WHERE name = 'users')",
        )
        .await
        .context("reserving an id")?;
        self.count_query();
        let id: i64 = sqlx::query_scalar(
            "UPDATE sqlite_sequence \
             SET seq = MAX(seq, COALESCE((SELECT MAX(id) FROM users), 0)) + 1 \
             WHERE name = 'users' RETURNING seq",
        )
        .fetch_one(&mut *tx)
        .await
        .context("reserving an id")?;
        tx.commit().await.context("reserving an id: COMMIT")?;
        Ok(id)
    }

    /// Inserts a user with the given id, as another writer would (an admin tool, an import):
    /// nothing but the `INSERT` (auto-commit).
    pub async fn insert_user(&self, id: u64, name: &str, email: &str) -> anyhow::Result<User> {
        let key = i64::try_from(id).context("user id out of range")?;
        self.count_query();
        sqlx::query("INSERT INTO users (id, name, email) VALUES ($1, $2, $3)")
            .bind(key)
            .bind(name)
            .bind(email)
            .execute(&self.pool)
            .await
            .context("inserting the user")?;
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

    /// A [`KeySource`] over the users table and its change log: every user id for the Bloom
    /// filter's (re)builds (its count hint taken now with `SELECT COUNT(*)` and refreshed by
    /// every complete read), and the ids committed since any position, by any writer.
    pub async fn user_ids(&self) -> anyhow::Result<UserIds> {
        self.count_query();
        let log = self.change_log()?.counted().await?;
        Ok(UserIds {
            db: self.clone(),
            log,
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

/// The users table as a [`KeySource`]: every id streamed from `SELECT id FROM users` for a
/// rebuild (never collected into a `Vec`), and the ids committed since a position read from
/// the table's change log ([`ChangeLog`]: a trigger records each new id in its writer's
/// transaction, in commit order), every statement counted in [`Db::queries`]. Works on SQLite
/// and PostgreSQL alike, and whoever writes the rows: this service, another instance, an
/// admin tool, a migration. The `BIGINT` ids are decoded into the `u64` ids the service
/// inserts and looks up ([`RowId`]), so the source fills a `SharedFilter<u64>`.
///
/// A restart from a snapshot reads only what the log recorded since the snapshot's watermark;
/// [`SharedFilter::follow`](bloom_tower::SharedFilter::follow) reads the same way every
/// interval, so rows other writers commit reach the filter while the service runs.
#[derive(Clone, Debug)]
pub struct UserIds {
    db: Db,
    log: ChangeLog<RowId, sqlx::Any>,
}

impl UserIds {
    /// Prunes the change log every `every`, keeping `keep`
    /// ([`ChangeLog::prune_every`]).
    pub fn prune_every(
        &self,
        keep: Duration,
        every: Duration,
    ) -> bloom_tower::shared_filter::BackgroundTask {
        self.log.prune_every(keep, every)
    }

    /// PostgreSQL only: a stream that yields when a transaction that wrote users commits
    /// (`LISTEN` on its own connection to `url`), for [`Follow::wake_on`](bloom_tower::shared_filter::Follow::wake_on).
    pub fn notifications(&self, url: &str) -> impl Stream<Item = ()> + Send + 'static {
        self.log.notifications(url)
    }
}

impl KeySource for UserIds {
    type Key = RowId;
    type Error = sqlx::Error;

    fn keys(
        &self,
    ) -> impl Stream<Item = Result<impl KeyFor<RowId> + Send + '_, sqlx::Error>> + Send + '_ {
        self.db.count_query();
        self.log.keys()
    }

    fn count_hint(&self) -> Option<u64> {
        self.log.count_hint()
    }

    async fn watermark(&self) -> Result<Option<Watermark>, sqlx::Error> {
        self.db.count_query();
        self.log.watermark().await
    }

    fn watermark_is_exact(&self) -> bool {
        self.log.watermark_is_exact()
    }

    fn has_reached(&self, position: &Watermark, now: &Watermark) -> bool {
        self.log.has_reached(position, now)
    }

    fn keys_since<'a>(
        &'a self,
        since: &'a Watermark,
    ) -> impl Stream<Item = Result<impl KeyFor<RowId> + Send + 'a, sqlx::Error>> + Send + 'a {
        self.db.count_query();
        self.log.keys_since(since)
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
