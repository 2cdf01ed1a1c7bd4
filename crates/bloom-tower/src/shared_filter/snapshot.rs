//! Snapshots on disk, for a fast restart: the filter in the bloom-core format behind a label
//! ([`bloom_core::SnapshotLabel`]) with the filter's name and the source watermark it is
//! complete up to, so that [`start`](super::SharedFilterBuilder::start) can catch it up.
//!
//! A save never leaves a half-written file under the snapshot's name: it writes a temporary
//! file in the same directory (created `0600` under an unpredictable name by `tempfile`, since
//! the file holds the secret hash key), fsyncs it, renames it over the target (atomic on
//! POSIX), then fsyncs the directory so the rename itself survives a crash.
//!
//! # When a periodic snapshot is skipped
//!
//! [`save_every`](SharedFilter::save_every) rewrites the file only when it may hold less than
//! the filter does. Before each write it takes the filter's *version*, read without touching
//! the bits: which generation serves (a rebuild, an external or bloom-redis switch, an
//! auto-grow swap in another), the insert and remove counts ([`SharedFilter::insert`],
//! [`insert_after_commit`](SharedFilter::insert_after_commit), a follower's keys, a refused
//! cuckoo insert; [`SharedFilter::remove`]), the serving plain filter's
//! [`merge_count`](bloom_core::BloomFilter::merge_count) (bits OR-ed in through
//! [`current`](SharedFilter::current) by bloom-redis's `union_words`, or by
//! [`merge_snapshot`](SharedFilter::merge_snapshot)), and the watermark the label records
//! (moved by catch-ups and follow steps). A tick is skipped, and logged at `debug` with the
//! running count of skips, only when all of these hold:
//!
//! * this task wrote the file before (the first tick after start always writes: no file, or
//!   one of unknown age);
//! * the file is still the one it wrote (same device, inode, length and modification time: a
//!   file replaced or removed since, by a rebuild's save, [`save_snapshot`](SharedFilter::save_snapshot)
//!   or anyone else, is written again);
//! * the version is the one taken before that write;
//! * that write was *settled*: the merge count had not moved since the write before it (or is
//!   0). Bits merged straight into the filter are counted by a relaxed counter that orders
//!   nothing, so a write that saw a new merge count may have missed some of its bits; the next
//!   tick writes once more, a whole interval later.
//!
//! Why a skip loses no key: the version is read *before* the bits, and the write then takes
//! and releases the `building` write lock, which every insert holds (read side) across its
//! writes and releases before it counts itself. An insert counted in the version therefore
//! finished its writes before the bits are read; one not counted moves the version, and the
//! next tick writes. The watermark is read under its mutex, which a follower takes after
//! inserting the keys it covers. Removals only ever make the file hold more than the filter (a
//! false positive after a restart, never a miss). Mutations made directly on the filter
//! [`current`](SharedFilter::current) returns other than `union`/`union_words` (say
//! `insert` or `clear` on the bare filter) are not seen: go through [`SharedFilter`].
//!
//! Guarded by `tests/snapshot.rs`: `an_unchanged_filter_is_not_rewritten_by_save_every` (no
//! rewrite, the skip count moves) and `every_change_is_written_by_the_next_periodic_snapshot`
//! (an insert, bits merged in, a follow step with a key and one moving only the watermark, a
//! removal: each rewritten within an interval and warm-started from).

use std::fs::File;
use std::io::{self, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Weak};
use std::time::{Duration, SystemTime};

use std::sync::atomic::Ordering::Relaxed;

use bloom_core::{DecodeError, IncompatibleError, Snapshot, SnapshotLabel};
use tokio::sync::Notify;

use super::rebuild::{BackgroundTask, Chain};
use super::{Generation, SharedFilter, SharedFilterBuilder};
use crate::key::AnyKey;
use crate::key_source::Watermark;

/// Why a snapshot could not be saved or loaded.
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
pub struct SnapshotError(Repr);

