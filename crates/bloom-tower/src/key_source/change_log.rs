//! A [`KeySource`] that knows every key committed since any point, by any writer, in commit
//! order: a change log kept by a trigger in the writer's own transaction. [`ChangeLog`] is the
//! ready glue for PostgreSQL and SQLite through [`sqlx`] (the `Any` driver included); any other
//! source (a message queue, CDC) implements [`KeySource::watermark`] and
//! [`KeySource::keys_since`] itself.
//!
//! ```
//! use std::time::Duration;
//! use bloom_tower::{BloomFilter, SharedFilter, key_source::change_log::ChangeLog};
//! use bloom_tower::shared_filter::Follow;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let pool = sqlx::sqlite::SqlitePoolOptions::new().max_connections(1)
//! #     .connect("sqlite::memory:").await?;
//! # sqlx::query("CREATE TABLE orders (id INTEGER PRIMARY KEY)").execute(&pool).await?;
//! // let pool = sqlx::SqlitePool::connect(url).await?; // or PgPool, or AnyPool
//! let orders = ChangeLog::<i64, _>::sqlite(pool.clone(), "orders", "id")?;
//! orders.install().await?; // the log table and its triggers: idempotent
//!
//! let filter = SharedFilter::<i64>::new(BloomFilter::new(1_000, 0.01)?);
//! filter.reload_from(&orders).await?;
//! let following = filter.follow(orders, Follow::every(Duration::from_millis(50)));
//!
//! // Another writer, behind the service's back:
//! sqlx::query("INSERT INTO orders (id) VALUES (7)").execute(&pool).await?;
//! tokio::time::sleep(Duration::from_millis(300)).await;
//! assert!(filter.contains(&7i64));
//! following.shutdown().await;
//! # Ok(())
//! # }
//! ```
//!
//! # Why no committed key is missed
//!
//! A highest id (or newest timestamp) seen is not a position in commit order: a transaction
//! that took id 41 before another took 42, and commits after a reader saw 42, is never read
//! again. The log's positions are in commit order instead, which is what the
//! [`KeySource::watermark`] contract needs ("every key added after `watermark()` returns is
//! yielded by `keys_since` of it"):
//!
//! * **SQLite** writes one transaction at a time: a write transaction holds the database's
//!   write lock from its first write to its commit. The trigger appends to the log in the
//!   writer's transaction, so the log's `AUTOINCREMENT` sequence numbers are handed out under
//!   that lock, and every transaction's numbers are above every number committed before it.
//!   The watermark is the last number handed out by a committed transaction (the log's
//!   `sqlite_sequence` row, which is part of the same transactions), so a transaction that
//!   commits after it is read logs only numbers above it: `seq > watermark` finds it.
//!   `AUTOINCREMENT` never reuses a number, even after the log's newest rows are pruned.
//! * **PostgreSQL** runs transactions concurrently, so the log records the writing
//!   transaction's id (`pg_current_xact_id()`) rather than a sequence number. The watermark is
//!   the reader's snapshot `xmin:xmax:running` (`pg_current_snapshot()`): every transaction
//!   with an id below `xmin` had ended when it was taken, and a transaction that commits
//!   later was either running then (its id is at least `xmin`) or had no id yet (it gets one
//!   at its first write, above every id handed out, so at least `xmax >= xmin`). So
//!   `xid >= xmin` finds every transaction that commits after the watermark; the rows of
//!   transactions that had already committed above `xmin` are read again, which costs time,
//!   never a key. The window is as wide as the oldest transaction running on the server.
//!
//! Both watermarks are *exact* ([`KeySource::watermark_is_exact`]): SQLite's number moves with
//! every committed change, and PostgreSQL's snapshot text moves whenever a transaction gets an
//! id or ends. A follower that finds it unchanged sends one query and reads nothing.
//!
//! The log holds the keys of inserted rows and of rows whose key column was updated. Deletes
//! are not logged: a Bloom filter cannot forget, and the next rebuild drops deleted keys.
//!
//! # The log's name
//!
//! The log table and its companions (`<log>_horizon`, the triggers `<log>_insert` and
//! `<log>_update`, on PostgreSQL the index `<log>_xid` and the function and trigger
//! `<log>_record`, and the `NOTIFY` channel `<log>`) are named after the watched table, one
//! set per table, none shared by two tables and none longer than PostgreSQL's 63 bytes (which
//! would cut them):
//!
//! * A table name with no `.` and no `__`, at most 41 bytes, neither starting nor ending with
//!   `_`, not ending in `_horizon`, `_insert`, `_update`, `_record` or `_xid` (ASCII case
//!   aside): `bloom_changes_<table>`.
//! * Any other (`schema.table`, long names, those endings): `bloom_changes_<readable>__<digest>`,
//!   where `<readable>` is the lowercased name with `.` as `_`, cut to 23 bytes, and
//!   `<digest>` the 64-bit SipHash-2-4 of the lowercased name in 16 hex digits: 55 bytes at
//!   most. Only these names hold `__`, so the two kinds never meet; the digest tells two
//!   tables of the second kind apart.
//!
//! The digest is of the lowercased name, as the databases compare unquoted identifiers: two
//! tables (names that differ other than in ASCII case) never share a log. Guarded by
//! `tests/change_log_names.rs` in bloom-tower (`a.b_c`/`a_b.c`, `x`/`x_horizon`,
//! `main.orders`/`main_orders` on SQLite and PostgreSQL; two 70-byte names equal in their
//! first 63 bytes on PostgreSQL).
//!
//! Tests: `tests/change_log.rs` in bloom-tower (SQLite: out-of-order ids, a writer behind the
//! service's back, catch-up after a restart) and the PostgreSQL and fleet tests of the
//! workspace's `tests/follow.rs`.

