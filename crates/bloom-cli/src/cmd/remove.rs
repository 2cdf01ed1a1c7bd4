//! `bloom remove`: take keys out of a counting or cuckoo filter file, which is replaced
//! atomically.
//!
//! Rules:
//! 1. Only a key the filter reports present is removed (one insertion of it, as `CF.DEL`
//!    does); a key reported absent is counted as "not present" and changes nothing.
//!    Removing it anyway would take counts or a fingerprint that belong to other keys and
//!    make them absent: false negatives. bloom-core's `remove` of both kinds refuses such a
//!    key itself (`CountingBloomFilter::remove`, `CuckooFilter::remove`: `false`, nothing
//!    changed), and this command counts its answer.
//! 2. The file is read, changed in memory and written back with [`AtomicFile`]: a temporary
//!    file beside it, flushed, fsynced and renamed over it. A kill at any point leaves the
//!    previous file or the new one, whole (`tests/remove.rs`
//!    `a_remove_killed_at_each_step_leaves_the_old_or_the_new_file_whole`). Nothing is written
//!    when no key was removed, or on any error (an unreadable input, a line over the cap).
//! 3. It takes the lock `dedup --state` takes ([`StateLock`], `.FILE.lock`) before reading
//!    the file and holds it to the end: two writers of one file cannot lose each other's
//!    work. A kill's leftover temporary files are removed by the next save, under the lock.
//! 4. A plain, scalable or windowed filter is refused before any key is read, the file
//!    untouched: their bits are shared by many keys and cannot be taken back.

use std::path::Path;

use anyhow::{Result, anyhow};
use bloom_core::AnyFilter;

use crate::args::FileKeysArgs;
use crate::output::{AtomicFile, crash_point};
use crate::state_lock::StateLock;

/// Remove keys from a counting or cuckoo filter file: one insertion of each key, like
/// RedisBloom's CF.DEL.
///
/// Only keys the filter reports present are removed; a key reported absent is left out and
/// counted as "not present". The file is replaced atomically (a kill leaves the old file or
/// the new one, whole), and only if a key was removed. A plain Bloom filter is refused: its
/// bits cannot be removed.
#[derive(clap::Args)]
#[command(after_help = "\
Examples:
  bloom remove users.cf user:42 user:43
  psql -Atc 'select id from deleted_users' | bloom remove users.cf

Prints `removed: N` and `not present: M` (keys the filter reports definitely absent, left
out: removing them would take counts or fingerprints of other keys).

Caveat (as for RedisBloom's CF.DEL): remove only keys that were added. A key that was never
added but is a false positive (the filter reports it present) cannot be told apart from an
added key: it is removed, and that can make keys that were added absent (false negatives).
Each line is one removal, as each line of `bloom build` was one insertion: list a key twice
only if it was added twice.

One run per FILE at a time: it takes the lock `dedup --state` takes (.FILE.lock), and a
second run fails at once.

Exit status:
  0  success (also when some or all keys were not present)
  2  error: FILE is missing, unreadable, truncated or corrupt, or a kind that cannot remove
     (plain, scalable, windowed); FILE in use; unreadable input; a failed write. FILE is
     then left as it was.")]
#[command(mut_arg("file", |a| a.help(
    "The counting or cuckoo filter file (made by `bloom build --kind counting|cuckoo`, or a \
     service's snapshot of one, which stays one)")))]
#[command(mut_arg("keys", |a| a.help(
    "Keys to remove; none reads them from standard input, one per line")))]
#[command(mut_arg("quiet", |a| a.help("Print nothing")))]
pub struct Args {
    #[command(flatten)]
    args: FileKeysArgs,
}

/// Removes the keys and saves the file if any was removed.
pub fn run(Args { args }: &Args) -> Result<()> {
    let path = &args.file;
    // Fail on an unwritable directory, or a file another run is writing, before reading it.
    let out = AtomicFile::create(path)?;
    let _lock = StateLock::acquire(path)?;
    let loaded = crate::filter_file::load(path)?;
    check_can_remove(&loaded.filter, path)?;
    let (mut removed, mut absent) = (0u64, 0u64);
    crate::input::each_key_batch(&args.keys, args.input.max_line_bytes, |batch| {
        for key in batch.iter() {
            // `Some(false)`: reported absent, refused, nothing changed (rule 1).
            if loaded.filter.remove(key) == Some(true) {
                removed += 1;
            } else {
                absent += 1;
            }
        }
        Ok(())
    })?;
    crash_point("remove-applied");
    if removed > 0 {
        out.remove_leftovers();
        crate::filter_file::save_labelled(out, loaded.label.as_ref(), &loaded.filter)?;
    }
    if !args.quiet {
        crate::cmd::print(&format!("removed: {removed}\nnot present: {absent}\n"))?;
    }
    Ok(())
}

/// Refuses the kinds whose keys cannot be removed, saying why.
fn check_can_remove(filter: &AnyFilter, path: &Path) -> Result<()> {
    if filter.can_remove() {
        return Ok(());
    }
    let name = path.display();
    let why = match filter {
        AnyFilter::Windowed(_) => "its keys cannot be removed: they expire after its window",
        _ => {
            "its keys cannot be removed: a bit is shared by many keys, so clearing one key's \
             bits would make other keys absent"
        }
    };
    let kind = match filter {
        AnyFilter::Windowed(_) => "windowed filter",
        AnyFilter::Scalable(_) => "scalable Bloom filter",
        _ => "plain Bloom filter",
    };
    Err(anyhow!(
        "{name}: a {kind}; {why}. `bloom remove` works on counting and cuckoo filters \
         (`bloom build --kind counting` or `--kind cuckoo`); the file is unchanged"
    ))
}
