//! Whether this instance's view may be missing inserts made elsewhere, and what a would-be
//! rejection does then.
//!
//! **Marks.** Every instance runs a *mark round* (the `mark` script, [`scripts::mark`]) at
//! the end of every publish, and every `heartbeat` when idle. When every insert it made
//! before its claim was published, the round sets its *mark* in the ZSET `{p}:marks` to
//! that claim in Redis's clock: the smaller of Redis's `TIME` now and the instance's own
//! bound on Redis's time when it sent the round (Redis's time in its last reply plus the
//! local time elapsed since that reply arrived: never later than the truth, whatever the
//! network held back). The same round reads Redis's time `now`, the oldest mark in the fleet
//! and the roster's version, then publishes a *ping* on the instance's own channel, last.
//!
//! **Why a returned ping proves the view covers the oldest mark.** Redis runs a script
//! atomically and delivers what it publishes to each subscriber connection in the order it
//! ran the commands. Every mark the round read was set before the round ran, by a round that
//! came after its instance's bit messages in one pipeline on one connection; so every insert
//! its instance made before its mark was published before the round ran, and reaches our
//! subscription before our ping. When the ping is back, the view holds every insert any
//! member made before the oldest mark `m`. An insert acknowledged by `propagated` was
//! published; if its instance is cut off before publishing, its marks stop. So the view is
//! fresh until `sent + stale_after - (now - m)` on our clock (`sent`: when the round was
//! sent, no later than when it ran): then every member marked within `stale_after` of Redis's
//! time at that moment, as the heartbeats of every member within `stale_after` did before.
//! No two machines' clocks are compared: Redis's clock is read in the script, ours only
//! measures elapsed time. Tests: `a_member_that_stops_marking_makes_the_others_stale`,
//! `a_round_whose_ping_is_not_back_does_not_make_a_view_fresh` (below),
//! `a_heartbeat_the_network_held_back_does_not_make_a_view_fresh` (`tests/fleet.rs`).
//!
//! **Cost.** A round is one script call and one ping to the instance itself: nothing an
//! instance sends or receives grows with the fleet, and Redis's work per instance is a few
//! O(log N) sorted-set steps (`benches/fleet_idle.rs`, `tests/fleet_scale.rs`).
//!
//! **The roster.** What each member announces (its resync epoch and the tag of the Redis data
//! it last reconciled with) is in the HASH `{p}:roster`, and a change (a join, a new epoch, a
//! new tag; a member leaving or expiring) bumps `{p}:roster:v` and is published once, as a
//! [`Kind::Member`](crate::protocol::Kind::Member) or
//! [`Kind::Leaving`](crate::protocol::Kind::Leaving) message carrying the new version. A
//! round's reply names the version at the time it ran, and every change up to it reached us
//! before the ping: a version we have not heard (or a smaller one: Redis lost its data) means
//! a change was missed, and the roster is read whole, once. A member silent for
//! `member_timeout` is removed by whichever round finds it so (presumed gone: killed, or cut
//! off for good), announced on its behalf.
//!
//! **What else keeps a view stale.** Not subscribed; a pull owed after a (re)subscription, or
//! because a member announced a new epoch, or a new tag or its join reached by a pass that
//! pushed bits into Redis (whether before or after our last pass is unknown; a join that
//! pushed nothing is not waited for); our own inserts not publishable; a member
//! vouching for other Redis data than we last reconciled with. A tag names the data a member
//! vouches for ([`tag_of`]: the dataset's id and the server process's, on a cluster every
//! node's, with the eviction count under an `allkeys-*` policy): a Redis restarted from an
//! old dump or empty, or one that evicted segments, lost bits its senders published before,
//! and no member's mark may make a view fresh without them until it compared every segment
//! with the new data (pushing what it lacked) and says so. Tests:
//! `a_key_redis_lost_is_not_vouched_for_until_its_holder_pushed_it_again` and
//! `keys_redis_evicted_are_not_vouched_for_until_their_holder_pushed_them_again`
//! (`tests/fleet.rs`), and the cluster's in `tests/cluster.rs`. Then the [`StalePolicy`]
//! decides: the cost is one clock read on the path of a would-be rejection only.
//!
//! **With a follower** (R5, R6 in `docs/REDIS-SYNC.md`): the round also reads the follower's
//! covered time (every row committed before it is in Redis and published) and the members
//! silent for `stale_after`; a view is then fresh only while the covered time is within the
//! follow bound, and neither the marks nor a silent member's tag hold it stale: what a silent
//! member can still owe is a committed row, which the follower brings. Tests:
//! `with_a_follower_a_view_is_stale_once_the_source_was_not_read_within_the_bound`,
//! `with_a_follower_a_silent_member_holds_no_view_stale`.
//!
//! **Confirmations** (`sync/confirm.rs`): a would-be rejection waits for a ping sent after it
//! began ([`ping_back_after`](Freshness::ping_back_after)); a ping counts only with the nonce
//! it was sent with (`a_ping_without_its_nonce_is_ignored`), and one overdue makes the view
//! stale until a ping comes back.
//!
//! Joining is not staleness to an operator: until an instance's first round is back (and
//! while a pull it owes is under way) its view is not fresh, and the policy applies, but the
//! watcher logs it at DEBUG, and at WARN only if it lasts `stale_after`. Test:
//! `a_normal_join_logs_no_stale_warning` (`tests/logs.rs`).

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::sync::atomic::{
    AtomicU64,
    Ordering::{Relaxed, SeqCst},
};
use std::time::{Duration, Instant};

