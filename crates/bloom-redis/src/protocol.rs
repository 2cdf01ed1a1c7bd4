//! What is stored in Redis and sent over pub/sub: key names, bit offsets, messages.

use bloom_core::{BloomFilter, Layout};

/// The shape every generation shares: what must agree for bits to be merged.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) struct Shape {
    pub(crate) bits: u64,
    pub(crate) hashes: u32,
    pub(crate) layout: Layout,
    pub(crate) seed: u128,
}

impl Shape {
    pub(crate) fn of(filter: &BloomFilter) -> Self {
        Self {
            bits: filter.num_bits(),
            hashes: filter.num_hashes(),
            layout: filter.layout(),
            seed: filter.seed(),
        }
    }

    /// An empty filter of this shape.
    pub(crate) fn empty(&self) -> BloomFilter {
        BloomFilter::builder()
            .bits(self.bits)
            .hashes(self.hashes)
            .layout(self.layout)
            .seed(self.seed)
            .build()
            .expect("the shape of an existing filter builds")
    }

    pub(crate) fn num_bytes(&self) -> u64 {
        self.bits.div_ceil(64) * 8
    }

    /// The seed as stored in Redis (32 hex digits). Secret: never logged.
    pub(crate) fn seed_hex(&self) -> String {
        format!("{:032x}", self.seed)
    }

    /// The first parameter in which `stored` (from Redis) differs, described without
    /// revealing any hash key.
    pub(crate) fn mismatch(&self, stored: &StoredShape) -> Option<String> {
        let ours_layout = self.layout.to_string();
        if stored.bits != self.bits.to_string() {
            Some(format!(
                "number of bits m differs (this instance {}, Redis {})",
                self.bits, stored.bits
            ))
        } else if stored.hashes != self.hashes.to_string() {
            Some(format!(
                "number of hashes k differs (this instance {}, Redis {})",
                self.hashes, stored.hashes
            ))
        } else if stored.layout != ours_layout {
            Some(format!(
                "layout differs (this instance {ours_layout}, Redis {})",
                stored.layout
            ))
        } else if stored.seed != self.seed_hex() {
            Some("hash key (seed) differs (values not shown: they are secret)".to_owned())
        } else {
            None
        }
    }
}

/// The shape fields as Redis returned them.
pub(crate) struct StoredShape {
    pub(crate) bits: String,
    pub(crate) hashes: String,
    pub(crate) layout: String,
    pub(crate) seed: String,
}

/// Segments per group: the segments of one group share a Redis Cluster hash slot (and a
/// version hash); the groups of a generation spread over the shards.
pub(crate) const SEGMENTS_PER_GROUP: u64 = 64;

/// The group of segment `s`.
pub(crate) fn group_of(s: u64) -> u64 {
    s / SEGMENTS_PER_GROUP
}

/// Key names under one prefix, laid out for Redis Cluster: the keys every instance finds
/// first (config, generation, lock, members, acks) share the `{prefix}` hash tag, so the
/// scripts that touch several of them run in one slot; each group of segments has its own
/// tag `{prefix:g<G>:<group>}`, shared by its segments, its version hash, its fence and its
/// scratch keys, so a script or pipeline on one group also stays in one slot.
#[derive(Clone)]
pub(crate) struct Keys {
    prefix: String,
    base: String,
}

/// Why `prefix` cannot name a fleet's keys, if it cannot: empty; holding `{` or `}` (the
/// hash tags are ours); or ending like a segment group's tag (`:g<G>:<group>`), whose keys
/// would be another fleet's (`a:g1:0`'s `{a:g1:0}:fence` is fleet `a`'s group fence)
/// (`tests::prefixes_that_would_share_another_fleets_keys_are_refused`).
pub(crate) fn refuse_prefix(prefix: &str) -> Option<&'static str> {
    if prefix.is_empty() {
        return Some("the prefix must not be empty");
    }
    if prefix.contains(['{', '}']) {
        return Some("the prefix must not contain '{' or '}' (the key layout's hash tags)");
    }
    let mut parts = prefix.rsplit(':');
    let group = parts.next().unwrap_or_default();
    let generation = parts.next().unwrap_or_default();
    let is_number = |text: &str| !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit());
    if parts.next().is_some()
        && is_number(group)
        && generation.strip_prefix('g').is_some_and(is_number)
    {
        return Some(
            "the prefix must not end like a segment group's tag (\":g<number>:<number>\"): \
             its keys would be another fleet's",
        );
    }
    None
}

