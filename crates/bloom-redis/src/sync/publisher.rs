//! This instance's side of propagation: queue the bits of every insert (and the digest of
//! every committed key), write them to Redis and publish them in batches, each batch followed
//! by a mark round (see [`freshness`](super::freshness)); and a mark round every `heartbeat`
//! when idle.
//!
//! A mark means "every insert I made before it was published before it": a batch that
//! fails stays queued and is retried before anything newer, so no mark ever overtakes
//! unpublished bits. If the queue overflows while Redis is unreachable, its bits are dropped
//! (they are in the local filter): this instance stops vouching until reconciliation has
//! pushed them into the segments, then vouches again with a bumped *resync epoch* that tells
//! the others to pull before trusting it.

use std::collections::BTreeMap;
use std::sync::atomic::{
    AtomicBool, AtomicU64,
    Ordering::{AcqRel, Acquire, Relaxed, Release},
};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bloom_core::BloomFilter;
use tokio::sync::{Notify, watch};

use super::freshness::RoundReply;
use super::inner::{Inner, lock};
use crate::Error;
#[cfg(feature = "metrics")]
use crate::names;
use crate::protocol::{self, Kind, Shape};
use crate::scripts;

/// Bits kept for a retry while Redis does not answer (8 MiB); beyond, the queue is dropped
/// and reconciliation pushes the segments it touched instead.
const MAX_QUEUED_BITS: usize = 1 << 20;

/// Committed keys' digests kept while Redis does not answer; beyond, the oldest are dropped
/// (their negative-cache entries then expire by their TTL).
const MAX_QUEUED_DIGESTS: usize = 1 << 16;

/// What is waiting to be published, and how far publishing got.
pub(super) struct Outbox {
    queue: Mutex<Queue>,
    wake: Notify,
    /// The highest insert number published (with everything before it).
    published: watch::Sender<u64>,
    /// Set when queued bits were dropped: no mark until reconciliation pushed them.
    needs_push: AtomicBool,
    /// Bumped each time such a push completes; announced in the roster.
    epoch: AtomicU64,
    /// Redis's time in the last mark round's reply, and when that reply arrived: Redis's
    /// time has passed `redis_ms + arrived.elapsed()` since (the claim of the next mark).
    clock: Mutex<Option<(u64, Instant)>>,
    /// The follow bound (ms) the last mark round read; 0: the fleet follows no source.
    pub(super) follow_bound: AtomicU64,
    /// What the mark rounds read of the fleet's follower ([`follower`](super::follower)).
    pub(super) follow_lag: super::follower::FollowLag,
}

impl Default for Outbox {
    fn default() -> Self {
        Self {
            queue: Mutex::new(Queue::default()),
            wake: Notify::new(),
            published: watch::Sender::new(0),
            needs_push: AtomicBool::new(false),
            epoch: AtomicU64::new(0),
            clock: Mutex::new(None),
            follow_bound: AtomicU64::new(0),
            follow_lag: super::follower::FollowLag::default(),
        }
    }
}

/// The next batch, and the inserts numbered so far (never reset: `published` compares
/// against it).
#[derive(Default)]
struct Queue {
    batch: Batch,
    numbered: u64,
}

/// Queued work: bit indices per generation, digests, and the number of the last insert.
#[derive(Default)]
struct Batch {
    bits: BTreeMap<u64, Vec<u64>>,
    digests: Vec<u64>,
    /// Inserts are numbered from 1 as they are queued; this is the newest one in the batch.
    last_insert: u64,
    /// Bits held, over every generation.
    len: usize,
    /// When the oldest insert in the batch was queued (for the publish-latency histogram).
    oldest: Option<Instant>,
}

impl Batch {
    /// Appends `newer` (queued after `self`).
    fn append(&mut self, newer: Batch) {
        for (generation, bits) in newer.bits {
            self.bits.entry(generation).or_default().extend(bits);
        }
        self.digests.extend(newer.digests);
        self.last_insert = self.last_insert.max(newer.last_insert);
        self.len += newer.len;
        self.oldest = match (self.oldest, newer.oldest) {
            (Some(ours), Some(theirs)) => Some(ours.min(theirs)),
            (ours, theirs) => ours.or(theirs),
        };
    }
}

impl Outbox {
    /// The newest insert queued so far.
    fn queued(&self) -> u64 {
        lock(&self.queue).numbered
    }

