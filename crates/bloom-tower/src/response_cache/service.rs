//! [`ResponseCacheService`]: serve a stored response, or be (or wait for) the URL's one
//! load, and store what may be stored.

use std::fmt;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use bloom_core::Key;
use bytes::Bytes;
use http::{Method, Request, Response, header};
use http_body::Body;
use tower_service::Service;

use super::body::Read;
use super::in_flight::{FlightKey, Handoff};
use super::layer::Shared;
use super::policy::{self, NotStored, RequestUse};
use super::store::{Stored, Variant};
use super::{ResponseBody, ResponseFuture};
use crate::flight::{Flight, Role, wait};
use crate::key::KeyExtractor;

/// The service made by [`ResponseCache`](super::ResponseCache) around an inner service.
///
/// ```
/// use bloom_tower::{ResponseCache, key, response_cache::ResponseCacheService};
/// use http::{Request, Response};
/// use tower::{Layer, service_fn};
///
/// let inner = service_fn(|_: Request<()>| async {
///     Ok::<_, std::convert::Infallible>(Response::new(String::from("user 7")))
/// });
/// let service: ResponseCacheService<_, _> = ResponseCache::new(key::path_segment(1)).layer(inner);
/// # let _ = service;
/// ```
pub struct ResponseCacheService<S, E> {
    pub(crate) inner: S,
    pub(crate) extractor: Arc<E>,
    pub(crate) shared: Arc<Shared>,
}

impl<S: Clone, E> Clone for ResponseCacheService<S, E> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            extractor: Arc::clone(&self.extractor),
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<S: fmt::Debug, E> fmt::Debug for ResponseCacheService<S, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResponseCacheService")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

type Answer<B, E> = Result<Response<ResponseBody<B>>, E>;

impl<S, E, ReqBody, ResBody> Service<Request<ReqBody>> for ResponseCacheService<S, E>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send,
    S::Error: Send,
    E: KeyExtractor<Request<ReqBody>>,
    ReqBody: Send + 'static,
    ResBody: Body<Data = Bytes> + Send + 'static,
    ResBody::Error: Send,
{
    type Response = Response<ResponseBody<ResBody>>;
    type Error = S::Error;
    type Future = ResponseFuture<ResBody, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<ReqBody>) -> Self::Future {
        // The instance that was polled ready is the one to call; leave a fresh clone behind.
        let clone = self.inner.clone();
        let ready = std::mem::replace(&mut self.inner, clone);
        let record = self
            .extractor
            .extract(&req)
            .map(|key| Bytes::copy_from_slice(key.key_bytes().as_ref()));
        let shared = Arc::clone(&self.shared);
        ResponseFuture::new(async move {
            let Some(record) = record else {
                shared.counters.passed_through(&shared.name);
                return pass_through(ready, req).await;
            };
            // Only GET is stored and served: a HEAD's empty body must not answer a GET, and
            // other methods change things.
            let keyed = Keyed {
                ready,
                req,
                shared: &shared,
                record,
            };
            if keyed.req.method() == Method::GET {
                keyed.serve_get().await
            } else {
                shared.counters.passed_through(&shared.name);
                keyed.pass_through_other_method().await
            }
        })
    }
}

/// A request with a key, and the inner service, polled ready, to answer it.
struct Keyed<'a, S, ReqBody> {
    ready: S,
    req: Request<ReqBody>,
    shared: &'a Shared,
    /// The key's bytes: what the store files responses under.
    record: Bytes,
}

