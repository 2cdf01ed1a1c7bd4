//! The counters `RedisSync::stats` reports that are exported as metrics too
//! (`names::CONFIRMED_REJECTIONS`, `UNCONFIRMED_REJECTIONS`, `STALE_PERIODS`,
//! `REFUSED_SWITCHES`), against a real `redis-server` (see `common`): each moves with its
//! event, and agrees with the stats, instance by instance summed over a prefix.
//!
//! A process-wide recorder (a test binary of its own) that keeps every counter's value by
//! `name{prefix=…}`: the instances' tasks run on every worker thread. Each test has its own
//! prefix. Every wait is bounded by `HANG` (a hang detector); nothing asserts a duration.
#![forbid(unsafe_code)]
#![cfg(feature = "metrics")]

mod common;
#[path = "common/fault.rs"]
mod fault;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, LazyLock, Mutex, Once};
use std::time::{Duration, Instant};

use bloom_core::{BloomFilter, Layout};
use bloom_redis::{Error, RedisStats, RedisSync, RedisSyncBuilder, names};
use bloom_tower::SharedFilter;
use fault::{FaultProxy, Mode};
use metrics::{Counter, Gauge, Histogram, Key, KeyName, Metadata, SharedString, Unit};

const HANG: Duration = Duration::from_secs(20);

/// One test at a time: a fleet beside another test's would starve its heartbeats.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Every counter's value, by `name{label=value,…}`.
static COUNTERS: LazyLock<Registered<AtomicU64>> = LazyLock::new(Registered::default);

/// Every gauge's values, in the order they were set, by `name{label=value,…}`.
static GAUGES: LazyLock<Registered<Set>> = LazyLock::new(Registered::default);

/// Registered metrics, by `name{label=value,…}`.
type Registered<T> = Mutex<HashMap<String, Arc<T>>>;

/// One gauge's values, in the order they were set.
#[derive(Default)]
struct Set(Mutex<Vec<f64>>);

impl metrics::GaugeFn for Set {
    fn increment(&self, _: f64) {
        unreachable!("the crate only sets its gauges")
    }
    fn decrement(&self, _: f64) {
        unreachable!("the crate only sets its gauges")
    }
    fn set(&self, value: f64) {
        self.0.lock().unwrap().push(value);
    }
}

/// Registers counters (into [`COUNTERS`]) and gauges (into [`GAUGES`]).
struct Counting;

/// `name{label=value,…}`.
fn labelled(key: &Key) -> String {
    let labels: Vec<String> = key
        .labels()
        .map(|l| format!("{}={}", l.key(), l.value()))
        .collect();
    format!("{}{{{}}}", key.name(), labels.join(","))
}

impl metrics::Recorder for Counting {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        let mut counters = COUNTERS.lock().unwrap();
        Counter::from_arc(Arc::clone(counters.entry(labelled(key)).or_default()))
    }
    fn register_gauge(&self, key: &Key, _: &Metadata<'_>) -> Gauge {
        let mut gauges = GAUGES.lock().unwrap();
        Gauge::from_arc(Arc::clone(gauges.entry(labelled(key)).or_default()))
    }
    fn register_histogram(&self, _: &Key, _: &Metadata<'_>) -> Histogram {
        Histogram::noop()
    }
}

fn install() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        metrics::set_global_recorder(Counting).expect("the only recorder of this test binary");
    });
}

/// `name{prefix=…}`'s value (0 before it is registered).
fn counter(name: &str, prefix: &str) -> u64 {
    let counters = COUNTERS.lock().unwrap();
    counters
        .get(&format!("{name}{{prefix={prefix}}}"))
        .map_or(0, |value| value.load(Relaxed))
}

/// Whether the last check of `prefix`'s view (every heartbeat) found it fresh: the stale
/// period that check closed, if any, is counted; the next one will be a new one.
fn last_check_fresh(prefix: &str) -> bool {
    let gauges = GAUGES.lock().unwrap();
    gauges
        .get(&format!("{}{{prefix={prefix}}}", names::STALE))
        .is_some_and(|set| set.0.lock().unwrap().last() == Some(&0.0))
}

/// A field of the stats.
type Field = fn(&RedisStats) -> u64;

/// Each exported counter and the stats field it mirrors.
const EXPORTED: [(&str, Field); 4] = [
    (names::CONFIRMED_REJECTIONS, |s| s.confirmed),
    (names::UNCONFIRMED_REJECTIONS, |s| s.unconfirmed),
    (names::STALE_PERIODS, |s| s.stale_periods),
    (names::REFUSED_SWITCHES, |s| s.refused_switches),
];

/// Every exported counter of `prefix`, and the same stats summed over `instances` (all of
/// the prefix's instances in this process).
fn exported_and_stats(prefix: &str, instances: &[&RedisSync<str>]) -> Vec<(u64, u64)> {
    let stats: Vec<RedisStats> = instances.iter().map(|i| i.stats()).collect();
    EXPORTED
        .iter()
        .map(|(name, field)| (counter(name, prefix), stats.iter().map(field).sum()))
        .collect()
}

