//! Rebuilding from a [`KeySource`]: once on demand, or periodically in the background.

use std::error::Error;
use std::fmt;
use std::sync::{Arc, PoisonError};
use std::time::Duration;

use tokio::sync::{Notify, OwnedMutexGuard};
use tokio::task::JoinHandle;

use super::pipeline::{Count, Finished, Run, Slot, fill};
use super::{ErasedKeySource, SharedFilter};
use crate::key::{AnyKey, KeyFor};
use crate::key_source::{BoxError, KeySource};

/// What a successful [`SharedFilter::reload_from`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Reloaded {
    /// This call streamed its source into a new filter and swapped it in.
    Rebuilt {
        /// Keys read from the source.
        keys: u64,
    },
    /// A rebuild was already running: this call waited for it to complete instead of starting
    /// another, and did not read its own source.
    Joined {
        /// Keys read by the rebuild it waited for.
        keys: u64,
    },
    /// The filter is replicated and another instance is running the rebuild: this one
    /// switches to the new filter when it is published. Returned by an
    /// [`ExternalRebuild`](super::ExternalRebuild) owner (see
    /// [`SharedFilter::set_external_rebuild`]), never by a local rebuild.
    Elsewhere,
}

/// Why a rebuild failed. The previous filter keeps serving and the handle stays usable.
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
pub struct ReloadError(Repr);

#[derive(Debug, thiserror::Error)]
enum Repr {
    #[error("could not size the rebuilt filter; the previous filter keeps serving")]
    Size(#[source] bloom_core::BuildError),
    #[error("the key source failed after {keys} keys; the previous filter keeps serving")]
    Source {
        keys: u64,
        #[source]
        source: BoxError,
    },
    #[error(
        "the rebuild this call waited for failed ({reason}); the previous filter keeps serving"
    )]
    Concurrent { reason: Arc<str> },
    #[error(
        "the rebuild was run by the filter's replication layer and failed; the previous filter \
         keeps serving"
    )]
    External(#[source] BoxError),
}

/// What kind of failure a [`ReloadError`] is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ReloadErrorKind {
    /// The new filter could not be built with the configured size and rate.
    Size,
    /// The [`KeySource`] returned an error.
    Source,
    /// This call waited for a concurrent rebuild, which failed.
    Concurrent,
    /// The filter's replication layer ran the rebuild (see
    /// [`SharedFilter::set_external_rebuild`]) and it failed.
    External,
}

impl ReloadError {
    /// What kind of failure this is.
    pub fn kind(&self) -> ReloadErrorKind {
        match self.0 {
            Repr::Size(_) => ReloadErrorKind::Size,
            Repr::Source { .. } => ReloadErrorKind::Source,
            Repr::Concurrent { .. } => ReloadErrorKind::Concurrent,
            Repr::External(_) => ReloadErrorKind::External,
        }
    }

    /// For a source failure, how many keys were read before it.
    pub fn keys_read(&self) -> Option<u64> {
        match self.0 {
            Repr::Source { keys, .. } => Some(keys),
            _ => None,
        }
    }
}

/// An error and its chain of causes on one line, for logs.
pub(crate) struct Chain<'a>(pub(crate) &'a (dyn Error + 'static));

impl fmt::Display for Chain<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)?;
        let mut cause = self.0.source();
        while let Some(error) = cause {
            write!(f, ": {error}")?;
            cause = error.source();
        }
        Ok(())
    }
}

