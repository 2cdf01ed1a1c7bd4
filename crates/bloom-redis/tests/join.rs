//! Joining while Redis is busy: instances that start together pull whole filters through one
//! Redis, and a reply can wait behind theirs for longer than `response_timeout`. `connect`
//! tries its first pass again (`RedisSyncBuilder::join_timeout`) and joins with every bit,
//! where a single try would fail the start of the instance. The busy Redis is a real
//! `redis-server` whose writes are paused (`CLIENT PAUSE … WRITE`): the pass's first write
//! waits past the response timeout, as a reply queued behind others' bulk pulls does.

mod common;

use std::time::{Duration, Instant};

use bloom_core::{BloomFilter, Layout};
use bloom_redis::{Error, RedisSync};
use bloom_tower::SharedFilter;

const SEED: u128 = 0x701e_701e_701e_701e_701e_701e_701e_701e;

fn filter() -> SharedFilter<u64> {
    SharedFilter::new(
        BloomFilter::builder()
            .bits(1 << 22)
            .hashes(7)
            .layout(Layout::Blocked)
            .seed(SEED)
            .build()
            .unwrap(),
    )
}

/// Pauses every client's writes for `ms` (scripts included), from a connection of its own.
async fn pause_writes(url: &str, ms: u64) {
    let client = redis::Client::open(url).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(ms)
        .arg("WRITE")
        .query_async::<()>(&mut conn)
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_join_that_times_out_while_redis_is_busy_tries_again() {
    let Some(server) = common::start() else {
        return;
    };
    let url = server.url();
    let a = RedisSync::builder(&url)
        .prefix("join-busy")
        .connect(&filter())
        .await
        .unwrap();
    for key in 0..20_000u64 {
        a.filter().insert(&key);
    }
    a.propagated().await.unwrap();

    // Redis holds every write for 1.5 s; each of B's replies may take 300 ms.
    pause_writes(&url, 1_500).await;
    let started = Instant::now();
    let b = RedisSync::builder(&url)
        .prefix("join-busy")
        .response_timeout(Duration::from_millis(300))
        .connect(&filter())
        .await
        .expect("a join that timed out while Redis was busy tries again");
    assert!(
        started.elapsed() >= Duration::from_millis(1_000),
        "the join ran while writes were paused: the pause did not hold it ({:?})",
        started.elapsed()
    );
    assert!(
        (0..20_000u64).all(|key| b.filter().contains(&key)),
        "the joiner holds every key the fleet had"
    );

    // Past `join_timeout`, the timeout is returned: a Redis that stays busy fails the start.
    pause_writes(&url, 3_000).await;
    let refused = match RedisSync::builder(&url)
        .prefix("join-busy")
        .response_timeout(Duration::from_millis(300))
        .join_timeout(Duration::from_millis(800))
        .connect(&filter())
        .await
    {
        Ok(_) => panic!("a Redis busy past join_timeout fails the join"),
        Err(error) => error,
    };
    assert!(
        matches!(&refused, Error::Redis(e) if e.is_timeout()),
        "{refused}"
    );
    b.leave().await;
    a.leave().await;
}
