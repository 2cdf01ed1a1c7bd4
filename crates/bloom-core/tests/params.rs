//! Sizing: `params::optimal` against values computed independently, the Blocked and
//! SplitBlock sizings' guarantees, and every invalid parameter giving the right `BuildError`
//! (never a panic) with a message that says what to change.

use std::f64::consts::LN_2;

use bloom_core::params::{self, MAX_BITS, MAX_HASHES, Params, SPLIT_HASHES};
use bloom_core::{BloomFilter, BuildError, Layout};
use proptest::prelude::*;
use proptest::test_runner::RngSeed;

/// `(n, p, m, k)` computed with 60-digit arithmetic (Python `mpmath`), not with f64:
/// `m = ceil(-n·ln p / (ln 2)²)`, `k = max(1, round(m/n · ln 2))`. None of these is within
/// 1e-9 of a rounding boundary, so an f64 implementation must reproduce them exactly.
const OPTIMAL: &[(u64, f64, u64, u32)] = &[
    (1, 0.5, 2, 1),
    (1, 0.1, 5, 3),
    (1, 0.01, 10, 7),
    (1, 0.001, 15, 10),
    (1, 1e-9, 44, 30),
    (2, 0.5, 3, 1),
    (2, 0.05, 13, 5),
    (3, 0.05, 19, 4),
    (3, 0.0001, 58, 13),
    (7, 0.3, 18, 2),
    (7, 0.01, 68, 7),
    (10, 0.01, 96, 7),
    (10, 1e-6, 288, 20),
    (100, 0.5, 145, 1),
    (100, 0.3, 251, 2),
    (100, 0.01, 959, 7),
    (100, 1e-9, 4_314, 30),
    (1_000, 0.1, 4_793, 3),
    (1_000, 0.01, 9_586, 7),
    (1_000, 0.001, 14_378, 10),
    (10_000, 0.5, 14_427, 1),
    (10_000, 0.05, 62_353, 4),
    (10_000, 0.01, 95_851, 7),
    (10_000, 0.001, 143_776, 10),
    (100_000, 0.1, 479_253, 3),
    (100_000, 0.01, 958_506, 7),
    (100_000, 0.0001, 1_917_012, 13),
    (1_000_000, 0.1, 4_792_530, 3),
    (1_000_000, 0.01, 9_585_059, 7),
    (1_000_000, 0.001, 14_377_588, 10),
    (1_000_000, 1e-6, 28_755_176, 20),
    (10_000_000, 0.01, 95_850_584, 7),
    (123_456_789, 0.05, 769_780_763, 4),
    (123_456_789, 1e-9, 5_325_032_384, 30),
    (1_000_000_000, 0.5, 1_442_695_041, 1),
    (1_000_000_000, 0.01, 9_585_058_378, 7),
    (1_000_000_000, 1e-9, 43_132_762_699, 30),
];

#[test]
fn optimal_matches_the_precomputed_table() {
    for &(n, p, bits, hashes) in OPTIMAL {
        let got = params::optimal(n, p).unwrap_or_else(|e| panic!("({n}, {p}): {e}"));
        assert_eq!(got, Params { bits, hashes }, "optimal({n}, {p})");
        assert_eq!(params::for_layout(Layout::Classic, n, p).unwrap(), got);
    }
}

/// The formula, written out plainly, on a grid of (n, p).
#[test]
fn optimal_matches_the_formula() {
    let ns = [
        1u64,
        2,
        5,
        9,
        33,
        64,
        999,
        4_096,
        65_537,
        777_777,
        31_415_926,
        1 << 36,
    ];
    let ps: [f64; 12] = [
        0.9, 0.75, 0.5, 0.2, 0.123, 0.05, 0.02, 0.007, 1e-3, 3e-5, 1e-7, 1e-12,
    ];
    for n in ns {
        for p in ps {
            let exact = -(n as f64) * p.ln() / (LN_2 * LN_2);
            let m = exact.ceil() as u64;
            if m > MAX_BITS {
                continue; // covered by `too_large_is_an_error`
            }
            let k = ((m as f64 / n as f64) * LN_2).round().max(1.0) as u32;
            let got = params::optimal(n, p).unwrap_or_else(|e| panic!("({n}, {p}): {e}"));
            assert_eq!((got.bits, got.hashes), (m.max(1), k), "optimal({n}, {p})");
            // m is the smallest whole number of bits with m ≥ the exact optimum.
            assert!(got.bits as f64 >= exact && (got.bits - 1) as f64 <= exact);
        }
    }
}

