//! [`FilterFull`]: an insert that found no room, and changed nothing.

use std::fmt;

/// An insert found no free slot within four moves (682 buckets searched) of the key's two
/// buckets. Nothing was dropped or moved out of the table: every
/// key inserted before is still found. The filter is at (or past) the load it was sized
/// for; build a larger one (a [`SharedFilter`] with `auto_grow` does).
///
/// [`SharedFilter`]: https://docs.rs/bloomguard-tower/latest/bloom_tower/struct.SharedFilter.html
///
/// ```
/// use bloom_core::CuckooFilter;
///
/// let f = CuckooFilter::builder().buckets(1).fingerprint_bits(8).seed(1).build()?;
/// for key in 0..4u64 {
///     f.insert(&key)?; // one bucket: four slots
/// }
/// let full = f.insert(&4u64).unwrap_err();
/// assert_eq!(full.len, 4);
/// assert!((0..4u64).all(|key| f.contains(&key)));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FilterFull {
    /// Fingerprints held when the insert gave up.
    pub len: u64,
    /// Slots in the filter.
    pub slots: u64,
}

impl fmt::Display for FilterFull {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the cuckoo filter is full: no free slot within reach of the key's two buckets \
             ({} of {} slots used); nothing was dropped: build a larger filter",
            self.len, self.slots
        )
    }
}

impl std::error::Error for FilterFull {}
