//! Hooks for synchronising a [`SharedFilter`] with something outside the process (another
//! instance's filter, through Redis say): insert and commit hooks, rebuilds whose new filter
//! is filled by the caller rather than streamed from a [`KeySource`], and an owner that runs
//! every rebuild ([`ExternalRebuild`]).

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use bloom_core::{AnyFilter, Key};
use futures_core::Stream;
use futures_util::StreamExt;

use super::pipeline::{Count, Run};
use super::rebuild::Reloaded;
use super::{CurrentFilter, Generation, SharedFilter};
use crate::key::KeyFor;
use crate::key_source::{BoxError, KeySource};

/// A function [`SharedFilter::insert`] calls with the inserted key's bytes
/// ([`Key::key_bytes`]); see [`SharedFilter::set_insert_hook`].
pub type InsertHook = Arc<dyn Fn(&[u8]) + Send + Sync>;

/// A function the filter calls for every key it would reject, deciding what the rejection
/// does ([`Rejection`]). See [`SharedFilter::set_rejection_override`].
pub type RejectionOverride = Arc<dyn Fn() -> Rejection + Send + Sync>;

/// What a would-be rejection does, as a [`RejectionOverride`] decides it.
pub enum Rejection {
    /// The local filter's "definitely absent" stands.
    Stands,
    /// Let the key through ("maybe") instead.
    LetThrough,
    /// Wait for a proof that the local view is current ([`Confirmation`]); when it resolves
    /// to `true` the filter is looked at again and its answer stands, on `false` the key is
    /// let through. [`SharedFilter::check`], the guard and `GuardedCache` wait;
    /// [`SharedFilter::contains`], which cannot, lets the key through.
    Confirm(Confirmation),
}

impl fmt::Debug for Rejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Rejection::Stands => "Stands",
            Rejection::LetThrough => "LetThrough",
            Rejection::Confirm(_) => "Confirm",
        })
    }
}

/// A pending proof that a view is current (see [`Rejection::Confirm`]): resolves to `true`
/// when the local answer stands, `false` to let the key through.
///
/// ```
/// # use bloom_tower::shared_filter::Confirmation;
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// let confirmation = Confirmation::new(async { true });
/// assert!(confirmation.await);
/// # });
/// ```
pub struct Confirmation(Pin<Box<dyn Future<Output = bool> + Send>>);

impl Confirmation {
    /// Wraps the future that decides.
    pub fn new(decides: impl Future<Output = bool> + Send + 'static) -> Self {
        Self(Box::pin(decides))
    }
}

impl Future for Confirmation {
    type Output = bool;

    fn poll(mut self: Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<bool> {
        self.0.as_mut().poll(cx)
    }
}

impl fmt::Debug for Confirmation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Confirmation")
    }
}

/// [`SharedFilter::start_building`] was called while a rebuild (or another [`Building`])
/// is running.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("a rebuild of this filter is already running")]
pub struct AlreadyBuilding;

impl<K: ?Sized> SharedFilter<K> {
    /// Sets (or with `None` removes) the function every [`insert`](Self::insert) calls, on
    /// every clone, with the key's bytes, after the key is in the local filter(s). Meant for
    /// forwarding inserts to other copies of the filter (a replication layer); it runs on the
    /// inserting thread, so it must be quick and must not block (queue the work).
    ///
    /// Since `Key for [u8]` hashes the bytes themselves, `filter.insert(bytes)` and
    /// `BloomFilter::for_each_bit(bytes, ..)` on the hook's argument act on the same key.
    pub fn set_insert_hook(&self, hook: Option<InsertHook>) {
        self.shared.hook.store(hook.map(Arc::new));
    }

