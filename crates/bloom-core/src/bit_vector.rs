//! The shared bit array: `AtomicU64` words that are only ever OR-ed into (or cleared).

use crate::sync::{AtomicU64, Ordering::Relaxed};

// Relaxed is enough for every access here. Bits only go 0 → 1 (until `clear`), and no other
// memory is published through them, so there is nothing for Acquire/Release to order: each
// word's modification order alone guarantees that once a thread observes a bit set it stays
// set, and that an insert which happens-before a lookup (through a join, a channel, a mutex,
// a socket round trip…) is seen by it. An insert racing with a lookup may or may not be seen,
// which is exactly "the lookup happened first".
pub(crate) struct BitVector {
    /// The words, eight to a cache-line-aligned [`Line`]; the last line is zero-padded past
    /// `len` words (the padding is never read as filter bits or written).
    lines: Box<[Line]>,
    len: usize,
}

/// Eight words on one 64-byte cache line: a Blocked filter's 512-bit block is exactly one
/// `Line`, so a lookup touches one line. Rule: the array is 64-byte aligned, never only
/// 8-byte (an array large enough for `malloc` to `mmap` starts 16 bytes into a page, and
/// every block would straddle two cache lines): `every_line_starts_on_a_cache_line`.
#[repr(C, align(64))]
pub(crate) struct Line(pub(crate) [AtomicU64; 8]);

impl BitVector {
    pub(crate) fn zeroed(num_words: usize) -> Self {
        Self {
            lines: zeroed_slice(num_words.div_ceil(8)),
            len: num_words,
        }
    }

    /// The words a [`WordFill`] was filled with (a filter read from a file), with no copy.
    pub(crate) fn from_fill(fill: WordFill<Line>) -> Self {
        let len = fill.words();
        Self {
            lines: fill.finish(),
            len,
        }
    }

    /// A copy of `words`, in the same huge-page-backed storage as [`zeroed`](Self::zeroed).
    pub(crate) fn from_words(words: impl ExactSizeIterator<Item = u64>) -> Self {
        let bits = Self::zeroed(words.len());
        for (i, w) in words.enumerate() {
            bits.word(i).store(w, Relaxed);
        }
        bits
    }

    #[inline(always)]
    fn word(&self, word: usize) -> &AtomicU64 {
        debug_assert!(word < self.len);
        &self.lines[word / 8].0[word % 8]
    }

    #[inline(always)]
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    #[inline(always)]
    pub(crate) fn load(&self, word: usize) -> u64 {
        self.word(word).load(Relaxed)
    }

    /// ORs `mask` into `word`; returns true if any bit of `mask` was clear before. A plain load
    /// first skips the (far dearer) locked read-modify-write when the bits are already set.
    #[inline(always)]
    pub(crate) fn set(&self, word: usize, mask: u64) -> bool {
        let w = self.word(word);
        if w.load(Relaxed) & mask == mask {
            return false;
        }
        w.fetch_or(mask, Relaxed) & mask != mask
    }

    #[inline(always)]
    pub(crate) fn test(&self, bit: u64) -> bool {
        self.load((bit >> 6) as usize) & (1u64 << (bit & 63)) != 0
    }

    /// Lines `first..first + len`.
    #[inline(always)]
    pub(crate) fn blocks(&self, first: usize, len: usize) -> &[Line] {
        &self.lines[first..first + len]
    }

    /// The eight words of 512-bit block `block`, one cache line (in-block indexing by
    /// `bit >> 6 < 8` needs no bounds check).
    #[inline(always)]
    pub(crate) fn block(&self, block: usize) -> &Line {
        &self.lines[block]
    }

    #[inline(always)]
    pub(crate) fn or_word(&self, word: usize, bits: u64) {
        self.word(word).fetch_or(bits, Relaxed);
    }

    pub(crate) fn and_word(&self, word: usize, bits: u64) {
        self.word(word).fetch_and(bits, Relaxed);
    }

    pub(crate) fn clear(&self) {
        for w in self.lines.iter().flat_map(|l| &l.0) {
            w.store(0, Relaxed);
        }
    }

    /// Clears every `stride`-th line from line `first` on: one generation of an interleaved
    /// ring (`windowed/ring.rs`).
    pub(crate) fn clear_lines(&self, first: usize, stride: usize) {
        for line in self.lines.iter().skip(first).step_by(stride) {
            for w in &line.0 {
                w.store(0, Relaxed);
            }
        }
    }

