//! Against a real `redis-server` (see `common`): reconciliation moves what changed, not the
//! filter. An idle fleet pulls no segment; inserts received through pub/sub are not pulled
//! again; a write whose version bump was lost is caught by the full pass; an instance that
//! joins from a snapshot pulls only the segments that differ, and pushes what only it holds.

mod common;

use std::time::{Duration, Instant};

use bloom_core::{BloomFilter, Layout};
use bloom_redis::{RedisSync, RedisSyncBuilder};
use bloom_tower::SharedFilter;

/// 2 MiB of bits: 32 segments of the default 64 KiB.
const BITS: u64 = 1 << 24;
const SEGMENT: u64 = 64 << 10;
const SEED: u128 = 0x1ce_1ce_1ce_1ce_1ce_1ce_1ce_1ce;
/// Only a hang detector: no test asserts on timing.
const HANG: Duration = Duration::from_secs(20);

fn bloom() -> BloomFilter {
    BloomFilter::builder()
        .bits(BITS)
        .hashes(7)
        .layout(Layout::Blocked)
        .seed(SEED)
        .build()
        .unwrap()
}

async fn join_with(
    url: &str,
    prefix: &str,
    filter: BloomFilter,
    configure: impl FnOnce(RedisSyncBuilder) -> RedisSyncBuilder,
) -> RedisSync<String> {
    // Passes run only when a test asks, unless it says otherwise.
    let builder = RedisSync::builder(url)
        .prefix(prefix)
        .reconcile_every(Duration::from_secs(600));
    configure(builder)
        .connect(&SharedFilter::new(filter))
        .await
        .expect("join")
}

async fn join(url: &str, prefix: &str) -> RedisSync<String> {
    join_with(url, prefix, bloom(), |b| b).await
}

