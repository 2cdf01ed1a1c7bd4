//! Against a real `redis-server` (see `common`): keys that reach an instance as bits (OR-ed
//! into its filter by the sync, never inserted there one by one) are counted in its
//! `stats().approx_items` and exported as its `bloom_filter_keys` gauge, estimated from the
//! set bits.
#![cfg(feature = "metrics")]
#![forbid(unsafe_code)]

mod common;
#[path = "../../bloom-tower/tests/support/descriptions.rs"]
mod descriptions;

use std::time::{Duration, Instant};

use bloom_core::{BloomFilter, Layout};
use bloom_redis::RedisSync;
use bloom_tower::SharedFilter;
use bloom_tower::stats::names;
use descriptions::Descriptions;

const KEYS: u64 = 10_000;
const BITS: u64 = 1 << 20;
const HASHES: u32 = 7;
/// The estimate's bound: 5 standard deviations. For a Blocked filter of `m = 2^20` bits in
/// 2,048 blocks of 512 with `k = 7` and `n = 10,000` keys (λ ≈ 4.9 keys per block), the set
/// bits `X` vary with the Poisson block loads and the collisions within a block:
/// `Var X = blocks · (Var_L E[ones | L] + E_L Var[ones | L]) ≈ 653²`, and the estimator
/// `n = -(m/512) · ln(1 - X/m) / (1 - (1 - 1/512)^k)` moves about 0.154 keys per bit there,
/// so σ(n) ≈ 100 keys (unbiased at the mean: `n(E[X]) = 10,000`).
const BOUND: f64 = 500.0;
/// Only a hang detector: no test asserts on timing.
const HANG: Duration = Duration::from_secs(20);

fn filter(name: &'static str) -> SharedFilter<u64> {
    SharedFilter::builder().name(name).build(
        BloomFilter::builder()
            .bits(BITS)
            .hashes(HASHES)
            .layout(Layout::Blocked)
            .seed(0x5eed)
            .build()
            .unwrap(),
    )
}

fn is_close(keys: f64) -> bool {
    (keys - KEYS as f64).abs() <= BOUND
}

/// The last value of `filter`'s `bloom_filter_keys` gauge, if it was set.
fn last_gauge(recorder: &Descriptions, filter: &str) -> Option<f64> {
    let gauges = recorder.2.lock().unwrap();
    let name = format!("{}{{filter={filter}}}", names::FILTER_KEYS);
    gauges.get(&name).and_then(|values| values.last().copied())
}

/// Polls `done` every 5 ms; panics after [`HANG`] with `what`.
async fn until(what: &str, mut done: impl FnMut() -> bool) {
    let started = Instant::now();
    while !done() {
        assert!(started.elapsed() < HANG, "hang: {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

// Current-thread: every task the syncs spawn runs on this thread, under its local recorder.
#[tokio::test(flavor = "current_thread")]
async fn keys_inserted_on_one_instance_are_counted_on_the_other() {
    let Some(server) = common::start() else {
        return;
    };
    let recorder = Descriptions::default();
    let _recording = metrics::set_default_local_recorder(&recorder);
    let (writer, reader) = (filter("writer"), filter("reader"));
    let builder = || RedisSync::builder(&server.url()).prefix("approx");
    let writing = builder().connect(&writer).await.expect("join");
    let reading = builder().connect(&reader).await.expect("join");
    for key in 0..KEYS {
        writer.insert(&key);
    }
    writing.propagated().await.expect("published");
    until("the keys never arrived", || {
        (0..KEYS).all(|key| reader.current().contains(&key))
    })
    .await;
    // The gauge follows without anyone reading `stats()`: counted when the filter is next
    // reached for its bits (`current()`, as the sync does), at most once a second.
    until("no close gauge for the reader", || {
        let _ = reader.current();
        last_gauge(&recorder, "reader").is_some_and(is_close)
    })
    .await;
    let (writer, reader) = (writer.stats(), reader.stats());
    reading.leave().await;
    writing.leave().await;
    assert!(
        is_close(writer.approx_items as f64),
        "the writer counts its inserts: {writer:?}"
    );
    assert!(
        is_close(reader.approx_items as f64),
        "the reader estimates the keys it received as bits: {reader:?}"
    );
    let exported = last_gauge(&recorder, "reader").unwrap();
    assert!(is_close(exported), "the gauge says {exported}");
    println!(
        "{KEYS} keys: the writer counts {}, the reader estimates {} (gauge {exported})",
        writer.approx_items, reader.approx_items
    );
}
