//! A fleet of hundreds: 300 idle instances in this one process share one small filter through
//! one `redis-server`, with the library's default settings. Every instance joins, every view
//! is fresh soon after the last join, and 30 s idle (120 mark rounds each) hold no stale period anywhere: no view
//! waits on a fleet this size.
//!
//! This test asserts behaviour only. What the idle fleet costs (bytes into and out of Redis,
//! CPU of this process and of redis-server) is measured by `benches/fleet_idle.rs`, which runs
//! the same `common/idle_fleet.rs` for N = 3, 30, 300; its figures are in `benches/README.md`.
//! This test prints them too, for information only:
//! `cargo test --release -p bloomguard-redis --test fleet_scale -- --nocapture`.

mod common;
#[path = "common/idle_fleet.rs"]
mod idle_fleet;

use std::time::Duration;

const N: usize = 300;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_hundred_idle_instances_join_and_stay_fresh() {
    let Some(server) = common::start() else {
        return;
    };
    let mut options = idle_fleet::Options::new(N);
    options.idle = Duration::from_secs(30);
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

    // Every behaviour checked, every miss reported at once.
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
    assert!(
        misses.is_empty(),
        "{N} idle instances, {} check(s) failed:\n{}",
        misses.len(),
        misses.join("\n")
    );
}
