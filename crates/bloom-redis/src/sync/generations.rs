//! Generations: which local filters a generation's bits go into, following a rebuild run by
//! another instance, and switching to a new generation.
//!
//! **Routing rule** (what keeps a switch from un-learning keys): bits of the serving
//! generation — received or pulled — also go into the generation being built, and bits of an
//! older generation go into the serving one (and the one being built). An instance that
//! missed a rebuild's start (it acknowledged late, or never) writes its inserts into the old
//! generation only; without the rule, every instance that switched on time would drop them.
//! And received bits of the generation being built also go into the serving one: an instance
//! that switched first publishes its inserts in the new generation only, and one that has not
//! switched yet answers from the old (`sync.rs`
//! `keys_published_in_the_new_generation_are_found_by_instances_that_have_not_switched`).
//!
//! **Switch rule** (what keeps a Redis write from un-learning keys): a generation this
//! instance did not build replaces the serving one only after the check the rebuilder made
//! ([`Error::Shrunk`]: at least `min_rebuild_fraction` of the serving keys), made again here
//! with this instance's own setting. One that fails it (a rebuild forced elsewhere, or a
//! rebuild announced by any client that can write the prefix: `building`, `open`, then `gen`)
//! is adopted with every serving bit carried over and pushed, loudly (an error log,
//! `refused_switches`). Tests: `sync.rs`
//! `a_generation_far_smaller_than_the_serving_one_is_adopted_with_every_key_carried_over`,
//! and the workspace's `tests/hostile_redis.rs`
//! `a_forged_rebuild_does_not_turn_away_a_user_that_exists`.

use std::sync::atomic::Ordering::Relaxed;

use bloom_core::BloomFilter;
use bloom_tower::shared_filter::{Building, CurrentFilter};

use super::inner::{Inner, lock};
use super::segments::Pass;
use crate::Error;
use crate::scripts::{self, Ack};

/// The generation the local serving filter holds, and the one being built.
#[derive(Default)]
pub(super) struct State {
    /// The generation the local serving filter holds (0 until the first pass adopts Redis's).
    pub(super) generation: u64,
    /// The generation being rebuilt, double-written locally.
    pub(super) building: Option<Build>,
}

impl State {
    /// The serving generation, and the one being built.
    pub(super) fn generations(&self) -> (u64, Option<u64>) {
        (
            self.generation,
            self.building.as_ref().map(|b| b.generation),
        )
    }
}

/// A generation being built: its local filter, double-written.
pub(super) struct Build {
    pub(super) generation: u64,
    pub(super) handle: Building,
    /// Whether this instance double-wrote it from before its source was read (acked before
    /// the seal). If not, its serving bits are carried over at the switch.
    pub(super) in_time: bool,
    /// Whether this instance runs the rebuild.
    pub(super) mine: bool,
}

/// How often at most [`warn_out_of_range`] logs (per process).
const OUT_OF_RANGE_WARN_EVERY_MS: u64 = 60_000;

/// Logs at warn, at most once per [`OUT_OF_RANGE_WARN_EVERY_MS`], that a bits message held
/// `count` bit indices at or above m (ignored), with how many were ignored since the last
/// warning.
fn warn_out_of_range(prefix: &str, generation: u64, count: usize, num_bits: u64) {
    use std::sync::atomic::AtomicU64;
    static IGNORED: AtomicU64 = AtomicU64::new(0);
    static LAST_WARNED_MS: AtomicU64 = AtomicU64::new(0);
    IGNORED.fetch_add(count as u64, Relaxed);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
        .max(1);
    let last = LAST_WARNED_MS.load(Relaxed);
    if (last != 0 && now.saturating_sub(last) < OUT_OF_RANGE_WARN_EVERY_MS)
        || LAST_WARNED_MS
            .compare_exchange(last, now, Relaxed, Relaxed)
            .is_err()
    {
        return;
    }
    let ignored = IGNORED.swap(0, Relaxed);
    tracing::warn!(
        %prefix,
        generation,
        num_bits,
        ignored,
        "ignored bit indices at or above the filter's size in a bits message (no instance \
         sends them: a client that can PUBLISH on the channel did); warned at most once a minute"
    );
}

impl Inner {
    /// Starts building an empty filter of the fleet's shape for `generation`: from now on every
    /// local insert also writes it. `in_time` and `mine` as in [`Build`].
    pub(super) fn start_build(
        &self,
        generation: u64,
        in_time: bool,
        mine: bool,
    ) -> Result<Build, Error> {
        let handle = self
            .filter
            .start_building(self.shape.empty())
            .map_err(|_| Error::Busy)?;
        Ok(Build {
            generation,
            handle,
            in_time,
            mine,
        })
    }

