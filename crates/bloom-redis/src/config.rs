//! [`RedisSyncBuilder`]: every setting of a [`RedisSync`], and [`StalePolicy`].

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use bloom_tower::SharedFilter;

use crate::{Error, RedisSync};

/// What a would-be rejection does while this instance's view is stale (it has not heard
/// from every instance within `stale_after`, so it may be missing inserts made elsewhere).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum StalePolicy {
    /// Let it through: the cache and the database answer. No real user is turned away; the
    /// database sees the would-be rejections for as long as the view is stale. The default.
    #[default]
    LetThrough,
    /// Reject from the local filter, as when fresh: it still holds every key this instance
    /// inserted or received; keys created elsewhere meanwhile are answered "absent".
    ServeLocal,
    /// Let through at most `per_second` would-be rejections each second and reject the rest:
    /// real users are let through up to the budget, and a flood of absent keys during a long
    /// outage cannot push more than that to the database.
    LetThroughUpTo {
        /// Would-be rejections let through per second.
        per_second: u32,
    },
}

/// Configures a [`RedisSync`]; from [`RedisSync::builder`].
#[derive(Clone)]
#[must_use]
pub struct RedisSyncBuilder {
    pub(crate) url: Arc<str>,
    pub(crate) prefix: Option<String>,
    pub(crate) reconcile_every: Duration,
    pub(crate) full_pass_every: Duration,
    pub(crate) cluster: bool,
    pub(crate) pubsub: bool,
    pub(crate) segment_bytes: u64,
    pub(crate) lock_ttl: Duration,
    pub(crate) ack_timeout: Duration,
    pub(crate) response_timeout: Duration,
    pub(crate) join_timeout: Duration,
    pub(crate) heartbeat: Duration,
    pub(crate) stale_after: Duration,
    pub(crate) member_timeout: Duration,
    pub(crate) on_stale: StalePolicy,
    pub(crate) publish_timeout: Option<Duration>,
    pub(crate) confirm_timeout: Duration,
    pub(crate) visible_timeout: Duration,
    pub(crate) min_rebuild_fraction: f64,
    pub(crate) refill_below: f64,
    pub(crate) warm_start: bool,
}

impl fmt::Debug for RedisSyncBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The URL may hold a password: not printed.
        f.debug_struct("RedisSyncBuilder")
            .field("prefix", &self.prefix)
            .field("reconcile_every", &self.reconcile_every)
            .field("full_pass_every", &self.full_pass_every)
            .field("cluster", &self.cluster)
            .field("pubsub", &self.pubsub)
            .field("segment_bytes", &self.segment_bytes)
            .field("lock_ttl", &self.lock_ttl)
            .field("join_timeout", &self.join_timeout)
            .field("heartbeat", &self.heartbeat)
            .field("stale_after", &self.stale_after)
            .field("on_stale", &self.on_stale)
            .field("confirm_timeout", &self.confirm_timeout)
            .field("visible_timeout", &self.visible_timeout)
            .field("warm_start", &self.warm_start)
            .finish_non_exhaustive()
    }
}

/// Redis's limit on one string value.
const MAX_SEGMENT: u64 = 512 << 20;

impl RedisSyncBuilder {
    pub(crate) fn new(url: &str) -> Self {
        Self {
            url: url.into(),
            prefix: None,
            reconcile_every: Duration::from_secs(10),
            full_pass_every: Duration::from_secs(3600),
            cluster: false,
            pubsub: true,
            segment_bytes: 64 << 10,
            lock_ttl: Duration::from_secs(30),
            ack_timeout: Duration::from_secs(2),
            response_timeout: Duration::from_secs(2),
            join_timeout: Duration::from_secs(60),
            heartbeat: Duration::from_millis(250),
            stale_after: Duration::from_secs(1),
            member_timeout: Duration::from_secs(30),
            on_stale: StalePolicy::LetThrough,
            publish_timeout: None,
            confirm_timeout: Duration::from_millis(50),
            visible_timeout: Duration::from_secs(5),
            min_rebuild_fraction: 0.5,
            refill_below: 0.9,
            warm_start: false,
        }
    }