impl Keys {
    pub(crate) fn new(prefix: &str) -> Self {
        Self {
            prefix: prefix.to_owned(),
            base: format!("{{{prefix}}}"),
        }
    }
    /// HASH m, k, layout, seed, format, incarnation, segment, filled: the parameters every
    /// instance must share, the key layout's version, a random id of this Redis dataset, and
    /// the mark that the filter was filled from the source ([`FILLED`](crate::scripts::FILLED)).
    pub(crate) fn config(&self) -> String {
        format!("{}:config", self.base)
    }
    /// STRING: the serving generation number.
    pub(crate) fn generation(&self) -> String {
        format!("{}:gen", self.base)
    }
    /// STRING (with the lock's TTL): the generation being rebuilt.
    pub(crate) fn building(&self) -> String {
        format!("{}:building", self.base)
    }
    /// STRING `{instance}:{token}` with a TTL: the rebuild lock.
    pub(crate) fn lock(&self) -> String {
        format!("{}:lock", self.base)
    }
    /// STRING with a TTL of the claiming instance's interval: a scheduled rebuild of the
    /// fleet was claimed for the interval (see `RedisSync::rebuild_every`).
    pub(crate) fn rebuild_claim(&self) -> String {
        format!("{}:rebuild:claim", self.base)
    }
    /// STRING counter: fencing tokens.
    pub(crate) fn fence(&self) -> String {
        format!("{}:fence", self.base)
    }
    /// ZSET instance id → when it last reconciled (ms since the epoch, its clock): the instances
    /// a rebuild waits for.
    pub(crate) fn members(&self) -> String {
        format!("{}:members", self.base)
    }
    /// SET of instances double-writing generation `g` before its source was read.
    pub(crate) fn acks(&self, g: u64) -> String {
        format!("{}:g{g}:acks", self.base)
    }
    /// STRING with a TTL: set when generation `g`'s source starts being read. Only instances
    /// of versions before [`open`](Self::open) read it; it is still set for them.
    pub(crate) fn sealed(&self, g: u64) -> String {
        format!("{}:g{g}:sealed", self.base)
    }
    /// STRING with a TTL: set when generation `g`'s rebuild is announced, deleted when its
    /// source starts being read. An acknowledgement is in time only while it exists, so one
    /// Redis lost (evicted, expired) makes it late, which is safe.
    pub(crate) fn open(&self, g: u64) -> String {
        format!("{}:g{g}:open", self.base)
    }
    /// STRING `{instance}` with a TTL: the instance that follows the source's changes for the
    /// fleet (see `sync::follower`).
    pub(crate) fn follow_lease(&self) -> String {
        format!("{}:follow:lease", self.base)
    }
    /// STRING: the source position every key committed before is in Redis (a
    /// [`Watermark`](bloom_tower::key_source::Watermark)'s bytes), written by the lease holder.
    pub(crate) fn follow_position(&self) -> String {
        format!("{}:follow:position", self.base)
    }
    /// STRING `covered bound` (ms) with a TTL: the follower's covered time (every row committed
    /// before it, in Redis's clock, is in Redis and published) and the follow bound, written
    /// by the lease holder after every successful step (see `sync::follower`).
    pub(crate) fn follow_covered(&self) -> String {
        format!("{}:follow:covered", self.base)
    }
    /// The hash tag of group `group` of generation `g`.
    fn group(&self, g: u64, group: u64) -> String {
        format!("{{{}:g{g}:{group}}}", self.prefix)
    }
    /// STRING: segment `s` of generation `g`'s bits, little-endian words as bytes.
    pub(crate) fn segment(&self, g: u64, s: u64) -> String {
        format!("{}:seg{s}", self.group(g, group_of(s)))
    }
    /// HASH segment number → version (bumped with every write to that segment), and `all`
    /// → the group's count of writes: one field tells whether anything in the group moved.
    pub(crate) fn versions(&self, g: u64, group: u64) -> String {
        format!("{}:ver", self.group(g, group))
    }
    /// STRING: the fencing number of the rebuild that last reset the group; a rebuild's
    /// writes carry theirs, and a smaller or different one is refused.
    pub(crate) fn group_fence(&self, g: u64, group: u64) -> String {
        format!("{}:fence", self.group(g, group))
    }
    /// STRING: a scratch key for one upload into the group.
    pub(crate) fn scratch(&self, g: u64, group: u64, instance: u64) -> String {
        format!("{}:tmp:{instance:016x}", self.group(g, group))
    }
    /// The pub/sub channel.
    pub(crate) fn channel(&self) -> String {
        format!("{}:bits", self.base)
    }
    /// ZSET instance id (16 hex digits) → its freshness mark: the Redis time (ms) before which
    /// it had published every insert it made (see `sync::freshness`).
    pub(crate) fn marks(&self) -> String {
        format!("{}:marks", self.base)
    }
    /// HASH instance id (16 hex digits) → `epoch:tag:pushed` (decimal, 16 hex digits, `0` or
    /// `1`), what its [`Kind::Member`] messages announced: the instances a reader waits for.
    /// A reader checks each roster message against it before it changes anything, and reads
    /// it whole when it missed a change.
    pub(crate) fn roster(&self) -> String {
        format!("{}:roster", self.base)
    }
    /// STRING counter: bumped with every change of the roster, carried by the message that
    /// announces it.
    pub(crate) fn roster_version(&self) -> String {
        format!("{}:roster:v", self.base)
    }
    /// The channel an instance's own [`Kind::Ping`]s come back on: no other instance hears
    /// them.
    pub(crate) fn ping_channel(&self, instance: u64) -> String {
        format!("{}:ping:{instance:016x}", self.base)
    }
}

