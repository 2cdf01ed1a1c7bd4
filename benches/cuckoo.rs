//! [`bloom_core::CuckooFilter`] against the cuckoo-filter peers and our Bloom filters, in the
//! same run: lookup of members (hit) and non-members (miss) at 1M and 50M keys, insert and
//! remove at 1M, and one thread inserting while another looks up in the same filter.
//!
//! Implementations (the function names in each group), every one sized for `n` keys at about
//! p = 1 %; for the peers, the smallest of the settings their crate offers whose false-positive
//! rate at `n` keys, by the crate's own design, is at most 1 % (printed at setup with the rate
//! expected and the rate measured):
//! * `bloom-core-cuckoo`: [`bloom_core::CuckooFilter`] from `(n, 0.01)` (10-bit fingerprints
//!   in buckets of four, `⌈n / 3.8⌉` buckets: 95 % full at `n`), SipHash-1-3 with a random key;
//! * `bloom-core-counting`: [`bloom_core::CountingBloomFilter`] from `(n, 0.01)` (Blocked,
//!   4-bit counters);
//! * `bloom-core-blocked`: [`bloom_core::BloomFilter`] from `(n, 0.01)` (the default layout,
//!   Blocked); it cannot remove, so it has no `remove` row;
//! * `atomic-cuckoo-filter`: `atomic_cuckoo_filter::CuckooFilter` (concurrent, `&self`) with
//!   capacity `n`, buckets of four, 16-bit fingerprints: it offers 4, 8, 16 or 32 bits and a
//!   power-of-two number of buckets (2^18 at 1M: 95 % full; 2^24 at 50M: 75 % full), where 8
//!   bits would give 2.9 % at 1M; its default hasher (`DefaultHasher`: SipHash-1-3, fixed key),
//!   which also hashes a fingerprint for its other bucket;
//! * `cuckoofilter`: `cuckoofilter::CuckooFilter` (`&mut self`) behind a `std::sync::RwLock`
//!   (the write lock to insert and remove, the read lock to look up). Its fingerprints are
//!   fixed at 8 bits (255 values) in buckets of four, so only its capacity, a power of two,
//!   sets the rate: the smallest with a rate at most 1 % at `n` keys, 2^22 slots at 1M (24 %
//!   full, 0.75 %), 2^28 at 50M (19 % full, 0.58 %); its default hasher (`DefaultHasher`,
//!   twice per operation: the key, then the fingerprint for the other bucket);
//! * `qfilter`: `qfilter::Filter` (a rank-select quotient filter, `&mut self`) behind a
//!   `RwLock` likewise, from `Filter::new(n, 2^-r)` with the fewest remainder bits `r` whose
//!   rate at `n` keys is at most 1 %: its slots are the smallest power of two that is 95 % full
//!   at `n` or less, so 2^21 slots (48 % full) and `r` = 6 at 1M, 2^26 slots (75 % full) and
//!   `r` = 7 at 50M (what `Filter::new(n, 0.01)` gives); its default hasher (foldhash, fixed
//!   seed). Inserts use `insert_duplicated`, which stores the key again like the others'
//!   `insert` (its `insert` first checks for the key).
//!
//! Keys are `u64` ids: members `0..n`, non-members from [`bloom_benches::MISS_BASE`] up
//! (`bloom_benches::query_ids`); ours hash the key's 8 bytes, the peers its `Hash` (the same 8
//! bytes). Groups, named for a table:
//!
//! * `cuckoo/contains_hit/{1M,50M}`, `cuckoo/contains_miss/{1M,50M}`: one `contains` per
//!   iteration on the filter holding all `n` members, the keys queried in shuffled order from a
//!   pre-generated array walked cyclically (999,424 keys at 1M, 1,048,576 at 50M), so
//!   successive lookups are independent (a throughput loop, not a latency chain);
//! * `cuckoo/contains_many_hit/{1M,50M}`, `cuckoo/contains_many_miss/{1M,50M}`: ours only,
//!   one batch of [`BATCH`] (1024) keys per iteration (throughput in keys), from the same
//!   shuffled key arrays walked cyclically a batch at a time: `contains`, a loop of
//!   `CuckooFilter::contains` collected into a `Vec<bool>`, against `contains_many`, the batch
//!   lookup (hashes a window ahead and prefetches both buckets), in the same run. The 50M
//!   filter (13.2M buckets, 52.6M slots, 59 MB) is larger than the last-level cache; if the
//!   command line selects no 50M peer lookup, only our cuckoo filter is built and filled for
//!   it (two threads), not the six. At setup, each batch's answers are checked against
//!   `contains`;
//! * `cuckoo/insert/1M`: one iteration is a fill of a fresh filter (built untimed) with the
//!   `n` members, in order; the time per insert is the time per iteration divided by `n`
//!   (criterion also prints it as a throughput). Pages of the fresh filter that its build
//!   leaves untouched (zeroed memory from the allocator) are faulted in by the timed inserts,
//!   as in use: a few hundred 4 KiB pages per fill at 1M;
//! * `cuckoo/remove/1M`: one iteration removes the `n` members, in order, from a filter
//!   holding them (refilled untimed before each); per remove likewise divided by `n`;
//! * `cuckoo/mixed_insert/1M`, `cuckoo/mixed_lookup/1M`: two threads share one filter sized
//!   for `n` that holds the members `0..n/2`: one inserts new ids from `n/2` up, the other looks
//!   up keys that are half members, half non-members, in shuffled order. In `mixed_insert` the
//!   inserts are timed (one per iteration) while the other thread looks up without pause; in
//!   `mixed_lookup` the lookups are timed while the other thread inserts without pause. The
//!   work runs in chunks of 16,384 timed operations (threads released by a barrier, spawns
//!   untimed), and the filter is rebuilt and refilled, untimed, when its load reaches `n`
//!   (`mixed_insert`) or, at the start of a chunk, `3n/4` (`mixed_lookup`, whose background
//!   inserter stops at `n`). After each group the background thread's operations per timed
//!   one are printed, and the chunks in which the background inserter reached `n` early.
//!
//! At setup, a memory table for `n` = 1M: each filter is built and filled alone, and the
//! bytes the global allocator (`stats_alloc`, counting every allocation of this binary) handed
//! out meanwhile, net of what was freed, are its memory; beside them, the crate's own size
//! accounting where it has one (ours `size_in_bytes`, `cuckoofilter` and `qfilter`
//! `memory_usage`; `atomic-cuckoo-filter` has none). The 50M filters' builds are measured the
//! same way (they allocate everything up front), then filled by two threads. After each fill,
//! the inserts that failed, the false negatives among the member queries and the
//! false-positive rate on the non-member queries are printed. The counting allocator adds two
//! atomic additions to every allocation; the only timed operations that allocate are inserts
//! that must move other keys to make room (ours and `atomic-cuckoo-filter` collect the moves
//! in a `Vec`).
//!
//! Setup is done before criterion times anything, and the 50M filters only if the
//! command-line filter may select a 50M lookup. Settings: 0.5 s warm-up, 1 s measurement, 20
//! samples; the fills and drains (`insert`, `remove`) 10 samples over 2 s, each sample the
//! same number of whole fills. The whole run takes about 3 minutes on a loaded 2-vCPU VM, a
//! minute of it the 50M fill.
//!
//! Run (from the workspace root):
//! ```text
//! cargo bench -p bloom-benches --bench cuckoo
//! cargo bench -p bloom-benches --bench cuckoo -- 'cuckoo/contains_(hit|miss)/1M'   # a subset
//! cargo bench -p bloom-benches --bench cuckoo -- contains_many   # contains vs contains_many
//! ```
//! Results: `target/criterion/cuckoo_<group>_<size>/<function>/new/estimates.json`, e.g.
//! `target/criterion/cuckoo_contains_hit_1M/qfilter/new/estimates.json` (nanoseconds per
//! iteration: per key, except per fill or drain of `n` keys in `insert` and `remove`).

