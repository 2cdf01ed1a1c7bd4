//! Reconciliation: every `reconcile_every` (and at once after a reconnection, a
//! resubscription or an announcement), merge every local generation with Redis in both
//! directions — the segments that moved or were dirtied, or, in a full pass, every segment
//! whose digest differs ([`segments`](super::segments)); and the refill after Redis lost data.
//!
//! A refill tells a loss from a new fleet by a mark the fleet writes in Redis once the shared
//! filter holds the source's keys ([`Inner::mark_filled`]; the rule is in
//! [`RedisSync::refill_if_lost`](super::RedisSync::refill_if_lost)'s docs). Tests:
//! `a_new_fleet_seeds_the_shared_filter_without_a_warning` and
//! `redis_losing_its_data_under_a_running_fleet_is_logged_as_a_loss` (`tests/logs.rs`).

use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bloom_tower::key_source::KeySource;
use tokio::sync::Notify;

use super::inner::{Inner, lock, now_ms, random_id};
use super::segments::Pass;
#[cfg(feature = "metrics")]
use crate::names;
use crate::protocol::Shape;
use crate::scripts::{self, Joined};
use crate::{Error, Rebuilt, ReconcileReport};

/// How many times per `full_pass_every` a pass may compare every segment because Redis
/// evicted keys (see [`Inner::may_compare_evictions`]).
const EVICTION_COMPARES_PER_FULL_PASS: u32 = 6;

/// Reconciliation's own state: when the next pass runs, what it compares, and what the
/// passes reported.
#[derive(Default)]
pub(super) struct Reconciliation {
    /// Wakes the reconciler for a pass now.
    wake: Notify,
    /// Set after a reconnection, a resubscription or a carry-over: the next settled pass
    /// compares every segment's digest.
    full_pass_owed: AtomicBool,
    last_full_pass: Mutex<Option<Instant>>,
    /// Redis's dataset id as last seen (see `scripts::Joined::incarnation`).
    incarnation: Mutex<Option<String>>,
    /// When a pass last compared segments because Redis evicted keys, and whether the pass
    /// running now does (see [`Inner::may_compare_evictions`]).
    last_eviction_compare: Mutex<Option<Instant>>,
    eviction_compared: AtomicBool,
    /// Whether the Redis data the last pass reconciled with carries the fleet's mark that the
    /// shared filter was filled from the source (see [`Inner::mark_filled`]).
    filled: AtomicBool,
    /// Whether this instance holds every bit of a shared filter that carried the mark: it
    /// finished a pass against marked data, or filled it itself. Such an instance puts the
    /// mark back on data that lost it once a full pass pushed its bits there.
    holds_filled: AtomicBool,
    last: Mutex<Option<ReconcileReport>>,
    /// The first pass's report.
    joined: Mutex<Option<ReconcileReport>>,
}

/// The passes' reports, for [`RedisSync::stats`](super::RedisSync::stats).
pub(super) struct Passes {
    pub(super) last: Option<ReconcileReport>,
    pub(super) joined: Option<ReconcileReport>,
}

impl Reconciliation {
    /// Asks for a pass now.
    pub(super) fn wake(&self) {
        self.wake.notify_one();
    }

    /// The next settled pass compares every segment's digest.
    pub(super) fn owe_full_pass(&self) {
        self.full_pass_owed.store(true, Relaxed);
    }

    /// Records the pass that joined.
    pub(super) fn joined(&self, report: ReconcileReport) {
        *lock(&self.joined) = Some(report);
    }

    pub(super) fn report(&self) -> Passes {
        Passes {
            last: *lock(&self.last),
            joined: *lock(&self.joined),
        }
    }
}

/// What started a pass.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Trigger {
    /// The interval (or a caller asking for the usual pass): runs an owed or due full pass.
    Periodic,
    /// An event (reconnection, resubscription, announcement, a heartbeat asking for a
    /// pull): incremental unless Redis's data was replaced.
    Woken,
    /// A full pass, whatever is owed.
    Full,
}