#[test]
fn classic_filters_are_sized_exactly_by_optimal() {
    for &(n, p, bits, hashes) in OPTIMAL.iter().filter(|r| r.2 < 20_000_000) {
        let f = BloomFilter::builder()
            .layout(Layout::Classic)
            .expected_items(n)
            .false_positive_rate(p)
            .seed(3)
            .build()
            .unwrap();
        assert_eq!((f.num_bits(), f.num_hashes()), (bits, hashes), "({n}, {p})");
        assert_eq!(f.capacity(), Some(n));
        assert_eq!(f.target_fpr(), Some(p));
        // Classic stores m as is; memory is whole words.
        assert_eq!(f.size_in_bytes() as u64, bits.div_ceil(64) * 8);
    }
}

// ---------------------------------------------------------------------------------------
// Blocked sizing

/// The exact Blocked FPR, written independently of the crate (which tracks the distribution
/// of set bits probe by probe): a block that received `t = i·k` probes answers "maybe" to a new
/// key when the `d` distinct offsets of its `k` probes are all set. `P(d distinct) =
/// S(k, d)·B(B−1)…(B−d+1)/B^k` (Stirling numbers of the second kind), and `P(d given offsets
/// all set after t probes) = Σ_l (−1)^l C(d, l) (1 − l/B)^t` (inclusion–exclusion). The
/// alternating sum loses precision for large k, so this is used for k ≤ 20 only.
fn blocked_fpr_reference(bits: u64, k: u32, n: f64) -> f64 {
    let b = 512.0f64;
    let lambda = n * b / bits as f64;
    assert!(
        lambda < 600.0 && k <= 20,
        "reference only for moderate loads and k"
    );
    let k = k as usize;
    // Stirling numbers S(k, d).
    let mut stirling = vec![vec![0.0f64; k + 1]; k + 1];
    stirling[0][0] = 1.0;
    for row in 1..=k {
        for d in 1..=row {
            stirling[row][d] = d as f64 * stirling[row - 1][d] + stirling[row - 1][d - 1];
        }
    }
    let p_distinct: Vec<f64> = (0..=k)
        .map(|d| {
            let falling: f64 = (0..d).map(|j| b - j as f64).product();
            stirling[k][d] * falling / b.powi(k as i32)
        })
        .collect();
    let binom =
        |d: usize, l: usize| -> f64 { (0..l).map(|j| (d - j) as f64 / (j + 1) as f64).product() };
    let mut pmf = (-lambda).exp();
    let mut sum = 0.0;
    for i in 0..2_000u32 {
        if i > 0 {
            pmf *= lambda / f64::from(i);
        }
        let t = f64::from(i) * k as f64;
        let maybe: f64 = (1..=k)
            .map(|d| {
                let all_set: f64 = (0..=d)
                    .map(|l| {
                        let sign = if l % 2 == 0 { 1.0 } else { -1.0 };
                        sign * binom(d, l) * (1.0 - l as f64 / b).powf(t)
                    })
                    .sum();
                p_distinct[d] * all_set
            })
            .sum();
        sum += pmf * maybe;
    }
    sum
}

/// The Blocked FPR with every block's fill at its mean: a lower bound of the exact one.
fn blocked_fpr_mean_fill(bits: u64, k: u32, n: f64) -> f64 {
    let b = 512.0;
    let lambda = n * b / bits as f64;
    let keep = (1.0 - 1.0 / b).powi(k as i32);
    let mut pmf = (-lambda).exp();
    let mut sum = 0.0;
    for i in 0..2_000 {
        if i > 0 {
            pmf *= lambda / f64::from(i);
        }
        sum += pmf * (1.0 - keep.powi(i)).powi(k as i32);
    }
    sum
}

fn classic_fpr_reference(bits: u64, k: u32, n: f64) -> f64 {
    let k = f64::from(k);
    (1.0 - (1.0 - 1.0 / bits as f64).powf(k * n)).powf(k)
}

#[test]
fn expected_fpr_matches_the_reference_formulas() {
    for (bits, k, n) in [
        (10_240u64, 7u32, 1_000.0),
        (5_120, 3, 1_000.0),
        (95_744, 10, 10_000.0),
        (1 << 20, 7, 100_000.0),
        (512, 1, 10.0),
        (512, 20, 50.0),
        (51_200, 64, 100.0),
    ] {
        let got = params::expected_fpr(Layout::Blocked, bits, k, n);
        if k <= 20 {
            let want = blocked_fpr_reference(bits, k, n);
            assert!(
                (got - want).abs() <= 1e-6 * want,
                "Blocked m={bits} k={k} n={n}: {got} vs {want}"
            );
        }
        // Uneven fill within blocks only costs: never below the mean-fill value.
        let floor = blocked_fpr_mean_fill(bits, k, n);
        assert!(
            got >= floor * (1.0 - 1e-9),
            "Blocked m={bits} k={k} n={n}: {got} < mean-fill {floor}"
        );
        let got = params::expected_fpr(Layout::Classic, bits, k, n);
        let want = classic_fpr_reference(bits, k, n);
        assert!(
            (got - want).abs() <= 1e-6 * want,
            "Classic m={bits} k={k} n={n}: {got} vs {want}"
        );
    }
    // An empty filter never answers "maybe"; a full one always does.
    assert_eq!(params::expected_fpr(Layout::Blocked, 512, 7, 0.0), 0.0);
    assert_eq!(params::expected_fpr(Layout::Classic, 512, 7, 0.0), 0.0);
    assert!(params::expected_fpr(Layout::Classic, 64, 1, 1e6) > 0.999_999);
    assert!(params::expected_fpr(Layout::Blocked, 512, 1, 1e6) > 0.999_999);
}

