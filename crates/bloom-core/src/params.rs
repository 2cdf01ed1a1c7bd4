//! Sizing: how many bits and hashes a filter needs for `n` items at false-positive rate `p`,
//! and the false-positive rate a given size implies.
//!
//! * **Classic** (bits anywhere) uses the textbook optimum exactly:
//!   `m = ceil(-n·ln p / (ln 2)²)`, `k = max(1, round(m/n · ln 2))`.
//! * **Blocked** (all of a key's bits in one 512-bit cache line) pays for its speed with some
//!   accuracy: blocks receive a Poisson-distributed number of keys, and the crowded ones give
//!   more false positives. Its FPR is computed exactly for that model,
//!   `FPR = Σᵢ Pois(i; λ) · (1 − (1 − 1/B)^{i·k})^k` with `B = 512`, `λ = n·B/m`,
//!   and sizing picks the smallest whole number of blocks (and the best `k` for it) whose FPR
//!   is at most `p`. That formula takes each block's fill at its mean; the exact rate is a
//!   little higher (≈1% relative at `p = 1%`, since the FPR is convex in the fill), so the
//!   size is then refined with the exact model, which tracks the distribution of set bits in a
//!   block probe by probe. At `p = 1%` that is 9.92 bits per item (k = 6) against 9.59
//!   (k = 7) for Classic.
//! * **SplitBlock** (one bit in each 64-bit word of a 512-bit block, `k = 8`) has an exact
//!   closed form: a block holding `i` keys has `i` uniformly placed bits in each word, so a
//!   new key's bit in a word is set with probability `1 − (63/64)^i`, independently across
//!   the eight words: `FPR = Σᵢ Pois(i; λ) · (1 − (63/64)^i)^8`, `λ = 512·n/m`. Sizing
//!   takes the smallest whole number of blocks meeting `p`: at n = 10⁶, 10.10 bits per item
//!   at 1% and 15.73 at 0.1% (Blocked: 9.92 and 15.55).

use crate::sizing::{check_items_and_rate, check_size, too_large};
use crate::{BuildError, Layout};

/// Bits in one block of the Blocked layout: one 64-byte cache line.
pub const BLOCK_BITS: u64 = 512;

/// The largest filter this crate builds or loads: 2⁴⁰ bits (128 GiB).
pub const MAX_BITS: u64 = 1 << 40;

/// The most hash probes per key this crate accepts.
pub const MAX_HASHES: u32 = 64;

/// Probes per key of [`Layout::SplitBlock`]: one in each 64-bit word of the block, always.
pub const SPLIT_HASHES: u32 = 8;

/// The size of a filter: `bits` (m) and `hashes` (k, probes per key).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Params {
    /// Number of bits, m.
    pub bits: u64,
    /// Number of hash probes per key, k.
    pub hashes: u32,
}

/// The textbook (Classic layout) optimum for `n` items at false-positive rate `p`:
/// `m = ceil(-n·ln p / (ln 2)²)`, `k = max(1, round(m/n · ln 2))`.
///
/// ```
/// let p = bloom_core::params::optimal(100_000, 0.01).unwrap();
/// assert_eq!((p.bits, p.hashes), (958_506, 7));
/// ```
pub fn optimal(n: u64, p: f64) -> Result<Params, BuildError> {
    check_items_and_rate(n, p)?;
    let bits = classic_bits(n, p)?;
    let hashes = ((bits as f64 / n as f64) * std::f64::consts::LN_2)
        .round()
        .max(1.0);
    if hashes > MAX_HASHES as f64 {
        // Capping k would quietly miss p.
        return Err(BuildError::TooManyHashes {
            hashes: hashes.min(u32::MAX as f64) as u32,
            max: MAX_HASHES,
        });
    }
    Ok(Params {
        bits,
        hashes: hashes as u32,
    })
}