use std::alloc::System;
use std::cell::RefCell;
use std::collections::hash_map::DefaultHasher;
use std::hint::black_box;
use std::ops::Range;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Barrier, RwLock};
use std::time::{Duration, Instant};

use bloom_benches::{BATCH, FPR, LARGE, SMALL, filter_may_select, query_ids, size_label};
use bloom_core::{BloomFilter, CountingBloomFilter, CuckooFilter};
use criterion::measurement::WallTime;
use criterion::{
    BenchmarkGroup, Criterion, SamplingMode, Throughput, criterion_group, criterion_main,
};
use rand::SeedableRng;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use stats_alloc::{INSTRUMENTED_SYSTEM, Region, StatsAlloc};

/// Every allocation of this binary goes through the counting wrapper: the memory table reads
/// it around each filter's build and fill.
#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

type AtomicCuckoo = atomic_cuckoo_filter::CuckooFilter<DefaultHasher>;
type AxiomCuckoo = RwLock<cuckoofilter::CuckooFilter<DefaultHasher>>;
type QFilter = RwLock<qfilter::Filter>;

/// Slots per bucket in every cuckoo filter here.
const SLOTS: u64 = 4;

/// The false-positive rate of a cuckoo filter with `fingerprints` distinct non-empty
/// fingerprint values, buckets of four, at `load`: a lookup compares with `8·load`
/// fingerprints, each equal with chance `1/fingerprints`.
fn cuckoo_rate(fingerprints: f64, load: f64) -> f64 {
    1.0 - (1.0 - 1.0 / fingerprints).powf(2.0 * SLOTS as f64 * load)
}

