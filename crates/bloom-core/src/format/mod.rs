//! The file format: every byte layout is here, one file a part, in the order
//! `docs/FORMAT.md` documents them:
//!
//! * `header.rs`: the 64 bytes every filter file starts with: [`MAGIC`], [`FORMAT_VERSION`],
//!   the [`FilterKind`] and the layout at the same places in every kind, then six fields
//!   each kind names;
//! * `checksum.rs`: the one CRC-32C, which ends every container;
//! * the containers: `words.rs` (a plain or counting filter's words), `stages.rs` (a
//!   scalable filter's list of stages), `cuckoo.rs` (a cuckoo filter's packed buckets),
//!   `windowed.rs` (a windowed filter's ring of generations; `windowed_split.rs` the same as a
//!   manifest and one file per generation) and `label.rs` (a snapshot's label in front of a
//!   filter of any kind, [`SNAPSHOT_MAGIC`]);
//! * `any.rs`: reading a file of whichever kind; `peek.rs`: what a file is, from its first
//!   bytes ([`peek()`]); `read.rs`: filling a buffer from a reader that may return less.
//!
//! A filter kind only tells the format what its body holds: its settings, and its words or
//! its stages. Every writer streams, checksumming as it goes: no file is built in memory
//! before it is written.
//!
//! Every reader is bounded by its input, not by what a header claims (a checksum is not a
//! MAC: a crafted file's checksums are valid). Rule (docs/FORMAT.md, "What a reader
//! allocates"): while it reads an input of `L` bytes (a manifest's generation files counted
//! in), a reader has at most `3·L + 256 KiB` allocated, the filter it returns included; a
//! windowed filter's generation stored empty is not allocated until a key goes into it; any
//! defect is a [`DecodeError`], never a panic. Guarded by `tests/crafted_files.rs`
//! (`mutated_headers_of_real_files_never_panic_and_stay_within_the_bound` and one test per
//! kind), which counts every allocation.
//!
//! ```
//! use bloom_core::format::{FilterKind, peek};
//!
//! let bytes = bloom_core::ScalableBloomFilter::new(1_000, 0.01)?.to_bytes();
//! assert_eq!(peek(&bytes)?.kind, FilterKind::Scalable);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod any;
mod checksum;
mod cuckoo;
mod error;
mod header;
mod label;
mod peek;
mod read;
mod stages;
#[cfg(test)]
mod tests;
mod windowed;
pub(crate) mod windowed_split;
mod words;

pub use error::DecodeError;
pub use header::{FORMAT_VERSION, FilterKind, MAGIC};
pub use label::SNAPSHOT_MAGIC;
pub use peek::{FileInfo, peek};

#[cfg(test)]
pub(crate) use header::KIND_OFFSET;
pub(crate) use read::read_up_to;
pub(crate) use words::WordBody;
