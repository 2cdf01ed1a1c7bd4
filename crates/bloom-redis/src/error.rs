//! [`Error`]: why joining, propagating, reconciling or rebuilding failed.

use std::time::Duration;

use bloom_tower::key_source::BoxError;

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
    /// merged bit by bit across instances (a counting filter's counters and a cuckoo filter's
    /// fingerprints cannot be OR-ed, and a scalable filter's stages differ between instances
    /// that grew at different times).
    #[error(
        "bloom-redis shares the bits of a plain BloomFilter; this filter is a {kind} one \
         (share a BloomFilter sized for the expected keys; a counting or cuckoo filter, which \
         can remove keys, serves one instance only)"
    )]
    NotPlain {
        /// The filter's kind: `"counting"`, `"scalable"` or `"cuckoo"`.
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
    /// The rebuilt generation holds far fewer keys than the serving one: not switched in
    /// (a source pointed at the wrong or an empty table would otherwise empty every
    /// instance's filter). [`RedisSync::force_rebuild`](crate::RedisSync::force_rebuild)
    /// switches anyway.
    #[error(
        "refused to switch: the rebuilt filter holds about {rebuilt} keys, the serving one about \
         {serving} (below the minimum fraction {min_fraction}); check the key source, or use \
         force_rebuild if the keys really were deleted"
    )]
    Shrunk {
        /// Estimated keys in the serving generation.
        serving: u64,
        /// Estimated keys in the rebuilt one.
        rebuilt: u64,
        /// [`RedisSyncBuilder::min_rebuild_fraction`](crate::RedisSyncBuilder::min_rebuild_fraction).
        min_fraction: f64,
    },
    /// [`RedisSync::propagated`](crate::RedisSync::propagated): this instance's inserts were
    /// not all in Redis and published within the timeout. They are in the local filter and
    /// will be pushed when Redis answers; meanwhile the other instances, no longer hearing
    /// from this one, treat their views as stale.
    #[error(
        "the inserts were not published to Redis within {waited:?}; other instances let \
         would-be rejections through until they hear from this one again"
    )]
    NotPropagated {
        /// How long it waited.
        waited: Duration,
    },
    /// [`RedisSync::visible`](crate::RedisSync::visible): Redis did not answer, and the
    /// follow bound is longer than
    /// [`visible_timeout`](crate::RedisSyncBuilder::visible_timeout): the commit is let
    /// through by every instance within the follow bound of it, not yet.
    #[error(
        "the commit was not published to Redis within {waited:?}, and the fleet's follower \
         reads it only within {follow_bound:?} of it; other instances may answer \"absent\" \
         for it until then"
    )]
    NotVisible {
        /// How long it waited.
        waited: Duration,
        /// The follow bound (the follow interval plus `stale_after`).
        follow_bound: Duration,
    },
}
