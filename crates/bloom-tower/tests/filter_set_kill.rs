//! `DirectoryStore` replaces a filter atomically: a process `kill -9`ed in the middle of
//! storing leaves the old filter or the new one, never a part. The test runs itself as a
//! child process that stores 8 MiB filters in a loop, kills it at a random moment (a store is
//! under way most of the time), and reads what is left; five times. `SqliteStore` does the
//! same for a whole batch: a batch of two rows lands whole or not at all.
#![cfg(feature = "filter-set")]

use std::process::{Command, Stdio};
use std::time::Duration;

use bloom_core::{AnyFilter, BloomFilter};
use bloom_tower::filter_set::{DirectoryStore, FilterStore};

const CHILD: &str = "BLOOM_FILTER_SET_STORING_CHILD";

/// Two different 8 MiB filters' bytes: the first holds 0, the second 1.
fn two_filters() -> Vec<Vec<u8>> {
    (0..2u64)
        .map(|i| {
            let f = BloomFilter::new(7_000_000, 0.01).unwrap();
            f.insert(&i);
            f.to_bytes()
        })
        .collect()
}

/// In the child: stores two different 8 MiB filters under one name, in turn, forever.
fn store_forever(dir: &str) -> ! {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let store = DirectoryStore::new(dir).unwrap().sync(false);
    let filters = two_filters();
    runtime.block_on(async {
        for i in 0.. {
            store.store("user-1", filters[i % 2].clone()).await.unwrap();
            if i == 0 {
                println!("stored");
            }
        }
    });
    unreachable!()
}

#[test]
fn a_store_killed_midway_leaves_the_old_or_the_new_filter() {
    if let Ok(dir) = std::env::var(CHILD) {
        store_forever(&dir);
    }
    let dir = tempfile::tempdir().unwrap();
    let mut rng = fastrand::Rng::with_seed(11);
    for round in 0..5 {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "a_store_killed_midway_leaves_the_old_or_the_new_filter",
                "--nocapture",
            ])
            .env(CHILD, dir.path())
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(rng.u64(400..900)));
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        let store = DirectoryStore::new(dir.path()).unwrap();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let bytes = runtime
            .block_on(store.load("user-1"))
            .unwrap()
            .unwrap_or_else(|| panic!("round {round}: nothing stored in time"));
        let filter = AnyFilter::from_bytes(&bytes)
            .unwrap_or_else(|e| panic!("round {round}: a torn filter after kill -9: {e}"));
        assert!(filter.contains(&0u64) || filter.contains(&1u64));
    }
}

#[cfg(feature = "sqlite-store")]
const SQLITE_CHILD: &str = "BLOOM_FILTER_SET_SQLITE_CHILD";

/// In the child: stores two different 8 MiB filters under two names in one batch, the two
/// names the same filter in each batch and the filter changing from batch to batch, forever;
/// every other batch is large enough to take several statements.
#[cfg(feature = "sqlite-store")]
fn store_batches_forever(file: &str) -> ! {
    use bloom_tower::filter_set::SqliteStore;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let filters = two_filters();
    runtime.block_on(async {
        let store = SqliteStore::builder(file).sync(false).open().await.unwrap();
        for i in 0.. {
            // Even batches: the two rows alone (one statement). Odd ones: 300 small rows
            // between them, so that they are in different statements of one transaction.
            let filter = &filters[i % 2];
            let mut batch = vec![("user-a".to_owned(), filter.clone())];
            if i % 2 == 1 {
                batch.extend((0..300).map(|j| (format!("pad-{j}"), vec![1])));
            }
            batch.push(("user-b".to_owned(), filter.clone()));
            store.store_many(batch).await.unwrap();
            if i == 0 {
                println!("stored");
            }
        }
    });
    unreachable!()
}

#[cfg(feature = "sqlite-store")]
#[test]
fn a_sqlite_batch_killed_midway_lands_whole_or_not_at_all() {
    use bloom_tower::filter_set::SqliteStore;
    if let Ok(file) = std::env::var(SQLITE_CHILD) {
        store_batches_forever(&file);
    }
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("filters.db");
    let mut rng = fastrand::Rng::with_seed(12);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    for round in 0..8 {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "a_sqlite_batch_killed_midway_lands_whole_or_not_at_all",
                "--nocapture",
            ])
            .env(SQLITE_CHILD, &file)
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        // Once the first batch landed (the harness prints its own lines first), a batch is
        // under way most of the time.
        let out = std::io::BufReader::new(child.stdout.take().unwrap());
        let stored = std::io::BufRead::lines(out).any(|line| line.unwrap().trim() == "stored");
        assert!(
            stored,
            "round {round}: the child exited before its first batch"
        );
        std::thread::sleep(Duration::from_millis(rng.u64(0..400)));
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        let (a, b) = runtime.block_on(async {
            let store = SqliteStore::open(&file).await.unwrap();
            let a = store.load("user-a").await.unwrap();
            let b = store.load("user-b").await.unwrap();
            store.close().await;
            (a, b)
        });
        let a = a.unwrap_or_else(|| panic!("round {round}: the first batch is not stored"));
        let filter = AnyFilter::from_bytes(&a)
            .unwrap_or_else(|e| panic!("round {round}: a torn filter after kill -9: {e}"));
        assert!(filter.contains(&0u64) || filter.contains(&1u64));
        assert!(
            b.as_deref() == Some(&a[..]),
            "round {round}: the batch landed in part: its two rows differ after kill -9"
        );
    }
}
