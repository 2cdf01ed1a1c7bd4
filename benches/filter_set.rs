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
//!   (`iter_custom`, std threads walking the same pinned pairs from different offsets), per
//!   operation.
//! * Printed, not criterion rows (rows timed one after another drift apart on a shared VM,
//!   so the ratios are per round, medians over the rounds):
//!   * `resident interleaved`: update and contains, filter set and moka taking turns;
//!   * `resident threads`: operations/s from 1 and 2 threads doing the same total work on
//!     the same pinned pairs (scaling target ≥ 1.7 ×), after a warm-up, the order of the
//!     passes reversed every round; a 1-thread pass beside a spinner (the other core kept
//!     awake, and a probe of the machine: on a VM whose two vCPUs share one physical core's
//!     time it halves the thread); control rows, the filter call alone on the same filters
//!     (what the machine gives two threads); the p99 latency of one operation;
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
use std::sync::atomic::{AtomicBool, Ordering};
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
/// Operations per pass of the scaling section: 16 walks over the pinned pairs.
const SCALING_OPS: u64 = 16 * PAIRS as u64;

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
    /// moka's filters by user, for the control row: the filter call with no cache around it.
    direct: Vec<Arc<AnyFilter>>,
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
        let direct = (0..USERS).map(|user| moka.get(&user).unwrap()).collect();
        Self {
            set,
            moka,
            template,
            direct,
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

    fn direct_update(&self, (user, item): (u64, u64)) -> bool {
        seen_or_insert(&self.direct[user as usize], item)
    }

    fn direct_contains(&self, (user, item): (u64, u64)) -> bool {
        self.direct[user as usize].contains(&item)
    }
}

type Op = fn(&Resident, (u64, u64)) -> bool;

const OPS: [(&str, Op); 4] = [
    ("update/filter_set", Resident::set_update),
    ("update/moka", Resident::moka_update),
    ("contains/filter_set", Resident::set_contains),
    ("contains/moka", Resident::moka_contains),
];

/// The control rows of the scaling section: the same filter calls on the same filters with
/// no cache around them (what the machine gives two threads for this memory traffic).
const CONTROLS: [(&str, Op); 2] = [
    ("update/filter_only", Resident::direct_update),
    ("contains/filter_only", Resident::direct_contains),
];

/// The (user, item) pairs every timed loop cycles over, drawn once: the 1- and 2-thread
/// passes run the same operations on the same filters.
fn pinned_pairs() -> Vec<(u64, u64)> {
    pairs(100)
}

