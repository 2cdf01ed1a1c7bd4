//! The Blocked and SplitBlock lookups' test: are all of a key's bits set in its 512-bit block?
//!
//! **Blocked.**
//! The bits are the ones [`for_each_in_block`](crate::layout::for_each_in_block) names (this
//! module only tests them faster; it never decides where they are): probe `i < 7` is the
//! 9-bit field `i` of `h2`, and probes `7j..7j + 7` are the fields of
//! `mix(h2 + 7j · 0x9E37_79B9_7F4A_7C15)`.
//!
//! Two implementations of the same answer:
//! * [`contains_scalar`], portable: per probe a shift, a mask, a load and a bit test;
//! * on x86_64 with AVX2 (detected at run time, once per filter), `contains_avx2`: the block
//!   is held in two 256-bit registers as sixteen 32-bit words, and one group of up to seven
//!   probes is tested in a handful of vector instructions, whatever `k` is up to 7; it takes
//!   `h1` and computes `h2 = mix(h1)` in vector lanes itself (why: on the function).
//!
//! **SplitBlock** ([`for_each_in_split_block`](crate::layout::for_each_in_split_block)): bit
//! `i` is the 6-bit field `i` of the split word, in the block's 64-bit word `i`. The scalar
//! test is eight shift-and-AND steps; with AVX2 (`contains_split_avx2`) the eight fields are
//! shifted into eight 64-bit lanes by two variable shifts, turned into one-bit masks by two
//! more, and the bits missing from the two halves of the line are OR-ed and checked with
//! one `vptest`: no table, no permutes, no dependence on `k`.
//!
//! **Filters far out of cache** ([`FAR_FILTER_BYTES`] and more) also hash in vector
//! registers ([`KeyHasher::hash_in_lanes`]), and test with the same AVX2 functions.
//!
//! AVX-512 would test a group with fewer instructions still (`vpermq` over the whole line),
//! but its intrinsics and target feature are stable only from Rust 1.89, above this crate's
//! `rust-version`; AVX2 is the widest stable option at 1.85. The one AVX-512 instruction used,
//! the vector hash's `vprolvq`, is inline assembly for that reason.

use crate::Key;
use crate::bit_vector::Line;
use crate::hasher::{KeyHash, KeyHasher};
use crate::sync::Ordering::Relaxed;

/// How a filter hashes a key and tests its block: chosen once, when the filter is made
/// ([`Probe::for_filter_of`]), and kept in the filter so that a lookup pays a predictable
/// branch or two for the choice.
///
/// Two fields rather than one enum of every combination: a four-way match on one byte
/// compiles to a jump table, an indirect branch on every lookup; two small matches compile
/// to compares (bench: `contains_hit/u64/300k` in benches/core.rs).
///
/// The variants are private to this module: a `Probe` that names a SIMD path can only come
/// from [`Probe::for_filter_of`], which is what makes calling that path sound.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Probe {
    test: Kind,
    hash: Hash,
}

/// How the line is tested.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Scalar,
    /// Only constructed after `is_x86_feature_detected!("avx2")` returned true.
    #[cfg(all(target_arch = "x86_64", not(loom)))]
    Avx2,
}

/// How a lookup hashes its key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Hash {
    /// In general-purpose registers ([`KeyHasher::hash`]), before or inside the test.
    Scalar,
    /// In vector registers ([`KeyHasher::hash_in_lanes`]), rotating with two shifts and an
    /// OR: for filters of [`FAR_FILTER_BYTES`] and more. Only with [`Kind::Avx2`].
    #[cfg(all(target_arch = "x86_64", not(loom)))]
    Avx2Lanes,
    /// [`Hash::Avx2Lanes`] rotating with one AVX-512VL `vprolvq`. Only with [`Kind::Avx2`],
    /// and only after [`has_avx512_rotates`] returned true as well.
    #[cfg(all(target_arch = "x86_64", not(loom)))]
    Avx512Lanes,
}

/// Whether this CPU has AVX-512F and AVX-512VL, which the vector hash's one-instruction
/// rotation (`vprolvq` on 128-bit registers) needs.
#[cfg(all(target_arch = "x86_64", not(loom)))]
pub(crate) fn has_avx512_rotates() -> bool {
    std::arch::is_x86_feature_detected!("avx512f")
        && std::arch::is_x86_feature_detected!("avx512vl")
}

/// The size from which a filter's lookups hash in vector registers.
///
/// A lookup in a filter far larger than the CPU cache waits for its line from memory, and
/// what it costs is how many lookups the core can keep waiting at once: their misses
/// overlap. Each waiting lookup holds every register it wrote until it retires, and
/// SipHash-1-3 writes about seventy integer registers for an 8-byte key and a hundred for a
/// 24-byte one, so the integer register file, not the memory, is what bounds the overlap.
/// Hashed in vector registers, which are counted apart, the same lookups overlap more. In
/// cache the vector form is slower, its SipRound being a longer chain. Rule: a filter hashes
/// in vector registers only from the size where that is the faster form, at or above the
/// last-level cache a server leaves a filter (bench: `contains_{hit,miss}/{u64,str}/{1M,50M}`
/// in benches/core.rs, either side of this bound; figures in `benches/README.md`).
pub(crate) const FAR_FILTER_BYTES: usize = 8 << 20;

