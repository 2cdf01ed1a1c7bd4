use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use pin_project_lite::pin_project;

use crate::shared_filter::Confirmation;

pin_project! {
    /// Response future of [`BloomGuardService`](crate::BloomGuardService): the inner service's
    /// future, the guard's own answer, or, on a filter shared with other instances, a
    /// would-be rejection waiting for its confirmation. No allocation on the first two paths.
    pub struct ResponseFuture<F, Res, D> {
        #[pin]
        kind: Kind<F, Res, D>,
    }
}

pin_project! {
    #[project = KindProj]
    enum Kind<F, Res, D> {
        Called {
            #[pin]
            future: F,
        },
        Answered {
            response: Option<Res>,
        },
        Confirming {
            confirmation: Confirmation,
            deferred: Option<D>,
        },
    }
}

/// A request whose rejection waits for a [`Confirmation`]: what to do once it resolves.
pub trait Deferred<F, Res> {
    /// `stands`: the confirmation came back and the local answer stands (the filter is to be
    /// looked at again); `false`: let the key through. The inner service's future, or the
    /// rejection.
    fn resume(self, stands: bool) -> Result<F, Res>;
}

impl<F, Res, D> ResponseFuture<F, Res, D> {
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

    pub(super) fn confirming(confirmation: Confirmation, deferred: D) -> Self {
        Self {
            kind: Kind::Confirming {
                confirmation,
                deferred: Some(deferred),
            },
        }
    }
}

impl<F, Res, E, D> Future for ResponseFuture<F, Res, D>
where
    F: Future<Output = Result<Res, E>>,
    D: Deferred<F, Res>,
{
    type Output = Result<Res, E>;

    #[inline]
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        loop {
            let next = match self.as_mut().project().kind.project() {
                KindProj::Called { future } => return future.poll(cx),
                KindProj::Answered { response } => {
                    return Poll::Ready(Ok(response
                        .take()
                        .expect("ResponseFuture polled after completion")));
                }
                KindProj::Confirming {
                    confirmation,
                    deferred,
                } => {
                    let stands = ready!(Pin::new(confirmation).poll(cx));
                    let deferred = deferred
                        .take()
                        .expect("ResponseFuture polled after completion");
                    match deferred.resume(stands) {
                        Ok(future) => Kind::Called { future },
                        Err(response) => Kind::Answered {
                            response: Some(response),
                        },
                    }
                }
            };
            self.as_mut().project().kind.set(next);
        }
    }
}

impl<F, Res, D> std::fmt::Debug for ResponseFuture<F, Res, D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = match &self.kind {
            Kind::Called { .. } => "Called",
            Kind::Answered { .. } => "Answered",
            Kind::Confirming { .. } => "Confirming",
        };
        f.debug_tuple("ResponseFuture").field(&state).finish()
    }
}
