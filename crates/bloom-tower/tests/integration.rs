//! bloom-tower's integration tests that share nothing global, in one binary: each file
//! below is a module of it, so the crate and its dependencies' generic code are compiled
//! and linked once for all of them instead of once per file. The files stay where they
//! are and keep their own support modules (`mod common;` inside a module loaded by path
//! resolves next to the file, as in a binary of its own).
//!
//! A file that installs something for the whole process (a global `tracing` subscriber or
//! `metrics` recorder, a global allocator, a re-run of its own executable, or a measure of
//! the process) is a binary of its own, declared in `Cargo.toml`: `ambiguous_keys`,
//! `change_log_notices`, `empty_filter_warning`, `filter_set_kill`, `filter_set_memory`, `guard`,
//! `metrics`, `snapshot`, `typed_keys`.
//!
//! Run one file's tests with a filter on its module: `cargo test --release -p <crate> --test
//! integration fleet::`.
#![forbid(unsafe_code)]
// Each file includes its own copy of the shared support modules (their statics stay per file).
#![allow(clippy::duplicate_mod)]

#[path = "admin.rs"]
mod admin;
#[path = "axum_server.rs"]
mod axum_server;
#[path = "change_log.rs"]
mod change_log;
#[path = "change_log_names.rs"]
mod change_log_names;
#[path = "confirmation.rs"]
mod confirmation;
#[path = "cuckoo.rs"]
mod cuckoo;
#[path = "external_rebuild.rs"]
mod external_rebuild;
#[path = "filter_set.rs"]
mod filter_set;
#[path = "filter_set_long_names.rs"]
mod filter_set_long_names;
#[path = "filter_set_sqlite.rs"]
mod filter_set_sqlite;
#[path = "guarded_cache.rs"]
mod guarded_cache;
#[path = "merge_snapshot.rs"]
mod merge_snapshot;
#[path = "rebuild.rs"]
mod rebuild;
#[path = "rejection_header.rs"]
mod rejection_header;
#[path = "remote_invalidation.rs"]
mod remote_invalidation;
#[path = "response_cache.rs"]
mod response_cache;
#[path = "variants.rs"]
mod variants;
#[path = "warm_start.rs"]
mod warm_start;
