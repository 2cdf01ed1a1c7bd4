//! A Bloom filter that supports delete: a 4-bit counter per slot instead of a bit. Its file
//! (`to_bytes`, `from_bytes`, …) is laid out in `format/words.rs`, from what `WordBody`
//! says here.

use std::fmt;

use crate::accessors::accessors;
use crate::bit_vector::{BitVector, WordFill};
use crate::builder::{Builder, Parts};
use crate::format::{FilterKind, WordBody};
use crate::hasher::KeyHasher;
use crate::layout::for_each_slot;
use crate::params::{self, BLOCK_BITS, MAX_HASHES};
use crate::sync::{AtomicU64, Ordering::Relaxed};
use crate::{BloomFilter, Key, Layout};

/// Counters per 64-bit word.
const PER_WORD: u64 = 16;
/// The largest count; a counter that reaches it stays there.
const SATURATED: u64 = 15;

/// A Bloom filter whose keys can be removed.
///
/// Each slot is a 4-bit counter (16 per `AtomicU64`, updated with compare-and-swap), so it
/// takes **4× the memory** of a [`BloomFilter`] with the same false-positive rate. Keys go in
/// exactly the slots a `BloomFilter` of the same parameters uses, so
/// [`to_bloom`](Self::to_bloom) gives the plain filter view (counter > 0 → bit) for fast
/// lookups.
///
/// A counter that reaches 15 *saturates*: it is never decremented again, because its true
/// count is no longer known. Removing keys may then leave a slot set that no key needs —
/// a key may stay "maybe present" — but never clears a slot another key needs, so removal
/// never causes a false negative. [`remove`](Self::remove) also refuses a key that is
/// definitely absent (one of its counters is 0) and changes nothing, so removing a key that
/// was never inserted cannot take slots from keys that were, whenever that is detectable.
///
/// ```
/// use bloom_core::CountingBloomFilter;
///
/// let users = CountingBloomFilter::new(10_000, 0.01)?;
/// users.insert("alice");
/// assert!(users.contains("alice"));
/// assert!(users.remove("alice"));
/// assert!(!users.contains("alice"));
/// assert!(!users.remove("bob")); // never inserted: refused, nothing changed
/// # Ok::<(), bloom_core::BuildError>(())
/// ```
pub struct CountingBloomFilter {
    words: Box<[AtomicU64]>,
    num_slots: u64,
    num_hashes: u32,
    layout: Layout,
    hasher: KeyHasher,
    capacity: Option<u64>,
    target_fpr: Option<f64>,
}

impl CountingBloomFilter {
    accessors! {
        /// A Blocked counting filter for `expected_items` keys at `false_positive_rate`, with a
        /// random secret hash key.
        ///
        /// ```
        /// use bloom_core::CountingBloomFilter;
        ///
        /// let f = CountingBloomFilter::new(1_000, 0.01)?;
        /// assert_eq!((f.capacity(), f.target_fpr()), (Some(1_000), Some(0.01)));
        /// # Ok::<(), Box<dyn std::error::Error>>(())
        /// ```
        new;
    }

    /// Starts configuring a counting filter: the same settings as
    /// [`BloomFilter::builder`], and [`build`](Builder::build) makes a
    /// `CountingBloomFilter`.
    ///
    /// ```
    /// use bloom_core::CountingBloomFilter;
    ///
    /// let f: CountingBloomFilter = CountingBloomFilter::builder()
    ///     .expected_items(1_000)
    ///     .false_positive_rate(0.01)
    ///     .seed(7)
    ///     .build()?;
    /// f.insert("a");
    /// assert!(f.remove("a"));
    /// # Ok::<(), bloom_core::BuildError>(())
    /// ```
    pub fn builder() -> Builder<CountingBloomFilter> {
        Builder::default()
    }