use std::fmt;

use ::sqlx::{Database, Encode, Executor, FromRow, IntoArguments, Pool, Type};
use futures_core::Stream;
use siphasher::sip::SipHasher24;

use super::sqlx::{Query, query};
use super::{KeySource, Watermark};
use crate::Key;
use crate::key::KeyFor;

/// A table or column name [`ChangeLog`] refused: it is put into SQL, so only plain
/// identifiers are taken (letters, digits and `_`, not starting with a digit, at most 63
/// bytes, PostgreSQL's limit; a table may be `schema.table`).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{what} {name:?} is not a plain SQL identifier (letters, digits and _, at most 63 bytes)")]
pub struct InvalidName {
    what: &'static str,
    name: String,
}

/// Which SQL the log is kept with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Dialect {
    Postgres,
    Sqlite,
}

/// The change log of one table's key column, and a [`KeySource`] over it: see the [module
/// documentation](self).
///
/// * [`keys`](KeySource::keys): `SELECT <key> FROM <table>`, streamed (a rebuild).
/// * [`watermark`](KeySource::watermark): the log's position now (one cheap query).
/// * [`keys_since`](KeySource::keys_since): the keys logged since a position, read through
///   the log's index; from [`Watermark::origin`] (or a position this log did not write), the
///   whole table.
///
/// Cheap to clone; clones share the pool and the count hint.
pub struct ChangeLog<K, DB: Database> {
    table: Query<K, DB>,
    dialect: Dialect,
    table_name: String,
    column: String,
    log: String,
    cast: Option<String>,
    /// `keys_since`'s statement: [`ChangeLog::since_sql`].
    since_sql: String,
}

impl<K, DB: Database> Clone for ChangeLog<K, DB> {
    fn clone(&self) -> Self {
        Self {
            table: self.table.clone(),
            dialect: self.dialect,
            table_name: self.table_name.clone(),
            column: self.column.clone(),
            log: self.log.clone(),
            cast: self.cast.clone(),
            since_sql: self.since_sql.clone(),
        }
    }
}

impl<K, DB: Database> fmt::Debug for ChangeLog<K, DB> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ChangeLog")
            .field("dialect", &self.dialect)
            .field("table", &self.table_name)
            .field("column", &self.column)
            .field("log", &self.log)
            .finish_non_exhaustive()
    }
}

/// PostgreSQL's identifier limit in bytes (`NAMEDATALEN - 1`): it cuts longer ones.
const MAX_IDENTIFIER: usize = 63;

/// The suffixes of the log's companions (see the module docs).
const COMPANIONS: [&str; 5] = ["_horizon", "_insert", "_update", "_record", "_xid"];

