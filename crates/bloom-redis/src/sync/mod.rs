//! [`RedisSync`]: the handle, and the state its background tasks share. Each role has its
//! own file:
//!
//! * [`publisher`]: queues this instance's inserts and commits, writes them to Redis and
//!   publishes them, followed by a heartbeat; [`RedisSync::propagated`] waits on it.
//! * [`subscriber`]: receives the other instances' bits, heartbeats and announcements.
//! * [`freshness`]: from the heartbeats, whether this instance's view may be missing inserts
//!   made elsewhere, and what a would-be rejection does then ([`StalePolicy`](crate::StalePolicy)).
//! * [`reconcile`]: the periodic two-way merge with Redis, and the refill after Redis lost data.
//! * [`segments`]: per-segment versions and dirty marks, and moving segments: what keeps a
//!   reconciliation's traffic proportional to what changed.
//! * [`generations`]: which local filter bits of a generation go into; following a rebuild
//!   run elsewhere; switching.
//! * [`rebuild`]: running a rebuild: lock, acknowledgements, source, checks, switch.
//! * [`follower`]: one instance of the fleet follows the source's changes, under a lease.

mod follower;
mod freshness;
mod generations;
mod publisher;
mod rebuild;
mod reconcile;
mod segments;
mod subscriber;

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use std::future::Future;
use std::pin::Pin;

use bloom_tower::SharedFilter;
use bloom_tower::key::{AnyKey, KeyFor};
use bloom_tower::key_source::{BoxError, KeySource};
use bloom_tower::shared_filter::{ErasedKeySource, ExternalRebuild, Reloaded};
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use crate::conn::Conn;
#[cfg(feature = "metrics")]
use crate::names;
use crate::protocol::{Keys, Shape};
use crate::{Error, Rebuilt, ReconcileReport, RedisStats, RedisSyncBuilder};
use freshness::Freshness;
use generations::Build;
use publisher::Outbox;
use reconcile::Trigger;
use segments::Ledger;

/// Keeps a [`SharedFilter<K>`] in sync with the same filter on every other instance, through
/// Redis. See the [crate docs](crate) for the design and its guarantees.
///
/// `K` is the filter's key type (as in [`SharedFilter<K>`]): the sources it rebuilds from must
/// yield keys of that type ([`KeyFor<K>`]), so a `u64` filter is not rebuilt from `String`s
/// through this crate either. Use [`AnyKey`] only for a filter of mixed keys.
///
/// ```compile_fail
/// # async fn example(sync: bloom_redis::RedisSync<u64>) {
/// let names: Vec<String> = vec!["ada".into()];
/// sync.rebuild(&names).await; // error: `String` is not a key of type `u64`
/// # }
/// ```
///
/// Dropping it (or [`shutdown`](Self::shutdown)) stops the synchronisation; the filter keeps
/// serving locally. [`leave`](Self::leave) does the same after telling the other instances,
/// so that they do not wait for this one's heartbeats.
pub struct RedisSync<K: ?Sized> {
    inner: Arc<Inner>,
    tasks: Mutex<Vec<JoinHandle<()>>>,
    /// The typed handle given to `connect` (the background tasks use an untyped one).
    filter: SharedFilter<K>,
}

/// What the background tasks share.
struct Inner {
    /// Untyped: the synchronisation moves bits and key bytes, whatever the key type.
    filter: SharedFilter<AnyKey>,
    shape: Shape,
    keys: Keys,
    prefix: String,
    cfg: RedisSyncBuilder,
    /// Random per instance: tells our own messages apart, names us in the member set.
    id: u64,
    /// For the subscription (on a cluster: to the node named by the URL; a message
    /// published on any node reaches it).
    client: redis::Client,
    conn: Conn,
    /// The versions of the segments held here, and the dirty ones.
    ledger: Ledger,
    /// Set after a reconnection, a resubscription or a carry-over: the next pass compares
    /// every segment's digest.
    full_pass_owed: AtomicBool,
    last_full_pass: Mutex<Option<Instant>>,
    /// Redis's dataset id as last seen (see `scripts::Joined::incarnation`).
    incarnation: Mutex<Option<String>>,
    /// When a pass last compared segments because Redis evicted keys, and whether the pass
    /// running now does (see `Inner::may_compare_evictions`).
    last_eviction_compare: Mutex<Option<Instant>>,
    eviction_compared: AtomicBool,
    /// The serving generation and the one being built.
    state: Mutex<State>,
    outbox: Outbox,
    freshness: Freshness,
    wake_reconcile: Notify,
    /// Serialises generation transitions and reconciliations.
    transition: tokio::sync::Mutex<()>,
    connected: AtomicBool,
    counters: Counters,
    last_reconcile: Mutex<Option<ReconcileReport>>,
    /// The first pass's report.
    joined: Mutex<Option<ReconcileReport>>,
    /// Whether this instance holds the follow lease (see [`follower`]).
    following: AtomicBool,
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
    refused_switches: AtomicU64,
    refills: AtomicU64,
    not_propagated: AtomicU64,
}

