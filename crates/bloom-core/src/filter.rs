//! The filter itself: insert, lookup, batch forms, statistics and set operations. Its file
//! (`to_bytes`, `from_bytes`, …) is laid out in `format/words.rs`, from what `WordBody`
//! says here.

use std::fmt;

use crate::accessors::accessors;
use crate::bit_vector::{BitVector, Line, WordFill};
use crate::builder::{Builder, Parts};
use crate::format::{FilterKind, WordBody};
use crate::hasher::{KeyHash, KeyHasher};
use crate::layout::{for_each_classic, for_each_in_line, reduce};
use crate::params::{self, BLOCK_BITS};
use crate::probe::Probe;
use crate::{BuildError, Key, Layout};

/// Bits per 64-bit word of the array.
const BITS_PER_WORD: u64 = 64;

/// Keys hashed ahead in the batch forms: enough misses in flight to cover DRAM latency,
/// few enough that the prefetched lines are still in L1 when tested. A power of two.
const WINDOW: usize = 16;

/// A lock-free Bloom filter shared by reference between threads.
///
/// `insert` and `contains` take `&self`: the bits are `AtomicU64` words that are only ever
/// OR-ed into, so any number of threads may insert and look up at once with no lock. A key
/// that was inserted is always found afterwards; a key that was never inserted is found with
/// the configured false-positive probability.
///
/// ```
/// use bloom_core::BloomFilter;
///
/// let filter = BloomFilter::new(1_000_000, 0.01)?;
/// assert!(filter.insert("user:42"));   // true: it was not there before
/// assert!(filter.contains("user:42"));
/// assert!(!filter.insert("user:42"));  // false: already (maybe) present
/// # Ok::<(), bloom_core::BuildError>(())
/// ```
pub struct BloomFilter {
    bits: BitVector,
    num_bits: u64,
    /// `num_bits / 512` for Blocked and SplitBlock; unused for Classic.
    num_blocks: u64,
    num_hashes: u32,
    layout: Layout,
    /// How a Blocked or SplitBlock lookup tests its line (SIMD when the CPU has it), chosen
    /// at creation.
    probe: Probe,
    hasher: KeyHasher,
    capacity: Option<u64>,
    target_fpr: Option<f64>,
    /// [`merge_count`](Self::merge_count): bumped by every `union` / `union_words` that set
    /// a bit. A statistic, outside the bit array's memory model (std's atomic under loom too).
    merges: std::sync::atomic::AtomicU64,
}

impl BloomFilter {
    accessors! {
        /// A Blocked filter for `expected_items` keys at `false_positive_rate`, with a random
        /// secret hash key.
        ///
        /// ```
        /// use bloom_core::BloomFilter;
        ///
        /// let f = BloomFilter::new(1_000_000, 0.01)?;
        /// assert_eq!((f.capacity(), f.target_fpr()), (Some(1_000_000), Some(0.01)));
        /// assert!(BloomFilter::new(0, 0.01).is_err());
        /// # Ok::<(), Box<dyn std::error::Error>>(())
        /// ```
        new;
    }

