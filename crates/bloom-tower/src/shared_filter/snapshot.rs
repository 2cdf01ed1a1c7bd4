//! Snapshots on disk, in the bloom-core file format, for a fast restart.
//!
//! A save never leaves a half-written file under the snapshot's name: it writes a temporary
//! file in the same directory, fsyncs it, renames it over the target (atomic on POSIX), then
//! fsyncs the directory so the rename itself survives a crash.

use std::fs::{self, File};
use std::io::{self, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use bloom_core::{AnyFilter, DecodeError};

use super::{SharedFilter, SharedFilterBuilder};

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
}

impl SnapshotError {
    /// Whether the file was read but is not a valid filter (bad magic, truncated, checksum
    /// mismatch, …): rebuild from the source instead.
    pub fn is_corrupt(&self) -> bool {
        matches!(self.0, Repr::Corrupt { .. })
    }

    /// The snapshot's path.
    pub fn path(&self) -> &Path {
        match &self.0 {
            Repr::Save { path, .. } | Repr::Read { path, .. } | Repr::Corrupt { path, .. } => path,
        }
    }
}

impl SharedFilter {
    /// Writes the serving filter to `path` atomically (temporary file, fsync, rename, fsync of
    /// the directory), on Tokio's blocking pool. The file holds the secret hash key: keep it
    /// private.
    pub async fn save(&self, path: impl AsRef<Path>) -> Result<(), SnapshotError> {
        let path = path.as_ref().to_owned();
        let current = self.shared.current.load_full();
        let target = path.clone();
        let result =
            tokio::task::spawn_blocking(move || write_atomically(&target, &current.filter))
                .await
                .unwrap_or_else(|join| Err(io::Error::other(join)));
        result.map_err(|source| SnapshotError(Repr::Save { path, source }))
    }

    /// Loads a snapshot written by [`save`](Self::save), with the default settings (use
    /// [`SharedFilterBuilder::load`] for others). A corrupt file is an error for which
    /// [`SnapshotError::is_corrupt`] is true.
    pub async fn load(path: impl AsRef<Path>) -> Result<SharedFilter, SnapshotError> {
        Self::builder().load(path).await
    }
}

impl SharedFilterBuilder {
    /// Loads a snapshot written by [`SharedFilter::save`] (of any filter kind) and shares it
    /// with these settings.
    pub async fn load(self, path: impl AsRef<Path>) -> Result<SharedFilter, SnapshotError> {
        let path = path.as_ref().to_owned();
        let source = path.clone();
        let read = tokio::task::spawn_blocking(move || {
            let file = File::open(&source).map_err(DecodeError::Io)?;
            AnyFilter::read_from(&mut BufReader::new(file))
        })
        .await
        .unwrap_or_else(|join| Err(DecodeError::Io(io::Error::other(join))));
        match read {
            Ok(filter) => Ok(self.build(filter)),
            Err(DecodeError::Io(source)) => Err(SnapshotError(Repr::Read { path, source })),
            Err(source) => Err(SnapshotError(Repr::Corrupt { path, source })),
        }
    }
}

fn write_atomically(path: &Path, filter: &AnyFilter) -> io::Result<()> {
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    let name = path
        .file_name()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "the path names no file"))?;
    let temp = dir.join(temp_name(name));
    let written = write_file(&temp, filter).and_then(|()| fs::rename(&temp, path));
    if let Err(error) = written {
        // Best effort: the temporary file is garbage whatever went wrong.
        let _ = fs::remove_file(&temp);
        return Err(error);
    }
    sync_dir(dir)
}

fn write_file(temp: &Path, filter: &AnyFilter) -> io::Result<()> {
    let mut out = BufWriter::new(File::create(temp)?);
    filter.write_to(&mut out)?;
    out.flush()?;
    let file = out.into_inner().map_err(io::IntoInnerError::into_error)?;
    file.sync_all()
}

/// A name no concurrent save (in this or another process) is using.
fn temp_name(name: &std::ffi::OsStr) -> std::ffi::OsString {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let mut temp = std::ffi::OsString::from(".");
    temp.push(name);
    temp.push(format!(
        ".{}.{}.tmp",
        std::process::id(),
        NEXT.fetch_add(1, Relaxed)
    ));
    temp
}

#[cfg(unix)]
fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Elsewhere a directory cannot be opened to fsync it; the rename's durability is left to
/// the file system.
#[cfg(not(unix))]
fn sync_dir(_dir: &Path) -> io::Result<()> {
    Ok(())
}
