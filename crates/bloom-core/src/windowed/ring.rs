//! Where the ring's generations lie in memory ([`RingLayout`]): one allocation per
//! generation, or one allocation holding line `i` of every generation side by side.
//!
//! # Rules
//!
//! * **Same bits, either way.** Generation `g`'s line `i` is the line a plain filter of
//!   the ring's shape would hold at `i`: a key sets and tests the same bits, a save writes
//!   the same file (`tests/windowed_ring_layout.rs`
//!   `both_layouts_answer_alike_and_write_the_same_file`), and either layout reads any
//!   file.
//! * **Interleaved: a key's lines are one run.** Line `i` of generation `g` is line
//!   `i·(N + 1) + g` of one array, so the `N` lines a lookup tests are adjacent: one
//!   stream of `N·64` bytes, fetched together, where separate generations cost `N` cache
//!   misses that overlap only in part (`benches/windowed.rs`).
//! * **Interleaved: allocated whole, with the filter** (zeroed: the system maps its pages
//!   as keys first touch them, and a lookup reads no allocation state). So a new filter is
//!   interleaved by default only when its ring takes at least [`INTERLEAVE_FROM_BYTES`]
//!   (per-user filters, far smaller, stay separate and hold only the generations written),
//!   and a reader returns
//!   a ring separate, as the file stores it: reading costs what the bytes back and copies
//!   nothing (`tests/crafted_files.rs`
//!   `a_ring_is_read_separate_and_interleaved_on_request`); a service that keeps the ring
//!   for lookups interleaves it once with [`WindowedFilter::into_ring_layout`]. A one-shot
//!   pass over a stream (`bloom dedup --window`) stays separate: its lookups are batches,
//!   prefetched, and an interleaved first run would touch the whole ring's pages.
//! * **Clearing a generation is a strided clear** of every `(N + 1)`-th line, each word
//!   stored 0 one at a time, as a separate generation's `clear` does: a lookup reading
//!   the other generations' lines meanwhile reads words no clear touches
//!   (`tests/loom_windowed.rs` models both layouts).
//! * **Interleaved lookups read no `written` mark.** A generation in a lookup's range that
//!   took no key since it was last cleared is zero lines, so testing it answers as skipping
//!   it would (`WindowedFilter::run_holds`; `both_layouts_answer_alike_and_write_the_same_file`,
//!   the window's tests and the loom models run on both layouts).
//! * Classic filters have no lines: they are always separate.

use std::borrow::Cow;
use std::sync::OnceLock;

use crate::bit_vector::{BitVector, Line};
use crate::builder::Parts as Shape;
use crate::hasher::KeyHash;
use crate::layout::{for_each_in_line, reduce};
use crate::params::BLOCK_BITS;
use crate::{BloomFilter, Layout};

use super::builder::MAX_GENERATIONS;
use super::filter::WindowedFilter;

/// How a [`WindowedFilter`]'s generations lie in memory. Both answer alike and save the
/// same file; they differ in speed and in when memory is taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RingLayout {
    /// One allocation per generation, made when a key first goes into it: memory as used
    /// (what many small filters, one per user, want). A lookup's `N` lines are in `N`
    /// allocations.
    Separate,
    /// One allocation for the whole ring, made with the filter, with line `i` of every
    /// generation side by side: a lookup's `N` lines are adjacent, so out of cache it costs
    /// about one miss, not `N`. Not for the Classic layout.
    Interleaved,
}

/// A new filter whose ring (`N + 1` generations) takes at least this many bytes is
/// [`RingLayout::Interleaved`] unless the builder says otherwise: a ring that outgrows a
/// core's own cache, where a lookup's `N` misses are what it costs.
pub const INTERLEAVE_FROM_BYTES: usize = 1 << 20;

impl RingLayout {
    /// The layout a filter of `layout` whose ring takes `ring_bytes` gets when none is
    /// asked for.
    pub(crate) fn default_for(layout: Layout, ring_bytes: usize) -> Self {
        if layout != Layout::Classic && ring_bytes >= INTERLEAVE_FROM_BYTES {
            Self::Interleaved
        } else {
            Self::Separate
        }
    }
}

/// The generations' storage.
pub(super) enum Generations {
    /// Ring index `g`'s generation is `cells[g]`, allocated at its first key.
    Separate(Box<[OnceLock<BloomFilter>]>),
    /// Ring index `g`'s line `i` is line `i·ring + g` of the array, allocated with the
    /// filter (zeroed: the system maps its pages as keys first touch them).
    Interleaved(BitVector),
}

