//! Where a rebuild reads every key from: the [`KeySource`] trait.
//!
//! A rebuild calls [`KeySource::keys`] *after* it has started catching concurrent inserts, so
//! a source must take its snapshot inside `keys()` (run the query there) and must yield every
//! key whose [`insert`](crate::SharedFilter::insert) returned before `keys()` was called. A
//! collection built earlier and passed in (a `Vec`) is a snapshot from *before* the rebuild:
//! keys inserted between building it and calling `reload_from` are missing from it, so use
//! one only when nothing is inserted meanwhile (at startup), and [`from_iter`] /
//! [`from_stream`] (which run their closure inside `keys()`) otherwise.
//!
//! # Catching up after a restart
//!
//! A snapshot saved to disk misses every key created after it: by this process before it was
//! killed, by another writer while it was down. A source that can say where it stands (a
//! [`Watermark`]: the highest id, a timestamp, a log offset) and list the keys added since
//! lets [`SharedFilterBuilder::start`](crate::shared_filter::SharedFilterBuilder::start) load the snapshot
//! and read only those keys before the filter serves. A source that cannot keeps the
//! defaults ([`watermark`](KeySource::watermark) is `None`), and a loaded snapshot then
//! serves *verifying* (it lets through what it would reject) until a full rebuild.

use std::collections::{BTreeSet, HashSet};
use std::convert::Infallible;
use std::error::Error;
use std::fmt;
use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bloom_core::Key;

use crate::key::KeyFor;
use futures_core::Stream;
use futures_util::stream;

#[cfg(feature = "sqlx")]
#[cfg_attr(docsrs, doc(cfg(feature = "sqlx")))]
pub mod change_log;
#[cfg(feature = "sqlx")]
#[cfg_attr(docsrs, doc(cfg(feature = "sqlx")))]
pub mod sqlx;

/// The error type a [`KeySource`] may fail with: anything that converts into a boxed error.
pub type BoxError = Box<dyn Error + Send + Sync>;

/// Every key a filter should hold, streamed, for a rebuild.
///
/// Implemented for `Vec<T>`, `[T]`, `HashSet<T>` and `BTreeSet<T>` of keys, for references,
/// `Box` and `Arc` of sources, and for closures through [`from_iter`] (a fresh iterator per
/// rebuild) and [`from_stream`] (a fresh stream of `Result`s per rebuild, e.g. rows of a
/// database query).
///
/// ```
/// use bloom_tower::{KeySource, key_source};
/// use futures_util::StreamExt;
///
/// # tokio_test_block_on(async {
/// let ids = vec![1u64, 2, 3];
/// assert_eq!(ids.count_hint(), Some(3));
/// assert_eq!(ids.keys().count().await, 3);
///
/// // A source that fails halfway: the rebuild stops and the old filter keeps serving.
/// let flaky = key_source::from_stream(|| {
///     futures_util::stream::iter([Ok(1u64), Err(std::io::Error::other("connection reset"))])
/// });
/// assert_eq!(flaky.keys().count().await, 2);
/// # });
/// # fn tokio_test_block_on<F: std::future::Future>(f: F) -> F::Output {
/// #     tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(f)
/// # }
/// ```
pub trait KeySource {
    /// The type of the keys: a [`SharedFilter<K>`](crate::SharedFilter) is rebuilt only from
    /// a source whose keys are [`KeyFor<K>`] (`u64` for `u64`, `String` for `String` or
    /// `str`; any source for `SharedFilter<AnyKey>`).
    type Key: Key + Sync + ?Sized;

    /// Why reading the keys failed.
    type Error: Into<BoxError>;

    /// A fresh stream of every key. Called once per rebuild, after the rebuild has started
    /// catching concurrent inserts: take the snapshot here.
    fn keys(
        &self,
    ) -> impl Stream<Item = Result<impl KeyFor<Self::Key> + Send + '_, Self::Error>> + Send + '_;

    /// How many keys [`keys`](Self::keys) will yield, if known: the new filter is sized for it
    /// (plus headroom for the inserts until the next rebuild).
    fn count_hint(&self) -> Option<u64> {
        None
    }

