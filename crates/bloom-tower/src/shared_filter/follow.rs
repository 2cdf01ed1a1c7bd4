//! Following a source's changes: every key any writer commits is inserted within a bounded
//! delay ([`SharedFilter::follow`], one step at a time with [`Follower`], whose docs give the
//! argument).

use std::fmt;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use futures_core::Stream;
use futures_util::StreamExt as _;
use tokio::sync::Notify;

use super::SharedFilter;
use super::rebuild::{BackgroundTask, Chain};
use crate::key::KeyFor;
use crate::key_source::{BoxError, KeySource, Watermark};

/// The longest wait between two steps while the source keeps failing.
pub const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// How a filter follows a source: the wait between steps, and what may wake it earlier.
///
/// ```
/// use std::time::Duration;
/// use bloom_tower::shared_filter::Follow;
///
/// // Poll every 250 ms (a commit is in the filter within about that).
/// let poll = Follow::every(Duration::from_millis(250));
/// # let _ = poll;
/// ```
pub struct Follow {
    pub(crate) every: Duration,
    pub(crate) wake: Option<Pin<Box<dyn Stream<Item = ()> + Send>>>,
}

impl Follow {
    /// A step every `interval` (at least 1 ms).
    pub fn every(interval: Duration) -> Self {
        Self {
            every: interval.max(Duration::from_millis(1)),
            wake: None,
        }
    }

    /// Also steps whenever `wake` yields: e.g. PostgreSQL notifications (`ChangeLog::notifications`,
    /// with the `postgres` feature), so that a commit is read at once and `every` is only the safety net. Wake-ups that
    /// arrive during a step are merged into the next one.
    pub fn wake_on(mut self, wake: impl Stream<Item = ()> + Send + 'static) -> Self {
        self.wake = Some(Box::pin(wake));
        self
    }

    /// The wait between steps.
    pub fn interval(&self) -> Duration {
        self.every
    }

    /// Waits until the next step is due: `delay` has passed, or a wake-up arrived (then every
    /// wake-up already queued is taken too, one step serves them all). A wake stream that
    /// ends leaves the interval alone.
    pub async fn wait(&mut self, delay: Duration) {
        let sleep = tokio::time::sleep(delay);
        match &mut self.wake {
            None => sleep.await,
            Some(wake) => {
                tokio::select! {
                    () = sleep => {}
                    next = wake.next() => match next {
                        Some(()) => {
                            // Merge the wake-ups that are already waiting.
                            while let Some(Some(())) = futures_util::FutureExt::now_or_never(wake.next()) {}
                        }
                        None => self.wake = None,
                    },
                }
            }
        }
    }
}

impl fmt::Debug for Follow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Follow")
            .field("every", &self.every)
            .field("wake", &self.wake.is_some())
            .finish()
    }
}

/// Follows a [`KeySource`] into a [`SharedFilter`] one [`step`](Self::step) at a time.
/// [`SharedFilter::follow`] runs one in a task; use it directly to decide yourself when to
/// step (bloom-redis does, so that one instance of a fleet follows and stores its position in
/// Redis).
///
/// # Why a followed filter misses no committed key
///
/// A [`Follower`] holds a position `p` in the source such that every key added before `p`
/// was taken is in the filter. One step takes the source's position now, `w`
/// ([`KeySource::watermark`]), then inserts every key of [`KeySource::keys_since`]`(p)`, then
/// moves to `w`. A key added after `p` was taken is in `keys_since(p)` (the `watermark`
/// contract), so after the step every key added before `w` was taken is in the filter: the
/// invariant holds at `w`. A step that fails anywhere does not move, so the next one reads
/// from `p` again (after a lost connection, a database restart): keys read twice cost time,
/// never a key. With an exact watermark ([`KeySource::watermark_is_exact`]), `w == p` proves
/// nothing was added since, and the step reads nothing.
///
/// The start: the serving filter's own watermark (a rebuild's, or a snapshot's caught up),
/// which has the same meaning; [`Watermark::origin`] (every key) if it has none. Keys are
/// inserted through [`SharedFilter::insert`], so a rebuild running meanwhile gets them too,
/// and the [insert hook](SharedFilter::set_insert_hook) forwards them (to Redis, by
/// bloom-redis). After each step the serving filter's watermark moves to `w`, so a snapshot
/// saved afterwards is caught up from there on the next start.
///
/// The delay from a commit to the key being in the filter is at most the wait between steps
/// ([`Follow::every`], or less when a [wake-up](Follow::wake_on) arrives: a PostgreSQL
/// `NOTIFY`) plus one step. While the source fails, steps are retried with a backoff doubling
/// from `every` up to [`MAX_BACKOFF`], and the delay grows by that much after it answers again.
///
/// Tests: `tests/change_log.rs` (`a_row_committed_behind_the_filters_back_is_followed`,
/// `a_failing_source_loses_nothing_when_it_answers_again`, …).
pub struct Follower<K: ?Sized, S> {
    filter: SharedFilter<K>,
    source: S,
    position: Watermark,
}