impl Generations {
    /// Storage for `ring` generations of `shape`, holding `stored` (a file's generations
    /// stored with their bits, `None`: empty), laid out as `layout` (which the caller has
    /// checked is possible: not Classic).
    pub(super) fn new(layout: RingLayout, shape: &Shape, stored: Vec<Option<BloomFilter>>) -> Self {
        match layout {
            RingLayout::Separate => Self::Separate(
                stored
                    .into_iter()
                    .map(|g| g.map_or_else(OnceLock::new, OnceLock::from))
                    .collect(),
            ),
            RingLayout::Interleaved => {
                let ring = stored.len();
                let all = BitVector::zeroed(shape.slots.div_ceil(64) as usize * ring);
                for (g, generation) in stored.iter().enumerate() {
                    let Some(generation) = generation else {
                        continue;
                    };
                    for i in 0..(shape.slots / BLOCK_BITS) as usize {
                        let from = generation.line(i);
                        let to = (i * ring + g) * 8;
                        for (w, word) in from.0.iter().enumerate() {
                            all.or_word(to + w, word.load(crate::sync::Ordering::Relaxed));
                        }
                    }
                }
                Self::Interleaved(all)
            }
        }
    }

    /// The generations as plain filters, by ring index, `None` for those `written` does not
    /// mark (empty): a separate ring's own, an interleaved ring's copied out.
    pub(super) fn into_stored(self, shape: &Shape, written: &[bool]) -> Vec<Option<BloomFilter>> {
        match self {
            Self::Separate(cells) => cells
                .into_vec()
                .into_iter()
                .zip(written)
                .map(|(cell, &w)| cell.into_inner().filter(|_| w))
                .collect(),
            Self::Interleaved(all) => {
                let ring = written.len();
                (0..ring)
                    .map(|slot| written[slot].then(|| gather(&all, ring, slot, shape)))
                    .collect()
            }
        }
    }

    pub(super) fn ring_layout(&self) -> RingLayout {
        match self {
            Self::Separate(_) => RingLayout::Separate,
            Self::Interleaved(_) => RingLayout::Interleaved,
        }
    }
}

/// Ring index `slot`'s generation of an interleaved array `all`, copied out as a plain filter
/// of `shape` (its line `i` is the array's line `i·ring + slot`).
fn gather(all: &BitVector, ring: usize, slot: usize, shape: &Shape) -> BloomFilter {
    let words = (0..shape.slots.div_ceil(64) as usize)
        .map(|w| all.load(((w / 8) * ring + slot) * 8 + w % 8));
    BloomFilter::from_parts(shape.clone(), Some(BitVector::from_words(words)))
}

impl WindowedFilter {
    /// Ring index `slot`'s line `index`, if that generation was ever allocated (Blocked and
    /// SplitBlock).
    #[inline(always)]
    pub(super) fn line(&self, slot: usize, index: usize) -> Option<&Line> {
        match &self.generations {
            Generations::Separate(cells) => cells[slot].get().map(|g| g.line(index)),
            Generations::Interleaved(all) => Some(all.block(index * self.ring_len() + slot)),
        }
    }

    /// Allocates ring index `slot`'s generation if it never was: before a key goes in (and
    /// before the `written` mark that lets lookups read it).
    pub(super) fn allocate(&self, slot: usize) {
        match &self.generations {
            Generations::Separate(cells) => {
                cells[slot].get_or_init(|| BloomFilter::from_parts(self.shape.clone(), None));
            }
            // Allocated with the filter.
            Generations::Interleaved(_) => {}
        }
    }

    /// Adds the key hashed to `h` to ring index `slot`'s generation, which
    /// [`allocate`](Self::allocate) allocated; `true` if it was not there before.
    #[inline]
    pub(super) fn insert_into(&self, slot: usize, h: KeyHash) -> bool {
        match &self.generations {
            Generations::Separate(cells) => cells[slot]
                .get()
                .is_some_and(|generation| generation.insert_hash(h)),
            Generations::Interleaved(all) => {
                // As `BloomFilter::insert_hash` on the generation's own line.
                let index = reduce(h.h1, self.num_blocks()) as usize;
                let line = index * self.ring_len() + slot;
                if self.line_holds(all.block(line), h) {
                    return false;
                }
                for_each_in_line(self.shape.layout, h, self.shape.hashes, |bit| {
                    all.or_word(line * 8 + (bit >> 6), 1u64 << (bit & 63));
                });
                true
            }
        }
    }