    /// Where the source stands now, for catching up from later with
    /// [`keys_since`](Self::keys_since); `Ok(None)` (the default) if it cannot say.
    ///
    /// The contract: every key added to the source **after this call returns** is yielded by
    /// `keys_since` of the value it returned. (A rebuild takes the watermark just before
    /// [`keys`](Self::keys), so together they cover every key.) With a highest-id watermark,
    /// that means ids must not become visible below it later: a transaction that took its
    /// id before the watermark was read and commits after must hold the watermark back
    /// (return the lowest id still in flight, minus one).
    fn watermark(
        &self,
    ) -> impl Future<Output = Result<Option<Watermark>, Self::Error>> + Send + '_ {
        // An async block holds no error across an await, so it is `Send` for any error type.
        async { Ok(None) }
    }

    /// `true` if two equal watermarks prove that no key was added between the calls that
    /// returned them (a change log's last sequence number, a database snapshot's
    /// `xmin:xmax:running` text), so that a follower ([`SharedFilter::follow`]) may skip
    /// [`keys_since`](Self::keys_since) while the watermark stands still. `false` (the
    /// default) for a watermark held back from a highest id, which can stand still while a row
    /// below it commits.
    ///
    /// [`SharedFilter::follow`]: crate::SharedFilter::follow
    fn watermark_is_exact(&self) -> bool {
        false
    }

    /// Whether the source had reached `position` by `now` (what [`watermark`](Self::watermark)
    /// just returned): `false` if `position` lies past `now`, so that following from it would
    /// skip keys the source holds. A follower checks a position it reads back from outside (a
    /// follow position stored in Redis, a snapshot's watermark) before it follows from it:
    /// such a value may be forged, foreign, or from before the database was restored from an
    /// older backup.
    ///
    /// The default: [`Watermark::origin`] is always reached, two watermarks made
    /// [`from`](From) a `u64` compare as numbers, and anything else counts as reached (the
    /// source cannot tell). Override it for watermarks of another form.
    ///
    /// ```
    /// use bloom_tower::KeySource;
    /// use bloom_tower::key_source::Watermark;
    ///
    /// let ids: Vec<u64> = vec![1, 2, 3];
    /// assert!(ids.has_reached(&Watermark::from(3u64), &Watermark::from(3u64)));
    /// assert!(!ids.has_reached(&Watermark::from(1_000_000u64), &Watermark::from(3u64)));
    /// assert!(ids.has_reached(&Watermark::origin(), &Watermark::from(3u64)));
    /// ```
    fn has_reached(&self, position: &Watermark, now: &Watermark) -> bool {
        match (position.to_u64(), now.to_u64()) {
            (Some(position), Some(now)) => position <= now,
            _ => true,
        }
    }

    /// Every key added since `since` (a value [`watermark`](Self::watermark) returned; keys
    /// from before it may be yielded too, which costs nothing but time). Only called when
    /// `watermark` returned `Some`; the default yields nothing.
    fn keys_since<'a>(
        &'a self,
        since: &'a Watermark,
    ) -> impl Stream<Item = Result<impl KeyFor<Self::Key> + Send + 'a, Self::Error>> + Send + 'a
    {
        let _ = since;
        NoKeys::<&'a Self::Key, Self::Error>(PhantomData)
    }
}

/// A position in a [`KeySource`]: opaque bytes the source hands out and reads back (a highest
/// id, a timestamp, a log offset). Stored in snapshots.
///
/// ```
/// use bloom_tower::key_source::Watermark;
///
/// let mark = Watermark::from(1_042u64);
/// assert_eq!(mark.to_u64(), Some(1_042));
/// assert_eq!(Watermark::new(b"lsn/0/16B3748".to_vec()).as_bytes(), b"lsn/0/16B3748");
/// ```
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Watermark(Box<[u8]>);

impl Watermark {
    /// A watermark of any bytes the source understands.
    pub fn new(bytes: impl Into<Vec<u8>>) -> Self {
        Self(bytes.into().into_boxed_slice())
    }

    /// Its bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// The position before every key: [`KeySource::keys_since`] of it yields every key the
    /// source holds (what a follower starts from when nothing better is known).
    ///
    /// ```
    /// use bloom_tower::key_source::Watermark;
    ///
    /// assert!(Watermark::origin().as_bytes().is_empty());
    /// ```
    pub fn origin() -> Self {
        Self(Box::default())
    }

