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

/// The reply of [`join`]: the shared parameters, the generations and the dataset's identity.
pub(crate) struct Joined {
    pub(crate) shape: StoredShape,
    /// The serving generation (the script creates it if it was missing).
    pub(crate) generation: Option<u64>,
    /// The generation being rebuilt, if any.
    pub(crate) building: Option<u64>,
    /// The key layout's version ([`FORMAT`]); empty for a layout older than versioning.
    pub(crate) format: String,
    /// Random, set with the config: another value means Redis lost its data (or another
    /// dataset answers) since this instance last looked.
    pub(crate) incarnation: String,
    /// The segment size every instance must use (bits are found by it).
    pub(crate) segment_bytes: String,
    /// What tells the answering server's data apart (see `server_lua!`): its `run_id`, new
    /// at every restart even from a dump holding the same `incarnation`, and where it may
    /// evict the filter's keys, its eviction count; empty if `INFO` is refused.
    pub(crate) server: String,
    /// The `allkeys-*` policy by which the server may evict the filter's keys, if it has one
    /// (and a `maxmemory`).
    pub(crate) evicting: String,
    /// Whether the config carries the mark [`FILLED`]: the shared filter was filled from the
    /// source in this Redis data.
    pub(crate) filled: bool,
}

/// The config field the fleet sets once the shared filter holds the source's keys (after a
/// rebuild, or a check that found none missing). Redis that holds fewer keys than the source
/// with the mark lost data; without it, it was never filled (a new fleet).
pub(crate) const FILLED: &str = "filled";

/// The key layout written by this version (segments grouped under per-group hash tags, with
/// versions). Stored in the config; instances of another layout refuse to share it.
pub(crate) const FORMAT: &str = "2";

impl FromRedisValue for Joined {
    fn from_redis_value(v: &Value) -> RedisResult<Self> {
        let values: Vec<String> = FromRedisValue::from_redis_value(v)?;
        let [
            bits,
            hashes,
            layout,
            seed,
            generation,
            building,
            format,
            incarnation,
            segment_bytes,
            server,
            evicting,
            filled,
        ]: [String; 12] = values.try_into().map_err(|_| {
            redis::RedisError::from((redis::ErrorKind::TypeError, "join: 12 fields expected"))
        })?;
        Ok(Self {
            shape: StoredShape {
                bits,
                hashes,
                layout,
                seed,
            },
            generation: generation.parse().ok(),
            building: building.parse().ok(),
            format,
            incarnation,
            segment_bytes,
            server,
            evicting,
            filled: filled == "1",
        })
    }
}

/// Lua that sets `server` to what tells the answering server's data apart from what it held
/// before: its `run_id` (new at every start of its process), then, under an `allkeys-*`
/// eviction policy, the policy and the server's count of evicted keys, which grows with every
/// eviction (the filter's live keys never expire, so a `volatile-*` policy leaves them); and
/// `evicting` to that policy if a `maxmemory` is also set (`''` otherwise). Both are `''`
/// where `INFO` is refused to scripts.
macro_rules! server_lua {
    () => {
        r"
local function info(section, field)
  local text = redis.pcall('INFO', section)
  return type(text) == 'string' and string.match(text, field .. ':([^\r\n]*)') or ''
end
local server = info('server', 'run_id')
local evicting = ''
local policy = info('memory', 'maxmemory_policy')
if string.sub(policy, 1, 8) == 'allkeys-' then
  server = server .. ' ' .. policy .. ' evicted ' .. info('stats', 'evicted_keys')
  if info('memory', 'maxmemory') ~= '0' then evicting = policy end
end
"
    };
}

/// Whether two `server` identities (`server_lua!`), or identities that end with one, name
/// one server process: they differ at most in the eviction count that follows its `run_id`.
pub(crate) fn same_process(a: &str, b: &str) -> bool {
    a.split(' ').next() == b.split(' ').next()
}

