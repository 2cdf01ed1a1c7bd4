//! [`Inner`]: what [`RedisSync`](super::RedisSync) and its background tasks share — the
//! filter, the fleet's parameters, the connection, and each role's state (owned by the type
//! of the file that role lives in) — and the connection state every role reports to.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{SystemTime, UNIX_EPOCH};

use bloom_tower::SharedFilter;
use bloom_tower::key::AnyKey;

use super::freshness::Freshness;
use super::generations::State;
use super::publisher::Outbox;
use super::reconcile::Reconciliation;
use super::segments::Ledger;
use crate::RedisSyncBuilder;
use crate::conn::Conn;
#[cfg(feature = "metrics")]
use crate::names;
use crate::protocol::{Keys, Shape};

/// What the background tasks share.
pub(super) struct Inner {
    /// Untyped: the synchronisation moves bits and key bytes, whatever the key type.
    pub(super) filter: SharedFilter<AnyKey>,
    pub(super) shape: Shape,
    pub(super) keys: Keys,
    pub(super) prefix: String,
    pub(super) cfg: RedisSyncBuilder,
    /// Random per instance: tells our own messages apart, names us in the member set.
    pub(super) id: u64,
    pub(super) conn: Conn,
    /// The versions of the segments held here, and the dirty ones ([`segments`](super::segments)).
    pub(super) ledger: Ledger,
    /// The serving generation and the one being built ([`generations`](super::generations)).
    pub(super) state: Mutex<State>,
    /// What is queued for publishing ([`publisher`](super::publisher)).
    pub(super) outbox: Outbox,
    /// Whether this instance's view is fresh ([`freshness`](super::freshness)).
    pub(super) freshness: Freshness,
    /// When the next pass runs and what it compares ([`reconcile`](super::reconcile)).
    pub(super) reconciliation: Reconciliation,
    /// Serialises generation transitions and reconciliations.
    pub(super) transition: tokio::sync::Mutex<()>,
    connected: AtomicBool,
    pub(super) counters: Counters,
    /// Whether this instance holds the follow lease ([`follower`](super::follower)).
    pub(super) following: AtomicBool,
}

/// What [`RedisSync::stats`](super::RedisSync::stats) counts, each incremented by the role
/// that does the counted thing.
#[derive(Default)]
pub(super) struct Counters {
    pub(super) reconciles: AtomicU64,
    pub(super) reconcile_errors: AtomicU64,
    pub(super) published: AtomicU64,
    pub(super) publish_errors: AtomicU64,
    pub(super) received: AtomicU64,
    pub(super) switches: AtomicU64,
    pub(super) rebuilds: AtomicU64,
    pub(super) refused_switches: AtomicU64,
    pub(super) refills: AtomicU64,
    pub(super) not_propagated: AtomicU64,
    /// Confirming pings sent ([`confirm`](super::confirm)).
    pub(super) confirm_rounds: AtomicU64,
    /// Would-be rejections confirmed, and those that went to the stale policy instead.
    pub(super) confirmed: AtomicU64,
    pub(super) unconfirmed: AtomicU64,
}

impl Inner {
    pub(super) fn new(
        filter: SharedFilter<AnyKey>,
        shape: Shape,
        prefix: String,
        cfg: RedisSyncBuilder,
        conn: Conn,
    ) -> Self {
        let id = random_id();
        #[cfg(feature = "metrics")]
        for name in [
            names::STALE_PERIODS,
            names::CONFIRMED_REJECTIONS,
            names::UNCONFIRMED_REJECTIONS,
            names::REFUSED_SWITCHES,
        ] {
            // From 0: `increase()` over a series that appears at 1 sees no event.
            metrics::counter!(name, "prefix" => prefix.clone()).increment(0);
        }
        Self {
            keys: Keys::new(&prefix),
            freshness: Freshness::new(&cfg, id, &prefix),
            ledger: Ledger::new(shape.num_bytes().div_ceil(cfg.segment_bytes)),
            filter,
            shape,
            prefix,
            cfg,
            id,
            conn,
            state: Mutex::new(State::default()),
            outbox: Outbox::default(),
            reconciliation: Reconciliation::default(),
            transition: tokio::sync::Mutex::new(()),
            connected: AtomicBool::new(false),
            counters: Counters::default(),
            following: AtomicBool::new(false),
        }
    }

    pub(super) fn generation(&self) -> u64 {
        lock(&self.state).generation
    }

    pub(super) fn segments(&self) -> u64 {
        self.shape.num_bytes().div_ceil(self.cfg.segment_bytes)
    }

    pub(super) fn ttl_ms(&self) -> u64 {
        self.cfg.lock_ttl.as_millis().max(1) as u64
    }

    /// How recent an instance's last reconciliation in the member set must be for a rebuild
    /// to wait for its acknowledgement.
    pub(super) fn liveness_ms(&self) -> u64 {
        (self.cfg.reconcile_every.as_millis() as u64)
            .saturating_mul(3)
            .max(1000)
    }

    /// Whether the last exchange with Redis succeeded.
    pub(super) fn connected(&self) -> bool {
        self.connected.load(Relaxed)
    }

    /// A new generation refused as too small: one published in Redis
    /// ([`generations`](super::generations), switched to with the serving keys carried over),
    /// or this instance's rebuild ([`rebuild`](super::rebuild), not switched in).
    pub(super) fn count_refused_switch(&self) {
        self.counters.refused_switches.fetch_add(1, Relaxed);
        #[cfg(feature = "metrics")]
        metrics::counter!(names::REFUSED_SWITCHES, "prefix" => self.prefix.clone()).increment(1);
    }

    pub(super) fn set_connected(&self, up: bool) {
        #[cfg(feature = "metrics")]
        metrics::gauge!(names::CONNECTED, "prefix" => self.prefix.clone()).set(if up {
            1.0
        } else {
            0.0
        });
        let was = self.connected.swap(up, Relaxed);
        if was && !up {
            // Whatever happened meanwhile (a restart, a failover, lost writes), the next pass
            // compares every segment.
            self.reconciliation.owe_full_pass();
            tracing::warn!(prefix = %self.prefix, "lost Redis: serving and inserting locally; bits set meanwhile are pushed on reconnection");
        } else if !was && up {
            tracing::info!(prefix = %self.prefix, "connected to Redis");
        }
    }
}

pub(super) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

pub(super) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

pub(super) fn random_id() -> u64 {
    let mut bytes = [0u8; 8];
    // A failing OS random source leaves a fixed id: instances then only ignore each other's
    // messages (reconciliation still converges); unlikely enough not to fail the join.
    let _ = getrandom::fill(&mut bytes);
    u64::from_le_bytes(bytes) | 1
}
