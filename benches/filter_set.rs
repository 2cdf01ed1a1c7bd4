//! What a `FilterSet` operation costs, against what a user would write instead, and what
//! eviction to a store costs.
//!
//! Every key's filter is the feed example's (`examples/feed`): a windowed filter over 7 days,
//! 100 items per window at 1 %, 8 generations.
//!
//! * `filter_set_resident/{update,contains}/{filter_set,moka}`: `FilterSet::seen_or_insert`
//!   and `FilterSet::contains` on one of 10,000 users whose filters are all in memory (the
//!   budget holds them all), against `moka::sync::Cache<u64, Arc<AnyFilter>>` (`get_with`
//!   creating the filter, `get`) and the same filter call. The set's futures are polled once
//!   (a resident key never waits). Target: filter set ≤ 1.3 × moka.
//! * `filter_set_threads/{1,2}/{filter_set,moka}`: the same `update` from 1 and 2 threads
//!   (`iter_custom`, std threads, each its own users), per operation.
//! * Printed, not criterion rows (rows timed one after another drift apart on a shared VM,
//!   so the ratios are per round, medians over the rounds):
//!   * `resident interleaved`: update and contains, filter set and moka taking turns;
//!   * `resident threads`: operations/s from 1 and 2 threads (scaling target ≥ 1.7 ×) and
//!     the p99 latency of one operation;
//!   * `evicting/{directory,redis}`: 10,000 users of which the budget holds 2,000, uniform
//!     traffic from 32 tasks on 2 Tokio workers (the feed example's default concurrency):
//!     operations/s, p99, loads/s and stores/s; then the time of a `flush` of 2,000 changed
//!     filters. The directory store is a temp dir without fsync (`sync(false)`); the Redis
//!     one a throwaway `redis-server` (skipped, loudly, when it is not installed).
//!
//! `cargo bench -p bloom-benches --bench filter_set`

use std::future::Future;
use std::hint::black_box;
use std::pin::pin;
use std::sync::{Arc, Barrier};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use bloom_core::AnyFilter;
use bloom_core::windowed::{Window, WindowedFilter};
use bloom_redis::RedisFilterStore;
use bloom_tower::filter_set::{DirectoryStore, FilterSet, FilterStore, counted_bytes};
use criterion::{Criterion, Throughput};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// The throwaway `redis-server` bloom-redis's tests use (random port, no persistence).
#[path = "../crates/bloom-redis/tests/common/mod.rs"]
mod redis_server;

const USERS: u64 = 10_000;
/// Users the budget of the evicting runs holds.
const RESIDENT_USERS: u64 = 2_000;
/// (user, item) pairs each loop cycles over.
const PAIRS: usize = 1 << 16;
/// Operations in flight in the evicting runs.
const IN_FLIGHT: usize = 32;
const EVICTING_RUN: Duration = Duration::from_secs(3);

/// The feed example's filter: 7 days, 100 items per window at 1 %, 8 generations.
fn week() -> WindowedFilter {
    WindowedFilter::builder(Window::Time(Duration::from_secs(7 * 86_400)))
        .expected_items(100)
        .false_positive_rate(0.01)
        .generations(8)
        .build()
        .unwrap()
}

fn set_over<S: FilterStore>(store: S, budget: usize) -> FilterSet<u64, S> {
    let week = WindowedFilter::builder(Window::Time(Duration::from_secs(7 * 86_400)))
        .expected_items(100)
        .false_positive_rate(0.01)
        .generations(8);
    FilterSet::builder(store)
        .windowed(week)
        .unwrap()
        .budget_bytes(budget)
        .name("bench")
        .build()
}

/// What one user's filter counts against the budget (its name is at most 4 digits).
fn one_filter_bytes() -> usize {
    counted_bytes(&AnyFilter::Windowed(week())) + 4
}

type Moka = moka::sync::Cache<u64, Arc<AnyFilter>>;

