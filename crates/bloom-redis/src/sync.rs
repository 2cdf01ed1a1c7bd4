//! The engine: insert propagation, reconciliation, generations.

use std::collections::{BTreeMap, HashSet};
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bloom_tower::key_source::KeySource;
use bloom_tower::{Building, CurrentFilter, SharedFilter};
use futures_util::StreamExt;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use crate::protocol::{self, Keys, Kind, Shape, StoredShape};
use crate::{Error, Rebuilt, ReconcileReport, RedisStats, RedisSyncBuilder, names, scripts};

/// Keeps a [`SharedFilter`] in sync with the same filter on every other instance, through
/// Redis. See the [crate docs](crate) for the design and its guarantees.
///
/// Dropping it (or [`shutdown`](Self::shutdown)) stops the synchronisation; the filter keeps
/// serving locally.
pub struct RedisSync {
    inner: Arc<Inner>,
    tasks: Mutex<Vec<JoinHandle<()>>>,
}

struct Inner {
    filter: SharedFilter,
    shape: Shape,
    keys: Keys,
    prefix: String,
    cfg: RedisSyncBuilder,
    /// Random per instance: tells our own messages apart, names us in the member set.
    id: u64,
    client: redis::Client,
    conn: ConnectionManager,
    state: Mutex<State>,
    wake_publisher: Notify,
    wake_reconcile: Notify,
    /// Serialises generation transitions and reconciliations.
    transition: tokio::sync::Mutex<()>,
    connected: AtomicBool,
    counters: Counters,
    last_reconcile: Mutex<Option<ReconcileReport>>,
}

#[derive(Default)]
struct Counters {
    reconciles: AtomicU64,
    reconcile_errors: AtomicU64,
    published: AtomicU64,
    publish_errors: AtomicU64,
    received: AtomicU64,
    switches: AtomicU64,
    rebuilds: AtomicU64,
}

struct State {
    /// The generation the local serving filter holds.
    generation: u64,
    /// The generation being rebuilt, double-written locally.
    building: Option<Build>,
    /// Bits of recent inserts, per generation, not yet written to Redis.
    pending: BTreeMap<u64, Vec<u64>>,
}

struct Build {
    generation: u64,
    handle: Building,
    /// Whether this instance double-wrote it from before its source was read (acked before
    /// the seal). If not, its serving bits are carried over at the switch.
    in_time: bool,
    /// Whether this instance runs the rebuild.
    mine: bool,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

fn random_id() -> u64 {
    let mut bytes = [0u8; 8];
    // A failing OS random source leaves a fixed id: instances then only ignore each other's
    // messages (reconciliation still converges); unlikely enough not to fail the join.
    let _ = getrandom::fill(&mut bytes);
    u64::from_le_bytes(bytes) | 1
}

impl RedisSync {
    /// Starts configuring the synchronisation with the Redis at `url`
    /// (`redis://[:password@]host:port[/db]`, or `rediss://` with the `tls` feature).
    pub fn builder(url: &str) -> RedisSyncBuilder {
        RedisSyncBuilder::new(url)
    }

