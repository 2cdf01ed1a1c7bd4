//! A throwaway `redis-server` for the tests: 127.0.0.1, a random free port, a temp dir, no
//! persistence. (The workspace's end-to-end tests use this same file, through `#[path]`.)
//! Std only (that other user depends on `tempfile` and std alone): the fault helpers here
//! (`pause`/`resume`, `save_dump`/`restart_from`) shell out to `kill` because `unsafe` (for
//! `libc::kill`) is forbidden. The Tokio TCP fault proxy lives in `fault.rs`, included separately.

#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running `redis-server`, killed on drop.
pub struct RedisServer {
    child: Option<Child>,
    port: u16,
    dir: tempfile::TempDir,
    /// The running server's `--dir` (where `SAVE` writes `dump.rdb`).
    data_dir: PathBuf,
    /// SIGSTOPped by `pause()` and not yet resumed.
    paused: bool,
    /// Dumps saved so far (names the copies).
    dumps: u32,
}

/// `None` (after a loud message) when `redis-server` is not installed, unless `CI=true`,
/// where that is a failure.
pub fn start() -> Option<RedisServer> {
    let installed = Command::new("redis-server")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !installed {
        if std::env::var("CI").is_ok_and(|v| v == "true") {
            panic!("redis-server is not installed, and CI=true requires these tests to run");
        }
        eprintln!("\n*** SKIPPED: redis-server not installed (apt-get install redis-server) ***\n");
        return None;
    }
    let port = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let mut server = RedisServer {
        child: None,
        port,
        dir: tempfile::tempdir().expect("a temp dir"),
        data_dir: PathBuf::new(),
        paused: false,
        dumps: 0,
    };
    server.restart_empty();
    Some(server)
}

impl RedisServer {
    /// `redis://127.0.0.1:PORT/`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// The port (stays the same across restarts).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The running server's process id.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("redis-server is running").id()
    }

    /// SIGKILL, and wait for the port to close. Works on a paused server too (SIGKILL ends a
    /// stopped process; the SIGCONT after it is harmless and keeps the state tidy).
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            child.kill().expect("SIGKILL redis-server");
            if self.paused {
                signal(child.id(), "-CONT");
                self.paused = false;
            }
            let _ = child.wait();
        }
    }

    /// SIGSTOP: the process is frozen but the kernel still accepts its TCP connections and
    /// buffers what clients send, so clients see a hung server, not a dead one.
    pub fn pause(&mut self) {
        signal(self.pid(), "-STOP");
        self.paused = true;
    }

    /// SIGCONT: the server carries on and answers everything that was buffered meanwhile.
    pub fn resume(&mut self) {
        signal(self.pid(), "-CONT");
        self.paused = false;
    }

    /// Starts a fresh, empty server on the same port (killing the running one, if any).
    pub fn restart_empty(&mut self) {
        let dir = self.fresh_dir();
        self.spawn_in(dir);
    }

    /// `SAVE`s the dataset now (synchronously, over raw TCP) and returns a copy of the
    /// `dump.rdb`, for `restart_from` later: "an old dump".
    pub fn save_dump(&mut self) -> PathBuf {
        let mut stream = TcpStream::connect(("127.0.0.1", self.port)).expect("connect for SAVE");
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .expect("a read timeout");
        stream.write_all(b"SAVE\r\n").expect("send SAVE");
        let mut reply = [0u8; 5];
        stream.read_exact(&mut reply).expect("SAVE reply");
        assert_eq!(&reply, b"+OK\r\n", "SAVE failed");
        self.dumps += 1;
        let copy = self.dir.path().join(format!("saved-{}.rdb", self.dumps));
        std::fs::copy(self.data_dir.join("dump.rdb"), &copy).expect("copy dump.rdb");
        copy
    }

    /// Kills the running server and starts one on the same port that loads `dump` (a copy of
    /// it, so the dump can be restored again), e.g. from `save_dump`.
    pub fn restart_from(&mut self, dump: &Path) {
        let dir = self.fresh_dir();
        std::fs::copy(dump, dir.join("dump.rdb")).expect("copy the dump in");
        self.spawn_in(dir);
    }

    /// A new, empty data directory under the temp dir (kept until the temp dir goes).
    fn fresh_dir(&self) -> PathBuf {
        tempfile::tempdir_in(self.dir.path())
            .expect("a temp dir")
            .keep()
    }

    /// Kills the running server, starts one with `--dir dir` (it loads `dir/dump.rdb` if
    /// there is one; `--save ""` only turns off automatic saves) and waits for its PONG.
    fn spawn_in(&mut self, dir: PathBuf) {
        self.kill();
        let child = Command::new("redis-server")
            .args(["--bind", "127.0.0.1", "--port", &self.port.to_string()])
            .args([
                "--save",
                "",
                "--appendonly",
                "no",
                "--dbfilename",
                "dump.rdb",
            ])
            .arg("--dir")
            .arg(&dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn redis-server");
        self.child = Some(child);
        self.data_dir = dir;
        let deadline = Instant::now() + Duration::from_secs(10);
        while !self.ping() {
            assert!(Instant::now() < deadline, "redis-server did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn ping(&self) -> bool {
        let Ok(mut stream) = TcpStream::connect(("127.0.0.1", self.port)) else {
            return false;
        };
        let _ = stream.set_read_timeout(Some(Duration::from_secs(1)));
        let mut reply = [0u8; 7];
        stream.write_all(b"PING\r\n").is_ok()
            && stream.read_exact(&mut reply).is_ok()
            && &reply == b"+PONG\r\n"
    }
}

/// `kill -SIG PID` (no `unsafe` for `libc::kill`).
pub fn signal(pid: u32, sig: &str) {
    let status = Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()
        .expect("run kill");
    assert!(status.success(), "kill {sig} {pid} failed");
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The calls of the commands `counted` names (lower case: `evalsha`, `publish`…) in the text
/// of `INFO commandstats`.
pub fn command_calls(commandstats: &str, counted: impl Fn(&str) -> bool) -> u64 {
    commandstats
        .lines()
        .filter_map(|line| {
            let (command, stats) = line.strip_prefix("cmdstat_")?.split_once(':')?;
            let calls = stats.strip_prefix("calls=")?.split(',').next()?;
            counted(command).then(|| calls.parse::<u64>().ok())?
        })
        .sum()
}
