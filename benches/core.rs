//! `bloom-core` against its peers, in the same run: insert, lookup of members (hit) and
//! non-members (miss), batch lookup, and lookup throughput with 1 and 2 threads.
//!
//! Implementations (the function names in each group):
//! * `bloom-core-blocked`, `bloom-core-classic`, `bloom-core-splitblock`:
//!   [`bloom_core::BloomFilter`] in each layout;
//! * `bloom-core-counting`: [`bloom_core::CountingBloomFilter`], Blocked (4-bit counters: 4×
//!   the memory of `bloom-core-blocked`, the same slots and `k`);
//! * `bloom-core-scalable`: [`bloom_core::ScalableBloomFilter`] (Blocked stages, growth ×2,
//!   tightening 0.5) with initial capacity `n`, so that it holds the `n` members in its one
//!   stage (sized for p/2, the first stage's share of p);
//! * `bloom-core-scalable-grown`: the same with initial capacity `n / 64`, the case where `n`
//!   was not known: the `n` members fill 7 stages, and a lookup checks every stage (newest
//!   first) until one answers yes, so a miss probes all 7;
//! * `fastbloom`: `fastbloom::AtomicBloomFilter` with its default hasher (SipHash-1-3, random
//!   key);
//! * `bloomfilter`: `bloomfilter::Bloom` (two SipHash-1-3, random key).
//!
//! Every filter is sized for `n` items at p = 1%, with n = 1M (about 1.2 MB: past a 1 MiB L2,
//! inside L3), n = 300k (about 0.37 MB: inside L2; the single-lookup groups of `u64` keys only)
//! and, when `BLOOM_BENCH_LARGE=1`, n = 50M (about 60 MB: out of cache). Keys are `u64` ids and
//! 24-byte strings `"user:%019d"`, generated before timing and queried in shuffled order from
//! a pre-generated array walked cyclically (`min(n, 2^20)` rounded down to a multiple of 1024
//! keys: 999,424 at 1M, 299,008 at 300k), so successive lookups are independent (a throughput
//! loop, not a latency chain) and touch lines all over the filter. Groups, named for a table:
//!
//! * `insert/{u64,str}/{1M,50M}`: one insert per iteration into a filter that is cleared
//!   (untimed) each time the shuffled member keys have all been inserted. The counting and
//!   scalable filters have no `clear`: a fresh one of the same parameters replaces them, so
//!   `bloom-core-scalable-grown` grows through its stages again on every pass (stage
//!   allocations timed, as they are in use), and the fresh filters' pages are faulted in by
//!   the timed inserts (the others are cleared in place; measured outside this file, that
//!   costs a counting filter nothing visible at 1M and about 2% at 50M);
//! * `contains_hit/…`, `contains_miss/…`: one `contains` per iteration on the filter holding
//!   all `n` members;
//! * `contains_many_hit/…`, `contains_many_miss/…`: one batch of 1024 keys per iteration
//!   (throughput in keys): `bloom-core-blocked` / `-classic` through `contains_many` (hashes
//!   ahead and prefetches); the counting and scalable filters, which have no batch lookup,
//!   and the peers through a loop of `contains` collected into the same `Vec<bool>`;
//! * `floor/…`: the floor of a single lookup, in its two parts, measured the way the
//!   `contains_hit/u64/…` rows run (one per iteration, from arrays as long as those rows' key
//!   arrays, read sequentially and cyclically as they read their keys):
//!   * `siphash13_u64`: SipHash-1-3 of an 8-byte key (the `siphasher` crate, keyed);
//!   * `random_line_read_1M_1.24MB_past_L2`: one word of a random 64-byte line of an array the
//!     size of the Blocked filter at 1M (1.24 MB), 999,424 positions uniform over all of it, as
//!     the 1M hit rows touch it: more than a 1 MiB L2 holds, so part of the reads go to L3;
//!   * `random_line_read_300k_0.37MB_in_L2`: the same at 300k (0.37 MB, 299,008 positions),
//!     an array that stays in L2: the "one L2 line" part of the floor, for the 300k hit rows.
//!
//!   * `random_line_read_1M_1.26MB_past_L2`, `random_line_read_300k_0.38MB_in_L2`: the same
//!     over an array the size of the SplitBlock filter (2% larger at p = 1%);
//!   * `siphash13_then_line_<n>_<size>_<where>`: the two parts as one operation, as a lookup
//!     does them: SipHash-1-3 of the next key, a multiply-shift of the hash to a line of the
//!     array, one word of that line. The read waits for its hash, and ~80 instructions of hash
//!     between reads leave room for fewer reads in flight than the read-only loop overlaps.
//!
//!   The floor of `contains_hit/u64/<n>` is `siphash13_then_line_<n>_…` of the array of that
//!   row's size; `siphash13_u64` + `random_line_read_<n>_…`, the sum of the parts each in a
//!   loop of its own, is a lower bound no lookup reaches past L2;
//! * `contains_threads/…`: `bloom-core-blocked-1t` / `-2t`, hits looked up by 1 or 2 threads
//!   sharing one `&BloomFilter`; `time(1t) / time(2t)` is the 2-thread speedup.
//!
//! At start the bits per item (of memory) of each implementation at 300k, 1M and 50M are printed
//! to stderr (for the scalable filters, of their first stage: what they hold before any
//! insert); when the filled filters are built, the fill time, each one's false-positive rate
//! on the non-member queries and bits per item once filled, and the scalable filters' numbers
//! of stages are printed too (and any false negative on the members panics).
//!
//! Setup is done before criterion times anything, and only for the key kinds and sizes the
//! command-line filter can select: the 50M fill takes minutes (every insert is a cache miss;
//! about 100 s on a loaded 2-vCPU VM before the counting and scalable filters were added,
//! which add to it). Default settings: 1 s warm-up, 2 s measurement, 30 samples; the 1M groups
//! take about 5 minutes, and the 300k ones (14 rows) add about 45 s.
//!
//! Run (from the workspace root):
//! ```text
//! cargo bench -p bloom-benches --bench core                                 # 300k and 1M
//! BLOOM_BENCH_LARGE=1 cargo bench -p bloom-benches --bench core             # and 50M
//! cargo bench -p bloom-benches --bench core -- 'contains_hit/u64' --quick  # a subset
//! ```
//! Results: `target/criterion/<group with '/' as '_'>/<function>/new/estimates.json`, e.g.
//! `target/criterion/contains_hit_u64_1M/fastbloom/new/estimates.json` (nanoseconds per
//! iteration: per key, except per 1024-key batch in the `contains_many_*` groups).