    pub(crate) async fn connect(
        cfg: RedisSyncBuilder,
        filter: SharedFilter,
    ) -> Result<Self, Error> {
        let current = filter.current();
        let shape = match current.as_plain() {
            Some(plain) => Shape::of(plain),
            None => {
                return Err(Error::NotPlain {
                    kind: current.kind(),
                });
            }
        };
        drop(current);
        let client = redis::Client::open(&*cfg.url)?;
        let manager = ConnectionManagerConfig::new()
            .set_connection_timeout(cfg.response_timeout)
            .set_response_timeout(cfg.response_timeout)
            .set_number_of_retries(1)
            .set_max_delay(200);
        let conn = ConnectionManager::new_with_config(client.clone(), manager).await?;
        let prefix = cfg
            .prefix
            .clone()
            .unwrap_or_else(|| format!("bloom-guard:{}", filter.name()));
        let inner = Arc::new(Inner {
            filter,
            shape,
            keys: Keys::new(&prefix),
            prefix,
            cfg,
            id: random_id(),
            client,
            conn,
            state: Mutex::new(State {
                generation: 0,
                building: None,
                pending: BTreeMap::new(),
            }),
            wake_publisher: Notify::new(),
            wake_reconcile: Notify::new(),
            transition: tokio::sync::Mutex::new(()),
            connected: AtomicBool::new(false),
            counters: Counters::default(),
            last_reconcile: Mutex::new(None),
        });
        // The first pass adopts Redis's generation and merges both ways.
        let report = inner.reconcile().await?;
        inner.reconciled(report);
        let weak = Arc::downgrade(&inner);
        inner
            .filter
            .set_insert_hook(Some(Arc::new(move |bytes: &[u8]| {
                if let Some(inner) = Weak::upgrade(&weak) {
                    inner.on_insert(bytes);
                }
            })));
        let mut tasks = vec![
            tokio::spawn(Arc::clone(&inner).publisher()),
            tokio::spawn(Arc::clone(&inner).reconciler()),
        ];
        if inner.cfg.pubsub {
            tasks.push(tokio::spawn(Arc::clone(&inner).subscriber()));
        }
        tracing::info!(
            prefix = %inner.prefix,
            generation = inner.generation(),
            bits = inner.shape.bits,
            "joined the filter shared through Redis"
        );
        Ok(Self {
            inner,
            tasks: Mutex::new(tasks),
        })
    }

    /// The synchronised filter (the one given to `connect`).
    pub fn filter(&self) -> &SharedFilter {
        &self.inner.filter
    }

    /// Connection state and counters.
    pub fn stats(&self) -> RedisStats {
        let inner = &*self.inner;
        let c = &inner.counters;
        let (generation, building) = {
            let state = lock(&inner.state);
            (
                state.generation,
                state.building.as_ref().map(|b| b.generation),
            )
        };
        RedisStats {
            connected: inner.connected.load(Relaxed),
            generation,
            building,
            reconciles: c.reconciles.load(Relaxed),
            reconcile_errors: c.reconcile_errors.load(Relaxed),
            last_reconcile: *lock(&inner.last_reconcile),
            published: c.published.load(Relaxed),
            publish_errors: c.publish_errors.load(Relaxed),
            received: c.received.load(Relaxed),
            switches: c.switches.load(Relaxed),
            rebuilds: c.rebuilds.load(Relaxed),
        }
    }

    /// Reconciles now (both directions), instead of waiting for the next interval.
    pub async fn reconcile_now(&self) -> Result<ReconcileReport, Error> {
        let result = self.inner.reconcile().await;
        match &result {
            Ok(report) => self.inner.reconciled(*report),
            Err(error) => self.inner.reconcile_failed(error),
        }
        result
    }

    /// Rebuilds the shared filter from `source` as a new generation, if no other instance is
    /// rebuilding (then [`Rebuilt::Skipped`]: this instance switches when the other publishes).
    ///
    /// Every live instance double-writes the new generation before the source is read, so
    /// no key inserted anywhere before or during the rebuild is missing from it (the crate
    /// docs give the argument). On error the previous generation keeps serving.
    pub async fn rebuild<S: KeySource + ?Sized>(&self, source: &S) -> Result<Rebuilt, Error> {
        self.inner.rebuild(source).await
    }

    /// Calls [`rebuild`](Self::rebuild) every `interval` in a background task (stopped with
    /// this value). Every instance may run one: the lock lets one rebuild at a time, and a
    /// generation younger than `interval / 2` is not rebuilt again.
    pub fn rebuild_every<S>(&self, interval: Duration, source: S)
    where
        S: KeySource + Send + Sync + 'static,
    {
        let inner = Arc::clone(&self.inner);
        let task = tokio::spawn(async move {
            loop {
                // Jitter so that instances started together do not all race for the lock.
                let jitter = Duration::from_millis(random_id() % 1000);
                tokio::time::sleep(interval + jitter).await;
                match inner.rebuild(&source).await {
                    Ok(outcome) => {
                        tracing::debug!(prefix = %inner.prefix, ?outcome, "scheduled rebuild")
                    }
                    Err(error) => tracing::warn!(
                        prefix = %inner.prefix,
                        %error,
                        "scheduled rebuild failed; the previous generation keeps serving"
                    ),
                }
            }
        });
        lock(&self.tasks).push(task);
    }

