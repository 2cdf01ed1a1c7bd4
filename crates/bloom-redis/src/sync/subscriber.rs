//! The other instances' side of propagation: bits, commits, roster changes and
//! announcements arrive on the channel, and this instance's own mark rounds' pings on its
//! own.

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
                            self.on_message(message.get_payload_bytes());
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

    fn on_message(&self, payload: &[u8]) {
        let Some(message) = protocol::decode(payload) else {
            tracing::warn!(prefix = %self.prefix, "ignored a malformed message on the channel");
            return;
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
                let [epoch, tag, version, pushed] = message.words[..] else {
                    tracing::warn!(prefix = %self.prefix, "ignored a malformed message on the channel");
                    return;
                };
                if self
                    .freshness
                    .member(message.sender, epoch, tag, version, pushed == 1)
                {
                    self.reconciliation.wake();
                }
            }
            Kind::Leaving => {
                let [version, expired] = message.words[..] else {
                    tracing::warn!(prefix = %self.prefix, "ignored a malformed message on the channel");
                    return;
                };
                self.freshness.left(message.sender, version, expired == 1);
            }
            // The heartbeats of the protocol before marks, and others' pings: not ours to count.
            Kind::Tick | Kind::Ping => {}
            _ if mine => {}
            Kind::Bits => {
                self.counters.received.fetch_add(1, Relaxed);
                let Some(bits) = BitsMessage::from_words(&message.words) else {
                    tracing::warn!(prefix = %self.prefix, "ignored a malformed message on the channel");
                    return;
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
    }
}
