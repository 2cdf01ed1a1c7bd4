//! One follower per fleet: [`RedisSync::follow`](crate::RedisSync::follow). One instance at a time holds a lease in
//! Redis and follows the source's changes ([`Follower`]); its inserts reach the other
//! instances through Redis as creates do, and the position it has followed to is stored in
//! Redis, so whoever holds the lease next goes on from there.
//!
//! # Why no commit is missed when the follower dies
//!
//! The stored position `P` means: every key committed before `P` was taken is in Redis. The
//! holder moves it only after a step's keys are in Redis: it waits for
//! [`propagated`](crate::RedisSync::propagated) (every insert queued before is written to Redis and
//! published) and then, in one script that checks it still holds the lease, writes the step's
//! new position. An instance that dies (`kill -9`), stalls (SIGSTOP past the lease) or loses
//! Redis therefore leaves a position whose keys are all in Redis, and the next holder starts
//! there: keys read twice cost time, never a key. Two instances can both believe they hold the
//! lease (a stalled one resuming): both insert (idempotent), and only the real holder can move
//! the position, which only ever names keys already in Redis.
//!
//! With no position stored yet, the first holder starts from its serving filter's watermark,
//! or from the source's origin (a full read, once per fleet).
//!
//! The bound: a commit is let through by every fresh instance within one step of the holder
//! plus pub/sub delivery; after the holder dies, within the lease (`3 ×` the step interval,
//! at least 3 s) plus a step. Tests: the workspace's `tests/follow.rs`
//! (`a_fleet_follows_an_outside_writer_and_survives_its_follower_killed`).
//!
//! # The lag every instance reports
//!
//! Every instance's mark round reads the covered time with Redis's clock ([`FollowLag`]):
//! their difference is how far the follower is behind, as Redis sees it, whoever holds the
//! lease; a holder that died or stalls shows as a lag growing on every instance
//! (`bloom_redis_follow_lag_seconds`, [`RedisStats::follow_lag`](crate::RedisStats::follow_lag)).
//! Test: `tests/follow_lag.rs`, `the_follow_lag_grows_on_every_instance_once_the_follower_stops`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use bloom_tower::SharedFilter;
use bloom_tower::key::KeyFor;
use bloom_tower::key_source::{KeySource, Watermark};
use bloom_tower::shared_filter::{Follow, Follower, MAX_BACKOFF};
use redis::AsyncCommands as _;

use super::inner::{Inner, random_id};
#[cfg(feature = "metrics")]
use crate::names;
use crate::scripts;

/// The shortest follow lease: a holder that stalls this long hands over.
const MIN_LEASE: Duration = Duration::from_secs(3);

/// The follower's lag as this instance's mark rounds read it (R5): how old the newest
/// covered time read was, by Redis's clock in the same reply.
#[derive(Default)]
pub(super) struct FollowLag {
    /// The last covered time a round found (ms, Redis's clock); 0: none yet.
    covered: AtomicU64,
    /// Redis's time in the last round's reply minus `covered` (ms); meaningless while
    /// `covered` is 0.
    lag: AtomicU64,
    /// Whether the last round found a covered time in Redis.
    followed: AtomicBool,
}

impl FollowLag {
    /// `None` until a round found a follower.
    pub(super) fn lag(&self) -> Option<Duration> {
        (self.covered.load(Relaxed) != 0).then(|| Duration::from_millis(self.lag.load(Relaxed)))
    }

    pub(super) fn followed(&self) -> bool {
        self.followed.load(Relaxed)
    }
}