#[test]
fn blocked_sizing_is_the_smallest_whole_number_of_blocks_that_meets_p() {
    for n in [1_000u64, 10_000, 100_000, 1_000_000] {
        for p in [0.1, 0.05, 0.01, 0.001, 0.0001] {
            let got = params::optimal_blocked(n, p).unwrap();
            let (m, k) = (got.bits, got.hashes);
            let what = format!("optimal_blocked({n}, {p}) = {got:?}");
            assert_eq!(m % 512, 0, "{what}");
            assert!(m >= params::optimal(n, p).unwrap().bits, "{what}");
            let fpr = params::expected_fpr(Layout::Blocked, m, k, n as f64);
            assert!(fpr <= p, "{what}: {fpr}");
            // k is the best for m, and one block fewer misses p whatever its k.
            for other_k in 1..=MAX_HASHES {
                let other = params::expected_fpr(Layout::Blocked, m, other_k, n as f64);
                assert!(other >= fpr, "{what}: k={other_k} is better ({other})");
                if m > 512 {
                    let fewer = params::expected_fpr(Layout::Blocked, m - 512, other_k, n as f64);
                    assert!(
                        fewer > p,
                        "{what}: one block fewer with k={other_k}: {fewer}"
                    );
                }
            }
            // The same through the builder and for_layout.
            assert_eq!(params::for_layout(Layout::Blocked, n, p).unwrap(), got);
            if m <= 1 << 24 {
                let f = BloomFilter::builder()
                    .expected_items(n)
                    .false_positive_rate(p)
                    .seed(5)
                    .build()
                    .unwrap();
                assert_eq!(f.layout(), Layout::Blocked, "the default layout");
                assert_eq!((f.num_bits(), f.num_hashes()), (m, k), "{what}");
            }
        }
    }
}

#[test]
fn blocked_costs_at_most_11_5_bits_per_item_at_one_percent() {
    for n in [1_000u64, 10_000, 100_000, 1_000_000, 50_000_000] {
        let got = params::optimal_blocked(n, 0.01).unwrap();
        let per_item = got.bits as f64 / n as f64;
        assert!(per_item <= 11.5, "n={n}: {per_item} bits per item");
        let classic = params::optimal(n, 0.01).unwrap().bits as f64 / n as f64;
        assert!(classic <= 9.6, "n={n}: Classic {classic} bits per item");
    }
}

#[test]
fn explicit_bits_with_expected_items_derive_the_best_k() {
    let n = 10_000u64;
    for m in [20_000u64, 95_851, 200_000] {
        let classic = BloomFilter::builder()
            .layout(Layout::Classic)
            .bits(m)
            .expected_items(n)
            .seed(1)
            .build()
            .unwrap();
        let k = ((m as f64 / n as f64) * LN_2).round() as u32;
        assert_eq!((classic.num_bits(), classic.num_hashes()), (m, k), "m={m}");
        assert_eq!(classic.capacity(), Some(n));
        assert_eq!(classic.target_fpr(), None);

        let blocked = BloomFilter::builder()
            .bits(m)
            .expected_items(n)
            .seed(1)
            .build()
            .unwrap();
        let mb = m.div_ceil(512) * 512;
        assert_eq!(blocked.num_bits(), mb);
        let best = (1..=MAX_HASHES)
            .min_by(|&a, &b| {
                let fa = params::expected_fpr(Layout::Blocked, mb, a, n as f64);
                let fb = params::expected_fpr(Layout::Blocked, mb, b, n as f64);
                fa.total_cmp(&fb)
            })
            .unwrap();
        assert_eq!(blocked.num_hashes(), best, "m={m}");
    }
    // An explicit k wins over the derived one, with either sizing.
    let f = BloomFilter::builder()
        .expected_items(1_000)
        .false_positive_rate(0.01)
        .hashes(3)
        .seed(1)
        .build()
        .unwrap();
    assert_eq!(f.num_hashes(), 3);
    assert_eq!(
        f.num_bits(),
        params::optimal_blocked(1_000, 0.01).unwrap().bits
    );
}