struct State {
    /// The generation the local serving filter holds.
    generation: u64,
    /// The generation being rebuilt, double-written locally.
    building: Option<Build>,
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

impl RedisSync<AnyKey> {
    /// Starts configuring the synchronisation with the Redis at `url`
    /// (`redis://[:password@]host:port[/db]`, or `rediss://` with the `tls` feature).
    ///
    /// The key type comes from the filter given to
    /// [`connect`](RedisSyncBuilder::connect), which returns a `RedisSync<K>`; this function
    /// lives on `RedisSync<AnyKey>` only so that `RedisSync::builder(url)` needs no annotation.
    ///
    /// ```
    /// use std::time::Duration;
    /// use bloom_redis::RedisSync;
    ///
    /// let builder = RedisSync::builder("redis://:password@127.0.0.1:6379/0")
    ///     .prefix("myapp:users")
    ///     .reconcile_every(Duration::from_secs(30));
    /// # let _ = builder;
    /// ```
    pub fn builder(url: &str) -> RedisSyncBuilder {
        RedisSyncBuilder::new(url)
    }
}

impl<K: ?Sized> RedisSync<K> {
    pub(crate) async fn connect(
        cfg: RedisSyncBuilder,
        typed: &SharedFilter<K>,
    ) -> Result<Self, Error> {
        // Before this crate registers any metric: HELP text and units.
        #[cfg(feature = "metrics")]
        names::describe_once();
        let filter = typed.untyped();
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
        let conn = Conn::open(&cfg).await?;
        let segments = shape.num_bytes().div_ceil(cfg.segment_bytes);
        let prefix = cfg
            .prefix
            .clone()
            .unwrap_or_else(|| format!("bloom-guard:{}", filter.name()));
        let id = random_id();
        let inner = Arc::new(Inner {
            filter,
            shape,
            keys: Keys::new(&prefix),
            freshness: Freshness::new(&cfg, id, &prefix),
            prefix,
            cfg,
            id,
            client,
            conn,
            ledger: Ledger::new(segments),
            full_pass_owed: AtomicBool::new(false),
            last_full_pass: Mutex::new(None),
            incarnation: Mutex::new(None),
            last_eviction_compare: Mutex::new(None),
            eviction_compared: AtomicBool::new(false),
            state: Mutex::new(State {
                generation: 0,
                building: None,
            }),
            outbox: Outbox::default(),
            wake_reconcile: Notify::new(),
            transition: tokio::sync::Mutex::new(()),
            connected: AtomicBool::new(false),
            counters: Counters::default(),
            last_reconcile: Mutex::new(None),
            joined: Mutex::new(None),
            following: AtomicBool::new(false),
        });
        // The first pass adopts Redis's generation and merges both ways.
        let report = inner.reconcile(Trigger::Periodic).await?;
        inner.reconciled(report);
        *lock(&inner.joined) = Some(report);
        inner.install_hooks();
        let mut tasks = vec![
            tokio::spawn(Arc::clone(&inner).publisher()),
            tokio::spawn(Arc::clone(&inner).reconciler()),
        ];
        if inner.cfg.pubsub {
            tasks.push(tokio::spawn(Arc::clone(&inner).subscriber()));
            tasks.push(tokio::spawn(Arc::clone(&inner).watch_freshness()));
        }
        let sync = Self {
            inner,
            tasks: Mutex::new(tasks),
            filter: typed.clone(),
        };
        // Serve fresh from the start where possible: the subscription, its catch-up pull and
        // our own first heartbeat take a few milliseconds. Bounded: a Redis that stalls right
        // now leaves us stale, which the policy handles.
        if sync.inner.cfg.pubsub {
            let deadline = tokio::time::Instant::now() + sync.inner.cfg.stale_after;
            while !sync.inner.freshness.is_fresh() && tokio::time::Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
        tracing::info!(
            prefix = %sync.inner.prefix,
            generation = sync.inner.generation(),
            bits = sync.inner.shape.bits,
            fresh = sync.inner.freshness.is_fresh(),
            pulled = report.bytes_pulled,
            pushed = report.bytes_pushed,
            "joined the filter shared through Redis"
        );
        Ok(sync)
    }

    /// The synchronised filter (a handle on the one given to `connect`).
    ///
    /// ```no_run
    /// # async fn example(sync: bloom_redis::RedisSync<u64>) -> Result<(), Box<dyn std::error::Error>> {
    /// let filter = sync.filter(); // a `SharedFilter<u64>`
    /// filter.insert(&42u64);
    /// assert!(filter.contains(&42u64));
    /// # Ok(()) }
    /// ```
    pub fn filter(&self) -> &SharedFilter<K> {
        &self.filter
    }

    /// Connection and freshness state, and counters.
    ///
    /// ```no_run
    /// # async fn example(sync: bloom_redis::RedisSync<u64>) -> Result<(), Box<dyn std::error::Error>> {
    /// let stats = sync.stats();
    /// if !stats.fresh {
    ///     eprintln!("stale for {:?}: {:?}", stats.stale_for, stats.stale_reason);
    /// }
    /// # Ok(()) }
    /// ```
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
        let view = inner.freshness.report();
        RedisStats {
            connected: inner.connected.load(Relaxed),
            generation,
            building,
            reconciles: c.reconciles.load(Relaxed),
            reconcile_errors: c.reconcile_errors.load(Relaxed),
            last_reconcile: *lock(&inner.last_reconcile),
            joined: *lock(&inner.joined),
            published: c.published.load(Relaxed),
            publish_errors: c.publish_errors.load(Relaxed),
            received: c.received.load(Relaxed),
            switches: c.switches.load(Relaxed),
            rebuilds: c.rebuilds.load(Relaxed),
            refused_switches: c.refused_switches.load(Relaxed),
            refills: c.refills.load(Relaxed),
            fresh: view.fresh,
            stale_for: view.stale_for,
            stale_reason: view.reason,
            stale_periods: view.periods,
            stale_let_through: view.let_through,
            stale_rejected: view.rejected,
            instances: view.instances,
            not_propagated: c.not_propagated.load(Relaxed),
            following: inner.following.load(Relaxed),
        }
    }