    /// Stops the background tasks and removes the insert hook; the filter keeps serving
    /// locally with every bit it has.
    pub fn shutdown(&self) {
        self.inner.filter.set_insert_hook(None);
        for task in lock(&self.tasks).drain(..) {
            task.abort();
        }
    }
}

impl Drop for RedisSync {
    fn drop(&mut self) {
        self.shutdown();
    }
}

impl fmt::Debug for RedisSync {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Neither the URL (password) nor the hash key is printed.
        f.debug_struct("RedisSync")
            .field("prefix", &self.inner.prefix)
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

impl Inner {
    fn generation(&self) -> u64 {
        lock(&self.state).generation
    }

    fn segments(&self) -> u64 {
        self.shape.num_bytes().div_ceil(self.cfg.segment_bytes)
    }

    fn segment_keys(&self, generation: u64) -> Vec<String> {
        (0..self.segments())
            .map(|s| self.keys.segment(generation, s))
            .collect()
    }

    fn ttl_ms(&self) -> u64 {
        self.cfg.lock_ttl.as_millis().max(1) as u64
    }

    fn set_connected(&self, up: bool) {
        metrics::gauge!(names::CONNECTED, "prefix" => self.prefix.clone()).set(if up {
            1.0
        } else {
            0.0
        });
        let was = self.connected.swap(up, Relaxed);
        if was && !up {
            tracing::warn!(prefix = %self.prefix, "lost Redis: serving and inserting locally; bits set meanwhile are pushed on reconnection");
        } else if !was && up {
            tracing::info!(prefix = %self.prefix, "connected to Redis");
        }
    }

    fn reconciled(&self, report: ReconcileReport) {
        self.counters.reconciles.fetch_add(1, Relaxed);
        metrics::counter!(names::RECONCILES, "prefix" => self.prefix.clone(), "outcome" => "ok")
            .increment(1);
        metrics::gauge!(names::GENERATION, "prefix" => self.prefix.clone())
            .set(self.generation() as f64);
        *lock(&self.last_reconcile) = Some(report);
        self.set_connected(true);
    }

    fn reconcile_failed(&self, error: &Error) {
        self.counters.reconcile_errors.fetch_add(1, Relaxed);
        metrics::counter!(names::RECONCILES, "prefix" => self.prefix.clone(), "outcome" => "error")
            .increment(1);
        match error {
            Error::Redis(_) => self.set_connected(false),
            _ => tracing::error!(prefix = %self.prefix, %error, "reconciliation failed"),
        }
    }

    /// The local filter holding `generation`, if it is the serving or the building one.
    fn filter_of(&self, generation: u64) -> Option<CurrentFilter> {
        let state = lock(&self.state);
        if generation == state.generation {
            Some(self.filter.current())
        } else {
            state
                .building
                .as_ref()
                .filter(|b| b.generation == generation)
                .map(|b| b.handle.handle())
        }
    }

    /// The insert hook: queue the key's bits for every generation this instance writes.
    fn on_insert(&self, key: &[u8]) {
        let current = self.filter.current();
        let Some(current) = current.as_plain().filter(|c| Shape::of(c) == self.shape) else {
            return; // reported by the next reconciliation
        };
        let mut bits = Vec::with_capacity(current.num_hashes() as usize);
        current.for_each_bit(key, |bit| bits.push(bit));
        {
            let mut state = lock(&self.state);
            let building = state.building.as_ref().map(|b| b.generation);
            let serving = state.generation;
            for generation in std::iter::once(serving).chain(building) {
                state
                    .pending
                    .entry(generation)
                    .or_default()
                    .extend_from_slice(&bits);
            }
        }
        self.wake_publisher.notify_one();
    }