// ---------------------------------------------------------------------------------------
// SplitBlock sizing

/// The SplitBlock FPR written out plainly (not with the crate's log-space Poisson terms): a
/// block that received `i` keys has `i` uniformly placed bits in each of its eight 64-bit
/// words, so a new key's bit in a word is set with probability `1 − (63/64)^i`, independently
/// per word; the block's load `i` is Poisson(λ = 512·n/m).
fn split_block_fpr_reference(bits: u64, n: f64) -> f64 {
    let lambda = n * 512.0 / bits as f64;
    assert!(lambda < 600.0, "reference only for moderate loads");
    let mut pmf = (-lambda).exp();
    let mut sum = 0.0;
    for i in 0..2_000 {
        if i > 0 {
            pmf *= lambda / f64::from(i);
        }
        sum += pmf * (1.0 - (63.0f64 / 64.0).powi(i)).powi(8);
    }
    sum
}

#[test]
fn expected_fpr_for_split_block_is_the_closed_form() {
    for (bits, n) in [
        (10_240u64, 1_000.0),
        (5_120, 1_000.0),
        (95_744, 10_000.0),
        (1 << 20, 100_000.0),
        (512, 10.0),
        (512, 200.0),
        (51_200, 100.0),
    ] {
        let got = params::expected_fpr(Layout::SplitBlock, bits, SPLIT_HASHES, n);
        let want = split_block_fpr_reference(bits, n);
        assert!(
            (got - want).abs() <= 1e-9 * want,
            "SplitBlock m={bits} n={n}: {got} vs {want}"
        );
        // The layout fixes k: another `hashes` cannot describe one of its filters.
        assert_eq!(params::expected_fpr(Layout::SplitBlock, bits, 3, n), got);
    }
    assert_eq!(params::expected_fpr(Layout::SplitBlock, 512, 8, 0.0), 0.0);
    assert!(params::expected_fpr(Layout::SplitBlock, 512, 8, 1e6) > 0.999_999);
}

#[test]
fn split_block_sizing_is_the_smallest_whole_number_of_blocks_that_meets_p() {
    for n in [1u64, 10, 1_000, 10_000, 100_000, 1_000_000] {
        for p in [0.5, 0.1, 0.05, 0.01, 0.001, 0.0001, 1e-6] {
            let got = params::optimal_split_block(n, p).unwrap();
            let m = got.bits;
            let what = format!("optimal_split_block({n}, {p}) = {got:?}");
            assert_eq!(got.hashes, SPLIT_HASHES, "{what}");
            assert_eq!(SPLIT_HASHES, 8);
            assert_eq!(m % 512, 0, "{what}");
            let fpr = params::expected_fpr(Layout::SplitBlock, m, 8, n as f64);
            assert!(fpr <= p, "{what}: {fpr}");
            if m <= 1 << 26 {
                assert!((fpr - split_block_fpr_reference(m, n as f64)).abs() <= 1e-9 * fpr);
            }
            // One block fewer misses p.
            if m > 512 {
                let fewer = params::expected_fpr(Layout::SplitBlock, m - 512, 8, n as f64);
                assert!(fewer > p, "{what}: one block fewer gives {fewer}");
            }
            // The same through for_layout and the builder.
            assert_eq!(params::for_layout(Layout::SplitBlock, n, p).unwrap(), got);
            if m <= 1 << 24 {
                let f = BloomFilter::builder()
                    .layout(Layout::SplitBlock)
                    .expected_items(n)
                    .false_positive_rate(p)
                    .seed(5)
                    .build()
                    .unwrap();
                assert_eq!(f.layout(), Layout::SplitBlock);
                assert_eq!((f.num_bits(), f.num_hashes()), (m, 8), "{what}");
                assert_eq!((f.capacity(), f.target_fpr()), (Some(n), Some(p)));
            }
        }
    }
}

/// What one bit per word costs against Blocked (whose k and in-block offsets are free), at
/// n = 1,000,000 (bits per item; n = 10,000 is within 0.05 of these):
///
/// | p     | SplitBlock | Blocked | ratio |
/// |-------|------------|---------|-------|
/// | 10%   | 5.88       | 4.84    | 1.216 |
/// | 1%    | 10.10      | 9.92    | 1.018 |
/// | 0.1%  | 15.73      | 15.55   | 1.012 |
/// | 0.01% | 23.61      | 22.03   | 1.072 |
#[test]
fn split_block_costs_at_most_5_percent_more_bits_than_blocked_at_1_and_0_1_percent() {
    for n in [10_000u64, 1_000_000] {
        let ratio = |p: f64| {
            let split = params::optimal_split_block(n, p).unwrap().bits as f64;
            let blocked = params::optimal_blocked(n, p).unwrap().bits as f64;
            println!(
                "n={n} p={p}: SplitBlock {:.2} bits/item, Blocked {:.2}, ratio {:.3}",
                split / n as f64,
                blocked / n as f64,
                split / blocked
            );
            split / blocked
        };
        for p in [1e-2, 1e-3] {
            let r = ratio(p);
            assert!((1.0..=1.05).contains(&r), "n={n} p={p}: ratio {r}");
        }
        // At 10% the fixed k = 8 is far from Blocked's best (k = 3 or 4): much more.
        let r = ratio(0.1);
        assert!(r > 1.15, "n={n} p=0.1: ratio {r}");
        let r = ratio(1e-4);
        assert!(r > 1.05, "n={n} p=1e-4: ratio {r}");
    }
}