impl Probe {
    /// The portable fallback, on any CPU (the tests force it to compare the paths).
    pub(crate) const SCALAR: Probe = Probe {
        test: Kind::Scalar,
        hash: Hash::Scalar,
    };

    /// The fastest implementation this CPU runs for a filter of `bytes` bytes of bits.
    /// `is_x86_feature_detected!` caches the CPUID answer process-wide, so this is cheap, and
    /// it is called once per filter.
    pub(crate) fn for_filter_of(bytes: usize) -> Probe {
        let far = bytes >= FAR_FILTER_BYTES;
        #[cfg(all(target_arch = "x86_64", not(loom)))]
        if std::arch::is_x86_feature_detected!("avx2") {
            let hash = if !far {
                Hash::Scalar
            } else if has_avx512_rotates() {
                Hash::Avx512Lanes
            } else {
                Hash::Avx2Lanes
            };
            return Probe {
                test: Kind::Avx2,
                hash,
            };
        }
        // The portable path hashes one way whatever the size.
        let _ = far;
        Probe::SCALAR
    }

    /// The fastest implementation for a filter in cache (the tests compare it with
    /// [`SCALAR`](Self::SCALAR)).
    #[cfg(test)]
    pub(crate) fn detect() -> Probe {
        Probe::for_filter_of(0)
    }

    /// Every SIMD path this CPU runs (the tests compare each with [`SCALAR`](Self::SCALAR)).
    #[cfg(test)]
    pub(crate) fn simd_paths() -> Vec<Probe> {
        let mut paths = vec![
            Probe::for_filter_of(0),
            Probe::for_filter_of(FAR_FILTER_BYTES),
        ];
        paths.retain(|p| p.is_simd());
        // The AVX2 form of the vector hash, which a CPU with AVX-512VL never picks.
        #[cfg(all(target_arch = "x86_64", not(loom)))]
        if let Some(&far) = paths.iter().find(|p| p.hash == Hash::Avx512Lanes) {
            paths.push(Probe {
                hash: Hash::Avx2Lanes,
                ..far
            });
        }
        paths
    }

    /// Whether this path hashes in vector registers (the tests check which path they run).
    #[cfg(test)]
    pub(crate) fn hashes_in_lanes(self) -> bool {
        self.hash != Hash::Scalar
    }

    /// Whether this is a SIMD implementation (the tests check they exercise one).
    #[cfg(test)]
    pub(crate) fn is_simd(self) -> bool {
        self.test != Kind::Scalar
    }

    /// Whether every one of the `k` in-block bits that the key hash `h` names (through its
    /// second word `h.h2()`) is set in `block`.
    #[inline(always)]
    pub(crate) fn contains(self, block: &Line, h: KeyHash, k: u32) -> bool {
        match self.test {
            Kind::Scalar => contains_scalar(block, h.h2(), k),
            #[cfg(all(target_arch = "x86_64", not(loom)))]
            #[allow(unsafe_code)]
            // SAFETY: `contains_avx2` is only unsafe to call because it is compiled for AVX2;
            // `Kind::Avx2` is only ever constructed by `Probe::for_filter_of` after
            // `is_x86_feature_detected!("avx2")` returned true, so this CPU has AVX2.
            Kind::Avx2 => unsafe { x86::contains_avx2(block, h.h1, k) },
        }
    }

