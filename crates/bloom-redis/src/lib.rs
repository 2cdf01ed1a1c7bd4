#![doc = include_str!("../README.md")]
#![forbid(unsafe_code)]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod config;
mod conn;
mod error;
mod filter_store;
mod protocol;
mod scripts;
mod stats;
mod sync;

pub use config::{RedisSyncBuilder, StalePolicy};
pub use error::Error;
pub use filter_store::RedisFilterStore;
pub use stats::{Rebuilt, ReconcileReport, RedisStats};
pub use sync::{RedisSync, Visible};

/// Metrics emitted through the [`metrics`](https://docs.rs/metrics) facade, labelled
/// `prefix` (the key prefix). Only with the `metrics` feature (on by default); without it
/// [`RedisSync::stats`] reports the same state.
///
/// ```
/// // Assert on, or alert on, the series by name.
/// assert_eq!(bloom_redis::names::STALE, "bloom_redis_stale");
/// ```
#[cfg(feature = "metrics")]
#[cfg_attr(docsrs, doc(cfg(feature = "metrics")))]
pub mod names {
    /// Gauge: 1 while the last exchange with Redis succeeded, 0 while it is unreachable.
    pub const CONNECTED: &str = "bloom_redis_connected";
    /// Gauge: the generation this instance serves.
    pub const GENERATION: &str = "bloom_redis_generation";
    /// Counter: reconciliations, labelled `outcome` = `ok` / `error`.
    pub const RECONCILES: &str = "bloom_redis_reconciles_total";
    /// Counter: bytes of segments reconciliation moved, labelled `direction` = `pulled` /
    /// `pushed` and `pass` = `incremental` / `full`: what the synchronisation costs Redis
    /// beyond the inserts themselves.
    pub const RECONCILE_BYTES: &str = "bloom_redis_reconcile_bytes_total";
    /// Gauge: 1 while this instance's view may be missing other instances' inserts (see
    /// [`StalePolicy`](crate::StalePolicy)), 0 while it is fresh. Also 1 for the moments
    /// of a join, until the instance's first mark round comes back: the policy applies
    /// then too (alert on it lasting, not on it being set).
    pub const STALE: &str = "bloom_redis_stale";
    /// Counter: would-be rejections let through because the view was stale.
    pub const STALE_LET_THROUGH: &str = "bloom_redis_stale_let_through_total";
    /// Counter: would-be rejections kept while stale (`ServeLocal`, or over the budget).
    pub const STALE_REJECTED: &str = "bloom_redis_stale_rejected_total";
    /// Counter: times this instance's view became stale (`RedisStats::stale_periods`; the
    /// moments of joining count, as [`STALE`] is 1 then).
    pub const STALE_PERIODS: &str = "bloom_redis_stale_periods_total";
    /// Counter: would-be rejections confirmed: a ping sent after each came back and the view
    /// was fresh, so the local filter's answer stood (`RedisStats::confirmed`).
    pub const CONFIRMED_REJECTIONS: &str = "bloom_redis_confirmed_rejections_total";
    /// Counter: would-be rejections that could not be confirmed within `confirm_timeout`
    /// (or the view went stale meanwhile) and went to the [`StalePolicy`](crate::StalePolicy)
    /// (`RedisStats::unconfirmed`).
    pub const UNCONFIRMED_REJECTIONS: &str = "bloom_redis_unconfirmed_rejections_total";
    /// Counter: new generations that would have dropped keys (fewer than
    /// `min_rebuild_fraction` of the serving one's): one published in Redis, switched to
    /// with every serving key carried over, or a rebuild of this instance not switched in
    /// ([`Error::Shrunk`](crate::Error::Shrunk)); `RedisStats::refused_switches`. A forged or
    /// mis-sized rebuild.
    pub const REFUSED_SWITCHES: &str = "bloom_redis_refused_switches_total";
    /// Counter: [`RedisSync::propagated`](crate::RedisSync::propagated) calls that timed out.
    pub const NOT_PROPAGATED: &str = "bloom_redis_not_propagated_total";
    /// Gauge: instances whose marks this one's view was last judged on (itself included).
    pub const INSTANCES: &str = "bloom_redis_instances";
    /// Histogram: seconds from an insert being queued until its batch is in Redis and
    /// published; one sample per published batch, from its oldest insert.
    pub const PUBLISH_LATENCY: &str = "bloom_redis_publish_latency_seconds";
    /// Gauge: how far the fleet's follower ([`RedisSync::follow`](crate::RedisSync::follow))
    /// is behind the source, as this instance's last mark round read it: Redis's clock then
    /// minus the follower's covered time (every row committed before it is in Redis). Set by
    /// every instance, lease holder or not, from the first round that finds a follower; so a
    /// dead or stuck holder shows as a lag growing on all of them. Views are fresh only while
    /// it is within [`FOLLOW_BOUND`]. When the holder's record expires (`member_timeout`
    /// after its last renewal, [`FOLLOWER`] then 0), it goes on growing from the last covered
    /// time this instance read, until a holder stores a new one.
    pub const FOLLOW_LAG: &str = "bloom_redis_follow_lag_seconds";
    /// Gauge: the follow bound the last mark round read with the covered time (the step
    /// interval plus `stale_after`): a lag above it makes every view stale. 0 while Redis
    /// holds no follower's record.
    pub const FOLLOW_BOUND: &str = "bloom_redis_follow_bound_seconds";
    /// Gauge: 1 while the last mark round found a follower's covered time in Redis (the fleet
    /// follows a source), else 0.
    pub const FOLLOWER: &str = "bloom_redis_follower";