use super::inner::{Inner, lock};
#[cfg(feature = "metrics")]
use crate::names;
#[cfg(doc)]
use crate::scripts;
use crate::{RedisSyncBuilder, StalePolicy};

pub(super) struct Freshness {
    base: Instant,
    me: u64,
    prefix: String,
    policy: StalePolicy,
    stale_after: u64,
    /// The tag of the Redis data this instance last reconciled with ([`tag_of`]); 0: none
    /// yet. Its roster entry carries it, and only members that carry it count.
    vouched: AtomicU64,
    /// Whether the pass that made it vouch for `vouched` pushed bits into Redis: its
    /// announcement asks the others to pull only then.
    pushed: std::sync::atomic::AtomicBool,
    /// Milliseconds since `base` until which the view is fresh; 0: stale now.
    fresh_until: AtomicU64,
    view: Mutex<View>,
    /// The sequence number the next round (a mark round or a confirming ping) takes: a
    /// round numbered at least what this read was sent after the read.
    next_round: AtomicU64,
    /// The nonces of the pings in flight, oldest first: a ping that matches none is
    /// ignored (R4 in `docs/REDIS-SYNC.md`).
    nonces: Mutex<VecDeque<(u64, u64)>>,
    /// The highest sequence number whose ping came back (with its nonce).
    pings_back: tokio::sync::watch::Sender<u64>,
    /// The newest sequence number a waiting rejection needs a ping of: the confirmer sends
    /// one unless a round numbered at least this was sent.
    pub(super) wanted: AtomicU64,
    /// Woken when a rejection wants a ping.
    pub(super) confirm_wake: tokio::sync::Notify,
    /// Non-zero while a ping that a rejection waited for is overdue (not back within
    /// `confirm_timeout`): its sequence number. The view is stale until a ping numbered at
    /// least this comes back.
    overdue: AtomicU64,
    confirm_timeout: Duration,
    /// Woken when a change of the roster was missed: the watcher reads it at once.
    roster_wanted: tokio::sync::Notify,
    let_through: AtomicU64,
    rejected: AtomicU64,
    /// The second (since `base`) the budget counts, and what it has let through in it.
    budget_second: AtomicU64,
    budget_used: AtomicU64,
}

#[derive(Default)]
struct View {
    /// The roster as this instance knows it.
    members: HashMap<u64, Member>,
    /// The roster version `members` reflects.
    roster_version: u64,
    /// A change of the roster was missed: it is to be read whole.
    roster_missed: bool,
    subscribed: bool,
    /// Since when (ms) a pull is owed because of a (re)subscription.
    pull_owed_since: Option<u64>,
    publishing_failed: bool,
    /// Rounds sent whose reply or ping is not back yet, oldest first.
    rounds: VecDeque<Round>,
    /// What the newest round that came back found.
    last: Option<Completed>,
    rounds_back: u64,
    roster_reads: u64,
    /// Why the view is stale, from the last evaluation.
    stale: Option<Stale>,
    /// Since when (ms) the view has been stale, from the evaluations.
    stale_from: Option<u64>,
    /// The stale period the watcher is in.
    period: Option<Period>,
    periods: u64,
}

/// A mark round in flight.
struct Round {
    seq: u64,
    /// When it was sent (ms, our clock).
    sent: u64,
    reply: Option<RoundReply>,
    ping_back: bool,
}

/// What a mark round read in Redis ([`scripts::mark`]'s reply).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct RoundReply {
    /// Redis's time when the round ran (ms since the Unix epoch).
    pub(super) now: u64,
    /// The oldest mark then, and whose it is.
    pub(super) oldest: u64,
    pub(super) oldest_member: u64,
    /// How many marks there were.
    pub(super) marks: u64,
    pub(super) roster_version: u64,
    /// While the fleet follows a source: the follower's covered time (ms, Redis's clock: every
    /// row committed before it is in Redis and published) and the follow bound (ms).
    pub(super) covered: Option<(u64, u64)>,
    /// The members whose mark was older than `stale_after` (at most 64): silent.
    pub(super) silent: Vec<u64>,
}

impl redis::FromRedisValue for RoundReply {
    fn from_redis_value(v: &redis::Value) -> redis::RedisResult<Self> {
        let invalid =
            |what: &'static str| redis::RedisError::from((redis::ErrorKind::TypeError, what));
        let mut fields: Vec<String> = redis::FromRedisValue::from_redis_value(v)?;
        if fields.len() < 6 {
            return Err(invalid("a mark round replied with fewer than 6 fields"));
        }
        let rest = fields.split_off(6);
        let number = |text: &str| {
            text.parse::<u64>()
                .map_err(|_| invalid("a mark round replied with a field that is not a number"))
        };
        let instance = |text: &str| {
            u64::from_str_radix(text, 16)
                .map_err(|_| invalid("a mark round named an instance that is not 16 hex digits"))
        };
        let covered = match fields[5].split_once(' ') {
            Some((at, bound)) => Some((number(at)?, number(bound)?)),
            None => None,
        };
        Ok(Self {
            now: number(&fields[0])?,
            oldest: number(&fields[1])?,
            oldest_member: instance(&fields[2])?,
            marks: number(&fields[3])?,
            roster_version: number(&fields[4])?,
            covered,
            silent: rest
                .iter()
                .map(|id| instance(id))
                .collect::<Result<_, _>>()?,
        })
    }
}

/// A round that came back.
struct Completed {
    sent: u64,
    reply: RoundReply,
}