/// Where bit `bit` of the filter lives in Redis: `(segment, offset for SETBIT/GETBIT)`.
///
/// The words are stored as their little-endian bytes, so bit `b` is in byte `b / 8`, at
/// value `1 << (b % 8)` in that byte. Redis numbers the bits of a byte from the most
/// significant one, so its offset of that bit is `byte * 8 + (7 - b % 8)`.
pub(crate) fn redis_bit(bit: u64, segment_bytes: u64) -> (u64, u64) {
    let byte = bit / 8;
    let (segment, byte_in_segment) = (byte / segment_bytes, byte % segment_bytes);
    (segment, byte_in_segment * 8 + (7 - bit % 8))
}

/// Message kinds on the channel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// Bits set in a generation, and the versions that write gave the segments it touched
    /// ([`BitsMessage`]).
    Bits = 1,
    /// A rebuild of the generation started: start double-writing it.
    Building = 2,
    /// The generation now serves: switch.
    Switched = 3,
    /// The heartbeat of the protocol before freshness marks; ignored.
    Tick = 4,
    /// Records were committed on the sender: the words are the keys' keyed digests, for
    /// dropping cached "not found" answers.
    Committed = 5,
    /// The sender left the roster: words `[roster version, expired]` (`expired` 1: it was
    /// silent for `member_timeout`, and the script that removed it sent this on its behalf).
    Leaving = 6,
    /// The sender joined the roster, or what it announces changed: words `[resync epoch, tag,
    /// roster version, pushed]` (`pushed` 1: the pass that reconciled it with that tag's data
    /// pushed bits into it). The epoch is bumped when bits it could not publish were pushed into
    /// the segments instead, so receivers must pull before trusting it; the tag names the
    /// Redis data it last reconciled with. Sent by the mark script, only on a change.
    Member = 7,
    /// A reader's own mark round: words `[sequence]`, on its own ping channel, published
    /// after everything its mark script read was published.
    Ping = 8,
}

