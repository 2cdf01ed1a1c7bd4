use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use pin_project_lite::pin_project;

pin_project! {
    /// Response future of [`BloomGuardService`](crate::BloomGuardService): the inner service's
    /// future, or the guard's own answer. No allocation on either path.
    pub struct ResponseFuture<F, Res> {
        #[pin]
        kind: Kind<F, Res>,
    }
}

pin_project! {
    #[project = KindProj]
    enum Kind<F, Res> {
        Called {
            #[pin]
            future: F,
        },
        Answered {
            response: Option<Res>,
        },
    }
}

impl<F, Res> ResponseFuture<F, Res> {
    pub(super) fn called(future: F) -> Self {
        Self {
            kind: Kind::Called { future },
        }
    }

    pub(super) fn answered(response: Res) -> Self {
        Self {
            kind: Kind::Answered {
                response: Some(response),
            },
        }
    }
}

impl<F, Res, E> Future for ResponseFuture<F, Res>
where
    F: Future<Output = Result<Res, E>>,
{
    type Output = Result<Res, E>;

    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().kind.project() {
            KindProj::Called { future } => future.poll(cx),
            KindProj::Answered { response } => Poll::Ready(Ok(response
                .take()
                .expect("ResponseFuture polled after completion"))),
        }
    }
}

impl<F, Res> std::fmt::Debug for ResponseFuture<F, Res> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = match &self.kind {
            Kind::Called { .. } => "Called",
            Kind::Answered { .. } => "Answered",
        };
        f.debug_tuple("ResponseFuture").field(&state).finish()
    }
}
