//! Loading and saving filter files (the format of `docs/FORMAT.md`).

use std::fs::File;
use std::io::{self, BufReader, Read};
use std::path::Path;

use anyhow::{Context, Result, anyhow};
use bloom_core::format::{FilterKind, peek};
use bloom_core::{AnyFilter, BloomFilter, Snapshot, SnapshotLabel, WindowedFilter};

use crate::input::io_msg;
use crate::output::AtomicFile;
use crate::window_state::WindowState;

/// A filter read from a file, with what the file said about itself.
pub struct Loaded {
    /// The filter, of whichever kind the file holds.
    pub filter: AnyFilter,
    /// The filter's format version.
    pub version: u16,
    /// The file's size in bytes.
    pub file_len: u64,
    /// For a service's snapshot (`SharedFilter::save`): the filter's name and watermark.
    pub label: Option<SnapshotLabel>,
    /// Bytes of the snapshot's label in front of the filter (`None`: a bare filter file).
    pub label_len: Option<u64>,
}

/// Reads and validates a filter file of any kind (plain, counting, scalable, cuckoo, windowed), bare or
/// a service's labelled snapshot. Errors name the file and the problem, e.g. `snapshot.bloom:
/// file is truncated: 100 bytes, the header promises 1268`.
pub fn load(path: &Path) -> Result<Loaded> {
    let name = path.display();
    if path.is_dir() {
        return Err(anyhow!("{name}: is a directory, not a filter file"));
    }
    let cannot_read = |e: io::Error| anyhow!("{name}: cannot read: {}", io_msg(&e));
    // The start (enough for `peek`, a label included), then the rest as it is decoded: the
    // file is never held in memory besides the filter.
    let mut file = File::open(path).map_err(cannot_read)?;
    let file_len = file.metadata().map_err(cannot_read)?.len();
    let mut head = Vec::new();
    (&mut file)
        .take(PEEK_LEN)
        .read_to_end(&mut head)
        .map_err(cannot_read)?;
    let info = peek(&head).with_context(|| name.to_string())?;
    if info.kind == FilterKind::Windowed && info.label_len.is_none() {
        // Maybe a manifest, whose generations are files beside it (`dedup --window --state`).
        let state = WindowState::load_bare(path, clock()?)?;
        return Ok(Loaded {
            file_len: file_len + state.generation_bytes(path),
            filter: AnyFilter::Windowed(state.filter),
            version: info.version,
            label: None,
            label_len: None,
        });
    }
    let mut rest = BufReader::with_capacity(READ_BUFFER, file);
    let snapshot = Snapshot::read_from(&mut head.as_slice().chain(&mut rest))
        .with_context(|| name.to_string())?;
    // A windowed filter answers as of now: read it again on the clock `NOW_VARIABLE` may fix.
    let filter = match snapshot.filter {
        AnyFilter::Windowed(_) if std::env::var_os(NOW_VARIABLE).is_some() => {
            let bytes = std::fs::read(path).map_err(cannot_read)?;
            AnyFilter::Windowed(windowed_after_label(
                path,
                info.label_len,
                &bytes,
                clock()?,
            )?)
        }
        other => other,
    };
    Ok(Loaded {
        filter,
        version: info.version,
        file_len,
        label: snapshot.label,
        label_len: info.label_len,
    })
}

/// Bytes read before [`peek`]: a header behind the longest label a snapshot may have.
const PEEK_LEN: u64 = (1 << 20) + 4096;
/// Read buffer for the rest of a file.
const READ_BUFFER: usize = 64 * 1024;

/// The environment variable that fixes "now" for windowed filters, in milliseconds since
/// the Unix epoch: to replay a log as of its time, and for tests.
pub const NOW_VARIABLE: &str = "BLOOM_NOW_UNIX_MS";

/// The wall clock, or the time [`NOW_VARIABLE`] fixes: what a windowed filter is read and
/// run on.
pub fn clock() -> Result<std::sync::Arc<dyn bloom_core::windowed::Clock>> {
    use bloom_core::windowed::{ManualClock, SystemClock};
    match std::env::var(NOW_VARIABLE) {
        Ok(text) => {
            let millis: u64 = text.trim().parse().map_err(|_| {
                anyhow!("{NOW_VARIABLE}={text:?}: expected milliseconds since the Unix epoch")
            })?;
            Ok(std::sync::Arc::new(ManualClock::new(millis)))
        }
        Err(_) => Ok(std::sync::Arc::new(SystemClock)),
    }
}

/// The commands that need a plain filter file, and why.
#[derive(Clone, Copy, Debug)]
pub enum PlainUse {
    /// `bloom merge`: it ORs the bits.
    Merge,
    /// `bloom dedup --state`: it resumes a plain filter.
    DedupState,
}

impl PlainUse {
    fn command(self) -> &'static str {
        match self {
            Self::Merge => "merge",
            Self::DedupState => "dedup --state",
        }
    }
}

/// Reads a plain filter file, for the commands that combine or extend filters bit by bit;
/// any other kind is an error that says so, and for a cuckoo filter given to `merge`, why
/// (`tests/cli.rs` `merge_and_dedup_refuse_cuckoo_files`).
pub fn load_plain(path: &Path, using: PlainUse) -> Result<BloomFilter> {
    let name = path.display();
    let command = using.command();
    match load(path)?.filter {
        AnyFilter::Plain(filter) => Ok(filter),
        AnyFilter::Cuckoo(_) => Err(match using {
            PlainUse::Merge => anyhow!(
                "{name}: a cuckoo filter, which cannot be merged: its fingerprints cannot be \
                 OR-ed like a Bloom filter's bits; build one filter from all the keys instead \
                 (`bloom build --kind cuckoo` takes several inputs)"
            ),
            PlainUse::DedupState => anyhow!(
                "{name}: a cuckoo filter; `bloom {command}` works on plain Bloom filters \
                 (made by `bloom build` or `bloom dedup`)"
            ),
        }),
        AnyFilter::Windowed(_) => Err(anyhow!(
            "{name}: a windowed filter (made by `bloom dedup --window`); `bloom {command}` \
             works on plain filters: pass the same --window to use it"
        )),
        other => Err(anyhow!(
            "{name}: a {} Bloom filter; `bloom {command}` works on plain filters (made by `bloom build`)",
            other.kind()
        )),
    }
}

