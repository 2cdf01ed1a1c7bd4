//! One bucket: four fingerprints of `f` bits in `4·f − 4` bits, by semi-sorting (Fan et
//! al. 2014, §5.2).
//!
//! The four fingerprints are ordered by their low four bits (their "nibbles"). Four nibbles
//! in non-decreasing order are one of C(19, 4) = 3,876 multisets, so a 12-bit code names them
//! instead of 16 bits; the high `f − 4` bits of each fingerprint follow in the same order:
//!
//! ```text
//! bit 0           12            12+(f−4)       12+2(f−4)      12+3(f−4)    4f−4
//!     | code (12) | high₀ (f−4) | high₁ (f−4) | high₂ (f−4) | high₃ (f−4) |
//! ```
//!
//! Fingerprint 0 is an empty slot, so the empty bucket is all zero bits. Which fingerprints a
//! bucket holds is its content; the order among equal nibbles is not, and nothing depends on
//! it. Rules (tests in this file): every multiset of four fingerprints round-trips
//! (`every_bucket_round_trips`); the code table is sorted, so encoding is a binary search
//! (`codes_are_sorted_and_complete`).

/// Slots per bucket. The format records it; this crate writes and reads only 4.
pub(crate) const SLOTS: usize = 4;

/// Nibble multisets: four nibbles in non-decreasing order.
pub(crate) const CODES: usize = 3_876;

/// Code → the four nibbles `n₀ ≤ n₁ ≤ n₂ ≤ n₃`, packed `n₀ << 12 | n₁ << 8 | n₂ << 4 | n₃`, in
/// increasing order; padded to 4,096 entries so a 12-bit index needs no bounds check (codes
/// from 3,876 on never occur: a file holding one is refused).
static DECODE: [u16; 4096] = decode_table();

const fn decode_table() -> [u16; 4096] {
    let mut table = [0u16; 4096];
    let mut i = 0;
    let mut a = 0;
    while a < 16 {
        let mut b = a;
        while b < 16 {
            let mut c = b;
            while c < 16 {
                let mut d = c;
                while d < 16 {
                    table[i] = ((a << 12) | (b << 8) | (c << 4) | d) as u16;
                    i += 1;
                    d += 1;
                }
                c += 1;
            }
            b += 1;
        }
        a += 1;
    }
    table
}

/// `RANK[k][x]`: how many non-decreasing sequences of `4 − k` nibbles start below `x`, the
/// first `k` of four being fixed (a sequence of `j` nibbles all ≥ `y` is one of
/// `C(16 − y + j − 1, j)`); so a sorted quadruple's code, its rank in [`DECODE`], is a sum of
/// three lookups and a difference (`encode_ranks_like_the_table`).
static RANK: [[u16; 17]; 3] = rank_table();

const fn rank_table() -> [[u16; 17]; 3] {
    // Sequences of `len` nibbles, each ≥ `lo`.
    const fn sequences(len: u32, lo: u32) -> u32 {
        let n = 16 - lo + len - 1;
        let mut r = 1;
        let mut i = 0;
        while i < len {
            r = r * (n - i) / (i + 1);
            i += 1;
        }
        r
    }
    let mut table = [[0u16; 17]; 3];
    let mut k = 0;
    while k < 3 {
        let mut x = 0;
        while x < 16 {
            // Sequences whose first free nibble is `x`: the rest, 3 − k of them, are ≥ x.
            table[k][x + 1] = table[k][x] + sequences(3 - k as u32, x as u32) as u16;
            x += 1;
        }
        k += 1;
    }
    table
}

/// The code of the sorted nibbles `a ≤ b ≤ c ≤ d`.
#[inline]
fn code_of(a: usize, b: usize, c: usize, d: usize) -> u16 {
    RANK[0][a] + (RANK[1][b] - RANK[1][a]) + (RANK[2][c] - RANK[2][b]) + (d - c) as u16
}

/// The shape of every bucket of one filter: its fingerprints' width `f`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Shape {
    /// `f`, in [`MIN_FINGERPRINT_BITS`], [`MAX_FINGERPRINT_BITS`].
    pub(crate) fingerprint_bits: u32,
}