    /// Starts configuring a filter.
    ///
    /// ```
    /// use bloom_core::{BloomFilter, Layout};
    ///
    /// let f = BloomFilter::builder()
    ///     .expected_items(1_000)
    ///     .false_positive_rate(0.01)
    ///     .layout(Layout::Classic)
    ///     .build()?;
    /// assert_eq!(f.layout(), Layout::Classic);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn builder() -> Builder<BloomFilter> {
        Builder::default()
    }

    /// Assembles a validated filter; `words` defaults to all clear.
    pub(crate) fn from_parts(parts: Parts, words: Option<BitVector>) -> Self {
        let Parts {
            layout,
            slots: num_bits,
            hashes: num_hashes,
            hasher,
            capacity,
            target_fpr,
        } = parts;
        let num_words = num_bits.div_ceil(BITS_PER_WORD) as usize;
        let bits = words.unwrap_or_else(|| BitVector::zeroed(num_words));
        debug_assert_eq!(bits.len(), num_words);
        Self {
            bits,
            num_bits,
            num_blocks: num_bits / BLOCK_BITS,
            num_hashes,
            layout,
            probe: Probe::for_filter_of(num_words * 8),
            hasher,
            capacity,
            target_fpr,
            merges: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// Makes this filter's lookups use `probe`, whatever its size (the tests compare the
    /// paths on the same filter).
    #[cfg(test)]
    pub(crate) fn set_probe(&mut self, probe: Probe) {
        self.probe = probe;
    }

    /// Adds `key`. Returns `true` if it was not (maybe) present before, i.e. at least one of
    /// its bits was clear.
    ///
    /// ```
    /// use bloom_core::BloomFilter;
    ///
    /// let f = BloomFilter::new(1_000, 0.01)?;
    /// assert!(f.insert("a"));
    /// assert!(!f.insert("a"));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[inline]
    pub fn insert<K: Key + ?Sized>(&self, key: &K) -> bool {
        self.insert_hash(self.hasher.hash(key))
    }

    /// `false` means `key` was definitely never inserted; `true` means it probably was.
    ///
    /// ```
    /// use bloom_core::BloomFilter;
    ///
    /// let f = BloomFilter::new(1_000, 0.01)?;
    /// f.insert(&42u64);
    /// assert!(f.contains(&42u64));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[inline]
    pub fn contains<K: Key + ?Sized>(&self, key: &K) -> bool {
        // The probe hashes the key itself, so that the hash can be compiled into its SIMD
        // function, or computed in vector registers for a filter far out of cache.
        match self.layout {
            Layout::Blocked => self.probe.contains_key(
                &self.hasher,
                key,
                #[inline(always)]
                |h| self.block_of(h),
                self.num_hashes,
            ),
            Layout::SplitBlock => self.probe.contains_split_key(
                &self.hasher,
                key,
                #[inline(always)]
                |h| self.block_of(h),
            ),
            // Out of line: Classic's up to k cache misses dwarf a call, and inlined here its
            // loop would make every lookup save and restore registers.
            Layout::Classic => self.contains_classic(key),
        }
    }

    #[inline(never)]
    fn contains_classic<K: Key + ?Sized>(&self, key: &K) -> bool {
        self.contains_hash(self.hasher.hash(key))
    }

    /// Line `index` of the bit array (`index < num_blocks`, Blocked and SplitBlock): a ring
    /// of filters of one shape finds a key's index once for all of them.
    #[inline(always)]
    pub(crate) fn line(&self, index: usize) -> &Line {
        self.bits.block(index)
    }

    /// A Blocked or SplitBlock key's block.
    #[inline(always)]
    fn block_of(&self, h: KeyHash) -> &Line {
        self.bits.block(reduce(h.h1, self.num_blocks) as usize)
    }

    /// Inserts every key. Keys are hashed a window ahead of their insertion and their cache
    /// lines prefetched, so on a filter larger than the CPU cache the memory accesses overlap.
    ///
    /// ```
    /// use bloom_core::BloomFilter;
    ///
    /// let f = BloomFilter::new(1_000, 0.01)?;
    /// f.insert_many(["a", "b", "c"]);
    /// assert!(f.contains("b"));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn insert_many<I>(&self, keys: I)
    where
        I: IntoIterator,
        I::Item: Key,
    {
        self.insert_many_with(keys, |_| {});
    }

    /// [`insert_many`](Self::insert_many), telling `was_new` for each key in order what
    /// [`insert`](Self::insert) would have returned (`true`: it was not present before).
    /// Keys are inserted in order, so a key repeated within the batch is new only the first
    /// time: a de-duplicating pass is `insert_many_with(lines, |new| keep.push(new))`.
    ///
    /// ```
    /// use bloom_core::BloomFilter;
    ///
    /// let f = BloomFilter::new(1_000, 0.01)?;
    /// let lines = ["a", "b", "a"];
    /// let mut new = Vec::new();
    /// f.insert_many_with(lines, |was_new| new.push(was_new));
    /// assert_eq!(new, [true, true, false]);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn insert_many_with<I>(&self, keys: I, mut was_new: impl FnMut(bool))
    where
        I: IntoIterator,
        I::Item: Key,
    {
        pipelined(
            &self.hasher,
            keys,
            |h| self.prefetch(h),
            |h| {
                was_new(self.insert_hash(h));
            },
        );
    }

    /// Looks every key up; the answers are in the keys' order. Prefetches like
    /// [`insert_many`](Self::insert_many), which makes it several times faster than a loop of
    /// [`contains`](Self::contains) on a filter larger than the CPU cache.
    ///
    /// ```
    /// use bloom_core::BloomFilter;
    ///
    /// let f = BloomFilter::new(1_000, 0.01)?;
    /// f.insert_many(0..100u64);
    /// assert_eq!(f.contains_many([1u64, 2, 99]), [true, true, true]);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn contains_many<I>(&self, keys: I) -> Vec<bool>
    where
        I: IntoIterator,
        I::Item: Key,
    {
        pipelined_map(
            &self.hasher,
            keys,
            |h| self.prefetch(h),
            |h| self.contains_hash(h),
        )
    }

    #[inline(always)]
    pub(crate) fn prefetch(&self, h: KeyHash) {
        match self.layout {
            Layout::Blocked | Layout::SplitBlock => self
                .bits
                .prefetch(reduce(h.h1, self.num_blocks) as usize * 8),
            Layout::Classic => for_each_classic(h, self.num_hashes, self.num_bits, |bit| {
                self.bits.prefetch((bit >> 6) as usize);
                true
            }),
        }
    }

    #[inline(always)]
    pub(crate) fn insert_hash(&self, h: KeyHash) -> bool {
        let mut added = false;
        match self.layout {
            Layout::Blocked | Layout::SplitBlock => {
                // One branch for the whole key (already present: nothing to write), then
                // unconditional ORs: no per-bit "already set?" branch, which mispredicts
                // while the filter fills (bench: `insert/*` in benches/core.rs).
                if self.contains_hash(h) {
                    return false;
                }
                let first_word = reduce(h.h1, self.num_blocks) as usize * 8;
                for_each_in_line(self.layout, h, self.num_hashes, |bit| {
                    self.bits
                        .or_word(first_word + (bit >> 6), 1u64 << (bit & 63));
                });
                added = true;
            }
            Layout::Classic => for_each_classic(h, self.num_hashes, self.num_bits, |bit| {
                added |= self.bits.set((bit >> 6) as usize, 1u64 << (bit & 63));
                true
            }),
        }
        added
    }

    #[inline(always)]
    pub(crate) fn contains_hash(&self, h: KeyHash) -> bool {
        match self.layout {
            Layout::Blocked => {
                let block = self.block_of(h);
                self.probe.contains(block, h, self.num_hashes)
            }
            Layout::SplitBlock => {
                let block = self.block_of(h);
                self.probe.contains_split(block, h.split_word())
            }
            Layout::Classic => {
                // Each probe may be a cache miss of its own: stop at the first clear bit.
                let mut all = true;
                for_each_classic(h, self.num_hashes, self.num_bits, |bit| {
                    all = self.bits.test(bit);
                    all
                });
                all
            }
        }
    }

    accessors! {
        /// The number of bits, m.
        ///
        /// ```
        /// use bloom_core::BloomFilter;
        ///
        /// let f = BloomFilter::builder().bits(1_000).hashes(3).build()?;
        /// assert_eq!(f.num_bits(), 1_024); // Blocked: whole 512-bit blocks
        /// # Ok::<(), Box<dyn std::error::Error>>(())
        /// ```
        num_bits: u64;

        /// The number of hash probes per key, k.
        ///
        /// ```
        /// use bloom_core::BloomFilter;
        ///
        /// let f = BloomFilter::builder().bits(1_024).hashes(3).build()?;
        /// assert_eq!(f.num_hashes(), 3);
        /// # Ok::<(), Box<dyn std::error::Error>>(())
        /// ```
        num_hashes: u32;

        /// The layout.
        ///
        /// ```
        /// use bloom_core::{BloomFilter, Layout};
        ///
        /// assert_eq!(BloomFilter::new(1_000, 0.01)?.layout(), Layout::Blocked);
        /// # Ok::<(), Box<dyn std::error::Error>>(())
        /// ```
        layout: Layout;

        /// The number of keys the filter was sized for, when it was sized by item count.
        ///
        /// ```
        /// use bloom_core::BloomFilter;
        ///
        /// assert_eq!(BloomFilter::new(1_000, 0.01)?.capacity(), Some(1_000));
        /// let sized = BloomFilter::builder().bits(1_024).hashes(3).build()?;
        /// assert_eq!(sized.capacity(), None);
        /// # Ok::<(), Box<dyn std::error::Error>>(())
        /// ```
        capacity: Option<u64>;

        /// The false-positive rate the filter was sized for: `None` when it was built from an
        /// explicit size ([`Builder::bits`] and [`Builder::hashes`]) instead of a rate, since such a
        /// filter has no target.
        ///
        /// ```
        /// use bloom_core::BloomFilter;
        ///
        /// assert_eq!(BloomFilter::new(1_000, 0.01)?.target_fpr(), Some(0.01));
        /// let sized = BloomFilter::builder().bits(1_024).hashes(3).build()?;
        /// assert_eq!(sized.target_fpr(), None);
        /// # Ok::<(), Box<dyn std::error::Error>>(())
        /// ```
        target_fpr: Option<f64>;

        /// The secret 128-bit hash key. Two filters can be merged only if their keys are equal.
        /// Anyone who has it can craft keys the filter wrongly lets through: do not log it.
        ///
        /// ```
        /// use bloom_core::BloomFilter;
        ///
        /// let f = BloomFilter::builder().bits(1_024).hashes(3).seed(9).build()?;
        /// assert_eq!(f.seed(), 9);
        /// # Ok::<(), Box<dyn std::error::Error>>(())
        /// ```
        seed;

        /// Memory held by the bit array, in bytes.
        ///
        /// ```
        /// use bloom_core::BloomFilter;
        ///
        /// let f = BloomFilter::builder().bits(1_024).hashes(3).build()?;
        /// assert_eq!(f.size_in_bytes(), 128);
        /// # Ok::<(), Box<dyn std::error::Error>>(())
        /// ```
        size_in_bytes(bits);
    }

    /// The number of set bits (an O(m) scan).
    ///
    /// ```
    /// use bloom_core::BloomFilter;
    ///
    /// let f = BloomFilter::builder().bits(1_024).hashes(3).build()?;
    /// assert_eq!(f.count_ones(), 0);
    /// f.insert("a");
    /// assert!((1..=3).contains(&f.count_ones()));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn count_ones(&self) -> u64 {
        self.bits.iter().map(|w| u64::from(w.count_ones())).sum()
    }

    /// The fraction of bits set, in `[0, 1]`.
    ///
    /// ```
    /// use bloom_core::BloomFilter;
    ///
    /// let f = BloomFilter::builder().bits(1_024).hashes(3).build()?;
    /// f.insert("a");
    /// assert_eq!(f.fill_ratio(), f.count_ones() as f64 / 1_024.0);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn fill_ratio(&self) -> f64 {
        self.count_ones() as f64 / self.num_bits as f64
    }

    /// Estimated number of distinct keys inserted (Swamidass–Baldi, from the set bits;
    /// within a few percent up to the sized capacity). Infinite when every bit is set.
    ///
    /// ```
    /// use bloom_core::BloomFilter;
    ///
    /// let f = BloomFilter::new(1_000, 0.01)?;
    /// f.insert_many(0..1_000u64);
    /// assert!((f.estimated_items() - 1_000.0).abs() < 100.0);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn estimated_items(&self) -> f64 {
        params::estimate_items(
            self.layout,
            self.num_bits,
            self.num_hashes,
            self.count_ones(),
        )
    }

    /// The false-positive rate the current bits imply: the probability that a key never
    /// inserted finds all its bits set. Alarm when this exceeds the target: the filter is
    /// saturated and should be rebuilt larger.
    ///
    /// Exact for the bits as they are: Classic `(ones/m)^k`; Blocked, the mean over blocks of
    /// `(ones in block / 512)^k`, since a key probes one block chosen uniformly; SplitBlock,
    /// the mean over blocks of `∏ (ones in word i / 64)` over the block's eight words.
    ///
    /// ```
    /// use bloom_core::BloomFilter;
    ///
    /// let f = BloomFilter::new(1_000, 0.01)?;
    /// assert_eq!(f.current_fpr(), 0.0);
    /// f.insert_many(0..1_000u64);
    /// assert!(f.current_fpr() < 0.02);
    /// f.insert_many(1_000..100_000u64); // far past its capacity
    /// assert!(f.current_fpr() > 0.5);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn current_fpr(&self) -> f64 {
        let k = self.num_hashes as i32;
        match self.layout {
            Layout::Classic => self.fill_ratio().powi(k),
            Layout::Blocked => {
                let mut words = self.bits.iter();
                let mut sum = 0.0;
                for _ in 0..self.num_blocks {
                    let ones: u32 = words.by_ref().take(8).map(|w| w.count_ones()).sum();
                    sum += (f64::from(ones) / BLOCK_BITS as f64).powi(k);
                }
                sum / self.num_blocks as f64
            }
            Layout::SplitBlock => {
                let mut words = self.bits.iter();
                let mut sum = 0.0;
                for _ in 0..self.num_blocks {
                    sum += words
                        .by_ref()
                        .take(8)
                        .map(|w| f64::from(w.count_ones()) / 64.0)
                        .product::<f64>();
                }
                sum / self.num_blocks as f64
            }
        }
    }

    /// Checks that `other` has the same size, `k`, layout and hash key, so that the two
    /// can be combined bit by bit.
    ///
    /// ```
    /// use bloom_core::BloomFilter;
    ///
    /// let a = BloomFilter::builder().bits(1_024).hashes(3).seed(1).build()?;
    /// let b = BloomFilter::builder().bits(1_024).hashes(3).seed(1).build()?;
    /// let c = BloomFilter::builder().bits(1_024).hashes(3).seed(2).build()?;
    /// assert!(a.check_compatible(&b).is_ok());
    /// assert_eq!(a.check_compatible(&c), Err(bloom_core::IncompatibleError::HashKey));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn check_compatible(&self, other: &BloomFilter) -> Result<(), IncompatibleError> {
        let mismatch = if self.num_bits != other.num_bits {
            IncompatibleError::Bits {
                ours: self.num_bits,
                theirs: other.num_bits,
            }
        } else if self.num_hashes != other.num_hashes {
            IncompatibleError::Hashes {
                ours: self.num_hashes,
                theirs: other.num_hashes,
            }
        } else if self.layout != other.layout {
            IncompatibleError::Layout {
                ours: self.layout,
                theirs: other.layout,
            }
        } else if self.hasher.seed() != other.hasher.seed() {
            IncompatibleError::HashKey
        } else {
            return Ok(());
        };
        Err(mismatch)
    }

    /// Adds every key of `other` (bitwise OR). Afterwards `self` answers "maybe" for every
    /// key inserted into either.
    ///
    /// ```
    /// use bloom_core::BloomFilter;
    ///
    /// let a = BloomFilter::builder().bits(1_024).hashes(3).seed(1).build()?;
    /// let b = BloomFilter::builder().bits(1_024).hashes(3).seed(1).build()?;
    /// a.insert("x");
    /// b.insert("y");
    /// a.union(&b)?;
    /// assert!(a.contains("x") && a.contains("y"));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn union(&self, other: &BloomFilter) -> Result<(), IncompatibleError> {
        self.check_compatible(other)?;
        let changed = self.or_words(0, other.bits.iter());
        self.count_merge(changed);
        Ok(())
    }

    /// ORs `words` into the bit array from word `first_word` on, without the padding of the
    /// last word (its bits at and above m, which no key sets and a file must hold as 0:
    /// `union_words_ignores_the_padding_above_m`); `true` if any bit was clear before.
    fn or_words(&self, first_word: usize, words: impl Iterator<Item = u64>) -> bool {
        let last = self.bits.len() - 1;
        let used = self.num_bits % BITS_PER_WORD;
        let last_mask = if used == 0 { !0 } else { (1u64 << used) - 1 };
        let mut changed = false;
        for (i, w) in words.enumerate() {
            let at = first_word + i;
            let w = if at == last { w & last_mask } else { w };
            if w != 0 {
                changed |= self.bits.set(at, w);
            }
        }
        changed
    }

    /// Keeps only bits set in both (bitwise AND): answers "maybe" for keys in both filters
    /// (and, as with any Bloom filter, some that are not).
    ///
    /// ```
    /// use bloom_core::BloomFilter;
    ///
    /// let a = BloomFilter::builder().bits(1_024).hashes(3).seed(1).build()?;
    /// let b = BloomFilter::builder().bits(1_024).hashes(3).seed(1).build()?;
    /// a.insert("both");
    /// b.insert("both");
    /// a.intersect(&b)?;
    /// assert!(a.contains("both"));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn intersect(&self, other: &BloomFilter) -> Result<(), IncompatibleError> {
        self.check_compatible(other)?;
        for (i, w) in other.bits.iter().enumerate() {
            self.bits.and_word(i, w);
        }
        Ok(())
    }

    /// An empty filter of the same shape (bits, hashes, layout, capacity, rate) under a new
    /// random hash key, without sizing it again (sizing a Blocked filter searches its model):
    /// for making many filters of one size.
    ///
    /// ```
    /// use bloom_core::BloomFilter;
    ///
    /// let template = BloomFilter::new(1_000, 0.01)?;
    /// let f = template.fresh()?;
    /// assert_eq!((f.num_bits(), f.num_hashes()), (template.num_bits(), template.num_hashes()));
    /// assert_ne!(f.seed(), template.seed());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn fresh(&self) -> Result<Self, BuildError> {
        let mut parts = self.parts();
        parts.hasher = KeyHasher::random().map_err(BuildError::Random)?;
        Ok(Self::from_parts(parts, None))
    }

    /// Clears every bit. Inserts racing with `clear` may be lost: clear only a filter
    /// nobody is inserting into.
    ///
    /// ```
    /// use bloom_core::BloomFilter;
    ///
    /// let f = BloomFilter::new(1_000, 0.01)?;
    /// f.insert("a");
    /// f.clear();
    /// assert_eq!(f.count_ones(), 0);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn clear(&self) {
        self.bits.clear();
    }

    /// The bit array's words, least significant bit first: bit `i` of the filter is bit
    /// `i % 64` of word `i / 64`. A snapshot under concurrent inserts: each word is read
    /// atomically, the whole is not (every bit set before the call is in it).
    ///
    /// With [`union_words`](Self::union_words) this lets filters be synchronised in pieces
    /// (say, over a network) instead of whole, as [`union`](Self::union) does.
    ///
    /// ```
    /// use bloom_core::BloomFilter;
    ///
    /// let f = BloomFilter::builder().bits(1_024).hashes(3).build()?;
    /// let words: Vec<u64> = f.words().collect();
    /// assert_eq!(words.len(), f.num_words());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn words(&self) -> impl ExactSizeIterator<Item = u64> + '_ {
        self.bits.iter()
    }

    /// The words `range` of the bit array (clamped to [`num_words`](Self::num_words)), as
    /// [`words`](Self::words) gives them: a piece to send without reading the words before it.
    ///
    /// ```
    /// use bloom_core::BloomFilter;
    ///
    /// let f = BloomFilter::builder().bits(1_024).hashes(3).build()?;
    /// f.insert("a");
    /// let piece: Vec<u64> = f.words_in(8..16).collect();
    /// assert_eq!(piece, f.words().skip(8).take(8).collect::<Vec<_>>());
    /// assert_eq!(f.words_in(10..99).len(), 6); // 16 words in all
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn words_in(
        &self,
        range: std::ops::Range<usize>,
    ) -> impl ExactSizeIterator<Item = u64> + '_ {
        self.bits.iter_range(range)
    }

    /// The number of 64-bit words in the bit array: `num_bits / 64` rounded up.
    ///
    /// ```
    /// use bloom_core::BloomFilter;
    ///
    /// let f = BloomFilter::builder().bits(1_000).hashes(3).layout(bloom_core::Layout::Classic).build()?;
    /// assert_eq!(f.num_words(), 16); // 1,000 bits in 64-bit words
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn num_words(&self) -> usize {
        self.bits.len()
    }

    /// ORs `words` into the bit array starting at word `first_word` (bitwise OR, like
    /// [`union`](Self::union) on a range): the bits must come from a filter of the same
    /// size, `k`, layout and hash key, which only the caller can check (see
    /// [`check_compatible`](Self::check_compatible)). Returns `true` if any bit was clear
    /// before. Lock-free, and safe to run alongside inserts and lookups.
    ///
    /// Bits at and above [`num_bits`](Self::num_bits) in the last word (the padding of a
    /// Classic filter whose m is not a multiple of 64) carry no key and are ignored: they
    /// are never set, so the filter's file still loads (docs/FORMAT.md: "slots at and above
    /// m in the last word are 0").
    ///
    /// # Panics
    ///
    /// If `first_word + words.len()` exceeds [`num_words`](Self::num_words).
    ///
    /// ```
    /// use bloom_core::BloomFilter;
    ///
    /// let a = BloomFilter::builder().bits(1_024).hashes(3).seed(1).build()?;
    /// let b = BloomFilter::builder().bits(1_024).hashes(3).seed(1).build()?;
    /// a.insert("x");
    /// let words: Vec<u64> = a.words().collect();
    /// assert!(b.union_words(0, &words[..8]) | b.union_words(8, &words[8..]));
    /// assert!(b.contains("x"));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn union_words(&self, first_word: usize, words: &[u64]) -> bool {
        let end = first_word.checked_add(words.len());
        assert!(
            end.is_some_and(|end| end <= self.bits.len()),
            "union_words: words {first_word}..{first_word}+{} exceed the filter's {} words",
            words.len(),
            self.bits.len()
        );
        let changed = self.or_words(first_word, words.iter().copied());
        self.count_merge(changed);
        changed
    }

    /// How many [`union`](Self::union) and [`union_words`](Self::union_words) calls set at
    /// least one bit. Inserts do not change it: a key count kept alongside
    /// [`insert`](Self::insert)'s return value misses the keys that arrive as bits exactly
    /// when this moved, and [`estimated_items`](Self::estimated_items) then counts them.
    ///
    /// ```
    /// use bloom_core::BloomFilter;
    ///
    /// let a = BloomFilter::builder().bits(1_024).hashes(3).seed(1).build()?;
    /// let b = BloomFilter::builder().bits(1_024).hashes(3).seed(1).build()?;
    /// a.insert("x");
    /// assert_eq!(a.merge_count(), 0);
    /// b.union(&a)?;
    /// b.union(&a)?; // nothing new: not counted
    /// assert_eq!(b.merge_count(), 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn merge_count(&self) -> u64 {
        self.merges.load(std::sync::atomic::Ordering::Relaxed)
    }

    fn count_merge(&self, changed: bool) {
        if changed {
            self.merges
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// Calls `visit` with the index (in `0..num_bits`) of every bit `key` sets, in probe
    /// order (an index may repeat). They are the bits [`insert`](Self::insert) sets, so
    /// setting them elsewhere (e.g. in a copy of the filter on another machine) inserts the
    /// key there.
    ///
    /// ```
    /// use bloom_core::BloomFilter;
    ///
    /// let f = BloomFilter::builder().bits(1_024).hashes(3).build()?;
    /// let mut bits = Vec::new();
    /// f.for_each_bit("a", |bit| bits.push(bit));
    /// assert_eq!(bits.len(), 3);
    /// f.insert("a");
    /// assert!(bits.iter().all(|&bit| f.words().nth((bit / 64) as usize).unwrap() >> (bit % 64) & 1 == 1));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn for_each_bit<K: Key + ?Sized>(&self, key: &K, mut visit: impl FnMut(u64)) {
        let h = self.hasher.hash(key);
        match self.layout {
            Layout::Blocked | Layout::SplitBlock => {
                let first_bit = reduce(h.h1, self.num_blocks) * BLOCK_BITS;
                for_each_in_line(self.layout, h, self.num_hashes, |bit| {
                    visit(first_bit + bit as u64)
                });
            }
            Layout::Classic => for_each_classic(h, self.num_hashes, self.num_bits, |bit| {
                visit(bit);
                true
            }),
        }
    }
}

