//! Running a rebuild: take the lock, announce the generation, wait for every live instance
//! to double-write it, seal, stream the source, check the result, upload, switch. The lock
//! and the building marker are refreshed throughout, so a source of any length rebuilds.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

use bloom_tower::key_source::KeySource;

use super::inner::{Inner, lock, now_ms, random_id};
use super::segments::Pass;
use crate::protocol::{self, Kind};
use crate::scripts::{self, Lock};
use crate::{Error, Rebuilt, ReconcileReport};

impl Inner {
    /// See [`RedisSync::rebuild_every`](super::RedisSync::rebuild_every): a refill check
    /// first, then a rebuild of the fleet every `interval`, forever.
    ///
    /// **One scheduled rebuild per fleet per interval, whatever the fleet's size.** Before a
    /// scheduled rebuild an instance claims the interval in Redis (`SET {p}:rebuild:claim NX
    /// PX interval`); only the instance that claims it rebuilds, and every other one sleeps
    /// until the claim expires (plus jitter), then tries to claim the next. So the fleet
    /// rebuilds about once per interval, by whichever instance's timer fires first
    /// (`tests/fleet.rs` `five_instances_scheduled_to_rebuild_rebuild_once_per_interval`).
    /// If Redis does not answer, the instance waits an interval and tries again.
    pub(super) async fn rebuild_every<S: KeySource>(
        self: Arc<Self>,
        interval: Duration,
        source: S,
    ) {
        if let Err(error) = self.refill_if_lost(&source).await {
            tracing::warn!(prefix = %self.prefix, %error, "could not check the shared filter against the source");
        }
        let mut wait = interval;
        loop {
            // Jitter so that instances whose waits end together do not all race for the claim.
            let jitter = Duration::from_millis(random_id() % 1000);
            tokio::time::sleep(wait + jitter).await;
            wait = match self.claim_rebuild(interval).await {
                Ok(Claim::Ours) => {
                    match self.rebuild(&source, false).await {
                        Ok(outcome) => {
                            tracing::debug!(prefix = %self.prefix, ?outcome, "scheduled rebuild")
                        }
                        Err(error) => tracing::warn!(
                            prefix = %self.prefix,
                            %error,
                            "scheduled rebuild failed; the previous generation keeps serving"
                        ),
                    }
                    interval
                }
                Ok(Claim::Taken { expires_in }) => expires_in.min(interval),
                Err(error) => {
                    tracing::debug!(prefix = %self.prefix, %error, "could not claim the scheduled rebuild; trying again in an interval");
                    interval
                }
            };
        }
    }

    /// Claims the fleet's scheduled rebuild for `interval` (see [`rebuild_every`](Self::rebuild_every)).
    async fn claim_rebuild(&self, interval: Duration) -> Result<Claim, Error> {
        let mut conn = self.conn.clone();
        let ms = u64::try_from(interval.as_millis())
            .unwrap_or(u64::MAX)
            .max(1);
        let claimed: Option<String> = redis::cmd("SET")
            .arg(self.keys.rebuild_claim())
            .arg(format!("{:016x}", self.id))
            .arg("NX")
            .arg("PX")
            .arg(ms)
            .query_async(&mut conn)
            .await?;
        if claimed.is_some() {
            return Ok(Claim::Ours);
        }
        let left: i64 = redis::cmd("PTTL")
            .arg(self.keys.rebuild_claim())
            .query_async(&mut conn)
            .await?;
        // -2: expired since; -1: no expiry (set by hand): try again in an interval.
        let expires_in = match u64::try_from(left) {
            Ok(left) => Duration::from_millis(left),
            Err(_) if left == -2 => Duration::ZERO,
            Err(_) => interval,
        };
        Ok(Claim::Taken { expires_in })
    }

