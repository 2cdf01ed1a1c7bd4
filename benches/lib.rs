//! The benchmarks are this crate's `[[bench]]` targets; the library only holds helpers they share.
#![forbid(unsafe_code)]
