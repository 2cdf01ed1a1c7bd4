#![doc = include_str!("../README.md")]
#![forbid(unsafe_code)]
#![cfg_attr(docsrs, feature(doc_cfg))]

#[cfg(feature = "admin")]
#[cfg_attr(docsrs, doc(cfg(feature = "admin")))]
pub mod admin;
#[cfg(any(feature = "guarded-cache", feature = "response-cache"))]
mod cache_settings;
#[cfg(feature = "filter-set")]
#[cfg_attr(docsrs, doc(cfg(feature = "filter-set")))]
pub mod filter_set;
#[cfg(any(feature = "guarded-cache", feature = "response-cache"))]
mod flight;
pub mod guard;
#[cfg(feature = "guarded-cache")]
#[cfg_attr(docsrs, doc(cfg(feature = "guarded-cache")))]
pub mod guarded_cache;
// The guide's example is a whole service: it needs the features it uses (docs.rs builds with
// all of them), so that `cargo test -p bloomguard-tower` with the defaults does not fail on it.
#[cfg(all(
    feature = "sqlx",
    feature = "guarded-cache",
    feature = "axum",
    feature = "metrics"
))]
#[cfg_attr(
    docsrs,
    doc(cfg(all(
        feature = "sqlx",
        feature = "guarded-cache",
        feature = "axum",
        feature = "metrics"
    )))
)]
pub mod guide;
pub mod key;
pub mod key_source;
pub mod reject;
#[cfg(feature = "response-cache")]
#[cfg_attr(docsrs, doc(cfg(feature = "response-cache")))]
pub mod response_cache;
mod setters;
pub mod shared_filter;
pub mod stats;

pub use bloom_core::{
    self, BloomFilter, CountingBloomFilter, CuckooFilter, Key, ScalableBloomFilter,
};
pub use guard::BloomGuard;
#[cfg(feature = "guarded-cache")]
#[cfg_attr(docsrs, doc(cfg(feature = "guarded-cache")))]
pub use guarded_cache::{GuardedCache, LoadError};
pub use key::KeyExtractor;
pub use key_source::KeySource;
#[cfg(feature = "response-cache")]
#[cfg_attr(docsrs, doc(cfg(feature = "response-cache")))]
pub use response_cache::ResponseCache;
pub use shared_filter::{ReloadError, SharedFilter};
