//! Loading and saving filter files (the format of `docs/FORMAT.md`).

use std::path::Path;

use anyhow::{Result, anyhow};
use bloom_core::{AnyFilter, BloomFilter};

use crate::input::io_msg;
use crate::output::AtomicFile;

/// A filter read from a file, with what the file said about itself.
pub struct Loaded {
    /// The filter, of whichever kind the file holds.
    pub filter: AnyFilter,
    /// The file's format version.
    pub version: u16,
    /// The file's size in bytes.
    pub file_len: u64,
}

/// Reads and validates a filter file of any kind (plain, counting, scalable). Errors name the
/// file and the problem, e.g. `snapshot.bloom: file is truncated: 100 bytes, the header
/// promises 1268`.
pub fn load(path: &Path) -> Result<Loaded> {
    let name = path.display();
    if path.is_dir() {
        return Err(anyhow!("{name}: is a directory, not a filter file"));
    }
    let bytes = std::fs::read(path).map_err(|e| anyhow!("{name}: cannot read: {}", io_msg(&e)))?;
    let filter = AnyFilter::from_bytes(&bytes).map_err(|e| anyhow!("{name}: {e}"))?;
    // from_bytes checked the magic and the header, so the version field is there.
    let version = u16::from_le_bytes([bytes[8], bytes[9]]);
    Ok(Loaded {
        filter,
        version,
        file_len: bytes.len() as u64,
    })
}

/// Reads a plain filter file, for the commands that combine or extend filters bit by bit;
/// a counting or scalable filter is an error that says so.
pub fn load_plain(path: &Path, command: &str) -> Result<BloomFilter> {
    match load(path)?.filter {
        AnyFilter::Plain(filter) => Ok(filter),
        other => Err(anyhow!(
            "{}: a {} Bloom filter; `bloom {command}` works on plain filters (made by `bloom build`)",
            path.display(),
            other.kind()
        )),
    }
}

/// Writes `filter` to the prepared atomic file.
pub fn save(file: AtomicFile, filter: &BloomFilter) -> Result<()> {
    file.commit(|w| filter.write_to(w))
}