impl<K: ?Sized> SharedFilter<K> {
    /// Rebuilds the filter from `source` and swaps it in atomically.
    ///
    /// The new filter is sized for the configured capacity or the source's
    /// [count hint](KeySource::count_hint) plus 25%, whichever is larger. Inserts made while
    /// it runs go into both filters, so no key inserted before or during the rebuild is
    /// rejected afterwards; [`KeySource::keys`] says what the source must yield.
    ///
    /// Only one rebuild runs at a time: a call made while another runs waits for it and
    /// returns its result ([`Reloaded::Joined`], or an error of kind
    /// [`Concurrent`](ReloadErrorKind::Concurrent)) without reading `source`; if the one it
    /// waited for was dropped midway, this call rebuilds itself.
    ///
    /// If the source fails, or this future is dropped, the old filter keeps serving with
    /// nothing lost and later rebuilds work normally.
    ///
    /// With an owner installed by [`set_external_rebuild`](Self::set_external_rebuild) (a
    /// replication layer), this call hands `source` to it instead and returns what it
    /// returns (e.g. [`Reloaded::Elsewhere`]); nothing is rebuilt locally, and its failure is
    /// an error of kind [`External`](ReloadErrorKind::External).
    pub async fn reload_from<S>(&self, source: &S) -> Result<Reloaded, ReloadError>
    where
        S: KeySource + Sync + ?Sized,
        S::Key: KeyFor<K>,
    {
        // Before the rebuild slot: the owner may fill this filter with `start_building`,
        // which takes it.
        if let Some(owner) = self.external_rebuild() {
            let source: &dyn ErasedKeySource = &source;
            return owner
                .rebuild(source)
                .await
                .map_err(|error| ReloadError(Repr::External(error)));
        }
        let counters = &self.shared.counters;
        let finished_before = counters.finished_rebuilds();
        let slot = match Arc::clone(&self.shared.rebuild).try_lock_owned() {
            Ok(slot) => slot,
            Err(_) => {
                let slot = Arc::clone(&self.shared.rebuild).lock_owned().await;
                // Join only a rebuild that ended after this call began (the one it waited
                // for), and only if it did its job.
                let waited = counters.finished_rebuilds() != finished_before;
                match &slot.last {
                    Some(Finished::Rebuilt { keys }) if waited => {
                        return Ok(Reloaded::Joined { keys: *keys });
                    }
                    Some(Finished::Failed(reason)) if waited => {
                        let reason = Arc::clone(reason);
                        return Err(ReloadError(Repr::Concurrent { reason }));
                    }
                    _ => slot,
                }
            }
        };
        self.rebuild_holding(slot, source).await
    }

    async fn rebuild_holding<S>(
        &self,
        slot: OwnedMutexGuard<Slot>,
        source: &S,
    ) -> Result<Reloaded, ReloadError>
    where
        S: KeySource + ?Sized,
    {
        let shared = &*self.shared;
        let run = Run::new(Arc::clone(&self.shared), slot, true);
        let next = match shared.next_filter(source.count_hint()) {
            Ok(filter) => run.publish(filter),
            Err(error) => return Err(run.fail(ReloadError(Repr::Size(error)))),
        };

        // Before `keys()`: whatever the source adds after this is in `keys_since(watermark)`,
        // whatever it added before is in `keys()`, so a snapshot of `next` labelled with it
        // can be caught up after a restart.
        let watermark = match source.watermark().await {
            Ok(watermark) => watermark,
            Err(error) => {
                let source = error.into();
                return Err(run.fail(ReloadError(Repr::Source { keys: 0, source })));
            }
        };

        let read = match fill(&next, source.keys()).await {
            Ok(read) => read,
            Err((keys, source)) => return Err(run.fail(ReloadError(Repr::Source { keys, source }))),
        };

        next.set_watermark(watermark);
        let swapped = run.swap_in(&next, Count::Read(read));

        let (items, elapsed) = (swapped.items, swapped.elapsed);
        *shared
            .last_rebuild
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some((read, elapsed));
        tracing::debug!(filter = %shared.name, keys = read, ?elapsed, "rebuilt the filter");
        // A source with no count hint can hold more keys than the configured capacity.
        if next.is_full() {
            shared.report_full(&next);
        } else if next.is_over_capacity(items) {
            shared.report_saturation(&next, items as f64, None);
        }
        // A fresh snapshot after every rebuild: a restart catches up from here.
        self.save_logged().await;
        Ok(Reloaded::Rebuilt { keys: read })
    }