    /// The number it holds, if it was made [`from`](From) a `u64`.
    pub fn to_u64(&self) -> Option<u64> {
        <[u8; 8]>::try_from(&*self.0).ok().map(u64::from_be_bytes)
    }
}

impl From<u64> for Watermark {
    fn from(position: u64) -> Self {
        Self::new(position.to_be_bytes().to_vec())
    }
}

impl fmt::Debug for Watermark {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.to_u64() {
            Some(n) => write!(f, "Watermark({n})"),
            None => write!(f, "Watermark({:02x?})", &self.0),
        }
    }
}

/// The default [`KeySource::keys_since`]: nothing. `fn() -> (K, E)` keeps it `Send` and `Sync`
/// for any key and error type.
struct NoKeys<K, E>(PhantomData<fn() -> (K, E)>);

impl<K, E> Stream for NoKeys<K, E> {
    type Item = Result<K, E>;

    fn poll_next(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        Poll::Ready(None)
    }
}

/// The in-memory collections: every element, in iteration order; the count is the length.
macro_rules! collection_source {
    ($(impl<$($param:ident $(: $bound:path)?),*> for $collection:ty;)*) => {$(
        impl<$($param $(: $bound)?),*> KeySource for $collection
        where
            T: Key + Sync,
        {
            type Key = T;
            type Error = Infallible;

            fn keys(
                &self,
            ) -> impl Stream<Item = Result<impl KeyFor<T> + Send + '_, Infallible>> + Send + '_ {
                stream::iter(self.iter().map(Ok))
            }

            fn count_hint(&self) -> Option<u64> {
                Some(self.len() as u64)
            }
        }
    )*};
}

collection_source! {
    impl<T> for [T];
    impl<T> for Vec<T>;
    impl<T, S: Sync> for HashSet<T, S>;
    impl<T> for BTreeSet<T>;
}

macro_rules! forward_source {
    ($($pointer:ty),*) => {$(
        impl<S: KeySource + ?Sized> KeySource for $pointer {
            type Key = S::Key;
            type Error = S::Error;

            fn keys(&self) -> impl Stream<Item = Result<impl KeyFor<S::Key> + Send + '_, S::Error>> + Send + '_ {
                (**self).keys()
            }

            fn count_hint(&self) -> Option<u64> {
                (**self).count_hint()
            }

            fn watermark(&self) -> impl Future<Output = Result<Option<Watermark>, S::Error>> + Send + '_ {
                (**self).watermark()
            }

            fn keys_since<'a>(
                &'a self,
                since: &'a Watermark,
            ) -> impl Stream<Item = Result<impl KeyFor<S::Key> + Send + 'a, S::Error>> + Send + 'a {
                (**self).keys_since(since)
            }

            fn watermark_is_exact(&self) -> bool {
                (**self).watermark_is_exact()
            }

            fn has_reached(&self, position: &Watermark, now: &Watermark) -> bool {
                (**self).has_reached(position, now)
            }
        }
    )*};
}
forward_source!(&S, Box<S>, Arc<S>);

/// `with_count_hint`, and a `Debug` that shows the hint, for a source made from a closure
/// (`$source<F>` with fields `make: F` and `count_hint: Option<u64>`).
macro_rules! count_hint_source {
    ($source:ident) => {
        impl<F> $source<F> {
            /// Tells the rebuild how many keys to expect, to size the new filter.
            pub fn with_count_hint(mut self, keys: u64) -> Self {
                self.count_hint = Some(keys);
                self
            }
        }

        impl<F> fmt::Debug for $source<F> {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.debug_struct(stringify!($source))
                    .field("count_hint", &self.count_hint)
                    .finish_non_exhaustive()
            }
        }
    };
}

