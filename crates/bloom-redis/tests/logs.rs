//! What an operator reads, against a real `redis-server` (see `common`): a new fleet's first
//! join and seeding, and every normal join, log no warning; a Redis that lost the fleet's
//! data is still logged as a loss. The crate's real `tracing` events are captured by a
//! subscriber for the whole test binary; each test reads the lines of its own prefix.

mod common;

use std::sync::{Mutex, Once};
use std::time::{Duration, Instant};

use bloom_core::{BloomFilter, Layout};
use bloom_redis::{Rebuilt, RedisSync, RedisSyncBuilder};
use bloom_tower::SharedFilter;
use tracing_subscriber::fmt::MakeWriter;

/// Only a hang detector: no test asserts on timing.
const HANG: Duration = Duration::from_secs(20);

/// Every line `bloom_redis` logs (DEBUG and up), for the whole test binary (from the first
/// [`capture`]).
static LOGS: Mutex<Vec<u8>> = Mutex::new(Vec::new());

fn capture() {
    static INSTALLED: Once = Once::new();
    INSTALLED.call_once(|| {
        tracing_subscriber::fmt()
            .with_env_filter("bloom_redis=debug")
            .with_ansi(false)
            .with_writer(|| LOGS.make_writer())
            .init();
    });
}

/// The lines logged for `prefix`.
fn lines_of(prefix: &str) -> Vec<String> {
    let field = format!("prefix={prefix}");
    String::from_utf8_lossy(&LOGS.lock().unwrap())
        .lines()
        .filter(|line| line.split_whitespace().any(|word| word == field))
        .map(str::to_owned)
        .collect()
}

/// The WARN (and ERROR) lines logged for `prefix`.
fn warnings_of(prefix: &str) -> Vec<String> {
    lines_of(prefix)
        .into_iter()
        .filter(|line| line.contains(" WARN ") || line.contains(" ERROR "))
        .collect()
}