    /// The local filter holding exactly `generation`, if it is the serving or the building one.
    pub(super) fn filter_of(&self, generation: u64) -> Option<CurrentFilter> {
        let state = lock(&self.state);
        if generation == state.generation {
            Some(self.filter.current())
        } else {
            state
                .building
                .as_ref()
                .filter(|b| b.generation == generation)
                .map(|b| b.handle.handle())
        }
    }

    /// The local filters that bits of `generation` go into (the routing rule above), with
    /// the generation each holds; empty for a generation newer than any we know.
    fn targets(&self, generation: u64) -> Vec<(u64, CurrentFilter)> {
        let state = lock(&self.state);
        let building = state.building.as_ref();
        if generation <= state.generation {
            std::iter::once((state.generation, self.filter.current()))
                .chain(building.map(|b| (b.generation, b.handle.handle())))
                .collect()
        } else {
            match building.filter(|b| b.generation == generation) {
                Some(b) => vec![
                    (b.generation, b.handle.handle()),
                    (state.generation, self.filter.current()),
                ],
                None => Vec::new(),
            }
        }
    }

    /// Sets received bits of `generation` in the filters it goes into; `false` if we do not
    /// know that generation yet. Bits routed into another generation than theirs are in
    /// none of Redis's copies of it: their segments are marked dirty there.
    ///
    /// A bit index at or above m (no key sets one: a message from a client that can PUBLISH
    /// on the channel, not from an instance) is ignored, with a rate-limited warning. In a
    /// Classic filter whose m is not a multiple of 64 those below the last word's end are
    /// its padding, which a snapshot must hold as 0 (`classic_padding.rs`
    /// `padding_bits_published_on_the_channel_are_ignored_and_the_snapshot_loads`).
    pub(super) fn absorb_bits(&self, generation: u64, bits: &[u64]) -> bool {
        let targets = self.targets(generation);
        let num_bits = self.shape.bits;
        let out_of_range = bits.iter().filter(|&&bit| bit >= num_bits).count();
        if out_of_range > 0 {
            warn_out_of_range(&self.prefix, generation, out_of_range, num_bits);
        }
        for (target_generation, target) in &targets {
            let Some(filter) = target.as_plain() else {
                continue; // reported by the next reconciliation
            };
            let mut routed = Vec::new();
            for &bit in bits {
                if bit < num_bits
                    && filter.union_words((bit / 64) as usize, &[1 << (bit % 64)])
                    && *target_generation != generation
                {
                    routed.push(bit);
                }
            }
            self.ledger
                .mark_bits_dirty(*target_generation, &routed, self.cfg.segment_bytes);
        }
        !targets.is_empty()
    }

    /// ORs words pulled from `generation`'s segment (starting at word `first`) into `filter`
    /// (that generation's local copy) and, per the routing rule, what is new in them into the
    /// generation being built.
    pub(super) fn absorb_pulled(
        &self,
        generation: u64,
        filter: &BloomFilter,
        first: usize,
        pulled: &[u64],
    ) {
        let building = {
            let state = lock(&self.state);
            state
                .building
                .as_ref()
                .filter(|b| generation == state.generation && b.generation != generation)
                .map(|b| (b.generation, b.handle.handle()))
        };
        let building = building
            .as_ref()
            .and_then(|(generation, handle)| Some((generation, handle.as_plain()?)));
        if let Some((building_generation, building)) = building {
            let new: Vec<u64> = filter
                .words_in(first..first + pulled.len())
                .zip(pulled)
                .map(|(local, &remote)| remote & !local)
                .collect();
            if building.union_words(first, &new) {
                // Not in Redis's copy of the generation being built: push it there.
                let segment = first as u64 * 8 / self.cfg.segment_bytes;
                self.ledger.mark_dirty(*building_generation, segment);
            }
        }
        filter.union_words(first, pulled);
    }

