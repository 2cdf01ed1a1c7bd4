//! The other instances' side of propagation: bits, commits, roster changes and
//! announcements arrive on the channel, and this instance's own mark rounds' pings on its
//! own.
//!
//! **Roster messages are claims** (R10 in `docs/REDIS-SYNC.md`): anyone who can `PUBLISH` on
//! the channel can send one. A [`Kind::Member`] or [`Kind::Leaving`] message changes the view
//! only once Redis's roster confirms it (its entry is what the message says, and the roster's
//! version has reached the message's), read before the next message is taken, so the order
//! every freshness proof rests on is kept. One that Redis does not confirm (forged, or
//! overtaken by a later change), or that cannot be checked, changes nothing and makes the view
//! stale until the roster is read whole. Tests: `tests::only_what_the_roster_holds_confirms_a_message`,
//! `sync.rs` `forged_roster_messages_neither_hide_a_join_nor_drop_a_member`.

use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use futures_util::StreamExt;

use super::inner::Inner;
use crate::protocol::{self, BitsMessage, Kind};

impl Inner {
    /// Receives the channel through `client` (on a cluster: a connection to the node named by
    /// the URL; a message published on any node reaches it); reconnects forever. A subscription that stays silent for twice
    /// `stale_after` (not even our own pings come back) is dropped and made again: a
    /// connection to a hung or partitioned Redis may never report an error.
    pub(super) async fn subscriber(self: Arc<Self>, client: redis::Client) {
        let channel = self.keys.channel();
        let pings = self.keys.ping_channel(self.id);
        let silence = self.cfg.stale_after * 2;
        let mut first = true;
        loop {
            let connected =
                tokio::time::timeout(self.cfg.response_timeout, client.get_async_pubsub()).await;
            match connected {
                Ok(Ok(mut pubsub)) => {
                    let subscribed = tokio::time::timeout(
                        self.cfg.response_timeout,
                        pubsub.subscribe(&[channel.as_str(), pings.as_str()]),
                    )
                    .await;
                    if matches!(subscribed, Ok(Ok(()))) {
                        // Anything published while we were not subscribed: pull it (after a
                        // resubscription, by a full pass: the gap's writes may include ones
                        // whose version bump was lost with a connection).
                        if !std::mem::take(&mut first) {
                            self.reconciliation.owe_full_pass();
                        }
                        self.freshness.subscribed();
                        self.reconciliation.wake();
                        let mut messages = pubsub.on_message();
                        while let Ok(Some(message)) =
                            tokio::time::timeout(silence, messages.next()).await
                        {
                            if let Some(claim) = self.on_message(message.get_payload_bytes()) {
                                self.take_roster_claim(claim).await;
                            }
                        }
                        tracing::debug!(prefix = %self.prefix, "the subscription ended or went silent; subscribing again");
                    }
                    self.freshness.unsubscribed();
                    self.reconciliation.wake();
                }
                Ok(Err(error)) => {
                    tracing::debug!(prefix = %self.prefix, %error, "pub/sub connection failed");
                }
                Err(_) => {
                    tracing::debug!(prefix = %self.prefix, "pub/sub connection timed out");
                }
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Takes one message; a roster message is returned, to be checked against Redis's roster
    /// before it changes anything ([`take_roster_claim`](Self::take_roster_claim)).
    fn on_message(&self, payload: &[u8]) -> Option<RosterClaim> {
        let Some(message) = protocol::decode(payload) else {
            tracing::warn!(prefix = %self.prefix, "ignored a malformed message on the channel");
            return None;
        };
        let mine = message.sender == self.id;
        match message.kind {
            // Our own rounds' pings (only we hear them) and our own announcements count: they
            // prove our publishing and subscription work.
            // A ping counts only with the nonce its round was sent with (R4).
            Kind::Ping if mine => {
                if let [seq, nonce] = message.words[..] {
                    self.freshness.ping_back(seq, nonce);
                }
            }
            Kind::Member => {
                let [epoch, tag, version, pushed @ (0 | 1)] = message.words[..] else {
                    tracing::warn!(prefix = %self.prefix, "ignored a malformed message on the channel");
                    return None;
                };
                return Some(RosterClaim::Member {
                    id: message.sender,
                    epoch,
                    tag,
                    version,
                    pushed: pushed == 1,
                });
            }
            Kind::Leaving => {
                let [version, expired] = message.words[..] else {
                    tracing::warn!(prefix = %self.prefix, "ignored a malformed message on the channel");
                    return None;
                };
                return Some(RosterClaim::Leaving {
                    id: message.sender,
                    version,
                    expired: expired == 1,
                });
            }
            // The heartbeats of the protocol before marks, and others' pings: not ours to count.
            Kind::Tick | Kind::Ping => {}
            _ if mine => {}
            Kind::Bits => {
                self.counters.received.fetch_add(1, Relaxed);
                let Some(bits) = BitsMessage::from_words(&message.words) else {
                    tracing::warn!(prefix = %self.prefix, "ignored a malformed message on the channel");
                    return None;
                };
                if self.absorb_bits(message.generation, &bits.bits) {
                    // Held here now: the segments it moved need no pull.
                    self.ledger
                        .advance(message.generation, &bits.groups, &bits.segments);
                } else {
                    // A generation we do not know yet: its bits were not taken, so no
                    // rejection is confirmed until the pass that adopts it (R8).
                    self.freshness.owe_pull();
                    self.reconciliation.wake();
                }
            }
            Kind::Committed => {
                for digest in message.words {
                    self.filter.forget_remote(digest);
                }
            }
            Kind::Building | Kind::Switched => self.reconciliation.wake(),
        }
        None
    }

    /// Applies `claim` if Redis's roster confirms it, else doubts the roster (R10).
    async fn take_roster_claim(&self, claim: RosterClaim) {
        let mut conn = self.conn.clone();
        let script = crate::scripts::roster_entry();
        let mut invocation = script.prepare_invoke();
        invocation
            .key(self.keys.roster())
            .key(self.keys.roster_version())
            .arg(format!("{:016x}", claim.id()));
        let read = invocation.invoke_async::<(String, String)>(&mut conn);
        let read = tokio::time::timeout(self.cfg.response_timeout, read).await;
        let confirmed = match &read {
            Ok(Ok((version, entry))) => version
                .parse()
                .is_ok_and(|version| claim.confirmed_by(version, entry)),
            _ => false,
        };
        if !confirmed {
            tracing::debug!(prefix = %self.prefix, ?claim, ?read, "a roster message Redis's roster does not confirm: not taken; reading the roster whole");
            self.freshness.roster_doubted();
            return;
        }
        match claim {
            RosterClaim::Member {
                id,
                epoch,
                tag,
                version,
                pushed,
            } => {
                if self.freshness.member(id, epoch, tag, version, pushed) {
                    self.reconciliation.wake();
                }
            }
            RosterClaim::Leaving {
                id,
                version,
                expired,
            } => self.freshness.left(id, version, expired),
        }
    }
}

/// What a roster message says, before Redis's roster confirms it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RosterClaim {
    /// `id` joined, or announces a new epoch, tag or pushed flag, as change `version`.
    Member {
        id: u64,
        epoch: u64,
        tag: u64,
        version: u64,
        pushed: bool,
    },
    /// `id` left as change `version`: cleanly, or `expired`.
    Leaving {
        id: u64,
        version: u64,
        expired: bool,
    },
}

impl RosterClaim {
    fn id(&self) -> u64 {
        match *self {
            Self::Member { id, .. } | Self::Leaving { id, .. } => id,
        }
    }

    /// Whether Redis's roster at `version`, where this claim's instance has `entry` (`""`:
    /// none), confirms it: the roster has reached the claim's version, and holds what a
    /// member claims (a leaver: nothing).
    fn confirmed_by(&self, version: u64, entry: &str) -> bool {
        match *self {
            Self::Member {
                epoch,
                tag,
                version: claimed,
                pushed,
                ..
            } => {
                claimed <= version
                    && super::freshness::parse_roster_entry(entry) == Some((epoch, tag, pushed))
            }
            Self::Leaving {
                version: claimed, ..
            } => claimed <= version && entry.is_empty(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::RosterClaim;

    #[test]
    fn only_what_the_roster_holds_confirms_a_message() {
        let member = RosterClaim::Member {
            id: 0xb1,
            epoch: 2,
            tag: 0xabc,
            version: 7,
            pushed: true,
        };
        assert!(member.confirmed_by(7, "2:0000000000000abc:1"));
        assert!(member.confirmed_by(9, "2:0000000000000abc:1"));
        // A version the roster has not reached (a forged one far ahead), another entry, none.
        assert!(!member.confirmed_by(6, "2:0000000000000abc:1"));
        assert!(!member.confirmed_by(7, "2:0000000000000abc:0"));
        assert!(!member.confirmed_by(7, "3:0000000000000abc:1"));
        assert!(!member.confirmed_by(7, "2:0000000000000abd:1"));
        assert!(!member.confirmed_by(7, ""));
        assert!(!member.confirmed_by(7, "2:0000000000000abc:1:x"));
        let leaving = RosterClaim::Leaving {
            id: 0xb1,
            version: 7,
            expired: false,
        };
        assert!(leaving.confirmed_by(7, ""));
        // Still in the roster: a forged leave drops no member.
        assert!(!leaving.confirmed_by(7, "2:0000000000000abc:1"));
        assert!(!leaving.confirmed_by(6, ""));
    }
}
