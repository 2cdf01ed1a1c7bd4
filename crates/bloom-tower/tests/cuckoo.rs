//! A `SharedFilter` over a cuckoo filter: a deleted record's key removed under the counting
//! filter's rules, a full filter that lets every key through until a larger one replaces it
//! (at once with auto-grow), rebuilds of the same kind, snapshots.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bloom_core::CuckooFilter;
use bloom_tower::SharedFilter;
use bloom_tower::key_source::{self, KeySource};
use bloom_tower::shared_filter::RemoveOutcome;

fn cuckoo(capacity: u64) -> CuckooFilter {
    CuckooFilter::builder()
        .expected_items(capacity)
        .false_positive_rate(0.01)
        .seed(21)
        .build()
        .unwrap()
}

/// 25 buckets, 100 slots, and no capacity: only a refused insert can report it full (a
/// filter sized for n keys is over capacity, and reported, before it refuses one).
fn by_buckets() -> CuckooFilter {
    CuckooFilter::builder()
        .buckets(25)
        .fingerprint_bits(10)
        .seed(21)
        .build()
        .unwrap()
}

fn source_of(keys: &Arc<Mutex<Vec<u64>>>) -> impl KeySource<Key = u64> + Send + Sync + 'static {
    let keys = Arc::clone(keys);
    key_source::from_iter(move || keys.lock().unwrap().clone())
}

/// Inserts keys from 0 up until the filter refuses one; the keys it took.
fn fill_until_refused(filter: &SharedFilter<u64>) -> u64 {
    let mut key = 0u64;
    while !filter.stats().full {
        filter.insert(&key);
        key += 1;
        assert!(key < 10_000, "never refused");
    }
    key
}

#[tokio::test]
async fn a_deleted_key_is_rejected_again_under_the_counting_filters_rules() {
    let filter = SharedFilter::<u64>::new(cuckoo(10_000));
    for id in 0..1_000u64 {
        let inserted = filter.insert(&id);
        filter.insert_after_commit(&id, inserted); // no rebuild in between: writes nothing
    }
    assert!((0..1_000u64).all(|id| filter.current().as_cuckoo().unwrap().count(&id) >= 1));
    for id in (0..1_000u64).step_by(2) {
        let before = filter.generation();
        assert_eq!(filter.remove(&id, before), Ok(RemoveOutcome::Removed));
    }
    assert!((1..1_000u64).step_by(2).all(|id| filter.contains(&id)));
    let still = (0..1_000u64)
        .step_by(2)
        .filter(|id| filter.contains(id))
        .count();
    // 500 removed keys, each a false positive with p ≤ 1 %: n·p + 3σ ≈ 11.7.
    assert!(still <= 11, "{still}");
    let stats = filter.stats();
    assert_eq!((stats.kind, stats.removes), ("cuckoo", 500));
    let never = (1_000u64..).find(|id| !filter.contains(id)).unwrap();
    assert_eq!(
        filter.remove(&never, filter.generation()),
        Ok(RemoveOutcome::Absent)
    );

    // A rebuild swapped in after the delete: the new filter is left alone.
    let before = filter.generation();
    let ids: Vec<u64> = (1..1_000u64).step_by(2).filter(|&id| id != 7).collect();
    filter.reload_from(&ids).await.unwrap();
    let bytes = filter.current().to_bytes();
    assert_eq!(
        filter.remove(&7u64, before),
        Ok(RemoveOutcome::FilterReplaced)
    );
    assert_eq!(filter.current().to_bytes(), bytes);
    assert_eq!(filter.stats().kind, "cuckoo");
}

#[tokio::test]
async fn a_full_cuckoo_filter_lets_every_key_through_until_rebuilt() {
    let filter = SharedFilter::<u64>::new(by_buckets());
    let taken = fill_until_refused(&filter);
    let stats = filter.stats();
    assert_eq!(
        (stats.refused_inserts, stats.saturation_warnings),
        (1, 1),
        "{stats:?}"
    );
    // Every key inserted is let through, the refused one too, and so is every other key:
    // the filter misses one key, so no "absent" from it can be trusted.
    assert!((0..taken).all(|key| filter.contains(&key)));
    assert!((1_000_000..1_001_000u64).all(|key| filter.contains(&key)));

    // A rebuild from the source sizes the next filter for its count: whole again.
    let keys: Vec<u64> = (0..taken).collect();
    filter.reload_from(&keys).await.unwrap();
    let stats = filter.stats();
    assert!(!stats.full, "{stats:?}");
    assert!(stats.capacity.unwrap() >= taken, "{stats:?}");
    assert!(keys.iter().all(|key| filter.contains(key)));
    let rejected = (1_000_000..1_001_000u64)
        .filter(|k| !filter.contains(k))
        .count();
    assert!(rejected > 950, "{rejected} of 1,000 absent keys rejected");
}

#[tokio::test(start_paused = true)]
async fn auto_grow_replaces_a_full_cuckoo_filter_without_waiting_for_the_schedule() {
    const HOUR: Duration = Duration::from_secs(3600);
    let filter = SharedFilter::<u64>::builder()
        .auto_grow(true)
        .build(by_buckets());
    let keys = Arc::new(Mutex::new(Vec::new()));
    let task = filter.rebuild_every(HOUR, source_of(&keys));
    let mut key = 0u64;
    while !filter.stats().full {
        keys.lock().unwrap().push(key); // committed, then inserted: the source has it
        filter.insert(&key);
        key += 1;
        assert!(key < 10_000, "never refused");
    }
    let start = tokio::time::Instant::now();
    while filter.stats().rebuilds == 0 {
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(start.elapsed() < HOUR / 2, "waited for the schedule");
    }
    let stats = filter.stats();
    assert!(!stats.full && stats.capacity.unwrap() >= key, "{stats:?}");
    assert!((0..key).all(|k| filter.contains(&k)));
    assert_eq!(filter.current().kind(), "cuckoo");
    task.shutdown().await;
}

#[tokio::test]
async fn a_cuckoo_filter_saves_and_loads_back_the_same_filter() {
    let dir = tempfile::tempdir().unwrap();
    let filter = SharedFilter::<u64>::new(cuckoo(5_000));
    for id in 0..4_000u64 {
        filter.insert(&id);
    }
    let path = dir.path().join("users.snapshot");
    filter.save(&path).await.unwrap();
    let loaded = SharedFilter::<u64>::load(&path).await.unwrap();
    assert_eq!(loaded.stats().kind, "cuckoo");
    assert_eq!(loaded.current().to_bytes(), filter.current().to_bytes());
    assert!((0..4_000u64).all(|id| loaded.contains(&id)));
    assert_eq!(
        loaded.remove(&3u64, loaded.generation()),
        Ok(RemoveOutcome::Removed)
    );
    let bytes = std::fs::read(&path).unwrap();
    std::fs::write(&path, &bytes[..bytes.len() - 3]).unwrap();
    assert!(
        SharedFilter::<u64>::load(&path)
            .await
            .unwrap_err()
            .is_corrupt()
    );
}
