//! The main demo: a cache-penetration attack on a user service, with and without the guard.
//!
//! ```sh
//! cargo run --release --example demo
//! ```
//!
//! 1. Creates `./data/users.sqlite` with 1,000,000 users (reused on later runs).
//! 2. Builds the Bloom filter from it, streaming every id (`SELECT id FROM users`) into it.
//! 3. Starts the user service twice on 127.0.0.1: guarded (`BloomGuard` + `GuardedCache`)
//!    and unguarded (every lookup is a database query).
//! 4. Sends both the same attack over HTTP: 200,000 `GET /users/{id}`, 256 in flight,
//!    90% made-up ids (drawn from 100,000 ids that do not exist, so some repeat, as when an
//!    attacker cycles through a list) and 10% real ids, from a fixed seed.
//! 5. Prints what reached the database, latency and throughput, side by side.
#![forbid(unsafe_code)]

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use bloom_core::BloomFilter;
use bloom_examples::db::{self, Db};
use bloom_examples::user_service::{self, App, Config, RunningService, ServiceStats};
use bloom_tower::key::KeyFor;
use bloom_tower::{KeySource, SharedFilter};
use futures_util::{Stream, StreamExt as _};
use indicatif::{ProgressBar, ProgressStyle};

/// Users in the demo database.
const USERS: u64 = 1_000_000;
/// Requests per attack.
const REQUESTS: usize = 200_000;
/// Requests in flight.
const CONCURRENCY: usize = 256;
/// Share of requests for ids that exist.
const REAL_SHARE: f64 = 0.10;
/// The made-up ids: `ABSENT_BASE..ABSENT_BASE + ABSENT_POOL`, far above any real id.
const ABSENT_BASE: u64 = 1_000_000_000_000;
const ABSENT_POOL: u64 = 100_000;
/// The attack's random seed.
const SEED: u64 = 0x5EED;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "warn,sqlx::query=error".into()),
        )
        .init();
    let started = Instant::now();
    let data_dir = PathBuf::from("data");
    let url = db::sqlite_url(&data_dir)?;

    // 1. The database.
    let db = Db::connect(&url, 8, "demo-setup").await?;
    let have = db.count_users().await?;
    if have < USERS {
        let missing = USERS - have;
        println!(
            "Seeding {} with {missing} users…",
            data_dir.join("users.sqlite").display()
        );
        let bar = bar(missing, "seeding");
        let seeded = Instant::now();
        db.seed(missing, |done| bar.set_position(done)).await?;
        bar.finish_and_clear();
        println!("  seeded in {:.1} s", seeded.elapsed().as_secs_f64());
    } else {
        println!(
            "Reusing {} ({have} users).",
            data_dir.join("users.sqlite").display()
        );
    }
    let max_real = USERS; // ids 1..=USERS were seeded

    // 2. The filter, built by streaming every id from the database.
    let source = db.user_ids().await?;
    let keys = source.count_hint().unwrap_or(0);
    let building = Instant::now();
    let filter = SharedFilter::<u64>::builder()
        .name("guarded")
        .false_positive_rate(0.01)
        .auto_grow(true)
        .build(BloomFilter::new(1_000, 0.01)?);
    let bar = bar(keys, "building the filter");
    filter
        .reload_from(&WithProgress {
            source,
            bar: bar.clone(),
        })
        .await?;
    bar.finish_and_clear();
    let current = filter.current();
    println!(
        "Built the Bloom filter from {keys} ids in {:.1} s: {:.2} MB ({}), \
         {:.2}% of bits set, {:.3}% false positives expected.",
        building.elapsed().as_secs_f64(),
        current.size_in_bytes() as f64 / 1e6,
        current.kind(),
        100.0 * current.fill_ratio(),
        100.0 * current.current_fpr(),
    );
    drop(current);
    db.close().await;

    // 3. The two services.
    let guarded_config = Config {
        name: "guarded".into(),
        data_dir: data_dir.clone(),
        database_url: Some(url.clone()),
        ..Config::default()
    };
    let unguarded_config = Config {
        name: "unguarded".into(),
        no_guard: true,
        ..guarded_config.clone()
    };
    let guarded = App::with_parts(
        guarded_config.clone(),
        Db::connect(&url, guarded_config.max_connections, "guarded").await?,
        Some(filter),
    )
    .await?;
    let unguarded = App::with_parts(
        unguarded_config.clone(),
        Db::connect(&url, unguarded_config.max_connections, "unguarded").await?,
        None,
    )
    .await?;
    let guarded = user_service::spawn_app(guarded, 0).await?;
    let unguarded = user_service::spawn_app(unguarded, 0).await?;

    // 4. The attack, the same ids at both.
    let ids = Arc::new(attack_ids(max_real));
    println!(
        "\nAttack: {REQUESTS} GET /users/{{id}} at each service, {CONCURRENCY} in flight, \
         {:.0}% made-up ids (from a pool of {ABSENT_POOL}), {:.0}% real ids, seed {SEED:#x}.",
        100.0 * (1.0 - REAL_SHARE),
        100.0 * REAL_SHARE,
    );
    let unguarded_run = attack(&unguarded, "unguarded", &ids).await?;
    let guarded_run = attack(&guarded, "guarded", &ids).await?;

    // 5. The table.
    print_table(&unguarded_run, &guarded_run);
    unguarded.shutdown().await?;
    guarded.shutdown().await?;
    println!(
        "\nTotal time {:.1} s. The filter snapshot is in {}; \
         `cargo run --release --example user_service` serves the same database.",
        started.elapsed().as_secs_f64(),
        guarded_config.snapshot_path().display()
    );
    Ok(())
}