impl Kind {
    fn from_byte(byte: u8) -> Option<Self> {
        Some(match byte {
            1 => Self::Bits,
            2 => Self::Building,
            3 => Self::Switched,
            4 => Self::Tick,
            5 => Self::Committed,
            6 => Self::Leaving,
            7 => Self::Member,
            8 => Self::Ping,
            _ => return None,
        })
    }
}

/// A decoded message: `[1 version][1 kind][8 sender][8 generation][8 × n words]`, all
/// little-endian.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Message {
    pub(crate) kind: Kind,
    pub(crate) sender: u64,
    pub(crate) generation: u64,
    /// Bit indices, digests or the epoch, by kind.
    pub(crate) words: Vec<u64>,
}

const VERSION: u8 = 2;
const HEADER: usize = 18;

pub(crate) fn encode(kind: Kind, sender: u64, generation: u64, words: &[u64]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER + words.len() * 8);
    out.push(VERSION);
    out.push(kind as u8);
    out.extend_from_slice(&sender.to_le_bytes());
    out.extend_from_slice(&generation.to_le_bytes());
    for word in words {
        out.extend_from_slice(&word.to_le_bytes());
    }
    out
}

pub(crate) fn decode(bytes: &[u8]) -> Option<Message> {
    if bytes.len() < HEADER || bytes[0] != VERSION || (bytes.len() - HEADER) % 8 != 0 {
        return None;
    }
    let kind = Kind::from_byte(bytes[1])?;
    let u64_at = |i: usize| u64::from_le_bytes(bytes[i..i + 8].try_into().expect("8 bytes"));
    Some(Message {
        kind,
        sender: u64_at(2),
        generation: u64_at(10),
        words: (HEADER..bytes.len()).step_by(8).map(u64_at).collect(),
    })
}

/// The body of a [`Kind::Bits`] message: the bits one write set in a generation, with the
/// versions it left: `[groups n][(group, all) × n][segments m][(segment, version) × m]
/// [bit]*`. A receiver that held the group at `all - 1` (or the segment at `version - 1`)
/// holds it at the new version once it has these bits, and need not pull it.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct BitsMessage {
    pub(crate) groups: Vec<(u64, u64)>,
    pub(crate) segments: Vec<(u64, u64)>,
    pub(crate) bits: Vec<u64>,
}

impl BitsMessage {
    pub(crate) fn to_words(&self) -> Vec<u64> {
        let mut words =
            Vec::with_capacity(2 + 2 * (self.groups.len() + self.segments.len()) + self.bits.len());
        words.push(self.groups.len() as u64);
        words.extend(self.groups.iter().flat_map(|&(a, b)| [a, b]));
        words.push(self.segments.len() as u64);
        words.extend(self.segments.iter().flat_map(|&(a, b)| [a, b]));
        words.extend_from_slice(&self.bits);
        words
    }

    pub(crate) fn from_words(words: &[u64]) -> Option<Self> {
        fn pairs(words: &mut &[u64]) -> Option<Vec<(u64, u64)>> {
            let (&n, rest) = words.split_first()?;
            let n = usize::try_from(n).ok()?;
            let len = n.checked_mul(2)?;
            if rest.len() < len {
                return None;
            }
            let (these, rest) = rest.split_at(len);
            *words = rest;
            Some(these.chunks_exact(2).map(|p| (p[0], p[1])).collect())
        }
        let mut rest = words;
        let groups = pairs(&mut rest)?;
        let segments = pairs(&mut rest)?;
        Some(Self {
            groups,
            segments,
            bits: rest.to_vec(),
        })
    }
}

