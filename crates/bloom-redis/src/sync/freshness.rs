//! Whether this instance's view may be missing inserts made elsewhere, and what a would-be
//! rejection does then.
//!
//! Every instance publishes heartbeats that follow everything it published (see
//! [`publisher`](super::publisher)). The view is **fresh** while, within `stale_after`, a
//! heartbeat was *sent* by every instance it knows — itself included, which proves that its
//! own publishing and its subscription both work — and nothing it must pull is outstanding
//! (after a resubscription, or an instance's resync epoch). A key inserted and published on
//! any of those instances before its last heartbeat is then in our filter. Otherwise the view
//! is **stale** and the [`StalePolicy`] decides: the cost is one clock read on the path of a
//! would-be rejection only.
//!
//! A heartbeat vouches for what its sender had published *into the Redis data it names*:
//! each carries the tag of the data its sender last reconciled with (the dataset's id and the
//! server process's, on a cluster every node's, with the server's eviction count under an
//! `allkeys-*` policy: [`tag_of`]), and counts only if that is the data this instance last
//! reconciled with. A Redis restarted from an old dump or empty, or one that evicted segments,
//! has lost bits its senders published before, which the instances that missed the messages (in
//! flight when Redis died) pull from it in vain; a heartbeat vouching for the earlier data must
//! not make them fresh without those keys. So every instance waits until each other one has
//! compared every segment with the new data (pushing what it lacked) and says so, then pulls
//! once more. Tests: `a_key_redis_lost_is_not_vouched_for_until_its_holder_pushed_it_again`
//! and `keys_redis_evicted_are_not_vouched_for_until_their_holder_pushed_them_again`
//! (`tests/fleet.rs`), and the cluster's in `tests/cluster.rs`.
//!
//! A heartbeat counts from when it was sent, not from its arrival: a link that hangs, then
//! delivers what it held, hands over heartbeats sent before inserts their sender could not
//! publish since, and counted from their arrival they would vouch for those inserts. Each
//! heartbeat carries its sender's clock; [`Transit`] turns it into ours. Test:
//! `a_heartbeat_the_network_held_back_does_not_make_a_view_fresh` (`tests/fleet.rs`).
//!
//! Joining is not staleness to an operator: until an instance's own first heartbeat comes
//! back (and while a pull it owes is under way) its view is not fresh, and the policy applies,
//! but the watcher logs it at DEBUG, and at WARN only if it lasts `stale_after`. Test:
//! `a_normal_join_logs_no_stale_warning` (`tests/logs.rs`).
//!
//! An instance is known from its first heartbeat until it says it is leaving, or until it
//! has been silent for `member_timeout` (presumed gone: killed, or cut off for good).

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

use super::inner::{Inner, lock};
#[cfg(feature = "metrics")]
use crate::names;
use crate::{RedisSyncBuilder, StalePolicy};

pub(super) struct Freshness {
    base: Instant,
    me: u64,
    prefix: String,
    policy: StalePolicy,
    stale_after: u64,
    /// The tag of the Redis data this instance last reconciled with ([`tag_of`]); 0: none
    /// yet. Our heartbeats carry it, and only the others' that carry it count.
    vouched: AtomicU64,
    member_timeout: u64,
    /// Milliseconds since `base` until which the view is fresh; 0: stale now.
    fresh_until: AtomicU64,
    view: Mutex<View>,
    let_through: AtomicU64,
    rejected: AtomicU64,
    /// The second (since `base`) the budget counts, and what it has let through in it.
    budget_second: AtomicU64,
    budget_used: AtomicU64,
}

#[derive(Default)]
struct View {
    members: HashMap<u64, Member>,
    subscribed: bool,
    /// Since when (ms) a pull is owed because of a (re)subscription.
    pull_owed_since: Option<u64>,
    publishing_failed: bool,
    /// Why the view is stale, from the last evaluation.
    stale: Option<Stale>,
    /// Since when (ms) the view has been stale, from the evaluations.
    stale_from: Option<u64>,
    /// The stale period the watcher is in.
    period: Option<Period>,
    periods: u64,
}

/// Why the view is stale.
struct Stale {
    reason: String,
    /// Whether it is the normal course of joining (until this instance's own first heartbeat
    /// comes back) or of a pull under way: logged at DEBUG, and at WARN only once it has
    /// lasted `stale_after`.
    expected: bool,
}

