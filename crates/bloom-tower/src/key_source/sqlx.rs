//! A [`KeySource`] over a SQL query, through a [`sqlx`] pool of any database (SQLite,
//! PostgreSQL, MySQL, `Any`): [`query`].
//!
//! ```
//! use bloom_tower::{BloomFilter, SharedFilter, key_source};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let pool = sqlx::sqlite::SqlitePoolOptions::new().max_connections(1)
//! #     .connect("sqlite::memory:").await?;
//! # sqlx::query("CREATE TABLE orders (id INTEGER PRIMARY KEY)").execute(&pool).await?;
//! # sqlx::query("INSERT INTO orders (id) VALUES (1), (2), (3)").execute(&pool).await?;
//! // let pool = sqlx::PgPool::connect(url).await?; // or SqlitePool, MySqlPool, AnyPool
//! let order_ids = key_source::sqlx::query::<i64, _>(pool.clone(), "SELECT id FROM orders")
//!     .counted() // SELECT COUNT(*) now: the first rebuild sizes its filter for it
//!     .await?;
//!
//! let filter = SharedFilter::<i64>::new(BloomFilter::new(1_000_000, 0.01)?);
//! filter.reload_from(&order_ids).await?;
//! assert!(filter.contains(&2i64));
//! # Ok(())
//! # }
//! ```
//!
//! The rows are streamed ([`fetch`](::sqlx::query::QueryScalar::fetch)), never collected: a
//! rebuild from a ten-million-row table holds one row at a time. The query runs inside
//! [`KeySource::keys`], as a rebuild requires.
//!
//! **Key types.** `query::<K, _>` yields `K`s, and only a `SharedFilter<K>` can be rebuilt from
//! it (the compiler checks): read the column as the type the application inserts and looks up
//! (cast in SQL, `CAST(id AS BIGINT)`, when the column is narrower). An application with `u64`
//! ids over a signed `BIGINT` column decodes the column into its own id type (a newtype with
//! `sqlx::Decode` and [`Key`]) rather than filling a `u64` filter from `i64`s.
//! With the `uuid` feature a `UUID` column is read as `uuid::Uuid` keys: `query::<Uuid, _>`.

use std::borrow::Cow;
use std::fmt;
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::task::{Context, Poll};

use ::sqlx::{Database, Encode, Executor, FromRow, IntoArguments, Pool, Type};
use futures_core::Stream;
use futures_core::stream::BoxStream;

use super::{KeySource, Watermark};
use crate::Key;
use crate::key::KeyFor;

/// "No count known": the hint is `None`.
const UNKNOWN: u64 = u64::MAX;

/// A source that runs `sql` at every rebuild and yields its rows' first column as keys: see
/// the [module documentation](self).
///
/// `pool` is a handle (cloning one is cheap, and clones share the connections); `sql` takes no
/// parameters. The [count hint](KeySource::count_hint) is unknown until [`counted`]
/// (or [`with_count_hint`]) sets it, and after every complete read is the number of rows that
/// read yielded. Without [`with_watermark`](Query::with_watermark) the source cannot catch a
/// snapshot up (a snapshot loaded through it serves *verifying* until a full rebuild).
///
/// [`counted`]: Query::counted
/// [`with_count_hint`]: Query::with_count_hint
pub fn query<K, DB: Database>(pool: Pool<DB>, sql: impl Into<Cow<'static, str>>) -> Query<K, DB> {
    Query {
        pool,
        sql: sql.into(),
        count: Arc::new(AtomicU64::new(UNKNOWN)),
        since: None,
        hold_back: None,
        _key: PhantomData,
    }
}

/// The lowest id still being inserted, for [`Query::hold_back`].
type LowestInFlight = Arc<dyn Fn() -> Option<i64> + Send + Sync>;

/// Source returned by [`query`]. Cheap to clone; clones share the pool and the count hint.
pub struct Query<K, DB: Database> {
    pool: Pool<DB>,
    sql: Cow<'static, str>,
    /// The count hint; [`UNKNOWN`] if none.
    count: Arc<AtomicU64>,
    /// `watermark_sql` and `since_sql`, from [`Query::with_watermark`].
    since: Option<(Cow<'static, str>, Cow<'static, str>)>,
    hold_back: Option<LowestInFlight>,
    /// `fn() -> K`: the source holds no `K`, and is `Send` and `Sync` whatever `K` is.
    _key: PhantomData<fn() -> K>,
}