/// The log table's name for `table` (a checked name): see "The log's name" in the module
/// docs (guarded by `tests/change_log_names.rs`).
fn log_name(table: &str) -> String {
    const PREFIX: &str = "bloom_changes_";
    let lower = table.to_ascii_lowercase();
    let keeps_its_name = !table.contains('.')
        && !table.contains("__")
        && !table.starts_with('_')
        && !table.ends_with('_')
        && PREFIX.len() + table.len() + "_horizon".len() <= MAX_IDENTIFIER
        && !COMPANIONS.iter().any(|suffix| lower.ends_with(suffix));
    if keeps_its_name {
        return format!("{PREFIX}{table}");
    }
    // bloom_changes_ (14) + readable (23) + __ (2) + digest (16) = 55; + _horizon = 63.
    let readable: String = lower.replace('.', "_").chars().take(23).collect();
    let digest = SipHasher24::new_with_keys(0, 0).hash(lower.as_bytes());
    format!("{PREFIX}{readable}__{digest:016x}")
}

fn check(what: &'static str, name: &str, dotted: bool) -> Result<(), InvalidName> {
    let plain = |part: &str| {
        !part.is_empty()
            && part.len() <= MAX_IDENTIFIER
            && !part.starts_with(|c: char| c.is_ascii_digit())
            && part.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    };
    let ok = match name.split_once('.') {
        Some((schema, table)) if dotted => plain(schema) && plain(table),
        _ => plain(name),
    };
    if ok {
        Ok(())
    } else {
        Err(InvalidName {
            what,
            name: name.to_owned(),
        })
    }
}

impl<K, DB: Database> ChangeLog<K, DB> {
    fn new(
        pool: Pool<DB>,
        dialect: Dialect,
        table: &str,
        column: &str,
    ) -> Result<Self, InvalidName> {
        check("the table", table, true)?;
        check("the key column", column, false)?;
        let log = log_name(table);
        let select = format!("SELECT {column} FROM {table}");
        let mut log = Self {
            table: query(pool, select),
            dialect,
            table_name: table.to_owned(),
            column: column.to_owned(),
            log,
            cast: None,
            since_sql: String::new(),
        };
        log.since_sql = log.since_sql();
        Ok(log)
    }

    /// The change log of `table`'s `column` on PostgreSQL (a `PgPool`, or an `AnyPool`
    /// connected to PostgreSQL). The log table is [`log_table`](Self::log_table); its key column
    /// has the type of `column`.
    ///
    /// # Errors
    /// [`InvalidName`] if a name is not a plain identifier.
    pub fn postgres(pool: Pool<DB>, table: &str, column: &str) -> Result<Self, InvalidName> {
        Self::new(pool, Dialect::Postgres, table, column)
    }

    /// The change log of `table`'s `column` on SQLite (a `SqlitePool`, or an `AnyPool`
    /// connected to SQLite). The log table is [`log_table`](Self::log_table).
    ///
    /// # Errors
    /// [`InvalidName`] if a name is not a plain identifier.
    pub fn sqlite(pool: Pool<DB>, table: &str, column: &str) -> Result<Self, InvalidName> {
        Self::new(pool, Dialect::Sqlite, table, column)
    }

    /// Reads the key as `CAST(<key> AS <sql_type>)`, in the full read and from the log: e.g.
    /// `TEXT` to fill a `SharedFilter<String>` from a `UUID` column. (With the `uuid` feature a
    /// `UUID` column needs no cast: a `ChangeLog<uuid::Uuid, _>` reads it as it is.)
    ///
    /// # Errors
    /// [`InvalidName`] if `sql_type` is not a plain identifier.
    pub fn cast_to(mut self, sql_type: &str) -> Result<Self, InvalidName> {
        check("the SQL type", sql_type, false)?;
        let pool = self.table.pool().clone();
        let select = format!(
            "SELECT CAST({} AS {sql_type}) FROM {}",
            self.column, self.table_name
        );
        self.table = query(pool, select);
        self.cast = Some(sql_type.to_owned());
        self.since_sql = self.since_sql();
        Ok(self)
    }

