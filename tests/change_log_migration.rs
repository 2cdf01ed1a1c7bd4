//! The change log installed by a migration tool, so the application's database role needs no
//! DDL rights: on a throwaway PostgreSQL server, the table's owner runs
//! `ChangeLog::install_sql()` as an `sqlx migrate` migration and then the grants bloom-tower's
//! README lists (read from the README, so the test guards what users copy); the application
//! role and a second writer's role, which may create nothing, then write rows, follow the
//! log (`LISTEN` included) and prune it, and every row is let through.
#![forbid(unsafe_code)]

use std::time::{Duration, Instant};

use bloom_tests::servers::postgres;
use bloom_tower::key_source::change_log::ChangeLog;
use bloom_tower::shared_filter::Follow;
use bloom_tower::{BloomFilter, SharedFilter};
use sqlx::postgres::{PgPool, PgPoolOptions};
use sqlx::{Executor as _, Postgres};

/// The grants of the README's "Migrations" block, for `users(id)`: the statements between the
/// ```` ```sql ```` line after its `<!-- grants: tests/change_log_migration.rs -->` marker and
/// the closing fence, comments dropped.
fn readme_grants() -> Vec<String> {
    let readme = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../crates/bloom-tower/README.md"
    ))
    .unwrap();
    let after = readme
        .split_once("<!-- grants: tests/change_log_migration.rs -->")
        .expect("bloom-tower's README has the grants marker")
        .1;
    let block = after
        .split_once("```sql\n")
        .expect("a ```sql block after the marker")
        .1
        .split_once("```")
        .unwrap()
        .0;
    let statements: Vec<String> = block
        .lines()
        .map(|line| line.split_once("--").map_or(line, |(sql, _)| sql).trim())
        .filter(|line| !line.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
        .split(';')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect();
    assert!(
        statements.iter().all(|s| s.starts_with("GRANT ")),
        "{statements:?}"
    );
    statements
}

async fn connect(url: &str) -> PgPool {
    PgPoolOptions::new()
        .max_connections(4)
        .connect(url)
        .await
        .unwrap_or_else(|e| panic!("connecting to {url}: {e}"))
}

/// `url` with `user` in place of `postgres`.
fn as_role(url: &str, user: &str) -> String {
    url.replacen("postgres://postgres@", &format!("postgres://{user}@"), 1)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_log_installed_by_a_migration_is_followed_and_pruned_by_a_role_without_ddl_rights()
{
    let Some(server) = postgres::start_or_skip("change_log_migration") else {
        return;
    };
    let url = server.create_database("change_log_migration");
    let admin = connect(&url).await;
    for statement in [
        "CREATE ROLE owner LOGIN",
        "CREATE ROLE app LOGIN",
        "CREATE ROLE importer LOGIN",
        "GRANT CREATE ON SCHEMA public TO owner",
    ] {
        admin.execute(statement).await.unwrap();
    }

    // The migrations, run by the owner: the table, then the change log's statements.
    let owner = connect(&as_role(&url, "owner")).await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("0001_users.sql"),
        "CREATE TABLE users (id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY, name TEXT NOT NULL);\n\
         GRANT SELECT, INSERT ON users TO app;\n\
         GRANT INSERT ON users TO importer;\n",
    )
    .unwrap();
    let log = ChangeLog::<i64, Postgres>::postgres(owner.clone(), "users", "id").unwrap();
    let mut migration = log.install_sql().join(";\n");
    migration.push_str(";\n");
    for grant in readme_grants() {
        migration.push_str(&grant);
        migration.push_str(";\n");
    }
    std::fs::write(dir.path().join("0002_bloom_changes_users.sql"), migration).unwrap();
    sqlx::migrate::Migrator::new(dir.path())
        .await
        .unwrap()
        .run(&owner)
        .await
        .unwrap();

    // The application's role may create nothing: `install` is refused, so the test runs with
    // no DDL right at all.
    let app_url = as_role(&url, "app");
    let app = connect(&app_url).await;
    let users = ChangeLog::<i64, Postgres>::postgres(app.clone(), "users", "id").unwrap();
    let refused = users
        .install()
        .await
        .expect_err("the app role has no DDL rights");
    assert!(
        refused.to_string().contains("permission denied")
            || refused.to_string().contains("must be owner"),
        "{refused}"
    );

    let importer = connect(&as_role(&url, "importer")).await;
    let insert = "INSERT INTO users (name) SELECT 'u' || n FROM generate_series(1, 100) n";
    // The ids written since the last call, read by the owner (the importer may not SELECT).
    let mut written: Vec<i64> = Vec::new();
    let new_rows = |after: i64| {
        let owner = owner.clone();
        async move {
            sqlx::query_scalar::<_, i64>("SELECT id FROM users WHERE id > $1 ORDER BY id")
                .bind(after)
                .fetch_all(&owner)
                .await
                .unwrap()
        }
    };
    app.execute(insert).await.unwrap();
    written.extend(new_rows(0).await);
    let filter = SharedFilter::<i64>::new(BloomFilter::new(100_000, 0.001).unwrap());
    filter.reload_from(&users).await.unwrap();
    let following = filter.follow(
        users.clone(),
        Follow::every(Duration::from_secs(2)).wake_on(users.notifications(&app_url)),
    );
    // Both roles write; the importer's rows reach the log through the trigger alone.
    for pool in [&importer, &app, &importer] {
        pool.execute(insert).await.unwrap();
        let more = new_rows(*written.last().unwrap()).await;
        assert_eq!(more.len(), 100);
        written.extend(&more);
        let deadline = Instant::now() + Duration::from_secs(10);
        while !more.iter().all(|id| filter.contains(id)) {
            assert!(
                Instant::now() < deadline,
                "rows written under a role without DDL rights were not followed"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        // The application prunes what it has read: nothing older than now is kept.
        tokio::time::sleep(Duration::from_millis(1100)).await;
        users.prune(Duration::ZERO).await.unwrap();
    }
    let left: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM bloom_changes_users")
        .fetch_one(&owner)
        .await
        .unwrap();
    assert!(left < 300, "pruning removed rows ({left} of 300 left)");
    assert!(written.iter().all(|id| filter.contains(id)));
    assert_eq!(written.len(), 400);
    following.shutdown().await;
    println!(
        "{} rows followed under roles without DDL rights; the log pruned to {left}",
        written.len()
    );
}
