//! Confirmed rejections (R1–R3 in `docs/REDIS-SYNC.md`), on instances in this process and a
//! real `redis-server`: a key whose create returned is never answered "absent" by another
//! instance, concurrent rejections share their pings, and a hung link costs a let-through
//! after `confirm_timeout`, never a wrong "absent" or an unbounded wait.
//!
//! Every wait is bounded by `HANG` (a hang detector); nothing asserts a duration.

mod common;
#[path = "common/fault.rs"]
mod fault;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::time::{Duration, Instant};

use bloom_core::{BloomFilter, Layout};
use bloom_redis::RedisSync;
use bloom_tower::SharedFilter;
use fault::{FaultProxy, Mode};

const SEED: u128 = 0xc0f1_7e5e_c0f1_7e5e_c0f1_7e5e_c0f1_7e5e;
const HANG: Duration = Duration::from_secs(20);

/// One test at a time: a flood beside another test's fleet would starve its heartbeats.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn filter() -> SharedFilter<str> {
    SharedFilter::new(
        BloomFilter::builder()
            .bits(1 << 20)
            .hashes(7)
            .layout(Layout::Blocked)
            .seed(SEED)
            .build()
            .unwrap(),
    )
}

async fn join(url: &str, prefix: &str) -> RedisSync<str> {
    RedisSync::builder(url)
        .prefix(prefix)
        .connect(&filter())
        .await
        .expect("join")
}