    pub(super) async fn rebuild<S: KeySource + ?Sized>(
        &self,
        source: &S,
        force: bool,
    ) -> Result<Rebuilt, Error> {
        let mut conn = self.conn.clone();
        let fence: u64 = redis::cmd("INCR")
            .arg(self.keys.fence())
            .query_async(&mut conn)
            .await?;
        let token = format!("{:016x}:{fence}", self.id);
        let locked: Option<String> = redis::cmd("SET")
            .arg(self.keys.lock())
            .arg(&token)
            .arg("NX")
            .arg("PX")
            .arg(self.ttl_ms())
            .query_async(&mut conn)
            .await?;
        if locked.is_none() {
            return Ok(Rebuilt::Skipped);
        }
        // The rebuild races its keeper: a keeper that finds the lock gone ends the rebuild
        // at once (another instance may own the next generation by now).
        let result = tokio::select! {
            result = self.rebuild_locked(source, &token, fence, force) => result,
            lost = self.keep_lock(&token) => Err(lost),
        };
        if result.is_err() {
            {
                let mut state = lock(&self.state);
                if state.building.as_ref().is_some_and(|b| b.mine) {
                    state.building = None;
                }
            }
            let _ = scripts::abort()
                .key(self.keys.lock())
                .key(self.keys.building())
                .arg(&token)
                .invoke_async::<Lock>(&mut conn)
                .await;
        }
        result
    }

    /// Refreshes the lock and the building marker every third of `lock_ttl`, for as long as
    /// the rebuild runs; returns only when the lock is lost ([`Error::Fenced`]). A refresh that
    /// cannot reach Redis is retried: the lock then expires on its own if Redis stays away.
    async fn keep_lock(&self, token: &str) -> Error {
        let mut conn = self.conn.clone();
        let every = self.cfg.lock_ttl / 3;
        loop {
            tokio::time::sleep(every).await;
            let building = lock(&self.state)
                .building
                .as_ref()
                .filter(|b| b.mine)
                .map(|b| b.generation);
            let refreshed = scripts::refresh()
                .key(self.keys.lock())
                .key(self.keys.building())
                .key(self.keys.sealed(building.unwrap_or(0)))
                .arg(token)
                .arg(self.ttl_ms())
                .arg(self.ttl_ms().saturating_mul(10))
                .invoke_async::<Lock>(&mut conn)
                .await;
            match refreshed {
                Ok(Lock::Held) => {}
                Ok(Lock::Lost) => return Error::Fenced,
                Err(error) => {
                    tracing::debug!(prefix = %self.prefix, %error, "could not refresh the rebuild lock")
                }
            }
        }
    }

    /// `token` holds the lock; `fence`, its number, fences the writes into the new
    /// generation's groups.
    async fn rebuild_locked<S: KeySource + ?Sized>(
        &self,
        source: &S,
        token: &str,
        fence: u64,
        force: bool,
    ) -> Result<Rebuilt, Error> {
        let mut conn = self.conn.clone();
        let generation = self.begin(token, fence).await?;
        self.wait_for_acks(generation).await?;
        let sealed: Lock = scripts::seal()
            .key(self.keys.lock())
            .key(self.keys.sealed(generation))
            .key(self.keys.open(generation))
            .arg(token)
            .arg(self.ttl_ms().saturating_mul(10))
            .arg(self.ttl_ms())
            .invoke_async(&mut conn)
            .await?;
        if sealed == Lock::Lost {
            return Err(Error::Fenced);
        }

        // Stream the source into the new generation.
        let next = self.filter_of(generation).ok_or(Error::Fenced)?;
        let read = next
            .fill_from(source)
            .await
            .map_err(|(keys, source)| Error::Source { keys, source })?;
        self.check_size(&next, force)?;
        drop(next);

        // Upload (fenced), publish, switch.
        let _transition = self.transition.lock().await;
        let mut report = ReconcileReport::default();
        self.sync_generation(
            generation,
            Pass::Everything,
            &fence.to_string(),
            &mut report,
        )
        .await?;
        let old = self.generation();
        let switched: Lock = scripts::switch()
            .key(self.keys.lock())
            .key(self.keys.generation())
            .key(self.keys.building())
            .arg(token)
            .arg(generation)
            .arg(self.keys.channel())
            .arg(protocol::encode(Kind::Switched, self.id, generation, &[]))
            .invoke_async(&mut conn)
            .await?;
        if switched == Lock::Lost {
            return Err(Error::Fenced);
        }
        // The old generation serves no one once every instance switched: a grace period,
        // then Redis drops it. Best effort: a failure leaves keys that expire on no one's
        // watch, not a wrong answer.
        let grace = self.liveness_ms().saturating_mul(10);
        if let Err(error) = self.expire_groups(old, grace).await {
            tracing::warn!(prefix = %self.prefix, old, %error, "could not set the old generation to expire");
        }
        self.switch_to(generation).await?;
        self.mark_filled().await;
        self.counters.rebuilds.fetch_add(1, Relaxed);
        tracing::info!(prefix = %self.prefix, generation, keys = read, "rebuilt and published a new generation");
        Ok(Rebuilt::Rebuilt {
            keys: read,
            generation,
        })
    }