    /// Waits until every insert queued before the call is published; `false` after `limit`.
    pub(super) async fn wait_published(&self, limit: Duration) -> bool {
        let target = self.queued();
        let mut published = self.published.subscribe();
        matches!(
            tokio::time::timeout(limit, published.wait_for(|&done| done >= target)).await,
            Ok(Ok(_))
        )
    }

    /// Reconciliation pushed every local bit into the segments: if queued bits had been
    /// dropped before that push began (`needed`), heartbeats resume with a new epoch, and the
    /// inserts up to `upto` count as published.
    pub(super) fn pushed(&self, needed: bool, upto: u64) {
        if needed && self.needs_push.swap(false, AcqRel) {
            self.epoch.fetch_add(1, Relaxed);
            self.published.send_if_modified(|done| {
                let advanced = upto > *done;
                *done = (*done).max(upto);
                advanced
            });
        }
    }

    /// Whether a push is owed, and the newest insert it covers: read before a push begins.
    pub(super) fn push_owed(&self) -> (bool, u64) {
        // Acquire: the dirty marks made before the flag was set are seen by the push.
        (self.needs_push.load(Acquire), self.queued())
    }
}

impl Inner {
    /// The insert hook: queue the key's bits for every generation this instance writes.
    pub(super) fn on_insert(&self, key: &[u8]) {
        let current = self.filter.current();
        let Some(current) = current.as_plain().filter(|c| Shape::of(c) == self.shape) else {
            return; // reported by the next reconciliation
        };
        let bits = bits_of(current, key);
        {
            let state = lock(&self.state);
            let mut queue = lock(&self.outbox.queue);
            queue.numbered += 1;
            let number = queue.numbered;
            let batch = &mut queue.batch;
            let (serving, building) = state.generations();
            for generation in std::iter::once(serving).chain(building) {
                batch
                    .bits
                    .entry(generation)
                    .or_default()
                    .extend_from_slice(&bits);
                batch.len += bits.len();
            }
            batch.last_insert = number;
            batch.oldest.get_or_insert_with(Instant::now);
        }
        self.outbox.wake.notify_one();
    }

    /// The commit hook: queue the key's digest, so the other instances drop any "not found"
    /// they cached for it (the digest, not the key, goes over the wire). It is numbered like
    /// an insert: [`RedisSync::visible`](super::RedisSync::visible) waits for it.
    pub(super) fn on_commit(&self, key: &[u8]) {
        let digest = self.filter.key_digest(key);
        {
            let mut queue = lock(&self.outbox.queue);
            queue.numbered += 1;
            let number = queue.numbered;
            let batch = &mut queue.batch;
            if batch.digests.len() >= MAX_QUEUED_DIGESTS {
                batch.digests.remove(0);
            }
            batch.digests.push(digest);
            batch.last_insert = number;
        }
        self.outbox.wake.notify_one();
    }