    /// Sets (or with `None` removes) the function a [`PendingInsert`](super::PendingInsert)
    /// calls, on every clone, with the key's bytes each time it has done its after-commit
    /// work: at the end of [`committed`](super::PendingInsert::committed) (after the filter
    /// writes and the cache invalidation), and when dropped uncommitted, once at the drop
    /// (after the filter writes; the cache invalidation it spawns may still be running) and
    /// once more after the late pass a few seconds later. Plain [`insert`](Self::insert)s do
    /// not call it. Meant for telling other instances that the record now exists, so they drop
    /// their cached "not found" for it (send [`key_digest`](Self::key_digest), not the key,
    /// and have them call [`forget_remote`](Self::forget_remote)). It must be quick and must
    /// not block (queue the work).
    ///
    /// ```
    /// # use std::sync::{Arc, Mutex};
    /// # use bloom_tower::{BloomFilter, SharedFilter};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let filter = SharedFilter::<u64>::new(BloomFilter::new(1_000, 0.01)?);
    /// let published = Arc::new(Mutex::new(Vec::new()));
    /// // The hook sees every filter's keys as bytes: digest them on the untyped view.
    /// let (outbox, digests) = (Arc::clone(&published), filter.untyped());
    /// filter.set_commit_hook(Some(Arc::new(move |key: &[u8]| {
    ///     outbox.lock().unwrap().push(digests.key_digest(key));
    /// })));
    /// filter.prepare_insert(&7u64).committed().await;
    /// assert_eq!(*published.lock().unwrap(), [filter.key_digest(&7u64)]);
    /// # Ok(())
    /// # }
    /// ```
    pub fn set_commit_hook(&self, hook: Option<InsertHook>) {
        self.shared.commit_hook.store(hook.map(Arc::new));
    }

    /// Installs (or with `None` removes) the owner of this filter's rebuilds: from now on
    /// [`reload_from`](Self::reload_from), and so [`rebuild_every`](Self::rebuild_every),
    /// hand the source to `owner` instead of rebuilding locally, and return what it returns.
    /// Meant for a replication layer, whose fleet must rebuild through its own protocol (a
    /// local rebuild would leave this instance's filter out of step with the others').
    ///
    /// ```
    /// # use std::future::Future;
    /// # use std::pin::Pin;
    /// # use std::sync::Arc;
    /// use bloom_tower::key_source::BoxError;
    /// use bloom_tower::shared_filter::{ErasedKeySource, ExternalRebuild};
    /// use bloom_tower::{BloomFilter, shared_filter::Reloaded, SharedFilter};
    ///
    /// struct Fleet;
    /// impl ExternalRebuild for Fleet {
    ///     fn rebuild<'a>(
    ///         &'a self,
    ///         _source: &'a dyn ErasedKeySource,
    ///     ) -> Pin<Box<dyn Future<Output = Result<Reloaded, BoxError>> + Send + 'a>> {
    ///         // Ask the fleet to rebuild; another instance runs it.
    ///         Box::pin(async { Ok(Reloaded::Elsewhere) })
    ///     }
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let filter = SharedFilter::<u64>::new(BloomFilter::new(1_000, 0.01)?);
    /// filter.set_external_rebuild(Some(Arc::new(Fleet)));
    /// assert_eq!(filter.reload_from(&vec![1u64]).await?, Reloaded::Elsewhere);
    /// # Ok(())
    /// # }
    /// ```
    pub fn set_external_rebuild(&self, owner: Option<Arc<dyn ExternalRebuild>>) {
        self.shared.external.store(owner.map(Arc::new));
    }

    /// The installed owner of this filter's rebuilds, if any.
    pub(crate) fn external_rebuild(&self) -> Option<Arc<Arc<dyn ExternalRebuild>>> {
        self.shared.external.load_full()
    }

