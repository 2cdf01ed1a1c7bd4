//! [`bloom_core::WindowedFilter`] against a plain [`bloom_core::BloomFilter`] (Blocked, the
//! anchor) holding the window's keys at the same rate, measured in the same run: lookups of
//! keys inside the window (hit) and of keys never inserted (miss), with every generation of
//! the window filled, at p = 1 %, `N` = 4 (the default) and 8 generations, in the default
//! layout (SplitBlock), each ring interleaved (the default at these sizes: `windowed-N4`) and
//! separate (`windowed-N4-separate`), n = 20k keys per window (in a core's cache: what the
//! lookup's instructions cost) and 1M; with `BIG=1` also n = 50M (about 650 MB and two
//! minutes to fill).
//!
//! The windowed filter is a count window of `n` inserts, fed `3n` keys (every generation
//! full, three rotations done); hits are among the last `n` keys. The plain filter holds `n`
//! keys. Memory per key (of the window) is printed at setup.
//!
//! Batches too: `contains_many` of 1,024 keys at a time, against the plain filter's
//! `contains_many` (each key's lines prefetched a window ahead); criterion's throughput is
//! keys per second.
//!
//! `cargo bench -p bloom-benches --bench windowed` (`BIG=1 cargo bench …` for 50M too)

use std::hint::black_box;
use std::time::Duration;

use bloom_core::BloomFilter;
use bloom_core::windowed::{RingLayout, Window, WindowedFilter};
use criterion::measurement::WallTime;
use criterion::{BenchmarkGroup, Criterion, Throughput, criterion_group, criterion_main};

const P: f64 = 0.01;
const MISS_BASE: u64 = 1 << 62;
/// Keys per `contains_many` call.
const BATCH: usize = 1024;

/// Keys in shuffled order (an LCG over the range, walked cyclically).
fn shuffled(base: u64, range: u64, count: usize) -> Vec<u64> {
    let mut x = 0x2545_F491_4F6C_DD1Du64;
    (0..count)
        .map(|_| {
            x = x
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            base + (x >> 11) % range
        })
        .collect()
}

fn bench(c: &mut Criterion) {
    let mut sizes = vec![(20_000u64, "20k"), (1_000_000, "1M")];
    if std::env::var_os("BIG").is_some() {
        sizes.push((50_000_000, "50M"));
    }
    for (n, label) in sizes {
        bench_at(c, n, label);
    }
}

/// A group of lookups, every one of this file's measured alike.
fn lookup_group(c: &mut Criterion, name: String) -> BenchmarkGroup<'_, WallTime> {
    let mut group = c.benchmark_group(name);
    group
        .sample_size(30)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    group
}

fn bench_at(c: &mut Criterion, n: u64, label: &str) {
    let plain = BloomFilter::new(n, P).unwrap();
    for key in 0..n {
        plain.insert(&key);
    }
    let windowed: Vec<(String, WindowedFilter)> = [4u32, 8]
        .into_iter()
        .flat_map(|g| [(g, RingLayout::Interleaved), (g, RingLayout::Separate)])
        .map(|(g, ring)| {
            let f = WindowedFilter::builder(Window::Count(n))
                .expected_items(n)
                .false_positive_rate(P)
                .generations(g)
                .ring_layout(ring)
                .build()
                .unwrap();
            for key in 0..3 * n {
                f.insert(&key);
            }
            let name = match ring {
                RingLayout::Interleaved => format!("windowed-N{g}"),
                RingLayout::Separate => format!("windowed-N{g}-separate"),
            };
            (name, f)
        })
        .collect();
    eprintln!(
        "[memory, n = {label}] plain {:.2} bits per key; windowed ({:?}) N = 4 {:.2}, N = 8 {:.2} (all generations, per key of the window)",
        plain.size_in_bytes() as f64 * 8.0 / n as f64,
        windowed[0].1.layout(),
        windowed[0].1.size_in_bytes() as f64 * 8.0 / n as f64,
        windowed[2].1.size_in_bytes() as f64 * 8.0 / n as f64,
    );
    let hits_plain = shuffled(0, n, 1 << 20);
    let hits_window = shuffled(2 * n, n, 1 << 20);
    let misses = shuffled(MISS_BASE, 1 << 40, 1 << 20);
    for (name, keys_plain, keys_window) in [
        ("hit", &hits_plain, &hits_window),
        ("miss", &misses, &misses),
    ] {
        let mut group = lookup_group(c, format!("windowed/contains_{name}/{label}"));
        let mut i = 0usize;
        group.bench_function("plain", |b| {
            b.iter(|| {
                i = (i + 1) & ((1 << 20) - 1);
                black_box(plain.contains(&keys_plain[i]))
            })
        });
        for (name, f) in &windowed {
            let mut i = 0usize;
            group.bench_function(name.as_str(), |b| {
                b.iter(|| {
                    i = (i + 1) & ((1 << 20) - 1);
                    black_box(f.contains(&keys_window[i]))
                })
            });
        }
        group.finish();
    }
    for (name, keys_plain, keys_window) in [
        ("hit", &hits_plain, &hits_window),
        ("miss", &misses, &misses),
    ] {
        let mut group = lookup_group(c, format!("windowed/contains_many_{name}/{label}"));
        group.throughput(Throughput::Elements(BATCH as u64));
        let batches = (1 << 20) / BATCH;
        let mut i = 0usize;
        group.bench_function("plain", |b| {
            b.iter(|| {
                i = (i + 1) % batches;
                black_box(
                    plain.contains_many(keys_plain[i * BATCH..(i + 1) * BATCH].iter().copied()),
                )
            })
        });
        for (name, f) in &windowed {
            let mut i = 0usize;
            group.bench_function(name.as_str(), |b| {
                b.iter(|| {
                    i = (i + 1) % batches;
                    black_box(
                        f.contains_many(keys_window[i * BATCH..(i + 1) * BATCH].iter().copied()),
                    )
                })
            });
        }
        group.finish();
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
