//! Loom models of the lock-free bit array: every interleaving (and every value a Relaxed
//! load may legally return) of concurrent `insert`, `contains` and `union`.
//!
//! Under `--cfg loom` the crate's atomics are loom's (src/sync.rs), so these run the real
//! `BloomFilter` code. Tiny filters keep the state space small: Classic with `m = 64` puts
//! every probe in one word (the most contended case), Blocked with `m = 512` is one cache
//! line of eight words, and SplitBlock with `m = 512` ORs one bit into each of those eight
//! words (k = 8: every insert touches every word).
//!
//! ```sh
//! RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom cargo test -p bloomguard-core --release --test loom
//! ```
//!
//! Preemptions are bounded to 3 by default to keep the run to seconds; set
//! `LOOM_MAX_PREEMPTIONS` to explore more.

#![cfg(loom)]

use bloom_core::{BloomFilter, Layout};
use loom::sync::Arc;
use loom::thread;

/// Runs `f` under loom with the default preemption bound of this file.
fn model(f: impl Fn() + Sync + Send + 'static) {
    model_bounded(3, f);
}

/// Runs `f` under loom with at most `bound` preemptions unless `LOOM_MAX_PREEMPTIONS` says
/// otherwise.
fn model_bounded(bound: usize, f: impl Fn() + Sync + Send + 'static) {
    let mut builder = loom::model::Builder::new();
    if builder.preemption_bound.is_none() {
        builder.preemption_bound = Some(bound);
    }
    builder.check(f);
}

/// The preemption bound for `layout`: SplitBlock's insert ORs into all eight words of the
/// block (Blocked's k = 3 into at most three), and with three threads a bound of 3 runs for
/// many minutes; 2 keeps the two-writer model to seconds.
fn bound(layout: Layout) -> usize {
    if layout == Layout::SplitBlock { 2 } else { 3 }
}

fn tiny(layout: Layout) -> BloomFilter {
    let (bits, hashes) = match layout {
        Layout::Classic => (64, 3),
        Layout::SplitBlock => (512, 8),
        _ => (512, 3),
    };
    BloomFilter::builder()
        .layout(layout)
        .bits(bits)
        .hashes(hashes)
        .seed(1)
        .build()
        .unwrap()
}

/// Two threads insert different keys while a third looks one of them up twice: the lookups
/// never go from found to not found, and after the joins both keys are found.
fn two_inserters_and_a_checker(layout: Layout) {
    model_bounded(bound(layout), move || {
        let filter = Arc::new(tiny(layout));
        let a = {
            let f = filter.clone();
            thread::spawn(move || {
                f.insert("a");
                assert!(f.contains("a"), "own insert not visible to the inserter");
            })
        };
        let b = {
            let f = filter.clone();
            thread::spawn(move || {
                f.insert("b");
            })
        };
        let first = filter.contains("a");
        let second = filter.contains("a");
        assert!(!first || second, "contains(\"a\") went from true to false");
        a.join().unwrap();
        b.join().unwrap();
        assert!(filter.contains("a"), "false negative for \"a\" after join");
        assert!(filter.contains("b"), "false negative for \"b\" after join");
    });
}

#[test]
fn two_inserters_and_a_checker_classic() {
    two_inserters_and_a_checker(Layout::Classic);
}

#[test]
fn two_inserters_and_a_checker_blocked() {
    two_inserters_and_a_checker(Layout::Blocked);
}

#[test]
fn two_inserters_and_a_checker_split_block() {
    two_inserters_and_a_checker(Layout::SplitBlock);
}

/// The preemption bound of [`seen_stays_seen`]: one writer cannot clear a bit, so what this
/// model can catch is a read that races with the writer's ORs, which one preemption inside
/// the insert shows (a lookup reading the words unsynchronised fails all three SplitBlock
/// models at this bound). SplitBlock's three lookups of eight words each then take seconds
/// at a bound of 1 and minutes at 2.
fn reader_bound(layout: Layout) -> usize {
    if layout == Layout::SplitBlock {
        1
    } else {
        bound(layout)
    }
}

/// An observer that has seen another thread's key keeps seeing it, through both lookups.
fn seen_stays_seen(layout: Layout) {
    model_bounded(reader_bound(layout), move || {
        let filter = Arc::new(tiny(layout));
        let writer = {
            let f = filter.clone();
            thread::spawn(move || {
                f.insert("x");
            })
        };
        let reader = {
            let f = filter.clone();
            thread::spawn(move || {
                let mut seen = false;
                for _ in 0..2 {
                    let now = f.contains("x");
                    assert!(!seen || now, "contains(\"x\") went from true to false");
                    seen |= now;
                }
                let batch = f.contains_many(["x"]);
                assert!(!seen || batch == [true], "contains_many lost \"x\"");
            })
        };
        writer.join().unwrap();
        reader.join().unwrap();
        assert!(filter.contains("x"));
    });
}

#[test]
fn seen_stays_seen_classic() {
    seen_stays_seen(Layout::Classic);
}

#[test]
fn seen_stays_seen_blocked() {
    seen_stays_seen(Layout::Blocked);
}

#[test]
fn seen_stays_seen_split_block() {
    seen_stays_seen(Layout::SplitBlock);
}

/// Two threads insert the same new key at once: exactly the set of bits is OR-ed in, and at
/// least one of them is told the key is new (the first read-modify-write of each bit sees it
/// clear), so counting `true` returns never misses a distinct key.
fn same_key_at_once(layout: Layout) {
    model(move || {
        let filter = Arc::new(tiny(layout));
        let other = {
            let f = filter.clone();
            thread::spawn(move || f.insert("same"))
        };
        let here = filter.insert("same");
        let there = other.join().unwrap();
        assert!(
            here || there,
            "neither concurrent insert reported the key as new"
        );
        assert!(filter.contains("same"));
        assert!(
            !filter.insert("same"),
            "a third insert reported it new again"
        );
    });
}

#[test]
fn same_key_at_once_classic() {
    same_key_at_once(Layout::Classic);
}

#[test]
fn same_key_at_once_blocked() {
    same_key_at_once(Layout::Blocked);
}

#[test]
fn same_key_at_once_split_block() {
    same_key_at_once(Layout::SplitBlock);
}

/// `union` racing with an insert into the same filter: after the joins the filter has both
/// its own key and the other filter's.
#[test]
fn union_racing_with_insert() {
    model(|| {
        let filter = Arc::new(tiny(Layout::Classic));
        let other = tiny(Layout::Classic);
        other.insert("from-other");
        let inserter = {
            let f = filter.clone();
            thread::spawn(move || {
                f.insert("own");
            })
        };
        filter.union(&other).unwrap();
        assert!(filter.contains("from-other"));
        inserter.join().unwrap();
        assert!(filter.contains("own"), "union lost a concurrent insert");
        assert!(filter.contains("from-other"));
    });
}