/// The feed's write, on a filter the user holds (as `FilterSet::seen_or_insert`).
fn seen_or_insert(f: &AnyFilter, item: u64) -> bool {
    match f.as_windowed() {
        Some(w) => w.seen_or_insert(&item),
        None => f.contains(&item) || !f.insert(&item),
    }
}

/// The future's answer: it must be ready at the first poll (a resident key never waits).
fn ready<T>(fut: impl Future<Output = T>) -> T {
    let mut cx = Context::from_waker(Waker::noop());
    match pin!(fut).poll(&mut cx) {
        Poll::Ready(t) => t,
        Poll::Pending => panic!("an operation on a resident key waited"),
    }
}

fn pairs(seed: u64) -> Vec<(u64, u64)> {
    let mut rng = StdRng::seed_from_u64(seed);
    (0..PAIRS)
        .map(|_| (rng.random_range(0..USERS), rng.random_range(0..1_000_000)))
        .collect()
}

struct Resident {
    set: FilterSet<u64, DirectoryStore>,
    moka: Moka,
    template: WindowedFilter,
    _dir: tempfile::TempDir,
}

impl Resident {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let set = set_over(
            DirectoryStore::new(dir.path()).unwrap().sync(false),
            1 << 40,
        );
        let moka = Moka::builder().max_capacity(2 * USERS).build();
        let template = week();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        for user in 0..USERS {
            // The first write looks in the store (a blocking task): not a resident operation.
            rt.block_on(set.seen_or_insert(&user, &0u64)).unwrap();
            let f = AnyFilter::Windowed(template.fresh().unwrap());
            seen_or_insert(&f, 0);
            moka.insert(user, Arc::new(f));
        }
        moka.run_pending_tasks();
        assert_eq!(set.stats().filters_in_memory, USERS as usize);
        assert_eq!(set.stats().evictions, 0);
        Self {
            set,
            moka,
            template,
            _dir: dir,
        }
    }

    fn set_update(&self, (user, item): (u64, u64)) -> bool {
        ready(self.set.seen_or_insert(&user, &item)).unwrap()
    }

    fn set_contains(&self, (user, item): (u64, u64)) -> bool {
        ready(self.set.contains(&user, &item)).unwrap()
    }

    fn moka_update(&self, (user, item): (u64, u64)) -> bool {
        let f = self.moka.get_with(user, || {
            Arc::new(AnyFilter::Windowed(self.template.fresh().unwrap()))
        });
        seen_or_insert(&f, item)
    }

    fn moka_contains(&self, (user, item): (u64, u64)) -> bool {
        self.moka.get(&user).is_some_and(|f| f.contains(&item))
    }
}

type Op = fn(&Resident, (u64, u64)) -> bool;

const OPS: [(&str, Op); 4] = [
    ("update/filter_set", Resident::set_update),
    ("update/moka", Resident::moka_update),
    ("contains/filter_set", Resident::set_contains),
    ("contains/moka", Resident::moka_contains),
];