/// Polls until `done`; panics after [`HANG`].
async fn eventually(what: &str, mut done: impl FnMut() -> bool) {
    let started = Instant::now();
    while !done() {
        assert!(started.elapsed() < HANG, "hang: {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

async fn join(
    url: &str,
    prefix: &str,
    configure: fn(RedisSyncBuilder) -> RedisSyncBuilder,
) -> RedisSync<u64> {
    capture();
    let filter = SharedFilter::new(
        BloomFilter::builder()
            .bits(1 << 20)
            .hashes(7)
            .layout(Layout::Blocked)
            .seed(0x1065_5eed)
            .build()
            .unwrap(),
    );
    configure(RedisSync::builder(url).prefix(prefix))
        .connect(&filter)
        .await
        .expect("join")
}

fn same(builder: RedisSyncBuilder) -> RedisSyncBuilder {
    builder
}

/// The database: ids `0..n`, with a count.
fn ids(n: u64) -> Vec<u64> {
    (0..n).collect()
}

fn holds(sync: &RedisSync<u64>, ids: &[u64]) -> bool {
    let current = sync.filter().current();
    ids.iter().all(|id| current.contains(id))
}

/// Two instances of a new fleet, on an empty Redis, join and check the shared filter against
/// a database that already holds ids, at the same time: one seeds it, the other switches to
/// what it seeded. Nothing was lost and nothing is stale: no warning, no "lost".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_fleet_seeds_the_shared_filter_without_a_warning() {
    let Some(server) = common::start() else {
        return;
    };
    let url = server.url();
    let prefix = "new-fleet";
    let (a, b) = tokio::join!(join(&url, prefix, same), join(&url, prefix, same));
    let source = ids(5_000);
    let (from_a, from_b) = tokio::join!(a.refill_if_lost(&source), b.refill_if_lost(&source));
    let outcomes = [from_a.expect("A's check"), from_b.expect("B's check")];
    assert!(
        outcomes
            .iter()
            .any(|o| matches!(o, Some(Rebuilt::Rebuilt { keys: 5_000, .. }))),
        "{outcomes:?}"
    );
    eventually("both hold every id", || {
        holds(&a, &source) && holds(&b, &source)
    })
    .await;
    // A third instance finds the shared filter filled: nothing to do.
    let c = join(&url, prefix, same).await;
    assert_eq!(c.refill_if_lost(&source).await.expect("C's check"), None);
    tokio::time::sleep(Duration::from_millis(300)).await;

    let lines = lines_of(prefix);
    assert!(
        lines
            .iter()
            .any(|line| line.contains(" INFO ") && line.contains("no shared filter in Redis yet")),
        "the seeding is logged:\n{}",
        lines.join("\n")
    );
    let warnings = warnings_of(prefix);
    assert!(warnings.is_empty(), "{}", warnings.join("\n"));
    let lost: Vec<&String> = lines.iter().filter(|line| line.contains("lost")).collect();
    assert!(lost.is_empty(), "{lost:?}");
}

/// A running fleet seeded from the database; Redis loses everything (`FLUSHALL`). The running
/// instance logs the loss and pushes its bits back (and the mark that the filter was filled);
/// an instance that joins afterwards and finds fewer keys than the database (those of an
/// instance that died with Redis's data) logs a loss too, not a new fleet.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_losing_its_data_under_a_running_fleet_is_logged_as_a_loss() {
    let Some(server) = common::start() else {
        return;
    };
    let url = server.url();
    let prefix = "flushed";
    let fast = |b: RedisSyncBuilder| b.reconcile_every(Duration::from_millis(200));
    let a = join(&url, prefix, fast).await;
    let seeded = ids(5_000);
    assert!(matches!(
        a.refill_if_lost(&seeded).await.expect("A seeds"),
        Some(Rebuilt::Rebuilt { keys: 5_000, .. })
    ));
    assert!(warnings_of(prefix).is_empty(), "{:?}", warnings_of(prefix));

    let client = redis::Client::open(url.as_str()).unwrap();
    let mut redis = client.get_multiplexed_async_connection().await.unwrap();
    redis::cmd("FLUSHALL")
        .query_async::<()>(&mut redis)
        .await
        .unwrap();
    eventually("A logs that Redis lost its data", || {
        warnings_of(prefix)
            .iter()
            .any(|line| line.contains("data was replaced"))
    })
    .await;
    let config = format!("{{{prefix}}}:config");
    let started = Instant::now();
    loop {
        let filled: Option<String> = redis::cmd("HGET")
            .arg(&config)
            .arg("filled")
            .query_async(&mut redis)
            .await
            .unwrap();
        if filled.is_some() {
            break;
        }
        assert!(
            started.elapsed() < HANG,
            "A did not mark the filter it pushed back as filled"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // The database also holds ids only an instance that died with Redis's data had.
    let database = ids(8_000);
    let b = join(&url, prefix, fast).await;
    assert!(matches!(
        b.refill_if_lost(&database).await.expect("B refills"),
        Some(Rebuilt::Rebuilt { keys: 8_000, .. })
    ));
    let lost: Vec<String> = warnings_of(prefix)
        .into_iter()
        .filter(|line| line.contains("Redis lost data"))
        .collect();
    assert_eq!(lost.len(), 1, "{:?}", lines_of(prefix));
    let seeded: Vec<String> = lines_of(prefix)
        .into_iter()
        .filter(|line| line.contains("no shared filter in Redis yet"))
        .collect();
    assert_eq!(seeded.len(), 1, "only A's seeding: {seeded:?}");
}

/// Instances join one after another (the defaults: 100 ms heartbeats, stale after 1 s). Each
/// is not fresh until its own first heartbeat comes back, and the others pull from each
/// newcomer once: the normal course of a join, logged at DEBUG, not as a stale view.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_normal_join_logs_no_stale_warning() {
    let Some(server) = common::start() else {
        return;
    };
    let url = server.url();
    let prefix = "joins";
    let mut fleet = Vec::new();
    for _ in 0..4 {
        let instance = join(&url, prefix, same).await;
        eventually("the newcomer is fresh", || instance.stats().fresh).await;
        fleet.push(instance);
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    for instance in &fleet {
        assert!(instance.stats().fresh, "{:?}", instance.stats());
    }
    let warnings = warnings_of(prefix);
    assert!(warnings.is_empty(), "{}", warnings.join("\n"));
}