    /// Starts (or drops) the local double-write of a generation another instance rebuilds.
    pub(super) async fn follow_building(
        &self,
        remote: Option<u64>,
        serving: u64,
    ) -> Result<(), Error> {
        let start = {
            let mut state = lock(&self.state);
            let ours = state.building.as_ref().map(|b| (b.generation, b.mine));
            match (remote, ours) {
                (Some(b), None) if b > state.generation => Some(b),
                (Some(b), Some((g, false))) if g != b && b > state.generation => {
                    state.building = None; // an abandoned attempt, superseded
                    Some(b)
                }
                (None, Some((g, false))) if g > serving => {
                    // Abandoned (its rebuilder died and the marker expired): stop writing it.
                    tracing::info!(prefix = %self.prefix, generation = g, "rebuild abandoned");
                    state.building = None;
                    None
                }
                _ => None,
            }
        };
        let Some(generation) = start else {
            return Ok(());
        };
        {
            let mut state = lock(&self.state);
            state.building = Some(self.start_build(generation, false, false)?);
        }
        // Only now, with every later insert double-written, tell the rebuilder.
        let mut conn = self.conn.clone();
        let ack: Ack = scripts::ack()
            .key(self.keys.acks(generation))
            .key(self.keys.open(generation))
            .arg(self.id)
            .arg(self.ttl_ms().saturating_mul(10))
            .invoke_async(&mut conn)
            .await?;
        let mut state = lock(&self.state);
        if let Some(build) = state
            .building
            .as_mut()
            .filter(|b| b.generation == generation)
        {
            build.in_time = ack == Ack::InTime;
        }
        tracing::debug!(prefix = %self.prefix, generation, ?ack, "double-writing a generation being rebuilt");
        Ok(())
    }

    /// Whether `next`, a generation another instance published, holds fewer than
    /// `min_rebuild_fraction` of the keys `serving` holds: the rule the rebuilder checks
    /// before it switches ([`Error::Shrunk`]), checked again by every instance that follows.
    /// Logged as an error and counted (`refused_switches`).
    fn shrinks(&self, serving: &BloomFilter, next: &BloomFilter) -> bool {
        let (serving, next) = (serving.estimated_items(), next.estimated_items());
        let min_fraction = self.cfg.min_rebuild_fraction;
        if next >= serving * min_fraction {
            return false;
        }
        self.count_refused_switch();
        let (serving, rebuilt) = (serving.round() as u64, next.round() as u64);
        tracing::error!(
            prefix = %self.prefix,
            serving,
            rebuilt,
            min_fraction,
            "a generation published in Redis holds far fewer keys than this instance serves: \
             not a rebuild this instance would switch to (a rebuild forced elsewhere, or a \
             forged one); switching with every serving key carried over"
        );
        true
    }

    /// Makes `generation` serve locally: Redis's bits (and, if this instance did not
    /// double-write it from the start, its serving bits) are merged into it first.
    pub(super) async fn switch_to(&self, generation: u64) -> Result<(), Error> {
        {
            let mut state = lock(&self.state);
            if state.generation >= generation {
                return Ok(());
            }
            if state.building.as_ref().map(|b| b.generation) != Some(generation) {
                state.building = None;
                state.building = Some(self.start_build(generation, false, false)?);
            }
        }
        // Every segment of the new generation, into its local copy (inserts made meanwhile
        // are double-written into it).
        let mut report = crate::ReconcileReport::default();
        self.sync_generation(generation, Pass::Everything, "", &mut report)
            .await?;
        let carried = {
            let mut state = lock(&self.state);
            if state.generation >= generation {
                return Ok(());
            }
            let build = match state.building.take() {
                Some(build) if build.generation == generation => build,
                other => {
                    state.building = other;
                    return Ok(()); // superseded meanwhile; the next pass follows
                }
            };
            let next = build
                .handle
                .filter()
                .as_plain()
                .ok_or(Error::ShapeChanged)?;
            let current = self.filter.current();
            let current = current.as_plain().ok_or(Error::ShapeChanged)?;
            // A generation another instance (or any Redis client) published is held to the
            // rebuilder's own rule before it replaces the serving one (the switch rule in the
            // module docs).
            let shrunk = !build.mine && self.shrinks(current, next);
            if !build.in_time || shrunk {
                // Keys inserted here before we double-wrote may be missing from the source
                // snapshot, and a generation far smaller than the serving one is not trusted
                // to hold them: carry every serving bit over (same shape, so OR is valid), and
                // push them by a full pass over the new generation.
                next.union(current).map_err(|_| Error::ShapeChanged)?;
                self.reconciliation.owe_full_pass();
            }
            let carried = !build.in_time || shrunk;
            build.handle.finish();
            state.generation = generation;
            self.ledger.retain(&[generation]);
            carried
        };
        self.counters.switches.fetch_add(1, Relaxed);
        tracing::info!(prefix = %self.prefix, generation, carried_over = carried, "switched to a new generation");
        Ok(())
    }
}