    /// Writes queued bits to Redis (SETBIT) and publishes them, batch by batch.
    async fn publisher(self: Arc<Self>) {
        let mut conn = self.conn.clone();
        let channel = self.keys.channel();
        loop {
            self.wake_publisher.notified().await;
            let batch = std::mem::take(&mut lock(&self.state).pending);
            if batch.is_empty() {
                continue;
            }
            let mut pipe = redis::pipe();
            for (generation, mut bits) in batch {
                bits.sort_unstable();
                bits.dedup();
                for &bit in &bits {
                    let (segment, offset) = protocol::redis_bit(bit, self.cfg.segment_bytes);
                    pipe.cmd("SETBIT")
                        .arg(self.keys.segment(generation, segment))
                        .arg(offset)
                        .arg(1)
                        .ignore();
                }
                if self.cfg.pubsub {
                    // After the SETBITs on the same connection: a receiver that pulls
                    // Redis after this message finds the bits there.
                    let message = protocol::encode(Kind::Bits, self.id, generation, &bits);
                    pipe.cmd("PUBLISH").arg(&channel).arg(message).ignore();
                }
            }
            match pipe.query_async::<()>(&mut conn).await {
                Ok(()) => {
                    self.counters.published.fetch_add(1, Relaxed);
                }
                Err(error) => {
                    // The bits are in the local filter: reconciliation pushes them.
                    self.counters.publish_errors.fetch_add(1, Relaxed);
                    tracing::debug!(prefix = %self.prefix, %error, "could not propagate inserts; reconciliation will");
                    self.set_connected(false);
                    self.wake_reconcile.notify_one();
                }
            }
        }
    }