/// Hashes each key and calls `prefetch` with its hash `WINDOW` keys before handing the hash
/// to `then`, in the keys' order: a sliding window keeps `WINDOW` memory accesses in flight
/// all the time, where hashing a batch and then draining it would let them run dry at every
/// batch boundary. The batch forms of [`BloomFilter`], [`WindowedFilter`](crate::WindowedFilter)
/// and [`CuckooFilter`](crate::CuckooFilter) run through it.
#[inline]
pub(crate) fn pipelined<I>(
    hasher: &KeyHasher,
    keys: I,
    prefetch: impl Fn(KeyHash),
    mut then: impl FnMut(KeyHash),
) where
    I: IntoIterator,
    I::Item: Key,
{
    let mut ring = [KeyHash { h1: 0 }; WINDOW];
    let mut hashed = 0usize;
    for key in keys {
        let h = hasher.hash(&key);
        prefetch(h);
        let slot = hashed % WINDOW;
        if hashed >= WINDOW {
            then(ring[slot]);
        }
        ring[slot] = h;
        hashed += 1;
    }
    for i in hashed.saturating_sub(WINDOW)..hashed {
        then(ring[i % WINDOW]);
    }
}

/// [`pipelined`], collecting `answer`'s value for each key: the values are in the keys' order.
pub(crate) fn pipelined_map<I, T>(
    hasher: &KeyHasher,
    keys: I,
    prefetch: impl Fn(KeyHash),
    mut answer: impl FnMut(KeyHash) -> T,
) -> Vec<T>
where
    I: IntoIterator,
    I::Item: Key,
{
    let keys = keys.into_iter();
    let mut answers = Vec::with_capacity(keys.size_hint().0);
    pipelined(hasher, keys, prefetch, |h| answers.push(answer(h)));
    answers
}