    /// How often an idle instance runs a mark round (default 250 ms; also after every
    /// published batch): it renews its mark, the time before which every insert it made was
    /// published, and reads the oldest mark in the fleet (see `sync::freshness`). Keep it
    /// well under [`stale_after`](Self::stale_after) (a quarter of it, by default): a view
    /// stays fresh only while every mark is younger than that. A round costs the same
    /// whatever the fleet's size.
    ///
    /// ```
    /// # use std::time::Duration;
    /// use bloom_redis::RedisSync;
    ///
    /// let builder = RedisSync::builder("redis://127.0.0.1/").heartbeat(Duration::from_millis(50));
    /// # let _ = builder;
    /// ```
    pub fn heartbeat(mut self, interval: Duration) -> Self {
        self.heartbeat = interval;
        self
    }

    /// How old the oldest mark in the fleet (this instance's included) may be before this
    /// instance's view counts as stale (default 1 s): the bound on how long a key created
    /// elsewhere can be answered "absent" here while pub/sub is stalled.
    ///
    /// ```
    /// # use std::time::Duration;
    /// use bloom_redis::RedisSync;
    ///
    /// let builder = RedisSync::builder("redis://127.0.0.1/").heartbeat(Duration::from_millis(50))
    ///     .stale_after(Duration::from_millis(400));
    /// # let _ = builder;
    /// ```
    pub fn stale_after(mut self, bound: Duration) -> Self {
        self.stale_after = bound;
        self
    }

    /// How long an instance that stopped marking without saying goodbye (killed, or cut off
    /// from Redis) is waited for before it is presumed gone (default 30 s): the first mark
    /// round that finds its mark that old removes it from the roster. Keys it
    /// created while cut off are answered "absent" by the others after that, until it
    /// reconnects (its reconciliation pushes them) or the next rebuild.
    ///
    /// ```
    /// # use std::time::Duration;
    /// use bloom_redis::RedisSync;
    ///
    /// let builder = RedisSync::builder("redis://127.0.0.1/").member_timeout(Duration::from_secs(60));
    /// # let _ = builder;
    /// ```
    pub fn member_timeout(mut self, timeout: Duration) -> Self {
        self.member_timeout = timeout;
        self
    }

    /// What a would-be rejection does while the view is stale (default
    /// [`StalePolicy::LetThrough`]).
    ///
    /// ```
    /// use bloom_redis::{RedisSync, StalePolicy};
    ///
    /// // At most 100 would-be rejections a second reach the database while stale.
    /// let builder = RedisSync::builder("redis://127.0.0.1/")
    ///     .on_stale(StalePolicy::LetThroughUpTo { per_second: 100 });
    /// # let _ = builder;
    /// ```
    pub fn on_stale(mut self, policy: StalePolicy) -> Self {
        self.on_stale = policy;
        self
    }

    /// How long [`RedisSync::propagated`] waits for this instance's inserts to be in Redis and
    /// published (default `stale_after` plus two heartbeats: when it gives up, instances that
    /// share the fault have already gone stale).
    ///
    /// ```
    /// # use std::time::Duration;
    /// use bloom_redis::RedisSync;
    ///
    /// let builder = RedisSync::builder("redis://127.0.0.1/").publish_timeout(Duration::from_millis(500));
    /// # let _ = builder;
    /// ```
    pub fn publish_timeout(mut self, timeout: Duration) -> Self {
        self.publish_timeout = Some(timeout);
        self
    }