fn bar(len: u64, message: &'static str) -> ProgressBar {
    let bar = ProgressBar::new(len).with_message(message);
    bar.set_style(
        ProgressStyle::with_template(
            "{msg:>20} [{bar:40}] {human_pos}/{human_len} ({per_sec}, {eta})",
        )
        .expect("a valid template")
        .progress_chars("=> "),
    );
    bar
}

/// A [`KeySource`] that advances a progress bar as its keys stream past.
struct WithProgress<S> {
    source: S,
    bar: ProgressBar,
}

impl<S: KeySource + Sync> KeySource for WithProgress<S> {
    type Key = S::Key;
    type Error = S::Error;

    fn keys(
        &self,
    ) -> impl Stream<Item = Result<impl KeyFor<S::Key> + Send + '_, S::Error>> + Send + '_ {
        let mut read = 0u64;
        self.source.keys().inspect(move |_| {
            read += 1;
            if read % 4096 == 0 {
                self.bar.inc(4096);
            }
        })
    }

    fn count_hint(&self) -> Option<u64> {
        self.source.count_hint()
    }
}

/// The attack's ids, from the fixed seed: 10% real, 90% made up.
fn attack_ids(max_real: u64) -> Vec<u64> {
    let mut rng = fastrand::Rng::with_seed(SEED);
    (0..REQUESTS)
        .map(|_| {
            if rng.f64() < REAL_SHARE {
                rng.u64(1..=max_real)
            } else {
                ABSENT_BASE + rng.u64(0..ABSENT_POOL)
            }
        })
        .collect()
}

/// What one attack measured.
struct Run {
    requests: usize,
    found: usize,
    not_found: usize,
    other: usize,
    wrong: usize,
    latencies_us: Vec<u32>,
    elapsed: Duration,
    before: ServiceStats,
    after: ServiceStats,
    guarded: bool,
}

/// Sends every id to `service`, `CONCURRENCY` at a time, over keep-alive connections.
async fn attack(service: &RunningService, label: &str, ids: &Arc<Vec<u64>>) -> anyhow::Result<Run> {
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(CONCURRENCY)
        .timeout(Duration::from_secs(30))
        .build()?;
    let before = service.app.stats();
    let bar = bar(
        ids.len() as u64,
        if label == "guarded" {
            "guarded"
        } else {
            "unguarded"
        },
    );
    let next = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let mut workers = Vec::with_capacity(CONCURRENCY);
    for _ in 0..CONCURRENCY {
        let (client, ids, next, bar) = (
            client.clone(),
            Arc::clone(ids),
            Arc::clone(&next),
            bar.clone(),
        );
        let base = service.url();
        workers.push(tokio::spawn(async move {
            let mut latencies = Vec::with_capacity(ids.len() / CONCURRENCY + 1);
            let (mut found, mut not_found, mut other, mut wrong) = (0, 0, 0, 0);
            loop {
                let index = next.fetch_add(1, Relaxed);
                let Some(&id) = ids.get(index) else { break };
                let sent = Instant::now();
                let status = match client.get(format!("{base}/users/{id}")).send().await {
                    Ok(response) => {
                        let status = response.status().as_u16();
                        // Read the body so the connection goes back to the pool.
                        let _ = response.bytes().await;
                        status
                    }
                    Err(_) => 0,
                };
                latencies.push(sent.elapsed().as_micros().min(u32::MAX as u128) as u32);
                let real = id < ABSENT_BASE;
                match status {
                    200 => found += 1,
                    404 => not_found += 1,
                    _ => other += 1,
                }
                if (status == 200) != real && (status == 200 || status == 404) {
                    wrong += 1;
                }
                if index % 1024 == 0 {
                    bar.set_position(index as u64);
                }
            }
            (latencies, found, not_found, other, wrong)
        }));
    }
    let mut run = Run {
        requests: ids.len(),
        found: 0,
        not_found: 0,
        other: 0,
        wrong: 0,
        latencies_us: Vec::with_capacity(ids.len()),
        elapsed: Duration::ZERO,
        before,
        after: before,
        guarded: service.app.filter().is_some(),
    };
    for worker in workers {
        let (latencies, found, not_found, other, wrong) =
            worker.await.context("a client task panicked")?;
        run.latencies_us.extend(latencies);
        run.found += found;
        run.not_found += not_found;
        run.other += other;
        run.wrong += wrong;
    }
    run.elapsed = started.elapsed();
    bar.finish_and_clear();
    run.after = service.app.stats();
    run.latencies_us.sort_unstable();
    println!(
        "  {label:>9}: {} requests in {:.1} s",
        run.requests,
        run.elapsed.as_secs_f64()
    );
    Ok(run)
}

