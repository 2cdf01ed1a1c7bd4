//! Cross-instance invalidation: key digests, the commit hook, and `forget_remote` dropping
//! cached "not found" answers for records created on another instance.
#![cfg(feature = "guarded-cache")]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bloom_tower::shared_filter::InsertHook;
use bloom_tower::{BloomFilter, CountingBloomFilter, GuardedCache, SharedFilter};

#[derive(Debug, thiserror::Error)]
#[error("database is down")]
struct DbDown;

fn seeded(seed: u128) -> BloomFilter {
    BloomFilter::builder()
        .expected_items(10_000)
        .false_positive_rate(0.01)
        .seed(seed)
        .build()
        .unwrap()
}

/// Instance B: a filter that already holds `keys` (replicated from A) and a cache over it.
fn instance(keys: &[u64]) -> (SharedFilter<u64>, GuardedCache<u64, String>) {
    let filter = SharedFilter::new(seeded(1));
    for key in keys {
        filter.insert(key);
    }
    let cache = GuardedCache::builder(filter.clone())
        .negative_ttl(Duration::from_secs(60))
        .build();
    (filter, cache)
}

/// A loader answering `answer` and counting its runs in `runs`.
fn loader(
    runs: &Arc<AtomicUsize>,
    answer: Option<&str>,
) -> impl FnOnce(u64) -> std::future::Ready<Result<Option<String>, DbDown>> {
    let (runs, answer) = (Arc::clone(runs), answer.map(str::to_owned));
    move |_| {
        runs.fetch_add(1, Ordering::SeqCst);
        std::future::ready(Ok(answer))
    }
}

/// A hook that records every key it is called with.
fn recorder() -> (InsertHook, Arc<Mutex<Vec<Vec<u8>>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = Arc::clone(&seen);
    let hook: InsertHook = Arc::new(move |key: &[u8]| {
        log.lock().unwrap().push(key.to_vec());
    });
    (hook, seen)
}

#[test]
fn filters_with_the_same_hash_key_agree_on_digests_and_others_do_not() {
    let a = SharedFilter::<u64>::new(seeded(7));
    let b = SharedFilter::<u64>::builder().name("b").build(seeded(7));
    let counting = SharedFilter::<u64>::new(
        CountingBloomFilter::builder()
            .expected_items(100)
            .false_positive_rate(0.01)
            .seed(7)
            .build()
            .unwrap(),
    );
    let other = SharedFilter::<u64>::new(seeded(8));
    for key in 0..100u64 {
        let digest = a.key_digest(&key);
        assert_eq!(digest, b.key_digest(&key));
        assert_eq!(
            digest,
            counting.key_digest(&key),
            "the kind does not matter"
        );
        assert_eq!(
            digest,
            // On purpose a byte key on the `u64` filter: through an untyped handle.
            a.untyped().key_digest(&key.to_le_bytes()[..]),
            "a key is its bytes"
        );
        assert_ne!(
            digest,
            other.key_digest(&key),
            "another hash key, other digests"
        );
    }
    assert_ne!(a.key_digest(&1u64), a.key_digest(&2u64));
}

#[tokio::test]
async fn a_remote_create_drops_the_cached_not_found() {
    let (filter, cache) = instance(&[7, 8]);
    let runs = Arc::new(AtomicUsize::new(0));
    // 7 and 8 pass the filter but are not committed on A yet: "not found" is cached.
    for key in [7, 8] {
        assert_eq!(
            cache.get_or_load(&key, loader(&runs, None)).await.unwrap(),
            None
        );
    }
    assert_eq!(
        cache
            .get_or_load(&7, loader(&runs, Some("x")))
            .await
            .unwrap(),
        None
    );
    assert_eq!(
        runs.load(Ordering::SeqCst),
        2,
        "the second lookup of 7 was a negative hit"
    );

    // A commits 7 and publishes its digest; B hears it through any clone of its filter.
    filter.clone().forget_remote(filter.key_digest(&7u64));
    let found = cache
        .get_or_load(&7, loader(&runs, Some("Ada")))
        .await
        .unwrap();
    assert_eq!(found.as_deref(), Some("Ada"));
    assert_eq!(runs.load(Ordering::SeqCst), 3, "7 was loaded again");
    // And cached again as a value.
    let again = cache.get_or_load(&7, loader(&runs, None)).await.unwrap();
    assert_eq!(again.as_deref(), Some("Ada"));
    // 8 is another digest: its "not found" stays.
    assert_eq!(
        cache
            .get_or_load(&8, loader(&runs, Some("x")))
            .await
            .unwrap(),
        None
    );
    assert_eq!(runs.load(Ordering::SeqCst), 3);
}

