//! `FilterSet`: eviction and reload answer like a set that never evicts; one load per key;
//! cancelled loads and failed evictions strand nothing and lose nothing; corrupt stored bytes
//! are an error; the budget and the LRU order hold.
#![cfg(feature = "filter-set")]

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bloom_core::windowed::{ManualClock, RingLayout, Window, WindowedFilter};
use bloom_core::{AnyFilter, BloomFilter};
use bloom_tower::filter_set::{
    DirectoryStore, FilterSet, FilterSetError, FilterStore, StoreError, counted_bytes,
};
use proptest::prelude::*;

/// A store in memory that counts calls, can delay loads and stores, can fail stores, and
/// records how many stores ran at once.
#[derive(Clone, Default)]
struct TestStore {
    files: Arc<Mutex<HashMap<String, Vec<u8>>>>,
    loads: Arc<AtomicUsize>,
    stores: Arc<AtomicUsize>,
    load_delay: Arc<Mutex<Duration>>,
    store_delay: Arc<Mutex<Duration>>,
    fail_stores: Arc<AtomicBool>,
    stores_running: Arc<AtomicUsize>,
    most_stores_running: Arc<AtomicUsize>,
}

impl FilterStore for TestStore {
    async fn load(&self, name: &str) -> Result<Option<Vec<u8>>, StoreError> {
        self.loads.fetch_add(1, Ordering::SeqCst);
        let delay = *self.load_delay.lock().unwrap();
        tokio::time::sleep(delay).await;
        Ok(self.files.lock().unwrap().get(name).cloned())
    }

    async fn store(&self, name: &str, bytes: Vec<u8>) -> Result<(), StoreError> {
        if self.fail_stores.load(Ordering::SeqCst) {
            return Err(StoreError::backend("store refused by the test"));
        }
        let delay = *self.store_delay.lock().unwrap();
        let running = self.stores_running.fetch_add(1, Ordering::SeqCst) + 1;
        self.most_stores_running
            .fetch_max(running, Ordering::SeqCst);
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        self.stores_running.fetch_sub(1, Ordering::SeqCst);
        self.stores.fetch_add(1, Ordering::SeqCst);
        self.files.lock().unwrap().insert(name.to_owned(), bytes);
        Ok(())
    }
}

/// The same filter for the same user in every set: the seed comes from the user.
fn plain_for(user: &u64) -> AnyFilter {
    AnyFilter::from(
        BloomFilter::builder()
            .expected_items(50)
            .false_positive_rate(0.05)
            .seed(u128::from(*user) + 1)
            .build()
            .unwrap(),
    )
}

/// A set of [`plain_for`] filters over `store`, with no budget.
fn plain_set<S: FilterStore>(store: S) -> FilterSet<u64, S> {
    FilterSet::builder(store).new_filter(plain_for).build()
}

fn plain_bytes() -> usize {
    counted_bytes(&plain_for(&0))
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

#[derive(Clone, Debug)]
enum Op {
    Insert(u64, u16),
    Contains(u64, u16),
    SeenOrInsert(u64, u16),
    Flush,
    /// Hours on the windowed sets' clock.
    Advance(u8),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0..10u64, 0..60u16).prop_map(|(u, i)| Op::Insert(u, i)),
        4 => (0..12u64, 0..60u16).prop_map(|(u, i)| Op::Contains(u, i)),
        3 => (0..10u64, 0..60u16).prop_map(|(u, i)| Op::SeenOrInsert(u, i)),
        1 => Just(Op::Flush),
        1 => (1..30u8).prop_map(Op::Advance),
    ]
}

