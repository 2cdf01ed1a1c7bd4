//! `CuckooFilter::contains_many`: the same answers as a loop of `contains`, in the keys' order,
//! and no false negative while other threads insert, move and remove keys.
//!
//! * Property tests over random filters (one bucket up to a few hundred, every fingerprint
//!   width, so buckets straddle words and small fingerprints give many false positives),
//!   random sequences of `insert`, `insert_unique` and `remove` over a small key space, and
//!   random query lists from empty to several prefetch windows long, with `u64` and string
//!   keys. The proptest RNG is seeded with a fixed value: a failure reproduces on every run
//!   (`PROPTEST_RNG_SEED=<n>` explores other inputs).
//! * A stress test like `tests/cuckoo.rs`'s, its checkers looking keys up in batches.
//!
//! `cargo test --release -p bloomguard-core --test cuckoo_batch -- --nocapture`

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bloom_core::CuckooFilter;
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::test_runner::RngSeed;

fn config() -> ProptestConfig {
    ProptestConfig {
        cases: 512,
        rng_seed: RngSeed::Fixed(0x0C0C_0BA7_C4E5),
        // Fixed seed: a failure reproduces without a regressions file in the source tree.
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

/// Keys are drawn from `0..KEYS`: few enough that queries hit inserted, removed and
/// never-inserted keys alike, and that inserts fill the smaller filters.
const KEYS: u64 = 600;

#[derive(Clone, Copy, Debug)]
enum Op {
    Insert(u64),
    InsertUnique(u64),
    /// Removes the key if it is inserted (a remove of a key never inserted may take another
    /// key's fingerprint: allowed, but then the no-false-negative check below would not hold).
    Remove(u64),
    /// Removes the key whether or not it was inserted.
    RemoveAny(u64),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0..KEYS).prop_map(Op::Insert),
        1 => (0..KEYS).prop_map(Op::InsertUnique),
        2 => (0..KEYS).prop_map(Op::Remove),
        1 => (0..KEYS).prop_map(Op::RemoveAny),
    ]
}

/// `(buckets, fingerprint bits, seed)`: one bucket (both of a key's buckets the same), a few,
/// or a few hundred; every width the builder accepts.
fn shape() -> impl Strategy<Value = (u64, u32, u128)> {
    (
        prop_oneof![1..=3u64, 4..=40u64, 41..=400u64],
        5..=17u32,
        any::<u128>(),
    )
}

fn build((buckets, bits, seed): (u64, u32, u128)) -> CuckooFilter {
    CuckooFilter::builder()
        .buckets(buckets)
        .fingerprint_bits(bits)
        .seed(seed)
        .build()
        .unwrap()
}

/// Runs `ops` on `f`; returns how many times each key is in it (inserted, not removed) if
/// every remove was of an inserted key, `None` otherwise.
fn apply(f: &CuckooFilter, ops: &[Op]) -> Option<HashMap<u64, u32>> {
    let mut count: HashMap<u64, u32> = HashMap::new();
    let mut exact = true;
    for &op in ops {
        match op {
            Op::Insert(k) => {
                if f.insert(&k).is_ok() {
                    *count.entry(k).or_default() += 1;
                }
            }
            Op::InsertUnique(k) => {
                // Skipped when another key's twin fingerprint is there: a later remove of
                // that twin takes this key too, so exact counts end here.
                if f.insert_unique(&k) == Ok(true) {
                    *count.entry(k).or_default() += 1;
                } else if count.get(&k).copied().unwrap_or(0) == 0 {
                    exact = false;
                }
            }
            Op::Remove(k) => {
                if let Some(c) = count.get_mut(&k).filter(|c| **c > 0) {
                    // Only a remove of a key never inserted can have taken its fingerprint.
                    let removed = f.remove(&k);
                    assert!(removed || !exact, "an inserted key could not be removed");
                    *c -= u32::from(removed);
                }
            }
            Op::RemoveAny(k) => {
                let had = count.get(&k).copied().unwrap_or(0);
                if f.remove(&k) {
                    if had > 0 {
                        count.insert(k, had - 1);
                    } else {
                        exact = false;
                    }
                }
            }
        }
    }
    exact.then_some(count)
}