    /// Sets (or with `None` removes) the function the filter calls, on every clone, for each
    /// key it would reject: it decides whether the rejection stands, the key is let through,
    /// or the answer waits for a [`Confirmation`] ([`Rejection`]). Meant for a replication
    /// layer whose local view may be missing other instances' inserts: it lets would-be
    /// rejections through while it lost contact with them, and otherwise has each one wait
    /// for proof that the view is current. Lookups the filter answers "maybe" never call it;
    /// it must be quick (an atomic load or two).
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use std::sync::atomic::{AtomicBool, Ordering};
    /// # use bloom_tower::{BloomFilter, SharedFilter};
    /// use bloom_tower::shared_filter::{Confirmation, Rejection};
    ///
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    /// let filter = SharedFilter::<String>::new(BloomFilter::new(1_000, 0.01)?);
    /// let stale = Arc::new(AtomicBool::new(true));
    /// let flag = Arc::clone(&stale);
    /// filter.set_rejection_override(Some(Arc::new(move || {
    ///     if flag.load(Ordering::Relaxed) {
    ///         Rejection::LetThrough
    ///     } else {
    ///         Rejection::Confirm(Confirmation::new(async { true })) // the view is current
    ///     }
    /// })));
    /// assert!(filter.contains("never inserted")); // let through while stale
    /// stale.store(false, Ordering::Relaxed);
    /// assert!(!filter.check("never inserted").await); // confirmed: absent
    /// assert!(filter.contains("never inserted")); // `contains` cannot wait: let through
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # }).unwrap();
    /// ```
    pub fn set_rejection_override(&self, gate: Option<RejectionOverride>) {
        self.shared.rejection_override.store(gate.map(Arc::new));
    }

    /// Starts a rebuild whose new filter the caller fills: `next` (usually empty) is published
    /// as the filter being built, so from now on every [`insert`](Self::insert) writes it as
    /// well as the serving one, exactly as during [`reload_from`](Self::reload_from) (the
    /// [module docs](crate::shared_filter) say why no insert is lost). [`Building::finish`] swaps it in;
    /// dropping the [`Building`] abandons it and the serving filter stays.
    ///
    /// Fails if a rebuild is running. `next` may have any shape or kind: lookups only ever
    /// read one filter.
    pub fn start_building(&self, next: impl Into<AnyFilter>) -> Result<Building, AlreadyBuilding> {
        let slot = Arc::clone(&self.shared.rebuild)
            .try_lock_owned()
            .map_err(|_| AlreadyBuilding)?;
        let run = Run::new(Arc::clone(&self.shared), slot, false);
        let next = run.publish(next.into());
        Ok(Building { run, next })
    }
}

/// What [`ErasedKeySource::erased_keys`] returns (an alias, for clippy's sake).
type ErasedKeys<'a> = Pin<Box<dyn Stream<Item = Result<Box<[u8]>, BoxError>> + Send + 'a>>;

/// A [`KeySource`] behind a trait object: keys as owned bytes ([`Key::key_bytes`]), errors
/// boxed. What an [`ExternalRebuild`] is handed, since `KeySource` itself cannot be a trait
/// object (its methods return `impl Trait`).
///
/// Implemented for every sized `KeySource` that is `Send + Sync`, and so for `&S` with any
/// `S: KeySource + Sync` (slices and trait objects too). `dyn ErasedKeySource` is a
/// `KeySource` again, so code generic over sources takes it as is:
///
/// ```
/// use bloom_tower::KeySource;
/// use bloom_tower::shared_filter::ErasedKeySource;
/// use futures_util::StreamExt;
///
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// let ids = vec![1u64, 2, 3];
/// let erased: &dyn ErasedKeySource = &ids;
/// assert_eq!(erased.count_hint(), Some(3)); // a KeySource again
/// assert_eq!(erased.keys().count().await, 3);
/// # });
/// ```
pub trait ErasedKeySource: Send + Sync {
    /// [`KeySource::keys`], each key as its [`Key::key_bytes`].
    ///
    /// ```
    /// # use bloom_tower::shared_filter::ErasedKeySource;
    /// # use futures_util::StreamExt;
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    /// let keys: Vec<_> = vec!["a", "b"].erased_keys().collect().await;
    /// assert_eq!(keys[1].as_deref().unwrap(), b"b");
    /// # });
    /// ```
    fn erased_keys(&self) -> ErasedKeys<'_>;