    /// Whether ring index `slot`'s generation holds the key hashed to `h` (empty if never
    /// allocated).
    #[inline]
    pub(super) fn generation_holds(&self, slot: usize, h: KeyHash) -> bool {
        match &self.generations {
            Generations::Separate(cells) => cells[slot].get().is_some_and(|g| g.contains_hash(h)),
            Generations::Interleaved(_) => {
                let index = reduce(h.h1, self.num_blocks()) as usize;
                self.line(slot, index)
                    .is_some_and(|line| self.line_holds(line, h))
            }
        }
    }

    /// Whether `line` holds every bit of the key hashed to `h`.
    #[inline(always)]
    fn line_holds(&self, line: &Line, h: KeyHash) -> bool {
        self.lines_hold([line], h)
    }

    /// Whether any of `lines` (Blocked or SplitBlock, all of the ring's shape) holds every bit
    /// of the key hashed to `h`, tested in one SIMD call: the one place a windowed lookup picks
    /// its layout's test.
    #[inline(always)]
    pub(super) fn lines_hold<'a>(
        &self,
        lines: impl IntoIterator<Item = &'a Line>,
        h: KeyHash,
    ) -> bool {
        match self.shape.layout {
            Layout::SplitBlock => self.probe.any_contains_split(lines, h.split_word()),
            _ => self.probe.any_contains(lines, h, self.shape.hashes),
        }
    }

    /// Starts fetching the key's line in ring index `slot`'s generation.
    #[inline(always)]
    pub(super) fn prefetch_into(&self, slot: usize, h: KeyHash) {
        match &self.generations {
            Generations::Separate(cells) => {
                if let Some(g) = cells[slot].get() {
                    g.prefetch(h);
                }
            }
            Generations::Interleaved(all) => {
                let index = reduce(h.h1, self.num_blocks()) as usize;
                all.prefetch((index * self.ring_len() + slot) * 8);
            }
        }
    }

    /// Clears ring index `slot`'s generation (nothing to do if it was never allocated).
    pub(super) fn clear_generation(&self, slot: usize) {
        match &self.generations {
            Generations::Separate(cells) => {
                if let Some(g) = cells[slot].get() {
                    g.clear();
                }
            }
            Generations::Interleaved(all) => all.clear_lines(slot, self.ring_len()),
        }
    }

    /// Ring index `slot`'s generation as a plain filter (`None`: never allocated): itself
    /// when separate, a copy of its lines when interleaved (for statistics and saves).
    pub(super) fn generation_at(&self, slot: usize) -> Option<Cow<'_, BloomFilter>> {
        match &self.generations {
            Generations::Separate(cells) => cells[slot].get().map(Cow::Borrowed),
            // A generation that took no key since its last clear is zero lines: no copy.
            Generations::Interleaved(all) => self
                .ring_has_keys(slot)
                .then(|| Cow::Owned(gather(all, self.ring_len(), slot, &self.shape))),
        }
    }
}

/// `epoch mod ring` without a division (a 64-bit `div` is tens of cycles, as much as the
/// rest of an in-cache lookup): Lemire, Kaser and Kurz, "Faster remainder by direct
/// computation" (2019), whose 128-bit `M = ⌊(2¹²⁸ − 1)/d⌋ + 1` gives the exact remainder of
/// every 64-bit numerator (`ring_index_is_the_remainder` checks it against `%`). The `M` of
/// every ring size is computed at compile time, so a filter stores none.
#[inline(always)]
pub(super) fn ring_index(epoch: u64, ring: usize) -> usize {
    let low = REMAINDER_MAGIC[ring].wrapping_mul(u128::from(epoch));
    let d = ring as u128;
    let bottom = ((low as u64) as u128 * d) >> 64;
    let top = (low >> 64) * d;
    ((bottom + top) >> 64) as usize
}

/// `M` for each ring size `d` from 2 to `MAX_GENERATIONS + 1` (0 below: not a ring).
static REMAINDER_MAGIC: [u128; MAX_GENERATIONS as usize + 2] = {
    let mut m = [0u128; MAX_GENERATIONS as usize + 2];
    let mut d = 2;
    while d < m.len() {
        m[d] = u128::MAX / d as u128 + 1;
        d += 1;
    }
    m
};

#[cfg(test)]
mod tests {
    use super::ring_index;

    #[test]
    fn ring_index_is_the_remainder() {
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        for ring in 2..=65u64 {
            let edges = [
                0,
                1,
                ring - 1,
                ring,
                ring + 1,
                u64::MAX,
                u64::MAX - 1,
                1 << 63,
            ];
            for epoch in edges.into_iter().chain((0..10_000).map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x >> (x % 64)
            })) {
                assert_eq!(
                    ring_index(epoch, ring as usize),
                    (epoch % ring) as usize,
                    "{epoch} mod {ring}"
                );
            }
        }
    }
}
