//! [`WindowedFilter`]: the ring of generations, which one a key goes to and which ones a
//! lookup reads, and the rotation.

use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;

use crate::bit_vector::Line;
use crate::builder::Parts as Shape;
use crate::hasher::{KeyHash, KeyHasher};
use crate::layout::reduce;
use crate::params::BLOCK_BITS;
use crate::probe::Probe;
use crate::sync::{AtomicU64, Mutex, Ordering, fence};
use crate::{BloomFilter, Key, Layout};

use super::builder::{Window, WindowedBuilder, generation_rate};
use super::clock::Clock;
use super::ring::{Generations, RingLayout, ring_index};

/// What a windowed filter was built with.
#[derive(Clone)]
pub(crate) struct Parts {
    pub(crate) window: Window,
    /// `T`: milliseconds (a time window) or inserts (a count window) per generation.
    pub(crate) period: u64,
    pub(crate) expected_items: u64,
    pub(crate) fpr: f64,
    pub(crate) clock: Arc<dyn Clock>,
}

/// A filter of the keys **seen within the last window**: by time (the last 24 hours) or by
/// count (the last 10 million inserts). A key inserted within the window is always found;
/// older keys fade out, so the false-positive rate stays at most the sized rate however
/// long the stream runs.
///
/// `N` generations (plain Bloom filters) each hold the keys of one period
/// `T = W / (N − 1)`, and one more, the spare, is cleared ahead of its turn. A key is found
/// from its insert until between `W` and `W + T` later (the guarantee and its proof: the
/// module docs of `windowed`). `insert` and `contains` take `&self` and are lock-free;
/// the insert that crosses into a new period clears the spare (one `memset` of a
/// generation) while lookups go on. A generation is allocated when a key first goes into
/// it (the inserts into it meanwhile wait for that; lookups never do): a filter new or
/// loaded from a file holds only the generations that took keys; a large ring is
/// interleaved (a key's lines side by side, the ring allocated whole with the filter:
/// [`RingLayout`]).
///
/// ```
/// use bloom_core::windowed::{Window, WindowedFilter};
///
/// let recent = WindowedFilter::builder(Window::Count(1_000))
///     .expected_items(1_000)
///     .false_positive_rate(0.01)
///     .seed(1) // a fixed hash key: the last line below is then no false positive
///     .build()?;
/// recent.insert("https://example.com/a");
/// assert!(recent.contains("https://example.com/a"));
/// for i in 0..1_400u64 {
///     recent.insert(&i); // 1,400 inserts later (more than W + T = 1,334) it is gone
/// }
/// assert!(!recent.contains("https://example.com/a"));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct WindowedFilter {
    /// `N + 1` generations; epoch `e`'s keys are in ring index `e mod (N + 1)`. Rule: a
    /// separate generation is allocated when a key first goes into it, never before, so a
    /// file's generations stored empty cost nothing to read (`tests/crafted_files.rs`
    /// `a_ring_of_empty_generations_sized_huge_loads_without_allocating_them`; a reader
    /// returns a ring separate), and once allocated it stays (a rotation clears it). An empty
    /// cell answers as an empty generation of `shape`. An interleaved ring is one zeroed
    /// array, allocated with the filter (`ring.rs`). (`OnceLock` is std's under loom too:
    /// the allocation happens before the `written` mark, which loom models.)
    pub(super) generations: Generations,
    /// What every generation is: its m, k, layout, hash key, capacity and rate.
    pub(super) shape: Shape,
    /// The newest epoch: inserts go to its generation. Only [`advance_to`](Self::advance_to)
    /// raises it, under `rotation`.
    pub(super) epoch: AtomicU64,
    /// Inserts so far: a count window's clock.
    inserts: AtomicU64,
    /// Per generation: 1 once a key was inserted since it was last cleared. A lookup skips
    /// the generations still empty (never touching their memory), which a new filter's are
    /// all but one (`a_key_is_found_for_the_window_and_gone_after_one_more_period`).
    written: Box<[AtomicU64]>,
    /// Held by the one thread rotating; never by a lookup.
    rotation: Mutex<()>,
    /// How every generation's line is tested (they are all of one size): a lookup finds the
    /// key's line index once and tests that line in each generation with it.
    pub(super) probe: Probe,
    pub(super) parts: Parts,
}