/// Its file's body: the bit array's words, 64 bits to a word.
impl WordBody for BloomFilter {
    const KIND: FilterKind = FilterKind::Plain;
    const SLOTS_PER_WORD: u64 = BITS_PER_WORD;
    type Element = Line;

    fn parts(&self) -> Parts {
        Parts {
            layout: self.layout,
            slots: self.num_bits,
            hashes: self.num_hashes,
            hasher: self.hasher.clone(),
            capacity: self.capacity,
            target_fpr: self.target_fpr,
        }
    }

    fn body_words(&self) -> impl Iterator<Item = u64> + '_ {
        self.bits.iter()
    }

    fn from_body(parts: Parts, words: WordFill<Line>) -> Self {
        Self::from_parts(parts, Some(BitVector::from_fill(words)))
    }
}

impl Clone for BloomFilter {
    /// A snapshot of the bits (each word read atomically).
    fn clone(&self) -> Self {
        Self::from_parts(self.parts(), Some(BitVector::from_words(self.bits.iter())))
    }
}

impl fmt::Debug for BloomFilter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The hash key is secret and the bits are large: neither is printed.
        f.debug_struct("BloomFilter")
            .field("layout", &self.layout)
            .field("num_bits", &self.num_bits)
            .field("num_hashes", &self.num_hashes)
            .field("capacity", &self.capacity)
            .field("target_fpr", &self.target_fpr)
            .finish_non_exhaustive()
    }
}

