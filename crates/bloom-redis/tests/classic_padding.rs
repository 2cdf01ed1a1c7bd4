//! Against a real `redis-server` (see `common`): a Classic filter whose m is not a multiple
//! of 64 has padding bits above m in its last word, which no key sets and a snapshot must
//! hold as 0 (its reader refuses the file otherwise). A client that can PUBLISH on the
//! fleet's channel, or write a segment, sets them: the instance ignores them (channel) or
//! masks them (segment), keeps every key, its snapshot still loads, and it does not push the
//! segment again on every pass.

mod common;

use std::sync::{Mutex, Once};
use std::time::{Duration, Instant};

use bloom_core::{BloomFilter, Layout};
use bloom_redis::RedisSync;
use bloom_tower::SharedFilter;
use tracing_subscriber::fmt::MakeWriter;

/// m: 1,564 words, the last one using 5 of its 64 bits (59 padding bits).
const BITS: u64 = 100_037;
const WORDS: u64 = BITS.div_ceil(64);
/// Four segments of 4 KiB; the last holds 224 bytes of the filter.
const SEGMENT: u64 = 4096;
const SEED: u128 = 0x9add_1e90_9add_1e90;
/// Only a hang detector: no test asserts on timing.
const HANG: Duration = Duration::from_secs(20);

/// Every line `bloom_redis` logs (WARN and up), for the whole test binary.
static LOGS: Mutex<Vec<u8>> = Mutex::new(Vec::new());

fn capture() {
    static INSTALLED: Once = Once::new();
    INSTALLED.call_once(|| {
        tracing_subscriber::fmt()
            .with_env_filter("bloom_redis=warn")
            .with_ansi(false)
            .with_writer(|| LOGS.make_writer())
            .init();
    });
}

/// The WARN lines logged for `prefix`.
fn warnings_of(prefix: &str) -> Vec<String> {
    let field = format!("prefix={prefix}");
    String::from_utf8_lossy(&LOGS.lock().unwrap())
        .lines()
        .filter(|line| line.contains(" WARN "))
        .filter(|line| line.split_whitespace().any(|word| word == field))
        .map(str::to_owned)
        .collect()
}

fn bloom() -> BloomFilter {
    BloomFilter::builder()
        .bits(BITS)
        .hashes(5)
        .layout(Layout::Classic)
        .seed(SEED)
        .build()
        .unwrap()
}