    /// Empties the next generation's groups in Redis, starts double-writing it here, and
    /// announces it (fenced).
    async fn begin(&self, token: &str, fence: u64) -> Result<u64, Error> {
        let mut conn = self.conn.clone();
        let _transition = self.transition.lock().await;
        let remote: Option<u64> = redis::cmd("GET")
            .arg(self.keys.generation())
            .query_async(&mut conn)
            .await?;
        // A generation number no rebuild can follow (a forged `gen`) fails the rebuild; the
        // serving generation stays.
        let generation = remote
            .unwrap_or(0)
            .max(self.generation())
            .checked_add(1)
            .ok_or(Error::Config(
                "the generation number stored in Redis is at its largest value; no rebuild can follow it",
            ))?;
        // Before the announcement: once announced, instances write into these groups.
        self.reset_groups(generation, fence).await?;
        {
            let mut state = lock(&self.state);
            state.building = None; // any other is abandoned: we hold the lock
            state.building = Some(self.start_build(generation, true, true)?);
        }
        let begun: Lock = scripts::begin()
            .key(self.keys.lock())
            .key(self.keys.building())
            .key(self.keys.acks(generation))
            .key(self.keys.sealed(generation))
            .key(self.keys.open(generation))
            .arg(token)
            .arg(generation)
            .arg(self.ttl_ms())
            .arg(self.keys.channel())
            .arg(protocol::encode(Kind::Building, self.id, generation, &[]))
            .arg(self.ttl_ms().saturating_mul(10))
            .invoke_async(&mut conn)
            .await?;
        if begun == Lock::Lost {
            return Err(Error::Fenced);
        }
        Ok(generation)
    }

    /// Waits (at most `ack_timeout`) until every live instance double-writes `generation`.
    async fn wait_for_acks(&self, generation: u64) -> Result<(), Error> {
        let mut conn = self.conn.clone();
        let waited = Instant::now();
        loop {
            let live: Vec<u64> = redis::cmd("ZRANGEBYSCORE")
                .arg(self.keys.members())
                .arg(now_ms().saturating_sub(self.liveness_ms()))
                .arg("+inf")
                .query_async(&mut conn)
                .await?;
            let acked: HashSet<u64> = redis::cmd("SMEMBERS")
                .arg(self.keys.acks(generation))
                .query_async(&mut conn)
                .await?;
            let missing = live
                .iter()
                .filter(|&&id| id != self.id && !acked.contains(&id))
                .count();
            if missing == 0 {
                return Ok(());
            }
            if waited.elapsed() > self.cfg.ack_timeout {
                tracing::warn!(prefix = %self.prefix, generation, missing, "instances did not start double-writing in time; they will carry their bits over");
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// Refuses a new generation far smaller than the serving one (a source pointed at the
    /// wrong or an empty table), unless forced.
    fn check_size(
        &self,
        next: &bloom_tower::shared_filter::CurrentFilter,
        force: bool,
    ) -> Result<(), Error> {
        let serving = self.filter.current().estimated_items();
        let rebuilt = next.estimated_items();
        let min_fraction = self.cfg.min_rebuild_fraction;
        if force || rebuilt >= serving * min_fraction {
            return Ok(());
        }
        self.count_refused_switch();
        let (serving, rebuilt) = (serving.round() as u64, rebuilt.round() as u64);
        tracing::error!(prefix = %self.prefix, serving, rebuilt, min_fraction, "refused to switch to a rebuilt filter far smaller than the serving one; the serving generation stays");
        Err(Error::Shrunk {
            serving,
            rebuilt,
            min_fraction,
        })
    }
}

/// Whether this instance claimed the fleet's scheduled rebuild for the interval.
enum Claim {
    Ours,
    /// Another instance did: its claim expires in `expires_in`.
    Taken {
        expires_in: Duration,
    },
}
