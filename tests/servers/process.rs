//! A workspace example run as a real OS process, for the tests that kill it: built once per
//! test process with `cargo build --release`, started with its output in a log file, sent
//! `SIGKILL`, `SIGTERM` or `SIGINT` with the `kill` command, and killed (`-9`) on drop if it
//! is still running.
//!
//! ```no_run
//! use bloom_tests::servers::process::{self, Process, Signal};
//! use std::time::Duration;
//!
//! let binary = process::example_binary("bloom-examples", "user_service");
//! let log = std::env::temp_dir().join("user_service.log");
//! let port = process::free_port();
//! let mut service = Process::spawn(&binary, &["--port", &port.to_string()], &[], &log);
//! service.signal(Signal::Int);
//! let status = service.wait_exit(Duration::from_secs(10)).expect("exits on SIGINT");
//! assert!(status.success(), "{}", service.log());
//! ```

use std::collections::HashMap;
use std::fs::{self, OpenOptions};
use std::io::Write as _;
use std::net::TcpListener;
use std::os::unix::process::ExitStatusExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// The workspace root (this crate's parent directory).
pub fn workspace_root() -> PathBuf {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/..")).to_owned()
}

/// Where cargo puts the release artifacts: `$CARGO_TARGET_DIR/release` (relative to the
/// workspace root if relative), else `<workspace>/target/release`.
fn release_dir() -> PathBuf {
    let root = workspace_root();
    let target = match std::env::var_os("CARGO_TARGET_DIR") {
        Some(dir) if !dir.is_empty() => root.join(dir),
        _ => root.join("target"),
    };
    target.join("release")
}

/// Builds `cargo build --release --workspace --example <example>` (once per test process
/// and example: later calls return the same path) and returns the binary's path,
/// `<target>/release/examples/<example>`, an example of `package`. Runs `$CARGO` (set by
/// `cargo test`), else `cargo`, in the workspace root; its output goes to this process's
/// stderr. Rule: the build selects the whole workspace, so its dependencies' features are
/// those `cargo test --workspace --release` built them with, and after that command the
/// build is a no-op; `-p <package>` alone would unify fewer features and rebuild dozens of
/// crates first (about a minute and a half on two cores).
///
/// # Panics
///
/// If the build fails or the binary is not where cargo puts it.
pub fn example_binary(package: &str, example: &str) -> PathBuf {
    static BUILT: Mutex<Option<HashMap<(String, String), PathBuf>>> = Mutex::new(None);
    // Held across the build: concurrent tests wait for the first one's build.
    let mut built = BUILT.lock().unwrap_or_else(PoisonError::into_inner);
    let key = (package.to_owned(), example.to_owned());
    if let Some(path) = built.as_ref().and_then(|built| built.get(&key)) {
        return path.clone();
    }
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let started = Instant::now();
    let output = Command::new(&cargo)
        .args(["build", "--release", "--workspace", "--example", example])
        .current_dir(workspace_root())
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("running {} build: {e}", cargo.to_string_lossy()));
    assert!(
        output.status.success(),
        "cargo build --release --workspace --example {example} (of {package}) failed ({}):\n{}{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    eprintln!(
        "built the {example} example in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let path = release_dir().join("examples").join(example);
    assert!(
        path.is_file(),
        "cargo built the {example} example, but {} is not there",
        path.display()
    );
    built
        .get_or_insert_with(HashMap::new)
        .insert(key, path.clone());
    path
}

/// A port on 127.0.0.1 that was free a moment ago (bound to port 0, then released).
///
/// # Panics
///
/// If no port can be bound.
pub fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("binding 127.0.0.1:0");
    listener.local_addr().expect("a local address").port()
}

/// A signal to send with `kill`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Signal {
    /// `SIGKILL` (`kill -9`): the process dies at once, no handler runs.
    Kill,
    /// `SIGTERM` (`kill -TERM`): what service managers send to stop a service.
    Term,
    /// `SIGINT` (`kill -INT`): Ctrl-C.
    Int,
    /// `SIGSTOP`: the process is frozen (a stalled host, a long GC pause); the kernel still
    /// accepts its TCP connections.
    Stop,
    /// `SIGCONT`: a stopped process carries on.
    Cont,
}