    /// [`KeySource::count_hint`].
    ///
    /// ```
    /// # use bloom_tower::shared_filter::ErasedKeySource;
    /// assert_eq!(vec![1u64, 2].erased_count_hint(), Some(2));
    /// ```
    fn erased_count_hint(&self) -> Option<u64>;
}

impl<S: KeySource + Send + Sync> ErasedKeySource for S {
    fn erased_keys(&self) -> ErasedKeys<'_> {
        Box::pin(self.keys().map(|key| match key {
            // `Key for [u8]` hashes the bytes themselves: the owned copy is the same key.
            Ok(key) => Ok(key.key_bytes().as_ref().into()),
            Err(error) => Err(error.into()),
        }))
    }

    fn erased_count_hint(&self) -> Option<u64> {
        self.count_hint()
    }
}

impl KeySource for dyn ErasedKeySource + '_ {
    /// Bytes: an erased source feeds an untyped filter (`SharedFilter<AnyKey>`).
    type Key = [u8];
    type Error = BoxError;

    fn keys(
        &self,
    ) -> impl Stream<Item = Result<impl KeyFor<[u8]> + Send + '_, BoxError>> + Send + '_ {
        self.erased_keys()
    }

    fn count_hint(&self) -> Option<u64> {
        self.erased_count_hint()
    }
}

/// The owner of a filter's rebuilds, installed with [`SharedFilter::set_external_rebuild`]:
/// a replication layer that rebuilds the filter of every instance through its own protocol.
pub trait ExternalRebuild: Send + Sync {
    /// Runs (or has another instance run) a rebuild from `source`, for
    /// [`SharedFilter::reload_from`]. Typically it fills a new filter with
    /// [`SharedFilter::start_building`] (`reload_from` does not hold the rebuild slot while
    /// it waits for this) and returns [`Reloaded::Rebuilt`], or [`Reloaded::Elsewhere`] when
    /// another instance runs it. An error is returned to the caller as a
    /// [`ReloadError`](super::ReloadError) of kind
    /// [`External`](super::ReloadErrorKind::External).
    ///
    /// ```
    /// # use std::future::Future;
    /// # use std::pin::Pin;
    /// use bloom_tower::key_source::BoxError;
    /// use bloom_tower::shared_filter::{ErasedKeySource, ExternalRebuild};
    /// use bloom_tower::{BloomFilter, shared_filter::Reloaded, SharedFilter};
    ///
    /// /// Streams the source, as a replication layer would to fill the shared filter.
    /// struct Owner;
    /// impl ExternalRebuild for Owner {
    ///     fn rebuild<'a>(
    ///         &'a self,
    ///         source: &'a dyn ErasedKeySource,
    ///     ) -> Pin<Box<dyn Future<Output = Result<Reloaded, BoxError>> + Send + 'a>> {
    ///         Box::pin(async move {
    ///             let mut keys = 0;
    ///             let mut stream = source.erased_keys();
    ///             while let Some(key) = futures_util::StreamExt::next(&mut stream).await {
    ///                 let _bytes: Box<[u8]> = key?; // into the fleet's new filter
    ///                 keys += 1;
    ///             }
    ///             Ok(Reloaded::Rebuilt { keys })
    ///         })
    ///     }
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let filter = SharedFilter::<u64>::new(BloomFilter::new(1_000, 0.01)?);
    /// filter.set_external_rebuild(Some(std::sync::Arc::new(Owner)));
    /// assert_eq!(filter.reload_from(&vec![5u64, 6]).await?, Reloaded::Rebuilt { keys: 2 });
    /// assert!(!filter.contains(&5u64)); // this filter was not rebuilt here
    /// # Ok(())
    /// # }
    /// ```
    fn rebuild<'a>(
        &'a self,
        source: &'a dyn ErasedKeySource,
    ) -> Pin<Box<dyn Future<Output = Result<Reloaded, BoxError>> + Send + 'a>>;
}

