use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;
use std::task::{Context, Poll};

use bloom_core::Key;
use tower_service::Service;

use super::ResponseFuture;
use super::future::Deferred;
use super::stats::{GuardCounters, GuardStats};
use crate::key::{AnyKey, Extracted, KeyExtractor, KeyFor};
use crate::reject::{NotFound, OnMissingKey, OnReject, PassThrough, RejectedKey};
use crate::shared_filter::{Admission, SharedFilter};

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
    S: Service<Req> + Clone,
    K: ?Sized,
    E: KeyExtractor<Req>,
    for<'a> E::Key<'a>: KeyFor<K>,
    R: OnReject<Req, S::Response> + Clone,
    M: OnMissingKey<Req, S::Response>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future, S::Response, Confirming<S, Req, R>>;

    /// The inner service's readiness. A rejected request then leaves the reserved capacity
    /// unused, as any middleware that answers early does; it serves the next call.
    #[inline]
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Req) -> Self::Future {
        /// What the lookup found, owning what it needs once `req` moves on.
        enum Found {
            Maybe,
            Absent(Box<[u8]>),
            Confirm(crate::shared_filter::Confirmation, Box<[u8]>),
            NoKey,
            Ambiguous,
        }
        let found = match self.extractor.extract_checked(&req) {
            Extracted::Key(key) => match self.filter.admission(&key) {
                Admission::Maybe => Found::Maybe,
                Admission::Absent => Found::Absent(key.key_bytes().as_ref().into()),
                Admission::Confirm(confirmation) => {
                    Found::Confirm(confirmation, key.key_bytes().as_ref().into())
                }
            },
            Extracted::Missing => Found::NoKey,
            Extracted::Ambiguous => Found::Ambiguous,
        };
        let reporting = &*self.reporting;
        let admission = match found {
            Found::Maybe => None,
            Found::Absent(key) => Some(Err(key)),
            Found::Confirm(confirmation, key) => Some(Ok((confirmation, key))),
            Found::NoKey => {
                reporting.counters.missing_key(&reporting.name);
                return match self.on_missing_key.on_missing_key(&req) {
                    None => ResponseFuture::called(self.inner.call(req)),
                    Some(response) => ResponseFuture::answered(response),
                };
            }
            Found::Ambiguous => {
                return ResponseFuture::answered(answer_ambiguous(
                    reporting,
                    &mut self.on_reject,
                    &mut self.on_missing_key,
                    &req,
                ));
            }
        };
        match admission {
            // The inner service is called here, synchronously: no clone of it goes into the
            // future, so the instance `poll_ready` readied is the one called.
            None => {
                reporting.counters.passed(&reporting.name);
                ResponseFuture::called(self.inner.call(req))
            }
            Some(Err(key)) => {
                let key: Box<[u8]> = key;
                ResponseFuture::answered(reject(
                    reporting,
                    &self.filter,
                    &mut self.on_reject,
                    &req,
                    &key,
                ))
            }
            // The readied instance goes into the future (and a clone stays here, to be readied
            // for the next call): it is called if the confirmation lets the key through.
            Some(Ok((confirmation, key))) => {
                let clone = self.inner.clone();
                let service = std::mem::replace(&mut self.inner, clone);
                ResponseFuture::confirming(
                    confirmation,
                    Confirming {
                        service,
                        req,
                        key,
                        filter: self.filter.untyped(),
                        on_reject: self.on_reject.clone(),
                        reporting: Arc::clone(&self.reporting),
                    },
                )
            }
        }
    }
}

/// Counts and logs a rejection, and answers it.
fn reject<K: ?Sized, Req, Res, R: OnReject<Req, Res>>(
    reporting: &Reporting,
    filter: &SharedFilter<K>,
    on_reject: &mut R,
    req: &Req,
    key: &[u8],
) -> Res {
    reporting.counters.rejected(&reporting.name, filter);
    filter.count_rejection();
    let key = RejectedKey::new(key);
    // The key only on request: keys can be personal data.
    if reporting.log_rejected_keys {
        tracing::debug!(guard = %reporting.name, key = %key.for_log(), "rejected a request whose key is definitely absent");
    } else {
        tracing::debug!(guard = %reporting.name, "rejected a request whose key is definitely absent");
    }
    on_reject.on_reject(req, key)
}

/// Counts, logs and answers a request whose key is ambiguous: never the inner service, never
/// a lookup of one of its values. The rule and its order of answers: [`crate::reject`].
fn answer_ambiguous<Req, Res, R, M>(
    reporting: &Reporting,
    on_reject: &mut R,
    on_missing_key: &mut M,
    req: &Req,
) -> Res
where
    R: OnReject<Req, Res>,
    M: OnMissingKey<Req, Res>,
{
    tracing::debug!(guard = %reporting.name, "answered a request whose key is ambiguous (given more than once, the values differing)");
    let answer = on_reject
        .on_ambiguous_key(req)
        .or_else(|| on_missing_key.on_missing_key(req));
    reporting
        .counters
        .ambiguous_key(&reporting.name, answer.is_none());
    answer.unwrap_or_else(|| on_reject.on_reject(req, RejectedKey::ambiguous()))
}

/// A request whose rejection waits for its [`Confirmation`](crate::shared_filter::Confirmation)
/// (a filter shared with other instances: see
/// [`Rejection::Confirm`](crate::shared_filter::Rejection::Confirm)): the readied inner
/// service, the request and its key's bytes.
pub struct Confirming<S, Req, R> {
    service: S,
    req: Req,
    key: Box<[u8]>,
    filter: SharedFilter<AnyKey>,
    on_reject: R,
    reporting: Arc<Reporting>,
}

impl<S, Req, R> Deferred<S::Future, S::Response> for Confirming<S, Req, R>
where
    S: Service<Req>,
    R: OnReject<Req, S::Response>,
{
    fn resume(mut self, stands: bool) -> Result<S::Future, S::Response> {
        // Confirmed: look again, since the key may have arrived while the proof came back.
        // `Key for [u8]` hashes the bytes themselves: the same key as the typed one.
        if stands && !self.filter.holds(&self.key[..]) {
            return Err(reject(
                &self.reporting,
                &self.filter,
                &mut self.on_reject,
                &self.req,
                &self.key,
            ));
        }
        self.reporting.counters.passed(&self.reporting.name);
        Ok(self.service.call(self.req))
    }
}

impl<S, Req, R> fmt::Debug for Confirming<S, Req, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Confirming")
            .field("guard", &self.reporting.name)
            .finish_non_exhaustive()
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
