//! Process-level tests of the `feed` example (`cargo build --release -p bloom-examples
//! --example feed`), the per-user windowed filters of `bloom_tower::filter_set` behind a real
//! TCP socket:
//!
//! * `the_simulated_feed_never_shows_an_item_twice_within_the_window` (the SQLite store, the
//!   default), `the_simulated_feed_on_files_never_shows_an_item_twice_within_the_window` (one
//!   file per user) and `the_simulated_feed_on_redis_never_shows_an_item_twice_within_the_window`
//!   (Redis, when `redis-server` is installed), run side by side: a small simulation (10,000 users,
//!   10 days, 600 requests a day, so a regular user is shown about 40 items a week, within
//!   the 100 each filter is sized for; a budget that holds a fraction of the users, so
//!   filters are evicted and loaded back): 0 items shown twice within 7 days, the wrongly
//!   withheld rate within p + 3σ, evictions and loads both happened.
//! * `a_killed_feed_service_loses_no_item_it_acknowledged`: the service (SQLite store) with `--durable` and
//!   a 1 MiB budget, hammered by concurrent clients, `kill -9`ed at a random moment once a
//!   round has served 600 users (while it is storing: every response stores a filter, and
//!   evictions store more) three times; after
//!   each restart on the same directory, every item of every response a client received is
//!   still marked seen for its user (every one asked, sorted by user, in eight parallel parts),
//!   and no stored filter is unreadable.
#![forbid(unsafe_code)]

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bloom_tests::servers::process::{self, Process, Signal};
use bloom_tests::servers::redis;

fn feed_binary() -> std::path::PathBuf {
    process::example_binary("bloom-examples", "feed")
}

