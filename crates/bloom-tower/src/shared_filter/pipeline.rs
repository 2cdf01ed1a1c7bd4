//! The rebuild pipeline, the one path every rebuild takes, whoever fills the new filter:
//! hold the rebuild slot, [publish](Run::publish) the filter being built, [fill] it,
//! then [swap it in](Run::swap_in) or drop the [`Run`] to abandon it. The steps are where
//! the [module docs](super) prove a rebuild loses no key.
//!
//! [`SharedFilter::reload_from`](super::SharedFilter::reload_from) runs all of it from a
//! [`KeySource`]; [`SharedFilter::start_building`](super::SharedFilter::start_building) and
//! [`Building`](super::Building) run it for a caller that fills the filter itself (a
//! replication layer, with [`CurrentFilter::fill_from`] and bits merged from elsewhere).

use std::pin::pin;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

use bloom_core::{AnyFilter, Key};
use futures_core::Stream;
use futures_util::StreamExt;
use tokio::sync::OwnedMutexGuard;

use super::rebuild::{Chain, ReloadError};
use super::{CurrentFilter, Generation, Shared};
use crate::key_source::{BoxError, KeySource};
use crate::stats::RebuildOutcome;

/// Keys streamed between two yields to the scheduler: an in-memory source is always ready,
/// and a rebuild of millions of keys must not hold a worker thread for its whole length.
const YIELD_EVERY: u64 = 4096;

/// How the last rebuild ended; read by callers that waited for it.
#[derive(Default)]
pub(super) struct Slot {
    pub(super) last: Option<Finished>,
}

pub(super) enum Finished {
    Rebuilt { keys: u64 },
    Failed(Arc<str>),
    Cancelled,
}

/// One running rebuild, holding the rebuild slot. Dropping it before
/// [`swap_in`](Self::swap_in) (on error, with the future, or with its [`Building`](super::Building))
/// abandons it: the filter being built is unpublished and the outcome recorded for callers
/// waiting on the slot.
pub(super) struct Run {
    shared: Arc<Shared>,
    /// `None` once the run has ended.
    slot: Option<OwnedMutexGuard<Slot>>,
    /// For the rebuild-duration histogram.
    started: Instant,
    /// Whether a drop midway is logged: a dropped `reload_from` future is news, a dropped
    /// [`Building`](super::Building) is its owner's decision (and its owner's to report).
    log_drop: bool,
}

/// How many keys a swapped-in filter holds.
pub(super) enum Count {
    /// Counted while filling it: the keys read, and the distinct keys its inserts counted.
    Read(u64),
    /// Estimated from its bits after the swap: keys merged in from elsewhere were not counted
    /// on insert.
    FromBits,
}

/// What [`Run::swap_in`] did.
pub(super) struct Swapped {
    /// Distinct keys in the swapped-in filter.
    pub(super) items: u64,
    /// From the start of the run to the swap.
    pub(super) elapsed: Duration,
}

impl Run {
    /// Starts a run holding `slot` (the lock on `shared.rebuild`); its clock starts now.
    pub(super) fn new(shared: Arc<Shared>, slot: OwnedMutexGuard<Slot>, log_drop: bool) -> Self {
        Self {
            shared,
            slot: Some(slot),
            started: Instant::now(),
            log_drop,
        }
    }

    /// Publishes `filter` as the one being built, numbered after every earlier generation.
    pub(super) fn publish(&self, filter: AnyFilter) -> Arc<Generation> {
        let next = Arc::new(self.shared.next_generation(filter));
        // Publish: from here on every insert also writes `next`. Taking the write lock waits
        // out inserts that started before, so each of them returns before `keys()` is called.
        *self.shared.write_building() = Some(Arc::clone(&next));
        next
    }

    /// Swaps `next` in (from now on it serves, and inserts write it alone), ends the run and
    /// records it: the rebuild counter, the slot, the duration and the key-count metrics, and
    /// the end of verifying if the filter it replaces was.
    pub(super) fn swap_in(mut self, next: &Arc<Generation>, count: Count) -> Swapped {
        let shared = &*self.shared;
        // Swap, under the write lock: no insert is between writing the old filter and
        // reading `building` while this happens.
        let replaced = {
            let mut building = shared.write_building();
            let replaced = shared.current.swap(Arc::clone(next));
            *building = None;
            replaced
        };
        let (keys, items) = match count {
            Count::Read(read) => (read, next.items.load(Relaxed)),
            Count::FromBits => {
                let estimate = next.bit_estimate();
                next.items.store(estimate, Relaxed);
                (estimate, estimate)
            }
        };
        let elapsed = self.started.elapsed();
        shared
            .counters
            .rebuild_finished(&shared.name, RebuildOutcome::Ok);
        shared.counters.rebuilt_in(&shared.name, elapsed);
        shared.counters.keys(&shared.name, items);
        if let Some(mut slot) = self.slot.take() {
            slot.last = Some(Finished::Rebuilt { keys });
        }
        // Whoever filled it, the new filter is complete: a verifying one it replaces (a
        // snapshot that could not be caught up) stops letting keys through, and the gauge
        // says so (it stayed at 1 after a rebuild by an owner, e.g. bloom-redis).
        if replaced.verifying {
            shared.counters.verifying(&shared.name, false);
            tracing::info!(filter = %shared.name, keys, "rebuilt the filter; it rejects absent keys again");
        }
        Swapped { items, elapsed }
    }

