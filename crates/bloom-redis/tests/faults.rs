//! Self-tests of the fault harness (`common::RedisServer`'s pause/resume and dumps,
//! `fault::FaultProxy`'s modes) against a real `redis-server`: each fault really happens, and
//! each test fails if it did not. Every wait is bounded; the only durations are liveness
//! bounds (`HANG`) and how long a stall must last to count as one (`STALL`).

mod common;
#[path = "common/fault.rs"]
mod fault;

use std::io::ErrorKind;
use std::net::SocketAddr;
use std::time::Duration;

use fault::{FaultProxy, Mode};
use redis::AsyncCommands;
use redis::aio::MultiplexedConnection;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::timeout;

/// A request unanswered this long counts as stalled.
const STALL: Duration = Duration::from_millis(500);
/// Only a hang detector (covers SYN retransmits after a blackhole, ~1-3 s).
const HANG: Duration = Duration::from_secs(20);

fn target(server: &common::RedisServer) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], server.port()))
}

async fn connect(url: &str) -> redis::RedisResult<MultiplexedConnection> {
    redis::Client::open(url)?
        .get_multiplexed_async_connection()
        .await
}

/// A GET running in its own task, so a timeout on it does not cancel the request.
fn spawn_get(
    conn: &MultiplexedConnection,
    key: &'static str,
) -> tokio::task::JoinHandle<redis::RedisResult<Option<String>>> {
    let mut conn = conn.clone();
    tokio::spawn(async move { conn.get(key).await })
}

/// Raw PING, expecting +PONG.
async fn raw_ping(stream: &mut TcpStream) {
    stream.write_all(b"PING\r\n").await.unwrap();
    let mut reply = [0u8; 7];
    stream.read_exact(&mut reply).await.unwrap();
    assert_eq!(&reply, b"+PONG\r\n");
}

