//! Rebuilds: zero false negatives under concurrent inserts and lookups, failed and dropped
//! rebuilds, one rebuild at a time, and the background task's lifetime.

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bloom_tower::key::KeyFor;
use bloom_tower::shared_filter::{ReloadErrorKind, Reloaded, RemoveOutcome};
use bloom_tower::{
    BloomFilter, CountingBloomFilter, KeySource, ScalableBloomFilter, SharedFilter, key_source,
};
use futures_core::Stream;
use futures_util::{FutureExt, StreamExt, stream};
use tokio::sync::Notify;

fn filter_for(capacity: u64) -> SharedFilter<u64> {
    SharedFilter::new(
        BloomFilter::builder()
            .expected_items(capacity)
            .false_positive_rate(0.01)
            .seed(0x5EED_u128)
            .build()
            .unwrap(),
    )
}

// ---------------------------------------------------------------------------------------
// Rebuild under load.

const WRITERS: u64 = 3;
const REBUILDS: u64 = 100;
/// Keys each writer may insert per rebuild started (keeps the key count bounded).
const ALLOWANCE: u64 = 300;
/// Keys every rebuild waits to see committed after its snapshot, before streaming: these
/// can reach the new filter only through the double write.
const INSERTED_DURING: usize = 60;

fn key_of(writer: u64, i: u64) -> u64 {
    (writer << 40) | i
}

/// With a counting filter, writers delete every `DELETE_EVERY`-th key they create, right
/// after creating it.
const DELETE_EVERY: u64 = 3;

fn is_deleted(i: u64) -> bool {
    i % DELETE_EVERY == 0
}

/// The "database": committed keys, plus what the test needs to pace and audit the writers.
#[derive(Default)]
struct Db {
    /// Every key ever committed, in order (deleted ones included: `len` paces the test).
    committed: Mutex<Vec<u64>>,
    deleted: Mutex<std::collections::HashSet<u64>>,
    /// How many keys had been committed (deleted ones included) at the last snapshot.
    last_snapshot_len: AtomicUsize,
    /// Removals that took the key out of the serving filter.
    removed: AtomicUsize,
    /// Of those, keys still found right after (false positives, or a swap in between).
    present_after_removal: AtomicUsize,
    /// Whether writers delete keys (the filter is a counting one).
    deletes: bool,
    /// Rebuilds that have taken their snapshot; writers may run `ALLOWANCE` keys ahead.
    snapshots: AtomicU64,
    /// Keys committed after a snapshot was taken, summed over the rebuilds.
    committed_after_snapshots: AtomicUsize,
    done: AtomicBool,
}

/// Reads the database *inside* `keys()`, after the rebuild has published its filter; then
/// waits until the writers have committed `INSERTED_DURING` more keys before streaming.
struct DbSource(Arc<Db>);

impl KeySource for DbSource {
    type Key = u64;
    type Error = std::convert::Infallible;

    fn keys(
        &self,
    ) -> impl Stream<Item = Result<impl KeyFor<u64> + Send + '_, Self::Error>> + Send + '_ {
        let db = &*self.0;
        let mut snapshot = db.committed.lock().unwrap().clone();
        db.last_snapshot_len.store(snapshot.len(), SeqCst);
        {
            let deleted = db.deleted.lock().unwrap();
            snapshot.retain(|key| !deleted.contains(key));
        }
        db.snapshots.fetch_add(1, SeqCst);
        let wait = async move {
            while db.committed.lock().unwrap().len() < snapshot.len() + INSERTED_DURING {
                tokio::task::yield_now().await;
            }
            snapshot
        };
        stream::once(wait).flat_map(|snapshot| stream::iter(snapshot.into_iter().map(Ok)))
    }
}

