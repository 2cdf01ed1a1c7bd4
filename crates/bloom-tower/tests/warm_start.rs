//! Starting from a snapshot: refused unless made for this filter, caught up from the source
//! before serving, verifying (letting every key through) when it cannot be caught up; and the
//! create path's after-commit work surviving cancellation.
#![cfg(feature = "guarded-cache")]

use std::io;
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bloom_tower::key::KeyFor;
use bloom_tower::key_source::Watermark;
use bloom_tower::shared_filter::{RemoveOutcome, Started};
use bloom_tower::{
    BloomFilter, CountingBloomFilter, CuckooFilter, GuardedCache, KeySource, SharedFilter,
};
use futures_util::{Stream, stream};

/// An append-only table of ids: its watermark is the number of rows, `keys_since(n)` the rows
/// after the first `n`. `fail_since` makes the catch-up query fail.
#[derive(Default)]
struct Table {
    rows: Mutex<Vec<u64>>,
    fail_since: AtomicBool,
    no_watermark: AtomicBool,
}

impl Table {
    fn with(ids: impl IntoIterator<Item = u64>) -> Arc<Self> {
        let table = Self::default();
        table.rows.lock().unwrap().extend(ids);
        Arc::new(table)
    }

    fn add(&self, ids: impl IntoIterator<Item = u64>) {
        self.rows.lock().unwrap().extend(ids);
    }

    fn all(&self) -> Vec<u64> {
        self.rows.lock().unwrap().clone()
    }
}

impl KeySource for Table {
    type Key = u64;
    type Error = io::Error;

    fn keys(
        &self,
    ) -> impl Stream<Item = Result<impl KeyFor<u64> + Send + '_, io::Error>> + Send + '_ {
        stream::iter(self.all().into_iter().map(Ok))
    }

    fn count_hint(&self) -> Option<u64> {
        Some(self.rows.lock().unwrap().len() as u64)
    }

    async fn watermark(&self) -> Result<Option<Watermark>, io::Error> {
        if self.no_watermark.load(SeqCst) {
            return Ok(None);
        }
        Ok(Some(
            Watermark::from(self.rows.lock().unwrap().len() as u64),
        ))
    }

    fn keys_since<'a>(
        &'a self,
        since: &'a Watermark,
    ) -> impl Stream<Item = Result<impl KeyFor<u64> + Send + 'a, io::Error>> + Send + 'a {
        let since = since.to_u64().expect("a watermark this table wrote") as usize;
        let rows = self.all();
        let fail = self.fail_since.load(SeqCst);
        let result: Vec<Result<u64, io::Error>> = if fail {
            vec![Err(io::Error::other("connection reset"))]
        } else {
            rows[since.min(rows.len())..]
                .iter()
                .copied()
                .map(Ok)
                .collect()
        };
        stream::iter(result)
    }
}

fn plain(seed: u128) -> BloomFilter {
    BloomFilter::builder()
        .expected_items(1_000)
        .false_positive_rate(0.01)
        .seed(seed)
        .build()
        .unwrap()
}

/// Starts the filter "users" with its snapshot in `dir`.
async fn start(
    dir: &tempfile::TempDir,
    table: &Arc<Table>,
    seed: u128,
) -> (SharedFilter<u64>, Started) {
    SharedFilter::builder()
        .name("users")
        .snapshot(dir.path().join("users.bloom"))
        .require_hash_key(seed)
        .start(plain(seed), table)
        .await
        .unwrap()
}

fn missing(filter: &SharedFilter<u64>, table: &Table) -> Vec<u64> {
    table
        .all()
        .into_iter()
        .filter(|id| !filter.contains(id))
        .collect()
}

#[tokio::test]
async fn a_restart_catches_up_with_every_key_added_since_the_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    let table = Table::with(1..=500);
    let (filter, started) = start(&dir, &table, 7).await;
    assert_eq!(
        started,
        Started::Rebuilt {
            keys: 500,
            refused: None
        }
    );
    // The rebuild saved a snapshot: a crash right now loses nothing.
    assert!(dir.path().join("users.bloom").exists());
    // Created through this process after the snapshot, then killed: never saved.
    for id in 501..=520 {
        let pending = filter.prepare_insert(&id);
        table.add([id]);
        pending.committed().await;
    }
    drop(filter);
    // Another writer while the service is down.
    table.add(521..=540);

    let (restarted, started) = start(&dir, &table, 7).await;
    assert_eq!(started, Started::CaughtUp { keys: 40 });
    assert_eq!(missing(&restarted, &table), Vec::<u64>::new());
    assert!(!restarted.is_verifying());
    // It still rejects: most absent ids are answered "absent" (1% false positives).
    let rejected = (10_000..11_000u64)
        .filter(|id| !restarted.contains(id))
        .count();
    assert!(rejected > 900, "{rejected} of 1000 absent ids rejected");
}