#[test]
fn split_block_filters_fix_k_at_8() {
    let b = || {
        BloomFilter::builder()
            .layout(Layout::SplitBlock)
            .bits(4096)
            .seed(1)
    };
    for k in [1u32, 7, 9, 64, 65, u32::MAX] {
        let e = build(b().hashes(k)).unwrap_err();
        assert!(
            matches!(
                e,
                BuildError::HashesFixedByLayout { layout: Layout::SplitBlock, hashes, fixed: 8 }
                    if hashes == k
            ),
            "k = {k}: {e:?}"
        );
        let m = message(&e);
        assert!(
            m.contains("split-block") && m.contains(&k.to_string()) && m.contains("exactly 8"),
            "{m}"
        );
        // Also with the (n, p) sizing, which would otherwise take the given k.
        let e = build(
            BloomFilter::builder()
                .layout(Layout::SplitBlock)
                .expected_items(1_000)
                .false_positive_rate(0.01)
                .hashes(k)
                .seed(1),
        )
        .unwrap_err();
        assert!(
            matches!(e, BuildError::HashesFixedByLayout { .. }),
            "k = {k}: {e:?}"
        );
    }
    // k = 0 is still ZeroHashes.
    let e = build(b().hashes(0)).unwrap_err();
    assert!(matches!(e, BuildError::ZeroHashes), "{e:?}");
    // k = 8 explicitly, or not at all: the layout knows it.
    for f in [
        build(b().hashes(8)).unwrap(),
        build(b()).unwrap(),
        build(b().expected_items(300)).unwrap(),
    ] {
        assert_eq!(
            (f.layout(), f.num_bits(), f.num_hashes()),
            (Layout::SplitBlock, 4096, 8)
        );
        assert!(f.insert("k") && f.contains("k"));
    }
    // The bits are rounded up to whole blocks, like Blocked.
    for (m, rounded) in [(1u64, 512u64), (512, 512), (513, 1024), (1000, 1024)] {
        let f = build(b().bits(m)).unwrap();
        assert_eq!(f.num_bits(), rounded, "m = {m}");
    }
    // Other layouts still need k with explicit bits.
    for layout in [Layout::Blocked, Layout::Classic] {
        let e = build(BloomFilter::builder().layout(layout).bits(4096).seed(1)).unwrap_err();
        assert!(matches!(e, BuildError::MissingHashes), "{layout:?}: {e:?}");
    }
    // And 8 is just another k for them.
    let f = build(BloomFilter::builder().bits(4096).hashes(8).seed(1)).unwrap();
    assert_eq!((f.layout(), f.num_hashes()), (Layout::Blocked, 8));
}

// ---------------------------------------------------------------------------------------
// Errors

fn message(e: &BuildError) -> String {
    e.to_string()
}

