//! The examples are this crate's `[[example]]` targets; the library holds what they share:
//! the database layer, the user service (also started in-process by the demo and by the
//! end-to-end tests in `tests/`), and how every serving example serves and stops on a signal
//! ([`serve`]).
#![forbid(unsafe_code)]

/// The workspace README's Rust blocks as this crate's doc tests: its example (`quickstart.rs`,
/// kept equal by `tests/readme.rs`) is compiled; it serves forever, so it is `no_run`.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct WorkspaceReadme;

pub mod db;
pub mod feed;
pub mod passwords;
pub mod serve;
pub mod user_service;