    /// A whole Blocked lookup: `key` hashed with `hasher`, its block found by `block_of`,
    /// and its `k` bits tested. Only the vector hashes ([`Hash::Avx2Lanes`],
    /// [`Hash::Avx512Lanes`]) are computed inside the AVX2 function; the scalar one first,
    /// which is the faster order for Blocked (bench: `contains_hit/u64/{300k,1M}` in
    /// benches/core.rs).
    #[inline(always)]
    pub(crate) fn contains_key<'a, K: Key + ?Sized>(
        self,
        hasher: &KeyHasher,
        key: &K,
        block_of: impl FnOnce(KeyHash) -> &'a Line,
        k: u32,
    ) -> bool {
        // One arm per vector hash, each calling its own instance of `contains_far`: the
        // choice of rotations is made here, never inside the lookup (in one function or an
        // out-of-line dispatcher), whose path to the lookup the far-filter benches measure
        // (`contains_hit/u64/50M` in benches/core.rs).
        match self.hash {
            Hash::Scalar => {
                let h = hasher.hash(key);
                self.contains(block_of(h), h, k)
            }
            #[cfg(all(target_arch = "x86_64", not(loom)))]
            #[allow(unsafe_code)]
            // SAFETY: a vector hash comes only with `Kind::Avx2`, which means this CPU has
            // AVX2 (see `contains`).
            Hash::Avx2Lanes => unsafe { x86::contains_far::<false, _>(hasher, key, block_of, k) },
            #[cfg(all(target_arch = "x86_64", not(loom)))]
            #[allow(unsafe_code)]
            // SAFETY: as above, and `Hash::Avx512Lanes` is only constructed after
            // `has_avx512_rotates` returned true.
            Hash::Avx512Lanes => unsafe { x86::contains_far::<true, _>(hasher, key, block_of, k) },
        }
    }

    /// A whole SplitBlock lookup: `key` hashed with `hasher`, its block found by
    /// `block_of`, and its eight bits tested. With AVX2 the hash and `block_of` are inlined
    /// into the AVX2 function (a function compiled for AVX2 cannot be inlined into one that
    /// is not, but the reverse is allowed), so the hash, the block index and the test are
    /// one call's straight-line code rather than a hash, a call and a test (bench:
    /// `contains_hit/u64/{300k,1M}` in benches/core.rs).
    #[inline(always)]
    pub(crate) fn contains_split_key<'a, K: Key + ?Sized>(
        self,
        hasher: &KeyHasher,
        key: &K,
        block_of: impl FnOnce(KeyHash) -> &'a Line,
    ) -> bool {
        match (self.hash, self.test) {
            (Hash::Scalar, Kind::Scalar) => {
                let h = hasher.hash(key);
                contains_split_scalar(block_of(h), h.split_word())
            }
            #[cfg(all(target_arch = "x86_64", not(loom)))]
            #[allow(unsafe_code)]
            // SAFETY: as in `contains`: `Kind::Avx2` means this CPU has AVX2.
            (Hash::Scalar, Kind::Avx2) => unsafe {
                x86::contains_split_located_avx2(|| {
                    let h = hasher.hash(key);
                    (block_of(h), h.split_word())
                })
            },
            // One arm per vector hash, as in `contains_key`.
            #[cfg(all(target_arch = "x86_64", not(loom)))]
            #[allow(unsafe_code)]
            // SAFETY: as in `contains_key`.
            (Hash::Avx2Lanes, _) => unsafe {
                x86::contains_split_far::<false, _>(hasher, key, block_of)
            },
            #[cfg(all(target_arch = "x86_64", not(loom)))]
            #[allow(unsafe_code)]
            // SAFETY: as in `contains_key`.
            (Hash::Avx512Lanes, _) => unsafe {
                x86::contains_split_far::<true, _>(hasher, key, block_of)
            },
        }
    }

    /// Whether the eight bits that the SplitBlock `word` names are all set in `block`.
    #[inline(always)]
    pub(crate) fn contains_split(self, block: &Line, word: u64) -> bool {
        match self.test {
            Kind::Scalar => contains_split_scalar(block, word),
            #[cfg(all(target_arch = "x86_64", not(loom)))]
            #[allow(unsafe_code)]
            // SAFETY: as in `contains`: `Kind::Avx2` means this CPU has AVX2.
            Kind::Avx2 => unsafe { x86::contains_split_avx2(block, word) },
        }
    }

    /// Whether any of `lines` holds every one of the `k` bits that `h` names
    /// ([`contains`](Self::contains) of each): for a ring of filters of one shape, which locate a key once and test its
    /// line in each (`WindowedFilter`). Every line is tested, with no exit at the first that
    /// holds the key, so the lines' loads overlap and which one holds a hit is no branch to
    /// mispredict (bench: `windowed/contains_{hit,miss}` in benches/windowed.rs).
    #[inline(always)]
    pub(crate) fn any_contains<'a>(
        self,
        lines: impl IntoIterator<Item = &'a Line>,
        h: KeyHash,
        k: u32,
    ) -> bool {
        match self.test {
            Kind::Scalar => lines.into_iter().fold(false, |found, line| {
                found | contains_scalar(line, h.h2(), k)
            }),
            #[cfg(all(target_arch = "x86_64", not(loom)))]
            #[allow(unsafe_code)]
            // SAFETY: as in `contains`: `Kind::Avx2` means this CPU has AVX2.
            Kind::Avx2 => unsafe { x86::any_contains_avx2(lines, h.h1, k) },
        }
    }

    /// [`any_contains`](Self::any_contains) for SplitBlock lines: whether any of `lines`
    /// holds the eight bits of `word`.
    #[inline(always)]
    pub(crate) fn any_contains_split<'a>(
        self,
        lines: impl IntoIterator<Item = &'a Line>,
        word: u64,
    ) -> bool {
        match self.test {
            Kind::Scalar => lines.into_iter().fold(false, |found, line| {
                found | contains_split_scalar(line, word)
            }),
            #[cfg(all(target_arch = "x86_64", not(loom)))]
            #[allow(unsafe_code)]
            // SAFETY: as in `contains`: `Kind::Avx2` means this CPU has AVX2.
            Kind::Avx2 => unsafe { x86::any_contains_split_avx2(lines, word) },
        }
    }
}

