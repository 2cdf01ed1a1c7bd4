//! [`CuckooFilter`]: where a key goes (two buckets, one fingerprint), and the operations.

use std::fmt;

use crate::Key;
use crate::accessors::accessors;
use crate::filter::pipelined_map;
use crate::hasher::{KeyHash, KeyHasher};
use crate::sync::{AtomicU64, Ordering::Relaxed};

use super::bucket::{self, SLOTS};
use super::builder::CuckooBuilder;
use super::error::FilterFull;
use super::table::Table;

/// How many times an insert searches for room again after a move it planned was taken by
/// another writer, before it reports the filter full.
const MAX_ATTEMPTS: usize = 8;

/// A concurrent cuckoo filter: a short fingerprint per key in one of two buckets of four
/// slots. It can [`remove`](Self::remove) keys, at about a third of a
/// [`CountingBloomFilter`](crate::CountingBloomFilter)'s memory for the same rate.
///
/// Every operation takes `&self`: share it in an `Arc`. Lookups take no lock; inserts and
/// removes hold, for a few instructions, a lock on the stripe of each bucket they change.
/// A key being moved between its buckets to make room is always found (the proof is in
/// the module docs of `cuckoo` and in `tests/loom_cuckoo.rs`).
///
/// **Removing a key that was never inserted** can remove another key whose fingerprint and
/// buckets it shares, which is then answered "absent": a false negative. Only remove keys
/// you inserted (RedisBloom's `CF.DEL` has the same rule).
///
/// Inserting a key twice stores it twice (like `CF.ADD`): it then takes two removes.
/// [`insert_unique`](Self::insert_unique) stores it once (`CF.ADDNX`), and so skips a key
/// whose fingerprint and buckets another key already has: do not remove keys from a filter
/// filled that way. A key inserted more than eight times fills both its buckets.
///
/// ```
/// use bloom_core::CuckooFilter;
///
/// let users = CuckooFilter::new(10_000, 0.01)?;
/// users.insert("alice")?;
/// assert!(users.contains("alice"));
/// assert!(users.remove("alice"));
/// assert!(!users.contains("alice"));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct CuckooFilter {
    pub(crate) table: Table,
    hasher: KeyHasher,
    len: AtomicU64,
    capacity: Option<u64>,
    target_fpr: Option<f64>,
}

impl CuckooFilter {
    accessors! {
        /// A filter for `expected_items` keys at `false_positive_rate`, with a random secret
        /// hash key (see [`CuckooBuilder`] for how it is sized).
        ///
        /// ```
        /// use bloom_core::CuckooFilter;
        ///
        /// let f = CuckooFilter::new(1_000, 0.01)?;
        /// assert_eq!((f.capacity(), f.target_fpr()), (Some(1_000), Some(0.01)));
        /// # Ok::<(), Box<dyn std::error::Error>>(())
        /// ```
        new;
    }

