//! Rebuilds of a replicated filter go through its owner (`set_external_rebuild`).

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bloom_tower::key::AnyKey;
use bloom_tower::key_source::BoxError;
use bloom_tower::shared_filter::{
    ErasedKeySource, ExternalRebuild, ReloadErrorKind, Reloaded, Started,
};
use bloom_tower::{BloomFilter, Key, SharedFilter};
use futures_util::TryStreamExt;

#[cfg(feature = "metrics")]
#[path = "support/descriptions.rs"]
mod descriptions;

fn seeded() -> BloomFilter {
    BloomFilter::builder()
        .expected_items(1_000)
        .false_positive_rate(0.01)
        .seed(5)
        .build()
        .unwrap()
}

fn bytes<K: Key + ?Sized>(key: &K) -> Box<[u8]> {
    key.key_bytes().as_ref().into()
}

/// An owner that streams the source and records what it saw; fails while `fail` is set.
#[derive(Default)]
struct Recorder {
    calls: AtomicUsize,
    keys: Mutex<Vec<Box<[u8]>>>,
    count_hints: Mutex<Vec<Option<u64>>>,
    fail: std::sync::atomic::AtomicBool,
    /// Rebuilt from the erased source through the generic `KeySource` API, if set: an
    /// untyped handle, as the erased source's keys are bytes of any key type.
    mirror: Option<SharedFilter<AnyKey>>,
}

impl ExternalRebuild for Recorder {
    fn rebuild<'a>(
        &'a self,
        source: &'a dyn ErasedKeySource,
    ) -> Pin<Box<dyn Future<Output = Result<Reloaded, BoxError>> + Send + 'a>> {
        Box::pin(async move {
            self.calls.fetch_add(1, Ordering::SeqCst);
            self.count_hints
                .lock()
                .unwrap()
                .push(source.erased_count_hint());
            let keys: Vec<Box<[u8]>> = source.erased_keys().try_collect().await?;
            let read = keys.len() as u64;
            self.keys.lock().unwrap().extend(keys);
            if let Some(mirror) = &self.mirror {
                mirror.reload_from(source).await?;
            }
            if self.fail.load(Ordering::SeqCst) {
                return Err("the fleet's rebuild lock was lost".into());
            }
            Ok(Reloaded::Rebuilt { keys: read })
        })
    }
}

fn install<K: ?Sized>(filter: &SharedFilter<K>, owner: Recorder) -> Arc<Recorder> {
    let owner = Arc::new(owner);
    filter.set_external_rebuild(Some(Arc::clone(&owner) as Arc<dyn ExternalRebuild>));
    owner
}

#[tokio::test]
async fn reload_from_hands_the_source_to_the_owner_and_rebuilds_nothing_here() {
    let filter = SharedFilter::<u64>::new(seeded());
    filter.insert(&99u64);
    let mirror = SharedFilter::<u64>::new(seeded());
    let owner = install(
        &filter,
        Recorder {
            mirror: Some(mirror.untyped()),
            ..Recorder::default()
        },
    );

    let reloaded = filter.reload_from(&vec![1u64, 2, 3]).await.unwrap();
    assert_eq!(reloaded, Reloaded::Rebuilt { keys: 3 });
    assert_eq!(owner.calls.load(Ordering::SeqCst), 1);
    assert_eq!(
        *owner.keys.lock().unwrap(),
        [bytes(&1u64), bytes(&2u64), bytes(&3u64)]
    );
    assert_eq!(*owner.count_hints.lock().unwrap(), [Some(3)]);
    // Nothing was rebuilt locally: the key inserted before is still there, no rebuild counted.
    assert!(filter.contains(&99u64));
    assert!(!filter.contains(&1u64));
    let stats = filter.stats();
    assert_eq!((stats.rebuilds, stats.rebuilding), (0, false));
    // The erased source is a KeySource again: the owner rebuilt another filter from it.
    assert!(mirror.contains(&1u64) && mirror.contains(&3u64));
    assert_eq!(mirror.stats().rebuilds, 1);

    // An unsized source too.
    let slice: &[u64] = &[4, 5];
    filter.reload_from(slice).await.unwrap();
    assert_eq!(
        owner.keys.lock().unwrap()[3..],
        [bytes(&4u64), bytes(&5u64)]
    );
    assert_eq!(filter.stats().rebuilds, 0);
}

#[tokio::test]
async fn the_owner_may_fill_the_filter_itself() {
    /// Rebuilds the filter it is installed on, through `start_building`.
    struct Local(SharedFilter<String>);
    impl ExternalRebuild for Local {
        fn rebuild<'a>(
            &'a self,
            source: &'a dyn ErasedKeySource,
        ) -> Pin<Box<dyn Future<Output = Result<Reloaded, BoxError>> + Send + 'a>> {
            Box::pin(async move {
                // `reload_from` holds no rebuild slot meanwhile, so this does not deadlock.
                let building = self.0.start_building(seeded())?;
                let keys: Vec<Box<[u8]>> = source.erased_keys().try_collect().await?;
                for key in &keys {
                    building.filter().insert(&**key);
                }
                building.filter().insert("filled by the owner");
                building.finish();
                Ok(Reloaded::Rebuilt {
                    keys: keys.len() as u64,
                })
            })
        }
    }
    let filter = SharedFilter::<String>::new(seeded());
    filter.insert("old");
    filter.set_external_rebuild(Some(Arc::new(Local(filter.clone()))));
    let reloaded = filter.reload_from(&vec!["x", "y"]).await.unwrap();
    assert_eq!(reloaded, Reloaded::Rebuilt { keys: 2 });
    assert!(filter.contains("x") && filter.contains("y") && !filter.contains("old"));
    assert!(filter.contains("filled by the owner"));
    filter.set_external_rebuild(None); // the owner holds the filter: break the cycle
}

