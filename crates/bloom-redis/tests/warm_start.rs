//! Against a real `redis-server` (see `common`): `RedisSyncBuilder::warm_start` merges the
//! filter's snapshot before joining, so an instance restarted from a snapshot holds its keys
//! at once and pushes the ones the fleet lacks to Redis, where later instances find them; a
//! snapshot it cannot use is passed over and the instance joins without it.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use bloom_core::{BloomFilter, Layout};
use bloom_redis::{RedisSync, RedisSyncBuilder};
use bloom_tower::SharedFilter;

const BITS: u64 = 1 << 20;
const SEED: u128 = 0x3a17_5eed_3a17_5eed_3a17_5eed_3a17_5eed;
/// Only a hang detector: no test asserts on timing.
const HANG: Duration = Duration::from_secs(20);

/// The fleet's empty filter (every instance starts from it), with the snapshot at `path`.
fn users(path: &Path, seed: u128) -> SharedFilter<u64> {
    SharedFilter::builder().name("users").snapshot(path).build(
        BloomFilter::builder()
            .bits(BITS)
            .hashes(7)
            .layout(Layout::Blocked)
            .seed(seed)
            .build()
            .unwrap(),
    )
}

/// Ids the fleet never saw: in the snapshot only.
fn snapshot_ids() -> Vec<u64> {
    (1_000_000..1_000_300).collect()
}

/// Ids inserted through the fleet.
fn fleet_ids() -> Vec<u64> {
    (1..=300).collect()
}

/// Saves, at `path`, the snapshot of an earlier run of the filter made with `seed`,
/// holding [`snapshot_ids`].
async fn save_snapshot(path: &Path, seed: u128) {
    let earlier = users(path, seed);
    for id in snapshot_ids() {
        earlier.insert(&id);
    }
    earlier.save_snapshot().await.unwrap();
}

/// Whether the instance's own filter holds every id (the raw filter, not
/// `SharedFilter::contains`, which also lets keys through while an instance is stale).
fn holds(sync: &RedisSync<u64>, ids: &[u64]) -> bool {
    let current = sync.filter().current();
    ids.iter().all(|id| current.contains(id))
}

async fn join(
    url: &str,
    filter: &SharedFilter<u64>,
    configure: impl FnOnce(RedisSyncBuilder) -> RedisSyncBuilder,
) -> RedisSync<u64> {
    configure(
        RedisSync::builder(url)
            .prefix("warm:users")
            .reconcile_every(Duration::from_millis(200)),
    )
    .connect(filter)
    .await
    .expect("join")
}

/// The fleet already serves [`fleet_ids`]; an instance restarts with a snapshot holding
/// [`snapshot_ids`] (created while Redis was away, say).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_warm_started_instance_holds_its_snapshot_and_hands_it_to_the_fleet() {
    let Some(server) = common::start() else {
        return;
    };
    let url = server.url();
    let dir = tempfile::tempdir().unwrap();

    let first = join(&url, &users(&dir.path().join("first.bloom"), SEED), |b| b).await;
    for id in fleet_ids() {
        first.filter().insert(&id);
    }
    first.propagated().await.unwrap();

    let path = dir.path().join("restarted.bloom");
    save_snapshot(&path, SEED).await;
    let restarted = join(&url, &users(&path, SEED), |b| b.warm_start(true)).await;
    assert!(holds(&restarted, &snapshot_ids()), "the snapshot's ids");
    assert!(holds(&restarted, &fleet_ids()), "the fleet's ids");
    let joined = restarted.stats().joined.expect("joined");
    assert!(
        joined.bytes_pushed > 0,
        "pushed the snapshot's bits: {joined:?}"
    );

    let later = join(&url, &users(&dir.path().join("later.bloom"), SEED), |b| b).await;
    assert!(
        holds(&later, &snapshot_ids()),
        "an instance that joins afterwards, without a snapshot, holds the snapshot's ids"
    );
    assert!(holds(&later, &fleet_ids()));

    let started = Instant::now();
    while !holds(&first, &snapshot_ids()) {
        assert!(
            started.elapsed() < HANG,
            "hang: the running instance never pulled them"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The same restart without `warm_start`: the snapshot is left alone, so its ids are not
/// in the filter (this is what the option changes).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_warm_start_the_snapshot_is_not_merged() {
    let Some(server) = common::start() else {
        return;
    };
    let url = server.url();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("restarted.bloom");
    save_snapshot(&path, SEED).await;
    let restarted = join(&url, &users(&path, SEED), |b| b).await;
    let held = snapshot_ids()
        .iter()
        .filter(|id| restarted.filter().current().contains(*id))
        .count();
    assert_eq!(held, 0, "an empty fleet's filter holds none of them");
}

/// A snapshot made with another hash key, or a damaged one, is passed over (logged at
/// WARN): the instance joins without it and holds what the fleet holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_that_cannot_be_merged_does_not_stop_the_join() {
    let Some(server) = common::start() else {
        return;
    };
    let url = server.url();
    let dir = tempfile::tempdir().unwrap();
    let first = join(&url, &users(&dir.path().join("first.bloom"), SEED), |b| b).await;
    for id in fleet_ids() {
        first.filter().insert(&id);
    }
    first.propagated().await.unwrap();

    let other_key = dir.path().join("other-key.bloom");
    save_snapshot(&other_key, SEED ^ 1).await;
    let corrupt = dir.path().join("corrupt.bloom");
    save_snapshot(&corrupt, SEED).await;
    let bytes = std::fs::read(&corrupt).unwrap();
    std::fs::write(&corrupt, &bytes[..bytes.len() / 2]).unwrap();
    let missing = dir.path().join("missing.bloom");

    for path in [other_key, corrupt, missing] {
        let filter = users(&path, SEED);
        let instance = join(&url, &filter, |b| b.warm_start(true)).await;
        assert!(holds(&instance, &fleet_ids()), "{}", path.display());
        let held = snapshot_ids()
            .iter()
            .filter(|id| instance.filter().current().contains(*id))
            .count();
        assert_eq!(held, 0, "nothing of {} was merged", path.display());
    }

    let no_path = SharedFilter::<u64>::new(
        BloomFilter::builder()
            .bits(BITS)
            .hashes(7)
            .layout(Layout::Blocked)
            .seed(SEED)
            .build()
            .unwrap(),
    );
    let instance = join(&url, &no_path, |b| b.warm_start(true)).await;
    assert!(holds(&instance, &fleet_ids()), "no snapshot path");
}