    /// Receives other instances' bits and generation announcements; reconnects forever.
    async fn subscriber(self: Arc<Self>) {
        let channel = self.keys.channel();
        loop {
            match self.client.get_async_pubsub().await {
                Ok(mut pubsub) => {
                    if pubsub.subscribe(&channel).await.is_ok() {
                        // Anything published while we were not subscribed: catch up.
                        self.wake_reconcile.notify_one();
                        let mut messages = pubsub.on_message();
                        while let Some(message) = messages.next().await {
                            self.on_message(message.get_payload_bytes());
                        }
                    }
                    self.wake_reconcile.notify_one();
                }
                Err(error) => {
                    tracing::debug!(prefix = %self.prefix, %error, "pub/sub connection failed");
                }
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    fn on_message(&self, payload: &[u8]) {
        let Some(message) = protocol::decode(payload) else {
            tracing::warn!(prefix = %self.prefix, "ignored a malformed message on the channel");
            return;
        };
        if message.sender == self.id {
            return;
        }
        match message.kind {
            Kind::Bits => {
                self.counters.received.fetch_add(1, Relaxed);
                let words = self.shape.bits.div_ceil(64);
                match self.filter_of(message.generation) {
                    Some(filter) => {
                        let Some(filter) = filter.as_plain() else {
                            return; // reported by the next reconciliation
                        };
                        for bit in message.bits {
                            if bit / 64 < words {
                                filter.union_words((bit / 64) as usize, &[1 << (bit % 64)]);
                            }
                        }
                    }
                    // A generation we do not know yet: find out now.
                    None if message.generation > self.generation() => {
                        self.wake_reconcile.notify_one();
                    }
                    None => {}
                }
            }
            Kind::Building | Kind::Switched => self.wake_reconcile.notify_one(),
        }
    }

    /// Reconciles every interval, at once when woken (reconnection, new generation), and
    /// every second while Redis is unreachable.
    async fn reconciler(self: Arc<Self>) {
        loop {
            let wait = if self.connected.load(Relaxed) {
                self.cfg.reconcile_every
            } else {
                self.cfg.reconcile_every.min(Duration::from_secs(1))
            };
            tokio::select! {
                () = tokio::time::sleep(wait) => {}
                () = self.wake_reconcile.notified() => {}
            }
            match self.reconcile().await {
                Ok(report) => self.reconciled(report),
                Err(error) => self.reconcile_failed(&error),
            }
        }
    }

    /// One pass: heartbeat, parameter check, generation transitions, then merge every local
    /// generation with Redis in both directions.
    async fn reconcile(&self) -> Result<ReconcileReport, Error> {
        let _transition = self.transition.lock().await;
        let started = Instant::now();
        let mut conn = self.conn.clone();
        let now = now_ms();
        let liveness = self.liveness_ms();
        redis::pipe()
            .cmd("ZADD")
            .arg(self.keys.members())
            .arg(now)
            .arg(self.id)
            .ignore()
            .cmd("ZREMRANGEBYSCORE")
            .arg(self.keys.members())
            .arg("-inf")
            .arg(now.saturating_sub(liveness * 10))
            .ignore()
            .query_async::<()>(&mut conn)
            .await?;
        let local = self.generation().max(1);
        let (bits, hashes, layout, seed, remote, building): (
            String,
            String,
            String,
            String,
            String,
            String,
        ) = scripts::join()
            .key(self.keys.config())
            .key(self.keys.generation())
            .key(self.keys.building())
            .arg(self.shape.bits)
            .arg(self.shape.hashes)
            .arg(self.shape.layout.to_string())
            .arg(self.shape.seed_hex())
            .arg(local)
            .invoke_async(&mut conn)
            .await?;
        let stored = StoredShape {
            bits,
            hashes,
            layout,
            seed,
        };
        if let Some(detail) = self.shape.mismatch(&stored) {
            return Err(Error::ParameterMismatch {
                prefix: self.prefix.clone(),
                detail,
            });
        }
        if self.filter.current().as_plain().map(Shape::of) != Some(self.shape) {
            return Err(Error::ShapeChanged);
        }
        let remote: u64 = remote.parse().unwrap_or(local);
        let building: Option<u64> = building.parse().ok();
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
        self.follow_building(building, remote).await?;

        let mut report = ReconcileReport::default();
        let generations: Vec<u64> = {
            let state = lock(&self.state);
            std::iter::once(state.generation)
                .chain(state.building.as_ref().map(|b| b.generation))
                .collect()
        };
        for generation in generations {
            self.sync_generation(generation, "", &mut report).await?;
        }
        report.elapsed = started.elapsed();
        Ok(report)
    }

    fn liveness_ms(&self) -> u64 {
        (self.cfg.reconcile_every.as_millis() as u64)
            .saturating_mul(3)
            .max(1000)
    }

    /// Starts (or drops) the local double-write of a generation another instance rebuilds.
    async fn follow_building(&self, remote: Option<u64>, serving: u64) -> Result<(), Error> {
        let start = {
            let mut state = lock(&self.state);
            let ours = state.building.as_ref().map(|b| (b.generation, b.mine));
            match (remote, ours) {
                (Some(b), None) if b > state.generation => Some(b),
                (Some(b), Some((g, false))) if g != b && b > state.generation => {
                    state.building = None; // an abandoned attempt, superseded
                    Some(b)
                }
                (None, Some((g, false))) if g > serving => {
                    // Abandoned (its rebuilder died and the marker expired): stop writing it.
                    tracing::info!(prefix = %self.prefix, generation = g, "rebuild abandoned");
                    state.building = None;
                    None
                }
                _ => None,
            }
        };
        let Some(generation) = start else {
            return Ok(());
        };
        {
            let mut state = lock(&self.state);
            match self.filter.start_building(self.shape.empty()) {
                Ok(handle) => {
                    state.building = Some(Build {
                        generation,
                        handle,
                        in_time: false,
                        mine: false,
                    });
                }
                Err(_) => return Err(Error::Busy),
            }
        }
        // Only now, with every later insert double-written, tell the rebuilder.
        let mut conn = self.conn.clone();
        let in_time: i64 = scripts::ack()
            .key(self.keys.acks(generation))
            .key(self.keys.sealed(generation))
            .arg(self.id)
            .arg(self.ttl_ms().saturating_mul(10))
            .invoke_async(&mut conn)
            .await?;
        let mut state = lock(&self.state);
        if let Some(build) = state
            .building
            .as_mut()
            .filter(|b| b.generation == generation)
        {
            build.in_time = in_time == 1;
        }
        tracing::debug!(prefix = %self.prefix, generation, in_time = in_time == 1, "double-writing a generation being rebuilt");
        Ok(())
    }

    /// Makes `generation` serve locally: Redis's bits (and, if this instance did not
    /// double-write it from the start, its serving bits) are merged into it first.
    async fn switch_to(&self, generation: u64) -> Result<(), Error> {
        let mut pulled = Vec::new();
        let mut conn = self.conn.clone();
        for key in self.segment_keys(generation) {
            let bytes: Option<Vec<u8>> = redis::cmd("GET").arg(key).query_async(&mut conn).await?;
            pulled.push(bytes.unwrap_or_default());
        }
        let switched = {
            let mut state = lock(&self.state);
            if state.generation >= generation {
                return Ok(());
            }
            let build = match state.building.take() {
                Some(build) if build.generation == generation => build,
                other => {
                    drop(other);
                    Build {
                        generation,
                        handle: self
                            .filter
                            .start_building(self.shape.empty())
                            .map_err(|_| Error::Busy)?,
                        in_time: false,
                        mine: false,
                    }
                }
            };
            let next = build
                .handle
                .filter()
                .as_plain()
                .ok_or(Error::ShapeChanged)?;
            if !build.in_time {
                // Keys inserted here before we double-wrote may be missing from the source
                // snapshot: carry every serving bit over (same shape, so OR is valid).
                let current = self.filter.current();
                let current = current.as_plain().ok_or(Error::ShapeChanged)?;
                next.union(current).map_err(|_| Error::ShapeChanged)?;
            }
            self.merge_segments(next, &pulled);
            let carried = !build.in_time;
            build.handle.finish();
            state.generation = generation;
            carried
        };
        self.counters.switches.fetch_add(1, Relaxed);
        tracing::info!(prefix = %self.prefix, generation, carried_over = switched, "switched to a new generation");
        Ok(())
    }

    fn merge_segments(&self, filter: &bloom_core::BloomFilter, segments: &[Vec<u8>]) {
        let words_per_segment = (self.cfg.segment_bytes / 8) as usize;
        let total = filter.num_words();
        for (s, bytes) in segments.iter().enumerate() {
            let first = s * words_per_segment;
            if first >= total {
                break;
            }
            let words = protocol::bytes_to_words(bytes, words_per_segment.min(total - first));
            filter.union_words(first, &words);
        }
    }

    /// Pulls every segment of `generation` into the local filter and pushes (BITOP OR) each
    /// segment where the local filter has bits Redis lacks. `token` fences rebuild writes.
    async fn sync_generation(
        &self,
        generation: u64,
        token: &str,
        report: &mut ReconcileReport,
    ) -> Result<(), Error> {
        let mut conn = self.conn.clone();
        let words_per_segment = (self.cfg.segment_bytes / 8) as usize;
        for s in 0..self.segments() {
            let key = self.keys.segment(generation, s);
            let remote: Option<Vec<u8>> =
                redis::cmd("GET").arg(&key).query_async(&mut conn).await?;
            let remote = remote.unwrap_or_default();
            report.bytes_pulled += remote.len() as u64;
            let Some(filter) = self.filter_of(generation) else {
                return Ok(()); // switched meanwhile
            };
            let filter = filter.as_plain().ok_or(Error::ShapeChanged)?;
            let first = s as usize * words_per_segment;
            let count = words_per_segment.min(filter.num_words() - first);
            let remote_words = protocol::bytes_to_words(&remote, count);
            filter.union_words(first, &remote_words);
            let local: Vec<u64> = filter.words().skip(first).take(count).collect();
            let differs = local
                .iter()
                .enumerate()
                .any(|(i, &w)| w != remote_words.get(i).copied().unwrap_or(0));
            if !differs {
                continue;
            }
            let mut bytes: Vec<u8> = local.iter().flat_map(|w| w.to_le_bytes()).collect();
            while bytes.last() == Some(&0) {
                bytes.pop();
            }
            let written: i64 = scripts::or_segment()
                .key(&key)
                .key(self.keys.scratch(self.id))
                .key(self.keys.lock())
                .key(self.keys.building())
                .arg(token)
                .arg(&bytes)
                .arg(self.ttl_ms())
                .invoke_async(&mut conn)
                .await?;
            if written == 0 {
                return Err(Error::Fenced);
            }
            report.bytes_pushed += bytes.len() as u64;
            report.segments_pushed += 1;
        }
        Ok(())
    }

    async fn rebuild<S: KeySource + ?Sized>(&self, source: &S) -> Result<Rebuilt, Error> {
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
        let result = self.rebuild_locked(source, &token).await;
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
                .invoke_async::<i64>(&mut conn)
                .await;
        }
        result
    }

    async fn rebuild_locked<S: KeySource + ?Sized>(
        &self,
        source: &S,
        token: &str,
    ) -> Result<Rebuilt, Error> {
        let mut conn = self.conn.clone();
        let generation = {
            let _transition = self.transition.lock().await;
            let remote: Option<u64> = redis::cmd("GET")
                .arg(self.keys.generation())
                .query_async(&mut conn)
                .await?;
            let generation = remote.unwrap_or(0).max(self.generation()) + 1;
            {
                let mut state = lock(&self.state);
                state.building = None; // any other is abandoned: we hold the lock
                let handle = self
                    .filter
                    .start_building(self.shape.empty())
                    .map_err(|_| Error::Busy)?;
                state.building = Some(Build {
                    generation,
                    handle,
                    in_time: true,
                    mine: true,
                });
            }
            let begin = scripts::begin();
            let mut invocation = begin.key(self.keys.lock());
            invocation
                .key(self.keys.building())
                .key(self.keys.acks(generation))
                .key(self.keys.sealed(generation));
            for key in self.segment_keys(generation) {
                invocation.key(key);
            }
            let begun: i64 = invocation
                .arg(token)
                .arg(generation)
                .arg(self.ttl_ms())
                .arg(self.keys.channel())
                .arg(protocol::encode(Kind::Building, self.id, generation, &[]))
                .invoke_async(&mut conn)
                .await?;
            drop(begin);
            if begun == 0 {
                return Err(Error::Fenced);
            }
            generation
        };

        // Wait until every live instance double-writes the new generation.
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
                break;
            }
            if waited.elapsed() > self.cfg.ack_timeout {
                tracing::warn!(prefix = %self.prefix, generation, missing, "instances did not start double-writing in time; they will carry their bits over");
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let sealed: i64 = scripts::seal()
            .key(self.keys.lock())
            .key(self.keys.sealed(generation))
            .arg(token)
            .arg(self.ttl_ms().saturating_mul(10))
            .arg(self.ttl_ms())
            .invoke_async(&mut conn)
            .await?;
        if sealed == 0 {
            return Err(Error::Fenced);
        }

        // Stream the source into the new generation.
        let next = self.filter_of(generation).ok_or(Error::Fenced)?;
        let mut keys = std::pin::pin!(source.keys());
        let mut read = 0u64;
        loop {
            match keys.next().await {
                None => break,
                Some(Ok(key)) => {
                    next.insert(&key);
                }
                Some(Err(error)) => {
                    return Err(Error::Source {
                        keys: read,
                        source: error.into(),
                    });
                }
            }
            read += 1;
            if read % 4096 == 0 {
                tokio::task::yield_now().await;
            }
        }
        drop(next);

        // Upload (fenced), publish, switch.
        let _transition = self.transition.lock().await;
        let mut report = ReconcileReport::default();
        self.sync_generation(generation, token, &mut report).await?;
        let old = self.generation();
        let switch = scripts::switch();
        let mut invocation = switch.key(self.keys.lock());
        invocation
            .key(self.keys.generation())
            .key(self.keys.building());
        for key in self.segment_keys(old) {
            invocation.key(key);
        }
        let grace = self.liveness_ms().saturating_mul(10);
        let switched: i64 = invocation
            .arg(token)
            .arg(generation)
            .arg(grace)
            .arg(self.keys.channel())
            .arg(protocol::encode(Kind::Switched, self.id, generation, &[]))
            .invoke_async(&mut conn)
            .await?;
        drop(switch);
        if switched == 0 {
            return Err(Error::Fenced);
        }
        self.switch_to(generation).await?;
        self.counters.rebuilds.fetch_add(1, Relaxed);
        tracing::info!(prefix = %self.prefix, generation, keys = read, "rebuilt and published a new generation");
        Ok(Rebuilt::Rebuilt {
            keys: read,
            generation,
        })
    }
}
