#![doc = include_str!("../README.md")]
#![forbid(unsafe_code)]
#![cfg_attr(docsrs, feature(doc_cfg))]

#[cfg(feature = "admin")]
pub mod admin;
pub mod flight;
mod guard;
mod guarded_cache;
pub mod key;
pub mod key_source;
pub mod reject;
mod response_cache;
pub mod shared_filter;
pub mod stats;

pub use bloom_core::{self, AnyFilter, BloomFilter, CountingBloomFilter, Key, ScalableBloomFilter};
pub use guard::{BloomGuard, BloomGuardService, ResponseFuture};
#[cfg(feature = "axum")]
#[cfg_attr(docsrs, doc(cfg(feature = "axum")))]
pub use guarded_cache::CacheResponse;
pub use guarded_cache::{CacheStats, GuardedCache, GuardedCacheBuilder, LoadError};
pub use key::KeyExtractor;
pub use key_source::KeySource;
pub use reject::{NotFound, OnMissingKey, OnReject, PassThrough, RejectedKey};
pub use response_cache::{
    ResponseCache, ResponseCacheBody, ResponseCacheBuilder, ResponseCacheFuture,
    ResponseCacheService, ResponseCacheStats,
};
pub use shared_filter::{
    AlreadyBuilding, BackgroundTask, Building, CannotRemove, CurrentFilter, FilterGeneration,
    InsertHook, Inserted, PendingInsert, ReloadError, ReloadErrorKind, Reloaded, RemoveOutcome,
    SaturationReport, SharedFilter, SharedFilterBuilder, SnapshotError, Started,
};
pub use stats::{FilterStats, GuardStats};
