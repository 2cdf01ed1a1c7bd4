//! End-to-end tests of the `user_service` example: the service runs in-process on an
//! ephemeral port on 127.0.0.1, against a temporary SQLite database (one test per
//! scenario) and against a throwaway PostgreSQL server (`postgres_suite`: every scenario on
//! one server, each on its own database), and is driven over TCP with a real HTTP client.
//!
//! The PostgreSQL suite fails under `CI=true` when PostgreSQL is not installed, and is
//! skipped with a loud message otherwise; see `bloom_tests::servers::postgres`.
#![forbid(unsafe_code)]

use std::collections::HashMap;
use std::time::Duration;

use bloom_examples::db::Db;
use bloom_examples::user_service::{self, Config, RunningService};
use bloom_tests::servers::{postgres, redis};
use reqwest::StatusCode;
use serde_json::{Value, json};

/// Users seeded into every test database: ids 1..=SEEDED.
const SEEDED: u64 = 1_000;

/// Where a scenario's service keeps its data.
struct Backend {
    /// `sqlite` or `postgres`: part of the service name (the metrics label).
    kind: &'static str,
    /// The data directory: SQLite file (for SQLite) and filter snapshot.
    data: tempfile::TempDir,
    /// `postgres://…`, or `None` for SQLite in the data directory.
    database_url: Option<String>,
}

impl Backend {
    const SQLITE: bloom_examples::db::Backend = bloom_examples::db::Backend::Sqlite;
    const POSTGRES: bloom_examples::db::Backend = bloom_examples::db::Backend::Postgres;

    fn sqlite() -> Backend {
        Backend {
            kind: "sqlite",
            data: tempfile::tempdir().expect("a temporary directory"),
            database_url: None,
        }
    }

    fn postgres(server: &postgres::Postgres, scenario: &str) -> Backend {
        Backend {
            kind: "postgres",
            data: tempfile::tempdir().expect("a temporary directory"),
            database_url: Some(server.create_database(scenario)),
        }
    }

    /// The service's settings; `name` is unique per scenario and backend, since every
    /// service in this process shares one metrics registry.
    fn config(&self, scenario: &str) -> Config {
        Config {
            name: format!("{scenario}-{}", self.kind),
            data_dir: self.data.path().to_owned(),
            database_url: self.database_url.clone(),
            // No scheduled rebuild during a test: its query would move the DB counter.
            rebuild_every: Duration::from_secs(3600),
            // Other writers are followed at start only: these tests count the statements
            // the service sends, and every write here goes through it (tests/follow.rs
            // covers following).
            follow_every: Duration::from_secs(3600),
            max_connections: 4,
            ..Config::default()
        }
    }

    /// Seeds `SEEDED` users and starts the service.
    async fn start(&self, scenario: &str) -> RunningService {
        self.start_with(scenario, |_| {}).await
    }

    /// Seeds `SEEDED` users and starts the service with `configure`'s changes.
    async fn start_with(
        &self,
        scenario: &str,
        configure: impl FnOnce(&mut Config),
    ) -> RunningService {
        let mut config = self.config(scenario);
        configure(&mut config);
        let url = config.resolved_database_url().expect("a database URL");
        let db = Db::connect(&url, 2, &format!("{scenario}-seed"))
            .await
            .expect("connecting to the test database");
        let expected = match self.kind {
            "postgres" => Backend::POSTGRES,
            _ => Backend::SQLITE,
        };
        assert_eq!(db.backend(), expected, "{url}");
        assert_eq!(db.count_users().await.unwrap(), 0, "a fresh database");
        let ids = db.seed(SEEDED, |_| {}).await.expect("seeding");
        assert_eq!(ids, 1..SEEDED + 1);
        db.close().await;
        user_service::spawn(config, 0)
            .await
            .expect("starting the service")
    }
}

fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .expect("an HTTP client")
}

async fn get(client: &reqwest::Client, url: String) -> (StatusCode, String) {
    let response = client
        .get(&url)
        .send()
        .await
        .unwrap_or_else(|e| panic!("GET {url}: {e}"));
    let status = response.status();
    (status, response.text().await.expect("a body"))
}

/// `GET /metrics`, checked line by line for the text exposition format, then parsed.
async fn scrape(
    client: &reqwest::Client,
    service: &RunningService,
) -> Vec<prometheus_parse::Sample> {
    let response = client
        .get(format!("{}/metrics", service.url()))
        .send()
        .await
        .expect("GET /metrics");
    assert_eq!(response.status(), StatusCode::OK);
    let content_type = response.headers()[reqwest::header::CONTENT_TYPE]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(
        content_type.starts_with("text/plain"),
        "content type {content_type}"
    );
    let text = response.text().await.unwrap();
    for line in text.lines() {
        check_exposition_line(line);
    }
    let scrape = prometheus_parse::Scrape::parse(text.lines().map(|line| Ok(line.to_owned())))
        .expect("/metrics parses as Prometheus text");
    scrape.samples
}

