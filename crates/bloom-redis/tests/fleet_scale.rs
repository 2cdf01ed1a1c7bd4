//! A fleet of hundreds: 300 idle instances in this one process share one small filter through
//! one `redis-server`, with the library's default settings. Once all have joined and are
//! fresh, 60 s idle must cost each instance the same as in a fleet of three: no stale period
//! anywhere, at most 128 KiB per minute into and out of Redis per instance, at most 0.3 % of a
//! core per instance in this process, and at most 10 % of a core in redis-server.
//!
//! The measuring is `common/idle_fleet.rs`, shared with `benches/fleet_idle.rs` (which prints
//! the same figures for N = 3, 30, 300). The figures are printed before anything is asserted:
//! `cargo test --release -p bloomguard-redis --test fleet_scale -- --nocapture`.

mod common;
#[path = "common/idle_fleet.rs"]
mod idle_fleet;

use std::time::Duration;

const N: usize = 300;
const KIB: f64 = 1024.0;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_hundred_idle_instances_stay_fresh_at_a_flat_cost() {
    let Some(server) = common::start() else {
        return;
    };
    let mut options = idle_fleet::Options::new(N);
    options.idle = Duration::from_secs(60);
    options.prefix = "fleet-scale".to_owned();
    let report = idle_fleet::run(&server.url(), server.pid(), &options).await;
    println!(
        "\n{N} idle instances, one process (tokio, 2 workers), one redis-server, {} keys at 1%, \
         library defaults:\n\n{}\n{}\n\n{}\n",
        options.keys,
        idle_fleet::Report::header(),
        report.row(),
        report.details()
    );

    // Every bound checked, every miss reported at once.
    let mut misses = Vec::new();
    if report.joined != N {
        misses.push(format!("{} of {N} instances joined", report.joined));
    }
    if report.settled.is_none() {
        misses.push(format!(
            "{} instances were not fresh {:?} after the last join",
            report.not_fresh_at_start, options.settle_limit
        ));
    }
    if report.stale_periods != 0 {
        misses.push(format!(
            "{} stale periods during {:.1} s idle, summed over the instances (must be 0)",
            report.stale_periods,
            report.window.as_secs_f64()
        ));
    }
    if report.not_fresh_at_end != 0 {
        misses.push(format!(
            "{} instances not fresh at the end of the idle window",
            report.not_fresh_at_end
        ));
    }
    if report.into_redis_per_minute > 128.0 * KIB {
        misses.push(format!(
            "into Redis: {} per instance per minute (at most 128 KiB)",
            idle_fleet::human(report.into_redis_per_minute)
        ));
    }
    if report.out_of_redis_per_minute > 128.0 * KIB {
        misses.push(format!(
            "out of Redis: {} per instance per minute (at most 128 KiB)",
            idle_fleet::human(report.out_of_redis_per_minute)
        ));
    }
    if report.cpu_per_instance > 0.3 {
        misses.push(format!(
            "this process: {:.3} % of a core per instance (at most 0.3 %)",
            report.cpu_per_instance
        ));
    }
    if report.redis_cpu > 10.0 {
        misses.push(format!(
            "redis-server: {:.1} % of a core (at most 10 %)",
            report.redis_cpu
        ));
    }
    assert!(
        misses.is_empty(),
        "{N} idle instances, {} bound(s) missed:\n{}",
        misses.len(),
        misses.join("\n")
    );
}