impl Inner {
    /// Reconciles every interval, at once when woken, and every second while Redis is
    /// unreachable.
    pub(super) async fn reconciler(self: Arc<Self>) {
        loop {
            let wait = if self.connected() {
                self.cfg.reconcile_every
            } else {
                self.cfg.reconcile_every.min(Duration::from_secs(1))
            };
            let woken = tokio::select! {
                () = tokio::time::sleep(wait) => false,
                () = self.reconciliation.wake.notified() => true,
            };
            if self.reconciliation.full_pass_owed.load(Relaxed) {
                // After a disconnection or a resubscription (woken, or the periodic retry
                // that finds Redis back): let this instance's queued bits go out first — a
                // pass started now would push, and the others pull, what pub/sub is about
                // to carry. Bounded: Redis may still be away. (Not for announcements: a
                // rebuild waits for this instance's acknowledgement.)
                self.outbox.wait_published(self.cfg.heartbeat * 2).await;
            }
            let trigger = if woken {
                Trigger::Woken
            } else {
                Trigger::Periodic
            };
            let _ = self.reconcile_recorded(trigger).await;
        }
    }

    /// A pass, its outcome counted and reported (the connection state, the metrics).
    pub(super) async fn reconcile_recorded(
        &self,
        trigger: Trigger,
    ) -> Result<ReconcileReport, Error> {
        let result = self.reconcile(trigger).await;
        match &result {
            Ok(report) => self.reconciled(*report),
            Err(error) => self.reconcile_failed(error),
        }
        result
    }

    /// Whether this pass may compare segments because Redis evicted keys: at most
    /// [`EVICTION_COMPARES_PER_FULL_PASS`] times per `full_pass_every`. A Redis full of other
    /// keys under an `allkeys-*` policy evicts all the time; comparing at every pass would
    /// have Redis hash the whole filter for every instance every `reconcile_every`. Until
    /// an instance compares, it vouches for the data it last compared, and the fleet is stale.
    pub(super) fn may_compare_evictions(&self) -> bool {
        // Set only when a pass ends, so the same answer for every group of one pass.
        lock(&self.reconciliation.last_eviction_compare).is_none_or(|last| {
            last.elapsed() >= self.cfg.full_pass_every / EVICTION_COMPARES_PER_FULL_PASS
        })
    }

    /// This pass compares segments because Redis evicted keys: once it succeeds, the next
    /// such comparison waits.
    pub(super) fn compared_evictions(&self) {
        self.reconciliation.eviction_compared.store(true, Relaxed);
    }

    pub(super) fn reconciled(&self, report: ReconcileReport) {
        self.counters.reconciles.fetch_add(1, Relaxed);
        #[cfg(feature = "metrics")]
        {
            metrics::counter!(names::RECONCILES, "prefix" => self.prefix.clone(), "outcome" => "ok")
                .increment(1);
            let pass = if report.full { "full" } else { "incremental" };
            for (direction, bytes) in [
                ("pulled", report.bytes_pulled),
                ("pushed", report.bytes_pushed),
            ] {
                metrics::counter!(names::RECONCILE_BYTES, "prefix" => self.prefix.clone(), "direction" => direction, "pass" => pass)
                    .increment(bytes);
            }
            metrics::gauge!(names::GENERATION, "prefix" => self.prefix.clone())
                .set(self.generation() as f64);
        }
        *lock(&self.reconciliation.last) = Some(report);
        self.set_connected(true);
    }

    pub(super) fn reconcile_failed(&self, error: &Error) {
        self.counters.reconcile_errors.fetch_add(1, Relaxed);
        #[cfg(feature = "metrics")]
        metrics::counter!(names::RECONCILES, "prefix" => self.prefix.clone(), "outcome" => "error")
            .increment(1);
        match error {
            Error::Redis(_) => self.set_connected(false),
            _ => tracing::error!(prefix = %self.prefix, %error, "reconciliation failed"),
        }
    }