/// Waits until `name`'s counter of `prefix` is `expected` and every exported counter agrees
/// with the stats; fails with both after [`HANG`].
async fn settles_at(
    name: &str,
    expected: impl Fn(u64) -> bool,
    prefix: &str,
    instances: &[&RedisSync<str>],
) {
    let started = Instant::now();
    loop {
        let pairs = exported_and_stats(prefix, instances);
        let agree = pairs.iter().all(|(exported, stats)| exported == stats);
        if agree && expected(counter(name, prefix)) {
            return;
        }
        assert!(
            started.elapsed() < HANG,
            "{name}{{prefix={prefix}}}: exported vs stats, for {:?}: {pairs:?}",
            EXPORTED.map(|(name, _)| name)
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

fn filter() -> SharedFilter<str> {
    SharedFilter::new(
        BloomFilter::builder()
            .bits(1 << 20)
            .hashes(7)
            .layout(Layout::Blocked)
            .seed(0xc0_7e75)
            .build()
            .unwrap(),
    )
}

async fn join(
    url: &str,
    prefix: &str,
    configure: fn(RedisSyncBuilder) -> RedisSyncBuilder,
) -> RedisSync<str> {
    configure(RedisSync::builder(url).prefix(prefix))
        .connect(&filter())
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

/// `n` keys no instance inserts, whose bits the filter does not hold: would-be rejections.
fn absent_keys(sync: &RedisSync<str>, n: usize) -> Vec<String> {
    (0..)
        .map(|i| format!("absent:{i}"))
        .filter(|key| !sync.filter().current().contains(key.as_str()))
        .take(n)
        .collect()
}

/// A would-be rejection on a fresh view is confirmed; on a hung link it is not (and goes to
/// the stale policy), and the view goes stale: a second stale period after the join's.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn confirmed_and_unconfirmed_rejections_and_stale_periods_are_exported() {
    let Some(server) = common::start() else {
        return;
    };
    install();
    let _one = ONE_AT_A_TIME.lock().await;
    let prefix = "exported-rejections";
    let proxy = FaultProxy::start(SocketAddr::from(([127, 0, 0, 1], server.port()))).await;
    let sync = join(&proxy.url(), prefix, |b| b).await;
    // Joining may count a stale period (the view is not fresh until its first mark round is
    // back), if a check saw it; it ends at the first check that finds the view fresh.
    eventually("fresh, as a check saw it", || {
        sync.stats().fresh && last_check_fresh(prefix)
    })
    .await;
    settles_at(names::STALE_PERIODS, |n| n <= 1, prefix, &[&sync]).await;
    let joined = counter(names::STALE_PERIODS, prefix);
    for name in [names::CONFIRMED_REJECTIONS, names::UNCONFIRMED_REJECTIONS] {
        assert_eq!(counter(name, prefix), 0, "{name} before any rejection");
    }
    let keys = absent_keys(&sync, 10);

    assert!(!sync.filter().check(keys[0].as_str()).await, "confirmed");
    settles_at(names::CONFIRMED_REJECTIONS, |n| n == 1, prefix, &[&sync]).await;
    assert_eq!(counter(names::UNCONFIRMED_REJECTIONS, prefix), 0);

    // The view still counts itself fresh (no heartbeat missed yet): the rejection waits for
    // its ping, which does not come, and the stale policy (let through) answers.
    proxy.set_mode(Mode::Hang).await;
    assert!(
        sync.filter().check(keys[1].as_str()).await,
        "let through unconfirmed"
    );
    settles_at(names::UNCONFIRMED_REJECTIONS, |n| n == 1, prefix, &[&sync]).await;
    assert_eq!(counter(names::CONFIRMED_REJECTIONS, prefix), 1);
    eventually("stale, as a check saw it", || !last_check_fresh(prefix)).await;
    settles_at(names::STALE_PERIODS, |n| n == joined + 1, prefix, &[&sync]).await;

    proxy.set_mode(Mode::Pass).await;
    eventually("fresh again", || sync.stats().fresh).await;
    assert!(
        !sync.filter().check(keys[2].as_str()).await,
        "confirmed again"
    );
    settles_at(names::CONFIRMED_REJECTIONS, |n| n == 2, prefix, &[&sync]).await;
    assert_eq!(counter(names::STALE_PERIODS, prefix), joined + 1);
    sync.leave().await;
}

/// A rebuild far smaller than the serving generation is refused by the instance that ran it;
/// forced, the other instance refuses to drop its keys and switches with them carried over.
/// Each counts one refused switch.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn refused_switches_are_exported() {
    let Some(server) = common::start() else {
        return;
    };
    install();
    let _one = ONE_AT_A_TIME.lock().await;
    let prefix = "exported-refused";
    let url = server.url();
    let cfg = |b: RedisSyncBuilder| b.reconcile_every(Duration::from_millis(200));
    let (a, b) = (join(&url, prefix, cfg).await, join(&url, prefix, cfg).await);
    let served: Vec<String> = (0..1_000).map(|i| format!("user:{i}")).collect();
    for key in &served {
        a.filter().insert(key.as_str());
    }
    a.propagated().await.expect("published");
    eventually("B holds A's keys", || {
        served
            .iter()
            .all(|key| b.filter().current().contains(key.as_str()))
    })
    .await;
    assert_eq!(counter(names::REFUSED_SWITCHES, prefix), 0);
    // A source pointed at the wrong table: a tenth of the keys.
    let wrong = served[..100].to_vec();

    let outcome = a.rebuild(&wrong).await;
    assert!(
        matches!(outcome, Err(Error::Shrunk { .. })),
        "expected Error::Shrunk, got {outcome:?}"
    );
    settles_at(names::REFUSED_SWITCHES, |n| n == 1, prefix, &[&a, &b]).await;
    assert_eq!(
        (a.stats().refused_switches, b.stats().refused_switches),
        (1, 0)
    );

    let serving = b.stats().generation;
    a.force_rebuild(&wrong).await.expect("forced");
    eventually("B switched", || b.stats().generation > serving).await;
    settles_at(names::REFUSED_SWITCHES, |n| n == 2, prefix, &[&a, &b]).await;
    assert_eq!(
        (a.stats().refused_switches, b.stats().refused_switches),
        (1, 1)
    );
    assert!(
        served
            .iter()
            .all(|key| b.filter().current().contains(key.as_str())),
        "B carried its keys over"
    );
    a.leave().await;
    b.leave().await;
}