/// Runs `ops` on a set that holds about two filters and on one that holds them all; every
/// answer must be the same. Windowed sets share one manual clock.
fn same_answers(ops: &[Op], windowed: bool) -> Result<(), TestCaseError> {
    let clock = Arc::new(ManualClock::new(1_000_000_000));
    let make = |budget: usize, dir: &std::path::Path| {
        let clock = clock.clone();
        let builder = FilterSet::<u64, _>::builder(DirectoryStore::new(dir).unwrap().sync(false))
            .budget_bytes(budget)
            .clock(clock.clone());
        if windowed {
            builder.new_filter(move |user| {
                AnyFilter::from(
                    WindowedFilter::builder(Window::Time(Duration::from_secs(24 * 3600)))
                        .expected_items(50)
                        .false_positive_rate(0.05)
                        .seed(u128::from(*user) + 1)
                        .clock(clock.clone())
                        .build()
                        .unwrap(),
                )
            })
        } else {
            builder.new_filter(plain_for)
        }
        .build()
    };
    let small_dir = tempfile::tempdir().unwrap();
    let large_dir = tempfile::tempdir().unwrap();
    let one = if windowed {
        let probe = WindowedFilter::builder(Window::Time(Duration::from_secs(24 * 3600)))
            .expected_items(50)
            .false_positive_rate(0.05)
            .build()
            .unwrap();
        counted_bytes(&AnyFilter::from(probe))
    } else {
        plain_bytes()
    };
    let small = make(2 * one + one / 2, small_dir.path());
    let large = make(usize::MAX, large_dir.path());
    runtime().block_on(async {
        for op in ops {
            let (a, b) = match *op {
                Op::Insert(u, i) => (
                    small.insert(&u, &i).await.map(|_| true),
                    large.insert(&u, &i).await.map(|_| true),
                ),
                Op::Contains(u, i) => (small.contains(&u, &i).await, large.contains(&u, &i).await),
                Op::SeenOrInsert(u, i) => (
                    small.seen_or_insert(&u, &i).await,
                    large.seen_or_insert(&u, &i).await,
                ),
                Op::Flush => (
                    small.flush().await.map(|_| true),
                    large.flush().await.map(|_| true),
                ),
                Op::Advance(hours) => {
                    clock.advance(Duration::from_secs(u64::from(hours) * 3600));
                    continue;
                }
            };
            prop_assert_eq!(a.unwrap(), b.unwrap(), "after {:?}", op);
            prop_assert!(small.stats().bytes_in_memory <= small.stats().budget_bytes);
        }
        prop_assert_eq!(large.stats().evictions, 0);
        Ok(())
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    #[test]
    fn answers_are_those_of_a_set_that_never_evicts(ops in prop::collection::vec(op(), 1..300)) {
        same_answers(&ops, false)?;
    }

    #[test]
    fn windowed_answers_are_those_of_a_set_that_never_evicts(ops in prop::collection::vec(op(), 1..300)) {
        same_answers(&ops, true)?;
    }
}

#[test]
fn the_property_test_evicts_and_reloads() {
    // Ten users through a set that holds two: the property above exercises evictions.
    let ops: Vec<Op> = (0..10u64)
        .flat_map(|u| [Op::Insert(u, 1), Op::Contains(u, 1)])
        .chain((0..10u64).map(|u| Op::Contains(u, 1)))
        .collect();
    same_answers(&ops, false).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let set = FilterSet::<u64, _>::builder(DirectoryStore::new(dir.path()).unwrap())
        .budget_bytes(2 * plain_bytes() + plain_bytes() / 2)
        .new_filter(plain_for)
        .build();
    runtime().block_on(async {
        for u in 0..10u64 {
            set.insert(&u, "x").await.unwrap();
        }
        for u in 0..10u64 {
            assert!(set.contains(&u, "x").await.unwrap(), "user {u}");
        }
    });
    let stats = set.stats();
    assert!(stats.evictions >= 16, "{stats:?}");
    assert!(stats.loads >= 8, "{stats:?}");
    assert_eq!(stats.filters_in_memory, 2, "{stats:?}");
}

#[test]
fn the_least_recently_used_filter_is_evicted_first() {
    let store = TestStore::default();
    // Each entry also counts its name: one byte here.
    let set = FilterSet::<u64, _>::builder(store.clone())
        .budget_bytes(3 * (plain_bytes() + 1))
        .new_filter(plain_for)
        .build();
    runtime().block_on(async {
        for u in 1..=3u64 {
            set.insert(&u, "x").await.unwrap();
        }
        assert!(set.contains(&1, "x").await.unwrap()); // 2 is now the least recently used
        set.insert(&4, "x").await.unwrap();
    });
    let files = store.files.lock().unwrap();
    assert_eq!(files.keys().collect::<Vec<_>>(), ["2"]);
    let stats = set.stats();
    assert_eq!((stats.filters_in_memory, stats.evictions), (3, 1));
    assert!(stats.bytes_in_memory <= stats.budget_bytes);
}

#[test]
fn concurrent_users_of_an_evicted_key_load_it_once() {
    let store = TestStore::default();
    let set = Arc::new(
        FilterSet::<u64, _>::builder(store.clone())
            .budget_bytes(plain_bytes())
            .new_filter(plain_for)
            .build(),
    );
    runtime().block_on(async {
        set.insert(&1, "a").await.unwrap();
        set.insert(&2, "b").await.unwrap(); // evicts 1
        assert_eq!(store.files.lock().unwrap().len(), 1);
        *store.load_delay.lock().unwrap() = Duration::from_millis(50);
        let loads_before = store.loads.load(Ordering::SeqCst);
        let tasks: Vec<_> = (0..10)
            .map(|_| {
                let set = set.clone();
                tokio::spawn(async move { set.contains(&1, "a").await.unwrap() })
            })
            .collect();
        for t in tasks {
            assert!(t.await.unwrap());
        }
        assert_eq!(store.loads.load(Ordering::SeqCst) - loads_before, 1);
    });
    assert!(set.stats().coalesced_waiters >= 9, "{:?}", set.stats());
}

#[test]
fn a_cancelled_load_releases_its_waiters() {
    let store = TestStore::default();
    let set = Arc::new(
        FilterSet::<u64, _>::builder(store.clone())
            .budget_bytes(plain_bytes())
            .new_filter(plain_for)
            .build(),
    );
    runtime().block_on(async {
        set.insert(&1, "a").await.unwrap();
        set.insert(&2, "b").await.unwrap(); // evicts 1
        *store.load_delay.lock().unwrap() = Duration::from_secs(3600);
        let leader = {
            let set = set.clone();
            tokio::spawn(async move { set.contains(&1, "a").await })
        };
        tokio::time::sleep(Duration::from_millis(20)).await; // the leader is loading
        let waiter = {
            let set = set.clone();
            tokio::spawn(async move { set.contains(&1, "a").await })
        };
        tokio::time::sleep(Duration::from_millis(20)).await; // the waiter waits
        *store.load_delay.lock().unwrap() = Duration::ZERO;
        leader.abort();
        let answer = tokio::time::timeout(Duration::from_secs(10), waiter)
            .await
            .expect("the waiter was stranded by the cancelled leader");
        assert!(answer.unwrap().unwrap());
    });
    assert_eq!(set.stats().filters_in_memory, 1);
}

#[test]
fn a_failed_eviction_keeps_the_filter() {
    let store = TestStore::default();
    let set = FilterSet::<u64, _>::builder(store.clone())
        .budget_bytes(plain_bytes())
        .new_filter(plain_for)
        .build();
    runtime().block_on(async {
        set.insert(&1, "a").await.unwrap();
        store.fail_stores.store(true, Ordering::SeqCst);
        set.insert(&2, "b").await.unwrap(); // the eviction of 1 fails: over budget
        let stats = set.stats();
        assert_eq!(
            (stats.filters_in_memory, stats.store_errors),
            (2, 1),
            "{stats:?}"
        );
        assert!(stats.bytes_in_memory > stats.budget_bytes);
        assert!(set.contains(&1, "a").await.unwrap());
        assert!(matches!(
            set.flush().await,
            Err(FilterSetError::Store { .. })
        ));
        store.fail_stores.store(false, Ordering::SeqCst);
        assert_eq!(set.flush().await.unwrap(), 2);
    });
    let files = store.files.lock().unwrap();
    let one = AnyFilter::from_bytes(&files["1"]).unwrap();
    assert!(one.contains("a"));
}

#[test]
fn a_corrupt_stored_filter_is_an_error_and_is_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    let store = DirectoryStore::new(dir.path()).unwrap();
    let path = store.path_of("5");
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let mut bytes = plain_for(&5).to_bytes();
    let last = bytes.len() - 1;
    bytes[last] ^= 1;
    std::fs::write(&path, &bytes).unwrap();
    let set = plain_set(store);
    runtime().block_on(async {
        let e = set.insert(&5, "x").await.unwrap_err();
        assert!(matches!(e, FilterSetError::Corrupt { .. }), "{e}");
        assert!(e.to_string().contains("\"5\""), "{e}");
        assert!(set.contains(&5, "x").await.is_err());
        assert!(set.contains(&6, "x").await.is_ok());
    });
    assert_eq!(std::fs::read(&path).unwrap(), bytes);
    assert_eq!(set.stats().load_errors, 2);
}

#[test]
fn a_flushed_set_is_read_back_by_a_new_process_with_what_expired() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(1_000_000_000));
    let week = || {
        WindowedFilter::builder(Window::Time(Duration::from_secs(7 * 86_400)))
            .expected_items(100)
            .false_positive_rate(0.01)
            .clock(clock.clone())
    };
    runtime().block_on(async {
        let set = FilterSet::<String, _>::builder(DirectoryStore::new(dir.path()).unwrap())
            .windowed(week())
            .unwrap()
            .build();
        set.insert(&"user/1".to_owned(), "old").await.unwrap();
        clock.advance(Duration::from_secs(6 * 86_400));
        set.insert(&"user/1".to_owned(), "new").await.unwrap();
        assert_eq!(set.flush().await.unwrap(), 1);
        assert_eq!(set.flush().await.unwrap(), 0);
    });
    clock.advance(Duration::from_secs(4 * 86_400)); // "old" is 10 days old, "new" 4
    runtime().block_on(async {
        let set = FilterSet::<String, _>::builder(DirectoryStore::new(dir.path()).unwrap())
            .windowed(week())
            .unwrap()
            .build();
        assert!(set.contains(&"user/1".to_owned(), "new").await.unwrap());
        assert!(!set.contains(&"user/1".to_owned(), "old").await.unwrap());
        assert_eq!(set.stats().loads, 1);
    });
}