/// Why the view is stale.
struct Stale {
    reason: String,
    /// Whether it is the normal course of joining (until this instance's first round comes
    /// back) or of a pull under way: logged at DEBUG, and at WARN only once it has lasted
    /// `stale_after`.
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
    epoch: u64,
    /// The Redis data it vouches for.
    tag: u64,
    /// Since when (ms) a pull is owed because this member pushed bits into Redis: it bumped
    /// its resync epoch, vouched for new Redis data, or joined.
    pull_owed_since: Option<u64>,
}

/// At most this many rounds are awaited at once; an older one is dropped (a newer one that
/// comes back covers it).
const ROUNDS_IN_FLIGHT: usize = 16;

/// At most this many pings' nonces are kept; an older ping that comes back after is ignored
/// (a newer one covers it).
const PINGS_IN_FLIGHT: usize = 256;

/// The view's state, for [`RedisSync::stats`](crate::RedisSync::stats).
pub(super) struct Report {
    pub(super) fresh: bool,
    pub(super) stale_for: Option<Duration>,
    pub(super) reason: Option<String>,
    pub(super) periods: u64,
    pub(super) let_through: u64,
    pub(super) rejected: u64,
    pub(super) instances: usize,
    pub(super) rounds: u64,
    pub(super) roster_reads: u64,
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
            pushed: std::sync::atomic::AtomicBool::new(false),
            fresh_until: AtomicU64::new(0),
            view: Mutex::new(View::default()),
            next_round: AtomicU64::new(1),
            nonces: Mutex::new(VecDeque::new()),
            pings_back: tokio::sync::watch::Sender::new(0),
            wanted: AtomicU64::new(0),
            confirm_wake: tokio::sync::Notify::new(),
            overdue: AtomicU64::new(0),
            confirm_timeout: cfg.confirm_timeout,
            roster_wanted: tokio::sync::Notify::new(),
            let_through: AtomicU64::new(0),
            rejected: AtomicU64::new(0),
            budget_second: AtomicU64::new(0),
            budget_used: AtomicU64::new(0),
        }
    }

    /// Milliseconds since `base`, from 1: this instance's clock.
    pub(super) fn now(&self) -> u64 {
        self.base.elapsed().as_millis() as u64 + 1
    }

    pub(super) fn is_fresh(&self) -> bool {
        self.now() <= self.fresh_until.load(Relaxed)
    }

    /// The stale policy, for a would-be rejection this view cannot confirm: whether it is let
    /// through (counted either way).
    pub(super) fn stale_policy_lets_through(&self) -> bool {
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
    /// (the first against it compares every segment) every bit held here went into it;
    /// `pushed`: that pass pushed bits into it.
    pub(super) fn reconciled_with(&self, incarnation: &str, pushed: bool) {
        let tag = tag_of(incarnation);
        if self.vouched.load(Relaxed) != tag {
            self.pushed.store(pushed, Relaxed);
        }
        if self.vouched.swap(tag, Relaxed) != tag {
            let now = self.now();
            self.evaluate(&mut lock(&self.view), now);
        }
    }

    /// The tag this instance's roster entry carries, and whether the others are to pull when
    /// it is announced (the pass that reconciled with its data pushed bits).
    pub(super) fn vouched(&self) -> (u64, bool) {
        (self.vouched.load(Relaxed), self.pushed.load(Relaxed))
    }

    /// A ping is being sent (a confirming one, or a mark round's): its sequence number and
    /// nonce.
    pub(super) fn ping_sent(&self) -> (u64, u64) {
        let seq = self.next_round.fetch_add(1, SeqCst);
        let nonce = super::inner::random_id();
        let mut nonces = lock(&self.nonces);
        if nonces.len() == PINGS_IN_FLIGHT {
            nonces.pop_front();
        }
        nonces.push_back((seq, nonce));
        (seq, nonce)
    }

    /// The sequence number the next round takes: one numbered at least this is sent after
    /// the call.
    pub(super) fn next_seq(&self) -> u64 {
        self.next_round.load(SeqCst)
    }

    /// Waits until a ping numbered at least `needed` is back, at most `confirm_timeout`:
    /// then (R1) everything published before it was sent has reached this instance.
    /// `false`: overdue, and the view is stale until one comes back (R3).
    pub(super) async fn ping_back_after(&self, needed: u64) -> bool {
        let mut back = self.pings_back.subscribe();
        let came = tokio::time::timeout(self.confirm_timeout, back.wait_for(|&seq| seq >= needed));
        if matches!(came.await, Ok(Ok(_))) {
            return true;
        }
        if self.overdue.fetch_max(needed, SeqCst) == 0 {
            let now = self.now();
            self.evaluate(&mut lock(&self.view), now);
        }
        false
    }

    /// A mark round is being sent: its sequence number and nonce, for its ping.
    pub(super) fn round_sent(&self) -> (u64, u64) {
        let (seq, nonce) = self.ping_sent();
        let sent = self.now();
        let mut view = lock(&self.view);
        if view.rounds.len() == ROUNDS_IN_FLIGHT {
            view.rounds.pop_front();
        }
        view.rounds.push_back(Round {
            seq,
            sent,
            reply: None,
            ping_back: false,
        });
        (seq, nonce)
    }

    /// Round `seq`'s script ran and replied. `true` if the roster is to be read whole.
    pub(super) fn round_replied(&self, seq: u64, reply: RoundReply) -> bool {
        self.round_progress(seq, |round| round.reply = Some(reply))
    }

    /// A ping came back on our own channel: ignored unless `(seq, nonce)` is one of ours in
    /// flight (R4). `true` if the roster is to be read whole.
    pub(super) fn ping_back(&self, seq: u64, nonce: u64) -> bool {
        {
            let mut nonces = lock(&self.nonces);
            let Some(index) = nonces.iter().position(|&sent| sent == (seq, nonce)) else {
                return false;
            };
            // Pings come back in the order they ran: older ones are not coming.
            nonces.drain(..=index);
        }
        self.pings_back.send_if_modified(|back| {
            let newer = seq > *back;
            *back = (*back).max(seq);
            newer
        });
        let overdue = self.overdue.load(SeqCst);
        if overdue != 0
            && seq >= overdue
            && self
                .overdue
                .compare_exchange(overdue, 0, SeqCst, SeqCst)
                .is_ok()
        {
            let now = self.now();
            self.evaluate(&mut lock(&self.view), now);
        }
        self.round_progress(seq, |round| round.ping_back = true)
    }

    fn round_progress(&self, seq: u64, progress: impl FnOnce(&mut Round)) -> bool {
        let now = self.now();
        let mut view = lock(&self.view);
        let Some(index) = view.rounds.iter().position(|round| round.seq == seq) else {
            return false;
        };
        progress(&mut view.rounds[index]);
        let round = &view.rounds[index];
        let (Some(reply), true) = (round.reply.clone(), round.ping_back) else {
            return false;
        };
        let sent = round.sent;
        // Older rounds' pings came before this one's: they are covered by it.
        view.rounds.drain(..=index);
        view.rounds_back += 1;
        // Every change of the roster up to the version the round read reached us before its
        // ping: a version we have not heard, or a smaller one (Redis lost the roster), was
        // missed.
        if reply.roster_version != view.roster_version {
            view.roster_missed = true;
        }
        view.last = Some(Completed { sent, reply });
        self.evaluate(&mut view, now);
        if view.roster_missed {
            self.roster_wanted.notify_one();
        }
        view.roster_missed
    }

    /// Whether a change of the roster was missed (read it with [`roster_read`](Self::roster_read)).
    pub(super) fn roster_missed(&self) -> bool {
        lock(&self.view).roster_missed
    }

    /// The roster, read whole at `version`: `(instance, epoch, tag, pushed)` each.
    pub(super) fn roster_read(&self, version: u64, entries: &[(u64, u64, u64, bool)]) -> bool {
        let now = self.now();
        let mut view = lock(&self.view);
        view.roster_reads += 1;
        let mut pull = false;
        let mut members = HashMap::with_capacity(entries.len());
        for &(id, epoch, tag, pushed) in entries {
            let mut member = view.members.remove(&id).unwrap_or(Member {
                epoch,
                tag: 0,
                pull_owed_since: None,
            });
            pull |= self.announced(&mut member, id, epoch, tag, pushed, now);
            members.insert(id, member);
        }
        for id in view.members.keys() {
            tracing::info!(prefix = %self.prefix, instance = format_args!("{id:016x}"), "an instance left the roster");
        }
        view.members = members;
        view.roster_version = version;
        view.roster_missed = false;
        self.evaluate(&mut view, now);
        pull
    }

    /// A roster message that Redis's roster did not confirm (forged, or overtaken by a later
    /// change), or could not be checked: nothing of it is taken, and the view is stale until
    /// the roster is read whole (R10 in `docs/REDIS-SYNC.md`).
    pub(super) fn roster_doubted(&self) {
        let now = self.now();
        let mut view = lock(&self.view);
        view.roster_missed = true;
        self.evaluate(&mut view, now);
        self.roster_wanted.notify_one();
    }

    /// `sender` joined, or announced a new epoch or tag, as roster change `version`;
    /// `pushed`: the pass that reconciled it with that tag's data pushed bits into it. `true`
    /// if it asks for a pull, or vouches for other Redis data than ours: the caller wakes the
    /// reconciler.
    pub(super) fn member(
        &self,
        sender: u64,
        epoch: u64,
        tag: u64,
        version: u64,
        pushed: bool,
    ) -> bool {
        let now = self.now();
        let mut view = lock(&self.view);
        if !self.roster_change(&mut view, version) {
            return false;
        }
        let member = view.members.entry(sender).or_insert_with(|| {
            tracing::debug!(prefix = %self.prefix, instance = format_args!("{sender:016x}"), "heard from a new instance");
            Member {
                epoch,
                tag: 0,
                pull_owed_since: None,
            }
        });
        let pull = self.announced(member, sender, epoch, tag, pushed, now);
        self.evaluate(&mut view, now);
        // A member vouching for other Redis data than ours: our own pass finds out whether
        // the data changed (and then vouches for it too), even if it need not pull.
        pull || tag != self.vouched.load(Relaxed)
    }

    /// `sender` left the roster as change `version`: cleanly, or `expired` (silent for
    /// `member_timeout`, removed by another instance's round).
    pub(super) fn left(&self, sender: u64, version: u64, expired: bool) {
        let now = self.now();
        let mut view = lock(&self.view);
        if !self.roster_change(&mut view, version) {
            return;
        }
        if view.members.remove(&sender).is_some() {
            if expired {
                tracing::warn!(prefix = %self.prefix, instance = format_args!("{sender:016x}"), "an instance has been silent for member_timeout: presumed gone, no longer waited for");
            } else {
                tracing::info!(prefix = %self.prefix, instance = format_args!("{sender:016x}"), "an instance left");
            }
        }
        self.evaluate(&mut view, now);
    }

    /// Takes roster change `version` in order: `false` if it is reflected already; a gap
    /// means one was missed.
    fn roster_change(&self, view: &mut View, version: u64) -> bool {
        if version <= view.roster_version {
            return false;
        }
        if version != view.roster_version + 1 {
            view.roster_missed = true;
            self.roster_wanted.notify_one();
        }
        view.roster_version = version;
        true
    }

    /// What `id` announces now: whether a pull is owed for it.
    fn announced(
        &self,
        member: &mut Member,
        id: u64,
        epoch: u64,
        tag: u64,
        pushed: bool,
        now: u64,
    ) -> bool {
        let mut pull = false;
        if epoch > member.epoch {
            member.epoch = epoch;
            member.pull_owed_since = Some(now);
            pull = true;
        }
        if tag != member.tag {
            member.tag = tag;
            // It compared every segment with that data and pushed what the data lacked: if
            // it pushed anything, pull after it did (also when first heard: whether it
            // pushed before or after our last pass is unknown). Test:
            // `a_member_that_pushed_nothing_is_not_pulled_from`.
            if id != self.me && pushed {
                member.pull_owed_since = Some(now);
                pull = true;
            }
        }
        pull
    }

    /// The subscription is (re)established: messages sent while it was down are lost, so a
    /// pull that starts from now on is owed, and the roster is read again.
    pub(super) fn subscribed(&self) {
        let now = self.now();
        let mut view = lock(&self.view);
        view.subscribed = true;
        view.pull_owed_since = Some(now);
        view.roster_missed = true;
        view.rounds.clear();
        self.evaluate(&mut view, now);
        self.roster_wanted.notify_one();
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

    /// Bits arrived for a generation this instance does not know yet: they were not taken,
    /// so a pull (the pass that adopts it) is owed before the view is fresh again.
    pub(super) fn owe_pull(&self) {
        let now = self.now();
        let mut view = lock(&self.view);
        view.pull_owed_since.get_or_insert(now);
        self.evaluate(&mut view, now);
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
            // Stale since the last round's bound passed, or since this event.
            view.stale_from
                .get_or_insert(if until == 0 { now } else { until });
        }
        view.stale = stale;
    }

    fn judge(&self, view: &View, now: u64) -> (u64, Option<Stale>) {
        // Joining: its first round, or its own announcement, has not come back yet
        // (`a_join_whose_own_announcement_is_not_back_yet_is_not_warned_about`).
        let joining = view.last.is_none() || !view.members.contains_key(&self.me);
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
                stale(
                    "pulling what it may have missed (published while it was not subscribed, \
                     or bits of a generation it has not adopted yet)"
                        .into(),
                    true,
                ),
            );
        }
        if self.overdue.load(SeqCst) != 0 {
            return (
                0,
                stale(
                    "a ping a rejection waited for has not come back within confirm_timeout".into(),
                    false,
                ),
            );
        }
        if view.publishing_failed {
            return (
                0,
                stale("its own inserts cannot be published".into(), false),
            );
        }
        let Some(last) = &view.last else {
            return (
                0,
                stale(
                    "joining: its first mark round has not come back yet".into(),
                    false,
                ),
            );
        };
        if view.roster_missed {
            return (
                0,
                stale("reading the roster again: a change was missed".into(), true),
            );
        }
        let vouched = self.vouched.load(Relaxed);
        let anchored = last.reply.covered;
        for (&id, member) in &view.members {
            // With a follower, a silent member owes nothing the follower does not bring (R6).
            let silent = anchored.is_some() && id != self.me && last.reply.silent.contains(&id);
            if member.tag != vouched && !silent {
                let reason = if id == self.me {
                    "its announcement since it reconciled with Redis's current data has not \
                     come back"
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
        }
        if !view.members.contains_key(&self.me) {
            return (
                0,
                stale(
                    "joining: its own announcement has not come back yet".into(),
                    false,
                ),
            );
        }
        let reply = &last.reply;
        if let Some((covered, bound)) = reply.covered {
            // With a follower (R5, R6): fresh until the covered time is the follow bound old by
            // an upper bound on Redis's clock (its time in the reply, plus ours since the round
            // was sent); the marks bound nothing.
            let age = reply.now.saturating_sub(covered);
            let until = (last.sent + bound).saturating_sub(age);
            if now <= until {
                return (until, None);
            }
            let reason = if age > bound {
                format!(
                    "the follower has not read the source for {age} ms (the follow bound is \
                     {bound} ms)"
                )
            } else {
                format!(
                    "its own mark rounds have not come back for {} ms",
                    now - last.sent
                )
            };
            return (until, stale(reason, false));
        }
        // Without a follower (R7): fresh until the oldest mark the last round read is
        // `stale_after` old, counted from when the round was sent (Redis's clock had not
        // passed `now` then).
        let age = reply.now.saturating_sub(reply.oldest);
        let until = (last.sent + self.stale_after).saturating_sub(age);
        if now <= until {
            return (until, None);
        }
        let reason = if age > self.stale_after {
            if reply.oldest_member == self.me {
                format!("its own mark is {age} ms old")
            } else {
                format!(
                    "no mark from instance {:016x} for {age} ms",
                    reply.oldest_member
                )
            }
        } else {
            format!(
                "its own mark rounds have not come back for {} ms",
                now - last.sent
            )
        };
        (until, stale(reason, false))
    }

    /// Logs and reports the transitions between fresh and stale. Called every heartbeat.
    ///
    /// A stale period that is the normal course of joining (until its first round comes back)
    /// or of a pull under way is logged at DEBUG, and at WARN only once it has lasted
    /// `stale_after`; any other at WARN when it begins, and its end at INFO. The policy, the
    /// `stale` gauge and the counters do not tell them apart: while the view is not fresh,
    /// would-be rejections go to the policy however normal the cause.
    fn watch(&self) {
        let now = self.now();
        let mut guard = lock(&self.view);
        let view = &mut *guard;
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
                #[cfg(feature = "metrics")]
                metrics::counter!(names::STALE_PERIODS, "prefix" => self.prefix.clone())
                    .increment(1);
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
            let instances = view
                .last
                .as_ref()
                .map_or(view.members.len() as u64, |last| last.reply.marks);
            metrics::gauge!(names::INSTANCES, "prefix" => self.prefix.clone())
                .set(instances as f64);
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
            instances: view
                .last
                .as_ref()
                .map_or(view.members.len(), |last| last.reply.marks as usize),
            rounds: view.rounds_back,
            roster_reads: view.roster_reads,
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
    /// Every heartbeat: reads the roster whole if a change of it was missed, and reports the
    /// transitions between fresh and stale.
    pub(super) async fn watch_freshness(self: std::sync::Arc<Self>) {
        loop {
            tokio::select! {
                () = tokio::time::sleep(self.cfg.heartbeat) => {}
                () = self.freshness.roster_wanted.notified() => {}
            }
            if self.freshness.roster_missed() {
                match self.read_roster().await {
                    Ok(true) => self.reconciliation.wake(),
                    Ok(false) => {}
                    Err(error) => {
                        tracing::debug!(prefix = %self.prefix, %error, "reading the roster failed; retrying");
                    }
                }
            }
            self.freshness.watch();
        }
    }

    /// Reads the roster whole ([`scripts::roster`]): whether it asks
    /// for a pull.
    async fn read_roster(&self) -> Result<bool, crate::Error> {
        let mut conn = self.conn.clone();
        let reply: Vec<String> = crate::scripts::roster()
            .key(self.keys.roster())
            .key(self.keys.roster_version())
            .invoke_async(&mut conn)
            .await?;
        let version = reply.first().and_then(|v| v.parse().ok()).unwrap_or(0);
        let entries: Vec<(u64, u64, u64, bool)> = reply[1.min(reply.len())..]
            .chunks_exact(2)
            .filter_map(|pair| {
                let id = u64::from_str_radix(&pair[0], 16).ok()?;
                let (epoch, tag, pushed) = parse_roster_entry(&pair[1])?;
                Some((id, epoch, tag, pushed))
            })
            .collect();
        Ok(self.freshness.roster_read(version, &entries))
    }
}

/// A roster entry, `epoch:tag:pushed` (decimal, 16 hex digits, `0` or `1`).
pub(super) fn parse_roster_entry(entry: &str) -> Option<(u64, u64, bool)> {
    let mut fields = entry.split(':');
    let epoch = fields.next()?.parse().ok()?;
    let tag = u64::from_str_radix(fields.next()?, 16).ok()?;
    let pushed = match fields.next()? {
        "0" => false,
        "1" => true,
        _ => return None,
    };
    fields.next().is_none().then_some((epoch, tag, pushed))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::{Freshness, RoundReply, lock, tag_of};
    use crate::RedisSyncBuilder;

    const ME: u64 = 0xa1;
    const OTHER: u64 = 0xb1;
    /// Redis's clock in the rounds below.
    const REDIS_NOW: u64 = 1_800_000_000_000;

    /// The stale bound of the instances below.
    const STALE_AFTER: Duration = Duration::from_millis(60);

    fn instance() -> Freshness {
        let cfg = RedisSyncBuilder::new("redis://127.0.0.1:1")
            .heartbeat(Duration::from_millis(5))
            .stale_after(STALE_AFTER);
        Freshness::new(&cfg, ME, "t")
    }

    /// A mark round that found the oldest mark (`whose`) `age` ms old and the roster at
    /// `version`, replied and pinged back.
    fn round(freshness: &Freshness, age: u64, whose: u64, version: u64) {
        round_with(freshness, reply(age, whose, version));
    }

    fn round_with(freshness: &Freshness, reply: RoundReply) {
        let (seq, nonce) = freshness.round_sent();
        freshness.round_replied(seq, reply);
        freshness.ping_back(seq, nonce);
    }

    fn reply(age: u64, whose: u64, version: u64) -> RoundReply {
        RoundReply {
            now: REDIS_NOW,
            oldest: REDIS_NOW - age,
            oldest_member: whose,
            marks: 1,
            roster_version: version,
            covered: None,
            silent: Vec::new(),
        }
    }

    /// A round that read, with a follower, its covered time `covered_age` ms old against a
    /// follow bound of `bound` ms, and `silent` members (the oldest mark `mark_age` old).
    fn followed(mark_age: u64, covered_age: u64, bound: u64, silent: &[u64]) -> RoundReply {
        RoundReply {
            covered: Some((REDIS_NOW - covered_age, bound)),
            silent: silent.to_vec(),
            ..reply(mark_age, OTHER, 2)
        }
    }

    /// An instance subscribed, reconciled with `data` and pulled, whose own announcement
    /// (roster version 1) and first round came back.
    fn reconciled(data: &str) -> Freshness {
        let freshness = instance();
        freshness.subscribed();
        freshness.roster_read(0, &[]);
        freshness.reconciled_with(data, false);
        pull(&freshness);
        freshness.member(ME, 0, tag_of(data), 1, true);
        round(&freshness, 0, ME, 1);
        freshness
    }

    /// [`reconciled`], then another instance joined (roster version 2), pulled from, and a
    /// round read its mark: fresh.
    fn with_other(data: &str) -> Freshness {
        let freshness = reconciled(data);
        freshness.member(OTHER, 0, tag_of(data), 2, true);
        pull(&freshness);
        round(&freshness, 10, OTHER, 2);
        assert!(freshness.is_fresh());
        freshness
    }

    fn pull(freshness: &Freshness) {
        freshness.pulled(freshness.pull_started());
    }

    /// Fresh now, and stale `ms` later without a newer round (`why`).
    fn fresh_then_stale_after(freshness: &Freshness, ms: u64, why: &str) {
        assert!(freshness.is_fresh());
        std::thread::sleep(Duration::from_millis(ms));
        assert!(!freshness.is_fresh(), "{why}");
    }

    /// Once `stale_after` passed without a round (stale), a round sent and replied, its ping
    /// not back yet: its sequence number and nonce.
    fn replied_once_stale(freshness: &Freshness) -> (u64, u64) {
        std::thread::sleep(STALE_AFTER + Duration::from_millis(10));
        assert!(!freshness.is_fresh());
        let (seq, nonce) = freshness.round_sent();
        freshness.round_replied(seq, reply(0, ME, 1));
        (seq, nonce)
    }

    /// The view is stale, for a reason that says `why`.
    fn assert_stale_because(freshness: &Freshness, why: &str) {
        let report = freshness.report();
        let reason = report.reason.unwrap_or_default();
        assert!(!report.fresh && reason.contains(why), "{reason:?}");
    }

    #[test]
    fn an_instance_first_heard_is_pulled_from_before_the_view_is_fresh() {
        let freshness = reconciled("dataset/run-1");
        assert!(freshness.is_fresh());
        assert!(
            freshness.member(OTHER, 0, tag_of("dataset/run-1"), 2, true),
            "a pull is asked for"
        );
        assert!(!freshness.is_fresh());
        pull(&freshness);
        assert!(freshness.is_fresh());
        assert!(
            !freshness.member(OTHER, 0, tag_of("dataset/run-1"), 2, true),
            "a change already heard is not taken twice"
        );
        round(&freshness, 10, OTHER, 2);
        assert!(freshness.is_fresh());
    }

    #[test]
    fn a_member_that_pushed_nothing_is_not_pulled_from() {
        let freshness = reconciled("dataset/run-1");
        // A newcomer whose join pushed nothing into Redis: every bit it holds was published.
        assert!(!freshness.member(OTHER, 0, tag_of("dataset/run-1"), 2, false));
        assert!(
            freshness.is_fresh(),
            "a join that pushed nothing is not waited for"
        );
        // Its next tag, reached by a pass that pushed bits: pull after it.
        freshness.reconciled_with("dataset/run-2", false);
        freshness.member(ME, 0, tag_of("dataset/run-2"), 3, true);
        assert!(freshness.member(OTHER, 0, tag_of("dataset/run-2"), 4, true));
        round(&freshness, 0, ME, 4);
        assert!(!freshness.is_fresh());
        pull(&freshness);
        assert!(freshness.is_fresh());
    }

    #[test]
    fn a_member_that_stops_marking_makes_the_others_stale() {
        let freshness = with_other("dataset/run-1");
        // The other instance's mark, read by our round, is older than `stale_after`.
        round(&freshness, 61, OTHER, 2);
        assert_stale_because(&freshness, "no mark from instance 00000000000000b1");
        // Fresh for what is left of `stale_after` after the oldest mark's age, from the round.
        round(&freshness, 30, OTHER, 2);
        fresh_then_stale_after(&freshness, 45, "30 ms old, then 45 ms on: past 60 ms");
    }

    #[test]
    fn a_round_whose_ping_is_not_back_does_not_make_a_view_fresh() {
        let freshness = reconciled("dataset/run-1");
        let (seq, nonce) = replied_once_stale(&freshness);
        assert!(
            !freshness.is_fresh(),
            "what the marks vouch for may still be on its way"
        );
        freshness.ping_back(seq, nonce);
        assert!(freshness.is_fresh());
        // A ping alone (its reply lost with a connection) proves nothing either.
        std::thread::sleep(STALE_AFTER + Duration::from_millis(10));
        let (seq, nonce) = freshness.round_sent();
        freshness.ping_back(seq, nonce);
        assert!(!freshness.is_fresh());
    }

    #[test]
    fn a_missed_roster_change_is_read_whole() {
        let freshness = reconciled("dataset/run-1");
        // Our round read version 3, but only changes up to 1 reached us before its ping.
        round(&freshness, 0, ME, 3);
        assert!(!freshness.is_fresh());
        assert!(freshness.roster_missed());
        let tag = tag_of("dataset/run-1");
        assert!(
            freshness.roster_read(3, &[(ME, 0, tag, true), (OTHER, 0, tag, true)]),
            "a member first seen in the roster is pulled from"
        );
        assert!(!freshness.roster_missed());
        pull(&freshness);
        round(&freshness, 0, ME, 3);
        assert!(freshness.is_fresh());
        // A gap in the versions heard is a missed change too.
        freshness.member(OTHER, 1, tag, 5, true);
        assert!(freshness.roster_missed());
        // A smaller version than ours: Redis lost the roster.
        freshness.roster_read(5, &[(ME, 0, tag, true), (OTHER, 1, tag, true)]);
        pull(&freshness);
        round(&freshness, 0, ME, 1);
        assert!(freshness.roster_missed());
    }

    #[test]
    fn after_redis_restarted_only_members_vouching_for_the_new_data_count() {
        let freshness = with_other("dataset/run-1");

        // Redis restarted (from a dump holding the same dataset id): our pass compared every
        // segment with it.
        freshness.reconciled_with("dataset/run-2", false);
        assert!(
            !freshness.is_fresh(),
            "our own entry vouches for the old data"
        );
        freshness.member(ME, 0, tag_of("dataset/run-2"), 3, true);
        round(&freshness, 0, ME, 3);
        // The other instance still vouches for the old data: however recent its mark, the
        // view is not fresh.
        assert_stale_because(&freshness, "has not reconciled");
        // It reconciled (and pushed what the new data lacked): pull after it, then fresh.
        assert!(freshness.member(OTHER, 0, tag_of("dataset/run-2"), 4, true));
        pull(&freshness);
        round(&freshness, 0, ME, 4);
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

    /// An instance that joined: subscribed, reconciled with `data` and pulled, its first
    /// round not back yet.
    fn joining(data: &str) -> Freshness {
        let freshness = instance();
        freshness.subscribed();
        freshness.roster_read(0, &[]);
        freshness.reconciled_with(data, false);
        pull(&freshness);
        freshness
    }

    /// Whether the watcher logged the stale period it is in at WARN (`None`: fresh).
    fn warned(freshness: &Freshness) -> Option<bool> {
        freshness.watch();
        lock(&freshness.view).period.as_ref().map(|p| p.warned)
    }

    /// A join of `dataset/run-1` still under way after `stale_after` is warned about; its own
    /// announcement and a round back, the period is over.
    fn warned_once_it_lasts_then_joined(freshness: &Freshness) {
        std::thread::sleep(STALE_AFTER + Duration::from_millis(20));
        assert_eq!(
            warned(freshness),
            Some(true),
            "still joining after stale_after"
        );
        freshness.member(ME, 0, tag_of("dataset/run-1"), 1, true);
        round(freshness, 0, ME, 1);
        assert_eq!(warned(freshness), None);
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
        warned_once_it_lasts_then_joined(&freshness);
        assert!(freshness.is_fresh());
        assert_eq!(freshness.report().periods, 1);
    }

    /// Its first rounds came back before its own announcement did (a round sent before it
    /// vouched announces nothing): still the normal course of joining.
    #[test]
    fn a_join_whose_own_announcement_is_not_back_yet_is_not_warned_about() {
        let freshness = joining("dataset/run-1");
        round(&freshness, 0, ME, 0);
        assert_stale_because(&freshness, "own announcement");
        assert_eq!(warned(&freshness), Some(false), "joining: no warning yet");
        warned_once_it_lasts_then_joined(&freshness);
    }

    #[test]
    fn a_pull_under_way_is_not_warned_about_and_silence_is_at_once() {
        let freshness = joining("dataset/run-1");
        freshness.member(ME, 0, tag_of("dataset/run-1"), 1, true);
        round(&freshness, 0, ME, 1);
        assert_eq!(warned(&freshness), None, "its first round came back");
        // A newcomer is heard: pull from it first.
        assert!(freshness.member(OTHER, 0, tag_of("dataset/run-1"), 2, true));
        assert_eq!(warned(&freshness), Some(false), "a pull under way");
        pull(&freshness);
        round(&freshness, 0, OTHER, 2);
        assert_eq!(warned(&freshness), None);
        // Then no round comes back: stale once `stale_after` has passed, and warned at once.
        std::thread::sleep(STALE_AFTER + Duration::from_millis(20));
        assert_eq!(warned(&freshness), Some(true));
        let reason = freshness.report().reason.unwrap_or_default();
        assert!(reason.contains("have not come back for"), "{reason}");
    }

    #[test]
    fn with_a_follower_a_silent_member_holds_no_view_stale() {
        let freshness = with_other("dataset/run-1");
        // Without a follower, the other instance's old mark holds the view stale (R7)...
        round(&freshness, 5_000, OTHER, 2);
        assert!(!freshness.is_fresh());
        // ...with one whose covered time is recent, it does not (R6): whatever it can still
        // owe is a committed row, which the follower brings.
        round_with(&freshness, followed(5_000, 0, 100, &[OTHER]));
        assert!(freshness.is_fresh(), "{:?}", freshness.report().reason);
        // Redis restarted: a silent member never vouches for the new data, and is not waited
        // for; a live one still is.
        freshness.reconciled_with("dataset/run-2", false);
        freshness.member(ME, 0, tag_of("dataset/run-2"), 3, true);
        round_with(
            &freshness,
            RoundReply {
                roster_version: 3,
                ..followed(5_000, 0, 100, &[OTHER])
            },
        );
        assert!(freshness.is_fresh(), "{:?}", freshness.report().reason);
        round_with(
            &freshness,
            RoundReply {
                roster_version: 3,
                ..followed(10, 0, 100, &[])
            },
        );
        assert!(
            !freshness.is_fresh(),
            "a live member that has not reconciled with the new data is waited for"
        );
    }

    #[test]
    fn with_a_follower_a_view_is_stale_once_the_source_was_not_read_within_the_bound() {
        let freshness = with_other("dataset/run-1");
        // The follower's covered time is older than the follow bound: stale, whatever the
        // marks say (R5).
        round_with(&freshness, followed(0, 150, 100, &[]));
        assert_stale_because(&freshness, "the follower has not read the source");
        // Recent: fresh, until the bound passes without a newer round.
        round_with(&freshness, followed(0, 40, 100, &[]));
        fresh_then_stale_after(&freshness, 75, "40 ms old, then 75 ms on: past 100 ms");
    }

    #[test]
    fn a_ping_without_its_nonce_is_ignored() {
        let freshness = reconciled("dataset/run-1");
        let (seq, nonce) = replied_once_stale(&freshness);
        // A forged ping: the right sequence number, another nonce (R4).
        freshness.ping_back(seq, nonce ^ 1);
        assert!(!freshness.is_fresh());
        assert!(
            *freshness.pings_back.borrow() < seq,
            "a forged ping confirms nothing"
        );
        freshness.ping_back(seq, nonce);
        assert!(freshness.is_fresh());
        assert_eq!(*freshness.pings_back.borrow(), seq);
    }
}