/// The smallest `x` in `lo..=hi` for which `meets(x)`, by bisection: `meets` must be
/// monotone (false, then true) and `meets(hi)` true.
fn first_meeting(mut lo: u64, mut hi: u64, meets: impl Fn(u64) -> bool) -> u64 {
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if meets(mid) {
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
    hi
}

/// Classic's `m = ceil(-n·ln p / (ln 2)²)` (at least 1), or `TooLarge` past [`MAX_BITS`].
fn classic_bits(n: u64, p: f64) -> Result<u64, BuildError> {
    let ln2 = std::f64::consts::LN_2;
    let m = (-(n as f64) * p.ln() / (ln2 * ln2)).ceil();
    check_size(m)?;
    Ok((m as u64).max(1))
}

/// The smallest Blocked-layout size (a whole number of 512-bit blocks, and the best `k` for
/// it) whose false-positive rate at `n` items is at most `p`.
///
/// ```
/// let p = bloom_core::params::optimal_blocked(1_000_000, 0.01).unwrap();
/// assert!(p.bits as f64 / 1e6 < 11.5); // bits per item
/// ```
pub fn optimal_blocked(n: u64, p: f64) -> Result<Params, BuildError> {
    check_items_and_rate(n, p)?;
    // Blocked never needs fewer bits than Classic, and at the rates people use never more
    // than twice as many (more for extreme p, so widen until the upper bound works).
    let classic = optimal(n, p)?;
    let mut lo = classic.bits.div_ceil(BLOCK_BITS).max(1);
    let mut hi = lo.saturating_mul(2);
    loop {
        if hi.saturating_mul(BLOCK_BITS) > MAX_BITS {
            return Err(too_large(hi as f64 * BLOCK_BITS as f64));
        }
        if best_blocked_hashes(hi * BLOCK_BITS, n).1 <= p {
            break;
        }
        lo = hi;
        hi = hi.saturating_mul(2);
    }
    // Invariant: hi blocks are enough; lo blocks may not be.
    hi = first_meeting(lo, hi, |blocks| {
        best_blocked_hashes(blocks * BLOCK_BITS, n).1 <= p
    });
    // The fast model reads a little low (≈1% at p = 1%): step up until the exact model
    // agrees, then take the smallest size between that it accepts.
    let meets = |blocks: u64| best_blocked_hashes_exact(blocks * BLOCK_BITS, n).1 <= p;
    lo = hi;
    while !meets(hi) {
        lo = hi + 1;
        hi = hi.saturating_add((hi / 256).max(1));
        if hi.saturating_mul(BLOCK_BITS) > MAX_BITS {
            return Err(too_large(hi as f64 * BLOCK_BITS as f64));
        }
    }
    let bits = first_meeting(lo, hi, meets) * BLOCK_BITS;
    Ok(Params {
        bits,
        hashes: best_blocked_hashes_exact(bits, n).0,
    })
}

/// The smallest SplitBlock size (a whole number of 512-bit blocks; `k` is always
/// [`SPLIT_HASHES`]) whose false-positive rate at `n` items is at most `p`.
///
/// ```
/// use bloom_core::params;
///
/// let split = params::optimal_split_block(1_000_000, 0.01)?;
/// let blocked = params::optimal_blocked(1_000_000, 0.01)?;
/// assert_eq!(split.hashes, 8);
/// assert!(split.bits > blocked.bits && split.bits < blocked.bits * 105 / 100);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn optimal_split_block(n: u64, p: f64) -> Result<Params, BuildError> {
    check_items_and_rate(n, p)?;
    let meets = |blocks: u64| split_block_fpr(blocks * BLOCK_BITS, n as f64) <= p;
    // Never fewer bits than Classic needs; widen until enough (the rate falls to 0 as the
    // blocks grow, so this ends, at the latest at MAX_BITS). Only Classic's bits: its `k`
    // may exceed MAX_HASHES for tiny p, which says nothing about this layout, whose k is 8.
    let mut lo = classic_bits(n, p)?.div_ceil(BLOCK_BITS).max(1);
    let mut hi = lo;
    while !meets(hi) {
        lo = hi + 1;
        hi = hi.saturating_mul(2);
        if hi.saturating_mul(BLOCK_BITS) > MAX_BITS {
            return Err(too_large(hi as f64 * BLOCK_BITS as f64));
        }
    }
    Ok(Params {
        bits: first_meeting(lo, hi, meets) * BLOCK_BITS,
        hashes: SPLIT_HASHES,
    })
}

