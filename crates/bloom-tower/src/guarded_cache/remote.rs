//! Forgetting cached "not found" answers by key digest, for
//! [`SharedFilter::forget_remote`](crate::SharedFilter::forget_remote).
//!
//! The cache cannot map a digest back to its keys without an index of its negative entries,
//! kept in step with every insert, eviction and expiry moka makes (which would take an
//! eviction listener), while a forget must take effect at once. So it is done the other way
//! round: every forget is numbered (an epoch) and remembered per digest; every negative entry
//! carries the epoch its load began at; a negative entry whose key's digest was forgotten
//! after that epoch is stale, and a lookup treats it as a miss (the load that follows
//! overwrites it). A load that was in flight during a forget of its key does not cache its
//! "not found" at all.
//!
//! A forget only matters to negative entries created before it, which live `negative_ttl`,
//! so it is remembered for that long plus [`MARGIN`]. A load that ends later than that after
//! it began may have missed a forget already pruned: if any forget happened meanwhile, its
//! "not found" is not cached.
//!
//! **Bounded.** At most [`MAX_REMEMBERED`] digests are remembered: a flood of forgets (a
//! client that can publish on the fleet's channel can send any number) never grows the map
//! past it. A forget that finds it full forgets *everything* instead: every negative entry
//! made by a load that began before it is stale (a miss, never a wrong "not found"). Test:
//! `a_flood_of_forgets_stays_bounded_and_forgets_everything_before_it`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// Added to `negative_ttl`: covers the time between a load's last check and its entry's
/// insertion (the expiry counts from the insertion).
const MARGIN: Duration = Duration::from_secs(5);

/// The most digests remembered at once (about 2 MiB).
const MAX_REMEMBERED: usize = 1 << 16;

pub(super) struct RemoteForgets {
    /// The number of the latest forget; 0 before any.
    epoch: AtomicU64,
    forgotten: Mutex<Forgotten>,
    /// How long a forget is remembered.
    retention: Duration,
}

struct Forgotten {
    /// Digest → the epoch and time of its latest forget.
    by_digest: HashMap<u64, (u64, Instant)>,
    /// The epoch of the latest forget of everything (the map was full); 0: none.
    everything: u64,
    last_pruned: Instant,
}

impl RemoteForgets {
    pub(super) fn new(negative_ttl: Duration) -> Self {
        Self {
            epoch: AtomicU64::new(0),
            forgotten: Mutex::new(Forgotten {
                by_digest: HashMap::new(),
                everything: 0,
                last_pruned: Instant::now(),
            }),
            retention: negative_ttl.saturating_add(MARGIN),
        }
    }

    /// The current epoch: what a load records when it begins.
    pub(super) fn epoch(&self) -> u64 {
        self.epoch.load(SeqCst)
    }

    /// Forgets every negative entry for `digest` made by a load that began before now.
    pub(super) fn forget(&self, digest: u64) {
        let mut forgotten = self.lock();
        // Bumped under the lock: a reader that sees the new epoch and takes the lock finds
        // the digest.
        let epoch = self.epoch.fetch_add(1, SeqCst) + 1;
        let now = Instant::now();
        // At most once per retention period, so the cost per forget stays constant.
        if now.duration_since(forgotten.last_pruned) >= self.retention {
            let retention = self.retention;
            forgotten
                .by_digest
                .retain(|_, (_, at)| now.duration_since(*at) < retention);
            forgotten.last_pruned = now;
        }
        if forgotten.by_digest.len() >= MAX_REMEMBERED && !forgotten.by_digest.contains_key(&digest)
        {
            // Full: forget everything made before now (the rule in the module docs).
            forgotten.by_digest.clear();
            forgotten.everything = epoch;
            return;
        }
        forgotten.by_digest.insert(digest, (epoch, now));
    }

    /// Whether a negative entry whose load began at `since` is stale: its key's digest
    /// (computed only if a forget happened since) was forgotten after `since`.
    pub(super) fn is_stale(&self, since: u64, digest: impl FnOnce() -> u64) -> bool {
        // The common case, and the cheap one: nothing was forgotten since.
        if self.epoch() == since {
            return false;
        }
        let digest = digest();
        let forgotten = self.lock();
        forgotten.everything > since
            || forgotten
                .by_digest
                .get(&digest)
                .is_some_and(|&(epoch, _)| epoch > since)
    }

    /// Whether a load that began at `since`, `began` ago, may cache its "not found".
    pub(super) fn may_cache_absent(
        &self,
        since: u64,
        began: Instant,
        digest: impl FnOnce() -> u64,
    ) -> bool {
        if self.epoch() == since {
            return true;
        }
        // Forgets made since it began may be pruned already: be safe.
        began.elapsed() < self.retention && !self.is_stale(since, digest)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Forgotten> {
        self.forgotten
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_forgotten_digest_after_the_load_began_is_stale() {
        let remote = RemoteForgets::new(Duration::from_secs(30));
        let before = remote.epoch();
        remote.forget(1);
        let after = remote.epoch();
        assert!(remote.is_stale(before, || 1));
        assert!(!remote.is_stale(before, || 2));
        assert!(!remote.is_stale(after, || 1));
        let began = Instant::now();
        assert!(!remote.may_cache_absent(before, began, || 1));
        assert!(remote.may_cache_absent(before, began, || 2));
    }

    #[test]
    fn old_forgets_are_pruned() {
        let remote = RemoteForgets::new(Duration::ZERO);
        remote.forget(1);
        {
            let mut forgotten = remote.lock();
            forgotten.last_pruned -= MARGIN;
            forgotten.by_digest.get_mut(&1).unwrap().1 -= MARGIN;
        }
        remote.forget(2);
        let forgotten = remote.lock();
        assert_eq!(forgotten.by_digest.keys().collect::<Vec<_>>(), [&2]);
    }

    #[test]
    fn a_flood_of_forgets_stays_bounded_and_forgets_everything_before_it() {
        // Forgets within one retention period: nothing can be pruned.
        let remote = RemoteForgets::new(Duration::from_secs(3600));
        let before = remote.epoch();
        for digest in 0..(MAX_REMEMBERED as u64 * 3 + 7) {
            remote.forget(digest);
            assert!(remote.lock().by_digest.len() <= MAX_REMEMBERED);
        }
        // Every digest forgotten after `before` is stale for a load that began then, the
        // ones dropped from the full map included, and any other digest too (safe).
        for digest in [
            0,
            1,
            MAX_REMEMBERED as u64,
            MAX_REMEMBERED as u64 * 3 + 6,
            u64::MAX,
        ] {
            assert!(remote.is_stale(before, || digest), "{digest}");
        }
        // A load that began after the flood is not made stale by it.
        let after = remote.epoch();
        assert!(!remote.is_stale(after, || 0));
        remote.forget(u64::MAX - 1);
        assert!(!remote.is_stale(after, || 0));
        assert!(remote.is_stale(after, || u64::MAX - 1));
    }
}
