//! Sizing a cuckoo filter: from (expected items, false-positive rate), or from an explicit
//! number of buckets and fingerprint width.
//!
//! A key's lookup compares its fingerprint with the others in its two buckets, `2·4·α` of
//! them at load `α`, each equal with chance `1/(2^f − 1)`, so the false-positive rate is
//!
//! ```text
//! p(f, α) = 1 − (1 − 1/(2^f − 1))^(8α)
//! ```
//!
//! From `(n, p)` the builder takes the smallest `f` with `p(f, DESIGN_LOAD) ≤ p` and
//! `m = ⌈n / (4·DESIGN_LOAD)⌉` buckets: `n` keys fill it to the design load, 95 %, below the
//! load at which inserts start to fail (measured in `tests/cuckoo.rs`). A bucket is
//! `4f − 4` bits (semi-sorted), so memory is `(4f − 4)/(4·0.95)` bits per key.

use crate::{BuildError, sizing};

use super::bucket::{MAX_FINGERPRINT_BITS, MIN_FINGERPRINT_BITS, SLOTS, Shape};
use super::filter::CuckooFilter;
use super::table::Table;

/// The load `expected_items` fill a filter sized from them to.
pub(crate) const DESIGN_LOAD: f64 = 0.95;

/// `p(f, α)`: see the module docs.
pub(crate) fn false_positive_rate(fingerprint_bits: u32, load: f64) -> f64 {
    let one = 1.0 / ((1u64 << fingerprint_bits) - 1) as f64;
    1.0 - (1.0 - one).powf(2.0 * SLOTS as f64 * load)
}

/// Configures a [`CuckooFilter`]: either `expected_items` and `false_positive_rate`, or
/// `buckets` and `fingerprint_bits`.
///
/// ```
/// use bloom_core::CuckooFilter;
///
/// let sized = CuckooFilter::builder()
///     .expected_items(1_000_000)
///     .false_positive_rate(0.01)
///     .build()?;
/// assert_eq!(sized.fingerprint_bits(), 10);
/// let explicit = CuckooFilter::builder().buckets(300).fingerprint_bits(12).build()?;
/// assert_eq!(explicit.slots(), 1_200);
/// # Ok::<(), bloom_core::BuildError>(())
/// ```
#[derive(Clone, Debug, Default)]
pub struct CuckooBuilder {
    expected_items: Option<u64>,
    false_positive_rate: Option<f64>,
    buckets: Option<u64>,
    fingerprint_bits: Option<u32>,
    seed: Option<u128>,
}

impl CuckooBuilder {
    sizing::setters! {
        /// The number of keys to size for: they fill it to 95 % of its slots.
        ///
        /// ```
        /// use bloom_core::CuckooFilter;
        ///
        /// let f = CuckooFilter::builder().expected_items(950).false_positive_rate(0.01).build()?;
        /// assert_eq!(f.num_buckets(), 250);
        /// # Ok::<(), bloom_core::BuildError>(())
        /// ```
        expected_items(n: u64) => Some(n);

        /// The false-positive rate at `expected_items`; at least about 0.0001 (fingerprints of
        /// at most 17 bits).
        ///
        /// ```
        /// use bloom_core::CuckooFilter;
        ///
        /// let f = CuckooFilter::builder().expected_items(1_000).false_positive_rate(0.0001).build()?;
        /// assert_eq!(f.fingerprint_bits(), 17);
        /// # Ok::<(), bloom_core::BuildError>(())
        /// ```
        false_positive_rate(p: f64) => Some(p);

        /// An explicit number of buckets (four slots each), instead of `expected_items`.
        ///
        /// ```
        /// use bloom_core::CuckooFilter;
        ///
        /// let f = CuckooFilter::builder().buckets(7).fingerprint_bits(9).build()?;
        /// assert_eq!((f.num_buckets(), f.capacity()), (7, None));
        /// # Ok::<(), bloom_core::BuildError>(())
        /// ```
        buckets(m: u64) => Some(m);

        /// An explicit fingerprint width, 5 to 17 bits, instead of `false_positive_rate`.
        ///
        /// ```
        /// use bloom_core::CuckooFilter;
        ///
        /// assert!(CuckooFilter::builder().buckets(7).fingerprint_bits(18).build().is_err());
        /// ```
        fingerprint_bits(f: u32) => Some(f);

        /// The secret hash key; random (from the OS) if not set.
        ///
        /// ```
        /// use bloom_core::CuckooFilter;
        ///
        /// let a = CuckooFilter::builder().buckets(64).fingerprint_bits(12).seed(9).build()?;
        /// let b = CuckooFilter::builder().buckets(64).fingerprint_bits(12).seed(9).build()?;
        /// a.insert("k")?;
        /// b.insert("k")?;
        /// assert_eq!(a.to_bytes(), b.to_bytes());
        /// # Ok::<(), Box<dyn std::error::Error>>(())
        /// ```
        seed(seed: u128) => Some(seed);
    }