impl<K: ?Sized, S> fmt::Debug for Follower<K, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Follower")
            .field("filter", &self.filter.name())
            .field("position", &self.position)
            .finish_non_exhaustive()
    }
}

impl<K: ?Sized, S> Follower<K, S>
where
    S: KeySource,
    S::Key: KeyFor<K>,
{
    /// Follows `source` into `filter` from the serving filter's watermark (from the start of
    /// the source if it has none).
    ///
    /// ```
    /// use bloom_tower::{BloomFilter, SharedFilter, shared_filter::Follower};
    ///
    /// # #[cfg(not(feature = "sqlx"))] fn main() {}
    /// # #[cfg(feature = "sqlx")]
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    /// # let pool = sqlx::sqlite::SqlitePoolOptions::new().max_connections(1)
    /// #     .connect("sqlite::memory:").await?;
    /// # sqlx::query("CREATE TABLE orders (id INTEGER PRIMARY KEY)").execute(&pool).await?;
    /// # let orders = bloom_tower::key_source::change_log::ChangeLog::<i64, _>::sqlite(pool.clone(), "orders", "id")?;
    /// # orders.install().await?;
    /// let filter = SharedFilter::<i64>::new(BloomFilter::new(1_000, 0.01)?);
    /// let mut follower = Follower::new(&filter, &orders);
    /// sqlx::query("INSERT INTO orders (id) VALUES (3)").execute(&pool).await?;
    /// follower.step().await?;
    /// assert!(filter.contains(&3i64));
    /// # Ok(())
    /// # }
    /// ```
    pub fn new(filter: &SharedFilter<K>, source: S) -> Self {
        let position = filter
            .shared
            .current
            .load()
            .watermark()
            .unwrap_or_else(Watermark::origin);
        Self::from_position(filter, source, position)
    }

    /// Follows `source` into `filter` from `position`: every key added before `position` was
    /// taken must already be in the filter.
    pub fn from_position(filter: &SharedFilter<K>, source: S, position: Watermark) -> Self {
        Self {
            filter: filter.clone(),
            source,
            position,
        }
    }

    /// The position every key added before is in the filter.
    pub fn position(&self) -> &Watermark {
        &self.position
    }

    /// One step: inserts every key added since [`position`](Self::position) and moves it to
    /// where the source stood before they were read. Returns how many keys it read (a key
    /// read twice counts twice).
    ///
    /// # Errors
    /// The source's error, or one saying it has no watermark; the position does not move.
    pub async fn step(&mut self) -> Result<u64, BoxError> {
        let now = match self.source.watermark().await {
            Ok(Some(now)) => now,
            Ok(None) => return Err("the source cannot say where it stands (no watermark)".into()),
            Err(error) => return Err(error.into()),
        };
        if now == self.position && self.source.watermark_is_exact() {
            return Ok(0);
        }
        let mut read = 0u64;
        // The source's keys are `KeyFor<S::Key>`, and `S::Key: KeyFor<K>`: the same bytes.
        let untyped = self.filter.untyped();
        {
            let keys = self.source.keys_since(&self.position);
            futures_util::pin_mut!(keys);
            while let Some(key) = keys.next().await {
                let key = key.map_err(Into::into)?;
                untyped.insert(&key);
                read += 1;
            }
        }
        self.filter
            .shared
            .current
            .load()
            .set_watermark(Some(now.clone()));
        self.position = now;
        self.filter
            .shared
            .counters
            .followed(self.filter.name(), read);
        Ok(read)
    }
}

impl<K: ?Sized> SharedFilter<K> {
    /// The source position the serving filter holds every key from before: its rebuild's
    /// watermark, moved by catch-ups and follow steps; `None` if its source could not say.
    ///
    /// ```
    /// use bloom_tower::{BloomFilter, SharedFilter};
    ///
    /// let filter = SharedFilter::<u64>::new(BloomFilter::new(1_000, 0.01)?);
    /// assert_eq!(filter.current_watermark(), None); // filled by nobody yet
    /// # Ok::<(), bloom_core::BuildError>(())
    /// ```
    pub fn current_watermark(&self) -> Option<Watermark> {
        self.shared.current.load().watermark()
    }