#[test]
fn a_loaded_filter_takes_the_ring_layout_of_the_set() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(1_000_000_000));
    let week = |layout: Option<RingLayout>| {
        let b = WindowedFilter::builder(Window::Time(Duration::from_secs(7 * 86_400)))
            .expected_items(100)
            .false_positive_rate(0.01)
            .clock(clock.clone());
        match layout {
            Some(layout) => b.ring_layout(layout),
            None => b,
        }
    };
    let layout_of = |set: &FilterSet<u64, DirectoryStore>, user| {
        runtime().block_on(set.read(&user, |f| f.as_windowed().unwrap().ring_layout()))
    };
    let set_of = |layout| {
        FilterSet::<u64, _>::builder(DirectoryStore::new(dir.path()).unwrap())
            .windowed(week(layout))
            .unwrap()
            .build()
    };
    // Written interleaved, over two days (two generations hold keys).
    let interleaved = set_of(Some(RingLayout::Interleaved));
    runtime().block_on(async {
        interleaved.insert(&1, "monday").await.unwrap();
        clock.advance(Duration::from_secs(86_400));
        interleaved.insert(&1, "tuesday").await.unwrap();
        assert_eq!(interleaved.flush().await.unwrap(), 1);
    });
    assert_eq!(
        layout_of(&interleaved, 1).unwrap(),
        Some(RingLayout::Interleaved)
    );
    // Read back by a set that interleaves, and by one that keeps small rings separate (the
    // default): each lays the ring out its own way, and both hold both days' keys.
    for (layout, expected) in [
        (Some(RingLayout::Interleaved), RingLayout::Interleaved),
        (None, RingLayout::Separate),
    ] {
        let set = set_of(layout);
        assert_eq!(layout_of(&set, 1).unwrap(), Some(expected), "{layout:?}");
        runtime().block_on(async {
            for key in ["monday", "tuesday"] {
                assert!(set.contains(&1, key).await.unwrap(), "{layout:?} {key}");
            }
        });
        assert_eq!(set.stats().loads, 1);
    }
    // A stored ring larger than the set's own (a store's value is untrusted) stays separate:
    // interleaving would allocate all of it, whatever its bytes hold.
    let big = week(None).expected_items(1_000_000).build().unwrap();
    big.insert("large");
    let store = DirectoryStore::new(dir.path()).unwrap();
    runtime()
        .block_on(store.store("2", big.to_bytes()))
        .unwrap();
    let set = set_of(Some(RingLayout::Interleaved));
    assert_eq!(layout_of(&set, 2).unwrap(), Some(RingLayout::Separate));
    assert!(runtime().block_on(set.contains(&2, "large")).unwrap());
}