    /// Assembles a validated filter; `words` defaults to all zero counters.
    pub(crate) fn from_parts(parts: Parts, words: Option<Box<[AtomicU64]>>) -> Self {
        let Parts {
            layout,
            slots: num_slots,
            hashes: num_hashes,
            hasher,
            capacity,
            target_fpr,
        } = parts;
        let num_words = num_slots.div_ceil(PER_WORD) as usize;
        let words = match words {
            Some(w) => w,
            None => crate::bit_vector::zeroed_words(num_words),
        };
        Self {
            words,
            num_slots,
            num_hashes,
            layout,
            hasher,
            capacity,
            target_fpr,
        }
    }

    /// Calls `visit` with each of the key's slots, in probe order, while it returns `true`.
    #[inline(always)]
    fn for_each_slot_of<K: Key + ?Sized>(&self, key: &K, visit: impl FnMut(u64) -> bool) {
        for_each_slot(
            self.layout,
            self.hasher.hash(key),
            self.num_hashes,
            self.num_slots,
            visit,
        );
    }

    /// The key's slots (at most [`MAX_HASHES`]), in probe order.
    fn slots<K: Key + ?Sized>(&self, key: &K) -> ([u64; MAX_HASHES as usize], usize) {
        let mut slots = [0u64; MAX_HASHES as usize];
        let mut len = 0;
        self.for_each_slot_of(key, |slot| {
            slots[len] = slot;
            len += 1;
            true
        });
        (slots, len)
    }

    fn counter(&self, slot: u64) -> u64 {
        let word = self.words[(slot / PER_WORD) as usize].load(Relaxed);
        (word >> ((slot % PER_WORD) * 4)) & 0xF
    }

    /// Applies `step` to one counter atomically (a CAS loop); `step` returns `None` to leave
    /// it as it is. Returns the counter's value before.
    fn update(&self, slot: u64, step: impl Fn(u64) -> Option<u64>) -> u64 {
        let shift = (slot % PER_WORD) * 4;
        let word = &self.words[(slot / PER_WORD) as usize];
        let before = word.fetch_update(Relaxed, Relaxed, |w| {
            let count = (w >> shift) & 0xF;
            step(count).map(|new| (w & !(0xF << shift)) | (new << shift))
        });
        let (Ok(w) | Err(w)) = before;
        (w >> shift) & 0xF
    }

    /// Adds `key` (once more). Returns `true` if it was not (maybe) present before.
    ///
    /// ```
    /// use bloom_core::CountingBloomFilter;
    ///
    /// let f = CountingBloomFilter::new(1_000, 0.01)?;
    /// assert!(f.insert("a"));
    /// assert!(!f.insert("a")); // counted twice, but it was already (maybe) present
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn insert<K: Key + ?Sized>(&self, key: &K) -> bool {
        let (slots, len) = self.slots(key);
        let mut added = false;
        for &slot in &slots[..len] {
            let before = self.update(slot, |c| (c < SATURATED).then_some(c + 1));
            added |= before == 0;
        }
        added
    }

    /// Removes one insertion of `key`. Returns `false`, changing nothing, if `key` is
    /// definitely not in the filter (one of its counters is 0). Saturated counters are left
    /// as they are (see the type's docs).
    ///
    /// Removing a key that was never inserted but happens to look present (a false positive)
    /// cannot be detected, and takes one count from each of its slots: remove only keys you
    /// inserted.
    ///
    /// ```
    /// use bloom_core::CountingBloomFilter;
    ///
    /// let f = CountingBloomFilter::new(1_000, 0.01)?;
    /// f.insert("a");
    /// assert!(f.remove("a"));
    /// assert!(!f.contains("a"));
    /// assert!(!f.remove("a")); // definitely absent now: refused
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn remove<K: Key + ?Sized>(&self, key: &K) -> bool {
        let (slots, len) = self.slots(key);
        let slots = &slots[..len];
        if slots.iter().any(|&s| self.counter(s) == 0) {
            return false;
        }
        for &slot in slots {
            // `c == 0` only if another thread removed a key that was never inserted in the
            // meantime; never wrap below zero.
            self.update(slot, |c| (c > 0 && c < SATURATED).then(|| c - 1));
        }
        true
    }