/// One line of the Prometheus text format (version 0.0.4), strictly: blank, `# HELP name …`,
/// `# TYPE name counter|gauge|histogram|summary|untyped`, or `name{label="value",…} value`.
fn check_exposition_line(line: &str) {
    fn is_name(name: &str, colons: bool) -> bool {
        let mut chars = name.chars();
        chars
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || (colons && c == ':'))
            && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || (colons && c == ':'))
    }
    if line.is_empty() {
        return;
    }
    if let Some(comment) = line.strip_prefix("# ") {
        let mut words = comment.splitn(3, ' ');
        match (words.next(), words.next(), words.next()) {
            (Some("HELP"), Some(name), _) => assert!(is_name(name, true), "bad HELP line {line:?}"),
            (Some("TYPE"), Some(name), Some(kind)) => assert!(
                is_name(name, true)
                    && ["counter", "gauge", "histogram", "summary", "untyped"].contains(&kind),
                "bad TYPE line {line:?}"
            ),
            _ => {} // other comments are allowed
        }
        return;
    }
    let (series, value) = line
        .rsplit_once(' ')
        .unwrap_or_else(|| panic!("no value in {line:?}"));
    assert!(
        value.parse::<f64>().is_ok() || ["+Inf", "-Inf", "NaN"].contains(&value),
        "bad value in {line:?}"
    );
    let (name, labels) = match series.split_once('{') {
        Some((name, rest)) => (
            name,
            Some(
                rest.strip_suffix('}')
                    .unwrap_or_else(|| panic!("unclosed labels in {line:?}")),
            ),
        ),
        None => (series, None),
    };
    assert!(is_name(name, true), "bad metric name in {line:?}");
    if let Some(mut rest) = labels {
        while !rest.is_empty() {
            let (label, after) = rest
                .split_once("=\"")
                .unwrap_or_else(|| panic!("bad label in {line:?}"));
            assert!(is_name(label, false), "bad label name in {line:?}");
            // The value runs to the first unescaped quote.
            let mut end = None;
            let mut escaped = false;
            for (i, c) in after.char_indices() {
                match (escaped, c) {
                    (true, _) => escaped = false,
                    (false, '\\') => escaped = true,
                    (false, '"') => {
                        end = Some(i);
                        break;
                    }
                    _ => {}
                }
            }
            let end = end.unwrap_or_else(|| panic!("unterminated label value in {line:?}"));
            rest = &after[end + 1..];
            rest = rest.strip_prefix(',').unwrap_or(rest);
        }
    }
}

/// The value of `name{label="value"}` in a scrape.
fn sample(
    samples: &[prometheus_parse::Sample],
    name: &str,
    label: &str,
    value: &str,
) -> Option<f64> {
    samples
        .iter()
        .find(|s| s.metric == name && s.labels.get(label) == Some(value))
        .map(|s| match s.value {
            prometheus_parse::Value::Counter(v)
            | prometheus_parse::Value::Gauge(v)
            | prometheus_parse::Value::Untyped(v) => v,
            _ => panic!("{name} is not a plain sample"),
        })
}

async fn db_queries(client: &reqwest::Client, service: &RunningService) -> f64 {
    let name = &service.app.config().name;
    sample(
        &scrape(client, service).await,
        "user_service_db_queries_total",
        "service",
        name,
    )
    .unwrap_or_else(|| panic!("user_service_db_queries_total{{service={name:?}}} in /metrics"))
}

// ---- the scenarios, run against each backend --------------------------------------------

/// A real id → 200 with the user.
async fn real_id_is_found(backend: Backend) {
    let service = backend.start("real_id").await;
    let client = client();
    for id in [1, 2, SEEDED / 2, SEEDED] {
        let (status, body) = get(&client, format!("{}/users/{id}", service.url())).await;
        assert_eq!(status, StatusCode::OK, "GET /users/{id}: {body}");
        let user: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(
            user,
            json!({ "id": id, "name": format!("user {id}"), "email": format!("user{id}@example.com") })
        );
    }
    // The second lookup of an id is a cache hit: no new query.
    let before = db_queries(&client, &service).await;
    let (status, _) = get(&client, format!("{}/users/1", service.url())).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(db_queries(&client, &service).await, before);
    service.shutdown().await.unwrap();
}