#[derive(Debug, thiserror::Error)]
enum Repr {
    #[error("could not save the filter snapshot to {}", path.display())]
    Save {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("could not read the filter snapshot {}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error(
        "the filter snapshot {} is corrupt; rebuild the filter from its source instead",
        path.display()
    )]
    Corrupt {
        path: PathBuf,
        #[source]
        source: DecodeError,
    },
    #[error("the filter {name:?} has no snapshot path (set SharedFilterBuilder::snapshot)")]
    NoPath { name: String },
}

impl SnapshotError {
    /// Whether the file was read but is not a valid snapshot (bad magic, truncated, checksum
    /// mismatch, …): rebuild from the source instead.
    pub fn is_corrupt(&self) -> bool {
        matches!(self.0, Repr::Corrupt { .. })
    }

    /// The snapshot's path (empty if none was configured).
    pub fn path(&self) -> &Path {
        match &self.0 {
            Repr::Save { path, .. } | Repr::Read { path, .. } | Repr::Corrupt { path, .. } => path,
            Repr::NoPath { .. } => Path::new(""),
        }
    }
}

/// What [`SharedFilter::merge_snapshot`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum MergedSnapshot {
    /// The snapshot's bits were OR-ed into the serving filter: it now answers "maybe" for
    /// every key the snapshot held.
    #[non_exhaustive]
    Merged {
        /// Bits set in the snapshot (every one of them is set in the serving filter now).
        set_bits: u64,
        /// When the snapshot was saved, in milliseconds since the Unix epoch; `None` for a
        /// bare filter file, which has no label.
        saved_at_unix_ms: Option<u64>,
    },
    /// There is no file at the snapshot path (the first start): nothing changed.
    Missing,
    /// The file holds another filter than the serving one: nothing changed.
    Refused(MergeRefused),
}

impl MergedSnapshot {
    /// The number of bits set in the merged snapshot, if it was merged.
    pub fn merged_bits(&self) -> Option<u64> {
        match self {
            Self::Merged { set_bits, .. } => Some(*set_bits),
            Self::Missing | Self::Refused(_) => None,
        }
    }

    /// Whether there was no file at the snapshot path.
    pub fn is_missing(&self) -> bool {
        matches!(self, Self::Missing)
    }

    /// Why the snapshot was not merged, if it was refused.
    pub fn refusal(&self) -> Option<&MergeRefused> {
        match self {
            Self::Refused(reason) => Some(reason),
            Self::Merged { .. } | Self::Missing => None,
        }
    }
}

impl std::fmt::Display for MergedSnapshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Merged { set_bits, .. } => write!(f, "merged the snapshot's {set_bits} set bits"),
            Self::Missing => f.write_str("there is no snapshot file"),
            Self::Refused(reason) => write!(f, "the snapshot was not merged: {reason}"),
        }
    }
}

/// Why [`SharedFilter::merge_snapshot`] left a snapshot out: bits merge only between plain
/// filters of the same size, `k`, layout and hash key. No variant shows a hash key.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum MergeRefused {
    /// The snapshot was saved by a filter of another name.
    #[error("it was saved by the filter {saved:?}, this is {serving:?}")]
    Name {
        /// The name in the snapshot's label.
        saved: String,
        /// The serving filter's name.
        serving: String,
    },
    /// The snapshot or the serving filter is not a plain Bloom filter (counting, scalable).
    #[error("it holds a {saved} filter and this one is {serving}: only plain filters merge")]
    Kind {
        /// The snapshot filter's kind.
        saved: &'static str,
        /// The serving filter's kind.
        serving: &'static str,
    },
    /// Another number of bits, number of hashes or layout.
    #[error("it has another shape: {0}")]
    Shape(IncompatibleError),
    /// Another hash key (the keys themselves are secret and not shown).
    #[error("it was made with another hash key")]
    HashKey,
}