#[test]
fn invalid_rates_are_errors() {
    for p in [
        0.0,
        -0.0,
        -0.01,
        1.0,
        1.000_000_1,
        42.0,
        f64::NAN,
        -f64::NAN,
        f64::INFINITY,
        f64::NEG_INFINITY,
        -f64::MIN_POSITIVE,
    ] {
        let results = [
            params::optimal(1_000, p),
            params::optimal_blocked(1_000, p),
            params::optimal_split_block(1_000, p),
            params::for_layout(Layout::Classic, 1_000, p),
        ];
        for r in results {
            match r {
                Err(e @ BuildError::InvalidFalsePositiveRate(got)) => {
                    assert!(got.to_bits() == p.to_bits(), "{p}: reported {got}");
                    let m = message(&e);
                    assert!(m.contains("strictly between 0 and 1"), "{m}");
                    assert!(m.contains("0.01"), "the message suggests a value: {m}");
                }
                other => panic!("p = {p}: {other:?}"),
            }
        }
        for layout in [Layout::Blocked, Layout::Classic, Layout::SplitBlock] {
            let r = BloomFilter::builder()
                .layout(layout)
                .expected_items(1_000)
                .false_positive_rate(p)
                .seed(1)
                .build();
            assert!(
                matches!(r, Err(BuildError::InvalidFalsePositiveRate(_))),
                "p = {p}, {layout:?}: {r:?}"
            );
        }
        assert!(matches!(
            BloomFilter::new(10, p),
            Err(BuildError::InvalidFalsePositiveRate(_))
        ));
    }
    // The extremes inside (0, 1) are fine, up to the rate that would need more than 64 hashes.
    for p in [1e-12, 0.5, 0.999] {
        assert!(params::optimal(10, p).is_ok(), "{p}");
    }
    assert!(matches!(
        params::optimal(10, f64::MIN_POSITIVE),
        Err(BuildError::TooManyHashes { .. })
    ));
    for p in [1e-12, 0.5, 0.999] {
        assert!(params::optimal_blocked(10, p).is_ok(), "{p}");
        assert!(params::optimal_split_block(10, p).is_ok(), "{p}");
    }
    // SplitBlock's k is fixed at 8: a rate for which Classic would want more than 64 hashes
    // only needs more bits (about 1.8e8 per item at 1e-20), not an impossible k.
    let tiny = params::optimal_split_block(1_000, 1e-20).unwrap();
    assert_eq!(tiny.hashes, 8);
    assert!(params::expected_fpr(Layout::SplitBlock, tiny.bits, 8, 1_000.0) <= 1e-20);
}

#[test]
fn zero_items_is_an_error() {
    let checks = [
        params::optimal(0, 0.01),
        params::optimal_blocked(0, 0.01),
        params::optimal_split_block(0, 0.01),
        BloomFilter::new(0, 0.01).map(|_| Params { bits: 0, hashes: 0 }),
        BloomFilter::builder()
            .layout(Layout::Classic)
            .expected_items(0)
            .false_positive_rate(0.01)
            .build()
            .map(|_| Params { bits: 0, hashes: 0 }),
        // Deriving k from bits needs a positive n too.
        BloomFilter::builder()
            .bits(1024)
            .expected_items(0)
            .seed(1)
            .build()
            .map(|_| Params { bits: 0, hashes: 0 }),
    ];
    for r in checks {
        match r {
            Err(e @ BuildError::ZeroItems) => {
                assert!(message(&e).contains("at least 1"), "{e}");
            }
            other => panic!("{other:?}"),
        }
    }
}

fn build(b: bloom_core::Builder) -> Result<BloomFilter, BuildError> {
    b.build()
}

#[test]
fn explicit_sizes_out_of_range_are_errors() {
    for layout in [Layout::Blocked, Layout::Classic] {
        let b = || BloomFilter::builder().layout(layout).seed(1);

        let e = build(b().bits(0).hashes(3)).unwrap_err();
        assert!(matches!(e, BuildError::ZeroBits), "{e:?}");
        assert!(message(&e).contains("bits must be at least 1"), "{e}");

        let e = build(b().bits(1024).hashes(0)).unwrap_err();
        assert!(matches!(e, BuildError::ZeroHashes), "{e:?}");
        assert!(message(&e).contains("hashes must be at least 1"), "{e}");

        for k in [65, 100, u32::MAX] {
            let e = build(b().bits(1024).hashes(k)).unwrap_err();
            assert!(
                matches!(e, BuildError::TooManyHashes { hashes, max: 64 } if hashes == k),
                "{e:?}"
            );
            let m = message(&e);
            assert!(m.contains(&k.to_string()) && m.contains("64"), "{m}");
            assert!(m.contains("fewer hashes"), "{m}");
        }
        // k = 64 is the maximum and allowed.
        assert_eq!(build(b().bits(1024).hashes(64)).unwrap().num_hashes(), 64);
        // k = 0 also with the (n, p) sizing.
        let e = build(b().expected_items(10).false_positive_rate(0.1).hashes(0)).unwrap_err();
        assert!(matches!(e, BuildError::ZeroHashes), "{e:?}");

        for m in [MAX_BITS + 1, u64::MAX / 2, u64::MAX] {
            let e = build(b().bits(m).hashes(3)).unwrap_err();
            assert!(
                matches!(e, BuildError::TooLarge { max, .. } if max == MAX_BITS),
                "{layout:?} m = {m}: {e:?}"
            );
            assert!(message(&e).contains("maximum"), "{e}");
        }
    }
    // Blocked rounds up to whole blocks before checking the maximum.
    let e = build(BloomFilter::builder().bits(MAX_BITS - 1).hashes(0).seed(1)).unwrap_err();
    assert!(matches!(e, BuildError::ZeroHashes), "{e:?}");
}

