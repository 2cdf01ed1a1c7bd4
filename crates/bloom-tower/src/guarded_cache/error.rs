//! What a guarded lookup can fail with.

use std::any::Any;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// A failed load, handed to the caller that ran it and to every caller that waited for it.
/// Nothing here is cached: the next lookup of the key tries again.
#[derive(Debug)]
#[non_exhaustive]
pub enum LoadError<E> {
    /// The loader returned this error (shared by every waiter, hence the `Arc`).
    Loader(Arc<E>),
    /// The loader ran longer than the configured `load_timeout` and was cancelled.
    Timeout(Duration),
    /// The loader panicked. The panic was contained: the key is not left locked, and the
    /// next lookup runs the loader again.
    Panicked,
}

impl<E> Clone for LoadError<E> {
    fn clone(&self) -> Self {
        match self {
            LoadError::Loader(e) => LoadError::Loader(Arc::clone(e)),
            LoadError::Timeout(d) => LoadError::Timeout(*d),
            LoadError::Panicked => LoadError::Panicked,
        }
    }
}

impl<E: fmt::Display> fmt::Display for LoadError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LoadError::Loader(e) => write!(f, "loading the value failed: {e}"),
            LoadError::Timeout(d) => write!(f, "loading the value timed out after {d:?}"),
            LoadError::Panicked => f.write_str("the loader panicked"),
        }
    }
}

impl<E: std::error::Error + 'static> std::error::Error for LoadError<E> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            LoadError::Loader(e) => Some(&**e),
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
        match e {
            LoadError::Loader(e) => ErasedError::Loader(e),
            LoadError::Timeout(d) => ErasedError::Timeout(d),
            LoadError::Panicked => ErasedError::Panicked,
        }
    }

    pub(crate) fn restore<E: Send + Sync + 'static>(self) -> LoadError<E> {
        match self {
            ErasedError::Loader(e) => match e.downcast::<E>() {
                Ok(e) => LoadError::Loader(e),
                // Unreachable: flights are keyed by the error's TypeId.
                Err(_) => LoadError::Panicked,
            },
            ErasedError::Timeout(d) => LoadError::Timeout(d),
            ErasedError::Panicked => LoadError::Panicked,
        }
    }
}