/// Why two filters cannot be combined bit by bit: the first parameter that differs.
///
/// ```
/// use bloom_core::{BloomFilter, IncompatibleError};
///
/// let a = BloomFilter::builder().bits(1_024).hashes(3).seed(1).build()?;
/// let b = BloomFilter::builder().bits(1_024).hashes(4).seed(1).build()?;
/// assert_eq!(
///     a.union(&b),
///     Err(IncompatibleError::Hashes { ours: 3, theirs: 4 })
/// );
/// # Ok::<(), bloom_core::BuildError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum IncompatibleError {
    /// Different number of bits.
    #[error("filters are incompatible: number of bits differs ({ours} vs {theirs})")]
    Bits {
        /// This filter's m.
        ours: u64,
        /// The other filter's m.
        theirs: u64,
    },
    /// Different number of hashes.
    #[error("filters are incompatible: number of hashes differs ({ours} vs {theirs})")]
    Hashes {
        /// This filter's k.
        ours: u32,
        /// The other filter's k.
        theirs: u32,
    },
    /// Different layouts.
    #[error("filters are incompatible: layout differs ({ours} vs {theirs})")]
    Layout {
        /// This filter's layout.
        ours: Layout,
        /// The other filter's layout.
        theirs: Layout,
    },
    /// Different hash keys (seeds); the keys themselves are secret and not shown.
    #[error("filters are incompatible: hash keys (seeds) differ")]
    HashKey,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 4096 bits, k = 5 (SplitBlock: its fixed 8).
    fn filter(layout: Layout) -> BloomFilter {
        let k = if layout == Layout::SplitBlock { 8 } else { 5 };
        BloomFilter::builder()
            .bits(4096)
            .hashes(k)
            .layout(layout)
            .seed(9)
            .build()
            .unwrap()
    }

    #[test]
    fn the_bits_a_key_sets_insert_it_elsewhere() {
        for layout in [Layout::Blocked, Layout::Classic, Layout::SplitBlock] {
            let (a, b) = (filter(layout), filter(layout));
            a.insert("user:1");
            let mut seen = 0;
            a.for_each_bit("user:1", |bit| {
                seen += 1;
                assert!(a.bits.test(bit));
                b.union_words((bit / 64) as usize, &[1 << (bit % 64)]);
            });
            assert_eq!(seen, a.num_hashes(), "{layout:?}");
            assert!(b.contains("user:1"));
            assert_eq!(a.words().collect::<Vec<_>>(), b.words().collect::<Vec<_>>());
        }
    }

    #[test]
    fn union_words_merges_a_range() {
        let (a, b) = (filter(Layout::Blocked), filter(Layout::Blocked));
        for key in 0..200u64 {
            a.insert(&key);
        }
        let words: Vec<u64> = a.words().collect();
        assert_eq!(words.len(), a.num_words());
        assert!(b.union_words(0, &words[..10]));
        assert!(b.union_words(10, &words[10..]));
        assert!(
            !b.union_words(3, &words[3..7]),
            "nothing new the second time"
        );
        assert!((0..200u64).all(|key| b.contains(&key)));
    }

    /// Random keys of every length from 0 to 40 bytes (every tail length, up to five blocks),
    /// so that each hashing path sees every shape of message.
    fn random_key(rng: &mut impl rand::Rng) -> Vec<u8> {
        let len = rng.random_range(0..=40);
        (0..len).map(|_| rng.random()).collect()
    }

    /// Every SIMD path this CPU has, on a copy of `scalar` (which uses the portable one):
    /// each finds every member, singly and in a batch, and answers as the portable path does
    /// for each of `others`; `answers` counts the (yes, no) answers compared.
    fn assert_simd_paths_agree(
        scalar: &BloomFilter,
        members: &[Vec<u8>],
        others: &[Vec<u8>],
        answers: &mut (u32, u32),
    ) {
        assert_eq!(scalar.probe, Probe::SCALAR);
        assert!(members.iter().all(|key| scalar.contains(key)));
        for probe in Probe::simd_paths() {
            let mut simd = scalar.clone();
            simd.set_probe(probe);
            assert!(members.iter().all(|key| simd.contains(key)), "{probe:?}");
            assert!(simd.contains_many(members).iter().all(|&b| b), "{probe:?}");
            for key in others {
                let want = scalar.contains(key);
                assert_eq!(
                    simd.contains(key),
                    want,
                    "{probe:?} bits {}",
                    scalar.num_bits()
                );
                if want { answers.0 += 1 } else { answers.1 += 1 }
            }
        }
    }

    /// Both answers were compared often on every SIMD path, where the CPU has them.
    fn assert_both_answers_compared((yes, no): (u32, u32)) {
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx2") {
            assert!(
                yes > 20_000 && no > 20_000,
                "both answers exercised on both SIMD paths: {yes} / {no}"
            );
        }
    }

    /// Every SIMD probe this CPU has (the one for filters in cache, the one that hashes in
    /// vector registers for filters far out of it) and the portable one give the same answer
    /// on random filters (sizes, `k` from 1 to 20 so that the refilled probes past the
    /// seventh are covered, fills from a quarter to four times capacity) for members and
    /// non-members.
    #[test]
    fn simd_and_scalar_probes_agree_on_random_filters() {
        use rand::{Rng, SeedableRng};

        let mut rng = rand::rngs::StdRng::seed_from_u64(0xf11);
        let mut answers = (0, 0);
        for _ in 0..60 {
            let k = rng.random_range(1..=20);
            let bits = rng.random_range(1..=64) * 512;
            let mut scalar = BloomFilter::builder()
                .bits(bits)
                .hashes(k)
                .seed(rng.random())
                .build()
                .unwrap();
            scalar.set_probe(Probe::SCALAR);
            let items = rng.random_range(bits / 40..=bits / 2);
            let members: Vec<Vec<u8>> = (0..items).map(|_| random_key(&mut rng)).collect();
            for key in &members {
                scalar.insert(key);
            }
            let others: Vec<Vec<u8>> = (0..2_000).map(|_| random_key(&mut rng)).collect();
            assert_simd_paths_agree(&scalar, &members, &others, &mut answers);
        }
        assert_both_answers_compared(answers);
    }

    /// The same for SplitBlock (`contains_split`): random sizes, fills from a tenth of
    /// capacity to three times it, every inserted key found by every probe, and the same
    /// answers for random keys.
    #[test]
    fn simd_and_scalar_split_block_probes_agree_on_random_filters() {
        use rand::{Rng, SeedableRng};

        let mut rng = rand::rngs::StdRng::seed_from_u64(0x5b11);
        let mut answers = (0, 0);
        for _ in 0..60 {
            let bits = rng.random_range(1..=64) * 512;
            let mut scalar = BloomFilter::builder()
                .bits(bits)
                .layout(Layout::SplitBlock)
                .seed(rng.random())
                .build()
                .unwrap();
            scalar.set_probe(Probe::SCALAR);
            // About 10 bits per key meets 1%: fill from a tenth of that to three times it.
            let capacity = bits / 10;
            let members: Vec<Vec<u8>> = (0..rng.random_range(capacity / 10..=capacity * 3))
                .map(|_| random_key(&mut rng))
                .collect();
            scalar.insert_many(&members);
            let others: Vec<Vec<u8>> = (0..2_000).map(|_| random_key(&mut rng)).collect();
            assert_simd_paths_agree(&scalar, &members, &others, &mut answers);
        }
        assert_both_answers_compared(answers);
    }

    /// A filter of [`FAR_FILTER_BYTES`](crate::probe::FAR_FILTER_BYTES) or more hashes in
    /// vector registers where the CPU can (one just under it does not), and finds its keys.
    #[test]
    fn a_filter_far_out_of_cache_hashes_in_lanes_and_finds_its_keys() {
        use crate::probe::FAR_FILTER_BYTES;

        let far_bits = FAR_FILTER_BYTES as u64 * 8;
        for layout in [Layout::Blocked, Layout::SplitBlock] {
            let mut near = BloomFilter::builder().bits(far_bits - 512).layout(layout);
            if layout == Layout::Blocked {
                near = near.hashes(7);
            }
            let near = near.build().unwrap();
            let mut far = BloomFilter::builder().bits(far_bits).layout(layout);
            if layout == Layout::Blocked {
                far = far.hashes(7);
            }
            let far = far.build().unwrap();
            assert!(!near.probe.hashes_in_lanes());
            #[cfg(target_arch = "x86_64")]
            assert_eq!(
                far.probe.hashes_in_lanes(),
                std::arch::is_x86_feature_detected!("avx2"),
                "{layout:?}"
            );
            let keys: Vec<String> = (0..100_000).map(|i| format!("user:{i}")).collect();
            far.insert_many(&keys);
            assert!(keys.iter().all(|k| far.contains(k)), "{layout:?}");
        }
    }

    /// Padding bits (at and above m in the last word) given to `union_words` are not set:
    /// the filter's file loads afterwards, and only the bits below m count as new.
    #[test]
    fn union_words_ignores_the_padding_above_m() {
        let f = BloomFilter::builder()
            .bits(200) // 4 words; bits 200..256 are padding
            .hashes(3)
            .layout(Layout::Classic)
            .seed(9)
            .build()
            .unwrap();
        assert!(!f.union_words(3, &[!0 << 8]), "only padding: nothing new");
        assert_eq!(f.count_ones(), 0);
        assert!(f.union_words(2, &[1, !0]));
        assert_eq!(f.count_ones(), 1 + 8);
        assert_eq!(f.words().last(), Some(0xFF));
        let copy = BloomFilter::from_bytes(&f.to_bytes()).expect("no bit above m");
        let other = filter(Layout::Classic);
        assert!(other.union_words(other.num_words() - 1, &[!0]));
        assert_eq!(
            other.count_ones(),
            64,
            "4096 bits: the last word has no padding"
        );
        assert!(copy.union(&f).is_ok());
        assert_eq!(copy.count_ones(), 9);
    }

    #[test]
    #[should_panic(expected = "exceed")]
    fn union_words_past_the_end_panics() {
        let f = filter(Layout::Classic);
        f.union_words(f.num_words() - 1, &[1, 1]);
    }
}