/// [`optimal`] for Classic, [`optimal_blocked`] for Blocked, [`optimal_split_block`] for
/// SplitBlock.
///
/// ```
/// use bloom_core::{Layout, params};
///
/// let classic = params::for_layout(Layout::Classic, 100_000, 0.01)?;
/// assert_eq!(classic, params::optimal(100_000, 0.01)?);
/// let blocked = params::for_layout(Layout::Blocked, 100_000, 0.01)?;
/// assert!(blocked.bits > classic.bits && blocked.bits % 512 == 0);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn for_layout(layout: Layout, n: u64, p: f64) -> Result<Params, BuildError> {
    match layout {
        Layout::Classic => optimal(n, p),
        Layout::Blocked => optimal_blocked(n, p),
        Layout::SplitBlock => optimal_split_block(n, p),
    }
}

/// The false-positive rate a filter of `bits` and `hashes` in `layout` is expected to have
/// after `items` distinct insertions.
///
/// ```
/// use bloom_core::{Layout, params};
///
/// let p = params::optimal(100_000, 0.01)?;
/// let fpr = params::expected_fpr(Layout::Classic, p.bits, p.hashes, 100_000.0);
/// assert!((fpr - 0.01).abs() < 0.001);
/// assert_eq!(params::expected_fpr(Layout::Classic, p.bits, p.hashes, 0.0), 0.0);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn expected_fpr(layout: Layout, bits: u64, hashes: u32, items: f64) -> f64 {
    if items.is_nan() {
        return f64::NAN;
    }
    if items <= 0.0 || bits == 0 {
        return 0.0;
    }
    if items.is_infinite() {
        return 1.0;
    }
    match layout {
        Layout::Classic => classic_fpr(bits, hashes, items),
        Layout::Blocked => blocked_fpr(bits, hashes, items),
        // The layout fixes k; a different `hashes` cannot describe one of its filters.
        Layout::SplitBlock => split_block_fpr(bits, items),
    }
}

/// Swamidass–Baldi estimate of the number of distinct items from the number of set bits,
/// generalised to blocks: a block of `B` bits that received `i` keys has each bit clear with
/// probability `(1-1/B)^{i·k}`; with Poisson block loads the clear fraction is
/// `exp(-λ(1-(1-1/B)^k))`, which inverts to `λ`, and `n = λ·m/B`. For Classic (`B = m`) this
/// is the textbook `-(m/k)·ln(1 - X/m)`. SplitBlock puts one of each key's bits in each
/// 64-bit word, so a bit stays clear with probability `exp(-λ/64)` and `n = -(m/8)·ln(clear)`.
/// Infinite when every bit is set.
pub(crate) fn estimate_items(layout: Layout, bits: u64, hashes: u32, ones: u64) -> f64 {
    let m = bits as f64;
    let clear = 1.0 - ones as f64 / m;
    if clear <= 0.0 {
        return f64::INFINITY;
    }
    let k = f64::from(hashes);
    match layout {
        Layout::Classic => -(m / k) * clear.ln(),
        Layout::Blocked => {
            let b = BLOCK_BITS as f64;
            let per_key = 1.0 - (1.0 - 1.0 / b).powf(k);
            let lambda = -clear.ln() / per_key;
            lambda * m / b
        }
        Layout::SplitBlock => -(m / f64::from(SPLIT_HASHES)) * clear.ln(),
    }
}

/// The exact SplitBlock FPR: `Σᵢ Pois(i; λ) · (1 − (63/64)^i)^8` (see the module doc).
fn split_block_fpr(bits: u64, items: f64) -> f64 {
    let lambda = items * BLOCK_BITS as f64 / bits as f64;
    if lambda <= 0.0 {
        return 0.0;
    }
    let keep = 63.0f64 / 64.0; // a word's bit survives one key
    let fpr: f64 = poisson_terms(lambda)
        .map(|(i, pmf)| pmf * (1.0 - keep.powf(i as f64)).powi(SPLIT_HASHES as i32))
        .sum();
    fpr.min(1.0)
}

fn classic_fpr(bits: u64, hashes: u32, items: f64) -> f64 {
    // (1 - (1 - 1/m)^{kn})^k, computed with ln_1p so large m does not lose the 1/m.
    let k = f64::from(hashes);
    let clear = (k * items * (-1.0 / bits as f64).ln_1p()).exp();
    (1.0 - clear).powf(k)
}

