//! What a guarded lookup can fail with.

use std::any::Any;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// A failed load, handed to the caller that ran it and to every caller that waited for it.
/// Nothing here is cached: the next lookup of the key tries again. [`kind`](Self::kind) says
/// what failed; [`loader_error`](Self::loader_error) is the loader's own error.
///
/// ```
/// use bloom_tower::guarded_cache::LoadErrorKind;
/// use bloom_tower::{BloomFilter, GuardedCache, SharedFilter};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let filter = SharedFilter::<u64>::new(BloomFilter::new(1_000, 0.01)?);
/// filter.insert(&7u64);
/// let users: GuardedCache<u64, String> = GuardedCache::builder(filter).build();
/// let down = |_| async { Err::<Option<String>, _>(std::io::Error::other("database is down")) };
/// let error = users.get_or_load(&7, down).await.unwrap_err();
/// assert_eq!(error.kind(), LoadErrorKind::Loader);
/// assert_eq!(error.loader_error().unwrap().to_string(), "database is down");
/// # Ok(())
/// # }
/// ```
pub struct LoadError<E>(Repr<E>);

enum Repr<E> {
    /// Shared by every waiter, hence the `Arc`.
    Loader(Arc<E>),
    Timeout(Duration),
    Panicked,
}

/// What kind of failure a [`LoadError`] is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum LoadErrorKind {
    /// The loader returned an error ([`LoadError::loader_error`]).
    Loader,
    /// The loader ran longer than the configured `load_timeout` and was cancelled.
    Timeout,
    /// The loader panicked. The panic was contained: the key is not left locked, and the next
    /// lookup runs the loader again.
    Panicked,
}

impl<E> LoadError<E> {
    pub(crate) fn loader(error: Arc<E>) -> Self {
        Self(Repr::Loader(error))
    }

    pub(crate) fn timed_out(limit: Duration) -> Self {
        Self(Repr::Timeout(limit))
    }

    pub(crate) fn panicked() -> Self {
        Self(Repr::Panicked)
    }

    /// What failed.
    pub fn kind(&self) -> LoadErrorKind {
        match self.0 {
            Repr::Loader(_) => LoadErrorKind::Loader,
            Repr::Timeout(_) => LoadErrorKind::Timeout,
            Repr::Panicked => LoadErrorKind::Panicked,
        }
    }

    /// The loader's error, if it returned one.
    pub fn loader_error(&self) -> Option<&E> {
        match &self.0 {
            Repr::Loader(error) => Some(error),
            _ => None,
        }
    }

    /// The timeout the load exceeded, if it timed out.
    pub fn timeout(&self) -> Option<Duration> {
        match self.0 {
            Repr::Timeout(limit) => Some(limit),
            _ => None,
        }
    }
}

impl<E> Clone for LoadError<E> {
    fn clone(&self) -> Self {
        Self(match &self.0 {
            Repr::Loader(e) => Repr::Loader(Arc::clone(e)),
            Repr::Timeout(d) => Repr::Timeout(*d),
            Repr::Panicked => Repr::Panicked,
        })
    }
}

impl<E: fmt::Debug> fmt::Debug for LoadError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            Repr::Loader(e) => f.debug_tuple("LoadError::Loader").field(e).finish(),
            Repr::Timeout(d) => f.debug_tuple("LoadError::Timeout").field(d).finish(),
            Repr::Panicked => f.write_str("LoadError::Panicked"),
        }
    }
}

impl<E: fmt::Display> fmt::Display for LoadError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            Repr::Loader(e) => write!(f, "loading the value failed: {e}"),
            Repr::Timeout(d) => write!(f, "loading the value timed out after {d:?}"),
            Repr::Panicked => f.write_str("the loader panicked"),
        }
    }
}

impl<E: std::error::Error + 'static> std::error::Error for LoadError<E> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match &self.0 {
            Repr::Loader(e) => Some(&**e),
            _ => None,
        }
    }
}

/// [`LoadError`] with the loader's error type erased, as stored for waiters (different calls
/// may use different error types; the flight table keys on the type, so a waiter always
/// downcasts to its own).
#[derive(Clone)]
pub(crate) enum ErasedError {
    Loader(Arc<dyn Any + Send + Sync>),
    Timeout(Duration),
    Panicked,
}

impl ErasedError {
    pub(crate) fn erase<E: Send + Sync + 'static>(e: LoadError<E>) -> Self {
        match e.0 {
            Repr::Loader(e) => ErasedError::Loader(e),
            Repr::Timeout(d) => ErasedError::Timeout(d),
            Repr::Panicked => ErasedError::Panicked,
        }
    }

    pub(crate) fn restore<E: Send + Sync + 'static>(self) -> LoadError<E> {
        match self {
            ErasedError::Loader(e) => match e.downcast::<E>() {
                Ok(e) => LoadError::loader(e),
                // Unreachable: flights are keyed by the error's TypeId.
                Err(_) => LoadError::panicked(),
            },
            ErasedError::Timeout(d) => LoadError::timed_out(d),
            ErasedError::Panicked => LoadError::panicked(),
        }
    }
}