/// One filter, seen through what the benchmarks need; keys are `u64` ids.
trait Filter: Sync + Sized {
    /// Whether it can remove keys ([`remove`](Self::remove) is called only if so).
    const REMOVES: bool;
    /// Empty, sized for `n` keys at about [`FPR`] (see the module docs).
    fn build(n: u64) -> Self;
    /// The settings [`build`](Self::build) picks for `n`, and the false-positive rate they
    /// give at `n` keys by the crate's design.
    fn settings(n: u64) -> (String, f64);
    /// `false` if the key could not be stored (a full cuckoo or quotient filter).
    fn insert(&self, key: &u64) -> bool;
    fn contains(&self, key: &u64) -> bool;
    /// `false` if the key was not found.
    fn remove(&self, key: &u64) -> bool;
    /// The crate's own size accounting, in bytes, if it has one.
    fn own_bytes(&self) -> Option<usize>;
}

impl Filter for CuckooFilter {
    const REMOVES: bool = true;
    fn build(n: u64) -> Self {
        CuckooFilter::builder()
            .expected_items(n)
            .false_positive_rate(FPR)
            .build()
            .expect("valid parameters")
    }
    fn settings(n: u64) -> (String, f64) {
        let f = Self::build(n);
        let load = n as f64 / f.slots() as f64;
        (
            format!(
                "{} buckets, {}-bit fingerprints",
                f.num_buckets(),
                f.fingerprint_bits()
            ),
            cuckoo_rate(((1u64 << f.fingerprint_bits()) - 1) as f64, load),
        )
    }
    #[inline(always)]
    fn insert(&self, key: &u64) -> bool {
        CuckooFilter::insert(self, key).is_ok()
    }
    #[inline(always)]
    fn contains(&self, key: &u64) -> bool {
        CuckooFilter::contains(self, key)
    }
    #[inline(always)]
    fn remove(&self, key: &u64) -> bool {
        CuckooFilter::remove(self, key)
    }
    fn own_bytes(&self) -> Option<usize> {
        Some(self.size_in_bytes())
    }
}

impl Filter for CountingBloomFilter {
    const REMOVES: bool = true;
    fn build(n: u64) -> Self {
        CountingBloomFilter::new(n, FPR).expect("valid parameters")
    }
    fn settings(n: u64) -> (String, f64) {
        let f = Self::build(n);
        (
            format!("{} slots, k = {}", f.num_slots(), f.num_hashes()),
            FPR,
        )
    }
    #[inline(always)]
    fn insert(&self, key: &u64) -> bool {
        CountingBloomFilter::insert(self, key);
        true
    }
    #[inline(always)]
    fn contains(&self, key: &u64) -> bool {
        CountingBloomFilter::contains(self, key)
    }
    #[inline(always)]
    fn remove(&self, key: &u64) -> bool {
        CountingBloomFilter::remove(self, key)
    }
    fn own_bytes(&self) -> Option<usize> {
        Some(self.size_in_bytes())
    }
}

impl Filter for BloomFilter {
    const REMOVES: bool = false;
    fn build(n: u64) -> Self {
        BloomFilter::new(n, FPR).expect("valid parameters")
    }
    fn settings(n: u64) -> (String, f64) {
        let f = Self::build(n);
        (
            format!(
                "{} bits, k = {}, {:?}",
                f.num_bits(),
                f.num_hashes(),
                f.layout()
            ),
            FPR,
        )
    }
    #[inline(always)]
    fn insert(&self, key: &u64) -> bool {
        BloomFilter::insert(self, key);
        true
    }
    #[inline(always)]
    fn contains(&self, key: &u64) -> bool {
        BloomFilter::contains(self, key)
    }
    fn remove(&self, _: &u64) -> bool {
        unreachable!("a Bloom filter cannot remove")
    }
    fn own_bytes(&self) -> Option<usize> {
        Some(self.size_in_bytes())
    }
}

/// `atomic-cuckoo-filter`'s settings for `n`: capacity `n` (its buckets: the power of two at
/// or above `n / 4`), and the smallest fingerprint width it offers whose rate at `n` is at
/// most [`FPR`]. Returns `(bits, buckets, rate)`.
fn atomic_cuckoo_settings(n: u64) -> (usize, u64, f64) {
    let buckets = n.div_ceil(SLOTS).next_power_of_two();
    let load = n as f64 / (buckets * SLOTS) as f64;
    [4, 8, 16, 32]
        .into_iter()
        .map(|bits| (bits, cuckoo_rate(((1u64 << bits) - 1) as f64, load)))
        .find(|&(_, rate)| rate <= FPR)
        .map(|(bits, rate)| (bits, buckets, rate))
        .expect("32-bit fingerprints reach any rate benchmarked")
}