/// Absent ids → 404, and those the filter rejects never reach the database.
async fn absent_ids_do_not_reach_the_database(backend: Backend) {
    let service = backend.start("absent_ids").await;
    let client = client();
    let filter = service.app.filter().expect("a guarded service").clone();
    let rejected: Vec<u64> = (1_000_000_000u64..)
        .filter(|id| !filter.contains(id))
        .take(300)
        .collect();

    let before = db_queries(&client, &service).await;
    for id in &rejected {
        let (status, body) = get(&client, format!("{}/users/{id}", service.url())).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "GET /users/{id}: {body}");
        assert_eq!(
            serde_json::from_str::<Value>(&body).unwrap(),
            json!({ "error": "no such user" })
        );
    }
    assert_eq!(
        db_queries(&client, &service).await,
        before,
        "a rejected id reached the database"
    );
    assert_eq!(service.app.stats().guard.rejected, rejected.len() as u64);
    // The guard marks its own answers.
    let response = client
        .get(format!("{}/users/{}", service.url(), rejected[0]))
        .send()
        .await
        .unwrap();
    assert_eq!(response.headers()["x-bloom-guard"], "rejected");

    // Any absent ids: all 404, and the only ones that reach the database are the filter's
    // false positives, each loaded once (then negative-cached).
    let stats = service.app.stats();
    for id in 2_000_000_000u64..2_000_000_500 {
        for _ in 0..2 {
            let (status, _) = get(&client, format!("{}/users/{id}", service.url())).await;
            assert_eq!(status, StatusCode::NOT_FOUND, "GET /users/{id}");
        }
    }
    let after = service.app.stats();
    let passed = after.guard.passed - stats.guard.passed;
    assert_eq!(
        after.db_queries - stats.db_queries,
        passed / 2,
        "one query per false positive"
    );
    assert_eq!(after.negative_hits - stats.negative_hits, passed / 2);
    assert!(
        passed / 2 < 50,
        "{} false positives in 500 absent ids",
        passed / 2
    );

    // Not a number: a 400 from the `Path` extractor, no query either.
    let before = db_queries(&client, &service).await;
    let (status, _) = get(&client, format!("{}/users/abc", service.url())).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(db_queries(&client, &service).await, before);
    service.shutdown().await.unwrap();
}

/// A created user is found right after the `POST`, even if its id was looked up (and
/// found missing) just before.
async fn created_user_is_found_at_once(backend: Backend) {
    let service = backend.start("created_user").await;
    let client = client();
    let next = SEEDED + 1;
    // Look the next id up first, twice: a "not found" is cached if the filter lets it by.
    for _ in 0..2 {
        let (status, _) = get(&client, format!("{}/users/{next}", service.url())).await;
        assert_eq!(status, StatusCode::NOT_FOUND);
    }
    for n in 0..20u64 {
        let response = client
            .post(format!("{}/users", service.url()))
            .json(&json!({ "name": format!("Ada {n}"), "email": format!("ada{n}@example.com") }))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::CREATED);
        let location = response.headers()[reqwest::header::LOCATION]
            .to_str()
            .unwrap()
            .to_owned();
        let created: Value = response.json().await.unwrap();
        let id = created["id"].as_u64().expect("an id");
        assert_eq!(id, next + n, "ids follow the seeded ones");
        assert_eq!(location, format!("/users/{id}"));
        let (status, body) = get(&client, format!("{}/users/{id}", service.url())).await;
        assert_eq!(
            status,
            StatusCode::OK,
            "GET /users/{id} right after POST: {body}"
        );
        assert_eq!(serde_json::from_str::<Value>(&body).unwrap(), created);
        assert_eq!(created["name"], format!("Ada {n}"));
    }
    // A bad body is refused.
    let response = client
        .post(format!("{}/users", service.url()))
        .json(&json!({ "name": "", "email": "nobody" }))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::UNPROCESSABLE_ENTITY);
    // Deleted: 404 (the id stays in the filter; the database answers).
    let (status, _) = get(&client, format!("{}/users/5", service.url())).await;
    assert_eq!(status, StatusCode::OK);
    let response = client
        .delete(format!("{}/users/5", service.url()))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::NO_CONTENT);
    let response = client
        .get(format!("{}/users/5", service.url()))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::NOT_FOUND);
    // The database answered this 404, not the guard: no mark.
    assert!(response.headers().get("x-bloom-guard").is_none());
    service.shutdown().await.unwrap();
}

/// With `--counting` or `--cuckoo` (`kind`), a deleted user's id is taken out of the filter:
/// the next lookup is rejected by the guard without a database query; the other users are
/// still found.
async fn deleted_user_is_rejected_by_a_removing_filter(backend: Backend, kind: &str) {
    let service = backend
        .start_with(kind, |config| {
            config.counting = kind == "counting";
            config.cuckoo = kind == "cuckoo";
            // A fixed hash key: whether an id collides with others is then fixed too.
            config.filter_seed = Some(0xC0FFEE);
        })
        .await;
    let client = client();
    let filter = service.app.filter().expect("a guarded service").clone();
    assert_eq!(filter.stats().kind, kind);
    // Created through the service (inserted once, so one removal takes it out) and seeded
    // (inserted by the rebuild from the database).
    let response = client
        .post(format!("{}/users", service.url()))
        .json(&json!({ "name": "Grace", "email": "grace@example.com" }))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::CREATED);
    let created: Value = response.json().await.unwrap();
    let created = created["id"].as_u64().unwrap();
    for id in [created, 7] {
        let url = format!("{}/users/{id}", service.url());
        assert_eq!(get(&client, url.clone()).await.0, StatusCode::OK);
        let response = client.delete(&url).send().await.unwrap();
        assert_eq!(response.status(), StatusCode::NO_CONTENT);
        // Rejected by the guard: no database query. (With this hash key neither id
        // collides with the others; with another one each would with p ≤ 1%.)
        assert!(!filter.contains(&id), "{id} still passes the filter");
        let before = db_queries(&client, &service).await;
        assert_eq!(get(&client, url.clone()).await.0, StatusCode::NOT_FOUND);
        assert_eq!(db_queries(&client, &service).await, before, "GET {url}");
    }
    assert_eq!(filter.stats().removes, 2);
    // Every other user is still let through.
    assert!(
        (1..=SEEDED)
            .filter(|&id| id != 7)
            .all(|id| filter.contains(&id))
    );
    let (status, _) = get(&client, format!("{}/users/8", service.url())).await;
    assert_eq!(status, StatusCode::OK);
    service.shutdown().await.unwrap();
}

