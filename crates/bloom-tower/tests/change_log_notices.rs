//! `ChangeLog::install` on a real PostgreSQL server, run again as every restart does: the
//! server's notices about objects that exist already ("relation … already exists, skipping")
//! are not sent, so a normal start logs no `sqlx::postgres::notice` lines at INFO.
#![cfg(feature = "postgres")]

#[path = "../../../tests/servers/postgres.rs"]
#[allow(dead_code)]
mod postgres;

use std::io;
use std::sync::{Arc, Mutex};

use bloom_tower::key_source::change_log::ChangeLog;
use sqlx::{Executor as _, Postgres};

struct Sink(Arc<Mutex<String>>);

impl io::Write for Sink {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        self.0
            .lock()
            .unwrap()
            .push_str(&String::from_utf8_lossy(bytes));
        Ok(bytes.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[tokio::test]
async fn installing_again_sends_no_notices() {
    let lines = Arc::new(Mutex::new(String::new()));
    let sink = Arc::clone(&lines);
    tracing_subscriber::fmt()
        .with_max_level(tracing::Level::INFO)
        .with_ansi(false)
        .with_writer(move || Sink(Arc::clone(&sink)))
        .init();
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
