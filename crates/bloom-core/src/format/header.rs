//! The 64-byte header every filter file starts with.
//!
//! The first twelve bytes are the same for every kind: [`MAGIC`], [`FORMAT_VERSION`], the
//! [`FilterKind`] and the layout. The other 52 are six fields of the same types at the same
//! places in every kind, each kind giving them its own meaning:
//!
//! | bytes  | type | plain, counting          | scalable           | cuckoo                  | windowed               |
//! |--------|------|--------------------------|--------------------|-------------------------|------------------------|
//! | 12..16 | u32  | k                        | S, stages          | f, slots per bucket     | N, window kind         |
//! | 16..24 | u64  | m                        | n₀                 | m, buckets              | W, the window's length |
//! | 24..40 | u128 | hash key                 | hash key           | hash key                | hash key               |
//! | 40..48 | u64  | capacity                 | growth (f64)       | capacity                | n, keys per window     |
//! | 48..56 | u64  | target FPR (f64)         | p (f64)            | target FPR (f64)        | p (f64)                |
//! | 56..64 | u64  | W, words in the body     | r (f64)            | W, words in the body    | T, the period          |
//!
//! A cuckoo filter has no Bloom layout: its layout byte is 0 and a reader refuses any other.

use super::DecodeError;
use crate::Layout;
use crate::builder::Parts;
use crate::hasher::KeyHasher;
use crate::scalable::Config;
use crate::sizing::{check_hashes, round_bits};

/// The first eight bytes of every file. The high byte catches 7-bit transfers, the CR LF pair
/// newline translation, 0x1A a DOS `type` (the same trick as PNG's signature).
pub const MAGIC: [u8; 8] = [0x89, b'B', b'L', b'M', b'\r', b'\n', 0x1A, b'\n'];

/// The format version this crate writes. It reads every version up to this one.
pub const FORMAT_VERSION: u16 = 1;

/// Bytes of every kind's header.
pub(crate) const HEADER_LEN: usize = 64;

/// Where the version is: after the magic.
const VERSION_OFFSET: usize = MAGIC.len();
/// Where the kind byte is: after the version. The layout byte follows it.
pub(crate) const KIND_OFFSET: usize = VERSION_OFFSET + 2;

/// What a filter file holds: its header's kind byte. A reader of one kind refuses the others.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum FilterKind {
    /// Kind 0, one bit per slot: a [`BloomFilter`](crate::BloomFilter).
    Plain = 0,
    /// Kind 1, a 4-bit counter per slot: a [`CountingBloomFilter`](crate::CountingBloomFilter).
    Counting = 1,
    /// Kind 2, a list of plain filters: a [`ScalableBloomFilter`](crate::ScalableBloomFilter).
    Scalable = 2,
    /// Kind 3, fingerprints in buckets: a [`CuckooFilter`](crate::CuckooFilter).
    Cuckoo = 3,
    /// Kind 4, a ring of plain filters over a window:
    /// a [`WindowedFilter`](crate::WindowedFilter).
    Windowed = 4,
}

impl FilterKind {
    pub(crate) fn from_byte(b: u8) -> Option<Self> {
        match b {
            0 => Some(Self::Plain),
            1 => Some(Self::Counting),
            2 => Some(Self::Scalable),
            3 => Some(Self::Cuckoo),
            4 => Some(Self::Windowed),
            _ => None,
        }
    }

    /// For error messages.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::Plain => "plain Bloom filter",
            Self::Counting => "counting Bloom filter",
            Self::Scalable => "scalable Bloom filter",
            Self::Cuckoo => "cuckoo filter",
            Self::Windowed => "windowed Bloom filter",
        }
    }
}

/// The kind byte, if `bytes` reaches it and it is a known one; nothing else is checked.
pub(crate) fn kind_at(bytes: &[u8]) -> Option<FilterKind> {
    bytes
        .get(KIND_OFFSET)
        .copied()
        .and_then(FilterKind::from_byte)
}

