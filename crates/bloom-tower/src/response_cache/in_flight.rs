//! The response cache's loads in flight: one per URL, through the crate's `flight` table.

use std::sync::Arc;

use bytes::Bytes;

use super::store::Variant;
use crate::flight::Flights;

/// The loads in flight are per URL (record key, URL key): requests for the same resource
/// wait for one another, requests for different URLs of one record do not.
pub(crate) type FlightKey = (Bytes, Bytes);

/// The table of loads in flight.
pub(crate) type InFlight = Flights<FlightKey, Handoff>;

/// What a load hands the requests that waited for it.
#[derive(Clone)]
pub(crate) enum Handoff {
    /// The stored response; each waiter checks that it answers its own request (`Vary`).
    Response(Arc<Variant>),
    /// The response may not be shared: each waiter asks the inner service itself.
    Uncacheable,
}