/// A cuckoo filter starts from its snapshot as a Bloom filter does: used (not rebuilt),
/// caught up with the keys added since, still a cuckoo filter that can remove a key; and a
/// plain filter's snapshot is refused for it.
#[tokio::test]
async fn a_cuckoo_filter_restarts_from_its_snapshot_and_catches_up() {
    let dir = tempfile::tempdir().unwrap();
    let table = Table::with(1..=500);
    let cuckoo = || {
        CuckooFilter::builder()
            .expected_items(1_000)
            .false_positive_rate(0.01)
            .seed(7)
            .build()
            .unwrap()
    };
    let start_cuckoo = || {
        SharedFilter::<u64>::builder()
            .name("users")
            .snapshot(dir.path().join("users.bloom"))
            .require_hash_key(7)
            .start(cuckoo(), &table)
    };
    let (filter, started) = start_cuckoo().await.unwrap();
    assert_eq!(
        started,
        Started::Rebuilt {
            keys: 500,
            refused: None
        }
    );
    drop(filter);
    table.add(501..=540);
    let (filter, started) = start_cuckoo().await.unwrap();
    assert_eq!(started, Started::CaughtUp { keys: 40 });
    assert_eq!(filter.stats().kind, "cuckoo");
    assert_eq!(missing(&filter, &table), Vec::<u64>::new());
    assert!(filter.current().can_remove());

    // A plain filter's snapshot in its place is refused, and the source rebuilds it.
    std::fs::remove_file(dir.path().join("users.bloom")).unwrap();
    drop(start(&dir, &table, 7).await);
    let (filter, started) = start_cuckoo().await.unwrap();
    let Started::Rebuilt { refused, .. } = started else {
        panic!("a plain snapshot was used for a cuckoo filter: {started:?}")
    };
    assert!(refused.unwrap().contains("cuckoo"));
    assert_eq!(filter.stats().kind, "cuckoo");
}

#[tokio::test]
async fn the_caught_up_watermark_is_saved_so_the_next_restart_reads_only_what_is_new() {
    let dir = tempfile::tempdir().unwrap();
    let table = Table::with(1..=100);
    drop(start(&dir, &table, 7).await);
    table.add(101..=110);
    let (filter, started) = start(&dir, &table, 7).await;
    assert_eq!(started, Started::CaughtUp { keys: 10 });
    filter.save_snapshot().await.unwrap();
    table.add(111..=112);
    let (filter, started) = start(&dir, &table, 7).await;
    assert_eq!(started, Started::CaughtUp { keys: 2 });
    assert_eq!(missing(&filter, &table), Vec::<u64>::new());
}

#[tokio::test]
async fn a_snapshot_from_another_hash_key_kind_or_name_is_refused_and_the_source_rebuilds() {
    let dir = tempfile::tempdir().unwrap();
    let table = Table::with(1..=300);
    drop(start(&dir, &table, 7).await);
    let path = dir.path().join("users.bloom");
    let saved = std::fs::read(&path).unwrap();
    table.add(301..=310);

    // Another hash key.
    let (filter, started) = start(&dir, &table, 8).await;
    let Started::Rebuilt { keys, refused } = started else {
        panic!("a snapshot with another hash key was used: {started:?}")
    };
    assert_eq!(keys, 310);
    assert!(refused.unwrap().contains("hash key"));
    assert_eq!(filter.current().seed(), 8);
    assert_eq!(missing(&filter, &table), Vec::<u64>::new());

    // Another kind.
    std::fs::write(&path, &saved).unwrap();
    let counting = CountingBloomFilter::builder()
        .expected_items(1_000)
        .false_positive_rate(0.01)
        .seed(7)
        .build()
        .unwrap();
    let (filter, started) = SharedFilter::<u64>::builder()
        .name("users")
        .snapshot(&path)
        .start(counting, &table)
        .await
        .unwrap();
    let Started::Rebuilt { refused, .. } = started else {
        panic!("a plain snapshot was used for a counting filter: {started:?}")
    };
    assert!(refused.unwrap().contains("counting"));
    assert_eq!(filter.stats().kind, "counting");
    assert_eq!(missing(&filter, &table), Vec::<u64>::new());

    // Another name: another filter's snapshot copied to the wrong place.
    std::fs::write(&path, &saved).unwrap();
    let (_, started) = SharedFilter::<u64>::builder()
        .name("orders")
        .snapshot(&path)
        .start(plain(7), &table)
        .await
        .unwrap();
    let Started::Rebuilt { refused, .. } = started else {
        panic!("the snapshot of \"users\" was used for \"orders\": {started:?}")
    };
    assert!(refused.unwrap().contains("\"users\""));

    // Corrupt: built from the source, not an error.
    let mut damaged = saved.clone();
    let middle = damaged.len() / 2;
    damaged[middle] ^= 1;
    std::fs::write(&path, &damaged).unwrap();
    let (filter, started) = start(&dir, &table, 7).await;
    let Started::Rebuilt { refused, .. } = started else {
        panic!("a corrupt snapshot was used: {started:?}")
    };
    assert!(refused.unwrap().contains("corrupt"));
    assert_eq!(missing(&filter, &table), Vec::<u64>::new());
}

