//! [`SqliteStore`]: a [`FilterSet`](super::FilterSet)'s filters as rows of one SQLite table.
//!
//! One row per filter, `(name TEXT PRIMARY KEY, bytes BLOB)`, in a table of the store's own
//! (`bloom_filters` unless [`SqliteStoreBuilder::table`] names another, so several sets can
//! share a database file). The file is in WAL mode. A flush's batch
//! ([`FilterStore::MAX_BATCH`], 512 filters) is one transaction of upserts: where a
//! [`DirectoryStore`](super::DirectoryStore) creates and renames a file per filter, a batch
//! costs one commit.
//!
//! **Atomicity.** A transaction lands whole or not at all: a process killed at any moment
//! leaves every row of a batch with its old bytes or every one with its new bytes, which is
//! more than the [`FilterStore`] rule asks (each name old or new). Guarded by
//! `tests/filter_set_kill.rs` `a_sqlite_batch_killed_midway_lands_whole_or_not_at_all`.
//!
//! **Durability.** With [`sync(true)`](SqliteStoreBuilder::sync) (the default,
//! `synchronous = FULL`) a completed store survives a lost machine; with `sync(false)`
//! (`synchronous = NORMAL`) it survives a killed process and costs no `fsync` per commit, as
//! [`DirectoryStore::sync`](super::DirectoryStore::sync)`(false)`.
//!
//! **One writer, four readers.** Stores take turns on one connection, so they queue in
//! order instead of polling SQLite's write lock; loads run on four read-only connections
//! beside it (in WAL mode a read never waits for a write).
//!
//! **Bounded waits.** A store or load waits at most the pool's acquire timeout for a
//! connection and SQLite's busy timeout (5 s each) for the write lock (another process's
//! writer), then fails with [`StoreError::Backend`]: the set keeps the filter in memory,
//! changed.

use std::path::{Path, PathBuf};
use std::time::Duration;

use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};
use sqlx::{QueryBuilder, Sqlite};

use super::store::{FilterStore, StoreError};

/// The default table.
const DEFAULT_TABLE: &str = "bloom_filters";

/// What turns an `INSERT` of rows into their replacement.
const UPSERT: &str = " ON CONFLICT (name) DO UPDATE SET bytes = excluded.bytes";

/// Rows in one `INSERT` statement: 2 bound values each, within SQLite's 32,766.
const ROWS_PER_STATEMENT: usize = 256;

/// How long a store or load waits for a connection, and for SQLite's write lock.
const WAIT: Duration = Duration::from_secs(5);

/// Connections that load.
const READERS: u32 = 4;

/// Filters as rows of one SQLite table (see the module docs).
///
/// ```
/// use bloom_tower::filter_set::{FilterStore, SqliteStore};
///
/// # tokio::runtime::Builder::new_current_thread().enable_all().build()?.block_on(async {
/// let dir = tempfile::tempdir()?;
/// let store = SqliteStore::open(dir.path().join("filters.db")).await?;
/// store.store("user/42", b"bytes".to_vec()).await?;
/// store.store_many(vec![("a".into(), b"1".to_vec()), ("b".into(), b"2".to_vec())]).await?;
/// assert_eq!(store.load("user/42").await?, Some(b"bytes".to_vec()));
/// assert_eq!(store.load("b").await?, Some(b"2".to_vec()));
/// assert_eq!(store.load("user/43").await?, None);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # })?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug)]
pub struct SqliteStore {
    /// One connection: every store.
    writer: SqlitePool,
    /// Loads.
    readers: SqlitePool,
    /// `INSERT INTO "<table>" (name, bytes) `.
    insert: String,
    /// `SELECT bytes FROM "<table>" WHERE name = ?`.
    select: String,
}

/// Configures a [`SqliteStore`]: its database file, table and durability.
///
/// ```
/// use bloom_tower::filter_set::SqliteStore;
///
/// # tokio::runtime::Builder::new_current_thread().enable_all().build()?.block_on(async {
/// let dir = tempfile::tempdir()?;
/// let store = SqliteStore::builder(dir.path().join("app.db"))
///     .table("feed_shown")
///     .sync(false) // survives kill -9, not a power cut
///     .open()
///     .await?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # })?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug)]
pub struct SqliteStoreBuilder {
    path: PathBuf,
    table: String,
    sync: bool,
}

impl SqliteStore {
    /// The store in the database file `path` (created if missing), table `bloom_filters`,
    /// `fsync` on every commit.
    pub async fn open(path: impl AsRef<Path>) -> Result<Self, StoreError> {
        Self::builder(path).open().await
    }

    /// Starts configuring a store in the database file `path`.
    pub fn builder(path: impl AsRef<Path>) -> SqliteStoreBuilder {
        SqliteStoreBuilder {
            path: path.as_ref().to_owned(),
            table: DEFAULT_TABLE.to_owned(),
            sync: true,
        }
    }