    /// The log table's name: `bloom_changes_<table>` for most tables, and with a digest of
    /// the table's name for `schema.table`, long names and names that would meet another
    /// table's (see "The log's name" in the [module docs](self)); never another table's, and
    /// at most 55 bytes. On PostgreSQL it is also the `NOTIFY` channel the trigger signals.
    ///
    /// ```
    /// use bloom_tower::key_source::change_log::ChangeLog;
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build()?.block_on(async {
    /// let pool = sqlx::SqlitePool::connect("sqlite::memory:").await?;
    /// let orders = ChangeLog::<i64, _>::sqlite(pool.clone(), "orders", "id")?;
    /// assert_eq!(orders.log_table(), "bloom_changes_orders");
    /// let dotted = ChangeLog::<i64, _>::sqlite(pool.clone(), "main.orders", "id")?;
    /// assert!(dotted.log_table().starts_with("bloom_changes_main_orders__"));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # })?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn log_table(&self) -> &str {
        &self.log
    }

    /// The statements [`install`](Self::install) runs, for a migration tool: the log table, its
    /// index, and the trigger (with, on PostgreSQL, its function) that appends the key of
    /// every inserted row, and of every row whose key changes, in the writer's transaction.
    /// Each is idempotent.
    pub fn install_sql(&self) -> Vec<String> {
        let (table, column, log) = (&self.table_name, &self.column, &self.log);
        match self.dialect {
            Dialect::Sqlite => vec![
                format!(
                    "CREATE TABLE IF NOT EXISTS {log} (\
                     seq INTEGER PRIMARY KEY AUTOINCREMENT, \
                     change_key NOT NULL, \
                     logged_at INTEGER NOT NULL DEFAULT (unixepoch()))"
                ),
                format!("CREATE TABLE IF NOT EXISTS {log}_horizon (below INTEGER NOT NULL)"),
                format!(
                    "INSERT INTO {log}_horizon (below) SELECT 0 \
                     WHERE NOT EXISTS (SELECT 1 FROM {log}_horizon)"
                ),
                format!(
                    "CREATE TRIGGER IF NOT EXISTS {log}_insert AFTER INSERT ON {table} \
                     BEGIN INSERT INTO {log} (change_key) VALUES (NEW.{column}); END"
                ),
                format!(
                    "CREATE TRIGGER IF NOT EXISTS {log}_update AFTER UPDATE OF {column} ON {table} \
                     BEGIN INSERT INTO {log} (change_key) VALUES (NEW.{column}); END"
                ),
            ],
            Dialect::Postgres => vec![
                // The key column takes the type of the table's column.
                format!(
                    "CREATE TABLE IF NOT EXISTS {log} AS \
                     SELECT {column} AS change_key FROM {table} WITH NO DATA"
                ),
                format!(
                    "ALTER TABLE {log} ADD COLUMN IF NOT EXISTS xid BIGINT NOT NULL \
                     DEFAULT (pg_current_xact_id()::text::bigint)"
                ),
                format!(
                    "ALTER TABLE {log} ADD COLUMN IF NOT EXISTS logged_at TIMESTAMPTZ NOT NULL \
                     DEFAULT now()"
                ),
                format!("CREATE INDEX IF NOT EXISTS {log}_xid ON {log} (xid)"),
                format!("CREATE TABLE IF NOT EXISTS {log}_horizon (below BIGINT NOT NULL)"),
                format!(
                    "INSERT INTO {log}_horizon (below) SELECT 0 \
                     WHERE NOT EXISTS (SELECT 1 FROM {log}_horizon)"
                ),
                format!(
                    "CREATE OR REPLACE FUNCTION {log}_record() RETURNS trigger LANGUAGE plpgsql AS $$ \
                     BEGIN \
                       INSERT INTO {log} (change_key) VALUES (NEW.{column}); \
                       PERFORM pg_notify('{log}', ''); \
                       RETURN NULL; \
                     END $$"
                ),
                format!(
                    "CREATE OR REPLACE TRIGGER {log}_record AFTER INSERT OR UPDATE OF {column} \
                     ON {table} FOR EACH ROW EXECUTE FUNCTION {log}_record()"
                ),
            ],
        }
    }

    /// The key as read: `CAST(<expr> AS <type>)` if [`cast_to`](Self::cast_to) set one.
    fn read(&self, expr: &str) -> String {
        match &self.cast {
            Some(sql_type) => format!("CAST({expr} AS {sql_type})"),
            None => expr.to_owned(),
        }
    }

    /// The keys logged after position `$1`, or, if the log no longer reaches back to it
    /// (pruned past it), every key of the table: one statement, so one snapshot of the log
    /// decides which (a prune committing between a check and a read cannot hide rows).
    fn since_sql(&self) -> String {
        let (log, table) = (&self.log, &self.table_name);
        let logged = self.read("change_key");
        let current = self.read(&self.column);
        let (reach, after) = match self.dialect {
            // Every row numbered `below` or more is kept: `seq > $1` is complete from there.
            Dialect::Sqlite => ("below - 1 <= $1", "seq > $1"),
            Dialect::Postgres => ("below <= $1", "xid >= $1"),
        };
        format!(
            "WITH reach AS (SELECT {reach} AS complete FROM {log}_horizon) \
             SELECT {logged} FROM {log}, reach WHERE reach.complete AND {after} \
             UNION ALL \
             SELECT {current} FROM {table}, reach WHERE NOT reach.complete"
        )
    }

    /// A 64-bit lock number for `pg_advisory_xact_lock`, from the log's name (FNV-1a).
    fn lock_id(&self) -> i64 {
        let hash = self
            .log
            .bytes()
            .fold(0xcbf2_9ce4_8422_2325_u64, |hash, byte| {
                (hash ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3)
            });
        hash as i64
    }
}

#[cfg(feature = "postgres")]
impl<K, DB: Database> ChangeLog<K, DB> {
    /// A stream that yields whenever a transaction that wrote to the table commits (the
    /// trigger's `pg_notify`), through a `LISTEN` connection of its own to `url`: give it to
    /// [`Follow::wake_on`](crate::shared_filter::Follow::wake_on) and a commit is followed
    /// within milliseconds, with no query while nothing is written. It also yields once each
    /// time it has (re)connected, since notifications sent while it was not listening are
    /// lost: the follower's next step reads from its position, which catches them up. While
    /// the server cannot be reached it retries, backing off from 100 ms to 5 s.
    pub fn notifications(&self, url: &str) -> impl Stream<Item = ()> + Send + 'static {
        listen::notifications(url.to_owned(), self.log.clone())
    }
}