impl Filter for AtomicCuckoo {
    const REMOVES: bool = true;
    fn build(n: u64) -> Self {
        let (bits, _, _) = atomic_cuckoo_settings(n);
        atomic_cuckoo_filter::CuckooFilter::builder()
            .capacity(n as usize)
            .fingerprint_size(bits)
            .bucket_size(SLOTS as usize)
            .build()
            .expect("valid parameters")
    }
    fn settings(n: u64) -> (String, f64) {
        let (bits, buckets, rate) = atomic_cuckoo_settings(n);
        (
            format!("capacity {n}: {buckets} buckets, {bits}-bit fingerprints"),
            rate,
        )
    }
    #[inline(always)]
    fn insert(&self, key: &u64) -> bool {
        atomic_cuckoo_filter::CuckooFilter::insert(self, key).is_ok()
    }
    #[inline(always)]
    fn contains(&self, key: &u64) -> bool {
        atomic_cuckoo_filter::CuckooFilter::contains(self, key)
    }
    #[inline(always)]
    fn remove(&self, key: &u64) -> bool {
        atomic_cuckoo_filter::CuckooFilter::remove(self, key)
    }
    fn own_bytes(&self) -> Option<usize> {
        None
    }
}

/// `cuckoofilter`'s settings for `n`: 8-bit fingerprints (255 values) are fixed, so the
/// smallest power-of-two number of slots whose rate at `n` is at most [`FPR`]. Returns
/// `(slots, rate)`.
fn axiom_cuckoo_settings(n: u64) -> (u64, f64) {
    let mut slots = n.next_power_of_two();
    while cuckoo_rate(255.0, n as f64 / slots as f64) > FPR {
        slots *= 2;
    }
    (slots, cuckoo_rate(255.0, n as f64 / slots as f64))
}

impl Filter for AxiomCuckoo {
    const REMOVES: bool = true;
    fn build(n: u64) -> Self {
        let (slots, _) = axiom_cuckoo_settings(n);
        RwLock::new(cuckoofilter::CuckooFilter::with_capacity(slots as usize))
    }
    fn settings(n: u64) -> (String, f64) {
        let (slots, rate) = axiom_cuckoo_settings(n);
        (
            format!(
                "with_capacity({slots}): {} buckets, 8-bit fingerprints",
                slots / SLOTS
            ),
            rate,
        )
    }
    #[inline(always)]
    fn insert(&self, key: &u64) -> bool {
        self.write().expect("no writer panicked").add(key).is_ok()
    }
    #[inline(always)]
    fn contains(&self, key: &u64) -> bool {
        self.read().expect("no writer panicked").contains(key)
    }
    #[inline(always)]
    fn remove(&self, key: &u64) -> bool {
        self.write().expect("no writer panicked").delete(key)
    }
    fn own_bytes(&self) -> Option<usize> {
        Some(self.read().expect("no writer panicked").memory_usage())
    }
}

/// `qfilter`'s settings for `n`: the fewest remainder bits `r` whose rate at `n` keys (in the
/// slots `Filter::new` picks for `n`) is at most [`FPR`]. Returns `(r, slots, rate)`.
fn qfilter_settings(n: u64) -> (u32, u64, f64) {
    (1..=32)
        .map(|r| {
            let specs = qfilter::filter_specs(n, 0.5f64.powi(r as i32)).expect("valid parameters");
            let slots = 1u64 << (u32::from(specs.fingerprint_bits) - r);
            // `Filter::current_error_ratio`'s model, at `n` keys.
            let rate = 1.0 - (-(n as f64 / slots as f64) / 2f64.powi(r as i32)).exp();
            (r, slots, rate)
        })
        .find(|&(_, _, rate)| rate <= FPR)
        .expect("enough remainder bits reach any rate benchmarked")
}

impl Filter for QFilter {
    const REMOVES: bool = true;
    fn build(n: u64) -> Self {
        let (r, _, _) = qfilter_settings(n);
        RwLock::new(qfilter::Filter::new(n, 0.5f64.powi(r as i32)).expect("valid parameters"))
    }
    fn settings(n: u64) -> (String, f64) {
        let (r, slots, rate) = qfilter_settings(n);
        (
            format!("Filter::new({n}, 2^-{r}): {slots} slots, {r}-bit remainders"),
            rate,
        )
    }
    #[inline(always)]
    fn insert(&self, key: &u64) -> bool {
        self.write()
            .expect("no writer panicked")
            .insert_duplicated(key)
            .is_ok()
    }
    #[inline(always)]
    fn contains(&self, key: &u64) -> bool {
        self.read().expect("no writer panicked").contains(key)
    }
    #[inline(always)]
    fn remove(&self, key: &u64) -> bool {
        self.write().expect("no writer panicked").remove(key)
    }
    fn own_bytes(&self) -> Option<usize> {
        Some(self.read().expect("no writer panicked").memory_usage())
    }
}

/// The six filters, each holding the members `0..n`.
struct Filled {
    cuckoo: CuckooFilter,
    counting: CountingBloomFilter,
    bloom: BloomFilter,
    atomic: AtomicCuckoo,
    axiom: AxiomCuckoo,
    qfilter: QFilter,
}

