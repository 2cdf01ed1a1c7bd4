//! Every name in `bloom_redis::names` is described (`# HELP` text and unit) with the kind and
//! unit its name promises: `_total` counters (`_bytes_total` in bytes), `_seconds`
//! histograms, gauges neither; the
//! descriptions reach the recorder when the first `RedisSync` connects, with no call from
//! the application; and against a real `redis-server` (see `common`), each published batch
//! of inserts records its publish latency. (That it all passes `promtool check metrics`
//! through the Prometheus exporter is checked by the workspace's `tests/prometheus.rs`.)
//! (The follower's lag, which every instance exports, is `tests/follow_lag.rs`: a process of
//! its own, since the descriptions reach only the recorder of the process's first connect.)
#![forbid(unsafe_code)]

mod common;
#[path = "../../bloom-tower/tests/support/descriptions.rs"]
mod descriptions;

use std::time::Duration;

use bloom_core::BloomFilter;
use bloom_redis::{RedisSync, names};
use bloom_tower::SharedFilter;
use descriptions::{Descriptions, declared_names};
use metrics::Unit;

#[test]
fn every_name_is_described_with_its_kind_and_unit() {
    let descriptions = Descriptions::default();
    metrics::with_local_recorder(&descriptions, bloom_redis::names::describe);
    let described = descriptions.0.into_inner().unwrap();
    let declared = declared_names(include_str!("../src/lib.rs"));
    assert!(declared.len() >= 9, "parsed {} names", declared.len());
    for (constant, name) in &declared {
        let Some((kind, unit, text)) = described.get(name) else {
            panic!("names::{constant} ({name}) has no description")
        };
        assert!(text.len() > 20, "{name}: a real HELP text, not {text:?}");
        assert!(
            name.starts_with("bloom_redis_")
                && name
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'),
            "{name}: a snake_case name with the crate's prefix"
        );
        match *kind {
            "counter" => {
                assert!(
                    name.ends_with("_total"),
                    "counter {name} must end in _total"
                );
                // A counter of bytes says so in its name (`_bytes_total`, Prometheus's base
                // unit) and its unit; every other counts events.
                let expected = if name.ends_with("_bytes_total") {
                    Unit::Bytes
                } else {
                    Unit::Count
                };
                assert_eq!(*unit, Some(expected), "{name}");
            }
            "histogram" => {
                assert!(name.ends_with("_seconds"), "histogram {name}: base unit");
                assert_eq!(*unit, Some(Unit::Seconds), "{name}");
            }
            _ => assert!(!name.ends_with("_total"), "gauge {name} ends in _total"),
        }
    }
    assert_eq!(
        described.len(),
        declared.len(),
        "described names that names does not declare"
    );
}

#[test]
fn publish_latency_is_recorded_and_described_without_being_asked() {
    let Some(server) = common::start() else {
        return;
    };
    let recorder = Descriptions::default();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    // Current-thread: every task the sync spawns runs on this thread, under this recorder.
    metrics::with_local_recorder(&recorder, || {
        runtime.block_on(async {
            let filter = SharedFilter::<u64>::new(
                BloomFilter::builder()
                    .bits(1 << 16)
                    .hashes(7)
                    .seed(0x5eed)
                    .build()
                    .unwrap(),
            );
            let sync = RedisSync::builder(&server.url())
                .prefix("metrics")
                .connect(&filter)
                .await
                .expect("join");
            for key in 0..3u64 {
                filter.insert(&key);
                sync.propagated().await.expect("published");
            }
            sync.leave().await;
        });
    });
    let histograms = recorder.1.lock().unwrap();
    let latencies = histograms
        .get(&format!("{}{{prefix=metrics}}", names::PUBLISH_LATENCY))
        .unwrap_or_else(|| panic!("no {} recorded: {histograms:?}", names::PUBLISH_LATENCY));
    assert!(
        !latencies.is_empty() && latencies.len() <= 3,
        "one sample per published batch of the 3 inserts: {latencies:?}"
    );
    assert!(
        latencies
            .iter()
            .all(|&seconds| (0.0..Duration::from_secs(20).as_secs_f64()).contains(&seconds)),
        "{latencies:?}"
    );
    // Described by the first connect, to the recorder installed then.
    let described = recorder.0.lock().unwrap();
    for name in [names::PUBLISH_LATENCY, names::CONNECTED, names::STALE] {
        assert!(described.contains_key(name), "{name} not described");
    }
}
