//! The crate's real `tracing` events, captured for the whole test binary as the lines a
//! `tracing_subscriber::fmt` subscriber writes. Included by path
//! (`#[path = "support/logs.rs"] mod logs;`) by `typed_keys.rs`, `empty_filter_warning.rs`
//! and `ambiguous_keys.rs` (WARN and above, [`logs`]), `snapshot.rs` (DEBUG) and
//! `change_log_notices.rs` (INFO), through [`logs_at`].
#![allow(dead_code)]

use std::io;
use std::sync::{Arc, Mutex, OnceLock};

/// Every line the crate logs at WARN and above, for the whole test binary (tests run in
/// parallel: each one names its guard and reads only its lines).
pub fn logs() -> &'static Mutex<String> {
    logs_at(tracing::Level::WARN)
}

/// Every line logged at `level` and above, for the whole test binary: the first call's level
/// holds for the binary (one global subscriber).
pub fn logs_at(level: tracing::Level) -> &'static Mutex<String> {
    static LOGS: OnceLock<Arc<Mutex<String>>> = OnceLock::new();
    LOGS.get_or_init(|| {
        let logs = Arc::new(Mutex::new(String::new()));
        let sink = Arc::clone(&logs);
        tracing_subscriber::fmt()
            .with_max_level(level)
            .with_ansi(false)
            .with_writer(move || Sink(Arc::clone(&sink)))
            .init();
        logs
    })
}

struct Sink(Arc<Mutex<String>>);

impl io::Write for Sink {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        self.0
            .lock()
            .unwrap()
            .push_str(&String::from_utf8_lossy(bytes));
        Ok(bytes.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// The WARN lines that name `guard`.
pub fn warnings_of(guard: &str) -> Vec<String> {
    let needle = format!("guard={guard} ");
    logs()
        .lock()
        .unwrap()
        .lines()
        .filter(|line| line.contains(" WARN ") && line.contains(&needle))
        .map(str::to_owned)
        .collect()
}
