//! The examples are this crate's `[[example]]` targets; the library holds what they share:
//! the database layer and the user service (also started in-process by the demo and by the
//! end-to-end tests in `tests/`).
#![forbid(unsafe_code)]

/// The workspace README's Rust blocks, compiled and run as this crate's doc tests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct WorkspaceReadme;

pub mod db;
pub mod passwords;
pub mod user_service;