/// `/metrics` is valid Prometheus text with the guard, cache, filter and database series.
async fn metrics_are_prometheus_text(backend: Backend) {
    let service = backend.start("metrics").await;
    let client = client();
    let name = service.app.config().name.clone();
    for id in [1u64, 1, 2, 3_000_000_000, 3_000_000_001, 3_000_000_002] {
        let _ = get(&client, format!("{}/users/{id}", service.url())).await;
    }
    let samples = scrape(&client, &service).await;
    let expect = |metric: &str, label: &str| {
        sample(&samples, metric, label, &name)
            .unwrap_or_else(|| panic!("{metric}{{{label}={name:?}}} missing from /metrics"))
    };
    assert_eq!(expect("bloom_guard_checked_total", "guard"), 6.0);
    assert_eq!(
        expect("bloom_guard_passed_total", "guard") + expect("bloom_guard_rejected_total", "guard"),
        6.0
    );
    assert!(expect("bloom_guard_rejected_total", "guard") >= 1.0);
    assert!(expect("bloom_cache_hits_total", "cache") >= 1.0);
    assert!(expect("bloom_cache_loads_total", "cache") >= 2.0);
    let _ = expect("bloom_cache_negative_hits_total", "cache");
    assert!(expect("user_service_db_queries_total", "service") >= 2.0);
    let _ = expect("user_service_db_misses_total", "service");
    let fpr = expect("user_service_measured_fpr", "service");
    assert!((0.0..=1.0).contains(&fpr));
    // The library's rate counts the guard's rejections with the cache's: the app's figure.
    let library = expect("bloom_filter_measured_fpr", "filter");
    assert!(
        (library - fpr).abs() < 1e-9,
        "bloom_filter_measured_fpr {library} vs the app's {fpr}"
    );
    assert_eq!(
        expect("bloom_filter_rejections_total", "filter"),
        expect("bloom_guard_rejected_total", "guard")
            + expect("bloom_cache_filter_rejections_total", "cache")
    );
    let fill = expect("user_service_filter_fill_ratio", "service");
    assert!(fill > 0.0 && fill < 1.0, "fill {fill}");
    let estimated = expect("user_service_filter_estimated_fpr", "service");
    assert!(
        estimated > 0.0 && estimated < 0.05,
        "estimated FPR {estimated}"
    );
    let keys = expect("user_service_filter_estimated_keys", "service");
    assert!(
        (keys - SEEDED as f64).abs() < SEEDED as f64 * 0.1,
        "estimated keys {keys}"
    );
    assert!(expect("bloom_filter_rebuilds_total", "filter") >= 1.0);
    service.shutdown().await.unwrap();
}

/// Graceful shutdown saves the snapshot; a restart loads it (no rebuild from the database)
/// and finds every user, including those created just before the shutdown.
async fn restart_from_snapshot_finds_every_user(backend: Backend) {
    let service = backend.start("restart").await;
    let client = client();
    let mut created = Vec::new();
    for n in 0..10 {
        let response = client
            .post(format!("{}/users", service.url()))
            .json(
                &json!({ "name": format!("Grace {n}"), "email": format!("grace{n}@example.com") }),
            )
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::CREATED);
        created.push(
            response.json::<Value>().await.unwrap()["id"]
                .as_u64()
                .unwrap(),
        );
    }
    let config = service.app.config().clone();
    service.shutdown().await.unwrap();
    assert!(
        config.snapshot_path().is_file(),
        "shutdown saved the snapshot"
    );

    // The same name: a snapshot saved by another filter name is refused (and rebuilt).
    let restarted = user_service::spawn(config, 0).await.unwrap();
    let filter = restarted.app.filter().unwrap().stats();
    assert_eq!(
        filter.rebuilds, 0,
        "loaded from the snapshot, not rebuilt from the database"
    );
    assert!(
        !filter.verifying,
        "caught up from the database, not verifying"
    );
    let mut statuses: HashMap<StatusCode, u64> = HashMap::new();
    for id in (1..=SEEDED).chain(created.iter().copied()) {
        let (status, body) = get(&client, format!("{}/users/{id}", restarted.url())).await;
        assert_eq!(
            status,
            StatusCode::OK,
            "GET /users/{id} after the restart: {body}"
        );
        *statuses.entry(status).or_default() += 1;
    }
    assert_eq!(statuses[&StatusCode::OK], SEEDED + created.len() as u64);
    assert_eq!(restarted.app.stats().guard.rejected, 0);
    restarted.shutdown().await.unwrap();
}

