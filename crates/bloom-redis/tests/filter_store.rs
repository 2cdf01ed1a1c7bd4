//! `RedisFilterStore` against a real `redis-server` (started by `common::start`, skipped
//! loudly when it is not installed, a failure under `CI=true`): the bytes round-trip under
//! the prefix, a `FilterSet` evicts through it and loses nothing, and a stalled or dead Redis
//! gives errors within the timeout instead of hangs or panics.

mod common;

use std::time::{Duration, Instant};

use bloom_core::{AnyFilter, BloomFilter};
use bloom_redis::RedisFilterStore;
use bloom_tower::filter_set::{FilterSet, FilterStore, StoreError, counted_bytes};
use redis::AsyncCommands;
use redis::aio::MultiplexedConnection;

type TestResult = Result<(), Box<dyn std::error::Error>>;

/// Only a hang detector: far above anything a passing run waits.
const HANG: Duration = Duration::from_secs(20);

async fn raw(url: &str) -> redis::RedisResult<MultiplexedConnection> {
    redis::Client::open(url)?
        .get_multiplexed_async_connection()
        .await
}

#[tokio::test]
async fn stores_and_loads_bytes_under_the_prefix() -> TestResult {
    let Some(server) = common::start() else {
        return Ok(());
    };
    let store = RedisFilterStore::connect(&server.url())
        .await?
        .prefix("test:filters:");
    let bytes: Vec<u8> = (0..=255u8).chain([0, 0, 255]).collect(); // not UTF-8, NULs

    store.store("user/42", bytes.clone()).await?;
    assert_eq!(store.load("user/42").await?, Some(bytes.clone()));
    assert_eq!(
        store.load("user/43").await?,
        None,
        "an unknown name has no bytes"
    );

    // A second store replaces the bytes.
    store.store("user/42", b"second".to_vec()).await?;
    assert_eq!(store.load("user/42").await?, Some(b"second".to_vec()));

    // In Redis, under prefix + name, and nowhere else.
    let mut conn = raw(&server.url()).await?;
    let stored: Option<Vec<u8>> = conn.get("test:filters:user/42").await?;
    assert_eq!(stored, Some(b"second".to_vec()));
    assert!(!conn.exists::<_, bool>("user/42").await?);
    let keys: Vec<String> = conn.keys("*").await?;
    assert_eq!(keys, ["test:filters:user/42"]);
    assert_eq!(store.key_of("user/42"), "test:filters:user/42");

    // The default prefix, and stores with different prefixes do not see each other's names.
    let default = RedisFilterStore::connect(&server.url()).await?;
    assert_eq!(default.load("user/42").await?, None);
    default.store("user/42", b"other".to_vec()).await?;
    let stored: Option<Vec<u8>> = conn.get("bloom:set:user/42").await?;
    assert_eq!(stored, Some(b"other".to_vec()));
    assert_eq!(store.load("user/42").await?, Some(b"second".to_vec()));
    Ok(())
}

#[tokio::test]
async fn a_filter_set_evicts_through_redis_and_loses_nothing() -> TestResult {
    let Some(server) = common::start() else {
        return Ok(());
    };
    // What one user's filter counts against the budget (names are at most 2 bytes): the
    // budget holds two of them, not three.
    let per_filter = counted_bytes(&AnyFilter::from(BloomFilter::new(1000, 0.01)?)) + 2;
    let budget = 2 * per_filter + per_filter / 2;
    let items = |user: u64| (0..10).map(move |i| format!("user-{user}-item-{i}"));

    let store = RedisFilterStore::connect(&server.url()).await?;
    let set = FilterSet::<u64, _>::builder(store)
        .plain(1000, 0.01)?
        .budget_bytes(budget)
        .build();
    for user in 0..20 {
        for item in items(user) {
            set.insert(&user, &item).await?;
        }
    }
    for user in 0..20 {
        for item in items(user) {
            assert!(set.contains(&user, &item).await?, "user {user} lost {item}");
        }
        assert!(!set.contains(&user, "never-shown").await?);
    }
    let stats = set.stats();
    assert!(stats.filters_in_memory <= 2, "{stats:?}");
    assert!(stats.evictions > 0, "{stats:?}");
    assert!(
        stats.loads > 0,
        "nothing was read back from Redis: {stats:?}"
    );
    assert_eq!((stats.load_errors, stats.store_errors), (0, 0), "{stats:?}");

    // The evicted filters are in Redis, one key per user.
    let mut conn = raw(&server.url()).await?;
    let keys: Vec<String> = conn.keys("bloom:set:*").await?;
    assert!(keys.len() >= 18, "{keys:?}");

    // After a flush every user is in Redis: a new set (another process) reads them all back.
    set.flush().await?;
    let keys: Vec<String> = conn.keys("bloom:set:*").await?;
    assert_eq!(keys.len(), 20, "{keys:?}");
    let again = FilterSet::<u64, _>::builder(RedisFilterStore::connect(&server.url()).await?)
        .plain(1000, 0.01)?
        .build();
    for user in 0..20 {
        for item in items(user) {
            assert!(
                again.contains(&user, &item).await?,
                "user {user} lost {item}"
            );
        }
    }
    assert_eq!(again.stats().loads, 20);
    Ok(())
}

