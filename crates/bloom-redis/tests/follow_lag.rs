//! The follower's lag (`names::FOLLOW_LAG`, `RedisStats::follow_lag`) against a real
//! `redis-server` (see `common`): every instance reads it from its own mark rounds, so an
//! instance that does not hold the follow lease sees it grow past the follow bound once the
//! holder stops, on its gauge and in its stats. (A test binary of its own: the descriptions
//! `tests/metrics.rs` checks reach only the recorder of its process's first connect.)
#![forbid(unsafe_code)]
#![cfg(feature = "metrics")]

mod common;
#[path = "../../bloom-tower/tests/support/descriptions.rs"]
mod descriptions;

use std::convert::Infallible;
use std::time::{Duration, Instant};

use bloom_core::BloomFilter;
use bloom_redis::{RedisSync, names};
use bloom_tower::SharedFilter;
use bloom_tower::key::KeyFor;
use bloom_tower::key_source::{KeySource, Watermark};
use bloom_tower::shared_filter::Follow;
use descriptions::Descriptions;

/// A source that stands still: an exact watermark that never moves, so every follow step
/// succeeds at once and stores a new covered time.
struct Still;

impl KeySource for Still {
    type Key = u64;
    type Error = Infallible;

    fn keys(
        &self,
    ) -> impl futures_util::Stream<Item = Result<impl KeyFor<u64> + Send + '_, Infallible>> + Send + '_
    {
        futures_util::stream::empty::<Result<u64, Infallible>>()
    }

    async fn watermark(&self) -> Result<Option<Watermark>, Infallible> {
        Ok(Some(Watermark::from(7u64)))
    }

    fn watermark_is_exact(&self) -> bool {
        true
    }
}

/// The last value set for `name{prefix=…}`.
fn last(recorder: &Descriptions, name: &str, prefix: &str) -> Option<f64> {
    let gauges = recorder.2.lock().unwrap();
    gauges
        .get(&format!("{name}{{prefix={prefix}}}"))
        .and_then(|values| values.last().copied())
}

/// Waits (up to 20 s) until `done`, else fails with `what`.
async fn until(what: &str, mut done: impl FnMut() -> bool) {
    let started = Instant::now();
    while !done() {
        assert!(started.elapsed() < Duration::from_secs(20), "{what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[test]
fn the_follow_lag_grows_on_every_instance_once_the_follower_stops() {
    let Some(server) = common::start() else {
        return;
    };
    let recorder = Descriptions::default();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let interval = Duration::from_millis(50);
    let stale_after = Duration::from_millis(400);
    // The follow bound the holder stores: its step interval plus `stale_after`.
    let bound = interval + stale_after;
    metrics::with_local_recorder(&recorder, || {
        runtime.block_on(async {
            let join = |name: &'static str| {
                let filter = SharedFilter::<u64>::new(
                    BloomFilter::builder()
                        .bits(1 << 16)
                        .hashes(7)
                        .seed(0x5eed)
                        .build()
                        .unwrap(),
                );
                let url = server.url();
                async move {
                    RedisSync::builder(&url)
                        .prefix("lag")
                        .heartbeat(Duration::from_millis(50))
                        .stale_after(stale_after)
                        .member_timeout(Duration::from_secs(60))
                        .connect(&filter)
                        .await
                        .unwrap_or_else(|e| panic!("{name} joins: {e}"))
                }
            };
            let holder = join("the holder").await;
            let other = join("the other").await;
            holder.follow(Still, Follow::every(interval));
            // The other instance never follows: what it reports comes from its own rounds.
            until("the other instance reads a follower within the bound", || {
                let stats = other.stats();
                stats.followed && stats.follow_lag.is_some_and(|lag| lag < bound) && stats.fresh
            })
            .await;
            assert!(holder.stats().following && !other.stats().following);
            let running = other.stats().follow_lag.unwrap();

            // The holder stops (its tasks end as a killed process's would): its covered time
            // ages in Redis, and the other instance's lag grows past the bound.
            holder.shutdown();
            until("the other instance's lag grows past the follow bound", || {
                other.stats().follow_lag.is_some_and(|lag| lag > bound * 2)
            })
            .await;
            let stats = other.stats();
            assert!(
                stats.followed && !stats.fresh,
                "the holder's record is still there (member_timeout), and the view is stale: {stats:?}"
            );
            let lag = last(&recorder, names::FOLLOW_LAG, "lag").expect("the lag gauge");
            let exported_bound =
                last(&recorder, names::FOLLOW_BOUND, "lag").expect("the bound gauge");
            assert!(
                (exported_bound - bound.as_secs_f64()).abs() < 1e-9,
                "the bound gauge is the holder's follow bound: {exported_bound}"
            );
            assert!(
                lag > exported_bound && lag > running.as_secs_f64(),
                "the lag gauge grew past the bound ({lag} s, {running:?} while following)"
            );
            assert_eq!(last(&recorder, names::FOLLOWER, "lag"), Some(1.0));
            other.leave().await;
        });
    });
}
