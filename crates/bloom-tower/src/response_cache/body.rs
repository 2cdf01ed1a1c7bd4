//! [`ResponseBody`]: a stored copy, the inner body untouched, or the frames read while
//! trying to store it followed by the rest of the inner body.

use std::collections::VecDeque;
use std::fmt;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use http_body_util::BodyExt;
use pin_project_lite::pin_project;

pin_project! {
    /// The body of a [`ResponseCacheService`](super::ResponseCacheService)'s response: the
    /// bytes of a stored response, or the inner service's body, always complete.
    ///
    /// ```
    /// use bloom_tower::{ResponseCache, key, response_cache::ResponseBody};
    /// use http::{Request, Response};
    /// use http_body_util::{BodyExt, Full};
    /// use tower::{ServiceBuilder, ServiceExt, service_fn};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let cached = ServiceBuilder::new()
    ///     .layer(ResponseCache::new(key::path_segment(1)))
    ///     .service(service_fn(|_: Request<()>| async {
    ///         Ok::<_, std::convert::Infallible>(Response::new(Full::new("user 7".into())))
    ///     }));
    /// let response: Response<ResponseBody<Full<bytes::Bytes>>> =
    ///     cached.oneshot(Request::get("/users/7").body(())?).await?;
    /// assert_eq!(response.into_body().collect().await?.to_bytes(), "user 7");
    /// # Ok(())
    /// # }
    /// ```
    pub struct ResponseBody<B: Body> {
        #[pin]
        state: State<B>,
    }
}

pin_project! {
    #[project = StateProj]
    enum State<B: Body> {
        // A stored response (or the copy of one another request loaded).
        Cached { bytes: Option<Bytes> },
        // The inner body, for responses the cache did not try to store.
        Inner { #[pin] body: B },
        // The cache began reading the body to store it and gave up (too large, trailers, an
        // error): the frames it read, then the rest.
        Replay { frames: VecDeque<Frame<Bytes>>, rest: Rest<B> },
    }
}

/// What follows the replayed frames.
enum Rest<B: Body> {
    /// The inner body, where reading stopped. Boxed: it was pinned to be read.
    Body(Pin<Box<B>>),
    /// Reading failed: this error, once.
    Failed(Option<B::Error>),
}

/// A body read for storing, up to a limit.
pub(crate) enum Read<B: Body> {
    /// The whole body, within the limit.
    Complete(Bytes),
    /// Not stored, for `reason`; the client gets `body`, every byte of it.
    Given(ResponseBody<B>, super::policy::NotStored),
}

impl<B: Body> ResponseBody<B> {
    pub(crate) fn cached(bytes: Bytes) -> Self {
        let bytes = (!bytes.is_empty()).then_some(bytes);
        Self {
            state: State::Cached { bytes },
        }
    }

    pub(crate) fn inner(body: B) -> Self {
        Self {
            state: State::Inner { body },
        }
    }

    fn replay(frames: VecDeque<Frame<Bytes>>, rest: Rest<B>) -> Self {
        Self {
            state: State::Replay { frames, rest },
        }
    }
}

impl<B: Body<Data = Bytes>> ResponseBody<B> {
    /// Reads `body` whole if it is at most `limit` bytes.
    ///
    /// The limit is enforced while reading, not taken from `size_hint` (a body may
    /// understate its size), but a body that declares more is not read at all. This does not
    /// use `http_body_util::Limited`: on crossing the limit it returns an error in place of
    /// the frame that crossed it, and that frame's bytes would be lost for the client, who
    /// must get the whole body even when we do not store it.
    pub(crate) async fn read(body: B, limit: u64) -> Read<B> {
        use super::policy::NotStored;
        let hint = body.size_hint();
        if hint.lower() > limit || hint.upper().is_some_and(|upper| upper > limit) {
            return Read::Given(Self::inner(body), NotStored::BodyTooLarge);
        }
        let mut body = Box::pin(body);
        let mut frames = VecDeque::new();
        let mut read = 0u64;
        while let Some(frame) = body.frame().await {
            let frame = match frame {
                Ok(frame) => frame,
                Err(error) => {
                    let rest = Rest::Failed(Some(error));
                    return Read::Given(Self::replay(frames, rest), NotStored::BodyError);
                }
            };
            let reason = match frame.data_ref() {
                Some(data) => {
                    read += data.len() as u64;
                    (read > limit).then_some(NotStored::BodyTooLarge)
                }
                None => Some(NotStored::Trailers),
            };
            frames.push_back(frame);
            if let Some(reason) = reason {
                return Read::Given(Self::replay(frames, Rest::Body(body)), reason);
            }
        }
        let mut data = frames
            .into_iter()
            .filter_map(|frame| frame.into_data().ok());
        let bytes = match (data.next(), data.next()) {
            (None, _) => Bytes::new(),
            (Some(only), None) => only,
            (Some(first), Some(second)) => {
                let mut joined = Vec::with_capacity(read as usize);
                for chunk in [first, second].into_iter().chain(data) {
                    joined.extend_from_slice(&chunk);
                }
                Bytes::from(joined)
            }
        };
        Read::Complete(bytes)
    }
}

impl<B: Body<Data = Bytes>> Body for ResponseBody<B> {
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        match self.project().state.project() {
            StateProj::Cached { bytes } => Poll::Ready(bytes.take().map(|b| Ok(Frame::data(b)))),
            StateProj::Inner { body } => body.poll_frame(cx),
            StateProj::Replay { frames, rest } => {
                if let Some(frame) = frames.pop_front() {
                    return Poll::Ready(Some(Ok(frame)));
                }
                match rest {
                    Rest::Body(body) => body.as_mut().poll_frame(cx),
                    Rest::Failed(error) => Poll::Ready(error.take().map(Err)),
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.state {
            State::Cached { bytes } => bytes.is_none(),
            State::Inner { body } => body.is_end_stream(),
            State::Replay { frames, rest } => {
                frames.is_empty()
                    && match rest {
                        Rest::Body(body) => body.is_end_stream(),
                        Rest::Failed(error) => error.is_none(),
                    }
            }
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.state {
            State::Cached { bytes } => {
                SizeHint::with_exact(bytes.as_ref().map_or(0, |b| b.len() as u64))
            }
            State::Inner { body } => body.size_hint(),
            // At least what was read; no upper bound, since the inner body's own hint is what
            // turned out wrong (an exact but wrong hint would make hyper send a
            // Content-Length that cuts the body short).
            State::Replay { frames, .. } => {
                let buffered = frames
                    .iter()
                    .filter_map(Frame::data_ref)
                    .map(|data| data.len() as u64)
                    .sum();
                let mut hint = SizeHint::new();
                hint.set_lower(buffered);
                hint
            }
        }
    }
}

impl<B: Body> fmt::Debug for ResponseBody<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = match &self.state {
            State::Cached { .. } => "cached",
            State::Inner { .. } => "inner",
            State::Replay { .. } => "replay",
        };
        f.debug_struct("ResponseBody")
            .field("state", &state)
            .finish_non_exhaustive()
    }
}