impl<K, DB: Database> Clone for Query<K, DB> {
    fn clone(&self) -> Self {
        Self {
            pool: self.pool.clone(),
            sql: self.sql.clone(),
            count: Arc::clone(&self.count),
            since: self.since.clone(),
            hold_back: self.hold_back.clone(),
            _key: PhantomData,
        }
    }
}

impl<K, DB: Database> fmt::Debug for Query<K, DB> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Query")
            .field("sql", &self.sql)
            .field("count_hint", &self.hint())
            .field("watermark", &self.since)
            .field("hold_back", &self.hold_back.is_some())
            .finish_non_exhaustive()
    }
}

impl<K, DB: Database> Query<K, DB> {
    /// Tells the rebuild how many keys to expect, to size the new filter (until a complete read
    /// replaces it with the number of rows it yielded).
    pub fn with_count_hint(self, keys: u64) -> Self {
        self.count.store(keys.min(UNKNOWN - 1), Relaxed);
        self
    }

    /// Sets the count hint now with `SELECT COUNT(*) FROM (<sql>) AS bloom_keys`: one full
    /// count, for the first rebuild; every complete read afterwards counts its rows for free.
    /// Use [`counted_with`](Self::counted_with) for a cheaper query (an estimate will do: it only
    /// sizes the filter).
    pub async fn counted(self) -> Result<Self, ::sqlx::Error>
    where
        for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
        for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
        (i64,): for<'r> FromRow<'r, DB::Row>,
    {
        let inner = self.sql.trim_end().trim_end_matches(';');
        let sql = format!("SELECT COUNT(*) FROM ({inner}) AS bloom_keys");
        self.counted_with(&sql).await
    }

    /// Sets the count hint now from `count_sql`, which returns one row of one `BIGINT`: e.g.
    /// `SELECT COUNT(*) FROM orders`, or PostgreSQL's estimate `SELECT reltuples::BIGINT FROM
    /// pg_class WHERE relname = 'orders'`. A negative count (an estimate PostgreSQL has not
    /// made yet) leaves the hint as it was.
    pub async fn counted_with(self, count_sql: &str) -> Result<Self, ::sqlx::Error>
    where
        for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
        for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
        (i64,): for<'r> FromRow<'r, DB::Row>,
    {
        let count: i64 = ::sqlx::query_scalar(count_sql)
            .fetch_one(&self.pool)
            .await?;
        Ok(match u64::try_from(count) {
            Ok(count) => self.with_count_hint(count),
            Err(_) => self,
        })
    }

    /// Lets the source catch a snapshot up after a restart (see
    /// [`SharedFilterBuilder::start`](crate::shared_filter::SharedFilterBuilder::start)), through a column
    /// whose values only grow (an id, a sequence, a creation time as a number):
    ///
    /// * `watermark_sql` returns one row of one nullable `BIGINT`: where the table stands now,
    ///   e.g. `SELECT MAX(id) FROM orders` (`NULL`, for an empty table, stands before every row);
    /// * `since_sql` returns the keys of the rows after a watermark, which is bound as its one
    ///   `BIGINT` parameter: `SELECT id FROM orders WHERE id > $1` (`?` on MySQL).
    ///
    /// **Rows that commit out of order.** The contract ([`KeySource::watermark`]) is that every
    /// key added after the watermark is read is among `since_sql`'s rows. `MAX(id)` keeps it
    /// only if no row can still commit *below* the maximum: a transaction that took id 41 and
    /// commits after `MAX(id)` read 42 is never caught up, and a filter restarted from that
    /// snapshot rejects id 41 until the next full rebuild. With one writing process that knows
    /// its ids before they commit, pass [`hold_back`](Self::hold_back); with concurrent
    /// writers, hold the watermark back in SQL (`SELECT MAX(id) - 1000 FROM orders`, or a
    /// creation time older than any transaction stays open): keys read twice cost nothing but
    /// time.
    ///
    /// The watermark is stored as the `BIGINT`'s eight big-endian bytes (for values `>= 0`, the
    /// same as [`Watermark::from`] the `u64`); one that is not eight bytes reads every row.
    pub fn with_watermark(
        mut self,
        watermark_sql: impl Into<Cow<'static, str>>,
        since_sql: impl Into<Cow<'static, str>>,
    ) -> Self {
        self.since = Some((watermark_sql.into(), since_sql.into()));
        self
    }

