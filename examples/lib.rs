//! The examples are this crate's `[[example]]` targets; the library only holds helpers they share.
#![forbid(unsafe_code)]