impl<K: ?Sized> SharedFilter<K> {
    /// Writes the serving filter to `path` atomically (temporary file, fsync, rename, fsync of
    /// the directory), on Tokio's blocking pool, labelled with this filter's name and the
    /// source watermark it is complete up to. The file holds the secret hash key: it is
    /// created readable by its owner only.
    pub async fn save(&self, path: impl AsRef<Path>) -> Result<(), SnapshotError> {
        let current = self.shared.current.load_full();
        // Even a verifying filter's watermark is true of it (the one of the snapshot it was
        // loaded from: it has only gained keys since), so the next start can catch it up.
        let watermark = current.watermark();
        self.write_generation(path.as_ref(), current, watermark)
            .await
            .map(drop)
    }

    /// Writes `current` labelled with `watermark` to `path` atomically; the written file's
    /// identity.
    async fn write_generation(
        &self,
        path: &Path,
        current: Arc<Generation>,
        watermark: Option<Watermark>,
    ) -> Result<FileId, SnapshotError> {
        let path = path.to_owned();
        let mut label = SnapshotLabel::new(self.name());
        label.watermark = watermark.map(|w| w.as_bytes().to_vec());
        let target = path.clone();
        let result =
            tokio::task::spawn_blocking(move || write_atomically(&target, &label, &current))
                .await
                .unwrap_or_else(|join| Err(io::Error::other(join)));
        result.map_err(|source| SnapshotError(Repr::Save { path, source }))
    }

    /// [`save`](Self::save)s to the path set with [`SharedFilterBuilder::snapshot`].
    pub async fn save_snapshot(&self) -> Result<(), SnapshotError> {
        match &self.shared.snapshot {
            Some(path) => self.save(path).await,
            None => Err(SnapshotError(Repr::NoPath {
                name: self.name().to_owned(),
            })),
        }
    }

    /// ORs into the serving filter the bits of the snapshot at the path set with
    /// [`SharedFilterBuilder::snapshot`] (read on Tokio's blocking pool), if it holds a plain
    /// filter of the same name, size, `k`, layout and hash key as the serving one. For a
    /// filter that is about to be filled from elsewhere, such as a fleet's filter joined
    /// through Redis (bloom-redis's `RedisSyncBuilder::warm_start` calls this before joining):
    /// it then has to fetch only what changed since the snapshot.
    ///
    /// Nothing else changes: the serving filter stays the same object (handles and hooks
    /// keep working), and its key count rises to the estimate from its bits. Unlike
    /// [`SharedFilterBuilder::start`] nothing is caught up from a source and nothing is
    /// verified: merge only into a filter that gets every current key some other way.
    /// Keys deleted since the snapshot was saved come back as false positives (their bits are
    /// set again) until the next rebuild. A rebuild running meanwhile does not get the bits
    /// (it reads its source).
    ///
    /// Returns whether it merged, found no file, or refused the file (and why).
    ///
    /// ```
    /// use bloom_tower::{BloomFilter, SharedFilter};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let dir = tempfile::tempdir()?;
    /// let path = dir.path().join("users.bloom");
    /// let fleet_shape = || BloomFilter::builder().bits(1 << 16).hashes(7).seed(42).build();
    /// let users = || SharedFilter::<u64>::builder().name("users").snapshot(&path);
    ///
    /// let before_restart = users().build(fleet_shape()?);
    /// before_restart.insert(&7u64);
    /// before_restart.save_snapshot().await?;
    ///
    /// let filter = users().build(fleet_shape()?); // empty, as every fleet member starts
    /// let merged = filter.merge_snapshot().await?;
    /// assert!(merged.merged_bits().is_some_and(|bits| bits > 0), "{merged}");
    /// assert!(filter.contains(&7u64));
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// No snapshot path was set, the file could not be read, or it is not a valid snapshot
    /// ([`SnapshotError::is_corrupt`]: truncated, checksum mismatch, …). The filter is then
    /// unchanged.
    pub async fn merge_snapshot(&self) -> Result<MergedSnapshot, SnapshotError> {
        let Some(path) = &self.shared.snapshot else {
            return Err(SnapshotError(Repr::NoPath {
                name: self.name().to_owned(),
            }));
        };
        let snapshot = match read(path).await {
            Ok(snapshot) => snapshot,
            Err(SnapshotError(Repr::Read { source, .. }))
                if source.kind() == io::ErrorKind::NotFound =>
            {
                return Ok(MergedSnapshot::Missing);
            }
            Err(error) => return Err(error),
        };
        let current = self.shared.current.load_full();
        if let Some(label) = snapshot.label.as_ref().filter(|l| l.name != self.name()) {
            return Ok(MergedSnapshot::Refused(MergeRefused::Name {
                saved: label.name.clone(),
                serving: self.name().to_owned(),
            }));
        }
        let (Some(serving), Some(saved)) = (current.filter.as_plain(), snapshot.filter.as_plain())
        else {
            return Ok(MergedSnapshot::Refused(MergeRefused::Kind {
                saved: snapshot.filter.kind(),
                serving: current.filter.kind(),
            }));
        };
        match serving.union(saved) {
            Ok(()) => {}
            Err(IncompatibleError::HashKey) => {
                return Ok(MergedSnapshot::Refused(MergeRefused::HashKey));
            }
            Err(shape) => return Ok(MergedSnapshot::Refused(MergeRefused::Shape(shape))),
        }
        // The key count is the estimate from the bits, at most one key per bit, as for a
        // filter shared prefilled (`Generation::counted`); never lowered
        // (`a_snapshot_of_the_same_filter_is_merged_into_the_serving_one`).
        current.items.fetch_max(current.bit_estimate(), Relaxed);
        Ok(MergedSnapshot::Merged {
            set_bits: saved.count_ones(),
            saved_at_unix_ms: snapshot.label.map(|label| label.saved_at_unix_ms),
        })
    }

