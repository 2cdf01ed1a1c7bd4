//! The other instances' side of propagation: bits, heartbeats, commits and announcements
//! arrive on the channel.

use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use futures_util::StreamExt;

use super::inner::Inner;
use crate::protocol::{self, BitsMessage, Kind};

impl Inner {
    /// Receives the channel through `client` (on a cluster: a connection to the node named by
    /// the URL; a message published on any node reaches it); reconnects forever. A subscription that stays silent for twice
    /// `stale_after` (not even our own heartbeats come back) is dropped and made again: a
    /// connection to a hung or partitioned Redis may never report an error.
    pub(super) async fn subscriber(self: Arc<Self>, client: redis::Client) {
        let channel = self.keys.channel();
        let silence = self.cfg.stale_after * 2;
        let mut first = true;
        loop {
            let connected =
                tokio::time::timeout(self.cfg.response_timeout, client.get_async_pubsub()).await;
            match connected {
                Ok(Ok(mut pubsub)) => {
                    let subscribed =
                        tokio::time::timeout(self.cfg.response_timeout, pubsub.subscribe(&channel))
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
            // Our own heartbeats count: they prove our publishing and subscription work.
            Kind::Tick => {
                let epoch = message.words.first().copied().unwrap_or(0);
                let sent = message.words.get(1).copied();
                let tag = message.words.get(2).copied();
                if self.freshness.heartbeat(message.sender, epoch, sent, tag) {
                    self.reconciliation.wake();
                }
            }
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
                    // A generation we do not know yet: find out now.
                    self.reconciliation.wake();
                }
            }
            Kind::Committed => {
                for digest in message.words {
                    self.filter.forget_remote(digest);
                }
            }
            Kind::Leaving => self.freshness.leaving(message.sender),
            Kind::Building | Kind::Switched => self.reconciliation.wake(),
        }
    }
}
