#![doc = include_str!("../README.md")]
#![forbid(unsafe_code)]

mod protocol;
mod scripts;
mod sync;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use bloom_tower::SharedFilter;
use bloom_tower::key_source::BoxError;

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
}

/// Why joining, reconciling or rebuilding failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Redis could not be reached or refused a command. The message never holds the URL.
    #[error("redis: {0}")]
    Redis(#[from] redis::RedisError),
    /// This instance's filter does not match the parameters shared in Redis.
    #[error(
        "this instance's filter does not match the one shared in Redis under prefix {prefix:?}: \
         {detail}; configure the same bits, hashes, layout and hash key as the other \
         instances, or use another key prefix"
    )]
    ParameterMismatch {
        /// The key prefix.
        prefix: String,
        /// Which parameter differs (hash keys are never shown).
        detail: String,
    },
    /// The local serving filter changed shape (a local `reload_from` resized it): it can no
    /// longer be merged with the shared one.
    #[error(
        "the local filter no longer has the shared shape (was it rebuilt with \
         SharedFilter::reload_from? rebuild through RedisSync::rebuild instead)"
    )]
    ShapeChanged,
    /// The shared filter is not a plain `BloomFilter`: only a fixed array of bits can be
    /// merged bit by bit across instances (a counting filter's counters cannot be OR-ed, and a
    /// scalable filter's stages differ between instances that grew at different times).
    #[error(
        "bloom-redis shares the bits of a plain BloomFilter; this filter is a {kind} one \
         (share a BloomFilter sized for the expected keys)"
    )]
    NotPlain {
        /// The filter's kind: `"counting"` or `"scalable"`.
        kind: &'static str,
    },
    /// An invalid setting.
    #[error("invalid configuration: {0}")]
    Config(&'static str),
    /// The key source failed during a rebuild; the previous generation keeps serving.
    #[error("the key source failed after {keys} keys; the previous generation keeps serving")]
    Source {
        /// Keys read before the failure.
        keys: u64,
        /// The source's error.
        #[source]
        source: BoxError,
    },
    /// Another instance took over the rebuild lock (ours expired): this rebuild was abandoned.
    #[error("lost the rebuild lock (it expired; raise lock_ttl); the rebuild was abandoned")]
    Fenced,
    /// A local rebuild (`SharedFilter::reload_from`) is running.
    #[error("a local rebuild of the filter is running")]
    Busy,
}

/// What [`RedisSync::rebuild`] did.
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
    /// Bytes read from Redis (every segment of every active generation).
    pub bytes_pulled: u64,
    /// Bytes written to Redis (only segments where this instance had bits Redis lacked).
    pub bytes_pushed: u64,
    /// Segments written.
    pub segments_pushed: u64,
}

/// Connection state and counters; see [`RedisSync::stats`].
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
}

/// Configures a [`RedisSync`]; from [`RedisSync::builder`].
#[derive(Clone)]
#[must_use]
pub struct RedisSyncBuilder {
    pub(crate) url: Arc<str>,
    pub(crate) prefix: Option<String>,
    pub(crate) reconcile_every: Duration,
    pub(crate) pubsub: bool,
    pub(crate) segment_bytes: u64,
    pub(crate) lock_ttl: Duration,
    pub(crate) ack_timeout: Duration,
    pub(crate) response_timeout: Duration,
}

impl fmt::Debug for RedisSyncBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The URL may hold a password: not printed.
        f.debug_struct("RedisSyncBuilder")
            .field("prefix", &self.prefix)
            .field("reconcile_every", &self.reconcile_every)
            .field("pubsub", &self.pubsub)
            .field("segment_bytes", &self.segment_bytes)
            .field("lock_ttl", &self.lock_ttl)
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
            pubsub: true,
            segment_bytes: 64 << 20,
            lock_ttl: Duration::from_secs(30),
            ack_timeout: Duration::from_secs(2),
            response_timeout: Duration::from_secs(2),
        }
    }

    /// Prefix of every Redis key and of the channel; one per shared filter. Defaults to
    /// `bloom-guard:` followed by the filter's [name](SharedFilter::name).
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = Some(prefix.into());
        self
    }

    /// How often to merge in both directions with Redis (default 10 s): the bound on how long
    /// a bit missed by pub/sub (or set during an outage) takes to reach every instance.
    pub fn reconcile_every(mut self, interval: Duration) -> Self {
        self.reconcile_every = interval;
        self
    }

    /// Propagate inserts at once through pub/sub (default on). Off, instances converge by
    /// reconciliation alone.
    pub fn pubsub(mut self, on: bool) -> Self {
        self.pubsub = on;
        self
    }

    /// Bytes of the bit array per Redis key (default 64 MiB; at most 512 MiB, Redis's
    /// value limit; a multiple of 8).
    pub fn segment_bytes(mut self, bytes: u64) -> Self {
        self.segment_bytes = bytes;
        self
    }

    /// The rebuild lock's time to live (default 30 s), refreshed at each step of a rebuild.
    pub fn lock_ttl(mut self, ttl: Duration) -> Self {
        self.lock_ttl = ttl;
        self
    }

    /// How long a rebuild waits for every live instance to start double-writing before it
    /// reads its source (default 2 s). Instances that miss it carry their bits over.
    pub fn ack_timeout(mut self, timeout: Duration) -> Self {
        self.ack_timeout = timeout;
        self
    }

    /// Timeout of each Redis command (default 2 s).
    pub fn response_timeout(mut self, timeout: Duration) -> Self {
        self.response_timeout = timeout;
        self
    }

    /// Joins the filter shared in Redis: checks the parameters, merges in both directions,
    /// installs the insert hook and starts the background tasks (inside a Tokio runtime).
    ///
    /// Fails if Redis is unreachable now or holds different parameters; once joined, outages
    /// are survived.
    pub async fn connect(self, filter: SharedFilter) -> Result<RedisSync, Error> {
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
        if self.reconcile_every.is_zero() {
            return Err(Error::Config("reconcile_every must be positive"));
        }
        RedisSync::connect(self, filter).await
    }
}
