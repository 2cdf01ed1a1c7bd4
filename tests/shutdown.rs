//! One signal stops every example that serves (`cargo build --release -p bloom-examples
//! --example <name>`), whatever its clients hold open: the rule of `bloom_examples::serve`.
//!
//! Each test starts the real binary on a free port, opens a connection that sends half a
//! request and stalls (a slow or stuck client: a graceful shutdown with no deadline waits for
//! it for ever) and then an idle keep-alive connection that has had its answer, sends
//! exactly one SIGINT or one SIGTERM, and requires the process to exit by itself with code 0
//! within [`HANG`] (a hang detector, not a timing claim: the grace period is 5 s), having
//! stored what it promises to store on exit:
//!
//! * `feed --serve`, after a burst of requests: every item of each user's last response is
//!   still marked seen by a new process on the same store directory (the filters flushed at
//!   shutdown);
//! * `user_service`: the filter snapshot was saved after the signal;
//! * `signup`, `hyper_service`: nothing to store; they report that they stopped.
#![forbid(unsafe_code)]

#[path = "support/user_service.rs"]
mod support;

use std::collections::HashMap;
use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::TcpStream;
use std::path::Path;
use std::time::{Duration, Instant};

use bloom_tests::servers::process::{self, Process, Signal};

/// How long a process may take to exit after the signal before the test calls it a hang.
const HANG: Duration = Duration::from_secs(20);

