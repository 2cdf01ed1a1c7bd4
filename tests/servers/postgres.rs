//! A throwaway PostgreSQL server: `initdb` in a temporary directory, `pg_ctl start` on a
//! free port on 127.0.0.1, `pg_ctl stop -m immediate` and the directory removed on drop.
//!
//! The binaries are looked up under `/usr/lib/postgresql/*/bin` (Debian and Ubuntu's
//! `postgresql` package; the newest version wins), then on `PATH`. `initdb` refuses to run
//! as root, so as root every server command runs as the `postgres` OS user (`runuser -u
//! postgres --`), which owns the temporary directory. Authentication is `trust` and the
//! server listens on 127.0.0.1 only; durability is off (`fsync=off`), it is a test server.
//!
//! ```no_run
//! if let Some(server) = bloom_tests::servers::postgres::start_or_skip("my_test") {
//!     let url = server.create_database("my_test");
//!     // connect to `url` …
//! }
//! ```

use std::fs;
use std::net::TcpListener;
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// A running PostgreSQL server, stopped and deleted on drop.
#[derive(Debug)]
pub struct Postgres {
    bin: PathBuf,
    dir: tempfile::TempDir,
    port: u16,
    /// Run server commands through `runuser -u postgres --` (we are root).
    as_postgres: bool,
}

/// Where the PostgreSQL server binaries are (`initdb`, `pg_ctl`, `createdb`), if installed.
pub fn find_binaries() -> Option<PathBuf> {
    let mut versions: Vec<(u32, PathBuf)> = fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let version = entry.file_name().to_str()?.parse::<u32>().ok()?;
            let bin = entry.path().join("bin");
            bin.join("initdb").is_file().then_some((version, bin))
        })
        .collect();
    versions.sort();
    if let Some((_, bin)) = versions.pop() {
        return Some(bin);
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .find(|dir| dir.join("initdb").is_file() && dir.join("pg_ctl").is_file())
}

/// Whether this run must not skip: `CI=true` (or `1`).
pub fn required() -> bool {
    std::env::var("CI").is_ok_and(|ci| ci == "true" || ci == "1")
}

/// Starts a server, or, when PostgreSQL is not installed, fails under `CI=true` and
/// otherwise prints a loud `SKIPPED` line to stderr and returns `None`. A server that is
/// installed but does not start is a failure either way.
///
/// # Panics
///
/// If PostgreSQL is missing under `CI=true`, or does not start.
pub fn start_or_skip(test: &str) -> Option<Postgres> {
    let Some(bin) = find_binaries() else {
        assert!(
            !required(),
            "{test}: PostgreSQL is not installed, and CI=true requires the PostgreSQL suite \
             (apt-get install postgresql; .ci/run does it)"
        );
        eprintln!(
            "\n==== {test}: SKIPPED: PostgreSQL not installed (apt-get install postgresql) ====\n"
        );
        return None;
    };
    match Postgres::start(&bin) {
        Ok(server) => Some(server),
        Err(error) => panic!(
            "{test}: cannot start PostgreSQL from {}: {error}",
            bin.display()
        ),
    }
}

fn is_root() -> bool {
    fs::metadata("/proc/self").is_ok_and(|meta| meta.uid() == 0)
}

fn id_of(user: &str, flag: &str) -> Result<u32, String> {
    let output = Command::new("id")
        .args([flag, user])
        .output()
        .map_err(|e| format!("running id: {e}"))?;
    String::from_utf8_lossy(&output.stdout)
        .trim()
        .parse()
        .map_err(|_| format!("no OS user {user:?} (id {flag} {user} failed)"))
}

