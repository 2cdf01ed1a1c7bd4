#![doc = include_str!("../README.md")]
#![forbid(unsafe_code)]

mod config;
mod error;
mod protocol;
mod scripts;
mod stats;
mod sync;

pub use config::{RedisSyncBuilder, StalePolicy};
pub use error::Error;
pub use stats::{Rebuilt, ReconcileReport, RedisStats};
pub use sync::RedisSync;

/// Metrics emitted through the [`metrics`](https://docs.rs/metrics) facade, labelled
/// `prefix` (the key prefix).
pub mod names {
    /// Gauge: 1 while the last exchange with Redis succeeded, 0 while it is unreachable.
    pub const CONNECTED: &str = "bloom_redis_connected";
    /// Gauge: the generation this instance serves.
    pub const GENERATION: &str = "bloom_redis_generation";
    /// Counter: reconciliations, labelled `outcome` = `ok` / `error`.
    pub const RECONCILES: &str = "bloom_redis_reconciles_total";
    /// Gauge: 1 while this instance's view may be missing other instances' inserts (see
    /// [`StalePolicy`](crate::StalePolicy)), 0 while it is fresh.
    pub const STALE: &str = "bloom_redis_stale";
    /// Counter: would-be rejections let through because the view was stale.
    pub const STALE_LET_THROUGH: &str = "bloom_redis_stale_let_through_total";
    /// Counter: would-be rejections kept while stale (`ServeLocal`, or over the budget).
    pub const STALE_REJECTED: &str = "bloom_redis_stale_rejected_total";
    /// Counter: [`RedisSync::propagated`](crate::RedisSync::propagated) calls that timed out.
    pub const NOT_PROPAGATED: &str = "bloom_redis_not_propagated_total";
    /// Gauge: instances whose heartbeats this one waits for (itself included).
    pub const INSTANCES: &str = "bloom_redis_instances";
}