/// A stale period, as the watcher sees it.
struct Period {
    since: u64,
    /// Whether it was logged at WARN (then its end is logged at INFO).
    warned: bool,
    /// `let_through` when it began, for the summary logged when it ends.
    let_through_at_start: u64,
}

struct Member {
    /// When (ms, our clock) its newest heartbeat was sent.
    last_heartbeat: u64,
    epoch: u64,
    /// The Redis data its newest heartbeat vouches for (`None`: a sender that predates tags).
    tag: Option<u64>,
    /// Since when (ms) a pull is owed because this member pushed bits into Redis: it bumped
    /// its resync epoch, or vouched for new Redis data (or for the first time).
    pull_owed_since: Option<u64>,
    transit: Transit,
}

/// Half the window over which [`Transit`] keeps the fastest trip of a heartbeat.
const TRANSIT_WINDOW_HALF_MS: u64 = 15_000;

/// Maps a sender's clock onto ours: `arrival - sent` is the clocks' offset plus the trip, and
/// its minimum over the last 15 to 30 s of heartbeats is the offset plus the fastest trip.
/// A heartbeat is taken as sent at `sent + that minimum`: the moment it arrived if it was as
/// fast as the fastest, earlier by however long it was held. The window is two buckets,
/// rotated only when a heartbeat arrives, so the heartbeats from before a silence of any
/// length are the yardstick for those the silence held back; and short enough that two
/// clocks drifting apart (100 ppm: 3 ms over 30 s) do not matter.
struct Transit {
    /// Smallest `arrival - sent` (i128: any two u64 clocks) in each bucket.
    current: i128,
    previous: i128,
    current_since: u64,
}

impl Transit {
    fn new(now: u64) -> Self {
        Self {
            current: i128::MAX,
            previous: i128::MAX,
            current_since: now,
        }
    }

    /// When (our clock) a heartbeat stamped `sent` on its sender's clock, arriving `now`,
    /// was sent.
    fn sent_at(&mut self, sent: u64, now: u64) -> u64 {
        if now.saturating_sub(self.current_since) >= TRANSIT_WINDOW_HALF_MS {
            self.previous = self.current;
            self.current = i128::MAX;
            self.current_since = now;
        }
        let offset = i128::from(now) - i128::from(sent);
        self.current = self.current.min(offset);
        let fastest = self.current.min(self.previous);
        // `fastest <= offset`, so never later than `now`.
        (i128::from(sent) + fastest).clamp(0, i128::from(now)) as u64
    }
}

/// The view's state, for [`RedisSync::stats`](crate::RedisSync::stats).
pub(super) struct Report {
    pub(super) fresh: bool,
    pub(super) stale_for: Option<Duration>,
    pub(super) reason: Option<String>,
    pub(super) periods: u64,
    pub(super) let_through: u64,
    pub(super) rejected: u64,
    pub(super) instances: usize,
}

impl Freshness {
    pub(super) fn new(cfg: &RedisSyncBuilder, me: u64, prefix: &str) -> Self {
        Self {
            base: Instant::now(),
            me,
            prefix: prefix.to_owned(),
            policy: cfg.on_stale,
            stale_after: cfg.stale_after.as_millis() as u64,
            vouched: AtomicU64::new(0),
            member_timeout: cfg.member_timeout.as_millis() as u64,
            fresh_until: AtomicU64::new(0),
            view: Mutex::new(View::default()),
            let_through: AtomicU64::new(0),
            rejected: AtomicU64::new(0),
            budget_second: AtomicU64::new(0),
            budget_used: AtomicU64::new(0),
        }
    }

    /// Milliseconds since `base`, from 1: the clock our heartbeats carry.
    pub(super) fn now(&self) -> u64 {
        self.base.elapsed().as_millis() as u64 + 1
    }

    pub(super) fn is_fresh(&self) -> bool {
        self.now() <= self.fresh_until.load(Relaxed)
    }

