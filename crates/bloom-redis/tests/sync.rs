//! Against a real `redis-server` (see `common`): propagation, reconciliation, outages,
//! generations, parameter checks, segments.

mod common;

use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bloom_core::{BloomFilter, Layout};
use bloom_redis::{Error, Rebuilt, RedisSync};
use bloom_tower::{SharedFilter, key_source};
use futures_util::StreamExt;

const BITS: u64 = 1 << 20;
const SEED: u128 = 0x5eed_5eed_5eed_5eed_5eed_5eed_5eed_5eed;
/// Only a hang detector: no test asserts on timing.
const HANG: Duration = Duration::from_secs(20);

/// A filter of text keys (every test here inserts `String`s or `&str`s).
fn filter(bits: u64, hashes: u32, seed: u128) -> SharedFilter<String> {
    SharedFilter::new(
        BloomFilter::builder()
            .bits(bits)
            .hashes(hashes)
            .layout(Layout::Blocked)
            .seed(seed)
            .build()
            .unwrap(),
    )
}

async fn join(
    url: &str,
    prefix: &str,
    configure: fn(bloom_redis::RedisSyncBuilder) -> bloom_redis::RedisSyncBuilder,
) -> RedisSync<String> {
    let builder = RedisSync::builder(url).prefix(prefix);
    configure(builder)
        .connect(&filter(BITS, 7, SEED))
        .await
        .expect("join")
}

fn same(b: bloom_redis::RedisSyncBuilder) -> bloom_redis::RedisSyncBuilder {
    b
}

/// Polls until `done`; panics after [`HANG`]. Returns how long it took.
async fn eventually(what: &str, mut done: impl FnMut() -> bool) -> Duration {
    let started = Instant::now();
    while !done() {
        assert!(started.elapsed() < HANG, "hang: {what}");
        tokio::time::sleep(Duration::from_micros(200)).await;
    }
    started.elapsed()
}

/// Whether every instance's own filter holds every key. The raw filter, not
/// `SharedFilter::contains`, which also lets keys through while an instance is stale.
fn all_contain(instances: &[&RedisSync<String>], keys: &[String]) -> bool {
    instances
        .iter()
        .all(|i| keys.iter().all(|k| i.filter().current().contains(k)))
}

/// Redis's copy of generation `generation`, read segment by segment into a filter.
async fn redis_copy(url: &str, prefix: &str, generation: u64, segment_bytes: u64) -> BloomFilter {
    let client = redis::Client::open(url).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let copy = BloomFilter::builder()
        .bits(BITS)
        .hashes(7)
        .seed(SEED)
        .build()
        .unwrap();
    let segments = (BITS / 8).div_ceil(segment_bytes);
    for s in 0..segments {
        let key = format!("{{{prefix}:g{generation}:{}}}:seg{s}", s / 64);
        let bytes: Option<Vec<u8>> = redis::cmd("GET")
            .arg(&key)
            .query_async(&mut conn)
            .await
            .unwrap();
        let bytes = bytes.unwrap_or_default();
        assert!(bytes.len() as u64 <= segment_bytes);
        let words: Vec<u64> = bytes
            .chunks(8)
            .map(|c| {
                let mut w = [0u8; 8];
                w[..c.len()].copy_from_slice(c);
                u64::from_le_bytes(w)
            })
            .collect();
        copy.union_words((s * segment_bytes / 8) as usize, &words);
    }
    copy
}

