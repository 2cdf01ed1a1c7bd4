//! The change log's names: no two tables share a log (or one table's log another's horizon),
//! on SQLite and on a real PostgreSQL server, including names PostgreSQL would cut at 63
//! bytes; the names of ordinary tables are those of before.
#![cfg(feature = "sqlx")]

#[path = "../../../tests/servers/postgres.rs"]
#[allow(dead_code)]
mod postgres;

use bloom_tower::KeySource;
use bloom_tower::key_source::change_log::ChangeLog;
use futures_util::StreamExt as _;
use sqlx::{Executor as _, Postgres, Sqlite};

/// Pairs of tables whose logs a derivation that maps `.` to `_`, or that lets PostgreSQL cut
/// names at 63 bytes, would share.
fn colliding_pairs() -> Vec<(String, String)> {
    let long = |tail: &str| format!("tenant.{}{tail}", "t".repeat(56));
    vec![
        ("a.b_c".into(), "a_b.c".into()),
        ("x".into(), "x_horizon".into()),
        ("x".into(), "x_insert".into()),
        ("x".into(), "x_xid".into()),
        ("main.orders".into(), "main_orders".into()),
        ("public.orders".into(), "public_orders".into()),
        ("t_".into(), "t__".into()),
        ("_t".into(), "t".into()),
        (long("aaaaaaa"), long("bbbbbbb")),
    ]
}

/// Every object a log makes for `table`.
fn objects(log: &str) -> Vec<String> {
    ["", "_horizon", "_insert", "_update", "_record", "_xid"]
        .iter()
        .map(|suffix| format!("{log}{suffix}"))
        .collect()
}

#[tokio::test]
async fn no_two_tables_share_a_log_or_its_companions() {
    let pool = sqlx::SqlitePool::connect("sqlite::memory:").await.unwrap();
    let log = |table: &str| {
        ChangeLog::<i64, Sqlite>::sqlite(pool.clone(), table, "id")
            .unwrap()
            .log_table()
            .to_owned()
    };
    let mut tables: Vec<String> = colliding_pairs()
        .into_iter()
        .flat_map(|(a, b)| [a, b])
        .collect();
    tables.extend(["users", "order_items", "x_y.z", "x.y_z", "x_y_z"].map(String::from));
    tables.sort();
    tables.dedup();
    let mut seen = std::collections::HashMap::new();
    for table in &tables {
        let log = log(table);
        for object in objects(&log) {
            assert!(object.len() <= 63, "{object} is cut by PostgreSQL");
            let key = object.to_ascii_lowercase();
            if let Some(other) = seen.insert(key, table.clone()) {
                panic!("{object} is made for both {other:?} and {table:?}");
            }
        }
    }
    // The names of ordinary tables are unchanged; one table spelled two ways has one log.
    assert_eq!(log("users"), "bloom_changes_users");
    assert_eq!(log("order_items"), "bloom_changes_order_items");
    assert_eq!(log("Main.Orders"), log("main.orders"));
    assert!(log("main.orders").starts_with("bloom_changes_main_orders__"));
}

/// Inserts three ids into each table, then reads each log from a watermark taken before: each
/// log yields its own table's ids, and only those. (A macro: one body for both databases.)
macro_rules! each_log_holds_its_own_rows {
    ($pool:expr, $logs:expr) => {{
        let (pool, logs) = (&$pool, &$logs);
        for (log, _) in logs {
            log.install().await.unwrap();
        }
        let mut marks = Vec::new();
        for (log, _) in logs {
            marks.push(log.watermark().await.unwrap().unwrap());
        }
        for (i, (_, table)) in logs.iter().enumerate() {
            for id in 0..3 {
                let insert = format!("INSERT INTO {table} (id) VALUES ({})", 100 * i + id);
                pool.execute(&*insert).await.unwrap();
            }
        }
        for (i, ((log, table), mark)) in logs.iter().zip(&marks).enumerate() {
            let mut read: Vec<i64> = log
                .keys_since(mark)
                .map(|key| {
                    let bytes = bloom_tower::Key::key_bytes(&key.unwrap()).as_ref().to_vec();
                    i64::from_le_bytes(bytes.try_into().unwrap())
                })
                .collect()
                .await;
            read.sort();
            let own: Vec<i64> = (0..3).map(|id| (100 * i + id) as i64).collect();
            assert_eq!(read, own, "the log of {table} ({})", log.log_table());
        }
    }};
}

