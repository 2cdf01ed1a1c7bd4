//! What the two caches are both configured with: [`GuardedCacheBuilder`] and
//! [`ResponseCacheBuilder`] keep these settings in one [`CacheSettings`], and their setters of
//! the same name forward to it. Each cache documents its own defaults and what the settings
//! mean for it.
//!
//! [`GuardedCacheBuilder`]: crate::guarded_cache::GuardedCacheBuilder
//! [`ResponseCacheBuilder`]: crate::response_cache::ResponseCacheBuilder

use std::borrow::Cow;
use std::time::Duration;

/// The settings both cache builders have.
#[derive(Clone, Debug)]
pub(crate) struct CacheSettings {
    /// The `cache` metric label.
    pub(crate) name: Cow<'static, str>,
    /// How long a found value (a loaded value, a `200`) is served.
    pub(crate) time_to_live: Duration,
    /// How long "not found" (a negative entry, a `404`) is served.
    pub(crate) negative_ttl: Duration,
}

impl CacheSettings {
    /// A cache named `"default"` with these lifetimes (each cache has its own defaults).
    pub(crate) fn new(time_to_live: Duration, negative_ttl: Duration) -> Self {
        Self {
            name: Cow::Borrowed("default"),
            time_to_live,
            negative_ttl,
        }
    }
}