async fn writer(filter: SharedFilter<u64>, db: Arc<Db>, id: u64, visible: Arc<AtomicU64>) {
    let mut i = 0;
    while !db.done.load(SeqCst) {
        if i >= (db.snapshots.load(SeqCst) + 1) * ALLOWANCE {
            tokio::task::yield_now().await;
            continue;
        }
        let key = key_of(id, i);
        // The documented pattern: insert before the commit (readers never see a record the
        // guard rejects) and `insert_after_commit` after it (a rebuild whose snapshot missed
        // the open transaction gets the key from it).
        let inserted = filter.insert(&key);
        db.committed.lock().unwrap().push(key);
        filter.insert_after_commit(&key, inserted);
        visible.store(i + 1, SeqCst);
        if db.deletes && is_deleted(i) {
            // The documented pattern: the generation before the delete, the removal after.
            let before = filter.generation();
            db.deleted.lock().unwrap().insert(key);
            // The delete's round trip to the database: rebuilds may start and end meanwhile.
            for _ in 0..3 {
                tokio::task::yield_now().await;
            }
            let outcome = filter.remove(&key, before).unwrap();
            // The filter that served before the delete must hold the key.
            assert_ne!(outcome, RemoveOutcome::Absent, "key {key:#x}");
            if outcome == RemoveOutcome::Removed {
                db.removed.fetch_add(1, SeqCst);
                if filter.contains(&key) {
                    db.present_after_removal.fetch_add(1, SeqCst);
                }
            }
        }
        i += 1;
        tokio::task::yield_now().await;
    }
}

