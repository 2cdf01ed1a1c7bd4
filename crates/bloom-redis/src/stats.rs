//! What [`RedisSync`](crate::RedisSync) reports: rebuild outcomes, reconciliation passes,
//! connection and freshness state.

use std::time::Duration;

/// What [`RedisSync::rebuild`](crate::RedisSync::rebuild) did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Rebuilt {
    /// This instance held the lock, read the source and published a new generation.
    Rebuilt {
        /// Keys read from the source.
        keys: u64,
        /// The new generation.
        generation: u64,
    },
    /// Another instance holds the rebuild lock: this one did not read its source; it will
    /// switch to the other's generation when that is published.
    Skipped,
}

/// One reconciliation pass.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReconcileReport {
    /// How long it took.
    pub elapsed: Duration,
    /// Whether it was a full pass: every segment's digest compared (at joining, after a
    /// reconnection or a Redis restart, and every
    /// [`full_pass_every`](crate::RedisSyncBuilder::full_pass_every)); otherwise only the
    /// segments whose versions moved, and those this instance dirtied, were looked at.
    pub full: bool,
    /// Bytes of segments read from Redis (those that moved, or differed).
    pub bytes_pulled: u64,
    /// Segments read.
    pub segments_pulled: u64,
    /// Bytes written to Redis (only segments where this instance had bits Redis lacked).
    pub bytes_pushed: u64,
    /// Segments written.
    pub segments_pushed: u64,
}

/// Connection state and counters; see [`RedisSync::stats`](crate::RedisSync::stats).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RedisStats {
    /// Whether the last exchange with Redis succeeded. While `false` the local filter
    /// keeps answering and accepting inserts; they are pushed on reconnection.
    pub connected: bool,
    /// The generation this instance serves.
    pub generation: u64,
    /// The generation being rebuilt (by any instance) that this instance double-writes.
    pub building: Option<u64>,
    /// Successful reconciliations.
    pub reconciles: u64,
    /// Failed reconciliations (Redis unreachable).
    pub reconcile_errors: u64,
    /// The last successful reconciliation.
    pub last_reconcile: Option<ReconcileReport>,
    /// The pass that joined (a full pass): what joining downloaded and uploaded — little for
    /// an instance started from a recent snapshot of the filter, everything for an empty one.
    pub joined: Option<ReconcileReport>,
    /// Insert batches written to Redis and published.
    pub published: u64,
    /// Insert batches that could not be written (they are pushed by reconciliation).
    pub publish_errors: u64,
    /// Insert batches received from other instances.
    pub received: u64,
    /// Generation switches.
    pub switches: u64,
    /// Rebuilds this instance ran.
    pub rebuilds: u64,
    /// New generations refused because they were too small
    /// ([`Error::Shrunk`](crate::Error::Shrunk)): a rebuild of this instance not switched in,
    /// or a generation another instance (or any Redis client) published, switched to only
    /// with every serving key carried over.
    pub refused_switches: u64,
    /// Rebuilds started because Redis held clearly fewer keys than the source
    /// ([`RedisSync::refill_if_lost`](crate::RedisSync::refill_if_lost)).
    pub refills: u64,
    /// Whether this instance's view is fresh: its last mark round came back (which proves its
    /// own publishing and subscription work) and found every instance's mark within
    /// `stale_after`, and it has pulled everything those instances could not publish. While `false`,
    /// the [`StalePolicy`](crate::StalePolicy) decides what a would-be rejection does.
    pub fresh: bool,
    /// How long the view has been stale, while it is.
    pub stale_for: Option<Duration>,
    /// Why the view is stale, while it is (for example "no mark from instance 1f2e… for
    /// 1200 ms").
    pub stale_reason: Option<String>,
    /// Times the view went stale, as seen by a check every heartbeat (a stale period shorter
    /// than one heartbeat may go uncounted; its let-throughs are counted all the same). The
    /// moments of joining, until this instance's first mark round comes back, count: the
    /// view is not fresh then, and the policy applies (the log calls it stale only if it
    /// lasts `stale_after`).
    pub stale_periods: u64,
    /// Would-be rejections let through because the view was stale.
    pub stale_let_through: u64,
    /// Would-be rejections kept while stale (`ServeLocal`, or beyond the budget).
    pub stale_rejected: u64,
    /// Instances whose marks this one's view was last judged on, itself included: the marks in
    /// Redis at its last mark round (the fleet's size as Redis counts it).
    pub instances: usize,
    /// Mark rounds of this instance that came back (one every `heartbeat` when idle, and one
    /// after every publish): its idle cost is one script call and one ping each.
    pub mark_rounds: u64,
    /// Times this instance read the whole roster: at every (re)subscription, and when a
    /// change of it was missed. The roster is read whole only then, so this stays small.
    pub roster_reads: u64,
    /// [`RedisSync::propagated`](crate::RedisSync::propagated) calls that timed out.
    pub not_propagated: u64,
    /// Whether this instance holds the fleet's follow lease: it is the one reading the
    /// source's changes ([`RedisSync::follow`](crate::RedisSync::follow)).
    pub following: bool,
    /// How far the fleet's follower is behind the source, as this instance's last mark round
    /// read it: Redis's clock then minus the follower's covered time (every row committed
    /// before it is in Redis). Every instance reports it, holder or not, so a dead or stuck
    /// holder shows as a growing lag everywhere; views are fresh only while it is within the
    /// follow bound (the step interval plus `stale_after`). `None` until a round found a
    /// follower; once the holder's record expired (`followed` is then `false`) it goes on
    /// growing from the last covered time read. The metric `bloom_redis_follow_lag_seconds`.
    pub follow_lag: Option<Duration>,
    /// Whether this instance's last mark round found a follower's covered time in Redis: the
    /// fleet follows a source.
    pub followed: bool,
    /// Confirming pings sent: what would-be rejections cost Redis beyond the mark rounds
    /// (one `PUBLISH` each, an `EVALSHA` on a cluster; see `RedisSyncBuilder::confirm_timeout`).
    pub confirm_rounds: u64,
    /// Would-be rejections confirmed: a ping sent after each came back and the view was
    /// fresh, so the local filter's answer stood.
    pub confirmed: u64,
    /// Would-be rejections that waited and could not be confirmed (the ping did not come
    /// back within `confirm_timeout`, or the view went stale meanwhile): the stale policy
    /// decided.
    pub unconfirmed: u64,
}