#[test]
fn a_flush_stores_in_parallel_up_to_the_bound() {
    let store = TestStore::default();
    let set = plain_set(store.clone());
    runtime().block_on(async {
        for u in 0..40u64 {
            set.insert(&u, "x").await.unwrap();
        }
        *store.store_delay.lock().unwrap() = Duration::from_millis(20);
        assert_eq!(set.flush().await.unwrap(), 40);
    });
    // 8 at a time: neither one by one nor all 40 at once.
    assert_eq!(store.most_stores_running.load(Ordering::SeqCst), 8);
    assert_eq!(store.files.lock().unwrap().len(), 40);
}

#[test]
fn evictions_by_concurrent_loads_store_in_parallel() {
    let store = TestStore::default();
    let set = Arc::new(
        FilterSet::<u64, _>::builder(store.clone())
            .budget_bytes(10 * (plain_bytes() + 2))
            .new_filter(plain_for)
            .build(),
    );
    runtime().block_on(async {
        for u in 0..10u64 {
            set.insert(&u, "x").await.unwrap();
        }
        *store.store_delay.lock().unwrap() = Duration::from_millis(20);
        // Ten new users at once: each load evicts one of the first ten, storing it.
        let tasks: Vec<_> = (10..20u64)
            .map(|u| {
                let set = set.clone();
                tokio::spawn(async move { set.insert(&u, "y").await.unwrap() })
            })
            .collect();
        for t in tasks {
            t.await.unwrap();
        }
        for u in 0..20u64 {
            let item = if u < 10 { "x" } else { "y" };
            assert!(set.contains(&u, item).await.unwrap(), "user {u}");
        }
    });
    let most = store.most_stores_running.load(Ordering::SeqCst);
    assert!((2..=8).contains(&most), "{most} stores at once");
}

