//! The shared bit array: `AtomicU64` words that are only ever OR-ed into (or cleared).

use crate::sync::{AtomicU64, Ordering::Relaxed};

// Relaxed is enough for every access here. Bits only go 0 → 1 (until `clear`), and no other
// memory is published through them, so there is nothing for Acquire/Release to order: each
// word's modification order alone guarantees that once a thread observes a bit set it stays
// set, and that an insert which happens-before a lookup (through a join, a channel, a mutex,
// a socket round trip…) is seen by it. An insert racing with a lookup may or may not be seen,
// which is exactly "the lookup happened first".
pub(crate) struct BitVector {
    words: Box<[AtomicU64]>,
}

impl BitVector {
    pub(crate) fn zeroed(num_words: usize) -> Self {
        Self {
            words: zeroed_words(num_words),
        }
    }

    /// A copy of `words`, in the same huge-page-backed storage as [`zeroed`](Self::zeroed).
    pub(crate) fn from_words(words: impl ExactSizeIterator<Item = u64>) -> Self {
        let bits = Self::zeroed(words.len());
        for (slot, w) in bits.words.iter().zip(words) {
            slot.store(w, Relaxed);
        }
        bits
    }

    #[inline(always)]
    pub(crate) fn len(&self) -> usize {
        self.words.len()
    }

    #[inline(always)]
    pub(crate) fn load(&self, word: usize) -> u64 {
        self.words[word].load(Relaxed)
    }

    /// ORs `mask` into `word`; returns true if any bit of `mask` was clear before. A plain load
    /// first skips the (far dearer) locked read-modify-write when the bits are already set.
    #[inline(always)]
    pub(crate) fn set(&self, word: usize, mask: u64) -> bool {
        let w = &self.words[word];
        if w.load(Relaxed) & mask == mask {
            return false;
        }
        w.fetch_or(mask, Relaxed) & mask != mask
    }

    #[inline(always)]
    pub(crate) fn test(&self, bit: u64) -> bool {
        self.load((bit >> 6) as usize) & (1u64 << (bit & 63)) != 0
    }

    /// The eight words of 512-bit block `block` (an array, so in-block indexing by
    /// `bit >> 6 < 8` needs no bounds check).
    #[inline(always)]
    pub(crate) fn block(&self, block: usize) -> &[AtomicU64; 8] {
        self.words[block * 8..block * 8 + 8]
            .try_into()
            .expect("a block is 8 words")
    }

    #[inline(always)]
    pub(crate) fn or_word(&self, word: usize, bits: u64) {
        self.words[word].fetch_or(bits, Relaxed);
    }

    pub(crate) fn and_word(&self, word: usize, bits: u64) {
        self.words[word].fetch_and(bits, Relaxed);
    }

    pub(crate) fn clear(&self) {
        for w in self.words.iter() {
            w.store(0, Relaxed);
        }
    }

    pub(crate) fn iter(&self) -> impl ExactSizeIterator<Item = u64> + '_ {
        self.words.iter().map(|w| w.load(Relaxed))
    }

    /// Hint the CPU to start fetching the cache line holding `word`.
    #[inline(always)]
    pub(crate) fn prefetch(&self, word: usize) {
        prefetch(&self.words[word]);
    }
}

/// A zeroed word array. Large ones come straight from the allocator's zeroed pages (no
/// 60 MB `memset` before the first insert) and, on Linux, are advised onto 2 MiB transparent
/// huge pages before anything touches them: a lookup in a filter far larger than the TLB's
/// reach otherwise pays a page walk on top of its cache miss. Measured with
/// `bloom dedup --items 100M --fpr 1e-4` on 20M URLs (a 261 MiB filter): 1.6× fewer CPU
/// seconds than 4 KiB pages (see the README's benchmark section).
#[cfg(not(loom))]
#[allow(unsafe_code)]
pub(crate) fn zeroed_words(num_words: usize) -> Box<[AtomicU64]> {
    use std::alloc::{Layout, alloc_zeroed, handle_alloc_error};
    /// Below this the TLB covers the array anyway.
    const HUGE_PAGE_WORTHWHILE: usize = 4 << 20;

    let Ok(layout) = Layout::array::<AtomicU64>(num_words) else {
        panic!("{num_words} words overflow the address space") // bounded by params::MAX_BITS first
    };
    if layout.size() == 0 {
        return Box::new([]);
    }
    // SAFETY: the layout has a non-zero size (checked above).
    let ptr = unsafe { alloc_zeroed(layout) }.cast::<AtomicU64>();
    if ptr.is_null() {
        handle_alloc_error(layout);
    }
    if layout.size() >= HUGE_PAGE_WORTHWHILE {
        advise_huge_pages(ptr.cast(), layout.size());
    }
    // SAFETY: `ptr` is a live allocation of exactly `layout` (an array of `num_words`
    // AtomicU64, the layout `Box<[AtomicU64]>` frees with), and all-zero bytes are a valid
    // AtomicU64. Ownership passes to the Box.
    unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(ptr, num_words)) }
}

#[cfg(loom)]
pub(crate) fn zeroed_words(num_words: usize) -> Box<[AtomicU64]> {
    (0..num_words).map(|_| AtomicU64::new(0)).collect()
}

/// Asks Linux to back the whole 2 MiB pages inside `[start, start + len)` with huge pages.
/// Only advice: if transparent huge pages are off, nothing changes.
#[cfg(all(target_os = "linux", not(loom)))]
#[allow(unsafe_code)]
fn advise_huge_pages(start: *mut u8, len: usize) {
    const HUGE: usize = 2 << 20;
    let first = (start as usize).next_multiple_of(HUGE);
    let end = (start as usize + len) / HUGE * HUGE;
    if end > first {
        // SAFETY: [first, end) lies inside an allocation this process owns and has not
        // handed out yet; MADV_HUGEPAGE changes how it is backed, never its contents.
        let _ =
            unsafe { libc::madvise(first as *mut libc::c_void, end - first, libc::MADV_HUGEPAGE) };
    }
}

#[cfg(all(not(target_os = "linux"), not(loom)))]
fn advise_huge_pages(_: *mut u8, _: usize) {}

/// Starts loading `word`'s cache line into L1 without waiting for it.
///
/// The batch lookups hash a group of keys, prefetch every key's line, and only then test the
/// bits, so the group's DRAM misses overlap instead of queueing one after another. Measured
/// with `cargo bench -p bloom-benches --bench core -- contains_many` (see README): out of cache
/// this is the difference between paying one memory latency per key and a fraction of one.
#[inline(always)]
#[cfg(all(target_arch = "x86_64", not(loom)))]
#[allow(unsafe_code)]
fn prefetch(word: &AtomicU64) {
    use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
    // SAFETY: PREFETCHT0 is only a hint: it never faults, even on an invalid address, and has
    // no architecturally visible effect. SSE, which it belongs to, is part of the x86_64
    // baseline, so the instruction exists on every CPU this code compiles for.
    unsafe { _mm_prefetch::<_MM_HINT_T0>(word.as_ptr().cast::<i8>()) }
}

#[inline(always)]
#[cfg(not(all(target_arch = "x86_64", not(loom))))]
fn prefetch(word: &AtomicU64) {
    // No stable safe prefetch elsewhere: a plain load still overlaps with the other keys'
    // loads in the out-of-order window, which is most of the benefit.
    let _ = word.load(crate::sync::Ordering::Relaxed);
}