#[tokio::test]
async fn an_owner_failure_is_an_external_reload_error() {
    let filter = SharedFilter::<u64>::new(seeded());
    filter.insert(&99u64);
    let owner = install(&filter, Recorder::default());
    owner.fail.store(true, Ordering::SeqCst);
    let error = filter.reload_from(&vec![1u64]).await.unwrap_err();
    assert_eq!(error.kind(), ReloadErrorKind::External);
    assert!(
        error.to_string().contains("replication layer"),
        "the message says who ran it: {error}"
    );
    let cause = std::error::Error::source(&error).expect("the owner's error is the source");
    assert_eq!(cause.to_string(), "the fleet's rebuild lock was lost");
    assert!(filter.contains(&99u64));
    assert_eq!(filter.stats().rebuilds, 0);
}

#[tokio::test(start_paused = true)]
async fn rebuild_every_goes_through_the_owner() {
    let filter = SharedFilter::<u64>::new(seeded());
    let owner = install(&filter, Recorder::default());
    let task = filter.rebuild_every(Duration::from_secs(60), vec![1u64, 2]);
    tokio::time::sleep(Duration::from_secs(59)).await;
    assert_eq!(owner.calls.load(Ordering::SeqCst), 0);
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(owner.calls.load(Ordering::SeqCst), 1);
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert_eq!(owner.calls.load(Ordering::SeqCst), 2);
    assert_eq!(owner.keys.lock().unwrap().len(), 4);
    assert_eq!(filter.stats().rebuilds, 0);
    task.shutdown().await;
}

#[tokio::test]
async fn a_verifying_filter_retries_a_failing_owner_with_backoff() {
    let dir = tempfile::tempdir().unwrap();
    let ids = vec![1u64, 2, 3];
    let start = || {
        SharedFilter::<u64>::builder()
            .snapshot(dir.path().join("f.bloom"))
            .start(seeded(), &ids)
    };
    let (first, _) = start().await.unwrap();
    first.save_snapshot().await.unwrap();
    let (filter, started) = start().await.unwrap();
    assert!(matches!(started, Started::Verifying { .. }));

    tokio::time::pause();
    let owner = install(&filter, Recorder::default());
    owner.fail.store(true, Ordering::SeqCst);
    let task = filter.rebuild_every(Duration::from_secs(3600), ids.clone());
    // At once (verifying), then after 1 s, then 2 s more: not an hour later.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(owner.calls.load(Ordering::SeqCst), 1);
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(owner.calls.load(Ordering::SeqCst), 2);
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(owner.calls.load(Ordering::SeqCst), 3);
    task.shutdown().await;
}

#[tokio::test]
async fn removing_the_owner_restores_local_rebuilds() {
    let filter = SharedFilter::<u64>::new(seeded());
    filter.insert(&99u64);
    let owner = install(&filter, Recorder::default());
    filter.clone().set_external_rebuild(None);
    let reloaded = filter.reload_from(&vec![5u64]).await.unwrap();
    assert_eq!(reloaded, Reloaded::Rebuilt { keys: 1 });
    assert_eq!(owner.calls.load(Ordering::SeqCst), 0);
    assert!(filter.contains(&5u64) && !filter.contains(&99u64));
    assert_eq!(filter.stats().rebuilds, 1);
}

/// A filter that started *verifying* (a snapshot it could not catch up) and is then rebuilt
/// by its owner (`start_building` … `finish`, as bloom-redis does) sets
/// `bloom_filter_verifying` back to 0, as a `reload_from` does: otherwise the gauge, and the
/// alert on it, stays at 1 while the filter rejects absent keys again.
#[cfg(feature = "metrics")]
#[test]
fn an_owner_rebuild_of_a_verifying_filter_clears_the_verifying_gauge() {
    let recorder = descriptions::Descriptions::default();
    let dir = tempfile::tempdir().unwrap();
    let ids: Vec<u64> = (0..100).collect();
    let start = || {
        SharedFilter::<u64>::builder()
            .name("users")
            .snapshot(dir.path().join("users.bloom"))
            .start(seeded(), &ids)
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    // A local recorder sees what this thread emits, and block_on runs the tasks here.
    metrics::with_local_recorder(&recorder, || {
        runtime.block_on(async {
            let (first, _) = start().await.unwrap();
            first.save_snapshot().await.unwrap();
            // A Vec cannot say what changed since the snapshot: this one serves verifying.
            let (filter, started) = start().await.unwrap();
            assert!(matches!(started, Started::Verifying { .. }));
            let building = filter.start_building(seeded()).unwrap();
            building.handle().fill_from(&ids).await.unwrap();
            building.finish();
            assert!(!filter.is_verifying());
        })
    });
    let gauges = recorder.2.lock().unwrap();
    let verifying = &gauges["bloom_filter_verifying{filter=users}"];
    assert_eq!(verifying.last(), Some(&0.0), "set in order: {verifying:?}");
    assert!(verifying.contains(&1.0), "{verifying:?}");
}
