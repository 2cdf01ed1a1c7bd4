//! [`FilterSet`]: one small filter per key (user, tenant, feed) under one memory budget.
//!
//! A feed must not show a user an item twice within a week; a multi-tenant service keeps a
//! filter per tenant. That is millions of small filters, of which only some are in use at any
//! time. A `FilterSet` keeps the ones in use in memory, up to a byte budget, and evicts the
//! least recently used to a [`FilterStore`]: a directory ([`DirectoryStore`], a file per
//! filter), a SQLite file (`SqliteStore`, feature `sqlite-store`, a row per filter) or Redis
//! (`bloom_redis::RedisFilterStore`). The next use of an evicted key loads its filter back.
//! A key's filter is created on its first write, plain or windowed
//! ([`FilterSetBuilder::plain`], [`FilterSetBuilder::windowed`]).
//!
//! ```
//! use std::time::Duration;
//! use bloom_core::windowed::{Window, WindowedFilter};
//! use bloom_tower::filter_set::{DirectoryStore, FilterSet};
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build()?.block_on(async {
//! let dir = tempfile::tempdir()?;
//! let shown = FilterSet::<u64, _>::builder(DirectoryStore::new(dir.path())?)
//!     .windowed(WindowedFilter::builder(Window::Time(Duration::from_secs(7 * 86_400)))
//!         .expected_items(300)
//!         .false_positive_rate(0.01))?
//!     .budget_bytes(256 << 20)
//!     .build();
//! let candidates = ["a", "b", "c"];
//! let user = 42;
//! let feed: Vec<&str> = shown
//!     .update(&user, |seen| candidates.into_iter().filter(|item| !seen.contains(*item)).take(2)
//!         .inspect(|item| { seen.insert(*item); }).collect())
//!     .await?;
//! assert_eq!(feed, ["a", "b"]);
//! shown.flush_key(&user).await?; // durable before the response goes out
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # })?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Guarantees
//!
//! * **Eviction loses nothing.** Every operation answers as if no filter had ever been
//!   evicted: an evicted filter that changed is stored before it leaves memory, and a key
//!   being evicted is not loaded again until its store completed. An operation runs on a
//!   filter only while it is pinned in memory; an eviction waits for operations running on
//!   its victim, then stops new ones (they look the key up again, and load it). Guarded by the
//!   property test `tests/filter_set.rs` `answers_are_those_of_a_set_that_never_evicts`.
//! * **One load per key.** Concurrent operations on an absent key load it once; the others
//!   wait for that load ([`FilterSetStats::coalesced_waiters`]). A load whose future is
//!   dropped or fails releases its waiters, and one of them loads again
//!   (`a_cancelled_load_releases_its_waiters`, `concurrent_users_of_an_evicted_key_load_it_once`).
//! * **The budget.** A load that would take the bytes in memory over
//!   [`budget_bytes`](FilterSetBuilder::budget_bytes) first evicts the least recently used
//!   filters (an LRU order over all keys, at the granularity of loads: uses between two
//!   loads tie; see `slots.rs`). A filter counts its bits and an upper bound of the
//!   heap it and its place in the set take ([`counted_bytes`]); loads in flight count theirs. When the
//!   store fails, the filter stays in memory and the set runs over budget
//!   ([`FilterSetStats::store_errors`]) rather than lose it.
//! * **Fast hits, parallel stores.** An operation on a filter in memory takes its shard's
//!   read lock and writes nothing shared by all keys (no global LRU tick, no exclusive
//!   lock), so threads on different keys do not contend. Loads of different keys run at
//!   once; stores run up to 8 at a time (a [`flush`](FilterSet::flush) runs 8 stores at a
//!   time, each of up to [`FilterStore::MAX_BATCH`] filters: one SQL transaction, one Redis
//!   pipeline; evictions by concurrent loads store side by side), and a key's stores land in
//!   the order their copies were taken (`an_older_copy_never_lands_after_a_newer_one`,
//!   `a_flush_stores_in_parallel_up_to_the_bound`,
//!   `a_flush_hands_a_batching_store_its_filters_in_batches`). Measured by
//!   `benches/filter_set.rs`.
//! * **Durability.** A write is in memory when it returns. It is in the store once the
//!   filter is evicted, or once a [`flush`](FilterSet::flush) or
//!   [`flush_key`](FilterSet::flush_key) that started after it returned `Ok`. Stores
//!   replace a filter atomically, so a process killed at any moment, in the middle of a
//!   store too, leaves every key's filter as its last completed store: nothing it
//!   acknowledged after a flush is lost (`tests/filter_set_kill.rs`; the feed example
//!   under `kill -9`: the workspace's `tests/feed.rs`
//!   `a_killed_feed_service_loses_no_item_it_acknowledged`). Run `flush` on a timer and at
//!   shutdown; call `flush_key` before acknowledging a write that must survive a crash. A
//!   flush that fails or is cancelled leaves every filter it had not seen stored marked
//!   changed, so the next flush stores it (`a_failed_batch_leaves_every_filter_of_it_to_the_next_flush`,
//!   `a_cancelled_flush_leaves_its_filters_to_the_next`).
//! * **Bad stored bytes are an error, not a fresh filter**: a key whose stored filter is
//!   corrupted answers [`FilterSetError::Corrupt`] and its bytes are left for an operator
//!   (replacing them with an empty filter would forget the key's history).
//!
//! # Where each behaviour lives
//!
//! * `set.rs`: [`FilterSet`]: operations, loads, eviction, flushes.
//! * `slots.rs`: the table: key states (resident, busy, absent), the sharded read-locked
//!   hot path, the lazily kept LRU order, bytes, and the guards that undo a cancelled load
//!   or eviction.
//! * `builder.rs`: [`FilterSetBuilder`]: budget, filter kind, name.
//! * `store.rs`: [`FilterStore`] (its atomicity rule, batches), [`StoreError`].
//! * `directory.rs`: [`DirectoryStore`]; `sqlite.rs`: `SqliteStore` (feature `sqlite-store`).
//! * `stats.rs`, `error.rs`: [`FilterSetStats`] (and the `bloom_filter_set_*` metrics),
//!   [`FilterSetError`].

mod builder;
mod directory;
mod error;
mod set;
mod slots;
#[cfg(feature = "sqlite-store")]
#[cfg_attr(docsrs, doc(cfg(feature = "sqlite-store")))]
mod sqlite;
mod stats;
mod store;

pub use builder::FilterSetBuilder;
pub use directory::DirectoryStore;
pub use error::FilterSetError;
pub use set::{FilterSet, counted_bytes};
#[cfg(feature = "sqlite-store")]
#[cfg_attr(docsrs, doc(cfg(feature = "sqlite-store")))]
pub use sqlite::{SqliteStore, SqliteStoreBuilder};
pub use stats::FilterSetStats;
pub use store::{FilterStore, StoreError};