/// The portable test, one probe at a time. Branch-free over the line: a data-dependent early
/// exit would mispredict on half the misses and stall the lookups queued behind it, while the
/// loads after the first hit L1 and run in parallel.
#[inline(always)]
pub(crate) fn contains_scalar(block: &Line, h2: u64, k: u32) -> bool {
    let mut all = 1u64;
    crate::layout::for_each_in_block(h2, k, 9, |bit| {
        all &= block.0[bit >> 6].load(Relaxed) >> (bit & 63);
    });
    all & 1 == 1
}

/// The portable SplitBlock test: one shift and AND per word of the line, branch-free for
/// the reason [`contains_scalar`] gives.
#[inline(always)]
pub(crate) fn contains_split_scalar(block: &Line, word: u64) -> bool {
    let mut all = 1u64;
    for (i, w) in block.0.iter().enumerate() {
        all &= w.load(Relaxed) >> crate::layout::split_field(word, i);
    }
    all & 1 == 1
}

#[cfg(all(target_arch = "x86_64", not(loom)))]
mod x86 {
    #![allow(unsafe_code)]
    use std::arch::asm;
    use std::arch::x86_64::{
        __m128i, __m256i, _mm256_add_epi64, _mm256_and_si256, _mm256_andnot_si256,
        _mm256_blend_epi32, _mm256_blendv_ps, _mm256_castps_si256, _mm256_castsi256_ps,
        _mm256_extract_epi64, _mm256_loadu_si256, _mm256_mul_epu32, _mm256_or_si256,
        _mm256_permutevar8x32_epi32, _mm256_set_m128i, _mm256_set1_epi32, _mm256_set1_epi64x,
        _mm256_setr_epi64x, _mm256_slli_epi32, _mm256_slli_epi64, _mm256_sllv_epi32,
        _mm256_sllv_epi64, _mm256_srli_epi32, _mm256_srli_epi64, _mm256_srlv_epi64,
        _mm256_testc_si256, _mm256_testz_si256, _mm256_xor_si256,
    };

    use crate::Key;
    use crate::bit_vector::Line;
    use crate::hasher::{KeyHash, KeyHasher, MIX_MULTIPLIERS, MIX_SHIFT, mix};

    /// In-block offsets per 64-bit word of hash: 9-bit fields, seven to a word.
    const PER_WORD: u32 = 7;

    /// The odd constant of the refill `mix(h2 + i · REFILL)` (as in `for_each_in_block`).
    const REFILL: u64 = 0x9E37_79B9_7F4A_7C15;

    /// `ONES[n]`: 1 in the 32-bit lanes of probes `0..n`, 0 in the others (lane `2j` holds
    /// probe `j`, lane `2j + 1` probe `4 + j`: see [`group`]).
    static ONES: [[u32; 8]; 8] = {
        const PROBE_OF_LANE: [u32; 8] = [0, 4, 1, 5, 2, 6, 3, 7];
        let mut ones = [[0; 8]; 8];
        let mut n = 0;
        while n < 8 {
            let mut lane = 0;
            while lane < 8 {
                ones[n][lane] = (PROBE_OF_LANE[lane] < n as u32) as u32;
                lane += 1;
            }
            n += 1;
        }
        ones
    };

    /// The hash word that supplies probes `first..first + 7` (`first` a multiple of 7).
    #[inline(always)]
    fn group_bits(h2: u64, first: u32) -> u64 {
        if first == 0 {
            h2
        } else {
            mix(h2.wrapping_add(u64::from(first).wrapping_mul(REFILL)))
        }
    }

