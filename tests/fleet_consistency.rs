//! One answer for the whole fleet (R1, R5, R6 in `docs/REDIS-SYNC.md`), on real `user_service`
//! processes sharing one filter through a real `redis-server`, as clients see it over HTTP:
//!
//! * a user created through one instance (`201`) is found at once through the other, thousands
//!   of times, both directions, under a light read load, on SQLite and on PostgreSQL;
//! * `kill -9` of a member, then of the follower: the survivors go on rejecting never-created
//!   ids after a short while (not after `member_timeout`), and no existing user is ever
//!   rejected meanwhile;
//! * Redis stopped (SIGSTOP) while another writer commits rows: no instance rejects one of them
//!   once the follow bound has passed since its commit (a view that counts itself fresh holds
//!   it).
//!
//! A rejection is observed as a client sees it: `404` with `x-bloom-guard: rejected`. The
//! figures printed (how long the survivors let never-created ids through) are in
//! `benches/README.md`; nothing here asserts a duration except the documented bounds, which
//! a loaded machine only makes harder to miss.
#![forbid(unsafe_code)]

#[path = "support/user_service.rs"]
mod user_service;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::time::{Duration, Instant};

use bloom_tests::servers::process::Signal;
use bloom_tests::servers::{postgres, redis};
use user_service::{Answer, Instance, SEEDED, write_row, writer};

/// One fleet at a time: their timers are short, and fleets starving each other's processes on
/// two cores would test the machine, not the protocol.
static ONE_FLEET_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The fleet's flags: one filter through Redis, its seed and size.
fn fleet_flags(redis_url: &str) -> Vec<String> {
    [
        "--redis",
        redis_url,
        "--filter-seed",
        "0x5eed",
        "--filter-capacity",
        "100000",
    ]
    .map(str::to_owned)
    .to_vec()
}

async fn start(dir: &std::path::Path, name: &str, url: &str, flags: &[String]) -> Instance {
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    Instance::start(dir, name, url, &flags).await
}

