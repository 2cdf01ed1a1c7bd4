//! One module per command, and what they share.

pub mod build;
pub mod calc;
pub mod check;
pub mod dedup;
pub mod merge;
pub mod stats;

use std::io::{self, Write};

use anyhow::{Error, anyhow};
use bloom_core::BloomFilter;

use crate::args::fmt_rate;
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

/// How far above its target rate a filter's current rate must be to count as saturated: at
/// exactly its capacity a filter's rate scatters a few percent around the target.
pub const SATURATED: f64 = 1.1;

/// A one-line warning on stderr when `filter` holds more distinct keys than it was sized
/// for, so its false-positive rate is past the target. `estimated_items` is
/// [`BloomFilter::estimated_items`] (a pass over the bits), passed in so callers that also
/// report it count the bits once.
pub fn warn_if_saturated(filter: &BloomFilter, estimated_items: f64, what: &str) {
    let (Some(capacity), Some(target)) = (filter.capacity(), filter.target_fpr()) else {
        return;
    };
    // current_fpr (another pass, per block) only when the count says it looks full.
    if estimated_items <= capacity as f64 * 1.05 {
        return;
    }
    let fpr = filter.current_fpr();
    if fpr > target * SATURATED {
        let _ = writeln!(
            io::stderr().lock(),
            "bloom: warning: {what} holds about {estimated_items:.0} distinct keys, more than \
             the {capacity} it was sized for: its false-positive rate is now {} (target {}); \
             rebuild it with a larger --items",
            fmt_rate(fpr),
            fmt_rate(target),
        );
    }
}
