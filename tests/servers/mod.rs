//! Throwaway database servers for the end-to-end tests, one module per server.

pub mod postgres;