    /// Writes queued bits to Redis, publishes them, then a heartbeat: at once when woken, and
    /// a heartbeat alone every `heartbeat` otherwise.
    pub(super) async fn publisher(self: Arc<Self>) {
        let mut failed: Option<Batch> = None;
        // The first round at once: joining waits for it.
        let mut first = true;
        loop {
            if !std::mem::take(&mut first) {
                tokio::select! {
                    () = self.outbox.wake.notified() => {}
                    () = tokio::time::sleep(self.cfg.heartbeat) => {}
                }
            }
            let retrying = failed.is_some();
            let mut batch = failed.take().unwrap_or_default();
            // Before the batch is taken: every insert made before it is in the batch or was
            // published before.
            let claim = self.claim();
            batch.append(std::mem::take(&mut lock(&self.outbox.queue).batch));
            let heartbeat = !self.outbox.needs_push.load(Acquire);
            if batch.bits.is_empty() && batch.digests.is_empty() && !self.cfg.pubsub {
                continue;
            }
            // After a failure, a PING first, and the batch only once Redis answers it: a
            // write that timed out against a hung Redis stays in its socket buffer, and
            // resending the whole batch at every retry would queue copies that Redis runs,
            // all of them, before any fresh write when it wakes. (How long a fleet takes to
            // converge after a hang: `writers_and_readers_through_every_fault`, `tests/fleet.rs`.)
            let result = if retrying {
                match self.ping().await {
                    Ok(()) => self.publish_batch(&mut batch, heartbeat, claim).await,
                    Err(error) => Err(error),
                }
            } else {
                self.publish_batch(&mut batch, heartbeat, claim).await
            };
            match result {
                Ok(()) => {
                    if !batch.bits.is_empty() {
                        self.counters.published.fetch_add(1, Relaxed);
                        #[cfg(feature = "metrics")]
                        if let Some(oldest) = batch.oldest {
                            metrics::histogram!(names::PUBLISH_LATENCY, "prefix" => self.prefix.clone())
                                .record(oldest.elapsed());
                        }
                    }
                    if !self.outbox.needs_push.load(Acquire) {
                        self.outbox.published.send_if_modified(|done| {
                            let advanced = batch.last_insert > *done;
                            *done = (*done).max(batch.last_insert);
                            advanced
                        });
                    }
                    self.freshness.publishing(true);
                }
                Err(error) => {
                    self.counters.publish_errors.fetch_add(1, Relaxed);
                    tracing::debug!(prefix = %self.prefix, %error, "could not publish; retrying, and reconciliation will push");
                    self.freshness.publishing(false);
                    self.set_connected(false);
                    self.reconciliation.wake();
                    if batch.len > MAX_QUEUED_BITS {
                        // The bits are in the local filter: their segments are marked dirty,
                        // the next reconciliation pushes them, after which heartbeats resume
                        // with a new epoch.
                        for (&generation, bits) in &batch.bits {
                            self.ledger
                                .mark_bits_dirty(generation, bits, self.cfg.segment_bytes);
                        }
                        self.outbox.needs_push.store(true, Release);
                        batch.bits.clear();
                        batch.len = 0;
                        batch.oldest = None;
                    }
                    failed = Some(batch);
                    // Do not spin against a Redis that refuses at once.
                    tokio::time::sleep(self.cfg.heartbeat).await;
                }
            }
        }
    }

    async fn ping(&self) -> Result<(), Error> {
        let mut conn = self.conn.clone();
        redis::cmd("PING").query_async::<()>(&mut conn).await?;
        Ok(())
    }

