//! Following writes that do not pass through the library, on SQLite through a real driver
//! (a file database, the service's pool and a second pool for "another writer"): the change
//! log's triggers, `SharedFilter::follow`, a restart caught up through the log, pruning.
//! PostgreSQL's side is in the workspace's `tests/follow.rs`.
#![cfg(feature = "sqlx")]

use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::time::{Duration, Instant};

use bloom_tower::key::KeyFor;
use bloom_tower::key_source::Watermark;
use bloom_tower::key_source::change_log::ChangeLog;
use bloom_tower::shared_filter::{Follow, Follower, Started};
use bloom_tower::{BloomFilter, KeySource, SharedFilter};
use futures_util::{Stream, StreamExt as _, stream};
use sqlx::sqlite::{SqliteConnectOptions, SqlitePool, SqlitePoolOptions};
use sqlx::{Executor as _, Sqlite};

/// A file database with a `users` table (ids chosen by the writer) and its change log.
struct Db {
    _dir: tempfile::TempDir,
    /// The service's pool.
    pool: SqlitePool,
    /// Another writer: a pool of its own, as an admin tool or a batch import would have.
    other: SqlitePool,
}

async fn db() -> Db {
    let dir = tempfile::tempdir().unwrap();
    let options = SqliteConnectOptions::new()
        .filename(dir.path().join("users.sqlite"))
        .create_if_missing(true)
        .journal_mode(sqlx::sqlite::SqliteJournalMode::Wal)
        .busy_timeout(Duration::from_secs(10));
    let pool = SqlitePoolOptions::new()
        .max_connections(4)
        .connect_with(options.clone())
        .await
        .unwrap();
    pool.execute("CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT NOT NULL)")
        .await
        .unwrap();
    let other = SqlitePoolOptions::new()
        .max_connections(2)
        .connect_with(options)
        .await
        .unwrap();
    Db {
        _dir: dir,
        pool,
        other,
    }
}

fn log(pool: &SqlitePool) -> ChangeLog<i64, Sqlite> {
    ChangeLog::sqlite(pool.clone(), "users", "id").unwrap()
}

async fn insert(pool: &SqlitePool, id: i64) {
    sqlx::query("INSERT INTO users (id, name) VALUES ($1, 'x')")
        .bind(id)
        .execute(pool)
        .await
        .unwrap();
}

/// Waits (at most 10 s) until `filter` holds `id`; how long it took.
async fn until_contained(filter: &SharedFilter<i64>, id: i64) -> Duration {
    let start = Instant::now();
    while !filter.contains(&id) {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "id {id} was never followed into the filter"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    start.elapsed()
}

fn empty_filter() -> SharedFilter<i64> {
    SharedFilter::<i64>::builder()
        .name("users")
        .build(BloomFilter::new(100_000, 0.0001).unwrap())
}

#[tokio::test]
async fn a_row_committed_behind_the_filters_back_is_followed() {
    let db = db().await;
    for id in 1..=100 {
        insert(&db.pool, id).await;
    }
    let users = log(&db.pool);
    users.install().await.unwrap();
    let filter = empty_filter();
    filter.reload_from(&users).await.unwrap();
    let task = filter.follow(users, Follow::every(Duration::from_millis(20)));

    insert(&db.other, 5_000).await;
    let took = until_contained(&filter, 5_000).await;
    println!("another writer's row followed in {took:?}");
    // Below the largest id present, committed after it: no highest-id watermark sees it.
    insert(&db.other, 3_000).await;
    until_contained(&filter, 3_000).await;
    // Every row ever written is in the filter.
    for id in (1..=100).chain([3_000, 5_000]) {
        assert!(filter.contains(&id), "{id}");
    }
    assert!(filter.stats().followed_keys >= 2);
    task.shutdown().await;
}

#[tokio::test]
async fn an_idle_log_is_one_query_a_step_and_reads_nothing() {
    let db = db().await;
    let users = log(&db.pool);
    users.install().await.unwrap();
    insert(&db.pool, 1).await;
    let filter = empty_filter();
    let mut follower = Follower::new(&filter, &users);
    // From the origin: the whole table.
    assert_eq!(follower.step().await.unwrap(), 1);
    // Nothing since: the exact watermark did not move, nothing is read.
    assert_eq!(follower.step().await.unwrap(), 0);
    insert(&db.other, 2).await;
    assert_eq!(follower.step().await.unwrap(), 1);
    assert!(filter.contains(&2));
}

#[tokio::test]
async fn a_key_updated_into_the_table_is_followed() {
    let db = db().await;
    let users = log(&db.pool);
    users.install().await.unwrap();
    insert(&db.pool, 1).await;
    let filter = empty_filter();
    let mut follower = Follower::new(&filter, &users);
    follower.step().await.unwrap();
    db.other
        .execute("UPDATE users SET id = 77 WHERE id = 1")
        .await
        .unwrap();
    follower.step().await.unwrap();
    assert!(filter.contains(&77));
}

/// The change log, failing every call while `down` is set: a database that went away.
struct Flaky {
    log: ChangeLog<i64, Sqlite>,
    down: Arc<AtomicBool>,
}

impl KeySource for Flaky {
    type Key = i64;
    type Error = io::Error;

    fn keys(
        &self,
    ) -> impl Stream<Item = Result<impl KeyFor<i64> + Send + '_, io::Error>> + Send + '_ {
        self.log.keys().map(|key| key.map_err(io::Error::other))
    }

    async fn watermark(&self) -> Result<Option<Watermark>, io::Error> {
        if self.down.load(SeqCst) {
            return Err(io::Error::other("connection refused"));
        }
        self.log.watermark().await.map_err(io::Error::other)
    }

    fn watermark_is_exact(&self) -> bool {
        true
    }

    fn keys_since<'a>(
        &'a self,
        since: &'a Watermark,
    ) -> impl Stream<Item = Result<impl KeyFor<i64> + Send + 'a, io::Error>> + Send + 'a {
        let down = self.down.load(SeqCst);
        // Down: the first row arrives, then the connection breaks.
        self.log
            .keys_since(since)
            .map(|key| key.map_err(io::Error::other))
            .take(if down { 1 } else { usize::MAX })
            .chain(stream::iter(
                down.then(|| Err(io::Error::other("connection reset"))),
            ))
    }
}