    /// How long a would-be rejection waits for its confirmation (default 50 ms): a ping of
    /// this instance, sent after the rejection began, back on its subscription (R1 in
    /// `docs/REDIS-SYNC.md`; usually one round trip). Past it the stale policy decides, and the
    /// view is stale until a ping comes back, so later rejections do not wait. Hits never
    /// wait; concurrent rejections share one ping, one per millisecond on average.
    ///
    /// ```
    /// # use std::time::Duration;
    /// use bloom_redis::RedisSync;
    ///
    /// let builder = RedisSync::builder("redis://127.0.0.1/").confirm_timeout(Duration::from_millis(20));
    /// # let _ = builder;
    /// ```
    pub fn confirm_timeout(mut self, timeout: Duration) -> Self {
        self.confirm_timeout = timeout;
        self
    }

    /// The longest [`RedisSync::visible`](crate::RedisSync::visible) waits (default 5 s), so
    /// that an acknowledgement is never held for longer whatever the follow interval. When
    /// Redis does not answer, `visible` waits for the follow bound (the follow interval plus
    /// [`stale_after`](Self::stale_after)); a bound above this timeout returns
    /// [`Error::NotVisible`] after it instead, and the create
    /// acknowledged then is let through by the other instances only within the follow bound
    /// of its commit (case B of the guarantee).
    ///
    /// ```
    /// # use std::time::Duration;
    /// use bloom_redis::RedisSync;
    ///
    /// let builder = RedisSync::builder("redis://127.0.0.1/").visible_timeout(Duration::from_secs(2));
    /// # let _ = builder;
    /// ```
    pub fn visible_timeout(mut self, timeout: Duration) -> Self {
        self.visible_timeout = timeout;
        self
    }

    /// A rebuild whose new generation holds fewer than this fraction of the serving one's
    /// estimated keys is not switched in (default 0.5; 0 turns the check off): see
    /// [`Error::Shrunk`]. A generation another instance published is held to it too: one
    /// that fails it is switched to only with this instance's serving keys carried over.
    ///
    /// ```
    /// # use std::time::Duration;
    /// use bloom_redis::RedisSync;
    ///
    /// let builder = RedisSync::builder("redis://127.0.0.1/").min_rebuild_fraction(0.8);
    /// # let _ = builder;
    /// ```
    pub fn min_rebuild_fraction(mut self, fraction: f64) -> Self {
        self.min_rebuild_fraction = fraction;
        self
    }

    /// [`RedisSync::refill_if_lost`] rebuilds when the shared filter holds fewer than this
    /// fraction of the source's count hint (default 0.9: a filter holds every current key,
    /// and its estimate is within a percent or two).
    ///
    /// ```
    /// # use std::time::Duration;
    /// use bloom_redis::RedisSync;
    ///
    /// let builder = RedisSync::builder("redis://127.0.0.1/").refill_below(0.95);
    /// # let _ = builder;
    /// ```
    pub fn refill_below(mut self, fraction: f64) -> Self {
        self.refill_below = fraction;
        self
    }

    /// Before joining, merge into the filter the bits of its snapshot on disk (default off):
    /// [`connect`](Self::connect) calls
    /// [`SharedFilter::merge_snapshot`] on the path set with
    /// [`SharedFilterBuilder::snapshot`](bloom_tower::shared_filter::SharedFilterBuilder::snapshot).
    /// Joining's full pass then pulls only the segments that changed since the snapshot, and
    /// pushes to Redis the keys the snapshot holds that the fleet lacks.
    ///
    /// A merged snapshot is logged at `info`; no file, at `info`; a snapshot refused (another
    /// name, kind, shape or hash key), a corrupt or unreadable one, or no snapshot path at
    /// `warn`, and the instance joins without it. Keys deleted since the snapshot was saved
    /// come back as false positives, for the whole fleet, until the next rebuild.
    ///
    /// ```no_run
    /// use bloom_redis::RedisSync;
    /// use bloom_tower::{BloomFilter, SharedFilter};
    ///
    /// # async fn example() -> Result<(), Box<dyn std::error::Error>> {
    /// let fleet_shape = BloomFilter::builder()
    ///     .expected_items(1_000_000)
    ///     .false_positive_rate(0.01)
    ///     .seed(0x5eed) // the hash key every instance shares
    ///     .build()?;
    /// let filter = SharedFilter::<u64>::builder()
    ///     .name("users")
    ///     .snapshot("/var/lib/myapp/users.bloom")
    ///     .build(fleet_shape);
    /// let sync = RedisSync::builder("redis://127.0.0.1/")
    ///     .prefix("myapp:users")
    ///     .warm_start(true)
    ///     .connect(&filter)
    ///     .await?;
    /// # let _ = sync;
    /// # Ok(()) }
    /// ```
    pub fn warm_start(mut self, on: bool) -> Self {
        self.warm_start = on;
        self
    }