use std::cell::OnceCell;
use std::hash::Hash;
use std::hint::black_box;
use std::ops::Range;
use std::sync::Barrier;
use std::time::{Duration, Instant};

use bloom_benches::{
    BATCH, FPR, IN_L2, KeySet, LARGE, SMALL, STR_KEY_LEN, StrKeys, U64Keys, filter_may_select,
    query_count, query_ids, size_label, sizes, write_str_key,
};
use bloom_core::{BloomFilter, CountingBloomFilter, Key, Layout, ScalableBloomFilter};
use criterion::measurement::WallTime;
use criterion::{BenchmarkGroup, Criterion, Throughput, criterion_group, criterion_main};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// One Bloom filter implementation, seen through what the benchmarks need. (What `insert`
/// returns differs between the crates; the benchmarks only feed it to `black_box`.)
trait Filter<Q: ?Sized> {
    fn insert(&mut self, key: &Q) -> bool;
    fn contains(&self, key: &Q) -> bool;
    /// The implementation's batch lookup, or a loop of `contains` if it has none.
    fn contains_batch<'a>(&self, keys: impl Iterator<Item = &'a Q>) -> Vec<bool>
    where
        Q: 'a;
    fn clear(&mut self);
    fn bits(&self) -> u64;
    fn hashes(&self) -> u32;
}

impl<Q: ?Sized + Key> Filter<Q> for BloomFilter {
    #[inline(always)]
    fn insert(&mut self, key: &Q) -> bool {
        BloomFilter::insert(self, key)
    }
    #[inline(always)]
    fn contains(&self, key: &Q) -> bool {
        BloomFilter::contains(self, key)
    }
    #[inline(always)]
    fn contains_batch<'a>(&self, keys: impl Iterator<Item = &'a Q>) -> Vec<bool>
    where
        Q: 'a,
    {
        self.contains_many(keys)
    }
    fn clear(&mut self) {
        BloomFilter::clear(self);
    }
    fn bits(&self) -> u64 {
        self.num_bits()
    }
    fn hashes(&self) -> u32 {
        self.num_hashes()
    }
}