    /// The rejection override: whether a key the filter would reject is let through.
    pub(super) fn let_through(&self) -> bool {
        if self.is_fresh() {
            return false;
        }
        let allowed = match self.policy {
            StalePolicy::LetThrough => true,
            StalePolicy::ServeLocal => false,
            StalePolicy::LetThroughUpTo { per_second } => {
                let second = self.now() / 1000;
                let counted = self.budget_second.load(Relaxed);
                if counted != second
                    && self
                        .budget_second
                        .compare_exchange(counted, second, Relaxed, Relaxed)
                        .is_ok()
                {
                    self.budget_used.store(0, Relaxed);
                }
                self.budget_used.fetch_add(1, Relaxed) < u64::from(per_second)
            }
        };
        if allowed {
            self.let_through.fetch_add(1, Relaxed);
            #[cfg(feature = "metrics")]
            metrics::counter!(names::STALE_LET_THROUGH, "prefix" => self.prefix.clone())
                .increment(1);
        } else {
            self.rejected.fetch_add(1, Relaxed);
            #[cfg(feature = "metrics")]
            metrics::counter!(names::STALE_REJECTED, "prefix" => self.prefix.clone()).increment(1);
        }
        allowed
    }

    /// This instance finished a pass against the Redis data `incarnation` names, in which
    /// (the first against it compares every segment) every bit held here went into it.
    pub(super) fn reconciled_with(&self, incarnation: &str) {
        let tag = tag_of(incarnation);
        if self.vouched.swap(tag, Relaxed) != tag {
            let now = self.now();
            self.evaluate(&mut lock(&self.view), now);
        }
    }

    /// The tag our heartbeats carry.
    pub(super) fn vouched(&self) -> u64 {
        self.vouched.load(Relaxed)
    }

    /// A heartbeat from `sender` (ourselves included), stamped `sent` on its clock and
    /// vouching for the Redis data tagged `tag` (each `None` from a sender that predates it:
    /// counted from its arrival, trusted on any data). `true` if it asks for a pull (its
    /// resync epoch or its tag moved): the caller wakes the reconciler.
    pub(super) fn heartbeat(
        &self,
        sender: u64,
        epoch: u64,
        sent: Option<u64>,
        tag: Option<u64>,
    ) -> bool {
        let now = self.now();
        let mut view = lock(&self.view);
        let mut pull = false;
        let member = view.members.entry(sender).or_insert_with(|| {
            tracing::debug!(prefix = %self.prefix, instance = format_args!("{sender:016x}"), "heard from a new instance");
            Member {
                last_heartbeat: 0,
                epoch,
                tag: None,
                pull_owed_since: None,
                transit: Transit::new(now),
            }
        });
        let sent_at = sent.map_or(now, |sent| member.transit.sent_at(sent, now));
        member.last_heartbeat = member.last_heartbeat.max(sent_at);
        if epoch > member.epoch {
            member.epoch = epoch;
            member.pull_owed_since = Some(now);
            pull = true;
        }
        if tag.is_some() && tag != member.tag {
            member.tag = tag;
            // It compared every segment with that data and pushed what the data lacked:
            // pull after it did. Also when first heard: whether it pushed before or after
            // our last pass is unknown.
            if sender != self.me {
                member.pull_owed_since = Some(now);
                pull = true;
            }
        }
        self.evaluate(&mut view, now);
        pull
    }

    /// `sender` left cleanly: stop waiting for it.
    pub(super) fn leaving(&self, sender: u64) {
        let now = self.now();
        let mut view = lock(&self.view);
        if view.members.remove(&sender).is_some() {
            tracing::info!(prefix = %self.prefix, instance = format_args!("{sender:016x}"), "an instance left");
        }
        self.evaluate(&mut view, now);
    }

    /// The subscription is (re)established: messages sent while it was down are lost, so a
    /// pull that starts from now on is owed.
    pub(super) fn subscribed(&self) {
        let now = self.now();
        let mut view = lock(&self.view);
        view.subscribed = true;
        view.pull_owed_since = Some(now);
        self.evaluate(&mut view, now);
    }

    pub(super) fn unsubscribed(&self) {
        let now = self.now();
        let mut view = lock(&self.view);
        view.subscribed = false;
        self.evaluate(&mut view, now);
    }

    /// Whether our own last publish succeeded.
    pub(super) fn publishing(&self, ok: bool) {
        let now = self.now();
        let mut view = lock(&self.view);
        if view.publishing_failed == ok {
            view.publishing_failed = !ok;
            self.evaluate(&mut view, now);
        }
    }

