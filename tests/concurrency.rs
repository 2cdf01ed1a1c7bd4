//! Concurrency: threads inserting disjoint key sets while others query keys already
//! inserted, snapshots taken during inserts, and the set operations (`union`, `intersect`)
//! with their compatibility errors.
//!
//! Inserters publish how far they got through an `AtomicUsize` with `Release`; readers load it
//! with `Acquire`, so every key below the mark happens-before the reader's lookup and must be
//! found: a single `false` is a false negative. No test depends on timing.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::thread;

use bloom_core::{BloomFilter, IncompatibleError, Layout};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// Every layout the crate has.
const LAYOUTS: [Layout; 3] = [Layout::Blocked, Layout::Classic, Layout::SplitBlock];

const INSERTERS: usize = 4;
const PER_THREAD: usize = 200_000;
const READERS: usize = 2;
/// Keys per `insert_many` call / between progress publications.
const CHUNK: usize = 1_024;

fn key(thread: usize, i: usize) -> u64 {
    ((thread as u64) << 32) | i as u64
}

fn filter(layout: Layout, items: u64, seed: u128) -> BloomFilter {
    BloomFilter::builder()
        .layout(layout)
        .expected_items(items)
        .false_positive_rate(0.01)
        .seed(seed)
        .build()
        .unwrap()
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Api {
    /// `insert` / `contains`, one key at a time.
    Single,
    /// `insert_many` / `contains_many`.
    Batch,
}

/// Checks keys `from..to` of inserter `t`; returns how many were not found.
fn missing(f: &BloomFilter, api: Api, t: usize, from: usize, to: usize) -> u64 {
    match api {
        Api::Single => (from..to).filter(|&i| !f.contains(&key(t, i))).count() as u64,
        Api::Batch => f
            .contains_many((from..to).map(|i| key(t, i)))
            .iter()
            .filter(|&&found| !found)
            .count() as u64,
    }
}

fn inserters_and_readers(layout: Layout, api: Api) {
    let total = INSERTERS * PER_THREAD;
    let f = filter(layout, total as u64, 0xC0C0_u128 + api as u128);
    let progress: Vec<AtomicUsize> = (0..INSERTERS).map(|_| AtomicUsize::new(0)).collect();
    let finished = AtomicUsize::new(0);
    let false_negatives = AtomicU64::new(0);
    let reported_old = AtomicU64::new(0);
    let checked_while_inserting = AtomicU64::new(0);

    thread::scope(|s| {
        for t in 0..INSERTERS {
            let (f, progress, finished, reported_old) = (&f, &progress, &finished, &reported_old);
            s.spawn(move || {
                for start in (0..PER_THREAD).step_by(CHUNK) {
                    let end = (start + CHUNK).min(PER_THREAD);
                    match api {
                        Api::Single => {
                            let old = (start..end).filter(|&i| !f.insert(&key(t, i))).count();
                            reported_old.fetch_add(old as u64, Ordering::Relaxed);
                        }
                        Api::Batch => {
                            let mut old = 0;
                            f.insert_many_with((start..end).map(|i| key(t, i)), |new| {
                                old += u64::from(!new);
                            });
                            reported_old.fetch_add(old, Ordering::Relaxed);
                        }
                    }
                    progress[t].store(end, Ordering::Release);
                }
                finished.fetch_add(1, Ordering::Release);
            });
        }
        for r in 0..READERS {
            let (f, progress, finished) = (&f, &progress, &finished);
            let (false_negatives, checked_while_inserting) =
                (&false_negatives, &checked_while_inserting);
            s.spawn(move || {
                let mut rng = StdRng::seed_from_u64(r as u64);
                let mut checked = [0usize; INSERTERS];
                loop {
                    // Read before the marks: once every inserter is done, this pass sees
                    // every final mark, so the reader ends having checked every key.
                    let all_done = finished.load(Ordering::Acquire) == INSERTERS;
                    let mut new = 0;
                    for t in 0..INSERTERS {
                        let mark = progress[t].load(Ordering::Acquire);
                        let lost = missing(f, api, t, checked[t], mark);
                        false_negatives.fetch_add(lost, Ordering::Relaxed);
                        new += mark - checked[t];
                        checked[t] = mark;
                        // Keys seen before must still be there.
                        if mark > 0 {
                            for _ in 0..8 {
                                let i = rng.random_range(0..mark);
                                if !f.contains(&key(t, i)) {
                                    false_negatives.fetch_add(1, Ordering::Relaxed);
                                }
                            }
                        }
                    }
                    if all_done {
                        break;
                    }
                    checked_while_inserting.fetch_add(new as u64, Ordering::Relaxed);
                    if new == 0 {
                        thread::yield_now();
                    }
                }
                assert_eq!(checked, [PER_THREAD; INSERTERS], "reader {r} missed keys");
            });
        }
    });

    assert_eq!(
        false_negatives.load(Ordering::Relaxed),
        0,
        "{layout:?} {api:?}: false negatives while inserting"
    );
    // Afterwards, every inserted key is found, by both lookup forms.
    for t in 0..INSERTERS {
        assert_eq!(
            missing(&f, Api::Single, t, 0, PER_THREAD),
            0,
            "{layout:?} {api:?}"
        );
        assert_eq!(
            missing(&f, Api::Batch, t, 0, PER_THREAD),
            0,
            "{layout:?} {api:?}"
        );
    }
    // `insert` (and `insert_many_with`) says "already there" only for keys whose bits other
    // keys had all set: a false positive at the time, so on average at most p of them.
    let old = reported_old.load(Ordering::Relaxed);
    assert!(
        old as f64 <= 0.01 * total as f64,
        "{layout:?}: {old} of {total} new keys reported as already present"
    );
    // The same bits as inserting on one thread (OR is commutative).
    let serial = filter(layout, total as u64, 0xC0C0_u128 + api as u128);
    for t in 0..INSERTERS {
        serial.insert_many((0..PER_THREAD).map(|i| key(t, i)));
    }
    assert!(
        serial.to_bytes() == f.to_bytes(),
        "{layout:?} {api:?}: bits differ"
    );
    println!(
        "{layout:?} {api:?}: {} keys checked by readers while inserts were running",
        checked_while_inserting.load(Ordering::Relaxed)
    );
}

#[test]
fn blocked_single_keys() {
    inserters_and_readers(Layout::Blocked, Api::Single);
}

#[test]
fn blocked_batches() {
    inserters_and_readers(Layout::Blocked, Api::Batch);
}

#[test]
fn classic_single_keys() {
    inserters_and_readers(Layout::Classic, Api::Single);
}

#[test]
fn classic_batches() {
    inserters_and_readers(Layout::Classic, Api::Batch);
}

#[test]
fn split_block_single_keys() {
    inserters_and_readers(Layout::SplitBlock, Api::Single);
}

#[test]
fn split_block_batches() {
    inserters_and_readers(Layout::SplitBlock, Api::Batch);
}

#[test]
fn the_filter_is_send_and_sync() {
    fn shareable<T: Send + Sync + 'static>() {}
    shareable::<BloomFilter>();
}

/// Clones and serialisations taken while another thread inserts hold every key published
/// before they were taken.
#[test]
fn snapshots_during_inserts_hold_every_published_key() {
    const N: usize = 300_000;
    for layout in LAYOUTS {
        let f = filter(layout, N as u64, 0x5A_u128);
        let progress = AtomicUsize::new(0);
        thread::scope(|s| {
            s.spawn(|| {
                for start in (0..N).step_by(CHUNK) {
                    let end = (start + CHUNK).min(N);
                    f.insert_many((start..end).map(|i| i as u64));
                    progress.store(end, Ordering::Release);
                }
            });
            loop {
                let mark = progress.load(Ordering::Acquire);
                let clone = f.clone();
                let decoded = BloomFilter::from_bytes(&f.to_bytes()).unwrap();
                for snapshot in [&clone, &decoded] {
                    let found = snapshot.contains_many((0..mark).map(|i| i as u64));
                    assert!(
                        found.iter().all(|&b| b),
                        "{layout:?}: key below {mark} lost"
                    );
                }
                if mark == N {
                    break;
                }
            }
        });
    }
}

// ---------------------------------------------------------------------------------------
// Set operations

fn keys(range: std::ops::Range<u64>) -> impl Iterator<Item = u64> {
    range.map(|i| i.wrapping_mul(0x9E37_79B9_7F4A_7C15))
}

fn words(f: &BloomFilter) -> Vec<u64> {
    let bytes = f.to_bytes();
    bytes[64..bytes.len() - 4]
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

#[test]
fn union_and_intersect_of_compatible_filters() {
    for layout in LAYOUTS {
        let make = || filter(layout, 50_000, 0x5E7);
        // A = 0..30k, B = 20k..50k, A ∩ B = 20k..30k.
        let (a, b) = (make(), make());
        a.insert_many(keys(0..30_000));
        b.insert_many(keys(20_000..50_000));
        let (a_words, b_words) = (words(&a), words(&b));

        let union = a.clone();
        union.union(&b).unwrap();
        assert!(union.contains_many(keys(0..50_000)).iter().all(|&x| x));
        // Exactly the filter of A ∪ B, and the word-wise OR.
        let both = make();
        both.insert_many(keys(0..50_000));
        assert!(
            union.to_bytes() == both.to_bytes(),
            "{layout:?}: union differs"
        );
        let or: Vec<u64> = a_words.iter().zip(&b_words).map(|(x, y)| x | y).collect();
        assert_eq!(words(&union), or);

        let inter = a.clone();
        inter.intersect(&b).unwrap();
        assert!(inter.contains_many(keys(20_000..30_000)).iter().all(|&x| x));
        let and: Vec<u64> = a_words.iter().zip(&b_words).map(|(x, y)| x & y).collect();
        assert_eq!(
            words(&inter),
            and,
            "{layout:?}: intersect is not the word-wise AND"
        );
        // It holds the common keys' bits, and fewer bits than either operand.
        let common = make();
        common.insert_many(keys(20_000..30_000));
        assert!(
            words(&common)
                .iter()
                .zip(words(&inter))
                .all(|(c, i)| c & i == *c)
        );
        assert!(inter.count_ones() < a.count_ones().min(b.count_ones()));

        // Union with itself or an empty filter changes nothing; intersect with an empty
        // filter clears everything.
        let before = a.to_bytes();
        a.union(&a.clone()).unwrap();
        a.union(&make()).unwrap();
        assert!(a.to_bytes() == before);
        a.intersect(&make()).unwrap();
        assert_eq!(a.count_ones(), 0);

        // A filter read back from its file is compatible with the original.
        let copy = BloomFilter::from_bytes(&b.to_bytes()).unwrap();
        assert!(b.check_compatible(&copy).is_ok());
        assert!(make().union(&copy).is_ok());
    }
}

#[test]
fn union_racing_with_inserts_keeps_both_sides() {
    for layout in LAYOUTS {
        let a = filter(layout, 200_000, 0xAB);
        let b = filter(layout, 200_000, 0xAB);
        b.insert_many(keys(100_000..200_000));
        thread::scope(|s| {
            s.spawn(|| a.insert_many(keys(0..100_000)));
            s.spawn(|| {
                for _ in 0..5 {
                    a.union(&b).unwrap();
                }
            });
        });
        assert!(a.contains_many(keys(0..200_000)).iter().all(|&x| x));
    }
}

#[test]
fn incompatible_filters_are_refused_and_left_unchanged() {
    let base = || {
        BloomFilter::builder()
            .layout(Layout::Classic)
            .bits(1024)
            .hashes(4)
            .seed(1)
    };
    let ours = base().build().unwrap();
    ours.insert("ours");
    let theirs = [
        (
            base().bits(2048).build().unwrap(),
            IncompatibleError::Bits {
                ours: 1024,
                theirs: 2048,
            },
            "number of bits differs (1024 vs 2048)",
        ),
        (
            base().hashes(5).build().unwrap(),
            IncompatibleError::Hashes { ours: 4, theirs: 5 },
            "number of hashes differs (4 vs 5)",
        ),
        (
            base().layout(Layout::Blocked).build().unwrap(),
            IncompatibleError::Layout {
                ours: Layout::Classic,
                theirs: Layout::Blocked,
            },
            "layout differs (classic vs blocked)",
        ),
        (
            base().seed(2).build().unwrap(),
            IncompatibleError::HashKey,
            "hash keys (seeds) differ",
        ),
    ];
    let before = ours.to_bytes();
    for (other, mismatch, message) in theirs {
        other.insert("theirs");
        for result in [
            ours.union(&other),
            ours.intersect(&other),
            ours.check_compatible(&other),
        ] {
            let e = result.expect_err(message);
            assert_eq!(e, mismatch);
            assert_eq!(
                e.to_string(),
                format!("filters are incompatible: {message}")
            );
        }
        assert!(
            ours.to_bytes() == before,
            "a refused operation changed the filter"
        );
    }
    // Blocked with k = 8 and SplitBlock of the same size and hash key differ only in where
    // a key's eight bits go: still incompatible, by layout.
    let split = || {
        BloomFilter::builder()
            .layout(Layout::SplitBlock)
            .bits(1024)
            .seed(1)
    };
    let ours_split = split().build().unwrap();
    ours_split.insert("ours");
    let before_split = ours_split.to_bytes();
    let blocked8 = split().layout(Layout::Blocked).hashes(8).build().unwrap();
    blocked8.insert("theirs");
    for result in [
        ours_split.union(&blocked8),
        ours_split.intersect(&blocked8),
        ours_split.check_compatible(&blocked8),
    ] {
        let e = result.expect_err("split-block vs blocked");
        assert_eq!(
            e,
            IncompatibleError::Layout {
                ours: Layout::SplitBlock,
                theirs: Layout::Blocked,
            }
        );
        assert_eq!(
            e.to_string(),
            "filters are incompatible: layout differs (split-block vs blocked)"
        );
    }
    assert!(ours_split.to_bytes() == before_split);
    let twin_split = split().build().unwrap();
    twin_split.insert("twin");
    ours_split.union(&twin_split).unwrap();
    assert!(ours_split.contains("ours") && ours_split.contains("twin"));

    // The same parameters are compatible (and the one key of each is kept by union).
    let twin = base().build().unwrap();
    twin.insert("twin");
    ours.union(&twin).unwrap();
    assert!(ours.contains("ours") && ours.contains("twin"));
}