/// Creates the config and generation if absent (first instance, or Redis restarted empty),
/// then returns `[m, k, layout, seed, generation, building, format, incarnation, segment,
/// server, evicting, filled]` ([`Joined`]). KEYS: config, gen, building. ARGV: m, k, layout, seed, our
/// generation, format, a fresh incarnation, segment bytes. `INFO` comes last: before Redis 5,
/// a script could not write after it.
pub(crate) fn join() -> Script {
    Script::new(concat!(
        r"
if redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('HSET', KEYS[1], 'm', ARGV[1], 'k', ARGV[2], 'layout', ARGV[3], 'seed', ARGV[4],
    'format', ARGV[6], 'incarnation', ARGV[7], 'segment', ARGV[8])
end
redis.call('SET', KEYS[2], ARGV[5], 'NX')
local c = redis.call('HMGET', KEYS[1], 'm', 'k', 'layout', 'seed', 'format', 'incarnation',
  'segment', 'filled')
",
        server_lua!(),
        r"
return {c[1], c[2], c[3], c[4], redis.call('GET', KEYS[2]), redis.call('GET', KEYS[3]) or '',
  c[5] or '', c[6] or '', c[7] or '', server, evicting, c[8] or ''}
",
    ))
}

/// What [`or_segment`] did: the segment's version after the write, or nothing when a
/// rebuild's write was fenced off by a newer rebuild.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Written {
    At(u64),
    Fenced,
}

impl FromRedisValue for Written {
    fn from_redis_value(v: &Value) -> RedisResult<Self> {
        let version = i64::from_redis_value(v)?;
        Ok(u64::try_from(version).map_or(Self::Fenced, Self::At))
    }
}