    /// The time a pull begins, to pass to [`pulled`](Self::pulled) once it succeeded.
    pub(super) fn pull_started(&self) -> u64 {
        self.now()
    }

    /// A pass that began at `started` succeeded (it pulled every segment that moved, and a
    /// full pass every one that differed): what was owed before it is paid.
    pub(super) fn pulled(&self, started: u64) {
        let now = self.now();
        let mut view = lock(&self.view);
        if view.pull_owed_since.is_some_and(|since| since <= started) {
            view.pull_owed_since = None;
        }
        for member in view.members.values_mut() {
            if member.pull_owed_since.is_some_and(|since| since <= started) {
                member.pull_owed_since = None;
            }
        }
        self.evaluate(&mut view, now);
    }

    /// Recomputes `fresh_until`, the reason and since when the view is stale.
    fn evaluate(&self, view: &mut View, now: u64) {
        let (until, stale) = self.judge(view, now);
        self.fresh_until.store(until, Relaxed);
        if now <= until {
            view.stale_from = None;
        } else {
            // Stale since a heartbeat's deadline passed, or since this event.
            view.stale_from
                .get_or_insert(if until == 0 { now } else { until });
        }
        view.stale = stale;
    }

    fn judge(&self, view: &View, now: u64) -> (u64, Option<Stale>) {
        // Joining: its own first heartbeat has not come back yet (it never leaves the members
        // once heard).
        let joining = !view.members.contains_key(&self.me);
        let stale = |reason: String, pulling: bool| {
            Some(Stale {
                reason,
                expected: joining || pulling,
            })
        };
        if !view.subscribed {
            return (0, stale("not subscribed to the channel".into(), false));
        }
        if view.pull_owed_since.is_some() {
            return (
                0,
                stale("pulling what was published while unsubscribed".into(), true),
            );
        }
        if view.publishing_failed {
            return (
                0,
                stale("its own inserts cannot be published".into(), false),
            );
        }
        if joining {
            return (
                0,
                stale(
                    "joining: its own first heartbeat has not come back yet".into(),
                    false,
                ),
            );
        }
        let vouched = self.vouched.load(Relaxed);
        let mut until = u64::MAX;
        let mut reason = None;
        for (&id, member) in &view.members {
            if member.tag.is_some_and(|tag| tag != vouched) {
                let reason = if id == self.me {
                    "its heartbeats since it reconciled with Redis's current data have not come \
                     back"
                        .to_owned()
                } else {
                    format!(
                        "instance {id:016x} has not reconciled with the Redis data this instance \
                         last saw (Redis restarted, was restored or evicted keys)"
                    )
                };
                return (0, stale(reason, false));
            }
            if member.pull_owed_since.is_some() {
                let reason = format!(
                    "pulling the bits instance {id:016x} pushed into Redis instead of publishing \
                     them"
                );
                return (0, stale(reason, true));
            }
            let deadline = member.last_heartbeat + self.stale_after;
            if deadline < until {
                until = deadline;
                if deadline < now {
                    reason = stale(
                        if id == self.me {
                            format!(
                                "its own heartbeats have not come back for {} ms",
                                now - member.last_heartbeat
                            )
                        } else {
                            format!(
                                "no heartbeat from instance {id:016x} for {} ms",
                                now - member.last_heartbeat
                            )
                        },
                        false,
                    );
                }
            }
        }
        (until, reason)
    }

