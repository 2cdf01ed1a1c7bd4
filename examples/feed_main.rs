//! The feed service: `GET /feed/{user}` never returns an item the user was shown within the
//! last 7 days; one windowed filter per user under a memory budget (see
//! `bloom_examples::feed`).
//!
//! ```sh
//! # simulate two weeks of 1,000,000 users (10 % active a day) over TCP, and check every answer
//! cargo run --release --example feed
//! # the same with Redis as the store
//! REDIS_URL=redis://127.0.0.1:6379 cargo run --release --example feed
//! # serve on the system clock instead (one Ctrl-C or SIGTERM stops it within 5 s, then
//! # stores every user's filter; see bloom_examples::serve)
//! cargo run --release --example feed -- --serve --port 3000
//! curl localhost:3000/feed/42
//! # the baseline: the same service and routes with the filter calls removed (every item
//! # counts as not seen, nothing is recorded): what the filters cost, measured over HTTP
//! # against the filtered service by benches/feed_http.sh
//! cargo run --release --example feed -- --serve --no-filter --port 3001
//! ```
//!
//! The simulation prints the filter set's memory against the budget, the process's peak
//! memory, requests per second, the items wrongly withheld (the filters' false positives)
//! and the items shown twice within the window, which must be 0 (the run fails otherwise).
#![forbid(unsafe_code)]

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use bloom_core::windowed::{Clock, ManualClock, RingLayout, SystemClock};
use bloom_examples::feed::{
    Catalog, Feed, FeedConfig, FeedStore, LocalStore, SimulationConfig, simulate,
};
use bloom_examples::serve;
use clap::Parser;

const DAY: u64 = 86_400;

/// Command line.
#[derive(Debug, Parser)]
#[command(about = "A feed that never shows an item twice within a week")]
struct Cli {
    /// Serve on the system clock (no simulation).
    #[arg(long)]
    serve: bool,
    /// Port on 127.0.0.1 with --serve (0: any free port; the address is printed).
    #[arg(long, default_value_t = 3000)]
    port: u16,
    /// The store directory, when REDIS_URL is not set. The simulation uses a fresh
    /// subdirectory of it and removes it at the end.
    #[arg(long, default_value = "data/feed-filters")]
    store_dir: std::path::PathBuf,
    /// What the store directory holds, when REDIS_URL is not set: one SQLite file
    /// (`filters.db`; a flush writes 512 users a transaction) or one file per user.
    #[arg(long, value_enum, default_value_t = LocalStore::Sqlite)]
    store: LocalStore,
    /// Redis as the store instead of the directory.
    #[arg(long, env = "REDIS_URL")]
    redis_url: Option<String>,
    /// Memory budget of the users' filters, MiB.
    #[arg(long, default_value_t = 256)]
    budget_mib: usize,
    /// Items a user may be shown in a window (sizes each filter).
    #[arg(long, default_value_t = 100)]
    items_per_window: u64,
    /// False-positive rate of each filter.
    #[arg(long, default_value_t = 0.01)]
    fpr: f64,
    /// The window, days.
    #[arg(long, default_value_t = 7)]
    window_days: u64,
    /// With --serve: the window in seconds instead of days, for a week compressed into a
    /// benchmark's seconds (benches/feed_http.sh), with --items-per-day to match.
    #[arg(long, requires = "serve", conflicts_with = "window_days", value_parser = clap::value_parser!(u64).range(1..))]
    window_secs: Option<u64>,
    /// New items in the catalogue per day (the candidates are the newest 20 pages of it).
    #[arg(long, default_value_t = 2_000, value_parser = clap::value_parser!(u64).range(1..))]
    items_per_day: u64,
    /// Items per response.
    #[arg(long, default_value_t = 10)]
    page: usize,
    /// Store the user's filter before each response (a killed process forgets nothing it
    /// answered); otherwise the filters are flushed every --flush-secs and at shutdown.
    #[arg(long)]
    durable: bool,
    /// Seconds between two flushes of the filters changed since the last one (a killed
    /// process forgets at most this much without --durable; a graceful stop stores all).
    /// Each flush stores every user whose filter changed (512 rows a transaction, 64 files
    /// a trip to a blocking thread with --store files, 256 Redis keys a pipeline), so a
    /// user's requests within one interval cost one store: 30 s covers a reading session.
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..))]
    flush_secs: u64,
    /// With --serve: the baseline without the filters. The same routes, request handling
    /// and JSON, but no filter set call: every candidate counts as not seen (a feed always
    /// answers the newest items) and nothing is recorded. Measures what the filters cost
    /// (benches/feed_http.sh).
    #[arg(long, requires = "serve", conflicts_with = "durable")]
    no_filter: bool,
    /// Users (simulation).
    #[arg(long, default_value_t = 1_000_000)]
    users: u64,
    /// Fraction of the users active each day (simulation).
    #[arg(long, default_value_t = 0.1)]
    active: f64,
    /// Simulated days.
    #[arg(long, default_value_t = 14)]
    days: u64,
    /// Requests per simulated day.
    #[arg(long, default_value_t = 50_000)]
    requests_per_day: u64,
    /// Requests in flight (simulation).
    #[arg(long, default_value_t = 32)]
    concurrency: usize,
}

