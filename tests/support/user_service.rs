#![allow(dead_code)] // each test uses a part

//! One `user_service` process of a test (the real example binary, on a free port), and the
//! other writer's helpers: shared by the workspace's end-to-end tests of the fleet
//! (`follow.rs`, `fleet_consistency.rs`), included by path.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use bloom_tests::servers::process::{self, Process};
use reqwest::StatusCode;
use sqlx::AnyPool;

/// Users seeded by the first instance.
pub const SEEDED: u64 = 200;
/// The follow interval the services run with (`--follow-secs`).
pub const FOLLOW: &str = "0.25";
/// How long a followed row may take to be let through before a test fails: the bound (one
/// follow interval plus a step; on PostgreSQL a `NOTIFY`) with room for a loaded CI machine.
pub const BOUND: Duration = Duration::from_secs(5);

pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .no_proxy()
        .build()
        .unwrap()
}

/// What `GET /users/{id}` answered ([`Instance::answer`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Answer {
    Found,
    /// The guard's `404` (`x-bloom-guard: rejected`): the filter said "absent".
    Rejected,
    /// The database's `404`: the filter let the id through.
    NotFound,
    Failed,
}

/// One `user_service` process.
pub struct Instance {
    pub process: Process,
    pub url: String,
    pub log: PathBuf,
}

impl Instance {
    /// Starts the binary with `extra` flags on a free port and waits for `GET /health`.
    /// Scheduled rebuilds are off (`--rebuild-secs 3600`) unless `extra` sets them.
    pub async fn start(
        dir: &std::path::Path,
        name: &str,
        database_url: &str,
        extra: &[&str],
    ) -> Self {
        let binary = process::example_binary("bloom-examples", "user_service");
        let data = dir.join(name);
        std::fs::create_dir_all(&data).unwrap();
        let log = dir.join(format!("{name}.log"));
        for _ in 0..5 {
            let port = process::free_port().to_string();
            let data_dir = data.to_str().unwrap();
            let seed = SEEDED.to_string();
            let mut args = vec![
                "--port",
                &port,
                "--seed",
                &seed,
                "--data-dir",
                data_dir,
                "--name",
                name,
                "--database-url",
                database_url,
                "--follow-secs",
                FOLLOW,
            ];
            // Rebuilds only when asked for, unless `extra` schedules them.
            if !extra.contains(&"--rebuild-secs") {
                args.extend_from_slice(&["--rebuild-secs", "3600"]);
            }
            args.extend_from_slice(extra);
            let env = [
                ("RUST_LOG", Some("info,sqlx=warn")),
                ("NO_COLOR", Some("1")),
                ("DATABASE_URL", None),
                ("REDIS_URL", None),
                ("BLOOM_FILTER_SEED", None),
            ];
            let mut process = Process::spawn(&binary, &args, &env, &log);
            let url = format!("http://127.0.0.1:{port}");
            let deadline = Instant::now() + Duration::from_secs(60);
            loop {
                let healthy = client()
                    .get(format!("{url}/health"))
                    .timeout(Duration::from_secs(2))
                    .send()
                    .await
                    .is_ok_and(|r| r.status() == StatusCode::OK);
                if let Some(status) = process.try_status() {
                    let text = std::fs::read_to_string(&log).unwrap_or_default();
                    if text.contains(&format!("binding 127.0.0.1:{port}")) {
                        break; // port taken meanwhile: another one
                    }
                    panic!("{name} exited ({status:?}) before serving:\n{text}");
                }
                if healthy {
                    return Instance { process, url, log };
                }
                assert!(
                    Instant::now() < deadline,
                    "{name} did not start:\n{}",
                    read(&log)
                );
                tokio::time::sleep(Duration::from_millis(25)).await;
            }
        }
        panic!("{name}: no free port in 5 tries");
    }

    pub fn log(&self) -> String {
        read(&self.log)
    }

    /// The status of `GET /users/{id}`.
    pub async fn get(&self, id: i64) -> StatusCode {
        client()
            .get(format!("{}/users/{id}", self.url))
            .send()
            .await
            .map(|r| r.status())
            .unwrap_or(StatusCode::BAD_GATEWAY)
    }

    /// What `GET /users/{id}` answered: the user, the guard's rejection (`404` with
    /// `x-bloom-guard: rejected`), the database's "no such user", or no answer.
    pub async fn answer(&self, id: i64) -> Answer {
        let Ok(response) = client()
            .get(format!("{}/users/{id}", self.url))
            .send()
            .await
        else {
            return Answer::Failed;
        };
        match response.status() {
            StatusCode::OK => Answer::Found,
            StatusCode::NOT_FOUND if response.headers().contains_key("x-bloom-guard") => {
                Answer::Rejected
            }
            StatusCode::NOT_FOUND => Answer::NotFound,
            _ => Answer::Failed,
        }
    }

    /// `POST /users`: the new user's id once the service answered `201`.
    pub async fn create(&self, name: &str) -> i64 {
        let response = client()
            .post(format!("{}/users", self.url))
            .json(&serde_json::json!({"name": name, "email": "u@example.com"}))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::CREATED, "create {name}");
        let user: serde_json::Value = response.json().await.unwrap();
        user["id"].as_i64().unwrap()
    }

    /// `user_service_db_queries_total` for this instance.
    pub async fn db_queries(&self) -> f64 {
        self.metric("user_service_db_queries_total").await
    }

    /// The sum of the samples of `name` on `GET /metrics`.
    pub async fn metric(&self, name: &str) -> f64 {
        let text = client()
            .get(format!("{}/metrics", self.url))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        text.lines()
            .filter(|line| {
                line.strip_prefix(name)
                    .is_some_and(|rest| rest.starts_with([' ', '{']))
            })
            .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    }
}

pub fn read(path: &std::path::Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

/// Waits until every instance answers 200 for `id`: how long it took, or a failure naming the
/// instances that still rejected it.
pub async fn until_found(instances: &[&Instance], id: i64, what: &str) -> Duration {
    let start = Instant::now();
    let mut pending: Vec<&Instance> = instances.to_vec();
    while !pending.is_empty() {
        let mut still = Vec::new();
        for instance in pending {
            if instance.get(id).await != StatusCode::OK {
                still.push(instance);
            }
        }
        pending = still;
        if pending.is_empty() {
            break;
        }
        assert!(
            start.elapsed() < BOUND,
            "{what}: id {id} still 404 on {} instance(s) after {BOUND:?}; log of one:\n{}",
            pending.len(),
            pending[0].log()
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    start.elapsed()
}

/// Another writer: a pool of its own on the same database.
pub async fn writer(url: &str) -> AnyPool {
    sqlx::any::install_default_drivers();
    sqlx::any::AnyPoolOptions::new()
        .max_connections(3)
        .connect(url)
        .await
        .unwrap()
}

/// `INSERT` with the database's next id; the id.
pub async fn write_row(pool: &AnyPool) -> i64 {
    sqlx::query_scalar(
        "INSERT INTO users (name, email) VALUES ('other', 'other@example.com') RETURNING id",
    )
    .fetch_one(pool)
    .await
    .unwrap()
}

/// `INSERT` with an explicit id.
pub async fn write_id(pool: &AnyPool, id: i64) {
    sqlx::query("INSERT INTO users (id, name, email) VALUES ($1, 'other', 'o@example.com')")
        .bind(id)
        .execute(pool)
        .await
        .unwrap();
}