/// Something done to every implementation, generic over the filter type so that nothing in
/// the timed loops goes through a vtable.
trait Visit {
    /// `pick` finds this implementation's filled filter.
    fn visit<F: Filter>(&mut self, name: &'static str, pick: fn(&Filled) -> &F);
}

/// Calls `v` on each implementation, under its benchmark name.
fn each_impl(v: &mut impl Visit) {
    v.visit("bloom-core-cuckoo", |f| &f.cuckoo);
    v.visit("bloom-core-counting", |f| &f.counting);
    v.visit("bloom-core-blocked", |f| &f.bloom);
    v.visit("atomic-cuckoo-filter", |f| &f.atomic);
    v.visit("cuckoofilter", |f| &f.axiom);
    v.visit("qfilter", |f| &f.qfilter);
}

/// Inserts `ids` into `f`; returns how many inserts failed.
fn fill<F: Filter>(f: &F, ids: Range<u64>) -> u64 {
    ids.map(|id| u64::from(!f.insert(&id))).sum()
}

/// Bytes the global allocator handed out since `region` began, net of those freed.
fn net_bytes(region: &Region<'_, System>) -> i64 {
    let s = region.change();
    s.bytes_allocated as i64 - s.bytes_deallocated as i64
}

/// Builds `F` for `n` keys and, if `fill_too`, inserts the members `0..n`, alone on this
/// thread; prints its settings, memory (allocator and own accounting) and failed inserts.
fn measured<F: Filter>(name: &str, n: u64, fill_too: bool) -> F {
    let (settings, rate) = F::settings(n);
    let t = Instant::now();
    let region = Region::new(GLOBAL);
    let f = F::build(n);
    let failed = if fill_too { fill(&f, 0..n) } else { 0 };
    let bytes = net_bytes(&region);
    let own = f.own_bytes().map_or_else(
        || "–".to_string(),
        |b| format!("{:.2}", b as f64 / n as f64),
    );
    eprintln!(
        "  {name:<21} {:>12} B {:>7.2} B/key (own accounting: {own:>6} B/key); {settings}, \
         rate at n {:.3} %{}; {:.2?}",
        bytes,
        bytes as f64 / n as f64,
        rate * 100.0,
        if fill_too {
            format!(", failed inserts {failed}")
        } else {
            String::new()
        },
        t.elapsed()
    );
    f
}

impl Filled {
    /// All six at `n` = [`SMALL`], each built and filled alone (the memory table).
    fn small() -> Self {
        let n = SMALL;
        eprintln!(
            "[memory] n = {}: bytes the allocator handed out (net) while building and filling \
             each filter alone",
            size_label(n)
        );
        Self {
            cuckoo: measured("bloom-core-cuckoo", n, true),
            counting: measured("bloom-core-counting", n, true),
            bloom: measured("bloom-core-blocked", n, true),
            atomic: measured("atomic-cuckoo-filter", n, true),
            axiom: measured("cuckoofilter", n, true),
            qfilter: measured("qfilter", n, true),
        }
    }

    /// All six at `n` = [`LARGE`]: each built alone (its memory printed: every filter here
    /// allocates its whole table up front), then filled by two threads.
    fn large() -> Self {
        let n = LARGE;
        eprintln!(
            "[memory] n = {}: bytes the allocator handed out (net) while building each filter",
            size_label(n)
        );
        let f = Self {
            cuckoo: measured("bloom-core-cuckoo", n, false),
            counting: measured("bloom-core-counting", n, false),
            bloom: measured("bloom-core-blocked", n, false),
            atomic: measured("atomic-cuckoo-filter", n, false),
            axiom: measured("cuckoofilter", n, false),
            qfilter: measured("qfilter", n, false),
        };
        let t = Instant::now();
        let failed = std::thread::scope(|s| {
            let other = s.spawn(|| {
                [
                    fill(&f.cuckoo, 0..n),
                    fill(&f.axiom, 0..n),
                    fill(&f.bloom, 0..n),
                ]
            });
            let here = [
                fill(&f.atomic, 0..n),
                fill(&f.qfilter, 0..n),
                fill(&f.counting, 0..n),
            ];
            let other = other.join().expect("fill thread panicked");
            [other[0], here[2], other[2], here[0], other[1], here[1]]
        });
        eprintln!(
            "[setup {}] filled the six filters in {:.2?} (two threads); failed inserts: {failed:?}",
            size_label(n),
            t.elapsed()
        );
        f
    }
}

/// The query keys for `n` members: `(members, non_members)`, shuffled.
fn queries(n: u64) -> (Vec<u64>, Vec<u64>) {
    query_ids(n, 0xc0c0 ^ n)
}

/// Prints, for each filter, the false negatives among `members` and the false-positive rate
/// on `non_members`.
struct Check<'a> {
    filled: &'a Filled,
    members: &'a [u64],
    non_members: &'a [u64],
}

impl Visit for Check<'_> {
    fn visit<F: Filter>(&mut self, name: &'static str, pick: fn(&Filled) -> &F) {
        let f = pick(self.filled);
        let missed = self.members.iter().filter(|k| !f.contains(k)).count();
        let false_pos = self.non_members.iter().filter(|k| f.contains(k)).count();
        eprint!(
            " {name} {missed} / {:.3} %;",
            false_pos as f64 * 100.0 / self.non_members.len() as f64
        );
    }
}