    /// The first pass of `connect`, tried again while Redis answers too late or drops the
    /// connection, until `join_timeout`: instances joining at once pull whole filters through
    /// one Redis, and a reply can wait behind theirs for longer than `response_timeout`.
    /// Each try is a full pass, so what an earlier one pulled matches and is not pulled
    /// again. Every other error is returned at once
    /// (`tests/join.rs` `a_join_that_times_out_while_redis_is_busy_tries_again`).
    pub(super) async fn join_pass(&self) -> Result<ReconcileReport, Error> {
        let deadline = Instant::now() + self.cfg.join_timeout;
        let mut backoff = Duration::from_millis(100);
        loop {
            match self.reconcile(Trigger::Periodic).await {
                Err(Error::Redis(error))
                    if (error.is_timeout() || error.is_connection_dropped())
                        && Instant::now() + backoff < deadline =>
                {
                    // Jittered, so instances that timed out together do not come back together.
                    let wait = backoff.mul_f64(1.0 + (random_id() % 1000) as f64 / 1000.0);
                    tracing::warn!(prefix = %self.prefix, %error, retry_in = ?wait, "joining: Redis answered too late (other instances may be pulling whole filters through it); trying again");
                    tokio::time::sleep(wait).await;
                    backoff = (backoff * 2).min(Duration::from_secs(2));
                }
                result => return result,
            }
        }
    }

    /// One pass: heartbeat in the member set, parameter check, generation transitions, then
    /// merge every local generation with Redis in both directions: a full pass (digests)
    /// when one is owed or due, otherwise the segments whose versions moved. A pass `woken`
    /// by an event, or the first after a reconnection, leaves an owed full pass to the next
    /// periodic one: right after a reconnection every instance is flushing its queue, and
    /// digests taken then differ on every segment those writes touch, which every instance
    /// would pull (the traffic after an outage: `benches/redis_traffic.rs`). Bits dropped
    /// from this instance's queue are in its dirty segments, pushed by any pass.
    pub(super) async fn reconcile(&self, trigger: Trigger) -> Result<ReconcileReport, Error> {
        let own = &self.reconciliation;
        let _transition = self.transition.lock().await;
        let started = Instant::now();
        own.eviction_compared.store(false, Relaxed);
        // Read before anything is pulled: what was owed before this instant is paid by
        // this pass, what comes later is not.
        let pull_started = self.freshness.pull_started();
        let (push_owed, push_covers) = self.outbox.push_owed();
        // An owed full pass waits for a periodic pass that starts while connected: the first
        // pass after a reconnection runs while every instance flushes its queue.
        let settled = trigger == Trigger::Periodic && self.connected();
        let full = trigger == Trigger::Full
            || (settled && own.full_pass_owed.swap(false, Relaxed))
            || match *lock(&own.last_full_pass) {
                None => true, // joining
                Some(last) => settled && last.elapsed() >= self.cfg.full_pass_every,
            };
        let result = self.reconcile_pass(full).await;
        if result.is_ok() && own.eviction_compared.load(Relaxed) {
            *lock(&own.last_eviction_compare) = Some(started);
        }
        match &result {
            Ok(_) if full => *lock(&own.last_full_pass) = Some(started),
            Ok(_) => {}
            Err(_) if full => own.owe_full_pass(),
            Err(_) => {}
        }
        let mut report = result?;
        // Every bit held here is now in this Redis data too (a first pass against it
        // compared every segment): our marks may vouch for it.
        if let Some(incarnation) = lock(&own.incarnation).clone() {
            // On a cluster, also every node the groups were read from (none on one Redis).
            let nodes = self.ledger.nodes();
            self.freshness
                .reconciled_with(&format!("{incarnation}|{nodes}"), report.bytes_pushed > 0);
        }
        self.freshness.pulled(pull_started);
        self.outbox.pushed(push_owed, push_covers);
        report.elapsed = started.elapsed();
        Ok(report)
    }

