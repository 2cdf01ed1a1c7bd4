//! Loom model of the cuckoo filter's concurrency: a lookup that runs while an insert moves
//! the looked-up key between its buckets still finds it, and removes racing inserts of other
//! keys lose none of them.
//! Run: `RUSTFLAGS="--cfg loom" cargo test -p bloomguard-core --release --test loom_cuckoo`
//!
//! Two buckets of one 64-bit word each (17-bit fingerprints), so a lookup's two bucket reads
//! are two separate loads: the window a move must not fall into. The lookup runs in a
//! spawned thread: loom explores a read against later writes only once the reading thread
//! is one it schedules (a lookup on the main thread before the writer's first step was
//! explored once, and the mutation below went unnoticed).
//!
//! Mutations that fail it: `Table::read_pair_until` answering "no" without re-reading the
//! stripe versions fails `a_key_being_moved_is_always_found`; `CuckooFilter::remove` writing
//! without holding the stripes fails `removes_racing_inserts_lose_no_other_key`. A move that
//! empties its source before it fills its destination passes: both writes are inside one
//! hold of both stripes, which no validated read sees into.
#![cfg(loom)]

use bloom_core::CuckooFilter;
use loom::sync::Arc;
use loom::thread;

fn two_buckets() -> CuckooFilter {
    CuckooFilter::builder()
        .buckets(2)
        .fingerprint_bits(17)
        .seed(11)
        .build()
        .unwrap()
}

/// The first `n` keys from `from` on whose buckets are `[first, second]`.
fn keys_with(f: &CuckooFilter, buckets: [u64; 2], from: u64, n: usize) -> Vec<u64> {
    (from..)
        .filter(|k| f.buckets_of(k) == buckets)
        .take(n)
        .collect()
}

/// Bucket 1 holds the watched key `k` (whose buckets are read 0 then 1) and three keys that
/// live only in bucket 1; bucket 0 has one free slot. Inserting `x`, which lives only in
/// bucket 1, must move `k` to bucket 0: from the bucket a lookup reads second to the one it
/// reads first, the order that misses it if the lookup does not validate its read.
struct Setup {
    filter: Arc<CuckooFilter>,
    watched: u64,
    mover: u64,
    others: Vec<u64>,
}

fn setup() -> Setup {
    let f = two_buckets();
    let only_0 = keys_with(&f, [0, 0], 0, 4);
    let only_1 = keys_with(&f, [1, 1], 0, 4);
    let watched = keys_with(&f, [0, 1], 0, 1)[0];
    for k in &only_0 {
        f.insert(k).unwrap();
    }
    f.insert(&watched).unwrap(); // bucket 0 is full: it goes to bucket 1
    for k in &only_1[..3] {
        f.insert(k).unwrap();
    }
    assert!(f.remove(&only_0[0])); // a free slot in bucket 0
    let mut others = only_0[1..].to_vec();
    others.extend_from_slice(&only_1[..3]);
    Setup {
        filter: Arc::new(f),
        watched,
        mover: only_1[3],
        others,
    }
}

#[test]
fn a_key_being_moved_is_always_found() {
    let mut model = loom::model::Builder::new();
    model.preemption_bound = Some(3);
    model.check(|| {
        let Setup {
            filter,
            watched,
            mover,
            others,
        } = setup();
        let reader = {
            let f = filter.clone();
            thread::spawn(move || assert!(f.contains(&watched), "the key being moved was missed"))
        };
        filter.insert(&mover).unwrap();
        reader.join().unwrap();
        assert!(filter.contains(&watched) && filter.contains(&mover));
        assert!(others.iter().all(|k| filter.contains(k)));
        assert_eq!(filter.len(), 8);
    });
}

#[test]
fn removes_racing_inserts_lose_no_other_key() {
    let mut model = loom::model::Builder::new();
    model.preemption_bound = Some(3);
    model.check(|| {
        let Setup {
            filter,
            watched,
            mover,
            others,
        } = setup();
        let removed = others[0];
        let remover = {
            let f = filter.clone();
            thread::spawn(move || assert!(f.remove(&removed)))
        };
        filter.insert(&mover).unwrap();
        remover.join().unwrap();
        assert!(filter.contains(&watched) && filter.contains(&mover));
        assert!(others[1..].iter().all(|k| filter.contains(k)));
        assert_eq!(filter.len(), 7);
    });
}
