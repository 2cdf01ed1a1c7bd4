//! bloom-redis's integration tests that share nothing global, in one binary: each file
//! below is a module of it, so the crate and its dependencies' generic code are compiled
//! and linked once for all of them instead of once per file. The files stay where they
//! are and keep their own support modules (`mod common;` inside a module loaded by path
//! resolves next to the file, as in a binary of its own).
//!
//! A file that installs something for the whole process (a global `tracing` subscriber or
//! `metrics` recorder), reads what the process does once (the metrics' descriptions, given at
//! its first connect), or runs a fleet whose timing other tests in the process would disturb,
//! is a binary of its own, declared in `Cargo.toml`: `classic_padding`, `exported_counters`,
//! `fleet_scale`, `logs`, `metrics`.
//!
//! Run one file's tests with a filter on its module: `cargo test --release -p <crate> --test
//! integration fleet::`.
#![forbid(unsafe_code)]
// Each file includes its own copy of the shared support modules (their statics stay per file).
#![allow(clippy::duplicate_mod)]

#[path = "approx_items.rs"]
mod approx_items;
#[path = "cluster.rs"]
mod cluster;
#[path = "confirm.rs"]
mod confirm;
#[path = "faults.rs"]
mod faults;
#[path = "filter_store.rs"]
mod filter_store;
#[path = "fleet.rs"]
mod fleet;
#[path = "follow_lag.rs"]
mod follow_lag;
#[path = "incremental.rs"]
mod incremental;
#[path = "join.rs"]
mod join;
#[path = "sync.rs"]
mod sync;
#[path = "warm_start.rs"]
mod warm_start;