    pub(crate) fn iter(&self) -> impl ExactSizeIterator<Item = u64> + '_ {
        (0..self.len).map(|i| self.load(i))
    }

    /// The words `range`, clamped to the length.
    pub(crate) fn iter_range(
        &self,
        range: std::ops::Range<usize>,
    ) -> impl ExactSizeIterator<Item = u64> + '_ {
        let end = range.end.min(self.len);
        (range.start.min(end)..end).map(|i| self.load(i))
    }

    /// Hint the CPU to start fetching the cache line holding `word`.
    #[inline(always)]
    pub(crate) fn prefetch(&self, word: usize) {
        prefetch(self.word(word));
    }
}

/// Types whose all-zero bytes are a valid value (what [`zeroed_slice`] hands out).
pub(crate) trait ZeroValid {}
impl ZeroValid for AtomicU64 {}
impl ZeroValid for Line {}

/// A zeroed word array (the counting filter's storage).
pub(crate) fn zeroed_words(num_words: usize) -> Box<[AtomicU64]> {
    zeroed_slice(num_words)
}

/// What a word array is made of: a [`Line`] of eight words, or one word.
#[cfg(not(loom))]
pub(crate) trait WordElement: ZeroValid {
    /// Words in one element.
    const WORDS: usize;
}

#[cfg(loom)]
pub(crate) trait WordElement: ZeroValid + LoomZero {
    const WORDS: usize;
}

impl WordElement for AtomicU64 {
    const WORDS: usize = 1;
}

impl WordElement for Line {
    const WORDS: usize = 8;
}

/// A word array filled in order as a file's words arrive, then handed over whole: the words
/// are written once, where the filter will use them, with no intermediate copy. The array
/// is allocated uninitialised (and advised onto huge pages, as [`zeroed_slice`] does), so
/// the memory it commits grows with the words written, not with what a header claims; a
/// fill dropped before [`finish`](Self::finish) frees it unread. Rules: every word up to
/// the end of the last element is written before the array is read (`push` for the first
/// `words`, zeros by `finish` for the rest), and a fill never takes more words than it was
/// made for (every kind's round trip, truncation and bit-flip tests; `tests/load_memory.rs`
/// `loading_takes_the_filter_and_one_buffer`).
#[cfg(not(loom))]
pub(crate) struct WordFill<T: WordElement> {
    /// `len` elements, `len · T::WORDS` words, the first `filled` of them written.
    ptr: std::ptr::NonNull<T>,
    len: usize,
    filled: usize,
    last: Option<u64>,
}

#[cfg(not(loom))]
#[allow(unsafe_code)]
impl<T: WordElement> WordFill<T> {
    /// An array for `words` words (rounded up to whole elements), or `None` if the
    /// allocator refuses it.
    pub(crate) fn new(words: usize) -> Option<Self> {
        const HUGE_PAGE_WORTHWHILE: usize = 4 << 20;
        let len = words.div_ceil(T::WORDS);
        let layout = std::alloc::Layout::array::<T>(len).ok()?;
        let ptr = if layout.size() == 0 {
            std::ptr::NonNull::dangling()
        } else {
            // SAFETY: the layout has a non-zero size (checked above).
            let ptr = std::ptr::NonNull::new(unsafe { std::alloc::alloc(layout) }.cast::<T>())?;
            if layout.size() >= HUGE_PAGE_WORTHWHILE {
                advise_huge_pages(ptr.as_ptr().cast(), layout.size());
            }
            ptr
        };
        Some(Self {
            ptr,
            len,
            filled: 0,
            last: None,
        })
    }

    /// Words written so far.
    pub(crate) fn words(&self) -> usize {
        self.filled
    }

    /// The last word written.
    pub(crate) fn last(&self) -> Option<u64> {
        self.last
    }

    /// Writes the next words, `bytes` as little-endian `u64`s (a multiple of 8 bytes).
    ///
    /// # Panics
    /// If the words do not fit: the caller asked for as many as the file holds.
    pub(crate) fn push_le_bytes(&mut self, bytes: &[u8]) {
        let n = bytes.len() / 8;
        assert!(
            bytes.len() % 8 == 0 && self.filled + n <= self.len * T::WORDS,
            "more words than the fill was made for"
        );
        let words = self.ptr.as_ptr().cast::<u64>();
        for (i, c) in bytes.chunks_exact(8).enumerate() {
            let w = u64::from_le_bytes(c.try_into().unwrap());
            // SAFETY: `filled + i < len · T::WORDS` (asserted above), so the word lies inside
            // the allocation; a T is `T::WORDS` u64-sized atomics with no padding (an
            // `AtomicU64` has a `u64`'s size, alignment and representation), so writing
            // a `u64` there initialises one of them.
            unsafe { words.add(self.filled + i).write(w) };
            self.last = Some(w);
        }
        self.filled += n;
    }

