//! Acceptance tests for the whole workspace live in this crate's `[[test]]` targets; the
//! library itself only holds helpers they share.
#![forbid(unsafe_code)]

pub mod servers;