    /// Describes every metric above (`# HELP` text and [`metrics::Unit`]) to the installed
    /// recorder. Done once per process, automatically, when the first
    /// [`RedisSync`](crate::RedisSync) connects; call it yourself only if the recorder was
    /// installed after that.
    ///
    /// ```
    /// // After installing a recorder (for example metrics-exporter-prometheus's):
    /// bloom_redis::names::describe();
    /// ```
    pub fn describe() {
        use metrics::{Unit, describe_counter, describe_gauge, describe_histogram};

        describe_gauge!(
            CONNECTED,
            "1 while the last exchange with Redis succeeded, 0 while it is unreachable."
        );
        describe_gauge!(
            GENERATION,
            "The shared filter generation this instance serves."
        );
        describe_counter!(
            RECONCILES,
            Unit::Count,
            "Reconciliations of the local filter with Redis, by outcome (ok, error)."
        );
        describe_counter!(
            RECONCILE_BYTES,
            Unit::Bytes,
            "Bytes of segments reconciliation pulled from or pushed to Redis, by direction and pass (incremental, full)."
        );
        describe_gauge!(
            STALE,
            "1 while this instance's view may be missing other instances' inserts, 0 while it is fresh."
        );
        describe_counter!(
            STALE_LET_THROUGH,
            Unit::Count,
            "Would-be rejections let through because this instance's view was stale."
        );
        describe_counter!(
            STALE_REJECTED,
            Unit::Count,
            "Would-be rejections kept while stale (ServeLocal policy, or over the let-through budget)."
        );
        describe_counter!(
            STALE_PERIODS,
            Unit::Count,
            "Times this instance's view of the shared filter became stale (joining included)."
        );
        describe_counter!(
            CONFIRMED_REJECTIONS,
            Unit::Count,
            "Would-be rejections confirmed by a fresh ping: the local filter's answer stood."
        );
        describe_counter!(
            UNCONFIRMED_REJECTIONS,
            Unit::Count,
            "Would-be rejections not confirmed within confirm_timeout (or the view went stale): the stale policy decided."
        );
        describe_counter!(
            REFUSED_SWITCHES,
            Unit::Count,
            "New generations that would have dropped keys: one from Redis switched to with every serving key carried over, or a rebuild of this instance refused."
        );
        describe_counter!(
            NOT_PROPAGATED,
            Unit::Count,
            "RedisSync::propagated calls that timed out before this instance's inserts were published."
        );
        describe_gauge!(
            INSTANCES,
            Unit::Count,
            "Instances whose marks this view was last judged on, itself included."
        );
        describe_histogram!(
            PUBLISH_LATENCY,
            Unit::Seconds,
            "Seconds from an insert being queued until its batch was written to Redis and published (per batch, from its oldest insert)."
        );
        describe_gauge!(
            FOLLOW_LAG,
            Unit::Seconds,
            "How far the fleet's follower is behind the source, as this instance last read it: Redis's clock minus the follower's covered time."
        );
        describe_gauge!(
            FOLLOW_BOUND,
            Unit::Seconds,
            "The follow bound read with the follower's covered time: a follower lag above it makes every view stale (0 without a follower)."
        );
        describe_gauge!(
            FOLLOWER,
            "1 while this instance's last mark round found a follower's covered time in Redis, else 0."
        );
    }

    /// [`describe`], once per process.
    pub(crate) fn describe_once() {
        static ONCE: std::sync::Once = std::sync::Once::new();
        ONCE.call_once(describe);
    }
}
