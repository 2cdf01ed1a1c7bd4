//! Where a key's probes land: the three layouts and the probe arithmetic they share.
//!
//! **The bit placement is the file format**: a saved filter is its bits, and a key is found
//! in it only where these functions put it. A change to where any layout places a bit (the
//! reduction, the slot fields, the remix, the probe sequence) needs a new format tag and a new
//! golden file (`tests/format.rs`: the `golden_v1_*_still_loads` tests fail on any change to
//! the placement of a format they cover).

use std::fmt;
use std::str::FromStr;

use crate::hasher::{KeyHash, mix};

/// How a key's `k` bits are spread over the bit array.
///
/// `#[non_exhaustive]`: a layout added later is a new format tag and a new variant, and
/// must not break a `match` written today.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
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
    /// One 512-bit block per key like Blocked, with exactly one bit in each of the block's
    /// eight 64-bit words (`k` is always [`SPLIT_HASHES`](crate::params::SPLIT_HASHES)): the
    /// eight offsets come from one multiply of the hash and are tested in a few vector
    /// instructions, the fastest lookup here. Costs about 2% more bits than Blocked at
    /// 1%–0.1%, 7% at 0.01% and 22% at 10%
    /// ([`params::optimal_split_block`](crate::params::optimal_split_block)).
    SplitBlock,
}

impl Layout {
    pub(crate) fn to_byte(self) -> u8 {
        match self {
            Layout::Classic => 0,
            Layout::Blocked => 1,
            Layout::SplitBlock => 2,
        }
    }

    pub(crate) fn from_byte(b: u8) -> Option<Self> {
        match b {
            0 => Some(Layout::Classic),
            1 => Some(Layout::Blocked),
            2 => Some(Layout::SplitBlock),
            _ => None,
        }
    }
}

impl fmt::Display for Layout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Layout::Blocked => "blocked",
            Layout::Classic => "classic",
            Layout::SplitBlock => "split-block",
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
    /// None of `blocked`, `classic`, `split-block` (in any case).
    #[error("unknown layout {found:?}: expected \"blocked\", \"classic\" or \"split-block\"")]
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
            "split-block" | "splitblock" | "split_block" => Ok(Layout::SplitBlock),
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
/// Shared by every blocked structure (bits here, counters in the counting variant). The bit
/// placement is the file format: a change needs a new format tag and golden file
/// (`tests/format.rs`, `golden_v1_blocked_still_loads`, `golden_v1_blocked_k20_still_loads`).
#[inline(always)]
pub(crate) fn for_each_in_block(h2: u64, k: u32, slots_log2: u32, mut visit: impl FnMut(usize)) {
    let mask = (1u64 << slots_log2) - 1;
    let per_word = 64 / slots_log2;
    let mut bits = h2;
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
            bits = mix(h2.wrapping_add(u64::from(i).wrapping_mul(0x9E37_79B9_7F4A_7C15)));
            left = per_word;
        }
        visit((bits & mask) as usize);
        bits >>= slots_log2;
        left -= 1;
    }
}

/// The eight bit offsets (in `0..512`) of a key within its SplitBlock block, one in each
/// 64-bit word: offset `i` is `64·i + f_i`, where `f_i` is the 6-bit field
/// `(word >> (16 + 6i)) & 63` of [`KeyHash::split_word`](crate::hasher::KeyHash::split_word).
/// The low 16 bits of the product are skipped: bit `j` of a product depends only on bits
/// `0..=j` of its factors, so the low bits are the weakest. The bit placement is the file
/// format: a change needs a new format tag and golden file (`tests/format.rs`,
/// `golden_v1_split_block_still_loads`).
#[inline(always)]
pub(crate) fn for_each_in_split_block(word: u64, mut visit: impl FnMut(usize)) {
    for i in 0..crate::params::SPLIT_HASHES as usize {
        visit(64 * i + split_field(word, i));
    }
}

/// Field `i` (0–7) of a SplitBlock word: the bit within the block's word `i`.
#[inline(always)]
pub(crate) fn split_field(word: u64, i: usize) -> usize {
    ((word >> (SPLIT_FIRST_BIT + 6 * i as u32)) & 63) as usize
}

/// The bit of a SplitBlock word where field 0 starts (fields 0–7 use bits 16–63).
pub(crate) const SPLIT_FIRST_BIT: u32 = 16;

/// The offsets (in `0..512`) of a key's bits within its block, in a Blocked or SplitBlock
/// array: the one place that tells the two placements apart for everything but the lookup.
#[inline(always)]
pub(crate) fn for_each_in_line(layout: Layout, hash: KeyHash, k: u32, visit: impl FnMut(usize)) {
    match layout {
        Layout::SplitBlock => for_each_in_split_block(hash.split_word(), visit),
        _ => {
            debug_assert_eq!(layout, Layout::Blocked, "a layout with blocks");
            for_each_in_block(hash.h2(), k, 9, visit)
        }
    }
}

/// The `k` slot indices (each in `0..num_slots`) of a key in a Classic array, by enhanced
/// double hashing (Dillinger & Manolios): `x += y; y += i`. The bit placement is the file
/// format: a change needs a new format tag and golden file (`tests/format.rs`,
/// `golden_v1_classic_still_loads`).
#[inline(always)]
pub(crate) fn for_each_classic(
    hash: KeyHash,
    k: u32,
    num_slots: u64,
    mut visit: impl FnMut(u64) -> bool,
) {
    let mut x = hash.h1;
    let mut y = hash.h2();
    for i in 0..k {
        if !visit(reduce(x, num_slots)) {
            return;
        }
        x = x.wrapping_add(y);
        y = y.wrapping_add(u64::from(i) + 1);
    }
}

/// Every slot (in `0..num_slots`) a key probes, in any layout, until `visit` returns
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
        Layout::Blocked | Layout::SplitBlock => {
            let first =
                reduce(hash.h1, num_slots / crate::params::BLOCK_BITS) * crate::params::BLOCK_BITS;
            let mut go = true;
            for_each_in_line(layout, hash, k, |offset| {
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
        let mut seen = Vec::new();
        for_each_in_block(0x0fed_cba9_8765_4321, 20, 9, |s| seen.push(s));
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