    /// Ends the run as failed with `error` (abandoning the filter being built, if published),
    /// and hands `error` back.
    pub(super) fn fail(mut self, error: ReloadError) -> ReloadError {
        self.abandon(Finished::Failed(Chain(&error).to_string().into()));
        error
    }

    /// Unpublishes the filter being built and records `finished` (failed or cancelled),
    /// unless the run has ended.
    fn abandon(&mut self, finished: Finished) {
        let Some(mut slot) = self.slot.take() else {
            return;
        };
        // This is what makes a failed or cancelled rebuild harmless: inserts stop writing a
        // filter that will never serve, and every one of them also went into the serving one.
        *self.shared.write_building() = None;
        let outcome = match finished {
            Finished::Failed(_) => RebuildOutcome::Error,
            _ => RebuildOutcome::Cancelled,
        };
        if self.log_drop && matches!(finished, Finished::Cancelled) {
            tracing::debug!(filter = %self.shared.name, "rebuild dropped midway; the previous filter keeps serving");
        }
        self.shared
            .counters
            .rebuild_finished(&self.shared.name, outcome);
        slot.last = Some(finished);
    }
}

impl Drop for Run {
    fn drop(&mut self) {
        self.abandon(Finished::Cancelled);
    }
}

/// Streams `keys` into `generation`, yielding to the scheduler every [`YIELD_EVERY`] keys:
/// how many were read, or how many before the source's error (and the error).
pub(super) async fn fill<K, E>(
    generation: &Generation,
    keys: impl Stream<Item = Result<K, E>>,
) -> Result<u64, (u64, BoxError)>
where
    K: Key,
    E: Into<BoxError>,
{
    let mut keys = pin!(keys);
    let mut read = 0u64;
    loop {
        // Matched in place, so no key or error is held across the yield below (they need
        // not be `Send`).
        match keys.next().await {
            None => return Ok(read),
            Some(Ok(key)) => {
                // A refusal marks the generation full; whoever publishes it reports that.
                generation.insert(&key);
            }
            Some(Err(error)) => return Err((read, error.into())),
        }
        read += 1;
        if read % YIELD_EVERY == 0 {
            tokio::task::yield_now().await;
        }
    }
}

impl CurrentFilter {
    /// Streams every key of `source` ([`KeySource::keys`]) into this filter, as
    /// [`SharedFilter::reload_from`](super::SharedFilter::reload_from) fills the filter it
    /// builds: for a filter being built with [`SharedFilter::start_building`]
    /// (see [`Building::handle`]). It yields to the scheduler every 4096 keys, so an
    /// always-ready source does not hold a worker thread for its whole length.
    ///
    /// Returns how many keys were read or, if the source fails, how many were read before
    /// the error, and the error.
    ///
    /// [`SharedFilter::start_building`]: super::SharedFilter::start_building
    /// [`Building::handle`]: super::Building::handle
    ///
    /// ```
    /// use bloom_tower::key_source::BoxError;
    /// use bloom_tower::{BloomFilter, SharedFilter};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), BoxError> {
    /// let filter = SharedFilter::<u64>::new(BloomFilter::new(1_000, 0.01)?);
    /// let building = filter.start_building(BloomFilter::new(1_000, 0.01)?)?;
    /// // On an error, `?` drops `building`, which abandons the rebuild.
    /// let read = building.handle().fill_from(&vec![1u64, 2, 3]).await.map_err(|(_, e)| e)?;
    /// assert_eq!(read, 3);
    /// building.finish();
    /// assert!(filter.contains(&2u64));
    /// # Ok(())
    /// # }
    /// ```
    pub async fn fill_from<S>(&self, source: &S) -> Result<u64, (u64, BoxError)>
    where
        S: KeySource + ?Sized,
    {
        fill(&self.0, source.keys()).await
    }
}