async fn eventually(what: &str, mut done: impl FnMut() -> bool) {
    let started = Instant::now();
    while !done() {
        assert!(started.elapsed() < HANG, "hang: {what}");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

fn keys(tag: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{tag}:{i}")).collect()
}

fn holds(sync: &RedisSync<String>, keys: &[String]) -> bool {
    keys.iter().all(|k| sync.filter().current().contains(k))
}

/// A copy of the instance's bits, as a snapshot file would restore them.
fn snapshot(sync: &RedisSync<String>) -> BloomFilter {
    let copy = bloom();
    let current = sync.filter().current();
    let words: Vec<u64> = current.as_plain().unwrap().words().collect();
    copy.union_words(0, &words);
    copy
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inserts_received_through_pubsub_are_not_pulled_again_and_an_idle_pass_moves_nothing() {
    let Some(server) = common::start() else {
        return;
    };
    let url = server.url();
    let (a, b, c) = (
        join(&url, "idle").await,
        join(&url, "idle").await,
        join(&url, "idle").await,
    );
    tokio::time::sleep(Duration::from_millis(300)).await; // subscriptions
    let inserted = keys("user", 2_000);
    for key in &inserted {
        a.filter().insert(key);
    }
    eventually("B and C hold A's inserts", || {
        holds(&b, &inserted) && holds(&c, &inserted)
    })
    .await;
    a.propagated().await.unwrap();
    for (name, instance) in [("A", &a), ("B", &b), ("C", &c)] {
        let report = instance.reconcile_now().await.unwrap();
        assert!(!report.full, "{name}: {report:?}");
        assert_eq!(
            (
                report.segments_pulled,
                report.bytes_pulled,
                report.bytes_pushed
            ),
            (0, 0, 0),
            "{name}: the inserts touched every segment, and it held them all already: {report:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_whose_version_bump_was_lost_is_caught_by_the_full_pass() {
    let Some(mut server) = common::start() else {
        return;
    };
    let url = server.url();
    let b = join(&url, "lost").await;
    let c = join_with(&url, "lost", bloom(), |builder| {
        builder.full_pass_every(Duration::from_millis(300))
    })
    .await;
    // Passes every 200 ms, a full one only every hour — or after a reconnection.
    let d = join_with(&url, "lost", bloom(), |builder| {
        builder.reconcile_every(Duration::from_millis(200))
    })
    .await;
    // The key's bits land in Redis without their version bump (a writer that lost it).
    let key = "written-without-a-bump".to_owned();
    let client = redis::Client::open(url.as_str()).unwrap();
    let mut raw = client.get_multiplexed_async_connection().await.unwrap();
    let mut pipe = redis::pipe();
    bloom().for_each_bit(&key, |bit| {
        let (byte, in_byte) = (bit / 8, 7 - bit % 8);
        let s = byte / SEGMENT;
        pipe.cmd("SETBIT")
            .arg(format!("{{lost:g1:{}}}:seg{s}", s / 64))
            .arg((byte % SEGMENT) * 8 + in_byte)
            .arg(1)
            .ignore();
    });
    pipe.query_async::<()>(&mut raw).await.unwrap();

    // Versions did not move: the incremental pass does not look.
    let report = b.reconcile_now().await.unwrap();
    assert_eq!(report.segments_pulled, 0, "{report:?}");
    assert!(!b.filter().current().contains(&key));
    // The full pass compares digests and pulls the segment.
    let report = b.full_pass_now().await.unwrap();
    assert!(report.full && report.segments_pulled >= 1, "{report:?}");
    assert!(b.filter().current().contains(&key));
    // And it runs on its own every `full_pass_every`.
    let reconciles = c.stats().reconciles;
    c.reconcile_now().await.unwrap(); // due: more than 300 ms since the join's full pass
    tokio::time::sleep(Duration::from_millis(350)).await;
    c.reconcile_now().await.unwrap();
    assert!(c.stats().reconciles >= reconciles + 2);
    assert!(c.filter().current().contains(&key));
    // D's periodic passes are incremental: it does not hold the key...
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!d.filter().current().contains(&key));
    // ... until a reconnection, after which a full pass is owed.
    server.pause();
    eventually("D notices Redis is gone", || !d.stats().connected).await;
    server.resume();
    eventually("D's full pass after the reconnection pulls the key", || {
        d.filter().current().contains(&key)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn joining_from_a_snapshot_pulls_only_the_segments_that_differ() {
    let Some(server) = common::start() else {
        return;
    };
    let url = server.url();
    let a = join(&url, "snap").await;
    let before = keys("before", 20_000);
    for key in &before {
        a.filter().insert(key);
    }
    a.propagated().await.unwrap();
    // B ran, saved a snapshot, and crashed; it had inserted a key of its own that never
    // reached Redis (its publish was still queued).
    let saved = snapshot(&a);
    let only_b = "inserted-on-b-before-the-crash".to_owned();
    saved.insert(&only_b);
    // Meanwhile one key more is created on A.
    let after = "after-the-snapshot".to_owned();
    a.filter().insert(&after);
    a.propagated().await.unwrap();

    // Without pub/sub no catch-up pass follows the join: the last report is the join's.
    let b = join_with(&url, "snap", saved, |builder| builder.pubsub(false)).await;
    let report = b.stats().last_reconcile.unwrap();
    let segments = BITS / 8 / SEGMENT;
    assert!(report.full, "{report:?}");
    // Blocked layout: each key's bits lie in one 512-bit block, so in one segment each.
    assert!(
        (1..=2).contains(&report.segments_pulled) && report.bytes_pulled <= 2 * SEGMENT,
        "pulled {} of {segments} segments: {report:?}",
        report.segments_pulled
    );
    assert!(b.filter().current().contains(&after) && holds(&b, &before));
    // What only B held went up.
    assert!(report.segments_pushed >= 1, "{report:?}");
    a.reconcile_now().await.unwrap();
    assert!(a.filter().current().contains(&only_b));

    // Against it: an instance joining empty pulls every segment holding a bit.
    let empty = join_with(&url, "snap", bloom(), |builder| builder.pubsub(false)).await;
    let report = empty.stats().last_reconcile.unwrap();
    assert_eq!(report.segments_pulled, segments, "{report:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pass_that_missed_a_write_pulls_only_the_segment_it_touched() {
    let Some(server) = common::start() else {
        return;
    };
    let url = server.url();
    let a = join(&url, "missed").await;
    for key in keys("before", 5_000) {
        a.filter().insert(&key);
    }
    a.propagated().await.unwrap();
    // Hears nothing: every write reaches it through its passes only.
    let deaf = join_with(&url, "missed", bloom(), |b| b.pubsub(false)).await;
    let key = "one-more".to_owned();
    a.filter().insert(&key);
    a.propagated().await.unwrap();
    let report = deaf.reconcile_now().await.unwrap();
    // Blocked layout: the key's bits are in one segment; the other 31 of its group did not move.
    assert_eq!(
        (report.segments_pulled, report.bytes_pushed),
        (1, 0),
        "{report:?}"
    );
    assert!(report.bytes_pulled <= SEGMENT, "{report:?}");
    assert!(deaf.filter().current().contains(&key));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bits_dropped_from_the_publish_queue_in_an_outage_are_pushed_from_their_dirty_segments() {
    let Some(mut server) = common::start() else {
        return;
    };
    let url = server.url();
    // No periodic pass within the test: only the passes the reconnection starts (the full
    // pass a reconnection owes waits for a periodic one).
    let a = join(&url, "dirty").await;
    let b = join(&url, "dirty").await;
    tokio::time::sleep(Duration::from_millis(300)).await; // subscriptions
    server.pause();
    // More bits than the publish queue keeps (1 Mi): the queue is dropped, its segments dirty.
    let during = keys("during-the-outage", 160_000);
    for key in &during {
        a.filter().insert(key);
    }
    // Long enough for a publish holding the whole queue to time out (2 s each) and drop it.
    eventually("A's publishes failed", || a.stats().publish_errors >= 2).await;
    server.resume();
    eventually("B holds the keys A could not publish", || {
        holds(&b, &during)
    })
    .await;
    // Pushed by an incremental pass (A's periodic passes, full ones included, are 10 minutes
    // apart): only its dirty marks could tell it which segments to push.
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prefix_in_the_unversioned_layout_is_refused_with_the_way_out() {
    let Some(server) = common::start() else {
        return;
    };
    let url = server.url();
    // What 0.1 left: the config without `format`, one hash tag for every key.
    let client = redis::Client::open(url.as_str()).unwrap();
    let mut raw = client.get_multiplexed_async_connection().await.unwrap();
    let seed = format!("{SEED:032x}");
    redis::cmd("HSET")
        .arg("{old}:config")
        .arg(&[
            "m",
            &BITS.to_string(),
            "k",
            "7",
            "layout",
            "blocked",
            "seed",
            &seed,
        ])
        .query_async::<()>(&mut raw)
        .await
        .unwrap();
    let error = RedisSync::builder(&url)
        .prefix("old")
        .connect(&SharedFilter::<String>::new(bloom()))
        .await
        .unwrap_err();
    assert!(
        matches!(error, bloom_redis::Error::ParameterMismatch { .. }),
        "{error}"
    );
    assert!(
        error
            .to_string()
            .contains("another key layout (unversioned")
            && error.to_string().contains("own prefix"),
        "{error}"
    );
}
