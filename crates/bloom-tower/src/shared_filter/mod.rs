//! [`SharedFilter`]: the filter every guard reads, replaceable while it serves.
//!
//! # How a rebuild cannot lose a key
//!
//! The serving filter is an [`ArcSwap`](arc_swap::ArcSwap): lookups load it with no lock. A rebuild fills a new
//! filter off to the side and swaps it in; the danger is a key inserted *while* it runs, which
//! the source may not contain. So while a rebuild runs, its filter is published in `building`
//! and every insert writes both filters. `building` sits in a [`RwLock`](std::sync::RwLock) whose read side each
//! insert holds across *both* of its writes, and the rebuild takes the write side for the
//! only two moments that matter:
//!
//! 1. **publish**: `building = Some(next)`, before it calls
//!    [`KeySource::keys`](crate::KeySource::keys);
//! 2. **swap**: `current = next; building = None`, after the last key is streamed in.
//!
//! Every insert's critical section is therefore wholly before the publish, between the two, or
//! after the swap; there is no "read `building` as empty, then the swap happens" interleaving.
//!
//! * Before the publish: it returned before `keys()` was called, so the source yields the key
//!   (the [`KeySource`](crate::KeySource) contract) and the stream puts it into `next`.
//! * Between: it saw `building == Some(next)` and wrote `next` itself.
//! * After the swap: `next` is the current filter, which it wrote.
//!
//! So when `next` starts serving it holds every key inserted before or during the rebuild:
//! zero false negatives. Every insert also writes the current filter, so a rebuild that fails
//! or is dropped midway only has to unpublish `next` (a drop guard does) and the old filter
//! keeps serving with nothing lost. Lookups never take the lock: they read whichever filter is
//! current, and both the old and the new one hold every inserted key. Inserts pay one
//! uncontended read lock; the write side is held only for a pointer store, so inserts wait at
//! most that long and never for the stream.
//!
//! The alternative of OR-ing the old filter into the new one after the swap would also lose
//! nothing, but it would carry every deleted key over forever, and dropping deleted keys is
//! what rebuilds are for.
//!
//! # Which filter
//!
//! Any [`AnyFilter`](bloom_core::AnyFilter): a plain [`BloomFilter`](bloom_core::BloomFilter) (the fastest, the smallest); a
//! [`ScalableBloomFilter`](bloom_core::ScalableBloomFilter) when the number of keys is not
//! known up front (it adds stages as keys arrive, and a rebuild sizes the new one's first
//! stage for the source's count, so it goes back to one stage); or, when deleted records
//! must stop passing the guard before the next rebuild ([`SharedFilter::remove`]), a
//! [`CuckooFilter`](bloom_core::CuckooFilter) (about the plain filter's memory; when full it
//! refuses an insert, and then lets every key through until a rebuild replaces it: with
//! `auto_grow`, at once and larger) or a
//! [`CountingBloomFilter`](bloom_core::CountingBloomFilter) (4× the memory; never full, its
//! false-positive rate climbs instead). Rebuilt filters are of the same kind.
//!
//! A full cuckoo filter misses the key it refused, so answering "absent" from it could turn
//! away a record that exists: it answers "maybe" for every key instead
//! ([`FilterStats::full`](crate::stats::FilterStats::full), the `bloom_filter_refused_inserts_total` counter, the
//! `BloomFilterFull` alert in `docs/alerts.yml`; `tests/cuckoo.rs`
//! `a_full_cuckoo_filter_lets_every_key_through_until_rebuilt`).
//!
//! # Why a removal touches only the filter that served before the delete
//!
//! A counting or cuckoo filter can only lose a key safely if the key is in it: decrementing
//! the counters of a key that was never inserted takes counts other keys need, and removing
//! its fingerprint may take another key's; either is a false negative. The filter serving before the record was deleted holds its key (the argument
//! above), so [`SharedFilter::remove`] decrements that one, and only while it still serves.
//! A filter being built, or swapped in since, may have read its source after the delete and
//! not hold the key, so a removal leaves it alone; at worst it keeps the deleted key as a
//! false positive until the rebuild after.
//!
//! Inserts have the mirror problem: the second insert after a commit (for a rebuild whose
//! source missed the open transaction) would count the key twice in a counting filter, and
//! one removal would no longer take it out. [`SharedFilter::insert_after_commit`] therefore
//! writes only the filters published since the first insert: none, unless a rebuild started
//! in between.
//!
//! # Where each behaviour lives
//!
//! [`SharedFilter`]'s methods are spread over this folder, one concern per file:
//!
//! * `filter.rs`: [`SharedFilter`] itself: [`contains`](SharedFilter::contains),
//!   [`insert`](SharedFilter::insert), [`insert_after_commit`](SharedFilter::insert_after_commit),
//!   [`stats`](SharedFilter::stats), [`current`](SharedFilter::current); [`Inserted`].
//! * `remove.rs`: [`remove`](SharedFilter::remove) and [`generation`](SharedFilter::generation)
//!   (counting and cuckoo filters); [`FilterGeneration`], [`RemoveOutcome`], [`CannotRemove`].
//! * `shared.rs`: the state every clone shares, and the sizing of a rebuild's next filter.
//! * `generation.rs`: one filter and its distinct-key count (counted on insert, estimated from
//!   the bits once bits were merged in); [`CurrentFilter`].
//! * `builder.rs`: [`SharedFilterBuilder`]'s settings and [`build`](SharedFilterBuilder::build).
//! * `start.rs`: [`SharedFilterBuilder::start`]: snapshot, catch-up or full build; [`Started`].
//! * `pipeline.rs`: the rebuild pipeline (publish, fill, swap), the steps the proof above names;
//!   [`CurrentFilter::fill_from`].
//! * `rebuild.rs`: [`reload_from`](SharedFilter::reload_from) and
//!   [`rebuild_every`](SharedFilter::rebuild_every); [`ReloadError`], [`BackgroundTask`].
//! * `pending.rs`: [`prepare_insert`](SharedFilter::prepare_insert) and [`PendingInsert`]: the
//!   work due after a commit, done even when the request is cancelled.
//! * `follow.rs`: [`follow`](SharedFilter::follow) and
//!   [`current_watermark`](SharedFilter::current_watermark): [`Follower`], [`Follow`].
//! * `snapshot.rs`: [`save`](SharedFilter::save), [`load`](SharedFilter::load),
//!   [`save_every`](SharedFilter::save_every), [`merge_snapshot`](SharedFilter::merge_snapshot).
//! * `external.rs`: hooks for replication: [`set_insert_hook`](SharedFilter::set_insert_hook),
//!   [`set_commit_hook`](SharedFilter::set_commit_hook),
//!   [`set_rejection_override`](SharedFilter::set_rejection_override),
//!   [`set_external_rebuild`](SharedFilter::set_external_rebuild),
//!   [`start_building`](SharedFilter::start_building) and [`Building`].
//! * `remote.rs`: [`key_digest`](SharedFilter::key_digest) and
//!   [`forget_remote`](SharedFilter::forget_remote): cross-instance "not found" invalidation.
//! * `saturation.rs`: [`check_saturation`](SharedFilter::check_saturation), auto-grow.
//! * `accuracy.rs`: the measured false-positive rate, counted where guard and cache meet.
//! * `stats.rs`: [`FilterStats`](crate::stats::FilterStats) and its `metrics` series.