#[test]
fn an_older_copy_never_lands_after_a_newer_one() {
    // Two flushes of one key at once (as a flush and an eviction, or two flushes, run side
    // by side): the first one's store is slow, the second one's fast.
    let store = TestStore::default();
    let set = Arc::new(plain_set(store.clone()));
    runtime().block_on(async {
        set.insert(&1, "old").await.unwrap();
        *store.store_delay.lock().unwrap() = Duration::from_millis(100);
        let slow = {
            let set = set.clone();
            tokio::spawn(async move { set.flush_key(&1).await.unwrap() })
        };
        tokio::time::sleep(Duration::from_millis(10)).await; // the slow store is under way
        *store.store_delay.lock().unwrap() = Duration::ZERO;
        set.insert(&1, "new").await.unwrap();
        assert!(set.flush_key(&1).await.unwrap());
        let stored = |files: &HashMap<String, Vec<u8>>| AnyFilter::from_bytes(&files["1"]).unwrap();
        assert!(stored(&store.files.lock().unwrap()).contains("new"));
        assert!(slow.await.unwrap());
        // The slow, older copy landed first: the store still has the newer one.
        assert!(
            stored(&store.files.lock().unwrap()).contains("new"),
            "an older copy overwrote a newer one"
        );
    });
}

/// [`TestStore`] taking up to 16 filters a call, as a store that writes a batch at once
/// (SQL transaction, Redis pipeline) does; records the size of every batch.
#[derive(Clone, Default)]
struct Batching {
    inner: TestStore,
    batches: Arc<Mutex<Vec<usize>>>,
}

impl FilterStore for Batching {
    const MAX_BATCH: usize = 16;

    async fn load(&self, name: &str) -> Result<Option<Vec<u8>>, StoreError> {
        self.inner.load(name).await
    }

    async fn store(&self, name: &str, bytes: Vec<u8>) -> Result<(), StoreError> {
        self.inner.store(name, bytes).await
    }

    async fn store_many(&self, batch: Vec<(String, Vec<u8>)>) -> Result<(), StoreError> {
        self.batches.lock().unwrap().push(batch.len());
        for (name, bytes) in batch {
            self.inner.store(&name, bytes).await?;
        }
        Ok(())
    }
}

