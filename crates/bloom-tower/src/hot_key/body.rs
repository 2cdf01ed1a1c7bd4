//! The response body of a [`HotKeyCacheService`](super::HotKeyCacheService): a cached copy,
//! or the inner service's own body when the response was not cached.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;

pin_project! {
    /// A cached response's bytes, or the inner body passed through untouched.
    pub struct HotKeyBody<B, E> {
        #[pin]
        state: State<B, E>,
    }
}

pin_project! {
    #[project = StateProj]
    enum State<B, E> {
        // From the cache, or the copy of a response another request loaded.
        Cached { bytes: Option<Bytes> },
        // The inner service's body, for responses that were not cached.
        Inner { #[pin] body: B },
        // Reading the inner body failed while caching it: yields that error once.
        Failed { error: Option<E> },
    }
}

impl<B, E> HotKeyBody<B, E> {
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

    pub(crate) fn failed(error: E) -> Self {
        Self {
            state: State::Failed { error: Some(error) },
        }
    }
}

impl<B: Body<Data = Bytes>> Body for HotKeyBody<B, B::Error> {
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        match self.project().state.project() {
            StateProj::Cached { bytes } => Poll::Ready(bytes.take().map(|b| Ok(Frame::data(b)))),
            StateProj::Inner { body } => body.poll_frame(cx),
            StateProj::Failed { error } => Poll::Ready(error.take().map(Err)),
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.state {
            State::Cached { bytes } => bytes.is_none(),
            State::Inner { body } => body.is_end_stream(),
            State::Failed { error } => error.is_none(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.state {
            State::Cached { bytes } => {
                SizeHint::with_exact(bytes.as_ref().map_or(0, |b| b.len() as u64))
            }
            State::Inner { body } => body.size_hint(),
            State::Failed { .. } => SizeHint::default(),
        }
    }
}
