//! Snapshots: a saved filter loads back identical (and verifying: it cannot know what was
//! created since it was saved); a damaged file is reported as corrupt.

use bloom_tower::key::AnyKey;
use bloom_tower::{BloomFilter, SharedFilter};

/// Integer ids and a text key in one filter, on purpose: a snapshot keeps whatever keys a
/// filter holds, so the filter is untyped.
fn filled() -> SharedFilter<AnyKey> {
    let filter = SharedFilter::<AnyKey>::new(BloomFilter::new(10_000, 0.01).unwrap());
    for key in 0..2_000u64 {
        filter.insert(&key);
    }
    filter.insert("ada");
    filter
}

#[tokio::test]
async fn a_saved_filter_loads_back_with_the_same_answers() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("users.bloom");
    let filter = filled();
    filter.save(&path).await.unwrap();

    let loaded = SharedFilter::<AnyKey>::builder()
        .name("users")
        .load(&path)
        .await
        .unwrap();
    assert_eq!(loaded.name(), "users");
    assert!((0..2_000u64).all(|key| loaded.contains(&key)));
    assert!(loaded.contains("ada"));
    let (saved, restored) = (filter.current(), loaded.current());
    // Same bits and hash key: the same answer for keys never inserted, too.
    assert!((10_000..20_000u64).all(|key| restored.contains(&key) == saved.contains(&key)));
    assert_eq!(saved.to_bytes(), restored.to_bytes());
    // Loaded without a source to catch up from, it lets every key through until a rebuild.
    assert!(loaded.is_verifying());
    assert!((10_000..20_000u64).all(|key| loaded.contains(&key)));
    assert!(loaded.stats().unverified_passes > 9_000);
    loaded
        .reload_from(&(0..2_000u64).collect::<Vec<_>>())
        .await
        .unwrap();
    assert!(!loaded.is_verifying());
    assert!((10_000..20_000u64).any(|key| !loaded.contains(&key)));
    let approx = loaded.stats().approx_items;
    assert!((1_900..2_100).contains(&approx), "counted {approx} keys");
}

#[tokio::test]
async fn saving_replaces_the_file_and_leaves_no_temporary_behind() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("users.bloom");
    SharedFilter::<u64>::new(BloomFilter::new(100, 0.01).unwrap())
        .save(&path)
        .await
        .unwrap();
    let filter = filled();
    filter.save(&path).await.unwrap();

    let names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|entry| entry.unwrap().file_name())
        .collect();
    assert_eq!(names, ["users.bloom"]);
    assert!(
        SharedFilter::<AnyKey>::load(&path)
            .await
            .unwrap()
            .contains(&1_999u64)
    );
}

#[tokio::test]
async fn a_corrupt_snapshot_is_an_error_that_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("users.bloom");
    filled().save(&path).await.unwrap();
    let good = std::fs::read(&path).unwrap();

    let mut flipped = good.clone();
    let middle = flipped.len() / 2;
    flipped[middle] ^= 0x01;
    let truncated = &good[..good.len() - 100];
    let garbage = b"this is not a filter at all, just some text of some length".repeat(3);

    for damaged in [&flipped[..], truncated, &garbage] {
        std::fs::write(&path, damaged).unwrap();
        let error = SharedFilter::<AnyKey>::load(&path).await.unwrap_err();
        assert!(error.is_corrupt(), "{error:?}");
        assert_eq!(error.path(), path);
        let message = error.to_string();
        assert!(
            message.contains("corrupt") && message.contains("users.bloom"),
            "{message}"
        );
        // The cause says what exactly is wrong.
        assert!(std::error::Error::source(&error).is_some());
    }
}

#[tokio::test]
async fn a_missing_file_or_directory_is_an_io_error_not_corruption() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("never-saved.bloom");
    let error = SharedFilter::<AnyKey>::load(&missing).await.unwrap_err();
    assert!(!error.is_corrupt());
    assert!(error.to_string().contains("never-saved.bloom"), "{error}");

    let nowhere = dir.path().join("no-such-dir").join("users.bloom");
    let error = filled().save(&nowhere).await.unwrap_err();
    assert!(!error.is_corrupt());
    assert!(error.to_string().contains("could not save"), "{error}");
}
