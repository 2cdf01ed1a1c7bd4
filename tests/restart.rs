//! Process-level fault tests of the `user_service` example across restarts. The promise
//! under test: **a user that exists is never answered 404 by the guard**, whatever way the
//! previous process ended and whoever wrote to the database while it was down.
//!
//! Each test drives the real binary (`cargo build --release -p bloom-examples --example
//! user_service`, built once per test process) as a separate process on a free port, with
//! its data directory (SQLite file, filter snapshot `users.bloom`) in a temporary directory
//! and its output in `service.log` next to it (printed when a test fails):
//!
//! | scenario | how the previous process ended | then |
//! | --- | --- | --- |
//! | SIGKILL | users created through `POST /users` after a snapshot, then `kill -9` | restart |
//! | SIGTERM | the same, then `kill -TERM` (must exit 0 within a bound, like Ctrl-C) | restart |
//! | other writer | `kill -INT` (snapshot saved), then rows inserted straight into the database | restart |
//!
//! After every restart, the first requests once `GET /health` answers 200 are a `GET
//! /users/{id}` for every user in the database: each must be 200. Then a control: ids that
//! were never created are all 404, and the guard itself (not the database) rejects at least
//! 80 of 100 of them (`bloom_guard_rejected_total`), so "fixing" the 404s by not guarding
//! fails too.
//!
//! Every scenario runs on SQLite (one test each) and on PostgreSQL (`postgres_suite`: one
//! throwaway server, one database per scenario). The PostgreSQL suite fails under `CI=true`
//! when PostgreSQL is not installed and is skipped with a loud message otherwise; see
//! `bloom_tests::servers::postgres`.
#![forbid(unsafe_code)]

use std::ops::RangeInclusive;
use std::path::PathBuf;
use std::process::ExitStatus;
use std::time::{Duration, Instant};

use bloom_examples::db::Db;
use bloom_tests::servers::postgres;
use bloom_tests::servers::process::{self, Process, Signal};
use reqwest::StatusCode;
use serde_json::{Value, json};

/// Users the first start seeds into the empty database: ids 1..=SEEDED.
const SEEDED: u64 = 200;
/// Users added while a snapshot is stale (through `POST /users`, or by another writer).
const ADDED: u64 = 5;
/// How long a start may take until `GET /health` answers 200.
const STARTUP: Duration = Duration::from_secs(60);
/// How long a process may take to exit after a signal.
const EXIT: Duration = Duration::from_secs(15);
/// Ids that are never created: the control of every restart.
const ABSENT: RangeInclusive<u64> = 10_000..=10_099;
/// Of the `ABSENT` ids, how many the guard must reject itself (1% false-positive rate:
/// about 99 are expected; a false positive is legitimate, so the bound is loose).
const MIN_REJECTED: u64 = 80;

/// How failure messages introduce the service's log.
const LOG_HEADER: &str = "\n---- service log ";

/// Where a scenario's service keeps its users.
enum Backend {
    /// `users.sqlite` in the data directory.
    Sqlite,
    /// A database of the suite's PostgreSQL server.
    Postgres(String),
}

/// One scenario: a data directory, a log, the binary and the processes started on them.
struct Scenario {
    /// `sigkill-sqlite`, …: the service's `--name` and the prefix of failure messages.
    name: String,
    /// Holds `data/` (the service's `--data-dir`) and `service.log`.
    dir: tempfile::TempDir,
    database_url: Option<String>,
    binary: PathBuf,
    client: reqwest::Client,
    /// Starts so far (numbers the log's sections and failure messages).
    starts: u32,
}

/// A started service that answers `GET /health`.
struct Running {
    process: Process,
    url: String,
    /// `start #n`, for messages.
    label: String,
}

impl Scenario {
    fn new(scenario: &str, backend: Backend) -> Scenario {
        let (kind, database_url) = match backend {
            Backend::Sqlite => ("sqlite", None),
            Backend::Postgres(url) => ("postgres", Some(url)),
        };
        let dir = tempfile::Builder::new()
            .prefix(&format!("bloom-restart-{scenario}-{kind}-"))
            .tempdir()
            .expect("a temporary directory");
        std::fs::create_dir(dir.path().join("data")).expect("creating the data directory");
        Scenario {
            name: format!("{scenario}-{kind}"),
            dir,
            database_url,
            binary: process::example_binary("bloom-examples", "user_service"),
            client: reqwest::Client::builder()
                .timeout(Duration::from_secs(30))
                .no_proxy()
                .build()
                .expect("an HTTP client"),
            starts: 0,
        }
    }

    fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("service.log")
    }

    fn snapshot(&self) -> PathBuf {
        self.data_dir().join("users.bloom")
    }

    /// The service's log so far (every start of this scenario), for failure messages.
    fn log(&self) -> String {
        let text = std::fs::read_to_string(self.log_path()).unwrap_or_default();
        format!(
            "{LOG_HEADER}({}) ----\n{text}---- end of the service log ----",
            self.log_path().display()
        )
    }

    /// The database URL: the PostgreSQL database, or the SQLite file in the data directory.
    fn database_url(&self) -> String {
        match &self.database_url {
            Some(url) => url.clone(),
            None => bloom_examples::db::sqlite_url(&self.data_dir()).expect("the SQLite URL"),
        }
    }

    /// Starts the binary on a free port (`--seed` only seeds an empty database) and waits
    /// until `GET /health` answers 200; nothing else is requested before returning.
    async fn start(&mut self) -> Running {
        self.starts += 1;
        let label = format!("start #{}", self.starts);
        // The port is free when chosen but could be taken before the service binds it: then
        // the service exits at once with "binding 127.0.0.1:<port>", and we try another.
        for _ in 0..5 {
            let port = process::free_port();
            if let Some(running) = self.try_start(port, &label).await {
                return running;
            }
        }
        panic!(
            "{}: {label}: could not bind a free port in 5 tries{}",
            self.name,
            self.log()
        );
    }

    /// [`start`](Self::start) on `port`; `None` if the service could not bind it.
    async fn try_start(&self, port: u16, label: &str) -> Option<Running> {
        let port_arg = port.to_string();
        let seed = SEEDED.to_string();
        let data_dir = self.data_dir();
        let data_dir = data_dir.to_str().expect("a UTF-8 temporary path");
        let mut args = vec![
            "--port",
            &port_arg,
            "--seed",
            &seed,
            "--data-dir",
            data_dir,
            "--name",
            &self.name,
            // No scheduled rebuild while a test runs: it would hide a stale filter.
            "--rebuild-secs",
            "3600",
        ];
        if let Some(url) = &self.database_url {
            args.extend(["--database-url", url]);
        }
        let env = [
            ("RUST_LOG", Some("info,sqlx=warn")),
            ("NO_COLOR", Some("1")),
            // The flags say everything; nothing from the test's environment.
            ("DATABASE_URL", None),
            ("REDIS_URL", None),
            ("BLOOM_FILTER_SEED", None),
        ];
        let mut process = Process::spawn(&self.binary, &args, &env, &self.log_path());
        let url = format!("http://127.0.0.1:{port}");
        let deadline = Instant::now() + STARTUP;
        loop {
            let health = self
                .client
                .get(format!("{url}/health"))
                .timeout(Duration::from_secs(2))
                .send()
                .await;
            let healthy = health.is_ok_and(|response| response.status() == StatusCode::OK);
            // Checked after the request too: a 200 from a port our process failed to bind
            // would be another service's.
            if let Some(status) = process.try_status() {
                let log = std::fs::read_to_string(self.log_path()).unwrap_or_default();
                let this_start = log.rsplit("\n==== ").next().unwrap_or_default();
                if !status.success() && this_start.contains(&format!("binding 127.0.0.1:{port}")) {
                    return None;
                }
                panic!(
                    "{}: {label}: the service exited ({}) before answering GET /health{}",
                    self.name,
                    process::describe_exit(status),
                    self.log()
                );
            }
            if healthy {
                return Some(Running {
                    process,
                    url,
                    label: label.to_owned(),
                });
            }
            assert!(
                Instant::now() < deadline,
                "{}: {label}: GET /health did not answer 200 within {STARTUP:?}{}",
                self.name,
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    /// Sends `signal` and waits up to `EXIT` for the process to exit: its status, or `Err`
    /// if it was still running (it is then killed with SIGKILL, so the data directory is
    /// free for the next start).
    async fn stop(&self, mut running: Running, signal: Signal) -> Result<ExitStatus, String> {
        running.process.signal(signal);
        let deadline = Instant::now() + EXIT;
        while Instant::now() < deadline {
            if let Some(status) = running.process.try_status() {
                return Ok(status);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let error = format!(
            "{}: {}: still running {EXIT:?} after {}",
            self.name,
            running.label,
            signal.name()
        );
        drop(running); // SIGKILL and reap
        Err(error)
    }

    /// Stops with SIGINT (Ctrl-C), which must exit 0 and leave the filter snapshot.
    async fn stop_gracefully(&self, running: Running) {
        let label = running.label.clone();
        let status = self
            .stop(running, Signal::Int)
            .await
            .unwrap_or_else(|error| panic!("{error}{}", self.log()));
        assert!(
            status.success(),
            "{}: {label}: SIGINT (Ctrl-C) must stop the service gracefully; it ended with {}{}",
            self.name,
            process::describe_exit(status),
            self.log()
        );
        assert!(
            self.snapshot().is_file(),
            "{}: {label}: no filter snapshot {} after a graceful stop{}",
            self.name,
            self.snapshot().display(),
            self.log()
        );
    }

    /// Creates `n` users through `POST /users` and checks each is found right away; their ids.
    async fn create_users(&self, running: &Running, n: u64) -> Vec<u64> {
        let mut ids = Vec::new();
        for i in 0..n {
            let response = self
                .client
                .post(format!("{}/users", running.url))
                .json(&json!({ "name": format!("Restart {i}"), "email": format!("restart{i}@example.com") }))
                .send()
                .await
                .unwrap_or_else(|e| panic!("{}: POST /users: {e}{}", self.name, self.log()));
            assert_eq!(
                response.status(),
                StatusCode::CREATED,
                "{}: POST /users{}",
                self.name,
                self.log()
            );
            let user: Value = response.json().await.expect("the created user");
            let id = user["id"].as_u64().expect("the created user's id");
            let (status, body) = self.get_user(running, id).await;
            assert_eq!(
                status,
                StatusCode::OK,
                "{}: GET /users/{id} right after its POST: {body}{}",
                self.name,
                self.log()
            );
            ids.push(id);
        }
        ids
    }

    /// Inserts `n` users straight into the database (ids after the largest), as another
    /// process would while the service is down; their ids.
    async fn write_behind_its_back(&self, n: u64) -> Vec<u64> {
        let db = Db::connect(&self.database_url(), 1, &format!("{}-writer", self.name))
            .await
            .expect("the other writer connects to the database");
        let ids = db
            .seed(n, |_| {})
            .await
            .expect("the other writer's inserts");
        assert_eq!(
            db.count_users().await.expect("counting the users"),
            SEEDED + n,
            "{}: the other writer's rows",
            self.name
        );
        db.close().await;
        ids.collect()
    }

    async fn get_user(&self, running: &Running, id: u64) -> (StatusCode, String) {
        let response = self
            .client
            .get(format!("{}/users/{id}", running.url))
            .send()
            .await
            .unwrap_or_else(|e| {
                panic!(
                    "{}: {}: GET /users/{id}: {e}{}",
                    self.name,
                    running.label,
                    self.log()
                )
            });
        let status = response.status();
        (status, response.text().await.unwrap_or_default())
    }

    /// `GET /users/{id}` for every id in `ids`, in order: the problems (one line for the
    /// 404s, one per other non-200 answer), empty if every user was found.
    async fn find_every_user(&self, running: &Running, ids: &[u64], after: &str) -> Vec<String> {
        let mut not_found = Vec::new();
        let mut other = Vec::new();
        for &id in ids {
            match self.get_user(running, id).await {
                (StatusCode::OK, _) => {}
                (StatusCode::NOT_FOUND, _) => not_found.push(id),
                (status, body) => other.push(format!("GET /users/{id}: {status} {body}")),
            }
        }
        let mut problems = Vec::new();
        if !not_found.is_empty() {
            problems.push(format!(
                "{} of {} users that exist answered 404 on the first requests after {after} \
                 ({}): ids {not_found:?}",
                not_found.len(),
                ids.len(),
                running.label
            ));
        }
        problems.extend(other);
        problems
    }

    /// The control: every `ABSENT` id is 404, and the guard rejected at least
    /// `MIN_REJECTED` of them itself.
    async fn absent_ids_are_rejected(&self, running: &Running) -> Vec<String> {
        let before = self.guard_rejected(running).await;
        let mut problems = Vec::new();
        for id in ABSENT {
            let (status, body) = self.get_user(running, id).await;
            if status != StatusCode::NOT_FOUND {
                problems.push(format!(
                    "GET /users/{id} (never created) after {}: {status} {body}",
                    running.label
                ));
            }
        }
        let rejected = self.guard_rejected(running).await - before;
        if rejected < MIN_REJECTED {
            problems.push(format!(
                "the guard rejected only {rejected} of {} ids that were never created after {} \
                 (at least {MIN_REJECTED} expected): is it still guarding?",
                ABSENT.count(),
                running.label
            ));
        }
        problems
    }

    /// `bloom_guard_rejected_total{guard="<name>"}` from `GET /metrics` (0 if absent).
    async fn guard_rejected(&self, running: &Running) -> u64 {
        let response = self
            .client
            .get(format!("{}/metrics", running.url))
            .send()
            .await
            .unwrap_or_else(|e| panic!("{}: GET /metrics: {e}{}", self.name, self.log()));
        assert_eq!(response.status(), StatusCode::OK, "GET /metrics");
        let text = response.text().await.expect("the metrics");
        let label = format!("guard=\"{}\"", self.name);
        text.lines()
            .filter(|line| line.starts_with("bloom_guard_rejected_total{") && line.contains(&label))
            .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
            .map(|value| value as u64)
            .sum()
    }

    /// Fails with every problem and the service's log, if there is any problem.
    fn assert_no_problems(&self, problems: &[String]) {
        assert!(
            problems.is_empty(),
            "{}: a user that exists must never be answered 404, across restarts:\n  - {}{}",
            self.name,
            problems.join("\n  - "),
            self.log()
        );
    }
}

/// Seeded users, a graceful stop (snapshot), a start from the snapshot, users created
/// through the service, then the process ends with `signal`; the next start must find every
/// user. With SIGTERM the process must also exit 0 within `EXIT`, like on Ctrl-C.
async fn created_users_survive(scenario: &str, backend: Backend, signal: Signal) {
    let mut scenario = Scenario::new(scenario, backend);
    let first = scenario.start().await;
    let seeded: Vec<u64> = (1..=SEEDED).collect();
    let problems = scenario
        .find_every_user(&first, &seeded, "seeding an empty database")
        .await;
    scenario.assert_no_problems(&problems);
    scenario.stop_gracefully(first).await;

    let second = scenario.start().await;
    let created = scenario.create_users(&second, ADDED).await;
    let stopped = scenario.stop(second, signal).await;

    let third = scenario.start().await;
    let every: Vec<u64> = seeded.iter().chain(&created).copied().collect();
    let after = format!(
        "{} of the process that created ids {created:?}",
        signal.name()
    );
    let mut problems = scenario.find_every_user(&third, &every, &after).await;
    problems.extend(scenario.absent_ids_are_rejected(&third).await);
    match (signal, stopped) {
        (_, Err(error)) => problems.push(error),
        (Signal::Kill, Ok(_)) => {}
        (_, Ok(status)) if status.success() => {}
        (_, Ok(status)) => problems.push(format!(
            "{} must stop the service gracefully (exit code 0) within {EXIT:?}, like \
             Ctrl-C; it ended with {}",
            signal.name(),
            process::describe_exit(status)
        )),
    }
    scenario.assert_no_problems(&problems);
    scenario.stop_gracefully(third).await;
}

/// Seeded users, a graceful stop (snapshot), rows inserted straight into the database
/// while the service is down; the next start must find every user.
async fn other_writers_users_are_found(backend: Backend) {
    let mut scenario = Scenario::new("other_writer", backend);
    let first = scenario.start().await;
    scenario.stop_gracefully(first).await;
    let written = scenario.write_behind_its_back(ADDED).await;

    let second = scenario.start().await;
    let every: Vec<u64> = (1..=SEEDED).chain(written.iter().copied()).collect();
    let after = format!("another writer inserted ids {written:?} while the service was down");
    let mut problems = scenario.find_every_user(&second, &every, &after).await;
    problems.extend(scenario.absent_ids_are_rejected(&second).await);
    scenario.assert_no_problems(&problems);
    scenario.stop_gracefully(second).await;
}

// ---- SQLite: one test per scenario -------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_users_created_before_sigkill_are_found_after_restart() {
    created_users_survive("sigkill", Backend::Sqlite, Signal::Kill).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_sigterm_exits_0_and_users_created_before_are_found_after_restart() {
    created_users_survive("sigterm", Backend::Sqlite, Signal::Term).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_users_another_writer_inserted_while_down_are_found_after_restart() {
    other_writers_users_are_found(Backend::Sqlite).await;
}

// ---- PostgreSQL: every scenario on one throwaway server ----------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_suite() {
    let Some(server) = postgres::start_or_skip("restart postgres_suite") else {
        return;
    };
    // Each scenario on its own database; all of them run, then every failure is reported.
    let sigkill = server.create_database("restart_sigkill");
    let sigterm = server.create_database("restart_sigterm");
    let other = server.create_database("restart_other_writer");
    let outcomes = [
        tokio::spawn(created_users_survive(
            "sigkill",
            Backend::Postgres(sigkill),
            Signal::Kill,
        )),
        tokio::spawn(created_users_survive(
            "sigterm",
            Backend::Postgres(sigterm),
            Signal::Term,
        )),
        tokio::spawn(other_writers_users_are_found(Backend::Postgres(other))),
    ];
    let mut failures = Vec::new();
    for (name, outcome) in ["sigkill", "sigterm", "other_writer"]
        .into_iter()
        .zip(outcomes)
    {
        if let Err(error) = outcome.await {
            let message = match error.try_into_panic() {
                Ok(panic) => panic
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                    .unwrap_or_else(|| "(a panic without a message)".to_owned()),
                Err(error) => error.to_string(),
            };
            // The panic hook printed the whole message, with the service's log, above.
            let summary = message.split(LOG_HEADER).next().unwrap_or_default();
            failures.push(format!("==== PostgreSQL {name}: {summary}"));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of 3 PostgreSQL scenarios failed (their logs are in the panic messages above):\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}
