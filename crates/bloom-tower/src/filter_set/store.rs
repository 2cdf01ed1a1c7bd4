//! Where evicted filters go: the [`FilterStore`] trait, and [`StoreError`].
//!
//! A store holds one byte string per name (a filter in the file format of `docs/FORMAT.md`).
//! Its one rule: **a `store` replaces the bytes atomically.** Whatever happens to the process
//! during the call (an error, a cancelled future, `kill -9`), a later `load` returns the
//! previous bytes or the new ones, never a mix. The set relies on it to lose nothing it
//! acknowledged (see the module docs).

use std::future::Future;
use std::time::Duration;

/// Keeps the filters a [`FilterSet`](super::FilterSet) evicts, by name.
///
/// Implemented by [`DirectoryStore`](super::DirectoryStore) (one file per filter) and by
/// `bloom_redis::RedisFilterStore` (one Redis string per filter).
///
/// ```
/// use std::collections::HashMap;
/// use std::sync::Mutex;
/// use bloom_tower::filter_set::{FilterStore, StoreError};
///
/// /// A store in this process's memory (for tests: a real one outlives the process).
/// #[derive(Default)]
/// struct InMemory(Mutex<HashMap<String, Vec<u8>>>);
///
/// impl FilterStore for InMemory {
///     async fn load(&self, name: &str) -> Result<Option<Vec<u8>>, StoreError> {
///         Ok(self.0.lock().unwrap().get(name).cloned())
///     }
///     async fn store(&self, name: &str, bytes: Vec<u8>) -> Result<(), StoreError> {
///         self.0.lock().unwrap().insert(name.to_owned(), bytes); // one step: atomic
///         Ok(())
///     }
/// }
/// ```
pub trait FilterStore: Send + Sync + 'static {
    /// The bytes of the last completed [`store`](Self::store) under `name`; `None` if there
    /// was none.
    fn load(&self, name: &str) -> impl Future<Output = Result<Option<Vec<u8>>, StoreError>> + Send;

    /// Replaces the bytes under `name`, atomically (see the module docs). Returns once they
    /// are as durable as the store promises (its own docs say against what: a killed process,
    /// a lost machine).
    fn store(
        &self,
        name: &str,
        bytes: Vec<u8>,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;
}

/// A store could not load or store a filter.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The store's server failed or refused the command.
    #[error("{0}")]
    Backend(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// The store did not answer in time.
    #[error("no answer within {0:?}")]
    Timeout(Duration),
}

impl StoreError {
    /// Wraps a store server's error.
    ///
    /// ```
    /// use bloom_tower::filter_set::StoreError;
    ///
    /// let e = StoreError::backend("connection refused");
    /// assert_eq!(e.to_string(), "connection refused");
    /// ```
    pub fn backend(error: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> Self {
        Self::Backend(error.into())
    }
}