/// `ops` operations split over `threads` threads (each its own pairs); the wall time, and
/// when `latencies`, each operation's time (which slows the loop: a separate pass).
fn threaded(
    r: &Resident,
    op: Op,
    threads: usize,
    ops: u64,
    latencies: bool,
) -> (Duration, Vec<u32>) {
    let per_thread = ops / threads as u64;
    let barrier = Barrier::new(threads);
    let results: Vec<(Instant, Instant, Vec<u32>)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let barrier = &barrier;
                s.spawn(move || {
                    let pairs = pairs(100 + t as u64);
                    let mut lat =
                        Vec::with_capacity(if latencies { per_thread as usize } else { 0 });
                    barrier.wait();
                    let start = Instant::now();
                    for i in 0..per_thread as usize {
                        let pair = pairs[i % PAIRS];
                        if latencies {
                            let t0 = Instant::now();
                            black_box(op(r, pair));
                            lat.push(t0.elapsed().as_nanos() as u32);
                        } else {
                            black_box(op(r, pair));
                        }
                    }
                    (start, Instant::now(), lat)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let start = results.iter().map(|r| r.0).min().unwrap();
    let end = results.iter().map(|r| r.1).max().unwrap();
    let lat = results.into_iter().flat_map(|r| r.2).collect();
    (end - start, lat)
}

fn percentile<T: Copy + PartialOrd>(sorted: &[T], p: f64) -> T {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn median(mut v: Vec<f64>) -> (f64, f64, f64) {
    v.sort_by(f64::total_cmp);
    (
        percentile(&v, 0.5),
        percentile(&v, 0.1),
        percentile(&v, 0.9),
    )
}

fn criterion_rows(c: &mut Criterion, r: &Resident) {
    let keys = pairs(1);
    let mut group = c.benchmark_group("filter_set_resident");
    group.throughput(Throughput::Elements(1));
    for (name, op) in OPS {
        group.bench_function(name, |b| {
            let mut i = 0;
            b.iter(|| {
                i = (i + 1) % PAIRS;
                op(r, keys[i])
            })
        });
    }
    group.finish();
    let mut group = c.benchmark_group("filter_set_threads");
    group.throughput(Throughput::Elements(1));
    for threads in [1, 2] {
        for (name, op) in [OPS[0], OPS[1]] {
            let name = format!("{threads}/{}", name.trim_start_matches("update/"));
            group.bench_function(name, |b| {
                b.iter_custom(|iters| threaded(r, op, threads, iters.max(threads as u64), false).0)
            });
        }
    }
    group.finish();
}

/// The four resident operations taking turns, ratios per round; then 1 and 2 threads.
fn interleaved(r: &Resident) {
    const ROUNDS: usize = 31;
    const N: u64 = 400_000;
    let mut ns = vec![Vec::new(); OPS.len()];
    for _ in 0..ROUNDS {
        for (i, (_, op)) in OPS.iter().enumerate() {
            let (t, _) = threaded(r, *op, 1, N, false);
            ns[i].push(t.as_nanos() as f64 / N as f64);
        }
    }
    println!("\nresident interleaved ({ROUNDS} rounds of {N} operations; median [p10, p90]):");
    for (i, (name, _)) in OPS.iter().enumerate() {
        let (m, lo, hi) = median(ns[i].clone());
        println!("  {name:<20} {m:7.1} ns/op [{lo:.1}, {hi:.1}]");
    }
    for (a, b, what) in [(0, 1, "update"), (2, 3, "contains")] {
        let ratios = ns[a].iter().zip(&ns[b]).map(|(x, y)| x / y).collect();
        let (m, lo, hi) = median(ratios);
        println!("  {what}: filter_set / moka = {m:.2} [{lo:.2}, {hi:.2}] (target <= 1.3)");
    }

    println!("\nresident threads ({ROUNDS} rounds; operations/s median, p99 of one operation):");
    const M: u64 = 1_000_000;
    for (name, op) in OPS {
        let mut per_round = [Vec::new(), Vec::new()];
        for _ in 0..ROUNDS / 2 {
            for (k, threads) in [1, 2].into_iter().enumerate() {
                let (t, _) = threaded(r, op, threads, M, false);
                per_round[k].push(M as f64 / t.as_secs_f64());
            }
        }
        let scaling = per_round[1]
            .iter()
            .zip(&per_round[0])
            .map(|(two, one)| two / one)
            .collect();
        let mut p99 = [0; 2];
        for (k, threads) in [1, 2].into_iter().enumerate() {
            let (_, mut lat) = threaded(r, op, threads, M, true);
            lat.sort_unstable();
            p99[k] = percentile(&lat, 0.99);
        }
        let (one, _, _) = median(per_round[0].clone());
        let (two, _, _) = median(per_round[1].clone());
        let (s, lo, hi) = median(scaling);
        println!(
            "  {name:<20} 1 thread {:6.2} M ops/s (p99 {:4} ns), 2 threads {:6.2} M ops/s (p99 {:4} ns): scaling {s:.2} [{lo:.2}, {hi:.2}] (target >= 1.7)",
            one / 1e6,
            p99[0],
            two / 1e6,
            p99[1],
        );
    }
}

/// Uniform traffic over [`USERS`] users through a set whose budget holds
/// [`RESIDENT_USERS`], [`IN_FLIGHT`] operations at a time, for [`EVICTING_RUN`].
fn evicting<S: FilterStore + Clone>(rt: &tokio::runtime::Runtime, label: &str, store: S) {
    let budget = RESIDENT_USERS as usize * one_filter_bytes();
    let set = Arc::new(set_over(store, budget));
    rt.block_on(async {
        // Every user has a stored filter: each miss is a load, each eviction a store.
        for user in 0..USERS {
            set.seen_or_insert(&user, &0u64).await.unwrap();
        }
        set.flush().await.unwrap();
    });
    let before = set.stats();
    let started = Instant::now();
    let tasks: Vec<_> = (0..IN_FLIGHT)
        .map(|t| {
            let set = set.clone();
            rt.spawn(async move {
                let mut rng = StdRng::seed_from_u64(7 + t as u64);
                let mut lat = Vec::new();
                while started.elapsed() < EVICTING_RUN {
                    let (user, item) = (rng.random_range(0..USERS), rng.random::<u64>());
                    let t0 = Instant::now();
                    set.seen_or_insert(&user, &item).await.unwrap();
                    lat.push(t0.elapsed());
                }
                lat
            })
        })
        .collect();
    let mut lat: Vec<Duration> = rt.block_on(async {
        let mut all = Vec::new();
        for t in tasks {
            all.extend(t.await.unwrap());
        }
        all
    });
    let took = started.elapsed().as_secs_f64();
    let after = set.stats();
    lat.sort_unstable();
    let ops = lat.len() as f64;
    println!(
        "  {label:<10} {:8.0} ops/s, p50 {:?}, p99 {:?}, {:7.0} loads/s, {:7.0} stores/s, {:7.0} evictions/s, hit rate {:.0} %",
        ops / took,
        percentile(&lat, 0.5),
        percentile(&lat, 0.99),
        (after.loads - before.loads) as f64 / took,
        (after.stores - before.stores) as f64 / took,
        (after.evictions - before.evictions) as f64 / took,
        100.0 * (1.0 - (after.loads - before.loads) as f64 / ops),
    );
    // The resident filters the run changed (every one it wrote since its load), stored
    // by one flush.
    let flushed = rt.block_on(async {
        let t0 = Instant::now();
        let n = set.flush().await.unwrap();
        (n, t0.elapsed())
    });
    println!(
        "  {label:<10} flush: {} changed filters in {:?} ({:.0} stores/s)",
        flushed.0,
        flushed.1,
        flushed.0 as f64 / flushed.1.as_secs_f64()
    );
}

fn main() {
    let mut c = Criterion::default().configure_from_args();
    let resident = Resident::new();
    criterion_rows(&mut c, &resident);
    interleaved(&resident);
    drop(resident);

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    println!(
        "\nevicting ({USERS} users, budget {RESIDENT_USERS} filters of {} B, {IN_FLIGHT} in flight, 2 workers, {EVICTING_RUN:?}; the feed's seen_or_insert):",
        one_filter_bytes()
    );
    let dir = tempfile::tempdir().unwrap();
    evicting(
        &rt,
        "directory",
        DirectoryStore::new(dir.path()).unwrap().sync(false),
    );
    match redis_server::start() {
        Some(server) => {
            let store = rt
                .block_on(RedisFilterStore::connect(&server.url()))
                .unwrap()
                .prefix("bench:set:");
            evicting(&rt, "redis", store);
        }
        None => println!("  redis      *** SKIPPED: redis-server not installed ***"),
    }
    c.final_summary();
}