    /// Builds the filter, or says which setting to change.
    ///
    /// ```
    /// use bloom_core::{BuildError, CuckooFilter};
    ///
    /// let too_strict = CuckooFilter::builder().expected_items(10).false_positive_rate(1e-6).build();
    /// assert!(matches!(too_strict, Err(BuildError::CuckooRateTooLow { .. })));
    /// ```
    pub fn build(self) -> Result<CuckooFilter, BuildError> {
        let (buckets, fingerprint_bits, capacity, target_fpr) = self.sizing()?;
        let shape = Shape { fingerprint_bits };
        sizing::check_size(buckets as f64 * f64::from(shape.bucket_bits()))?;
        Ok(CuckooFilter::from_parts(
            Table::new(buckets, shape, None),
            sizing::hasher(self.seed)?,
            capacity,
            target_fpr,
        ))
    }

    /// `(m, f, capacity, target rate)` from whichever settings were given.
    fn sizing(&self) -> Result<(u64, u32, Option<u64>, Option<f64>), BuildError> {
        let fingerprint_bits = match (self.false_positive_rate, self.fingerprint_bits) {
            (Some(_), Some(_)) => return Err(BuildError::ConflictingCuckooSize),
            (Some(p), None) => Some(fingerprint_bits_for(p)?),
            (None, Some(f)) if (MIN_FINGERPRINT_BITS..=MAX_FINGERPRINT_BITS).contains(&f) => {
                Some(f)
            }
            (None, Some(f)) => {
                return Err(BuildError::FingerprintBits {
                    bits: f,
                    min: MIN_FINGERPRINT_BITS,
                    max: MAX_FINGERPRINT_BITS,
                });
            }
            (None, None) => None,
        };
        match (self.expected_items, self.buckets, fingerprint_bits) {
            (Some(_), Some(_), _) => Err(BuildError::ConflictingCuckooSize),
            (Some(0), None, _) => Err(BuildError::ZeroItems),
            (Some(n), None, Some(f)) => {
                let buckets = (n as f64 / (SLOTS as f64 * DESIGN_LOAD)).ceil() as u64;
                Ok((buckets.max(1), f, Some(n), self.false_positive_rate))
            }
            (Some(_), None, None) => Err(BuildError::MissingFalsePositiveRate),
            (None, Some(0), _) => Err(BuildError::ZeroBuckets),
            (None, Some(m), Some(f)) if self.false_positive_rate.is_none() => {
                Ok((m, f, None, None))
            }
            (None, Some(_), _) => Err(BuildError::MissingFingerprintBits),
            (None, None, Some(_)) if self.false_positive_rate.is_some() => {
                Err(BuildError::MissingExpectedItems)
            }
            (None, None, _) => Err(BuildError::MissingSize),
        }
    }
}

/// The smallest fingerprint width whose rate at [`DESIGN_LOAD`] is at most `p`.
fn fingerprint_bits_for(p: f64) -> Result<u32, BuildError> {
    sizing::check_rate(p)?;
    (MIN_FINGERPRINT_BITS..=MAX_FINGERPRINT_BITS)
        .find(|&f| false_positive_rate(f, DESIGN_LOAD) <= p)
        .ok_or(BuildError::CuckooRateTooLow {
            fpr: p,
            min: false_positive_rate(MAX_FINGERPRINT_BITS, DESIGN_LOAD),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn widths_are_the_smallest_that_meet_the_rate() {
        for (p, f) in [(0.25, 5), (0.01, 10), (0.001, 13), (0.0001, 17)] {
            assert_eq!(fingerprint_bits_for(p).unwrap(), f, "p = {p}");
            assert!(false_positive_rate(f, DESIGN_LOAD) <= p);
            if f > MIN_FINGERPRINT_BITS {
                assert!(false_positive_rate(f - 1, DESIGN_LOAD) > p);
            }
        }
        assert!(matches!(
            fingerprint_bits_for(0.00001),
            Err(BuildError::CuckooRateTooLow { .. })
        ));
    }

    #[test]
    fn every_wrong_combination_says_what_to_change() {
        let b = CuckooFilter::builder;
        assert!(matches!(b().build(), Err(BuildError::MissingSize)));
        assert!(matches!(
            b().expected_items(5).build(),
            Err(BuildError::MissingFalsePositiveRate)
        ));
        assert!(matches!(
            b().false_positive_rate(0.1).build(),
            Err(BuildError::MissingExpectedItems)
        ));
        assert!(matches!(
            b().buckets(5).build(),
            Err(BuildError::MissingFingerprintBits)
        ));
        assert!(matches!(
            b().expected_items(0).false_positive_rate(0.1).build(),
            Err(BuildError::ZeroItems)
        ));
        assert!(matches!(
            b().buckets(0).fingerprint_bits(8).build(),
            Err(BuildError::ZeroBuckets)
        ));
        assert!(matches!(
            b().buckets(5).expected_items(5).fingerprint_bits(8).build(),
            Err(BuildError::ConflictingCuckooSize)
        ));
        assert!(matches!(
            b().buckets(5).fingerprint_bits(4).build(),
            Err(BuildError::FingerprintBits { bits: 4, .. })
        ));
        assert!(matches!(
            b().expected_items(5).false_positive_rate(f64::NAN).build(),
            Err(BuildError::InvalidFalsePositiveRate(_))
        ));
        assert!(matches!(
            b().expected_items(u64::MAX / 2)
                .false_positive_rate(0.01)
                .build(),
            Err(BuildError::TooLarge { .. })
        ));
    }
}