/// The watermark a snapshot records is a position in commit order: a row committed after it
/// is in `keys_since`, even with an id below every id already present (what another writer,
/// or a transaction that took its id first and committed last, produces).
async fn watermark_is_in_commit_order(backend: Backend) {
    use bloom_tower::KeySource;
    use futures_util::TryStreamExt;

    let service = backend.start("watermark").await;
    let db = service.app.db().clone();
    let source = db.user_ids().await.unwrap();
    db.insert_user(SEEDED + 100, "Fast", "fast@example.com")
        .await
        .unwrap();
    let watermark = source.watermark().await.unwrap().expect("a watermark");
    // Below the largest id present, committed after the watermark was read.
    db.delete_user(7).await.unwrap();
    db.insert_user(7, "Slow", "slow@example.com").await.unwrap();
    let since: Vec<u64> = source
        .keys_since(&watermark)
        .map_ok(|id| {
            u64::from_le_bytes(
                bloom_tower::Key::key_bytes(&id)
                    .as_ref()
                    .try_into()
                    .unwrap(),
            )
        })
        .try_collect()
        .await
        .unwrap();
    assert!(
        since.contains(&7),
        "keys_since after the watermark: {since:?}"
    );
    service.shutdown().await.unwrap();
}

/// A source that reads what the table held before the create (the rebuild's `SELECT` ran
/// before the commit), then waits for `release` before it yields.
struct ReadBeforeCommit {
    ids: Vec<u64>,
    read: tokio::sync::Notify,
    release: tokio::sync::Notify,
}

impl bloom_tower::KeySource for ReadBeforeCommit {
    type Key = u64;
    type Error = std::io::Error;

    fn keys(
        &self,
    ) -> impl futures_util::Stream<
        Item = Result<impl bloom_tower::key::KeyFor<u64> + Send + '_, std::io::Error>,
    > + Send
    + '_ {
        use futures_util::StreamExt;
        futures_util::stream::once(async move {
            self.read.notify_one();
            self.release.notified().await;
            futures_util::stream::iter(self.ids.iter().copied().map(Ok))
        })
        .flatten()
    }

    // Sized like the real source: a rebuild sized for less would saturate, and auto-grow
    // would start a scheduled rebuild from the database in the middle of the test.
    fn count_hint(&self) -> Option<u64> {
        Some(self.ids.len() as u64)
    }
}

/// Polls a future at most `polls` times, then drops it at its next wake-up: a request
/// cancelled at its `polls`-th `.await`.
struct CancelAfter<F> {
    inner: std::pin::Pin<Box<F>>,
    polls: usize,
}

impl<F: std::future::Future> std::future::Future for CancelAfter<F> {
    type Output = Option<F::Output>;

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        if self.polls == 0 {
            return std::task::Poll::Ready(None);
        }
        self.polls -= 1;
        self.inner.as_mut().poll(cx).map(Some)
    }
}