impl<S, ReqBody, ResBody> Keyed<'_, S, ReqBody>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>>,
    ResBody: Body<Data = Bytes>,
{
    /// A `GET` with a key: from the cache, from the URL's load in flight, or from a load of its
    /// own.
    async fn serve_get(self) -> Answer<ResBody, S::Error> {
        let Self {
            ready,
            req,
            shared,
            record,
        } = self;
        let request_use = RequestUse::of(req.headers());
        if request_use == RequestUse::Bypass {
            shared.counters.bypassed(&shared.name);
            return pass_through(ready, req).await;
        }
        let url = if shared.config.share_by_key_only {
            Bytes::new()
        } else {
            let Some(url) = url_key(&req) else {
                // Which authority the handler answers for is ambiguous: not cached.
                shared.counters.bypassed(&shared.name);
                return pass_through(ready, req).await;
            };
            url
        };
        if let Some(hit) = shared
            .store
            .answer(&record, &url, req.headers(), request_use)
            .await
        {
            return Ok(serve_hit(shared, &hit));
        }
        if request_use == RequestUse::Credentials {
            // Another request's load may be answered for other credentials: never wait on one.
            shared.counters.bypassed(&shared.name);
            return load(ready, req, shared, record, url, request_use, None).await;
        }
        let flight_key: FlightKey = (record.clone(), url.clone());
        loop {
            match shared.in_flight.join(&flight_key) {
                Role::Leader(flight) => {
                    // A load that finished between our miss and `join` stored its response
                    // before leaving the table: serve that instead of loading again.
                    if let Some(hit) = shared
                        .store
                        .answer(&record, &url, req.headers(), request_use)
                        .await
                    {
                        flight.complete(Handoff::Response(Arc::clone(&hit)));
                        return Ok(serve_hit(shared, &hit));
                    }
                    return load(ready, req, shared, record, url, request_use, Some(flight)).await;
                }
                Role::Waiter(slot) => {
                    shared.counters.coalesced_waiter(&shared.name);
                    match tokio::time::timeout(shared.config.wait_timeout, wait(slot)).await {
                        Err(_elapsed) => {
                            // The leader is stuck (a hung handler, a slow body): answer this
                            // request with a call of its own rather than strand it.
                            shared.counters.wait_timeout(&shared.name);
                            return load(ready, req, shared, record, url, request_use, None).await;
                        }
                        Ok(Some(Handoff::Response(handed)))
                            if handed.answers(&url, req.headers(), request_use, Instant::now()) =>
                        {
                            return Ok(handed.response_from_cache());
                        }
                        Ok(Some(Handoff::Uncacheable)) => return pass_through(ready, req).await,
                        // The leader went away, was overtaken by an invalidation, or its response
                        // varies on a header this request sends differently: look again.
                        Ok(Some(Handoff::Response(_)) | None) => {
                            let hit = shared
                                .store
                                .answer(&record, &url, req.headers(), request_use)
                                .await;
                            if let Some(hit) = hit {
                                return Ok(serve_hit(shared, &hit));
                            }
                        }
                    }
                }
            }
        }
    }

    /// Any method but `GET`. A successful unsafe one (`POST`, `PUT`, `PATCH`, `DELETE`, …)
    /// changed the record: its stored responses are invalidated (RFC 9111 §4.4), after the
    /// response, so a load that raced with the change is discarded by the epoch.
    async fn pass_through_other_method(self) -> Answer<ResBody, S::Error> {
        let safe = matches!(
            *self.req.method(),
            Method::HEAD | Method::OPTIONS | Method::TRACE
        );
        let response = pass_through(self.ready, self.req).await?;
        let status = response.status();
        if !safe && (status.is_success() || status.is_redirection()) {
            self.shared.store.invalidate(&self.record).await;
        }
        Ok(response)
    }
}

fn serve_hit<B: Body>(shared: &Shared, hit: &Variant) -> Response<ResponseBody<B>> {
    if hit.is_not_found() {
        shared.counters.negative_hit(&shared.name);
    } else {
        shared.counters.hit(&shared.name);
    }
    hit.response_from_cache()
}

/// One call to the inner service whose response is stored if it may be. A flight's leader
/// hands the outcome to its waiters; a request without a flight (credentials, a waiter that
/// timed out) just stores it.
async fn load<S, ReqBody, ResBody>(
    mut ready: S,
    req: Request<ReqBody>,
    shared: &Shared,
    record: Bytes,
    url: Bytes,
    request_use: RequestUse,
    flight: Option<Flight<'_, FlightKey, Handoff>>,
) -> Answer<ResBody, S::Error>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>>,
    ResBody: Body<Data = Bytes>,
{
    shared.counters.load(&shared.name);
    // Read before the call: an invalidation from here on makes this load stale.
    let epoch = shared.store.epoch(&record);
    // `Vary` matches later requests against this one's headers, which the call consumes.
    let request_headers = req.headers().clone();
    // An error drops `flight`: the waiters wake and one of them tries the inner service.
    let response = ready.call(req).await?;
    let rules = match policy::storable(
        response.status(),
        response.headers(),
        request_use,
        shared.config.lifetimes,
    ) {
        Ok(rules) => rules,
        Err(reason) => {
            let response = response.map(ResponseBody::inner);
            return Ok(not_stored(shared, flight, reason, response));
        }
    };
    let (parts, body) = response.into_parts();
    let bytes = match ResponseBody::read(body, shared.config.max_body_bytes).await {
        Read::Complete(bytes) => bytes,
        Read::Given(body, reason) => {
            let response = Response::from_parts(parts, body);
            return Ok(not_stored(shared, flight, reason, response));
        }
    };
    let variant = Arc::new(Variant::new(
        url,
        &request_headers,
        rules,
        parts,
        bytes,
        epoch,
    ));
    if !shared.store.fits(&record, &variant) {
        return Ok(not_stored(
            shared,
            flight,
            NotStored::OverBudget,
            variant.response(),
        ));
    }
    match shared.store.store(record, Arc::clone(&variant)).await {
        Stored::Kept => {
            if let Some(flight) = flight {
                flight.complete(Handoff::Response(Arc::clone(&variant)));
            }
        }
        Stored::Stale => {
            shared.counters.stale_load_discarded(&shared.name);
            // Waiters may have arrived after the invalidation, so this response is not for
            // them: dropping the flight sends them back to look again.
            drop(flight);
        }
    }
    // Its own request gets it either way: it is what the inner service answered to it.
    Ok(variant.response())
}

