//! [`RedisSync`]: the handle an application holds. Joining (the first pass, the hooks, the
//! background tasks) and the public operations, each handed to the role that runs it.

use std::fmt;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bloom_tower::SharedFilter;
use bloom_tower::key::{AnyKey, KeyFor};
use bloom_tower::key_source::KeySource;
use bloom_tower::shared_filter::Follow;
use tokio::task::JoinHandle;

use super::inner::{Inner, lock};
use super::reconcile::Trigger;
use crate::conn::Conn;
#[cfg(feature = "metrics")]
use crate::names;
use crate::protocol::Shape;
use crate::{Error, Rebuilt, ReconcileReport, RedisStats, RedisSyncBuilder};

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
/// so that they do not wait for this one's marks.
///
/// It is not `Clone`: one synchronisation per filter, stopped when dropped. Share it through
/// an [`Arc`] — in axum's `State`, or with the task that calls `leave` on shutdown (the
/// filter itself is shared by cloning [`filter()`](Self::filter), a [`SharedFilter`]):
///
/// ```no_run
/// use std::sync::Arc;
///
/// use axum::{Router, extract::State, routing::get};
/// use bloom_redis::RedisSync;
/// use bloom_tower::{BloomFilter, SharedFilter};
///
/// async fn filter_health(State(sync): State<Arc<RedisSync<u64>>>) -> String {
///     let stats = sync.stats();
///     format!("generation {} fresh {}", stats.generation, stats.fresh)
/// }
///
/// # async fn example() -> Result<(), Box<dyn std::error::Error>> {
/// let filter = SharedFilter::<u64>::new(BloomFilter::new(1_000_000, 0.01)?);
/// let sync = Arc::new(
///     RedisSync::builder("redis://127.0.0.1/")
///         .prefix("myapp:users")
///         .connect(&filter)
///         .await?,
/// );
/// let app: Router = Router::new()
///     .route("/health/filter", get(filter_health))
///     .with_state(Arc::clone(&sync));
/// // On SIGTERM, from any task holding a clone:
/// tokio::spawn(async move { sync.leave().await });
/// # drop(app);
/// # Ok(()) }
/// ```
pub struct RedisSync<K: ?Sized> {
    inner: Arc<Inner>,
    tasks: Mutex<Vec<JoinHandle<()>>>,
    /// The typed handle given to `connect` (the background tasks use an untyped one).
    filter: SharedFilter<K>,
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
        let prefix = cfg
            .prefix
            .clone()
            .unwrap_or_else(|| format!("bloom-guard:{}", filter.name()));
        if let Some(reason) = crate::protocol::refuse_prefix(&prefix) {
            return Err(Error::Config(reason));
        }
        let inner = Arc::new(Inner::new(filter, shape, prefix, cfg, conn));
        // The first pass adopts Redis's generation and merges both ways.
        let report = inner.join_pass().await?;
        inner.reconciled(report);
        inner.reconciliation.joined(report);
        inner.install_hooks();
        let mut tasks = vec![
            tokio::spawn(Arc::clone(&inner).publisher()),
            tokio::spawn(Arc::clone(&inner).reconciler()),
        ];
        if inner.cfg.pubsub {
            tasks.push(tokio::spawn(Arc::clone(&inner).subscriber(client)));
            tasks.push(tokio::spawn(Arc::clone(&inner).watch_freshness()));
            tasks.push(tokio::spawn(Arc::clone(&inner).confirmer()));
        }
        let sync = Self {
            inner,
            tasks: Mutex::new(tasks),
            filter: typed.clone(),
        };
        // Serve fresh from the start where possible: the subscription, its catch-up pull, the
        // roster and our first mark round take a few milliseconds. Bounded: a Redis that stalls right
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
        let (generation, building) = lock(&inner.state).generations();
        let view = inner.freshness.report();
        let passes = inner.reconciliation.report();
        RedisStats {
            connected: inner.connected(),
            generation,
            building,
            reconciles: c.reconciles.load(Relaxed),
            reconcile_errors: c.reconcile_errors.load(Relaxed),
            last_reconcile: passes.last,
            joined: passes.joined,
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
            mark_rounds: view.rounds,
            roster_reads: view.roster_reads,
            not_propagated: c.not_propagated.load(Relaxed),
            following: inner.following.load(Relaxed),
            follow_lag: inner.outbox.follow_lag.lag(),
            followed: inner.outbox.follow_lag.followed(),
            confirm_rounds: c.confirm_rounds.load(Relaxed),
            confirmed: c.confirmed.load(Relaxed),
            unconfirmed: c.unconfirmed.load(Relaxed),
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
    /// marks, have gone (or are about to go) stale, so their
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

    /// Waits until every create committed on this instance before the call is seen by every
    /// instance: call it after the commit (and [`PendingInsert::committed`]), before the
    /// create is acknowledged. It returns once everything queued before the call (the keys'
    /// bits and the committed keys' digests, which make the other instances' caches drop
    /// their "not found") is in Redis and published ([`Visible::Published`]). If Redis does not
    /// answer in time and the fleet follows a commit-ordered source ([`follow`](Self::follow)),
    /// it returns once the follow bound has passed since the call ([`Visible::Followed`]):
    /// every instance whose view is fresh then holds every row committed before the call, as
    /// the follower read it (R5 in `docs/REDIS-SYNC.md`).
    ///
    /// [`PendingInsert::committed`]: bloom_tower::shared_filter::PendingInsert::committed
    ///
    /// # Errors
    ///
    /// [`Error::NotPropagated`] after [`publish_timeout`](RedisSyncBuilder::publish_timeout)
    /// when the fleet follows no source: the other instances are stale while they wait for
    /// this one's marks (up to `member_timeout`), and let the key through meanwhile.
    /// [`Error::NotVisible`] after [`visible_timeout`](RedisSyncBuilder::visible_timeout)
    /// when the follow bound is longer than that.
    ///
    /// ```no_run
    /// # async fn example(sync: bloom_redis::RedisSync<u64>) -> Result<(), Box<dyn std::error::Error>> {
    /// let pending = sync.filter().prepare_insert(&42u64);
    /// let _ = sync.propagated().await; // before the commit: the bits
    /// // INSERT INTO users … COMMIT
    /// pending.committed().await;
    /// let _ = sync.visible().await; // before the 201: the digest, or the follow bound
    /// # Ok(()) }
    /// ```
    pub async fn visible(&self) -> Result<Visible, Error> {
        let inner = &*self.inner;
        let publish_timeout = inner.cfg.effective_publish_timeout();
        let follow_bound = inner.outbox.follow_bound.load(Relaxed);
        if follow_bound == 0 {
            return if inner.outbox.wait_published(publish_timeout).await {
                Ok(Visible::Published)
            } else {
                Err(Error::NotPropagated {
                    waited: publish_timeout,
                })
            };
        }
        // The bound is measured on this instance's clock from after the commit; a margin
        // covers the clocks' rates. Never longer than `visible_timeout` (the workspace's
        // `tests/user_service_e2e.rs` `sqlite_users_created_while_redis_hangs_are_found_on_the_other_instance`
        // follows every hour).
        let bound = Duration::from_millis(follow_bound + follow_bound / 100 + 10);
        let limit = inner.cfg.visible_timeout;
        if inner.outbox.wait_published(bound.min(limit)).await {
            Ok(Visible::Published)
        } else if bound <= limit {
            Ok(Visible::Followed)
        } else {
            let follow_bound = Duration::from_millis(follow_bound);
            tracing::warn!(prefix = %inner.prefix, waited = ?limit, ?follow_bound, "a commit not published to Redis in time is acknowledged before the follow bound; other instances may answer \"absent\" for it until the follower reads it");
            Err(Error::NotVisible {
                waited: limit,
                follow_bound,
            })
        }
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
        self.inner.reconcile_recorded(Trigger::Periodic).await
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
        self.inner.reconcile_recorded(Trigger::Full).await
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

    /// [`rebuild`](Self::rebuild) without this instance's check on the new generation's size:
    /// for when most keys really were deleted.
    ///
    /// The other instances still check it, each with its own
    /// [`min_rebuild_fraction`](RedisSyncBuilder::min_rebuild_fraction) (nothing read from
    /// Redis makes an instance drop the keys it serves): where the new generation fails it,
    /// an instance switches with its serving keys carried over, and pushes them. To shrink a
    /// whole fleet, lower `min_rebuild_fraction` on every instance (0 turns the check off).
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
    /// What it logs tells a new fleet from a loss: the fleet marks the shared filter in Redis
    /// once it holds the source's keys (after a rebuild, or a check that found none missing),
    /// and an instance that held a marked filter puts the mark back on data that lost it once
    /// it has pushed its bits there. Fewer keys than the source with the mark: Redis lost data
    /// (WARN). Without it: no shared filter was filled yet, and this instance seeds it (INFO).
    /// A Redis that lost everything while no instance was running cannot be told from a new
    /// one (nothing of the fleet is left in it): it is seeded as one; an instance running
    /// through the loss logs it (WARN, "Redis restarted or its data was replaced").
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

    /// Calls [`refill_if_lost`](Self::refill_if_lost) now, then rebuilds the fleet every
    /// `interval`, in a background task (stopped with this value). Every instance may run
    /// one: the fleet still rebuilds about once per interval, whatever its size (each
    /// interval is claimed in Redis by one instance, and the others wait for the next), and
    /// one at a time (the lock).
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
        let task = tokio::spawn(inner.rebuild_every(interval, source));
        lock(&self.tasks).push(task);
    }

    /// Follows `source`'s changes for the whole fleet: every instance may call it, and one at a
    /// time (the holder of a lease in Redis) reads the source, so the database sees one
    /// follower's queries whatever the fleet's size; the keys it inserts reach the other
    /// instances through Redis as creates do. If the holder dies, another takes over within the
    /// lease and goes on from the position the holder stored in Redis, missing no commit (the
    /// argument in `src/sync/follower.rs`). [`leave`](Self::leave) hands the lease over at
    /// once. Runs until this value is dropped or [`shutdown`](Self::shutdown).
    ///
    /// ```no_run
    /// # async fn example<S>(sync: bloom_redis::RedisSync<i64>, users: S)
    /// # where S: bloom_tower::KeySource<Key = i64> + Send + Sync + 'static {
    /// use std::time::Duration;
    /// use bloom_tower::shared_filter::Follow;
    ///
    /// // `users`: e.g. bloom-tower's `ChangeLog` of the users table (feature `sqlx`), with
    /// // `.wake_on(users.notifications(url))` on PostgreSQL.
    /// sync.follow(users, Follow::every(Duration::from_millis(250)));
    /// # }
    /// ```
    pub fn follow<S>(&self, source: S, how: Follow)
    where
        S: KeySource + Send + Sync + 'static,
        S::Key: KeyFor<K>,
        K: 'static,
    {
        let inner = Arc::clone(&self.inner);
        let task = tokio::spawn(inner.follow(self.filter.clone(), source, how));
        lock(&self.tasks).push(task);
    }

    /// Publishes what is queued (bounded by the publish timeout), [`shutdown`](Self::shutdown)s,
    /// then tells the other instances this one is leaving (so they stop waiting for its
    /// marks at once instead of after `member_timeout`). Call it on a clean shutdown
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
        // Stop publishing before the goodbye: a mark set after it would make the others
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

/// How a create became visible to the whole fleet: [`RedisSync::visible`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Visible {
    /// Its bits and digest are in Redis and published: every instance has them, or is stale.
    Published,
    /// Redis did not answer in time, and the follow bound has passed since the commit: every
    /// instance holds the row as the follower read it, or is stale.
    Followed,
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