proptest! {
    #![proptest_config(config())]

    /// `u64` keys, by value: the batch's answers are `contains`'s, in order, and every key
    /// inserted and not removed is found.
    #[test]
    fn same_answers_as_contains_u64(
        shape in shape(),
        ops in vec(op(), 0..500),
        queries in vec(0..KEYS, 0..80),
    ) {
        let f = build(shape);
        let present = apply(&f, &ops);
        let one_by_one: Vec<bool> = queries.iter().map(|k| f.contains(k)).collect();
        let batch = f.contains_many(queries.iter().copied());
        prop_assert_eq!(&batch, &one_by_one);
        // The same through references to the keys.
        prop_assert_eq!(&f.contains_many(&queries), &one_by_one);
        if let Some(present) = present {
            for (k, found) in queries.iter().zip(&batch) {
                prop_assert!(*found || present.get(k).copied().unwrap_or(0) == 0, "key {} missed", k);
            }
        }
    }

    /// String keys, owned and borrowed, and batches around the prefetch window's length.
    #[test]
    fn same_answers_as_contains_str(
        shape in shape(),
        ops in vec(op(), 0..300),
        queries in prop_oneof![0..=2usize, 14..=18usize, 30..=34usize, 0..64usize]
            .prop_flat_map(|n| vec(0..KEYS, n)),
    ) {
        let f = build(shape);
        let name = |k: u64| format!("user:{k}");
        for &op in &ops {
            match op {
                Op::Insert(k) | Op::InsertUnique(k) => {
                    let _ = f.insert(&name(k));
                }
                Op::Remove(k) | Op::RemoveAny(k) => {
                    f.remove(&name(k));
                }
            }
        }
        let keys: Vec<String> = queries.iter().map(|&k| name(k)).collect();
        let one_by_one: Vec<bool> = keys.iter().map(|k| f.contains(k)).collect();
        prop_assert_eq!(&f.contains_many(keys.iter().map(String::as_str)), &one_by_one);
        prop_assert_eq!(&f.contains_many(keys), &one_by_one);
    }
}

/// Fixed cases the random ones may miss: no keys, one key, a full filter, and a filter large
/// enough that its table is out of L1 and L2 (so the prefetch is not of cached lines).
#[test]
fn edge_cases() {
    let f = build((1, 8, 3));
    assert!(f.contains_many(std::iter::empty::<u64>()).is_empty());
    f.insert(&7u64).unwrap();
    assert_eq!(f.contains_many([7u64]), [f.contains(&7u64)]);
    assert_eq!(f.contains_many([7u64]), [true]);

    let full = build((2, 12, 5));
    let mut n = 0u64;
    while full.insert(&n).is_ok() {
        n += 1;
    }
    let keys: Vec<u64> = (0..n + 100).collect();
    let batch = full.contains_many(&keys);
    assert_eq!(
        batch,
        keys.iter().map(|k| full.contains(k)).collect::<Vec<_>>()
    );
    assert!(batch[..n as usize].iter().all(|&b| b));

    let big = CuckooFilter::builder()
        .expected_items(1_000_000)
        .false_positive_rate(0.01)
        .seed(9)
        .build()
        .unwrap();
    for k in 0..1_000_000u64 {
        big.insert(&k).unwrap();
    }
    let keys: Vec<u64> = (0..200_000u64)
        .map(|i| i * 7 + (i & 1) * (1 << 40))
        .collect();
    let batch = big.contains_many(&keys);
    assert_eq!(
        batch,
        keys.iter().map(|k| big.contains(k)).collect::<Vec<_>>()
    );
    let members = keys.iter().filter(|&&k| k < 1_000_000).count();
    assert_eq!(
        batch
            .iter()
            .zip(&keys)
            .filter(|&(&b, &k)| b && k < 1_000_000)
            .count(),
        members
    );
}