    async fn reconcile_pass(&self, full: bool) -> Result<ReconcileReport, Error> {
        let mut conn = self.conn.clone();
        let now = now_ms();
        redis::pipe()
            .cmd("ZADD")
            .arg(self.keys.members())
            .arg(now)
            .arg(self.id)
            .ignore()
            .cmd("ZREMRANGEBYSCORE")
            .arg(self.keys.members())
            .arg("-inf")
            .arg(now.saturating_sub(self.liveness_ms() * 10))
            .ignore()
            .query_async::<()>(&mut conn)
            .await?;
        let local = self.generation().max(1);
        let joined: Joined = scripts::join()
            .key(self.keys.config())
            .key(self.keys.generation())
            .key(self.keys.building())
            .arg(self.shape.bits)
            .arg(self.shape.hashes)
            .arg(self.shape.layout.to_string())
            .arg(self.shape.seed_hex())
            .arg(local)
            .arg(scripts::FORMAT)
            .arg(format!("{:016x}", random_id()))
            .arg(self.cfg.segment_bytes)
            .invoke_async(&mut conn)
            .await?;
        if joined.format != scripts::FORMAT {
            return Err(Error::ParameterMismatch {
                prefix: self.prefix.clone(),
                detail: format!(
                    "the keys under this prefix are in another key layout ({}, this version \
                     writes {}): give this version its own prefix",
                    if joined.format.is_empty() {
                        "unversioned"
                    } else {
                        &joined.format
                    },
                    scripts::FORMAT
                ),
            });
        }
        if joined.segment_bytes != self.cfg.segment_bytes.to_string() {
            return Err(Error::ParameterMismatch {
                prefix: self.prefix.clone(),
                detail: format!(
                    "segment_bytes differs (this instance {}, Redis {})",
                    self.cfg.segment_bytes, joined.segment_bytes
                ),
            });
        }
        if let Some(detail) = self.shape.mismatch(&joined.shape) {
            return Err(Error::ParameterMismatch {
                prefix: self.prefix.clone(),
                detail,
            });
        }
        if self.filter.current().as_plain().map(Shape::of) != Some(self.shape) {
            return Err(Error::ShapeChanged);
        }
        let mut full = full;
        // The dataset's id and the server's: a restart changes the second even when it loads
        // a dump that holds the same first one (an old dump lacks writes made since), and so
        // does an eviction on a server that may evict the filter's keys.
        let (incarnation, replaced) = {
            let current = format!("{}/{}", joined.incarnation, joined.server);
            let seen = lock(&self.reconciliation.incarnation).clone();
            match seen {
                Some(seen) if seen == current => (current, false),
                Some(seen) if scripts::same_process(&seen, &current) => {
                    if full {
                        // Compares every segment anyway.
                        (current, true)
                    } else if self.may_compare_evictions() {
                        tracing::warn!(prefix = %self.prefix, policy = %joined.evicting, "Redis evicted keys, or its eviction policy changed: comparing every segment");
                        self.compared_evictions();
                        (current, true)
                    } else {
                        // Go on vouching for the data last compared: every instance that
                        // compared since is stale until this one does.
                        tracing::debug!(prefix = %self.prefix, "Redis evicted keys again: comparing every segment waits for the next allowed pass");
                        (seen, false)
                    }
                }
                Some(_) => {
                    tracing::warn!(prefix = %self.prefix, "Redis restarted or its data was replaced, and may have lost bits: comparing every segment, pushing back what it lacks");
                    (current, true)
                }
                None => {
                    if !joined.evicting.is_empty() {
                        tracing::warn!(prefix = %self.prefix, policy = %joined.evicting, "Redis may evict this filter's keys (maxmemory with an allkeys policy): after an eviction, of any key, each instance compares every segment (at most six times per full_pass_every) and the fleet is stale until all have; give the filter a Redis, or a policy (noeviction, volatile-*), that does not evict them");
                    }
                    (current, true)
                }
            }
        };
        if replaced {
            // Versions seen here mean nothing there any more.
            self.ledger.forget_versions();
            full = true;
        }
        let remote = joined.generation.unwrap_or(local);
        let local = self.generation();
        if local == 0 {
            // Joining: adopt Redis's generation; our bits are merged into it below.
            lock(&self.state).generation = remote;
        } else if remote > local {
            self.switch_to(remote).await?;
        } else if remote < local {
            // Redis lost its state (restarted empty after we last saw a newer generation,
            // or restored from an old dump): ours is the newest known.
            tracing::warn!(prefix = %self.prefix, remote, local, "Redis is behind this instance's generation; restoring it");
            redis::cmd("SET")
                .arg(self.keys.generation())
                .arg(local)
                .query_async::<()>(&mut conn)
                .await?;
        }
        self.follow_building(joined.building, remote).await?;

        let mut report = ReconcileReport {
            full,
            ..ReconcileReport::default()
        };
        let generations: Vec<u64> = {
            let (serving, building) = lock(&self.state).generations();
            std::iter::once(serving).chain(building).collect()
        };
        self.ledger.retain(&generations);
        let pass = if full { Pass::Digests } else { Pass::Changed };
        for generation in generations {
            self.sync_generation(generation, pass, "", &mut report)
                .await?;
        }
        // Only now: a pass that failed before comparing every segment with this data leaves
        // the next one to find it replaced, and to compare them all.
        *lock(&self.reconciliation.incarnation) = Some(incarnation);
        let own = &self.reconciliation;
        if joined.filled {
            own.filled.store(true, Relaxed);
            own.holds_filled.store(true, Relaxed);
        } else if full && own.holds_filled.load(Relaxed) {
            // Data that lost the mark (restarted empty, or from a dump older than it) now
            // holds every bit of a filled filter: this pass pushed them.
            self.mark_filled().await;
        } else {
            own.filled.store(false, Relaxed);
        }
        Ok(report)
    }

