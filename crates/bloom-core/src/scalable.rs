//! A Bloom filter that grows: a list of plain filters ("stages"), each larger and stricter
//! than the last (Almeida, Baquero, Preguiça & Hutchison, "Scalable Bloom Filters", 2007).
//! Its file (`to_bytes`, `from_bytes`, …) is laid out in `format/stages.rs`.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, PoisonError};

use arc_swap::{ArcSwap, Guard};

use crate::hasher::KeyHasher;
use crate::{BloomFilter, BuildError, Key, Layout};

/// The most stages a filter grows to (and a file may hold). With the default growth factor
/// that is 2⁶⁴ times the initial capacity: far past memory.
pub const MAX_STAGES: usize = 64;

/// A Bloom filter for when the number of keys is not known up front.
///
/// It starts as one filter sized for `(initial_capacity, p·(1−r))`. When a stage has taken
/// its capacity of keys, a new stage is added with `growth` times the capacity and `r` times
/// the false-positive rate (the *tightening ratio*), so the compound rate
/// `1 − Π(1 − pᵢ) ≤ Σ p·(1−r)·rⁱ = p` however far it grows. `contains` checks every stage.
///
/// Readers never lock: the stage list is swapped atomically (arc-swap). Growth is
/// serialised by a mutex that only the insert crossing a stage's capacity takes, and happens
/// once even when many threads cross it together. Inserts racing with a growth land in the
/// previous stage, which stays correct (every key is still found), only a little fuller.
///
/// ```
/// use bloom_core::ScalableBloomFilter;
///
/// let seen = ScalableBloomFilter::new(1_000, 0.01)?; // no need to know the final count
/// for i in 0..100_000u64 {
///     seen.insert(&i);
/// }
/// assert!(seen.contains(&99_999u64));
/// assert!(seen.num_stages() > 1);
/// # Ok::<(), bloom_core::BuildError>(())
/// ```
pub struct ScalableBloomFilter {
    stages: ArcSwap<Vec<Arc<Stage>>>,
    growing: Mutex<()>,
    config: Config,
    hasher: KeyHasher,
}

/// What a scalable filter was configured with: its file's header records it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Config {
    pub(crate) initial_capacity: u64,
    pub(crate) fpr: f64,
    pub(crate) growth: f64,
    pub(crate) tightening: f64,
    pub(crate) layout: Layout,
}

impl Config {
    /// The builder's checks; a file whose settings fail them is refused.
    pub(crate) fn check(&self) -> Result<(), BuildError> {
        crate::sizing::check_items_and_rate(self.initial_capacity, self.fpr)?;
        if !(self.growth.is_finite() && self.growth >= 1.0) {
            return Err(BuildError::InvalidGrowthFactor(self.growth));
        }
        if !(self.tightening > 0.0 && self.tightening < 1.0) {
            return Err(BuildError::InvalidTighteningRatio(self.tightening));
        }
        Ok(())
    }

    pub(crate) fn stage_capacity(&self, index: usize) -> u64 {
        (self.initial_capacity as f64 * self.growth.powi(index as i32)).ceil() as u64
    }

    fn stage_fpr(&self, index: usize) -> f64 {
        self.fpr * (1.0 - self.tightening) * self.tightening.powi(index as i32)
    }

    fn build_stage(&self, index: usize, seed: u128) -> Result<Stage, BuildError> {
        let capacity = self.stage_capacity(index);
        let filter = BloomFilter::builder()
            .expected_items(capacity)
            .false_positive_rate(self.stage_fpr(index))
            .layout(self.layout)
            .seed(seed)
            .build()?;
        Ok(Stage {
            filter,
            capacity,
            items: AtomicU64::new(0),
        })
    }
}

pub(crate) struct Stage {
    pub(crate) filter: BloomFilter,
    pub(crate) capacity: u64,
    /// Keys inserted that were new to every stage.
    pub(crate) items: AtomicU64,
}