impl<Q: ?Sized + Key> Filter<Q> for CountingBloomFilter {
    #[inline(always)]
    fn insert(&mut self, key: &Q) -> bool {
        CountingBloomFilter::insert(self, key)
    }
    #[inline(always)]
    fn contains(&self, key: &Q) -> bool {
        CountingBloomFilter::contains(self, key)
    }
    #[inline(always)]
    fn contains_batch<'a>(&self, keys: impl Iterator<Item = &'a Q>) -> Vec<bool>
    where
        Q: 'a,
    {
        keys.map(|k| CountingBloomFilter::contains(self, k))
            .collect()
    }
    /// No `clear`: a fresh filter of the same shape (and a new random hash key).
    fn clear(&mut self) {
        *self = CountingBloomFilter::builder()
            .bits(self.num_slots())
            .hashes(self.num_hashes())
            .layout(self.layout())
            .build()
            .expect("valid parameters");
    }
    /// Bits of memory: 4 per slot.
    fn bits(&self) -> u64 {
        self.size_in_bytes() as u64 * 8
    }
    fn hashes(&self) -> u32 {
        self.num_hashes()
    }
}

impl<Q: ?Sized + Key> Filter<Q> for ScalableBloomFilter {
    #[inline(always)]
    fn insert(&mut self, key: &Q) -> bool {
        ScalableBloomFilter::insert(self, key)
    }
    #[inline(always)]
    fn contains(&self, key: &Q) -> bool {
        ScalableBloomFilter::contains(self, key)
    }
    #[inline(always)]
    fn contains_batch<'a>(&self, keys: impl Iterator<Item = &'a Q>) -> Vec<bool>
    where
        Q: 'a,
    {
        keys.map(|k| ScalableBloomFilter::contains(self, k))
            .collect()
    }
    /// No `clear`: a fresh filter of the same parameters and hash key, back to one stage
    /// (growth and tightening are the defaults, as [`ours_scalable`] builds).
    fn clear(&mut self) {
        *self = ScalableBloomFilter::builder(self.initial_capacity(), self.target_fpr().unwrap())
            .layout(self.layout())
            .seed(self.seed())
            .build()
            .expect("valid parameters");
    }
    /// Bits of memory, over every stage so far.
    fn bits(&self) -> u64 {
        self.size_in_bytes() as u64 * 8
    }
    /// The newest stage's `k` (the stages' `k` grow as their false-positive rates tighten).
    fn hashes(&self) -> u32 {
        self.stage_stats().last().map_or(0, |s| s.num_hashes)
    }
}

impl<Q: ?Sized + Hash> Filter<Q> for fastbloom::AtomicBloomFilter {
    #[inline(always)]
    fn insert(&mut self, key: &Q) -> bool {
        fastbloom::AtomicBloomFilter::insert(self, key)
    }
    #[inline(always)]
    fn contains(&self, key: &Q) -> bool {
        fastbloom::AtomicBloomFilter::contains(self, key)
    }
    #[inline(always)]
    fn contains_batch<'a>(&self, keys: impl Iterator<Item = &'a Q>) -> Vec<bool>
    where
        Q: 'a,
    {
        keys.map(|k| fastbloom::AtomicBloomFilter::contains(self, k))
            .collect()
    }
    fn clear(&mut self) {
        fastbloom::AtomicBloomFilter::clear(self);
    }
    fn bits(&self) -> u64 {
        self.num_bits() as u64
    }
    fn hashes(&self) -> u32 {
        self.num_hashes()
    }
}

impl<Q: ?Sized + Hash> Filter<Q> for bloomfilter::Bloom<Q> {
    #[inline(always)]
    fn insert(&mut self, key: &Q) -> bool {
        !self.check_and_set(key)
    }
    #[inline(always)]
    fn contains(&self, key: &Q) -> bool {
        self.check(key)
    }
    #[inline(always)]
    fn contains_batch<'a>(&self, keys: impl Iterator<Item = &'a Q>) -> Vec<bool>
    where
        Q: 'a,
    {
        keys.map(|k| self.check(k)).collect()
    }
    fn clear(&mut self) {
        bloomfilter::Bloom::clear(self);
    }
    fn bits(&self) -> u64 {
        self.len()
    }
    fn hashes(&self) -> u32 {
        self.number_of_hash_functions()
    }
}

/// Our filter in `layout`, sized for `n` items at [`FPR`], with a random hash key.
fn ours(n: u64, layout: Layout) -> BloomFilter {
    BloomFilter::builder()
        .expected_items(n)
        .false_positive_rate(FPR)
        .layout(layout)
        .build()
        .expect("valid parameters")
}

