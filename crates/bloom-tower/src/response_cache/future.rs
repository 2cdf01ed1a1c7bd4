//! [`ResponseCacheFuture`]: the response future of a
//! [`ResponseCacheService`](super::ResponseCacheService).

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use http::Response;
use http_body::Body;

use super::ResponseCacheBody;

type Boxed<B, E> = Pin<Box<dyn Future<Output = Result<Response<ResponseCacheBody<B>>, E>> + Send>>;

/// The response future of a [`ResponseCacheService`](super::ResponseCacheService).
///
/// Boxed: a miss may wait for another request's load and then read a body, and the box
/// costs little next to a cache lookup.
///
/// ```
/// use bloom_tower::{ResponseCache, key, response_cache::ResponseCacheFuture};
/// use http::{Request, Response};
/// use http_body_util::Full;
/// use tower::{Layer, Service, ServiceExt, service_fn};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let inner = service_fn(|_: Request<()>| async {
///     Ok::<_, std::convert::Infallible>(Response::new(Full::new(bytes::Bytes::from("hi"))))
/// });
/// let mut cached = ResponseCache::new(key::path_segment(1)).layer(inner);
/// let future: ResponseCacheFuture<Full<bytes::Bytes>, std::convert::Infallible> =
///     cached.ready().await?.call(Request::get("/users/7").body(())?);
/// assert_eq!(future.await?.status(), 200);
/// # Ok(())
/// # }
/// ```
pub struct ResponseCacheFuture<B: Body, E> {
    inner: Boxed<B, E>,
}

impl<B: Body, E> ResponseCacheFuture<B, E> {
    pub(crate) fn new(
        future: impl Future<Output = Result<Response<ResponseCacheBody<B>>, E>> + Send + 'static,
    ) -> Self {
        Self {
            inner: Box::pin(future),
        }
    }
}

impl<B: Body, E> Future for ResponseCacheFuture<B, E> {
    type Output = Result<Response<ResponseCacheBody<B>>, E>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.inner.as_mut().poll(cx)
    }
}

impl<B: Body, E> fmt::Debug for ResponseCacheFuture<B, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResponseCacheFuture")
            .finish_non_exhaustive()
    }
}
