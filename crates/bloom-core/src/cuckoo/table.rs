//! The table: buckets packed end to end in 64-bit words, and the stripe versions that make
//! a lookup's read of two buckets consistent (MemC3's optimistic scheme; the proof is in the
//! module docs of `cuckoo`).
//!
//! Rules, each guarded by a test named here:
//! * A bucket's bits change only while the writer holds its stripe, and only by atomic
//!   read-modify-writes that flip exactly those bits, so a bucket sharing a word with
//!   another stripe's bucket never loses that bucket's bits (`neighbours_in_one_word_keep_their_bits`).
//! * A stripe's version is odd exactly while a writer holds it; every hold ends one higher
//!   than it began plus one, so a version seen twice, even, brackets reads no writer
//!   overlapped (`tests/loom_cuckoo.rs`).

use std::ops::ControlFlow;

use crate::sync::{AtomicU64, Ordering, fence, spin};

use super::bucket::Shape;

/// Buckets per stripe, at least: the versions cost 8 bytes per this many buckets.
const BUCKETS_PER_STRIPE: u64 = 256;
/// The most stripes: enough that two writers rarely meet, few enough to stay cached.
const MAX_STRIPES: u64 = 1024;

pub(crate) struct Table {
    /// The packed buckets, then one spare word so a bucket's second word always exists.
    words: Box<[AtomicU64]>,
    /// A version per stripe; bucket `i` is in stripe `i & (stripes − 1)`.
    stripes: Box<[AtomicU64]>,
    buckets: u64,
    shape: Shape,
}

/// Holds one or two stripes; releases them on drop (a panicking writer never strands
/// the readers of its buckets).
pub(crate) struct StripeGuard<'t> {
    table: &'t Table,
    /// Each stripe held, with the (odd) version it holds it at.
    first: (usize, u64),
    second: Option<(usize, u64)>,
}

impl Drop for StripeGuard<'_> {
    fn drop(&mut self) {
        if let Some(second) = self.second {
            self.table.unlock(second);
        }
        self.table.unlock(self.first);
    }
}

impl Table {
    /// An empty table of `buckets` buckets, or one holding `words` (the packed words, already
    /// validated, then the spare one, zero).
    pub(crate) fn new(buckets: u64, shape: Shape, words: Option<Box<[AtomicU64]>>) -> Self {
        let body_words = Self::body_words(buckets, shape) as usize;
        let words = words.unwrap_or_else(|| crate::bit_vector::zeroed_words(body_words + 1));
        debug_assert_eq!(words.len(), body_words + 1);
        let stripes = (buckets / BUCKETS_PER_STRIPE)
            .clamp(1, MAX_STRIPES)
            .next_power_of_two()
            .min(MAX_STRIPES);
        Self {
            words,
            stripes: (0..stripes).map(|_| AtomicU64::new(0)).collect(),
            buckets,
            shape,
        }
    }

    /// Words the buckets fill: `ceil(buckets · (4f − 4) / 64)`.
    pub(crate) fn body_words(buckets: u64, shape: Shape) -> u64 {
        (buckets * u64::from(shape.bucket_bits())).div_ceil(64)
    }

    pub(crate) fn buckets(&self) -> u64 {
        self.buckets
    }

    pub(crate) fn shape(&self) -> Shape {
        self.shape
    }

    /// Bytes held: the words and the stripe versions.
    pub(crate) fn size_in_bytes(&self) -> usize {
        (self.words.len() + self.stripes.len()) * 8
    }

