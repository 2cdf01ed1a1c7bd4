//! [`FilterSetBuilder`]: the budget, what a new filter is, and how stored ones are read.

use std::fmt::Display;
use std::hash::Hash;
use std::sync::Arc;

use bloom_core::windowed::{Clock, RingLayout, WindowedBuilder, WindowedFilter};
use bloom_core::{AnyFilter, BloomFilter, BuildError, DecodeError, Layout};

use super::set::{Decode, FilterSet, NewFilter};
use super::store::FilterStore;

/// Configures a [`FilterSet`]: a store, then [`plain`](Self::plain),
/// [`windowed`](Self::windowed) or [`new_filter`](Self::new_filter), and the budget.
///
/// ```
/// use std::time::Duration;
/// use bloom_core::windowed::{Window, WindowedFilter};
/// use bloom_tower::filter_set::{DirectoryStore, FilterSet};
///
/// let dir = tempfile::tempdir()?;
/// let week = WindowedFilter::builder(Window::Time(Duration::from_secs(7 * 86_400)))
///     .expected_items(300) // items shown to one user in a week
///     .false_positive_rate(0.01);
/// let shown = FilterSet::<u64, _>::builder(DirectoryStore::new(dir.path())?)
///     .windowed(week)?
///     .budget_bytes(256 << 20)
///     .name("shown")
///     .build();
/// assert_eq!(shown.stats().budget_bytes, 256 << 20);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct FilterSetBuilder<K, S> {
    store: S,
    budget: usize,
    name: String,
    shards: usize,
    new_filter: Option<NewFilter<K>>,
    decode: Decode,
}

impl<K, S> FilterSetBuilder<K, S>
where
    K: Hash + Eq + Clone + Display + Send + Sync + 'static,
    S: FilterStore,
{
    pub(crate) fn new(store: S) -> Self {
        Self {
            store,
            budget: 64 << 20,
            name: "default".to_owned(),
            shards: 64,
            new_filter: None,
            decode: Arc::new(AnyFilter::from_bytes),
        }
    }

    /// Bytes the filters in memory may take, table overhead included (default 64 MiB). Loads
    /// beyond it evict the least recently used first.
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// use bloom_tower::filter_set::{DirectoryStore, FilterSet};
    ///
    /// let set = FilterSet::<String, _>::builder(DirectoryStore::new(dir.path())?)
    ///     .plain(1_000, 0.01)?
    ///     .budget_bytes(1 << 20)
    ///     .build();
    /// assert_eq!(set.stats().budget_bytes, 1 << 20);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn budget_bytes(mut self, bytes: usize) -> Self {
        self.budget = bytes;
        self
    }

    /// The `set` label of the metrics (default `"default"`).
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// use bloom_tower::filter_set::{DirectoryStore, FilterSet};
    ///
    /// let set = FilterSet::<String, _>::builder(DirectoryStore::new(dir.path())?)
    ///     .plain(1_000, 0.01)?
    ///     .name("tenants")
    ///     .build();
    /// assert_eq!(set.name(), "tenants");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// Every key's filter is a plain Bloom filter for `items` keys at rate `fpr` (each with
    /// its own random hash key). Stored filters of any kind are read back as they are.
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// use bloom_tower::filter_set::{DirectoryStore, FilterSet};
    ///
    /// assert!(FilterSet::<String, _>::builder(DirectoryStore::new(dir.path())?).plain(0, 0.01).is_err());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn plain(self, items: u64, fpr: f64) -> Result<Self, BuildError> {
        // Sized once; each key's filter is an empty copy under its own hash key.
        let template = BloomFilter::new(items, fpr)?;
        Ok(self.new_filter(move |_| AnyFilter::from(fresh(template.fresh()))))
    }

    /// Every key's filter is a windowed filter built by `builder` (each with its own random
    /// hash key); stored windowed filters are read on the builder's clock, so they know
    /// what expired while they were stored, and laid out as the builder lays out its rings
    /// ([`RingLayout`]: a set of busy users' rings that sets `Interleaved` gets it for the
    /// filters it loads too, not only for those it creates).
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// use bloom_core::windowed::{Window, WindowedFilter};
    /// use bloom_tower::filter_set::{DirectoryStore, FilterSet};
    ///
    /// let bad = WindowedFilter::builder(Window::Count(100)); // no expected_items
    /// assert!(FilterSet::<String, _>::builder(DirectoryStore::new(dir.path())?).windowed(bad).is_err());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn windowed(mut self, builder: WindowedBuilder) -> Result<Self, BuildError> {
        let template = builder.build()?;
        self.decode = decode_on(
            template.clock().clone(),
            Some((template.ring_layout(), template.size_in_bytes())),
        );
        Ok(self.new_filter(move |_| AnyFilter::Windowed(fresh(template.fresh()))))
    }

    /// The clock stored windowed filters are read on, so that they know what expired while
    /// they were stored (default: the system clock; [`windowed`](Self::windowed) sets its
    /// builder's). Other kinds are read as they are.
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// use std::sync::Arc;
    /// use bloom_core::windowed::ManualClock;
    /// use bloom_tower::filter_set::{DirectoryStore, FilterSet};
    ///
    /// let clock = Arc::new(ManualClock::new(0));
    /// let set = FilterSet::<u64, _>::builder(DirectoryStore::new(dir.path())?).clock(clock).build();
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.decode = decode_on(clock, None);
        self
    }

    /// Every key's first write creates `make(key)`: any kind, for example with a seed
    /// derived from the key.
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// use bloom_core::{AnyFilter, BloomFilter};
    /// use bloom_tower::filter_set::{DirectoryStore, FilterSet};
    ///
    /// let set = FilterSet::<u64, _>::builder(DirectoryStore::new(dir.path())?)
    ///     .new_filter(|user| AnyFilter::from(BloomFilter::builder().expected_items(100)
    ///         .false_positive_rate(0.01).seed(u128::from(*user)).build().unwrap()))
    ///     .build();
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn new_filter(mut self, make: impl Fn(&K) -> AnyFilter + Send + Sync + 'static) -> Self {
        self.new_filter = Some(Arc::new(make));
        self
    }

    /// The set. Without [`plain`](Self::plain), [`windowed`](Self::windowed) or
    /// [`new_filter`](Self::new_filter), keys get a plain filter for 1,000 keys at 1 %.
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// use bloom_tower::filter_set::{DirectoryStore, FilterSet};
    ///
    /// let set = FilterSet::<String, _>::builder(DirectoryStore::new(dir.path())?).build();
    /// assert_eq!(set.stats().filters_in_memory, 0);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn build(self) -> FilterSet<K, S> {
        let new_filter = self.new_filter.unwrap_or_else(|| {
            Arc::new(|_: &K| {
                AnyFilter::from(BloomFilter::new(1_000, 0.01).expect("valid parameters"))
            })
        });
        FilterSet::from_parts(
            self.store,
            self.budget,
            self.name,
            self.shards,
            new_filter,
            self.decode,
        )
    }
}

