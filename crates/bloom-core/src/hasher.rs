//! Keyed hashing: one SipHash-1-3 per key, from which every probe is derived.

use crate::Key;

/// A key's SipHash-1-3, `h1`, from which every layout derives its probes.
///
/// `h1` selects the block (Blocked, SplitBlock) or seeds the probe sequence (Classic). The
/// second word each layout needs is derived from it on demand, so a layout pays only for its
/// own: [`h2`](Self::h2) (Blocked's in-block positions, Classic's stride) is a bijective remix
/// of `h1` rather than SipHash's 128-bit output, which costs three more SipRounds per key
/// (bench: `floor/siphash13_u64` in benches/core.rs); the block index only consumes `h1`'s top bits, so the
/// positions within a block still see 40+ bits of independent entropy.
/// [`split_word`](Self::split_word) (SplitBlock's eight offsets) is one multiply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct KeyHash {
    pub(crate) h1: u64,
}

impl KeyHash {
    /// Blocked's in-block offsets and Classic's stride: `mix(h1)`, two dependent multiplies.
    #[inline(always)]
    pub(crate) fn h2(self) -> u64 {
        mix(self.h1)
    }

    /// SipHash of the key, remixed by a single multiply for SplitBlock: its offsets are cut
    /// from bits 16–63 of the product, each of which depends on `h1`'s bits below it, and the
    /// measured false-positive rates match the model (see `layout::for_each_in_split_block`).
    #[inline(always)]
    pub(crate) fn split_word(self) -> u64 {
        self.h1.wrapping_mul(SPLIT_MULTIPLIER)
    }
}

/// The odd multiplier of [`KeyHash::split_word`]: 2⁶⁴/φ, whose bits are as irregular as a
/// constant's get.
const SPLIT_MULTIPLIER: u64 = 0x9E37_79B9_7F4A_7C15;

/// SipHash-1-3 keyed with a 128-bit secret.
///
/// SipHash is a PRF: without the key nobody can compute which keys collide, so an attacker
/// cannot craft a flood of keys that the filter wrongly lets through. The key's bytes are
/// `k0.to_le_bytes() ‖ k1.to_le_bytes()` where `seed = k0 | (k1 << 64)`.
///
/// Computed here rather than through `siphasher` (the outputs are bit-identical: the tests
/// check them against it on every length from 0 to 64 bytes and on random keys). The
/// general-purpose hasher is called out of line with the length unknown, reloads its stored
/// tail and length, and starts every message from the keyed initial state; this one is
/// inlined, so for a fixed-width key (`u64`: 8 bytes) the loop and tail vanish and it is the
/// bare 2 + 3 SipRounds, and it starts from a state that has already done the half of the
/// first SipRound that does not depend on the message (see [`KeyHasher::new`]).
#[derive(Clone)]
pub(crate) struct KeyHasher {
    /// `v0, v1, v2, v3` after the keyed initialisation and the message-independent first half
    /// of the first compression round: `v0 += v1; v1 = rotl(v1, 13) ^ v0; v0 = rotl(v0, 32)`.
    state: [u64; 4],
    /// The keyed initial state before that half round, in the vector form's lane order
    /// `v0, v2, v1, v3` (see [`KeyHasher::hash_in_lanes`]). Kept rather than derived from
    /// `seed` per lookup: two loads instead of four XORs and two inserts on a path whose cost
    /// is its instruction count.
    #[cfg(all(target_arch = "x86_64", not(loom)))]
    initial_lanes: [u64; 4],
    seed: u128,
}

impl KeyHasher {
    pub(crate) fn new(seed: u128) -> Self {
        let (k0, k1) = (seed as u64, (seed >> 64) as u64);
        let mut v0 = k0 ^ 0x736f_6d65_7073_6575;
        let mut v1 = k1 ^ 0x646f_7261_6e64_6f6d;
        let v2 = k0 ^ 0x6c79_6765_6e65_7261;
        let v3 = k1 ^ 0x7465_6462_7974_6573;
        #[cfg(all(target_arch = "x86_64", not(loom)))]
        let initial_lanes = [v0, v2, v1, v3];
        // Every message is compressed at least once (its last block carries the length), and
        // the first compression's `v3 ^= m` touches neither v0 nor v1 before these three
        // steps, so they are the same for every message: do them once, here.
        v0 = v0.wrapping_add(v1);
        v1 = v1.rotate_left(13) ^ v0;
        v0 = v0.rotate_left(32);
        Self {
            state: [v0, v1, v2, v3],
            #[cfg(all(target_arch = "x86_64", not(loom)))]
            initial_lanes,
            seed,
        }
    }