impl Inner {
    /// A mark round read Redis's time `now` and the follower's record `covered` (covered time,
    /// follow bound; ms): records the lag, on every instance. Without a record the lag goes
    /// on from the last covered time read: a follower that stopped keeps showing.
    pub(super) fn record_follow_lag(&self, now: u64, covered: Option<(u64, u64)>) {
        let record = &self.outbox.follow_lag;
        record.followed.store(covered.is_some(), Relaxed);
        if let Some((at, _)) = covered {
            record.covered.store(at, Relaxed);
        }
        let at = record.covered.load(Relaxed);
        let lag = now.saturating_sub(at);
        if at != 0 {
            record.lag.store(lag, Relaxed);
        }
        #[cfg(feature = "metrics")]
        {
            metrics::gauge!(names::FOLLOWER, "prefix" => self.prefix.clone())
                .set(if covered.is_some() { 1.0 } else { 0.0 });
            let bound = covered.map_or(0, |(_, bound)| bound);
            metrics::gauge!(names::FOLLOW_BOUND, "prefix" => self.prefix.clone())
                .set(bound as f64 / 1000.0);
            if at != 0 {
                metrics::gauge!(names::FOLLOW_LAG, "prefix" => self.prefix.clone())
                    .set(lag as f64 / 1000.0);
            }
        }
    }

    fn follow_lease(how: &Follow) -> Duration {
        (how.interval() * 3).max(MIN_LEASE)
    }

    /// Tries for the lease until it has it, then follows until it loses it; forever.
    pub(super) async fn follow<K, S>(
        self: Arc<Self>,
        filter: SharedFilter<K>,
        source: S,
        mut how: Follow,
    ) where
        K: ?Sized,
        S: KeySource + Send + Sync,
        S::Key: KeyFor<K>,
    {
        let lease = Self::follow_lease(&how);
        let renew = lease / 3;
        loop {
            if !self.take_follow_lease(lease).await {
                let jitter = Duration::from_millis(random_id() % (renew.as_millis() as u64 + 1));
                tokio::time::sleep(renew / 2 + jitter / 2).await;
                continue;
            }
            let Some(position) = self.follow_position(&filter, &source).await else {
                tokio::time::sleep(renew).await;
                continue;
            };
            tracing::info!(prefix = %self.prefix, ?position, "following the source for the fleet");
            self.following.store(true, Relaxed);
            self.follow_as_holder(&filter, &source, &mut how, position, lease)
                .await;
            self.following.store(false, Relaxed);
        }
    }

    /// `SET lease NX PX`: whether this instance now holds it.
    async fn take_follow_lease(&self, lease: Duration) -> bool {
        let mut conn = self.conn.clone();
        let taken: Result<Option<String>, _> = redis::cmd("SET")
            .arg(self.keys.follow_lease())
            .arg(self.id.to_string())
            .arg("NX")
            .arg("PX")
            .arg(lease.as_millis() as u64)
            .query_async(&mut conn)
            .await;
        matches!(taken, Ok(Some(_)))
    }

    /// The position stored in Redis, else the serving filter's watermark, else the origin;
    /// `None` if Redis or the source does not answer. A position the source has not reached
    /// (past its watermark now: forged, foreign, or from before the database was restored from
    /// an older backup) is not followed from: following it would skip the rows before it
    /// (the workspace's `tests/follow.rs`: `a_follow_position_past_the_source_is_not_followed_from`).
    async fn follow_position<K: ?Sized, S: KeySource>(
        &self,
        filter: &SharedFilter<K>,
        source: &S,
    ) -> Option<Watermark> {
        let mut conn = self.conn.clone();
        let stored: Option<Vec<u8>> = conn.get(self.keys.follow_position()).await.ok()?;
        let now = match source.watermark().await {
            Ok(now) => now,
            Err(error) => {
                let error: bloom_tower::key_source::BoxError = error.into();
                tracing::warn!(prefix = %self.prefix, %error, "could not read where the source stands; following waits");
                return None;
            }
        };
        let reached = |position: &Watermark| {
            now.as_ref()
                .is_none_or(|now| source.has_reached(position, now))
        };
        if let Some(bytes) = stored {
            let position = Watermark::new(bytes);
            if reached(&position) {
                return Some(position);
            }
            tracing::error!(prefix = %self.prefix, ?position, ?now, "the follow position stored in Redis is past where the source stands: not following from it (forged, another source's, or the database was restored from an older backup)");
        }
        Some(
            filter
                .current_watermark()
                .filter(|mark| reached(mark))
                .unwrap_or_else(Watermark::origin),
        )
    }