/// The Poisson(λ) terms that matter, `(i, P(i))` for `i` within `λ ± (12√λ + 24)`: the rest
/// sum to below 1e-30. Bounded work whatever λ is (a filter asked to hold far more keys than
/// it has bits must not hang its caller).
fn poisson_terms(lambda: f64) -> impl Iterator<Item = (u64, f64)> {
    let width = 12.0 * lambda.sqrt() + 24.0;
    let first = (lambda - width).max(0.0).floor() as u64;
    let last = (lambda + width).ceil() as u64;
    let ln_lambda = lambda.ln();
    // ln P(first), then each next term from the previous one, in log space so nothing
    // underflows before it matters.
    let mut ln_pmf = -lambda + first as f64 * ln_lambda - ln_factorial(first);
    (first..=last).map(move |i| {
        if i > first {
            ln_pmf += ln_lambda - (i as f64).ln();
        }
        (i, ln_pmf.exp())
    })
}

/// ln(n!), exactly for small n, by Stirling's series beyond (error below 1e-12).
fn ln_factorial(n: u64) -> f64 {
    if n < 32 {
        return (2..=n).map(|i| (i as f64).ln()).sum();
    }
    let x = n as f64;
    x * x.ln() - x + 0.5 * (std::f64::consts::TAU * x).ln() + 1.0 / (12.0 * x)
        - 1.0 / (360.0 * x.powi(3))
}

/// The Blocked FPR with each block's fill replaced by its mean: `Σ P(i) · (1 − (1−1/B)^{ik})^k`.
/// Fast, and a slight underestimate (the fill of a block varies around its mean, and the FPR
/// is convex in it): used to search, then [`blocked_fpr`] has the last word.
fn blocked_fpr_mean_fill(bits: u64, hashes: u32, items: f64) -> f64 {
    let b = BLOCK_BITS as f64;
    let lambda = items * b / bits as f64;
    if lambda <= 0.0 {
        return 0.0;
    }
    let k = f64::from(hashes);
    let keep = (1.0 - 1.0 / b).powf(k); // a bit survives one key's k probes
    let fpr: f64 = poisson_terms(lambda)
        .map(|(i, pmf)| pmf * (1.0 - keep.powf(i as f64)).powf(k))
        .sum();
    fpr.min(1.0)
}

/// Ball-into-cell steps beyond which the exact model is not worth its cost (the filter is
/// then so overfull that both models answer ≈ 1).
const EXACT_MODEL_MAX_PROBES: u64 = 20_000;

/// The exact Blocked FPR: a block holding `i` keys has received `i·k` uniformly random probes;
/// with `X` of its bits set, a new key's `k` probes all hit set bits with probability
/// `E[(X/B)^k]`. The distribution of `X` after `t` probes is tracked exactly (each probe hits
/// a set bit with probability `X/B`), and `i` is Poisson(λ = n·B/m).
fn blocked_fpr(bits: u64, hashes: u32, items: f64) -> f64 {
    let b = BLOCK_BITS as usize;
    let lambda = items * b as f64 / bits as f64;
    if lambda <= 0.0 {
        return 0.0;
    }
    let terms: Vec<(u64, f64)> = poisson_terms(lambda).collect();
    let k = u64::from(hashes);
    let max_probes = terms.last().map_or(0, |&(i, _)| i) * k;
    if max_probes > EXACT_MODEL_MAX_PROBES {
        return blocked_fpr_mean_fill(bits, hashes, items);
    }
    // all_set[x] = (x/B)^k: the chance a new key's k probes all land on the x set bits.
    let all_set: Vec<f64> = (0..=b)
        .map(|x| (x as f64 / b as f64).powi(hashes as i32))
        .collect();
    let mut set_bits = vec![0.0f64; b + 1]; // P(X = x) after `t` probes
    set_bits[0] = 1.0;
    // Only a narrow band of x has any probability: track it, and drop tails below 1e-30.
    let (mut lo, mut hi) = (0usize, 0usize);
    let mut fpr = 0.0;
    let mut next = terms.iter().peekable();
    for t in 0..=max_probes {
        while let Some(&&(i, pmf)) = next.peek() {
            if i * k != t {
                break;
            }
            let maybe: f64 = (lo..=hi).map(|x| set_bits[x] * all_set[x]).sum();
            fpr += pmf * maybe;
            next.next();
        }
        if next.peek().is_none() {
            break;
        }
        // One more probe: it sets a new bit with probability (B − x)/B.
        hi = (hi + 1).min(b);
        for x in (lo.max(1)..=hi).rev() {
            set_bits[x] = set_bits[x] * (x as f64 / b as f64)
                + set_bits[x - 1] * ((b - x + 1) as f64 / b as f64);
        }
        if lo == 0 {
            set_bits[0] = 0.0;
        }
        while lo < hi && set_bits[lo] < 1e-30 {
            set_bits[lo] = 0.0;
            lo += 1;
        }
        while hi > lo && set_bits[hi] < 1e-30 {
            set_bits[hi] = 0.0;
            hi -= 1;
        }
    }
    fpr.min(1.0)
}