/// Our counting filter, Blocked, sized for `n` items at [`FPR`], with a random hash key.
fn ours_counting(n: u64) -> CountingBloomFilter {
    CountingBloomFilter::builder()
        .expected_items(n)
        .false_positive_rate(FPR)
        .layout(Layout::Blocked)
        .build()
        .expect("valid parameters")
}

/// Our scalable filter (Blocked stages, default growth and tightening) starting at
/// `initial_capacity` items, compound rate [`FPR`], with a random hash key.
fn ours_scalable(initial_capacity: u64) -> ScalableBloomFilter {
    ScalableBloomFilter::builder(initial_capacity, FPR)
        .layout(Layout::Blocked)
        .build()
        .expect("valid parameters")
}

/// Initial capacity of `bloom-core-scalable-grown` for `n` items: after `n` inserts it has
/// 7 stages (capacities n/64, n/32, …, n: the first 6 hold 63/64 of `n`).
const GROWN_DIVISOR: u64 = 64;

fn fastbloom_filter(n: u64) -> fastbloom::AtomicBloomFilter {
    fastbloom::AtomicBloomFilter::with_false_pos(FPR).expected_items(n as usize)
}

fn bloomfilter_filter<Q: ?Sized>(n: u64) -> bloomfilter::Bloom<Q> {
    bloomfilter::Bloom::new_for_fp_rate(n as usize, FPR).expect("valid parameters")
}

/// The eight implementations, each sized for `n` items at [`FPR`] (the scalable-grown one
/// growing to it), with random hash keys.
struct Filters<Q: ?Sized> {
    blocked: BloomFilter,
    classic: BloomFilter,
    split_block: BloomFilter,
    counting: CountingBloomFilter,
    scalable: ScalableBloomFilter,
    scalable_grown: ScalableBloomFilter,
    fastbloom: fastbloom::AtomicBloomFilter,
    bloomfilter: bloomfilter::Bloom<Q>,
}

impl<Q: ?Sized + Key + Hash> Filters<Q> {
    /// All eight, holding the members `0..n`, the keys generated on the fly (never all held
    /// at once). Out of cache every insert is a cache miss and a serial fill of 50M keys takes
    /// minutes, so two threads share the work: `bloomfilter` (the slowest, and it needs
    /// `&mut`) with the counting filter and a quarter of `fastbloom`, and the plain filters
    /// (through the prefetching `insert_many`) with the scalable ones and the rest of
    /// `fastbloom`. Each scalable filter is filled by one thread, in order, so its stages
    /// grow as they would in use.
    fn filled<S: BulkKeys<Key = Q>>(n: u64) -> Self
    where
        Q: Send + Sync,
    {
        let mut f = Self {
            blocked: ours(n, Layout::Blocked),
            classic: ours(n, Layout::Classic),
            split_block: ours(n, Layout::SplitBlock),
            counting: ours_counting(n),
            scalable: ours_scalable(n),
            scalable_grown: ours_scalable(n / GROWN_DIVISOR),
            fastbloom: fastbloom_filter(n),
            bloomfilter: bloomfilter_filter(n),
        };
        let (blocked, classic, fastbloom) = (&f.blocked, &f.classic, &f.fastbloom);
        let split_block = &f.split_block;
        let (counting, scalable, grown) = (&f.counting, &f.scalable, &f.scalable_grown);
        let bloom = &mut f.bloomfilter;
        std::thread::scope(|s| {
            s.spawn(move || {
                S::for_each_key(0..n, |k| bloom.set(k));
                S::for_each_key(0..n, |k| {
                    counting.insert(k);
                });
                S::for_each_key(0..n / 4, |k| {
                    fastbloom.insert(k);
                });
            });
            S::insert_many(blocked, 0..n);
            S::insert_many(classic, 0..n);
            S::insert_many(split_block, 0..n);
            S::for_each_key(0..n, |k| {
                scalable.insert(k);
            });
            S::for_each_key(0..n, |k| {
                grown.insert(k);
            });
            S::for_each_key(n / 4..n, |k| {
                fastbloom.insert(k);
            });
        });
        f
    }
}

/// Bulk insertion into our filter through `insert_many` (which prefetches), for the fill.
trait BulkKeys: KeySet {
    fn insert_many(f: &BloomFilter, ids: Range<u64>);
}

