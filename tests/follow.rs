//! Writes that do not pass through the library: rows committed by another writer (an admin
//! tool, an import, a second database connection behind the service's back) are let through
//! within the follow bound, on every instance. Drives the real `user_service` binary (one
//! process per instance, a free port each) on SQLite and on a throwaway PostgreSQL server,
//! with a real `redis-server` for the fleet; and the library over a UUID-keyed PostgreSQL
//! table for a restart from a snapshot.
//!
//! "Let through" is observed as a client does: `GET /users/{id}` answers 200 (the guard's own
//! rejections are 404 with `x-bloom-guard: rejected`). The delays printed are from the
//! writer's `COMMIT` returning to the first 200 on every instance.
#![forbid(unsafe_code)]

#[path = "../crates/bloom-redis/tests/common/fault.rs"]
mod fault;

#[path = "support/user_service.rs"]
mod user_service;

use std::time::{Duration, Instant};

use bloom_tests::servers::process::Signal;
use bloom_tests::servers::{postgres, redis};
use reqwest::StatusCode;
use sqlx::{AnyPool, Executor as _};
use user_service::{Instance, client, until_found, write_id, write_row, writer};

/// The service's own database, and a row another writer puts below the largest id.
async fn other_writers_rows_are_let_through(instance: &Instance, pool: &AnyPool, what: &str) {
    let id = write_row(pool).await;
    let took = until_found(&[instance], id, what).await;
    println!("{what}: another writer's row {id} let through {took:?} after its commit");
    // Below the largest id present, committed after it.
    write_id(pool, id + 1_000).await;
    until_found(&[instance], id + 1_000, what).await;
    write_id(pool, id + 500).await;
    let took = until_found(&[instance], id + 500, what).await;
    println!("{what}: a row below the largest id let through {took:?} after its commit");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_rows_written_by_another_process_are_let_through() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("users");
    let url = bloom_examples::db::sqlite_url(&data).unwrap();
    let instance = Instance::start(dir.path(), "users", &url, &[]).await;
    let pool = writer(&url).await;
    other_writers_rows_are_let_through(&instance, &pool, "sqlite").await;
    // Absent ids are still rejected by the guard: following did not turn it off.
    let mut rejected = 0;
    for id in 900_000..900_050 {
        if instance.get(id).await == StatusCode::NOT_FOUND {
            rejected += 1;
        }
    }
    assert_eq!(rejected, 50);
}

