//! Throwaway database servers for the end-to-end tests, one module per server.

pub mod postgres;
/// Workspace examples run as real processes: built, started, signalled, reaped.
pub mod process;
/// Throwaway `redis-server`s: the helper bloom-redis's own tests use.
#[path = "../../crates/bloom-redis/tests/common/mod.rs"]
pub mod redis;