/// A source that calls `make` for a fresh iterator of keys at every rebuild. The iterator
/// must own what it iterates (implement [`KeySource`] yourself to borrow from the source).
///
/// ```
/// use bloom_tower::key_source;
/// use std::sync::{Arc, Mutex};
///
/// let users = Arc::new(Mutex::new(vec![String::from("ada")]));
/// let source = key_source::from_iter({
///     let users = Arc::clone(&users);
///     move || users.lock().unwrap().clone()
/// });
/// # let _ = source;
/// ```
pub fn from_iter<F, I>(make: F) -> FromIter<F>
where
    F: Fn() -> I + Send + Sync,
    I: IntoIterator,
    I::IntoIter: Send + 'static,
    I::Item: Key + Send + Sync + 'static,
{
    FromIter {
        make,
        count_hint: None,
    }
}

/// Source returned by [`from_iter`].
#[derive(Clone)]
pub struct FromIter<F> {
    make: F,
    count_hint: Option<u64>,
}

count_hint_source!(FromIter);

impl<F, I> KeySource for FromIter<F>
where
    F: Fn() -> I + Send + Sync,
    I: IntoIterator,
    I::IntoIter: Send + 'static,
    I::Item: Key + Send + Sync + 'static,
{
    type Key = I::Item;
    type Error = Infallible;

    fn keys(
        &self,
    ) -> impl Stream<Item = Result<impl KeyFor<I::Item> + Send + '_, Infallible>> + Send + '_ {
        stream::iter((self.make)().into_iter().map(Ok))
    }

    fn count_hint(&self) -> Option<u64> {
        self.count_hint
    }
}

/// A source that calls `make` for a fresh stream of `Result` keys at every rebuild (rows of a
/// database query, pages of an API, …). The first `Err` fails the rebuild. The stream must
/// own what it reads from (e.g. a clone of a connection pool); implement [`KeySource`]
/// yourself for a stream that borrows from the source.
///
/// For the rows of one SQL query, `key_source::sqlx::query` (feature `sqlx`) does all of this
/// in one line. By hand, with sqlx:
///
/// ```
/// use bloom_tower::{BloomFilter, SharedFilter, key_source};
/// use futures_util::StreamExt as _;
/// use sqlx::{Executor as _, Row as _};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let pool = sqlx::sqlite::SqlitePoolOptions::new().max_connections(1)
/// #     .connect("sqlite::memory:").await?;
/// # pool.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY)").await?;
/// # pool.execute("INSERT INTO orders (id) VALUES (1), (2), (3)").await?;
/// // let pool = sqlx::SqlitePool::connect(url).await?;
/// let order_ids = key_source::from_stream({
///     let pool = pool.clone();
///     move || pool.fetch("SELECT id FROM orders").map(|row| row?.try_get::<i64, _>(0))
/// });
/// // Does not compile: `sqlx::query_scalar(…).fetch(&pool)` returns a stream that borrows
/// // `pool` from the closure, which `from_stream` cannot keep (its stream must be `'static`);
/// // `Executor::fetch` on a `&Pool` returns one that owns a clone of the pool.
///
/// let filter = SharedFilter::<i64>::new(BloomFilter::new(1_000, 0.01)?);
/// filter.reload_from(&order_ids).await?;
/// assert!(filter.contains(&3i64));
/// # Ok(())
/// # }
/// ```
pub fn from_stream<F, St, K, E>(make: F) -> FromStream<F>
where
    F: Fn() -> St + Send + Sync,
    St: Stream<Item = Result<K, E>> + Send + 'static,
    K: Key + Send + Sync + 'static,
    E: Into<BoxError>,
{
    FromStream {
        make,
        count_hint: None,
    }
}

/// Source returned by [`from_stream`].
#[derive(Clone)]
pub struct FromStream<F> {
    make: F,
    count_hint: Option<u64>,
}

count_hint_source!(FromStream);

impl<F, St, K, E> KeySource for FromStream<F>
where
    F: Fn() -> St + Send + Sync,
    St: Stream<Item = Result<K, E>> + Send + 'static,
    K: Key + Send + Sync + 'static,
    E: Into<BoxError>,
{
    type Key = K;
    type Error = E;

    fn keys(&self) -> impl Stream<Item = Result<impl KeyFor<K> + Send + '_, E>> + Send + '_ {
        (self.make)()
    }

    fn count_hint(&self) -> Option<u64> {
        self.count_hint
    }
}