/// Reads a stored filter: a windowed one on `clock`, other kinds as they are. With
/// `ring_layout = (layout, max_bytes)`, a windowed ring is laid out as `layout` (a reader
/// returns a ring separate; a set whose builder interleaves its rings interleaves the ones it
/// loads too), but only a ring of at most `max_bytes`, the set's own filters' size: an
/// interleaved ring is allocated whole, so a larger one (a stored value is untrusted) stays
/// separate and costs what its bytes hold. A Classic ring cannot be interleaved and stays
/// separate too. `tests/filter_set.rs` `a_loaded_filter_takes_the_ring_layout_of_the_set`.
fn decode_on(clock: Arc<dyn Clock>, ring_layout: Option<(RingLayout, usize)>) -> Decode {
    Arc::new(move |bytes: &[u8]| -> Result<AnyFilter, DecodeError> {
        match WindowedFilter::read_from_with_clock(&mut &bytes[..], clock.clone()) {
            Ok(f) => Ok(AnyFilter::Windowed(match ring_layout {
                Some((layout, max_bytes))
                    if layout != f.ring_layout()
                        && f.layout() != Layout::Classic
                        && f.size_in_bytes() <= max_bytes =>
                {
                    f.into_ring_layout(layout)
                        .expect("a ring that is not Classic takes either layout")
                }
                _ => f,
            })),
            // Another kind: read as it is.
            Err(DecodeError::WrongKind { .. }) => AnyFilter::from_bytes(bytes),
            Err(e) => Err(e),
        }
    })
}

/// A fresh filter; its only failure is the operating system's random source.
fn fresh<F>(filter: Result<F, BuildError>) -> F {
    filter.expect("the operating system's random source failed")
}
