//! What every end-to-end test of the `bloom` binary needs: running it, and reading its
//! output and its one-line errors.
#![allow(dead_code)] // each test file uses a part

use std::path::Path;
use std::process::Output;

use assert_cmd::Command;

pub fn bloom() -> Command {
    Command::cargo_bin("bloom").expect("the bloom binary is built for integration tests")
}

/// Runs `bloom` with `args` in `dir`, feeding `stdin`.
pub fn run(dir: &Path, args: &[&str], stdin: impl Into<Vec<u8>>) -> Output {
    bloom()
        .current_dir(dir)
        .args(args)
        .write_stdin(stdin)
        .output()
        .expect("bloom runs")
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8(o.stdout.clone()).expect("utf-8 stdout")
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Asserts a clean failure: exit status 2, a one-line `bloom: ...` message containing every
/// one of `needles`, and no panic.
pub fn assert_error(o: &Output, needles: &[&str]) {
    let err = stderr(o);
    assert_eq!(o.status.code(), Some(2), "stderr: {err}");
    assert!(!err.contains("panicked"), "{err}");
    assert!(err.starts_with("bloom: "), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "not one line: {err}");
    for n in needles {
        assert!(err.contains(n), "{err:?} lacks {n:?}");
    }
}

/// Starts `command` with `input` on its standard input, then closed; its stdout and stderr
/// are `output()`.
pub fn spawn_with_stdin(
    mut command: std::process::Command,
    input: &str,
    output: impl Fn() -> std::process::Stdio,
) -> std::process::Child {
    use std::io::Write as _;
    let mut child = command
        .stdin(std::process::Stdio::piped())
        .stdout(output())
        .stderr(output())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    child
}
