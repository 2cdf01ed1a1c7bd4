//! Where a key's probes land: the two layouts and the probe arithmetic they share.

use std::fmt;
use std::str::FromStr;

use crate::hasher::{KeyHash, mix};

/// How a key's `k` bits are spread over the bit array.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Layout {
    /// All of a key's bits fall in one 512-bit block, a 64-byte cache line: a lookup costs
    /// one memory access whatever `k` is. Needs roughly 10% more bits than Classic for the
    /// same false-positive rate. The default: pick it unless memory is tighter than time.
    #[default]
    Blocked,
    /// Bits anywhere in the array (the textbook filter, sized exactly by
    /// [`params::optimal`](crate::params::optimal)): the fewest bits for a given rate, but up
    /// to `k` cache misses per lookup on filters larger than the CPU cache.
    Classic,
}

impl Layout {
    pub(crate) fn to_byte(self) -> u8 {
        match self {
            Layout::Classic => 0,
            Layout::Blocked => 1,
        }
    }

    pub(crate) fn from_byte(b: u8) -> Option<Self> {
        match b {
            0 => Some(Layout::Classic),
            1 => Some(Layout::Blocked),
            _ => None,
        }
    }
}

impl fmt::Display for Layout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Layout::Blocked => "blocked",
            Layout::Classic => "classic",
        })
    }
}

/// Why text is not a [`Layout`].
///
/// ```
/// use bloom_core::{Layout, ParseLayoutError};
///
/// assert_eq!("classic".parse::<Layout>(), Ok(Layout::Classic));
/// assert_eq!(
///     "fast".parse::<Layout>(),
///     Err(ParseLayoutError::Unknown { found: "fast".into() })
/// );
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ParseLayoutError {
    /// Neither `blocked` nor `classic` (in any case).
    #[error("unknown layout {found:?}: expected \"blocked\" or \"classic\"")]
    Unknown {
        /// The text given.
        found: String,
    },
}

impl FromStr for Layout {
    type Err = ParseLayoutError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "blocked" => Ok(Layout::Blocked),
            "classic" => Ok(Layout::Classic),
            _ => Err(ParseLayoutError::Unknown {
                found: s.to_owned(),
            }),
        }
    }
}

/// `hash · n / 2⁶⁴`: maps a uniform 64-bit hash onto `0..n` without a division
/// (Lemire's multiply-shift reduction).
#[inline(always)]
pub(crate) fn reduce(hash: u64, n: u64) -> u64 {
    ((u128::from(hash) * u128::from(n)) >> 64) as u64
}

/// The `k` slot indices (each in `0..slots_per_block`, a power of two) of a key within its
/// block. Slot offsets are cut as independent fields from `h2`; when it runs out of bits a
/// fresh 64 bits are mixed from both halves, so `k` may be as large as wanted.
///
/// Shared by every blocked structure (bits here, counters in the counting variant).
#[inline(always)]
pub(crate) fn for_each_in_block(
    hash: KeyHash,
    k: u32,
    slots_log2: u32,
    mut visit: impl FnMut(usize),
) {
    let mask = (1u64 << slots_log2) - 1;
    let per_word = 64 / slots_log2;
    let mut bits = hash.h2;
    if k <= per_word {
        // The common case (k ≤ 7 for bits): every offset comes from `h2`, no refill check.
        for _ in 0..k {
            visit((bits & mask) as usize);
            bits >>= slots_log2;
        }
        return;
    }
    let mut left = per_word;
    for i in 0..k {
        if left == 0 {
            bits = mix(hash
                .h2
                .wrapping_add(u64::from(i).wrapping_mul(0x9E37_79B9_7F4A_7C15)));
            left = per_word;
        }
        visit((bits & mask) as usize);
        bits >>= slots_log2;
        left -= 1;
    }
}

/// The `k` slot indices (each in `0..num_slots`) of a key in a Classic array, by enhanced
/// double hashing (Dillinger & Manolios): `x += y; y += i`.
#[inline(always)]
pub(crate) fn for_each_classic(
    hash: KeyHash,
    k: u32,
    num_slots: u64,
    mut visit: impl FnMut(u64) -> bool,
) {
    let mut x = hash.h1;
    let mut y = hash.h2;
    for i in 0..k {
        if !visit(reduce(x, num_slots)) {
            return;
        }
        x = x.wrapping_add(y);
        y = y.wrapping_add(u64::from(i) + 1);
    }
}

/// Every slot (in `0..num_slots`) a key probes, in either layout, until `visit` returns
/// false. The structures other than the plain filter's fast path use this, so every variant
/// puts a key in exactly the slots where [`BloomFilter`](crate::BloomFilter) puts its bits.
#[inline(always)]
pub(crate) fn for_each_slot(
    layout: Layout,
    hash: KeyHash,
    k: u32,
    num_slots: u64,
    mut visit: impl FnMut(u64) -> bool,
) {
    match layout {
        Layout::Blocked => {
            let first =
                reduce(hash.h1, num_slots / crate::params::BLOCK_BITS) * crate::params::BLOCK_BITS;
            let mut go = true;
            for_each_in_block(hash, k, 9, |offset| {
                if go {
                    go = visit(first + offset as u64);
                }
            });
        }
        Layout::Classic => for_each_classic(hash, k, num_slots, visit),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reduce_stays_in_range() {
        for n in [1u64, 2, 3, 1000, u64::MAX] {
            assert!(reduce(u64::MAX, n) < n);
            assert_eq!(reduce(0, n), 0);
        }
    }

    #[test]
    fn in_block_probes_use_fresh_bits_past_the_first_word() {
        let h = KeyHash {
            h1: 0x1234_5678_9abc_def0,
            h2: 0x0fed_cba9_8765_4321,
        };
        let mut seen = Vec::new();
        for_each_in_block(h, 20, 9, |s| seen.push(s));
        assert_eq!(seen.len(), 20);
        assert!(seen.iter().all(|&s| s < 512));
        // Probes 8.. come from a remix, not a repeat of probes 1..
        assert_ne!(seen[..7], seen[7..14]);
    }

    #[test]
    fn layout_parses_and_prints() {
        assert_eq!("Blocked".parse::<Layout>().unwrap(), Layout::Blocked);
        assert_eq!(
            Layout::Classic.to_string().parse::<Layout>().unwrap(),
            Layout::Classic
        );
        assert!("fast".parse::<Layout>().is_err());
    }
}
