//! Starting a filter: from its snapshot, caught up from the source, or built from the source.
//!
//! A snapshot is a filter as it was when saved. Serving it as is rejects every key created
//! since: by this process after the last save (it was killed), by another writer while the
//! process was down. So a snapshot is used only if it was made for this filter, and only after
//! the keys the source added since its watermark are read in; one that cannot be caught up
//! serves *verifying* (it lets through everything it would reject) until a full rebuild.

use std::io;

use bloom_core::{AnyFilter, Snapshot};

use super::pipeline::fill;
use super::rebuild::{Chain, ReloadError, Reloaded};
use super::snapshot::{self, SnapshotError};
use super::{Generation, SharedFilter, SharedFilterBuilder};
use crate::key::KeyFor;
use crate::key_source::{KeySource, Watermark};

/// How [`SharedFilterBuilder::start`] made the filter it returned.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Started {
    /// From the snapshot, with the keys the source added since its watermark read in: it
    /// serves with the full guarantee at once.
    CaughtUp {
        /// Keys read from the source since the snapshot's watermark.
        keys: u64,
    },
    /// From the snapshot, which could not be caught up: it serves *verifying* (lets through
    /// every key it would reject) until a full rebuild swaps in.
    Verifying {
        /// Why it could not be caught up.
        reason: String,
    },
    /// Built from the whole source.
    Rebuilt {
        /// Keys read from the source.
        keys: u64,
        /// Why the snapshot was not used, if there was one.
        refused: Option<String>,
    },
}

impl<K: ?Sized> SharedFilterBuilder<K> {
    /// Starts the filter the way a restarting service needs it, and only returns when it can
    /// serve without rejecting any key the source holds:
    ///
    /// 1. If the [`snapshot`](Self::snapshot) file exists and was made for this filter (the
    ///    same [name](Self::name), kind and layout as `initial`, and the
    ///    [required hash key](Self::require_hash_key) if one is set), it is loaded and the
    ///    keys `source` added since the snapshot's watermark
    ///    ([`KeySource::keys_since`]) are read into it before it serves: [`Started::CaughtUp`].
    /// 2. If it cannot be caught up (no watermark in the snapshot, a source that cannot say,
    ///    or a source error), it serves *verifying* ([`Started::Verifying`]): every lookup it
    ///    would answer "absent" is let through and counted, until a full rebuild swaps in.
    ///    [`SharedFilter::rebuild_every`] starts that rebuild at once.
    /// 3. Otherwise (no snapshot, or one that is refused, corrupt or unreadable: logged at
    ///    `warn` with the reason) `initial` is shared and rebuilt from `source` before this
    ///    returns ([`Started::Rebuilt`]); rebuilt filters are sized as by
    ///    [`reload_from`](SharedFilter::reload_from), so `initial` may be small.
    ///
    /// Every later rebuild saves the snapshot, as does [`SharedFilter::save_every`]; a
    /// counting filter caught up this way may count a key twice (it then stays a false
    /// positive after one removal, never a false negative).
    ///
    /// ```
    /// use bloom_tower::{BloomFilter, SharedFilter, shared_filter::Started};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let dir = tempfile::tempdir()?;
    /// let ids = vec![1u64, 2, 3];
    /// let start = || {
    ///     SharedFilter::<u64>::builder()
    ///         .name("users")
    ///         .snapshot(dir.path().join("users.bloom"))
    ///         .start(BloomFilter::new(1_000, 0.01).unwrap(), &ids)
    /// };
    /// let (filter, started) = start().await?; // no snapshot yet: built from the source
    /// assert!(matches!(started, Started::Rebuilt { keys: 3, .. }));
    /// filter.save_snapshot().await?;
    /// // A Vec cannot say what changed since: the snapshot serves verifying until a rebuild.
    /// let (restarted, started) = start().await?;
    /// assert!(matches!(started, Started::Verifying { .. }) && restarted.is_verifying());
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    /// Only when the filter has to be built from the source and that fails (there is then
    /// nothing to serve).
    pub async fn start<S>(
        self,
        initial: impl Into<AnyFilter>,
        source: &S,
    ) -> Result<(SharedFilter<K>, Started), ReloadError>
    where
        S: KeySource + Sync + ?Sized,
        S::Key: KeyFor<K>,
    {
        let initial = initial.into();
        let refused = match self.snapshot.clone() {
            None => None,
            Some(path) => match snapshot::read(&path).await {
                Ok(snapshot) => match self.refusal(&snapshot, &initial) {
                    None => return Ok(self.catch_up(snapshot, source).await),
                    Some(reason) => Some(reason),
                },
                Err(error) if is_missing(&error) => None,
                Err(error) => Some(Chain(&error).to_string()),
            },
        };
        let name = self.name.clone().unwrap_or_default();
        if let (Some(reason), Some(path)) = (&refused, &self.snapshot) {
            tracing::warn!(
                filter = %name,
                path = %path.display(),
                reason = %reason,
                "not using the filter snapshot; building the filter from the source",
            );
        }
        let filter = self.build(initial);
        let keys = match filter.reload_from(source).await? {
            Reloaded::Rebuilt { keys } | Reloaded::Joined { keys } => keys,
            // Only with an external owner, and nobody could install one on a filter built here.
            Reloaded::Elsewhere => 0,
        };
        tracing::info!(filter = %filter.name(), keys, "built the filter from the source");
        Ok((filter, Started::Rebuilt { keys, refused }))
    }