/// Generations of each user's filter: the period is a day (the window is 7 days).
const GENERATIONS: u32 = 8;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .init();
    let cli = Cli::parse();
    let window = Duration::from_secs(cli.window_secs.unwrap_or(cli.window_days * DAY));
    let config = FeedConfig {
        budget_bytes: cli.budget_mib << 20,
        items_per_window: cli.items_per_window,
        fpr: cli.fpr,
        window,
        generations: GENERATIONS,
        ring_layout: RingLayout::Interleaved,
        page: cli.page,
        scan: 20 * cli.page,
        catalog: Catalog {
            per_day: cli.items_per_day,
        },
        durable: cli.durable,
        filter: !cli.no_filter,
    };
    if cli.serve {
        serve(&cli, config).await
    } else {
        run_simulation(&cli, config).await
    }
}

async fn serve(cli: &Cli, config: FeedConfig) -> anyhow::Result<()> {
    let store = FeedStore::open(cli.redis_url.as_deref(), cli.store, &cli.store_dir).await?;
    let feed = Feed::new(store, config, Arc::new(SystemClock))?;
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", cli.port)).await?;
    // Installed before it says it listens: a signal from then on stops it gracefully.
    let signal = serve::shutdown_signal().context("installing the signal handlers")?;
    println!(
        "feed: listening on http://{}{}",
        listener.local_addr()?,
        if cli.no_filter {
            " (--no-filter: no filter calls, every item counts as unseen)"
        } else {
            ""
        }
    );
    let flusher = spawn_flusher(feed.clone(), Duration::from_secs(cli.flush_secs));
    // Returns within the grace period of the signal, with no request left running: the
    // flush below stores every item any response showed (the rule: `bloom_examples::serve`).
    let stopped = serve::serve(
        listener,
        feed.router(),
        async move {
            let stop = signal.await;
            println!("feed: {stop}: stopping");
        },
        serve::GRACE,
    )
    .await?;
    flusher.abort();
    let stored = feed.shown().flush().await.context("flushing at shutdown")?;
    println!(
        "feed: stopped; {} connections open at the signal, {} dropped after the grace period; {stored} filters stored at shutdown",
        stopped.open, stopped.dropped
    );
    Ok(())
}