    /// The array: the words written, then zeros to the end of the last element.
    pub(crate) fn finish(self) -> Box<[T]> {
        let this = std::mem::ManuallyDrop::new(self);
        let words = this.ptr.as_ptr().cast::<u64>();
        for i in this.filled..this.len * T::WORDS {
            // SAFETY: inside the allocation, as in `push_le_bytes`.
            unsafe { words.add(i).write(0) };
        }
        if this.len == 0 {
            return Box::new([]);
        }
        // SAFETY: `ptr` is a live allocation of exactly `Layout::array::<T>(len)` (the layout
        // `Box<[T]>` frees with), every word of it is now written (the first `filled` by
        // `push_le_bytes`, the rest above), and any bytes are a valid T (`ZeroValid`:
        // atomics of plain integers). Ownership passes to the Box; `this` is not dropped.
        unsafe {
            Box::from_raw(std::ptr::slice_from_raw_parts_mut(
                this.ptr.as_ptr(),
                this.len,
            ))
        }
    }
}

#[cfg(not(loom))]
#[allow(unsafe_code)]
impl<T: WordElement> Drop for WordFill<T> {
    fn drop(&mut self) {
        if self.len > 0 {
            let layout = std::alloc::Layout::array::<T>(self.len).expect("checked by new");
            // SAFETY: allocated by `new` with this layout and not handed to a Box (`finish`
            // does not drop); nothing reads the words, written or not.
            unsafe { std::alloc::dealloc(self.ptr.as_ptr().cast(), layout) };
        }
    }
}

/// Under loom the atomics must be made by loom's constructors: the words are collected,
/// then turned into elements.
#[cfg(loom)]
pub(crate) struct WordFill<T: WordElement> {
    words: Vec<u64>,
    len: usize,
    _element: std::marker::PhantomData<T>,
}

#[cfg(loom)]
impl<T: WordElement> WordFill<T> {
    pub(crate) fn new(words: usize) -> Option<Self> {
        Some(Self {
            words: Vec::new(),
            len: words.div_ceil(T::WORDS),
            _element: std::marker::PhantomData,
        })
    }

    pub(crate) fn words(&self) -> usize {
        self.words.len()
    }

    pub(crate) fn last(&self) -> Option<u64> {
        self.words.last().copied()
    }

    pub(crate) fn push_le_bytes(&mut self, bytes: &[u8]) {
        self.words.extend(
            bytes
                .chunks_exact(8)
                .map(|c| u64::from_le_bytes(c.try_into().unwrap())),
        );
        assert!(self.words.len() <= self.len * T::WORDS);
    }

    pub(crate) fn finish(mut self) -> Box<[T]> {
        self.words.resize(self.len * T::WORDS, 0);
        self.words
            .chunks_exact(T::WORDS)
            .map(T::from_words)
            .collect()
    }
}

