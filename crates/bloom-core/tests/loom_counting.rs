//! Loom model of the counting filter's compare-and-swap counters: concurrent inserts and
//! removes of keys that share counters never lose a key that stays inserted.
//! Run: `RUSTFLAGS="--cfg loom" cargo test -p bloomguard-core --release --test loom_counting`
#![cfg(loom)]

use bloom_core::CountingBloomFilter;
use loom::sync::Arc;
use loom::thread;

/// One block, two probes: "a", "b" and "c" land in the same 512 counters and often share
/// a word, so the CAS loops really contend.
fn tiny() -> CountingBloomFilter {
    CountingBloomFilter::builder()
        .bits(512)
        .hashes(2)
        .seed(1)
        .build()
        .unwrap()
}

#[test]
fn a_kept_key_survives_concurrent_churn() {
    loom::model(|| {
        let f = Arc::new(tiny());
        f.insert("kept");
        let churn = {
            let f = f.clone();
            thread::spawn(move || {
                f.insert("a");
                assert!(f.remove("a"));
            })
        };
        let other = {
            let f = f.clone();
            thread::spawn(move || {
                f.insert("b");
                assert!(f.contains("kept"));
            })
        };
        churn.join().unwrap();
        other.join().unwrap();
        assert!(f.contains("kept"));
        assert!(f.contains("b"));
    });
}

#[test]
fn concurrent_increments_of_one_word_are_not_lost() {
    loom::model(|| {
        let f = Arc::new(tiny());
        let threads: Vec<_> = (0..2)
            .map(|_| {
                let f = f.clone();
                thread::spawn(move || {
                    f.insert("same");
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        // Two inserts: two removes must both succeed before the key can look absent.
        assert_eq!(f.count_estimate("same"), 2);
        assert!(f.remove("same"));
        assert!(f.contains("same"));
        assert!(f.remove("same"));
    });
}