impl BulkKeys for U64Keys {
    fn insert_many(f: &BloomFilter, ids: Range<u64>) {
        f.insert_many(ids);
    }
}

impl BulkKeys for StrKeys {
    fn insert_many(f: &BloomFilter, ids: Range<u64>) {
        f.insert_many(ids.map(|id| {
            let mut key = String::with_capacity(STR_KEY_LEN);
            write_str_key(&mut key, id);
            key
        }));
    }
}

/// Something done to every implementation, generic over the filter type so that nothing in
/// the timed loops goes through a vtable.
trait Visit<Q: ?Sized> {
    /// `make(n)` builds an empty filter of this implementation; `pick` finds it in [`Filters`].
    fn visit<F: Filter<Q>>(
        &mut self,
        name: &'static str,
        make: fn(u64) -> F,
        pick: fn(&Filters<Q>) -> &F,
    );
}

/// Calls `v` on each implementation, under its benchmark name.
fn each_impl<Q: ?Sized + Key + Hash>(v: &mut impl Visit<Q>) {
    v.visit(
        "bloom-core-blocked",
        |n| ours(n, Layout::Blocked),
        |f| &f.blocked,
    );
    v.visit(
        "bloom-core-classic",
        |n| ours(n, Layout::Classic),
        |f| &f.classic,
    );
    v.visit(
        "bloom-core-splitblock",
        |n| ours(n, Layout::SplitBlock),
        |f| &f.split_block,
    );
    v.visit("bloom-core-counting", ours_counting, |f| &f.counting);
    v.visit("bloom-core-scalable", ours_scalable, |f| &f.scalable);
    v.visit(
        "bloom-core-scalable-grown",
        |n| ours_scalable(n / GROWN_DIVISOR),
        |f| &f.scalable_grown,
    );
    v.visit("fastbloom", fastbloom_filter, |f| &f.fastbloom);
    v.visit("bloomfilter", bloomfilter_filter, |f| &f.bloomfilter);
}

/// Prints each implementation's bits per item and `k` at `n`.
struct Memory(u64);

impl<Q: ?Sized> Visit<Q> for Memory {
    fn visit<F: Filter<Q>>(
        &mut self,
        name: &'static str,
        make: fn(u64) -> F,
        _: fn(&Filters<Q>) -> &F,
    ) {
        let f = make(self.0);
        eprint!(
            " {name} {:.2} bits/item (k = {});",
            f.bits() as f64 / self.0 as f64,
            f.hashes()
        );
    }
}

/// The query keys for a filter of `n` members, in shuffled order.
struct Queries<S> {
    members: S,
    non_members: S,
}

/// What the benchmarks of one key kind and size share: the query keys and the filled filters,
/// each built once, and only if some selected benchmark needs it (see [`bench_kind`]).
struct Setup<S: BulkKeys> {
    n: u64,
    queries: OnceCell<Queries<S>>,
    filled: OnceCell<Filters<S::Key>>,
}

impl<S: BulkKeys> Setup<S>
where
    S::Key: Key + Hash,
{
    fn new(n: u64) -> Self {
        Self {
            n,
            queries: OnceCell::new(),
            filled: OnceCell::new(),
        }
    }

    fn label(&self) -> String {
        format!("{}/{}", S::NAME, size_label(self.n))
    }

    fn queries(&self) -> &Queries<S> {
        self.queries.get_or_init(|| {
            let t = Instant::now();
            let (members, non_members) = query_ids(self.n, 0x5eed ^ self.n);
            let q = Queries {
                members: S::from_ids(&members),
                non_members: S::from_ids(&non_members),
            };
            eprintln!(
                "[setup {}] {} shuffled member and {} non-member query keys in {:.2?}",
                self.label(),
                q.members.len(),
                q.non_members.len(),
                t.elapsed()
            );
            q
        })
    }

    /// The eight filters holding all `n` members. Checks, untimed, that every member query is
    /// found and prints the false-positive rate measured on the non-member queries, the bits
    /// per item, and the scalable filters' numbers of stages.
    fn filled(&self) -> &Filters<S::Key> {
        self.filled.get_or_init(|| {
            let q = self.queries();
            let t = Instant::now();
            let f = Filters::filled::<S>(self.n);
            eprint!(
                "[setup {}] filled the 8 filters with {} keys in {:.2?}; FPR (bits/item):",
                self.label(),
                self.n,
                t.elapsed()
            );
            each_impl(&mut Check {
                q,
                n: self.n,
                f: &f,
            });
            eprintln!(
                " stages: bloom-core-scalable {}, bloom-core-scalable-grown {}",
                f.scalable.num_stages(),
                f.scalable_grown.num_stages()
            );
            f
        })
    }
}