async fn run_simulation(cli: &Cli, config: FeedConfig) -> anyhow::Result<()> {
    let run = if cli.redis_url.is_none() {
        std::fs::create_dir_all(&cli.store_dir)?;
        Some(tempfile::tempdir_in(&cli.store_dir)?)
    } else {
        None
    };
    let dir = run
        .as_ref()
        .map_or(cli.store_dir.clone(), |d| d.path().to_owned());
    let store = match FeedStore::open(cli.redis_url.as_deref(), cli.store, &dir).await? {
        // A fresh key space per run.
        FeedStore::Redis(r) => {
            FeedStore::Redis(r.prefix(format!("feed:shown:{}:", std::process::id())))
        }
        directory => directory,
    };
    let clock = Arc::new(ManualClock::new(1_800_000_000_000));
    let period = config.window.div_f64(f64::from(config.generations - 1));
    let feed = Feed::new(
        store.clone(),
        config.clone(),
        clock.clone() as Arc<dyn Clock>,
    )?;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let base = format!("http://{}", listener.local_addr()?);
    let server = tokio::spawn(axum::serve(listener, feed.router()).into_future());
    let flusher = spawn_flusher(feed.clone(), Duration::from_secs(cli.flush_secs));
    println!(
        "feed: {} users, {:.0} % active a day, {} simulated days, {} requests a day, {} in flight, budget {} MiB, store {}{}",
        cli.users,
        cli.active * 100.0,
        cli.days,
        cli.requests_per_day,
        cli.concurrency,
        cli.budget_mib,
        store.describe(),
        if config.durable { ", durable" } else { "" },
    );
    let simulation = SimulationConfig {
        users: cli.users,
        active: cli.active,
        days: cli.days,
        requests_per_day: cli.requests_per_day,
        concurrency: cli.concurrency,
        window: config.window,
        period,
        seed: 7,
    };
    let report = simulate(&base, &feed, &clock, &simulation).await?;
    flusher.abort();
    server.abort();
    let s = report.stats;
    let mib = |b: usize| b as f64 / f64::from(1 << 20);
    println!(
        "memory: filter set {:.1} MiB of {} MiB ({} filters in memory); process peak RSS {:.0} MiB (with the checker's exact record)",
        mib(s.bytes_in_memory),
        cli.budget_mib,
        s.filters_in_memory,
        peak_rss_mib().unwrap_or(f64::NAN),
    );
    println!(
        "requests: {} in {:.1} s = {:.0} requests/s; {} users served, {} items shown",
        report.requests,
        report.elapsed.as_secs_f64(),
        report.requests as f64 / report.elapsed.as_secs_f64(),
        report.users_served,
        report.items_shown,
    );
    println!(
        "filter set: {} created, {} evicted, {} loaded (mean {:.0} µs, max {:.1} ms), {} stored, {} store errors",
        s.creates,
        s.evictions,
        s.loads,
        s.load_latency_mean.as_secs_f64() * 1e6,
        s.load_latency_max.as_secs_f64() * 1e3,
        s.stores,
        s.store_errors,
    );
    println!(
        "wrongly withheld: {} of {} fresh candidates ({:.3} %, target {} %); {} withheld while fading out (shown {}–{} days ago)",
        report.wrongly_withheld,
        report.fresh_candidates,
        100.0 * report.wrongly_withheld as f64 / report.fresh_candidates.max(1) as f64,
        config.fpr * 100.0,
        report.fading_withheld,
        cli.window_days,
        (config.window + period).as_secs_f64() / DAY as f64,
    );
    println!(
        "shown twice within {} days: {}",
        cli.window_days, report.shown_twice
    );
    anyhow::ensure!(
        report.shown_twice == 0,
        "an item was shown twice within the window"
    );
    Ok(())
}

/// Flushes the filter set every `period`. A flush that comes late (a stalled or stopped
/// process) runs once, and the next one `period` after it: one flush per `period`, never a
/// burst of them (`benches/feed_http.sh` relies on it).
fn spawn_flusher(feed: Arc<Feed>, period: Duration) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut every = tokio::time::interval(period);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            every.tick().await;
            if let Err(e) = feed.shown().flush().await {
                tracing::warn!(error = %e, "feed: flush failed; the filters stay in memory");
            }
        }
    })
}

/// The process's peak resident memory (`VmHWM`), MiB.
fn peak_rss_mib() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}