    /// The path set with [`SharedFilterBuilder::snapshot`], if any (for the admin router).
    #[cfg_attr(not(feature = "admin"), allow(dead_code))]
    pub(crate) fn snapshot_path(&self) -> Option<&Path> {
        self.shared.snapshot.as_deref()
    }

    /// Saves the snapshot (to the path set with [`SharedFilterBuilder::snapshot`]) every
    /// `interval`, in a Tokio task, so that a crash loses at most `interval` of inserts to
    /// the snapshot (a restart catches them up from the source anyway, if it can). A tick at
    /// which the file this task last wrote still holds everything the filter does (no insert,
    /// merge, removal, swap or watermark move since) writes nothing and is logged at `debug`
    /// (the rule: the module docs of `shared_filter/snapshot.rs`). Failures are logged at
    /// `warn`. Stops like
    /// [`rebuild_every`](Self::rebuild_every)'s task.
    ///
    /// # Panics
    ///
    /// Outside a Tokio runtime, like [`tokio::spawn`].
    pub fn save_every(&self, interval: Duration) -> BackgroundTask {
        let filter = Arc::downgrade(&self.shared);
        let mut closed = self.shared.closed.subscribe();
        let stop = Arc::new(Notify::new());
        let stopped = Arc::clone(&stop);
        let task = tokio::spawn(async move {
            let mut schedule = Schedule::default();
            loop {
                tokio::select! {
                    () = stopped.notified() => return,
                    _ = closed.changed() => return,
                    () = tokio::time::sleep(interval) => {}
                }
                let Some(shared) = filter.upgrade() else {
                    return;
                };
                SharedFilter::<AnyKey>::from_shared(shared)
                    .save_if_changed(&mut schedule)
                    .await;
            }
        });
        BackgroundTask::new(stop, task)
    }