/// Looks up every key inserted so far, over and over; returns the ones it did not find.
async fn querier(filter: SharedFilter<u64>, db: Arc<Db>, visible: Vec<Arc<AtomicU64>>) -> Vec<u64> {
    let mut missed = Vec::new();
    loop {
        let last_pass = db.done.load(SeqCst);
        for (writer, visible) in (0..).zip(&visible) {
            for i in 0..visible.load(SeqCst) {
                if db.deletes && is_deleted(i) {
                    continue;
                }
                let key = key_of(writer, i);
                if !filter.contains(&key) {
                    missed.push(key);
                }
            }
            tokio::task::yield_now().await;
        }
        if last_pass {
            return missed;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn no_key_inserted_before_or_during_100_back_to_back_rebuilds_is_ever_missed() {
    rebuilds_under_load(filter_for(200_000), false).await;
}

/// A scalable filter that starts small grows during every rebuild, while keys stream in.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_scalable_filter_misses_no_key_through_100_rebuilds_while_it_grows() {
    let scalable = ScalableBloomFilter::builder(1_000, 0.01)
        .seed(0x5EED)
        .build()
        .unwrap();
    let filter = SharedFilter::new(scalable);
    rebuilds_under_load(filter.clone(), false).await;
    let current = filter.current();
    let grown = current.as_scalable().unwrap().num_stages();
    assert!(grown > 1, "{grown} stages: the test never made it grow");
}

/// Keys removed from a counting filter while rebuilds run never take another key with them,
/// and once no writer runs, a rebuild leaves only false positives of the deleted ones.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_counting_filter_misses_no_key_through_100_rebuilds_with_deletes() {
    let counting = CountingBloomFilter::builder()
        .expected_items(200_000)
        .false_positive_rate(0.01)
        .seed(0x5EED)
        .build()
        .unwrap();
    let filter = SharedFilter::new(counting);
    let db = rebuilds_under_load(filter.clone(), true).await;

    let deleted = db.deleted.lock().unwrap().clone();
    let remaining: Vec<u64> = db.committed.lock().unwrap().clone();
    let remaining: Vec<u64> = remaining
        .into_iter()
        .filter(|key| !deleted.contains(key))
        .collect();
    filter.reload_from(&remaining).await.unwrap();
    assert!(remaining.iter().all(|key| filter.contains(key)));
    let still_there = deleted.iter().filter(|key| filter.contains(*key)).count() as f64;
    // Now only false positives: each at most p = 1% (the filter holds far fewer than its
    // capacity), so the count is below n·p + 3σ.
    let (n, p) = (deleted.len() as f64, 0.01);
    let bound = n * p + 3.0 * (n * p * (1.0 - p)).sqrt();
    assert!(
        still_there <= bound,
        "{still_there} of {n} deleted keys still pass (bound {bound:.0})"
    );
    // Most removals found the filter that served before their delete still serving.
    let removed = db.removed.load(SeqCst);
    assert_eq!(filter.stats().removes, removed as u64);
    assert!(removed * 2 > deleted.len(), "{removed} of {n} removed");
    // A removed key is found again only as a false positive (≤ p = 1% each, as above), or
    // counted twice (an insert_after_commit that wrote a filter the first insert had).
    let present = db.present_after_removal.load(SeqCst) as f64;
    let removed = removed as f64;
    let bound = removed * p + 3.0 * (removed * p * (1.0 - p)).sqrt();
    assert!(
        present <= bound,
        "{present} of {removed} removed keys still pass (bound {bound:.0})"
    );
}

/// Runs writers (and deleters) and queriers through `REBUILDS` back-to-back rebuilds and
/// asserts no committed, undeleted key was ever reported absent.
async fn rebuilds_under_load(filter: SharedFilter<u64>, deletes: bool) -> Arc<Db> {
    let db = Arc::new(Db {
        deletes,
        ..Db::default()
    });
    let source = DbSource(Arc::clone(&db));
    let visible: Vec<_> = (0..WRITERS).map(|_| Arc::new(AtomicU64::new(0))).collect();

    let writers: Vec<_> = (0..WRITERS)
        .map(|id| {
            let task = writer(
                filter.clone(),
                Arc::clone(&db),
                id,
                Arc::clone(&visible[id as usize]),
            );
            tokio::spawn(task)
        })
        .collect();
    let queriers: Vec<_> = (0..2)
        .map(|_| tokio::spawn(querier(filter.clone(), Arc::clone(&db), visible.clone())))
        .collect();

    for _ in 0..REBUILDS {
        let committed_before = db.committed.lock().unwrap().len();
        let reloaded = filter.reload_from(&source).await.unwrap();
        assert!(
            matches!(reloaded, Reloaded::Rebuilt { .. }),
            "{reloaded:?}: nothing else rebuilds"
        );
        let snapshot_len = db.last_snapshot_len.load(SeqCst);
        assert!(snapshot_len >= committed_before);
        let committed_after = db.committed.lock().unwrap().len();
        db.committed_after_snapshots
            .fetch_add(committed_after - snapshot_len, SeqCst);
    }
    db.done.store(true, SeqCst);
    for writer in writers {
        writer.await.unwrap();
    }
    let mut missed = Vec::new();
    for querier in queriers {
        missed.extend(querier.await.unwrap());
    }

    assert!(
        missed.is_empty(),
        "{} false negatives, e.g. {:?}",
        missed.len(),
        &missed[..missed.len().min(5)]
    );
    let committed = db.committed.lock().unwrap();
    let deleted = db.deleted.lock().unwrap();
    assert!(
        committed
            .iter()
            .filter(|key| !deleted.contains(*key))
            .all(|key| filter.contains(key))
    );
    drop(deleted);
    // The test exercised what it claims: thousands of keys reached the new filters only
    // through the double write.
    let through_double_write = db.committed_after_snapshots.load(SeqCst);
    assert!(through_double_write >= REBUILDS as usize * INSERTED_DURING);
    let stats = filter.stats();
    assert_eq!(
        (stats.rebuilds, stats.failed_rebuilds, stats.rebuilding),
        (REBUILDS, 0, false)
    );
    drop(committed);
    db
}

// ---------------------------------------------------------------------------------------
// Failed and dropped rebuilds.

/// A source that yields `0..fail_at`, inserting `during` into the filter halfway (as a writer
/// would, while the rebuild runs), then fails.
fn failing_source(
    filter: SharedFilter<u64>,
    fail_at: u64,
    during: Vec<u64>,
) -> impl KeySource<Key = u64> {
    key_source::from_stream(move || {
        let filter = filter.clone();
        let during = during.clone();
        stream::iter(0..=fail_at).map(move |i| {
            if i == fail_at / 2 {
                for key in &during {
                    filter.insert(key);
                }
            }
            if i == fail_at {
                Err(std::io::Error::other("connection reset by peer"))
            } else {
                Ok(i)
            }
        })
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rebuild_whose_source_fails_midway_leaves_the_old_filter_serving() {
    let filter = filter_for(10_000);
    let initial: Vec<u64> = (0..1_000).collect();
    filter.reload_from(&initial).await.unwrap();
    let during: Vec<u64> = (5_000..5_100).collect();

    let error = filter
        .reload_from(&failing_source(filter.clone(), 500, during.clone()))
        .await
        .unwrap_err();
    assert_eq!(error.kind(), ReloadErrorKind::Source);
    assert_eq!(error.keys_read(), Some(500));
    let chain = std::error::Error::source(&error).unwrap().to_string();
    assert_eq!(chain, "connection reset by peer");
    assert!(
        error.to_string().contains("previous filter keeps serving"),
        "{error}"
    );

    let stats = filter.stats();
    assert_eq!(
        (stats.rebuilds, stats.failed_rebuilds, stats.rebuilding),
        (1, 1, false)
    );
    // The handle is usable: inserts work, and the next rebuild succeeds.
    old_filter_kept_every_key_and_the_next_rebuild_runs(&filter, &initial, &during).await;
}

/// After a rebuild that did not finish: the old filter still holds the keys from before and
/// during it, inserts work, and the next rebuild runs (as a rebuild of its own, not `Joined`
/// to the one that ended) and holds every key.
async fn old_filter_kept_every_key_and_the_next_rebuild_runs(
    filter: &SharedFilter<u64>,
    initial: &[u64],
    during: &[u64],
) {
    assert!(initial.iter().chain(during).all(|key| filter.contains(key)));
    filter.insert(&9_999u64);
    let all: Vec<u64> = initial
        .iter()
        .chain(during)
        .copied()
        .chain([9_999])
        .collect();
    assert_eq!(
        filter.reload_from(&all).await.unwrap(),
        Reloaded::Rebuilt { keys: 1_101 }
    );
    assert!(all.iter().all(|key| filter.contains(key)));
}

/// Yields `0..n` (inserting `during` halfway), then signals `reached` and never ends.
fn stalling_source(
    filter: SharedFilter<u64>,
    n: u64,
    during: Vec<u64>,
    reached: Arc<Notify>,
) -> impl KeySource<Key = u64> {
    key_source::from_stream(move || {
        let (filter, during, reached) = (filter.clone(), during.clone(), Arc::clone(&reached));
        let keys = stream::iter(0..n).map(move |i| {
            if i == n / 2 {
                for key in &during {
                    filter.insert(key);
                }
            }
            Ok::<_, std::io::Error>(i)
        });
        let stall = stream::once(async move {
            reached.notify_one();
            std::future::pending::<()>().await;
            Ok(u64::MAX)
        });
        keys.chain(stall)
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rebuild_dropped_midway_leaves_the_old_filter_serving_and_the_next_one_runs() {
    let filter = filter_for(10_000);
    let initial: Vec<u64> = (0..1_000).collect();
    filter.reload_from(&initial).await.unwrap();
    let during: Vec<u64> = (5_000..5_100).collect();
    let reached = Arc::new(Notify::new());
    let source = stalling_source(filter.clone(), 500, during.clone(), Arc::clone(&reached));

    tokio::select! {
        result = filter.reload_from(&source) => panic!("the stalled rebuild finished: {result:?}"),
        () = reached.notified() => {} // dropping the rebuild future here, midway
    }

    let stats = filter.stats();
    assert_eq!(
        (stats.rebuilds, stats.cancelled_rebuilds, stats.rebuilding),
        (1, 1, false)
    );
    // Not `Joined`: the dropped rebuild released the lock and did not count as done.
    old_filter_kept_every_key_and_the_next_rebuild_runs(&filter, &initial, &during).await;
}

// ---------------------------------------------------------------------------------------
// One rebuild at a time.

/// Signals `started` from `keys()`, then waits for `release` before yielding `keys`;
/// counts calls to `keys()`.
struct Gated {
    keys: Vec<u64>,
    started: Arc<Notify>,
    release: Arc<Notify>,
    fail: bool,
    calls: AtomicUsize,
}

impl Gated {
    fn new(keys: Vec<u64>, fail: bool) -> Self {
        Self {
            keys,
            started: Arc::new(Notify::new()),
            release: Arc::new(Notify::new()),
            fail,
            calls: AtomicUsize::new(0),
        }
    }
}

impl KeySource for Gated {
    type Key = u64;
    type Error = std::io::Error;

    fn keys(
        &self,
    ) -> impl Stream<Item = Result<impl KeyFor<u64> + Send + '_, Self::Error>> + Send + '_ {
        self.calls.fetch_add(1, SeqCst);
        self.started.notify_one();
        let gate = stream::once(self.release.notified()).filter_map(|()| async { None });
        let tail = stream::iter(
            self.fail
                .then(|| Err(std::io::Error::other("gated failure"))),
        );
        gate.chain(stream::iter(self.keys.iter().map(Ok)))
            .chain(tail)
    }
}

/// Starts a rebuild from `running` in a task and waits until it is streaming; then polls a
/// second `reload_from(waiter)` once so that it is queued behind the first.
async fn run_while_another_waits<'a>(
    filter: &'a SharedFilter<u64>,
    running: Arc<Gated>,
    waiter: &'a Gated,
) -> (
    tokio::task::JoinHandle<Result<Reloaded, bloom_tower::ReloadError>>,
    impl Future<Output = Result<Reloaded, bloom_tower::ReloadError>> + 'a,
) {
    let started = Arc::clone(&running.started);
    let task = tokio::spawn({
        let filter = filter.clone();
        async move { filter.reload_from(&*running).await }
    });
    started.notified().await;
    let mut second = Box::pin(filter.reload_from(waiter));
    assert!(
        (&mut second).now_or_never().is_none(),
        "the second rebuild did not wait"
    );
    (task, second)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_concurrent_reload_waits_for_the_running_one_and_returns_its_result() {
    let filter = filter_for(10_000);
    let running = Arc::new(Gated::new((0..700).collect(), false));
    let waiter = Gated::new((0..5).collect(), false);

    let (first, second) = run_while_another_waits(&filter, Arc::clone(&running), &waiter).await;
    running.release.notify_one();
    assert_eq!(
        first.await.unwrap().unwrap(),
        Reloaded::Rebuilt { keys: 700 }
    );
    assert_eq!(second.await.unwrap(), Reloaded::Joined { keys: 700 });
    assert_eq!(
        waiter.calls.load(SeqCst),
        0,
        "the waiting call read its source"
    );
    assert_eq!(filter.stats().rebuilds, 1);
    // With nothing running, the next call rebuilds itself.
    assert_eq!(
        filter.reload_from(&vec![1u64]).await.unwrap(),
        Reloaded::Rebuilt { keys: 1 }
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_concurrent_reload_reports_the_failure_of_the_one_it_waited_for() {
    let filter = filter_for(10_000);
    let running = Arc::new(Gated::new((0..10).collect(), true));
    let waiter = Gated::new((0..5).collect(), false);

    let (first, second) = run_while_another_waits(&filter, Arc::clone(&running), &waiter).await;
    running.release.notify_one();
    assert_eq!(
        first.await.unwrap().unwrap_err().kind(),
        ReloadErrorKind::Source
    );
    let error = second.await.unwrap_err();
    assert_eq!(error.kind(), ReloadErrorKind::Concurrent);
    assert!(error.to_string().contains("gated failure"), "{error}");
    assert_eq!(waiter.calls.load(SeqCst), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_waiting_on_one_that_is_dropped_runs_its_own() {
    let filter = filter_for(10_000);
    let running = Arc::new(Gated::new((0..10).collect(), false));
    let waiter = Gated::new((0..5).collect(), false);

    let (first, second) = run_while_another_waits(&filter, Arc::clone(&running), &waiter).await;
    first.abort();
    assert!(first.await.unwrap_err().is_cancelled());
    waiter.release.notify_one();
    assert_eq!(second.await.unwrap(), Reloaded::Rebuilt { keys: 5 });
    assert_eq!(waiter.calls.load(SeqCst), 1);
}

// ---------------------------------------------------------------------------------------
// The background task. The clock is Tokio's paused test clock: it jumps ahead whenever every
// task is idle, so "an hour" passes at once and no test depends on real time.

fn shared_vec(keys: impl IntoIterator<Item = u64>) -> Arc<Mutex<Vec<u64>>> {
    Arc::new(Mutex::new(keys.into_iter().collect()))
}

fn source_of(keys: &Arc<Mutex<Vec<u64>>>) -> impl KeySource<Key = u64> + Send + Sync + 'static {
    let keys = Arc::clone(keys);
    key_source::from_iter(move || keys.lock().unwrap().clone())
}

const HOUR: Duration = Duration::from_secs(3600);

#[tokio::test(start_paused = true)]
async fn rebuild_every_rebuilds_on_schedule_from_the_current_source() {
    let filter = filter_for(10_000);
    let keys = shared_vec(0..100);
    let task = filter.rebuild_every(HOUR, source_of(&keys));

    tokio::time::sleep(HOUR / 2).await;
    assert_eq!(
        filter.stats().rebuilds,
        0,
        "rebuilt before the first interval"
    );
    tokio::time::sleep(HOUR).await;
    assert_eq!(filter.stats().rebuilds, 1);
    assert_eq!(filter.stats().last_rebuild.unwrap().0, 100);

    keys.lock().unwrap().retain(|&key| key >= 50); // 50 records deleted
    tokio::time::sleep(HOUR).await;
    assert_eq!(filter.stats().rebuilds, 2);
    assert_eq!(filter.stats().last_rebuild.unwrap().0, 50);

    task.shutdown().await;
    tokio::time::sleep(3 * HOUR).await;
    assert_eq!(filter.stats().rebuilds, 2, "rebuilt after shutdown");
    assert!(filter.contains(&99u64), "the filter is still usable");
}

#[tokio::test(start_paused = true)]
async fn rebuild_every_stops_when_the_last_handle_is_dropped() {
    let filter = filter_for(10_000);
    let guard_copy = filter.clone();
    let task = filter.rebuild_every(HOUR, vec![1u64, 2, 3]);
    drop(filter);
    tokio::time::sleep(HOUR * 3 / 2).await;
    assert!(!task.is_finished(), "stopped while a handle was alive");
    assert_eq!(guard_copy.stats().rebuilds, 1);

    drop(guard_copy);
    // Paused clock: were the task still sleeping, a day would pass instantly and time out.
    tokio::time::timeout(24 * HOUR, task.join())
        .await
        .expect("the task outlived every handle");
}

#[tokio::test(start_paused = true)]
async fn rebuild_every_logs_a_failure_keeps_serving_and_tries_again() {
    let filter = filter_for(10_000);
    filter.reload_from(&vec![1u64, 2, 3]).await.unwrap();
    let task = filter.rebuild_every(HOUR, failing_source(filter.clone(), 10, vec![]));

    tokio::time::sleep(HOUR + HOUR / 2).await;
    assert_eq!(filter.stats().failed_rebuilds, 1);
    assert!([1u64, 2, 3].iter().all(|key| filter.contains(key)));
    tokio::time::sleep(HOUR).await;
    assert_eq!(filter.stats().failed_rebuilds, 2);
    assert!(!task.is_finished());
    task.shutdown().await;
}

// ---------------------------------------------------------------------------------------
// Saturation.

#[tokio::test]
async fn inserting_past_capacity_warns_once_per_filter() {
    let filter = filter_for(100);
    for key in 0..99u64 {
        filter.insert(&key);
    }
    assert_eq!(filter.stats().saturation_warnings, 0);
    for key in 99..300u64 {
        filter.insert(&key);
    }
    let stats = filter.stats();
    assert_eq!(stats.saturation_warnings, 1, "{stats:?}");
    let report = filter.check_saturation();
    assert!(report.saturated, "{report:?}");
    assert!(
        report.estimated_items > 200.0 && report.current_fpr > 0.02,
        "{report:?}"
    );
    assert_eq!(
        filter.stats().saturation_warnings,
        1,
        "warned twice for one filter"
    );

    // A rebuild sized from the source's count is a new, unsaturated filter.
    filter
        .reload_from(&(0..300u64).collect::<Vec<_>>())
        .await
        .unwrap();
    assert!(!filter.check_saturation().saturated);
    assert_eq!(filter.stats().capacity, Some(375));
}

#[tokio::test]
async fn a_false_positive_rate_over_twice_the_target_is_saturation() {
    // Sized by bits (no capacity): only the false-positive rate can tell.
    let filter = SharedFilter::<u64>::builder()
        .false_positive_rate(0.01)
        .build(
            BloomFilter::builder()
                .bits(1024)
                .hashes(7)
                .seed(3)
                .build()
                .unwrap(),
        );
    for key in 0..200u64 {
        filter.insert(&key);
    }
    assert_eq!(
        filter.stats().saturation_warnings,
        0,
        "no capacity to compare with"
    );
    let report = filter.check_saturation();
    assert!(report.saturated && report.capacity.is_none(), "{report:?}");
    assert_eq!(filter.stats().saturation_warnings, 1);
}

#[tokio::test(start_paused = true)]
async fn auto_grow_rebuilds_at_double_capacity_without_waiting_for_the_schedule() {
    let filter = SharedFilter::<u64>::builder().auto_grow(true).build(
        BloomFilter::builder()
            .expected_items(100)
            .false_positive_rate(0.01)
            .seed(9)
            .build()
            .unwrap(),
    );
    let keys = shared_vec(0..150);
    let task = filter.rebuild_every(HOUR, source_of(&keys));
    let start = tokio::time::Instant::now();
    for key in 0..150u64 {
        filter.insert(&key);
    }
    while filter.stats().rebuilds == 0 {
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    assert!(
        start.elapsed() < HOUR,
        "waited for the schedule instead of growing at once"
    );
    let stats = filter.stats();
    assert!(stats.capacity.unwrap() >= 200, "{stats:?}");
    assert!((0..150u64).all(|key| filter.contains(&key)));
    task.shutdown().await;
}

// ---------------------------------------------------------------------------------------
// Metrics, through a recorder that keeps the counters it hands out.

#[cfg(feature = "metrics")]
mod recorder {
    use std::collections::HashMap;
    use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
    use std::sync::{Arc, Mutex};

    use metrics::{
        Counter, CounterFn, Gauge, Histogram, Key, KeyName, Metadata, SharedString, Unit,
    };

    #[derive(Default)]
    pub struct Counting(Mutex<HashMap<String, Arc<Value>>>);

    #[derive(Default)]
    pub struct Value(AtomicU64);

    impl CounterFn for Value {
        fn increment(&self, value: u64) {
            self.0.fetch_add(value, SeqCst);
        }
        fn absolute(&self, value: u64) {
            self.0.store(value, SeqCst);
        }
    }

    impl Counting {
        /// `name{label=value,…}` as registered.
        pub fn get(&self, key: &str) -> u64 {
            self.0
                .lock()
                .unwrap()
                .get(key)
                .map_or(0, |v| v.0.load(SeqCst))
        }
    }

    fn render(key: &Key) -> String {
        let labels: Vec<String> = key
            .labels()
            .map(|l| format!("{}={}", l.key(), l.value()))
            .collect();
        format!("{}{{{}}}", key.name(), labels.join(","))
    }

    impl metrics::Recorder for Counting {
        fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
        fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
        fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
        fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
            let value = Arc::clone(self.0.lock().unwrap().entry(render(key)).or_default());
            Counter::from_arc(value)
        }
        fn register_gauge(&self, _: &Key, _: &Metadata<'_>) -> Gauge {
            Gauge::noop()
        }
        fn register_histogram(&self, _: &Key, _: &Metadata<'_>) -> Histogram {
            Histogram::noop()
        }
    }
}

#[cfg(feature = "metrics")]
#[test]
fn saturation_and_rebuild_outcomes_are_emitted_as_metrics() {
    let recorder = recorder::Counting::default();
    let filter = SharedFilter::<u64>::builder().name("users").build(
        BloomFilter::builder()
            .expected_items(10)
            .false_positive_rate(0.01)
            .seed(1)
            .build()
            .unwrap(),
    );
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    metrics::with_local_recorder(&recorder, || {
        for key in 0..50u64 {
            filter.insert(&key);
        }
        runtime.block_on(async {
            filter.reload_from(&vec![1u64]).await.unwrap();
            let failing = key_source::from_stream(|| {
                stream::iter([Err::<u64, _>(std::io::Error::other("x"))])
            });
            filter.reload_from(&failing).await.unwrap_err();
        });
    });
    assert_eq!(
        recorder.get("bloom_filter_saturated_total{filter=users}"),
        1
    );
    assert_eq!(
        recorder.get("bloom_filter_rebuilds_total{filter=users,outcome=ok}"),
        1
    );
    assert_eq!(
        recorder.get("bloom_filter_rebuilds_total{filter=users,outcome=error}"),
        1
    );
}

#[cfg(feature = "metrics")]
#[test]
fn guard_counters_are_emitted_as_metrics_labelled_by_guard_name() {
    use bloom_tower::{BloomGuard, key};
    use tower::{Service, ServiceExt};

    let recorder = recorder::Counting::default();
    let filter = filter_for(100);
    filter.insert(&1u64);
    let absent = (2u64..).find(|id| !filter.contains(id)).unwrap();
    let guard = BloomGuard::new(filter, key::identity())
        .name("ids")
        .on_reject(|_key| 0u8);
    let mut service = tower::Layer::layer(
        &guard,
        tower::service_fn(|_: u64| async { Ok::<_, std::convert::Infallible>(1u8) }),
    );
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    metrics::with_local_recorder(&recorder, || {
        runtime.block_on(async {
            for id in [1, absent, absent] {
                service.ready().await.unwrap().call(id).await.unwrap();
            }
        });
    });
    assert_eq!(recorder.get("bloom_guard_checked_total{guard=ids}"), 3);
    assert_eq!(recorder.get("bloom_guard_passed_total{guard=ids}"), 1);
    assert_eq!(recorder.get("bloom_guard_rejected_total{guard=ids}"), 2);
    let stats = guard.stats();
    assert_eq!((stats.checked, stats.passed, stats.rejected), (3, 1, 2));
}

// ---------------------------------------------------------------------------------------
// Auto-grow from a filter whose estimate is infinite.

/// A filter sized for 100 keys at 1% with every bit set (its estimate is +∞).
fn all_ones(seed: u128) -> BloomFilter {
    let filter = BloomFilter::builder()
        .expected_items(100)
        .false_positive_rate(0.01)
        .seed(seed)
        .build()
        .unwrap();
    for key in 0..100_000u64 {
        filter.insert(&key);
    }
    assert_eq!(filter.count_ones(), filter.num_bits(), "not all ones yet");
    assert_eq!(filter.estimated_items(), f64::INFINITY);
    filter
}

#[tokio::test]
async fn auto_grow_from_an_all_ones_filter_doubles_the_capacity_and_rebuilds() {
    let filter = SharedFilter::<u64>::builder()
        .auto_grow(true)
        .build(all_ones(21));
    let report = filter.check_saturation();
    assert!(report.saturated, "{report:?}");
    assert_eq!(report.estimated_items, f64::INFINITY);
    assert_eq!(filter.stats().saturation_warnings, 1);

    // No count hint: the rebuild is sized by auto-grow alone, from the capacity, not from +∞.
    let keys = shared_vec(0..50);
    let outcome = filter.reload_from(&source_of(&keys)).await;
    assert!(
        matches!(outcome, Ok(Reloaded::Rebuilt { keys: 50 })),
        "{outcome:?}"
    );
    let stats = filter.stats();
    assert_eq!(stats.capacity, Some(200), "{stats:?}");
    assert_eq!(stats.failed_rebuilds, 0);
    assert!((0..50u64).all(|key| filter.contains(&key)));
    assert!(!filter.check_saturation().saturated);

    // The next rebuild, with a count hint, is sane too: the larger of 200 and 60 + 25%.
    filter
        .reload_from(&(0..60u64).collect::<Vec<_>>())
        .await
        .unwrap();
    assert_eq!(filter.stats().capacity, Some(200));
}

#[tokio::test(start_paused = true)]
async fn auto_grow_from_an_all_ones_filter_sized_by_bits_rebuilds_at_once() {
    let bits = all_ones(22).num_bits();
    let by_bits = BloomFilter::builder()
        .bits(bits)
        .hashes(7)
        .seed(22)
        .build()
        .unwrap();
    for key in 0..100_000u64 {
        by_bits.insert(&key);
    }
    assert_eq!(by_bits.estimated_items(), f64::INFINITY);
    let filter = SharedFilter::<u64>::builder()
        .auto_grow(true)
        .false_positive_rate(0.01)
        .build(by_bits);
    let keys = shared_vec(0..80);
    let task = filter.rebuild_every(HOUR, source_of(&keys));
    assert!(filter.check_saturation().saturated);
    while filter.stats().rebuilds + filter.stats().failed_rebuilds == 0 {
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let stats = filter.stats();
    assert_eq!(stats.failed_rebuilds, 0, "{stats:?}");
    // Twice what its bits hold at 1% (about 100 keys each way), not u64::MAX.
    let capacity = stats.capacity.unwrap();
    assert!((150..=250).contains(&capacity), "{stats:?}");
    assert!((0..80u64).all(|key| filter.contains(&key)));
    task.shutdown().await;
}
