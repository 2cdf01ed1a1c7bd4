//! GuardedCache: the order of a lookup, coalescing, and what happens when loads go wrong.
#![cfg(feature = "guarded-cache")]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bloom_tower::guarded_cache::LoadErrorKind;
use bloom_tower::{BloomFilter, GuardedCache, SharedFilter};
use futures_util::StreamExt;

#[derive(Debug, thiserror::Error)]
#[error("database is down")]
struct DbDown;

/// A filter holding `keys`, and a cache over it.
fn cache_with(
    keys: impl IntoIterator<Item = u64>,
) -> (SharedFilter<u64>, GuardedCache<u64, String>) {
    let filter = SharedFilter::new(
        BloomFilter::builder()
            .expected_items(10_000)
            .false_positive_rate(0.01)
            .seed(1)
            .build()
            .unwrap(),
    );
    for k in keys {
        filter.insert(&k);
    }
    let cache = GuardedCache::builder(filter.clone())
        .max_capacity(1_000)
        .negative_ttl(Duration::from_millis(200))
        .load_timeout(Duration::from_millis(300))
        .build();
    (filter, cache)
}

/// Never finishes: a loader stuck on a database that does not answer.
async fn forever() -> Result<Option<String>, DbDown> {
    std::future::pending().await
}

/// Polls `cond` until it holds; a hang detector, not a performance bound.
async fn eventually(mut cond: impl FnMut() -> bool) {
    tokio::time::timeout(Duration::from_secs(10), async {
        while !cond() {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    })
    .await
    .expect("condition never became true");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_callers_on_one_cold_key_run_the_loader_once() {
    let (_, cache) = cache_with([7]);
    let runs = Arc::new(AtomicUsize::new(0));
    let gate = Arc::new(tokio::sync::Notify::new());
    let tasks: Vec<_> = (0..1_000)
        .map(|_| {
            let (cache, runs, gate) = (cache.clone(), runs.clone(), gate.clone());
            tokio::spawn(async move {
                cache
                    .get_or_load(&7, |id| async move {
                        runs.fetch_add(1, Ordering::SeqCst);
                        gate.notified().await; // hold the load open until everyone queued
                        Ok::<_, DbDown>(Some(format!("user {id}")))
                    })
                    .await
            })
        })
        .collect();
    eventually(|| cache.stats().coalesced_waiters == 999).await;
    gate.notify_one();
    for t in tasks {
        assert_eq!(t.await.unwrap().unwrap().as_deref(), Some("user 7"));
    }
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    let stats = cache.stats();
    assert_eq!((stats.loads, stats.coalesced_waiters), (1, 999));
    assert_eq!(cache.loads_in_flight(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_leader_hands_the_load_to_a_waiter() {
    let (_, cache) = cache_with([7]);
    let leader = tokio::spawn({
        let cache = cache.clone();
        async move { cache.get_or_load(&7, |_| forever()).await }
    });
    eventually(|| cache.loads_in_flight() == 1).await;
    let runs = Arc::new(AtomicUsize::new(0));
    let waiters: Vec<_> = (0..10)
        .map(|_| {
            let (cache, runs) = (cache.clone(), runs.clone());
            tokio::spawn(async move {
                cache
                    .get_or_load(&7, |_| async move {
                        runs.fetch_add(1, Ordering::SeqCst);
                        Ok::<_, DbDown>(Some("loaded by a waiter".to_owned()))
                    })
                    .await
            })
        })
        .collect();
    eventually(|| cache.stats().coalesced_waiters == 10).await;
    leader.abort(); // the client went away mid-load
    for w in waiters {
        let got = tokio::time::timeout(Duration::from_secs(10), w)
            .await
            .expect("a waiter hung")
            .unwrap();
        assert_eq!(got.unwrap().as_deref(), Some("loaded by a waiter"));
    }
    assert_eq!(
        runs.load(Ordering::SeqCst),
        1,
        "exactly one waiter took over"
    );
    assert_eq!(cache.loads_in_flight(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_loader_fails_every_caller_and_leaves_the_key_usable() {
    let (_, cache) = cache_with([7]);
    let gate = Arc::new(tokio::sync::Notify::new());
    let callers: Vec<_> = (0..20)
        .map(|_| {
            let (cache, gate) = (cache.clone(), gate.clone());
            tokio::spawn(async move {
                cache
                    .get_or_load(&7, |_| async move {
                        gate.notified().await;
                        panic!("loader bug");
                        #[allow(unreachable_code)]
                        Ok::<Option<String>, DbDown>(None)
                    })
                    .await
            })
        })
        .collect();
    eventually(|| cache.stats().coalesced_waiters == 19).await;
    gate.notify_one();
    for c in callers {
        let got = tokio::time::timeout(Duration::from_secs(10), c)
            .await
            .expect("a caller hung");
        let error = got.expect("the panic was contained").unwrap_err();
        assert_eq!(error.kind(), LoadErrorKind::Panicked);
    }
    assert_eq!(cache.loads_in_flight(), 0);
    let next = cache
        .get_or_load(&7, |_| async { Ok::<_, DbDown>(Some("fine".to_owned())) })
        .await;
    assert_eq!(next.unwrap().as_deref(), Some("fine"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_loader_times_out_for_every_waiter_and_unlocks_the_key() {
    let (_, cache) = cache_with([7]);
    let callers: Vec<_> = (0..20)
        .map(|_| {
            let cache = cache.clone();
            tokio::spawn(async move { cache.get_or_load(&7, |_| forever()).await })
        })
        .collect();
    for c in callers {
        assert!(
            matches!(c.await.unwrap(), Err(e) if e.timeout() == Some(Duration::from_millis(300)))
        );
    }
    assert_eq!(cache.loads_in_flight(), 0);
    let next = cache
        .get_or_load(&7, |_| async { Ok::<_, DbDown>(Some("back".to_owned())) })
        .await;
    assert_eq!(next.unwrap().as_deref(), Some("back"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lock_table_is_empty_after_a_million_distinct_keys() {
    let filter = BloomFilter::new(1_000_000, 0.01).unwrap();
    filter.insert_many(0..1_000_000u64);
    let cache: GuardedCache<u64, u64> = GuardedCache::builder(SharedFilter::new(filter))
        .max_capacity(10_000)
        .build();
    futures_util::stream::iter(0..1_000_000u64)
        .for_each_concurrent(64, |k| {
            let cache = cache.clone();
            async move {
                let v = cache
                    .get_or_load(&k, |k| async move { Ok::<_, DbDown>(Some(k * 2)) })
                    .await;
                assert_eq!(v.unwrap(), Some(k * 2));
            }
        })
        .await;
    assert_eq!(cache.stats().loads, 1_000_000);
    assert_eq!(cache.loads_in_flight(), 0);
}

#[tokio::test]
async fn errors_reach_the_caller_and_are_not_cached() {
    let (_, cache) = cache_with([7]);
    let err = cache
        .get_or_load(&7, |_| async { Err::<Option<String>, _>(DbDown) })
        .await;
    assert!(
        matches!(err, Err(e) if e.loader_error().map(ToString::to_string).as_deref() == Some("database is down"))
    );
    let ok = cache
        .get_or_load(&7, |_| async { Ok::<_, DbDown>(Some("up".to_owned())) })
        .await;
    assert_eq!(ok.unwrap().as_deref(), Some("up"));
    let stats = cache.stats();
    assert_eq!((stats.loads, stats.load_errors), (2, 1));
}

#[tokio::test]
async fn the_filter_stops_absent_keys_before_cache_and_loader() {
    let (_, cache) = cache_with(0..1_000);
    let runs = AtomicUsize::new(0);
    let mut rejected = 0;
    for k in 1_000_000..1_001_000u64 {
        let got = cache
            .get_or_load(&k, |_| async {
                runs.fetch_add(1, Ordering::SeqCst);
                Ok::<_, DbDown>(None)
            })
            .await
            .unwrap();
        assert_eq!(got, None);
        rejected += 1;
    }
    let stats = cache.stats();
    assert_eq!(stats.filter_rejections + stats.false_positives, rejected);
    assert_eq!(stats.loads as usize, runs.load(Ordering::SeqCst));
    assert_eq!(
        stats.false_positives, stats.loads,
        "each load of an absent key is a measured false positive"
    );
    assert!(
        stats.filter_rejections > 900,
        "a 1% filter stops ~99% of absent keys"
    );
    let expected = stats.false_positives as f64 / rejected as f64;
    assert_eq!(stats.measured_fpr, expected);
}

#[tokio::test]
async fn negative_entries_expire_and_a_created_key_is_found_after_invalidation() {
    let (filter, cache) = cache_with([7]);
    let db: Arc<std::sync::Mutex<Option<String>>> = Arc::default();
    let load = |db: Arc<std::sync::Mutex<Option<String>>>| {
        move |_| async move { Ok::<_, DbDown>(db.lock().unwrap().clone()) }
    };

    // 7 passes the filter but is not in the database: negative-cached.
    assert_eq!(cache.get_or_load(&7, load(db.clone())).await.unwrap(), None);
    *db.lock().unwrap() = Some("created".into());
    assert_eq!(
        cache.get_or_load(&7, load(db.clone())).await.unwrap(),
        None,
        "served from the negative cache"
    );
    assert_eq!(cache.stats().negative_hits, 1);
    tokio::time::sleep(Duration::from_millis(400)).await; // past negative_ttl
    assert_eq!(
        cache
            .get_or_load(&7, load(db.clone()))
            .await
            .unwrap()
            .as_deref(),
        Some("created")
    );

    // A brand-new key: not in the filter, so rejected; the create handler's call fixes that.
    assert!(
        !filter.contains(&8u64),
        "with this fixed seed 8 is not a false positive"
    );
    assert_eq!(
        cache.get_or_load(&8, load(Arc::default())).await.unwrap(),
        None
    );
    cache.prepare_insert(&8).committed().await;
    let now = Arc::new(std::sync::Mutex::new(Some("new user".to_owned())));
    assert_eq!(
        cache.get_or_load(&8, load(now)).await.unwrap().as_deref(),
        Some("new user")
    );

    // invalidate removes a positive entry too.
    cache.invalidate(&7).await;
    *db.lock().unwrap() = Some("updated".into());
    assert_eq!(
        cache
            .get_or_load(&7, load(db.clone()))
            .await
            .unwrap()
            .as_deref(),
        Some("updated")
    );
}

#[tokio::test]
async fn values_expire_within_the_time_to_live() {
    let filter = SharedFilter::new(BloomFilter::new(1_000, 0.01).unwrap());
    filter.insert(&7u64);
    let cache: GuardedCache<u64, String> = GuardedCache::builder(filter)
        .time_to_live(Duration::from_millis(300))
        .build();
    let version = |v: &'static str| move |_| async move { Ok::<_, DbDown>(Some(v.to_owned())) };
    assert_eq!(
        cache
            .get_or_load(&7, version("1"))
            .await
            .unwrap()
            .as_deref(),
        Some("1")
    );
    tokio::time::sleep(Duration::from_millis(400)).await; // past the time to live
    assert_eq!(
        cache
            .get_or_load(&7, version("2"))
            .await
            .unwrap()
            .as_deref(),
        Some("2"),
        "the expired value was loaded again"
    );
    assert_eq!(cache.stats().loads, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_create_racing_with_a_load_is_not_hidden_by_a_stale_negative_entry() {
    let (_, cache) = cache_with([7]);
    let read_db = Arc::new(tokio::sync::Notify::new());
    let finish = Arc::new(tokio::sync::Notify::new());
    let slow_reader = tokio::spawn({
        let (cache, read_db, finish) = (cache.clone(), read_db.clone(), finish.clone());
        async move {
            cache
                .get_or_load(&7, |_| async move {
                    read_db.notify_one(); // it has read "absent"…
                    finish.notified().await; // …and is slow to return it
                    Ok::<Option<String>, DbDown>(None)
                })
                .await
        }
    });
    read_db.notified().await;
    cache.prepare_insert(&7).committed().await; // the user is created meanwhile
    finish.notify_one();
    assert_eq!(
        slow_reader.await.unwrap().unwrap(),
        None,
        "the racing lookup began before the create"
    );
    let after = cache
        .get_or_load(&7, |_| async {
            Ok::<_, DbDown>(Some("created".to_owned()))
        })
        .await;
    assert_eq!(
        after.unwrap().as_deref(),
        Some("created"),
        "no stale negative entry survived"
    );
}

#[test]
fn counters_reach_the_metrics_recorder() {
    use metrics_util::debugging::{DebugValue, DebuggingRecorder};

    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    metrics::with_local_recorder(&recorder, || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let filter = SharedFilter::new(
                BloomFilter::builder()
                    .expected_items(1_000)
                    .false_positive_rate(0.01)
                    .seed(1)
                    .build()
                    .unwrap(),
            );
            filter.insert(&1u64);
            let cache: GuardedCache<u64, String> =
                GuardedCache::builder(filter).name("users").build();
            let hit = |_| async { Ok::<_, DbDown>(Some("one".to_owned())) };
            cache.get_or_load(&1, hit).await.unwrap();
            cache.get_or_load(&1, hit).await.unwrap();
            for k in 100..200u64 {
                cache
                    .get_or_load(&k, |_| async { Ok::<_, DbDown>(None) })
                    .await
                    .unwrap();
            }
        })
    });
    let snapshot = snapshotter.snapshot().into_vec();
    // The rate is the filter's (a guard in front would count its rejections there too).
    let fpr = snapshot.iter().find_map(|(key, _, _, value)| {
        let key = key.key();
        let default_filter = key
            .labels()
            .any(|l| l.key() == "filter" && l.value() == "default");
        match value {
            DebugValue::Gauge(fpr)
                if key.name() == "bloom_filter_measured_fpr" && default_filter =>
            {
                Some(fpr.into_inner())
            }
            _ => None,
        }
    });
    let stats_by_name: std::collections::HashMap<String, DebugValue> = snapshot
        .into_iter()
        .filter(|(key, ..)| {
            key.key()
                .labels()
                .any(|l| l.key() == "cache" && l.value() == "users")
        })
        .map(|(key, _, _, value)| (key.key().name().to_owned(), value))
        .collect();
    assert_eq!(
        stats_by_name["bloom_cache_loads_total"],
        DebugValue::Counter(1 + stats_by_name_fp(&stats_by_name))
    );
    assert_eq!(
        stats_by_name["bloom_cache_hits_total"],
        DebugValue::Counter(1)
    );
    let DebugValue::Counter(rejections) = stats_by_name["bloom_cache_filter_rejections_total"]
    else {
        panic!()
    };
    let fp = stats_by_name_fp(&stats_by_name);
    assert_eq!(rejections + fp, 100);
    assert_eq!(fpr, Some(fp as f64 / 100.0), "no bloom_filter_measured_fpr");
}

fn stats_by_name_fp(
    stats: &std::collections::HashMap<String, metrics_util::debugging::DebugValue>,
) -> u64 {
    match stats.get("bloom_cache_false_positives_total") {
        Some(metrics_util::debugging::DebugValue::Counter(n)) => *n,
        _ => 0,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn callers_arriving_while_a_load_finishes_do_not_load_again() {
    // Unlike the test above, callers keep arriving while the load completes: one that misses
    // the cache just before the leader caches its value, and joins just after the leader left
    // the table, must find the value rather than start a second load.
    for round in 0..500u64 {
        let (_, cache) = cache_with([round]);
        let runs = Arc::new(AtomicUsize::new(0));
        let tasks: Vec<_> = (0..1_000)
            .map(|_| {
                let (cache, runs) = (cache.clone(), runs.clone());
                tokio::spawn(async move {
                    cache
                        .get_or_load(&round, |id| async move {
                            runs.fetch_add(1, Ordering::SeqCst);
                            tokio::time::sleep(Duration::from_millis(1)).await;
                            Ok::<_, DbDown>(Some(format!("user {id}")))
                        })
                        .await
                })
            })
            .collect();
        for t in tasks {
            assert_eq!(t.await.unwrap().unwrap(), Some(format!("user {round}")));
        }
        assert_eq!(
            runs.load(Ordering::SeqCst),
            1,
            "round {round}: the key was loaded more than once"
        );
        assert_eq!(cache.loads_in_flight(), 0);
    }
}
