//! [`WindowedFilter::contains_many_with`] and [`WindowedFilter::contains_many`]: many
//! lookups under one read of the stored epoch and the clock.

use crate::filter::{pipelined, pipelined_map};
use crate::{BloomFilter, Key};

use super::builder::MAX_GENERATIONS;
use super::filter::WindowedFilter;

/// The generations a batch reads, newest first: at most `N` ≤ [`MAX_GENERATIONS`].
struct Reads<'a> {
    generations: [Option<&'a BloomFilter>; MAX_GENERATIONS as usize],
    len: usize,
}

impl<'a> Reads<'a> {
    fn iter(&self) -> impl Iterator<Item = &'a BloomFilter> + '_ {
        self.generations[..self.len].iter().flatten().copied()
    }
}

impl WindowedFilter {
    /// [`contains`](Self::contains) for each key in order, telling `found` each answer: the
    /// same answers, for a batch of candidates at a time (a feed checking a page's items).
    /// The stored epoch and, for a time window, the clock are read once, at the start: the
    /// batch is one lookup at that instant. Every generation has the same size, hash key and
    /// layout, so a key is hashed once and its line in each generation read prefetched a
    /// window ahead (as [`BloomFilter::contains_many`] does).
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
                for g in reads.iter() {
                    g.prefetch(h);
                }
            },
            |h| found(self.any_holds(h, reads.iter())),
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
                    for g in reads.iter() {
                        g.prefetch(h);
                    }
                },
                |h| self.any_holds(h, reads.iter()),
            ),
            None => keys.into_iter().map(|_| false).collect(),
        }
    }

    /// The generations a lookup starting now reads, newest first (`contains`'s range, from
    /// `lookup_range`, read once, and its `written` marks: an acquire load, which sees the
    /// mark of every insert that returned before); `None` if none of them holds a key.
    fn batch_reads(&self) -> Option<Reads<'_>> {
        let (oldest, newest) = self.lookup_range();
        let mut reads = Reads {
            generations: [None; MAX_GENERATIONS as usize],
            len: 0,
        };
        for g in self.in_range(oldest, newest) {
            reads.generations[reads.len] = Some(g);
            reads.len += 1;
        }
        (reads.len > 0).then_some(reads)
    }
}
