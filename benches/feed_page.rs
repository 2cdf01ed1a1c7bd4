//! What a feed page costs inside the service, without HTTP: `Feed::page`, the feed
//! example's request path (the user's stripe lock, `FilterSet::update`, the page's batch
//! lookups and inserts, `examples/feed/service.rs`), for 100,000 users whose filters are all
//! in memory.
//!
//! The workload is `benches/feed_http.sh`'s on a simulated clock: 10 new items a second, a
//! 10 s window in 8 generations, pages of 10 from the 200 newest, and each user asking every
//! 1.8 s of the clock (the pace of the filtered service over HTTP, so that a page meets a
//! rotation about as often). Users are drawn from a fixed xorshift sequence, the clock moves
//! 18 µs a page.
//!
//! * `feed_page/{interleaved,separate,no_filter}`: one page, with the users' rings
//!   interleaved (the example's choice, [`RingLayout::Interleaved`]), separate (each
//!   generation its own allocation, the default for small rings), and the baseline
//!   (`FeedConfig::filter` false: the same path without a filter call).
//! * Printed, not criterion rows: rounds of 100,000 pages, the three taking turns (the order
//!   reversed every round); per variant the median ns a page over the rounds, and the median
//!   per-round ratio of separate to interleaved.
//!
//! `cargo bench -p bloom-benches --bench feed_page`

use std::sync::Arc;
use std::time::{Duration, Instant};

use bloom_core::windowed::{ManualClock, RingLayout};
use bloom_examples::feed::{Catalog, Feed, FeedConfig, FeedStore};
use bloom_tower::filter_set::DirectoryStore;
use criterion::Criterion;

const USERS: u64 = 100_000;
/// Clock time between two pages: each user asks every 1.8 s.
const STEP_NS: u64 = 1_800_000_000 / USERS;
const ROUND_PAGES: u64 = 100_000;
const ROUNDS: usize = 15;

/// A feed of `USERS` users on its own clock, every user shown a page once.
struct Bench {
    feed: Arc<Feed>,
    clock: Arc<ManualClock>,
    _dir: tempfile::TempDir,
    start_ms: u64,
    clock_ns: u64,
    user: u64,
}

impl Bench {
    fn new(rt: &tokio::runtime::Runtime, ring_layout: RingLayout, filter: bool) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let start_ms = 1_700_000_000_000;
        let clock = Arc::new(ManualClock::new(start_ms));
        let config = FeedConfig {
            budget_bytes: 512 << 20,
            items_per_window: 100,
            fpr: 0.01,
            window: Duration::from_secs(10),
            generations: 8,
            ring_layout,
            page: 10,
            scan: 200,
            catalog: Catalog { per_day: 864_000 },
            durable: false,
            filter,
        };
        let store = FeedStore::Directory(DirectoryStore::new(dir.path()).unwrap().sync(false));
        let feed = Feed::new(store, config, clock.clone()).unwrap();
        let mut bench = Self {
            feed,
            clock,
            _dir: dir,
            start_ms,
            clock_ns: 0,
            user: 0x9E37_79B9_7F4A_7C15,
        };
        rt.block_on(async {
            for user in 0..USERS {
                bench.feed.page(user).await.unwrap();
                bench.tick();
            }
        });
        bench
    }

    fn tick(&mut self) {
        self.clock_ns += STEP_NS;
        self.clock.set(self.start_ms + self.clock_ns / 1_000_000);
    }

    /// `pages` pages of users drawn from the sequence; the time they took.
    fn pages(&mut self, rt: &tokio::runtime::Runtime, pages: u64) -> Duration {
        let started = Instant::now();
        rt.block_on(async {
            for _ in 0..pages {
                self.user ^= self.user << 13;
                self.user ^= self.user >> 7;
                self.user ^= self.user << 17;
                let page = self.feed.page(self.user % USERS).await.unwrap();
                std::hint::black_box(page);
                self.tick();
            }
        });
        started.elapsed()
    }
}

/// The median of `v`.
fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    bloom_benches::median(&v)
}

fn main() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut benches = [
        (
            "interleaved",
            Bench::new(&rt, RingLayout::Interleaved, true),
        ),
        ("separate", Bench::new(&rt, RingLayout::Separate, true)),
        ("no_filter", Bench::new(&rt, RingLayout::Separate, false)),
    ];
    let mut c = Criterion::default()
        .sample_size(20)
        .measurement_time(Duration::from_secs(3))
        .configure_from_args();
    let mut group = c.benchmark_group("feed_page");
    for (name, bench) in &mut benches {
        group.bench_function(*name, |b| b.iter_custom(|pages| bench.pages(&rt, pages)));
    }
    group.finish();

    let mut ns: Vec<Vec<f64>> = vec![Vec::new(); benches.len()];
    let mut ratios = Vec::new();
    for round in 0..ROUNDS {
        let mut this = [0.0; 3];
        let order: Vec<usize> = if round % 2 == 0 {
            vec![0, 1, 2]
        } else {
            vec![2, 1, 0]
        };
        for i in order {
            let t = benches[i].1.pages(&rt, ROUND_PAGES);
            this[i] = t.as_nanos() as f64 / ROUND_PAGES as f64;
            ns[i].push(this[i]);
        }
        ratios.push(this[1] / this[0]);
    }
    println!(
        "\nfeed_page interleaved ({USERS} users, {ROUNDS} rounds of {ROUND_PAGES} pages, the order reversed every round): median ns a page"
    );
    for ((name, _), ns) in benches.iter().zip(ns) {
        println!("  {name:<12} {:8.0}", median(ns));
    }
    println!(
        "  separate / interleaved, median per round: {:.2}x",
        median(ratios)
    );
    c.final_summary();
}