    /// A key from the operating system's random source.
    pub(crate) fn random() -> Result<Self, getrandom::Error> {
        let mut seed = [0u8; 16];
        getrandom::fill(&mut seed)?;
        Ok(Self::new(u128::from_le_bytes(seed)))
    }

    pub(crate) fn seed(&self) -> u128 {
        self.seed
    }

    /// Always inlined, whatever the caller's size: a call per lookup is a cost the lookup
    /// benches see (`contains_hit/str/*` in benches/core.rs).
    #[inline(always)]
    pub(crate) fn hash<K: Key + ?Sized>(&self, key: &K) -> KeyHash {
        KeyHash {
            h1: self.sip13(key.key_bytes().as_ref()),
        }
    }

    /// [`hash`](Self::hash), computed in two 128-bit vector registers instead of four
    /// general-purpose ones: the same bits, for lookups in a filter far larger than the CPU
    /// cache (see `probe::FAR_FILTER_BYTES`, which says why). With `AVX512`, each rotation
    /// is one AVX-512VL `vprolvq` instead of two shifts and an OR.
    ///
    /// # Safety
    ///
    /// The CPU must support AVX2, and AVX-512F and AVX-512VL if `AVX512`.
    #[cfg(all(target_arch = "x86_64", not(loom)))]
    #[allow(unsafe_code)]
    #[inline]
    #[target_feature(enable = "avx2")]
    pub(crate) unsafe fn hash_in_lanes<const AVX512: bool, K: Key + ?Sized>(
        &self,
        key: &K,
    ) -> KeyHash {
        // SAFETY: the caller's guarantee.
        KeyHash {
            h1: unsafe { lanes::sip13::<AVX512>(&self.initial_lanes, key.key_bytes().as_ref()) },
        }
    }

    /// SipHash-1-3 of `msg`: one SipRound per 8-byte block (the last block is the 0–7 byte
    /// tail with the length in its top byte), then three finalisation rounds.
    #[inline(always)]
    fn sip13(&self, msg: &[u8]) -> u64 {
        let [mut v0, mut v1, mut v2, mut v3] = self.state;
        let mut blocks = msg.chunks_exact(8);
        let tail = tail_le(blocks.remainder());
        let last = ((msg.len() as u64) << 56) | tail;
        // The first compression, from the precomputed half round.
        let first = match blocks.next() {
            Some(b) => u64::from_le_bytes(b.try_into().expect("an 8-byte block")),
            None => last,
        };
        v3 ^= first;
        v2 = v2.wrapping_add(v3);
        v3 = v3.rotate_left(16) ^ v2;
        v0 = v0.wrapping_add(v3);
        v3 = v3.rotate_left(21) ^ v0;
        v2 = v2.wrapping_add(v1);
        v1 = v1.rotate_left(17) ^ v2;
        v2 = v2.rotate_left(32);
        v0 ^= first;
        if msg.len() >= 8 {
            for b in blocks {
                let m = u64::from_le_bytes(b.try_into().expect("an 8-byte block"));
                v3 ^= m;
                sip_round(&mut v0, &mut v1, &mut v2, &mut v3);
                v0 ^= m;
            }
            v3 ^= last;
            sip_round(&mut v0, &mut v1, &mut v2, &mut v3);
            v0 ^= last;
        }
        v2 ^= 0xff;
        sip_round(&mut v0, &mut v1, &mut v2, &mut v3);
        sip_round(&mut v0, &mut v1, &mut v2, &mut v3);
        sip_round(&mut v0, &mut v1, &mut v2, &mut v3);
        v0 ^ v1 ^ v2 ^ v3
    }
}

