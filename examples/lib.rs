//! The examples are this crate's `[[example]]` targets; the library holds what they share:
//! the database layer and the user service (also started in-process by the demo and by the
//! end-to-end tests in `tests/`).
#![forbid(unsafe_code)]

pub mod db;
pub mod passwords;
pub mod user_service;