#[tokio::test]
async fn every_cache_on_the_filter_forgets() {
    let (filter, first) = instance(&[7]);
    let second: GuardedCache<u64, String> = GuardedCache::builder(filter.clone()).build();
    let runs = Arc::new(AtomicUsize::new(0));
    for cache in [&first, &second] {
        assert_eq!(
            cache.get_or_load(&7, loader(&runs, None)).await.unwrap(),
            None
        );
    }
    filter.forget_remote(filter.key_digest(&7u64));
    for cache in [&first, &second] {
        let found = cache
            .get_or_load(&7, loader(&runs, Some("Ada")))
            .await
            .unwrap();
        assert_eq!(found.as_deref(), Some("Ada"));
    }
    assert_eq!(runs.load(Ordering::SeqCst), 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_load_in_flight_during_a_remote_create_leaves_no_not_found_behind() {
    let (filter, cache) = instance(&[7]);
    let read_db = Arc::new(tokio::sync::Barrier::new(2));
    let finish = Arc::new(tokio::sync::Barrier::new(2));
    let slow_reader = tokio::spawn({
        let (cache, read_db, finish) = (cache.clone(), read_db.clone(), finish.clone());
        async move {
            cache
                .get_or_load(&7, |_| async move {
                    read_db.wait().await; // it has read "absent"…
                    finish.wait().await; // …and is slow to return it
                    Ok::<Option<String>, DbDown>(None)
                })
                .await
        }
    });
    read_db.wait().await;
    filter.forget_remote(filter.key_digest(&7u64)); // 7 is committed on A meanwhile
    finish.wait().await;
    assert_eq!(
        slow_reader.await.unwrap().unwrap(),
        None,
        "the racing lookup began before the create"
    );
    let runs = Arc::new(AtomicUsize::new(0));
    let after = cache.get_or_load(&7, loader(&runs, Some("Ada"))).await;
    assert_eq!(
        after.unwrap().as_deref(),
        Some("Ada"),
        "no stale negative entry survived"
    );
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn forgetting_a_digest_nothing_has_is_harmless() {
    let lonely = SharedFilter::<u64>::new(seeded(1));
    lonely.forget_remote(12345); // no cache at all

    let (filter, cache) = instance(&[7, 8]);
    let runs = Arc::new(AtomicUsize::new(0));
    cache.get_or_load(&7, loader(&runs, None)).await.unwrap();
    cache
        .get_or_load(&8, loader(&runs, Some("Bob")))
        .await
        .unwrap();
    filter.forget_remote(filter.key_digest(&9u64));
    filter.forget_remote(0);
    // Both answers are still served from the cache.
    assert_eq!(
        cache
            .get_or_load(&7, loader(&runs, Some("x")))
            .await
            .unwrap(),
        None
    );
    let bob = cache.get_or_load(&8, loader(&runs, None)).await.unwrap();
    assert_eq!(bob.as_deref(), Some("Bob"));
    // A value is never dropped: a create does not change an existing record.
    filter.forget_remote(filter.key_digest(&8u64));
    let bob = cache.get_or_load(&8, loader(&runs, None)).await.unwrap();
    assert_eq!(bob.as_deref(), Some("Bob"));
    assert_eq!(runs.load(Ordering::SeqCst), 2);

    // A dropped cache is not kept alive or called.
    drop(cache);
    filter.forget_remote(filter.key_digest(&7u64));
}

#[test]
fn forgetting_needs_no_runtime() {
    let (filter, cache) = instance(&[7]);
    filter.forget_remote(filter.key_digest(&7u64));
    drop(cache);
}

#[tokio::test]
async fn committed_calls_the_commit_hook_once_with_the_key() {
    let (filter, cache) = instance(&[]);
    let (hook, seen) = recorder();
    filter.set_commit_hook(Some(hook));
    filter.insert(&1u64); // a plain insert is not a commit
    assert!(seen.lock().unwrap().is_empty());

    filter.prepare_insert(&7u64).committed().await;
    assert_eq!(*seen.lock().unwrap(), [7u64.to_le_bytes().to_vec()]);
    cache.prepare_insert(&8).committed().await;
    assert_eq!(seen.lock().unwrap()[1], 8u64.to_le_bytes());

    // Set on one clone, seen by all; removable.
    filter.clone().set_commit_hook(None);
    filter.prepare_insert(&9u64).committed().await;
    assert_eq!(seen.lock().unwrap().len(), 2);
}

#[tokio::test(start_paused = true)]
async fn a_dropped_pending_insert_calls_the_commit_hook_now_and_after_the_late_pass() {
    let (filter, cache) = instance(&[]);
    let (hook, seen) = recorder();
    filter.set_commit_hook(Some(hook));
    drop(cache.prepare_insert(&7)); // the request was cancelled after the commit
    let key = 7u64.to_le_bytes();
    assert_eq!(*seen.lock().unwrap(), [key.to_vec()], "called at the drop");
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        seen.lock().unwrap().len(),
        1,
        "not again before the late pass"
    );
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert_eq!(
        *seen.lock().unwrap(),
        [key.to_vec(), key.to_vec()],
        "and after the late pass"
    );
}

#[test]
fn a_pending_insert_dropped_without_a_runtime_still_calls_the_commit_hook() {
    let filter = SharedFilter::<String>::new(seeded(1));
    let (hook, seen) = recorder();
    filter.set_commit_hook(Some(hook));
    drop(filter.prepare_insert("k"));
    assert_eq!(*seen.lock().unwrap(), [b"k".to_vec()]);
}
