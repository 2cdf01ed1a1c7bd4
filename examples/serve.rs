//! Serving until SIGINT or SIGTERM, and stopping within a bounded grace period: what every
//! example that serves shares (`feed --serve`, `user_service` and [`App::serve`], `signup`,
//! `hyper_service`).
//!
//! # The shutdown rule
//!
//! On the first SIGINT or SIGTERM ([`shutdown_signal`]), [`serve`]:
//!
//! 1. stops accepting (the listener is closed at once);
//! 2. tells every open connection to finish: an idle keep-alive connection is closed at once,
//!    one with a request in flight answers it and then closes;
//! 3. after the grace period ([`GRACE`] in the examples) drops the connections still open,
//!    with their requests in flight: a client that sent half a request and stalled, a
//!    handler that does not finish. No response goes out after [`serve`] returns;
//! 4. returns, so that the caller stores what it must (the feed's filters, the user
//!    service's snapshot) and the process exits 0.
//!
//! So one signal stops a service within the grace period plus its final store, whatever its
//! clients do. Guarded by the workspace's `tests/shutdown.rs`, which starts each serving
//! example as a real process, holds an idle keep-alive connection and a stalled half-sent
//! request open, sends one SIGINT or one SIGTERM, and requires exit code 0 within a hang
//! bound and the state stored on exit (e.g.
//! `feed_stops_on_one_sigint_with_connections_open_and_stores_its_filters`).
//!
//! The connections are served here rather than by `axum::serve`: its graceful shutdown waits
//! for every connection with no deadline, and a timeout around it would return while its
//! connection tasks (detached) still run handlers, which could then answer after the final
//! store. Here the connection tasks are owned (a [`JoinSet`]) and aborted at the deadline.
//!
//! [`App::serve`]: crate::user_service::App::serve

use std::convert::Infallible;
use std::future::Future;
use std::time::Duration;

use hyper::body::{Body, Incoming};
use hyper::server::conn::http1;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::task::JoinSet;
use tower::Service;

/// How long the examples give open connections to finish after the signal before dropping
/// them: the requests of these services take milliseconds, and it stays well under the
/// 30 s a service manager (Kubernetes, systemd's default 90 s) waits before `SIGKILL`.
pub const GRACE: Duration = Duration::from_secs(5);

/// Which signal asked the service to stop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stop {
    /// `SIGINT` (Ctrl-C).
    Interrupt,
    /// `SIGTERM` (containers, systemd, Kubernetes).
    Terminate,
}

impl std::fmt::Display for Stop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Stop::Interrupt => "SIGINT",
            Stop::Terminate => "SIGTERM",
        })
    }
}

/// The first SIGINT or SIGTERM. The handlers are installed when this is called (within a
/// Tokio runtime), not when the future is first polled: a signal that arrives once the
/// service says it listens is never the default action (death by signal).
///
/// # Errors
///
/// If a handler cannot be installed.
pub fn shutdown_signal() -> std::io::Result<impl Future<Output = Stop> + Send + 'static> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let mut interrupt = signal(SignalKind::interrupt())?;
        let mut terminate = signal(SignalKind::terminate())?;
        Ok(async move {
            tokio::select! {
                _ = interrupt.recv() => Stop::Interrupt,
                _ = terminate.recv() => Stop::Terminate,
            }
        })
    }
    #[cfg(not(unix))]
    {
        Ok(async {
            let _ = tokio::signal::ctrl_c().await;
            Stop::Interrupt
        })
    }
}

/// What [`serve`] did at shutdown.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stopped {
    /// Connections open when `shutdown` resolved.
    pub open: usize,
    /// Of those, the ones still open at the end of the grace period, dropped.
    pub dropped: usize,
}

/// Serves `service` over HTTP/1 on `listener`, one task per connection, until `shutdown`
/// resolves; then stops as the [module docs](self) say, giving open connections `grace`.
/// An axum `Router` is such a service.
///
/// # Errors
///
/// None yet (an `accept` error is logged and retried); `io::Result` for callers' `?`.
pub async fn serve<S, B>(
    listener: TcpListener,
    service: S,
    shutdown: impl Future<Output = ()>,
    grace: Duration,
) -> std::io::Result<Stopped>
where
    S: Service<Request<Incoming>, Response = Response<B>, Error = Infallible>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
    B: Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let graceful = GracefulShutdown::new();
    let mut connections = JoinSet::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    let service = TowerToHyperService::new(service.clone());
                    let connection = http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service);
                    let connection = graceful.watch(connection);
                    connections.spawn(async move {
                        if let Err(error) = connection.await {
                            tracing::debug!(%error, "connection ended with an error");
                        }
                    });
                }
                // Out of file descriptors, a connection reset before it was accepted: the
                // listener is still good.
                Err(error) => {
                    tracing::warn!(%error, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
            // Reap finished connections as they end.
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
    drop(listener);
    let open = graceful.count();
    // `Err` when the grace period ran out: the connections still open are dropped below.
    let _ = tokio::time::timeout(grace, graceful.shutdown()).await;
    // Aborted tasks drop their connection and any handler still running: nothing is
    // answered after this returns.
    connections.abort_all();
    let mut dropped = 0;
    while let Some(ended) = connections.join_next().await {
        if ended.is_err_and(|e| e.is_cancelled()) {
            dropped += 1;
        }
    }
    if dropped > 0 {
        tracing::warn!(
            connections = dropped,
            ?grace,
            "connections still open after the grace period: dropped"
        );
    }
    Ok(Stopped { open, dropped })
}