    /// The body's words, for the file format (quiescent: no writer running).
    pub(crate) fn body(&self) -> impl Iterator<Item = u64> + '_ {
        let n = self.words.len() - 1;
        self.words[..n].iter().map(|w| w.load(Ordering::Relaxed))
    }

    #[inline]
    fn stripe_of(&self, bucket: u64) -> usize {
        (bucket & (self.stripes.len() as u64 - 1)) as usize
    }

    /// Bucket `i`'s bits as they are now, unsynchronised: a writer holding its stripe, or a
    /// lookup inside [`read_pair`](Self::read_pair)'s validation, or the path search (which
    /// re-checks everything it uses under the stripes).
    #[inline]
    pub(crate) fn load(&self, i: u64) -> u64 {
        let bits = u64::from(self.shape.bucket_bits());
        let at = i * bits;
        let (word, shift) = ((at / 64) as usize, at % 64);
        // Both words, always (the spare word makes the second exist): a branch on whether the
        // bucket straddles them would be taken about half the time, at random.
        let lo = self.words[word].load(Ordering::Relaxed);
        let hi = self.words[word + 1].load(Ordering::Relaxed);
        let both = u128::from(lo) | (u128::from(hi) << 64);
        let mask = if bits == 64 {
            u64::MAX
        } else {
            (1 << bits) - 1
        };
        (both >> shift) as u64 & mask
    }

    /// Hints the CPU to start fetching the words buckets `a` and `b` lie in (both words of
    /// each, as [`load`](Self::load) reads them), for a lookup of them a few keys later. A
    /// hint (off x86-64, a load whose value is dropped): no answer depends on it, the lookup
    /// still reads and validates as usual.
    #[inline(always)]
    pub(crate) fn prefetch_pair(&self, a: u64, b: u64) {
        let bits = u64::from(self.shape.bucket_bits());
        for i in [a, b] {
            let word = (i * bits / 64) as usize;
            crate::bit_vector::prefetch(&self.words[word]);
            crate::bit_vector::prefetch(&self.words[word + 1]);
        }
    }

    /// Replaces bucket `i`'s bits `old` (what they are: the caller holds its stripe) with
    /// `new`, flipping only the bits that differ.
    #[inline]
    pub(crate) fn store(&self, i: u64, old: u64, new: u64) {
        let delta = u128::from(old ^ new);
        if delta == 0 {
            return;
        }
        let at = i * u64::from(self.shape.bucket_bits());
        let (word, shift) = ((at / 64) as usize, at % 64);
        let delta = delta << shift;
        let (lo, hi) = (delta as u64, (delta >> 64) as u64);
        if lo != 0 {
            self.words[word].fetch_xor(lo, Ordering::Relaxed);
        }
        if hi != 0 {
            self.words[word + 1].fetch_xor(hi, Ordering::Relaxed);
        }
    }

    /// Buckets `a` and `b` as they were at one instant: read between two equal, even
    /// readings of both stripes' versions, retried otherwise. Takes no lock and writes
    /// nothing; it waits only while a writer is changing one of the two buckets.
    #[inline]
    pub(crate) fn read_pair(&self, a: u64, b: u64) -> (u64, u64) {
        self.read_validated(a, b, || ControlFlow::Continue((self.load(a), self.load(b))))
    }

    /// Whether `found` holds for bucket `a` or `b`: `true` as soon as it holds for one as read
    /// (a "yes" needs no consistent read: at worst it is a false positive), `false` only from
    /// a read of both validated like [`read_pair`](Self::read_pair)'s. The lookup's path.
    #[inline]
    pub(crate) fn read_pair_until(&self, a: u64, b: u64, found: impl Fn(u64) -> bool) -> bool {
        self.read_validated(a, b, || {
            if found(self.load(a)) || found(self.load(b)) {
                ControlFlow::Break(true)
            } else {
                ControlFlow::Continue(false)
            }
        })
    }

    /// The seqlock read of buckets `a` and `b`: runs `read` once both stripes' versions read
    /// even, then returns a `Break` at once and a `Continue` only if the versions, read again
    /// after an acquire fence, are unchanged; otherwise runs `read` again. Rule: a `Continue`
    /// value comes from bucket reads no writer's hold overlapped (`tests/loom_cuckoo.rs`).
    #[inline(always)]
    fn read_validated<T>(&self, a: u64, b: u64, mut read: impl FnMut() -> ControlFlow<T, T>) -> T {
        let (sa, sb) = (
            &self.stripes[self.stripe_of(a)],
            &self.stripes[self.stripe_of(b)],
        );
        loop {
            let va = sa.load(Ordering::Acquire);
            let vb = sb.load(Ordering::Acquire);
            if (va | vb) & 1 == 0 {
                match read() {
                    ControlFlow::Break(answer) => return answer,
                    ControlFlow::Continue(answer) => {
                        fence(Ordering::Acquire);
                        if sa.load(Ordering::Relaxed) == va && sb.load(Ordering::Relaxed) == vb {
                            return answer;
                        }
                    }
                }
            }
            spin();
        }
    }

    /// Holds the stripes of buckets `a` and `b` (one if they share it), in index order so two
    /// writers never wait for each other in a cycle.
    pub(crate) fn lock_pair(&self, a: u64, b: u64) -> StripeGuard<'_> {
        let (sa, sb) = (self.stripe_of(a), self.stripe_of(b));
        let (first, second) = (sa.min(sb), sa.max(sb));
        let first = (first, self.lock(first));
        let second = (second != first.0).then(|| (second, self.lock(second)));
        StripeGuard {
            table: self,
            first,
            second,
        }
    }

    /// Takes `stripe`; the odd version it now holds it at.
    fn lock(&self, stripe: usize) -> u64 {
        let version = &self.stripes[stripe];
        loop {
            let v = version.load(Ordering::Relaxed);
            if v & 1 == 0
                && version
                    .compare_exchange_weak(v, v + 1, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
            {
                // Orders the odd version before this writer's bucket writes, for a reader
                // whose `fence(Acquire)` follows a read of one of them.
                fence(Ordering::Release);
                return v + 1;
            }
            spin();
        }
    }

    /// Releases a stripe held at `held`: a plain store of the next even version (only the
    /// holder writes a held stripe's version).
    fn unlock(&self, (stripe, held): (usize, u64)) {
        self.stripes[stripe].store(held + 1, Ordering::Release);
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn neighbours_in_one_word_keep_their_bits() {
        // f = 10: 36-bit buckets, so bucket 1 straddles words 0 and 1.
        let shape = Shape {
            fingerprint_bits: 10,
        };
        let table = Table::new(64, shape, None);
        let values: Vec<u64> = (0..64u64)
            .map(|i| shape.encode([i as u32 + 1, 0, 900, 3]))
            .collect();
        for (i, &v) in values.iter().enumerate() {
            let _g = table.lock_pair(i as u64, i as u64);
            table.store(i as u64, 0, v);
        }
        for (i, &v) in values.iter().enumerate() {
            assert_eq!(table.load(i as u64), v, "bucket {i}");
            assert_eq!(table.read_pair(i as u64, 0), (v, values[0]));
        }
        let _g = table.lock_pair(1, 1);
        table.store(1, values[1], 0);
        assert_eq!(
            (table.load(0), table.load(1), table.load(2)),
            (values[0], 0, values[2])
        );
    }

    #[test]
    fn a_dropped_guard_releases_its_stripes() {
        let table = Table::new(
            4096,
            Shape {
                fingerprint_bits: 8,
            },
            None,
        );
        drop(table.lock_pair(1, 2));
        drop(table.lock_pair(2, 1));
        assert!(
            table
                .stripes
                .iter()
                .all(|v| v.load(Ordering::Relaxed) % 2 == 0)
        );
        assert_eq!(table.read_pair(1, 2), (0, 0));
    }
}