fn percentile(sorted: &[u32], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let index = ((sorted.len() - 1) as f64 * p).round() as usize;
    f64::from(sorted[index]) / 1000.0
}

fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, digit) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(digit);
    }
    out
}

fn print_table(unguarded: &Run, guarded: &Run) {
    let delta = |run: &Run, f: fn(&ServiceStats) -> u64| f(&run.after) - f(&run.before);
    let only_guarded = |run: &Run, f: fn(&ServiceStats) -> u64| {
        if run.guarded {
            thousands(delta(run, f))
        } else {
            "-".into()
        }
    };
    let rows: Vec<(&str, String, String)> = vec![
        (
            "requests",
            thousands(unguarded.requests as u64),
            thousands(guarded.requests as u64),
        ),
        (
            "answered 200 / 404",
            format!(
                "{} / {}",
                thousands(unguarded.found as u64),
                thousands(unguarded.not_found as u64)
            ),
            format!(
                "{} / {}",
                thousands(guarded.found as u64),
                thousands(guarded.not_found as u64)
            ),
        ),
        (
            "DB queries",
            thousands(delta(unguarded, |s| s.db_queries)),
            thousands(delta(guarded, |s| s.db_queries)),
        ),
        (
            "rejected by the filter",
            only_guarded(unguarded, |s| s.guard.rejected),
            only_guarded(guarded, |s| s.guard.rejected),
        ),
        (
            "absent ids that reached the DB",
            thousands(delta(unguarded, |s| s.db_misses)),
            format!(
                "{} (false positives)",
                thousands(delta(guarded, |s| s.db_misses))
            ),
        ),
        (
            "negative-cache hits",
            only_guarded(unguarded, |s| s.negative_hits),
            only_guarded(guarded, |s| s.negative_hits),
        ),
        (
            "cache hits",
            only_guarded(unguarded, |s| s.cache_hits),
            only_guarded(guarded, |s| s.cache_hits),
        ),
        (
            "measured false-positive rate",
            "-".into(),
            format!("{:.3}%", 100.0 * guarded.after.measured_fpr),
        ),
        (
            "p50 latency",
            format!("{:.2} ms", percentile(&unguarded.latencies_us, 0.50)),
            format!("{:.2} ms", percentile(&guarded.latencies_us, 0.50)),
        ),
        (
            "p99 latency",
            format!("{:.2} ms", percentile(&unguarded.latencies_us, 0.99)),
            format!("{:.2} ms", percentile(&guarded.latencies_us, 0.99)),
        ),
        (
            "requests/s",
            thousands((unguarded.requests as f64 / unguarded.elapsed.as_secs_f64()) as u64),
            thousands((guarded.requests as f64 / guarded.elapsed.as_secs_f64()) as u64),
        ),
    ];
    let width = rows
        .iter()
        .map(|(name, _, _)| name.len())
        .max()
        .unwrap_or(0);
    let column = rows
        .iter()
        .map(|(_, a, b)| a.len().max(b.len()))
        .max()
        .unwrap_or(0)
        .max(10);
    println!();
    println!(
        "{:width$}  {:>column$}  {:>column$}",
        "", "unguarded", "guarded"
    );
    println!("{}", "-".repeat(width + 2 * column + 4));
    for (name, a, b) in rows {
        println!("{name:width$}  {a:>column$}  {b:>column$}");
    }
    for run in [unguarded, guarded] {
        if run.other > 0 || run.wrong > 0 {
            println!(
                "warning: {} requests failed and {} got the wrong answer ({} service)",
                run.other,
                run.wrong,
                if run.guarded { "guarded" } else { "unguarded" }
            );
        }
    }
}