    /// `false` means `key` is definitely not in the filter.
    ///
    /// ```
    /// use bloom_core::CountingBloomFilter;
    ///
    /// let f = CountingBloomFilter::new(1_000, 0.01)?;
    /// f.insert("a");
    /// assert!(f.contains("a"));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn contains<K: Key + ?Sized>(&self, key: &K) -> bool {
        let mut all = true;
        // Every counter is read, with no early exit: a branch on each loaded counter
        // mispredicts on misses and stops the CPU overlapping the next lookups' loads
        // (bench: the counting filter's `contains_miss/*` in benches/core.rs).
        self.for_each_slot_of(key, |slot| {
            all &= self.counter(slot) > 0;
            true
        });
        all
    }

    /// An upper bound on how many times `key` is in the filter: the smallest of its
    /// counters (15 means "15 or more").
    ///
    /// ```
    /// use bloom_core::CountingBloomFilter;
    ///
    /// let f = CountingBloomFilter::new(1_000, 0.01)?;
    /// f.insert("a");
    /// f.insert("a");
    /// assert!(f.count_estimate("a") >= 2); // an upper bound
    /// assert_eq!(f.count_estimate("never inserted, with all but certainty"), 0);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn count_estimate<K: Key + ?Sized>(&self, key: &K) -> u8 {
        let (slots, len) = self.slots(key);
        slots[..len]
            .iter()
            .map(|&s| self.counter(s) as u8)
            .min()
            .unwrap_or(0)
    }

    /// The plain filter with a bit set wherever a counter is non-zero: answers `contains`
    /// exactly as this filter does, at a quarter of the memory and one cache line per lookup.
    ///
    /// ```
    /// use bloom_core::CountingBloomFilter;
    ///
    /// let f = CountingBloomFilter::new(1_000, 0.01)?;
    /// f.insert("a");
    /// let plain = f.to_bloom();
    /// assert!(plain.contains("a"));
    /// assert_eq!(plain.num_bits(), f.num_slots());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn to_bloom(&self) -> BloomFilter {
        let counter_words: Vec<u64> = self.words.iter().map(|w| w.load(Relaxed)).collect();
        let bits = counter_words.chunks(4).map(|four| {
            four.iter().enumerate().fold(0u64, |bits, (i, &w)| {
                bits | (nonzero_nibbles(w) << (16 * i))
            })
        });
        BloomFilter::from_parts(self.parts(), Some(BitVector::from_words(bits)))
    }

    accessors! {
        /// The number of counters (slots), m.
        ///
        /// ```
        /// use bloom_core::CountingBloomFilter;
        ///
        /// let f = CountingBloomFilter::builder().bits(1_000).hashes(3).build()?;
        /// assert_eq!(f.num_slots(), 1_024); // rounded up to whole 512-slot blocks
        /// # Ok::<(), Box<dyn std::error::Error>>(())
        /// ```
        num_slots: u64;

        /// The number of hash probes per key, k.
        ///
        /// ```
        /// use bloom_core::CountingBloomFilter;
        ///
        /// let f = CountingBloomFilter::builder().bits(1_024).hashes(3).build()?;
        /// assert_eq!(f.num_hashes(), 3);
        /// # Ok::<(), Box<dyn std::error::Error>>(())
        /// ```
        num_hashes: u32;

        /// The layout.
        ///
        /// ```
        /// use bloom_core::{CountingBloomFilter, Layout};
        ///
        /// let f = CountingBloomFilter::new(1_000, 0.01)?;
        /// assert_eq!(f.layout(), Layout::Blocked);
        /// # Ok::<(), Box<dyn std::error::Error>>(())
        /// ```
        layout: Layout;

        /// The number of keys it was sized for, if it was sized by count.
        ///
        /// ```
        /// use bloom_core::CountingBloomFilter;
        ///
        /// assert_eq!(CountingBloomFilter::new(1_000, 0.01)?.capacity(), Some(1_000));
        /// let sized = CountingBloomFilter::builder().bits(1_024).hashes(3).build()?;
        /// assert_eq!(sized.capacity(), None);
        /// # Ok::<(), Box<dyn std::error::Error>>(())
        /// ```
        capacity: Option<u64>;

        /// The false-positive rate it was sized for: `None` when it was built from an explicit
        /// size ([`Builder::bits`]) instead of a rate, since such a filter has no target.
        ///
        /// ```
        /// use bloom_core::CountingBloomFilter;
        ///
        /// assert_eq!(CountingBloomFilter::new(1_000, 0.01)?.target_fpr(), Some(0.01));
        /// let sized = CountingBloomFilter::builder().bits(1_024).hashes(3).build()?;
        /// assert_eq!(sized.target_fpr(), None);
        /// # Ok::<(), Box<dyn std::error::Error>>(())
        /// ```
        target_fpr: Option<f64>;

        /// The secret hash key. Never log it.
        ///
        /// ```
        /// use bloom_core::CountingBloomFilter;
        ///
        /// let f = CountingBloomFilter::builder().bits(1_024).hashes(3).seed(9).build()?;
        /// assert_eq!(f.seed(), 9);
        /// # Ok::<(), Box<dyn std::error::Error>>(())
        /// ```
        seed;

        /// Memory held by the counters, in bytes.
        ///
        /// ```
        /// use bloom_core::CountingBloomFilter;
        ///
        /// let f = CountingBloomFilter::builder().bits(1_024).hashes(3).build()?;
        /// assert_eq!(f.size_in_bytes(), 512); // 1,024 counters of 4 bits
        /// # Ok::<(), Box<dyn std::error::Error>>(())
        /// ```
        size_in_bytes(words);
    }

    /// Counters that are not zero.
    ///
    /// ```
    /// use bloom_core::CountingBloomFilter;
    ///
    /// let f = CountingBloomFilter::builder().bits(1_024).hashes(3).build()?;
    /// f.insert("a");
    /// assert!((1..=3).contains(&f.count_nonzero()));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn count_nonzero(&self) -> u64 {
        self.words
            .iter()
            .map(|w| u64::from(nonzero_nibbles(w.load(Relaxed)).count_ones()))
            .sum()
    }

    /// Counters stuck at 15 (see the type's docs). Many of them mean the filter holds far
    /// more keys, or far more copies of some keys, than it was sized for.
    ///
    /// ```
    /// use bloom_core::CountingBloomFilter;
    ///
    /// let f = CountingBloomFilter::builder().bits(512).hashes(1).build()?;
    /// for _ in 0..20 {
    ///     f.insert("hot");
    /// }
    /// assert_eq!(f.count_saturated(), 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn count_saturated(&self) -> u64 {
        let mut saturated = 0;
        for w in self.words.iter() {
            let w = w.load(Relaxed);
            saturated += (0..PER_WORD)
                .filter(|i| (w >> (i * 4)) & 0xF == SATURATED)
                .count() as u64;
        }
        saturated
    }

    /// The fraction of non-zero counters.
    ///
    /// ```
    /// use bloom_core::CountingBloomFilter;
    ///
    /// let f = CountingBloomFilter::new(1_000, 0.01)?;
    /// assert_eq!(f.fill_ratio(), 0.0);
    /// f.insert("a");
    /// assert!(f.fill_ratio() > 0.0);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn fill_ratio(&self) -> f64 {
        self.count_nonzero() as f64 / self.num_slots as f64
    }

    /// Estimated number of distinct keys present, as [`BloomFilter::estimated_items`].
    ///
    /// ```
    /// use bloom_core::CountingBloomFilter;
    ///
    /// let f = CountingBloomFilter::new(1_000, 0.01)?;
    /// for i in 0..1_000u64 {
    ///     f.insert(&i);
    /// }
    /// assert!((f.estimated_items() - 1_000.0).abs() < 100.0);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn estimated_items(&self) -> f64 {
        params::estimate_items(
            self.layout,
            self.num_slots,
            self.num_hashes,
            self.count_nonzero(),
        )
    }

    /// The false-positive rate the current counters imply, as [`BloomFilter::current_fpr`].
    ///
    /// ```
    /// use bloom_core::CountingBloomFilter;
    ///
    /// let f = CountingBloomFilter::new(1_000, 0.01)?;
    /// for i in 0..1_000u64 {
    ///     f.insert(&i);
    /// }
    /// assert!(f.current_fpr() < 0.02);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn current_fpr(&self) -> f64 {
        self.to_bloom().current_fpr()
    }
}