/// One stage's figures, from [`ScalableBloomFilter::stage_stats`].
#[derive(Clone, Copy, Debug, PartialEq)]
#[non_exhaustive]
pub struct StageStats {
    /// Keys this stage was sized for.
    pub capacity: u64,
    /// Keys inserted into it.
    pub items: u64,
    /// Its m.
    pub num_bits: u64,
    /// Its k.
    pub num_hashes: u32,
    /// The false-positive rate it was sized for.
    pub target_fpr: f64,
    /// The fraction of its bits set.
    pub fill_ratio: f64,
    /// The false-positive rate its bits imply now.
    pub current_fpr: f64,
}

/// Configures a [`ScalableBloomFilter`]; start from [`ScalableBloomFilter::builder`].
#[derive(Clone, Debug)]
#[must_use]
pub struct ScalableBuilder {
    config: Config,
    seed: Option<u128>,
}

impl ScalableBuilder {
    /// How much larger each stage is than the one before; 2 by default, at least 1.
    ///
    /// ```
    /// use bloom_core::ScalableBloomFilter;
    ///
    /// let f = ScalableBloomFilter::builder(1_000, 0.01).growth_factor(4.0).build()?;
    /// assert_eq!(f.growth_factor(), 4.0);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn growth_factor(mut self, growth: f64) -> Self {
        self.config.growth = growth;
        self
    }

    /// How much stricter each stage's false-positive rate is than the one before; 0.5 by
    /// default, strictly between 0 and 1. Smaller means fewer bits in late stages' favour.
    ///
    /// ```
    /// use bloom_core::ScalableBloomFilter;
    ///
    /// let f = ScalableBloomFilter::builder(1_000, 0.01).tightening_ratio(0.8).build()?;
    /// assert_eq!(f.tightening_ratio(), 0.8);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn tightening_ratio(mut self, ratio: f64) -> Self {
        self.config.tightening = ratio;
        self
    }

    /// The layout of every stage; Blocked by default.
    ///
    /// ```
    /// use bloom_core::{Layout, ScalableBloomFilter};
    ///
    /// let f = ScalableBloomFilter::builder(1_000, 0.01).layout(Layout::Classic).build()?;
    /// assert_eq!(f.layout(), Layout::Classic);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn layout(mut self, layout: Layout) -> Self {
        self.config.layout = layout;
        self
    }

    /// A fixed hash key shared by every stage (see [`crate::Builder::seed`]).
    ///
    /// ```
    /// use bloom_core::ScalableBloomFilter;
    ///
    /// let f = ScalableBloomFilter::builder(1_000, 0.01).seed(7).build()?;
    /// assert_eq!(f.seed(), 7);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn seed(mut self, seed: u128) -> Self {
        self.seed = Some(seed);
        self
    }

    /// Builds the filter with its first stage.
    ///
    /// ```
    /// use bloom_core::ScalableBloomFilter;
    ///
    /// let f = ScalableBloomFilter::builder(1_000, 0.01).build()?;
    /// assert_eq!(f.num_stages(), 1);
    /// assert!(ScalableBloomFilter::builder(1_000, 0.01).growth_factor(0.5).build().is_err());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn build(self) -> Result<ScalableBloomFilter, BuildError> {
        let c = self.config;
        c.check()?;
        let hasher = crate::sizing::hasher(self.seed)?;
        let first = c.build_stage(0, hasher.seed())?;
        Ok(ScalableBloomFilter::from_stages(
            c,
            hasher,
            vec![Arc::new(first)],
        ))
    }
}

