//! A progress bar with rate and ETA on stderr, shown only when stderr is a terminal and the
//! user did not ask for `--quiet`: pipelines and logs get no escape codes.

use std::io::IsTerminal;

use indicatif::{HumanCount, ProgressBar, ProgressStyle};

/// Whether to show progress: stderr is a terminal and not `--quiet`.
pub fn wanted(quiet: bool) -> bool {
    !quiet && std::io::stderr().is_terminal()
}

/// A byte-based progress bar (a spinner when the total is unknown), or nothing.
pub struct Progress {
    bar: Option<ProgressBar>,
}

impl Progress {
    /// A bar for reading `total` bytes (unknown for a pipe), labelled `what`.
    pub fn bytes(show: bool, what: &'static str, total: Option<u64>) -> Self {
        if !show {
            return Self { bar: None };
        }
        let (bar, template) = match total {
            Some(len) => (
                ProgressBar::new(len),
                "{prefix:>9} {wide_bar} {binary_bytes}/{binary_total_bytes} \
                 {binary_bytes_per_sec} ETA {eta} {msg}",
            ),
            None => (
                ProgressBar::no_length(),
                "{prefix:>9} {spinner} {binary_bytes} {binary_bytes_per_sec} {elapsed} {msg}",
            ),
        };
        let style = ProgressStyle::with_template(template)
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> ");
        Self {
            bar: Some(bar.with_style(style).with_prefix(what)),
        }
    }

    /// Bytes done so far, and the lines they held.
    pub fn update(&self, bytes: u64, lines: u64) {
        if let Some(bar) = &self.bar {
            bar.set_position(bytes);
            let secs = bar.elapsed().as_secs_f64();
            let rate = if secs > 0.0 { lines as f64 / secs } else { 0.0 };
            bar.set_message(format!(
                "{} lines ({}/s)",
                HumanCount(lines),
                HumanCount(rate as u64)
            ));
        }
    }

    /// Removes the bar.
    pub fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.finish();
    }
}