    /// Writes the batch's bits (one atomic script per group: the bits and the version
    /// bumps), then publishes them with the versions they left and the commits, then runs a
    /// mark round (vouching for `claim` if `vouch`), in that order on one node: a receiver of
    /// anything the round publishes has received everything before it, and finds the bits in
    /// Redis.
    async fn publish_batch(
        &self,
        batch: &mut Batch,
        vouch: bool,
        claim: Option<u64>,
    ) -> Result<(), Error> {
        let mut writes = Vec::new();
        for (&generation, bits) in &mut batch.bits {
            bits.sort_unstable();
            bits.dedup();
            let mut groups: BTreeMap<u64, BTreeMap<u64, Vec<u64>>> = BTreeMap::new();
            for &bit in bits.iter() {
                let (segment, offset) = protocol::redis_bit(bit, self.cfg.segment_bytes);
                groups
                    .entry(protocol::group_of(segment))
                    .or_default()
                    .entry(segment)
                    .or_default()
                    .push(offset);
            }
            for (group, segments) in groups {
                writes.push((generation, group, segments));
            }
        }
        let written = futures_util::future::try_join_all(writes.iter().map(
            |(generation, group, segments)| async move {
                let script = scripts::set_bits();
                let mut invocation = script.key(self.keys.versions(*generation, *group));
                for &segment in segments.keys() {
                    invocation.key(self.keys.segment(*generation, segment));
                }
                for (&segment, offsets) in segments {
                    // Offsets in a segment fit 32 bits (a segment is at most 512 MiB).
                    let packed: Vec<u8> = offsets
                        .iter()
                        .flat_map(|&offset| (offset as u32).to_le_bytes())
                        .collect();
                    invocation.arg(segment).arg(packed);
                }
                let mut conn = self.conn.clone();
                let mut after: Vec<u64> = invocation.invoke_async(&mut conn).await?;
                let all = after.pop().unwrap_or(0);
                let segments: Vec<(u64, u64)> = segments.keys().copied().zip(after).collect();
                Ok::<_, Error>((*generation, (*group, all), segments))
            },
        ))
        .await?;
        // Per generation: the versions the writes left.
        let mut messages: BTreeMap<u64, protocol::BitsMessage> = BTreeMap::new();
        for (generation, group, segments) in written {
            let message = messages.entry(generation).or_default();
            message.groups.push(group);
            message.segments.extend(segments);
        }
        if self.cfg.pubsub {
            let channel = self.keys.channel();
            let mut pipe = redis::pipe();
            for (&generation, bits) in &batch.bits {
                let message = messages.entry(generation).or_default();
                message.bits.clone_from(bits);
                let payload =
                    protocol::encode(Kind::Bits, self.id, generation, &message.to_words());
                pipe.cmd("PUBLISH").arg(&channel).arg(payload).ignore();
            }
            if !batch.digests.is_empty() {
                let message = protocol::encode(Kind::Committed, self.id, 0, &batch.digests);
                pipe.cmd("PUBLISH").arg(&channel).arg(message).ignore();
            }
            // The round's key routes the whole pipeline, on a cluster, to the `{prefix}`
            // slot's node: what it publishes reaches every subscriber in this order.
            let (seq, nonce) = self.freshness.round_sent();
            let (vouched, pushed) = self.freshness.vouched();
            let script = scripts::mark();
            let mut round = self.roster_invocation(&script);
            round
                .key(self.keys.follow_covered())
                .arg(claim.map_or_else(String::new, |claim| claim.to_string()))
                .arg(if vouch { "1" } else { "0" })
                .arg(self.cfg.member_timeout.as_millis() as u64)
                .arg(self.outbox.epoch.load(Relaxed))
                .arg(format!("{vouched:016x}"))
                .arg(&channel)
                .arg(self.keys.ping_channel(self.id))
                .arg(seq)
                .arg(if pushed { "1" } else { "0" })
                .arg(format!("{nonce:016x}"))
                .arg(self.cfg.stale_after.as_millis() as u64);
            pipe.invoke_script(&round);
            let mut conn = self.conn.clone();
            let reply: RoundReply = match pipe.query_async::<(RoundReply,)>(&mut conn).await {
                Ok((reply,)) => reply,
                // Redis does not hold the script (restarted, or flushed its scripts): the
                // messages above were published; the round runs alone, after them.
                Err(error) if error.kind() == redis::ErrorKind::NoScriptError => {
                    round.invoke_async(&mut conn).await?
                }
                Err(error) => return Err(error.into()),
            };
            *lock(&self.outbox.clock) = Some((reply.now, Instant::now()));
            let bound = reply.covered.map_or(0, |(_, bound)| bound);
            self.outbox.follow_bound.store(bound, Relaxed);
            self.record_follow_lag(reply.now, reply.covered);
            self.freshness.round_replied(seq, reply);
        }
        // What this instance holds of those segments moved with its own writes.
        for (generation, message) in &messages {
            self.ledger
                .advance(*generation, &message.groups, &message.segments);
        }
        Ok(())
    }

    /// `script` over the marks, the roster and its version, with this instance's id first.
    fn roster_invocation<'a>(&self, script: &'a redis::Script) -> redis::ScriptInvocation<'a> {
        let mut invocation = script.prepare_invoke();
        invocation
            .key(self.keys.marks())
            .key(self.keys.roster())
            .key(self.keys.roster_version())
            .arg(format!("{:016x}", self.id));
        invocation
    }

    /// The claim of a mark round sent now: a time Redis's clock has passed (`None` before
    /// the first reply).
    pub(super) fn claim(&self) -> Option<u64> {
        lock(&self.outbox.clock)
            .map(|(redis_ms, arrived)| redis_ms + arrived.elapsed().as_millis() as u64)
    }

    /// Leaves the roster, telling the others to stop waiting for this instance (best effort,
    /// bounded).
    pub(super) async fn publish_leaving(&self) {
        if !self.cfg.pubsub {
            return;
        }
        let mut conn = self.conn.clone();
        let script = scripts::leave();
        let mut leave = self.roster_invocation(&script);
        leave.arg(self.keys.channel());
        let _ = tokio::time::timeout(
            self.cfg.response_timeout,
            leave.invoke_async::<()>(&mut conn),
        )
        .await;
    }
}

fn bits_of(filter: &BloomFilter, key: &[u8]) -> Vec<u64> {
    let mut bits = Vec::with_capacity(filter.num_hashes() as usize);
    filter.for_each_bit(key, |bit| bits.push(bit));
    bits
}