#[cfg(feature = "postgres")]
mod listen {
    use std::time::Duration;

    use ::sqlx::postgres::PgListener;
    use futures_core::Stream;

    struct State {
        url: String,
        channel: String,
        listener: Option<PgListener>,
        backoff: Duration,
        warned: bool,
        connected_before: bool,
    }

    pub(super) fn notifications(url: String, channel: String) -> impl Stream<Item = ()> {
        let state = State {
            url,
            channel,
            listener: None,
            backoff: Duration::from_millis(100),
            warned: false,
            connected_before: false,
        };
        futures_util::stream::unfold(state, |mut state| async move {
            loop {
                let Some(listener) = state.listener.as_mut() else {
                    match connect(&state.url, &state.channel).await {
                        Ok(listener) => {
                            if state.warned {
                                tracing::info!(channel = %state.channel, "listening for changes again");
                            }
                            state.listener = Some(listener);
                            state.backoff = Duration::from_millis(100);
                            state.warned = false;
                            // Reconnected: what was committed while it was not listening is
                            // read by the step this wakes. (The first connection wakes
                            // nothing: the follower's first step is due anyway.)
                            if std::mem::replace(&mut state.connected_before, true) {
                                return Some(((), state));
                            }
                            continue;
                        }
                        Err(error) => {
                            if !state.warned {
                                tracing::warn!(channel = %state.channel, %error, "cannot LISTEN for changes; retrying (the follower still polls)");
                                state.warned = true;
                            }
                            tokio::time::sleep(state.backoff).await;
                            state.backoff = (state.backoff * 2).min(Duration::from_secs(5));
                            continue;
                        }
                    }
                };
                match listener.try_recv().await {
                    Ok(Some(_)) => return Some(((), state)),
                    // The connection was lost; the next `try_recv` reconnects. Notifications
                    // sent meanwhile are lost: wake the follower to read from its position.
                    Ok(None) => return Some(((), state)),
                    Err(_) => {
                        state.listener = None;
                        return Some(((), state));
                    }
                }
            }
        })
    }

    async fn connect(url: &str, channel: &str) -> Result<PgListener, ::sqlx::Error> {
        let mut listener = PgListener::connect(url).await?;
        listener.listen(channel).await?;
        Ok(listener)
    }
}

/// The log position in a watermark: SQLite's sequence number, PostgreSQL's snapshot `xmin`;
/// `None` for [`Watermark::origin`] or bytes this log did not write.
fn position(dialect: Dialect, mark: &Watermark) -> Option<i64> {
    match dialect {
        Dialect::Sqlite => <[u8; 8]>::try_from(mark.as_bytes())
            .ok()
            .map(i64::from_be_bytes),
        Dialect::Postgres => std::str::from_utf8(mark.as_bytes())
            .ok()?
            .split(':')
            .next()?
            .parse()
            .ok(),
    }
}

