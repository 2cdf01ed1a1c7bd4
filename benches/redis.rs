//! One filter across instances through Redis (`bloom-redis`): what a check costs when every
//! instance answers from its own synchronised filter, against the common designs that ask
//! Redis on every check; how fast an insert reaches another instance. What the
//! synchronisation costs in Redis traffic is `benches/redis_traffic.rs`.
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
/// numbers bits from the top of each byte), in the one segment used here
/// ([`ONE_SEGMENT`]).
fn redis_offset(bit: u64) -> u64 {
    (bit / 8) * 8 + (7 - bit % 8)
}

/// Segments of 64 MiB: the 1M-key filter is one Redis string, read as one bitmap by the
/// "Redis bitmap" rows.
const ONE_SEGMENT: u64 = 64 << 20;

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
                let shared = SharedFilter::<String>::builder()
                    .name(name)
                    .build(filter(1_000_000));
                RedisSync::builder(&url)
                    .prefix("bench-check")
                    .segment_bytes(ONE_SEGMENT)
                    .reconcile_every(Duration::from_secs(600))
                    .connect(&shared)
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
    let segment = "{bench-check:g1:0}:seg0";
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
    // Keys no instance inserted, whose bits B's filter lacks: every check of one is a
    // would-be rejection, confirmed by a ping (R1 in docs/REDIS-SYNC.md).
    let absent: Vec<String> = (0..)
        .map(|i: u64| format!("absent:{i:017}"))
        .filter(|k| !b.filter().current().contains(k))
        .take(1_000)
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
        group.bench_function("hit: local SharedFilter::check (ours)", |bench| {
            bench.to_async(&rt).iter(|| {
                i = (i + 1) % keys.len();
                let (filter, key) = (b.filter(), &keys[i]);
                async move { assert!(filter.check(key).await) }
            })
        });
        group.bench_function(
            "rejection: SharedFilter::check, confirmed (ours)",
            |bench| {
                bench.to_async(&rt).iter(|| {
                    i = (i + 1) % absent.len();
                    let (filter, key) = (b.filter(), &absent[i]);
                    async move { assert!(!filter.check(key).await) }
                })
            },
        );
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

    // A flood of absent keys: 64 tasks checking them back to back on B for 3 s. What each
    // rejection waits (confirmed, p50 / p99), and what B costs Redis meanwhile: its confirming
    // pings, and the commands Redis ran (INFO commandstats, every client's: the other
    // instance idles).
    let commands = |conn: &redis::aio::MultiplexedConnection| {
        let mut conn = conn.clone();
        rt.block_on(async move {
            let info: String = redis::cmd("INFO")
                .arg("commandstats")
                .query_async(&mut conn)
                .await
                .unwrap();
            redis_server::command_calls(&info, |command| command != "info")
        })
    };
    let (before_rounds, before_commands) = (b.stats().confirm_rounds, commands(&conn));
    let flood_started = Instant::now();
    let waits = rt.block_on(async {
        let tasks: Vec<_> = (0..64)
            .map(|t| {
                let (filter, absent) = (b.filter().clone(), absent.clone());
                tokio::spawn(async move {
                    let mut waits = Vec::new();
                    let mut n = t;
                    let started = Instant::now();
                    while started.elapsed() < Duration::from_secs(3) {
                        let key = &absent[n % absent.len()];
                        let asked = Instant::now();
                        assert!(!filter.check(key).await);
                        waits.push(asked.elapsed());
                        n += 64;
                    }
                    waits
                })
            })
            .collect();
        let mut waits = Vec::new();
        for task in tasks {
            waits.extend(task.await.unwrap());
        }
        waits
    });
    let flood_secs = flood_started.elapsed().as_secs_f64();
    let (rounds, ran) = (
        b.stats().confirm_rounds - before_rounds,
        commands(&conn) - before_commands,
    );
    let mut waits = waits;
    waits.sort();
    println!(
        "redis/flood: 64 tasks checking absent keys on B for {flood_secs:.1} s: {} rejections          ({:.0}/s), each waited p50 {:?} p99 {:?}; B sent {:.0} confirming pings/s; Redis ran          {:.0} commands/s in all (scripts' own calls included)",
        waits.len(),
        waits.len() as f64 / flood_secs,
        percentile(&waits, 0.5),
        percentile(&waits, 0.99),
        rounds as f64 / flood_secs,
        ran as f64 / flood_secs,
    );

    // Insert propagation A → B through pub/sub, measured per insert.
    let mut latencies = Vec::new();
    rt.block_on(async {
        for i in 0..2_000u64 {
            let key = format!("propagation:{i:019}");
            let started = Instant::now();
            a.filter().insert(&key);
            // The raw local filter: `SharedFilter::contains` would also let the key through
            // while B's view is stale, which is not what is measured here.
            while !b.filter().current().contains(&key) {
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

    // A create as a service does it, under load: insert, `propagated()` (the bits are in
    // Redis and published), then the record would be committed. Measured: how long the
    // create waits in `propagated()`, and when the key becomes visible on instance B (raw
    // filter) counted from the start of the create; and how many keys B did not yet hold at
    // the moment `propagated()` returned (the window the README documents). Load: a third
    // instance inserting 20,000 keys/s, and B's filter checked continuously by two threads.
    let c_instance = rt.block_on(async {
        let shared = SharedFilter::<String>::builder()
            .name("c")
            .build(filter(1_000_000));
        RedisSync::builder(&url)
            .prefix("bench-check")
            .segment_bytes(ONE_SEGMENT)
            .reconcile_every(Duration::from_secs(600))
            .connect(&shared)
            .await
            .unwrap()
    });
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let load = {
        let (filter, stop) = (c_instance.filter().clone(), stop.clone());
        rt.spawn(async move {
            let mut i = 0u64;
            let mut tick = tokio::time::interval(Duration::from_millis(1));
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                tick.tick().await;
                for _ in 0..20 {
                    filter.insert(&format!("load:{i:019}"));
                    i += 1;
                }
            }
            i
        })
    };
    let readers: Vec<_> = (0..2)
        .map(|r| {
            let (filter, stop) = (b.filter().clone(), stop.clone());
            std::thread::spawn(move || {
                let mut n = 0u64;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    std::hint::black_box(filter.contains(&format!("read:{r}:{n}")));
                    n += 1;
                }
                n
            })
        })
        .collect();
    let (mut acked, mut visible, mut absent_at_ack) = (Vec::new(), Vec::new(), 0u32);
    rt.block_on(async {
        for i in 0..2_000u64 {
            let key = format!("create:{i:019}");
            let started = Instant::now();
            a.filter().insert(&key);
            a.propagated().await.expect("Redis answers");
            acked.push(started.elapsed());
            if !b.filter().current().contains(&key) {
                absent_at_ack += 1;
            }
            while !b.filter().current().contains(&key) {
                tokio::task::yield_now().await;
                assert!(
                    started.elapsed() < Duration::from_secs(10),
                    "propagation hung"
                );
            }
            visible.push(started.elapsed());
        }
    });
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let load_inserts = rt.block_on(load).unwrap();
    let reads: u64 = readers.into_iter().map(|r| r.join().unwrap()).sum();
    acked.sort();
    visible.sort();
    println!(
        "redis/create under load ({} creates on A; C inserting {} keys meanwhile; {} checks on B): \
         propagated() p50 {:?} p99 {:?} max {:?}; visible on B p50 {:?} p99 {:?} max {:?}; \
         not yet on B when propagated() returned: {}",
        acked.len(),
        load_inserts,
        reads,
        percentile(&acked, 0.5),
        percentile(&acked, 0.99),
        acked[acked.len() - 1],
        percentile(&visible, 0.5),
        percentile(&visible, 0.99),
        visible[visible.len() - 1],
        absent_at_ack
    );
    drop(c_instance);

    c.final_summary();
}