/// Counts the hits on members (must be all) and non-members (the false-positive rate), and
/// prints the bits per item of the filters holding `n` items.
struct Check<'a, S: KeySet> {
    q: &'a Queries<S>,
    n: u64,
    f: &'a Filters<S::Key>,
}

impl<S: KeySet> Visit<S::Key> for Check<'_, S> {
    fn visit<F: Filter<S::Key>>(
        &mut self,
        name: &'static str,
        _: fn(u64) -> F,
        pick: fn(&Filters<S::Key>) -> &F,
    ) {
        let f = pick(self.f);
        let count = |keys: &S| (0..keys.len()).filter(|&i| f.contains(keys.get(i))).count();
        let hits = count(&self.q.members);
        assert_eq!(hits, self.q.members.len(), "{name}: false negatives");
        let false_pos = count(&self.q.non_members);
        eprint!(
            " {name} {:.4} ({:.2});",
            false_pos as f64 / self.q.non_members.len() as f64,
            f.bits() as f64 / self.n as f64
        );
    }
}

/// Which benchmark a [`Bench`] visitor registers.
#[derive(Clone, Copy)]
enum Op {
    Insert,
    ContainsHit,
    ContainsMiss,
    ManyHit,
    ManyMiss,
}

/// Registers `op` for every implementation in `group`.
struct Bench<'a, 'g, S: BulkKeys> {
    group: &'a mut BenchmarkGroup<'g, WallTime>,
    setup: &'a Setup<S>,
    op: Op,
    /// Build the insert benchmarks' empty filters before criterion starts timing (see
    /// [`bench_kind`]); otherwise they are built on first use.
    eager: bool,
}

impl<S: BulkKeys> Visit<S::Key> for Bench<'_, '_, S>
where
    S::Key: Key + Hash,
{
    fn visit<F: Filter<S::Key>>(
        &mut self,
        name: &'static str,
        make: fn(u64) -> F,
        pick: fn(&Filters<S::Key>) -> &F,
    ) {
        let setup = self.setup;
        // Positions persist across criterion's calls of the closure, so warm-up and samples
        // keep walking the keys instead of restarting on the same (cached) first ones.
        let mut i = 0;
        match self.op {
            Op::Insert => {
                // An empty filter, built only if this benchmark may be selected. It is cleared
                // (untimed) after each pass over the member keys, so inserts see fills from
                // empty to the number of keys and always do the work of adding a new key.
                let mut fresh: Option<F> = self.eager.then(|| make(setup.n));
                self.group.bench_function(name, |b| {
                    let keys = &setup.queries().members;
                    let f = fresh.get_or_insert_with(|| make(setup.n));
                    b.iter_custom(|iters| {
                        let mut timed = Duration::ZERO;
                        let mut left = iters;
                        while left > 0 {
                            if i == keys.len() {
                                f.clear();
                                i = 0;
                            }
                            let chunk = left.min((keys.len() - i) as u64) as usize;
                            let start = Instant::now();
                            for j in i..i + chunk {
                                black_box(f.insert(keys.get(j)));
                            }
                            timed += start.elapsed();
                            i += chunk;
                            left -= chunk as u64;
                        }
                        timed
                    });
                });
            }
            Op::ContainsHit | Op::ContainsMiss => {
                self.group.bench_function(name, |b| {
                    let q = setup.queries();
                    let keys = match self.op {
                        Op::ContainsHit => &q.members,
                        _ => &q.non_members,
                    };
                    let f = pick(setup.filled());
                    b.iter(|| {
                        let found = f.contains(keys.get(i));
                        i += 1;
                        if i == keys.len() {
                            i = 0;
                        }
                        found
                    });
                });
            }
            Op::ManyHit | Op::ManyMiss => {
                self.group.bench_function(name, |b| {
                    let q = setup.queries();
                    let keys = match self.op {
                        Op::ManyHit => &q.members,
                        _ => &q.non_members,
                    };
                    let f = pick(setup.filled());
                    b.iter(|| {
                        let found = f.contains_batch((i..i + BATCH).map(|j| keys.get(j)));
                        i += BATCH;
                        if i == keys.len() {
                            i = 0;
                        }
                        found
                    });
                });
            }
        }
    }
}