#[tokio::test]
async fn a_snapshot_that_cannot_be_caught_up_lets_everything_through_until_a_rebuild() {
    let dir = tempfile::tempdir().unwrap();
    let table = Table::with(1..=200);
    drop(start(&dir, &table, 7).await);
    table.add(201..=210);
    table.fail_since.store(true, SeqCst);

    let (filter, started) = start(&dir, &table, 7).await;
    let Started::Verifying { reason } = started else {
        panic!("a snapshot that could not be caught up serves as is: {started:?}")
    };
    assert!(reason.contains("connection reset"), "{reason}");
    assert!(filter.is_verifying() && filter.stats().verifying);
    // Keys created while it was down pass, and so does everything else, counted.
    assert_eq!(missing(&filter, &table), Vec::<u64>::new());
    let absent = (10_000..10_100u64).filter(|id| filter.contains(id)).count();
    assert_eq!(absent, 100);
    let passes = filter.stats().unverified_passes;
    assert!(passes >= 90, "{passes} would-be rejections counted");

    // rebuild_every rebuilds at once when verifying, without waiting for its interval.
    let task = filter.rebuild_every(Duration::from_secs(3600), Arc::clone(&table));
    tokio::time::timeout(Duration::from_secs(30), async {
        while filter.is_verifying() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("the verifying filter was rebuilt at once");
    task.shutdown().await;
    assert_eq!(missing(&filter, &table), Vec::<u64>::new());
    assert!(
        (10_000..10_100u64)
            .filter(|id| !filter.contains(id))
            .count()
            > 90
    );
    assert!(!filter.stats().verifying);
}

#[tokio::test]
async fn a_source_without_a_watermark_or_a_snapshot_without_one_serves_verifying() {
    let dir = tempfile::tempdir().unwrap();
    let table = Table::with(1..=50);
    table.no_watermark.store(true, SeqCst);
    drop(start(&dir, &table, 7).await);
    let (filter, started) = start(&dir, &table, 7).await;
    // The snapshot has no watermark (the source gave none when it was built).
    assert!(
        matches!(&started, Started::Verifying { reason } if reason.contains("no watermark")),
        "{started:?}"
    );
    assert!(filter.contains(&999_999u64));

    // A snapshot with a watermark, but a source that cannot say any more.
    table.no_watermark.store(false, SeqCst);
    filter.reload_from(&table).await.unwrap();
    assert!(!filter.is_verifying());
    drop(filter);
    table.no_watermark.store(true, SeqCst);
    let (_, started) = start(&dir, &table, 7).await;
    assert!(
        matches!(&started, Started::Verifying { reason } if reason.contains("cannot say")),
        "{started:?}"
    );
}

#[tokio::test]
async fn a_verifying_filter_saved_again_is_caught_up_by_the_next_start() {
    // It keeps the watermark of the snapshot it was loaded from, which stays true of it: the
    // next start reads everything since then, including what the failed catch-up missed.
    let dir = tempfile::tempdir().unwrap();
    let table = Table::with(1..=50);
    drop(start(&dir, &table, 7).await);
    table.add(51..=60);
    table.fail_since.store(true, SeqCst);
    let (filter, _) = start(&dir, &table, 7).await;
    assert!(filter.is_verifying());
    filter.save_snapshot().await.unwrap();
    drop(filter);
    table.fail_since.store(false, SeqCst);
    table.add(61..=65);
    let (filter, started) = start(&dir, &table, 7).await;
    assert_eq!(started, Started::CaughtUp { keys: 15 });
    assert_eq!(missing(&filter, &table), Vec::<u64>::new());
    assert!(!filter.is_verifying());
}

#[cfg(unix)]
#[tokio::test]
async fn snapshots_are_private_to_their_owner() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let table = Table::with(1..=10);
    let (filter, _) = start(&dir, &table, 7).await;
    filter.save_snapshot().await.unwrap();
    let mode = std::fs::metadata(dir.path().join("users.bloom"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600, "mode {mode:o}");
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|entry| entry.unwrap().file_name())
        .collect();
    assert_eq!(names, ["users.bloom"], "no temporary file left behind");
}

#[tokio::test]
async fn save_every_writes_the_snapshot_on_a_schedule() {
    let dir = tempfile::tempdir().unwrap();
    let table = Table::with(1..=10);
    let (filter, _) = start(&dir, &table, 7).await;
    let path = dir.path().join("users.bloom");
    std::fs::remove_file(&path).unwrap();
    let task = filter.save_every(Duration::from_millis(20));
    tokio::time::timeout(Duration::from_secs(30), async {
        while !path.exists() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("a scheduled snapshot");
    task.shutdown().await;
}

/// A source whose `keys()` takes its snapshot of the table at once, then waits for `release`
/// before yielding: the rebuild reads the table, the test does things, then it swaps in.
struct Gated {
    table: Arc<Table>,
    read: tokio::sync::Notify,
    release: tokio::sync::Notify,
}

impl KeySource for Gated {
    type Key = u64;
    type Error = io::Error;

    fn keys(
        &self,
    ) -> impl Stream<Item = Result<impl KeyFor<u64> + Send + '_, io::Error>> + Send + '_ {
        let rows = self.table.all();
        stream::once(async move {
            self.read.notify_one();
            self.release.notified().await;
            stream::iter(rows.into_iter().map(Ok))
        })
        .flatten()
    }
}

use futures_util::StreamExt as _;

/// The create path: insert before the commit, rebuild reads the table (missing the open
/// transaction), commit, then the request is cancelled before its after-commit work; the
/// rebuild swaps in. With `cancel_inside_committed` it is cancelled in the middle of
/// `committed()` instead (after its first poll).
async fn create_cancelled_around_a_rebuild(cancel_inside_committed: bool) {
    let table = Table::with(1..=100);
    let filter = SharedFilter::new(plain(3));
    filter.reload_from(&table).await.unwrap();
    let users: GuardedCache<u64, u64> = GuardedCache::builder(filter.clone())
        .negative_ttl(Duration::from_secs(600))
        .build();
    let find = {
        let table = Arc::clone(&table);
        move |id: u64| {
            let found = table.all().contains(&id).then_some(id);
            async move { Ok::<_, io::Error>(found) }
        }
    };

    let pending = users.prepare_insert(&101);
    // A lookup before the commit caches "not found" for ten minutes.
    assert_eq!(users.get_or_load(&101, find.clone()).await.unwrap(), None);
    // A rebuild reads the table now: the row is not committed yet.
    let gated = Arc::new(Gated {
        table: Arc::clone(&table),
        read: tokio::sync::Notify::new(),
        release: tokio::sync::Notify::new(),
    });
    let rebuild = tokio::spawn({
        let (filter, gated) = (filter.clone(), Arc::clone(&gated));
        async move { filter.reload_from(&*gated).await.unwrap() }
    });
    gated.read.notified().await;
    table.add([101]); // COMMIT
    if cancel_inside_committed {
        let mut committed = Box::pin(pending.committed());
        let _ = futures_util::poll!(committed.as_mut());
        drop(committed);
    } else {
        drop(pending); // the client went away before the after-commit work
    }
    gated.release.notify_one();
    rebuild.await.unwrap();
    // Let the spawned invalidation run.
    for _ in 0..100 {
        tokio::task::yield_now().await;
    }
    assert!(
        filter.contains(&101u64),
        "the new filter rejects a committed user"
    );
    assert_eq!(
        users.get_or_load(&101, find).await.unwrap(),
        Some(101),
        "the cache still answers \"not found\" for a committed user"
    );
}

#[tokio::test]
async fn a_create_cancelled_after_the_commit_still_reaches_a_rebuild_and_the_cache() {
    create_cancelled_around_a_rebuild(false).await;
}

#[tokio::test]
async fn a_create_cancelled_inside_its_after_commit_work_still_finishes_it() {
    create_cancelled_around_a_rebuild(true).await;
}

#[tokio::test]
async fn a_create_counts_its_key_once_in_a_counting_filter() {
    let filter = SharedFilter::<u64>::new(
        CountingBloomFilter::builder()
            .expected_items(1_000)
            .false_positive_rate(0.001)
            .seed(5)
            .build()
            .unwrap(),
    );
    let before = filter.generation();
    let pending = filter.prepare_insert(&9u64);
    pending.committed().await;
    assert_eq!(
        filter.remove(&9u64, before).unwrap(),
        RemoveOutcome::Removed
    );
    assert!(
        !filter.contains(&9u64),
        "one removal takes a created key out"
    );
    // The same when the after-commit work runs from `Drop`.
    let before = filter.generation();
    drop(filter.prepare_insert(&10u64));
    assert_eq!(
        filter.remove(&10u64, before).unwrap(),
        RemoveOutcome::Removed
    );
    assert!(!filter.contains(&10u64));
}