/// The create path cancelled at each of its `.await`s in turn, with a rebuild that read the
/// table before the commit swapping in afterwards: whenever the row was committed, the user is
/// found (the filter lets it through, the cache has no stale "not found").
async fn a_create_cancelled_at_each_await_is_found(backend: Backend) {
    let service = backend.start("cancelled_create").await;
    let app = service.app.clone();
    let filter = app.filter().unwrap().clone();
    let client = client();
    let mut cancelled_after_commit = 0;
    let (mut polls, mut attempts) = (1, 0);
    loop {
        attempts += 1;
        assert!(attempts < 10_000, "the create never finished");
        // The id the database hands out next (a create cancelled before its commit used one
        // up too).
        let next_sql = match app.db().backend() {
            bloom_examples::db::Backend::Sqlite => {
                "SELECT seq + 1 FROM sqlite_sequence WHERE name = 'users'"
            }
            bloom_examples::db::Backend::Postgres => {
                "SELECT CASE WHEN is_called THEN last_value + 1 ELSE last_value END \
                 FROM users_id_seq"
            }
        };
        let next: i64 = sqlx::query_scalar(next_sql)
            .fetch_one(app.db().pool())
            .await
            .unwrap();
        let id = next as u64;
        // A lookup before the create caches "not found" if the filter lets the id by.
        let _ = get(&client, format!("{}/users/{id}", service.url())).await;
        let email = format!("cancel{attempts}@example.com");
        let mut create = Box::pin(app.create_user("Cancelled", &email));
        // First poll: the id goes into the (old) filter, the INSERT is sent. (Rarely the
        // database answers within that poll: then there is nothing to cancel, and this
        // number of polls is tried again.)
        let first = futures_util::poll!(create.as_mut());
        if first.is_ready() {
            // Committed and finished before any rebuild could read the table: nothing to
            // cancel, and a rebuild from now on reads the row. Try this number again.
            continue;
        }
        let source = std::sync::Arc::new(ReadBeforeCommit {
            ids: (1..=SEEDED).collect(),
            read: tokio::sync::Notify::new(),
            release: tokio::sync::Notify::new(),
        });
        let rebuild = tokio::spawn({
            let (filter, source) = (filter.clone(), std::sync::Arc::clone(&source));
            async move { filter.reload_from(&*source).await.unwrap() }
        });
        source.read.notified().await;
        let finished = CancelAfter {
            inner: create,
            polls: polls - 1,
        }
        .await;
        source.release.notify_one();
        rebuild.await.unwrap();
        // Let whatever the dropped create left to the runtime run (its cache invalidation
        // itself runs in `Drop`).
        tokio::time::sleep(Duration::from_millis(20)).await;
        let committed = app.db().find_user(id).await.unwrap().is_some();
        if committed {
            if finished.is_none() {
                cancelled_after_commit += 1;
            }
            let (status, body) = get(&client, format!("{}/users/{id}", service.url())).await;
            assert_eq!(
                status,
                StatusCode::OK,
                "user {id} committed by a create cancelled after {polls} polls: {body}"
            );
        }
        if finished.is_none() {
            polls += 1;
        } else if cancelled_after_commit > 0 || attempts > 2_000 {
            break;
        } else {
            // A sweep in which no cancellation happened to land between the commit and the
            // create noticing it (timing decides): sweep again.
            polls = 1;
        }
    }
    assert!(
        cancelled_after_commit > 0,
        "no cancellation landed after a commit: the test did not test anything"
    );
    service.shutdown().await.unwrap();
}