/// `iters` lookups of `keys` shared among `threads` threads on one `&BloomFilter`: the wall
/// time from the first thread's start to the last one's end (thread spawns excluded).
fn threaded_contains<S: KeySet>(f: &BloomFilter, keys: &S, threads: usize, iters: u64) -> Duration
where
    S::Key: Key,
{
    let barrier = &Barrier::new(threads);
    let spans: Vec<(Instant, Instant)> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|t| {
                let share = iters / threads as u64 + u64::from((t as u64) < iters % threads as u64);
                s.spawn(move || {
                    let mut i = t * keys.len() / threads;
                    let mut found = 0u64;
                    barrier.wait();
                    let start = Instant::now();
                    for _ in 0..share {
                        found += u64::from(f.contains(keys.get(i)));
                        i += 1;
                        if i == keys.len() {
                            i = 0;
                        }
                    }
                    black_box(found);
                    (start, Instant::now())
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| w.join().expect("lookup thread panicked"))
            .collect()
    });
    let start = spans.iter().map(|s| s.0).min().expect("one thread or more");
    let end = spans.iter().map(|s| s.1).max().expect("one thread or more");
    end - start
}

/// Which groups [`bench_kind`] registers for a key kind and size.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Scope {
    /// Every group (the [`sizes`]).
    All,
    /// `contains_hit` and `contains_miss` only (the [`IN_L2`] size).
    SingleLookups,
}

/// The groups of `scope` for one key kind and size.
fn bench_kind<S: BulkKeys>(c: &mut Criterion, n: u64, scope: Scope)
where
    S::Key: Key + Hash,
{
    let setup = Setup::<S>::new(n);
    // Build the shared setup now, before criterion times anything, if the command-line filter
    // may select a benchmark that needs it. Built lazily inside the first benchmark instead,
    // it would count against `--quick` mode's time budget (which has no warm-up) and leave
    // that benchmark measured over a handful of cold iterations.
    let label = size_label(n);
    let all_labels = [IN_L2, SMALL, LARGE].map(size_label);
    let other_sizes: Vec<&str> = all_labels
        .iter()
        .map(String::as_str)
        .filter(|l| *l != label)
        .collect();
    let other_kinds: Vec<&str> = [U64Keys::NAME, StrKeys::NAME]
        .into_iter()
        .filter(|k| *k != S::NAME)
        .collect();
    let here = filter_may_select(S::NAME, &other_kinds)
        && filter_may_select(&label, &other_sizes)
        && (scope == Scope::All || filter_may_select("contains", &["insert"]));
    if here {
        if filter_may_select("contains", &["insert"]) {
            setup.filled();
        } else {
            setup.queries();
        }
    }
    let eager_insert = here && filter_may_select("insert", &["contains"]);
    for (op, name, elements) in [
        (Op::Insert, "insert", 1),
        (Op::ContainsHit, "contains_hit", 1),
        (Op::ContainsMiss, "contains_miss", 1),
        (Op::ManyHit, "contains_many_hit", BATCH as u64),
        (Op::ManyMiss, "contains_many_miss", BATCH as u64),
    ] {
        if scope == Scope::SingleLookups && !matches!(op, Op::ContainsHit | Op::ContainsMiss) {
            continue;
        }
        let mut group = c.benchmark_group(format!("{name}/{}", setup.label()));
        group.throughput(Throughput::Elements(elements));
        each_impl(&mut Bench {
            group: &mut group,
            setup: &setup,
            op,
            eager: eager_insert,
        });
        group.finish();
    }
    if scope == Scope::SingleLookups {
        return;
    }

    let mut group = c.benchmark_group(format!("contains_threads/{}", setup.label()));
    group.throughput(Throughput::Elements(1));
    for threads in [1, 2] {
        group.bench_function(format!("bloom-core-blocked-{threads}t"), |b| {
            let keys = &setup.queries().members;
            let f = &setup.filled().blocked;
            b.iter_custom(|iters| threaded_contains(f, keys, threads, iters));
        });
    }
    group.finish();
}

/// One 64-byte cache line of the floor's arrays (aligned like the filter's lines).
#[repr(C, align(64))]
struct FloorLine([u64; 8]);