    /// Follows `source` in a Tokio task: every key any writer adds to it is inserted within
    /// about [`Follow::every`] (see [`Follower`] for the argument and the bound),
    /// from the serving filter's watermark on. Stops like
    /// [`rebuild_every`](Self::rebuild_every)'s task. Steps that fail are logged at `warn`
    /// (once, then again when they succeed) and retried with a backoff.
    ///
    /// A counting or cuckoo filter counts every insert, and a follower inserts each key it
    /// reads: a key this process also inserted itself, or one a step reads twice, is then
    /// held twice, and one [`remove`](Self::remove) leaves it in (a false positive until the
    /// next rebuild, never a false negative), while the filter fills faster. With those
    /// filters, follow only what no write path of the service inserts, or rely on rebuilds.
    ///
    /// ```
    /// use std::time::Duration;
    /// use bloom_tower::{BloomFilter, SharedFilter, shared_filter::Follow};
    /// # #[cfg(feature = "sqlx")]
    /// use bloom_tower::key_source::change_log::ChangeLog;
    ///
    /// # #[cfg(not(feature = "sqlx"))] fn main() {}
    /// # #[cfg(feature = "sqlx")]
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    /// # let pool = sqlx::sqlite::SqlitePoolOptions::new().max_connections(1)
    /// #     .connect("sqlite::memory:").await?;
    /// # sqlx::query("CREATE TABLE users (id INTEGER PRIMARY KEY)").execute(&pool).await?;
    /// let users = ChangeLog::<i64, _>::sqlite(pool.clone(), "users", "id")?;
    /// users.install().await?;
    /// let filter = SharedFilter::<i64>::new(BloomFilter::new(1_000, 0.01)?);
    /// filter.reload_from(&users).await?;
    /// let task = filter.follow(users, Follow::every(Duration::from_millis(20)));
    /// sqlx::query("INSERT INTO users (id) VALUES (12)").execute(&pool).await?;
    /// while !filter.contains(&12i64) {
    ///     tokio::time::sleep(Duration::from_millis(20)).await; // one interval, at most two
    /// }
    /// task.shutdown().await;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Panics
    ///
    /// Outside a Tokio runtime, like [`tokio::spawn`].
    pub fn follow<S>(&self, source: S, mut how: Follow) -> BackgroundTask
    where
        S: KeySource + Send + Sync + 'static,
        S::Key: KeyFor<K>,
        K: 'static,
    {
        let mut position = self
            .shared
            .current
            .load()
            .watermark()
            .unwrap_or_else(Watermark::origin);
        let mut closed = self.shared.closed.subscribe();
        let stop = Arc::new(Notify::new());
        let stopped = Arc::clone(&stop);
        let name = self.name().to_owned();
        // Between steps the task holds the filter weakly, so that dropping every handle ends it.
        let weak = Arc::downgrade(&self.shared);
        let task = tokio::spawn(async move {
            // The serving filter holds every key from before its watermark: the first step
            // is due one interval from now.
            let mut delay = how.every;
            let mut failing = false;
            loop {
                tokio::select! {
                    () = stopped.notified() => return,
                    _ = closed.changed() => return,
                    () = how.wait(delay) => {}
                }
                let Some(shared) = weak.upgrade() else { return };
                let filter = SharedFilter::<K>::from_shared(shared);
                let mut follower = Follower::from_position(&filter, &source, position.clone());
                let step = tokio::select! {
                    () = stopped.notified() => return,
                    step = follower.step() => step,
                };
                position = follower.position().clone();
                match step {
                    Ok(read) => {
                        if failing {
                            tracing::info!(filter = %name, read, "following the source again");
                            failing = false;
                        } else if read > 0 {
                            tracing::debug!(filter = %name, read, "followed the source");
                        }
                        delay = how.every;
                    }
                    Err(error) => {
                        filter.shared.counters.follow_failed(&name);
                        if !failing {
                            tracing::warn!(
                                filter = %name,
                                error = %Chain(&*error),
                                "following the source failed; retrying (no key is lost: the \
                                 next step reads from the same position)"
                            );
                            failing = true;
                        }
                        delay = (delay * 2).max(how.every).min(MAX_BACKOFF.max(how.every));
                    }
                }
            }
        });
        BackgroundTask::new(stop, task)
    }
}
