//! `ChangeLog::install` on a real PostgreSQL server, run again as every restart does: the
//! server's notices about objects that exist already ("relation … already exists, skipping")
//! are not sent, so a normal start logs no `sqlx::postgres::notice` lines at INFO.
#![cfg(feature = "postgres")]

#[path = "support/logs.rs"]
mod logs;
#[path = "../../../tests/servers/postgres.rs"]
#[allow(dead_code)]
mod postgres;

use bloom_tower::key_source::change_log::ChangeLog;
use sqlx::{Executor as _, Postgres};

#[tokio::test]
async fn installing_again_sends_no_notices() {
    let lines = logs::logs_at(tracing::Level::INFO);
    let Some(server) = postgres::start_or_skip("change_log_notices") else {
        return;
    };
    let url = server.create_database("change_log_notices");
    let pool = sqlx::PgPool::connect(&url).await.unwrap();
    pool.execute("CREATE TABLE users (id BIGINT PRIMARY KEY)")
        .await
        .unwrap();
    let log = ChangeLog::<i64, Postgres>::postgres(pool.clone(), "users", "id").unwrap();
    log.install().await.unwrap();
    log.install().await.unwrap();
    // The notices would be logged by sqlx as the statements ran; read what was written.
    let written = lines.lock().unwrap().clone();
    assert!(
        !written.contains("already exists"),
        "a second install logged the server's notices:\n{written}"
    );
    // And the log works after the second install.
    pool.execute("INSERT INTO users (id) VALUES (7)")
        .await
        .unwrap();
    use bloom_tower::KeySource as _;
    assert!(log.watermark().await.unwrap().is_some());
}