/// Runs a simulation; returns its output.
fn simulate(extra: &[&str], env: &[(&str, Option<&str>)]) -> String {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("feed.log");
    let store = dir.path().join("store");
    // The users and the requests a day in proportion: the per-user rates (items a week)
    // the module docs state hold at any scale.
    let mut args = vec![
        "--users",
        "10000",
        "--days",
        "10",
        "--requests-per-day",
        "600",
        "--budget-mib",
        "1",
        "--store-dir",
        store.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    let mut feed = Process::spawn(&feed_binary(), &args, env, &log);
    let status = feed.wait_exit(Duration::from_secs(600)).unwrap();
    let out = feed.log();
    assert!(status.success(), "the simulation failed:\n{out}");
    out
}

/// The number after `label` in `out`.
fn figure(out: &str, label: &str) -> f64 {
    let at = out
        .find(label)
        .unwrap_or_else(|| panic!("{label:?} not in:\n{out}"));
    out[at + label.len()..]
        .split(|c: char| !(c.is_ascii_digit() || c == '.'))
        .find(|s| !s.is_empty())
        .unwrap()
        .parse()
        .unwrap()
}

fn check_simulation(out: &str) {
    assert_eq!(figure(out, "shown twice within 7 days: "), 0.0, "{out}");
    let line = out
        .lines()
        .find(|l| l.starts_with("wrongly withheld: "))
        .unwrap_or_else(|| panic!("no wrongly withheld line in:\n{out}"));
    let wrong = figure(line, "wrongly withheld: ");
    let fresh = figure(line, " of ");
    // Each fresh candidate is withheld with probability at most p = 1 % (the filters' bound).
    let p = 0.01;
    let bound = p * fresh + 3.0 * (p * (1.0 - p) * fresh).sqrt();
    assert!(
        wrong <= bound,
        "{wrong} wrongly withheld of {fresh}, above p + 3σ = {bound:.0}:\n{out}"
    );
    assert!(figure(out, " evicted") > 0.0, "{out}");
    assert!(figure(out, " loaded") > 0.0, "{out}");
    assert!(out.contains(", 0 store errors"), "{out}");
}

#[test]
fn the_simulated_feed_never_shows_an_item_twice_within_the_window() {
    let out = simulate(&[], &[("REDIS_URL", None)]);
    assert!(out.contains("store sqlite"), "{out}");
    check_simulation(&out);
    eprintln!("{out}");
}

#[test]
fn the_simulated_feed_on_files_never_shows_an_item_twice_within_the_window() {
    let out = simulate(&["--store", "files"], &[("REDIS_URL", None)]);
    assert!(out.contains("store directory"), "{out}");
    check_simulation(&out);
    eprintln!("{out}");
}

#[test]
fn the_simulated_feed_on_redis_never_shows_an_item_twice_within_the_window() {
    let Some(server) = redis::start() else {
        return; // `start` says SKIPPED (and fails under CI=true)
    };
    let url = server.url();
    let out = simulate(&[], &[("REDIS_URL", Some(&url))]);
    assert!(out.contains("store redis"), "{out}");
    check_simulation(&out);
    eprintln!("{out}");
}

type Acked = Arc<Mutex<Vec<(u64, u64)>>>;

/// Clients requesting feeds until `stop`; every item of every 200 is recorded.
async fn hammer(base: String, acked: Acked, stop: Arc<std::sync::atomic::AtomicBool>, seed: u64) {
    let client = reqwest::Client::new();
    let mut rng = fastrand::Rng::with_seed(seed);
    while !stop.load(std::sync::atomic::Ordering::SeqCst) {
        let user = rng.u64(0..3_000);
        let Ok(response) = client.get(format!("{base}/feed/{user}")).send().await else {
            continue;
        };
        if response.status() != 200 {
            continue;
        }
        let Ok(page) = response.json::<serde_json::Value>().await else {
            continue;
        };
        let mut acked = acked.lock().unwrap();
        for item in page["items"].as_array().unwrap() {
            acked.push((user, item.as_u64().unwrap()));
        }
    }
}

async fn wait_ready(base: &str, feed: &mut Process) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(r) = reqwest::get(format!("{base}/stats")).await {
            if r.status() == 200 {
                return;
            }
        }
        assert!(
            feed.try_status().is_none(),
            "the feed exited:\n{}",
            feed.log()
        );
        assert!(
            Instant::now() < deadline,
            "the feed did not start:\n{}",
            feed.log()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_feed_service_loses_no_item_it_acknowledged() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    let log = dir.path().join("feed.log");
    let mut rng = fastrand::Rng::with_seed(37);
    let acked: Acked = Arc::default();
    for round in 0..4 {
        let port = process::free_port().to_string();
        let args = [
            "--serve",
            "--durable",
            "--port",
            &port,
            "--budget-mib",
            "1",
            "--store-dir",
            store.to_str().unwrap(),
        ];
        let mut feed = Process::spawn(&feed_binary(), &args, &[("REDIS_URL", None)], &log);
        let base = format!("http://127.0.0.1:{port}");
        wait_ready(&base, &mut feed).await;

        // Everything acknowledged before this start is still there. Checked user by user
        // (sorted): a user's items are asked one after the other, so the 1 MiB budget loads
        // each user's filter once per check instead of once per item.
        let mut before: Vec<(u64, u64)> = acked.lock().unwrap().clone();
        before.sort_unstable();
        let client = reqwest::Client::new();
        let mut checks = tokio::task::JoinSet::new();
        for chunk in before.chunks(before.len().div_ceil(8).max(1)) {
            let (client, base, chunk) = (client.clone(), base.clone(), chunk.to_vec());
            checks.spawn(async move {
                let mut lost = Vec::new();
                for (user, item) in chunk {
                    let r = client
                        .get(format!("{base}/seen/{user}/{item}"))
                        .send()
                        .await
                        .unwrap();
                    let status = r.status();
                    let body = r.text().await.unwrap();
                    assert_eq!(status, 200, "/seen/{user}/{item}: {body}");
                    let seen: serde_json::Value = serde_json::from_str(&body).unwrap();
                    if seen["seen"] != true {
                        lost.push((user, item));
                    }
                }
                lost
            });
        }
        let mut lost = Vec::new();
        while let Some(chunk) = checks.join_next().await {
            match chunk {
                Ok(chunk) => lost.extend(chunk),
                Err(e) => panic!("round {round}: {e}\n{}", feed.log()),
            }
        }
        assert!(
            lost.is_empty(),
            "round {round}: {} of {} acknowledged items forgotten after kill -9, e.g. {:?}",
            lost.len(),
            before.len(),
            &lost[..lost.len().min(5)]
        );
        eprintln!(
            "round {round}: {} acknowledged items all remembered",
            before.len()
        );
        if round == 3 {
            break;
        }

        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let clients: Vec<_> = (0..8)
            .map(|i| {
                tokio::spawn(hammer(
                    base.clone(),
                    acked.clone(),
                    stop.clone(),
                    round * 100 + i,
                ))
            })
            .collect();
        // The kill lands at a random moment once the round has served 600 users (so the
        // 1 MiB budget, about 320 filters, has evicted): every response stores a filter,
        // so any moment is during a store.
        let from = acked.lock().unwrap().len();
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let users: HashSet<u64> = acked.lock().unwrap()[from..]
                .iter()
                .map(|&(u, _)| u)
                .collect();
            if users.len() >= 600 {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "round {round}: {} users served in 60 s:\n{}",
                users.len(),
                feed.log()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        tokio::time::sleep(Duration::from_millis(rng.u64(0..750))).await;
        feed.signal(Signal::Kill);
        feed.wait_exit(Duration::from_secs(10)).unwrap();
        stop.store(true, std::sync::atomic::Ordering::SeqCst);
        for c in clients {
            c.await.unwrap();
        }
        let users: HashSet<u64> = acked.lock().unwrap().iter().map(|&(u, _)| u).collect();
        assert!(
            users.len() > 500,
            "round {round}: too few users served ({}) to evict:\n{}",
            users.len(),
            feed.log()
        );
    }
}
