//! Where evicted filters go: the [`FilterStore`] trait, and [`StoreError`].
//!
//! A store holds one byte string per name (a filter in the file format of `docs/FORMAT.md`).
//! Its one rule: **a `store` replaces the bytes atomically.** Whatever happens to the process
//! during the call (an error, a cancelled future, `kill -9`), a later `load` returns the
//! previous bytes or the new ones, never a mix. The set relies on it to lose nothing it
//! acknowledged (see the module docs).
//!
//! A flush hands a store up to [`FilterStore::MAX_BATCH`] filters in one
//! [`store_many`](FilterStore::store_many) call. The rule holds for each name of a batch: on
//! `Ok` every one is stored; on an error or a dropped future each holds its old bytes or its
//! new ones, and the set keeps every filter of the batch changed, to store it again. A store
//! that can write many filters for less than one at a time (one SQL transaction, one Redis
//! pipeline, one trip to a blocking thread) overrides both.

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

    /// The most filters a [`flush`](super::FilterSet::flush) hands to one
    /// [`store_many`](Self::store_many). The default, 1, keeps one store per call, so a flush
    /// runs up to 8 of them at once; a store that writes a batch for less than its filters
    /// one at a time raises it.
    const MAX_BATCH: usize = 1;

    /// Replaces the bytes of every name in `batch` (at most [`MAX_BATCH`](Self::MAX_BATCH)
    /// of them), each atomically. `Ok` once all are as durable as [`store`](Self::store)
    /// makes one; on an error, each name holds its old bytes or its new ones (see the module
    /// docs). The default stores them one after another and stops at the first error.
    fn store_many(
        &self,
        batch: Vec<(String, Vec<u8>)>,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        async move {
            for (name, bytes) in batch {
                self.store(&name, bytes).await?;
            }
            Ok(())
        }
    }
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