impl<K, DB> ChangeLog<K, DB>
where
    DB: Database,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    (i64,): for<'r> FromRow<'r, DB::Row>,
    (Option<i64>,): for<'r> FromRow<'r, DB::Row>,
{
    /// Creates the log table, its index and its trigger if they are missing
    /// ([`install_sql`](Self::install_sql)); on PostgreSQL in one transaction under an
    /// advisory lock, so instances starting together do not race, with the table locked
    /// against writes for the transaction's few milliseconds. Rows written before the
    /// trigger existed are not in the log: a full read ([`keys`](KeySource::keys)) after
    /// installing covers them.
    pub async fn install(&self) -> Result<(), ::sqlx::Error> {
        let pool = self.table.pool();
        let mut tx = pool.begin().await?;
        if self.dialect == Dialect::Postgres {
            let lock = format!("SELECT pg_advisory_xact_lock({})", self.lock_id());
            (&mut *tx).execute(&*lock).await?;
            // Every start installs again: the server's notices about what exists already
            // ("… already exists, skipping") are not sent, so they are not logged
            // (`tests/change_log_notices.rs`). Warnings and errors still are.
            (&mut *tx)
                .execute("SET LOCAL client_min_messages = warning")
                .await?;
            // The table before the log, in the order a writer takes them (its INSERT, then
            // the trigger's): the trigger's DDL needs the table in this mode, and taking the
            // log first would deadlock with a writer between its INSERT and its trigger
            // (tests/follow.rs `installing_beside_a_writer_does_not_deadlock`).
            let table = format!("LOCK TABLE {} IN SHARE ROW EXCLUSIVE MODE", self.table_name);
            (&mut *tx).execute(&*table).await?;
        }
        for statement in self.install_sql() {
            (&mut *tx).execute(&*statement).await?;
        }
        tx.commit().await
    }

    /// Sets the count hint now with `SELECT COUNT(*)` of the table (see
    /// [`Query::counted_with`]).
    pub async fn counted(mut self) -> Result<Self, ::sqlx::Error> {
        let sql = format!("SELECT COUNT(*) FROM {}", self.table_name);
        self.table = self.table.counted_with(&sql).await?;
        Ok(self)
    }

    /// Prunes the log every `every` (plus up to a tenth of it, so instances started together
    /// do not prune together), keeping `keep` ([`prune`](Self::prune)), in a background task
    /// until the returned handle is shut down. A failed prune is logged and tried again at the
    /// next interval. Crash-safe: each prune is one transaction, and a reader whose position
    /// is below the horizon is caught up by a full read of the table, so pruning never hides a
    /// key; `keep` only bounds how much a restart or a stalled follower reads
    /// (`tests/change_log.rs` `prune_every_keeps_the_log_bounded_and_loses_no_key`).
    ///
    /// Every instance may run one: a prune that finds nothing older than `keep` deletes
    /// nothing.
    pub fn prune_every(
        &self,
        keep: std::time::Duration,
        every: std::time::Duration,
    ) -> crate::shared_filter::BackgroundTask
    where
        K: Send + Sync + 'static,
        DB: 'static,
        Self: Send + Sync,
    {
        let log = self.clone();
        let stop = std::sync::Arc::new(tokio::sync::Notify::new());
        let stopped = std::sync::Arc::clone(&stop);
        let every = every.max(std::time::Duration::from_millis(1));
        let task = tokio::spawn(async move {
            loop {
                // A random fraction from std's per-process hash keys: no crate needed for it.
                let random = std::hash::BuildHasher::hash_one(
                    &std::collections::hash_map::RandomState::new(),
                    0u8,
                );
                let jitter = every.mul_f64((random % 1000) as f64 / 10_000.0);
                tokio::select! {
                    () = tokio::time::sleep(every + jitter) => {}
                    () = stopped.notified() => return,
                }
                if let Err(error) = log.prune(keep).await {
                    tracing::warn!(log = %log.log, %error, "pruning the change log failed; trying again at the next interval");
                }
            }
        });
        crate::shared_filter::BackgroundTask::new(stop, task)
    }

    /// Deletes the log's rows older than `keep` (about: by the time their transaction
    /// started), and never a row positioned after one it keeps; the position below which rows
    /// are gone is recorded in `<log>_horizon` ([`log_table`](Self::log_table)), in the same
    /// transaction. A
    /// snapshot (or a stopped follower) whose watermark is older than that is still caught up,
    /// by a full read of the table: keep the log at least as long as snapshots may be old, to
    /// catch them up through it.
    pub async fn prune(&self, keep: std::time::Duration) -> Result<(), ::sqlx::Error> {
        let secs = keep.as_secs().min(i64::MAX as u64) as i64;
        let log = &self.log;
        let (position, young) = match self.dialect {
            Dialect::Sqlite => ("seq", format!("logged_at >= unixepoch() - {secs}")),
            Dialect::Postgres => (
                "xid",
                format!("logged_at >= now() - make_interval(secs => {secs})"),
            ),
        };
        // The oldest position of a row kept (or, if none is that young, the newest): what is
        // left is the log from there on, with no hole.
        let horizon = format!(
            "SELECT COALESCE((SELECT MIN({position}) FROM {log} WHERE {young}), \
             (SELECT MAX({position}) FROM {log}))"
        );
        let mut tx = self.table.pool().begin().await?;
        let below: Option<i64> = ::sqlx::query_scalar(&horizon).fetch_one(&mut *tx).await?;
        if let Some(below) = below {
            let delete = format!("DELETE FROM {log} WHERE {position} < {below}");
            (&mut *tx).execute(&*delete).await?;
            let record = format!("UPDATE {log}_horizon SET below = {below} WHERE below < {below}");
            (&mut *tx).execute(&*record).await?;
        }
        tx.commit().await
    }
}

