//! Atomics used by the bit array: std's normally, loom's when model-checking (`--cfg loom`).

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicU64, Ordering};
#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{AtomicU64, Ordering};