/// A rebuild started by [`SharedFilter::start_building`]: every insert also writes
/// [`filter`](Self::filter) until [`finish`](Self::finish) swaps it in or the value is dropped.
pub struct Building {
    /// Dropped unfinished, it abandons the rebuild.
    run: Run,
    next: Arc<Generation>,
}

impl Building {
    /// The filter being built. Add keys and merge bits into it freely (it is lock-free).
    pub fn filter(&self) -> &AnyFilter {
        &self.next.filter
    }

    /// An owned handle on the filter being built, usable after this [`Building`] is gone
    /// (and, after [`finish`](Self::finish), the same filter as the serving one).
    pub fn handle(&self) -> CurrentFilter {
        CurrentFilter(Arc::clone(&self.next))
    }

    /// Swaps the built filter in: from now on it serves, and inserts write it alone.
    pub fn finish(self) {
        self.run.swap_in(&self.next, Count::FromBits);
    }
}

impl fmt::Debug for Building {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Building")
            .field("filter", &self.next.filter)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use bloom_core::BloomFilter;
    use std::sync::Mutex;

    use super::*;
    use crate::key::AnyKey;

    fn seeded() -> BloomFilter {
        BloomFilter::builder()
            .bits(8192)
            .hashes(4)
            .seed(3)
            .build()
            .unwrap()
    }

    #[test]
    fn the_hook_sees_every_insert_after_it_is_local() {
        let filter = SharedFilter::<AnyKey>::new(seeded());
        let seen = Arc::new(Mutex::new(Vec::new()));
        let (log, probe) = (Arc::clone(&seen), filter.clone());
        filter.set_insert_hook(Some(Arc::new(move |bytes: &[u8]| {
            assert!(probe.contains(bytes));
            log.lock().unwrap().push(bytes.to_vec());
        })));
        filter.clone().insert("a");
        filter.insert(&7u16);
        assert_eq!(*seen.lock().unwrap(), [b"a".to_vec(), vec![7, 0]]);
        filter.set_insert_hook(None);
        filter.insert("b");
        assert_eq!(seen.lock().unwrap().len(), 2);
    }

    #[tokio::test]
    async fn an_external_build_double_writes_then_swaps() {
        let filter = SharedFilter::<String>::new(seeded());
        filter.insert("old");
        let building = filter.start_building(seeded()).unwrap();
        assert_eq!(
            filter.start_building(seeded()).unwrap_err(),
            AlreadyBuilding
        );
        assert!(filter.stats().rebuilding);
        filter.insert("during");
        building.filter().insert("from elsewhere");
        let handle = building.handle();
        assert!(building.filter().contains("during"));
        assert!(!filter.contains("from elsewhere"));
        building.finish();
        assert!(filter.contains("during") && filter.contains("from elsewhere"));
        assert!(std::ptr::eq(&*handle, &*filter.current()));
        assert!(
            !filter.contains("old"),
            "a rebuild drops what it was not given"
        );
        let stats = filter.stats();
        assert_eq!((stats.rebuilds, stats.rebuilding), (1, false));
        // A normal rebuild still works afterwards.
        filter.reload_from(&vec!["x"]).await.unwrap();
        assert!(filter.contains("x"));
    }

    #[tokio::test]
    async fn dropping_an_external_build_keeps_the_serving_filter() {
        let filter = SharedFilter::<String>::new(seeded());
        let building = filter.start_building(seeded()).unwrap();
        filter.insert("during");
        drop(building);
        assert!(filter.contains("during"));
        assert!(!filter.stats().rebuilding);
        assert_eq!(filter.stats().cancelled_rebuilds, 1);
        let again = filter.start_building(seeded()).unwrap();
        again.finish();
    }
}