async fn works(url: &str) {
    let mut conn = connect(url).await.unwrap();
    let pong: String = redis::cmd("PING").query_async(&mut conn).await.unwrap();
    assert_eq!(pong, "PONG");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pass_forwards_both_ways() {
    let Some(server) = common::start() else {
        return;
    };
    let proxy = FaultProxy::start(target(&server)).await;
    timeout(HANG, async {
        let mut conn = connect(&proxy.url()).await.unwrap();
        let () = conn.set("k", "v").await.unwrap();
        assert_eq!(
            conn.get::<_, Option<String>>("k").await.unwrap().as_deref(),
            Some("v")
        );
        assert_eq!(proxy.connections(), 1);
        // It really reached the server.
        let mut direct = connect(&server.url()).await.unwrap();
        assert_eq!(
            direct
                .get::<_, Option<String>>("k")
                .await
                .unwrap()
                .as_deref(),
            Some("v")
        );
    })
    .await
    .expect("hung");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hang_stalls_open_and_new_connections_then_recovers() {
    let Some(server) = common::start() else {
        return;
    };
    let proxy = FaultProxy::start(target(&server)).await;
    timeout(HANG, async {
        let mut conn = connect(&proxy.url()).await.unwrap();
        let () = conn.set("k", "v").await.unwrap();
        proxy.set_mode(Mode::Hang).await;

        let mut stalled = spawn_get(&conn, "k");
        assert!(
            timeout(STALL, &mut stalled).await.is_err(),
            "GET answered through Hang"
        );
        // New connections are accepted (connect completes) but get nothing.
        let mut fresh = TcpStream::connect(proxy.addr()).await.unwrap();
        fresh.write_all(b"PING\r\n").await.unwrap();
        let mut byte = [0u8; 1];
        assert!(
            timeout(STALL, fresh.read(&mut byte)).await.is_err(),
            "PING answered through Hang"
        );
        assert_eq!(proxy.connections(), 2);

        proxy.set_mode(Mode::Pass).await;
        // The stalled request was only held: it completes, on the same connection.
        assert_eq!(stalled.await.unwrap().unwrap().as_deref(), Some("v"));
        let mut reply = [0u8; 7];
        fresh.read_exact(&mut reply).await.unwrap();
        assert_eq!(&reply, b"+PONG\r\n");
        works(&proxy.url()).await;
    })
    .await
    .expect("hung");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reset_kills_open_connections_and_resets_new_ones() {
    let Some(server) = common::start() else {
        return;
    };
    let proxy = FaultProxy::start(target(&server)).await;
    timeout(HANG, async {
        let mut conn = connect(&proxy.url()).await.unwrap();
        let () = conn.set("k", "v").await.unwrap();
        proxy.set_mode(Mode::Reset).await;

        // "Quickly": well under the 5 s bound (it is immediate).
        let err = timeout(Duration::from_secs(5), conn.get::<_, Option<String>>("k"))
            .await
            .expect("the reset connection did not fail quickly")
            .expect_err("GET succeeded through Reset");
        assert!(err.is_io_error(), "not an I/O error: {err:?}");

        // A new connection is reset at once (never served).
        match TcpStream::connect(proxy.addr()).await {
            // (The RST can beat tokio's connect completion.)
            Err(e) => assert!(
                matches!(
                    e.kind(),
                    ErrorKind::ConnectionReset | ErrorKind::ConnectionRefused
                ),
                "{e:?}"
            ),
            Ok(mut fresh) => {
                let mut byte = [0u8; 1];
                let read = timeout(Duration::from_secs(5), fresh.read(&mut byte))
                    .await
                    .expect("a new connection was not reset quickly");
                let e = read.expect_err("a new connection got data through Reset");
                assert_eq!(e.kind(), ErrorKind::ConnectionReset, "{e:?}");
            }
        }
        let via_redis = async {
            let mut c = connect(&proxy.url()).await?;
            redis::cmd("PING").query_async::<String>(&mut c).await
        };
        assert!(
            via_redis.await.is_err(),
            "a new redis connection worked through Reset"
        );
        while proxy.connections() != 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }

        proxy.set_mode(Mode::Pass).await;
        let mut conn = connect(&proxy.url()).await.unwrap();
        assert_eq!(
            conn.get::<_, Option<String>>("k").await.unwrap().as_deref(),
            Some("v")
        );
    })
    .await
    .expect("hung");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blackhole_stalls_open_connections_and_new_connects() {
    let Some(server) = common::start() else {
        return;
    };
    let proxy = FaultProxy::start(target(&server)).await;
    timeout(HANG, async {
        let mut conn = connect(&proxy.url()).await.unwrap();
        let () = conn.set("k", "v").await.unwrap();
        proxy.set_mode(Mode::Blackhole).await;

        let mut stalled = spawn_get(&conn, "k");
        assert!(
            timeout(STALL, &mut stalled).await.is_err(),
            "GET answered through Blackhole"
        );
        // Unlike Hang, the TCP connect itself does not complete (SYNs dropped).
        let mut pending = tokio::spawn(TcpStream::connect(proxy.addr()));
        assert!(
            timeout(STALL, &mut pending).await.is_err(),
            "connect completed through Blackhole"
        );
        assert_eq!(proxy.connections(), 1);

        proxy.set_mode(Mode::Pass).await;
        assert_eq!(stalled.await.unwrap().unwrap().as_deref(), Some("v"));
        works(&proxy.url()).await;
        // The pending connect gets through on a SYN retransmit, and is served.
        let mut late = pending.await.unwrap().unwrap();
        raw_ping(&mut late).await;
    })
    .await
    .expect("hung");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paused_server_does_not_answer_until_resumed() {
    let Some(mut server) = common::start() else {
        return;
    };
    timeout(HANG, async {
        let mut conn = connect(&server.url()).await.unwrap();
        let () = conn.set("k", "v").await.unwrap();
        server.pause();

        let mut c = conn.clone();
        let mut ping =
            tokio::spawn(async move { redis::cmd("PING").query_async::<String>(&mut c).await });
        assert!(
            timeout(STALL, &mut ping).await.is_err(),
            "a paused server answered PING"
        );

        server.resume();
        assert_eq!(ping.await.unwrap().unwrap(), "PONG");
        assert_eq!(
            conn.get::<_, Option<String>>("k").await.unwrap().as_deref(),
            Some("v")
        );
    })
    .await
    .expect("hung");
    // Drop kills a paused server too.
    server.pause();
    let pid = server.pid();
    drop(server);
    assert!(
        !std::path::Path::new(&format!("/proc/{pid}")).exists(),
        "redis-server {pid} survived"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_from_an_old_dump_restores_exactly_it() {
    let Some(mut server) = common::start() else {
        return;
    };
    timeout(HANG, async {
        let mut conn = connect(&server.url()).await.unwrap();
        let () = conn.set("k", "1").await.unwrap();
        let dump = server.save_dump();
        let () = conn.set("k", "2").await.unwrap();
        let () = conn.set("later", "2").await.unwrap();

        let old_pid = server.pid();
        server.restart_from(&dump);
        assert_ne!(server.pid(), old_pid, "not a new process");
        let mut conn = connect(&server.url()).await.unwrap();
        assert_eq!(
            conn.get::<_, Option<String>>("k").await.unwrap().as_deref(),
            Some("1")
        );
        assert_eq!(conn.get::<_, Option<String>>("later").await.unwrap(), None);

        // And restart_empty really is empty.
        server.restart_empty();
        let mut conn = connect(&server.url()).await.unwrap();
        assert_eq!(conn.get::<_, Option<String>>("k").await.unwrap(), None);
    })
    .await
    .expect("hung");
}
