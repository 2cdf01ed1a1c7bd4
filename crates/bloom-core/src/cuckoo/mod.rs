//! A concurrent cuckoo filter (Fan, Andersen, Kaminsky, Mitzenmacher, CoNEXT 2014): a key
//! is a fingerprint of `f` bits in one of two buckets of four slots, so it can be removed,
//! at about a third of a counting Bloom filter's memory for the same rate.
//!
//! | file          | holds                                                                  |
//! |---------------|------------------------------------------------------------------------|
//! | `filter.rs`   | [`CuckooFilter`]: a key's buckets and fingerprint; insert, lookup, remove |
//! | `builder.rs`  | [`CuckooBuilder`]: sizing from `(n, p)` or from `(m, f)`; the rate's closed form |
//! | `bucket.rs`   | a bucket's four fingerprints in `4f − 4` bits (semi-sorted)           |
//! | `table.rs`    | the packed buckets, the stripe versions, the consistent read of two buckets |
//! | `path.rs`     | making room: the search for a chain of moves and the moves            |
//! | `error.rs`    | [`FilterFull`]                                                         |
//!
//! The file format (kind 3) is in `format/cuckoo.rs` and `docs/FORMAT.md`.
//!
//! # Where a key goes
//!
//! SipHash-1-3 of the key (the filter's secret key) gives `h`; the first bucket is
//! `h·m/2⁶⁴`, the fingerprint `1 + (h mod 2³²)·(2^f − 1)/2³²` (0 marks an empty slot), and
//! the second bucket is `(H(fp) − i) mod m` from either one `i`, with `H(fp)` one multiply:
//! an involution for any `m`, so the table is not rounded up to a power of two and a
//! fingerprint knows its other bucket without the key.
//!
//! A lookup answers "yes" as soon as one bucket, as read, holds the fingerprint (a torn read
//! can only add a false positive); only "no" needs the validated read below. It reads both
//! words a bucket may span, always: no branch on where the bucket falls.
//!
//! # No false negative while keys move
//!
//! **Claim.** A lookup of a key that was inserted before the lookup began, and not removed
//! before it ended, returns `true`, whatever inserts, moves and removes of other keys run
//! at the same time.
//!
//! **The writers' rules.** (W1) A bucket's bits change only while the writer holds the
//! bucket's stripe; a stripe's version is odd exactly while it is held, and each hold
//! raises it by two in total (`table.rs`). (W2) A move of fingerprint `x` from bucket `s`
//! to bucket `d` writes `x` into `d` and empties it from `s` within one hold of both stripes
//! (`path.rs`). It writes `d` first, but nothing below needs that order: no validated read
//! sees the inside of a hold, and the loom model passes with the two writes swapped. (W3) An insert only ever puts a fingerprint into a free
//! slot; it never takes one out (`path.rs`: the chain is carried out from its free end, so
//! no fingerprint is ever "in hand", unlike the textbook random-walk insert).
//!
//! **Invariant.** Between holds of the stripes of a key `k`'s buckets `a` and `b`, `k`'s
//! fingerprint is in `a` or in `b`. It is true when `k`'s insert releases its stripes. Only
//! a writer holding the stripe of `a` or `b` changes either bucket (W1). A remove of another
//! key takes one copy of a fingerprint; if that key has `k`'s fingerprint and buckets it may
//! take `k`'s copy — the documented false negative of removing what was never inserted — and
//! otherwise leaves `k`'s copy. A move of a fingerprint equal to `k`'s out of `a` goes to its
//! other bucket, `(H(fp) − a) mod m = b` (the involution), within one hold (W2).
//! An insert only adds (W3).
//!
//! **The lookup** reads the versions of both stripes, both buckets, and the versions again,
//! and answers "no" only if the four version reads are equal in pairs and even (else it
//! reads again). Memory ordering: the writer's lock is a compare-and-swap to the odd version
//! followed by a release fence, its bucket writes follow, and its unlock is a release
//! increment; the reader's first version reads are acquire, its bucket reads are followed by
//! an acquire fence before the second version reads. So (the seqlock argument, Boehm 2012):
//! if a bucket read saw any write of a hold that began after the first version read, the
//! fence pairing makes the second version read see that hold's odd version or later, and the
//! lookup retries; and an even first version read (acquire) sees every write of every hold
//! that ended before it. A lookup that answers has therefore read both buckets as they were
//! with no hold of either stripe in progress: between holds, where the invariant places
//! `k`'s fingerprint in `a` or `b`, and the lookup finds it. The batch lookup
//! (`contains_many`) runs each key through this same lookup when its turn comes; what it
//! adds, a prefetch of the key's words a window of keys earlier, is only a hint no answer
//! depends on (`tests/cuckoo_batch.rs`).
//!
//! **Progress.** A lookup never writes shared memory and never takes a lock; it retries
//! only while a writer is inside a hold of one of its two stripes, a few dozen instructions
//! (two buckets decoded and written), unless the writer's thread is descheduled there.
//! Writers take at most two stripes, in index order, so they never deadlock.
//!
//! **Checked by** `tests/loom_cuckoo.rs` (every interleaving of a lookup with an insert
//! that moves the looked-up key, and of removes with inserts of other keys; skipping the
//! second version read makes the first fail, a remove that holds no stripe the second) and the stress test in `tests/cuckoo.rs`
//! (two threads inserting and removing while two check every present key).
//!
//! # Full
//!
//! An insert that finds no chain of at most four moves to a free slot within
//! [`path::MAX_VISITS`] buckets returns [`FilterFull`] and has changed nothing: every key
//! inserted before is still found. Sized from `(n, p)`, `n` keys fill the table to 95 %;
//! the first failure comes later (`tests/cuckoo.rs` measures where).

mod bucket;
mod builder;
mod error;
mod filter;
mod path;
mod table;

pub use builder::CuckooBuilder;
pub use error::FilterFull;
pub use filter::CuckooFilter;

pub(crate) use bucket::{MAX_FINGERPRINT_BITS, MIN_FINGERPRINT_BITS, SLOTS, Shape};
pub(crate) use table::Table;
