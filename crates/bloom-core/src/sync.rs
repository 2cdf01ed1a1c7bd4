//! Atomics used by the bit array, the cuckoo table and the windowed filter: std's normally,
//! loom's when model-checking (`--cfg loom`).

#[cfg(loom)]
pub(crate) use loom::sync::Mutex;
#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicU64, Ordering, fence};
#[cfg(not(loom))]
pub(crate) use std::sync::Mutex;
#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{AtomicU64, Ordering, fence};

/// One turn of a wait for another thread: a CPU hint normally, a yield to loom's scheduler
/// when model-checking (a loom model must not spin without yielding).
#[inline]
pub(crate) fn spin() {
    #[cfg(loom)]
    loom::thread::yield_now();
    #[cfg(not(loom))]
    std::hint::spin_loop();
}
