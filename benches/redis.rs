//! One filter across instances through Redis (`bloom-redis`): what a check costs when every
//! instance answers from its own synchronised filter, against the common designs that ask
//! Redis on every check; how fast an insert reaches another instance; what a full
//! reconciliation of a 10M-key filter costs.
//!
//! Needs `redis-server` on the PATH (started here on a free port, no persistence); without it
//! the bench prints a loud SKIPPED line and exits.
//!
//! `cargo bench -p bloom-benches --bench redis`

use std::time::{Duration, Instant};

use bloom_core::BloomFilter;
use bloom_redis::RedisSync;
use bloom_tower::SharedFilter;
use criterion::Criterion;

const SEED: u128 = 0xb10_0b10_0b10_0b10_0b10_0b10_0b10;

/// The throwaway `redis-server` bloom-redis's tests use (random port, no persistence).
#[path = "../crates/bloom-redis/tests/common/mod.rs"]
mod redis_server;

fn filter(items: u64) -> BloomFilter {
    BloomFilter::builder()
        .expected_items(items)
        .false_positive_rate(0.01)
        .seed(SEED)
        .build()
        .unwrap()
}

/// Redis's SETBIT/GETBIT offset of our bit `bit` (words stored as little-endian bytes; Redis
/// numbers bits from the top of each byte), in the one segment used here.
fn redis_offset(bit: u64) -> u64 {
    (bit / 8) * 8 + (7 - bit % 8)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn main() {
    let Some(server) = redis_server::start() else {
        return;
    };
    let url = server.url();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let mut c = Criterion::default().configure_from_args();

    // Per-check cost: 1M keys in a shared filter, synchronised through Redis.
    let (a, b) = rt.block_on(async {
        let join = |name: &'static str| {
            let url = url.clone();
            async move {
                let shared = SharedFilter::builder().name(name).build(filter(1_000_000));
                RedisSync::builder(&url)
                    .prefix("bench-check")
                    .reconcile_every(Duration::from_secs(600))
                    .connect(shared)
                    .await
                    .unwrap()
            }
        };
        (join("a").await, join("b").await)
    });
    let keys: Vec<String> = (0..1_000u64).map(|i| format!("user:{i:019}")).collect();
    for key in &keys {
        a.filter().insert(key);
    }
    std::thread::sleep(Duration::from_millis(500));
    let segment = "{bench-check}:g1:seg0";
    let client = redis::Client::open(url.as_str()).unwrap();
    let conn = rt
        .block_on(client.get_multiplexed_async_connection())
        .unwrap();
    let current = a.filter().current();
    let plain = current
        .as_plain()
        .expect("bloom-redis shares plain filters");
    let bits: Vec<Vec<u64>> = keys
        .iter()
        .map(|k| {
            let mut bits = Vec::new();
            plain.for_each_bit(k, |b| bits.push(redis_offset(b)));
            bits
        })
        .collect();
    {
        let mut group = c.benchmark_group("redis/check");
        let mut i = 0;
        group.bench_function("local SharedFilter::contains (ours)", |bench| {
            bench.iter(|| {
                i = (i + 1) % keys.len();
                assert!(b.filter().contains(&keys[i]));
            })
        });
        group.bench_function("Redis bitmap: k GETBITs pipelined", |bench| {
            bench.to_async(&rt).iter(|| {
                i = (i + 1) % keys.len();
                let mut conn = conn.clone();
                let mut pipe = redis::pipe();
                for &offset in &bits[i] {
                    pipe.cmd("GETBIT").arg(segment).arg(offset);
                }
                async move {
                    let found: Vec<u8> = pipe.query_async(&mut conn).await.unwrap();
                    assert!(found.iter().all(|&b| b == 1));
                }
            })
        });
        group.bench_function("Redis: one GETBIT round trip", |bench| {
            bench.to_async(&rt).iter(|| {
                i = (i + 1) % keys.len();
                let mut conn = conn.clone();
                let offset = bits[i][0];
                async move {
                    let found: u8 = redis::cmd("GETBIT")
                        .arg(segment)
                        .arg(offset)
                        .query_async(&mut conn)
                        .await
                        .unwrap();
                    assert_eq!(found, 1);
                }
            })
        });
        group.finish();
    }

    // Insert propagation A → B through pub/sub, measured per insert.
    let mut latencies = Vec::new();
    rt.block_on(async {
        for i in 0..2_000u64 {
            let key = format!("propagation:{i:019}");
            let started = Instant::now();
            a.filter().insert(&key);
            while !b.filter().contains(&key) {
                tokio::task::yield_now().await;
                assert!(
                    started.elapsed() < Duration::from_secs(10),
                    "propagation hung"
                );
            }
            latencies.push(started.elapsed());
        }
    });
    latencies.sort();
    println!(
        "redis/propagation A->B (pub/sub, {} inserts, one at a time): p50 {:?}  p99 {:?}  max {:?}",
        latencies.len(),
        percentile(&latencies, 0.5),
        percentile(&latencies, 0.99),
        latencies[latencies.len() - 1]
    );

    // Full reconciliation of a 10M-key filter (~12 MB).
    rt.block_on(async {
        let big = filter(10_000_000);
        big.insert_many(0..10_000_000u64);
        let bytes = big.size_in_bytes();
        let started = Instant::now();
        let first = RedisSync::builder(&url)
            .prefix("bench-10m")
            .reconcile_every(Duration::from_secs(600))
            .connect(SharedFilter::new(big))
            .await
            .unwrap();
        let report = first.stats().last_reconcile.unwrap();
        println!(
            "redis/reconcile 10M keys ({:.1} MB): first instance joins (pull empty, push all): {:?} (join {:?}), pulled {} B, pushed {} B",
            bytes as f64 / 1e6,
            report.elapsed,
            started.elapsed(),
            report.bytes_pulled,
            report.bytes_pushed
        );
        let started = Instant::now();
        let second = RedisSync::builder(&url)
            .prefix("bench-10m")
            .reconcile_every(Duration::from_secs(600))
            .connect(SharedFilter::new(filter(10_000_000)))
            .await
            .unwrap();
        let report = second.stats().last_reconcile.unwrap();
        println!(
            "redis/reconcile 10M keys: empty instance joins (pull all, push nothing): {:?} (join {:?}), pulled {} B, pushed {} B",
            report.elapsed,
            started.elapsed(),
            report.bytes_pulled,
            report.bytes_pushed
        );
        assert!(second.filter().contains(&9_999_999u64));
        let mut times = Vec::new();
        let mut last = None;
        for _ in 0..5 {
            let report = second.reconcile_now().await.unwrap();
            times.push(report.elapsed);
            last = Some(report);
        }
        times.sort();
        let last = last.unwrap();
        println!(
            "redis/reconcile 10M keys: steady state (in sync), median of 5: {:?}, pulled {} B, pushed {} B",
            times[2], last.bytes_pulled, last.bytes_pushed
        );
        for i in 0..1_000u64 {
            second.filter().current().insert(&(20_000_000 + i)); // not propagated
        }
        let report = second.reconcile_now().await.unwrap();
        println!(
            "redis/reconcile 10M keys: 1000 unpropagated local inserts: {:?}, pulled {} B, pushed {} B",
            report.elapsed, report.bytes_pulled, report.bytes_pushed
        );
    });
    c.final_summary();
}
