//! What an idle fleet costs as it grows: for each N in `FLEET_SIZES` (default `3,30,300`), a
//! fresh `redis-server` and N instances in this process (each a `SharedFilter` with its own
//! `RedisSync`, library defaults) sharing one 100,000-key filter at 1%. They join
//! `JOIN_BATCH` (10) at a time; once all are fresh, `IDLE_SECS` (60) idle are measured: per
//! instance, bytes into and out of Redis per minute (Redis's `INFO stats` counters), commands
//! and `PUBLISH`es per second (`INFO commandstats`), this process's CPU (`/proc/self/stat`) as
//! % of a core; redis-server's CPU; stale periods summed over the instances during the window
//! and the instances not fresh at its end. Then every instance `leave()`s.
//!
//! One Markdown table row per N (progress on stderr), then the commands each instance sends
//! per second, busiest first. The measuring is `crates/bloom-redis/tests/common/idle_fleet.rs`,
//! which `tests/fleet_scale.rs` asserts on for N = 300. Every wait is bounded
//! (`JOIN_LIMIT_SECS`, 120; `SETTLE_LIMIT_SECS`, 60): a fleet that cannot join or settle in time
//! is measured as it is, and the row says so. `KEYS` (100000) sets the filter's size.
//!
//! Needs `redis-server` on the PATH; without it the bench prints a loud SKIPPED line and exits.
//!
//! `cargo bench -p bloom-benches --bench fleet_idle`

use std::time::Duration;

/// The throwaway `redis-server` bloom-redis's tests use (random port, no persistence).
#[path = "../crates/bloom-redis/tests/common/mod.rs"]
mod redis_server;

/// The fleet run and its measurements, shared with `tests/fleet_scale.rs`.
#[path = "../crates/bloom-redis/tests/common/idle_fleet.rs"]
mod idle_fleet;

fn env_u64(name: &str, default: u64) -> u64 {
    match std::env::var(name) {
        Ok(value) => value
            .parse()
            .unwrap_or_else(|_| panic!("{name}={value:?} is not a whole number")),
        Err(_) => default,
    }
}

fn main() {
    let sizes: Vec<usize> = std::env::var("FLEET_SIZES")
        .unwrap_or_else(|_| "3,30,300".to_owned())
        .split(',')
        .map(|n| {
            n.trim()
                .parse()
                .unwrap_or_else(|_| panic!("FLEET_SIZES: {n:?} is not a whole number"))
        })
        .collect();
    let mut template = idle_fleet::Options::new(0);
    template.keys = env_u64("KEYS", template.keys);
    template.idle = Duration::from_secs(env_u64("IDLE_SECS", template.idle.as_secs()));
    template.join_batch = env_u64("JOIN_BATCH", template.join_batch as u64) as usize;
    template.join_limit =
        Duration::from_secs(env_u64("JOIN_LIMIT_SECS", template.join_limit.as_secs()));
    template.settle_limit = Duration::from_secs(env_u64(
        "SETTLE_LIMIT_SECS",
        template.settle_limit.as_secs(),
    ));
    template.prefix = "bench-fleet-idle".to_owned();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();

    let sizes_text: Vec<String> = sizes.iter().map(usize::to_string).collect();
    println!(
        "FLEET_SIZES={} IDLE_SECS={} cargo bench -p bloom-benches --bench fleet_idle",
        sizes_text.join(","),
        template.idle.as_secs()
    );
    println!(
        "setup: N instances in one process (tokio, 2 workers), one redis-server per N, {} u64 \
         keys at 1% (same seed), RedisSync defaults; joining {} at a time (limit {:?}), then \
         until all fresh (limit {:?}) and 1 s, then {:?} idle; {} cores",
        template.keys,
        template.join_batch,
        template.join_limit,
        template.settle_limit,
        template.idle,
        std::thread::available_parallelism().map_or(1, |n| n.get()),
    );
    println!();
    println!("{}", idle_fleet::Report::header());
    let mut details = Vec::new();
    for n in sizes {
        let Some(server) = redis_server::start() else {
            return;
        };
        let options = idle_fleet::Options {
            instances: n,
            ..template.clone()
        };
        let report = rt.block_on(idle_fleet::run(&server.url(), server.pid(), &options));
        println!("{}", report.row());
        details.push(report.details());
    }
    println!();
    for line in details {
        println!("{line}");
    }
}