    /// Waits until every insert made on this instance before the call is written to Redis
    /// and published to the other instances: call it in a create path after
    /// [`prepare_insert`](SharedFilter::prepare_insert) and before the commit, so that once the
    /// record is visible every connected instance lets its key through (within pub/sub
    /// delivery). Bounded by [`publish_timeout`](RedisSyncBuilder::publish_timeout).
    ///
    /// # Errors
    ///
    /// [`Error::NotPropagated`] on timeout: the keys are in the local filter and will be
    /// pushed when Redis answers; the other instances, no longer hearing this one's
    /// heartbeats, have gone (or are about to go) stale, so their
    /// [`StalePolicy`](crate::StalePolicy) applies. Committing anyway is safe under the default
    /// policy; a service that prefers to refuse the create can do so here.
    ///
    /// ```no_run
    /// # async fn example(sync: bloom_redis::RedisSync<u64>) -> Result<(), Box<dyn std::error::Error>> {
    /// // A create: insert, wait until every instance can have the key, commit.
    /// let pending = sync.filter().prepare_insert(&42u64);
    /// if let Err(error) = sync.propagated().await {
    ///     eprintln!("{error}"); // committing anyway is safe under the default stale policy
    /// }
    /// // INSERT INTO users … COMMIT
    /// pending.committed().await;
    /// # Ok(()) }
    /// ```
    pub async fn propagated(&self) -> Result<(), Error> {
        let waited = self.inner.cfg.effective_publish_timeout();
        if self.inner.outbox.wait_published(waited).await {
            return Ok(());
        }
        self.inner.counters.not_propagated.fetch_add(1, Relaxed);
        #[cfg(feature = "metrics")]
        metrics::counter!(names::NOT_PROPAGATED, "prefix" => self.inner.prefix.clone())
            .increment(1);
        tracing::warn!(prefix = %self.inner.prefix, ?waited, "inserts not published to Redis in time; the other instances treat their views as stale");
        Err(Error::NotPropagated { waited })
    }