/// The best `k` for a filter of `bits` holding `n` items.
pub(crate) fn optimal_hashes(layout: Layout, bits: u64, n: u64) -> u32 {
    match layout {
        Layout::Classic => {
            let k = (bits as f64 / n as f64) * std::f64::consts::LN_2;
            k.round().clamp(1.0, MAX_HASHES as f64) as u32
        }
        Layout::Blocked => best_blocked_hashes_exact(bits, n).0,
        Layout::SplitBlock => SPLIT_HASHES,
    }
}

/// The `k` minimising the Blocked FPR for `bits` and `items`, with that FPR.
fn best_blocked_hashes(bits: u64, items: u64) -> (u32, f64) {
    let n = items as f64;
    let mut best = (1, blocked_fpr_mean_fill(bits, 1, n));
    for k in 2..=MAX_HASHES {
        let fpr = blocked_fpr_mean_fill(bits, k, n);
        if fpr >= best.1 {
            break; // unimodal in k: past the minimum it only grows
        }
        best = (k, fpr);
    }
    best
}

/// The `k` minimising the exact Blocked FPR, with that FPR: the fast model's best `k` is
/// within one of it, and the FPR is unimodal in `k`, so walk from there.
fn best_blocked_hashes_exact(bits: u64, items: u64) -> (u32, f64) {
    let n = items as f64;
    let start = best_blocked_hashes(bits, items).0;
    let mut best = (start, blocked_fpr(bits, start, n));
    for step in [-1i64, 1] {
        let mut k = i64::from(best.0) + step;
        while (1..=i64::from(MAX_HASHES)).contains(&k) {
            let fpr = blocked_fpr(bits, k as u32, n);
            if fpr >= best.1 {
                break;
            }
            best = (k as u32, fpr);
            k += step;
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocked_costs_more_bits_than_classic_but_stays_under_the_budget() {
        for (p, budget) in [(0.01, 11.5), (0.001, 17.0), (0.1, 6.5)] {
            let c = optimal(1_000_000, p).unwrap();
            let b = optimal_blocked(1_000_000, p).unwrap();
            assert!(b.bits >= c.bits, "p={p}");
            assert!(
                (b.bits as f64 / 1e6) < budget,
                "p={p}: {} bits/item",
                b.bits as f64 / 1e6
            );
            assert!(blocked_fpr(b.bits, b.hashes, 1e6) <= p);
            assert!(blocked_fpr(b.bits - BLOCK_BITS, b.hashes, 1e6) > p * 0.999);
        }
    }

    #[test]
    fn uneven_block_loads_never_beat_the_classic_rate() {
        // Near the optimal k the FPR is convex in a block's load, so spreading keys over
        // blocks unevenly (Poisson) can only cost accuracy against an even spread.
        for bits_per_item in [4.0f64, 8.0, 10.0, 16.0, 30.0] {
            let best = (bits_per_item * std::f64::consts::LN_2).round() as u32;
            for k in [best - 1, best, best + 1] {
                let n = 100_000.0;
                let m = (n * bits_per_item) as u64 / BLOCK_BITS * BLOCK_BITS;
                let (b, c) = (blocked_fpr(m, k, n), classic_fpr(m, k, n));
                assert!(
                    b >= c * 0.999,
                    "{bits_per_item} bits/item, k={k}: {b} < {c}"
                );
            }
        }
    }

    #[test]
    fn estimate_inverts_the_expected_fill() {
        let (m, k, n) = (1u64 << 20, 7u32, 100_000.0f64);
        let ones_classic = m as f64 * (1.0 - (-(k as f64) * n / m as f64).exp());
        let est = estimate_items(Layout::Classic, m, k, ones_classic as u64);
        assert!((est - n).abs() / n < 1e-3, "{est}");
    }
}
