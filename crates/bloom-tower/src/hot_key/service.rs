//! [`HotKeyCacheService`]: serve from the cache, or be (or wait for) the key's one loader.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{Method, Request, Response};
use http_body::Body;
use http_body_util::BodyExt;
use tower_service::Service;

use super::HotKeyBody;
use super::store::{CachedResponse, Event, Shared, Store};
use crate::flight::{Flight, Role, wait};
use crate::key::KeyExtractor;
use bloom_core::Key;

/// The service made by [`HotKeyCache`](super::HotKeyCache).
pub struct HotKeyCacheService<S, E> {
    pub(crate) inner: S,
    pub(crate) extractor: Arc<E>,
    pub(crate) store: Arc<Store>,
}

impl<S: Clone, E> Clone for HotKeyCacheService<S, E> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            extractor: Arc::clone(&self.extractor),
            store: Arc::clone(&self.store),
        }
    }
}

impl<S: fmt::Debug, E> fmt::Debug for HotKeyCacheService<S, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HotKeyCacheService")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

/// The response future: boxed, since a miss may wait for another request's load and then
/// buffer a body (the cost of the box is small next to a cache lookup).
pub type HotKeyFuture<B, E> =
    Pin<Box<dyn Future<Output = Result<Response<HotKeyBody<B, <B as Body>::Error>>, E>> + Send>>;

/// What a request does once it has looked at the cache and the loads in flight.
enum Next<'a> {
    Serve(Arc<CachedResponse>),
    PassThrough,
    Lead(Flight<'a, Bytes, Shared>),
}

impl<S, E, ReqBody, ResBody> Service<Request<ReqBody>> for HotKeyCacheService<S, E>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send,
    S::Error: Send,
    E: KeyExtractor<Request<ReqBody>>,
    ReqBody: Send + 'static,
    ResBody: Body<Data = Bytes> + Send + 'static,
    ResBody::Error: Send,
{
    type Response = Response<HotKeyBody<ResBody, ResBody::Error>>;
    type Error = S::Error;
    type Future = HotKeyFuture<ResBody, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<ReqBody>) -> Self::Future {
        // The instance that was polled ready is the one to call; leave a fresh clone behind.
        let clone = self.inner.clone();
        let ready = std::mem::replace(&mut self.inner, clone);
        // Only GET is cached: other methods change things, and a HEAD's empty body must not
        // be served to a GET.
        let key = (req.method() == Method::GET)
            .then(|| {
                self.extractor
                    .extract(&req)
                    .map(|k| Bytes::copy_from_slice(k.key_bytes().as_ref()))
            })
            .flatten();
        let store = Arc::clone(&self.store);
        Box::pin(async move {
            let Some(key) = key else {
                store.counters.count(Event::PassedThrough);
                return pass_through(ready, req).await;
            };
            match next_step(&store, &key).await {
                Next::Serve(cached) => Ok(cached.to_response()),
                Next::PassThrough => pass_through(ready, req).await,
                Next::Lead(flight) => lead(ready, req, &store, key, flight).await,
            }
        })
    }
}

/// Looks in the cache, then joins or starts the key's load; loops when a leader it waited
/// for went away.
async fn next_step<'a>(store: &'a Store, key: &Bytes) -> Next<'a> {
    loop {
        if let Some(cached) = store.cache.get(key).await {
            return Next::Serve(count_hit(store, cached));
        }
        match store.flights.join(key) {
            Role::Leader(flight) => {
                // A load that finished between our cache miss and `join` cached its response
                // before leaving the table: serve that instead of loading again.
                if let Some(cached) = store.cache.get(key).await {
                    flight.complete(Shared::Response(Arc::clone(&cached)));
                    return Next::Serve(count_hit(store, cached));
                }
                return Next::Lead(flight);
            }
            Role::Waiter(slot) => {
                store.counters.count(Event::Coalesced);
                match wait(slot).await {
                    Some(Shared::Response(r)) => return Next::Serve(r),
                    Some(Shared::Uncacheable) => return Next::PassThrough,
                    None => continue,
                }
            }
        }
    }
}

fn count_hit(store: &Store, cached: Arc<CachedResponse>) -> Arc<CachedResponse> {
    let event = if cached.is_not_found() {
        Event::NegativeHit
    } else {
        Event::Hit
    };
    store.counters.count(event);
    cached
}

async fn pass_through<S, ReqBody, ResBody>(
    mut ready: S,
    req: Request<ReqBody>,
) -> Result<Response<HotKeyBody<ResBody, ResBody::Error>>, S::Error>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>>,
    ResBody: Body,
{
    Ok(ready.call(req).await?.map(HotKeyBody::inner))
}

/// The key's one trip to the inner service. Its outcome is cached (if it may be) before the
/// waiters are released, so nobody arriving later loads it again.
async fn lead<S, ReqBody, ResBody>(
    mut ready: S,
    req: Request<ReqBody>,
    store: &Store,
    key: Bytes,
    flight: Flight<'_, Bytes, Shared>,
) -> Result<Response<HotKeyBody<ResBody, ResBody::Error>>, S::Error>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>>,
    ResBody: Body<Data = Bytes>,
{
    store.counters.count(Event::Load);
    // An error drops `flight`: the waiters wake and one of them tries the inner service.
    let response = ready.call(req).await?;
    if !store.cacheable(&response) {
        store.counters.count(Event::PassedThrough);
        flight.complete(Shared::Uncacheable);
        return Ok(response.map(HotKeyBody::inner));
    }
    let (parts, body) = response.into_parts();
    match body.collect().await {
        Ok(collected) => {
            let cached = Arc::new(CachedResponse::new(parts, collected.to_bytes()));
            store.cache.insert(key, Arc::clone(&cached)).await;
            flight.complete(Shared::Response(Arc::clone(&cached)));
            Ok(cached.to_response())
        }
        Err(e) => {
            flight.complete(Shared::Uncacheable);
            Ok(Response::from_parts(parts, HotKeyBody::failed(e)))
        }
    }
}