    /// Reconciles now (both directions), instead of waiting for the next interval: the
    /// segments whose versions moved and those this instance dirtied (a full pass if one is
    /// owed or due; see [`full_pass_now`](Self::full_pass_now)).
    ///
    /// ```no_run
    /// # async fn example(sync: bloom_redis::RedisSync<u64>) -> Result<(), Box<dyn std::error::Error>> {
    /// let report = sync.reconcile_now().await?;
    /// println!("pulled {} bytes, pushed {}", report.bytes_pulled, report.bytes_pushed);
    /// # Ok(()) }
    /// ```
    pub async fn reconcile_now(&self) -> Result<ReconcileReport, Error> {
        let result = self.inner.reconcile(Trigger::Periodic).await;
        match &result {
            Ok(report) => self.inner.reconciled(*report),
            Err(error) => self.inner.reconcile_failed(error),
        }
        result
    }

    /// A full pass now: Redis hashes every segment and those whose digest differs from the
    /// local copy's are pulled, and pushed where this instance holds bits Redis lacks —
    /// including bits set in the filter while it was not synchronised (after
    /// [`shutdown`](Self::shutdown), say), which the incremental passes do not look for.
    ///
    /// ```no_run
    /// # async fn example(sync: bloom_redis::RedisSync<u64>) -> Result<(), Box<dyn std::error::Error>> {
    /// let report = sync.full_pass_now().await?;
    /// assert!(report.full);
    /// # Ok(()) }
    /// ```
    pub async fn full_pass_now(&self) -> Result<ReconcileReport, Error> {
        let result = self.inner.reconcile(Trigger::Full).await;
        match &result {
            Ok(report) => self.inner.reconciled(*report),
            Err(error) => self.inner.reconcile_failed(error),
        }
        result
    }

    /// Rebuilds the shared filter from `source` as a new generation, if no other instance is
    /// rebuilding (then [`Rebuilt::Skipped`]: this instance switches when the other publishes).
    ///
    /// Every live instance double-writes the new generation before the source is read, and
    /// every bit any instance receives meanwhile goes into it too, so no key inserted anywhere
    /// before or during the rebuild is missing from it (the crate docs give the argument).
    /// The lock is kept alive while the source streams, however long it takes. On error the
    /// previous generation keeps serving.
    ///
    /// # Errors
    ///
    /// Besides Redis and source errors: [`Error::Shrunk`] if the new generation holds fewer
    /// than [`min_rebuild_fraction`](RedisSyncBuilder::min_rebuild_fraction) of the serving
    /// one's keys (see [`force_rebuild`](Self::force_rebuild)); [`Error::Fenced`] if the lock
    /// was lost.
    ///
    /// ```no_run
    /// # async fn example(sync: bloom_redis::RedisSync<u64>) -> Result<(), Box<dyn std::error::Error>> {
    /// use bloom_redis::Rebuilt;
    ///
    /// let ids: Vec<u64> = vec![1, 2, 3]; // every current key, e.g. `SELECT id FROM users`
    /// match sync.rebuild(&ids).await? {
    ///     Rebuilt::Rebuilt { keys, generation } => println!("generation {generation}: {keys} keys"),
    ///     Rebuilt::Skipped => println!("another instance is rebuilding"),
    ///     _ => {}
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn rebuild<S>(&self, source: &S) -> Result<Rebuilt, Error>
    where
        S: KeySource + ?Sized,
        S::Key: KeyFor<K>,
    {
        self.inner.rebuild(source, false).await
    }

    /// [`rebuild`](Self::rebuild) without the check on the new generation's size: for when
    /// most keys really were deleted.
    ///
    /// ```no_run
    /// # async fn example(sync: bloom_redis::RedisSync<u64>) -> Result<(), Box<dyn std::error::Error>> {
    /// // Most users really were deleted: switch even though the new generation is much smaller.
    /// let remaining: Vec<u64> = vec![7];
    /// sync.force_rebuild(&remaining).await?;
    /// # Ok(()) }
    /// ```
    pub async fn force_rebuild<S>(&self, source: &S) -> Result<Rebuilt, Error>
    where
        S: KeySource + ?Sized,
        S::Key: KeyFor<K>,
    {
        self.inner.rebuild(source, true).await
    }

