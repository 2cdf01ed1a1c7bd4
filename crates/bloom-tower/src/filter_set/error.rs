//! [`FilterSetError`]: what a [`FilterSet`](super::FilterSet) operation or flush can fail with.

use bloom_core::DecodeError;

use super::store::StoreError;

/// A filter could not be loaded or stored. Nothing is lost: a filter that could not be
/// loaded is left in the store as it is, one that could not be stored stays in memory.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FilterSetError {
    /// The store failed to return the key's filter.
    #[error("loading the filter of {name:?}: {source}")]
    Load {
        /// The key, as the store names it.
        name: String,
        /// Why.
        #[source]
        source: StoreError,
    },
    /// The stored bytes are not a filter (corrupted, truncated, or another program's); they
    /// are left in the store, and the key answers this error until they are replaced.
    #[error("the stored filter of {name:?} cannot be read: {source}")]
    Corrupt {
        /// The key, as the store names it.
        name: String,
        /// What is wrong with the bytes.
        #[source]
        source: DecodeError,
    },
    /// The store failed to take the key's filter; it stays in memory and dirty.
    #[error("storing the filter of {name:?}: {source}")]
    Store {
        /// The key, as the store names it.
        name: String,
        /// Why.
        #[source]
        source: StoreError,
    },
}