    /// Rebuilds from `source` every `interval` (the first time one `interval` from now),
    /// in a Tokio task, until [`BackgroundTask::shutdown`] or until every handle to this filter
    /// (every clone, every guard holding one) is dropped. A failed rebuild is logged with
    /// `tracing` at `warn` and the old filter keeps serving; the next one runs on schedule.
    /// With [`auto_grow`](crate::shared_filter::SharedFilterBuilder::auto_grow), saturation triggers a rebuild
    /// at once. With an [owner](Self::set_external_rebuild) installed, each one goes to it.
    ///
    /// While the filter is [verifying](Self::is_verifying) (a snapshot that could not be
    /// caught up), the first rebuild runs at once and a failed one is retried after 1 s,
    /// then 2 s, 4 s, … up to 30 s (or `interval`, if shorter), until one swaps in.
    ///
    /// The task holds no strong reference between rebuilds. Dropping the returned
    /// [`BackgroundTask`] detaches it (it keeps running).
    ///
    /// # Panics
    ///
    /// Outside a Tokio runtime, like [`tokio::spawn`].
    pub fn rebuild_every<S>(&self, interval: Duration, source: S) -> BackgroundTask
    where
        S: KeySource + Send + Sync + 'static,
        S::Key: KeyFor<K>,
    {
        let filter = Arc::downgrade(&self.shared);
        let mut closed = self.shared.closed.subscribe();
        let grow = Arc::clone(&self.shared.grow);
        let stop = Arc::new(Notify::new());
        let stopped = Arc::clone(&stop);
        let mut retry = VERIFYING_RETRY_FIRST;
        let mut delay = if self.is_verifying() {
            Duration::ZERO
        } else {
            interval
        };
        let task = tokio::spawn(async move {
            loop {
                tokio::select! {
                    () = stopped.notified() => return,
                    // Only ever resolves with an error: when the last handle is dropped.
                    _ = closed.changed() => return,
                    () = tokio::time::sleep(delay) => {}
                    () = grow.notified() => {}
                }
                let Some(shared) = filter.upgrade() else {
                    return;
                };
                let filter = SharedFilter::<AnyKey>::from_shared(shared);
                let result = tokio::select! {
                    () = stopped.notified() => return,
                    result = filter.reload_from(&source) => result,
                };
                delay = interval;
                if let Err(error) = result {
                    // A verifying filter lets every key through: get out of that state soon.
                    if filter.is_verifying() {
                        delay = retry.min(interval);
                        retry = (retry * 2).min(VERIFYING_RETRY_MAX);
                    }
                    tracing::warn!(
                        filter = %filter.name(),
                        error = %Chain(&error),
                        next_attempt_in = ?delay,
                        "scheduled rebuild failed; the previous filter keeps serving",
                    );
                }
            }
        });
        BackgroundTask { stop, task }
    }
}

/// The first retry of a failed rebuild while verifying; doubled up to [`VERIFYING_RETRY_MAX`].
const VERIFYING_RETRY_FIRST: Duration = Duration::from_secs(1);
const VERIFYING_RETRY_MAX: Duration = Duration::from_secs(30);

/// A background task of a [`SharedFilter`]: scheduled rebuilds
/// ([`rebuild_every`](SharedFilter::rebuild_every)) or snapshots
/// ([`save_every`](SharedFilter::save_every)).
#[derive(Debug)]
#[must_use = "dropping a BackgroundTask detaches it; keep it to shut the task down"]
pub struct BackgroundTask {
    stop: Arc<Notify>,
    task: JoinHandle<()>,
}

impl BackgroundTask {
    pub(crate) fn new(stop: Arc<Notify>, task: JoinHandle<()>) -> Self {
        Self { stop, task }
    }

    /// Stops the task and waits for it to end. A rebuild in progress is dropped, which leaves
    /// the current filter serving.
    pub async fn shutdown(self) {
        self.stop.notify_one();
        // The task cannot panic short of a panicking log subscriber; either way it has ended.
        let _ = self.task.await;
    }

    /// Waits for the task to end on its own: when every handle to the filter is dropped.
    pub async fn join(self) {
        let _ = self.task.await;
    }

    /// Whether the task has ended.
    pub fn is_finished(&self) -> bool {
        self.task.is_finished()
    }
}