impl Signal {
    /// The signal's name (`SIGKILL`, …).
    pub fn name(self) -> &'static str {
        match self {
            Signal::Kill => "SIGKILL",
            Signal::Term => "SIGTERM",
            Signal::Int => "SIGINT",
            Signal::Stop => "SIGSTOP",
            Signal::Cont => "SIGCONT",
        }
    }

    fn flag(self) -> &'static str {
        match self {
            Signal::Kill => "-KILL",
            Signal::Term => "-TERM",
            Signal::Int => "-INT",
            Signal::Stop => "-STOP",
            Signal::Cont => "-CONT",
        }
    }
}

/// A running child process whose stdout and stderr are appended to a log file. Killed with
/// `SIGKILL` (and reaped) on drop if it is still running.
#[derive(Debug)]
pub struct Process {
    child: Child,
    program: String,
    log: PathBuf,
    status: Option<ExitStatus>,
}

impl Process {
    /// Starts `program` with `args`, the environment of this process plus `env` (a `None`
    /// value removes the variable), stdin closed, stdout and stderr appended to `log` after a
    /// line that names the command.
    ///
    /// # Panics
    ///
    /// If the log cannot be opened or the program cannot be started.
    pub fn spawn(
        program: &Path,
        args: &[&str],
        env: &[(&str, Option<&str>)],
        log: &Path,
    ) -> Process {
        let mut file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .unwrap_or_else(|e| panic!("opening the log {}: {e}", log.display()));
        let name = program
            .file_name()
            .unwrap_or(program.as_os_str())
            .to_string_lossy()
            .into_owned();
        let _ = writeln!(file, "\n==== {name} {}", args.join(" "));
        let stderr = file.try_clone().expect("cloning the log's handle");
        let mut command = Command::new(program);
        command
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::from(file))
            .stderr(Stdio::from(stderr));
        for (key, value) in env {
            match value {
                Some(value) => command.env(key, value),
                None => command.env_remove(key),
            };
        }
        let child = command
            .spawn()
            .unwrap_or_else(|e| panic!("starting {}: {e}", program.display()));
        Process {
            child,
            program: name,
            log: log.to_owned(),
            status: None,
        }
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Everything the log file holds (this process's output and that of any other process
    /// that logged to the same file), for failure messages.
    pub fn log(&self) -> String {
        read_log(&self.log)
    }

    /// Sends `signal` with `kill -<SIG> <pid>`.
    ///
    /// # Panics
    ///
    /// If the process was already reaped, or `kill` fails.
    pub fn signal(&mut self, signal: Signal) {
        assert!(
            self.status.is_none(),
            "{} (pid {}) already exited ({:?}); cannot send {signal:?}",
            self.program,
            self.pid(),
            self.status
        );
        let pid = self.pid().to_string();
        let output = Command::new("kill")
            .args([signal.flag(), &pid])
            .output()
            .unwrap_or_else(|e| panic!("running kill {} {pid}: {e}", signal.flag()));
        assert!(
            output.status.success(),
            "kill {} {pid} failed: {}",
            signal.flag(),
            String::from_utf8_lossy(&output.stderr)
        );
    }

    /// Its exit status if it has exited (reaping it), `None` while it runs.
    ///
    /// # Panics
    ///
    /// If waiting fails.
    pub fn try_status(&mut self) -> Option<ExitStatus> {
        if self.status.is_none() {
            self.status = self.child.try_wait().expect("waiting for the child");
        }
        self.status
    }

    /// Waits up to `timeout` for the process to exit; its status, or `Err` with how long it
    /// was given if it is still running then.
    pub fn wait_exit(&mut self, timeout: Duration) -> Result<ExitStatus, String> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.try_status() {
                return Ok(status);
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "{} (pid {}) still running {timeout:?} later",
                    self.program,
                    self.pid()
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        if self.try_status().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// How a process ended, in words: `exit code 0`, `killed by signal 15 (SIGTERM)`.
pub fn describe_exit(status: ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit code {code}"),
        (None, Some(signal)) => {
            let name = match signal {
                2 => " (SIGINT)",
                6 => " (SIGABRT)",
                9 => " (SIGKILL)",
                11 => " (SIGSEGV)",
                15 => " (SIGTERM)",
                _ => "",
            };
            format!("killed by signal {signal}{name}")
        }
        (None, None) => format!("{status}"),
    }
}

/// The log file's text (lossy UTF-8), or a note that it cannot be read.
fn read_log(path: &Path) -> String {
    match fs::read(path) {
        Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
        Err(error) => format!("(cannot read the log {}: {error})", path.display()),
    }
}
