//! Writing a file atomically: into a temporary file in the target's directory, flushed and
//! fsynced, then renamed over the target. Readers see the old file or the complete new one,
//! never a partial one, and on any error the temporary file is removed.
//!
//! [`AtomicFile::create`] checks at the start of a command that the destination can be
//! written (by creating and removing a temporary file there), so an unwritable destination
//! fails before any input is read, not after. The real temporary file exists only while
//! [`AtomicFile::commit`] writes it, so interrupting a long `build` or `dedup` (Ctrl-C)
//! leaves nothing behind.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

use anyhow::{Result, anyhow};
use tempfile::NamedTempFile;

use crate::input::io_msg;

/// Write buffer for the file.
const WRITE_BUFFER: usize = 1 << 20;

/// A file to be written; it replaces `path` only on [`commit`](Self::commit).
pub struct AtomicFile {
    path: PathBuf,
    dir: PathBuf,
    prefix: OsString,
}

impl AtomicFile {
    /// Prepares to write `path`, checking that its directory exists and is writable.
    pub fn create(path: &Path) -> Result<Self> {
        let name = path.display();
        if path.is_dir() {
            return Err(anyhow!("{name}: is a directory"));
        }
        let file_name = path
            .file_name()
            .ok_or_else(|| anyhow!("{name}: not a file name"))?;
        let dir = dir_of(path);
        if !dir.is_dir() {
            return Err(anyhow!(
                "{name}: cannot create it: directory {} does not exist",
                dir.display()
            ));
        }
        let mut prefix = OsString::from(".");
        prefix.push(file_name);
        prefix.push(".");
        let file = Self {
            path: path.to_owned(),
            dir: dir.to_owned(),
            prefix,
        };
        // Dropped (and so removed) at once: this only proves the directory is writable.
        file.temp()?;
        Ok(file)
    }

    /// A new `.NAME.XXXXXX.tmp` next to the target. Like every filter file it is readable
    /// by its owner only (mode 0600 on Unix): it will hold the secret hash key.
    fn temp(&self) -> Result<NamedTempFile> {
        tempfile::Builder::new()
            .prefix(&self.prefix)
            .suffix(".tmp")
            .tempfile_in(&self.dir)
            .map_err(|e| {
                anyhow!(
                    "{}: cannot create a file in {}: {}",
                    self.path.display(),
                    self.dir.display(),
                    io_msg(&e)
                )
            })
    }

    /// Writes the content with `write` into a temporary file, flushes and fsyncs it, and
    /// renames it over the target. On error the temporary file is removed.
    pub fn commit(self, write: impl FnOnce(&mut dyn Write) -> io::Result<()>) -> Result<()> {
        let path = self.path.clone();
        self.commit_as(write, |()| path)
    }

    /// [`commit`](Self::commit) to a path chosen from what `write` returned (a file named
    /// after its checksum), in the same directory; returns that value.
    pub fn commit_as<T>(
        self,
        write: impl FnOnce(&mut dyn Write) -> io::Result<T>,
        path_of: impl FnOnce(&T) -> PathBuf,
    ) -> Result<T> {
        let temp = self.temp()?;
        let name = self.path.display().to_string();
        let failed = |e: io::Error| anyhow!("{name}: write failed: {}", io_msg(&e));
        let written = {
            let mut w = BufWriter::with_capacity(WRITE_BUFFER, temp.as_file());
            let written = write(&mut w).map_err(failed)?;
            // The temporary file holds what the buffer passed on so far: a torn file.
            crash_point("temp-unflushed");
            w.flush().map_err(failed)?;
            written
        };
        temp.as_file().sync_all().map_err(failed)?;
        crash_point("before-rename");
        let path = path_of(&written);
        temp.persist(&path)
            .map_err(|e| anyhow!("{}: cannot replace: {}", path.display(), io_msg(&e.error)))?;
        crash_point("renamed");
        sync_dir(&self.dir);
        Ok(written)
    }

    /// Removes the temporary files of this target that a killed run left (`kill -9` runs no
    /// destructor). Best effort. Call it only while holding the target's [`StateLock`]
    /// (`crate::state_lock`), so that no other run of the lock's commands is writing one.
    ///
    /// [`StateLock`]: crate::state_lock::StateLock
    pub fn remove_leftovers(&self) {
        let Some(target) = self.path.file_name() else {
            return;
        };
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return;
        };
        for entry in entries.flatten() {
            if is_temp_of(target, &entry.file_name()) {
                let _ = std::fs::remove_file(entry.path());
            }
        }
    }

    /// The directory the file is written in.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

/// Whether `name` is one of [`AtomicFile`]'s temporary files for the target named `target`
/// (`.<target>.XXXXXX.tmp`).
pub fn is_temp_of(target: &OsStr, name: &OsStr) -> bool {
    let mut prefix = OsString::from(".");
    prefix.push(target);
    prefix.push(".");
    name.as_encoded_bytes()
        .strip_prefix(prefix.as_encoded_bytes())
        .is_some_and(|rest| rest.ends_with(b".tmp"))
}

/// The directory `path` is in (`.` for a bare file name).
pub fn dir_of(path: &Path) -> &Path {
    match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    }
}

/// Makes the rename itself durable. Best effort: the file is complete and in place either
/// way, and some file systems refuse to fsync a directory.
fn sync_dir(dir: &Path) {
    #[cfg(unix)]
    if let Ok(d) = File::open(dir) {
        let _ = d.sync_all();
    }
    #[cfg(not(unix))]
    let _ = (dir, File::open);
}

/// For the crash tests only: with `BLOOM_TEST_CRASH_AT` set to `step`, the process kills
/// itself with SIGKILL there (no destructor runs, as when an operator's `kill -9` lands
/// between two steps of a save).
///
/// Rule: only a build with the `test-crash-points` feature (off by default; the crate's
/// tests enable it through its dev-dependency on itself, so `cargo test` runs them in any
/// profile) reads the variable. A `bloom` built or installed for use ignores it: an
/// environment variable cannot make it kill itself in the middle of a save.
#[cfg(feature = "test-crash-points")]
pub fn crash_point(step: &str) {
    if std::env::var_os(CRASH_VARIABLE).is_some_and(|at| at == step) {
        let _ = std::process::Command::new("kill")
            .args(["-KILL", &std::process::id().to_string()])
            .status();
        std::process::abort();
    }
}

/// Without the `test-crash-points` feature: nothing (see the rule above).
#[cfg(not(feature = "test-crash-points"))]
pub fn crash_point(_step: &str) {}

/// The environment variable [`crash_point`] reads.
#[cfg(feature = "test-crash-points")]
const CRASH_VARIABLE: &str = "BLOOM_TEST_CRASH_AT";