/// Reads a file that is not a bare windowed filter's (`WindowState::load` reads those) on
/// `clock`, for `dedup --window --state`: a service's labelled windowed snapshot; any other
/// kind is an error that says so.
pub fn load_windowed(
    path: &Path,
    clock: std::sync::Arc<dyn bloom_core::windowed::Clock>,
) -> Result<WindowedFilter> {
    let name = path.display();
    let loaded = load(path)?;
    match loaded.filter {
        AnyFilter::Windowed(_) => {
            let bytes =
                std::fs::read(path).map_err(|e| anyhow!("{name}: cannot read: {}", io_msg(&e)))?;
            windowed_after_label(path, loaded.label_len, &bytes, clock)
        }
        other => Err(anyhow!(
            "{name}: a {} filter, not a windowed one; `bloom dedup --window` keeps its state in \
             a windowed filter (drop --window to use this one, or give another --state)",
            other.kind()
        )),
    }
}

/// The windowed filter in `bytes`, the file at `path` read again whole (to read it on
/// `clock`), behind its label, which the first read found `label_len` bytes long. Rule: the
/// first read is not trusted for this one, since the file may have changed in between (a
/// save replaced it, a copy truncated it): a label of another length now, or bytes that end
/// before it, is an error naming the file, never an index past their end
/// (`tests::a_file_that_shrank_since_its_first_read_is_an_error`).
fn windowed_after_label(
    path: &Path,
    label_len: Option<u64>,
    bytes: &[u8],
    clock: std::sync::Arc<dyn bloom_core::windowed::Clock>,
) -> Result<WindowedFilter> {
    let name = path.display();
    let changed = || {
        anyhow!(
            "{name}: changed while it was read ({} bytes now); read it again",
            bytes.len()
        )
    };
    let now = peek(bytes).map_err(|_| changed())?;
    if now.label_len != label_len {
        return Err(changed());
    }
    let filter = usize::try_from(label_len.unwrap_or(0))
        .ok()
        .and_then(|start| bytes.get(start..))
        .ok_or_else(changed)?;
    WindowedFilter::read_from_with_clock(&mut &filter[..], clock).with_context(|| name.to_string())
}

/// Writes `filter` to the prepared atomic file.
pub fn save(file: AtomicFile, filter: &BloomFilter) -> Result<()> {
    file.commit(|w| filter.write_to(w))
}

/// Writes a filter of any kind to the prepared atomic file.
pub fn save_any(file: AtomicFile, filter: &AnyFilter) -> Result<()> {
    file.commit(|w| filter.write_to(w))
}

/// Writes a filter of any kind to the prepared atomic file behind `label`, if any: a service's
/// labelled snapshot (`SharedFilter::save`) stays one, with the same name and watermark.
pub fn save_labelled(
    file: AtomicFile,
    label: Option<&SnapshotLabel>,
    filter: &AnyFilter,
) -> Result<()> {
    match label {
        Some(label) => file.commit(|w| Snapshot::write(w, label, filter)),
        None => save_any(file, filter),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bloom_core::windowed::{ManualClock, Window};

    /// A labelled windowed snapshot's bytes, and where its filter starts.
    fn snapshot() -> (Vec<u8>, usize) {
        let filter = WindowedFilter::builder(Window::Count(100))
            .expected_items(100)
            .false_positive_rate(0.01)
            .seed(1)
            .build()
            .unwrap();
        filter.insert("a");
        let mut bytes = Vec::new();
        Snapshot::write(
            &mut bytes,
            &SnapshotLabel::new("seen").with_watermark(vec![7; 300]),
            &AnyFilter::Windowed(filter),
        )
        .unwrap();
        let start = peek(&bytes).unwrap().label_len.unwrap() as usize;
        (bytes, start)
    }

    fn clock() -> std::sync::Arc<dyn bloom_core::windowed::Clock> {
        std::sync::Arc::new(ManualClock::new(0))
    }

    /// The second read of a file whose first read found a label (its length would index
    /// past these bytes): every shorter file, or one whose label changed, is an error naming
    /// the file, never a panic; the whole file still reads, and so does a bare one.
    #[test]
    fn a_file_that_shrank_since_its_first_read_is_an_error() {
        let (bytes, start) = snapshot();
        let path = Path::new("seen.bloom");
        let first = Some(start as u64);
        let whole = windowed_after_label(path, first, &bytes, clock()).unwrap();
        assert!(whole.contains("a"));
        for len in [
            0,
            1,
            10,
            13,
            14,
            start - 1,
            start,
            start + 10,
            bytes.len() - 1,
        ] {
            let e = windowed_after_label(path, first, &bytes[..len], clock()).unwrap_err();
            let message = format!("{e:#}");
            assert!(message.starts_with("seen.bloom: "), "{len}: {message}");
        }
        // Replaced by its unlabelled copy: another file than the first read's.
        let e = windowed_after_label(path, first, &bytes[start..], clock()).unwrap_err();
        assert!(
            format!("{e:#}").contains("changed while it was read"),
            "{e:#}"
        );
        let bare = windowed_after_label(path, None, &bytes[start..], clock()).unwrap();
        assert!(bare.contains("a"));
    }
}
