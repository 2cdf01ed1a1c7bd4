#![doc = include_str!("../README.md")]
#![forbid(unsafe_code)]
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod flight;
mod guard;
mod guarded_cache;
mod hot_key;
pub mod key;
pub mod key_source;
pub mod reject;
pub mod shared_filter;
pub mod stats;

pub use bloom_core::{self, AnyFilter, BloomFilter, CountingBloomFilter, Key, ScalableBloomFilter};
pub use guard::{BloomGuard, BloomGuardService, ResponseFuture};
pub use guarded_cache::{CacheStats, GuardedCache, GuardedCacheBuilder, LoadError};
pub use hot_key::{
    HotKeyBody, HotKeyCache, HotKeyCacheBuilder, HotKeyCacheService, HotKeyFuture, HotKeyStats,
};
pub use key::KeyExtractor;
pub use key_source::KeySource;
pub use reject::{NotFound, OnMissingKey, OnReject, PassThrough, RejectedKey};
pub use shared_filter::{
    AlreadyBuilding, Building, CannotRemove, CurrentFilter, FilterGeneration, InsertHook, Inserted,
    RebuildTask, ReloadError, ReloadErrorKind, Reloaded, RemoveOutcome, SaturationReport,
    SharedFilter, SharedFilterBuilder, SnapshotError,
};
pub use stats::{FilterStats, GuardStats};