fn keys(tag: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{tag}:{i}")).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_insert_on_one_instance_reaches_the_others() {
    let Some(server) = common::start() else {
        return;
    };
    let url = server.url();
    let slow = |b: bloom_redis::RedisSyncBuilder| b.reconcile_every(Duration::from_secs(600));
    let (a, b, c) = (
        join(&url, "prop", slow).await,
        join(&url, "prop", slow).await,
        join(&url, "prop", slow).await,
    );
    // Let the subscribers subscribe.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut latencies = Vec::new();
    for key in keys("user", 200) {
        assert!(!b.filter().current().contains(&key) && !c.filter().current().contains(&key));
        let started = Instant::now();
        a.filter().insert(&key);
        eventually("B and C see A's insert", || {
            b.filter().current().contains(&key) && c.filter().current().contains(&key)
        })
        .await;
        latencies.push(started.elapsed());
    }
    latencies.sort();
    eprintln!(
        "propagation A -> B and C through pub/sub (200 inserts): p50 {:?}, p99 {:?}, max {:?}",
        latencies[100], latencies[197], latencies[199]
    );
    assert_eq!(b.stats().received, c.stats().received);
    assert!(a.stats().connected && a.stats().published > 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconciliation_alone_converges_within_one_interval() {
    let Some(server) = common::start() else {
        return;
    };
    let url = server.url();
    let no_pubsub = |b: bloom_redis::RedisSyncBuilder| {
        b.pubsub(false).reconcile_every(Duration::from_millis(500))
    };
    let (a, b, c) = (
        join(&url, "rec", no_pubsub).await,
        join(&url, "rec", no_pubsub).await,
        join(&url, "rec", no_pubsub).await,
    );
    let from_a = keys("a", 300);
    let from_c = keys("c", 300);
    for key in &from_a {
        a.filter().insert(key);
    }
    for key in &from_c {
        c.filter().insert(key);
    }
    let took = eventually("reconciliation converges", || {
        all_contain(&[&a, &b, &c], &from_a) && all_contain(&[&a, &b, &c], &from_c)
    })
    .await;
    eprintln!("converged by reconciliation alone (interval 500 ms) in {took:?}");
    assert_eq!(b.stats().received, 0, "pub/sub was off");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_outage_loses_nothing_and_an_empty_restart_is_refilled() {
    let Some(mut server) = common::start() else {
        return;
    };
    let url = server.url();
    let fast = |b: bloom_redis::RedisSyncBuilder| {
        b.reconcile_every(Duration::from_millis(300))
            .response_timeout(Duration::from_millis(500))
    };
    let (a, b, c) = (
        join(&url, "outage", fast).await,
        join(&url, "outage", fast).await,
        join(&url, "outage", fast).await,
    );
    let before = keys("before", 300);
    for (i, key) in before.iter().enumerate() {
        [&a, &b, &c][i % 3].filter().insert(key);
    }
    eventually("propagated before the outage", || {
        all_contain(&[&a, &b, &c], &before)
    })
    .await;

    server.kill();
    // Every instance keeps answering from its filter and keeps accepting inserts.
    let during: Vec<Vec<String>> = ["da", "db", "dc"].iter().map(|t| keys(t, 200)).collect();
    for (instance, keys) in [&a, &b, &c].iter().zip(&during) {
        for key in keys {
            let started = Instant::now();
            instance.filter().insert(key);
            assert!(
                started.elapsed() < Duration::from_millis(50),
                "an insert blocked"
            );
            assert!(instance.filter().current().contains(key));
        }
        assert!(
            before
                .iter()
                .all(|k| instance.filter().current().contains(k)),
            "false negative during the outage"
        );
    }
    eventually("the outage is reported", || {
        [&a, &b, &c].iter().all(|i| !i.stats().connected)
    })
    .await;
    assert!(all_contain(&[&a, &b, &c], &before));

    server.restart_empty();
    let all: Vec<String> = before
        .iter()
        .chain(during.iter().flatten())
        .cloned()
        .collect();
    let took = eventually("every instance holds every key again", || {
        all_contain(&[&a, &b, &c], &all)
    })
    .await;
    eprintln!("after the empty restart, all instances hold all keys in {took:?}");
    eventually("reconnected", || {
        [&a, &b, &c].iter().all(|i| i.stats().connected)
    })
    .await;
    // And Redis holds every key again.
    let started = Instant::now();
    loop {
        let copy = redis_copy(&url, "outage", 1, 64 << 10).await;
        if all.iter().all(|k| copy.contains(k)) {
            break;
        }
        assert!(started.elapsed() < HANG, "Redis was not refilled");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let stats = a.stats();
    assert!(
        stats.reconcile_errors + stats.publish_errors > 0,
        "{stats:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_instance_rebuilds_and_keys_inserted_anywhere_meanwhile_survive() {
    let Some(server) = common::start() else {
        return;
    };
    let url = server.url();
    let cfg = |b: bloom_redis::RedisSyncBuilder| b.reconcile_every(Duration::from_millis(500));
    let (a, b, c) = (
        Arc::new(join(&url, "gen", cfg).await),
        Arc::new(join(&url, "gen", cfg).await),
        Arc::new(join(&url, "gen", cfg).await),
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    for instance in [&a, &b, &c] {
        instance.filter().insert("deleted-user");
    }
    // Deleted before the rebuild: its messages are delivered before the rebuild begins (one
    // arriving after an instance started double-writing would be routed into the new
    // generation, as the routing rule must do for a key inserted then).
    for instance in [&a, &b, &c] {
        instance.propagated().await.unwrap();
    }
    tokio::time::sleep(Duration::from_millis(50)).await;
    let reads = Arc::new(AtomicU64::new(0));
    // The database: a key is inserted into the filter, then committed (pushed here); the
    // source snapshots it when the rebuild reads it (the KeySource contract).
    let db = Arc::new(Mutex::new(keys("db", 2_000)));
    let source = {
        let (reads, db) = (Arc::clone(&reads), Arc::clone(&db));
        Arc::new(key_source::from_stream(move || {
            reads.fetch_add(1, Ordering::SeqCst);
            let snapshot = db.lock().unwrap().clone();
            // A slow source, so that inserts happen while it streams.
            futures_util::stream::iter(snapshot).then(|key| async move {
                tokio::time::sleep(Duration::from_micros(500)).await;
                Ok::<_, Infallible>(key)
            })
        }))
    };
    let rebuilds: Vec<_> = [&a, &b, &c]
        .into_iter()
        .map(|instance| {
            let (instance, source) = (Arc::clone(instance), Arc::clone(&source));
            tokio::spawn(async move { instance.rebuild(&*source).await.unwrap() })
        })
        .collect();
    let mut during = Vec::new();
    let started = Instant::now();
    let mut i = 0;
    while !rebuilds.iter().all(|r| r.is_finished()) {
        let key = format!("during:{i}");
        [&a, &b, &c][i % 3].filter().insert(&key);
        db.lock().unwrap().push(key.clone());
        during.push(key);
        i += 1;
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let mut outcomes = Vec::new();
    for r in rebuilds {
        outcomes.push(r.await.unwrap());
    }
    eprintln!(
        "rebuild took {:?}; {} keys inserted meanwhile; outcomes {outcomes:?}",
        started.elapsed(),
        during.len()
    );
    let rebuilt = outcomes
        .iter()
        .filter(|o| matches!(o, Rebuilt::Rebuilt { keys, generation: 2 } if *keys >= 2_000))
        .count();
    assert_eq!(rebuilt, 1, "exactly one instance rebuilds: {outcomes:?}");
    assert_eq!(reads.load(Ordering::SeqCst), 1, "the source was read once");
    assert!(!during.is_empty());
    eventually("every instance switched", || {
        [&a, &b, &c]
            .iter()
            .all(|i| i.stats().generation == 2 && i.stats().building.is_none())
    })
    .await;
    // The source's keys are everywhere at the switch; the keys inserted during the rebuild
    // were double-written and propagated for both generations by the same messages (the
    // last few may still be in flight: poll, as for any insert).
    let expected: Vec<String> = keys("db", 2_000).into_iter().chain(during).collect();
    eventually("every key everywhere after the switch", || {
        all_contain(&[&a, &b, &c], &expected)
    })
    .await;
    let deleted = [&a, &b, &c]
        .iter()
        .filter(|i| i.filter().current().contains("deleted-user"))
        .count();
    assert_eq!(
        deleted, 0,
        "the rebuild dropped a key the source no longer has"
    );
}

/// Only a plain filter's bits can be OR-ed across instances (a counting filter's counters,
/// a scalable filter's stages and a cuckoo filter's fingerprints cannot); refused before
/// connecting.
#[tokio::test]
async fn a_counting_scalable_or_cuckoo_filter_is_refused_with_a_clear_error() {
    let counting = bloom_core::CountingBloomFilter::new(1_000, 0.01).unwrap();
    let scalable = bloom_core::ScalableBloomFilter::new(1_000, 0.01).unwrap();
    let cuckoo = bloom_core::CuckooFilter::new(1_000, 0.01).unwrap();
    for (kind, filter) in [
        ("counting", SharedFilter::<String>::new(counting)),
        ("scalable", SharedFilter::<String>::new(scalable)),
        ("cuckoo", SharedFilter::<String>::new(cuckoo)),
    ] {
        // Nothing listens on this port: the filter is refused before any connection.
        let error = RedisSync::builder("redis://127.0.0.1:1")
            .connect(&filter)
            .await
            .unwrap_err();
        assert!(
            matches!(error, Error::NotPlain { kind: k } if k == kind),
            "{error}"
        );
        assert!(error.to_string().contains("plain BloomFilter"), "{error}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn different_parameters_refuse_to_join() {
    let Some(server) = common::start() else {
        return;
    };
    let url = server.url();
    let _a = join(&url, "params", same).await;
    let b = RedisSync::builder(&url)
        .prefix("params")
        .connect(&filter(BITS, 5, SEED))
        .await
        .unwrap_err();
    assert!(matches!(b, Error::ParameterMismatch { .. }), "{b}");
    let message = b.to_string();
    assert!(
        message.contains("number of hashes k differs (this instance 5, Redis 7)"),
        "{message}"
    );
    let c = RedisSync::builder(&url)
        .prefix("params")
        .connect(&filter(BITS, 7, SEED + 1))
        .await
        .unwrap_err()
        .to_string();
    assert!(c.contains("hash key"), "{c}");
    assert!(
        !c.contains(&format!("{SEED:x}")) && !c.contains(&format!("{:x}", SEED + 1)),
        "{c}"
    );
    let d = RedisSync::builder(&url)
        .prefix("params")
        .connect(&filter(BITS * 2, 7, SEED))
        .await
        .unwrap_err()
        .to_string();
    assert!(d.contains("number of bits m differs"), "{d}");
    // Bits are found by the segment size: it must agree too.
    let e = RedisSync::builder(&url)
        .prefix("params")
        .segment_bytes(1 << 10)
        .connect(&filter(BITS, 7, SEED))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("segment_bytes differs (this instance 1024, Redis 65536)"),
        "{e}"
    );
    // Another prefix is another filter.
    RedisSync::builder(&url)
        .prefix("params-2")
        .connect(&filter(BITS, 5, SEED))
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_filter_split_over_many_segments_round_trips() {
    let Some(server) = common::start() else {
        return;
    };
    let url = server.url();
    const SEGMENT: u64 = 1000; // 128 KiB of bits in 132 keys; not a divisor of the size
    let tiny = |b: bloom_redis::RedisSyncBuilder| {
        b.segment_bytes(SEGMENT)
            .reconcile_every(Duration::from_millis(200))
    };
    let a = join(&url, "seg", tiny).await;
    let inserted = keys("k", 3_000);
    for key in &inserted {
        a.filter().insert(key); // SETBIT path: bit offsets converted to Redis's bit order
    }
    // Redis's bytes equal A's words: the SETBIT offsets and the BITOP uploads agree on the
    // byte and bit order.
    let started = Instant::now();
    loop {
        let copy = redis_copy(&url, "seg", 1, SEGMENT).await;
        if copy.words().eq(plain_words(&a)) {
            break;
        }
        assert!(started.elapsed() < HANG, "Redis never matched A's bits");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let client = redis::Client::open(url.as_str()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let mut ones = 0u64;
    let mut segments = 0;
    for s in 0..(BITS / 8).div_ceil(SEGMENT) {
        let key = format!("{{seg:g1:{}}}:seg{s}", s / 64);
        let count: u64 = redis::cmd("BITCOUNT")
            .arg(&key)
            .query_async(&mut conn)
            .await
            .unwrap();
        let exists: bool = redis::cmd("EXISTS")
            .arg(&key)
            .query_async(&mut conn)
            .await
            .unwrap();
        ones += count;
        segments += u64::from(exists);
    }
    assert_eq!(
        ones,
        plain_words(&a)
            .map(|w| u64::from(w.count_ones()))
            .sum::<u64>()
    );
    assert!(segments > 100, "{segments} segment keys");
    // A new instance pulls every segment.
    let b = join(&url, "seg", tiny).await;
    assert!(inserted.iter().all(|k| b.filter().current().contains(k)));
    assert!(plain_words(&b).eq(plain_words(&a)));
    // And its own bits go up through the BITOP path.
    let from_b = keys("b", 500);
    b.shutdown();
    for key in &from_b {
        b.filter().insert(key); // not propagated: the hook is gone
    }
    let report = b.full_pass_now().await.unwrap();
    assert!(
        report.segments_pushed > 0 && report.bytes_pushed > 0,
        "{report:?}"
    );
    let copy = redis_copy(&url, "seg", 1, SEGMENT).await;
    assert!(from_b.iter().chain(&inserted).all(|k| copy.contains(k)));
}

/// The words of an instance's serving filter (always a plain one under bloom-redis).
fn plain_words(sync: &RedisSync<String>) -> std::vec::IntoIter<u64> {
    let current = sync.filter().current();
    let plain = current
        .as_plain()
        .expect("bloom-redis serves plain filters");
    plain.words().collect::<Vec<_>>().into_iter()
}

/// On a synchronised filter, the filter's own `reload_from` (and so its `rebuild_every`) runs
/// the fleet's rebuild: a new generation every instance switches to, not a local swap that
/// the others never see.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_local_reload_from_rebuilds_the_whole_fleet() {
    let Some(server) = common::start() else {
        return;
    };
    let url = server.url();
    let (a, b) = (
        join(&url, "owner", same).await,
        join(&url, "owner", same).await,
    );
    a.filter().insert("deleted-user");
    eventually("the insert reached B", || {
        b.filter().current().contains("deleted-user")
    })
    .await;
    let source = keys("db", 500);
    let reloaded = a
        .filter()
        .reload_from(&source)
        .await
        .expect("a fleet rebuild");
    assert_eq!(
        reloaded,
        bloom_tower::shared_filter::Reloaded::Rebuilt { keys: 500 }
    );
    eventually("B switched to the new generation", || {
        b.stats().generation == 2
    })
    .await;
    assert_eq!(a.stats().rebuilds, 1);
    assert!(all_contain(&[&a, &b], &source));
    for instance in [&a, &b] {
        assert!(!instance.filter().current().contains("deleted-user"));
    }
    assert_eq!(
        b.filter().stats().rebuilds,
        1,
        "B's filter was swapped once: by the switch to A's generation"
    );
}

/// A SplitBlock filter (k = 8, one bit in each word of a block) syncs like a Blocked one: an
/// insert reaches the other instance bit for bit, and Redis records the layout, so a Blocked
/// filter of the same m, k and hash key is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_split_block_filter_syncs_and_refuses_another_layout() {
    let Some(server) = common::start() else {
        return;
    };
    let url = server.url();
    let split = || {
        SharedFilter::new(
            BloomFilter::builder()
                .bits(BITS)
                .layout(Layout::SplitBlock)
                .seed(SEED)
                .build()
                .unwrap(),
        )
    };
    let join_split = || async {
        RedisSync::builder(&url)
            .prefix("split")
            .reconcile_every(Duration::from_secs(600))
            .connect(&split())
            .await
            .expect("join")
    };
    let (a, b) = (join_split().await, join_split().await);
    assert_eq!(a.filter().current().layout(), Some(Layout::SplitBlock));
    // Let the subscribers subscribe.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let inserted = keys("split", 200);
    for key in &inserted {
        assert!(!b.filter().current().contains(key));
        a.filter().insert(key);
        eventually("B sees A's insert", || b.filter().current().contains(key)).await;
    }
    assert!(
        plain_words(&b).eq(plain_words(&a)),
        "B holds other bits than A"
    );

    let e = RedisSync::builder(&url)
        .prefix("split")
        .connect(&filter(BITS, 8, SEED))
        .await
        .unwrap_err();
    assert!(matches!(e, Error::ParameterMismatch { .. }), "{e}");
    let message = e.to_string();
    assert!(
        message.contains("layout differs (this instance blocked, Redis split-block)"),
        "{message}"
    );
}

/// A rebuild run by one instance of three while keys are inserted through each and, once
/// `propagated` returned, looked up at once through the others: none is answered "absent"
/// by an instance that has not switched yet (the rebuilder switches first and publishes its
/// inserts in the new generation only), nor by one that has.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn keys_published_in_the_new_generation_are_found_by_instances_that_have_not_switched() {
    let Some(server) = common::start() else {
        return;
    };
    let url = server.url();
    let cfg = |b: bloom_redis::RedisSyncBuilder| b.reconcile_every(Duration::from_millis(500));
    let fleet = Arc::new([
        join(&url, "switch", cfg).await,
        join(&url, "switch", cfg).await,
        join(&url, "switch", cfg).await,
    ]);
    eventually("fresh", || fleet.iter().all(|i| i.stats().fresh)).await;
    let db = Arc::new(Mutex::new(keys("db", 2_000)));
    let source = {
        let db = Arc::clone(&db);
        Arc::new(key_source::from_stream(move || {
            futures_util::stream::iter(db.lock().unwrap().clone()).map(Ok::<_, Infallible>)
        }))
    };
    let mut answered_absent = Vec::new();
    let mut checked = 0;
    for round in 0..3 {
        let rebuilder = round % 3;
        let rebuild = {
            let (fleet, source) = (Arc::clone(&fleet), Arc::clone(&source));
            tokio::spawn(async move { fleet[rebuilder].rebuild(&*source).await })
        };
        let generation = fleet[rebuilder].stats().generation;
        let mut i = 0;
        // Until a second after every instance switched.
        let mut switched_at = None;
        while switched_at.is_none_or(|at: Instant| at.elapsed() < Duration::from_secs(1)) {
            if switched_at.is_none()
                && rebuild.is_finished()
                && fleet.iter().all(|s| s.stats().generation > generation)
            {
                switched_at = Some(Instant::now());
            }
            assert!(i < 1_000_000, "the fleet never switched");
            let key = format!("round{round}:{i}");
            let writer = &fleet[i % 3];
            writer.filter().insert(&key);
            db.lock().unwrap().push(key.clone());
            let _ = writer.propagated().await;
            for (n, reader) in fleet.iter().enumerate() {
                if n != i % 3 {
                    checked += 1;
                    if !reader.filter().check(&key).await {
                        answered_absent.push((key.clone(), n, reader.stats().generation));
                    }
                }
            }
            i += 1;
        }
        rebuild.await.unwrap().unwrap();
    }
    assert!(
        answered_absent.is_empty(),
        "{} of {checked} keys answered absent after their propagated returned: {:?}",
        answered_absent.len(),
        &answered_absent[..answered_absent.len().min(10)]
    );
}

/// A prefix whose keys would be another fleet's (`a:g1:0` names fleet `a`'s first segment
/// group's tag), or that holds a hash-tag brace, is refused at `connect`, before any key is
/// written.
#[tokio::test]
async fn a_prefix_that_would_share_another_fleets_keys_is_refused() {
    let Some(server) = common::start() else {
        return;
    };
    for prefix in ["a:g1:0", "a{b}", ""] {
        let joined = RedisSync::builder(&server.url())
            .prefix(prefix)
            .connect(&filter(BITS, 7, SEED))
            .await;
        assert!(
            matches!(joined, Err(Error::Config(_))),
            "{prefix:?}: {:?}",
            joined.err()
        );
    }
}

/// The forged rebuild any client that can write the prefix could announce (`building`, an
/// open acknowledgement window, then `gen`): every instance follows it into a generation
/// holding none of its keys. None is turned away from them: each switches with every serving
/// key carried over (the switch rule in `generations.rs`), says so, and pushes them, so Redis's
/// copy of the forged generation holds them too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_generation_far_smaller_than_the_serving_one_is_adopted_with_every_key_carried_over() {
    let Some(server) = common::start() else {
        return;
    };
    let url = server.url();
    let cfg = |b: bloom_redis::RedisSyncBuilder| b.reconcile_every(Duration::from_millis(200));
    let (a, b) = (
        join(&url, "forged", cfg).await,
        join(&url, "forged", cfg).await,
    );
    let served = keys("user", 2_000);
    for key in &served {
        a.filter().insert(key);
    }
    a.propagated().await.unwrap();
    eventually("B holds A's keys", || all_contain(&[&b], &served)).await;
    let before = b.stats().generation;
    let forged = before + 1;

    let client = redis::Client::open(url.as_str()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let _: () = redis::cmd("SET")
        .arg("{forged}:building")
        .arg(forged)
        .query_async(&mut conn)
        .await
        .unwrap();
    let _: () = redis::cmd("SET")
        .arg(format!("{{forged}}:g{forged}:open"))
        .arg(1)
        .arg("PX")
        .arg(60_000)
        .query_async(&mut conn)
        .await
        .unwrap();
    // Both acknowledge (double-write it from now on, in time), as they would a real rebuild.
    let started = Instant::now();
    loop {
        let acked: Vec<String> = redis::cmd("SMEMBERS")
            .arg(format!("{{forged}}:g{forged}:acks"))
            .query_async(&mut conn)
            .await
            .unwrap();
        if acked.len() == 2 {
            break;
        }
        assert!(started.elapsed() < HANG, "hang: acknowledgements");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let _: () = redis::cmd("SET")
        .arg("{forged}:gen")
        .arg(forged)
        .query_async(&mut conn)
        .await
        .unwrap();
    eventually("both follow the forged generation", || {
        a.stats().generation == forged && b.stats().generation == forged
    })
    .await;
    let forgotten: Vec<(char, &String)> = [('a', &a), ('b', &b)]
        .iter()
        .flat_map(|(name, sync)| {
            served
                .iter()
                .filter(|key| !sync.filter().current().contains(key))
                .map(move |key| (*name, key))
        })
        .collect();
    assert!(
        forgotten.is_empty(),
        "{} keys forgotten after the forged switch: {:?}",
        forgotten.len(),
        &forgotten[..forgotten.len().min(10)]
    );
    assert!(a.stats().refused_switches >= 1 && b.stats().refused_switches >= 1);
    // Pushed back: Redis's copy of the forged generation holds them.
    a.reconcile_now().await.unwrap();
    let copy = redis_copy(&url, "forged", forged, 64 << 10).await;
    assert!(served.iter().all(|key| copy.contains(key)));
}

/// A roster message any client that can `PUBLISH` on the channel could send, as the mark
/// script encodes one: `Member` (kind 7) with words `[epoch, tag, version, pushed]`.
fn forged_member(sender: u64, epoch: u64, tag: u64, version: u64, pushed: u64) -> Vec<u8> {
    let mut message = vec![2u8, 7];
    for word in [sender, 0, epoch, tag, version, pushed] {
        message.extend_from_slice(&word.to_le_bytes());
    }
    message
}

/// R10 (`docs/REDIS-SYNC.md`): a roster message changes a view only once Redis's roster
/// confirms it. A forged `Member` message carrying the next version must not make an
/// instance skip the next real change: here the join of an instance whose filter already
/// held keys, which it pushed into Redis (not published) and announced. An instance that
/// took the forged version would not pull them, and its confirmed checks would answer
/// "absent" for them until its next round noticed the roster's version (a heartbeat later).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_roster_messages_do_not_hide_a_join() {
    let Some(server) = common::start() else {
        return;
    };
    let url = server.url();
    // Rounds far apart and no periodic pass: only the join's announcement tells A to pull.
    let slow = |b: bloom_redis::RedisSyncBuilder| {
        b.heartbeat(Duration::from_secs(4))
            .stale_after(Duration::from_secs(12))
            .reconcile_every(Duration::from_secs(600))
    };
    let a = join(&url, "roster", slow).await;
    eventually("A fresh", || a.stats().fresh).await;

    let client = redis::Client::open(url.as_str()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let version: Option<u64> = redis::cmd("GET")
        .arg("{roster}:roster:v")
        .query_async(&mut conn)
        .await
        .unwrap();
    // A's own entry, as anyone who can read the prefix sees it, announced again with a
    // the next version: nothing in A's view changes but the version it has heard.
    let roster: Vec<(String, String)> = redis::cmd("HGETALL")
        .arg("{roster}:roster")
        .query_async(&mut conn)
        .await
        .unwrap();
    let [(id, entry)] = &roster[..] else {
        panic!("one member: {roster:?}");
    };
    let fields: Vec<&str> = entry.split(':').collect();
    let forged = forged_member(
        u64::from_str_radix(id, 16).unwrap(),
        fields[0].parse().unwrap(),
        u64::from_str_radix(fields[1], 16).unwrap(),
        version.unwrap_or(0) + 1,
        fields.get(2).map_or(1, |pushed| pushed.parse().unwrap()),
    );
    let _: () = redis::cmd("PUBLISH")
        .arg("{roster}:bits")
        .arg(forged)
        .query_async(&mut conn)
        .await
        .unwrap();

    // C joins with keys its filter held before: its join pushes them into Redis.
    let held = keys("held", 300);
    let c_filter = filter(BITS, 7, SEED);
    for key in &held {
        c_filter.insert(key);
    }
    let c = RedisSync::builder(&url)
        .prefix("roster")
        .connect(&c_filter)
        .await
        .expect("join");
    eventually("C fresh", || c.stats().fresh).await;
    let mut answered_absent = Vec::new();
    for key in &held {
        if !a.filter().check(key).await {
            answered_absent.push(key.clone());
        }
    }
    assert!(
        answered_absent.is_empty(),
        "{} of {} keys C joined with answered \"absent\" by A after a forged roster message: {:?}",
        answered_absent.len(),
        held.len(),
        &answered_absent[..answered_absent.len().min(5)]
    );
    eventually("A holds C's keys", || all_contain(&[&a], &held)).await;
}
