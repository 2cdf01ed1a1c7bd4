//! `FaultProxy`: a TCP proxy on 127.0.0.1 in front of a target (Redis), whose behaviour a
//! test switches at any time to simulate network faults as clients see them. Tokio-based,
//! so not part of `common/mod.rs` (which must stay std only); include it with
//! `#[path = "common/fault.rs"] mod fault;`.

#![allow(dead_code)]

use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// Listen backlog: big enough for bursts of connects in `Pass`, small enough to fill in
/// `Blackhole` (Linux queues `BACKLOG + 1` connections, then drops further SYNs).
const BACKLOG: u32 = 16;

/// What the proxy does, switched with [`FaultProxy::set_mode`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Forward both ways.
    Pass,
    /// A stalled peer (like a SIGSTOPped Redis): connections stay open, new ones are accepted
    /// (and connected upstream), but nothing is forwarded either way. Bytes wait in the socket
    /// buffers, so back in `Pass` stalled connections carry on where they were.
    Hang,
    /// A network partition (packets dropped): open connections behave as in `Hang`, and new
    /// connects do not even complete: the proxy stops accepting and fills the kernel's accept
    /// queue with its own connections, so further SYNs are dropped and `connect()` hangs in
    /// SYN retransmits. Back in `Pass`, a retransmitted SYN gets through (after ~1-3 s).
    Blackhole,
    /// An asymmetric partition: open connections forward what the client sends (bytes held
    /// in `Hang` included), but hold what the server answers; new connections are accepted
    /// and connected upstream. Back in `Pass`, the held answers flow.
    RequestsOnly,
    /// Connection reset: every open connection is closed abruptly with RST (zero linger), and
    /// new ones are accepted then reset at once (the client sees ECONNRESET, not a refusal).
    Reset,
}

/// The proxy; stops all its tasks (and drops its connections) when dropped.
pub struct FaultProxy {
    addr: SocketAddr,
    /// (mode, generation): the generation lets `set_mode` wait for the accept task's ack.
    mode: watch::Sender<(Mode, u64)>,
    applied: watch::Receiver<u64>,
    open: Arc<AtomicUsize>,
    accept_task: JoinHandle<()>,
}

impl FaultProxy {
    /// Listens on 127.0.0.1 (random port) and forwards to `target` in `Mode::Pass`.
    pub async fn start(target: SocketAddr) -> FaultProxy {
        let socket = TcpSocket::new_v4().expect("a socket");
        socket.bind("127.0.0.1:0".parse().unwrap()).expect("bind");
        let listener = socket.listen(BACKLOG).expect("listen");
        let addr = listener.local_addr().expect("local addr");
        // A second handle on the same listening socket, for non-blocking drains that do not
        // depend on Tokio's readiness state.
        let std_listener = listener.into_std().expect("into_std");
        std_listener.set_nonblocking(true).expect("non-blocking"); // shared by both handles
        let drain = std_listener.try_clone().expect("clone the listener");
        let listener = TcpListener::from_std(std_listener).expect("from_std");
        let (mode, mode_rx) = watch::channel((Mode::Pass, 0));
        let (applied_tx, applied) = watch::channel(0);
        let open = Arc::new(AtomicUsize::new(0));
        let conn = Conn {
            target,
            mode: mode_rx.clone(),
            open: open.clone(),
        };
        let accept_task = tokio::spawn(accept_loop(
            listener, drain, addr, mode_rx, applied_tx, conn,
        ));
        FaultProxy {
            addr,
            mode,
            applied,
            open,
            accept_task,
        }
    }

    /// `redis://127.0.0.1:PORT/`.
    pub fn url(&self) -> String {
        format!("redis://{}/", self.addr)
    }

    /// The proxy's own address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Switches the mode. Returns once the accept side has applied it (for `Blackhole`: the
    /// accept queue is full); open connections switch as soon as their task runs, and never
    /// forward a byte that arrives after this call in any mode but `Pass`.
    pub async fn set_mode(&self, mode: Mode) {
        let mut generation = 0;
        self.mode.send_modify(|m| {
            m.1 += 1;
            generation = m.1;
            m.0 = mode;
        });
        let mut applied = self.applied.clone();
        applied
            .wait_for(|g| *g >= generation)
            .await
            .expect("the proxy's accept task died");
    }

    /// Connections currently open through the proxy (accepted and not yet closed).
    pub fn connections(&self) -> usize {
        self.open.load(Ordering::SeqCst)
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        // Connection tasks end when the mode sender goes (their `changed()` fails).
        self.accept_task.abort();
    }
}