    /// Steps while this instance holds the lease; returns when it lost it.
    async fn follow_as_holder<K, S>(
        &self,
        filter: &SharedFilter<K>,
        source: &S,
        how: &mut Follow,
        position: Watermark,
        lease: Duration,
    ) where
        K: ?Sized,
        S: KeySource + Send + Sync,
        S::Key: KeyFor<K>,
    {
        let renew = lease / 3;
        let mut follower = Follower::from_position(filter, source, position);
        let mut stored = follower.position().clone();
        let mut delay = Duration::ZERO;
        let mut failing = false;
        // The follow bound every view is held to while this instance follows (R5).
        let bound = (how.interval() + self.cfg.stale_after).as_millis() as u64;
        loop {
            how.wait(delay.min(renew)).await;
            // Before the step's first query: every row committed before it is read by the
            // step (the `KeySource::watermark` contract); a lower bound on Redis's clock.
            let started = self.claim();
            let stepped = follower.step().await;
            match &stepped {
                Ok(_) => {
                    if failing {
                        tracing::info!(prefix = %self.prefix, "following the source again");
                        failing = false;
                    }
                    delay = how.interval();
                }
                Err(error) => {
                    if !failing {
                        tracing::warn!(prefix = %self.prefix, %error, "following the source failed; retrying from the same position");
                        failing = true;
                    }
                    delay = (delay * 2).max(how.interval()).min(MAX_BACKOFF);
                }
            }
            // The new position is stored only once every key read up to it is in Redis; so
            // is the covered time, the step's start (R5).
            let moved = follower.position() != &stored;
            let publish_timeout = self.cfg.effective_publish_timeout();
            let persist = moved && self.outbox.wait_published(publish_timeout).await;
            let position = persist.then(|| follower.position().clone());
            let covered = started
                .filter(|_| stepped.is_ok() && (persist || !moved))
                .map(|started| (started, bound));
            match self
                .keep_follow_lease(lease, position.as_ref(), covered)
                .await
            {
                Ok(true) => {
                    if let Some(position) = position {
                        stored = position;
                    }
                }
                Ok(false) => {
                    tracing::info!(prefix = %self.prefix, "another instance follows the source now");
                    return;
                }
                // Redis does not answer: keep following locally (the inserts are queued for
                // it); the lease may expire meanwhile and another instance take over.
                Err(_) => {}
            }
        }
    }

    /// Renews the lease, storing the position and the covered time (`covered`, `bound`: ms)
    /// when given.
    async fn keep_follow_lease(
        &self,
        lease: Duration,
        position: Option<&Watermark>,
        covered: Option<(u64, u64)>,
    ) -> Result<bool, redis::RedisError> {
        let script = scripts::keep_follow_lease();
        let mut call = script.key(self.keys.follow_lease());
        call.key(self.keys.follow_position())
            .key(self.keys.follow_covered())
            .arg(self.id.to_string())
            .arg(lease.as_millis() as u64)
            .arg(position.map_or(&[][..], Watermark::as_bytes))
            .arg(covered.map_or_else(String::new, |(at, bound)| format!("{at} {bound}")))
            // The record outlives a dead holder by `member_timeout`: every view is stale
            // meanwhile (R5), and a fleet that stopped following falls back to the marks.
            .arg(self.cfg.member_timeout.as_millis() as u64);
        let kept: i64 = call.invoke_async(&mut self.conn.clone()).await?;
        Ok(kept == 1)
    }

    /// Hands the follow lease over if this instance holds it (on [`RedisSync::leave`](crate::RedisSync::leave)).
    pub(super) async fn release_follow_lease(&self) {
        if !self.following.swap(false, Relaxed) {
            return;
        }
        let released: Result<i64, _> = scripts::release_follow_lease()
            .key(self.keys.follow_lease())
            .arg(self.id.to_string())
            .invoke_async(&mut self.conn.clone())
            .await;
        if let Err(error) = released {
            tracing::debug!(prefix = %self.prefix, %error, "could not release the follow lease; it expires");
        }
    }
}