impl ScalableBloomFilter {
    /// Starts at `initial_capacity` keys, keeps the compound false-positive rate ≤ `p`, and
    /// grows ×2 with tightening 0.5, with a random secret hash key.
    ///
    /// ```
    /// use bloom_core::ScalableBloomFilter;
    ///
    /// let f = ScalableBloomFilter::new(1_000, 0.01)?;
    /// assert_eq!((f.initial_capacity(), f.target_fpr()), (1_000, Some(0.01)));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn new(initial_capacity: u64, false_positive_rate: f64) -> Result<Self, BuildError> {
        Self::builder(initial_capacity, false_positive_rate).build()
    }

    /// Starts configuring a scalable filter.
    ///
    /// ```
    /// use bloom_core::ScalableBloomFilter;
    ///
    /// let f = ScalableBloomFilter::builder(1_000, 0.01).growth_factor(4.0).seed(7).build()?;
    /// assert_eq!(f.growth_factor(), 4.0);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn builder(initial_capacity: u64, false_positive_rate: f64) -> ScalableBuilder {
        ScalableBuilder {
            config: Config {
                initial_capacity,
                fpr: false_positive_rate,
                growth: 2.0,
                tightening: 0.5,
                layout: Layout::Blocked,
            },
            seed: None,
        }
    }

    pub(crate) fn from_stages(config: Config, hasher: KeyHasher, stages: Vec<Arc<Stage>>) -> Self {
        Self {
            stages: ArcSwap::from_pointee(stages),
            growing: Mutex::new(()),
            config,
            hasher,
        }
    }

    /// Its settings, for its file's header.
    pub(crate) fn config(&self) -> Config {
        self.config
    }

    /// The stages now, oldest first, for its file's body.
    pub(crate) fn stages(&self) -> Guard<Arc<Vec<Arc<Stage>>>> {
        self.stages.load()
    }

    /// Adds `key`. Returns `true` if it was not (maybe) present in any stage.
    ///
    /// ```
    /// use bloom_core::ScalableBloomFilter;
    ///
    /// let f = ScalableBloomFilter::new(1_000, 0.01)?;
    /// assert!(f.insert("a"));
    /// assert!(!f.insert("a"));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn insert<K: Key + ?Sized>(&self, key: &K) -> bool {
        let h = self.hasher.hash(key);
        let stages = self.stages.load();
        if stages.iter().rev().any(|s| s.filter.contains_hash(h)) {
            return false; // already (maybe) here: inserting again would only overcount
        }
        let Some(last) = stages.last() else {
            return false;
        };
        last.filter.insert_hash(h);
        if last.items.fetch_add(1, Relaxed) + 1 >= last.capacity {
            self.grow(last);
        }
        true
    }

    /// `false` means `key` was definitely never inserted.
    ///
    /// ```
    /// use bloom_core::ScalableBloomFilter;
    ///
    /// let f = ScalableBloomFilter::new(1_000, 0.01)?;
    /// f.insert("a");
    /// assert!(f.contains("a"));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn contains<K: Key + ?Sized>(&self, key: &K) -> bool {
        let h = self.hasher.hash(key);
        // Newest first: it is the largest and holds the most keys.
        self.stages
            .load()
            .iter()
            .rev()
            .any(|s| s.filter.contains_hash(h))
    }

    /// Adds a stage after `full`, unless another thread already has.
    fn grow(&self, full: &Arc<Stage>) {
        let _only_one = self.growing.lock().unwrap_or_else(PoisonError::into_inner);
        let current = self.stages.load_full();
        if !current.last().is_some_and(|last| Arc::ptr_eq(last, full))
            || current.len() >= MAX_STAGES
        {
            return;
        }
        // A stage too large to build (beyond params::MAX_BITS) leaves the last one taking
        // keys: its false-positive rate rises, but nothing is ever lost.
        if let Ok(next) = self.config.build_stage(current.len(), self.hasher.seed()) {
            let mut grown = Vec::with_capacity(current.len() + 1);
            grown.extend(current.iter().cloned());
            grown.push(Arc::new(next));
            self.stages.store(Arc::new(grown));
        }
    }

    /// Number of stages so far.
    ///
    /// ```
    /// use bloom_core::ScalableBloomFilter;
    ///
    /// let f = ScalableBloomFilter::new(1_000, 0.01)?;
    /// assert_eq!(f.num_stages(), 1);
    /// for i in 0..5_000u64 {
    ///     f.insert(&i);
    /// }
    /// assert!(f.num_stages() > 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn num_stages(&self) -> usize {
        self.stages.load().len()
    }

    /// Keys inserted that were new (an estimate: keys that collided with a false positive
    /// are not counted).
    ///
    /// ```
    /// use bloom_core::ScalableBloomFilter;
    ///
    /// let f = ScalableBloomFilter::new(1_000, 0.01)?;
    /// f.insert("a");
    /// f.insert("a");
    /// assert_eq!(f.len(), 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn len(&self) -> u64 {
        self.stages
            .load()
            .iter()
            .map(|s| s.items.load(Relaxed))
            .sum()
    }

    /// `true` before the first insert.
    ///
    /// ```
    /// use bloom_core::ScalableBloomFilter;
    ///
    /// let f = ScalableBloomFilter::new(1_000, 0.01)?;
    /// assert!(f.is_empty());
    /// f.insert("a");
    /// assert!(!f.is_empty());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The compound false-positive rate the filter was configured for. Always `Some`: a
    /// scalable filter is always sized by rate. It is an `Option` to match
    /// [`BloomFilter::target_fpr`] and [`CountingBloomFilter::target_fpr`](crate::CountingBloomFilter::target_fpr),
    /// which have no target when built from an explicit size.
    ///
    /// ```
    /// use bloom_core::ScalableBloomFilter;
    ///
    /// let f = ScalableBloomFilter::new(1_000, 0.01)?;
    /// assert_eq!(f.target_fpr(), Some(0.01));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn target_fpr(&self) -> Option<f64> {
        Some(self.config.fpr)
    }

    /// The layout of every stage.
    ///
    /// ```
    /// use bloom_core::{Layout, ScalableBloomFilter};
    ///
    /// assert_eq!(ScalableBloomFilter::new(1_000, 0.01)?.layout(), Layout::Blocked);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn layout(&self) -> Layout {
        self.config.layout
    }

    /// The secret hash key shared by all stages (see [`BloomFilter::seed`]).
    ///
    /// ```
    /// use bloom_core::ScalableBloomFilter;
    ///
    /// let f = ScalableBloomFilter::builder(1_000, 0.01).seed(7).build()?;
    /// assert_eq!(f.seed(), 7);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn seed(&self) -> u128 {
        self.hasher.seed()
    }

    /// The first stage's capacity.
    ///
    /// ```
    /// use bloom_core::ScalableBloomFilter;
    ///
    /// let f = ScalableBloomFilter::new(1_000, 0.01)?;
    /// assert_eq!(f.initial_capacity(), 1_000);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn initial_capacity(&self) -> u64 {
        self.config.initial_capacity
    }

    /// How much larger each stage is than the one before.
    ///
    /// ```
    /// use bloom_core::ScalableBloomFilter;
    ///
    /// let f = ScalableBloomFilter::new(1_000, 0.01)?;
    /// assert_eq!(f.growth_factor(), 2.0);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn growth_factor(&self) -> f64 {
        self.config.growth
    }

    /// How much stricter each stage's false-positive rate is than the one before.
    ///
    /// ```
    /// use bloom_core::ScalableBloomFilter;
    ///
    /// let f = ScalableBloomFilter::new(1_000, 0.01)?;
    /// assert_eq!(f.tightening_ratio(), 0.5);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn tightening_ratio(&self) -> f64 {
        self.config.tightening
    }

    /// Bits over every stage (no scan).
    ///
    /// ```
    /// use bloom_core::ScalableBloomFilter;
    ///
    /// let f = ScalableBloomFilter::new(1_000, 0.01)?;
    /// let first = f.num_bits();
    /// for i in 0..5_000u64 {
    ///     f.insert(&i);
    /// }
    /// assert!(f.num_bits() > first);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn num_bits(&self) -> u64 {
        self.stages.load().iter().map(|s| s.filter.num_bits()).sum()
    }

    /// Bits set over every stage (one scan).
    ///
    /// ```
    /// use bloom_core::ScalableBloomFilter;
    ///
    /// let f = ScalableBloomFilter::new(1_000, 0.01)?;
    /// assert_eq!(f.count_ones(), 0);
    /// f.insert("a");
    /// assert!(f.count_ones() > 0);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn count_ones(&self) -> u64 {
        self.stages
            .load()
            .iter()
            .map(|s| s.filter.count_ones())
            .sum()
    }

    /// Memory held by every stage's bits, in bytes.
    ///
    /// ```
    /// use bloom_core::ScalableBloomFilter;
    ///
    /// let f = ScalableBloomFilter::new(1_000, 0.01)?;
    /// assert_eq!(f.size_in_bytes() as u64 * 8, f.num_bits());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn size_in_bytes(&self) -> usize {
        self.stages
            .load()
            .iter()
            .map(|s| s.filter.size_in_bytes())
            .sum()
    }

    /// Estimated number of distinct keys (sum over stages of
    /// [`BloomFilter::estimated_items`]).
    ///
    /// ```
    /// use bloom_core::ScalableBloomFilter;
    ///
    /// let f = ScalableBloomFilter::new(1_000, 0.01)?;
    /// for i in 0..5_000u64 {
    ///     f.insert(&i);
    /// }
    /// assert!((f.estimated_items() - 5_000.0).abs() < 500.0);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn estimated_items(&self) -> f64 {
        self.stages
            .load()
            .iter()
            .map(|s| s.filter.estimated_items())
            .sum()
    }

    /// The compound false-positive rate the stages' bits imply now: `1 − Π(1 − fprᵢ)`.
    ///
    /// ```
    /// use bloom_core::ScalableBloomFilter;
    ///
    /// let f = ScalableBloomFilter::new(1_000, 0.01)?;
    /// for i in 0..20_000u64 {
    ///     f.insert(&i);
    /// }
    /// assert!(f.current_fpr() <= 0.01);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn current_fpr(&self) -> f64 {
        1.0 - self
            .stages
            .load()
            .iter()
            .map(|s| 1.0 - s.filter.current_fpr())
            .product::<f64>()
    }

    /// Figures for each stage, oldest first.
    ///
    /// ```
    /// use bloom_core::ScalableBloomFilter;
    ///
    /// let f = ScalableBloomFilter::new(1_000, 0.01)?;
    /// for i in 0..1_500u64 {
    ///     f.insert(&i);
    /// }
    /// let stages = f.stage_stats();
    /// assert_eq!(stages[0].capacity, 1_000);
    /// assert_eq!(stages[1].capacity, 2_000);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn stage_stats(&self) -> Vec<StageStats> {
        self.stages
            .load()
            .iter()
            .map(|s| StageStats {
                capacity: s.capacity,
                items: s.items.load(Relaxed),
                num_bits: s.filter.num_bits(),
                num_hashes: s.filter.num_hashes(),
                target_fpr: s.filter.target_fpr().unwrap_or(0.0),
                fill_ratio: s.filter.fill_ratio(),
                current_fpr: s.filter.current_fpr(),
            })
            .collect()
    }
}

impl fmt::Debug for ScalableBloomFilter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ScalableBloomFilter")
            .field("initial_capacity", &self.config.initial_capacity)
            .field("target_fpr", &self.config.fpr)
            .field("growth", &self.config.growth)
            .field("tightening", &self.config.tightening)
            .field("layout", &self.config.layout)
            .field("stages", &self.num_stages())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_overcount_past_the_bits_is_written_clamped_and_reads_back() {
        let f = ScalableBloomFilter::builder(100, 0.01)
            .seed(5)
            .build()
            .unwrap();
        f.insert(&1u64);
        let bits = f.num_bits();
        // What racing inserts claiming the same clear bit could leave behind.
        f.stages.load()[0].items.store(bits + 3, Relaxed);
        let back = ScalableBloomFilter::from_bytes(&f.to_bytes()).unwrap();
        assert_eq!(back.len(), bits);
        assert!(back.contains(&1u64));
    }
}
