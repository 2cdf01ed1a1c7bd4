//! Standard output for the commands that stream to it: a large buffer over the raw file
//! descriptor, and a closed pipe reported as an error.

use std::io::{self, Write};

use anyhow::{Error, anyhow};

use crate::input::io_msg;

/// Write buffer for standard output.
pub const STDOUT_BUFFER: usize = 1 << 20;

/// Standard output, unbuffered by std: on Unix a duplicate of file descriptor 1, which skips
/// std's line buffering (it would scan every write for newlines) and its lock. Wrap it in a
/// large `BufWriter`.
pub fn raw_stdout() -> Box<dyn Write> {
    #[cfg(unix)]
    {
        use std::os::fd::AsFd;
        if let Ok(fd) = io::stdout().as_fd().try_clone_to_owned() {
            return Box::new(std::fs::File::from(fd));
        }
    }
    Box::new(io::stdout().lock())
}

/// The error for a failed write to standard output (e.g. a closed pipe).
pub fn stdout_failed(e: &io::Error) -> Error {
    anyhow!("stdout: write failed: {}", io_msg(e))
}

/// Writes `text` to stdout, reporting a failed write (e.g. a closed pipe) as an error.
pub fn print(text: &str) -> anyhow::Result<()> {
    let mut out = io::stdout().lock();
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .map_err(|e| stdout_failed(&e))
}