    /// One tick of [`save_every`](Self::save_every): saves to the configured path, if any,
    /// unless the file `schedule` last wrote still holds everything the filter does (the
    /// rule is in the module docs); logs the outcome.
    async fn save_if_changed(&self, schedule: &mut Schedule) {
        let Some(path) = self.shared.snapshot.as_deref() else {
            return;
        };
        let current = self.shared.current.load_full();
        // Before the bits are read (see the module docs).
        let version = self.version(&current);
        let unchanged = schedule.last.as_ref().is_some_and(|last| {
            last.settled && last.version.same_as(&version) && file_id(path) == Some(last.file)
        });
        if unchanged {
            schedule.skipped += 1;
            tracing::debug!(
                filter = %self.name(),
                skipped = schedule.skipped,
                "the filter snapshot is unchanged since the last one written; not rewritten",
            );
            return;
        }
        // Every insert counted in `version` released its read lock before counting itself:
        // taking the write side once makes its writes visible to the bits read next.
        drop(self.shared.write_building());
        let watermark = version.watermark.clone();
        match self.write_generation(path, current, watermark).await {
            Ok(file) => {
                let settled = version.merges == 0
                    || schedule.last.as_ref().is_some_and(|last| {
                        last.version.same_generation(&version)
                            && last.version.merges == version.merges
                    });
                schedule.last = Some(Written {
                    version,
                    file,
                    settled,
                });
                tracing::debug!(filter = %self.name(), "saved the filter snapshot");
            }
            Err(error) => {
                schedule.last = None;
                tracing::warn!(
                    filter = %self.name(),
                    error = %Chain(&error),
                    "could not save the filter snapshot; the previous one stays",
                );
            }
        }
    }

    /// What `current`'s snapshot would hold, as far as counters tell (no scan of the bits).
    fn version(&self, current: &Arc<Generation>) -> Version {
        // The counters' own loads, without `stats()`'s recount of merged bits.
        let counts = self
            .shared
            .counters
            .snapshot(self.name(), current, None, false);
        Version {
            generation: Arc::downgrade(current),
            inserts: counts.inserts,
            removes: counts.removes,
            merges: current
                .filter
                .as_plain()
                .map_or(0, bloom_core::BloomFilter::merge_count),
            watermark: current.watermark(),
        }
    }

    /// Saves to the configured path, if any, logging the outcome (after rebuilds, on a
    /// schedule).
    pub(super) async fn save_logged(&self) {
        if self.shared.snapshot.is_none() {
            return;
        }
        match self.save_snapshot().await {
            Ok(()) => tracing::debug!(filter = %self.name(), "saved the filter snapshot"),
            Err(error) => tracing::warn!(
                filter = %self.name(),
                error = %Chain(&error),
                "could not save the filter snapshot; the previous one stays",
            ),
        }
    }

    /// Loads a snapshot written by [`save`](Self::save), with the default settings (use
    /// [`SharedFilterBuilder::load`] for others). A corrupt file is an error for which
    /// [`SnapshotError::is_corrupt`] is true.
    ///
    /// The loaded filter serves *verifying* (see [`contains`](Self::contains)) until a
    /// rebuild: it cannot know what was created since it was saved. To serve a snapshot with
    /// no such pause, start with [`SharedFilterBuilder::start`], which catches it up.
    pub async fn load(path: impl AsRef<Path>) -> Result<SharedFilter<K>, SnapshotError> {
        Self::builder().load(path).await
    }
}

impl<K: ?Sized> SharedFilterBuilder<K> {
    /// Loads a snapshot written by [`SharedFilter::save`] (or a bare filter file, of any
    /// kind) and shares it with these settings, *verifying* until its first rebuild (see
    /// [`SharedFilter::load`]).
    pub async fn load(self, path: impl AsRef<Path>) -> Result<SharedFilter<K>, SnapshotError> {
        let snapshot = read(path.as_ref()).await?;
        let watermark = snapshot
            .label
            .and_then(|label| label.watermark)
            .map(crate::key_source::Watermark::new);
        let generation = Generation::loaded(snapshot.filter, true, watermark);
        let filter = self.build_generation(generation);
        filter.shared.counters.verifying(filter.name(), true);
        Ok(filter)
    }
}

/// Reads a snapshot file on the blocking pool.
pub(super) async fn read(path: &Path) -> Result<Snapshot, SnapshotError> {
    let path = path.to_owned();
    let source = path.clone();
    let read = tokio::task::spawn_blocking(move || {
        let file = File::open(&source).map_err(DecodeError::Io)?;
        Snapshot::read_from(&mut BufReader::new(file))
    })
    .await
    .unwrap_or_else(|join| Err(DecodeError::Io(io::Error::other(join))));
    match read {
        Ok(snapshot) => Ok(snapshot),
        Err(DecodeError::Io(source)) => Err(SnapshotError(Repr::Read { path, source })),
        Err(source) => Err(SnapshotError(Repr::Corrupt { path, source })),
    }
}