/// The floor of a single lookup, in its two parts (see the module doc): `floor/siphash13_u64`
/// (SipHash-1-3 of an 8-byte key, the `siphasher` crate, keyed) and
/// `floor/random_line_read_<n>_<size>_<where>` (one word of a random 64-byte line of an
/// array the size of the Blocked filter for `n` keys), one per iteration; and both as one
/// operation, `floor/siphash13_then_line_<n>_<size>_<where>` (the line the hash picks). Keys and positions
/// are as many as the `contains_hit/u64/<n>` rows walk, in arrays read sequentially and
/// cyclically as those rows read their keys, the positions uniform over the whole array.
fn floor(c: &mut Criterion) {
    use std::hash::Hasher as _;

    let mut group = c.benchmark_group("floor");
    group.throughput(Throughput::Elements(1));
    let keys: Vec<u64> = (0..query_count(SMALL) as u64)
        .map(|i| i.wrapping_mul(0x9E37_79B9_7F4A_7C15))
        .collect();
    group.bench_function("siphash13_u64", |b| {
        let mut i = 0;
        b.iter(|| {
            let mut h = siphasher::sip::SipHasher13::new_with_keys(7, 11);
            h.write_u64(keys[i]);
            i += 1;
            if i == keys.len() {
                i = 0;
            }
            h.finish()
        });
    });
    drop(keys);
    let sizes = [(SMALL, "past_L2"), (IN_L2, "in_L2")]
        .into_iter()
        .flat_map(|(n, place)| {
            // The arrays of the Blocked and the SplitBlock filter (2% larger at 1%).
            [Layout::Blocked, Layout::SplitBlock].map(|layout| (n, place, layout))
        });
    for (n, place, layout) in sizes {
        let bytes = ours(n, layout).size_in_bytes();
        if layout == Layout::SplitBlock && bytes == ours(n, Layout::Blocked).size_in_bytes() {
            continue;
        }
        let lines: Vec<FloorLine> = (0..bytes / 64).map(|_| FloorLine([1; 8])).collect();
        let mut rng = StdRng::seed_from_u64(0xf100 ^ n);
        let positions: Vec<usize> = (0..query_count(n))
            .map(|_| rng.random_range(0..lines.len()))
            .collect();
        let name = format!(
            "random_line_read_{}_{:.2}MB_{place}",
            size_label(n),
            bytes as f64 / 1e6
        );

        group.bench_function(name, |b| {
            let mut i = 0;
            b.iter(|| {
                let p = positions[i];
                i += 1;
                if i == positions.len() {
                    i = 0;
                }
                lines[p].0[p & 7]
            });
        });
        // The two parts as one operation, as a lookup does them: the line read waits for the
        // hash that picks it, so fewer reads overlap than in the read-only loop above. (Each
        // loop is written out: walking the arrays through a shared helper made the 300k line
        // read 0.97 ns instead of 0.74.)
        let keys: Vec<u64> = (0..positions.len() as u64)
            .map(|i| i.wrapping_mul(0x9E37_79B9_7F4A_7C15))
            .collect();
        let name = format!(
            "siphash13_then_line_{}_{:.2}MB_{place}",
            size_label(n),
            bytes as f64 / 1e6
        );
        group.bench_function(name, |b| {
            let mut i = 0;
            b.iter(|| {
                let mut h = siphasher::sip::SipHasher13::new_with_keys(7, 11);
                h.write_u64(keys[i]);
                i += 1;
                if i == keys.len() {
                    i = 0;
                }
                let h = h.finish();
                // The cheapest uniform reduction to a line of an array this size.
                let p = ((u128::from(h) * lines.len() as u128) >> 64) as usize;
                lines[p].0[(h & 7) as usize]
            });
        });
    }
    group.finish();
}

fn benches(c: &mut Criterion) {
    floor(c);
    eprintln!("[memory] bits per item at p = {FPR}:");
    for n in [IN_L2, SMALL, LARGE] {
        eprint!("  n = {}:", size_label(n));
        each_impl::<u64>(&mut Memory(n));
        eprintln!();
    }
    bench_kind::<U64Keys>(c, IN_L2, Scope::SingleLookups);
    for n in sizes() {
        bench_kind::<U64Keys>(c, n, Scope::All);
        bench_kind::<StrKeys>(c, n, Scope::All);
    }
}

criterion_group! {
    name = core;
    config = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(2))
        .sample_size(30);
    targets = benches
}
criterion_main!(core);