    /// Starts configuring a cuckoo filter.
    ///
    /// ```
    /// use bloom_core::CuckooFilter;
    ///
    /// let f = CuckooFilter::builder().expected_items(1_000).false_positive_rate(0.001).seed(7).build()?;
    /// assert_eq!(f.seed(), 7);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn builder() -> CuckooBuilder {
        CuckooBuilder::default()
    }

    pub(crate) fn from_parts(
        table: Table,
        hasher: KeyHasher,
        capacity: Option<u64>,
        target_fpr: Option<f64>,
    ) -> Self {
        let shape = table.shape();
        let len = (0..table.buckets())
            .map(|i| {
                let fps = shape.decode(table.load(i));
                SLOTS as u64 - u64::from(bucket::count(&fps, 0))
            })
            .sum();
        Self {
            table,
            hasher,
            len: AtomicU64::new(len),
            capacity,
            target_fpr,
        }
    }

    /// The key's two buckets and its fingerprint (1 ..= 2^f − 1).
    #[inline]
    fn place<K: Key + ?Sized>(&self, key: &K) -> (u64, u64, u32) {
        self.place_hash(self.hasher.hash(key))
    }

    /// [`place`](Self::place) from the key's hash: the batch lookup hashes a window ahead.
    #[inline(always)]
    fn place_hash(&self, h: KeyHash) -> (u64, u64, u32) {
        let h = h.h1;
        let buckets = self.table.buckets();
        // The bucket from h's high bits, the fingerprint from its low 32: for fewer than 2³²
        // buckets the low half moves the bucket by at most one carry.
        let first = fast_range(h, buckets);
        let max = self.table.shape().max_fingerprint();
        let fp = (((h & 0xFFFF_FFFF) * u64::from(max)) >> 32) as u32 + 1;
        (first, self.other_bucket(first, fp), fp)
    }

    /// The key's two buckets, in the order a lookup reads them (like RedisBloom's
    /// `CF.DEBUG`): for tests and tools that need to see where a key lives.
    ///
    /// ```
    /// use bloom_core::CuckooFilter;
    ///
    /// let f = CuckooFilter::builder().buckets(10).fingerprint_bits(12).seed(1).build()?;
    /// let [a, b] = f.buckets_of("k");
    /// assert!(a < 10 && b < 10);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn buckets_of<K: Key + ?Sized>(&self, key: &K) -> [u64; 2] {
        let (a, b, _) = self.place(key);
        [a, b]
    }

    /// The other bucket of fingerprint `fp` in bucket `i`: `(H(fp) − i) mod m`, so the other
    /// bucket's other bucket is `i` again, for any number of buckets `m`.
    #[inline]
    pub(super) fn other_bucket(&self, i: u64, fp: u32) -> u64 {
        let buckets = self.table.buckets();
        let h = fast_range(u64::from(fp).wrapping_mul(FINGERPRINT_MULTIPLIER), buckets);
        if h >= i { h - i } else { h + buckets - i }
    }

    /// Adds `key`, moving other keys' fingerprints between their two buckets to make room if
    /// both of its buckets are full. A key already present is stored again (see
    /// [`insert_unique`](Self::insert_unique)).
    ///
    /// An `Err` means no room was found; nothing changed (see [`FilterFull`]).
    ///
    /// ```
    /// use bloom_core::CuckooFilter;
    ///
    /// let f = CuckooFilter::new(1_000, 0.01)?;
    /// f.insert("a")?;
    /// f.insert("a")?;
    /// assert_eq!(f.count("a"), 2);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn insert<K: Key + ?Sized>(&self, key: &K) -> Result<(), FilterFull> {
        self.add(key, false).map(|_| ())
    }

    /// Adds `key` unless it is (maybe) present already: `Ok(true)` if it was added,
    /// `Ok(false)` if it was there. The check and the add are one step for concurrent
    /// callers with the same key, so racing calls store it once.
    ///
    /// For a filter nothing is removed from (a set of seen keys). "There" includes another
    /// key with the same fingerprint and buckets, which this key then shares: a later
    /// [`remove`](Self::remove) of that other key takes this one out too, a false negative
    /// (`tests/cuckoo.rs` `a_key_insert_unique_skipped_goes_with_its_twin`). Filters keys
    /// are removed from take [`insert`](Self::insert), one per key inserted.
    ///
    /// ```
    /// use bloom_core::CuckooFilter;
    ///
    /// let f = CuckooFilter::new(1_000, 0.01)?;
    /// assert!(f.insert_unique("a")?);
    /// assert!(!f.insert_unique("a")?);
    /// assert_eq!(f.count("a"), 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn insert_unique<K: Key + ?Sized>(&self, key: &K) -> Result<bool, FilterFull> {
        self.add(key, true)
    }

    fn add<K: Key + ?Sized>(&self, key: &K, unique: bool) -> Result<bool, FilterFull> {
        let (a, b, fp) = self.place(key);
        for _ in 0..MAX_ATTEMPTS {
            if let Some(added) = self.try_put(a, b, fp, unique) {
                return Ok(added);
            }
            match self.find_room(a, b) {
                Some(moves) => {
                    self.make_room(&moves);
                }
                None => break,
            }
        }
        Err(FilterFull {
            len: self.len(),
            slots: self.slots(),
        })
    }

    /// Under both stripes: `Some(false)` if `unique` and `fp` is in `a` or `b`, `Some(true)`
    /// once it is put in a free slot of `a` (else `b`), `None` if both are full.
    fn try_put(&self, a: u64, b: u64, fp: u32, unique: bool) -> Option<bool> {
        let shape = self.table.shape();
        let _held = self.table.lock_pair(a, b);
        let (bits_a, bits_b) = (self.table.load(a), self.table.load(b));
        let (fps_a, fps_b) = (shape.decode(bits_a), shape.decode(bits_b));
        if unique && (fps_a.contains(&fp) || fps_b.contains(&fp)) {
            return Some(false);
        }
        for (i, bits, fps) in [(a, bits_a, fps_a), (b, bits_b, fps_b)] {
            if let Some(filled) = bucket::with_added(fps, fp) {
                self.table.store(i, bits, shape.encode(filled));
                self.len.fetch_add(1, Relaxed);
                return Some(true);
            }
        }
        None
    }

    /// `false` means `key` is definitely not in the filter.
    ///
    /// ```
    /// use bloom_core::CuckooFilter;
    ///
    /// let f = CuckooFilter::new(1_000, 0.01)?;
    /// f.insert(&42u64)?;
    /// assert!(f.contains(&42u64));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[inline]
    pub fn contains<K: Key + ?Sized>(&self, key: &K) -> bool {
        self.contains_at(self.place(key))
    }

    /// The lookup of a key placed at `(a, b, fp)`: [`contains`](Self::contains)'s and
    /// [`contains_many`](Self::contains_many)'s one path, the validated read of
    /// `Table::read_pair_until` (a "no" only from a read of both buckets no writer overlapped).
    #[inline(always)]
    fn contains_at(&self, (a, b, fp): (u64, u64, u32)) -> bool {
        let shape = self.table.shape();
        self.table
            .read_pair_until(a, b, |bits| shape.holds(bits, fp))
    }

    /// Looks every key up; the answers are in the keys' order, each what
    /// [`contains`](Self::contains) would have returned (RedisBloom's `CF.MEXISTS`). Keys are
    /// hashed a window ahead of their lookup and both their buckets prefetched, so on a filter
    /// larger than the CPU cache the memory accesses overlap, which makes it faster than a loop
    /// of [`contains`](Self::contains) (bench: `cuckoo/contains_many_*` in benches/cuckoo.rs).
    ///
    /// Each key is looked up with `contains`'s lock-free validated read, when its turn comes:
    /// a key inserted before the call and not removed before it returns is found, whatever
    /// inserts, moves and removes run meanwhile; one inserted or removed during the call may
    /// be answered either way, as by a `contains` racing with it.
    ///
    /// ```
    /// use bloom_core::CuckooFilter;
    ///
    /// let f = CuckooFilter::new(1_000, 0.01)?;
    /// for key in 0..100u64 {
    ///     f.insert(&key)?;
    /// }
    /// assert_eq!(f.contains_many([1u64, 2, 99]), [true, true, true]);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn contains_many<I>(&self, keys: I) -> Vec<bool>
    where
        I: IntoIterator,
        I::Item: Key,
    {
        let prefetch = |h| {
            let (a, b, _) = self.place_hash(h);
            self.table.prefetch_pair(a, b);
        };
        pipelined_map(&self.hasher, keys, prefetch, |h| {
            self.contains_at(self.place_hash(h))
        })
    }

    /// How many times `key`'s fingerprint is stored in its buckets: its insertions, plus any
    /// other key's that shares both (`CF.COUNT`).
    ///
    /// ```
    /// use bloom_core::CuckooFilter;
    ///
    /// let f = CuckooFilter::new(1_000, 0.01)?;
    /// assert_eq!(f.count("a"), 0);
    /// f.insert("a")?;
    /// assert_eq!(f.count("a"), 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn count<K: Key + ?Sized>(&self, key: &K) -> u32 {
        let (a, b, fp) = self.place(key);
        let shape = self.table.shape();
        let (bits_a, bits_b) = self.table.read_pair(a, b);
        let in_b = if b == a {
            0
        } else {
            bucket::count(&shape.decode(bits_b), fp)
        };
        bucket::count(&shape.decode(bits_a), fp) + in_b
    }

    /// Removes one insertion of `key`: `true` if its fingerprint was found and removed,
    /// `false` if `key` is definitely absent (nothing changed).
    ///
    /// Only remove keys that were inserted: a key never inserted may share its fingerprint
    /// and buckets with one that was, and take that one out (see the type's docs).
    ///
    /// ```
    /// use bloom_core::CuckooFilter;
    ///
    /// let f = CuckooFilter::new(1_000, 0.01)?;
    /// f.insert("a")?;
    /// assert!(f.remove("a"));
    /// assert!(!f.remove("a"));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn remove<K: Key + ?Sized>(&self, key: &K) -> bool {
        let (a, b, fp) = self.place(key);
        let shape = self.table.shape();
        let _held = self.table.lock_pair(a, b);
        for i in [a, b] {
            let bits = self.table.load(i);
            if let Some(emptied) = bucket::with_removed(shape.decode(bits), fp) {
                self.table.store(i, bits, shape.encode(emptied));
                self.len.fetch_sub(1, Relaxed);
                return true;
            }
        }
        false
    }

    /// Fingerprints stored: insertions minus removals (exact, unlike a Bloom filter's
    /// estimate).
    ///
    /// ```
    /// use bloom_core::CuckooFilter;
    ///
    /// let f = CuckooFilter::new(1_000, 0.01)?;
    /// f.insert("a")?;
    /// f.insert("b")?;
    /// assert_eq!(f.len(), 2);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn len(&self) -> u64 {
        self.len.load(Relaxed)
    }

    /// Whether no fingerprint is stored.
    ///
    /// ```
    /// use bloom_core::CuckooFilter;
    ///
    /// assert!(CuckooFilter::new(1_000, 0.01)?.is_empty());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Buckets, `m`: any number, not rounded to a power of two.
    ///
    /// ```
    /// use bloom_core::CuckooFilter;
    ///
    /// let f = CuckooFilter::builder().buckets(1_001).fingerprint_bits(12).build()?;
    /// assert_eq!(f.num_buckets(), 1_001);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn num_buckets(&self) -> u64 {
        self.table.buckets()
    }

    /// Slots: four per bucket.
    ///
    /// ```
    /// use bloom_core::CuckooFilter;
    ///
    /// let f = CuckooFilter::builder().buckets(10).fingerprint_bits(12).build()?;
    /// assert_eq!(f.slots(), 40);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn slots(&self) -> u64 {
        self.table.buckets() * SLOTS as u64
    }

    /// Bits per fingerprint, `f`. A bucket of four takes `4·f − 4` bits.
    ///
    /// ```
    /// use bloom_core::CuckooFilter;
    ///
    /// assert_eq!(CuckooFilter::new(1_000, 0.01)?.fingerprint_bits(), 10);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn fingerprint_bits(&self) -> u32 {
        self.table.shape().fingerprint_bits
    }

    /// The fraction of slots in use.
    ///
    /// ```
    /// use bloom_core::CuckooFilter;
    ///
    /// let f = CuckooFilter::builder().buckets(10).fingerprint_bits(12).build()?;
    /// f.insert("a")?;
    /// assert_eq!(f.load_factor(), 1.0 / 40.0);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn load_factor(&self) -> f64 {
        self.len() as f64 / self.slots() as f64
    }

    accessors! {
        /// The number of keys it was sized for; `None` if it was sized by buckets.
        ///
        /// ```
        /// use bloom_core::CuckooFilter;
        ///
        /// assert_eq!(CuckooFilter::new(500, 0.01)?.capacity(), Some(500));
        /// # Ok::<(), Box<dyn std::error::Error>>(())
        /// ```
        capacity: Option<u64>;

        /// The false-positive rate it was sized for; `None` if it was sized by buckets.
        ///
        /// ```
        /// use bloom_core::CuckooFilter;
        ///
        /// assert_eq!(CuckooFilter::new(500, 0.001)?.target_fpr(), Some(0.001));
        /// # Ok::<(), Box<dyn std::error::Error>>(())
        /// ```
        target_fpr: Option<f64>;

        /// The secret hash key. Never log it.
        ///
        /// ```
        /// use bloom_core::CuckooFilter;
        ///
        /// let f = CuckooFilter::builder().expected_items(10).false_positive_rate(0.01).seed(3).build()?;
        /// assert_eq!(f.seed(), 3);
        /// # Ok::<(), Box<dyn std::error::Error>>(())
        /// ```
        seed;
    }

    /// Memory held, in bytes: the buckets and the stripe versions.
    ///
    /// ```
    /// use bloom_core::CuckooFilter;
    ///
    /// let f = CuckooFilter::builder().buckets(16).fingerprint_bits(17).build()?;
    /// assert_eq!(f.size_in_bytes(), (16 + 1 + 1) * 8); // 16 words, a spare, one stripe
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn size_in_bytes(&self) -> usize {
        self.table.size_in_bytes()
    }

    /// The false-positive rate at the current load: `1 − (1 − 1/(2^f − 1))^(8·load)`, the
    /// chance that one of the fingerprints in a key's two buckets equals its own.
    ///
    /// ```
    /// use bloom_core::CuckooFilter;
    ///
    /// let f = CuckooFilter::new(1_000, 0.01)?;
    /// assert_eq!(f.current_fpr(), 0.0);
    /// for i in 0..1_000u64 {
    ///     f.insert(&i)?;
    /// }
    /// assert!(f.current_fpr() <= 0.01);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn current_fpr(&self) -> f64 {
        super::builder::false_positive_rate(self.fingerprint_bits(), self.load_factor())
    }
}

/// `H(fp)`'s multiplier (2⁶⁴/φ): one multiply spreads fingerprints over the buckets, and it is
/// on a lookup's path to its second bucket.
const FINGERPRINT_MULTIPLIER: u64 = 0x9E37_79B9_7F4A_7C15;

/// `x` scaled into `0..n` by a multiply (Lemire's fast range).
#[inline]
fn fast_range(x: u64, n: u64) -> u64 {
    ((u128::from(x) * u128::from(n)) >> 64) as u64
}

impl fmt::Debug for CuckooFilter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CuckooFilter")
            .field("buckets", &self.num_buckets())
            .field("fingerprint_bits", &self.fingerprint_bits())
            .field("len", &self.len())
            .field("capacity", &self.capacity)
            .field("target_fpr", &self.target_fpr)
            .finish_non_exhaustive()
    }
}