/// What a connection task needs.
#[derive(Clone)]
struct Conn {
    target: SocketAddr,
    mode: watch::Receiver<(Mode, u64)>,
    open: Arc<AtomicUsize>,
}

impl Conn {
    /// Serves (or resets, in `Reset`) an accepted client.
    fn serve(&self, client: TcpStream) {
        if self.mode.borrow().0 == Mode::Reset {
            return rst(client);
        }
        self.open.fetch_add(1, Ordering::SeqCst);
        let conn = self.clone();
        tokio::spawn(async move {
            if let Ok(upstream) = TcpStream::connect(conn.target).await {
                pump(client, upstream, conn.mode.clone()).await;
            }
            conn.open.fetch_sub(1, Ordering::SeqCst);
        });
    }
}

async fn accept_loop(
    listener: TcpListener,
    drain: std::net::TcpListener,
    addr: SocketAddr,
    mut mode: watch::Receiver<(Mode, u64)>,
    applied: watch::Sender<u64>,
    conn: Conn,
) {
    // Our own queue-filling connections, to drop when they are finally accepted.
    let mut fillers_seen: HashSet<SocketAddr> = HashSet::new();
    loop {
        let (current, generation) = *mode.borrow_and_update();
        if current == Mode::Blackhole {
            // Empty the queue (those clients are served, i.e. hang like open connections), ...
            while let Ok((client, peer)) = drain.accept() {
                if !fillers_seen.remove(&peer) {
                    let _ = client.set_nonblocking(true);
                    if let Ok(client) = TcpStream::from_std(client) {
                        conn.serve(client);
                    }
                }
            }
            // ... then fill it so the kernel drops new SYNs. (A client racing in takes a
            // slot and that filler's connect times out: the queue is full all the same.)
            let mut fillers = Vec::new();
            for _ in 0..=BACKLOG {
                let filler = tokio::time::timeout(Duration::from_secs(5), TcpStream::connect(addr));
                if let Ok(Ok(filler)) = filler.await {
                    fillers_seen.extend(filler.local_addr().ok());
                    fillers.push(filler);
                }
            }
            applied.send_replace(generation);
            if mode.changed().await.is_err() {
                return;
            }
            continue; // fillers dropped; skipped when accepted
        }
        applied.send_replace(generation);
        tokio::select! {
            biased;
            changed = mode.changed() => if changed.is_err() { return },
            accepted = listener.accept() => if let Ok((client, peer)) = accepted {
                if !fillers_seen.remove(&peer) {
                    conn.serve(client);
                }
            },
        }
    }
}

/// Forwards between `client` and `upstream` while the mode is `Pass` (client to upstream
/// only in `RequestsOnly`); holds everything in `Hang`/`Blackhole`; resets the client in `Reset`; ends on EOF/error either side or when
/// the proxy is dropped.
async fn pump(
    mut client: TcpStream,
    mut upstream: TcpStream,
    mut mode: watch::Receiver<(Mode, u64)>,
) {
    let (mut up_buf, mut down_buf) = (vec![0u8; 16 * 1024], vec![0u8; 16 * 1024]);
    loop {
        let current = mode.borrow_and_update().0;
        match current {
            Mode::Reset => return rst(client),
            Mode::Hang | Mode::Blackhole => {
                if mode.changed().await.is_err() {
                    return;
                }
                continue;
            }
            Mode::Pass | Mode::RequestsOnly => {}
        }
        let answers = current == Mode::Pass;
        // `biased`, mode first: once `set_mode` has returned, bytes arriving later are never
        // read here in a non-`Pass` mode. (Reads are cancel-safe; writes are not, so a write
        // in flight only gives way to `Reset`.)
        let (n, to_upstream) = tokio::select! {
            biased;
            changed = mode.changed() => if changed.is_err() { return } else { continue },
            read = client.read(&mut up_buf) => match read { Ok(n) if n > 0 => (n, true), _ => return },
            read = upstream.read(&mut down_buf), if answers => match read { Ok(n) if n > 0 => (n, false), _ => return },
        };
        let write = async {
            if to_upstream {
                upstream.write_all(&up_buf[..n]).await
            } else {
                client.write_all(&down_buf[..n]).await
            }
        };
        let reset = async {
            let _ = mode.wait_for(|m| m.0 == Mode::Reset).await;
        };
        let written = tokio::select! {
            written = write => written.is_ok(),
            () = reset => false,
        };
        if !written {
            if mode.borrow().0 == Mode::Reset {
                rst(client);
            }
            return;
        }
    }
}

/// Closes with RST instead of FIN: zero linger, then drop.
fn rst(stream: TcpStream) {
    let _ = stream.set_zero_linger();
    drop(stream);
}
