//! The batches: [`WindowedFilter::contains_many_with`] and [`WindowedFilter::contains_many`],
//! many lookups under one read of the stored epoch and the clock, and
//! [`WindowedFilter::seen_or_insert_many_with`], a de-duplicating pass a batch at a time.

use crate::Key;
use crate::filter::{pipelined, pipelined_map};
use crate::hasher::KeyHash;
use crate::sync::{Ordering, fence};
use crate::windowed::Window;

use super::builder::MAX_GENERATIONS;
use super::filter::WindowedFilter;
use super::ring::RingLayout;

/// The ring indices of the generations a batch reads, newest first: at most `N` ≤
/// [`MAX_GENERATIONS`].
#[derive(Clone, Copy)]
struct Reads {
    slots: [usize; MAX_GENERATIONS as usize],
    len: usize,
    /// The epochs `(oldest, newest)` they are in.
    range: (u64, u64),
}

impl Reads {
    fn iter(&self) -> impl Iterator<Item = usize> + '_ {
        self.slots[..self.len].iter().copied()
    }
}

impl WindowedFilter {
    /// [`seen_or_insert`](Self::seen_or_insert) for each key in order, telling `seen` each
    /// answer: what a de-duplicating pass over a stream asks, a batch at a time. Every
    /// generation has the same size, hash key and layout, so a key is hashed once and its
    /// line in each generation prefetched a window ahead (as `BloomFilter::insert_many_with`
    /// does); a time window's clock is read once per batch, which is then the keys' time.
    /// Each key is tested as [`contains_many`](Self::contains_many) tests it (an interleaved
    /// ring's run, separate generations' written ones), against the generations of its own
    /// epoch's window. `tests/windowed.rs` `the_batch_path_is_one_seen_or_insert_per_key`
    /// checks it answers and leaves the filter as one `seen_or_insert` per key, in both ring
    /// layouts.
    ///
    /// ```
    /// use bloom_core::windowed::{Window, WindowedFilter};
    ///
    /// let f = WindowedFilter::builder(Window::Count(100)).expected_items(100).false_positive_rate(0.01).build()?;
    /// let mut seen = Vec::new();
    /// f.seen_or_insert_many_with(["a", "b", "a"], |s| seen.push(s));
    /// assert_eq!(seen, [false, false, true]);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn seen_or_insert_many_with<I>(&self, keys: I, mut seen: impl FnMut(bool))
    where
        I: IntoIterator,
        I::Item: Key,
    {
        let keys = keys.into_iter();
        let timed = matches!(self.parts.window, Window::Time(_));
        if timed {
            let now = self.clock_epoch();
            if now > self.epoch.load(Ordering::Acquire) {
                self.advance_to(now);
            }
        }
        let batch_epoch = self.epoch.load(Ordering::SeqCst);
        let mut current = self.dedup_reads(batch_epoch);
        let prefetch = current;
        // A time window's new keys, to insert again if the batch ends in a later epoch.
        let mut inserted = Vec::with_capacity(if timed { keys.size_hint().0 } else { 0 });
        let decide = |h| {
            if !timed {
                // A count window: each key offered is an insert, its sequence number its time.
                let epoch = self.tick();
                if epoch != current.range.1 {
                    current = self.dedup_reads(epoch);
                }
            }
            let found = self.batch_holds(&current, h);
            if !found {
                self.insert_into(current.slots[0], h);
                if timed {
                    inserted.push(h);
                }
            }
            seen(found);
        };
        let prefetch_all = |h| {
            // The key's line is at the same place in every generation.
            for slot in prefetch.iter() {
                self.prefetch_into(slot, h);
            }
        };
        pipelined(self.hasher(), keys, prefetch_all, decide);
        if !timed {
            return;
        }
        // As `insert`: if a rotation ran or the period ended during the batch, its new keys
        // go again into the newest generation.
        fence(Ordering::SeqCst);
        if self.epoch.load(Ordering::SeqCst) != batch_epoch || self.clock_epoch() > batch_epoch {
            self.advance_to(self.clock_epoch());
            let epoch = self.epoch.load(Ordering::SeqCst);
            let newest = self.slot_to_fill(epoch);
            self.mark_written(epoch);
            for &h in &inserted {
                self.insert_into(newest, h);
            }
        }
    }

