//! `SharedFilter::merge_snapshot`: the bits of the snapshot at the configured path are OR-ed
//! into the serving filter only if it holds a plain filter of the same name, shape and hash
//! key; a missing file changes nothing, a damaged one is a corrupt-snapshot error, never a
//! panic.

use std::path::Path;

use bloom_tower::{BloomFilter, CountingBloomFilter, SharedFilter};

const BITS: u64 = 1 << 16;
const SEED: u128 = 0x0123_4567_89ab_cdef_0123_4567_89ab_cdef;

fn plain(bits: u64, seed: u128) -> BloomFilter {
    BloomFilter::builder()
        .bits(bits)
        .hashes(7)
        .seed(seed)
        .build()
        .unwrap()
}

/// The filter `name` with its snapshot at `path`, serving an empty `initial`.
fn users(name: &'static str, path: &Path, initial: BloomFilter) -> SharedFilter<u64> {
    SharedFilter::builder()
        .name(name)
        .snapshot(path)
        .build(initial)
}

/// Saves, at `path`, the snapshot of the filter `name` holding ids `1..=100`.
async fn save_snapshot(name: &'static str, path: &Path, initial: BloomFilter) -> BloomFilter {
    let saved = users(name, path, initial);
    for id in 1..=100u64 {
        saved.insert(&id);
    }
    saved.save_snapshot().await.unwrap();
    saved.current().as_plain().unwrap().clone()
}

fn set_bits(filter: &SharedFilter<u64>) -> u64 {
    filter.current().as_plain().unwrap().count_ones()
}

#[tokio::test]
async fn a_snapshot_of_the_same_filter_is_merged_into_the_serving_one() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("users.bloom");
    let saved = save_snapshot("users", &path, plain(BITS, SEED)).await;

    let filter = users("users", &path, plain(BITS, SEED));
    filter.insert(&5_000u64); // inserted before the merge: kept
    let merged = filter.merge_snapshot().await.unwrap();
    assert_eq!(merged.merged_bits(), Some(saved.count_ones()), "{merged}");
    assert!((1..=100u64).all(|id| filter.contains(&id)));
    assert!(filter.contains(&5_000u64));
    let items = filter.stats().approx_items;
    assert!(
        (90..=115).contains(&items),
        "counted from the bits: {items}"
    );
}

#[tokio::test]
async fn a_bare_filter_file_of_the_same_shape_is_merged() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("users.bloom");
    let bare = plain(BITS, SEED);
    bare.insert(&42u64);
    std::fs::write(&path, bare.to_bytes()).unwrap();

    let filter = users("users", &path, plain(BITS, SEED));
    let merged = filter.merge_snapshot().await.unwrap();
    assert_eq!(merged.merged_bits(), Some(bare.count_ones()), "{merged}");
    assert!(filter.contains(&42u64));
}

#[tokio::test]
async fn no_file_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let filter = users("users", &dir.path().join("absent.bloom"), plain(BITS, SEED));
    let merged = filter.merge_snapshot().await.unwrap();
    assert!(merged.is_missing(), "{merged}");
    assert_eq!((merged.merged_bits(), merged.refusal()), (None, None));
    assert_eq!(set_bits(&filter), 0);
}

#[tokio::test]
async fn no_snapshot_path_is_an_error_not_a_corrupt_snapshot() {
    let filter = SharedFilter::<u64>::new(plain(BITS, SEED));
    let error = filter.merge_snapshot().await.unwrap_err();
    assert!(!error.is_corrupt());
    assert!(error.to_string().contains("no snapshot path"), "{error}");
}

#[tokio::test]
async fn a_snapshot_of_another_size_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("users.bloom");
    save_snapshot("users", &path, plain(BITS * 2, SEED)).await;

    let filter = users("users", &path, plain(BITS, SEED));
    let merged = filter.merge_snapshot().await.unwrap();
    let reason = merged.refusal().expect("refused").to_string();
    assert!(reason.contains("number of bits differs"), "{reason}");
    assert_eq!(merged.merged_bits(), None);
    assert_eq!(set_bits(&filter), 0);
}

#[tokio::test]
async fn a_snapshot_made_with_another_hash_key_is_refused_without_showing_either_key() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("users.bloom");
    let other_seed = SEED ^ 1;
    save_snapshot("users", &path, plain(BITS, other_seed)).await;

    let filter = users("users", &path, plain(BITS, SEED));
    let merged = filter.merge_snapshot().await.unwrap();
    let reason = merged.refusal().expect("refused");
    let shown = format!("{merged} {reason} {reason:?}");
    assert!(shown.contains("another hash key"), "{shown}");
    for seed in [SEED, other_seed] {
        for form in [
            seed.to_string(),
            format!("{seed:x}"),
            format!("{seed:X}"),
            format!("{:x}", seed as u64),
        ] {
            assert!(!shown.contains(&form), "a hash key is shown: {shown}");
        }
    }
    assert_eq!(set_bits(&filter), 0);
}

#[tokio::test]
async fn a_snapshot_of_another_filter_or_kind_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("users.bloom");
    save_snapshot("orders", &path, plain(BITS, SEED)).await;
    let filter = users("users", &path, plain(BITS, SEED));
    let merged = filter.merge_snapshot().await.unwrap();
    let reason = merged.refusal().expect("refused").to_string();
    assert!(reason.contains("\"orders\""), "{reason}");
    assert_eq!(set_bits(&filter), 0);

    let counting = SharedFilter::<u64>::builder()
        .name("users")
        .snapshot(&path)
        .build(
            CountingBloomFilter::builder()
                .bits(BITS)
                .hashes(7)
                .seed(SEED)
                .build()
                .unwrap(),
        );
    counting.insert(&1u64);
    counting.save_snapshot().await.unwrap();
    let merged = filter.merge_snapshot().await.unwrap();
    let reason = merged.refusal().expect("refused").to_string();
    assert!(reason.contains("counting"), "{reason}");
    assert_eq!(set_bits(&filter), 0);
}

#[tokio::test]
async fn a_damaged_snapshot_is_a_corrupt_snapshot_error_at_every_length() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("users.bloom");
    save_snapshot("users", &path, plain(BITS, SEED)).await;
    let bytes = std::fs::read(&path).unwrap();
    let filter = users("users", &path, plain(BITS, SEED));

    let cuts = (0..64)
        .chain((64..bytes.len()).step_by(997))
        .chain([bytes.len() - 1]);
    for cut in cuts {
        std::fs::write(&path, &bytes[..cut]).unwrap();
        let error = filter.merge_snapshot().await.unwrap_err();
        assert!(error.is_corrupt(), "cut at {cut}: {error}");
        assert_eq!(error.path(), path);
    }
    let mut flipped = bytes.clone();
    let middle = flipped.len() / 2;
    flipped[middle] ^= 0x40;
    std::fs::write(&path, &flipped).unwrap();
    assert!(filter.merge_snapshot().await.unwrap_err().is_corrupt());
    assert_eq!(set_bits(&filter), 0, "nothing of a damaged file is merged");
}
