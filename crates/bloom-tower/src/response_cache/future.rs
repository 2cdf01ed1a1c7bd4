//! [`ResponseFuture`]: the response future of a
//! [`ResponseCacheService`](super::ResponseCacheService).

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use http::Response;
use http_body::Body;

use super::ResponseBody;

type Boxed<B, E> = Pin<Box<dyn Future<Output = Result<Response<ResponseBody<B>>, E>> + Send>>;

/// The response future of a [`ResponseCacheService`](super::ResponseCacheService).
///
/// Boxed: a miss may wait for another request's load and then read a body, and the box
/// costs little next to a cache lookup.
///
/// ```
/// use bloom_tower::{ResponseCache, key, response_cache::ResponseFuture};
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
/// let future: ResponseFuture<Full<bytes::Bytes>, std::convert::Infallible> =
///     cached.ready().await?.call(Request::get("/users/7").body(())?);
/// assert_eq!(future.await?.status(), 200);
/// # Ok(())
/// # }
/// ```
pub struct ResponseFuture<B: Body, E> {
    inner: Boxed<B, E>,
}

impl<B: Body, E> ResponseFuture<B, E> {
    pub(crate) fn new(
        future: impl Future<Output = Result<Response<ResponseBody<B>>, E>> + Send + 'static,
    ) -> Self {
        Self {
            inner: Box::pin(future),
        }
    }
}

impl<B: Body, E> Future for ResponseFuture<B, E> {
    type Output = Result<Response<ResponseBody<B>>, E>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.inner.as_mut().poll(cx)
    }
}

impl<B: Body, E> fmt::Debug for ResponseFuture<B, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResponseFuture").finish_non_exhaustive()
    }
}