    /// The generations a de-duplicating batch reads at epoch `epoch`, newest first: the one
    /// its keys go to (allocated and marked written now, read whether or not it holds a key),
    /// then the older ones of the window that were written; found once per epoch, not per
    /// key.
    fn dedup_reads(&self, epoch: u64) -> Reads {
        let oldest = (epoch + 1).saturating_sub(self.n());
        let mut reads = Reads {
            slots: [0; MAX_GENERATIONS as usize],
            len: 1,
            range: (oldest, epoch),
        };
        reads.slots[0] = self.slot_to_fill(epoch);
        self.mark_written(epoch);
        for e in (oldest..epoch).rev().filter(|&e| self.is_written(e)) {
            reads.slots[reads.len] = self.slot(e);
            reads.len += 1;
        }
        reads
    }

    /// [`contains`](Self::contains) for each key in order, telling `found` each answer: the
    /// same answers, for a batch of candidates at a time (a feed checking a page's items).
    /// The stored epoch and, for a time window, the clock are read once, at the start: the
    /// batch is one lookup at that instant. Every generation has the same size, hash key and
    /// layout, so a key is hashed once and its line in each generation read prefetched a
    /// window ahead (as [`BloomFilter::contains_many`](crate::BloomFilter::contains_many) does).
    ///
    /// Rule, as for `contains`: a key whose insert returned before the call, within the
    /// window by the clock read at the start, is found (the range of generations is bounded
    /// by the stored epoch and by that clock epoch, and a generation is skipped only if its
    /// `written` mark, read at the start, is clear). `tests/windowed_batch.rs`
    /// `a_batch_answers_as_contains_does` checks the answers equal `contains`'s over time and
    /// count windows; `keys_that_stay_in_the_window_are_found_across_a_rotation` rotates the
    /// filter in the middle of a batch.
    ///
    /// ```
    /// use bloom_core::windowed::{Window, WindowedFilter};
    ///
    /// let f = WindowedFilter::builder(Window::Count(100)).expected_items(100).false_positive_rate(0.01).build()?;
    /// f.insert("a");
    /// let mut found = Vec::new();
    /// f.contains_many_with(["a", "b", "a"], |seen| found.push(seen));
    /// assert_eq!(found[0], true);
    /// assert_eq!(found[2], true);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn contains_many_with<I>(&self, keys: I, mut found: impl FnMut(bool))
    where
        I: IntoIterator,
        I::Item: Key,
    {
        let Some(reads) = self.batch_reads() else {
            // No generation in range holds a key: nothing to hash.
            for _ in keys {
                found(false);
            }
            return;
        };
        pipelined(
            self.hasher(),
            keys,
            |h| {
                // The key's line is at the same place in every generation.
                for slot in reads.iter() {
                    self.prefetch_into(slot, h);
                }
            },
            |h| found(self.batch_holds(&reads, h)),
        );
    }

    /// [`contains_many_with`](Self::contains_many_with), collecting the answers in the keys'
    /// order.
    ///
    /// ```
    /// use bloom_core::windowed::{Window, WindowedFilter};
    ///
    /// let f = WindowedFilter::builder(Window::Count(100)).expected_items(100).false_positive_rate(0.01).build()?;
    /// f.insert(&1u64);
    /// f.insert(&3u64);
    /// assert_eq!(f.contains_many([1u64, 3]), [true, true]);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn contains_many<I>(&self, keys: I) -> Vec<bool>
    where
        I: IntoIterator,
        I::Item: Key,
    {
        match self.batch_reads() {
            Some(reads) => pipelined_map(
                self.hasher(),
                keys,
                |h| {
                    for slot in reads.iter() {
                        self.prefetch_into(slot, h);
                    }
                },
                |h| self.batch_holds(&reads, h),
            ),
            None => keys.into_iter().map(|_| false).collect(),
        }
    }

    /// The generations a lookup starting now reads, newest first (`contains`'s range, from
    /// `lookup_range`, read once, and its `written` marks: an acquire load, which sees the
    /// mark of every insert that returned before); `None` if none of them holds a key.
    fn batch_reads(&self) -> Option<Reads> {
        let (oldest, newest) = self.lookup_range();
        let mut reads = Reads {
            slots: [0; MAX_GENERATIONS as usize],
            len: 0,
            range: (oldest, newest),
        };
        for slot in self.in_range(oldest, newest) {
            reads.slots[reads.len] = slot;
            reads.len += 1;
        }
        (reads.len > 0).then_some(reads)
    }

    /// Whether a generation `reads` names holds the key hashed to `h`: an interleaved ring
    /// tests the key's run over the batch's range (its generations not written are zero
    /// lines: `WindowedFilter::run_holds`), separate ones the generations named.
    #[inline(always)]
    fn batch_holds(&self, reads: &Reads, h: KeyHash) -> bool {
        match self.ring_layout() {
            RingLayout::Interleaved => self.holds_in_range(h, reads.range.0, reads.range.1),
            RingLayout::Separate => self.any_holds(h, reads.iter()),
        }
    }
}