fn not_stored<B>(
    shared: &Shared,
    flight: Option<Flight<'_, FlightKey, Handoff>>,
    reason: NotStored,
    response: Response<B>,
) -> Response<B> {
    shared.counters.not_stored(&shared.name);
    tracing::debug!(reason = reason.as_str(), "response not stored");
    if let Some(flight) = flight {
        flight.complete(Handoff::Uncacheable);
    }
    response
}

async fn pass_through<S, ReqBody, ResBody>(
    mut ready: S,
    req: Request<ReqBody>,
) -> Answer<ResBody, S::Error>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>>,
    ResBody: Body<Data = Bytes>,
{
    Ok(ready.call(req).await?.map(ResponseBody::inner))
}

/// What identifies the resource besides the method (always `GET` here): authority (from
/// the target, else `Host`, lower-cased) + path + query, then, if the request has one,
/// `X-Forwarded-Host` after a NUL byte (a handler behind a proxy may answer for it). The
/// authority cannot contain `/` and the path starts with one, and no header value holds a
/// NUL, so the parts cannot run into each other. `None` (not cached) when the target's
/// authority and `Host` disagree: a handler that reads `Host` would answer for another
/// resource than the key names (tests/response_cache.rs
/// `a_target_authority_that_disagrees_with_host_is_not_cached`).
fn url_key<B>(req: &Request<B>) -> Option<Bytes> {
    let host = req.headers().get(header::HOST).map(|host| host.as_bytes());
    let authority = match (req.uri().authority(), host) {
        (Some(authority), Some(host))
            if !authority.as_str().as_bytes().eq_ignore_ascii_case(host) =>
        {
            return None;
        }
        (Some(authority), _) => authority.as_str().as_bytes(),
        (None, host) => host.unwrap_or_default(),
    };
    let target = req
        .uri()
        .path_and_query()
        .map_or_else(|| req.uri().path(), |target| target.as_str());
    let forwarded = req
        .headers()
        .get("x-forwarded-host")
        .map(|value| value.as_bytes());
    let mut key =
        Vec::with_capacity(authority.len() + target.len() + forwarded.map_or(0, |f| f.len() + 1));
    key.extend(authority.iter().map(u8::to_ascii_lowercase));
    key.extend_from_slice(target.as_bytes());
    if let Some(forwarded) = forwarded {
        key.push(0);
        key.extend(forwarded.iter().map(u8::to_ascii_lowercase));
    }
    Some(Bytes::from(key))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_url_key_is_authority_path_and_query() {
        let req = Request::get("/users/2?fields=email")
            .header("host", "API.example.com:8080")
            .body(())
            .unwrap();
        assert_eq!(
            url_key(&req).unwrap(),
            "api.example.com:8080/users/2?fields=email"
        );
        let absolute = Request::get("http://Example.com/users/2").body(()).unwrap();
        assert_eq!(url_key(&absolute).unwrap(), "example.com/users/2");
        let agreeing = Request::get("http://Example.com/users/2")
            .header("host", "example.COM")
            .body(())
            .unwrap();
        assert_eq!(url_key(&agreeing).unwrap(), "example.com/users/2");
        let forwarded = Request::get("/users/2")
            .header("host", "internal")
            .header("x-forwarded-host", "Shop.example")
            .body(())
            .unwrap();
        assert_eq!(
            url_key(&forwarded).unwrap(),
            "internal/users/2\0shop.example"
        );
    }
}