/// `ops` operations split evenly over `threads` threads, all on `keys`: the wall time from
/// the first thread's start to the last one's end, and when `latencies`, each operation's
/// time (which slows the loop: a separate pass). With `spinner`, one more thread spins
/// (`spin_loop`, touching no memory) from before the start to after the end, keeping the
/// other core awake (see [`scaling`]). Thread `t` of `n` starts its walk of `keys`
/// at `t * keys.len() / n` (so the threads do not touch the same user at the same moment)
/// and does `ops / n` steps; with `ops` a multiple of `n * keys.len()` every pass runs each
/// pair the same number of times, whatever `n`.
fn threaded(
    r: &Resident,
    op: Op,
    keys: &[(u64, u64)],
    threads: usize,
    ops: u64,
    latencies: bool,
    spinner: bool,
) -> (Duration, Vec<u32>) {
    let per_thread = (ops / threads as u64) as usize;
    let barrier = Barrier::new(threads + usize::from(spinner));
    let spinning = AtomicBool::new(spinner);
    let results: Vec<(Instant, Instant, Vec<u32>)> = std::thread::scope(|s| {
        if spinner {
            let (barrier, spinning) = (&barrier, &spinning);
            s.spawn(move || {
                barrier.wait();
                while spinning.load(Ordering::Relaxed) {
                    std::hint::spin_loop();
                }
            });
        }
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let barrier = &barrier;
                s.spawn(move || {
                    let mut at = t * keys.len() / threads;
                    let mut lat = Vec::with_capacity(if latencies { per_thread } else { 0 });
                    barrier.wait();
                    let start = Instant::now();
                    for _ in 0..per_thread {
                        let pair = keys[at];
                        at += 1;
                        if at == keys.len() {
                            at = 0;
                        }
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
        let results = handles.into_iter().map(|h| h.join().unwrap()).collect();
        spinning.store(false, Ordering::Relaxed);
        results
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

fn criterion_rows(c: &mut Criterion, r: &Resident, pinned: &[(u64, u64)]) {
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
                b.iter_custom(|iters| {
                    threaded(
                        r,
                        op,
                        pinned,
                        threads,
                        iters.max(threads as u64),
                        false,
                        false,
                    )
                    .0
                })
            });
        }
    }
    group.finish();
}

/// The four resident operations taking turns, ratios per round.
fn interleaved(r: &Resident, keys: &[(u64, u64)]) {
    const ROUNDS: usize = 31;
    const N: u64 = 400_000;
    let mut ns = vec![Vec::new(); OPS.len()];
    for _ in 0..ROUNDS {
        for (i, (_, op)) in OPS.iter().enumerate() {
            let (t, _) = threaded(r, *op, keys, 1, N, false, false);
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
}

/// Operations/s from 1 and 2 threads doing the same work: [`SCALING_OPS`] operations on the
/// pinned pairs per pass (16 walks over them, split evenly between the threads), after an
/// untimed warm-up of every pass. Each round runs, for each operation, a 1-thread pass, a
/// 1-thread pass beside a spinner and a 2-thread pass back to back, in an order that reverses
/// between rounds (A B C, C B A, ...) so drift, warm-up and frequency effects fall on both
/// sides alike; the scaling is per round (passes of one round), the median over the rounds.
/// The medians by order (1-thread pass first, 2-thread pass first) show what order bias is
/// left. The spinner pass is the 1-thread baseline with the other core awake: on a VM the
/// thread of a 1-thread pass can run slower than each of two (the other vCPU halted), which
/// puts a scaling above 2 in the plain ratio; the control rows (the filter call alone, no
/// shared state) show what the machine gives. Then one more pass per thread count with each
/// operation timed, for its p99.
fn scaling(r: &Resident, keys: &[(u64, u64)]) {
    const ROUNDS: usize = 16;
    /// (threads, spinner) of the passes of a round, in the even rounds' order.
    const PASSES: [(usize, bool); 3] = [(1, false), (1, true), (2, false)];
    let rows: Vec<(&str, Op)> = OPS.iter().chain(&CONTROLS).copied().collect();
    for &(_, op) in &rows {
        for (threads, spinner) in PASSES {
            threaded(r, op, keys, threads, SCALING_OPS, false, spinner);
        }
    }
    // [row][pass]: operations/s per round.
    let mut per_round = vec![[Vec::new(), Vec::new(), Vec::new()]; rows.len()];
    for round in 0..ROUNDS {
        for (i, &(_, op)) in rows.iter().enumerate() {
            for k in 0..PASSES.len() {
                let k = if round % 2 == 0 {
                    k
                } else {
                    PASSES.len() - 1 - k
                };
                let (threads, spinner) = PASSES[k];
                let (t, _) = threaded(r, op, keys, threads, SCALING_OPS, false, spinner);
                per_round[i][k].push(SCALING_OPS as f64 / t.as_secs_f64());
            }
        }
    }
    println!(
        "\nresident threads ({ROUNDS} rounds, order reversed every round; {SCALING_OPS} operations per pass on the same {PAIRS} pairs; M operations/s medians; p99 of one operation; scaling = 2 threads / 1 thread per round, median [p10, p90]):"
    );
    for (i, &(name, op)) in rows.iter().enumerate() {
        let [one, one_awake, two] = &per_round[i];
        let ratios =
            |base: &[f64]| -> Vec<f64> { two.iter().zip(base).map(|(b, a)| b / a).collect() };
        let plain = ratios(one);
        let by_order = |first_one: bool| {
            let v = plain
                .iter()
                .enumerate()
                .filter(|(round, _)| (round % 2 == 0) == first_one)
                .map(|(_, s)| *s)
                .collect();
            median(v).0
        };
        let mut p99 = [0; 2];
        for threads in [1, 2] {
            let (_, mut lat) = threaded(r, op, keys, threads, SCALING_OPS, true, false);
            lat.sort_unstable();
            p99[threads - 1] = percentile(&lat, 0.99);
        }
        let target = if CONTROLS.iter().any(|c| c.0 == name) {
            "control"
        } else {
            "target >= 1.7"
        };
        let (s, lo, hi) = median(plain.clone());
        let (sa, alo, ahi) = median(ratios(one_awake));
        println!(
            "  {name:<21} 1 thread {:5.2} (p99 {:5} ns), 1 beside a spinner {:5.2}, 2 threads {:5.2} (p99 {:5} ns): scaling {s:.2} [{lo:.2}, {hi:.2}] (1 first {:.2}, 2 first {:.2}), over the spinner baseline {sa:.2} [{alo:.2}, {ahi:.2}] ({target})",
            median(one.clone()).0 / 1e6,
            p99[0],
            median(one_awake.clone()).0 / 1e6,
            median(two.clone()).0 / 1e6,
            p99[1],
            by_order(true),
            by_order(false),
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
    let pinned = pinned_pairs();
    criterion_rows(&mut c, &resident, &pinned);
    interleaved(&resident, &pinned);
    scaling(&resident, &pinned);
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