    /// Why `snapshot` may not stand in for this filter, if it may not.
    fn refusal(&self, snapshot: &Snapshot, initial: &AnyFilter) -> Option<String> {
        let name = self.name.as_deref().unwrap_or("default");
        let saved = &snapshot.filter;
        if let Some(label) = &snapshot.label {
            if label.name != name {
                return Some(format!(
                    "it was saved by the filter {:?}, this is {name:?}",
                    label.name
                ));
            }
        }
        if saved.kind() != initial.kind() {
            return Some(format!(
                "it holds a {} filter, this one is {}",
                saved.kind(),
                initial.kind()
            ));
        }
        if let (Some(saved_layout), Some(layout)) = (saved.layout(), initial.layout()) {
            if saved_layout != layout {
                return Some(format!(
                    "it uses the {saved_layout} layout, this filter {layout}"
                ));
            }
        }
        if self.hash_key.is_some_and(|key| key != saved.seed()) {
            return Some("it was made with another hash key".to_owned());
        }
        None
    }

    /// Reads the keys added since the snapshot's watermark into it; verifying if it cannot.
    async fn catch_up<S>(self, snapshot: Snapshot, source: &S) -> (SharedFilter<K>, Started)
    where
        S: KeySource + ?Sized,
    {
        let since = snapshot
            .label
            .and_then(|label| label.watermark)
            .map(Watermark::new);
        // Until a catch-up moves it, the snapshot's own watermark stays true of the filter
        // (it only gains keys), so a verifying filter saved again can still be caught up by
        // the next start.
        let mut generation = Generation::loaded(snapshot.filter, false, since.clone());
        let caught_up = match &since {
            None => Err("the snapshot has no watermark".to_owned()),
            Some(since) => read_since(&generation, since, source).await,
        };
        let name = self.name.clone().unwrap_or_default();
        let started = match caught_up {
            Ok((keys, now)) => {
                generation.set_watermark(Some(now));
                tracing::info!(filter = %name, keys, "loaded the filter snapshot and caught up from the source");
                Started::CaughtUp { keys }
            }
            Err(reason) => {
                generation.verifying = true;
                tracing::warn!(
                    filter = %name,
                    reason = %reason,
                    "loaded the filter snapshot but could not catch it up: it lets every key \
                     through until a full rebuild swaps in",
                );
                Started::Verifying { reason }
            }
        };
        let verifying = generation.verifying;
        let filter = self.build_generation(generation);
        let counters = &filter.shared.counters;
        counters.verifying(filter.name(), verifying);
        if let Started::CaughtUp { keys } = started {
            counters.caught_up(filter.name(), keys);
        }
        (filter, started)
    }
}

/// Streams `keys_since(since)` into `generation` (not serving yet); the keys read and the
/// source's watermark taken before reading them (what the caught-up filter is complete to).
async fn read_since<S>(
    generation: &Generation,
    since: &Watermark,
    source: &S,
) -> Result<(u64, Watermark), String>
where
    S: KeySource + ?Sized,
{
    let now = match source.watermark().await {
        Ok(Some(now)) => now,
        Ok(None) => return Err("the source cannot say what changed (no watermark)".to_owned()),
        Err(error) => {
            let error = error.into();
            return Err(format!(
                "reading the source's watermark failed: {}",
                Chain(&*error)
            ));
        }
    };
    let read = fill(generation, source.keys_since(since))
        .await
        .map_err(|(read, error)| {
            format!(
                "the source failed after {read} keys since the watermark: {}",
                Chain(&*error)
            )
        })?;
    Ok((read, now))
}

/// No snapshot yet: the first start, not a reason to warn.
fn is_missing(error: &SnapshotError) -> bool {
    std::error::Error::source(error)
        .and_then(|cause| cause.downcast_ref::<io::Error>())
        .is_some_and(|io| io.kind() == io::ErrorKind::NotFound)
}