/// Two threads insert and remove their own keys, keeping the filter near its design load
/// (so inserts move keys), while two threads look keys up in batches of 64 and check those
/// that were present the whole time of the batch: odd and unchanged in `versions` (see
/// `tests/cuckoo.rs` `stress_no_false_negative_while_keys_move`) from before the batch was
/// started to after it returned.
#[test]
fn stress_no_false_negative_in_batches_while_keys_move() {
    const KEYS_PER_WRITER: u64 = 60_000;
    const BATCH: usize = 64;
    let run_for = Duration::from_secs(4);
    let filter = Arc::new(
        CuckooFilter::builder()
            .buckets(16_000)
            .fingerprint_bits(12)
            .seed(78)
            .build()
            .unwrap(),
    );
    let versions: Arc<Vec<AtomicU64>> = Arc::new(
        (0..2 * KEYS_PER_WRITER)
            .map(|_| AtomicU64::new(0))
            .collect(),
    );
    let stop = Arc::new(AtomicBool::new(false));
    let moves = Arc::new(AtomicU64::new(0));
    let writers: Vec<_> = (0..2u64)
        .map(|w| {
            let (filter, versions, stop, moves) = (
                filter.clone(),
                versions.clone(),
                stop.clone(),
                moves.clone(),
            );
            std::thread::spawn(move || {
                let mut state = 0x2545_F491_4F6C_DD1Du64 ^ (w + 5);
                while !stop.load(Ordering::Relaxed) {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    let key = w * KEYS_PER_WRITER + state % KEYS_PER_WRITER;
                    let version = &versions[key as usize];
                    let v = version.load(Ordering::Relaxed);
                    if v % 2 == 1 {
                        version.store(v + 1, Ordering::Release);
                        assert!(filter.remove(&key), "a present key could not be removed");
                    } else if filter.insert(&key).is_ok() {
                        version.store(v + 1, Ordering::Release);
                    }
                    moves.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    let checkers: Vec<_> = (0..2u64)
        .map(|c| {
            let (filter, versions, stop) = (filter.clone(), versions.clone(), stop.clone());
            std::thread::spawn(move || {
                let (mut checked, mut missed) = (0u64, 0u64);
                let mut next = c * 7;
                let mut keys = Vec::with_capacity(BATCH);
                let mut before = Vec::with_capacity(BATCH);
                while !stop.load(Ordering::Relaxed) {
                    keys.clear();
                    before.clear();
                    for _ in 0..BATCH {
                        keys.push(next);
                        before.push(versions[next as usize].load(Ordering::Acquire));
                        next = (next + 13) % (2 * KEYS_PER_WRITER);
                    }
                    let found = filter.contains_many(&keys);
                    assert_eq!(found.len(), BATCH);
                    for ((k, v), found) in keys.iter().zip(&before).zip(found) {
                        if v % 2 == 1 && versions[*k as usize].load(Ordering::Acquire) == *v {
                            checked += 1;
                            missed += u64::from(!found);
                        }
                    }
                }
                (checked, missed)
            })
        })
        .collect();
    let started = Instant::now();
    std::thread::sleep(run_for);
    stop.store(true, Ordering::Relaxed);
    for w in writers {
        w.join().unwrap();
    }
    let (mut checked, mut missed) = (0, 0);
    for c in checkers {
        let (k, m) = c.join().unwrap();
        checked += k;
        missed += m;
    }
    println!(
        "batch stress, {:.1} s: {} inserts and removes, {checked} batched lookups of present \
         keys, {missed} false negatives, final load {:.3}",
        started.elapsed().as_secs_f64(),
        moves.load(Ordering::Relaxed),
        filter.load_factor()
    );
    assert!(checked > 100_000, "only {checked} lookups checked");
    assert_eq!(missed, 0, "false negatives among {checked} batched lookups");
}