/// Its file's body: the counters' words, 16 to a word.
impl WordBody for CountingBloomFilter {
    const KIND: FilterKind = FilterKind::Counting;
    const SLOTS_PER_WORD: u64 = PER_WORD;
    type Element = AtomicU64;

    fn parts(&self) -> Parts {
        Parts {
            layout: self.layout,
            slots: self.num_slots,
            hashes: self.num_hashes,
            hasher: self.hasher.clone(),
            capacity: self.capacity,
            target_fpr: self.target_fpr,
        }
    }

    fn body_words(&self) -> impl Iterator<Item = u64> + '_ {
        self.words.iter().map(|w| w.load(Relaxed))
    }

    fn from_body(parts: Parts, words: WordFill<AtomicU64>) -> Self {
        Self::from_parts(parts, Some(words.finish()))
    }
}

/// Bit `i` set where nibble `i` of `w` is non-zero (16 bits out).
fn nonzero_nibbles(w: u64) -> u64 {
    let any = (w | (w >> 1) | (w >> 2) | (w >> 3)) & 0x1111_1111_1111_1111;
    (0..PER_WORD).fold(0, |bits, i| bits | (((any >> (i * 4)) & 1) << i))
}

impl fmt::Debug for CountingBloomFilter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CountingBloomFilter")
            .field("layout", &self.layout)
            .field("num_slots", &self.num_slots)
            .field("num_hashes", &self.num_hashes)
            .field("capacity", &self.capacity)
            .field("target_fpr", &self.target_fpr)
            .finish_non_exhaustive()
    }
}