// ---- SQLite: one test per scenario -------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_real_id_is_found() {
    real_id_is_found(Backend::sqlite()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_absent_ids_do_not_reach_the_database() {
    absent_ids_do_not_reach_the_database(Backend::sqlite()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_created_user_is_found_at_once() {
    created_user_is_found_at_once(Backend::sqlite()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_deleted_user_is_rejected_by_a_counting_filter() {
    deleted_user_is_rejected_by_a_removing_filter(Backend::sqlite(), "counting").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_deleted_user_is_rejected_by_a_cuckoo_filter() {
    deleted_user_is_rejected_by_a_removing_filter(Backend::sqlite(), "cuckoo").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_metrics_are_prometheus_text() {
    metrics_are_prometheus_text(Backend::sqlite()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_restart_from_snapshot_finds_every_user() {
    restart_from_snapshot_finds_every_user(Backend::sqlite()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_watermark_is_in_commit_order() {
    watermark_is_in_commit_order(Backend::sqlite()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_a_create_cancelled_at_each_await_is_found() {
    a_create_cancelled_at_each_await_is_found(Backend::sqlite()).await;
}

// ---- Redis: two instances, one filter ------------------------------------------------------

/// What every instance of a `--redis` fleet shares: the Redis URL, the hash key and the
/// filter's size (instances must agree on both).
fn redis_fleet(url: &str, capacity: u64) -> impl Fn(&mut Config) + Copy + '_ {
    move |config: &mut Config| {
        config.redis = Some(url.to_owned());
        config.filter_seed = Some(0x5EED_5EED);
        config.filter_capacity = capacity;
    }
}

/// `--redis`: two instances of the service on one database share one filter through a real
/// `redis-server`; a user created through A is let through by B's guard, and absent ids are
/// still rejected by B without a database query.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_two_instances_share_one_filter_through_redis() {
    let Some(server) = redis::start() else {
        return;
    };
    let backend = Backend::sqlite();
    // Small keeps the test quick.
    let url = server.url();
    let shared = redis_fleet(&url, 100_000);
    // A seeds the database and, finding the shared filter empty, fills it from it.
    let a = backend.start_with("redis_a", shared).await;
    let mut config_b = backend.config("redis_b");
    shared(&mut config_b);
    let b = user_service::spawn(config_b, 0)
        .await
        .expect("starting the second instance");
    let client = client();
    let b_filter = b.app.filter().expect("a guarded service").clone();
    assert!((1..=SEEDED).all(|id| b_filter.contains(&id)));

    for n in 0..5 {
        let response = client
            .post(format!("{}/users", a.url()))
            .json(&json!({ "name": format!("Ada {n}"), "email": format!("ada{n}@example.com") }))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::CREATED);
        let created: Value = response.json().await.unwrap();
        let id = created["id"].as_u64().unwrap();
        // Propagation is asynchronous (pub/sub): B lets the id through within moments.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while !b_filter.current().contains(&id) {
            assert!(std::time::Instant::now() < deadline, "{id} never reached B");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let (status, body) = get(&client, format!("{}/users/{id}", b.url())).await;
        assert_eq!(status, StatusCode::OK, "GET {id} from B: {body}");
        assert_eq!(serde_json::from_str::<Value>(&body).unwrap(), created);
    }
    // B still rejects what neither instance has, without asking the database. (`contains`
    // cannot wait for a rejection's confirmation and lets every absent id through on a
    // synchronised filter: the bits are read from the view.)
    let absent: Vec<u64> = (1_000_000..)
        .filter(|id| !b_filter.current().contains(id))
        .take(50)
        .collect();
    let before = db_queries(&client, &b).await;
    for id in absent {
        let (status, _) = get(&client, format!("{}/users/{id}", b.url())).await;
        assert_eq!(status, StatusCode::NOT_FOUND);
    }
    assert_eq!(db_queries(&client, &b).await, before);
    b.shutdown().await.unwrap();
    a.shutdown().await.unwrap();
}

/// `--redis` and a restart: an instance that stopped (saving its snapshot) and starts again
/// restores the snapshot's bits, so joining downloads only the segments that changed while it
/// was down; started without a snapshot, it downloads every segment holding a bit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_a_redis_instance_restarted_from_its_snapshot_downloads_only_what_changed() {
    let Some(server) = redis::start() else {
        return;
    };
    let backend = Backend::sqlite();
    // 2.4 MB of bits: 37 segments of 64 KiB, every one holding some of the seeded ids.
    let url = server.url();
    let shared = redis_fleet(&url, 2_000_000);
    let a = backend.start_with("restart_a", shared).await;
    let mut config_b = backend.config("restart_b");
    shared(&mut config_b);
    let b = user_service::spawn(config_b.clone(), 0)
        .await
        .expect("starting B");
    let joined_empty = b.app.redis_stats().unwrap().joined.unwrap();
    assert!(joined_empty.segments_pulled >= 30, "{joined_empty:?}");
    b.shutdown().await.unwrap(); // saves B's snapshot

    // A user is created while B is down.
    let client = client();
    let response = client
        .post(format!("{}/users", a.url()))
        .json(&json!({ "name": "Grace", "email": "grace@example.com" }))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::CREATED);
    let id = response.json::<Value>().await.unwrap()["id"]
        .as_u64()
        .unwrap();

    let b = user_service::spawn(config_b, 0)
        .await
        .expect("starting B again");
    let joined = b.app.redis_stats().unwrap().joined.unwrap();
    // One id created meanwhile: its bits are in one segment (blocked layout).
    assert!(
        joined.full && joined.segments_pulled <= 1 && joined.bytes_pushed == 0,
        "{joined:?}"
    );
    let (status, body) = get(&client, format!("{}/users/{id}", b.url())).await;
    assert_eq!(status, StatusCode::OK, "GET {id} from B: {body}");
    let b_filter = b.app.filter().unwrap();
    assert!((1..=SEEDED).all(|id| b_filter.contains(&id)));
    b.shutdown().await.unwrap();
    a.shutdown().await.unwrap();
}

/// The fleet under a hung Redis (SIGSTOP: a stalled or partitioned server behaves the same):
/// users created through A while Redis hangs are found through B, because B, no longer
/// hearing the fleet's heartbeats, lets would-be rejections through to its cache and
/// database; once Redis resumes, B holds the new ids and rejects absent ones again without a
/// database query.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_users_created_while_redis_hangs_are_found_on_the_other_instance() {
    let Some(mut server) = redis::start() else {
        return;
    };
    let backend = Backend::sqlite();
    let url = server.url();
    let shared = redis_fleet(&url, 100_000);
    let a = backend.start_with("hung_a", shared).await;
    let mut config_b = backend.config("hung_b");
    shared(&mut config_b);
    let b = user_service::spawn(config_b, 0)
        .await
        .expect("starting the second instance");
    let client = client();
    let b_filter = b.app.filter().expect("a guarded service").clone();

    server.pause();
    // Each create waits (bounded) for its id to reach Redis, then commits anyway.
    let creates = (0..10).map(|n| {
        let (client, url) = (client.clone(), a.url());
        async move {
            let response = client
                .post(format!("{url}/users"))
                .json(&json!({ "name": format!("Hung {n}"), "email": format!("hung{n}@example.com") }))
                .send()
                .await
                .unwrap();
            assert_eq!(response.status(), StatusCode::CREATED);
            response.json::<Value>().await.unwrap()["id"].as_u64().unwrap()
        }
    });
    let ids = futures_util::future::join_all(creates).await;
    let mut found = 0;
    for &id in &ids {
        let (status, body) = get(&client, format!("{}/users/{id}", b.url())).await;
        assert_eq!(
            status,
            StatusCode::OK,
            "GET {id} from B while Redis hangs: {body}"
        );
        found += 1;
    }
    assert_eq!(found, 10);
    server.resume();

    // Resumed: B receives the ids and trusts its view again.
    // (An id B's own filter lacks is let through exactly while B's view is stale.)
    let probe = (1_000_000u64..)
        .find(|id| !b_filter.current().contains(id))
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while !ids.iter().all(|id| b_filter.current().contains(id)) || b_filter.check(&probe).await {
        assert!(std::time::Instant::now() < deadline, "B never caught up");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let absent: Vec<u64> = (1_000_000..)
        .filter(|id| !b_filter.current().contains(id))
        .take(20)
        .collect();
    let before = db_queries(&client, &b).await;
    for id in absent {
        let (status, _) = get(&client, format!("{}/users/{id}", b.url())).await;
        assert_eq!(status, StatusCode::NOT_FOUND);
    }
    assert_eq!(
        db_queries(&client, &b).await,
        before,
        "B is fresh: absent ids stay out of the database"
    );
    b.shutdown().await.unwrap();
    a.shutdown().await.unwrap();
}

// ---- PostgreSQL: every scenario on one throwaway server ----------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_suite() {
    let Some(server) = postgres::start_or_skip("postgres_suite") else {
        return;
    };
    real_id_is_found(Backend::postgres(&server, "real_id")).await;
    absent_ids_do_not_reach_the_database(Backend::postgres(&server, "absent_ids")).await;
    created_user_is_found_at_once(Backend::postgres(&server, "created_user")).await;
    deleted_user_is_rejected_by_a_removing_filter(
        Backend::postgres(&server, "counting"),
        "counting",
    )
    .await;
    deleted_user_is_rejected_by_a_removing_filter(Backend::postgres(&server, "cuckoo"), "cuckoo")
        .await;
    metrics_are_prometheus_text(Backend::postgres(&server, "metrics")).await;
    restart_from_snapshot_finds_every_user(Backend::postgres(&server, "restart")).await;
    watermark_is_in_commit_order(Backend::postgres(&server, "watermark")).await;
    a_create_cancelled_at_each_await_is_found(Backend::postgres(&server, "cancelled_create")).await;
}

// ---- The admin routes (`--admin-port`) -----------------------------------------------------

/// `App::admin_router` on a listener of its own, as `--admin-port` serves it: a user written
/// to the database behind the filter's back is let through after `POST …/rebuild`, and the
/// snapshot goes where the service keeps it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_admin_routes_rebuild_and_snapshot() {
    let backend = Backend::sqlite();
    // Other writers are followed only at start (`Backend::config`): the user written behind
    // the filter's back stays out of it until the rebuild this test asks for.
    let service = backend.start("admin").await;
    let name = service.app.config().name.clone();
    let admin = service.app.admin_router().expect("a guarded service");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let admin_url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, admin).await.unwrap() });
    let client = client();

    let filters: Value = client
        .get(format!("{admin_url}/filters"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(filters["filters"][0]["name"], name.as_str(), "{filters}");
    assert_eq!(filters["filters"][0]["rebuilds"], 1, "{filters}");
    let guards: Value = client
        .get(format!("{admin_url}/guards"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(guards["guards"][0]["name"], name.as_str(), "{guards}");
    let checked = guards["guards"][0]["checked"].as_u64().unwrap();
    assert_eq!(checked, service.app.stats().guard.checked, "{guards}");

    // Another writer's user: not in this instance's filter until a rebuild reads the table.
    let filter = service.app.filter().unwrap().clone();
    let id = (SEEDED + 1..).find(|id| !filter.contains(id)).unwrap();
    service
        .app
        .db()
        .insert_user(id, "Behind", "behind@example.com")
        .await
        .unwrap();
    let user_url = format!("{}/users/{id}", service.url());
    assert_eq!(
        get(&client, user_url.clone()).await.0,
        StatusCode::NOT_FOUND
    );

    let response = client
        .post(format!("{admin_url}/filters/{name}/rebuild"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let outcome: Value = response.json().await.unwrap();
    assert_eq!(outcome["outcome"], "rebuilt", "{outcome}");
    assert_eq!(outcome["keys"], SEEDED + 1, "{outcome}");
    assert_eq!(filter.stats().rebuilds, 2);
    assert_eq!(get(&client, user_url).await.0, StatusCode::OK);

    let snapshot = service.app.config().snapshot_path();
    let _ = std::fs::remove_file(&snapshot);
    let response = client
        .post(format!("{admin_url}/filters/{name}/snapshot"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let loaded = bloom_tower::SharedFilter::<u64>::load(&snapshot)
        .await
        .unwrap();
    assert!(loaded.contains(&id));

    let caches: Value = client
        .get(format!("{admin_url}/caches"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(caches["caches"][0]["name"], name.as_str(), "{caches}");
    service.shutdown().await.unwrap();
}