    /// Forgets instances silent for `member_timeout`, and logs and reports the transitions
    /// between fresh and stale. Called every heartbeat.
    ///
    /// A stale period that is the normal course of joining (until its own first heartbeat
    /// comes back) or of a pull under way is logged at DEBUG, and at WARN only once it has
    /// lasted `stale_after`; any other at WARN when it begins, and its end at INFO. The
    /// policy, the `stale` gauge and the counters do not tell them apart: while the view is
    /// not fresh, would-be rejections go to the policy however normal the cause.
    fn watch(&self) {
        let now = self.now();
        let mut guard = lock(&self.view);
        let view = &mut *guard;
        let me = self.me;
        let timeout = self.member_timeout;
        let prefix = &self.prefix;
        view.members.retain(|&id, member| {
            let gone = id != me && now.saturating_sub(member.last_heartbeat) > timeout;
            if gone {
                tracing::warn!(prefix = %prefix, instance = format_args!("{id:016x}"), silent_ms = now - member.last_heartbeat, "an instance has been silent for member_timeout: presumed gone, no longer waited for");
            }
            !gone
        });
        self.evaluate(view, now);
        let fresh = now <= self.fresh_until.load(Relaxed);
        let let_through = self.let_through.load(Relaxed);
        if fresh {
            if let Some(period) = view.period.take() {
                let stale_ms = now - period.since;
                let let_through = let_through - period.let_through_at_start;
                if period.warned {
                    tracing::info!(prefix = %self.prefix, stale_ms, let_through, "the view of the shared filter is fresh again");
                } else {
                    tracing::debug!(prefix = %self.prefix, stale_ms, let_through, "the view of the shared filter is fresh");
                }
            }
        } else {
            let reason = view
                .stale
                .as_ref()
                .map_or("", |stale| stale.reason.as_str());
            let expected = view.stale.as_ref().is_some_and(|stale| stale.expected);
            let period = view.period.get_or_insert_with(|| {
                view.periods += 1;
                if expected {
                    tracing::debug!(prefix = %self.prefix, reason, "the view of the shared filter is not fresh yet (joining, or a pull under way)");
                }
                Period {
                    since: view.stale_from.unwrap_or(now).min(now),
                    warned: false,
                    let_through_at_start: let_through,
                }
            });
            let stale_ms = now - period.since;
            if !period.warned && (!expected || stale_ms > self.stale_after) {
                period.warned = true;
                tracing::warn!(prefix = %self.prefix, reason, stale_ms, policy = ?self.policy, "the view of the shared filter is stale: it may miss keys created on other instances");
            }
        }
        #[cfg(feature = "metrics")]
        {
            // 1 while the view is not fresh, joining included: the policy applies then.
            metrics::gauge!(names::STALE, "prefix" => self.prefix.clone()).set(if fresh {
                0.0
            } else {
                1.0
            });
            metrics::gauge!(names::INSTANCES, "prefix" => self.prefix.clone())
                .set(view.members.len() as f64);
        }
    }

    pub(super) fn report(&self) -> Report {
        let now = self.now();
        let view = lock(&self.view);
        let fresh = now <= self.fresh_until.load(Relaxed);
        let (until, stale) = self.judge(&view, now);
        let stale_for = (!fresh).then(|| {
            let since = view
                .stale_from
                .unwrap_or(if until == 0 { now } else { until.min(now) });
            Duration::from_millis(now.saturating_sub(since))
        });
        Report {
            fresh,
            stale_for,
            reason: if fresh {
                None
            } else {
                stale.map(|stale| stale.reason)
            },
            periods: view.periods,
            let_through: self.let_through.load(Relaxed),
            rejected: self.rejected.load(Relaxed),
            instances: view.members.len(),
        }
    }
}

/// The tag of the Redis data named by `incarnation` (the dataset's id and the server
/// process's): FNV-1a, so that every build of every version computes the same one. Never 0.
pub(super) fn tag_of(incarnation: &str) -> u64 {
    let hash = incarnation
        .bytes()
        .fold(0xcbf2_9ce4_8422_2325_u64, |hash, byte| {
            (hash ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3)
        });
    hash | 1
}