#[test]
fn a_flush_hands_a_batching_store_its_filters_in_batches() {
    let store = Batching::default();
    let set = plain_set(store.clone());
    runtime().block_on(async {
        for u in 0..40u64 {
            set.insert(&u, "x").await.unwrap();
        }
        assert_eq!(set.flush().await.unwrap(), 40);
        assert_eq!(set.flush().await.unwrap(), 0);
    });
    let mut batches = store.batches.lock().unwrap().clone();
    batches.sort_unstable();
    assert_eq!(batches, [8, 16, 16], "40 filters in batches of at most 16");
    let files = store.inner.files.lock().unwrap();
    for u in 0..40u64 {
        assert!(
            AnyFilter::from_bytes(&files[&u.to_string()])
                .unwrap()
                .contains("x"),
            "user {u}"
        );
    }
}

#[test]
fn a_failed_batch_leaves_every_filter_of_it_to_the_next_flush() {
    let store = Batching::default();
    let set = plain_set(store.clone());
    runtime().block_on(async {
        for u in 0..20u64 {
            set.insert(&u, "x").await.unwrap();
        }
        store.inner.fail_stores.store(true, Ordering::SeqCst);
        assert!(matches!(
            set.flush().await,
            Err(FilterSetError::Store { .. })
        ));
        assert_eq!(set.stats().store_errors, 20);
        store.inner.fail_stores.store(false, Ordering::SeqCst);
        assert_eq!(
            set.flush().await.unwrap(),
            20,
            "the failed filters are stored next time"
        );
    });
    assert_eq!(store.inner.files.lock().unwrap().len(), 20);
}

#[test]
fn a_cancelled_flush_leaves_its_filters_to_the_next() {
    for batching in [false, true] {
        let store = Batching::default();
        runtime().block_on(async {
            let flushed = |set_flush: Result<usize, FilterSetError>| set_flush.unwrap();
            let (first, second) = if batching {
                let set = plain_set(store.clone());
                cancel_then_flush(&set, &store.inner).await
            } else {
                let set = plain_set(store.inner.clone());
                cancel_then_flush(&set, &store.inner).await
            };
            assert!(first.is_err(), "the first flush was cancelled");
            assert_eq!(
                flushed(second),
                3,
                "batching {batching}: the next flush stores them"
            );
        });
        assert_eq!(
            store.inner.files.lock().unwrap().len(),
            3,
            "batching {batching}"
        );
    }
}

/// Writes three users, cancels a flush while its stores are under way, then flushes again.
async fn cancel_then_flush<S: FilterStore>(
    set: &FilterSet<u64, S>,
    store: &TestStore,
) -> (
    Result<Result<usize, FilterSetError>, tokio::time::error::Elapsed>,
    Result<usize, FilterSetError>,
) {
    for u in 0..3u64 {
        set.insert(&u, "x").await.unwrap();
    }
    *store.store_delay.lock().unwrap() = Duration::from_millis(200);
    let first = tokio::time::timeout(Duration::from_millis(20), set.flush()).await;
    *store.store_delay.lock().unwrap() = Duration::ZERO;
    (first, set.flush().await)
}

#[test]
fn a_flush_waits_for_a_store_of_a_key_under_way_and_stores_what_came_after() {
    // A key's store is under way (its turn taken) when a batching flush reaches it, and the
    // key took a write after that store's copy: the flush stores it after the slow store.
    let store = Batching::default();
    let set = Arc::new(plain_set(store.clone()));
    runtime().block_on(async {
        for u in 0..10u64 {
            set.insert(&u, "old").await.unwrap();
        }
        assert_eq!(set.flush().await.unwrap(), 10);
        set.insert(&1, "mid").await.unwrap();
        *store.inner.store_delay.lock().unwrap() = Duration::from_millis(100);
        let slow = {
            let set = set.clone();
            tokio::spawn(async move { set.flush_key(&1).await.unwrap() })
        };
        tokio::time::sleep(Duration::from_millis(10)).await; // the slow store is under way
        *store.inner.store_delay.lock().unwrap() = Duration::ZERO;
        set.insert(&1, "new").await.unwrap();
        set.insert(&2, "new").await.unwrap();
        assert_eq!(set.flush().await.unwrap(), 2);
        assert!(slow.await.unwrap());
        let files = store.inner.files.lock().unwrap();
        for u in [1, 2] {
            let stored = AnyFilter::from_bytes(&files[&u.to_string()]).unwrap();
            assert!(
                stored.contains("new"),
                "user {u}: a write before the flush is not stored"
            );
        }
    });
}
