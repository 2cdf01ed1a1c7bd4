//! Snapshots: a saved filter loads back identical (and verifying: it cannot know what was
//! created since it was saved); a damaged file is reported as corrupt; `save_every` rewrites
//! the file only when the filter changed, and then within an interval.

#[path = "support/logs.rs"]
mod logs;

use std::fs::File;
use std::io::{self, BufReader};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bloom_core::Snapshot;
use bloom_tower::key::{AnyKey, KeyFor};
use bloom_tower::key_source::Watermark;
use bloom_tower::shared_filter::{Follower, RemoveOutcome, Started};
use bloom_tower::{BloomFilter, CountingBloomFilter, KeySource, SharedFilter};
use futures_util::{Stream, stream};

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

/// How long a test waits for something `save_every` does every few milliseconds (the machine
/// may be busy).
const PATIENCE: Duration = Duration::from_secs(60);

/// `save_every`'s interval in these tests.
const TICK: Duration = Duration::from_millis(20);

/// The crate's `debug` events, captured for the whole test binary.
fn debug_logs() -> &'static Mutex<String> {
    logs::logs_at(tracing::Level::DEBUG)
}

/// The count of skipped snapshots `save_every` last logged for the filter `name` (0 before
/// any); tests run in parallel, each with its own filter name.
fn skips_of(name: &str) -> u64 {
    let needle = format!("filter={name} skipped=");
    debug_logs()
        .lock()
        .unwrap()
        .lines()
        .filter(|line| line.contains("not rewritten"))
        .filter_map(|line| line.split(&needle).nth(1))
        .filter_map(|rest| rest.split_whitespace().next()?.parse().ok())
        .max()
        .unwrap_or(0)
}

