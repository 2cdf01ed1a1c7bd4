//! What a file is, from its first bytes: for tools that describe a file without trusting
//! their own reading of its layout.

use super::DecodeError;
use super::checksum::CHECKSUM_LEN;
use super::header::{FilterKind, HEADER_LEN, WordsHeader, check_magic, version_and_kind};
use super::label::peek_label_len;

/// What [`peek`] found at the start of a file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct FileInfo {
    /// Bytes of the snapshot label in front of the filter, its magic and checksum included;
    /// `None` for a bare filter file.
    pub label_len: Option<u64>,
    /// What the filter is.
    pub kind: FilterKind,
    /// The filter's format version.
    pub version: u16,
    /// Bytes of the filter's header (the same for every kind).
    pub header_len: u64,
    /// Bytes of the whole filter, header to checksum, as its header states them: `None` for
    /// a scalable or windowed filter, which is as long as its stages or generations.
    pub filter_len: Option<u64>,
}

/// Reads what a filter or snapshot file is from its first bytes: the label's length (if it
/// is a snapshot), then the filter's kind, format version and sizes. Only the start of a
/// file is needed: the label's fixed fields, then the filter's 64-byte header. Nothing
/// further is checked (no checksum, no body): reading the file does that.
///
/// # Errors
/// [`DecodeError::BadMagic`] for neither a filter nor a snapshot, [`DecodeError::Truncated`]
/// if `bytes` ends before the filter's header does, [`DecodeError::UnsupportedVersion`] for
/// a label or filter version this build does not read, [`DecodeError::UnsupportedKind`],
/// and [`DecodeError::Inconsistent`] for a label that claims more than 1 MiB.
///
/// ```
/// use bloom_core::format::{FilterKind, peek};
/// use bloom_core::{AnyFilter, BloomFilter, CountingBloomFilter, Snapshot, SnapshotLabel};
///
/// let plain = BloomFilter::new(1_000, 0.01)?.to_bytes();
/// let info = peek(&plain)?;
/// assert_eq!((info.kind, info.version, info.label_len), (FilterKind::Plain, 1, None));
/// assert_eq!(info.filter_len, Some(plain.len() as u64));
///
/// let counting = AnyFilter::from(CountingBloomFilter::new(1_000, 0.01)?);
/// let mut snapshot = Vec::new();
/// Snapshot::write(&mut snapshot, &SnapshotLabel::new("users"), &counting)?;
/// let info = peek(&snapshot[..200])?; // the start is enough
/// assert_eq!(info.kind, FilterKind::Counting);
/// assert_eq!(info.label_len.unwrap() + info.filter_len.unwrap(), snapshot.len() as u64);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn peek(bytes: &[u8]) -> Result<FileInfo, DecodeError> {
    let label_len = peek_label_len(bytes)?;
    let start = label_len.unwrap_or(0);
    let header = usize::try_from(start)
        .ok()
        .and_then(|start| bytes.get(start..))
        .unwrap_or_default();
    check_magic(header)?;
    if header.len() < HEADER_LEN {
        return Err(DecodeError::Truncated {
            needed: start + HEADER_LEN as u64,
            available: bytes.len() as u64,
        });
    }
    let (version, kind) = version_and_kind(header)?;
    let filter_len = match kind {
        FilterKind::Plain | FilterKind::Counting => {
            let body_len = WordsHeader::num_words_of(header).saturating_mul(8);
            Some(((HEADER_LEN + CHECKSUM_LEN) as u64).saturating_add(body_len))
        }
        FilterKind::Cuckoo => {
            let body_len = super::cuckoo::num_words_of(header).saturating_mul(8);
            Some(((HEADER_LEN + CHECKSUM_LEN) as u64).saturating_add(body_len))
        }
        FilterKind::Scalable | FilterKind::Windowed => None,
    };
    Ok(FileInfo {
        label_len,
        kind,
        version,
        header_len: HEADER_LEN as u64,
        filter_len,
    })
}