/// A follow position in Redis past where the source stands (written by any client of the
/// fleet's Redis, or left from before the database was restored from an older backup): the
/// follower does not follow from it, and another writer's rows are let through as ever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follow_position_past_the_source_is_not_followed_from() {
    let Some(redis) = redis::start() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let url = bloom_examples::db::sqlite_url(&dir.path().join("users")).unwrap();
    let client = ::redis::Client::open(redis.url()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    // The change log's sequence number a billion rows ahead.
    let _: () = ::redis::cmd("SET")
        .arg("{user_service:users}:follow:position")
        .arg(1_000_000_000i64.to_be_bytes().as_slice())
        .query_async(&mut conn)
        .await
        .unwrap();
    let redis_url = redis.url();
    let flags = [
        "--redis",
        &redis_url,
        "--filter-seed",
        "0x5eed",
        "--filter-capacity",
        "100000",
    ];
    let instance = Instance::start(dir.path(), "users", &url, &flags).await;
    let pool = writer(&url).await;
    let id = write_row(&pool).await;
    let took = until_found(&[&instance], id, "a row after a forged follow position").await;
    println!("sqlite: a row let through {took:?} after its commit, past a forged follow position");
    assert!(
        instance
            .log()
            .contains("the follow position stored in Redis is past where the source stands"),
        "{}",
        instance.log()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_suite() {
    let Some(server) = postgres::start_or_skip("follow::postgres_suite") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    one_instance_follows_other_writers(&server, dir.path()).await;
    a_transaction_that_commits_last_with_the_smaller_id_is_followed(&server, dir.path()).await;
    rows_committed_while_the_connection_is_down_are_caught_up(&server, dir.path()).await;
    a_fleet_follows_an_outside_writer_and_survives_its_follower_killed(&server, dir.path()).await;
    a_uuid_table_restarted_from_its_snapshot_is_caught_up(&server, dir.path()).await;
    a_uuid_column_is_followed_as_uuid_keys(&server).await;
    installing_beside_a_writer_does_not_deadlock(&server).await;
}

async fn one_instance_follows_other_writers(server: &postgres::Postgres, dir: &std::path::Path) {
    let url = server.create_database("follow_one");
    let instance = Instance::start(dir, "pg-one", &url, &[]).await;
    let pool = writer(&url).await;
    other_writers_rows_are_let_through(&instance, &pool, "postgres").await;
}

async fn a_transaction_that_commits_last_with_the_smaller_id_is_followed(
    server: &postgres::Postgres,
    dir: &std::path::Path,
) {
    let url = server.create_database("follow_order");
    let instance = Instance::start(dir, "pg-order", &url, &[]).await;
    let pool = writer(&url).await;
    // The first transaction takes the smaller id and holds it open…
    let mut first = pool.begin().await.unwrap();
    let small: i64 = sqlx::query_scalar(
        "INSERT INTO users (name, email) VALUES ('slow', 's@example.com') RETURNING id",
    )
    .fetch_one(&mut *first)
    .await
    .unwrap();
    // …while a second one takes a larger id and commits, and is followed.
    let large = write_row(&pool).await;
    assert!(small < large);
    until_found(&[&instance], large, "the larger id").await;
    tokio::time::sleep(Duration::from_millis(600)).await; // more follow steps pass it
    assert_eq!(instance.get(small).await, StatusCode::NOT_FOUND);
    first.commit().await.unwrap();
    let took = until_found(&[&instance], small, "the smaller id committed last").await;
    println!("postgres: the smaller id committed last let through {took:?} after its commit");
}

async fn rows_committed_while_the_connection_is_down_are_caught_up(
    server: &postgres::Postgres,
    dir: &std::path::Path,
) {
    let direct = server.create_database("follow_down");
    let proxy = fault::FaultProxy::start(([127, 0, 0, 1], server.port()).into()).await;
    let through_proxy = direct.replace(
        &format!("127.0.0.1:{}", server.port()),
        &proxy.addr().to_string(),
    );
    let instance = Instance::start(dir, "pg-down", &through_proxy, &[]).await;
    let pool = writer(&direct).await;
    let before = write_row(&pool).await;
    until_found(&[&instance], before, "before the fault").await;

    // The service's connections (queries and LISTEN) are reset, and new ones too.
    proxy.set_mode(fault::Mode::Reset).await;
    let mut written = Vec::new();
    for _ in 0..20 {
        written.push(write_row(&pool).await);
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    proxy.set_mode(fault::Mode::Pass).await;
    let start = Instant::now();
    for &id in &written {
        until_found(&[&instance], id, "committed while the connection was down").await;
    }
    println!(
        "postgres: 20 rows committed while the connection was down, let through {:?} after it came back",
        start.elapsed()
    );
}

/// Three instances on one database and one Redis.
async fn a_fleet_follows_an_outside_writer_and_survives_its_follower_killed(
    server: &postgres::Postgres,
    dir: &std::path::Path,
) {
    let Some(redis) = redis::start() else {
        return;
    };
    let url = server.create_database("follow_fleet");
    let redis_url = redis.url();
    let fleet = [
        "--redis",
        &redis_url,
        "--filter-seed",
        "0x5eed",
        "--filter-capacity",
        "100000",
    ];
    let mut instances = Vec::new();
    for n in 0..3 {
        instances.push(Instance::start(dir, &format!("fleet-{n}"), &url, &fleet).await);
    }
    let pool = writer(&url).await;

    // Creates sent to random instances: ids come from the database, none collides.
    let client = client();
    let mut created = Vec::new();
    for n in 0..60 {
        let instance = &instances[fastrand::usize(..instances.len())];
        let response = client
            .post(format!("{}/users", instance.url))
            .json(&serde_json::json!({"name": format!("u{n}"), "email": "u@example.com"}))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::CREATED, "create {n}");
        let user: serde_json::Value = response.json().await.unwrap();
        created.push(user["id"].as_i64().unwrap());
    }
    for &id in &created {
        for instance in &instances {
            assert_eq!(instance.get(id).await, StatusCode::OK, "created {id}");
        }
    }

    // An outside writer under a steady load: the delay to "let through everywhere".
    let all: Vec<&Instance> = instances.iter().collect();
    let mut delays = Vec::new();
    for _ in 0..40 {
        let id = write_row(&pool).await;
        delays.push(until_found(&all, id, "the fleet").await);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    delays.sort();
    let at = |q: f64| delays[((delays.len() - 1) as f64 * q).round() as usize];
    println!(
        "fleet of 3: commit to let through on every instance over {} rows: p50 {:?}, p99 {:?}, max {:?}",
        delays.len(),
        at(0.5),
        at(0.99),
        delays[delays.len() - 1]
    );

    // Idle: the database queries per second of the whole fleet.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let mut before = 0.0;
    for instance in &instances {
        before += instance.db_queries().await;
    }
    tokio::time::sleep(Duration::from_secs(10)).await;
    let mut after = 0.0;
    for instance in &instances {
        after += instance.db_queries().await;
    }
    println!(
        "fleet of 3, idle: {:.2} database queries per second for the whole fleet",
        (after - before) / 10.0
    );

    // The follower dies mid-stream: rows keep coming, another takes over, none is missed.
    let follower = instances
        .iter()
        .position(|i| i.log().contains("following the source for the fleet"))
        .expect("one instance follows");
    let mut killed = instances.remove(follower);
    let writing = {
        let pool = pool.clone();
        tokio::spawn(async move {
            let mut ids = Vec::new();
            for _ in 0..100 {
                ids.push(write_row(&pool).await);
                tokio::time::sleep(Duration::from_millis(30)).await;
            }
            ids
        })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    killed.process.signal(Signal::Kill);
    let ids = writing.await.unwrap();
    let rest: Vec<&Instance> = instances.iter().collect();
    // Until the killed instance's heartbeats are missed for `member_timeout` (30 s), the
    // others are stale and let every id through: wait until another holds the lease and both
    // are fresh, so that what passes below passes because the filters hold it.
    let deadline = Instant::now() + Duration::from_secs(50);
    while !rest
        .iter()
        .any(|i| i.log().contains("following the source for the fleet"))
    {
        assert!(
            Instant::now() < deadline,
            "no other instance took the follow lease over:\n{}",
            rest[0].log()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for instance in &rest {
        while instance.metric("bloom_redis_stale").await != 0.0 {
            assert!(
                Instant::now() < deadline,
                "still stale:\n{}",
                instance.log()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    let mut let_through_stale = 0.0;
    for instance in &rest {
        let_through_stale += instance.metric("bloom_redis_stale_let_through_total").await;
    }
    let start = Instant::now();
    for &id in &ids {
        until_found(&rest, id, "written while the follower was killed").await;
    }
    let mut after = 0.0;
    for instance in &rest {
        after += instance.metric("bloom_redis_stale_let_through_total").await;
    }
    assert_eq!(
        after, let_through_stale,
        "ids were let through because an instance was stale, not because its filter held them"
    );
    println!(
        "fleet: follower killed; {} rows written meanwhile all let through by both others while fresh ({:?})",
        ids.len(),
        start.elapsed()
    );
    // And the new follower follows.
    let id = write_row(&pool).await;
    let took = until_found(&rest, id, "after the takeover").await;
    println!("fleet: after the takeover, a row let through on both in {took:?}");
    drop(killed);
}

/// A new database `name` with an empty `orders(id UUID)` table whose ids the server draws.
async fn uuid_orders(server: &postgres::Postgres, name: &str) -> sqlx::PgPool {
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(2)
        .connect(&server.create_database(name))
        .await
        .unwrap();
    pool.execute("CREATE TABLE orders (id UUID PRIMARY KEY DEFAULT gen_random_uuid())")
        .await
        .unwrap();
    pool
}

/// The library over `orders(id UUID)`: no id order at all. A restart from the snapshot after
/// another writer added rows serves caught up, and holds every row.
async fn a_uuid_table_restarted_from_its_snapshot_is_caught_up(
    server: &postgres::Postgres,
    dir: &std::path::Path,
) {
    use bloom_tower::key_source::change_log::ChangeLog;
    use bloom_tower::shared_filter::Started;
    use bloom_tower::{BloomFilter, SharedFilter};

    let pool = uuid_orders(server, "follow_uuid").await;
    let orders = ChangeLog::<String, sqlx::Postgres>::postgres(pool.clone(), "orders", "id")
        .unwrap()
        .cast_to("TEXT")
        .unwrap();
    orders.install().await.unwrap();
    pool.execute("INSERT INTO orders SELECT FROM generate_series(1, 1000)")
        .await
        .unwrap();
    let snapshot = dir.join("orders.bloom");
    let start = || {
        SharedFilter::<String>::builder()
            .name("orders")
            .snapshot(&snapshot)
            .start(BloomFilter::new(100_000, 0.001).unwrap(), &orders)
    };
    let (filter, started) = start().await.unwrap();
    assert!(
        matches!(started, Started::Rebuilt { keys: 1000, .. }),
        "{started:?}"
    );
    filter.save_snapshot().await.unwrap();
    drop(filter);
    // Another writer while the service is down.
    pool.execute("INSERT INTO orders SELECT FROM generate_series(1, 300)")
        .await
        .unwrap();
    let (filter, started) = start().await.unwrap();
    assert!(matches!(started, Started::CaughtUp { .. }), "{started:?}");
    assert!(!filter.is_verifying());
    let all: Vec<String> = sqlx::query_scalar("SELECT id::text FROM orders")
        .fetch_all(&pool)
        .await
        .unwrap();
    assert_eq!(all.len(), 1300);
    for id in &all {
        assert!(filter.contains(id.as_str()), "{id}");
    }
    println!("postgres uuid table: restarted from its snapshot {started:?}, all 1300 rows held");
}

/// `orders(id UUID)` read natively (feature `uuid`: no `cast_to`, no newtype): a
/// `ChangeLog<Uuid, Postgres>` fills a `SharedFilter<Uuid>` and follows rows another writer
/// commits, which are then held as the same keys a `Uuid` parsed from text is.
async fn a_uuid_column_is_followed_as_uuid_keys(server: &postgres::Postgres) {
    use bloom_tower::key_source::change_log::ChangeLog;
    use bloom_tower::shared_filter::{Follow, Started};
    use bloom_tower::{BloomFilter, SharedFilter};
    use uuid::Uuid;

    let pool = uuid_orders(server, "follow_uuid_native").await;
    let orders = ChangeLog::<Uuid, sqlx::Postgres>::postgres(pool.clone(), "orders", "id").unwrap();
    orders.install().await.unwrap();
    pool.execute("INSERT INTO orders SELECT FROM generate_series(1, 1000)")
        .await
        .unwrap();
    let (filter, started) = SharedFilter::<Uuid>::builder()
        .name("orders")
        .start(BloomFilter::new(100_000, 0.001).unwrap(), &orders)
        .await
        .unwrap();
    assert!(
        matches!(started, Started::Rebuilt { keys: 1000, .. }),
        "{started:?}"
    );
    let following = filter.follow(orders, Follow::every(Duration::from_millis(50)));
    // Another writer, behind the service's back.
    let added: Vec<Uuid> =
        sqlx::query_scalar("INSERT INTO orders SELECT FROM generate_series(1, 300) RETURNING id")
            .fetch_all(&pool)
            .await
            .unwrap();
    let committed = Instant::now();
    let deadline = committed + Duration::from_secs(10);
    while !added.iter().all(|id| filter.contains(id)) {
        assert!(Instant::now() < deadline, "the new rows were not followed");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let took = committed.elapsed();
    let rows: Vec<(Uuid, String)> = sqlx::query_as("SELECT id, id::text FROM orders")
        .fetch_all(&pool)
        .await
        .unwrap();
    assert_eq!(rows.len(), 1300);
    let parsed = |text: &str| text.parse::<Uuid>().unwrap();
    assert!(
        rows.iter()
            .all(|(id, text)| filter.contains(id) && filter.contains(&parsed(text))),
        "every row is held, read as a UUID or parsed from its text"
    );
    following.shutdown().await;
    println!("postgres uuid column: 300 rows of another writer followed in {took:?}");
}

/// `ChangeLog::install` on a log that exists (an instance starting beside running ones)
/// while another writer's transaction holds the table and then inserts (its trigger writes
/// the log): both succeed, neither is chosen as a deadlock's victim.
async fn installing_beside_a_writer_does_not_deadlock(server: &postgres::Postgres) {
    use bloom_tower::key_source::change_log::ChangeLog;

    let pool = uuid_orders(server, "follow_install").await;
    let log = ChangeLog::<String, sqlx::Postgres>::postgres(pool.clone(), "orders", "id").unwrap();
    log.install().await.unwrap();
    // The pool's two connections: the writer's, and the install's.
    let mut tx = pool.begin().await.unwrap();
    // The writer holds the table (as its INSERT does) before its trigger touches the log.
    (&mut *tx)
        .execute("LOCK TABLE orders IN ROW EXCLUSIVE MODE")
        .await
        .unwrap();
    let installing = tokio::spawn(async move { log.install().await });
    // Long enough for the install to take whatever it takes before it waits for the table.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let inserted = (&mut *tx)
        .execute("INSERT INTO orders DEFAULT VALUES")
        .await;
    let committed = match inserted {
        Ok(_) => tx.commit().await,
        Err(error) => Err(error),
    };
    let installed = installing.await.unwrap();
    assert!(
        committed.is_ok() && installed.is_ok(),
        "writer: {committed:?}; install: {installed:?}"
    );
}