async fn eventually(what: &str, mut done: impl FnMut() -> bool) {
    let started = Instant::now();
    while !done() {
        assert!(started.elapsed() < HANG, "hang: {what}");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// `n` keys no instance ever inserts, whose bits the filter does not hold (not false
/// positives): each is a would-be rejection.
fn absent_keys(sync: &RedisSync<str>, tag: &str, n: usize) -> Vec<String> {
    (0..)
        .map(|i| format!("{tag}:{i}"))
        .filter(|key| !sync.filter().current().contains(key.as_str()))
        .take(n)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_key_created_on_one_instance_is_never_absent_on_another_once_its_create_returned() {
    let Some(server) = common::start() else {
        return;
    };
    let _one = ONE_AT_A_TIME.lock().await;
    let url = server.url();
    let (a, b) = (
        Arc::new(join(&url, "ryw").await),
        Arc::new(join(&url, "ryw").await),
    );
    eventually("both fresh", || a.stats().fresh && b.stats().fresh).await;
    // A light load of would-be rejections on both, as absent ids from clients would be.
    let stop = Arc::new(AtomicBool::new(false));
    let mut load = Vec::new();
    for (n, sync) in [&a, &b].into_iter().enumerate() {
        let (sync, stop) = (Arc::clone(sync), Arc::clone(&stop));
        load.push(tokio::spawn(async move {
            let keys = absent_keys(&sync, &format!("load{n}"), 1_000);
            let mut rejected = 0u64;
            for key in keys.iter().cycle() {
                if stop.load(SeqCst) {
                    break;
                }
                rejected += u64::from(!sync.filter().check(key.as_str()).await);
                tokio::time::sleep(Duration::from_micros(200)).await;
            }
            rejected
        }));
    }
    let mut absent = Vec::new();
    for i in 0..2_000 {
        // Both directions, in turn.
        let (creator, reader) = if i % 2 == 0 { (&a, &b) } else { (&b, &a) };
        let key = format!("user:{i}");
        creator.filter().insert(key.as_str());
        creator.propagated().await.expect("propagated");
        // The create returned: read it at once on the other instance.
        if !reader.filter().check(key.as_str()).await {
            absent.push(key);
        }
    }
    stop.store(true, SeqCst);
    let mut rejected = 0;
    for task in load {
        rejected += task.await.unwrap();
    }
    println!(
        "2,000 creates read at once on the other instance: {} answered absent; {rejected} \
         would-be rejections of the load rejected; A {:?}; B {:?}",
        absent.len(),
        a.stats(),
        b.stats()
    );
    assert!(
        absent.is_empty(),
        "{} of 2,000 keys answered absent on the other instance right after their create \
         returned: {:?}",
        absent.len(),
        &absent[..absent.len().min(10)]
    );
    assert!(rejected > 0, "the load's absent keys were never rejected");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_rejections_share_rounds() {
    let Some(server) = common::start() else {
        return;
    };
    let _one = ONE_AT_A_TIME.lock().await;
    let sync = Arc::new(join(&server.url(), "flood").await);
    eventually("fresh", || sync.stats().fresh).await;
    let keys = absent_keys(&sync, "absent", 4_000);
    let mut redis = redis::Client::open(server.url())
        .unwrap()
        .get_multiplexed_tokio_connection()
        .await
        .unwrap();
    let before_scripts = script_calls(&mut redis).await;
    let before = sync.stats();
    let started = Instant::now();
    let checks: Vec<_> = keys
        .into_iter()
        .map(|key| {
            let sync = Arc::clone(&sync);
            tokio::spawn(async move { sync.filter().check(key.as_str()).await })
        })
        .collect();
    let mut let_through = 0;
    for check in checks {
        let_through += usize::from(check.await.unwrap());
    }
    let elapsed = started.elapsed();
    let scripts = script_calls(&mut redis).await - before_scripts;
    let after = sync.stats();
    let rounds = after.confirm_rounds - before.confirm_rounds;
    let confirmed = after.confirmed - before.confirmed;
    println!(
        "4,000 concurrent would-be rejections in {elapsed:?}: {confirmed} confirmed, \
         {let_through} let through, {rounds} confirming pings, {scripts} scripts run by Redis"
    );
    assert_eq!(let_through, 0, "a fresh view let absent keys through");
    assert_eq!(confirmed, 4_000);
    // One ping per millisecond on average, in bursts of at most 8 (a slow machine sends
    // fewer, never more)...
    assert!(
        rounds <= elapsed.as_millis() as u64 + 9,
        "{rounds} pings in {elapsed:?}: more than one per millisecond"
    );
    // ...and far fewer pings than rejections: they share them. Redis ran as few scripts
    // (the pings, the heartbeats' mark rounds, a pass's scripts).
    assert!(rounds * 10 <= 4_000, "{rounds} pings for 4,000 rejections");
    assert!(
        scripts * 10 <= 4_000,
        "Redis ran {scripts} scripts for 4,000 rejections"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_sustained_flood_costs_one_ping_a_millisecond() {
    let Some(server) = common::start() else {
        return;
    };
    let _one = ONE_AT_A_TIME.lock().await;
    let sync = Arc::new(join(&server.url(), "sustained").await);
    eventually("fresh", || sync.stats().fresh).await;
    let keys = Arc::new(absent_keys(&sync, "absent", 1_000));
    let before = sync.stats();
    let started = Instant::now();
    // 64 tasks, each asking again as soon as answered, for a second.
    let tasks: Vec<_> = (0..64)
        .map(|t| {
            let (sync, keys) = (Arc::clone(&sync), Arc::clone(&keys));
            tokio::spawn(async move {
                let mut n = t;
                while started.elapsed() < Duration::from_secs(1) {
                    assert!(!sync.filter().check(keys[n % keys.len()].as_str()).await);
                    n += 64;
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    let elapsed = started.elapsed();
    let after = sync.stats();
    let (rounds, confirmed) = (
        after.confirm_rounds - before.confirm_rounds,
        after.confirmed - before.confirmed,
    );
    println!("a flood for {elapsed:?}: {confirmed} rejections confirmed by {rounds} pings");
    assert!(
        rounds <= elapsed.as_millis() as u64 + 9,
        "{rounds} pings in {elapsed:?}: more than one per millisecond"
    );
}

/// The scripts Redis has run (`EVALSHA` and `EVAL` calls in `INFO commandstats`).
async fn script_calls(conn: &mut redis::aio::MultiplexedConnection) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(conn)
        .await
        .unwrap();
    common::command_calls(&info, |command| matches!(command, "evalsha" | "eval"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_hung_link_lets_rejections_through_after_confirm_timeout() {
    let Some(server) = common::start() else {
        return;
    };
    let _one = ONE_AT_A_TIME.lock().await;
    let proxy = FaultProxy::start(SocketAddr::from(([127, 0, 0, 1], server.port()))).await;
    let sync = join(&proxy.url(), "hung-link").await;
    eventually("fresh", || sync.stats().fresh).await;
    let keys = absent_keys(&sync, "absent", 100);
    assert!(!sync.filter().check(keys[0].as_str()).await, "confirmed");

    proxy.set_mode(Mode::Hang).await;
    // The view still counts itself fresh (no heartbeat missed yet): the rejection waits for
    // its ping, which does not come, and the stale policy (let through) answers.
    let started = Instant::now();
    assert!(
        sync.filter().check(keys[1].as_str()).await,
        "a rejection that could not be confirmed was answered absent"
    );
    assert!(started.elapsed() < HANG);
    assert!(sync.stats().unconfirmed >= 1);
    // Later rejections do not wait: the view is stale until a ping comes back.
    assert!(!sync.stats().fresh);
    for key in &keys[2..] {
        assert!(sync.filter().check(key.as_str()).await);
    }

    proxy.set_mode(Mode::Pass).await;
    eventually("fresh again", || sync.stats().fresh).await;
    assert!(
        !sync.filter().check(keys[2].as_str()).await,
        "confirmed again"
    );
}