    /// [`contains_scalar`](super::contains_scalar) of `mix(h1)` with AVX2.
    ///
    /// `h2 = mix(h1)` is computed here, in vector registers, rather than by the caller with
    /// two integer multiplies: a lookup out of cache waits for its line with its
    /// instructions parked in the core, and how many lookups can wait at once (and so
    /// overlap their misses) is bounded by the integer registers they hold (SipHash alone
    /// writes about seventy), so the remix stays out of them (bench:
    /// `contains_{hit,miss}/u64/{300k,1M,50M}` in benches/core.rs). The answer is the same
    /// bits (`simd_and_scalar_agree_on_random_blocks`).
    ///
    /// # Safety
    ///
    /// The CPU must support AVX2. Nothing else: the function reads only the 64 bytes of
    /// `block`.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn contains_avx2(block: &Line, h1: u64, k: u32) -> bool {
        // SAFETY: `load_line`, `mix_lanes`, `group_of_lanes` and `more_groups` need AVX2,
        // which this function is only called with.
        unsafe { contains_h2_avx2(block, mix_lanes(_mm256_set1_epi64x(h1 as i64)), k) }
    }

    /// [`contains_avx2`] with `h2` already in every lane of `v`.
    ///
    /// # Safety
    ///
    /// The CPU must support AVX2.
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn contains_h2_avx2(block: &Line, v: __m256i, k: u32) -> bool {
        // SAFETY: AVX2, the caller's guarantee.
        unsafe {
            let (lo, hi) = load_line(block);
            if k <= PER_WORD {
                group_of_lanes(lo, hi, v, k)
            } else {
                let h2 = _mm256_extract_epi64::<0>(v) as u64;
                group_of_lanes(lo, hi, v, PER_WORD) & more_groups(lo, hi, h2, k)
            }
        }
    }

    /// Each 64-bit lane times `c`, modulo 2⁶⁴ (AVX2 has no 64-bit multiply: three 32×32
    /// ones, the high × high product falling outside 64 bits).
    ///
    /// # Safety
    ///
    /// The CPU must support AVX2.
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn mul_lanes(a: __m256i, c: u64) -> __m256i {
        // SAFETY: register-only AVX2 intrinsics (see `group`).
        #[allow(unused_unsafe)]
        unsafe {
            let c_lo = _mm256_set1_epi64x(c as i64);
            let c_hi = _mm256_set1_epi64x((c >> 32) as i64);
            let lo_lo = _mm256_mul_epu32(a, c_lo);
            let hi_lo = _mm256_mul_epu32(_mm256_srli_epi64::<32>(a), c_lo);
            let lo_hi = _mm256_mul_epu32(a, c_hi);
            _mm256_add_epi64(
                lo_lo,
                _mm256_slli_epi64::<32>(_mm256_add_epi64(hi_lo, lo_hi)),
            )
        }
    }

    /// [`mix`] of each 64-bit lane.
    ///
    /// # Safety
    ///
    /// The CPU must support AVX2.
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn mix_lanes(z: __m256i) -> __m256i {
        // SAFETY: register-only AVX2 intrinsics (see `group`), and `mul_lanes`, which needs
        // AVX2 like this function.
        #[allow(unused_unsafe)]
        unsafe {
            const S: i32 = MIX_SHIFT as i32;
            let [m1, m2] = MIX_MULTIPLIERS;
            let z = mul_lanes(_mm256_xor_si256(z, _mm256_srli_epi64::<S>(z)), m1);
            let z = mul_lanes(_mm256_xor_si256(z, _mm256_srli_epi64::<S>(z)), m2);
            _mm256_xor_si256(z, _mm256_srli_epi64::<S>(z))
        }
    }

    /// [`contains_split_scalar`](super::contains_split_scalar) with AVX2: the line's words
    /// 0–3 and 4–7 are two registers, and 64-bit lane `j` of each holds field `j` (or
    /// `4 + j`) of the split word as a one-bit mask.
    ///
    /// # Safety
    ///
    /// The CPU must support AVX2. Nothing else: the function reads only the 64 bytes of
    /// `block`.
    #[inline]
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn contains_split_avx2(block: &Line, word: u64) -> bool {
        use crate::layout::SPLIT_FIRST_BIT as F;
        // SAFETY: `load_line` needs AVX2, which this function is only called with; the rest
        // are register-only AVX2 intrinsics (safe in an AVX2 function from Rust 1.87, `unsafe
        // fn` at the crate's rust-version 1.85, hence the allow).
        #[allow(unused_unsafe)]
        unsafe {
            let (lo, hi) = load_line(block);
            let v = _mm256_set1_epi64x(word as i64);
            let shifts_lo =
                _mm256_setr_epi64x(F as i64, F as i64 + 6, F as i64 + 12, F as i64 + 18);
            let shifts_hi =
                _mm256_setr_epi64x(F as i64 + 24, F as i64 + 30, F as i64 + 36, F as i64 + 42);
            let six_bits = _mm256_set1_epi64x(63);
            let one = _mm256_set1_epi64x(1);
            let field_lo = _mm256_and_si256(_mm256_srlv_epi64(v, shifts_lo), six_bits);
            let field_hi = _mm256_and_si256(_mm256_srlv_epi64(v, shifts_hi), six_bits);
            let bit_lo = _mm256_sllv_epi64(one, field_lo);
            let bit_hi = _mm256_sllv_epi64(one, field_hi);
            // A probe whose bit is clear leaves its bit in `!line & bit`: all set iff none does.
            let clear = _mm256_or_si256(
                _mm256_andnot_si256(lo, bit_lo),
                _mm256_andnot_si256(hi, bit_hi),
            );
            _mm256_testz_si256(clear, clear) == 1
        }
    }

    /// [`contains_avx2`] of each of `lines`, all in one AVX2 function (the test of each
    /// inlined, what does not depend on the line computed once): whether any holds the key.
    ///
    /// # Safety
    ///
    /// The CPU must support AVX2.
    #[inline]
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn any_contains_avx2<'a>(
        lines: impl IntoIterator<Item = &'a Line>,
        h1: u64,
        k: u32,
    ) -> bool {
        let mut found = false;
        for line in lines {
            // SAFETY: AVX2, the caller's guarantee.
            found |= unsafe { contains_avx2(line, h1, k) };
        }
        found
    }

    /// [`contains_split_avx2`] of each of `lines`, as [`any_contains_avx2`].
    ///
    /// # Safety
    ///
    /// The CPU must support AVX2.
    #[inline]
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn any_contains_split_avx2<'a>(
        lines: impl IntoIterator<Item = &'a Line>,
        word: u64,
    ) -> bool {
        let mut found = false;
        for line in lines {
            // SAFETY: AVX2, the caller's guarantee.
            found |= unsafe { contains_split_avx2(line, word) };
        }
        found
    }

    /// [`contains_split_avx2`] of what `locate` returns, `locate` compiled inside.
    ///
    /// # Safety
    ///
    /// The CPU must support AVX2.
    #[inline]
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn contains_split_located_avx2<'a>(
        locate: impl FnOnce() -> (&'a Line, u64),
    ) -> bool {
        let (block, word) = locate();
        // SAFETY: AVX2, the caller's guarantee.
        unsafe { contains_split_avx2(block, word) }
    }

    /// [`contains_avx2`] of `key`, hashed in vector registers ([`KeyHasher::hash_in_lanes`]).
    /// `h2 = mix(h1)` goes back to integer registers, which the hash left free, unlike
    /// [`contains_avx2`] (bench: `contains_{hit,miss}/u64/50M` in benches/core.rs).
    ///
    /// # Safety
    ///
    /// The CPU must support AVX2, and AVX-512F and AVX-512VL if `AVX512`.
    #[inline]
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn contains_far<'a, const AVX512: bool, K: Key + ?Sized>(
        hasher: &KeyHasher,
        key: &K,
        block_of: impl FnOnce(KeyHash) -> &'a Line,
        k: u32,
    ) -> bool {
        // SAFETY: the caller's guarantee.
        unsafe {
            let h = hasher.hash_in_lanes::<AVX512, _>(key);
            contains_h2_avx2(block_of(h), _mm256_set1_epi64x(h.h2() as i64), k)
        }
    }

    /// [`contains_split_avx2`] of `key`, hashed in vector registers
    /// ([`KeyHasher::hash_in_lanes`]).
    ///
    /// # Safety
    ///
    /// The CPU must support AVX2, and AVX-512F and AVX-512VL if `AVX512`.
    #[inline]
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn contains_split_far<'a, const AVX512: bool, K: Key + ?Sized>(
        hasher: &KeyHasher,
        key: &K,
        block_of: impl FnOnce(KeyHash) -> &'a Line,
    ) -> bool {
        // SAFETY: the caller's guarantee.
        unsafe {
            let h = hasher.hash_in_lanes::<AVX512, _>(key);
            contains_split_avx2(block_of(h), h.split_word())
        }
    }

    /// Probes 7.. of a `k > 7` filter, out of line so that the common `k ≤ 7` path saves no
    /// registers for this loop.
    ///
    /// # Safety
    ///
    /// The CPU must support AVX2.
    #[inline(never)]
    #[target_feature(enable = "avx2")]
    unsafe fn more_groups(lo: __m256i, hi: __m256i, h2: u64, k: u32) -> bool {
        let mut all = true;
        let mut first = PER_WORD;
        while first < k {
            // SAFETY: AVX2, the caller's guarantee.
            all &= unsafe { group(lo, hi, group_bits(h2, first), (k - first).min(PER_WORD)) };
            first += PER_WORD;
        }
        all
    }

    /// The line's words 0–3 and 4–7, read as four 16-byte loads.
    ///
    /// The words are atomics that concurrent inserts `fetch_or` into, so they must be read
    /// atomically: a vector load written in Rust (`_mm256_load_si256`) would be a non-atomic
    /// read racing with those writes, undefined behaviour in Rust's memory model however the
    /// hardware does it. Inline assembly is defined by what the hardware does instead, and
    /// on every x86_64 CPU with AVX (which AVX2 implies) an aligned 16-byte `vmovdqa` load is
    /// single-copy atomic (Intel SDM vol. 3A §9.1.1; AMD APM vol. 2 §7.3.2). Four of them
    /// read each `AtomicU64` exactly as a Relaxed load does (two at a time, never torn),
    /// which is what the scalar path does with eight Relaxed loads; the words are only ever
    /// OR-ed into (or cleared), so no answer changes.
    ///
    /// # Safety
    ///
    /// The CPU must support AVX2 (an `unsafe fn` rather than a safe one with a target
    /// feature, which needs Rust 1.86).
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn load_line(block: &Line) -> (__m256i, __m256i) {
        let p = block.0.as_ptr();
        let (x0, x1, x2, x3): (__m128i, __m128i, __m128i, __m128i);
        // SAFETY: `p` points at the 64 bytes of a live `Line`, which is 64-byte aligned
        // (`repr(align(64))`), so the four loads are in bounds and 16-byte aligned as
        // `vmovdqa` requires; the shared borrow keeps the memory alive and allows reads (the
        // words are atomics, read atomically: see above). The block only reads memory
        // (`readonly`), touches neither the stack nor the flags, and AVX (for the VEX
        // encoding) is enabled by this function's target feature.
        unsafe {
            asm!(
                "vmovdqa {x0}, xmmword ptr [{p}]",
                "vmovdqa {x1}, xmmword ptr [{p} + 16]",
                "vmovdqa {x2}, xmmword ptr [{p} + 32]",
                "vmovdqa {x3}, xmmword ptr [{p} + 48]",
                p = in(reg) p,
                x0 = out(xmm_reg) x0,
                x1 = out(xmm_reg) x1,
                x2 = out(xmm_reg) x2,
                x3 = out(xmm_reg) x3,
                options(nostack, preserves_flags, readonly),
            );
        }
        // SAFETY: register-only intrinsics, AVX2 enabled (see `group`).
        #[allow(unused_unsafe)]
        unsafe {
            (_mm256_set_m128i(x1, x0), _mm256_set_m128i(x3, x2))
        }
    }

    /// Whether the first `n ≤ 7` 9-bit fields of `bits` all name set bits of the block whose
    /// words 0–3 are `lo` and 4–7 are `hi`.
    ///
    /// The block is seen as sixteen 32-bit words (x86 is little-endian, so bit `o` of the
    /// block is bit `o & 31` of 32-bit word `o >> 5`), and the eight 32-bit lanes hold one
    /// probe each: lane `2j` field `j`, lane `2j + 1` field `4 + j` (lane 7, field 7, is never
    /// valid: a word holds seven fields).
    ///
    /// # Safety
    ///
    /// The CPU must support AVX2.
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn group(lo: __m256i, hi: __m256i, bits: u64, n: u32) -> bool {
        // SAFETY: AVX2, the caller's guarantee.
        unsafe { group_of_lanes(lo, hi, _mm256_set1_epi64x(bits as i64), n) }
    }

    /// [`group`] of the hash word already in every 64-bit lane of `v`.
    ///
    /// # Safety
    ///
    /// The CPU must support AVX2.
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn group_of_lanes(lo: __m256i, hi: __m256i, v: __m256i, n: u32) -> bool {
        // SAFETY: AVX2 intrinsics on a CPU with AVX2 (the caller's guarantee): register-only
        // ones, which since Rust 1.87 are safe to call in an AVX2 function but at the crate's
        // rust-version (1.85) are `unsafe fn` (hence the allow), and one load, from `ONES`:
        // `ONES[n & 7]` is 32 initialised, immutable bytes, and `loadu` needs no alignment.
        #[allow(unused_unsafe)]
        unsafe {
            // 64-bit lane j: field j in its low 9 bits, and (shifted by 4 + 9j) field 4 + j
            // in the low 9 bits of its high 32-bit half.
            let a = _mm256_srlv_epi64(v, _mm256_setr_epi64x(0, 9, 18, 27));
            let b = _mm256_srlv_epi64(v, _mm256_setr_epi64x(4, 13, 22, 31));
            let off = _mm256_blend_epi32::<0b1010_1010>(a, b);
            // The probe's 32-bit word of its half (vpermd reads only the index's low 3 bits,
            // bits 5–7 of the offset), and which half (bit 8, moved to the sign bit).
            let idx = _mm256_srli_epi32::<5>(off);
            let word = _mm256_castps_si256(_mm256_blendv_ps(
                _mm256_castsi256_ps(_mm256_permutevar8x32_epi32(lo, idx)),
                _mm256_castsi256_ps(_mm256_permutevar8x32_epi32(hi, idx)),
                _mm256_castsi256_ps(_mm256_slli_epi32::<23>(off)),
            ));
            // The probe's bit in its 32-bit word, in the lanes of probes 0..n only (a shift
            // of `ONES[n]`, whose other lanes are 0: the lanes of probes n.. do not count).
            let ones = _mm256_loadu_si256(ONES[(n & 7) as usize].as_ptr().cast());
            let bit = _mm256_sllv_epi32(ones, _mm256_and_si256(off, _mm256_set1_epi32(31)));
            // Every probe's bit set: `!word & bit` is all zero.
            _mm256_testc_si256(word, bit) == 1
        }
    }
}

