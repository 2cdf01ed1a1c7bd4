use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;
use std::task::{Context, Poll};

use bloom_core::Key;
use tower_service::Service;

use super::ResponseFuture;
use super::stats::{GuardCounters, GuardStats};
use crate::key::{KeyExtractor, KeyFor};
use crate::reject::{NotFound, OnMissingKey, OnReject, PassThrough, RejectedKey};
use crate::shared_filter::SharedFilter;

/// The service made by [`BloomGuard`](crate::BloomGuard); see the [module docs](crate::guard).
pub struct BloomGuardService<S, K: ?Sized, E, R = NotFound, M = PassThrough> {
    pub(super) inner: S,
    pub(super) filter: SharedFilter<K>,
    pub(super) extractor: E,
    pub(super) on_reject: R,
    pub(super) on_missing_key: M,
    /// Behind one `Arc`: axum clones a route's service for every request.
    pub(super) reporting: Arc<Reporting>,
}

/// What a guard reports its requests under: its configuration (name, key logging), kept by
/// the layer, and the counts of that name, shared by the layer, its clones and services.
#[derive(Clone)]
pub(super) struct Reporting {
    pub(super) name: Cow<'static, str>,
    pub(super) log_rejected_keys: bool,
    pub(super) counters: Arc<GuardCounters>,
}

impl<S, K: ?Sized, E, R, M> BloomGuardService<S, K, E, R, M> {
    /// The inner service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The inner service, mutably.
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// Unwraps the inner service.
    pub fn into_inner(self) -> S {
        self.inner
    }

    /// The filter it guards with.
    pub fn filter(&self) -> &SharedFilter<K> {
        &self.filter
    }

    /// The counters of the [`BloomGuard`](crate::BloomGuard) it was made by.
    pub fn stats(&self) -> GuardStats {
        self.reporting.counters.snapshot()
    }
}

impl<S, K, E, R, M, Req> Service<Req> for BloomGuardService<S, K, E, R, M>
where
    S: Service<Req>,
    K: ?Sized,
    E: KeyExtractor<Req>,
    for<'a> E::Key<'a>: KeyFor<K>,
    R: OnReject<Req, S::Response>,
    M: OnMissingKey<Req, S::Response>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future, S::Response>;

    /// The inner service's readiness. A rejected request then leaves the reserved capacity
    /// unused, as any middleware that answers early does; it serves the next call.
    #[inline]
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Req) -> Self::Future {
        let Reporting {
            name,
            log_rejected_keys,
            counters,
        } = &*self.reporting;
        let answer = match self.extractor.extract(&req) {
            Some(key) if self.filter.admits(&key) => {
                counters.passed(name);
                None
            }
            Some(key) => {
                counters.rejected(name, &self.filter);
                let bytes = key.key_bytes();
                let key = RejectedKey::new(bytes.as_ref());
                // The key only on request: keys can be personal data.
                if *log_rejected_keys {
                    tracing::debug!(guard = %name, key = %key.for_log(), "rejected a request whose key is definitely absent");
                } else {
                    tracing::debug!(guard = %name, "rejected a request whose key is definitely absent");
                }
                Some(self.on_reject.on_reject(&req, key))
            }
            None => {
                counters.missing_key(name);
                self.on_missing_key.on_missing_key(&req)
            }
        };
        match answer {
            // The inner service is called here, synchronously: no clone of it goes into the
            // future, so the instance `poll_ready` readied is the one called.
            None => ResponseFuture::called(self.inner.call(req)),
            Some(response) => ResponseFuture::answered(response),
        }
    }
}

impl<S, K: ?Sized, E, R, M> Clone for BloomGuardService<S, K, E, R, M>
where
    S: Clone,
    E: Clone,
    R: Clone,
    M: Clone,
{
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            filter: self.filter.clone(),
            extractor: self.extractor.clone(),
            on_reject: self.on_reject.clone(),
            on_missing_key: self.on_missing_key.clone(),
            reporting: Arc::clone(&self.reporting),
        }
    }
}

impl<S: fmt::Debug, K: ?Sized, E, R, M> fmt::Debug for BloomGuardService<S, K, E, R, M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BloomGuardService")
            .field("inner", &self.inner)
            .field("name", &self.reporting.name)
            .field("filter", &self.filter)
            .field("extractor", &std::any::type_name::<E>())
            .field("on_reject", &std::any::type_name::<R>())
            .field("on_missing_key", &std::any::type_name::<M>())
            .finish()
    }
}
