//! Confirmed rejections (R1–R4 in `docs/REDIS-SYNC.md`): a would-be rejection waits for a
//! ping of this instance published after it began, then the local answer stands.
//!
//! *Why it is enough.* A create acknowledged before the rejection began had its bits
//! published before it was acknowledged (`propagated`). Redis runs one command at a time and
//! delivers to each subscriber connection in the order it ran them; the ping ran after the
//! bits, so it reaches our subscription after them, and the subscriber ORs every message
//! into the filter before it takes the next. Once the ping is back (and the view is fresh:
//! no resubscription lost messages since, the follower or the marks bound what was not
//! published), the filter is looked at again and its answer stands. No clocks are compared.
//!
//! *What it costs.* A ping is one `PUBLISH` on the instance's own channel; on a cluster, one
//! `EVALSHA` whose script publishes it through the `{prefix}` slot, like every other message of
//! this instance, so that they reach each subscriber in order. The confirmer sends one only when a
//! waiting rejection needs a newer one than any sent (a mark round's ping counts), one per
//! [`SPACING`] on average (bursts of a few): a flood of absent keys at any rate costs at most
//! that. Hits never
//! come here. Tests: `tests/confirm.rs` (`concurrent_rejections_share_rounds`,
//! `a_key_created_on_one_instance_is_never_absent_on_another_once_its_create_returned`).

use std::sync::Arc;
use std::sync::atomic::Ordering::{Relaxed, SeqCst};
use std::time::Duration;

use bloom_tower::shared_filter::{Confirmation, Rejection};

use super::inner::Inner;
#[cfg(feature = "metrics")]
use crate::names;
use crate::protocol::{self, Kind};
use crate::scripts;

/// Confirming pings of one instance: one per `SPACING` on average, in bursts of at most
/// `BURST` (a token bucket): a rejection that comes alone does not wait for a timer, and a
/// flood costs one ping per millisecond, whatever its rate.
pub(super) const SPACING: Duration = Duration::from_millis(1);
const BURST: f64 = 8.0;

impl Inner {
    /// The rejection override (with pub/sub): a stale view goes to the stale policy at once,
    /// a fresh one has the rejection confirmed.
    pub(super) fn rejection(self: &Arc<Self>) -> Rejection {
        if !self.freshness.is_fresh() {
            return if self.freshness.stale_policy_lets_through() {
                Rejection::LetThrough
            } else {
                Rejection::Stands
            };
        }
        let inner = Arc::clone(self);
        Rejection::Confirm(Confirmation::new(async move { inner.confirm().await }))
    }

    /// Waits for a ping sent after the call; `true` if the local answer then stands.
    async fn confirm(&self) -> bool {
        let needed = self.freshness.next_seq();
        self.freshness.wanted.fetch_max(needed, SeqCst);
        self.freshness.confirm_wake.notify_one();
        let back = self.freshness.ping_back_after(needed).await;
        if back && self.freshness.is_fresh() {
            self.counters.confirmed.fetch_add(1, Relaxed);
            #[cfg(feature = "metrics")]
            metrics::counter!(names::CONFIRMED_REJECTIONS, "prefix" => self.prefix.clone())
                .increment(1);
            return true;
        }
        self.counters.unconfirmed.fetch_add(1, Relaxed);
        #[cfg(feature = "metrics")]
        metrics::counter!(names::UNCONFIRMED_REJECTIONS, "prefix" => self.prefix.clone())
            .increment(1);
        !self.freshness.stale_policy_lets_through()
    }

    /// Sends a confirming ping whenever a waiting rejection needs one newer than any sent, one
    /// per [`SPACING`] on average; forever.
    pub(super) async fn confirmer(self: Arc<Self>) {
        let channel = self.keys.ping_channel(self.id);
        let (mut tokens, mut counted) = (BURST, tokio::time::Instant::now());
        loop {
            // A round numbered at least `wanted` was sent already: nothing to do.
            if self.freshness.next_seq() > self.freshness.wanted.load(SeqCst) {
                self.freshness.confirm_wake.notified().await;
                continue;
            }
            let now = tokio::time::Instant::now();
            tokens = (tokens + (now - counted).as_secs_f64() / SPACING.as_secs_f64()).min(BURST);
            counted = now;
            if tokens < 1.0 {
                // Only when the bucket is empty: a timer fires at the driver's next tick.
                let missing = SPACING.mul_f64(1.0 - tokens);
                tokio::time::sleep(missing).await;
                continue;
            }
            tokens -= 1.0;
            let (seq, nonce) = self.freshness.ping_sent();
            let ping = protocol::encode(Kind::Ping, self.id, 0, &[seq, nonce]);
            let mut conn = self.conn.clone();
            let sent = async {
                if self.cfg.cluster {
                    // Through the `{prefix}` slot's node, which publishes every other message
                    // of this instance: the ping reaches each subscriber after them.
                    let script = scripts::ping();
                    let mut invocation = script.key(self.keys.marks());
                    invocation.arg(&channel).arg(ping);
                    invocation.invoke_async::<i64>(&mut conn).await
                } else {
                    // One server runs every command in one order: a plain PUBLISH.
                    redis::cmd("PUBLISH")
                        .arg(&channel)
                        .arg(ping)
                        .query_async::<i64>(&mut conn)
                        .await
                }
            };
            self.counters.confirm_rounds.fetch_add(1, Relaxed);
            // Not awaited past the confirm timeout: the waiters have gone to the policy then,
            // and a newer ping goes out for the next ones.
            if let Ok(Err(error)) = tokio::time::timeout(self.cfg.confirm_timeout, sent).await {
                tracing::debug!(prefix = %self.prefix, %error, "a confirming ping failed");
            }
        }
    }
}
