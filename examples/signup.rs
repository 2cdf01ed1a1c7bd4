//! `POST /signup {username, password}` that refuses the 100,000 most common passwords.
//!
//! A Bloom filter of the list clears almost every acceptable password without touching the
//! list; only its "maybe" answers are confirmed against the exact table (see
//! `bloom_examples::passwords`). At startup it prints the sizes and what a realistic mix of
//! signups costs, then serves on `127.0.0.1:3000` (`BIND=host:port` to change) until Ctrl-C or
//! SIGTERM.
//!
//! ```sh
//! cargo run --release --example signup               # figures, then serve
//! cargo run --release --example signup -- --no-serve # figures only
//! ```
#![forbid(unsafe_code)]

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Instant;

use bloom_examples::passwords::{self, COMMON_PASSWORDS, PasswordScreen};
use bloom_examples::serve;

/// Fixed hash key and random seed of the printed mix figures, so they are reproducible.
const MIX_SEED: u64 = 42;
const SIGNUPS: usize = 10_000;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let started = Instant::now();
    let screen = Arc::new(PasswordScreen::new()?);
    let filter = screen.filter();
    println!(
        "screen built in {:.0?}: {} lines, {} distinct ignoring case",
        started.elapsed(),
        COMMON_PASSWORDS.lines().count(),
        screen.len()
    );
    println!(
        "Bloom filter ({}, p = {}): {} bytes ({:.1} bits per entry, k = {})",
        filter.layout(),
        passwords::FALSE_POSITIVE_RATE,
        filter.size_in_bytes(),
        filter.num_bits() as f64 / screen.len() as f64,
        filter.num_hashes()
    );
    println!(
        "the list file:             {} bytes",
        COMMON_PASSWORDS.len()
    );
    println!(
        "exact table (sorted index): {} bytes (folded text + 4-byte offsets)",
        screen.exact_table_bytes()
    );
    // For comparison: a HashSet of the same entries, borrowing the text (so add the text).
    let folded = COMMON_PASSWORDS.to_lowercase();
    let set: HashSet<&str> = folded.lines().collect();
    let buckets = (set.capacity() * 8 / 7).next_power_of_two();
    println!(
        "a HashSet<&str> instead:   {} bytes of table ({} buckets of 16 + 1 bytes) + the text",
        buckets * (size_of::<&str>() + 1),
        buckets
    );

    let mix_screen = PasswordScreen::with_seed(u128::from(MIX_SEED))?;
    println!("\n{SIGNUPS} signups, a fixed seed; listed passwords drawn uniformly from the list:");
    println!("| listed | needed the exact check | refused | filter false positives |");
    println!("| ---: | ---: | ---: | ---: |");
    for listed_percent in [0, 5, 10, 20, 50] {
        let report = passwords::simulate_mix(&mix_screen, SIGNUPS, listed_percent, MIX_SEED);
        println!(
            "| {listed_percent} % | {} ({:.2} %) | {} | {} |",
            report.exact_checks,
            100.0 * report.exact_share(),
            report.rejected,
            report.exact_checks - report.rejected
        );
    }

    if std::env::args().any(|arg| arg == "--no-serve") {
        return Ok(());
    }
    let bind = std::env::var("BIND").unwrap_or_else(|_| "127.0.0.1:3000".into());
    let listener = tokio::net::TcpListener::bind(&bind).await?;
    let addr = listener.local_addr()?;
    // Installed before it says it listens: a signal from then on stops it gracefully.
    let signal = serve::shutdown_signal()?;
    println!("\nlistening on http://{addr}; try:");
    for password in ["Password", "correct horse battery staple"] {
        println!(
            "  curl -i -H 'content-type: application/json' \
             -d '{{\"username\":\"ada\",\"password\":\"{password}\"}}' http://{addr}/signup"
        );
    }
    // One SIGINT or SIGTERM stops it within the grace period (`bloom_examples::serve`).
    let stopped = serve::serve(
        listener,
        passwords::router(Arc::clone(&screen)),
        async move {
            let stop = signal.await;
            println!("{stop}: stopping");
        },
        serve::GRACE,
    )
    .await?;
    println!(
        "stopped ({} connections open, {} dropped after the grace period): {:?}",
        stopped.open,
        stopped.dropped,
        screen.stats()
    );
    Ok(())
}