#[tokio::test]
async fn on_sqlite_colliding_names_get_logs_of_their_own() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!(
        "sqlite://{}?mode=rwc",
        dir.path().join("db.sqlite").display()
    );
    let pool = sqlx::SqlitePool::connect(&url).await.unwrap();
    for table in ["orders", "main_orders", "x", "x_horizon", "x_insert"] {
        let create = format!("CREATE TABLE {table} (id INTEGER PRIMARY KEY)");
        pool.execute(&*create).await.unwrap();
    }
    let logs: Vec<_> = ["main.orders", "main_orders", "x", "x_horizon", "x_insert"]
        .into_iter()
        .map(|table| {
            let log = ChangeLog::<i64, Sqlite>::sqlite(pool.clone(), table, "id").unwrap();
            (log, table)
        })
        .collect();
    each_log_holds_its_own_rows!(pool, logs);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_postgres_colliding_and_long_names_get_logs_of_their_own() {
    let Some(server) = postgres::start_or_skip("change_log_names::postgres") else {
        return;
    };
    let url = server.create_database("change_log_names");
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(4)
        .connect(&url)
        .await
        .unwrap();
    for schema in ["a", "a_b", "tenant"] {
        pool.execute(&*format!("CREATE SCHEMA {schema}"))
            .await
            .unwrap();
    }
    let pairs = colliding_pairs();
    let mut tables: Vec<&str> = pairs
        .iter()
        .flat_map(|(a, b)| [a.as_str(), b.as_str()])
        .filter(|table| !table.starts_with("main."))
        .collect();
    tables.sort();
    tables.dedup();
    for table in &tables {
        let create = format!("CREATE TABLE {table} (id BIGINT PRIMARY KEY)");
        pool.execute(&*create).await.unwrap();
    }
    let long = tables.iter().filter(|table| table.len() == 70).count();
    assert_eq!(long, 2, "{tables:?}");
    let logs: Vec<_> = tables
        .iter()
        .map(|&table| {
            let log = ChangeLog::<i64, Postgres>::postgres(pool.clone(), table, "id").unwrap();
            (log, table)
        })
        .collect();
    each_log_holds_its_own_rows!(pool, logs);
    // Every log table exists under its own, uncut name.
    for (log, table) in &logs {
        let found: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM pg_class WHERE relname = $1")
            .bind(log.log_table())
            .fetch_one(&pool)
            .await
            .unwrap();
        assert_eq!(found, 1, "the log of {table}: {}", log.log_table());
    }
}

/// SQLite compares table names without regard to ASCII case: a log installed as `orders` and
/// read as `ORDERS` (another instance's spelling) is one log, and its watermark moves for
/// both spellings.
#[tokio::test]
async fn on_sqlite_the_watermark_moves_whatever_the_table_is_spelled() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!(
        "sqlite://{}?mode=rwc",
        dir.path().join("db.sqlite").display()
    );
    let pool = sqlx::SqlitePool::connect(&url).await.unwrap();
    pool.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY)")
        .await
        .unwrap();
    let lower = ChangeLog::<i64, Sqlite>::sqlite(pool.clone(), "orders", "id").unwrap();
    let upper = ChangeLog::<i64, Sqlite>::sqlite(pool.clone(), "ORDERS", "id").unwrap();
    lower.install().await.unwrap();
    upper.install().await.unwrap();
    let before = upper.watermark().await.unwrap().unwrap();
    pool.execute("INSERT INTO orders (id) VALUES (7)")
        .await
        .unwrap();
    for log in [&lower, &upper] {
        let after = log.watermark().await.unwrap().unwrap();
        assert_ne!(
            after,
            before,
            "{}: the watermark did not move",
            log.log_table()
        );
        assert!(log.has_reached(&before, &after));
        assert!(!log.has_reached(&after, &before));
    }
}