#[test]
fn too_large_is_an_error() {
    for (n, p) in [
        (u64::MAX, 0.01),
        (u64::MAX, 0.999_999),
        (1 << 40, 0.01),
        (1 << 60, 0.5),
        (200_000_000_000, 0.01),
        (1_000, 1e-300),
    ] {
        for (r, layout) in [
            (params::optimal(n, p), Layout::Classic),
            (params::optimal_blocked(n, p), Layout::Blocked),
            (params::optimal_split_block(n, p), Layout::SplitBlock),
        ] {
            match r {
                // 1e-300 needs ~1000 hashes per key before it needs too many bits (except in
                // SplitBlock, whose k is fixed: there it is too many bits).
                Err(BuildError::TooManyHashes { .. })
                    if n == 1_000 && layout != Layout::SplitBlock => {}
                Err(e @ BuildError::TooLarge { max, .. }) => {
                    assert_eq!(max, MAX_BITS);
                    let m = message(&e);
                    assert!(
                        m.contains("the expected items")
                            && m.contains("raise the false-positive rate"),
                        "{m}"
                    );
                }
                other => panic!("{layout:?} ({n}, {p}): {other:?}"),
            }
        }
        let r = BloomFilter::builder()
            .layout(Layout::Classic)
            .expected_items(n)
            .false_positive_rate(p)
            .seed(1)
            .build();
        if n != 1_000 {
            assert!(matches!(r, Err(BuildError::TooLarge { .. })), "{r:?}");
        }
        let r = BloomFilter::builder()
            .layout(Layout::SplitBlock)
            .expected_items(n)
            .false_positive_rate(p)
            .seed(1)
            .build();
        assert!(matches!(r, Err(BuildError::TooLarge { .. })), "{r:?}");
    }
    // Just under the maximum is fine (not built: that would be 120 GiB).
    let near = params::optimal(100_000_000_000, 0.01).unwrap();
    assert!(near.bits <= MAX_BITS && near.bits > MAX_BITS / 2);
}

/// `optimal` clamps k to 64 when the formula asks for more (p below ~2⁻⁶⁴), and then returns
/// a size whose false-positive rate is above the requested p.
#[test]
fn optimal_never_returns_a_size_that_misses_p() {
    for p in [1e-20, 1e-30, 1e-100] {
        match params::optimal(1_000, p) {
            Ok(got) => {
                let fpr = params::expected_fpr(Layout::Classic, got.bits, got.hashes, 1_000.0);
                assert!(fpr <= p * 1.000_001, "p = {p:e}: {got:?} gives {fpr:e}");
            }
            Err(BuildError::TooManyHashes { .. } | BuildError::TooLarge { .. }) => {}
            Err(e) => panic!("p = {p:e}: {e:?}"),
        }
    }
}

#[test]
fn missing_and_conflicting_settings_are_errors() {
    let b = || BloomFilter::builder().seed(1);
    let cases: Vec<(Result<BloomFilter, BuildError>, &str)> = vec![
        (build(b()), ".expected_items(n)"),
        (build(b().hashes(3)), ".bits(m)"),
        (
            build(b().layout(Layout::Classic)),
            ".false_positive_rate(p)",
        ),
        (build(b().expected_items(100)), ".false_positive_rate(p)"),
        (build(b().false_positive_rate(0.01)), ".expected_items(n)"),
        (
            build(b().false_positive_rate(0.01).hashes(3)),
            ".expected_items(n)",
        ),
        (build(b().bits(1024)), ".hashes(k)"),
        (
            build(b().bits(1024).false_positive_rate(0.01)),
            "one way or the other",
        ),
        (
            build(b().bits(1024).hashes(3).false_positive_rate(0.01)),
            "one way or the other",
        ),
        (
            build(b().bits(1024).expected_items(10).false_positive_rate(0.01)),
            "one way or the other",
        ),
    ];
    for (i, (r, hint)) in cases.into_iter().enumerate() {
        let e = r.unwrap_err();
        let variant_ok = match i {
            0..=2 => matches!(e, BuildError::MissingSize),
            3 => matches!(e, BuildError::MissingFalsePositiveRate),
            4 | 5 => matches!(e, BuildError::MissingExpectedItems),
            6 => matches!(e, BuildError::MissingHashes),
            _ => matches!(e, BuildError::ConflictingSize),
        };
        assert!(variant_ok, "case {i}: {e:?}");
        let m = message(&e);
        assert!(m.contains(hint), "case {i}: {m:?} does not say {hint:?}");
    }
}

#[test]
fn errors_are_std_errors() {
    fn is_error<E: std::error::Error + Send + Sync + 'static>(_: &E) {}
    let e = params::optimal(0, 0.5).unwrap_err();
    is_error(&e);
    let boxed: Box<dyn std::error::Error> = Box::new(e);
    assert!(!boxed.to_string().is_empty());
}

// ---------------------------------------------------------------------------------------
// Never a panic