fn check(label: &str, filled: &Filled, members: &[u64], non_members: &[u64]) {
    eprint!("[setup {label}] false negatives / false-positive rate:");
    each_impl(&mut Check {
        filled,
        members,
        non_members,
    });
    eprintln!();
}

/// Registers one `contains` per iteration of `keys` for every implementation.
struct Lookup<'a, 'g> {
    group: &'a mut BenchmarkGroup<'g, WallTime>,
    filled: &'a Filled,
    keys: &'a [u64],
}

impl Visit for Lookup<'_, '_> {
    fn visit<F: Filter>(&mut self, name: &'static str, pick: fn(&Filled) -> &F) {
        let (f, keys) = (pick(self.filled), self.keys);
        // The position persists across criterion's calls of the closure, so warm-up and
        // samples keep walking the keys instead of restarting on the same (cached) first ones.
        let mut i = 0;
        self.group.bench_function(name, |b| {
            b.iter(|| {
                let found = f.contains(&keys[i]);
                i += 1;
                if i == keys.len() {
                    i = 0;
                }
                found
            });
        });
    }
}

fn lookups(c: &mut Criterion, n: u64, filled: &Filled, members: &[u64], non_members: &[u64]) {
    for (op, keys) in [("contains_hit", members), ("contains_miss", non_members)] {
        let mut group = c.benchmark_group(format!("cuckoo/{op}/{}", size_label(n)));
        group.throughput(Throughput::Elements(1));
        each_impl(&mut Lookup {
            group: &mut group,
            filled,
            keys,
        });
        group.finish();
    }
}

/// Our cuckoo filter alone, for `n` keys and filled with the members `0..n` by two threads
/// (for the batch lookups at 50M when the six filters are not built).
fn cuckoo_alone(n: u64) -> CuckooFilter {
    let t = Instant::now();
    let f = <CuckooFilter as Filter>::build(n);
    let failed = std::thread::scope(|s| {
        let other = s.spawn(|| fill(&f, n / 2..n));
        fill(&f, 0..n / 2) + other.join().expect("fill thread panicked")
    });
    eprintln!(
        "[setup {}] bloom-core-cuckoo alone: {} buckets, {} slots, {} bytes, filled in {:.2?} \
         (two threads); failed inserts: {failed}",
        size_label(n),
        f.num_buckets(),
        f.slots(),
        f.size_in_bytes(),
        t.elapsed()
    );
    f
}

/// `contains` per key against `contains_many`, a batch of [`BATCH`] keys per iteration.
fn batch_lookups(
    c: &mut Criterion,
    n: u64,
    f: &CuckooFilter,
    members: &[u64],
    non_members: &[u64],
) {
    for (op, keys) in [
        ("contains_many_hit", members),
        ("contains_many_miss", non_members),
    ] {
        assert_eq!(keys.len() % BATCH, 0, "whole batches");
        let differ = keys
            .chunks(BATCH)
            .filter(|batch| {
                f.contains_many(*batch) != batch.iter().map(|k| f.contains(k)).collect::<Vec<_>>()
            })
            .count();
        assert_eq!(differ, 0, "{op}: batches answered unlike contains");
        let mut group = c.benchmark_group(format!("cuckoo/{op}/{}", size_label(n)));
        group.throughput(Throughput::Elements(BATCH as u64));
        // Each position persists across criterion's calls, as in `Lookup`.
        let mut i = 0;
        group.bench_function("contains", |b| {
            b.iter(|| {
                let batch = &keys[i..i + BATCH];
                i = (i + BATCH) % keys.len();
                batch.iter().map(|k| f.contains(k)).collect::<Vec<bool>>()
            });
        });
        let mut i = 0;
        group.bench_function("contains_many", |b| {
            b.iter(|| {
                let batch = &keys[i..i + BATCH];
                i = (i + BATCH) % keys.len();
                f.contains_many(batch)
            });
        });
        group.finish();
    }
}

/// Registers the fill (`insert`) or the drain (`remove`) of `n` keys for every
/// implementation (the drain only for those that remove).
struct FillDrain<'a, 'g> {
    group: &'a mut BenchmarkGroup<'g, WallTime>,
    n: u64,
    remove: bool,
    /// Per implementation: failed inserts, or members a remove did not find (must be 0).
    failures: &'a RefCell<Vec<(&'static str, u64)>>,
}