impl Inner {
    /// Every heartbeat: forget silent instances, report transitions.
    pub(super) async fn watch_freshness(self: std::sync::Arc<Self>) {
        loop {
            tokio::time::sleep(self.cfg.heartbeat).await;
            self.freshness.watch();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::{Freshness, TRANSIT_WINDOW_HALF_MS, Transit, lock, tag_of};
    use crate::RedisSyncBuilder;

    const ME: u64 = 0xa1;
    const OTHER: u64 = 0xb1;

    /// An instance subscribed, reconciled with `data`, whose own heartbeat came back.
    fn reconciled(data: &str) -> Freshness {
        let freshness = Freshness::new(&RedisSyncBuilder::new("redis://127.0.0.1:1"), ME, "t");
        freshness.subscribed();
        freshness.reconciled_with(data);
        freshness.pulled(freshness.pull_started());
        freshness.heartbeat(ME, 0, Some(freshness.now()), Some(tag_of(data)));
        freshness
    }

    /// A heartbeat from `sender`, sent now, vouching for `data`: whether it asked for a pull.
    fn beat(freshness: &Freshness, sender: u64, data: &str) -> bool {
        freshness.heartbeat(sender, 0, Some(freshness.now()), Some(tag_of(data)))
    }

    fn pull(freshness: &Freshness) {
        freshness.pulled(freshness.pull_started());
    }

    /// A heartbeat from `sender` vouching for `data` asks for a pull; the view is stale until
    /// the pull is done, then fresh.
    fn heard_then_pulled(freshness: &Freshness, sender: u64, data: &str) {
        assert!(beat(freshness, sender, data), "a pull is asked for");
        assert!(!freshness.is_fresh());
        pull(freshness);
        assert!(freshness.is_fresh());
    }

    #[test]
    fn an_instance_first_heard_is_pulled_from_before_the_view_is_fresh() {
        let freshness = reconciled("dataset/run-1");
        assert!(freshness.is_fresh());
        heard_then_pulled(&freshness, OTHER, "dataset/run-1");
        assert!(!beat(&freshness, OTHER, "dataset/run-1"), "once only");
        assert!(freshness.is_fresh());
    }

    #[test]
    fn after_redis_restarted_only_heartbeats_vouching_for_the_new_data_count() {
        let freshness = reconciled("dataset/run-1");
        beat(&freshness, OTHER, "dataset/run-1");
        pull(&freshness);
        assert!(freshness.is_fresh());

        // Redis restarted (from a dump holding the same dataset id): our pass compared every
        // segment with it.
        freshness.reconciled_with("dataset/run-2");
        assert!(
            !freshness.is_fresh(),
            "our own heartbeat vouches for the old data"
        );
        beat(&freshness, ME, "dataset/run-2");
        // The other instance's heartbeats, sent before it reconciled with the new data, do
        // not make the view fresh however recent they are.
        assert!(!beat(&freshness, OTHER, "dataset/run-1"));
        let report = freshness.report();
        assert!(!report.fresh);
        assert!(
            report
                .reason
                .unwrap_or_default()
                .contains("has not reconciled"),
            "{:?}",
            freshness.report().reason
        );
        // It reconciled (and pushed what the new data lacked): pull after it, then fresh.
        heard_then_pulled(&freshness, OTHER, "dataset/run-2");
    }

    #[test]
    fn a_sender_without_tags_is_trusted_on_any_data() {
        let freshness = reconciled("dataset/run-1");
        assert!(!freshness.heartbeat(OTHER, 0, Some(freshness.now()), None));
        assert!(freshness.is_fresh());
        freshness.reconciled_with("dataset/run-2");
        beat(&freshness, ME, "dataset/run-2");
        freshness.heartbeat(OTHER, 0, Some(freshness.now()), None);
        assert!(freshness.is_fresh());
    }

    #[test]
    fn the_tag_names_the_dataset_and_the_server_process() {
        assert_ne!(tag_of("dataset/run-1"), tag_of("dataset/run-2"));
        assert_ne!(tag_of("dataset/run-1"), tag_of("other/run-1"));
        // Every build computes the same tag (FNV-1a of the bytes, low bit set).
        assert_eq!(tag_of(""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(tag_of("a"), 0xaf63_dc4c_8601_ec8d);
    }

    /// The sender's clock runs 5 s behind ours; the fastest trip is 2 ms.
    const BEHIND: u64 = 5_000;

    #[test]
    fn a_heartbeat_as_fast_as_the_fastest_counts_from_its_arrival() {
        let mut transit = Transit::new(10_000);
        for sent in (5_000..5_100).step_by(10) {
            assert_eq!(transit.sent_at(sent, sent + BEHIND + 2), sent + BEHIND + 2);
        }
        // A slower one counts from when it was sent, give or take the fastest trip.
        assert_eq!(
            transit.sent_at(5_200, 5_200 + BEHIND + 30),
            5_200 + BEHIND + 2
        );
    }

    #[test]
    fn a_held_heartbeat_counts_from_when_it_was_sent_after_any_silence() {
        let mut transit = Transit::new(10_000);
        transit.sent_at(5_000, 5_000 + BEHIND + 2);
        // Silent for four windows, then what the link held arrives, oldest first.
        let arrival = 5_000 + BEHIND + 8 * TRANSIT_WINDOW_HALF_MS;
        for held in [5_050, 5_100, 5_150] {
            assert_eq!(transit.sent_at(held, arrival), held + BEHIND + 2);
        }
        // Then heartbeats sent after the silence: at their arrival again.
        let sent = arrival - BEHIND + 1;
        assert_eq!(transit.sent_at(sent, sent + BEHIND + 2), sent + BEHIND + 2);
    }

    #[test]
    fn clocks_drifting_apart_are_followed_within_a_window() {
        // The sender's clock loses 1 ms every second (10× worse than a bad crystal).
        let mut transit = Transit::new(0);
        let mut late_by_most = 0;
        for second in 0..600u64 {
            let ours = 100_000 + second * 1_000;
            let sent = ours - BEHIND - second;
            let counted = transit.sent_at(sent, ours + 2);
            late_by_most = late_by_most.max(ours + 2 - counted);
        }
        // Never more than the drift over a window (30 s: 30 ms) behind its arrival.
        assert!(
            late_by_most <= 2 * TRANSIT_WINDOW_HALF_MS / 1_000,
            "{late_by_most}"
        );
    }

    #[test]
    fn a_first_heartbeat_counts_from_its_arrival_and_none_after_it() {
        // Whatever the sender's clock reads (here far ahead of ours).
        let mut transit = Transit::new(0);
        assert_eq!(transit.sent_at(u64::MAX / 2, 7), 7);
        // A faster trip than the first one's sets the new yardstick: counted at arrival.
        assert_eq!(transit.sent_at(u64::MAX / 2 + 10, 12), 12);
    }

    /// The stale bound of [`joining`]'s instances.
    const STALE_AFTER: Duration = Duration::from_millis(60);

    /// An instance that joined: subscribed, reconciled with `data` and pulled, its own first
    /// heartbeat not back yet; stale after [`STALE_AFTER`].
    fn joining(data: &str) -> Freshness {
        let cfg = RedisSyncBuilder::new("redis://127.0.0.1:1")
            .heartbeat(Duration::from_millis(5))
            .stale_after(STALE_AFTER);
        let freshness = Freshness::new(&cfg, ME, "t");
        freshness.subscribed();
        freshness.reconciled_with(data);
        pull(&freshness);
        freshness
    }

    /// Whether the watcher logged the stale period it is in at WARN (`None`: fresh).
    fn warned(freshness: &Freshness) -> Option<bool> {
        freshness.watch();
        lock(&freshness.view).period.as_ref().map(|p| p.warned)
    }

    #[test]
    fn joining_is_warned_about_only_once_it_lasts_stale_after() {
        let freshness = joining("dataset/run-1");
        assert_eq!(
            warned(&freshness),
            Some(false),
            "joining: not fresh, no warning"
        );
        let report = freshness.report();
        assert!(!report.fresh && report.stale_for.is_some());
        assert!(report.reason.unwrap_or_default().contains("joining"));
        std::thread::sleep(STALE_AFTER + Duration::from_millis(20));
        assert_eq!(
            warned(&freshness),
            Some(true),
            "still joining after stale_after"
        );
        beat(&freshness, ME, "dataset/run-1");
        assert_eq!(warned(&freshness), None);
        assert!(freshness.is_fresh());
        assert_eq!(freshness.report().periods, 1);
    }

    #[test]
    fn a_pull_under_way_is_not_warned_about_and_silence_is_at_once() {
        let freshness = joining("dataset/run-1");
        beat(&freshness, ME, "dataset/run-1");
        assert_eq!(warned(&freshness), None, "its first heartbeat came back");
        // A newcomer is heard: pull from it first.
        assert!(beat(&freshness, OTHER, "dataset/run-1"));
        assert_eq!(warned(&freshness), Some(false), "a pull under way");
        pull(&freshness);
        assert_eq!(warned(&freshness), None);
        // Then every heartbeat stops: stale once `stale_after` has passed, and warned at once.
        std::thread::sleep(STALE_AFTER + Duration::from_millis(20));
        assert_eq!(warned(&freshness), Some(true));
        let reason = freshness.report().reason.unwrap_or_default();
        assert!(
            reason.contains("no heartbeat from") || reason.contains("have not come back for"),
            "{reason}"
        );
    }
}