#[tokio::test]
async fn a_stalled_redis_times_out_and_a_resumed_one_answers() -> TestResult {
    let Some(mut server) = common::start() else {
        return Ok(());
    };
    let timeout = Duration::from_millis(300);
    let store = RedisFilterStore::connect(&server.url())
        .await?
        .timeout(timeout);
    store.store("k", b"v".to_vec()).await?;

    server.pause();
    let started = Instant::now();
    let result = tokio::time::timeout(HANG, store.load("k")).await?;
    let waited = started.elapsed();
    server.resume();
    assert!(
        matches!(result, Err(StoreError::Timeout(d)) if d == timeout),
        "{result:?}"
    );
    assert!(
        waited >= timeout && waited < timeout * 4,
        "gave up after {waited:?}, configured {timeout:?}"
    );

    // Stalled again, a store times out the same way.
    server.pause();
    let started = Instant::now();
    let result = tokio::time::timeout(HANG, store.store("k", b"w".to_vec())).await?;
    let waited = started.elapsed();
    server.resume();
    assert!(matches!(result, Err(StoreError::Timeout(_))), "{result:?}");
    assert!(waited < timeout * 4, "gave up after {waited:?}");

    // Resumed: the same store answers again (the timed-out SET may or may not have been
    // applied meanwhile: the value is the old one or the new one).
    let value = tokio::time::timeout(HANG, store.load("k")).await??;
    assert!(
        value == Some(b"v".to_vec()) || value == Some(b"w".to_vec()),
        "{value:?}"
    );
    store.store("k", b"x".to_vec()).await?;
    assert_eq!(store.load("k").await?, Some(b"x".to_vec()));
    Ok(())
}

#[tokio::test]
async fn a_dead_redis_is_an_error_and_a_restarted_one_is_used_again() -> TestResult {
    let Some(mut server) = common::start() else {
        return Ok(());
    };
    let store = RedisFilterStore::connect(&server.url())
        .await?
        .timeout(Duration::from_millis(500));
    store.store("k", b"v".to_vec()).await?;

    server.kill();
    let load = tokio::time::timeout(HANG, store.load("k")).await?;
    assert!(load.is_err(), "{load:?}");
    let stored = tokio::time::timeout(HANG, store.store("k", b"w".to_vec())).await?;
    assert!(stored.is_err(), "{stored:?}");
    // Connecting to it fails too, with an error rather than a hang.
    let connect = tokio::time::timeout(HANG, RedisFilterStore::connect(&server.url())).await?;
    assert!(connect.is_err(), "{:?}", connect.map(|_| ()));

    // A new (empty) Redis on the same port: the store reconnects by itself.
    server.restart_empty();
    let deadline = Instant::now() + HANG;
    loop {
        match store.store("k", b"back".to_vec()).await {
            Ok(()) => break,
            Err(e) => assert!(Instant::now() < deadline, "never reconnected: {e}"),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(store.load("k").await?, Some(b"back".to_vec()));
    Ok(())
}

#[tokio::test]
async fn a_batch_stores_every_filter_and_a_stalled_redis_fails_it_within_the_timeout() -> TestResult
{
    let Some(mut server) = common::start() else {
        return Ok(());
    };
    let timeout = Duration::from_millis(300);
    let store = RedisFilterStore::connect(&server.url())
        .await?
        .timeout(timeout)
        .prefix("batch:");
    let batch: Vec<(String, Vec<u8>)> = (0..300u32)
        .map(|i| (format!("user/{i}"), i.to_le_bytes().to_vec()))
        .collect();
    store.store_many(batch).await?;
    for i in 0..300u32 {
        assert_eq!(
            store.load(&format!("user/{i}")).await?,
            Some(i.to_le_bytes().to_vec())
        );
    }

    // A set's flush goes through batches; a stalled Redis fails them, the filters stay
    // changed in memory and the next flush after Redis resumes stores them.
    let set = FilterSet::<u64, _>::builder(store.clone())
        .plain(100, 0.01)?
        .build();
    for user in 0..600u64 {
        set.insert(&user, &user).await?;
    }
    server.pause();
    let started = Instant::now();
    let error = tokio::time::timeout(HANG, set.flush()).await?.unwrap_err();
    assert!(started.elapsed() < HANG, "{error}");
    assert!(error.to_string().contains("no answer within"), "{error}");
    server.resume();
    assert_eq!(tokio::time::timeout(HANG, set.flush()).await??, 600);
    for user in 0..600u64 {
        let bytes = store.load(&user.to_string()).await?.expect("stored");
        assert!(
            AnyFilter::from_bytes(&bytes)?.contains(&user),
            "user {user}"
        );
    }
    Ok(())
}