/// Until every instance's view is fresh (`bloom_redis_stale` 0).
async fn settle(instances: &[&Instance]) {
    let deadline = Instant::now() + Duration::from_secs(60);
    for instance in instances {
        while instance.metric("bloom_redis_stale").await != 0.0 {
            assert!(
                Instant::now() < deadline,
                "never fresh:\n{}",
                instance.log()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// Ids no writer ever creates (the database's ids start at 1).
const NEVER: i64 = 90_000_000;

/// A light read load on `instances` until `stop`: seeded users and never-created ids.
fn read_load(instances: Vec<String>, stop: Arc<AtomicBool>) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let client = user_service::client();
        let mut n = 0i64;
        while !stop.load(SeqCst) {
            for url in &instances {
                let id = if n % 2 == 0 {
                    1 + n % SEEDED as i64
                } else {
                    NEVER + n
                };
                let _ = client.get(format!("{url}/users/{id}")).send().await;
            }
            n += 1;
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    })
}

/// 2,000 creates, alternately through each instance, each read at once through the other.
async fn creates_are_found_at_once_on_the_other(database_url: &str, what: &str) {
    let _one = ONE_FLEET_AT_A_TIME.lock().await;
    let Some(redis) = redis::start() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let flags = fleet_flags(&redis.url());
    let a = start(dir.path(), "a", database_url, &flags).await;
    let b = start(dir.path(), "b", database_url, &flags).await;
    settle(&[&a, &b]).await;
    let stop = Arc::new(AtomicBool::new(false));
    let load = read_load(vec![a.url.clone(), b.url.clone()], Arc::clone(&stop));
    let mut wrong = Vec::new();
    for n in 0..2_000 {
        let (creator, reader) = if n % 2 == 0 { (&a, &b) } else { (&b, &a) };
        let id = creator.create(&format!("u{n}")).await;
        let answer = reader.answer(id).await;
        if answer != Answer::Found {
            wrong.push((id, answer));
        }
    }
    stop.store(true, SeqCst);
    load.await.unwrap();
    // What a rejection costs over HTTP against a hit, one request at a time on B (the figures
    // of benches/README.md): a hit answers from the filter and the cache, a rejection waits
    // for its confirmation.
    let (mut hits, mut rejections) = (Vec::new(), Vec::new());
    for n in 0..2_000i64 {
        let started = Instant::now();
        assert_eq!(b.answer(1 + n % SEEDED as i64).await, Answer::Found);
        hits.push(started.elapsed());
        let started = Instant::now();
        assert_eq!(b.answer(NEVER + 5_000_000 + n).await, Answer::Rejected);
        rejections.push(started.elapsed());
    }
    hits.sort();
    rejections.sort();
    let at = |v: &[Duration], q: f64| v[((v.len() - 1) as f64 * q).round() as usize];
    println!(
        "{what}: GET over HTTP, one at a time: a hit p50 {:?} p99 {:?}; a confirmed rejection \
         p50 {:?} p99 {:?}",
        at(&hits, 0.5),
        at(&hits, 0.99),
        at(&rejections, 0.5),
        at(&rejections, 0.99)
    );
    println!(
        "{what}: 2,000 users created through one instance and read at once through the other \
         (both directions, under a light read load): {} not found",
        wrong.len()
    );
    assert!(
        wrong.is_empty(),
        "{what}: {} of 2,000 new users not found at once on the other instance: {:?}",
        wrong.len(),
        &wrong[..wrong.len().min(10)]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_created_on_one_instance_is_found_at_once_on_the_other_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let url = bloom_examples::db::sqlite_url(&dir.path().join("users")).unwrap();
    creates_are_found_at_once_on_the_other(&url, "sqlite").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_created_on_one_instance_is_found_at_once_on_the_other_postgres() {
    let Some(server) = postgres::start_or_skip("fleet_consistency::postgres") else {
        return;
    };
    let url = server.create_database("ryw");
    creates_are_found_at_once_on_the_other(&url, "postgres").await;
}

/// What the survivors answered after a kill: how long after it they still let a
/// never-created id through (the last time one was), and existing users rejected.
struct AfterKill {
    open_for: Duration,
    let_through: usize,
    probes: usize,
    existing_rejected: usize,
}

/// Probes `survivors` every few milliseconds for `window` from now: a never-created id and
/// an existing user each time, on each.
async fn probe(survivors: &[&Instance], window: Duration) -> AfterKill {
    let killed_at = Instant::now();
    let mut outcome = AfterKill {
        open_for: Duration::ZERO,
        let_through: 0,
        probes: 0,
        existing_rejected: 0,
    };
    let mut n = 0;
    while killed_at.elapsed() < window {
        for instance in survivors {
            n += 1;
            let (never, existing) = tokio::join!(
                instance.answer(NEVER + 1_000_000 + n),
                instance.answer(1 + n % SEEDED as i64)
            );
            outcome.probes += 1;
            if never == Answer::NotFound {
                outcome.let_through += 1;
                outcome.open_for = killed_at.elapsed();
            }
            if existing == Answer::Rejected {
                outcome.existing_rejected += 1;
            }
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    outcome
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_of_a_member_or_of_the_follower_opens_the_survivors_only_briefly() {
    let Some(server) = postgres::start_or_skip("fleet_consistency::kill") else {
        return;
    };
    let _one = ONE_FLEET_AT_A_TIME.lock().await;
    let Some(redis) = redis::start() else {
        return;
    };
    let url = server.create_database("kill");
    let dir = tempfile::tempdir().unwrap();
    let flags = fleet_flags(&redis.url());
    let mut instances = Vec::new();
    for n in 0..3 {
        instances.push(start(dir.path(), &format!("k{n}"), &url, &flags).await);
    }
    let all: Vec<&Instance> = instances.iter().collect();
    settle(&all).await;
    let follows = |i: &Instance| i.log().contains("following the source for the fleet");
    let deadline = Instant::now() + Duration::from_secs(30);
    while !instances.iter().any(follows) {
        assert!(Instant::now() < deadline, "no instance follows");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // The window is far below member_timeout (30 s), which the survivors waited for before.
    let window = Duration::from_secs(8);
    for (victim, what) in [(false, "a member"), (true, "the follower")] {
        let index = instances
            .iter()
            .position(|i| follows(i) == victim)
            .expect("a victim");
        let mut killed = instances.remove(index);
        killed.process.signal(Signal::Kill);
        let survivors: Vec<&Instance> = instances.iter().collect();
        let after = probe(&survivors, window).await;
        println!(
            "kill -9 of {what} of {}: the survivors let never-created ids through for {:?} \
             ({} of {} probes); existing users rejected: {}",
            survivors.len() + 1,
            after.open_for,
            after.let_through,
            after.probes,
            after.existing_rejected
        );
        assert_eq!(after.existing_rejected, 0, "an existing user was rejected");
        // Rejections resumed well inside the window: the last let-through is more than 2 s
        // before its end.
        assert!(
            after.open_for + Duration::from_secs(2) < window,
            "after the kill of {what}, never-created ids were still let through {:?} after it",
            after.open_for
        );
        drop(killed);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rows_committed_while_redis_is_stopped_are_never_rejected_by_a_fresh_view() {
    let Some(server) = postgres::start_or_skip("fleet_consistency::sigstop") else {
        return;
    };
    let _one = ONE_FLEET_AT_A_TIME.lock().await;
    let Some(mut redis) = redis::start() else {
        return;
    };
    let url = server.create_database("sigstop");
    let dir = tempfile::tempdir().unwrap();
    let flags = fleet_flags(&redis.url());
    let a = start(dir.path(), "s0", &url, &flags).await;
    let b = start(dir.path(), "s1", &url, &flags).await;
    settle(&[&a, &b]).await;
    let pool = writer(&url).await;

    // Another writer commits a row every 50 ms for 10 s; Redis is stopped from 1 s to 6 s.
    let rows: Arc<std::sync::Mutex<Vec<(i64, Instant)>>> = Arc::default();
    let writing = {
        let (rows, pool) = (Arc::clone(&rows), pool.clone());
        tokio::spawn(async move {
            let started = Instant::now();
            while started.elapsed() < Duration::from_secs(10) {
                let id = write_row(&pool).await;
                rows.lock().unwrap().push((id, Instant::now()));
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
    };
    // The follow bound (the follow interval, 0.25 s, plus stale_after, 1 s), and half a
    // second for the answer to reach the client.
    let bound = Duration::from_millis(1_750);
    let mut late = Vec::new();
    let mut checks = 0;
    let started = Instant::now();
    let mut stopped = false;
    while started.elapsed() < Duration::from_secs(12) {
        let elapsed = started.elapsed();
        if !stopped && elapsed > Duration::from_secs(1) && elapsed < Duration::from_secs(6) {
            tokio::task::block_in_place(|| redis.pause());
            stopped = true;
        } else if stopped && elapsed >= Duration::from_secs(6) {
            tokio::task::block_in_place(|| redis.resume());
            stopped = false;
        }
        let committed: Vec<(i64, Instant)> = rows.lock().unwrap().clone();
        for &(id, at) in committed.iter().rev().take(40) {
            for instance in [&a, &b] {
                checks += 1;
                if instance.answer(id).await == Answer::Rejected && at.elapsed() > bound {
                    late.push((id, at.elapsed()));
                }
            }
        }
    }
    if stopped {
        tokio::task::block_in_place(|| redis.resume());
    }
    writing.await.unwrap();
    println!(
        "Redis stopped for 5 s while another writer committed {} rows: {checks} reads, {} \
         rejections of a row committed more than {bound:?} before",
        rows.lock().unwrap().len(),
        late.len()
    );
    assert!(
        late.is_empty(),
        "rows rejected by a view that counted itself fresh, long after their commit: {:?}",
        &late[..late.len().min(10)]
    );
}
