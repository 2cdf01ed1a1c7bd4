//! Filters of what was **seen recently**: [`WindowedFilter`] remembers a key for a window
//! of time (the last 24 hours) or of inserts (the last 10 million), for crawlers that
//! re-visit a page after a while and feeds that must not show an item twice in a week.
//!
//! | file         | holds                                                              |
//! |--------------|--------------------------------------------------------------------|
//! | `filter.rs`  | [`WindowedFilter`]: the ring of generations, insert, lookup, rotation |
//! | `ring.rs`    | [`RingLayout`]: the generations separate or interleaved in memory   |
//! | `batch.rs`   | [`WindowedFilter::contains_many_with`], [`WindowedFilter::seen_or_insert_many_with`]: batches under one clock read |
//! | `builder.rs` | [`WindowedBuilder`], [`Window`]: sizing from the window, keys per window and rate |
//! | `clock.rs`   | [`Clock`], [`SystemClock`], [`ManualClock`]                          |
//!
//! The file format (kind 4) is in `format/windowed.rs` and `docs/FORMAT.md`; a state saved
//! as a manifest and one file per generation ([`GenerationFile`]), so that a save rewrites
//! only the generations written since, in `format/windowed_split.rs`.
//!
//! # What it guarantees
//!
//! With window `W` and `N` generations, let `T = ⌈W / (N − 1)⌉` (milliseconds, or inserts)
//! and number the periods ("epochs") `e = ⌊t / T⌋`, `t` being the clock's milliseconds
//! since the Unix epoch (or the insert's sequence number, counted from 0).
//!
//! * **Found within the window.** A key whose insert returned at `t₀` is found by every
//!   lookup that starts after the insert returned and before `t₀ + W` (by the clock, or
//!   inserts counted), and at the latest until `t₀ + W + T`; then it is gone (unless it is
//!   a false positive).
//! * **False positives.** A lookup tests the generations of at most `N` epochs, each a
//!   Bloom filter sized for `n / (N − 1)` keys at `p_g = 1 − (1 − p)^(1/N)`; a generation
//!   holds the keys of one epoch, `n / (N − 1)` while inserts arrive at the sized `n` per
//!   window. A wrong "seen" then has probability at most `1 − (1 − p_g)^N = p`, for a stream
//!   of any length (`tests/windowed.rs` measures it after each of a hundred windows: the
//!   mean at most `p` within its own 3σ, each window within 4σ).
//! * **Never blocked.** `contains` takes no lock and never waits. The insert that crosses
//!   into a new epoch rotates (it clears one generation); other inserts crossing at the same
//!   time wait for it, lookups do not. The first insert into a generation never written
//!   allocates it (other inserts into it wait for that too); a lookup treats a generation
//!   not allocated as empty.
//! * **Memory as used.** A separate ring allocates a generation when a key first goes into
//!   it: a new filter, or one read from a file whose later generations are stored empty,
//!   holds only the generations that took keys. An interleaved ring (the default for new
//!   rings from [`INTERLEAVE_FROM_BYTES`] on) is allocated whole with the filter; a reader
//!   returns a ring separate, so reading a file costs what its bytes hold (docs/FORMAT.md,
//!   "What a reader allocates"; `tests/crafted_files.rs`), and
//!   [`WindowedFilter::into_ring_layout`] interleaves it on request.
//!
//! # Why
//!
//! The filter holds `N + 1` generations; epoch `e`'s keys go to generation `e mod (N + 1)`.
//! A lookup at stored epoch `E` (and, for a time window, clock epoch `C ≥ E`) reads the
//! generations of epochs `max(E, C) − N + 1 ..= E`: those of the last `N` epochs by the
//! clock. Rotating to epoch `E + 1` publishes `E + 1` (whose generation was cleared when it
//! became the spare, the step before) and then clears generation `E + 2 mod (N + 1)`, the
//! one of epoch `E + 1 − N`: it just left every lookup's range.
//!
//! A key inserted in epoch `e` is found while the lookup's clock epoch is at most
//! `e + N − 1`, that is before `(e + N)·T`, at least `(N − 1)·T ≥ W` after the insert (which
//! happened before `(e + 1)·T`) and at most `N·T ≤ W + T` after it. Its generation is
//! cleared only by the rotation to epoch `e + N`, which a lookup in range never overlaps
//! except where the key has left the range anyway.
//!
//! A lookup skips a generation never written since it was cleared: an insert marks its
//! generation (a release store) before it sets a bit, so a lookup that starts after the
//! insert returned sees the mark (an acquire load); only the rotation clears a mark, that of
//! the spare, outside every lookup's range. An interleaved ring's lookup reads no mark: it
//! tests every generation in its range, and one never written since it was cleared is all
//! zero, so it answers "absent" as skipping it would; the key's bits, once an insert that
//! returned set them, are seen by the same word's modification order as in a separate ring.
//!
//! The insert must land in the generation of the epoch it happens in. For a time window,
//! an insert reads the epoch, sets its bits, then (after a sequentially consistent fence)
//! re-reads the stored epoch and the clock; if either moved past the epoch it used, it
//! inserts again into the newest generation. The fence orders its bits before its re-read
//! and the rotation's clear after its publication of the new epoch, so an insert whose bits a
//! clear could have wiped always sees the new epoch and inserts again. `tests/loom_windowed.rs`
//! models a lookup during a rotation; `tests/windowed.rs`
//! `no_false_negative_inside_the_window_while_the_clock_turns` runs inserts and lookups
//! through a hundred rotations. For a count window the sequence number is the key's time: a
//! slow insert lands in its own epoch's generation, and if that was recycled meanwhile the
//! key is older than `W` anyway (it can only add a false positive to the newer epoch).
//!
//! # Lookup cost
//!
//! A lookup hashes the key once and finds its line index once (every generation has the same
//! size, layout and hash key, so the key's line is at the same index in each), then tests that
//! line in every generation in range, eight at a time in one SIMD function, without stopping
//! at a hit: the `N` loads overlap, and which generation holds a hit is no branch to
//! mispredict (`Probe::any_contains`, guarded by
//! `probe::tests::any_line_of_a_ring_decides_on_both_paths`). A lookup therefore costs one
//! hash, one memory latency and `N` line tests, where a plain filter costs one hash, one
//! latency and one test; nothing short of a layout holding a key's generations in one line
//! removes the `N` tests. What it can shed is the bookkeeping around them: an interleaved
//! ring's lookup takes its key's lines as one slice of the run (two where the range wraps
//! around the ring), with no `written` mark read and no branch per generation (a generation
//! in range that took no key is all zero there: `ring.rs`), and the epoch's ring index comes
//! from a multiply, not a division (`RingIndex`). The test of a line is what a lookup repeats `N` times, so the
//! default layout is SplitBlock: its eight bits come from one multiply of the hash and are
//! tested with one compare of the line, where Blocked cuts `k` offsets (8 at `p_g` = 0.25 %) one at a time
//! and refills its bits with a mix past 7. At the same rates it takes about the same memory
//! (22.1 bits per key of the window at N = 4, p = 1 %, against Blocked's 22.0; 19.6 against
//! 19.4 at N = 8) and a lookup is about a third faster (`benches/windowed.rs`). A `layout`
//! set on the builder, or a file's, is kept.
//!
//! Out of cache, the cost is the `N` lines' loads. Scattered over `N` allocations
//! ([`RingLayout::Separate`]) they cost `N` cache misses that overlap only in part; with line
//! `i` of every generation side by side ([`RingLayout::Interleaved`]) a key's lines are one
//! contiguous run, fetched as one stream. Interleaving allocates the ring whole with the
//! filter, so it is the default only for new rings of at least [`INTERLEAVE_FROM_BYTES`] (a
//! many-small-filters user, one per user, keeps memory as used); a ring read from a file is
//! separate until [`WindowedFilter::into_ring_layout`] interleaves it (`ring.rs` states the
//! rules and names their tests). Both hold the same bits and write the same files.
//!
//! # Memory
//!
//! At the worst instant (just before a rotation) a lookup's range holds `N` full generations,
//! `n·N/(N − 1)` keys, and a key is wrongly seen if any generation answers yes: each must be
//! sized for `p_g ≈ p/N`. A Bloom filter needs at least `log₂(1/p_g)/ln 2` bits per key, so per
//! key of the window the ring of `N + 1` generations takes at least
//! `(N + 1)/(N − 1) · 1.44 · log₂(N/p)` bits: 20.8 at N = 4, p = 1 % (22.1 measured), against
//! `1.44 · log₂(1/p)` = 9.6 for a plain filter of the window's `n` keys (9.9 measured,
//! Blocked): 2.2×. Without the spare (`N/(N − 1)`) the bound is still 16.6 bits, 1.7× a plain
//! filter: no ring of per-period Bloom filters under this rate guarantee gets below that. The
//! bound is lowest near N = 16 (17.4 bits, 1.8×). Nor does the age-partitioned Bloom filter
//! (Shtul, Baquero, Almeida 2020: `k + l` slices of `m` bits, a key in `k` consecutive
//! slices): with each slice's fill `1 − e^(−j·g/m)` for the `j ≤ k` generations of `g` keys it
//! took, and a false positive being `k` consecutive set bits among the `k + l` slices, the
//! best choice at p = 1 % (k = 11, l ≈ 60) takes 19.6 bits per key of its guaranteed window
//! of `l·g` keys, 2.0× the plain filter's 9.6. Both layouts of [`RingLayout`] take the same
//! memory.
//!
//! Under 1.6× takes one table of fingerprints, each tagged with the epoch of its insert, in
//! place of a filter per epoch: a key is one entry, not a bit pattern in each of `N`
//! filters. On the buckets of a [`CuckooFilter`](crate::CuckooFilter) (two buckets of four,
//! semi-sorted), with `f`-bit fingerprints and a `⌈log₂ N⌉`-bit tag, a lookup compares eight
//! entries, so at load α = 0.95 of the `n·N/(N − 1)` keys of the worst instant `f = 10` gives
//! `1 − (1 − 1/1023)^(8α)` = 0.74 % ≤ p, and a key of the window costs
//! `(f − 1 + 2)/α · N/(N − 1)` = 15.4 bits at N = 4, 1.55× the plain Blocked filter. The same
//! table without semi-sorting, `(f + 2)/α · 4/3` = 16.8 bits, is 1.7×. Such a table gives up
//! two of the guarantees above. A lookup retries while a writer holds its buckets (the cuckoo
//! filter's validated read) instead of never waiting. And a table fills: past its load an
//! insert fails, where a ring at any insert rate still finds every key of the window (its
//! false-positive rate rises instead); keeping that needs an overflow for the keys a full
//! table refuses, memory this count leaves out. Its rotation also costs more: it rewrites
//! every bucket to drop the leaving epoch's tag, where a ring clears one generation.

mod batch;
mod builder;
mod clock;
mod filter;
mod ring;

pub use crate::format::windowed_split::GenerationFile;
pub use builder::{MAX_GENERATIONS, MIN_GENERATIONS, Window, WindowedBuilder};
pub use clock::{Clock, ManualClock, SystemClock};
pub use filter::WindowedFilter;
pub use ring::{INTERLEAVE_FROM_BYTES, RingLayout};

pub(crate) use builder::generation_rate;
pub(crate) use filter::Parts;
