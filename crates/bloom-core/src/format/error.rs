//! Why a file is refused: one variant per problem, in the order a reader checks them.

use std::io;

use super::FORMAT_VERSION;

/// Why a byte string or file is not a valid filter. Each problem has its own variant.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeError {
    /// The input does not start with [`MAGIC`](super::MAGIC): it is not a filter file.
    #[error("not a bloom filter file (bad magic bytes)")]
    BadMagic,
    /// Written by a newer version of this format.
    #[error("unsupported format version {found} (this build reads up to version {FORMAT_VERSION})")]
    UnsupportedVersion {
        /// The version in the file.
        found: u16,
    },
    /// A kind of structure this version does not know.
    #[error("unsupported filter kind {found} in the header")]
    UnsupportedKind {
        /// The kind byte in the file.
        found: u8,
    },
    /// A valid file of another structure (say, a counting filter read as a plain one).
    #[error("the file holds a {found}, not a {expected}")]
    WrongKind {
        /// What the reader loads.
        expected: &'static str,
        /// What the file holds.
        found: &'static str,
    },
    /// An unknown layout byte.
    #[error("unknown layout {found} in the header")]
    UnknownLayout {
        /// The layout byte in the file.
        found: u8,
    },
    /// The input ends before the filter does.
    #[error("file is truncated: {available} bytes, the header promises {needed}")]
    Truncated {
        /// Bytes a complete file has (or the header alone, if even that is cut).
        needed: u64,
        /// Bytes present.
        available: u64,
    },
    /// Bytes follow the checksum.
    #[error("{extra} unexpected bytes after the end of the filter")]
    TrailingBytes {
        /// How many (at least; a reader stops counting at one).
        extra: u64,
    },
    /// The header's fields contradict each other or are out of range.
    #[error("inconsistent header: {0}")]
    Inconsistent(&'static str),
    /// The stored checksum does not match the content: the file is corrupt.
    #[error(
        "checksum mismatch: file says {stored:#010x}, content gives {computed:#010x} (corrupt file)"
    )]
    ChecksumMismatch {
        /// CRC-32C stored in the file.
        stored: u32,
        /// CRC-32C computed over the content.
        computed: u32,
    },
    /// Reading failed; the I/O error is the [`source`](std::error::Error::source).
    #[error("read failed")]
    Io(#[from] io::Error),
    /// A windowed filter's manifest names a generation file that could not be opened or is
    /// refused (missing, corrupt, or not the file the manifest names); why is the
    /// [`source`](std::error::Error::source).
    #[error("the file of the generation of epoch {epoch}")]
    Generation {
        /// The generation's epoch (its file is named after it).
        epoch: u64,
        /// Why the file was refused.
        #[source]
        source: Box<DecodeError>,
    },
}