impl WindowedFilter {
    /// Starts configuring a filter that remembers keys for `window`.
    ///
    /// ```
    /// use std::time::Duration;
    /// use bloom_core::windowed::{Window, WindowedFilter};
    ///
    /// let f = WindowedFilter::builder(Window::Time(Duration::from_secs(7 * 86_400)))
    ///     .expected_items(500)
    ///     .false_positive_rate(0.01)
    ///     .build()?;
    /// assert_eq!(f.window(), Window::Time(Duration::from_secs(7 * 86_400)));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn builder(window: Window) -> WindowedBuilder {
        WindowedBuilder::new(window)
    }

    /// Assembles a filter from validated parts: every generation is of `shape`, and
    /// `generations` holds those already allocated (a file's generations stored with their
    /// bits); `state` is `(epoch, inserts)` from a file, or `None` for a new, empty filter.
    ///
    /// `written` says, per generation, whether it may hold keys (a file's generations
    /// stored with their bits); `None`: none does (a new filter).
    pub(crate) fn from_parts(
        parts: Parts,
        shape: Shape,
        generations: Vec<Option<BloomFilter>>,
        state: Option<(u64, u64)>,
        written: Option<Vec<bool>>,
        ring_layout: RingLayout,
    ) -> Self {
        let (epoch, inserts) = state.unwrap_or_else(|| {
            let epoch = match parts.window {
                Window::Time(_) => parts.clock.now_millis() / parts.period,
                Window::Count(_) => 0,
            };
            (epoch, 0)
        });
        // Generations not written are empty and untouched: no scan or clear faults their
        // pages in.
        let written = match written {
            Some(written) => written
                .into_iter()
                .map(|w| AtomicU64::new(u64::from(w)))
                .collect(),
            None => generations.iter().map(|_| AtomicU64::new(0)).collect(),
        };
        let shape_bytes = shape.slots.div_ceil(64) as usize * 8;
        let filter = Self {
            written,
            generations: Generations::new(ring_layout, &shape, generations),
            shape,
            epoch: AtomicU64::new(epoch),
            inserts: AtomicU64::new(inserts),
            rotation: Mutex::new(()),
            probe: Probe::for_filter_of(shape_bytes),
            parts,
        };
        // A file saved a while ago: drop the generations that expired since. Nothing else
        // holds the filter yet, so a generation not written holds no bit and is left as it is.
        if let Window::Time(_) = filter.parts.window {
            filter.rotate(filter.clock_epoch(), false);
        }
        filter
    }

    /// Lines per generation (Blocked and SplitBlock).
    #[inline(always)]
    pub(super) fn num_blocks(&self) -> u64 {
        self.shape.slots / BLOCK_BITS
    }

    fn ring(&self) -> u64 {
        self.written.len() as u64
    }

    /// Epoch `epoch`'s ring index.
    pub(super) fn slot(&self, epoch: u64) -> usize {
        ring_index(epoch, self.ring_len())
    }

    /// Epoch `epoch`'s ring index, its generation allocated now if it never was: for a key
    /// about to go in.
    pub(super) fn slot_to_fill(&self, epoch: u64) -> usize {
        let slot = self.slot(epoch);
        self.allocate(slot);
        slot
    }

    /// How the generations lie in memory.
    pub fn ring_layout(&self) -> RingLayout {
        self.generations.ring_layout()
    }

    /// The same filter (keys, epoch, inserts, window, clock) with its generations laid out
    /// as `layout`: one copy of the generations that hold keys (none if it is already so
    /// laid out). A filter read from a file is separate, as the file stores it; a service
    /// that keeps a large ring for lookups interleaves it once after reading it.
    /// Interleaving a Classic filter is [`BuildError::InterleavedClassic`](crate::BuildError).
    /// `tests/windowed_ring_layout.rs` `a_ring_changes_layout_and_keeps_everything`.
    ///
    /// ```
    /// use bloom_core::windowed::{RingLayout, Window, WindowedFilter};
    ///
    /// let f = WindowedFilter::builder(Window::Count(100)).expected_items(100).false_positive_rate(0.01).build()?;
    /// f.insert("a");
    /// let read = WindowedFilter::from_bytes(&f.to_bytes())?;
    /// assert_eq!(read.ring_layout(), RingLayout::Separate);
    /// let fast = read.into_ring_layout(RingLayout::Interleaved)?;
    /// assert!(fast.contains("a") && fast.ring_layout() == RingLayout::Interleaved);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn into_ring_layout(self, layout: RingLayout) -> Result<Self, crate::BuildError> {
        if layout == RingLayout::Interleaved && self.shape.layout == Layout::Classic {
            return Err(crate::BuildError::InterleavedClassic);
        }
        if layout == self.ring_layout() {
            return Ok(self);
        }
        // Only the generations written since their last clear hold bits; the others are
        // empty and stay unallocated.
        let written: Vec<bool> = (0..self.ring_len())
            .map(|slot| self.ring_has_keys(slot))
            .collect();
        let stored = self.generations.into_stored(&self.shape, &written);
        Ok(Self {
            generations: Generations::new(layout, &self.shape, stored),
            written: written
                .iter()
                .map(|&w| AtomicU64::new(u64::from(w)))
                .collect(),
            shape: self.shape,
            epoch: self.epoch,
            inserts: self.inserts,
            rotation: self.rotation,
            probe: self.probe,
            parts: self.parts,
        })
    }

    /// The hash every generation derives a key's bits from.
    pub(super) fn hasher(&self) -> &KeyHasher {
        &self.shape.hasher
    }

    /// Whether epoch `epoch`'s generation may hold keys.
    #[inline]
    pub(super) fn is_written(&self, epoch: u64) -> bool {
        self.written[ring_index(epoch, self.ring_len())].load(Ordering::Acquire) != 0
    }

    /// Marks epoch `epoch`'s generation as holding keys, before a key goes in: a lookup that
    /// starts after the insert returned sees the mark.
    #[inline]
    pub(super) fn mark_written(&self, epoch: u64) {
        let mark = &self.written[ring_index(epoch, self.ring_len())];
        if mark.load(Ordering::Relaxed) == 0 {
            mark.store(1, Ordering::Release);
        }
    }

    /// `N`, the generations a lookup reads.
    pub(super) fn n(&self) -> u64 {
        self.ring() - 1
    }

    /// The epoch the clock is in (a time window).
    pub(super) fn clock_epoch(&self) -> u64 {
        self.parts.clock.now_millis() / self.parts.period
    }

    /// Adds `key` as seen now. Returns `true` if it was not in the current generation.
    ///
    /// ```
    /// use bloom_core::windowed::{Window, WindowedFilter};
    ///
    /// let f = WindowedFilter::builder(Window::Count(100)).expected_items(100).false_positive_rate(0.01).build()?;
    /// assert!(f.insert("a"));
    /// assert!(!f.insert("a"));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn insert<K: Key + ?Sized>(&self, key: &K) -> bool {
        match self.parts.window {
            Window::Count(_) => {
                // A key `W` inserts old or more may land in a recycled generation: a false
                // positive at worst, never a lost key.
                let epoch = self.tick();
                let slot = self.slot_to_fill(epoch);
                self.mark_written(epoch);
                self.insert_into(slot, self.hasher().hash(key))
            }
            Window::Time(_) => loop {
                let now = self.clock_epoch();
                if now > self.epoch.load(Ordering::Acquire) {
                    self.advance_to(now);
                }
                let epoch = self.epoch.load(Ordering::SeqCst);
                let slot = self.slot_to_fill(epoch);
                self.mark_written(epoch);
                let added = self.insert_into(slot, self.hasher().hash(key));
                // Orders the insert's bits before the re-reads: if a rotation began before
                // them, they see it (see the module docs).
                fence(Ordering::SeqCst);
                if self.epoch.load(Ordering::SeqCst) == epoch && self.clock_epoch() <= epoch {
                    return added;
                }
                // A rotation ran meanwhile, or the period ended: insert again, into the
                // generation of now.
            },
        }
    }

    /// Whether `key` was inserted within the window (always, if it was; and, with the
    /// sized probability, for a key that was not).
    ///
    /// ```
    /// use bloom_core::windowed::{Window, WindowedFilter};
    ///
    /// let f = WindowedFilter::builder(Window::Count(100)).expected_items(100).false_positive_rate(0.01).build()?;
    /// f.insert(&7u64);
    /// assert!(f.contains(&7u64));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn contains<K: Key + ?Sized>(&self, key: &K) -> bool {
        let (oldest, newest) = self.lookup_range();
        // Every generation has the same size, layout and hash key: one hash serves them all.
        let h = self.hasher().hash(key);
        self.holds_in_range(h, oldest, newest)
    }

    /// Whether a generation of epochs `oldest..=newest` holds the key hashed to `h`: the tail
    /// of `contains` and of the batches. An interleaved ring tests the key's run of lines
    /// directly ([`run_holds`](Self::run_holds)); separate generations, those written
    /// ([`in_range`](Self::in_range), [`any_holds`](Self::any_holds)).
    #[inline(always)]
    pub(super) fn holds_in_range(&self, h: KeyHash, oldest: u64, newest: u64) -> bool {
        match &self.generations {
            Generations::Interleaved(all) if self.shape.layout != Layout::Classic => {
                self.run_holds(all, self.ring_len(), h, oldest, newest)
            }
            _ => self.any_holds(h, self.in_range(oldest, newest)),
        }
    }

    /// [`holds_in_range`](Self::holds_in_range) on an interleaved ring: the key's lines of
    /// epochs `oldest..=newest` are one run of the `ring` lines at `index · ring` (two, where
    /// the range wraps around the ring), tested without reading the `written` marks. Rule: in
    /// an interleaved ring a generation in a lookup's range that took no key since it was
    /// last cleared is all zero (a rotation clears the spare before it enters any range, a
    /// reader stores empty generations as zero lines), so it answers "absent" as skipping it
    /// would (`tests/windowed_ring_layout.rs` `both_layouts_answer_alike_and_write_the_same_file`).
    #[inline(always)]
    fn run_holds(
        &self,
        all: &crate::bit_vector::BitVector,
        ring: usize,
        h: KeyHash,
        oldest: u64,
        newest: u64,
    ) -> bool {
        if oldest > newest {
            return false;
        }
        let count = (newest - oldest + 1) as usize;
        let last = ring_index(newest, self.ring_len());
        let index = reduce(h.h1, self.num_blocks()) as usize;
        let run = all.blocks(index * ring, ring);
        let test = |lines: &[Line]| self.lines_hold(lines, h);
        if count <= last + 1 {
            test(&run[last + 1 - count..=last])
        } else {
            // Wrapped: the newest epochs at the run's start, the oldest at its end.
            test(&run[..=last]) | test(&run[ring - (count - last - 1)..])
        }
    }

    /// The epochs a lookup starting now reads, `(oldest, newest)`: up to the stored epoch
    /// `E`, and back to `max(E, C) − N + 1`, `C` the clock's epoch (a time window: no insert
    /// may have rotated since). Each is read once; `contains` and the batches
    /// (`windowed/batch.rs`) both take their range from here.
    #[inline(always)]
    pub(super) fn lookup_range(&self) -> (u64, u64) {
        let newest = self.epoch.load(Ordering::Acquire);
        let mut oldest = (newest + 1).saturating_sub(self.n());
        if let Window::Time(_) = self.parts.window {
            oldest = oldest.max((self.clock_epoch() + 1).saturating_sub(self.n()));
        }
        (oldest, newest)
    }

    /// Whether any of `generations` holds the key hashed to `h`: the tail of every lookup.
    /// The key's line is at the same index in every generation: found once, and tested in
    /// each generation, a batch of up to eight lines at a time, without stopping at a hit
    /// (`Probe::any_contains`: the loads overlap, and which generation holds the key is no
    /// branch to mispredict). Guarded by `tests/windowed.rs` and `tests/windowed_batch.rs`.
    #[inline(always)]
    pub(super) fn any_holds(&self, h: KeyHash, slots: impl Iterator<Item = usize>) -> bool {
        if self.shape.layout == Layout::Classic {
            let mut slots = slots;
            return slots.any(|slot| self.generation_holds(slot, h));
        }
        let index = reduce(h.h1, self.num_blocks()) as usize;
        let test = |lines: &[Option<&Line>]| self.lines_hold(lines.iter().flatten().copied(), h);
        let mut batch = [None; 8];
        let mut queued = 0;
        let mut found = false;
        for slot in slots {
            batch[queued] = self.line(slot, index);
            queued += 1;
            if queued == batch.len() {
                found |= test(&batch);
                queued = 0;
            }
        }
        found | test(&batch[..queued])
    }

    /// The ring indices of the generations of epochs `oldest..=newest` that may hold keys
    /// (written since they were last cleared, and so allocated), newest first: stepping back
    /// around the ring, with one division, not one per step.
    #[inline(always)]
    pub(super) fn in_range(&self, oldest: u64, newest: u64) -> impl Iterator<Item = usize> + '_ {
        let ring = self.ring_len();
        let mut at = ring_index(newest, self.ring_len());
        (oldest..=newest).filter_map(move |_| {
            let this = at;
            at = if at == 0 { ring - 1 } else { at - 1 };
            (self.written[this].load(Ordering::Acquire) != 0).then_some(this)
        })
    }

    /// [`contains`](Self::contains), then [`insert`](Self::insert) if it was not seen: `true`
    /// if `key` was seen within the window (its time is not renewed), `false` if it is new
    /// (and is now remembered). What a de-duplicator asks. A count window counts every call,
    /// seen or not. Two threads racing with the same new key may both get `false`.
    ///
    /// ```
    /// use bloom_core::windowed::{Window, WindowedFilter};
    ///
    /// let f = WindowedFilter::builder(Window::Count(100)).expected_items(100).false_positive_rate(0.01).build()?;
    /// assert!(!f.seen_or_insert("url"));
    /// assert!(f.seen_or_insert("url"));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn seen_or_insert<K: Key + ?Sized>(&self, key: &K) -> bool {
        if self.contains(key) {
            // A count window counts every key offered, seen or not.
            if let Window::Count(_) = self.parts.window {
                self.tick();
            }
            return true;
        }
        self.insert(key);
        false
    }

    /// A count window's clock: counts one insert, rotating if it starts a new period; the
    /// insert's epoch.
    pub(super) fn tick(&self) -> u64 {
        let epoch = self.inserts.fetch_add(1, Ordering::Relaxed) / self.parts.period;
        if epoch > self.epoch.load(Ordering::Acquire) {
            self.advance_to(epoch);
        }
        epoch
    }

    /// Rotates until `target` is the newest epoch: for each new epoch, publishes it, then
    /// clears the generation that just left the window (the next one to be filled). A jump of
    /// a whole ring or more clears every generation. Lookups never wait for it.
    pub(crate) fn advance_to(&self, target: u64) {
        self.rotate(target, true);
    }

    /// [`advance_to`](Self::advance_to); `clear_unwritten: false` skips clearing the
    /// generations whose `written` flag is 0, for a filter no other thread can see yet.
    fn rotate(&self, target: u64, clear_unwritten: bool) {
        let _rotating = self
            .rotation
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut epoch = self.epoch.load(Ordering::SeqCst);
        if target >= epoch + self.ring() {
            // Every generation expired: the spare of `target` too.
            self.epoch.store(target, Ordering::SeqCst);
            fence(Ordering::SeqCst);
            for (slot, written) in self.written.iter().enumerate() {
                if written.swap(0, Ordering::SeqCst) != 0 || clear_unwritten {
                    // Never allocated: no bit to clear.
                    self.clear_generation(slot);
                }
            }
            return;
        }
        while epoch < target {
            epoch += 1;
            // The new epoch's generation was cleared when it became the spare.
            self.epoch.store(epoch, Ordering::SeqCst);
            fence(Ordering::SeqCst);
            // The new spare: the generation of `epoch − N`, now out of every lookup's window.
            let was_written =
                self.written[ring_index(epoch + 1, self.ring_len())].swap(0, Ordering::SeqCst) != 0;
            if was_written || clear_unwritten {
                self.clear_generation(self.slot(epoch + 1));
            }
        }
    }

    /// An empty filter of the same shape (window, generations, sizes, clock) under a new
    /// random hash key, without sizing it again: for making many filters of one size (one
    /// per user).
    ///
    /// ```
    /// use bloom_core::windowed::{Window, WindowedFilter};
    ///
    /// let template = WindowedFilter::builder(Window::Count(100)).expected_items(100).false_positive_rate(0.01).build()?;
    /// let f = template.fresh()?;
    /// assert_eq!((f.size_in_bytes(), f.window()), (template.size_in_bytes(), template.window()));
    /// assert_ne!(f.seed(), template.seed());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn fresh(&self) -> Result<Self, crate::BuildError> {
        let mut shape = self.shape.clone();
        shape.hasher = KeyHasher::random().map_err(crate::BuildError::Random)?;
        let generations = (0..self.ring_len()).map(|_| None).collect();
        Ok(Self::from_parts(
            self.parts.clone(),
            shape,
            generations,
            None,
            None,
            self.ring_layout(),
        ))
    }

    /// A builder set up like this filter (window, keys per window, rate, generations, layout,
    /// clock) but for the hash key, which is new unless set: for an empty filter of the same
    /// shape, or a larger one.
    ///
    /// ```
    /// use bloom_core::windowed::{Window, WindowedFilter};
    ///
    /// let f = WindowedFilter::builder(Window::Count(100)).expected_items(100).false_positive_rate(0.01).seed(4).build()?;
    /// let larger = f.to_builder().expected_items(1_000).seed(f.seed()).build()?;
    /// assert_eq!((larger.seed(), larger.window()), (4, Window::Count(100)));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn to_builder(&self) -> WindowedBuilder {
        WindowedBuilder::new(self.parts.window)
            .expected_items(self.parts.expected_items)
            .false_positive_rate(self.parts.fpr)
            .generations(self.generations())
            .layout(self.layout())
            .ring_layout(self.ring_layout())
            .clock(self.parts.clock.clone())
    }

    /// The clock a time window reads (a count window keeps it but never reads it).
    ///
    /// ```
    /// use std::{sync::Arc, time::Duration};
    /// use bloom_core::windowed::{Clock, ManualClock, Window, WindowedFilter};
    ///
    /// let clock = Arc::new(ManualClock::new(5_000));
    /// let f = WindowedFilter::builder(Window::Time(Duration::from_secs(60)))
    ///     .expected_items(10).false_positive_rate(0.01).clock(clock).build()?;
    /// assert_eq!(f.clock().now_millis(), 5_000);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.parts.clock
    }

    /// The window.
    pub fn window(&self) -> Window {
        self.parts.window
    }

    /// `N`, the generations a lookup reads (the filter holds one more).
    pub fn generations(&self) -> u32 {
        self.n() as u32
    }

    /// `T`: milliseconds (time window) or inserts (count window) per generation.
    pub fn period(&self) -> u64 {
        self.parts.period
    }

    /// Keys per window it was sized for.
    pub fn expected_items(&self) -> u64 {
        self.parts.expected_items
    }

    /// The false-positive rate it was sized for.
    pub fn target_fpr(&self) -> f64 {
        self.parts.fpr
    }

    /// The rate each generation is sized for: `1 − (1 − p)^(1/N)`.
    pub fn generation_fpr(&self) -> f64 {
        generation_rate(self.parts.fpr, self.generations())
    }

    /// The newest epoch (time or insert count divided by the period).
    pub fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::Acquire)
    }

    /// Inserts so far (what a count window counts).
    pub fn inserts(&self) -> u64 {
        self.inserts.load(Ordering::Relaxed)
    }

    /// The secret hash key.
    pub fn seed(&self) -> u128 {
        self.shape.hasher.seed()
    }

    /// The generations' Bloom layout.
    pub fn layout(&self) -> crate::Layout {
        self.shape.layout
    }

    /// Memory the generations take once each has taken a key, in bytes: `N + 1` times one
    /// generation's bit array. (A separate generation is allocated when a key first goes into
    /// it: until then it takes none of this. An interleaved ring is allocated with the
    /// filter, zeroed: the system maps its pages as keys first touch them.)
    pub fn size_in_bytes(&self) -> usize {
        self.ring_len() * self.shape.slots.div_ceil(64) as usize * 8
    }

    /// Bits in all generations (`N + 1` times one generation's m).
    pub fn num_bits(&self) -> u64 {
        self.ring() * self.shape.slots
    }

    /// Keys inside the window, estimated from the generations' bits (one scan of each).
    pub fn estimated_items(&self) -> f64 {
        // `+ 0.0`: an empty window's sum is −0.0. A generation never allocated holds no
        // key (its estimate, 0, is left out).
        self.window_generations()
            .flatten()
            .map(|g| g.estimated_items())
            .sum::<f64>()
            + 0.0
    }

    /// Bits each key sets in its generation (`k`, the same in every one).
    pub fn num_hashes(&self) -> u32 {
        self.shape.hashes
    }

    /// The rate of wrong "seen" answers the bits imply now: one minus the chance that every
    /// generation in the window answers "absent".
    pub fn current_fpr(&self) -> f64 {
        // A generation never allocated answers "absent" to every key (a factor of 1).
        1.0 - self
            .window_generations()
            .flatten()
            .map(|g| 1.0 - g.current_fpr())
            .product::<f64>()
    }

    /// Set bits in the generations in the window (one scan of each).
    pub fn count_ones(&self) -> u64 {
        self.window_generations()
            .flatten()
            .map(|g| g.count_ones())
            .sum()
    }

    /// The fraction of set bits over the generations in the window.
    pub fn fill_ratio(&self) -> f64 {
        let (ones, bits) = self.window_generations().fold((0, 0), |(o, b), g| {
            (o + g.map_or(0, |g| g.count_ones()), b + self.shape.slots)
        });
        ones as f64 / bits.max(1) as f64
    }

    /// The generations a lookup may now read, newest first (`None`: never allocated, so
    /// empty; an interleaved ring's are copies).
    fn window_generations(&self) -> impl Iterator<Item = Option<Cow<'_, BloomFilter>>> {
        let newest = self.epoch();
        let oldest = (newest + 1).saturating_sub(self.n());
        (oldest..=newest)
            .rev()
            .map(|e| self.generation_at(self.slot(e)))
    }

    /// `N + 1`, the generations in the ring, for the file format.
    pub(crate) fn ring_len(&self) -> usize {
        self.written.len()
    }

    /// The generation at ring index `i` if it may hold keys (the file format stores only
    /// those): it took a key since it was last cleared. (An interleaved ring's is a copy.)
    pub(crate) fn ring_written(&self, i: usize) -> Option<Cow<'_, BloomFilter>> {
        if !self.ring_has_keys(i) {
            return None;
        }
        self.generation_at(i)
    }

    /// Whether the generation at ring index `i` may hold keys: it took a key since it was
    /// last cleared (and so was allocated).
    pub(crate) fn ring_has_keys(&self, i: usize) -> bool {
        self.written[i].load(Ordering::Acquire) != 0
    }

    pub(crate) fn parts(&self) -> &Parts {
        &self.parts
    }
}

impl fmt::Debug for WindowedFilter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WindowedFilter")
            .field("window", &self.parts.window)
            .field("generations", &self.generations())
            .field("period", &self.parts.period)
            .field("epoch", &self.epoch())
            .field("expected_items", &self.parts.expected_items)
            .field("target_fpr", &self.parts.fpr)
            .finish_non_exhaustive()
    }
}
