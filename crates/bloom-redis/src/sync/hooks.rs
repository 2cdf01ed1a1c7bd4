//! What ties the filter to the synchronisation while it runs: the insert hook (queue the
//! key's bits), the commit hook (queue its digest), the rejection override (confirmed
//! rejections, or the stale policy) and the external rebuild ([`RebuildOwner`]), each holding a weak reference.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Weak};

use bloom_tower::key_source::BoxError;
use bloom_tower::shared_filter::{ErasedKeySource, ExternalRebuild, Rejection, Reloaded};

use super::inner::Inner;
use crate::Rebuilt;

/// Runs `SharedFilter::reload_from` (and so `SharedFilter::rebuild_every`) on a synchronised
/// filter as [`RedisSync::rebuild`](super::RedisSync::rebuild).
struct RebuildOwner(Weak<Inner>);

impl ExternalRebuild for RebuildOwner {
    fn rebuild<'a>(
        &'a self,
        source: &'a dyn ErasedKeySource,
    ) -> Pin<Box<dyn Future<Output = Result<Reloaded, BoxError>> + Send + 'a>> {
        Box::pin(async move {
            let inner = self
                .0
                .upgrade()
                .ok_or("the filter's RedisSync was dropped")?;
            Ok(match inner.rebuild(source, false).await? {
                Rebuilt::Rebuilt { keys, .. } => Reloaded::Rebuilt { keys },
                Rebuilt::Skipped => Reloaded::Elsewhere,
            })
        })
    }
}

impl Inner {
    /// Installs the hooks, the rejection override (with pub/sub only: without it there is no
    /// freshness) and the external rebuild.
    pub(super) fn install_hooks(self: &Arc<Self>) {
        let weak: Weak<Self> = Arc::downgrade(self);
        self.filter
            .set_insert_hook(Some(Arc::new(move |bytes: &[u8]| {
                if let Some(inner) = weak.upgrade() {
                    inner.on_insert(bytes);
                }
            })));
        let weak: Weak<Self> = Arc::downgrade(self);
        self.filter
            .set_commit_hook(Some(Arc::new(move |bytes: &[u8]| {
                if let Some(inner) = weak.upgrade() {
                    inner.on_commit(bytes);
                }
            })));
        // The filter's own rebuilds (`reload_from`, `rebuild_every`) go through the protocol:
        // a local one would swap in a filter the fleet does not share.
        self.filter
            .set_external_rebuild(Some(Arc::new(RebuildOwner(Arc::downgrade(self)))));
        if self.cfg.pubsub {
            let weak: Weak<Self> = Arc::downgrade(self);
            self.filter
                .set_rejection_override(Some(Arc::new(move || match weak.upgrade() {
                    Some(inner) => inner.rejection(),
                    None => Rejection::Stands,
                })));
        }
    }

    /// Removes all of them: the filter serves locally again.
    pub(super) fn remove_hooks(&self) {
        self.filter.set_external_rebuild(None);
        self.filter.set_insert_hook(None);
        self.filter.set_commit_hook(None);
        self.filter.set_rejection_override(None);
    }
}
