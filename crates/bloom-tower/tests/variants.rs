//! A `SharedFilter` over a counting or a scalable filter: removal after a delete, inserts that
//! count each record once, rebuilds of the same kind, snapshots of every kind.

use bloom_tower::shared_filter::RemoveOutcome;
use bloom_tower::{BloomFilter, CountingBloomFilter, ScalableBloomFilter, SharedFilter};

fn counting<K: ?Sized>(capacity: u64) -> SharedFilter<K> {
    SharedFilter::new(
        CountingBloomFilter::builder()
            .expected_items(capacity)
            .false_positive_rate(0.01)
            .seed(11)
            .build()
            .unwrap(),
    )
}

fn scalable<K: ?Sized>(initial_capacity: u64) -> SharedFilter<K> {
    SharedFilter::new(
        ScalableBloomFilter::builder(initial_capacity, 0.01)
            .seed(11)
            .build()
            .unwrap(),
    )
}

#[test]
fn a_removed_key_is_rejected_again_and_other_keys_stay() {
    let filter = counting::<u64>(10_000);
    for id in 0..1_000u64 {
        let inserted = filter.insert(&id);
        // No rebuild in between: writes nothing, so each record is counted once.
        filter.insert_after_commit(&id, inserted);
    }
    for id in (0..1_000u64).step_by(2) {
        let before = filter.generation();
        assert_eq!(filter.remove(&id, before), Ok(RemoveOutcome::Removed));
    }
    assert!((1..1_000u64).step_by(2).all(|id| filter.contains(&id)));
    let still = (0..1_000u64).step_by(2).filter(|id| filter.contains(id));
    // 500 removed keys, each a false positive with p ≤ 1%: n·p + 3σ ≈ 11.7.
    assert!(still.count() <= 11);
    let stats = filter.stats();
    assert_eq!((stats.kind, stats.removes), ("counting", 500));
    // A key that is definitely absent is refused, and nothing changes.
    let never_inserted = (1_000u64..).find(|id| !filter.contains(id)).unwrap();
    let before = filter.generation();
    assert_eq!(
        filter.remove(&never_inserted, before),
        Ok(RemoveOutcome::Absent)
    );
}

#[tokio::test]
async fn a_removal_after_a_rebuild_leaves_the_new_filter_alone() {
    let filter = counting::<u64>(1_000);
    let ids: Vec<u64> = (0..100).collect();
    filter.reload_from(&ids).await.unwrap();

    let before = filter.generation();
    // DELETE id 5; a rebuild reads the table after the delete and swaps in before we remove.
    let after_delete: Vec<u64> = ids.iter().copied().filter(|&id| id != 5).collect();
    filter.reload_from(&after_delete).await.unwrap();
    // The new filter never held 5: decrementing its slots would take counts from other
    // keys. Nothing is removed.
    let bytes = filter.current().to_bytes();
    assert_eq!(
        filter.remove(&5u64, before),
        Ok(RemoveOutcome::FilterReplaced)
    );
    assert_eq!(filter.current().to_bytes(), bytes);
    assert!(after_delete.iter().all(|id| filter.contains(id)));
}

#[tokio::test]
async fn insert_after_commit_reaches_a_filter_published_since_the_insert() {
    let filter = counting::<u64>(1_000);
    let inserted = filter.insert(&42u64);
    // A rebuild starts between the insert and the commit, and its source (read before the
    // commit) does not have 42.
    let building = filter
        .start_building(CountingBloomFilter::new(1_000, 0.01).unwrap())
        .unwrap();
    assert!(!building.filter().contains(&42u64));
    // committed
    filter.insert_after_commit(&42u64, inserted);
    assert!(building.filter().contains(&42u64));
    building.finish();
    assert!(filter.contains(&42u64));
    // Counted once in the new filter: one removal takes it out.
    let counts = filter
        .current()
        .as_counting()
        .unwrap()
        .count_estimate(&42u64);
    assert_eq!(counts, 1);
}

#[test]
fn only_a_counting_filter_removes_and_the_error_says_what_to_use() {
    for filter in [
        SharedFilter::<String>::new(BloomFilter::new(100, 0.01).unwrap()),
        scalable(100),
    ] {
        filter.insert("k");
        let error = filter.remove("k", filter.generation()).unwrap_err();
        assert!(error.to_string().contains("CountingBloomFilter"), "{error}");
        assert!(filter.contains("k"));
    }
}

#[tokio::test]
async fn a_scalable_filter_grows_past_its_size_and_a_rebuild_sizes_its_first_stage() {
    let filter = scalable::<u64>(1_000);
    let ids: Vec<u64> = (0..50_000).collect();
    for id in &ids {
        filter.insert(id);
    }
    assert!(ids.iter().all(|id| filter.contains(id)));
    let stages = |filter: &SharedFilter<u64>| filter.current().as_scalable().unwrap().num_stages();
    assert!(stages(&filter) >= 5, "{} stages", stages(&filter));
    // No capacity warning: a scalable filter has no capacity to pass.
    assert_eq!(filter.stats().saturation_warnings, 0);

    // The vector source hints its length: the new first stage takes all 50,000 (plus a
    // quarter of headroom), so lookups check one stage again.
    filter.reload_from(&ids).await.unwrap();
    assert_eq!(stages(&filter), 1);
    let current = filter.current();
    let rebuilt = current.as_scalable().unwrap();
    assert_eq!(rebuilt.initial_capacity(), 62_500);
    assert_eq!((rebuilt.seed(), rebuilt.target_fpr()), (11, Some(0.01)));
    assert!(ids.iter().all(|id| filter.contains(id)));
}

#[tokio::test]
async fn a_counting_filter_is_rebuilt_as_a_counting_filter() {
    let filter = counting::<u64>(1_000);
    filter
        .reload_from(&(0..5_000u64).collect::<Vec<_>>())
        .await
        .unwrap();
    let current = filter.current();
    let rebuilt = current.as_counting().unwrap();
    assert_eq!(rebuilt.capacity(), Some(6_250));
    assert_eq!(rebuilt.seed(), 11);
}

#[tokio::test]
async fn every_kind_saves_and_loads_back_the_same_filter() {
    let dir = tempfile::tempdir().unwrap();
    for (name, filter) in [
        (
            "plain",
            SharedFilter::<u64>::new(BloomFilter::new(1_000, 0.01).unwrap()),
        ),
        ("counting", counting(1_000)),
        ("scalable", scalable(100)),
    ] {
        for id in 0..2_000u64 {
            filter.insert(&id);
        }
        let path = dir.path().join(name);
        filter.save(&path).await.unwrap();
        let loaded = SharedFilter::<u64>::load(&path).await.unwrap();
        assert_eq!(loaded.stats().kind, name);
        assert_eq!(loaded.current().to_bytes(), filter.current().to_bytes());
        assert!((0..2_000u64).all(|id| loaded.contains(&id)));
        let bytes = std::fs::read(&path).unwrap();
        let snapshot = bloom_core::Snapshot::read_from(&mut bytes.as_slice()).unwrap();
        assert_eq!(snapshot.filter.kind(), name);
        // Cut short: corrupt, never a panic.
        std::fs::write(&path, &bytes[..bytes.len() - 3]).unwrap();
        let error = SharedFilter::<u64>::load(&path).await.unwrap_err();
        assert!(error.is_corrupt());
    }
}