/// Sets bits in one group's segments and bumps their versions, atomically: for each segment
/// `KEYS[i + 1]` (number `ARGV[2i - 1]`), `SETBIT` at every offset packed in `ARGV[2i]` (4 bytes
/// each, little-endian: 4 bytes a bit instead of a whole command), then `HINCRBY` its
/// version in hash `KEYS[1]`; last the group's `all`. Returns the new versions, then `all`.
pub(crate) fn set_bits() -> Script {
    Script::new(
        r"
local out = {}
for i = 1, #KEYS - 1 do
  local key, packed = KEYS[i + 1], ARGV[2 * i]
  for j = 1, #packed, 4 do
    local a, b, c, d = string.byte(packed, j, j + 3)
    redis.call('SETBIT', key, a + b * 256 + c * 65536 + d * 16777216, 1)
  end
  out[i] = redis.call('HINCRBY', KEYS[1], ARGV[2 * i - 1], 1)
end
out[#out + 1] = redis.call('HINCRBY', KEYS[1], 'all', 1)
return out
",
    )
}

/// ORs `ARGV[2]` into segment `KEYS[1]` through scratch `KEYS[2]` and bumps its version (field
/// `ARGV[3]` of version hash `KEYS[3]`, and the group's `all`); with a rebuild's fencing number
/// `ARGV[1]` (not empty) only while the group's fence `KEYS[4]` still holds it. Returns
/// [`Written`]. One group's keys: one slot.
pub(crate) fn or_segment() -> Script {
    Script::new(
        r"
if ARGV[1] ~= '' and redis.call('GET', KEYS[4]) ~= ARGV[1] then return -1 end
redis.call('SET', KEYS[2], ARGV[2])
redis.call('BITOP', 'OR', KEYS[1], KEYS[1], KEYS[2])
redis.call('DEL', KEYS[2])
redis.call('HINCRBY', KEYS[3], 'all', 1)
return redis.call('HINCRBY', KEYS[3], ARGV[3], 1)
",
    )
}

/// Empties a group of a generation a rebuild is about to announce: unless the group's fence
/// `KEYS[1]` holds a newer rebuild's number, sets it to `ARGV[1]`, deletes the segments
/// (`KEYS[3..]`) left by an abandoned attempt and bumps their versions (`ARGV[2..]`, in the hash
/// `KEYS[2]`) so that no instance mistakes the new contents for ones it has seen. Returns
/// [`Lock`] (`Lost`: a newer rebuild owns the group).
pub(crate) fn reset_group() -> Script {
    Script::new(
        r"
if tonumber(redis.call('GET', KEYS[1]) or '0') > tonumber(ARGV[1]) then return 0 end
redis.call('SET', KEYS[1], ARGV[1])
for i = 3, #KEYS do redis.call('DEL', KEYS[i]) end
for i = 2, #ARGV do redis.call('HINCRBY', KEYS[2], ARGV[i], 1) end
redis.call('HINCRBY', KEYS[2], 'all', 1)
return 1
",
    )
}

/// A group's `all` count in its version hash `KEYS[1]` (0 before any write), and the
/// `server` of the node holding it (`server_lua!`): on a cluster, a node other than the
/// `{prefix}` one can restart from an old dump, be replaced by a replica behind it, or evict
/// segments, without anything else telling.
pub(crate) fn group_state() -> Script {
    Script::new(concat!(
        server_lua!(),
        r"
return {redis.call('HGET', KEYS[1], 'all') or '0', server}
",
    ))
}

/// For each segment `KEYS[2..]` (numbers `ARGV[1..]`, versions in hash `KEYS[1]`): its version and
/// the SHA-1 of its bytes without trailing zeros, read together. The slow full pass compares
/// them with the local segments' digests: only segments that differ are moved.
pub(crate) fn digests() -> Script {
    Script::new(
        r"
local out = {}
for i = 2, #KEYS do
  local s = redis.call('GET', KEYS[i]) or ''
  local n = #s
  while n > 0 and string.byte(s, n) == 0 do n = n - 1 end
  out[#out + 1] = redis.call('HGET', KEYS[1], ARGV[i - 1]) or '0'
  out[#out + 1] = redis.sha1hex(string.sub(s, 1, n))
end
return out
",
    )
}

/// Keeps a rebuild alive while its source streams: if the lock `KEYS[1]` still holds `ARGV[1]`,
/// refreshes its TTL and the building marker `KEYS[2]`'s to `ARGV[2]` ms, and the seal `KEYS[3]`'s
/// (if set) to `ARGV[3]` ms — an expired seal would let a late instance count itself on time
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

/// Announces a rebuild of generation `ARGV[2]` if the lock `KEYS[1]` still holds `ARGV[1]`:
/// sets building `KEYS[2]` (TTL `ARGV[3]`), clears acks `KEYS[3]` / sealed `KEYS[4]`, opens the
/// acknowledgement window `KEYS[5]` (TTL `ARGV[6]`), publishes `ARGV[5]` on channel `ARGV[4]`.
/// Returns [`Lock`]. (The segments were emptied before, group by group: [`reset_group`].)
pub(crate) fn begin() -> Script {
    Script::new(
        r"
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[2], ARGV[2], 'PX', ARGV[3])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
redis.call('DEL', KEYS[3], KEYS[4])
redis.call('SET', KEYS[5], '1', 'PX', ARGV[6])
redis.call('PUBLISH', ARGV[4], ARGV[5])
return 1
",
    )
}

/// Seals a generation's acks if the lock `KEYS[1]` still holds `ARGV[1]`: closes the window
/// `KEYS[3]`, sets `KEYS[2]` (TTL `ARGV[2]` ms; what instances of earlier versions check) and
/// refreshes the lock's TTL to `ARGV[3]` ms. Returns [`Lock`].
pub(crate) fn seal() -> Script {
    Script::new(
        r"
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[3])
redis.call('SET', KEYS[2], '1', 'PX', ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 1
",
    )
}

/// Acknowledges (SADD `ARGV[1]` to `KEYS[1]`) while the window `KEYS[2]` is open. Returns
/// [`Ack`]: late when the window is closed, and also when Redis lost it (it has a TTL, which a
/// `volatile-*` eviction policy may take), since a late instance carries its bits over and
/// loses nothing, where one wrongly in time loses what it inserted before it double-wrote.
/// It reads the window, never the seal: a seal Redis lost would make every later ack in time
/// (`an_instance_that_acknowledges_after_a_lost_seal_keeps_its_keys_through_the_switch`, in
/// `tests/fleet.rs`).
pub(crate) fn ack() -> Script {
    Script::new(
        r"
if redis.call('EXISTS', KEYS[2]) == 0 then return 0 end
redis.call('SADD', KEYS[1], ARGV[1])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
",
    )
}

/// Makes generation `ARGV[2]` serve if the lock `KEYS[1]` still holds `ARGV[1]`: SET gen `KEYS[2]`,
/// DEL building `KEYS[3]` and the lock, publish `ARGV[4]` on `ARGV[3]`. Returns [`Lock`]. (The old
/// generation's groups are then set to expire, group by group.)
pub(crate) fn switch() -> Script {
    Script::new(
        r"
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[2], ARGV[2])
redis.call('DEL', KEYS[3], KEYS[1])
redis.call('PUBLISH', ARGV[3], ARGV[4])
return 1
",
    )
}

/// Abandons a rebuild: DEL building `KEYS[2]` and lock `KEYS[1]` if it still holds `ARGV[1]`.
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

/// Keeps the follow lease `KEYS[1]` if it still holds `ARGV[1]`: refreshes its TTL to `ARGV[2]`
/// ms; if `ARGV[3]` is not empty, stores it as the fleet's follow position `KEYS[2]`; if
/// `ARGV[4]` is not empty (`covered bound`, ms), stores it as the covered time `KEYS[3]` with
/// TTL `ARGV[5]` ms, else only refreshes that TTL (a holder whose steps fail keeps the record,
/// which ages: every view goes stale, R5). Returns 1, or 0 when the lease is another
/// instance's (or expired): only the holder moves the position and the covered time.
pub(crate) fn keep_follow_lease() -> Script {
    Script::new(
        r"
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
if ARGV[3] ~= '' then redis.call('SET', KEYS[2], ARGV[3]) end
if ARGV[4] ~= '' then
  redis.call('SET', KEYS[3], ARGV[4], 'PX', ARGV[5])
else
  redis.call('PEXPIRE', KEYS[3], ARGV[5])
end
return 1
",
    )
}

/// Gives the follow lease `KEYS[1]` up if it holds `ARGV[1]` (a clean shutdown): another
/// instance takes over at once instead of after the lease's TTL.
pub(crate) fn release_follow_lease() -> Script {
    Script::new(
        r"
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1])
return 1
",
    )
}

