#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod accessors;
mod any;
mod bit_vector;
mod builder;
mod counting;
mod cuckoo;
mod filter;
pub mod format;
mod hasher;
mod key;
mod layout;
pub mod params;
mod probe;
mod scalable;
mod sizing;
mod snapshot;
mod sync;
pub mod windowed;

pub use any::AnyFilter;
pub use builder::{BuildError, Builder};
pub use counting::CountingBloomFilter;
pub use cuckoo::{CuckooBuilder, CuckooFilter, FilterFull};
pub use filter::{BloomFilter, IncompatibleError};
pub use format::{DecodeError, FORMAT_VERSION, MAGIC, SNAPSHOT_MAGIC};
pub use key::Key;
pub use layout::{Layout, ParseLayoutError};
pub use params::Params;
pub use scalable::{MAX_STAGES, ScalableBloomFilter, ScalableBuilder, StageStats};
pub use snapshot::{Snapshot, SnapshotLabel};
pub use windowed::WindowedFilter;