#[cfg(test)]
mod tests {
    use rand::{Rng, SeedableRng};

    use super::*;

    fn block(words: [u64; 8]) -> Line {
        Line(words.map(crate::sync::AtomicU64::new))
    }

    /// Every SIMD path agrees with the scalar one on random blocks (sparse to nearly full, so
    /// that both answers occur), random hashes and every `k` from 1 to 24.
    #[test]
    fn simd_and_scalar_agree_on_random_blocks() {
        let simd = Probe::detect();
        if !simd.is_simd() {
            eprintln!("no SIMD probe on this CPU: only the scalar path is tested");
        }
        let mut rng = rand::rngs::StdRng::seed_from_u64(0xb10c);
        let (mut yes, mut no) = (0u32, 0u32);
        for round in 0..20_000 {
            // OR of 1–5 random words: bit densities 1/2 to 31/32.
            let ors = 1 + round % 5;
            let words: [u64; 8] =
                std::array::from_fn(|_| (0..ors).fold(0, |w, _| w | rng.random::<u64>()));
            let b = block(words);
            let h = KeyHash { h1: rng.random() };
            let k = rng.random_range(1..=24);
            let want = Probe::SCALAR.contains(&b, h, k);
            assert_eq!(
                simd.contains(&b, h, k),
                want,
                "words {words:x?} h1 {:#x} k {k}",
                h.h1
            );
            if want { yes += 1 } else { no += 1 }
        }
        assert!(
            yes > 1_000 && no > 1_000,
            "both answers exercised: {yes} / {no}"
        );
    }