/// Lua helpers of the roster scripts: a number below 2⁵³ as 8 little-endian bytes (a message
/// word), and an instance id written as 16 hex digits as its 8 little-endian bytes (a
/// message's sender).
macro_rules! roster_lua {
    () => {
        r"
local function le64(n)
  local b = {}
  for i = 1, 8 do b[i] = string.char(n % 256); n = math.floor(n / 256) end
  return table.concat(b)
end
local function le_hex(h)
  local b = {}
  for i = 15, 1, -2 do b[#b + 1] = string.char(tonumber(string.sub(h, i, i + 1), 16)) end
  return table.concat(b)
end
"
    };
}

/// One freshness round of an instance (see `sync::freshness`). KEYS: marks (ZSET), roster
/// (HASH), roster version, the follower's covered time. ARGV: the instance's id (16 hex
/// digits), its claim (ms in Redis's clock, or empty), whether it vouches (`1`: every insert
/// it made before the claim was published), `member_timeout` (ms), its resync epoch, its tag
/// (16 hex digits), the channel, its own ping channel, the round's sequence number, whether
/// the pass that made it vouch for that tag pushed bits (`1`: the others pull when they hear
/// of it), the round's nonce (16 hex digits), `stale_after` (ms).
///
/// Reads Redis's clock `now`. If it vouches, sets its mark to the smaller of `now` and the
/// claim, and if its `epoch:tag:pushed` differs from its roster entry, records it, bumps the version
/// and publishes a [`Kind::Member`](crate::protocol::Kind::Member) message carrying it.
/// Removes every instance whose mark is older than `member_timeout`, publishing a
/// [`Kind::Leaving`](crate::protocol::Kind::Leaving) message (expired) for each. Publishes
/// the ping last, on the instance's own channel: every message published before any mark
/// this script read reaches the instance before it. Returns `{now, oldest mark, its
/// instance, marks, roster version, covered time and follow bound ('' without a follower),
/// the instances silent for stale_after (at most 64)…}`.
pub(crate) fn mark() -> Script {
    Script::new(concat!(
        roster_lua!(),
        r"
local id = ARGV[1]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if ARGV[3] == '1' then
  local score = now
  if ARGV[2] ~= '' then score = math.min(now, tonumber(ARGV[2])) end
  redis.call('ZADD', KEYS[1], score, id)
  local info = ARGV[5] .. ':' .. ARGV[6] .. ':' .. ARGV[10]
  if redis.call('HGET', KEYS[2], id) ~= info then
    redis.call('HSET', KEYS[2], id, info)
    local v = redis.call('INCR', KEYS[3])
    redis.call('PUBLISH', ARGV[7], string.char(2, 7) .. le_hex(id) .. le64(0)
      .. le64(tonumber(ARGV[5])) .. le_hex(ARGV[6]) .. le64(v) .. le64(tonumber(ARGV[10])))
  end
end
local gone = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', '(' .. (now - tonumber(ARGV[4])))
for _, member in ipairs(gone) do
  redis.call('ZREM', KEYS[1], member)
  redis.call('HDEL', KEYS[2], member)
  local v = redis.call('INCR', KEYS[3])
  redis.call('PUBLISH', ARGV[7],
    string.char(2, 6) .. le_hex(member) .. le64(0) .. le64(v) .. le64(1))
end
local oldest = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
local version = tonumber(redis.call('GET', KEYS[3]) or '0')
local marks = redis.call('ZCARD', KEYS[1])
local covered = redis.call('GET', KEYS[4]) or ''
local silent = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', '(' .. (now - tonumber(ARGV[12])),
  'LIMIT', 0, 64)
redis.call('PUBLISH', ARGV[8], string.char(2, 8) .. le_hex(id) .. le64(0)
  .. le64(tonumber(ARGV[9])) .. le_hex(ARGV[11]))
local out = {tostring(now), tostring(oldest[2] or now), oldest[1] or id, tostring(marks),
  tostring(version), covered}
for _, member in ipairs(silent) do out[#out + 1] = member end
return out
",
    ))
}

/// A confirming ping: publishes `ARGV[2]` on the instance's own channel `ARGV[1]`. `KEYS[1]`
/// (the marks) only routes it, on a cluster, to the `{prefix}` slot's node, which publishes
/// every other message of the instance: a ping reaches each subscriber after them.
pub(crate) fn ping() -> Script {
    Script::new(
        r"
redis.call('PUBLISH', ARGV[1], ARGV[2])
return 1
",
    )
}

/// The roster, whole: `{version, id, epoch:tag:pushed, id, epoch:tag:pushed, …}`. KEYS:
/// roster, roster version.
pub(crate) fn roster() -> Script {
    Script::new(
        r"
local out = {redis.call('GET', KEYS[2]) or '0'}
for _, field in ipairs(redis.call('HGETALL', KEYS[1])) do out[#out + 1] = field end
return out
",
    )
}

/// One instance's roster entry and the roster's version: `{version, entry or ''}`. KEYS:
/// roster, roster version. ARGV: the instance's id (16 hex digits). What a roster message is
/// checked against before it changes a view.
pub(crate) fn roster_entry() -> Script {
    Script::new(
        r"
return {redis.call('GET', KEYS[2]) or '0', redis.call('HGET', KEYS[1], ARGV[1]) or ''}
",
    )
}

/// An instance leaves the roster cleanly: removes its mark (ZSET `KEYS[1]`) and entry (HASH
/// `KEYS[2]`), bumps the version (`KEYS[3]`) and publishes its
/// [`Kind::Leaving`](crate::protocol::Kind::Leaving) message on `ARGV[2]`. `ARGV[1]`: its
/// id, 16 hex digits.
pub(crate) fn leave() -> Script {
    Script::new(concat!(
        roster_lua!(),
        r"
redis.call('ZREM', KEYS[1], ARGV[1])
if redis.call('HDEL', KEYS[2], ARGV[1]) == 1 then
  local v = redis.call('INCR', KEYS[3])
  redis.call('PUBLISH', ARGV[2],
    string.char(2, 6) .. le_hex(ARGV[1]) .. le64(0) .. le64(v) .. le64(0))
end
return 1
",
    ))
}
