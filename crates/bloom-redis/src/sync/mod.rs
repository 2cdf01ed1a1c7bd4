//! [`RedisSync`] and the background machinery behind it, one role per file; each file owns
//! its type and the state only it uses:
//!
//! * [`redis_sync`]: the handle: joining, and the public operations.
//! * [`inner`]: what the handle and its background tasks share (`Inner`): the filter, the
//!   fleet's parameters, the connection, each role's state, the counters; the connection state.
//! * [`hooks`]: the filter's insert and commit hooks, its rejection override (the stale
//!   policy) and its external rebuild, installed while synchronised.
//! * [`publisher`]: queues this instance's inserts and commits (`Outbox`), writes them to Redis
//!   and publishes them, followed by a mark round; [`RedisSync::propagated`] waits on it.
//! * [`subscriber`]: receives the other instances' bits, roster changes and announcements,
//!   and this instance's own pings.
//! * [`confirm`]: a would-be rejection waits for a ping sent after it began (shared by every
//!   rejection waiting), so that its "absent" reflects everything published before.
//! * [`freshness`]: from the marks and the follower's covered time, whether this instance's view may be missing inserts
//!   made elsewhere, and what a would-be rejection does then ([`StalePolicy`](crate::StalePolicy))
//!   (`Freshness`).
//! * [`reconcile`]: the periodic two-way merge with Redis, when it runs and what it compares
//!   (`Reconciliation`), and the refill after Redis lost data.
//! * [`segments`]: per-segment versions and dirty marks (`Ledger`), and moving segments: what
//!   keeps a reconciliation's traffic proportional to what changed.
//! * [`generations`]: the serving generation and the one being built (`State`), which local
//!   filter bits of a generation go into; following a rebuild run elsewhere; switching.
//! * [`rebuild`]: running a rebuild: lock, acknowledgements, source, checks, switch.
//! * [`follower`]: one instance of the fleet follows the source's changes, under a lease.

mod confirm;
mod follower;
mod freshness;
mod generations;
mod hooks;
mod inner;
mod publisher;
mod rebuild;
mod reconcile;
mod redis_sync;
mod segments;
mod subscriber;

pub use redis_sync::{RedisSync, Visible};