    /// Rebuilds from `source` if the shared filter holds clearly fewer keys than the source's
    /// [count hint](KeySource::count_hint) says exist (below
    /// [`refill_below`](RedisSyncBuilder::refill_below) of it): Redis lost data (restarted
    /// from an old dump, evicted keys) and instances that joined since miss keys. Call it
    /// after `connect`, before serving; [`rebuild_every`](Self::rebuild_every) calls it when
    /// it starts. `Ok(None)`: nothing was lost (or the source gives no count).
    ///
    /// ```no_run
    /// # async fn example(sync: bloom_redis::RedisSync<u64>) -> Result<(), Box<dyn std::error::Error>> {
    /// let ids: Vec<u64> = vec![1, 2, 3]; // a source with a count hint
    /// if let Some(outcome) = sync.refill_if_lost(&ids).await? {
    ///     println!("Redis had lost keys: {outcome:?}");
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn refill_if_lost<S>(&self, source: &S) -> Result<Option<Rebuilt>, Error>
    where
        S: KeySource + ?Sized,
        S::Key: KeyFor<K>,
    {
        self.inner.refill_if_lost(source).await
    }

    /// Calls [`refill_if_lost`](Self::refill_if_lost) now, then [`rebuild`](Self::rebuild)
    /// every `interval`, in a background task (stopped with this value). Every instance may
    /// run one: the lock lets one rebuild at a time.
    ///
    /// ```no_run
    /// # async fn example(sync: bloom_redis::RedisSync<u64>) -> Result<(), Box<dyn std::error::Error>> {
    /// use std::time::Duration;
    /// use bloom_tower::key_source;
    ///
    /// // Rebuilt hourly from the database (here a stand-in iterator of the ids).
    /// let source = key_source::from_iter(|| (1..=1_000u64).collect::<Vec<_>>());
    /// sync.rebuild_every(Duration::from_secs(3600), source);
    /// # Ok(()) }
    /// ```
    pub fn rebuild_every<S>(&self, interval: Duration, source: S)
    where
        S: KeySource + Send + Sync + 'static,
        S::Key: KeyFor<K>,
    {
        let inner = Arc::clone(&self.inner);
        let task = tokio::spawn(async move {
            if let Err(error) = inner.refill_if_lost(&source).await {
                tracing::warn!(prefix = %inner.prefix, %error, "could not check the shared filter against the source");
            }
            loop {
                // Jitter so that instances started together do not all race for the lock.
                let jitter = Duration::from_millis(random_id() % 1000);
                tokio::time::sleep(interval + jitter).await;
                match inner.rebuild(&source, false).await {
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

    /// Publishes what is queued (bounded by the publish timeout), [`shutdown`](Self::shutdown)s,
    /// then tells the other instances this one is leaving (so they stop waiting for its
    /// heartbeats at once instead of after `member_timeout`). Call it on a clean shutdown
    /// (SIGTERM).
    ///
    /// ```no_run
    /// # async fn example(sync: bloom_redis::RedisSync<u64>) -> Result<(), Box<dyn std::error::Error>> {
    /// // On SIGTERM:
    /// sync.leave().await;
    /// # Ok(()) }
    /// ```
    pub async fn leave(&self) {
        let _ = self.propagated().await;
        // Stop publishing before the goodbye: a heartbeat sent after it would make the others
        // wait for this instance again, until `member_timeout`.
        self.inner.remove_hooks();
        let tasks: Vec<_> = lock(&self.tasks).drain(..).collect();
        for task in &tasks {
            task.abort();
        }
        for task in tasks {
            let _ = task.await;
        }
        self.inner.release_follow_lease().await;
        self.inner.publish_leaving().await;
    }

    /// Stops the background tasks and removes the hooks; the filter keeps serving locally
    /// with every bit it has, and rejects again as a plain local filter.
    ///
    /// ```no_run
    /// # async fn example(sync: bloom_redis::RedisSync<u64>) -> Result<(), Box<dyn std::error::Error>> {
    /// sync.shutdown();
    /// // The filter keeps answering, locally, from every bit it has.
    /// let _maybe = sync.filter().contains(&42u64);
    /// # Ok(()) }
    /// ```
    pub fn shutdown(&self) {
        self.inner.remove_hooks();
        for task in lock(&self.tasks).drain(..) {
            task.abort();
        }
    }
}

impl<K: ?Sized> Drop for RedisSync<K> {
    fn drop(&mut self) {
        self.shutdown();
    }
}

impl<K: ?Sized> fmt::Debug for RedisSync<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Neither the URL (password) nor the hash key is printed.
        f.debug_struct("RedisSync")
            .field("prefix", &self.inner.prefix)
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

/// Runs `SharedFilter::reload_from` (and so `SharedFilter::rebuild_every`) on a synchronised
/// filter as [`RedisSync::rebuild`].
struct RebuildOwner(Weak<Inner>);

impl ExternalRebuild for RebuildOwner {
    fn rebuild<'a>(
        &'a self,
        source: &'a dyn ErasedKeySource,
    ) -> Pin<Box<dyn Future<Output = Result<Reloaded, BoxError>> + Send + 'a>> {
        Box::pin(async move {
            let inner = self
                .0
                .upgrade()
                .ok_or("the filter's RedisSync was dropped")?;
            Ok(match inner.rebuild(source, false).await? {
                Rebuilt::Rebuilt { keys, .. } => Reloaded::Rebuilt { keys },
                Rebuilt::Skipped => Reloaded::Elsewhere,
            })
        })
    }
}

impl Inner {
    fn generation(&self) -> u64 {
        lock(&self.state).generation
    }

    fn segments(&self) -> u64 {
        self.shape.num_bytes().div_ceil(self.cfg.segment_bytes)
    }

    fn ttl_ms(&self) -> u64 {
        self.cfg.lock_ttl.as_millis().max(1) as u64
    }

    /// How recent a heartbeat in the member set must be for a rebuild to wait for that
    /// instance's acknowledgement.
    fn liveness_ms(&self) -> u64 {
        (self.cfg.reconcile_every.as_millis() as u64)
            .saturating_mul(3)
            .max(1000)
    }

    /// The insert hook (queue the key's bits), the commit hook (queue its digest) and the
    /// rejection override (the stale policy), each holding a weak reference.
    fn install_hooks(self: &Arc<Self>) {
        let weak: Weak<Self> = Arc::downgrade(self);
        self.filter
            .set_insert_hook(Some(Arc::new(move |bytes: &[u8]| {
                if let Some(inner) = weak.upgrade() {
                    inner.on_insert(bytes);
                }
            })));
        let weak: Weak<Self> = Arc::downgrade(self);
        self.filter
            .set_commit_hook(Some(Arc::new(move |bytes: &[u8]| {
                if let Some(inner) = weak.upgrade() {
                    inner.on_commit(bytes);
                }
            })));
        // The filter's own rebuilds (`reload_from`, `rebuild_every`) go through the protocol:
        // a local one would swap in a filter the fleet does not share.
        self.filter
            .set_external_rebuild(Some(Arc::new(RebuildOwner(Arc::downgrade(self)))));
        if self.cfg.pubsub {
            let weak: Weak<Self> = Arc::downgrade(self);
            self.filter.set_rejection_override(Some(Arc::new(move || {
                weak.upgrade()
                    .is_some_and(|inner| inner.freshness.let_through())
            })));
        }
    }

    fn remove_hooks(&self) {
        self.filter.set_external_rebuild(None);
        self.filter.set_insert_hook(None);
        self.filter.set_commit_hook(None);
        self.filter.set_rejection_override(None);
    }

    fn set_connected(&self, up: bool) {
        #[cfg(feature = "metrics")]
        metrics::gauge!(names::CONNECTED, "prefix" => self.prefix.clone()).set(if up {
            1.0
        } else {
            0.0
        });
        let was = self.connected.swap(up, Relaxed);
        if was && !up {
            // Whatever happened meanwhile (a restart, a failover, lost writes), the next pass
            // compares every segment.
            self.full_pass_owed.store(true, Relaxed);
            tracing::warn!(prefix = %self.prefix, "lost Redis: serving and inserting locally; bits set meanwhile are pushed on reconnection");
        } else if !was && up {
            tracing::info!(prefix = %self.prefix, "connected to Redis");
        }
    }
}