mod accuracy;
mod builder;
mod external;
mod filter;
mod follow;
mod generation;
mod pending;
mod pipeline;
mod rebuild;
mod remote;
mod remove;
mod saturation;
mod shared;
pub(crate) mod snapshot;
mod start;
pub(crate) mod stats;

pub use builder::SharedFilterBuilder;
pub use external::{
    AlreadyBuilding, Building, Confirmation, ErasedKeySource, ExternalRebuild, InsertHook,
    Rejection, RejectionOverride,
};
pub(crate) use filter::Admission;
pub use filter::{Inserted, SharedFilter};
pub use follow::{Follow, Follower, MAX_BACKOFF};
pub use generation::CurrentFilter;
use generation::{Generation, Insert};
#[cfg(feature = "guarded-cache")]
pub(crate) use pending::AfterCommit;
pub use pending::PendingInsert;
#[cfg(feature = "admin")]
pub(crate) use rebuild::Chain;
pub use rebuild::{BackgroundTask, ReloadError, ReloadErrorKind, Reloaded};
pub(crate) use remote::ForgetByDigest;
pub use remove::{CannotRemove, FilterGeneration, RemoveOutcome};
pub use saturation::SaturationReport;
use shared::Shared;
pub use snapshot::{MergeRefused, MergedSnapshot, SnapshotError};
pub use start::Started;