/// A fingerprint needs at least one bit above its nibble.
pub(crate) const MIN_FINGERPRINT_BITS: u32 = 5;
/// A bucket of `4·17 − 4 = 64` bits: the widest a two-word read can hold.
pub(crate) const MAX_FINGERPRINT_BITS: u32 = 17;

impl Shape {
    /// Bits of one bucket: `4·f − 4`.
    #[inline]
    pub(crate) fn bucket_bits(self) -> u32 {
        SLOTS as u32 * self.fingerprint_bits - 4
    }

    #[inline]
    fn high_bits(self) -> u32 {
        self.fingerprint_bits - 4
    }

    /// The largest fingerprint: they are 1 ..= 2^f − 1 (0 is an empty slot).
    #[inline]
    pub(crate) fn max_fingerprint(self) -> u32 {
        (1u32 << self.fingerprint_bits) - 1
    }

    /// The four fingerprints of `bucket` (0 for an empty slot).
    #[inline]
    pub(crate) fn decode(self, bucket: u64) -> [u32; SLOTS] {
        let nibbles = DECODE[(bucket & 0xFFF) as usize];
        let high = self.high_bits();
        let mask = (1u64 << high) - 1;
        let mut out = [0u32; SLOTS];
        for (j, slot) in out.iter_mut().enumerate() {
            let nibble = (nibbles >> (12 - 4 * j)) & 0xF;
            let hi = (bucket >> (12 + j as u32 * high)) & mask;
            *slot = ((hi as u32) << 4) | u32::from(nibble);
        }
        out
    }

    /// Whether `bucket` holds `fp` (≥ 1): [`decode`](Self::decode) then a search, without
    /// building the four fingerprints. The slots whose nibble equals `fp`'s are found in one
    /// step on the packed nibbles (a nibble is zero exactly when bit 3 of
    /// `((x & 7) + 7) | x` is clear, with no carry between nibbles); only their high bits are
    /// compared (`holds_agrees_with_decode`).
    #[inline]
    pub(crate) fn holds(self, bucket: u64, fp: u32) -> bool {
        let nibbles = u32::from(DECODE[(bucket & 0xFFF) as usize]);
        let x = nibbles ^ ((fp & 0xF) * 0x1111);
        let mut equal = !(((x & 0x7777) + 0x7777) | x) & 0x8888;
        let high = self.high_bits();
        let mask = (1u64 << high) - 1;
        let want = u64::from(fp >> 4);
        while equal != 0 {
            // Bit 15 is slot 0's nibble, bit 3 slot 3's.
            let slot = (15 - equal.trailing_zeros()) / 4;
            if (bucket >> (12 + slot * high)) & mask == want {
                return true;
            }
            equal &= equal - 1;
        }
        false
    }

    /// The bucket holding `fingerprints` (0 for an empty slot), in any order.
    pub(crate) fn encode(self, mut fingerprints: [u32; SLOTS]) -> u64 {
        fingerprints.sort_unstable_by_key(|fp| fp & 0xF);
        let [a, b, c, d] = fingerprints.map(|fp| (fp & 0xF) as usize);
        let code = code_of(a, b, c, d);
        let high = self.high_bits();
        fingerprints
            .iter()
            .enumerate()
            .fold(code as u64, |acc, (j, fp)| {
                acc | (u64::from(fp >> 4) << (12 + j as u32 * high))
            })
    }

    /// Whether `bucket` is one this crate could have written: a code below 3,876 and no bit
    /// set above `4·f − 4`.
    pub(crate) fn is_valid(self, bucket: u64) -> bool {
        let bits = self.bucket_bits();
        (bucket & 0xFFF) < CODES as u64 && (bits == 64 || bucket >> bits == 0)
    }
}

/// How many slots of `fingerprints` hold `fp`.
#[inline]
pub(crate) fn count(fingerprints: &[u32; SLOTS], fp: u32) -> u32 {
    fingerprints.iter().map(|&x| u32::from(x == fp)).sum()
}

/// `fingerprints` with `fp` in a free slot, or `None` if none is free.
#[inline]
pub(crate) fn with_added(mut fingerprints: [u32; SLOTS], fp: u32) -> Option<[u32; SLOTS]> {
    let free = fingerprints.iter().position(|&x| x == 0)?;
    fingerprints[free] = fp;
    Some(fingerprints)
}