#[tokio::test]
async fn rows_committed_while_the_source_fails_are_followed_when_it_answers_again() {
    let db = db().await;
    let users = log(&db.pool);
    users.install().await.unwrap();
    let filter = empty_filter();
    let down = Arc::new(AtomicBool::new(false));
    let source = Flaky {
        log: users.clone(),
        down: Arc::clone(&down),
    };
    let task = filter.follow(source, Follow::every(Duration::from_millis(10)));
    insert(&db.other, 1).await;
    until_contained(&filter, 1).await;

    down.store(true, SeqCst);
    for id in 2..=50 {
        insert(&db.other, id).await;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(filter.stats().follow_errors > 0, "the steps did not fail");
    down.store(false, SeqCst);
    for id in 2..=50 {
        until_contained(&filter, id).await;
    }
    task.shutdown().await;
}

#[tokio::test]
async fn a_step_that_fails_midway_reads_again_from_the_same_position() {
    let db = db().await;
    let users = log(&db.pool);
    users.install().await.unwrap();
    let filter = empty_filter();
    let down = Arc::new(AtomicBool::new(false));
    let source = Flaky {
        log: users.clone(),
        down: Arc::clone(&down),
    };
    let mut follower = Follower::new(&filter, &source);
    follower.step().await.unwrap();
    let before = follower.position().clone();
    for id in 1..=3 {
        insert(&db.other, id).await;
    }
    // The watermark answers, the read breaks after one row: the position must not move.
    let flaky_read = FailReadOnly(&users);
    let mut broken = Follower::from_position(&filter, &flaky_read, before.clone());
    assert!(broken.step().await.is_err());
    assert_eq!(broken.position(), &before);
    follower.step().await.unwrap();
    for id in 1..=3 {
        assert!(filter.contains(&id), "{id}");
    }
}

/// The log, whose reads since a position break after their first row.
struct FailReadOnly<'a>(&'a ChangeLog<i64, Sqlite>);

impl KeySource for FailReadOnly<'_> {
    type Key = i64;
    type Error = io::Error;

    fn keys(
        &self,
    ) -> impl Stream<Item = Result<impl KeyFor<i64> + Send + '_, io::Error>> + Send + '_ {
        self.0.keys().map(|key| key.map_err(io::Error::other))
    }

    async fn watermark(&self) -> Result<Option<Watermark>, io::Error> {
        self.0.watermark().await.map_err(io::Error::other)
    }

    fn keys_since<'a>(
        &'a self,
        since: &'a Watermark,
    ) -> impl Stream<Item = Result<impl KeyFor<i64> + Send + 'a, io::Error>> + Send + 'a {
        self.0
            .keys_since(since)
            .map(|key| key.map_err(io::Error::other))
            .take(1)
            .chain(stream::iter([Err(io::Error::other("connection reset"))]))
    }
}