/// The words of `bytes` (little-endian; a short tail is zero-padded).
pub(crate) fn bytes_to_words(bytes: &[u8], max_words: usize) -> Vec<u64> {
    let mut words: Vec<u64> = bytes
        .chunks(8)
        .take(max_words)
        .map(|chunk| {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            u64::from_le_bytes(word)
        })
        .collect();
    while words.last() == Some(&0) {
        words.pop();
    }
    words
}

#[cfg(test)]
mod tests {
    #[test]
    fn prefixes_that_would_share_another_fleets_keys_are_refused() {
        for bad in ["", "a:g1:0", "myapp:users:g12:3", "{a}", "a}b"] {
            assert!(super::refuse_prefix(bad).is_some(), "{bad:?} accepted");
        }
        for good in [
            "a",
            "myapp:users",
            "a:g1",
            "a:gx:0",
            "a:g1:x",
            "g1:0",
            "bloom-guard:users",
        ] {
            assert_eq!(super::refuse_prefix(good), None, "{good:?} refused");
        }
    }

    use super::*;

    #[test]
    fn messages_round_trip() {
        let bytes = encode(Kind::Bits, 7, 3, &[1, 2, u64::MAX]);
        let message = decode(&bytes).unwrap();
        assert_eq!(
            message,
            Message {
                kind: Kind::Bits,
                sender: 7,
                generation: 3,
                words: vec![1, 2, u64::MAX]
            }
        );
        assert!(decode(&bytes[..bytes.len() - 1]).is_none());
        assert!(decode(b"").is_none());
        for kind in [
            Kind::Tick,
            Kind::Committed,
            Kind::Leaving,
            Kind::Member,
            Kind::Ping,
        ] {
            assert_eq!(decode(&encode(kind, 1, 2, &[3])).unwrap().kind, kind);
        }
        let mut unknown = encode(Kind::Bits, 1, 2, &[]);
        unknown[1] = 99;
        assert!(decode(&unknown).is_none());
    }

    #[test]
    fn bits_messages_round_trip_and_reject_truncation() {
        let message = BitsMessage {
            groups: vec![(0, 7), (3, 1)],
            segments: vec![(5, 2), (200, 9)],
            bits: vec![1, 2, 3],
        };
        let words = message.to_words();
        assert_eq!(BitsMessage::from_words(&words), Some(message));
        assert!(BitsMessage::from_words(&words[..3]).is_none());
        assert!(BitsMessage::from_words(&[u64::MAX]).is_none());
        assert_eq!(
            BitsMessage::from_words(&[0, 0]),
            Some(BitsMessage::default())
        );
    }

    #[test]
    fn groups_of_segments_share_one_hash_tag() {
        let keys = Keys::new("p");
        assert_eq!(keys.segment(3, 0), "{p:g3:0}:seg0");
        assert_eq!(keys.segment(3, 64), "{p:g3:1}:seg64");
        assert_eq!(keys.versions(3, 1), "{p:g3:1}:ver");
        assert_eq!(keys.config(), "{p}:config");
    }

    #[test]
    fn redis_numbers_bits_from_the_top_of_each_byte() {
        assert_eq!(redis_bit(0, 1024), (0, 7));
        assert_eq!(redis_bit(7, 1024), (0, 0));
        assert_eq!(redis_bit(8, 1024), (0, 15));
        assert_eq!(redis_bit(63, 1024), (0, 56));
        // Segments of 16 bytes: bit 128 is the first of segment 1.
        assert_eq!(redis_bit(128, 16), (1, 7));
        assert_eq!(redis_bit(130, 16), (1, 5));
    }

    #[test]
    fn short_tails_are_zero_padded() {
        assert_eq!(bytes_to_words(&[1, 0, 0, 0, 0, 0, 0, 0, 2], 9), [1, 2]);
        assert_eq!(bytes_to_words(&[0; 16], 2), Vec::<u64>::new());
    }
}