/// The 0–7 bytes of `tail` as a little-endian integer (4-, 2- and 1-byte loads: no loop and
/// no `memcpy`).
#[inline(always)]
fn tail_le(tail: &[u8]) -> u64 {
    let mut out = 0;
    let mut rest = tail;
    if let Some((four, r)) = rest.split_first_chunk::<4>() {
        out = u64::from(u32::from_le_bytes(*four));
        rest = r;
    }
    let shift = 8 * (tail.len() - rest.len()) as u32;
    if let Some((two, r)) = rest.split_first_chunk::<2>() {
        out |= u64::from(u16::from_le_bytes(*two)) << shift;
        rest = r;
    }
    let shift = 8 * (tail.len() - rest.len()) as u32;
    if let Some(&one) = rest.first() {
        out |= u64::from(one) << shift;
    }
    out
}

/// SipHash-1-3 with its state in two 128-bit registers, `a = (v0, v2)` and `b = (v1, v3)`.
///
/// A SipRound's steps pair up across the halves (`v0 += v1` beside `v2 += v3`, and so on), so
/// each pair is one vector instruction; the rotations by different amounts are variable
/// shifts, the rotations by 32 one dword shuffle, and the second half's crossed pairs
/// (`v0 += v3`, `v2 += v1`) one swap of the other register's halves. That is fourteen vector
/// instructions per SipRound with AVX2 (a rotation is two shifts and an OR) and ten with
/// AVX-512VL (one `vprolvq`), against fourteen integer ones, with a longer chain; so for a
/// filter in cache it is slower, and its point is the integer registers it leaves free
/// (see `probe::FAR_FILTER_BYTES`).
#[cfg(all(target_arch = "x86_64", not(loom)))]
mod lanes {
    #![allow(unsafe_code)]
    use std::arch::asm;
    use std::arch::x86_64::{
        __m128i, _mm_add_epi64, _mm_cvtsi64_si128, _mm_cvtsi128_si64, _mm_loadu_si128,
        _mm_or_si128, _mm_set_epi64x, _mm_shuffle_epi32, _mm_slli_si128, _mm_sllv_epi64,
        _mm_srlv_epi64, _mm_unpackhi_epi64, _mm_xor_si128,
    };

    use super::tail_le;

    /// SipHash-1-3 of `msg` from the keyed state `initial = [v0, v2, v1, v3]`; bit for bit
    /// [`KeyHasher::sip13`](super::KeyHasher::sip13).
    ///
    /// # Safety
    ///
    /// The CPU must support AVX2, and AVX-512F and AVX-512VL if `AVX512`.
    #[inline]
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn sip13<const AVX512: bool>(initial: &[u64; 4], msg: &[u8]) -> u64 {
        // SAFETY: AVX2 intrinsics on a CPU with AVX2 (the caller's guarantee): register-only
        // ones (safe in an AVX2 function from Rust 1.87, `unsafe fn` at the crate's
        // rust-version 1.85, hence the allow) and two 16-byte unaligned loads from
        // `initial`, 32 initialised bytes; `compress` and `round` need what this needs.
        #[allow(unused_unsafe)]
        unsafe {
            let p = initial.as_ptr().cast::<__m128i>();
            let (mut a, mut b) = (_mm_loadu_si128(p), _mm_loadu_si128(p.add(1)));
            let mut blocks = msg.chunks_exact(8);
            let last = ((msg.len() as u64) << 56) | tail_le(blocks.remainder());
            for block in blocks.by_ref() {
                let m = u64::from_le_bytes(block.try_into().expect("an 8-byte block"));
                compress::<AVX512>(&mut a, &mut b, m);
            }
            compress::<AVX512>(&mut a, &mut b, last);
            // v2 ^= 0xff
            a = _mm_xor_si128(a, _mm_set_epi64x(0xff, 0));
            round::<AVX512>(&mut a, &mut b);
            round::<AVX512>(&mut a, &mut b);
            round::<AVX512>(&mut a, &mut b);
            // v0 ^ v1 ^ v2 ^ v3
            let x = _mm_xor_si128(a, b);
            _mm_cvtsi128_si64(_mm_xor_si128(x, _mm_unpackhi_epi64(x, x))) as u64
        }
    }

