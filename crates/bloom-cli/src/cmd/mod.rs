//! One module per command, and what they share: [`stdout`] (buffered standard output, a
//! closed pipe as an error) and [`saturation`] (the over-capacity warning).

pub mod build;
pub mod calc;
pub mod check;
pub mod dedup;
pub mod merge;
pub mod remove;
pub mod saturation;
pub mod stats;
pub mod stdout;

pub use saturation::{SATURATED, warn_if_over_capacity, warn_if_saturated};
pub use stdout::{STDOUT_BUFFER, print, raw_stdout, stdout_failed};