    /// Holds the [`watermark`](Self::with_watermark) below the ids still being inserted:
    /// `lowest_in_flight` returns the lowest id this process has handed out whose `INSERT` has
    /// not committed or failed yet (`None` if there is none), and the watermark is at most that
    /// id minus one. It is called *after* `watermark_sql` has returned, so an insert that
    /// commits in between is either at or below the maximum read, or held back.
    pub fn hold_back(
        mut self,
        lowest_in_flight: impl Fn() -> Option<i64> + Send + Sync + 'static,
    ) -> Self {
        self.hold_back = Some(Arc::new(lowest_in_flight));
        self
    }

    /// The query.
    pub fn sql(&self) -> &str {
        &self.sql
    }

    /// The pool.
    pub fn pool(&self) -> &Pool<DB> {
        &self.pool
    }

    fn hint(&self) -> Option<u64> {
        Some(self.count.load(Relaxed)).filter(|&count| count != UNKNOWN)
    }
}

impl<K, DB> KeySource for Query<K, DB>
where
    DB: Database,
    K: Key + Send + Sync + Unpin + 'static,
    (K,): for<'r> FromRow<'r, DB::Row>,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    (Option<i64>,): for<'r> FromRow<'r, DB::Row>,
    i64: for<'q> Encode<'q, DB> + Type<DB>,
{
    type Key = K;
    type Error = ::sqlx::Error;

    fn keys(
        &self,
    ) -> impl Stream<Item = Result<impl KeyFor<K> + Send + '_, ::sqlx::Error>> + Send + '_ {
        Counted {
            rows: ::sqlx::query_scalar::<DB, K>(&self.sql).fetch(&self.pool),
            read: 0,
            failed: false,
            hint: &self.count,
        }
    }

    fn count_hint(&self) -> Option<u64> {
        self.hint()
    }

    async fn watermark(&self) -> Result<Option<Watermark>, ::sqlx::Error> {
        let Some((watermark_sql, _)) = &self.since else {
            return Ok(None);
        };
        let max: Option<i64> = ::sqlx::query_scalar(watermark_sql)
            .fetch_one(&self.pool)
            .await?;
        // NULL (no rows yet) stands before every row.
        let mut mark = max.unwrap_or(i64::MIN);
        if let Some(lowest) = self.hold_back.as_ref().and_then(|lowest| lowest()) {
            mark = mark.min(lowest.saturating_sub(1));
        }
        Ok(Some(Watermark::new(mark.to_be_bytes())))
    }

    /// Highest ids compare as the signed numbers they are; bytes this query did not write
    /// count as reached (following from them reads every row).
    fn has_reached(&self, position: &Watermark, now: &Watermark) -> bool {
        let id = |mark: &Watermark| <[u8; 8]>::try_from(mark.as_bytes()).map(i64::from_be_bytes);
        match (id(position), id(now)) {
            (Ok(position), Ok(now)) => position <= now,
            (Err(_), _) => true,
            (Ok(_), Err(_)) => false,
        }
    }

    fn keys_since<'a>(
        &'a self,
        since: &'a Watermark,
    ) -> impl Stream<Item = Result<impl KeyFor<K> + Send + 'a, ::sqlx::Error>> + Send + 'a {
        // Not 8 bytes (not written by this source): everything, which is slower, never wrong.
        let after = <[u8; 8]>::try_from(since.as_bytes()).map_or(i64::MIN, i64::from_be_bytes);
        match &self.since {
            Some((_, since_sql)) => ::sqlx::query_scalar::<DB, K>(since_sql)
                .bind(after)
                .fetch(&self.pool),
            // Only called after `watermark` returned `Some`, which it does only when configured.
            None => Box::pin(futures_util::stream::empty()),
        }
    }
}

/// [`Query::keys`]'s rows, counted: a read that ends without an error (or being dropped)
/// stores how many rows it yielded as the next count hint.
struct Counted<'a, K> {
    rows: BoxStream<'a, Result<K, ::sqlx::Error>>,
    read: u64,
    failed: bool,
    hint: &'a AtomicU64,
}

impl<K> Stream for Counted<'_, K> {
    type Item = Result<K, ::sqlx::Error>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        let next = this.rows.as_mut().poll_next(cx);
        match &next {
            Poll::Ready(Some(Ok(_))) => this.read += 1,
            Poll::Ready(Some(Err(_))) => this.failed = true,
            Poll::Ready(None) if !this.failed => {
                this.hint.store(this.read.min(UNKNOWN - 1), Relaxed)
            }
            _ => {}
        }
        next
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.rows.size_hint()
    }
}
