//! [`GuardedCache`]: filter → cache → one loader per key, with negative caching.
//!
//! # Why dashmap + per-key locks rather than moka's own coalescing
//!
//! moka's `try_get_with` also runs one init per key and survives a cancelled or panicking
//! init, but it cannot do everything this cache needs: keep "not found" (`Ok(None)`) as a
//! short-lived negative entry while handing it to every waiter, count the waiters, bound
//! each load with a timeout that all waiters see, and show there is no leak by exposing the
//! table of loads in flight ([`GuardedCache::loads_in_flight`]). So answers live in two
//! `moka::sync::Cache`s, and the loads in flight live in the crate's private `flight` module: a
//! `DashMap` from key to a write-locked slot, removed as soon as the load ends, whose `Drop`
//! guard releases the waiters if the leader is cancelled or panics.
//!
//! # Why `moka::sync` rather than `moka::future`
//!
//! This cache needs none of moka's async API: it coalesces loads itself, keeps its own
//! deadlines and has no eviction listener. With `moka::sync` a hit is a plain function call,
//! with no future state to build and poll (bench: `cache_hit/{moka_sync_get,moka_get}` in
//! benches/cache.rs compares the two on the same keys). The housekeeping is the same: both run it inline on
//! the calling thread, at the same points (a read or write that finds 64 operations logged, or
//! 300 ms gone since the last run, takes the housekeeping lock with a `try_lock`, and goes on
//! without it if another caller holds it), and without an eviction listener `moka::future`'s
//! housekeeping never yields either: the async locks it awaits are only ever taken under that
//! housekeeping lock, so they are always free. One difference: a write (a load's insert, an
//! invalidation) that finds moka's write log full (384 operations queued while another thread
//! runs the housekeeping) sleeps its thread in 50 µs steps until there is room, where
//! `moka::future` would yield to the runtime; only hundreds of loads or invalidations landing
//! during one housekeeping run get there.
//!
//! # Why two moka caches, and deadlines of our own
//!
//! A hit must cost little more than a bare moka `get` (bench: `cache_hit/guarded_get_or_load`
//! against `cache_hit/moka_sync_get` in benches/cache.rs). moka's per-entry expiry (its
//! `Expiry` policy) adds `Instant` arithmetic to every read
//! (`cache_hit/moka_get_per_entry_expiry`), and one moka
//! cache with a single TTL cannot give values a jittered lifetime and "not found" a shorter
//! one. So:
//!
//! * values live in one cache whose moka TTL is `time_to_live`, each with its own deadline
//!   (a random 90–100% of it), checked on every hit against a coarse clock (see `clock`): a
//!   value past its deadline is a miss, and the load it leads to overwrites it; moka drops it
//!   at the latest when the full TTL ends;
//! * negative entries live in another, whose moka TTL is `negative_ttl`, so moka itself drops
//!   them on time: a flood of keys the filter lets through by mistake cannot fill the cache
//!   with dead "not found"s for the whole `time_to_live`, nor evict values (each cache has its
//!   own `max_capacity`).
//!
//! A lookup asks the value cache, then the negative one.
//!
//! # Where each behaviour lives
//!
//! * `cache.rs`: [`GuardedCache`]: the lookup path, the load per key, invalidation.
//! * `builder.rs`: [`GuardedCacheBuilder`]: capacities, lifetimes, the load timeout.
//! * `pending.rs`: [`GuardedCache::prepare_insert`]: a create forgets its cached "not found".
//! * `remote.rs`: "not found"s made stale by creates on other instances.
//! * `clock.rs`: the coarse clock value deadlines are read on.
//! * `error.rs`, `stats.rs`, `response.rs`: [`LoadError`], [`CacheStats`], and the axum
//!   response of a lookup's result.

mod builder;
mod cache;
mod clock;
mod error;
mod pending;
mod remote;
#[cfg(feature = "axum")]
mod response;
mod stats;

pub use builder::GuardedCacheBuilder;
pub use cache::GuardedCache;
pub use error::{LoadError, LoadErrorKind};
#[cfg(feature = "axum")]
#[cfg_attr(docsrs, doc(cfg(feature = "axum")))]
pub use response::CacheResponse;
pub use stats::CacheStats;