/// Waits for `marker` followed by `http://<addr>` in the log; the address.
fn address(process: &mut Process, marker: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let log = process.log();
        if let Some(at) = log.find(marker) {
            let rest = &log[at + marker.len()..];
            let end = rest
                .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == ':'))
                .unwrap_or(rest.len());
            return rest[..end].to_owned();
        }
        if let Some(status) = process.try_status() {
            panic!("exited ({status:?}) before listening:\n{log}");
        }
        assert!(
            Instant::now() < deadline,
            "not listening after 60 s:\n{log}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// One HTTP/1.1 connection kept alive across requests.
struct Connection {
    reader: BufReader<TcpStream>,
}

impl Connection {
    fn open(addr: &str) -> Self {
        let stream = TcpStream::connect(addr).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        Connection {
            reader: BufReader::new(stream),
        }
    }

    /// Sends a request and reads its whole answer: status and body.
    fn request(&mut self, method: &str, path: &str, body: &str) -> (u16, String) {
        let head = format!(
            "{method} {path} HTTP/1.1\r\nhost: test\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        );
        self.reader.get_mut().write_all(head.as_bytes()).unwrap();
        let mut line = String::new();
        self.reader.read_line(&mut line).unwrap();
        let status: u16 = line
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("status line {line:?}"));
        let mut length = 0;
        loop {
            line.clear();
            self.reader.read_line(&mut line).unwrap();
            if line == "\r\n" {
                break;
            }
            if let Some((name, value)) = line.split_once(':') {
                if name.eq_ignore_ascii_case("content-length") {
                    length = value.trim().parse().unwrap();
                }
            }
        }
        let mut body = vec![0; length];
        self.reader.read_exact(&mut body).unwrap();
        (status, String::from_utf8(body).unwrap())
    }
}

/// The connections every test holds across the signal: one that sent half a request and
/// stalls, opened first (so the service accepted it before it answered the second), then an
/// idle keep-alive connection that had `request`'s answer.
fn hold_connections(addr: &str, request: (&str, &str, &str)) -> (TcpStream, Connection) {
    let mut stalled = TcpStream::connect(addr).unwrap();
    stalled
        .write_all(b"GET /health HTTP/1.1\r\nhost: test\r\n")
        .unwrap();
    let mut idle = Connection::open(addr);
    let (status, body) = idle.request(request.0, request.1, request.2);
    assert!(status < 500, "{} {}: {status} {body}", request.0, request.1);
    (stalled, idle)
}

/// Sends `signal` once and waits for the process to exit by itself: code 0 within [`HANG`].
fn stops_on(process: &mut Process, signal: Signal, what: &str) {
    let sent = Instant::now();
    process.signal(signal);
    let status = process.wait_exit(HANG).unwrap_or_else(|hang| {
        panic!(
            "{what}: one {} did not stop it: {hang}\n{}",
            signal.name(),
            process.log()
        )
    });
    assert!(
        status.success(),
        "{what}: {} after one {}:\n{}",
        process::describe_exit(status),
        signal.name(),
        process.log()
    );
    println!(
        "{what}: exit code 0 {:.1} s after one {}",
        sent.elapsed().as_secs_f64(),
        signal.name()
    );
}

fn feed(dir: &Path, log: &str) -> (Process, String) {
    let store = dir.join("store");
    let args = [
        "--serve",
        "--port",
        "0",
        "--store-dir",
        store.to_str().unwrap(),
    ];
    let mut feed = Process::spawn(
        &process::example_binary("bloom-examples", "feed"),
        &args,
        &[("REDIS_URL", None), ("NO_COLOR", Some("1"))],
        &dir.join(log),
    );
    let addr = address(&mut feed, "feed: listening on http://");
    (feed, addr)
}

fn items(body: &str) -> Vec<u64> {
    let answer: serde_json::Value = serde_json::from_str(body).unwrap();
    answer["items"]
        .as_array()
        .unwrap_or_else(|| panic!("no items in {body}"))
        .iter()
        .map(|item| item.as_u64().unwrap())
        .collect()
}

fn feed_stops_with_connections_open(signal: Signal) {
    let dir = tempfile::tempdir().unwrap();
    let (mut service, addr) = feed(dir.path(), "feed.log");
    // A burst over four keep-alive connections, as a load generator sends it; the items of
    // each user's last page.
    let last: HashMap<u64, Vec<u64>> = std::thread::scope(|scope| {
        let clients: Vec<_> = (0..4u64)
            .map(|client| {
                let addr = &addr;
                scope.spawn(move || {
                    let mut connection = Connection::open(addr);
                    let mut last = HashMap::new();
                    for n in 0..1_000u64 {
                        let user = client * 1_000 + n % 250;
                        let (status, body) =
                            connection.request("GET", &format!("/feed/{user}"), "");
                        assert_eq!(status, 200, "{body}");
                        last.insert(user, items(&body));
                    }
                    last
                })
            })
            .collect();
        clients
            .into_iter()
            .flat_map(|client| client.join().unwrap())
            .collect()
    });
    let (stalled, idle) = hold_connections(&addr, ("GET", "/feed/424242", ""));
    stops_on(&mut service, signal, "feed --serve");
    let log = service.log();
    assert!(log.contains("filters stored at shutdown"), "{log}");
    drop((stalled, idle));

    // What the last responses showed is still seen by a new process on the same store.
    let (mut again, addr) = feed(dir.path(), "feed-again.log");
    let mut connection = Connection::open(&addr);
    let mut forgotten = Vec::new();
    for (user, shown) in &last {
        for item in shown {
            let (status, body) = connection.request("GET", &format!("/seen/{user}/{item}"), "");
            assert_eq!(status, 200, "{body}");
            if !body.contains("\"seen\":true") {
                forgotten.push((*user, *item));
            }
        }
    }
    assert!(
        forgotten.is_empty(),
        "{} items shown before the {} forgotten after the restart (user, item): {:?}\n{log}",
        forgotten.len(),
        signal.name(),
        &forgotten[..forgotten.len().min(10)]
    );
    again.signal(Signal::Term);
    let _ = again.wait_exit(HANG);
}

#[test]
fn feed_stops_on_one_sigint_with_connections_open_and_stores_its_filters() {
    feed_stops_with_connections_open(Signal::Int);
}

#[test]
fn feed_stops_on_one_sigterm_with_connections_open_and_stores_its_filters() {
    feed_stops_with_connections_open(Signal::Term);
}

async fn user_service_stops_with_connections_open(signal: Signal) {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("users");
    let url = bloom_examples::db::sqlite_url(&data).unwrap();
    let mut instance = support::Instance::start(dir.path(), "users", &url, &[]).await;
    let snapshot = data.join("users.bloom");
    let before = std::fs::metadata(&snapshot).and_then(|m| m.modified()).ok();
    let addr = instance.url.trim_start_matches("http://").to_owned();
    let (stalled, idle) = hold_connections(&addr, ("GET", "/users/1", ""));
    stops_on(&mut instance.process, signal, "user_service");
    drop((stalled, idle));
    let log = instance.log();
    let after = std::fs::metadata(&snapshot).and_then(|m| m.modified()).ok();
    assert!(
        after.is_some() && after != before && log.contains("saved the filter snapshot"),
        "the snapshot {} was not saved on exit ({before:?} → {after:?}):\n{log}",
        snapshot.display()
    );
}

#[tokio::test]
async fn user_service_stops_on_one_sigint_with_connections_open_and_saves_its_snapshot() {
    user_service_stops_with_connections_open(Signal::Int).await;
}

#[tokio::test]
async fn user_service_stops_on_one_sigterm_with_connections_open_and_saves_its_snapshot() {
    user_service_stops_with_connections_open(Signal::Term).await;
}

/// `signup` or `hyper_service`, on `BIND=127.0.0.1:0`.
fn bound_example_stops_with_connections_open(
    example: &str,
    args: &[&str],
    request: (&str, &str, &str),
    signal: Signal,
) {
    let dir = tempfile::tempdir().unwrap();
    let mut service = Process::spawn(
        &process::example_binary("bloom-examples", example),
        args,
        &[("BIND", Some("127.0.0.1:0"))],
        &dir.path().join(format!("{example}.log")),
    );
    let addr = address(&mut service, "listening on http://");
    let (stalled, idle) = hold_connections(&addr, request);
    stops_on(&mut service, signal, example);
    drop((stalled, idle));
    let log = service.log();
    assert!(log.contains("stopped ("), "{log}");
}

const SIGNUP: (&str, &str, &str) = (
    "POST",
    "/signup",
    r#"{"username":"ada","password":"correct horse battery staple"}"#,
);

#[test]
fn signup_stops_on_one_sigint_with_connections_open() {
    bound_example_stops_with_connections_open("signup", &[], SIGNUP, Signal::Int);
}

#[test]
fn signup_stops_on_one_sigterm_with_connections_open() {
    bound_example_stops_with_connections_open("signup", &[], SIGNUP, Signal::Term);
}

#[test]
fn hyper_service_stops_on_one_sigint_with_connections_open() {
    bound_example_stops_with_connections_open(
        "hyper_service",
        &[],
        ("GET", "/items/42", ""),
        Signal::Int,
    );
}

#[test]
fn hyper_service_stops_on_one_sigterm_with_connections_open() {
    bound_example_stops_with_connections_open(
        "hyper_service",
        &[],
        ("GET", "/items/42", ""),
        Signal::Term,
    );
}
