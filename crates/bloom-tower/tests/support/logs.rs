//! The crate's real `tracing` events, captured for the whole test binary as the lines a
//! `tracing_subscriber::fmt` subscriber writes (WARN and above). Included by path
//! (`#[path = "support/logs.rs"] mod logs;`) by `typed_keys.rs` and
//! `empty_filter_warning.rs`.

use std::io;
use std::sync::{Arc, Mutex, OnceLock};

/// Every line the crate logs, for the whole test binary (tests run in parallel: each one
/// names its guard and reads only its lines).
pub fn logs() -> &'static Mutex<String> {
    static LOGS: OnceLock<Arc<Mutex<String>>> = OnceLock::new();
    LOGS.get_or_init(|| {
        let logs = Arc::new(Mutex::new(String::new()));
        let sink = Arc::clone(&logs);
        tracing_subscriber::fmt()
            .with_max_level(tracing::Level::WARN)
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