    /// Each probe alone decides: clearing any one of a key's bits makes both paths say no.
    #[test]
    fn simd_and_scalar_see_every_single_bit() {
        let simd = Probe::detect();
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        for _ in 0..2_000 {
            let h = KeyHash { h1: rng.random() };
            let k = rng.random_range(1..=24);
            let mut bits = Vec::new();
            crate::layout::for_each_in_block(h.h2(), k, 9, |o| bits.push(o));
            let mut words = [0u64; 8];
            for &o in &bits {
                words[o >> 6] |= 1 << (o & 63);
            }
            assert!(simd.contains(&block(words), h, k));
            assert!(Probe::SCALAR.contains(&block(words), h, k));
            for &o in &bits {
                let mut w = words;
                w[o >> 6] &= !(1 << (o & 63));
                assert!(
                    !simd.contains(&block(w), h, k),
                    "bit {o} h1 {:#x} k {k}",
                    h.h1
                );
                assert!(!Probe::SCALAR.contains(&block(w), h, k));
            }
        }
    }

    /// The SplitBlock paths agree on random blocks of every density, and each of a key's
    /// eight bits alone decides (clearing it makes both say no).
    #[test]
    fn split_simd_and_scalar_agree_and_see_every_bit() {
        let simd = Probe::detect();
        let mut rng = rand::rngs::StdRng::seed_from_u64(0x5b1);
        let (mut yes, mut no) = (0u32, 0u32);
        for round in 0..20_000 {
            let ors = 1 + round % 8;
            let words: [u64; 8] =
                std::array::from_fn(|_| (0..ors).fold(0, |w, _| w | rng.random::<u64>()));
            let word: u64 = rng.random();
            let want = Probe::SCALAR.contains_split(&block(words), word);
            assert_eq!(
                simd.contains_split(&block(words), word),
                want,
                "{words:x?} {word:#x}"
            );
            if want { yes += 1 } else { no += 1 }
        }
        assert!(
            yes > 1_000 && no > 1_000,
            "both answers exercised: {yes} / {no}"
        );
        for _ in 0..2_000 {
            let word: u64 = rng.random();
            let mut words = [0u64; 8];
            crate::layout::for_each_in_split_block(word, |o| words[o >> 6] |= 1 << (o & 63));
            assert!(
                words.iter().all(|w| w.count_ones() == 1),
                "one bit per word"
            );
            assert!(simd.contains_split(&block(words), word));
            assert!(Probe::SCALAR.contains_split(&block(words), word));
            for i in 0..8 {
                let mut w = words;
                w[i] = 0;
                assert!(!simd.contains_split(&block(w), word), "word {i} {word:#x}");
                assert!(!Probe::SCALAR.contains_split(&block(w), word));
            }
        }
    }