    /// The pool of the store's one writing connection (to read or write the table beside
    /// the store, in order with its stores).
    pub fn pool(&self) -> &SqlitePool {
        &self.writer
    }

    /// Closes both pools (the writer's and the readers'), waiting for their connections.
    pub async fn close(&self) {
        self.writer.close().await;
        self.readers.close().await;
    }
}

impl SqliteStoreBuilder {
    /// The table that holds the filters (created if missing). ASCII letters, digits and
    /// `_`, not starting with a digit, at most 64 bytes; [`open`](Self::open) refuses
    /// anything else.
    pub fn table(mut self, table: impl Into<String>) -> Self {
        self.table = table.into();
        self
    }

    /// Whether every commit is `fsync`ed (`synchronous = FULL`, the default) or only
    /// survives a killed process (`NORMAL`; see the module docs).
    pub fn sync(mut self, sync: bool) -> Self {
        self.sync = sync;
        self
    }

    /// Opens the database (created if missing) in WAL mode and creates the table.
    pub async fn open(self) -> Result<SqliteStore, StoreError> {
        let table = &self.table;
        let valid = !table.is_empty()
            && table.len() <= 64
            && !table.as_bytes()[0].is_ascii_digit()
            && table
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_');
        if !valid {
            return Err(StoreError::backend(format!(
                "invalid table name {table:?}: ASCII letters, digits and _, not starting with a digit, at most 64 bytes"
            )));
        }
        let options = SqliteConnectOptions::new()
            .filename(&self.path)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(if self.sync {
                SqliteSynchronous::Full
            } else {
                SqliteSynchronous::Normal
            })
            .busy_timeout(WAIT);
        // One writer: stores queue for its connection in order, where several writers would
        // poll SQLite's write lock (its busy handler sleeps between tries).
        let writer = SqlitePoolOptions::new()
            .max_connections(1)
            .acquire_timeout(WAIT)
            .connect_with(options.clone())
            .await
            .map_err(|e| open_error(&self.path, e))?;
        sqlx::query(&format!(
            "CREATE TABLE IF NOT EXISTS \"{table}\" (name TEXT PRIMARY KEY NOT NULL, bytes BLOB NOT NULL)"
        ))
        .execute(&writer)
        .await
        .map_err(|e| open_error(&self.path, e))?;
        // Readers beside it: in WAL mode a read waits for no write.
        let readers = SqlitePoolOptions::new()
            .max_connections(READERS)
            .acquire_timeout(WAIT)
            .connect_with(options.read_only(true))
            .await
            .map_err(|e| open_error(&self.path, e))?;
        Ok(SqliteStore {
            writer,
            readers,
            insert: format!("INSERT INTO \"{table}\" (name, bytes) "),
            select: format!("SELECT bytes FROM \"{table}\" WHERE name = ?"),
        })
    }
}

impl SqliteStore {
    /// One `INSERT … ON CONFLICT DO UPDATE` of `rows` (at most [`ROWS_PER_STATEMENT`]).
    async fn upsert<'e>(
        &self,
        rows: &[(String, Vec<u8>)],
        on: impl sqlx::Executor<'e, Database = Sqlite>,
    ) -> Result<(), StoreError> {
        let mut insert = QueryBuilder::<Sqlite>::new(&self.insert);
        insert.push_values(rows, |mut row, (name, bytes)| {
            row.push_bind(name.as_str()).push_bind(bytes.as_slice());
        });
        insert.push(UPSERT);
        insert
            .build()
            .execute(on)
            .await
            .map(drop)
            .map_err(StoreError::backend)
    }
}

fn open_error(path: &Path, e: sqlx::Error) -> StoreError {
    StoreError::backend(format!("opening the SQLite store {}: {e}", path.display()))
}

impl FilterStore for SqliteStore {
    async fn load(&self, name: &str) -> Result<Option<Vec<u8>>, StoreError> {
        sqlx::query_scalar::<_, Vec<u8>>(&self.select)
            .bind(name)
            .fetch_optional(&self.readers)
            .await
            .map_err(StoreError::backend)
    }

    async fn store(&self, name: &str, bytes: Vec<u8>) -> Result<(), StoreError> {
        self.store_many(vec![(name.to_owned(), bytes)]).await
    }

    /// A batch is one transaction.
    const MAX_BATCH: usize = 512;

    async fn store_many(&self, batch: Vec<(String, Vec<u8>)>) -> Result<(), StoreError> {
        if batch.len() <= ROWS_PER_STATEMENT {
            // One statement is its own transaction: whole or nothing, one trip to the
            // connection's thread where BEGIN and COMMIT would take two more.
            return self.upsert(&batch, &self.writer).await;
        }
        // A dropped transaction rolls back: a cancelled store leaves every row as it was.
        let mut tx = self.writer.begin().await.map_err(StoreError::backend)?;
        for rows in batch.chunks(ROWS_PER_STATEMENT) {
            self.upsert(rows, &mut *tx).await?;
        }
        tx.commit().await.map_err(StoreError::backend)
    }
}