    pub(crate) fn effective_publish_timeout(&self) -> Duration {
        self.publish_timeout
            .unwrap_or(self.stale_after + self.heartbeat * 2)
    }

    /// Prefix of every Redis key and of the channel; one per shared filter. Defaults to
    /// `bloom-guard:` followed by the filter's [name](SharedFilter::name). `connect` refuses
    /// ([`Error::Config`]) an empty prefix, one with `{` or `}`, and one ending like a segment
    /// group's tag (`:g<number>:<number>`), whose keys would be another fleet's.
    ///
    /// ```
    /// # use std::time::Duration;
    /// use bloom_redis::RedisSync;
    ///
    /// let builder = RedisSync::builder("redis://127.0.0.1/").prefix("myapp:users");
    /// # let _ = builder;
    /// ```
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = Some(prefix.into());
        self
    }

    /// How often to merge in both directions with Redis (default 10 s): the bound on how long
    /// a bit missed by pub/sub (or set during an outage) takes to reach every instance.
    ///
    /// ```
    /// # use std::time::Duration;
    /// use bloom_redis::RedisSync;
    ///
    /// let builder = RedisSync::builder("redis://127.0.0.1/").reconcile_every(Duration::from_secs(60));
    /// # let _ = builder;
    /// ```
    pub fn reconcile_every(mut self, interval: Duration) -> Self {
        self.reconcile_every = interval;
        self
    }

    /// How often a reconciliation is a full pass (default 1 h): Redis hashes every segment and
    /// only those whose digest differs from the local copy's are moved. It is the safety net
    /// under the per-segment versions (a write whose version bump was lost, a local bit that
    /// never reached Redis). A full pass also runs at joining — an instance started from a
    /// recent snapshot downloads only what changed since — and after a reconnection, a
    /// resubscription or a Redis restart. After an eviction (a Redis with a `maxmemory` and an
    /// `allkeys-*` policy) it runs at most six times per `interval`.
    ///
    /// ```
    /// # use std::time::Duration;
    /// use bloom_redis::RedisSync;
    ///
    /// let builder = RedisSync::builder("redis://127.0.0.1/").full_pass_every(Duration::from_secs(600));
    /// # let _ = builder;
    /// ```
    pub fn full_pass_every(mut self, interval: Duration) -> Self {
        self.full_pass_every = interval;
        self
    }

    /// The URL names one node of a Redis Cluster (default off): the other nodes are
    /// discovered, each group of segments lives in its own hash slot (so the filter spreads
    /// over the shards), and every script and pipeline touches one slot. The subscription
    /// goes to the named node (Redis Cluster delivers messages published on any node).
    ///
    /// ```
    /// use bloom_redis::RedisSync;
    ///
    /// let builder = RedisSync::builder("redis://10.0.0.1:7000/").cluster(true);
    /// # let _ = builder;
    /// ```
    pub fn cluster(mut self, on: bool) -> Self {
        self.cluster = on;
        self
    }

    /// Propagate inserts at once through pub/sub (default on). Off, instances converge by
    /// reconciliation alone.
    ///
    /// ```
    /// # use std::time::Duration;
    /// use bloom_redis::RedisSync;
    ///
    /// let builder = RedisSync::builder("redis://127.0.0.1/").pubsub(false)
    ///     .reconcile_every(Duration::from_secs(1));
    /// # let _ = builder;
    /// ```
    pub fn pubsub(mut self, on: bool) -> Self {
        self.pubsub = on;
        self
    }

    /// Bytes of the bit array per Redis key (default 64 KiB; at most 512 MiB, Redis's value
    /// limit; a multiple of 8). A reconciliation moves whole segments, so this is what one
    /// changed bit costs to pull; smaller segments cost more keys and more version entries
    /// (the crate README measures the trade-off).
    ///
    /// ```
    /// # use std::time::Duration;
    /// use bloom_redis::RedisSync;
    ///
    /// let builder = RedisSync::builder("redis://127.0.0.1/").segment_bytes(16 << 20);
    /// # let _ = builder;
    /// ```
    pub fn segment_bytes(mut self, bytes: u64) -> Self {
        self.segment_bytes = bytes;
        self
    }

    /// The rebuild lock's time to live (default 30 s), refreshed at each step of a rebuild.
    ///
    /// ```
    /// # use std::time::Duration;
    /// use bloom_redis::RedisSync;
    ///
    /// let builder = RedisSync::builder("redis://127.0.0.1/").lock_ttl(Duration::from_secs(60));
    /// # let _ = builder;
    /// ```
    pub fn lock_ttl(mut self, ttl: Duration) -> Self {
        self.lock_ttl = ttl;
        self
    }

    /// How long a rebuild waits for every live instance to start double-writing before it
    /// reads its source (default 2 s). Instances that miss it carry their bits over.
    ///
    /// ```
    /// # use std::time::Duration;
    /// use bloom_redis::RedisSync;
    ///
    /// let builder = RedisSync::builder("redis://127.0.0.1/").ack_timeout(Duration::from_secs(5));
    /// # let _ = builder;
    /// ```
    pub fn ack_timeout(mut self, timeout: Duration) -> Self {
        self.ack_timeout = timeout;
        self
    }

    /// Timeout of each Redis command (default 2 s).
    ///
    /// ```
    /// # use std::time::Duration;
    /// use bloom_redis::RedisSync;
    ///
    /// let builder = RedisSync::builder("redis://127.0.0.1/").response_timeout(Duration::from_millis(500));
    /// # let _ = builder;
    /// ```
    pub fn response_timeout(mut self, timeout: Duration) -> Self {
        self.response_timeout = timeout;
        self
    }

    /// How long [`connect`](Self::connect) goes on trying its first pass while Redis answers
    /// later than [`response_timeout`](Self::response_timeout) or drops the connection
    /// (default 60 s). Instances joining at once pull whole filters through one Redis, and a
    /// reply can wait behind theirs; each try keeps what the ones before pulled (a segment
    /// whose digest matches is not pulled again). Any other error (a parameter mismatch, a
    /// refused command, a Redis that cannot be connected to) fails at once
    /// (`tests/join.rs` `a_join_that_times_out_while_redis_is_busy_tries_again`).
    ///
    /// ```
    /// # use std::time::Duration;
    /// use bloom_redis::RedisSync;
    ///
    /// let builder = RedisSync::builder("redis://127.0.0.1/").join_timeout(Duration::from_secs(120));
    /// # let _ = builder;
    /// ```
    pub fn join_timeout(mut self, timeout: Duration) -> Self {
        self.join_timeout = timeout;
        self
    }

    /// Joins the filter shared in Redis: checks the parameters, merges in both directions,
    /// installs the insert hook and starts the background tasks (inside a Tokio runtime).
    ///
    /// `filter` keeps its key type `K`: the returned [`RedisSync<K>`] rebuilds it only from
    /// sources of `K` keys. Every clone of `filter` is synchronised (the hooks are installed on
    /// the filter, not on this handle).
    ///
    /// With [`warm_start`](Self::warm_start) on, the filter's snapshot is merged in first.
    ///
    /// Fails if Redis is unreachable now or holds different parameters; once joined, outages
    /// are survived.
    ///
    /// ```no_run
    /// use bloom_redis::RedisSync;
    /// use bloom_tower::{BloomFilter, SharedFilter};
    ///
    /// # async fn example() -> Result<(), Box<dyn std::error::Error>> {
    /// let filter = SharedFilter::<u64>::new(BloomFilter::new(1_000_000, 0.01)?);
    /// let sync: RedisSync<u64> = RedisSync::builder("redis://127.0.0.1/")
    ///     .prefix("myapp:users")
    ///     .connect(&filter)
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub async fn connect<K: ?Sized>(self, filter: &SharedFilter<K>) -> Result<RedisSync<K>, Error> {
        if self.effective_publish_timeout() < self.stale_after {
            // R7: a create that goes on after a publish timeout is acknowledged after every
            // view that waits for its instance's marks went stale.
            return Err(Error::Config(
                "publish_timeout must be at least stale_after",
            ));
        }
        if self.segment_bytes == 0 || self.segment_bytes % 8 != 0 {
            return Err(Error::Config(
                "segment_bytes must be a positive multiple of 8",
            ));
        }
        if self.segment_bytes > MAX_SEGMENT {
            return Err(Error::Config(
                "segment_bytes must be at most 512 MiB (Redis's value limit)",
            ));
        }
        if self.reconcile_every.is_zero() || self.full_pass_every.is_zero() {
            return Err(Error::Config(
                "reconcile_every and full_pass_every must be positive",
            ));
        }
        if self.heartbeat.is_zero() || self.stale_after <= self.heartbeat {
            return Err(Error::Config(
                "heartbeat must be positive and shorter than stale_after",
            ));
        }
        if self.member_timeout < self.stale_after {
            return Err(Error::Config("member_timeout must be at least stale_after"));
        }
        if !(0.0..=1.0).contains(&self.min_rebuild_fraction)
            || !(0.0..=1.0).contains(&self.refill_below)
        {
            return Err(Error::Config(
                "min_rebuild_fraction and refill_below must be between 0 and 1",
            ));
        }
        if self.warm_start {
            merge_snapshot(filter).await;
        }
        RedisSync::connect(self, filter).await
    }
}