async fn join(url: &str, prefix: &str) -> RedisSync<String> {
    capture();
    // Passes run only when a test asks.
    RedisSync::builder(url)
        .prefix(prefix)
        .segment_bytes(SEGMENT)
        .reconcile_every(Duration::from_secs(600))
        .connect(&SharedFilter::new(bloom()))
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

fn keys(tag: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{tag}:{i}")).collect()
}

/// The instance's filter as its snapshot file holds it, read back: panics if the reader
/// refuses it. Checks that the padding is clear and every key is in the copy.
fn assert_snapshot_loads(sync: &RedisSync<String>, keys: &[String], who: &str) {
    let current = sync.filter().current();
    let filter = current.as_plain().expect("a plain filter");
    assert_eq!(
        filter.words().last().unwrap() >> (BITS % 64),
        0,
        "{who}: a padding bit above m is set"
    );
    let copy = BloomFilter::from_bytes(&filter.to_bytes())
        .unwrap_or_else(|e| panic!("{who}: its snapshot does not load: {e}"));
    let missing = keys.iter().filter(|k| !copy.contains(*k)).count();
    assert_eq!(missing, 0, "{who}: keys missing from the loaded snapshot");
    let missing = keys.iter().filter(|k| !filter.contains(*k)).count();
    assert_eq!(missing, 0, "{who}: keys missing from the filter");
}

/// A [`Kind::Bits`] message as `protocol.rs` lays it out (the encoder is crate-private):
/// `[version 2][kind 1][sender][generation][groups 0][segments 0][bit]*`, little-endian.
fn bits_message(sender: u64, generation: u64, bits: &[u64]) -> Vec<u8> {
    let mut out = vec![2u8, 1];
    out.extend_from_slice(&sender.to_le_bytes());
    out.extend_from_slice(&generation.to_le_bytes());
    for word in [0, 0].iter().chain(bits) {
        out.extend_from_slice(&word.to_le_bytes());
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn padding_bits_published_on_the_channel_are_ignored_and_the_snapshot_loads() {
    let Some(server) = common::start() else {
        return;
    };
    let url = server.url();
    let prefix = "padding-channel";
    let a = join(&url, prefix).await;
    let b = join(&url, prefix).await;
    tokio::time::sleep(Duration::from_millis(300)).await; // subscriptions
    let inserted = keys("user", 2_000);
    for key in &inserted {
        b.filter().insert(key);
    }
    b.propagated().await.expect("published");
    eventually("A holds B's keys", || {
        inserted.iter().all(|k| a.filter().current().contains(k))
    })
    .await;
    let generation = a.stats().generation;
    assert!(generation >= 1);

    // A well-formed bits message from a client that can PUBLISH: every padding bit, indices
    // past the last word (up to u64::MAX), and the bits of one real key.
    let forged_key = "sent-with-the-padding".to_owned();
    let mut bits: Vec<u64> = (BITS..WORDS * 64).collect();
    bits.extend([WORDS * 64, WORDS * 64 + 63, 1 << 40, u64::MAX]);
    bloom().for_each_bit(&forged_key, |bit| bits.push(bit));
    let client = redis::Client::open(url.as_str()).unwrap();
    let mut raw = client.get_multiplexed_async_connection().await.unwrap();
    let received = a.stats().received;
    let _: u64 = redis::cmd("PUBLISH")
        .arg(format!("{{{prefix}}}:bits"))
        .arg(bits_message(0x0bad_5e7d, generation, &bits))
        .query_async(&mut raw)
        .await
        .unwrap();
    eventually("A received the message", || a.stats().received > received).await;
    // The key's bits are taken (after the message is counted as received, so waited for);
    // the out-of-range indices are not, loudly.
    eventually("A took the key's bits", || {
        a.filter().current().contains(&forged_key)
    })
    .await;
    eventually("B took the key's bits", || {
        b.filter().current().contains(&forged_key)
    })
    .await;
    let mut all = inserted.clone();
    all.push(forged_key);
    assert_snapshot_loads(&a, &all, "A");
    assert_snapshot_loads(&b, &all, "B");
    let warned = warnings_of(prefix)
        .into_iter()
        .any(|line| line.contains("ignored bit indices at or above the filter's size"));
    assert!(warned, "no warning: {:?}", warnings_of(prefix));

    // The key's bits are in no segment (the message was only published): the first full
    // passes push them; after that, passes push nothing (the padding is not a bit to push).
    for (who, sync) in [("A", &a), ("B", &b), ("A", &a), ("B", &b)] {
        sync.full_pass_now().await.unwrap();
        assert_snapshot_loads(sync, &all, who);
    }
    for (who, sync) in [("A", &a), ("B", &b)] {
        let report = sync.full_pass_now().await.unwrap();
        assert_eq!(report.segments_pushed, 0, "{who}: {report:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn padding_bits_written_into_a_segment_are_masked_and_not_pushed_forever() {
    let Some(server) = common::start() else {
        return;
    };
    let url = server.url();
    let prefix = "padding-segment";
    let a = join(&url, prefix).await;
    let inserted = keys("user", 2_000);
    for key in &inserted {
        a.filter().insert(key);
    }
    a.propagated().await.expect("published");
    let generation = a.stats().generation;

    // A client that can write the prefix sets every padding bit in the last segment, and
    // bytes past the filter's last word, without a version bump (as SETBIT does).
    let last_segment = (WORDS * 8 - 1) / SEGMENT;
    let key = format!("{{{prefix}:g{generation}:0}}:seg{last_segment}");
    let client = redis::Client::open(url.as_str()).unwrap();
    let mut raw = client.get_multiplexed_async_connection().await.unwrap();
    let mut pipe = redis::pipe();
    for bit in BITS..WORDS * 64 {
        let byte = bit / 8 - last_segment * SEGMENT;
        pipe.cmd("SETBIT")
            .arg(&key)
            .arg(byte * 8 + (7 - bit % 8))
            .arg(1)
            .ignore();
    }
    pipe.cmd("SETRANGE")
        .arg(&key)
        .arg(WORDS * 8 - last_segment * SEGMENT + 3)
        .arg(&[0xFFu8; 16][..])
        .ignore();
    pipe.query_async::<()>(&mut raw).await.unwrap();

    // A full pass pulls the segment: the padding is masked, the snapshot loads.
    let report = a.full_pass_now().await.unwrap();
    assert!(report.full && report.segments_pulled >= 1, "{report:?}");
    assert_snapshot_loads(&a, &inserted, "A");
    // The local copy lacks nothing Redis holds that it can hold: no push, now or later
    // (an OR would not clear the padding, so pushing would never end).
    for pass in 0..3 {
        let report = a.full_pass_now().await.unwrap();
        assert_eq!(
            (report.segments_pushed, report.bytes_pushed),
            (0, 0),
            "pass {pass}: {report:?}"
        );
    }
    assert_snapshot_loads(&a, &inserted, "A");

    // An instance joining now pulls every segment, padding included.
    let b = join(&url, prefix).await;
    assert_snapshot_loads(&b, &inserted, "B");
    let report = b.full_pass_now().await.unwrap();
    assert_eq!(report.segments_pushed, 0, "B: {report:?}");
}