/// Waits until `save_every` has skipped at least `skips` snapshots of the filter `name`.
async fn wait_for_skips(name: &str, skips: u64) {
    tokio::time::timeout(PATIENCE, async {
        while skips_of(name) < skips {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .unwrap_or_else(|_| {
        panic!(
            "{name}: {} skipped snapshots, wanted {skips}",
            skips_of(name)
        )
    });
}

/// The snapshot at `path`, once it satisfies `holds` (the file is replaced atomically).
async fn wait_for_snapshot(path: &Path, what: &str, holds: impl Fn(&Snapshot) -> bool) -> Snapshot {
    tokio::time::timeout(PATIENCE, async {
        loop {
            if let Ok(file) = File::open(path) {
                let snapshot = Snapshot::read_from(&mut BufReader::new(file)).unwrap();
                if holds(&snapshot) {
                    return snapshot;
                }
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("no snapshot {what} was written"))
}

/// What identifies a file's content on disk without reading it: a rewrite changes it.
fn identity(path: &Path) -> (u64, u64, std::time::SystemTime) {
    use std::os::unix::fs::MetadataExt;
    let metadata = std::fs::metadata(path).unwrap();
    (metadata.ino(), metadata.len(), metadata.modified().unwrap())
}

fn plain(seed: u128) -> BloomFilter {
    BloomFilter::builder()
        .expected_items(1_000)
        .false_positive_rate(0.01)
        .seed(seed)
        .build()
        .unwrap()
}

/// A change log: `Some(id)` a created record, `None` a deleted one (a position with no key).
/// Its watermark is the number of entries; `keys_since(n)` the ids created after the first
/// `n`.
#[derive(Default)]
struct Log(Mutex<Vec<Option<u64>>>);

impl Log {
    fn with(ids: impl IntoIterator<Item = u64>) -> Arc<Self> {
        Arc::new(Self(Mutex::new(ids.into_iter().map(Some).collect())))
    }

    fn push(&self, entry: Option<u64>) {
        self.0.lock().unwrap().push(entry);
    }

    fn len(&self) -> u64 {
        self.0.lock().unwrap().len() as u64
    }

    fn ids_after(&self, first: usize) -> Vec<u64> {
        let entries = self.0.lock().unwrap();
        entries[first.min(entries.len())..]
            .iter()
            .flatten()
            .copied()
            .collect()
    }
}

impl KeySource for Log {
    type Key = u64;
    type Error = io::Error;

    fn keys(
        &self,
    ) -> impl Stream<Item = Result<impl KeyFor<u64> + Send + '_, io::Error>> + Send + '_ {
        stream::iter(self.ids_after(0).into_iter().map(Ok))
    }

    async fn watermark(&self) -> Result<Option<Watermark>, io::Error> {
        Ok(Some(Watermark::from(self.len())))
    }

    fn keys_since<'a>(
        &'a self,
        since: &'a Watermark,
    ) -> impl Stream<Item = Result<impl KeyFor<u64> + Send + 'a, io::Error>> + Send + 'a {
        let since = since.to_u64().expect("a watermark this log wrote") as usize;
        stream::iter(self.ids_after(since).into_iter().map(Ok))
    }
}

/// Starts the filter `name` from the snapshot at `path` (or from `log` without one).
async fn start(name: &str, path: &Path, log: &Arc<Log>) -> (SharedFilter<u64>, Started) {
    SharedFilter::builder()
        .name(name.to_owned())
        .snapshot(path)
        .require_hash_key(7)
        .start(plain(7), log)
        .await
        .unwrap()
}

/// A restart of the filter `name` from a copy of the snapshot at `path`, caught up from `log`.
async fn warm_start(name: &str, path: &Path, log: &Arc<Log>) -> (SharedFilter<u64>, Started) {
    let elsewhere = tempfile::tempdir().unwrap();
    let copy: PathBuf = elsewhere.path().join("copy.bloom");
    std::fs::copy(path, &copy).unwrap();
    start(name, &copy, log).await
}

/// Rule (`shared_filter/snapshot.rs` module docs): a periodic snapshot of a filter that did
/// not change since the last one written is skipped, and the skip is counted; the first tick
/// still writes over a file older than the filter.
#[tokio::test]
async fn an_unchanged_filter_is_not_rewritten_by_save_every() {
    let name = "idle";
    skips_of(name);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("idle.bloom");
    let filter = SharedFilter::<u64>::builder()
        .name(name)
        .snapshot(&path)
        .build(plain(7));
    filter.save_snapshot().await.unwrap(); // older than the filter once it holds keys
    for key in 0..100u64 {
        filter.insert(&key);
    }

    let task = filter.save_every(TICK);
    wait_for_skips(name, 1).await;
    let written = wait_for_snapshot(&path, "with the keys", |s| s.filter.contains(&99u64)).await;
    assert!((0..100u64).all(|key| written.filter.contains(&key)));
    let (before, bytes) = (identity(&path), std::fs::read(&path).unwrap());

    let skipped = skips_of(name);
    wait_for_skips(name, skipped + 5).await;
    assert_eq!(
        identity(&path),
        before,
        "an unchanged filter's snapshot was rewritten"
    );
    assert_eq!(std::fs::read(&path).unwrap(), bytes);
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|entry| entry.unwrap().file_name())
        .collect();
    assert_eq!(names, ["idle.bloom"], "no temporary file left behind");
    task.shutdown().await;
}

/// Rule (`shared_filter/snapshot.rs` module docs): whatever changes what a snapshot holds (an
/// insert, bits merged in through `current()` as bloom-redis does, a follow step reading a
/// key, a follow step moving only the watermark) is written by the next ticks, and a restart
/// from that file has it; then the snapshots are skipped again.
#[tokio::test]
async fn every_change_is_written_by_the_next_periodic_snapshot() {
    let name = "changing";
    skips_of(name);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("changing.bloom");
    let log = Log::with(1..=100);
    let (filter, started) = start(name, &path, &log).await;
    assert!(matches!(started, Started::Rebuilt { .. }), "{started:?}");
    let task = filter.save_every(TICK);
    wait_for_skips(name, 1).await;

    // A record whose transaction is still open: in no source, only the filter and its snapshot.
    filter.insert(&5_000u64);
    wait_for_snapshot(&path, "after the insert", |s| s.filter.contains(&5_000u64)).await;
    let (restarted, started) = warm_start(name, &path, &log).await;
    assert_eq!(started, Started::CaughtUp { keys: 0 });
    assert!(restarted.contains(&5_000u64));

    // Bits merged in from another instance's filter, the way bloom-redis merges them.
    let elsewhere = plain(7);
    elsewhere.insert(&6_000u64);
    let words: Vec<u64> = elsewhere.words().collect();
    assert!(filter.current().as_plain().unwrap().union_words(0, &words));
    wait_for_snapshot(&path, "after the merge", |s| s.filter.contains(&6_000u64)).await;
    let (restarted, started) = warm_start(name, &path, &log).await;
    assert_eq!(started, Started::CaughtUp { keys: 0 });
    assert!(restarted.contains(&6_000u64) && restarted.contains(&5_000u64));

    // Another writer's record, read by a follow step: a key and a new watermark.
    log.push(Some(7_000));
    let mut follower = Follower::from_position(&filter, Arc::clone(&log), Watermark::from(100u64));
    assert_eq!(follower.step().await.unwrap(), 1);
    let label_is = |position: u64| {
        move |s: &Snapshot| {
            s.label
                .as_ref()
                .and_then(|label| label.watermark.as_deref())
                == Some(Watermark::from(position).as_bytes())
        }
    };
    let written = wait_for_snapshot(&path, "after the follow step", label_is(101)).await;
    assert!(written.filter.contains(&7_000u64));
    let (restarted, started) = warm_start(name, &path, &log).await;
    assert_eq!(
        started,
        Started::CaughtUp { keys: 0 },
        "read from the snapshot, not the log"
    );
    assert!(restarted.contains(&7_000u64));

    // A delete: the follow step reads no key and only moves the watermark.
    log.push(None);
    assert_eq!(follower.step().await.unwrap(), 0);
    wait_for_snapshot(&path, "with the moved watermark", label_is(102)).await;
    let (restarted, started) = warm_start(name, &path, &log).await;
    assert_eq!(started, Started::CaughtUp { keys: 0 });
    assert_eq!(restarted.current_watermark(), Some(Watermark::from(102u64)));
    assert!(
        [5_000u64, 6_000, 7_000]
            .iter()
            .all(|key| restarted.contains(key))
    );

    // Quiet again: the merge's extra write is done, nothing changed since.
    let skipped = skips_of(name);
    wait_for_skips(name, skipped + 3).await;
    task.shutdown().await;
}

/// Rule (`shared_filter/snapshot.rs` module docs): a removal changes what the snapshot holds,
/// so the next tick writes it (a counting filter).
#[tokio::test]
async fn a_removal_is_written_by_the_next_periodic_snapshot() {
    let name = "removing";
    skips_of(name);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("removing.bloom");
    let counting = CountingBloomFilter::new(1_000, 0.01).unwrap();
    let filter = SharedFilter::<u64>::builder()
        .name(name)
        .snapshot(&path)
        .build(counting);
    for key in 0..10u64 {
        filter.insert(&key);
    }
    let task = filter.save_every(TICK);
    wait_for_skips(name, 1).await;
    let key = (0..10u64)
        .find(|&key| {
            filter.remove(&key, filter.generation()) == Ok(RemoveOutcome::Removed)
                && !filter.contains(&key)
        })
        .expect("a key that is gone once removed");
    wait_for_snapshot(&path, "after the removal", |s| !s.filter.contains(&key)).await;
    task.shutdown().await;
}
