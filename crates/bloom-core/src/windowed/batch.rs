//! [`WindowedFilter::contains_many_with`] and [`WindowedFilter::contains_many`]: many
//! lookups under one read of the stored epoch and the clock.

use crate::filter::{pipelined, pipelined_map};
use crate::hasher::KeyHasher;
use crate::{BloomFilter, Key};

use super::builder::{MAX_GENERATIONS, Window};
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
        let Some((reads, hasher)) = self.batch_reads() else {
            // No generation in range holds a key: nothing to hash.
            for _ in keys {
                found(false);
            }
            return;
        };
        pipelined(
            &hasher,
            keys,
            |h| {
                // The key's line is at the same place in every generation.
                for g in reads.iter() {
                    g.prefetch(h);
                }
            },
            |h| found(reads.iter().any(|g| g.contains_hash(h))),
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
            Some((reads, hasher)) => pipelined_map(
                &hasher,
                keys,
                |h| {
                    for g in reads.iter() {
                        g.prefetch(h);
                    }
                },
                |h| reads.iter().any(|g| g.contains_hash(h)),
            ),
            None => keys.into_iter().map(|_| false).collect(),
        }
    }

    /// The generations a lookup starting now reads, newest first, and the hash they share;
    /// `None` if none of them holds a key. The range is `contains`'s: the epochs
    /// `max(E, C) − N + 1 ..= E`, `E` the stored epoch and `C` the clock's (a time window),
    /// each read once; a generation counts if its `written` mark is set (an acquire load,
    /// which sees the mark of every insert that returned before).
    fn batch_reads(&self) -> Option<(Reads<'_>, KeyHasher)> {
        let newest = self.epoch();
        let n = u64::from(self.generations());
        let mut oldest = (newest + 1).saturating_sub(n);
        if let Window::Time(_) = self.window() {
            let clock_epoch = self.clock().now_millis() / self.period();
            oldest = oldest.max((clock_epoch + 1).saturating_sub(n));
        }
        let ring = self.ring_len() as u64;
        let mut reads = Reads {
            generations: [None; MAX_GENERATIONS as usize],
            len: 0,
        };
        for epoch in (oldest..=newest).rev() {
            if let Some(g) = self.ring_written((epoch % ring) as usize) {
                reads.generations[reads.len] = Some(g);
                reads.len += 1;
            }
        }
        if reads.len == 0 {
            return None;
        }
        Some((reads, KeyHasher::new(self.seed())))
    }
}