/// The six fields after the shared twelve bytes, in order (the table above names them).
pub(crate) type Fields = (u32, u64, u128, u64, u64, u64);

pub(crate) fn encode(kind: FilterKind, layout: u8, fields: Fields) -> [u8; HEADER_LEN] {
    let (a, b, seed, c, d, e) = fields;
    let mut h = [0u8; HEADER_LEN];
    let pieces: [&[u8]; 10] = [
        &MAGIC,
        &FORMAT_VERSION.to_le_bytes(),
        &[kind as u8],
        &[layout],
        &a.to_le_bytes(),
        &b.to_le_bytes(),
        &seed.to_le_bytes(),
        &c.to_le_bytes(),
        &d.to_le_bytes(),
        &e.to_le_bytes(),
    ];
    let mut at = 0;
    for piece in pieces {
        h[at..at + piece.len()].copy_from_slice(piece);
        at += piece.len();
    }
    debug_assert_eq!(at, HEADER_LEN);
    h
}

/// The six fields of a header known to be whole.
pub(crate) fn fields(h: &[u8]) -> Fields {
    let u64_at = |i: usize| u64::from_le_bytes(h[i..i + 8].try_into().unwrap());
    (
        u32::from_le_bytes(h[12..16].try_into().unwrap()),
        u64_at(16),
        u128::from_le_bytes(h[24..40].try_into().unwrap()),
        u64_at(40),
        u64_at(48),
        u64_at(56),
    )
}

/// Checks the magic. A prefix of it passes, so that a short non-filter reads as `BadMagic`
/// and a short filter as `Truncated`.
pub(crate) fn check_magic(bytes: &[u8]) -> Result<(), DecodeError> {
    let len = bytes.len().min(MAGIC.len());
    if bytes[..len] == MAGIC[..len] {
        Ok(())
    } else {
        Err(DecodeError::BadMagic)
    }
}

/// The version and kind of a header whose magic was checked and that reaches the kind byte.
pub(crate) fn version_and_kind(bytes: &[u8]) -> Result<(u16, FilterKind), DecodeError> {
    let version = u16::from_le_bytes([bytes[VERSION_OFFSET], bytes[VERSION_OFFSET + 1]]);
    if version == 0 || version > FORMAT_VERSION {
        return Err(DecodeError::UnsupportedVersion { found: version });
    }
    let found = bytes[KIND_OFFSET];
    let kind = FilterKind::from_byte(found).ok_or(DecodeError::UnsupportedKind { found })?;
    Ok((version, kind))
}

/// Checks what every kind's header shares, in the documented order: magic, length (at least
/// `min_len`), version, kind (another kind lays out the rest differently: stop there).
pub(crate) fn decode_kind(
    bytes: &[u8],
    min_len: usize,
    expected: FilterKind,
) -> Result<(), DecodeError> {
    check_magic(bytes)?;
    if bytes.len() < min_len {
        return Err(DecodeError::Truncated {
            needed: min_len as u64,
            available: bytes.len() as u64,
        });
    }
    let (_, kind) = version_and_kind(bytes)?;
    if kind != expected {
        return Err(DecodeError::WrongKind {
            expected: expected.name(),
            found: kind.name(),
        });
    }
    Ok(())
}

/// [`decode_kind`], then the layout byte of a Bloom filter's header.
fn decode_shared(
    bytes: &[u8],
    min_len: usize,
    expected: FilterKind,
) -> Result<Layout, DecodeError> {
    decode_kind(bytes, min_len, expected)?;
    let layout = bytes[KIND_OFFSET + 1];
    Layout::from_byte(layout).ok_or(DecodeError::UnknownLayout { found: layout })
}

/// A plain or counting filter's header, parsed and validated.
pub(crate) struct WordsHeader {
    pub(crate) kind: FilterKind,
    pub(crate) parts: Parts,
    pub(crate) num_words: u64,
}

impl WordsHeader {
    pub(crate) fn new(kind: FilterKind, slots_per_word: u64, parts: Parts) -> Self {
        Self {
            kind,
            num_words: parts.slots.div_ceil(slots_per_word),
            parts,
        }
    }

