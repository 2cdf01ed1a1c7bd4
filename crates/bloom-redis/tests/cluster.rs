//! Against a real three-node Redis Cluster started here (`common/cluster.rs`): a fleet
//! synchronised through it spreads its segments over the shards, propagates inserts,
//! rebuilds, and reconciles incrementally; and the harness's own self-test.
#![forbid(unsafe_code)]

mod common;
#[path = "common/evict.rs"]
mod evict;
#[path = "common/cluster.rs"]
mod three_nodes;

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bloom_core::{BloomFilter, Layout};
use bloom_redis::{Rebuilt, RedisSync};
use bloom_tower::{SharedFilter, key_source};

/// Only a hang detector: no test asserts on timing.
const HANG: Duration = Duration::from_secs(30);

async fn join(url: &str) -> RedisSync<String> {
    let filter = BloomFilter::builder()
        .bits(1 << 22)
        .hashes(7)
        .layout(Layout::Blocked)
        .seed(0xc1u128 << 64 | 0x5e)
        .build()
        .unwrap();
    RedisSync::builder(url)
        .cluster(true)
        .prefix("fleet")
        // 512 segments of 1 KiB: eight groups, eight hash slots.
        .segment_bytes(1 << 10)
        .reconcile_every(Duration::from_secs(600))
        .connect(&SharedFilter::new(filter))
        .await
        .expect("join through the cluster")
}

