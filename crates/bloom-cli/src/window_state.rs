//! `dedup --window --state FILE`: the windowed filter kept as a manifest, FILE, and one file
//! per generation holding keys beside it (`FILE.g<epoch>-<checksum>`; `docs/FORMAT.md`,
//! "Kind 4 split in files").
//!
//! A generation's file is written once and never changed, so a save writes only the
//! generations that took keys since the load (those of the loaded newest epoch and later)
//! and names the others again: a crawler restarted every hour rewrites one generation, not
//! the window.
//!
//! Rules of a save, so that a crash at any point leaves a state that loads with every
//! line of the last completed run:
//! 1. each new generation file is written to a temporary file, fsynced, and renamed to its
//!    name (which the old manifest never uses: its checksum differs, or its bytes are the
//!    same);
//! 2. the manifest is replaced the same way;
//! 3. only then are the generation files the new manifest does not name removed, with the
//!    temporary files a killed run left.
//!
//! Tests (`tests/cli.rs`): `a_windowed_dedup_killed_at_each_step_of_a_save_loses_nothing`
//! kills a run at each step (`BLOOM_TEST_CRASH_AT`, honoured only in a build with the
//! `test-crash-points` feature, which the crate's own tests enable);
//! `a_windowed_dedup_killed_while_saving_loses_no_completed_run` lands `kill -9` at moments
//! of the save seen from outside.
//!
//! One run at a time per state: a second run saving the same state concurrently may
//! have its temporary files removed (it then fails, and its state is not saved).

use std::ffi::OsStr;
use std::fs::File;
use std::io::{self, BufReader, Read};
use std::path::Path;
use std::sync::Arc;

use anyhow::{Context, Result, anyhow};
use bloom_core::WindowedFilter;
use bloom_core::format::{FilterKind, peek};
use bloom_core::windowed::{Clock, GenerationFile};

use crate::input::io_msg;
use crate::output::{AtomicFile, crash_point, dir_of, is_temp_of};

/// Read buffer for the manifest and a single-file state.
const READ_BUFFER: usize = 64 * 1024;

/// A loaded state: the filter, and what a save may keep of its files.
pub struct WindowState {
    /// The filter, on the clock it was loaded on.
    pub filter: WindowedFilter,
    /// The newest epoch once loaded: no generation of an older epoch takes a key after the
    /// load (inserts go to the newest epoch's generation, and the epoch never goes back).
    loaded_epoch: u64,
    /// The generation files read, each still exactly its generation if older than
    /// `loaded_epoch`.
    files: Vec<GenerationFile>,
}

impl WindowState {
    /// A state that has no file yet: every generation is written at the save.
    pub fn new(filter: WindowedFilter) -> Self {
        Self {
            filter,
            loaded_epoch: 0,
            files: Vec::new(),
        }
    }

    /// Reads the state at `path` on `clock`: a manifest and its generation files, or a
    /// windowed filter's single file (which the next save splits). Generations that expired
    /// by `clock` are not read. Any other kind of file is an error that says what it is.
    pub fn load(path: &Path, clock: Arc<dyn Clock>) -> Result<Self> {
        let name = path.display();
        let cannot_read = |e: &io::Error| anyhow!("{name}: cannot read: {}", io_msg(e));
        let mut head = Vec::new();
        File::open(path)
            .and_then(|file| file.take(64).read_to_end(&mut head))
            .map_err(|e| cannot_read(&e))?;
        let bare_windowed = peek(&head)
            .is_ok_and(|info| info.kind == FilterKind::Windowed && info.label_len.is_none());
        if !bare_windowed {
            // A labelled snapshot, or another kind: its own loader says what it is.
            let filter = crate::filter_file::load_windowed(path, clock)?;
            return Ok(Self::new(filter));
        }
        Self::load_bare(path, clock)
    }

    /// [`load`](Self::load) for a file known to be a bare windowed filter's (its header
    /// peeked): a manifest, or a single file.
    pub fn load_bare(path: &Path, clock: Arc<dyn Clock>) -> Result<Self> {
        let name = path.display();
        let cannot_read = |e: &io::Error| anyhow!("{name}: cannot read: {}", io_msg(e));
        let dir = dir_of(path);
        let manifest = path
            .file_name()
            .ok_or_else(|| anyhow!("{name}: not a file name"))?;
        let file = File::open(path).map_err(|e| cannot_read(&e))?;
        let (filter, files) = WindowedFilter::read_split_with_clock(
            &mut BufReader::with_capacity(READ_BUFFER, file),
            clock,
            |generation| {
                let at = dir.join(generation.file_name(manifest));
                File::open(&at).map_err(|e| {
                    io::Error::new(
                        e.kind(),
                        format!("generation file {}: {}", at.display(), io_msg(&e)),
                    )
                })
            },
        )
        .with_context(|| name.to_string())?;
        Ok(Self {
            loaded_epoch: filter.epoch(),
            filter,
            files,
        })
    }

    /// The bytes of the generation files read (0 for a single-file state).
    pub fn generation_bytes(&self, path: &Path) -> u64 {
        let Some(manifest) = path.file_name() else {
            return 0;
        };
        let dir = dir_of(path);
        self.files
            .iter()
            .filter_map(|f| std::fs::metadata(dir.join(f.file_name(manifest))).ok())
            .map(|m| m.len())
            .sum()
    }

    /// Saves the filter to `out` (prepared at the start of the run): the generations that
    /// took keys since the load, then the manifest, then the removal of generation files it
    /// no longer names. Call it once no insert runs.
    pub fn save(&self, out: AtomicFile, path: &Path) -> Result<()> {
        let manifest = path
            .file_name()
            .ok_or_else(|| anyhow!("{}: not a file name", path.display()))?;
        let dir = out.dir().to_owned();
        let mut files = Vec::new();
        for epoch in self.filter.epochs_with_keys() {
            let unchanged = self
                .files
                .iter()
                .find(|f| f.epoch == epoch && epoch < self.loaded_epoch);
            let file = match unchanged {
                Some(&file) => file,
                None => {
                    let file = AtomicFile::create(path)?.commit_as(
                        |w| self.filter.write_generation_to(epoch, w),
                        |file: &GenerationFile| dir.join(file.file_name(manifest)),
                    )?;
                    crash_point("generation-written");
                    file
                }
            };
            files.push(file);
        }
        crash_point("before-manifest");
        out.commit(|w| self.filter.write_split_to(w, &files))?;
        crash_point("manifest-written");
        remove_unnamed(&dir, manifest, &files);
        Ok(())
    }
}

/// Removes the generation files of `manifest` in `dir` that are not in `keep`, and the
/// temporary files a killed run left (`.<manifest>.XXXXXX.tmp`). Best effort: a file left
/// is removed by a later save.
fn remove_unnamed(dir: &Path, manifest: &OsStr, keep: &[GenerationFile]) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let unnamed =
            GenerationFile::parse(manifest, &name).is_some_and(|file| !keep.contains(&file));
        if unnamed || is_temp_of(manifest, &name) {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}