    /// `v3 ^= m; SipRound; v0 ^= m`.
    ///
    /// # Safety
    ///
    /// As [`sip13`].
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn compress<const AVX512: bool>(a: &mut __m128i, b: &mut __m128i, m: u64) {
        // SAFETY: register-only AVX2 intrinsics, AVX2 enabled; `round` needs what this needs.
        #[allow(unused_unsafe)]
        unsafe {
            let m = _mm_cvtsi64_si128(m as i64);
            *b = _mm_xor_si128(*b, _mm_slli_si128::<8>(m));
            round::<AVX512>(a, b);
            *a = _mm_xor_si128(*a, m);
        }
    }

    /// One SipRound on `a = (v0, v2)`, `b = (v1, v3)`.
    ///
    /// # Safety
    ///
    /// As [`sip13`].
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn round<const AVX512: bool>(a: &mut __m128i, b: &mut __m128i) {
        // The dword shuffles: 0x4E swaps the two 64-bit halves, 0xE1 rotates the low half by
        // 32 bits (swaps its dwords), 0xB4 the high half.
        // SAFETY: register-only AVX2 intrinsics, AVX2 enabled; `rotl` needs what this needs.
        #[allow(unused_unsafe)]
        unsafe {
            // v0 += v1; v2 += v3
            *a = _mm_add_epi64(*a, *b);
            // v1 = rotl(v1, 13) ^ v0; v3 = rotl(v3, 16) ^ v2
            *b = _mm_xor_si128(rotl::<AVX512>(*b, 13, 16), *a);
            // v0 = rotl(v0, 32)
            *a = _mm_shuffle_epi32::<0xE1>(*a);
            // v0 += v3; v2 += v1
            *a = _mm_add_epi64(*a, _mm_shuffle_epi32::<0x4E>(*b));
            // v1 = rotl(v1, 17) ^ v2; v3 = rotl(v3, 21) ^ v0
            *b = _mm_xor_si128(rotl::<AVX512>(*b, 17, 21), _mm_shuffle_epi32::<0x4E>(*a));
            // v2 = rotl(v2, 32)
            *a = _mm_shuffle_epi32::<0xB4>(*a);
        }
    }

    /// The low half rotated left by `lo` bits, the high half by `hi` (both in `1..64`).
    ///
    /// AVX-512VL's `vprolvq` is written as inline assembly: its intrinsic and target feature
    /// are stable only from Rust 1.89, above this crate's rust-version (1.85).
    ///
    /// # Safety
    ///
    /// As [`sip13`].
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn rotl<const AVX512: bool>(x: __m128i, lo: i64, hi: i64) -> __m128i {
        // SAFETY: register-only AVX2 intrinsics, AVX2 enabled.
        #[allow(unused_unsafe)]
        let counts = unsafe { _mm_set_epi64x(hi, lo) };
        if AVX512 {
            let out: __m128i;
            // SAFETY: `vprolvq` on xmm registers needs AVX-512F and AVX-512VL, which the
            // caller guarantees with `AVX512`; it reads and writes only the registers named,
            // touches neither memory, the stack nor the flags.
            unsafe {
                asm!(
                    "vprolvq {out}, {x}, {counts}",
                    out = lateout(xmm_reg) out,
                    x = in(xmm_reg) x,
                    counts = in(xmm_reg) counts,
                    options(pure, nomem, nostack, preserves_flags),
                );
            }
            out
        } else {
            // SAFETY: as above.
            #[allow(unused_unsafe)]
            unsafe {
                _mm_or_si128(
                    _mm_sllv_epi64(x, counts),
                    _mm_srlv_epi64(x, _mm_set_epi64x(64 - hi, 64 - lo)),
                )
            }
        }
    }
}

/// One SipRound.
#[inline(always)]
fn sip_round(v0: &mut u64, v1: &mut u64, v2: &mut u64, v3: &mut u64) {
    *v0 = v0.wrapping_add(*v1);
    *v1 = v1.rotate_left(13) ^ *v0;
    *v0 = v0.rotate_left(32);
    *v2 = v2.wrapping_add(*v3);
    *v3 = v3.rotate_left(16) ^ *v2;
    *v0 = v0.wrapping_add(*v3);
    *v3 = v3.rotate_left(21) ^ *v0;
    *v2 = v2.wrapping_add(*v1);
    *v1 = v1.rotate_left(17) ^ *v2;
    *v2 = v2.rotate_left(32);
}