async fn eventually(what: &str, mut done: impl FnMut() -> bool) {
    let started = Instant::now();
    while !done() {
        assert!(started.elapsed() < HANG, "hang: {what}");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

fn holds(sync: &RedisSync<String>, keys: &[String]) -> bool {
    keys.iter().all(|k| sync.filter().current().contains(k))
}

/// Waits until `joiner` is fresh and holds every one of `created`, asserting meanwhile that
/// it never answers "absent" for one (it lets them through while stale). Returns how long
/// that took.
async fn fresh_with_every_key_never_absent(
    joiner: &RedisSync<String>,
    created: &[String],
) -> Duration {
    let watched = Instant::now();
    while !(joiner.stats().fresh && holds(joiner, created)) {
        let stats = joiner.stats();
        for key in created {
            assert!(
                joiner.filter().contains(key),
                "the joiner answered \"absent\" for {key} {:?} after joining; it: {stats:?}",
                watched.elapsed()
            );
        }
        assert!(
            watched.elapsed() < HANG,
            "hang: the joiner fresh with every key; it: {stats:?}"
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    watched.elapsed()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_on_a_cluster_spreads_its_segments_and_keeps_every_key_through_a_rebuild() {
    let Some(cluster) = three_nodes::start_cluster(3) else {
        return;
    };
    // Each instance names a different node: the others are discovered.
    let urls = cluster.node_urls();
    let (a, b, c) = (
        join(&urls[0]).await,
        join(&urls[1]).await,
        join(&urls[2]).await,
    );
    tokio::time::sleep(Duration::from_millis(300)).await; // subscriptions

    // Inserts on A reach B and C through pub/sub (published on one node, delivered by all).
    let first: Vec<String> = (0..3_000).map(|i| format!("first:{i}")).collect();
    for key in &first {
        a.filter().insert(key);
    }
    a.propagated().await.unwrap();
    eventually("B and C hold A's inserts", || {
        holds(&b, &first) && holds(&c, &first)
    })
    .await;

    // The segments live on more than one shard, and every key of one group on one node.
    let segment_nodes: BTreeSet<usize> = (0..3)
        .filter(|&node| cluster.keys_on(node).iter().any(|k| k.contains(":seg")))
        .collect();
    assert!(
        segment_nodes.len() >= 2,
        "segments on nodes {segment_nodes:?} only"
    );
    for node in 0..3 {
        for key in cluster.keys_on(node) {
            assert_eq!(cluster.node_of_key(&key), node, "{key}");
        }
    }

    // An idle incremental pass moves nothing; a full pass finds nothing to move.
    let report = b.reconcile_now().await.unwrap();
    assert_eq!(
        (report.segments_pulled, report.bytes_pushed),
        (0, 0),
        "{report:?}"
    );
    let report = c.full_pass_now().await.unwrap();
    assert!(report.full, "{report:?}");
    assert_eq!(
        (report.segments_pulled, report.bytes_pushed),
        (0, 0),
        "{report:?}"
    );

    // A rebuild on B (its scripts each touch one slot) while C keeps creating keys: each is
    // inserted, then committed to the "database" the rebuild reads. Every key of the source
    // and every key created meanwhile is in the new generation everywhere.
    let db = Arc::new(Mutex::new(first.clone()));
    let during: Vec<String> = (0..500).map(|i| format!("during:{i}")).collect();
    let inserting = {
        let (filter, during, db) = (c.filter().clone(), during.clone(), db.clone());
        tokio::spawn(async move {
            for key in &during {
                filter.insert(key);
                db.lock().unwrap().push(key.clone());
                tokio::time::sleep(Duration::from_micros(200)).await;
            }
        })
    };
    let source = key_source::from_iter(move || db.lock().unwrap().clone());
    let outcome = b.rebuild(&source).await.unwrap();
    inserting.await.unwrap();
    c.propagated().await.unwrap();
    assert!(
        matches!(outcome, Rebuilt::Rebuilt { generation: 2, .. }),
        "{outcome:?}"
    );
    let everything: Vec<String> = first.iter().chain(&during).cloned().collect();
    let started = Instant::now();
    while ![&a, &b, &c]
        .iter()
        .all(|i| i.stats().generation == 2 && holds(i, &everything))
    {
        if started.elapsed() > HANG {
            for (name, i) in [("A", &a), ("B", &b), ("C", &c)] {
                let missing: Vec<&String> = everything
                    .iter()
                    .filter(|k| !i.filter().current().contains(k))
                    .collect();
                eprintln!(
                    "{name}: {:?}; missing {} {:?}",
                    i.stats(),
                    missing.len(),
                    &missing[..missing.len().min(5)]
                );
            }
            panic!("hang: every instance serves generation 2 with every key");
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    // A joiner finds it all in the cluster.
    let d = join(&urls[0]).await;
    assert_eq!(d.stats().generation, 2);
    assert!(holds(&d, &everything));
}

/// The nodes other than the `{prefix}` one restart from dumps taken before some keys were
/// created: their bits are gone from Redis, and no subscription broke (every subscriber is
/// on the `{prefix}` node), so A and B still hold the keys and nothing tells them. C, joining
/// then, pulls the cluster in vain: it must not be fresh without the keys until A and B
/// have read the restarted nodes, pushed the keys back and vouched for them, and it has
/// pulled again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_joiner_after_a_node_lost_writes_is_not_fresh_without_them() {
    let Some(mut cluster) = three_nodes::start_cluster(3) else {
        return;
    };
    let config_node = cluster.node_of_key("{fleet}:config");
    let url = &cluster.node_urls()[config_node];
    let (a, b) = (join(url).await, join(url).await);
    let settled = |instances: &[&RedisSync<String>]| {
        instances
            .iter()
            .all(|i| i.stats().fresh && i.stats().instances == instances.len())
    };
    eventually("A and B fresh, knowing each other", || settled(&[&a, &b])).await;
    let others: Vec<usize> = (0..3).filter(|&n| n != config_node).collect();
    let dumps: Vec<_> = others.iter().map(|&n| cluster.save_dump(n)).collect();
    let created: Vec<String> = (0..40).map(|i| format!("lost:{i}")).collect();
    for (i, key) in created.iter().enumerate() {
        [&a, &b][i % 2].filter().insert(key);
    }
    a.propagated().await.unwrap();
    b.propagated().await.unwrap();
    eventually("A and B hold every key", || {
        holds(&a, &created) && holds(&b, &created)
    })
    .await;
    let segments_on = |cluster: &three_nodes::RedisCluster| -> usize {
        others
            .iter()
            .map(|&n| {
                cluster
                    .keys_on(n)
                    .iter()
                    .filter(|k| k.contains(":seg"))
                    .count()
            })
            .sum()
    };
    let before = segments_on(&cluster);
    for (&node, dump) in others.iter().zip(&dumps) {
        tokio::task::block_in_place(|| cluster.restart_from(node, dump));
    }
    let after = segments_on(&cluster);
    assert!(
        before > 0 && after == 0,
        "the restarted nodes held {before} segments, and {after} after the restart"
    );

    let c = join(url).await;
    let watched = fresh_with_every_key_never_absent(&c, &created).await;
    eprintln!("two nodes lost {before} segments: C fresh with every key {watched:?} after joining");
}

/// The nodes other than the `{prefix}` one, caches with a memory limit and `allkeys-lru`,
/// evict the segments they hold (idle since written) to make room for another service's keys.
/// No subscription breaks and no node restarts: only their eviction counts tell. C, joining
/// then, must not be fresh without the keys until A has read those nodes, pushed the keys
/// back and vouched for them, and C has pulled again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_joiner_after_nodes_evicted_segments_is_not_fresh_without_them() {
    let Some(cluster) = three_nodes::start_cluster(3) else {
        return;
    };
    let config_node = cluster.node_of_key("{fleet}:config");
    let url = &cluster.node_urls()[config_node];
    let a = join(url).await;
    let created: Vec<String> = (0..40).map(|i| format!("evicted:{i}")).collect();
    for key in &created {
        a.filter().insert(key);
    }
    a.propagated().await.unwrap();

    let others: Vec<usize> = (0..3).filter(|&n| n != config_node).collect();
    let mut evicted = 0;
    for &node in &others {
        let mut conn = redis::Client::open(cluster.node_urls()[node].as_str())
            .unwrap()
            .get_multiplexed_tokio_connection()
            .await
            .unwrap();
        // One hash tag of this node's slots, for the other service's keys.
        let tag = ('a'..='z')
            .map(|t| format!("{{{t}}}"))
            .find(|t| cluster.node_of_key(t) == node)
            .expect("a one-letter hash tag on every node");
        let held = evict::count(&mut conn, "*:seg*").await;
        assert!(held > 0, "node {node} holds segments of A's keys");
        let mut fill = conn.clone();
        let names = format!("{tag}:other");
        evict::evict(&mut conn, &mut fill, &names, "*:seg*", None, 2 << 20).await;
        evicted += held;
    }

    let c = join(url).await;
    let watched = fresh_with_every_key_never_absent(&c, &created).await;
    eprintln!(
        "two nodes evicted {evicted} segments: C fresh with every key {watched:?} after joining"
    );
}

#[test]
fn a_three_node_cluster_starts_with_every_slot_served() {
    let Some(cluster) = three_nodes::start_cluster(3) else {
        return;
    };
    let ports = cluster.ports();
    assert_eq!(ports.len(), 3);
    assert_eq!(cluster.node_urls().len(), 3);
    assert_eq!(
        cluster.seed_url(),
        format!("redis://127.0.0.1:{}/", ports[0])
    );
    assert_eq!(cluster.seed_url(), cluster.node_urls()[0]);

    // Every slot served, once, and every node serves some.
    let ranges = cluster.slot_ranges();
    let mut next = 0u32;
    for &(start, end, _) in &ranges {
        assert_eq!(
            u32::from(start),
            next,
            "slot map has a gap or overlap: {ranges:?}"
        );
        next = u32::from(end) + 1;
    }
    assert_eq!(next, 16384, "slot map does not end at 16383: {ranges:?}");
    let owners: BTreeSet<usize> = ranges.iter().map(|&(_, _, node)| node).collect();
    assert_eq!(
        owners,
        BTreeSet::from([0, 1, 2]),
        "slots not spread: {ranges:?}"
    );

    // Keys with hash tags, through a cluster-mode client, until two nodes hold some.
    let mut written: Vec<(String, usize)> = Vec::new();
    for tag in 'a'..='z' {
        let key = format!("{{{tag}}}:probe");
        let reply = cluster.cli(0, &["-c", "SET", &key, "v"]);
        assert_eq!(reply.trim(), "OK", "SET {key} through redis-cli -c");
        written.push((key.clone(), cluster.node_of_key(&key)));
        let holders: BTreeSet<usize> = written.iter().map(|&(_, node)| node).collect();
        if holders.len() >= 2 {
            break;
        }
    }
    let holders: BTreeSet<usize> = written.iter().map(|&(_, node)| node).collect();
    assert!(
        holders.len() >= 2,
        "every key landed on one node: {written:?}"
    );

    // Each node holds exactly the keys `node_of_key` says are its own.
    for node in 0..ports.len() {
        let expected: Vec<String> = written
            .iter()
            .filter(|&&(_, owner)| owner == node)
            .map(|(key, _)| key.clone())
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        assert_eq!(cluster.keys_on(node), expected, "keys on node {node}");
    }
    // And a plain (non-cluster) GET on the owner finds each.
    for (key, owner) in &written {
        assert_eq!(
            cluster.cli(*owner, &["GET", key]).trim(),
            "v",
            "GET {key} on its owner"
        );
    }
}