impl Visit for FillDrain<'_, '_> {
    fn visit<F: Filter>(&mut self, name: &'static str, _: fn(&Filled) -> &F) {
        let (n, failures) = (self.n, self.failures);
        let mut failed = 0;
        if !self.remove {
            self.group.bench_function(name, |b| {
                b.iter_custom(|iters| {
                    let mut timed = Duration::ZERO;
                    for _ in 0..iters {
                        let f = F::build(n);
                        let start = Instant::now();
                        failed += fill(&f, 0..n);
                        timed += start.elapsed();
                        black_box(&f);
                    }
                    timed
                });
            });
        } else if F::REMOVES {
            let mut kept: Option<F> = None;
            self.group.bench_function(name, |b| {
                let f = kept.get_or_insert_with(|| F::build(n));
                b.iter_custom(|iters| {
                    let mut timed = Duration::ZERO;
                    for _ in 0..iters {
                        failed += fill(f, 0..n);
                        let start = Instant::now();
                        for id in 0..n {
                            failed += u64::from(!f.remove(&id));
                        }
                        timed += start.elapsed();
                    }
                    timed
                });
            });
        } else {
            return;
        }
        failures.borrow_mut().push((name, failed));
    }
}

fn fills_and_drains(c: &mut Criterion, n: u64) {
    for (op, remove) in [("insert", false), ("remove", true)] {
        let failures = RefCell::new(Vec::new());
        let mut group = c.benchmark_group(format!("cuckoo/{op}/{}", size_label(n)));
        group
            .throughput(Throughput::Elements(n))
            .sampling_mode(SamplingMode::Flat)
            .sample_size(10)
            .measurement_time(Duration::from_secs(2));
        each_impl(&mut FillDrain {
            group: &mut group,
            n,
            remove,
            failures: &failures,
        });
        group.finish();
        eprintln!(
            "[{op} {}] failures over every pass (failed inserts{}): {:?}",
            size_label(n),
            if remove { ", members not found" } else { "" },
            failures.into_inner()
        );
    }
}

/// Timed operations per chunk: a chunk's threads are spawned untimed and released together.
const MIXED_CHUNK: u64 = 16_384;

/// Which side of a mixed run is timed.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Timed {
    /// Inserts timed; the other thread looks up without pause.
    Inserts,
    /// Lookups timed; the other thread inserts without pause (until the filter's load
    /// reaches `n`).
    Lookups,
}

/// The keys the looking-up thread of a mixed run walks: members `0..n/2` (the prefill) and
/// as many non-members, shuffled together.
fn mixed_lookup_keys(n: u64) -> Vec<u64> {
    let (members, non_members) = queries(n / 2);
    let mut keys: Vec<u64> = members.into_iter().chain(non_members).collect();
    keys.shuffle(&mut StdRng::seed_from_u64(0x3d));
    keys
}

/// What a mixed benchmark of one implementation counts over its whole run.
#[derive(Default, Debug)]
struct MixedTally {
    timed_ops: u64,
    background_ops: u64,
    /// Chunks in which the background inserter reached load `n` and stopped early.
    dry_chunks: u64,
    chunks: u64,
    failed_inserts: u64,
}

/// Registers a mixed benchmark (see [`Timed`]) for every implementation.
struct Mixed<'a, 'g> {
    group: &'a mut BenchmarkGroup<'g, WallTime>,
    n: u64,
    timed: Timed,
    keys: &'a [u64],
    tallies: &'a RefCell<Vec<(&'static str, MixedTally)>>,
}

impl Visit for Mixed<'_, '_> {
    fn visit<F: Filter>(&mut self, name: &'static str, _: fn(&Filled) -> &F) {
        let (n, timed, keys) = (self.n, self.timed, self.keys);
        let mut tally = MixedTally::default();
        // The shared filter and the next id to insert, kept across criterion's calls.
        let mut state: Option<(F, u64)> = None;
        let mut at = 0;
        self.group.bench_function(name, |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                let mut left = iters;
                while left > 0 {
                    let limit = match timed {
                        Timed::Inserts => n,
                        Timed::Lookups => n * 3 / 4,
                    };
                    if state.as_ref().is_none_or(|(_, next)| *next >= limit) {
                        let f = F::build(n);
                        tally.failed_inserts += fill(&f, 0..n / 2);
                        state = Some((f, n / 2));
                    }
                    let (f, next) = state.as_mut().expect("built above");
                    let chunk = match timed {
                        Timed::Inserts => left.min(MIXED_CHUNK).min(n - *next),
                        Timed::Lookups => left.min(MIXED_CHUNK),
                    };
                    let run = mixed_chunk(f, timed, chunk, *next..n, keys, at);
                    total += run.elapsed;
                    *next += run.inserted;
                    at = (at + run.looked_up as usize) % keys.len();
                    tally.timed_ops += chunk;
                    tally.background_ops += match timed {
                        Timed::Inserts => run.looked_up,
                        Timed::Lookups => run.inserted,
                    };
                    tally.dry_chunks += u64::from(timed == Timed::Lookups && *next == n);
                    tally.failed_inserts += run.failed;
                    tally.chunks += 1;
                    left -= chunk;
                }
                total
            });
        });
        self.tallies.borrow_mut().push((name, tally));
    }
}

/// What one chunk of a mixed run did.
struct ChunkRun {
    /// The timed thread's time, from the barrier that releases both threads to its last
    /// operation.
    elapsed: Duration,
    inserted: u64,
    looked_up: u64,
    failed: u64,
}

