//! What every builder shares ([`Builder`](crate::Builder),
//! [`CuckooBuilder`](crate::CuckooBuilder),
//! [`WindowedBuilder`](crate::windowed::WindowedBuilder)): its setters (`setters!`), the
//! checks of its settings with the [`BuildError`] each gives, and its hash key. Each
//! filter's own formula stays with it: `params.rs` for the Bloom layouts, `cuckoo/builder.rs`
//! for fingerprints and buckets.
//!
//! Rule: a setting is checked here or nowhere, so one wrong value gives the same error from
//! every builder (`tests/params.rs`, and `cuckoo/builder.rs`
//! `every_wrong_combination_says_what_to_change`).

use crate::hasher::KeyHasher;
use crate::params::{BLOCK_BITS, MAX_BITS, MAX_HASHES, SPLIT_HASHES};
use crate::{BuildError, Layout};

/// A builder's setters, each with the rustdoc written at the call site:
/// `name(arg: Type) => value;` is `pub fn name(mut self, arg: Type) -> Self`, which stores
/// `value` in the field `name`.
macro_rules! setters {
    ($($(#[$attr:meta])* $name:ident($arg:ident: $ty:ty) => $value:expr;)*) => {
        $(
            $(#[$attr])*
            pub fn $name(mut self, $arg: $ty) -> Self {
                self.$name = $value;
                self
            }
        )*
    };
}
pub(crate) use setters;

/// `(n, p)` from `expected_items` and `false_positive_rate`, which go together: `Ok(None)`
/// when neither is given, and the error naming the missing one when only one is.
pub(crate) fn items_and_rate(
    expected_items: Option<u64>,
    false_positive_rate: Option<f64>,
) -> Result<Option<(u64, f64)>, BuildError> {
    match (expected_items, false_positive_rate) {
        (Some(n), Some(p)) => Ok(Some((n, p))),
        (Some(_), None) => Err(BuildError::MissingFalsePositiveRate),
        (None, Some(_)) => Err(BuildError::MissingExpectedItems),
        (None, None) => Ok(None),
    }
}

/// `n ≥ 1`.
pub(crate) fn check_items(n: u64) -> Result<(), BuildError> {
    if n == 0 {
        return Err(BuildError::ZeroItems);
    }
    Ok(())
}

/// `0 < p < 1` (NaN is refused).
pub(crate) fn check_rate(p: f64) -> Result<(), BuildError> {
    if !(p > 0.0 && p < 1.0) {
        return Err(BuildError::InvalidFalsePositiveRate(p));
    }
    Ok(())
}

/// [`check_items`], then [`check_rate`].
pub(crate) fn check_items_and_rate(n: u64, p: f64) -> Result<(), BuildError> {
    check_items(n)?;
    check_rate(p)
}

/// The error for a filter that would need `bits` bits, more than [`MAX_BITS`].
pub(crate) fn too_large(bits: f64) -> BuildError {
    BuildError::TooLarge {
        bits,
        max: MAX_BITS,
    }
}

/// `bits ≤` [`MAX_BITS`].
pub(crate) fn check_size(bits: f64) -> Result<(), BuildError> {
    if bits > MAX_BITS as f64 {
        return Err(too_large(bits));
    }
    Ok(())
}

/// Validates `m` and rounds it up to what the layout stores (whole blocks for Blocked and
/// SplitBlock).
pub(crate) fn round_bits(layout: Layout, bits: u64) -> Result<u64, BuildError> {
    if bits == 0 {
        return Err(BuildError::ZeroBits);
    }
    let rounded = match layout {
        Layout::Classic => bits,
        Layout::Blocked | Layout::SplitBlock => {
            bits.div_ceil(BLOCK_BITS).saturating_mul(BLOCK_BITS)
        }
    };
    if rounded > MAX_BITS {
        return Err(too_large(bits as f64));
    }
    Ok(rounded)
}

/// `k` from 1 to [`MAX_HASHES`], and [`SPLIT_HASHES`] for [`Layout::SplitBlock`].
pub(crate) fn check_hashes(layout: Layout, k: u32) -> Result<(), BuildError> {
    match k {
        0 => Err(BuildError::ZeroHashes),
        k if layout == Layout::SplitBlock && k != SPLIT_HASHES => {
            Err(BuildError::HashesFixedByLayout {
                layout,
                hashes: k,
                fixed: SPLIT_HASHES,
            })
        }
        k if k > MAX_HASHES => Err(BuildError::TooManyHashes {
            hashes: k,
            max: MAX_HASHES,
        }),
        _ => Ok(()),
    }
}

/// The hash key: `seed` if one was set, else one drawn from the operating system.
pub(crate) fn hasher(seed: Option<u128>) -> Result<KeyHasher, BuildError> {
    match seed {
        Some(seed) => Ok(KeyHasher::new(seed)),
        None => KeyHasher::random().map_err(BuildError::Random),
    }
}