#[tokio::test]
async fn a_restart_from_a_snapshot_catches_up_through_the_log_on_a_text_keyed_table() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!(
        "sqlite://{}?mode=rwc",
        dir.path().join("o.sqlite").display()
    );
    let pool = SqlitePoolOptions::new()
        .max_connections(2)
        .connect(&url)
        .await
        .unwrap();
    // Random keys: no order a highest-value watermark could follow.
    pool.execute("CREATE TABLE orders (id TEXT PRIMARY KEY)")
        .await
        .unwrap();
    let orders = ChangeLog::<String, Sqlite>::sqlite(pool.clone(), "orders", "id").unwrap();
    orders.install().await.unwrap();
    let random_key = |n: u64| format!("{:016x}-{n}", n.wrapping_mul(0x9e37_79b9_7f4a_7c15));
    for n in 0..500 {
        sqlx::query("INSERT INTO orders (id) VALUES ($1)")
            .bind(random_key(n))
            .execute(&pool)
            .await
            .unwrap();
    }
    let snapshot = dir.path().join("orders.bloom");
    let start = || {
        SharedFilter::<String>::builder()
            .name("orders")
            .snapshot(&snapshot)
            .start(BloomFilter::new(10_000, 0.001).unwrap(), &orders)
    };
    let (filter, started) = start().await.unwrap();
    assert!(
        matches!(started, Started::Rebuilt { keys: 500, .. }),
        "{started:?}"
    );
    filter.save_snapshot().await.unwrap();
    drop(filter);

    // Another writer while the service is down.
    for n in 500..800 {
        sqlx::query("INSERT INTO orders (id) VALUES ($1)")
            .bind(random_key(n))
            .execute(&pool)
            .await
            .unwrap();
    }
    let (filter, started) = start().await.unwrap();
    assert_eq!(started, Started::CaughtUp { keys: 300 });
    assert!(!filter.is_verifying());
    for n in 0..800 {
        assert!(filter.contains(random_key(n).as_str()), "{n}");
    }
}

/// How many keys `keys_since(mark)` yields, and a filter holding them.
async fn read_since(
    users: &ChangeLog<i64, Sqlite>,
    mark: &Watermark,
) -> (usize, SharedFilter<i64>) {
    let filter = empty_filter();
    let read = users
        .keys_since(mark)
        .map(|key| filter.untyped().insert(&key.unwrap()))
        .count()
        .await;
    (read, filter)
}

#[tokio::test]
async fn a_position_the_pruned_log_no_longer_reaches_reads_the_whole_table() {
    let db = db().await;
    let users = log(&db.pool);
    users.install().await.unwrap();
    let old = users.watermark().await.unwrap().unwrap();
    for id in 1..=10 {
        insert(&db.other, id).await;
    }
    // Before pruning, the log from `old` holds the ten rows.
    assert_eq!(read_since(&users, &old).await.0, 10);
    // An hour passes: everything older than half an hour is pruned but the newest row,
    // since none is younger.
    db.pool
        .execute("UPDATE bloom_changes_users SET logged_at = logged_at - 3600")
        .await
        .unwrap();
    users.prune(Duration::from_secs(1800)).await.unwrap();
    let left: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM bloom_changes_users")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(left, 1);
    insert(&db.other, 11).await;
    // `old` is before the horizon: every key of the table, not the two rows left in the log.
    let (read, keys) = read_since(&users, &old).await;
    assert_eq!(read, 11);
    for id in 1..=11 {
        assert!(keys.contains(&id), "{id}");
    }
    // A position after the horizon reads the log.
    let now = users.watermark().await.unwrap().unwrap();
    insert(&db.other, 12).await;
    let (read, keys) = read_since(&users, &now).await;
    assert_eq!(read, 1);
    assert!(keys.contains(&12));
}

/// `prune_every` in the background: rows older than `keep` leave the log at each interval
/// (the log stays bounded), a position from before the horizon still reads every key, and
/// shutting the task down stops it.
#[tokio::test]
async fn prune_every_keeps_the_log_bounded_and_loses_no_key() {
    let db = db().await;
    let users = log(&db.pool);
    users.install().await.unwrap();
    let old = users.watermark().await.unwrap().unwrap();
    let pruning = users.prune_every(Duration::from_secs(1800), Duration::from_millis(50));
    let count = || async {
        sqlx::query_scalar::<_, i64>("SELECT COUNT(*) FROM bloom_changes_users")
            .fetch_one(&db.pool)
            .await
            .unwrap()
    };
    for round in 0..3i64 {
        for id in 1..=10 {
            insert(&db.other, round * 100 + id).await;
        }
        // These rows are an hour old now: the next prune leaves only the newest row.
        db.pool
            .execute("UPDATE bloom_changes_users SET logged_at = logged_at - 3600")
            .await
            .unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while count().await > 1 {
            assert!(std::time::Instant::now() < deadline, "never pruned");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    let (read, keys) = read_since(&users, &old).await;
    assert_eq!(read, 30);
    for round in 0..3i64 {
        for id in 1..=10 {
            assert!(keys.contains(&(round * 100 + id)));
        }
    }
    pruning.shutdown().await;
    insert(&db.other, 999).await;
    db.pool
        .execute("UPDATE bloom_changes_users SET logged_at = logged_at - 3600")
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(count().await, 2, "pruned after shutdown");
}

#[tokio::test]
async fn names_that_are_not_plain_identifiers_are_refused() {
    let db = db().await;
    for (table, column) in [
        ("users; DROP TABLE users", "id"),
        ("users", "id)--"),
        ("", "id"),
        ("1users", "id"),
    ] {
        let error = ChangeLog::<i64, Sqlite>::sqlite(db.pool.clone(), table, column).unwrap_err();
        assert!(
            error.to_string().contains("not a plain SQL identifier"),
            "{error}"
        );
    }
    assert!(ChangeLog::<i64, Sqlite>::sqlite(db.pool.clone(), "main.users", "id").is_ok());
}