/// `fingerprints` with one copy of `fp` emptied, or `None` if it holds none.
#[inline]
pub(crate) fn with_removed(mut fingerprints: [u32; SLOTS], fp: u32) -> Option<[u32; SLOTS]> {
    let at = fingerprints.iter().position(|&x| x == fp)?;
    fingerprints[at] = 0;
    Some(fingerprints)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_sorted_and_complete() {
        let codes = &DECODE[..CODES];
        assert!(codes.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(codes[0], 0);
        assert_eq!(codes[CODES - 1], 0xFFFF);
        assert!(DECODE[CODES..].iter().all(|&c| c == 0));
    }

    #[test]
    fn every_bucket_round_trips() {
        for f in MIN_FINGERPRINT_BITS..=MAX_FINGERPRINT_BITS {
            let shape = Shape {
                fingerprint_bits: f,
            };
            let max = shape.max_fingerprint();
            let mut state = 0x9E37_79B9_7F4A_7C15u64 ^ u64::from(f);
            for _ in 0..20_000 {
                let mut fps = [0u32; SLOTS];
                for fp in &mut fps {
                    state = crate::hasher::mix(state);
                    // A quarter of slots empty, and the extremes often.
                    *fp = match state % 8 {
                        0 | 1 => 0,
                        2 => max,
                        3 => 1,
                        _ => (state >> 32) as u32 % max + 1,
                    };
                }
                let bucket = shape.encode(fps);
                assert!(shape.is_valid(bucket), "f={f} {fps:?}");
                let mut back = shape.decode(bucket);
                let mut want = fps;
                back.sort_unstable();
                want.sort_unstable();
                assert_eq!(back, want, "f={f}");
            }
        }
        assert_eq!(
            Shape {
                fingerprint_bits: 9
            }
            .encode([0; SLOTS]),
            0
        );
    }

    #[test]
    fn encode_ranks_like_the_table() {
        for (code, &packed) in DECODE[..CODES].iter().enumerate() {
            let n = |i: u32| usize::from((packed >> (12 - 4 * i)) & 0xF);
            assert_eq!(
                usize::from(code_of(n(0), n(1), n(2), n(3))),
                code,
                "{packed:04x}"
            );
        }
    }

    #[test]
    fn holds_agrees_with_decode() {
        for f in MIN_FINGERPRINT_BITS..=MAX_FINGERPRINT_BITS {
            let shape = Shape {
                fingerprint_bits: f,
            };
            let max = shape.max_fingerprint();
            let mut state = 0x2545_F491_4F6C_DD1Du64 ^ u64::from(f);
            for _ in 0..20_000 {
                let mut fps = [0u32; SLOTS];
                for fp in &mut fps {
                    state = crate::hasher::mix(state);
                    *fp = if state % 4 == 0 {
                        0
                    } else {
                        (state >> 32) as u32 % max + 1
                    };
                }
                let bucket = shape.encode(fps);
                state = crate::hasher::mix(state);
                // Probe its own fingerprints, ones sharing a nibble with them, and others.
                let probes = fps.iter().flat_map(|&fp| [fp, fp ^ 0x10, fp ^ 0x1]).chain([
                    (state >> 40) as u32 % max + 1,
                    1,
                    max,
                ]);
                for probe in probes.filter(|&p| p >= 1 && p <= max) {
                    assert_eq!(
                        shape.holds(bucket, probe),
                        fps.contains(&probe),
                        "f={f} {fps:?} {probe}"
                    );
                }
            }
        }
    }

    #[test]
    fn a_code_past_the_table_or_a_stray_high_bit_is_invalid() {
        let shape = Shape {
            fingerprint_bits: 10,
        };
        assert!(!shape.is_valid(CODES as u64));
        assert!(!shape.is_valid(1 << 36));
        assert!(shape.is_valid(shape.encode([3, 1023, 0, 17])));
        assert!(
            Shape {
                fingerprint_bits: 17
            }
            .is_valid(!0xFFF)
        );
    }
}