/// One chunk: `chunk` timed operations on this thread while a spawned thread does the other
/// kind without pause until they are done. Inserts take ids from `ids` in order (the
/// background inserter stops at its end); lookups walk `keys` cyclically from `at`.
fn mixed_chunk<F: Filter>(
    f: &F,
    timed: Timed,
    chunk: u64,
    ids: Range<u64>,
    keys: &[u64],
    at: usize,
) -> ChunkRun {
    let barrier = &Barrier::new(2);
    let stop = &AtomicBool::new(false);
    let look = move |count: Option<u64>| {
        let (mut i, mut done, mut found) = (at, 0u64, 0u64);
        loop {
            match count {
                Some(c) if done == c => break,
                None if stop.load(Ordering::Relaxed) => break,
                _ => {}
            }
            found += u64::from(f.contains(&keys[i]));
            i += 1;
            if i == keys.len() {
                i = 0;
            }
            done += 1;
        }
        black_box(found);
        done
    };
    let (first, last) = (ids.start, ids.end);
    let insert = move |count: Option<u64>| {
        let (mut id, mut failed) = (first, 0u64);
        let end = count.map_or(last, |c| first + c);
        while id < end && !(count.is_none() && stop.load(Ordering::Relaxed)) {
            failed += u64::from(!f.insert(&id));
            id += 1;
        }
        (id - first, failed)
    };
    std::thread::scope(|s| {
        let background = s.spawn(move || {
            barrier.wait();
            match timed {
                Timed::Inserts => (look(None), (0, 0)),
                Timed::Lookups => (0, insert(None)),
            }
        });
        barrier.wait();
        let start = Instant::now();
        let here = match timed {
            Timed::Inserts => (0, insert(Some(chunk))),
            Timed::Lookups => (look(Some(chunk)), (0, 0)),
        };
        let elapsed = start.elapsed();
        stop.store(true, Ordering::Relaxed);
        let there = background.join().expect("background thread panicked");
        ChunkRun {
            elapsed,
            looked_up: here.0 + there.0,
            inserted: here.1.0 + there.1.0,
            failed: here.1.1 + there.1.1,
        }
    })
}

fn mixed(c: &mut Criterion, n: u64) {
    let keys = mixed_lookup_keys(n);
    for (op, timed, other) in [
        ("mixed_insert", Timed::Inserts, "lookups"),
        ("mixed_lookup", Timed::Lookups, "inserts"),
    ] {
        let tallies = RefCell::new(Vec::new());
        let mut group = c.benchmark_group(format!("cuckoo/{op}/{}", size_label(n)));
        group.throughput(Throughput::Elements(1));
        each_impl(&mut Mixed {
            group: &mut group,
            n,
            timed,
            keys: &keys,
            tallies: &tallies,
        });
        group.finish();
        eprint!("[{op} {}] background {other} per timed one:", size_label(n));
        for (name, t) in tallies.into_inner() {
            eprint!(
                " {name} {:.2} ({} of {} chunks ran out of room, {} failed inserts);",
                t.background_ops as f64 / t.timed_ops.max(1) as f64,
                t.dry_chunks,
                t.chunks,
                t.failed_inserts
            );
        }
        eprintln!();
    }
}

fn benches(c: &mut Criterion) {
    let small = Filled::small();
    let (members, non_members) = queries(SMALL);
    check(&size_label(SMALL), &small, &members, &non_members);
    lookups(c, SMALL, &small, &members, &non_members);
    batch_lookups(c, SMALL, &small.cuckoo, &members, &non_members);
    // The 50M setups: the six filters for the peers' lookups, our cuckoo filter for the batch
    // lookups (the six filters' one if they are built).
    let others = ["contains_many", "insert", "remove", "mixed"];
    let large = filter_may_select("50M", &["1M"]);
    let peers = large
        && (filter_may_select("contains_hit", &others)
            || filter_may_select("contains_miss", &others));
    let batch = large
        && filter_may_select(
            "contains_many",
            &["contains_hit", "contains_miss", "insert", "remove", "mixed"],
        );
    if peers || batch {
        let (members, non_members) = queries(LARGE);
        let filled = peers.then(Filled::large);
        if let Some(filled) = &filled {
            check(&size_label(LARGE), filled, &members, &non_members);
            lookups(c, LARGE, filled, &members, &non_members);
        }
        if batch {
            let alone;
            let cuckoo = match &filled {
                Some(filled) => &filled.cuckoo,
                None => {
                    alone = cuckoo_alone(LARGE);
                    &alone
                }
            };
            batch_lookups(c, LARGE, cuckoo, &members, &non_members);
        }
    }
    fills_and_drains(c, SMALL);
    mixed(c, SMALL);
}

criterion_group! {
    name = cuckoo;
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(1))
        .sample_size(20);
    targets = benches
}
criterion_main!(cuckoo);