/// A zeroed array. Large ones are, on Linux, advised onto 2 MiB transparent huge pages
/// before anything touches them: a lookup in a filter far larger than the TLB's reach
/// otherwise pays a page walk on top of its cache miss (the figures, with the command that
/// measures them: `benches/README.md`; the advice itself: `tests/huge_pages.rs`).
///
/// So an array of [`Line`]s is allocated uninitialised, advised, and only then zeroed. The
/// standard `alloc_zeroed` cannot be used for it: for an alignment above 16 (a `Line` is 64)
/// it is `alloc` plus a `memset`, which faults every page in as 4 KiB before the advice, and
/// the array then gets no huge page (`tests/huge_pages.rs`).
#[cfg(not(loom))]
#[allow(unsafe_code)]
fn zeroed_slice<T: ZeroValid>(len: usize) -> Box<[T]> {
    use std::alloc::{Layout, alloc, alloc_zeroed, handle_alloc_error};
    /// Below this the TLB covers the array anyway.
    const HUGE_PAGE_WORTHWHILE: usize = 4 << 20;
    /// The largest alignment for which the standard `alloc_zeroed` is `calloc`.
    const CALLOC_ALIGN: usize = 16;

    let Ok(layout) = Layout::array::<T>(len) else {
        panic!("{len} elements overflow the address space") // bounded by params::MAX_BITS first
    };
    if layout.size() == 0 {
        return Box::new([]); // `len` is 0: neither element type is zero-sized
    }
    let huge = layout.size() >= HUGE_PAGE_WORTHWHILE;
    let ptr = if huge && layout.align() > CALLOC_ALIGN {
        // SAFETY: the layout has a non-zero size (checked above).
        let ptr = unsafe { alloc(layout) };
        if !ptr.is_null() {
            advise_huge_pages(ptr, layout.size());
            // SAFETY: `ptr` is a live, writable allocation of `layout.size()` bytes.
            unsafe { ptr.write_bytes(0, layout.size()) };
        }
        ptr
    } else {
        // `calloc`: a large array gets fresh pages, zero and untouched, so advising them
        // afterwards is still in time (and they are only faulted in as they are used).
        // SAFETY: the layout has a non-zero size (checked above).
        let ptr = unsafe { alloc_zeroed(layout) };
        if huge && !ptr.is_null() {
            advise_huge_pages(ptr, layout.size());
        }
        ptr
    }
    .cast::<T>();
    if ptr.is_null() {
        handle_alloc_error(layout);
    }
    // SAFETY: `ptr` is a live allocation of exactly `layout` (an array of `len` T, the layout
    // `Box<[T]>` frees with, alignment included), every byte of it is zero (from
    // `alloc_zeroed` or written above), and all-zero bytes are a valid T (the
    // `ZeroValid` bound: AtomicU64 and arrays of it). Ownership passes to the Box.
    unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(ptr, len)) }
}

#[cfg(loom)]
fn zeroed_slice<T: ZeroValid + LoomZero>(len: usize) -> Box<[T]> {
    (0..len).map(|_| T::zero()).collect()
}

/// A zero value, or one of given words, built with loom's constructors (loom's atomics must
/// be created through them).
#[cfg(loom)]
pub(crate) trait LoomZero {
    fn zero() -> Self;
    fn from_words(words: &[u64]) -> Self;
}

#[cfg(loom)]
impl LoomZero for AtomicU64 {
    fn zero() -> Self {
        AtomicU64::new(0)
    }
    fn from_words(words: &[u64]) -> Self {
        AtomicU64::new(words[0])
    }
}

#[cfg(loom)]
impl LoomZero for Line {
    fn zero() -> Self {
        Line(std::array::from_fn(|_| AtomicU64::new(0)))
    }
    fn from_words(words: &[u64]) -> Self {
        Line(std::array::from_fn(|i| AtomicU64::new(words[i])))
    }
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
/// bits, so the group's DRAM misses overlap instead of queueing one after another: out of
/// cache a batch lookup pays a fraction of one memory latency per key, not one (bench:
/// `contains_many_{hit,miss}/*` in benches/core.rs; figures in `benches/README.md`).
#[inline(always)]
#[cfg(all(target_arch = "x86_64", not(loom)))]
#[allow(unsafe_code)]
pub(crate) fn prefetch(word: &AtomicU64) {
    use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
    // SAFETY: PREFETCHT0 is only a hint: it never faults, even on an invalid address, and has
    // no architecturally visible effect. SSE, which it belongs to, is part of the x86_64
    // baseline, so the instruction exists on every CPU this code compiles for.
    unsafe { _mm_prefetch::<_MM_HINT_T0>(word.as_ptr().cast::<i8>()) }
}

#[inline(always)]
#[cfg(not(all(target_arch = "x86_64", not(loom))))]
pub(crate) fn prefetch(word: &AtomicU64) {
    // No stable safe prefetch elsewhere: a plain load still overlaps with the other keys'
    // loads in the out-of-order window, which is most of the benefit.
    let _ = word.load(crate::sync::Ordering::Relaxed);
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::BitVector;

    /// A block is one cache line only if the array starts on one, small or `mmap`-sized.
    #[test]
    fn every_line_starts_on_a_cache_line() {
        for words in [8, 1_000, 1 << 20] {
            let bits = BitVector::zeroed(words);
            assert_eq!(bits.lines.as_ptr() as usize % 64, 0, "{words} words");
        }
    }
}