/// What [`SharedFilter::save_every`]'s task remembers between ticks.
#[derive(Default)]
struct Schedule {
    /// The last snapshot it wrote; `None` before the first and after a failed one.
    last: Option<Written>,
    /// Ticks skipped so far (logged with each skip).
    skipped: u64,
}

/// A snapshot [`SharedFilter::save_every`] wrote.
struct Written {
    /// The filter's version, taken before its bits were read.
    version: Version,
    /// The file it left.
    file: FileId,
    /// Whether a tick that finds the same version may skip (see the module docs).
    settled: bool,
}

/// What a snapshot of the filter holds, as far as cheap counters tell.
struct Version {
    /// The serving generation (weak: a swapped-out filter's bits are freed, and its address is
    /// not reused while this is held).
    generation: Weak<Generation>,
    inserts: u64,
    removes: u64,
    /// The serving plain filter's merge count; 0 for the kinds that cannot merge.
    merges: u64,
    watermark: Option<Watermark>,
}

impl Version {
    fn same_generation(&self, other: &Self) -> bool {
        Weak::ptr_eq(&self.generation, &other.generation)
    }

    fn same_as(&self, other: &Self) -> bool {
        self.same_generation(other)
            && self.inserts == other.inserts
            && self.removes == other.removes
            && self.merges == other.merges
            && self.watermark == other.watermark
    }
}

/// A file as `stat` sees it: a rename over it, a rewrite or a removal changes this.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct FileId {
    len: u64,
    modified: Option<SystemTime>,
    #[cfg(unix)]
    dev: u64,
    #[cfg(unix)]
    ino: u64,
}

impl FileId {
    fn of(metadata: &std::fs::Metadata) -> Self {
        #[cfg(unix)]
        use std::os::unix::fs::MetadataExt;
        Self {
            len: metadata.len(),
            modified: metadata.modified().ok(),
            #[cfg(unix)]
            dev: metadata.dev(),
            #[cfg(unix)]
            ino: metadata.ino(),
        }
    }
}

/// The identity of the file at `path`, if there is one (one `stat`).
fn file_id(path: &Path) -> Option<FileId> {
    std::fs::metadata(path)
        .ok()
        .map(|metadata| FileId::of(&metadata))
}

/// Writes the snapshot; the identity of the file it left (taken before the rename, which
/// keeps it: a file renamed over it afterwards has another).
fn write_atomically(
    path: &Path,
    label: &SnapshotLabel,
    generation: &Generation,
) -> io::Result<FileId> {
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    let name = path
        .file_name()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "the path names no file"))?;
    let mut prefix = std::ffi::OsString::from(".");
    prefix.push(name);
    prefix.push(".");
    // Mode 0600 and a random name (no other user can read the key or pre-create the file);
    // removed on any error before the rename.
    let temp = tempfile::Builder::new()
        .prefix(&prefix)
        .suffix(".tmp")
        .tempfile_in(dir)?;
    let mut out = BufWriter::new(temp);
    Snapshot::write(&mut out, label, &generation.filter)?;
    out.flush()?;
    let temp = out.into_inner().map_err(io::IntoInnerError::into_error)?;
    temp.as_file().sync_all()?;
    let file = FileId::of(&temp.as_file().metadata()?);
    temp.persist(path).map_err(|error| error.error)?;
    sync_dir(dir)?;
    Ok(file)
}

/// Makes a rename in `dir` durable (fsyncs the directory); also `FilterSet`'s
/// `DirectoryStore`.
#[cfg(unix)]
pub(crate) fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Elsewhere a directory cannot be opened to fsync it; the rename's durability is left to
/// the file system.
#[cfg(not(unix))]
pub(crate) fn sync_dir(_dir: &Path) -> io::Result<()> {
    Ok(())
}