/// [`RedisSyncBuilder::warm_start`]: merges the filter's snapshot, logging the outcome; never
/// fails (joining downloads what a missing or refused snapshot would have provided).
async fn merge_snapshot<K: ?Sized>(filter: &SharedFilter<K>) {
    match filter.merge_snapshot().await {
        Ok(outcome) => match (outcome.merged_bits(), outcome.refusal()) {
            (Some(set_bits), _) => tracing::info!(
                filter = %filter.name(),
                set_bits,
                "merged the filter snapshot before joining the fleet",
            ),
            (None, Some(reason)) => tracing::warn!(
                filter = %filter.name(),
                %reason,
                "not merging the filter snapshot before joining the fleet; joining without it",
            ),
            (None, None) => tracing::info!(
                filter = %filter.name(),
                "no filter snapshot to merge before joining the fleet",
            ),
        },
        Err(error) => tracing::warn!(
            filter = %filter.name(),
            error = %ErrorChain(&error),
            corrupt = error.is_corrupt(),
            "could not merge the filter snapshot before joining the fleet; joining without it",
        ),
    }
}

/// An error and its causes, `: `-separated (the snapshot error says which file, its source
/// what went wrong).
struct ErrorChain<'a>(&'a dyn std::error::Error);

impl fmt::Display for ErrorChain<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)?;
        let mut source = self.0.source();
        while let Some(cause) = source {
            write!(f, ": {cause}")?;
            source = cause.source();
        }
        Ok(())
    }
}