/// Murmur3's 64-bit finaliser: a bijection whose output bits each depend on every input bit.
#[inline(always)]
pub(crate) fn mix(mut z: u64) -> u64 {
    let [m1, m2] = MIX_MULTIPLIERS;
    z = (z ^ (z >> MIX_SHIFT)).wrapping_mul(m1);
    z = (z ^ (z >> MIX_SHIFT)).wrapping_mul(m2);
    z ^ (z >> MIX_SHIFT)
}

/// [`mix`]'s two multipliers and its shift (the AVX2 probe computes it in vector lanes).
pub(crate) const MIX_MULTIPLIERS: [u64; 2] = [0xFF51_AFD7_ED55_8CCD, 0xC4CE_B9FE_1A85_EC53];
pub(crate) const MIX_SHIFT: u32 = 33;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hash_is_siphash13_of_the_key_bytes() {
        // Pinned output, cross-checked against an independent SipHash-1-3 implementation
        // (itself checked on the SipHash-2-4 reference vector). A change here changes the
        // answers of every filter users have written to disk.
        let h = KeyHasher::new(0x0f0e_0d0c_0b0a_0908_0706_0504_0302_0100).hash("user:42");
        assert_eq!(h.h1, 0xa534_dcf0_b23f_4f2d);
        assert_eq!(h.h2(), 0x7edf_fc67_0c01_2088);
        let other_key = KeyHasher::new(1).hash("user:42");
        assert_ne!(h, other_key);
        assert_eq!(
            KeyHasher::new(7).hash(&42u64),
            KeyHasher::new(7).hash(&42u64.to_le_bytes())
        );
    }

    /// The inlined SipHash-1-3, scalar and (where the CPU runs them) vector, against the
    /// `siphasher` crate: every length from 0 to 64 bytes (every tail length, one to eight
    /// blocks), random bytes and random 128-bit keys.
    #[test]
    fn hash_matches_siphasher_on_every_length() {
        use rand::{Rng, SeedableRng};
        use siphasher::sip::SipHasher13;

        let mut rng = rand::rngs::StdRng::seed_from_u64(0x51b);
        for _ in 0..200 {
            let seed: u128 = rng.random();
            let ours = KeyHasher::new(seed);
            let reference = SipHasher13::new_with_key(&seed.to_le_bytes());
            for len in 0..=64 {
                let msg: Vec<u8> = (0..len).map(|_| rng.random()).collect();
                let want = reference.hash(&msg);
                assert_eq!(ours.hash(msg.as_slice()).h1, want, "len {len}");
                assert_eq!(ours.hash(msg.as_slice()).h2(), mix(want));
                #[cfg(all(target_arch = "x86_64", not(loom)))]
                assert_hash_in_lanes_gives(&ours, &msg, want);
            }
            let x: u64 = rng.random();
            let want = reference.hash(&x.to_le_bytes());
            assert_eq!(ours.hash(&x).h1, want);
            #[cfg(all(target_arch = "x86_64", not(loom)))]
            assert_hash_in_lanes_gives(&ours, &x.to_le_bytes(), want);
        }
    }

    /// [`KeyHasher::hash_in_lanes`], in every form this CPU runs, gives `want` for `msg`. A
    /// filter far out of cache looks up with it and inserts with the scalar form, so any bit
    /// of difference would answer "absent" for a present key.
    #[cfg(all(target_arch = "x86_64", not(loom)))]
    #[allow(unsafe_code)]
    fn assert_hash_in_lanes_gives(ours: &KeyHasher, msg: &[u8], want: u64) {
        if !std::arch::is_x86_feature_detected!("avx2") {
            return;
        }
        // SAFETY: AVX2 was detected above.
        let got = unsafe { ours.hash_in_lanes::<false, _>(msg) };
        assert_eq!(got.h1, want, "AVX2, len {}", msg.len());
        if crate::probe::has_avx512_rotates() {
            // SAFETY: AVX2, AVX-512F and AVX-512VL were detected.
            let got = unsafe { ours.hash_in_lanes::<true, _>(msg) };
            assert_eq!(got.h1, want, "AVX-512, len {}", msg.len());
        }
    }
}