    pub(crate) fn encode(&self) -> [u8; HEADER_LEN] {
        let p = &self.parts;
        encode(
            self.kind,
            p.layout.to_byte(),
            (
                p.hashes,
                p.slots,
                p.hasher.seed(),
                p.capacity.unwrap_or(0),
                p.target_fpr.unwrap_or(0.0).to_bits(),
                self.num_words,
            ),
        )
    }

    /// Parses and validates a header of `kind`, whose words hold `slots_per_word` slots each.
    /// `bytes` may be shorter than a header (see [`check_magic`]).
    pub(crate) fn decode(
        bytes: &[u8],
        kind: FilterKind,
        slots_per_word: u64,
    ) -> Result<Self, DecodeError> {
        let layout = decode_shared(bytes, HEADER_LEN, kind)?;
        let (num_hashes, num_bits, seed, capacity, target_fpr, num_words) = fields(bytes);
        let target_fpr = f64::from_bits(target_fpr);

        if check_hashes(layout, num_hashes).is_err() {
            return Err(DecodeError::Inconsistent(
                "number of hashes is 0, above the maximum, or not the split-block layout's 8",
            ));
        }
        match round_bits(layout, num_bits) {
            Ok(rounded) if rounded == num_bits => {}
            Ok(_) => {
                return Err(DecodeError::Inconsistent(
                    "blocked or split-block layout with bits not a multiple of 512",
                ));
            }
            Err(_) => {
                return Err(DecodeError::Inconsistent(
                    "number of bits is 0 or above the maximum",
                ));
            }
        }
        if num_words != num_bits.div_ceil(slots_per_word) {
            return Err(DecodeError::Inconsistent(
                "word count does not match the number of bits",
            ));
        }
        // Only +0.0 means "not recorded": any other bit pattern must be a real rate, so a
        // file re-encodes to exactly its own bytes.
        if target_fpr.to_bits() != 0 && !(target_fpr > 0.0 && target_fpr < 1.0) {
            return Err(DecodeError::Inconsistent(
                "target false-positive rate outside (0, 1)",
            ));
        }
        Ok(Self {
            kind,
            parts: Parts {
                layout,
                slots: num_bits,
                hashes: num_hashes,
                hasher: KeyHasher::new(seed),
                capacity: (capacity != 0).then_some(capacity),
                target_fpr: (target_fpr.to_bits() != 0).then_some(target_fpr),
            },
            num_words,
        })
    }

    /// W, read from a header whose shared fields were checked (for [`peek`](super::peek())).
    pub(crate) fn num_words_of(bytes: &[u8]) -> u64 {
        fields(bytes).5
    }
}

/// A scalable filter's header: its settings, its hash key and how many stages follow.
pub(crate) struct StagesHeader {
    pub(crate) config: Config,
    pub(crate) seed: u128,
    pub(crate) num_stages: u32,
}

impl StagesHeader {
    pub(crate) fn encode(&self) -> [u8; HEADER_LEN] {
        let c = &self.config;
        encode(
            FilterKind::Scalable,
            c.layout.to_byte(),
            (
                self.num_stages,
                c.initial_capacity,
                self.seed,
                c.growth.to_bits(),
                c.fpr.to_bits(),
                c.tightening.to_bits(),
            ),
        )
    }

    /// Parses a scalable filter's header from a file of at least `min_len` bytes, checking
    /// only the shared fields: the container's checksum comes before its settings' ranges.
    pub(crate) fn decode(bytes: &[u8], min_len: usize) -> Result<Self, DecodeError> {
        let layout = decode_shared(bytes, min_len, FilterKind::Scalable)?;
        let (num_stages, initial_capacity, seed, growth, fpr, tightening) = fields(bytes);
        Ok(Self {
            config: Config {
                initial_capacity,
                fpr: f64::from_bits(fpr),
                growth: f64::from_bits(growth),
                tightening: f64::from_bits(tightening),
                layout,
            },
            seed,
            num_stages,
        })
    }
}
