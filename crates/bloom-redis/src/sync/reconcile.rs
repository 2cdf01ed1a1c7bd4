//! Reconciliation: every `reconcile_every` (and at once after a reconnection, a
//! resubscription or an announcement), merge every local generation with Redis in both
//! directions — the segments that moved or were dirtied, or, in a full pass, every segment
//! whose digest differs ([`segments`](super::segments)); and the refill after Redis lost data.

use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

use bloom_tower::key_source::KeySource;

use super::segments::Pass;
use super::{Inner, lock, now_ms};
#[cfg(feature = "metrics")]
use crate::names;
use crate::protocol::Shape;
use crate::scripts::{self, Joined};
use crate::{Error, Rebuilt, ReconcileReport};

/// How many times per `full_pass_every` a pass may compare every segment because Redis
/// evicted keys (see [`Inner::may_compare_evictions`]).
const EVICTION_COMPARES_PER_FULL_PASS: u32 = 6;

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
            let wait = if self.connected.load(Relaxed) {
                self.cfg.reconcile_every
            } else {
                self.cfg.reconcile_every.min(Duration::from_secs(1))
            };
            let woken = tokio::select! {
                () = tokio::time::sleep(wait) => false,
                () = self.wake_reconcile.notified() => true,
            };
            if self.full_pass_owed.load(Relaxed) {
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
            match self.reconcile(trigger).await {
                Ok(report) => self.reconciled(report),
                Err(error) => self.reconcile_failed(&error),
            }
        }
    }

    /// Whether this pass may compare segments because Redis evicted keys: at most
    /// [`EVICTION_COMPARES_PER_FULL_PASS`] times per `full_pass_every`. A Redis full of other
    /// keys under an `allkeys-*` policy evicts all the time; comparing at every pass would
    /// have Redis hash the whole filter for every instance every `reconcile_every`. Until
    /// an instance compares, it vouches for the data it last compared, and the fleet is stale.
    pub(super) fn may_compare_evictions(&self) -> bool {
        // Set only when a pass ends, so the same answer for every group of one pass.
        lock(&self.last_eviction_compare).is_none_or(|last| {
            last.elapsed() >= self.cfg.full_pass_every / EVICTION_COMPARES_PER_FULL_PASS
        })
    }

    /// This pass compares segments because Redis evicted keys: once it succeeds, the next
    /// such comparison waits.
    pub(super) fn compared_evictions(&self) {
        self.eviction_compared.store(true, Relaxed);
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
        *lock(&self.last_reconcile) = Some(report);
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

    /// One pass: heartbeat in the member set, parameter check, generation transitions, then
    /// merge every local generation with Redis in both directions: a full pass (digests)
    /// when one is owed or due, otherwise the segments whose versions moved. A pass `woken`
    /// by an event, or the first after a reconnection, leaves an owed full pass to the next
    /// periodic one: right after a reconnection every instance is flushing its queue, and
    /// digests taken then differ on every segment those writes touch (measured: 365 MiB
    /// pulled by three instances after an outage). Bits dropped from this instance's queue
    /// are in its dirty segments, pushed by any pass.
    pub(super) async fn reconcile(&self, trigger: Trigger) -> Result<ReconcileReport, Error> {
        let _transition = self.transition.lock().await;
        let started = Instant::now();
        self.eviction_compared.store(false, Relaxed);
        // Read before anything is pulled: what was owed before this instant is paid by
        // this pass, what comes later is not.
        let pull_started = self.freshness.pull_started();
        let (push_owed, push_covers) = self.outbox.push_owed();
        // An owed full pass waits for a periodic pass that starts while connected: the first
        // pass after a reconnection runs while every instance flushes its queue.
        let settled = trigger == Trigger::Periodic && self.connected.load(Relaxed);
        let full = trigger == Trigger::Full
            || (settled && self.full_pass_owed.swap(false, Relaxed))
            || match *lock(&self.last_full_pass) {
                None => true, // joining
                Some(last) => settled && last.elapsed() >= self.cfg.full_pass_every,
            };
        let result = self.reconcile_pass(full).await;
        if result.is_ok() && self.eviction_compared.load(Relaxed) {
            *lock(&self.last_eviction_compare) = Some(started);
        }
        match &result {
            Ok(_) if full => *lock(&self.last_full_pass) = Some(started),
            Ok(_) => {}
            Err(_) if full => self.full_pass_owed.store(true, Relaxed),
            Err(_) => {}
        }
        let mut report = result?;
        // Every bit held here is now in this Redis data too (a first pass against it
        // compared every segment): our heartbeats may vouch for it.
        if let Some(incarnation) = lock(&self.incarnation).clone() {
            // On a cluster, also every node the groups were read from (none on one Redis).
            let nodes = self.ledger.nodes();
            self.freshness
                .reconciled_with(&format!("{incarnation}|{nodes}"));
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
            .arg(format!("{:016x}", super::random_id()))
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
            let seen = lock(&self.incarnation).clone();
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
                    tracing::warn!(prefix = %self.prefix, "Redis restarted or its data was replaced: comparing every segment");
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
            let state = lock(&self.state);
            std::iter::once(state.generation)
                .chain(state.building.as_ref().map(|b| b.generation))
                .collect()
        };
        self.ledger.retain(&generations);
        let pass = if full { Pass::Digests } else { Pass::Changed };
        for generation in generations {
            self.sync_generation(generation, pass, "", &mut report)
                .await?;
        }
        // Only now: a pass that failed before comparing every segment with this data leaves
        // the next one to find it replaced, and to compare them all.
        *lock(&self.incarnation) = Some(incarnation);
        Ok(report)
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
        if held >= expected as f64 * self.cfg.refill_below {
            return Ok(None);
        }
        tracing::warn!(prefix = %self.prefix, held = held.round() as u64, expected, "the shared filter holds clearly fewer keys than the source: Redis lost data; rebuilding");
        self.counters.refills.fetch_add(1, Relaxed);
        self.rebuild(source, false).await.map(Some)
    }
}
