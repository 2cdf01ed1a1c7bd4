//! The Lua scripts (each runs atomically in Redis) and their replies, decoded into types.

use redis::{FromRedisValue, RedisResult, Script, Value};

use crate::protocol::StoredShape;

/// What a fenced script found: whether the rebuild lock still held our token.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Lock {
    /// The token was there: the script did its work (and refreshed the lock's TTL).
    Held,
    /// Another token, or none (ours expired): nothing was written.
    Lost,
}

impl FromRedisValue for Lock {
    fn from_redis_value(v: &Value) -> RedisResult<Self> {
        Ok(if i64::from_redis_value(v)? == 1 {
            Self::Held
        } else {
            Self::Lost
        })
    }
}

/// Whether an acknowledgement of a rebuild came before its source was read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Ack {
    /// Before the seal: the rebuild's source was read after we started double-writing.
    InTime,
    /// After it: our bits are carried over at the switch instead.
    Late,
}

impl FromRedisValue for Ack {
    fn from_redis_value(v: &Value) -> RedisResult<Self> {
        Ok(if i64::from_redis_value(v)? == 1 {
            Self::InTime
        } else {
            Self::Late
        })
    }
}

/// The reply of [`join`]: the shared parameters and the generations.
pub(crate) struct Joined {
    pub(crate) shape: StoredShape,
    /// The serving generation (the script creates it if it was missing).
    pub(crate) generation: Option<u64>,
    /// The generation being rebuilt, if any.
    pub(crate) building: Option<u64>,
}

impl FromRedisValue for Joined {
    fn from_redis_value(v: &Value) -> RedisResult<Self> {
        let (bits, hashes, layout, seed, generation, building): (
            String,
            String,
            String,
            String,
            String,
            String,
        ) = FromRedisValue::from_redis_value(v)?;
        Ok(Self {
            shape: StoredShape {
                bits,
                hashes,
                layout,
                seed,
            },
            generation: generation.parse().ok(),
            building: building.parse().ok(),
        })
    }
}

/// Creates the config and generation if absent (first instance, or Redis restarted empty),
/// then returns `[m, k, layout, seed, generation, building]` ([`Joined`]).
/// KEYS: config, gen, building. ARGV: m, k, layout, seed, our generation.
pub(crate) fn join() -> Script {
    Script::new(
        r"
if redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('HSET', KEYS[1], 'm', ARGV[1], 'k', ARGV[2], 'layout', ARGV[3], 'seed', ARGV[4])
end
redis.call('SET', KEYS[2], ARGV[5], 'NX')
local c = redis.call('HMGET', KEYS[1], 'm', 'k', 'layout', 'seed')
return {c[1], c[2], c[3], c[4], redis.call('GET', KEYS[2]), redis.call('GET', KEYS[3]) or ''}
",
    )
}

/// ORs ARGV[2] into segment KEYS[1] through scratch KEYS[2]; with a fencing token ARGV[1]
/// (not empty) only while KEYS[3] (the lock) still holds it, refreshing its TTL (ARGV[3]),
/// and the building marker KEYS[4]'s. Returns [`Lock`] (always `Held` without a token).
pub(crate) fn or_segment() -> Script {
    Script::new(
        r"
if ARGV[1] ~= '' then
  if redis.call('GET', KEYS[3]) ~= ARGV[1] then return 0 end
  redis.call('PEXPIRE', KEYS[3], ARGV[3])
  redis.call('PEXPIRE', KEYS[4], ARGV[3])
end
redis.call('SET', KEYS[2], ARGV[2])
redis.call('BITOP', 'OR', KEYS[1], KEYS[1], KEYS[2])
redis.call('DEL', KEYS[2])
return 1
",
    )
}

/// Keeps a rebuild alive while its source streams: if the lock KEYS[1] still holds ARGV[1],
/// refreshes its TTL and the building marker KEYS[2]'s to ARGV[2] ms, and the seal KEYS[3]'s
/// (if set) to ARGV[3] ms — an expired seal would let a late instance count itself on time
/// and skip carrying its bits over. Returns [`Lock`].
pub(crate) fn refresh() -> Script {
    Script::new(
        r"
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
redis.call('PEXPIRE', KEYS[2], ARGV[2])
redis.call('PEXPIRE', KEYS[3], ARGV[3])
return 1
",
    )
}

/// Announces a rebuild of generation ARGV[2] if the lock KEYS[1] still holds ARGV[1]:
/// sets building KEYS[2] (TTL ARGV[3]), clears acks KEYS[3] / sealed KEYS[4] and any
/// segments left by an abandoned attempt (KEYS[5..]), publishes ARGV[5] on channel ARGV[4].
/// Returns [`Lock`].
pub(crate) fn begin() -> Script {
    Script::new(
        r"
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[2], ARGV[2], 'PX', ARGV[3])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
for i = 3, #KEYS do redis.call('DEL', KEYS[i]) end
redis.call('PUBLISH', ARGV[4], ARGV[5])
return 1
",
    )
}

/// Seals a generation's acks (sets KEYS[2], TTL ARGV[2] ms) if the lock KEYS[1] still holds
/// ARGV[1]; refreshes the lock's TTL to ARGV[3] ms. Returns [`Lock`].
pub(crate) fn seal() -> Script {
    Script::new(
        r"
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[2], '1', 'PX', ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 1
",
    )
}

/// Acknowledges (SADD ARGV[1] to KEYS[1]) unless KEYS[2] is sealed. Returns [`Ack`].
pub(crate) fn ack() -> Script {
    Script::new(
        r"
if redis.call('EXISTS', KEYS[2]) == 1 then return 0 end
redis.call('SADD', KEYS[1], ARGV[1])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
",
    )
}

/// Makes generation ARGV[2] serve if the lock KEYS[1] still holds ARGV[1]: SET gen KEYS[2],
/// DEL building KEYS[3] and the lock, expire the old generation's segments (KEYS[4..]) after
/// ARGV[3] ms, publish ARGV[5] on ARGV[4]. Returns [`Lock`].
pub(crate) fn switch() -> Script {
    Script::new(
        r"
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[2], ARGV[2])
redis.call('DEL', KEYS[3], KEYS[1])
for i = 4, #KEYS do redis.call('PEXPIRE', KEYS[i], ARGV[3]) end
redis.call('PUBLISH', ARGV[4], ARGV[5])
return 1
",
    )
}

/// Abandons a rebuild: DEL building KEYS[2] and lock KEYS[1] if it still holds ARGV[1].
/// Returns [`Lock`].
pub(crate) fn abort() -> Script {
    Script::new(
        r"
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1], KEYS[2])
return 1
",
    )
}