fn describe(output: &Output) -> String {
    format!(
        "{}\n{}{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

fn free_port() -> Result<u16, String> {
    let listener = TcpListener::bind("127.0.0.1:0").map_err(|e| format!("finding a port: {e}"))?;
    listener
        .local_addr()
        .map(|addr| addr.port())
        .map_err(|e| e.to_string())
}

impl Postgres {
    /// `initdb` and `pg_ctl start` with the binaries in `bin`.
    ///
    /// # Errors
    ///
    /// What failed, with the command's output or the server log.
    pub fn start(bin: &Path) -> Result<Postgres, String> {
        Self::start_with_connections(bin, 200)
    }

    /// [`start`](Self::start), with room for `max_connections` client connections.
    ///
    /// # Errors
    ///
    /// What failed, with the command's output or the server log.
    pub fn start_with_connections(bin: &Path, max_connections: u32) -> Result<Postgres, String> {
        let dir = tempfile::Builder::new()
            .prefix("bloom-pg-")
            .tempdir()
            .map_err(|e| format!("creating a temporary directory: {e}"))?;
        let as_postgres = is_root();
        if as_postgres {
            let (uid, gid) = (id_of("postgres", "-u")?, id_of("postgres", "-g")?);
            std::os::unix::fs::chown(dir.path(), Some(uid), Some(gid))
                .map_err(|e| format!("chown {} to postgres: {e}", dir.path().display()))?;
        }
        let mut server = Postgres {
            bin: bin.to_owned(),
            dir,
            port: 0,
            as_postgres,
        };
        let data = server.data_dir();
        let output = server
            .server_command("initdb")
            .arg("-D")
            .arg(&data)
            .args(["-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-sync"])
            .output()
            .map_err(|e| format!("running initdb: {e}"))?;
        if !output.status.success() {
            return Err(format!("initdb failed: {}", describe(&output)));
        }
        // The port is free when chosen but could be taken before the server binds it: retry.
        let mut last_error = String::new();
        for _ in 0..5 {
            server.port = free_port()?;
            let options = format!(
                "-p {} -k {} -c listen_addresses=127.0.0.1 -c fsync=off \
                 -c synchronous_commit=off -c full_page_writes=off -c max_connections={max_connections}",
                server.port,
                server.dir.path().display()
            );
            let log = server.dir.path().join("server.log");
            // The server's output goes to the log (-l), so nothing holds our pipes open.
            let status = server
                .server_command("pg_ctl")
                .arg("-D")
                .arg(&data)
                .arg("-l")
                .arg(&log)
                .args(["-w", "-t", "60", "-o", &options, "start"])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .map_err(|e| format!("running pg_ctl: {e}"))?;
            if status.success() {
                return Ok(server);
            }
            last_error = format!(
                "pg_ctl start: {status}; server log:\n{}",
                fs::read_to_string(&log).unwrap_or_default()
            );
        }
        Err(last_error)
    }

    fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// A command for a server binary, as the `postgres` user when we are root.
    fn server_command(&self, program: &str) -> Command {
        let program = self.bin.join(program);
        let mut command = if self.as_postgres {
            let mut command = Command::new("runuser");
            command.args(["-u", "postgres", "--"]).arg(program);
            command
        } else {
            Command::new(program)
        };
        // The postgres user may not be allowed into our working directory.
        command.current_dir(self.dir.path());
        command
    }

    /// The server's main process (the first line of `postmaster.pid`), if it is running.
    pub fn postmaster_pid(&self) -> Option<u32> {
        fs::read_to_string(self.data_dir().join("postmaster.pid"))
            .ok()?
            .lines()
            .next()?
            .trim()
            .parse()
            .ok()
    }

    /// The port it listens on (127.0.0.1).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `postgres://postgres@127.0.0.1:port/database`.
    pub fn url(&self, database: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{database}", self.port)
    }

    /// Creates a fresh database named after `prefix` (plus a counter, so calls never
    /// collide) and returns its URL.
    ///
    /// # Panics
    ///
    /// If `createdb` fails.
    pub fn create_database(&self, prefix: &str) -> String {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let name: String = format!("{prefix}_{}", NEXT.fetch_add(1, Relaxed))
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() {
                    c.to_ascii_lowercase()
                } else {
                    '_'
                }
            })
            .collect();
        let port = self.port.to_string();
        let output = Command::new(self.bin.join("createdb"))
            .args(["-h", "127.0.0.1", "-p", &port, "-U", "postgres", &name])
            .output()
            .unwrap_or_else(|e| panic!("running createdb: {e}"));
        assert!(
            output.status.success(),
            "createdb {name} failed: {}",
            describe(&output)
        );
        self.url(&name)
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        let data = self.data_dir();
        let _ = self
            .server_command("pg_ctl")
            .arg("-D")
            .arg(&data)
            .args(["-m", "immediate", "-w", "stop"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}