    /// Marks the shared filter in Redis as filled from the source (a field of the config):
    /// after a rebuild, after [`refill_if_lost`](Self::refill_if_lost) found nothing missing,
    /// and by an instance that holds a filled filter once it pushed it into data that lost
    /// the mark. Best effort: the mark only tells a loss from a new fleet in the logs.
    pub(super) async fn mark_filled(&self) {
        let marked = redis::cmd("HSET")
            .arg(self.keys.config())
            .arg(scripts::FILLED)
            .arg(1)
            .query_async::<()>(&mut self.conn.clone())
            .await;
        match marked {
            Ok(()) => {
                self.reconciliation.filled.store(true, Relaxed);
                self.reconciliation.holds_filled.store(true, Relaxed);
            }
            Err(error) => {
                tracing::debug!(prefix = %self.prefix, %error, "could not mark the shared filter as filled")
            }
        }
    }

    /// See [`RedisSync::refill_if_lost`](super::RedisSync::refill_if_lost).
    pub(super) async fn refill_if_lost<S: KeySource + ?Sized>(
        &self,
        source: &S,
    ) -> Result<Option<Rebuilt>, Error> {
        let Some(expected) = source.count_hint() else {
            tracing::debug!(prefix = %self.prefix, "the key source gives no count: cannot tell whether Redis lost keys");
            return Ok(None);
        };
        // Our filter is Redis's bits OR ours after a pass.
        let report = self.reconcile(Trigger::Periodic).await?;
        self.reconciled(report);
        let held = self.filter.current().estimated_items();
        let filled = self.reconciliation.filled.load(Relaxed);
        if held >= expected as f64 * self.cfg.refill_below {
            if !filled {
                self.mark_filled().await;
            }
            return Ok(None);
        }
        let held = held.round() as u64;
        if filled {
            tracing::warn!(prefix = %self.prefix, held, expected, "the shared filter holds clearly fewer keys than the source: Redis lost data; rebuilding");
        } else {
            tracing::info!(prefix = %self.prefix, held, expected, "no shared filter in Redis yet (none was filled from the source under this prefix): seeding it from the source");
        }
        self.counters.refills.fetch_add(1, Relaxed);
        let outcome = self.rebuild(source, false).await?;
        if outcome == Rebuilt::Skipped {
            tracing::info!(prefix = %self.prefix, "another instance is rebuilding the shared filter: this instance switches to its generation when it is published");
        }
        Ok(Some(outcome))
    }
}