    /// The ring forms (`any_contains`, `any_contains_split`, one key tested in up to eight
    /// lines) answer yes exactly when one line alone does, on both paths: a line in the middle
    /// of the batch, the last, none, and the empty batch.
    #[test]
    fn any_line_of_a_ring_decides_on_both_paths() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(0xa11);
        let (mut yes, mut no) = (0u32, 0u32);
        for round in 0..5_000 {
            let count = round % 9;
            let ors = 1 + round % 4;
            let lines: Vec<Line> = (0..count)
                .map(|_| {
                    block(std::array::from_fn(|_| {
                        (0..ors).fold(0, |w, _| w | rng.random::<u64>())
                    }))
                })
                .collect();
            let h = KeyHash { h1: rng.random() };
            let k = rng.random_range(1..=12);
            let word: u64 = rng.random();
            let want = lines.iter().any(|l| Probe::SCALAR.contains(l, h, k));
            let want_split = lines.iter().any(|l| Probe::SCALAR.contains_split(l, word));
            for probe in [Probe::SCALAR, Probe::detect()] {
                assert_eq!(
                    probe.any_contains(&lines, h, k),
                    want,
                    "{probe:?} round {round}"
                );
                assert_eq!(
                    probe.any_contains_split(&lines, word),
                    want_split,
                    "{probe:?} round {round}"
                );
            }
            if want_split { yes += 1 } else { no += 1 }
        }
        assert!(
            yes > 500 && no > 500,
            "both answers exercised: {yes} / {no}"
        );
    }

    #[test]
    fn this_machine_tests_a_simd_path_when_it_has_one() {
        #[cfg(all(target_arch = "x86_64", not(loom)))]
        assert_eq!(
            Probe::detect().is_simd(),
            std::arch::is_x86_feature_detected!("avx2")
        );
    }
}