fn config() -> ProptestConfig {
    ProptestConfig {
        cases: 512,
        rng_seed: RngSeed::Fixed(0x009A_4A45),
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

/// Rates: any f64 (NaN, infinities, negatives, subnormals…) and plenty of ordinary ones.
fn any_rate() -> impl Strategy<Value = f64> {
    prop_oneof![
        any::<f64>(),
        0.0..=1.0f64,
        Just(0.0),
        Just(1.0),
        Just(f64::NAN),
        Just(f64::MIN_POSITIVE),
        Just(1e-300),
    ]
}

fn valid_params(r: &Result<Params, BuildError>) -> Result<(), TestCaseError> {
    if let Ok(got) = r {
        prop_assert!((1..=MAX_BITS).contains(&got.bits), "{:?}", got);
        prop_assert!((1..=MAX_HASHES).contains(&got.hashes), "{:?}", got);
    }
    Ok(())
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn optimal_never_panics(n in any::<u64>(), p in any_rate()) {
        let r = params::optimal(n, p);
        valid_params(&r)?;
        prop_assert_eq!(r.is_ok(), n > 0 && p > 0.0 && p < 1.0 && {
            -(n as f64) * p.ln() / (LN_2 * LN_2) <= MAX_BITS as f64
        });
    }

    /// Blocked sizing (rates close to 1 with many items are slow to size, see the report, so
    /// they are kept to small n here).
    #[test]
    fn optimal_blocked_never_panics(
        n in prop_oneof![any::<u64>(), 0..1_000_000u64],
        p in any_rate(),
    ) {
        let p = if p > 0.5 && p < 1.0 && n > 1_000 { p / 2.0 } else { p };
        let r = params::optimal_blocked(n, p);
        valid_params(&r)?;
        if let Ok(got) = r {
            prop_assert_eq!(got.bits % 512, 0);
            prop_assert!(params::expected_fpr(Layout::Blocked, got.bits, got.hashes, n as f64) <= p);
        }
    }

    /// SplitBlock sizing: Ok or an error for any input, and an Ok size meets p.
    #[test]
    fn optimal_split_block_never_panics(
        n in prop_oneof![any::<u64>(), 0..1_000_000u64],
        p in any_rate(),
    ) {
        let r = params::optimal_split_block(n, p);
        valid_params(&r)?;
        if let Ok(got) = r {
            prop_assert_eq!(got.bits % 512, 0);
            prop_assert_eq!(got.hashes, 8);
            prop_assert!(params::expected_fpr(Layout::SplitBlock, got.bits, 8, n as f64) <= p);
        }
    }

    /// Any combination of builder settings: Ok or an error, never a panic. Sizes are kept
    /// small enough that an Ok filter is cheap to allocate.
    #[test]
    fn the_builder_never_panics(
        layout in prop_oneof![Just(Layout::Blocked), Just(Layout::Classic), Just(Layout::SplitBlock)],
        items in prop::option::of(prop_oneof![Just(0u64), 1..20_000u64]),
        rate in prop::option::of(any_rate()),
        bits in prop::option::of(prop_oneof![
            Just(0u64), 1..200_000u64, Just(MAX_BITS + 1), Just(u64::MAX)
        ]),
        hashes in prop::option::of(prop_oneof![0..70u32, Just(u32::MAX)]),
        seed in prop::option::of(any::<u128>()),
    ) {
        // Keep what an Ok build allocates small: no rates below 1e-6 (the tiny and invalid
        // ones are covered above), and rates near 1 only with few items (slow to size).
        let rate = rate.map(|p| if p > 0.0 && p < 1e-6 { 1e-6 } else { p });
        let items = match (items, rate) {
            (Some(n), Some(p)) if p > 0.5 && n > 1_000 => Some(n % 1_000),
            _ => items,
        };
        let mut b = BloomFilter::builder().layout(layout);
        if let Some(n) = items { b = b.expected_items(n); }
        if let Some(p) = rate { b = b.false_positive_rate(p); }
        if let Some(m) = bits { b = b.bits(m); }
        if let Some(k) = hashes { b = b.hashes(k); }
        if let Some(s) = seed { b = b.seed(s); }
        match b.build() {
            Ok(f) => {
                prop_assert!(f.num_bits() >= 1 && f.num_bits() <= 2_000_000);
                prop_assert!((1..=MAX_HASHES).contains(&f.num_hashes()));
                if layout != Layout::Classic {
                    prop_assert_eq!(f.num_bits() % 512, 0);
                }
                if layout == Layout::SplitBlock {
                    prop_assert_eq!(f.num_hashes(), 8);
                }
                if let Some(s) = seed { prop_assert_eq!(f.seed(), s); }
                prop_assert!(f.insert("k") && f.contains("k"));
            }
            Err(e) => prop_assert!(!e.to_string().is_empty()),
        }
    }
}