// Blocked counting filters use 512-slot blocks like the plain filter, so a block spans four
// cache lines here; `to_bloom` brings lookups back to one.
const _: () = assert!(BLOCK_BITS % PER_WORD == 0);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nonzero_nibbles_maps_each_counter_to_its_bit() {
        assert_eq!(nonzero_nibbles(0), 0);
        assert_eq!(nonzero_nibbles(0xF), 1);
        assert_eq!(nonzero_nibbles(0x1 << 60), 1 << 15);
        assert_eq!(nonzero_nibbles(0x8080), 0b1010);
    }

    #[test]
    fn to_bloom_answers_like_the_counting_filter() {
        for layout in [Layout::Blocked, Layout::Classic, Layout::SplitBlock] {
            let c = CountingBloomFilter::builder()
                .expected_items(2_000)
                .false_positive_rate(0.01)
                .layout(layout)
                .seed(5)
                .build()
                .unwrap();
            for i in 0..2_000u64 {
                c.insert(&i);
            }
            for i in 0..500u64 {
                c.remove(&i);
            }
            let b = c.to_bloom();
            for i in 0..20_000u64 {
                assert_eq!(b.contains(&i), c.contains(&i), "{layout:?} key {i}");
            }
            assert_eq!(b.count_ones(), c.count_nonzero());
        }
    }

    #[test]
    fn saturated_counters_stay_put() {
        let c = CountingBloomFilter::builder()
            .bits(512)
            .hashes(1)
            .seed(1)
            .build()
            .unwrap();
        for _ in 0..20 {
            c.insert("hot");
        }
        assert_eq!(c.count_estimate("hot"), 15);
        assert_eq!(c.count_saturated(), 1);
        for _ in 0..20 {
            assert!(c.remove("hot"));
        }
        assert!(
            c.contains("hot"),
            "a saturated counter is never decremented"
        );
    }
}