impl<K, DB> KeySource for ChangeLog<K, DB>
where
    DB: Database,
    K: Key + Send + Sync + Unpin + 'static,
    (K,): for<'r> FromRow<'r, DB::Row>,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    (Option<i64>,): for<'r> FromRow<'r, DB::Row>,
    (i64,): for<'r> FromRow<'r, DB::Row>,
    (String,): for<'r> FromRow<'r, DB::Row>,
    i64: for<'q> Encode<'q, DB> + Type<DB>,
{
    type Key = K;
    type Error = ::sqlx::Error;

    fn keys(
        &self,
    ) -> impl Stream<Item = Result<impl KeyFor<K> + Send + '_, ::sqlx::Error>> + Send + '_ {
        self.table.keys()
    }

    fn count_hint(&self) -> Option<u64> {
        self.table.count_hint()
    }

    async fn watermark(&self) -> Result<Option<Watermark>, ::sqlx::Error> {
        let pool = self.table.pool();
        let mark = match self.dialect {
            Dialect::Sqlite => {
                // Table names are compared as SQLite does, without regard to ASCII case: every
                // spelling of the table reads one watermark
                // (`on_sqlite_the_watermark_moves_whatever_the_table_is_spelled`).
                let sql = format!(
                    "SELECT COALESCE((SELECT seq FROM sqlite_sequence WHERE name = '{}' COLLATE NOCASE), 0)",
                    self.log
                );
                let seq: i64 = ::sqlx::query_scalar(&sql).fetch_one(pool).await?;
                Watermark::new(seq.to_be_bytes())
            }
            Dialect::Postgres => {
                let snapshot: String =
                    ::sqlx::query_scalar("SELECT CAST(pg_current_snapshot() AS TEXT)")
                        .fetch_one(pool)
                        .await?;
                Watermark::new(snapshot.into_bytes())
            }
        };
        Ok(Some(mark))
    }

    fn watermark_is_exact(&self) -> bool {
        true
    }

    /// The log positions compare (SQLite's sequence numbers, PostgreSQL's snapshots' `xmin`);
    /// a position this log did not write is reached (following from it reads the whole table).
    fn has_reached(&self, position: &Watermark, now: &Watermark) -> bool {
        match (
            self::position(self.dialect, position),
            self::position(self.dialect, now),
        ) {
            (Some(position), Some(now)) => position <= now,
            (None, _) => true,
            (Some(_), None) => false,
        }
    }

    fn keys_since<'a>(
        &'a self,
        since: &'a Watermark,
    ) -> impl Stream<Item = Result<impl KeyFor<K> + Send + 'a, ::sqlx::Error>> + Send + 'a {
        let pool = self.table.pool();
        match position(self.dialect, since) {
            None => ::sqlx::query_scalar::<DB, K>(self.table.sql()).fetch(pool),
            Some(from) => ::sqlx::query_scalar::<DB, K>(self.since_sql.as_str())
                .bind(from)
                .fetch(pool),
        }
    }
}
