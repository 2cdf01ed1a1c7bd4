//! Segments and their versions: what this instance last held of each segment of each
//! generation ([`Ledger`]), which segments it dirtied locally, and moving segments between
//! Redis and the local filter.
//!
//! Every write to a segment in Redis bumps the segment's version and its group's `all`
//! counter in the same atomic step (a `MULTI` block or a script). So:
//!
//! * **Incremental pass** (every `reconcile_every`): one `HGET all` per group; a group whose
//!   count moved gets its `HGETALL`; only segments whose version differs from the one held
//!   here are pulled. Pushed: only segments this instance dirtied (bits it holds that no
//!   successful write of its own put in Redis).
//! * **Full pass** (every `full_pass_every`, at joining, after a reconnection, a
//!   resubscription or a Redis restart): Redis hashes every segment (`redis.sha1hex`), and
//!   every segment whose digest differs from the local one's is pulled, and pushed if the
//!   local copy holds bits Redis lacks. It catches what versions cannot: a write whose bump
//!   was lost, a local bit that never reached Redis.
//!
//! A version held here means "this instance holds every bit of that segment up to that
//! version"; a received [`BitsMessage`](crate::protocol::BitsMessage) advances it only from
//! the version just before (the message then carries the whole difference).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::future::Future;
use std::sync::Mutex;

use bloom_core::BloomFilter;
use futures_util::{StreamExt, TryStreamExt};

use super::inner::{Inner, lock};
use crate::conn::Conn;
use crate::protocol::{self, SEGMENTS_PER_GROUP, group_of};
use crate::scripts::{self, Written};
use crate::{Error, ReconcileReport};

/// How much one digest script hashes at most, so that a full pass never blocks Redis for
/// long: one call costs Redis a few milliseconds at its hashing rate (the CPU a full pass
/// costs redis-server is measured by `benches/redis_traffic.rs`).
const DIGEST_BYTES_PER_CALL: u64 = 1 << 20;

/// Groups worked on at once (each is one request; on a cluster, to its own shard).
const GROUPS_IN_FLIGHT: usize = 16;

/// What to compare with Redis in one pass over a generation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Pass {
    /// Segments whose version moved, and the dirty ones.
    Changed,
    /// Segments whose digest differs (and the dirty ones).
    Digests,
    /// Every segment (a rebuild's upload).
    Everything,
}

/// What this instance holds of each active generation.
pub(super) struct Ledger {
    segments: u64,
    books: Mutex<HashMap<u64, Book>>,
}

struct Book {
    /// Per segment: the version held here (0: none).
    seen: Vec<u64>,
    /// Per group: the `all` count held here (`None`: unknown).
    groups: Vec<Option<u64>>,
    /// Segments holding local bits no write of ours has put in Redis.
    dirty: BTreeSet<u64>,
    /// Per group, on a cluster: the identity of the node it was last read from (its `run_id`
    /// and, under an `allkeys-*` policy, its eviction count; `None`: not yet read). Another
    /// one means the node restarted or evicted keys: its data may have gone back.
    nodes: Vec<Option<String>>,
    /// Writes received ahead of one still missing (two instances' writes to one group can
    /// be published in the other order than Redis ran them): per group or segment, the
    /// versions whose bits are held, applied once the gap before them closes.
    ahead_groups: HashMap<u64, BTreeSet<u64>>,
    ahead_segments: HashMap<u64, BTreeSet<u64>>,
}

/// Versions kept ahead per group or segment; beyond, the pass pulls instead.
const MAX_AHEAD: usize = 64;

/// Moves `held` to `version` if it is the next one, then through the consecutive versions
/// kept `ahead`; otherwise keeps `version` ahead (bounded).
fn advance_one(held: &mut u64, version: u64, ahead: &mut BTreeSet<u64>) {
    if version > *held {
        ahead.insert(version);
    }
    while ahead.first() == Some(&(*held + 1)) {
        *held += 1;
        ahead.pop_first();
    }
    if ahead.len() > MAX_AHEAD {
        ahead.clear();
    }
}

impl Ledger {
    pub(super) fn new(segments: u64) -> Self {
        Self {
            segments,
            books: Mutex::new(HashMap::new()),
        }
    }

    fn groups(&self) -> u64 {
        self.segments.div_ceil(SEGMENTS_PER_GROUP)
    }

    fn with_book<T>(&self, generation: u64, f: impl FnOnce(&mut Book) -> T) -> T {
        let mut books = lock(&self.books);
        let book = books.entry(generation).or_insert_with(|| Book {
            seen: vec![0; self.segments as usize],
            groups: vec![None; self.groups() as usize],
            nodes: vec![None; self.groups() as usize],
            dirty: BTreeSet::new(),
            ahead_groups: HashMap::new(),
            ahead_segments: HashMap::new(),
        });
        f(book)
    }

    /// Marks the segments holding `bits` dirty in `generation`.
    pub(super) fn mark_bits_dirty(&self, generation: u64, bits: &[u64], segment_bytes: u64) {
        if bits.is_empty() {
            return;
        }
        self.with_book(generation, |book| {
            book.dirty
                .extend(bits.iter().map(|&bit| bit / 8 / segment_bytes));
        });
    }

    /// Marks segment `s` of `generation` dirty.
    pub(super) fn mark_dirty(&self, generation: u64, s: u64) {
        self.with_book(generation, |book| book.dirty.insert(s));
    }

    /// A write (ours, or one received on the channel with its bits) moved `groups` and
    /// `segments` of `generation` to these versions: advance what is held here where it was
    /// at the version just before. Books are not created for generations not yet followed.
    pub(super) fn advance(&self, generation: u64, groups: &[(u64, u64)], segments: &[(u64, u64)]) {
        let mut books = lock(&self.books);
        let Some(book) = books.get_mut(&generation) else {
            return;
        };
        for &(group, all) in groups {
            if let Some(Some(held)) = book.groups.get_mut(group as usize) {
                let ahead = book.ahead_groups.entry(group).or_default();
                advance_one(held, all, ahead);
            }
        }
        for &(s, version) in segments {
            if let Some(held) = book.seen.get_mut(s as usize) {
                let ahead = book.ahead_segments.entry(s).or_default();
                advance_one(held, version, ahead);
            }
        }
    }

    /// Forgets every generation but `keep` (older ones are no longer synchronised).
    pub(super) fn retain(&self, keep: &[u64]) {
        lock(&self.books).retain(|g, _| keep.contains(g));
    }

    /// Forgets every version held (Redis lost or replaced its data): the dirty marks stay.
    pub(super) fn forget_versions(&self) {
        for book in lock(&self.books).values_mut() {
            book.seen.fill(0);
            book.groups.fill(None);
            book.ahead_groups.clear();
            book.ahead_segments.clear();
        }
    }

    fn take_dirty(&self, generation: u64) -> BTreeSet<u64> {
        self.with_book(generation, |book| std::mem::take(&mut book.dirty))
    }

    fn seen(&self, generation: u64, s: u64) -> u64 {
        self.with_book(generation, |book| book.seen[s as usize])
    }

    fn set_seen(&self, generation: u64, s: u64, version: u64) {
        self.with_book(generation, |book| {
            let ahead = book.ahead_segments.entry(s).or_default();
            ahead.retain(|&v| v > version);
            book.seen[s as usize] = version;
            advance_one(&mut book.seen[s as usize], version, ahead);
        });
    }

    /// How the node `group` of `generation` is read from now (`server`) differs from the one
    /// it was last read from; on its first read, records `server` (nothing to move for it).
    fn node_change(&self, generation: u64, group: u64, server: &str) -> NodeChange {
        self.with_book(generation, |book| match &mut book.nodes[group as usize] {
            Some(seen) if seen == server => NodeChange::Same,
            Some(seen) if scripts::same_process(seen, server) => NodeChange::Evicted,
            Some(_) => NodeChange::Restarted,
            first @ None => {
                *first = Some(server.to_owned());
                NodeChange::Same
            }
        })
    }

    fn set_node(&self, generation: u64, group: u64, server: String) {
        self.with_book(generation, |book| book.nodes[group as usize] = Some(server));
    }

    /// The nodes every group held here was last read from, sorted, once each (empty on a
    /// single Redis): part of what this instance vouches for.
    pub(super) fn nodes(&self) -> String {
        let books = lock(&self.books);
        let nodes: BTreeSet<&str> = books
            .values()
            .flat_map(|book| book.nodes.iter().flatten().map(String::as_str))
            .collect();
        nodes.into_iter().collect::<Vec<_>>().join(",")
    }

    fn group_held(&self, generation: u64, group: u64) -> Option<u64> {
        self.with_book(generation, |book| book.groups[group as usize])
    }

    fn set_group(&self, generation: u64, group: u64, all: u64) {
        self.with_book(generation, |book| {
            let ahead = book.ahead_groups.entry(group).or_default();
            ahead.retain(|&v| v > all);
            let mut held = all;
            advance_one(&mut held, all, ahead);
            book.groups[group as usize] = Some(held);
        });
    }
}

/// A group's `all` count in its version hash `key` (0 before any write): what the
/// incremental pass compares with the one held; and on a cluster, the identity of the node
/// holding the group ([`scripts::group_state`]: its `run_id`, and its eviction count under an
/// `allkeys-*` policy).
async fn group_state(
    conn: &mut Conn,
    key: &str,
    cluster: bool,
) -> Result<(u64, Option<String>), Error> {
    if cluster {
        let (all, server): (u64, String) =
            scripts::group_state().key(key).invoke_async(conn).await?;
        return Ok((all, Some(server)));
    }
    let all: Option<u64> = redis::cmd("HGET")
        .arg(key)
        .arg("all")
        .query_async(conn)
        .await?;
    Ok((all.unwrap_or(0), None))
}

/// How a group's node differs from the one it was last read from ([`Ledger::node_change`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum NodeChange {
    Same,
    /// Another process: its data may have gone back to an old dump, or a replica's.
    Restarted,
    /// The same process, which has evicted keys since (an `allkeys-*` policy).
    Evicted,
}

/// A group's `all` count and, on a cluster, the identity of its node, as read in a pass.
type GroupState = (u64, Option<String>);

/// What a pass moves in one group, and the state to record once it did.
type Selected = (BTreeSet<u64>, Option<GroupState>);

/// The segments of `group`.
fn segments_of(group: u64, segments: u64) -> std::ops::Range<u64> {
    group * SEGMENTS_PER_GROUP..((group + 1) * SEGMENTS_PER_GROUP).min(segments)
}

impl Inner {
    /// Runs `work` on every group of segments, [`GROUPS_IN_FLIGHT`] at a time (on a cluster,
    /// each to its own shard), and collects what each returns.
    async fn each_group<'a, T, Fut>(&'a self, work: impl FnMut(u64) -> Fut) -> Result<Vec<T>, Error>
    where
        Fut: Future<Output = Result<T, Error>> + 'a,
    {
        let groups = self.segments().div_ceil(SEGMENTS_PER_GROUP);
        futures_util::stream::iter(0..groups)
            .map(work)
            .buffer_unordered(GROUPS_IN_FLIGHT)
            .try_collect()
            .await
    }

    /// Brings `generation`'s local copy and Redis's in line for the segments `pass` selects:
    /// pulls them, ORs them in, pushes those where the local copy holds bits Redis lacks.
    /// `token` (a rebuild's fencing number, or empty) fences the pushes.
    pub(super) async fn sync_generation(
        &self,
        generation: u64,
        pass: Pass,
        token: &str,
        report: &mut ReconcileReport,
    ) -> Result<(), Error> {
        let dirty = self.ledger.take_dirty(generation);
        let result = self
            .sync_selected(generation, pass, token, &dirty, report)
            .await;
        if result.is_err() {
            // Not pushed: still owed.
            for s in dirty {
                self.ledger.mark_dirty(generation, s);
            }
        }
        result
    }

    async fn sync_selected(
        &self,
        generation: u64,
        pass: Pass,
        token: &str,
        dirty: &BTreeSet<u64>,
        report: &mut ReconcileReport,
    ) -> Result<(), Error> {
        let segments = self.segments();
        let groups = segments.div_ceil(SEGMENTS_PER_GROUP);
        // Per group: the segments to move, and the `all` count and node to record once they
        // are.
        let mut selected: BTreeMap<u64, Selected> = BTreeMap::new();
        for &s in dirty {
            selected.entry(group_of(s)).or_default().0.insert(s);
        }
        match pass {
            Pass::Everything => {
                for group in 0..groups {
                    selected
                        .entry(group)
                        .or_default()
                        .0
                        .extend(segments_of(group, segments));
                }
            }
            Pass::Changed => {
                for (group, state, moved) in self.moved_segments(generation).await? {
                    let entry = selected.entry(group).or_default();
                    entry.0.extend(moved);
                    entry.1 = Some(state);
                }
            }
            Pass::Digests => {
                for (group, state, differ) in self.differing_segments(generation).await? {
                    let entry = selected.entry(group).or_default();
                    entry.0.extend(differ);
                    entry.1 = Some(state);
                }
            }
        }
        let reports: Vec<ReconcileReport> = futures_util::stream::iter(selected)
            .map(|(group, (segments, state))| async move {
                let mut report = ReconcileReport::default();
                self.move_segments(generation, &segments, token, &mut report)
                    .await?;
                if let Some((all, node)) = state {
                    self.ledger.set_group(generation, group, all);
                    if let Some(node) = node {
                        self.ledger.set_node(generation, group, node);
                    }
                }
                Ok::<_, Error>(report)
            })
            .buffer_unordered(GROUPS_IN_FLIGHT)
            .try_collect()
            .await?;
        for part in reports {
            report.bytes_pulled += part.bytes_pulled;
            report.bytes_pushed += part.bytes_pushed;
            report.segments_pulled += part.segments_pulled;
            report.segments_pushed += part.segments_pushed;
        }
        Ok(())
    }

    /// Per group whose `all` count differs from the one held: its state and the segments
    /// whose versions differ from the held ones; every segment of a group whose node
    /// restarted (its versions may have gone back to ones held here, with other bits); the
    /// segments whose digests differ in a group whose node evicted keys, when this pass
    /// may compare (`Inner::may_compare_evictions`).
    async fn moved_segments(
        &self,
        generation: u64,
    ) -> Result<Vec<(u64, GroupState, Vec<u64>)>, Error> {
        let segments = self.segments();
        let moved = self
            .each_group(|group| async move {
                let mut conn = self.conn.clone();
                let key = self.keys.versions(generation, group);
                let (all, mut node) = group_state(&mut conn, &key, self.cfg.cluster).await?;
                let change = node
                    .as_deref()
                    .map(|server| self.ledger.node_change(generation, group, server));
                match change {
                    Some(NodeChange::Restarted) => {
                        tracing::warn!(prefix = %self.prefix, generation, group, "the cluster node holding a group restarted: moving all its segments");
                        return Ok(Some((
                            group,
                            (all, node),
                            segments_of(group, segments).collect(),
                        )));
                    }
                    // Eviction deletes whole keys, and a segment a write re-created since
                    // holds only that write's bits: the digests tell both.
                    Some(NodeChange::Evicted) if self.may_compare_evictions() => {
                        tracing::warn!(prefix = %self.prefix, generation, group, "the cluster node holding a group evicted keys: comparing its segments");
                        self.compared_evictions();
                        let differ = self
                            .group_differing(&mut conn, generation, group, &key)
                            .await?;
                        return Ok(Some((group, (all, node), differ)));
                    }
                    // Not now (see `may_compare_evictions`): keep vouching for the node's
                    // data as last compared, and move what the versions say.
                    Some(NodeChange::Evicted) => node = None,
                    Some(NodeChange::Same) | None => {}
                }
                if self.ledger.group_held(generation, group) == Some(all) {
                    return Ok(None);
                }
                let versions: HashMap<String, u64> = redis::cmd("HGETALL")
                    .arg(&key)
                    .query_async(&mut conn)
                    .await?;
                let all = versions.get("all").copied().unwrap_or(0);
                let moved = segments_of(group, segments)
                    .filter(|s| {
                        let version = versions.get(&s.to_string()).copied().unwrap_or(0);
                        version != self.ledger.seen(generation, *s)
                    })
                    .collect();
                Ok(Some((group, (all, node), moved)))
            })
            .await?;
        Ok(moved.into_iter().flatten().collect())
    }

    /// Per group: its `all` count (read before any of its segments) and the segments whose
    /// digest in Redis differs from the local copy's ([`group_differing`](Self::group_differing)).
    async fn differing_segments(
        &self,
        generation: u64,
    ) -> Result<Vec<(u64, GroupState, Vec<u64>)>, Error> {
        self.each_group(|group| async move {
            let mut conn = self.conn.clone();
            let versions = self.keys.versions(generation, group);
            let (all, node) = group_state(&mut conn, &versions, self.cfg.cluster).await?;
            let differ = self
                .group_differing(&mut conn, generation, group, &versions)
                .await?;
            Ok((group, (all, node), differ))
        })
        .await
    }

    /// The segments of `group` whose digest in Redis differs from the local copy's (version
    /// hash `versions`); those that match are recorded at the version read with their digest.
    async fn group_differing(
        &self,
        conn: &mut Conn,
        generation: u64,
        group: u64,
        versions: &str,
    ) -> Result<Vec<u64>, Error> {
        let per_call = (DIGEST_BYTES_PER_CALL / self.cfg.segment_bytes).max(1);
        let mut differ = Vec::new();
        let range: Vec<u64> = segments_of(group, self.segments()).collect();
        for chunk in range.chunks(per_call as usize) {
            let script = scripts::digests();
            let mut invocation = script.key(versions);
            for &s in chunk {
                invocation.key(self.keys.segment(generation, s));
            }
            for &s in chunk {
                invocation.arg(s);
            }
            let reply: Vec<String> = invocation.invoke_async(conn).await?;
            for (&s, pair) in chunk.iter().zip(reply.chunks_exact(2)) {
                let version: u64 = pair[0].parse().unwrap_or(0);
                if self.local_digest(generation, s).as_deref() == Some(pair[1].as_str()) {
                    self.ledger.set_seen(generation, s, version);
                } else {
                    differ.push(s);
                }
            }
        }
        Ok(differ)
    }

    /// The SHA-1 (hex) of segment `s` of the local copy of `generation`, without trailing
    /// zero bytes: what `redis.sha1hex` gives for the same bits.
    fn local_digest(&self, generation: u64, s: u64) -> Option<String> {
        let filter = self.filter_of(generation)?;
        let filter = filter.as_plain()?;
        let bytes = segment_bytes_of(filter, s, self.cfg.segment_bytes);
        Some(sha1_smol::Sha1::from(&bytes).digest().to_string())
    }

    /// Pulls `segments` (one group's) of `generation` with their versions, read together,
    /// ORs them into the local copy, and pushes back each one where the local copy holds
    /// bits Redis lacks.
    async fn move_segments(
        &self,
        generation: u64,
        segments: &BTreeSet<u64>,
        token: &str,
        report: &mut ReconcileReport,
    ) -> Result<(), Error> {
        let Some(&first) = segments.first() else {
            return Ok(());
        };
        let group = group_of(first);
        let versions_key = self.keys.versions(generation, group);
        let mut conn = self.conn.clone();
        let mut pipe = redis::pipe();
        pipe.atomic();
        for &s in segments {
            pipe.cmd("HGET").arg(&versions_key).arg(s);
            pipe.cmd("GET").arg(self.keys.segment(generation, s));
        }
        let replies: Vec<(Option<u64>, Option<Vec<u8>>)> = {
            let flat: Vec<redis::Value> = pipe.query_async(&mut conn).await?;
            flat.chunks_exact(2)
                .map(|pair| {
                    Ok((
                        redis::from_redis_value(&pair[0])?,
                        redis::from_redis_value(&pair[1])?,
                    ))
                })
                .collect::<redis::RedisResult<_>>()?
        };
        let words_per_segment = (self.cfg.segment_bytes / 8) as usize;
        for (&s, (version, remote)) in segments.iter().zip(replies) {
            let version = version.unwrap_or(0);
            let remote = remote.unwrap_or_default();
            report.bytes_pulled += remote.len() as u64;
            report.segments_pulled += 1;
            let Some(filter) = self.filter_of(generation) else {
                return Ok(()); // switched meanwhile
            };
            let filter = filter.as_plain().ok_or(Error::ShapeChanged)?;
            let first = s as usize * words_per_segment;
            let count = words_per_segment.min(filter.num_words().saturating_sub(first));
            let remote_words = held_words(&remote, first, count, filter.num_bits());
            self.absorb_pulled(generation, filter, first, &remote_words);
            // Pushed only if the local copy holds bits Redis lacks: bits Redis holds that no
            // filter of this shape can (the padding above m, bytes past the last word) are
            // no reason to push, and a push (an OR) would not clear them anyway
            // (`classic_padding.rs`
            // `padding_bits_written_into_a_segment_are_masked_and_not_pushed_forever`).
            if !holds_bits_missing_from(filter, first, count, &remote_words) {
                self.ledger.set_seen(generation, s, version);
                continue;
            }
            let local = segment_bytes_of(filter, s, self.cfg.segment_bytes);
            let written: Written = scripts::or_segment()
                .key(self.keys.segment(generation, s))
                .key(self.keys.scratch(generation, group, self.id))
                .key(&versions_key)
                .key(self.keys.group_fence(generation, group))
                .arg(token)
                .arg(&local)
                .arg(s)
                .invoke_async(&mut conn)
                .await?;
            let Written::At(after) = written else {
                return Err(Error::Fenced);
            };
            // Nobody else wrote in between: what Redis holds now is what we hold.
            self.ledger.set_seen(
                generation,
                s,
                if after == version + 1 { after } else { version },
            );
            report.bytes_pushed += local.len() as u64;
            report.segments_pushed += 1;
        }
        Ok(())
    }

    /// Empties `generation`'s groups in Redis for a rebuild holding fencing number `fence`
    /// (before it is announced, so no instance's double-writes are deleted).
    pub(super) async fn reset_groups(&self, generation: u64, fence: u64) -> Result<(), Error> {
        let segments = self.segments();
        self.each_group(|group| async move {
            let mut conn = self.conn.clone();
            let script = scripts::reset_group();
            let mut invocation = script.key(self.keys.group_fence(generation, group));
            invocation.key(self.keys.versions(generation, group));
            for s in segments_of(group, segments) {
                invocation.key(self.keys.segment(generation, s));
            }
            invocation.arg(fence);
            for s in segments_of(group, segments) {
                invocation.arg(s);
            }
            match invocation.invoke_async(&mut conn).await? {
                scripts::Lock::Held => Ok(()),
                scripts::Lock::Lost => Err(Error::Fenced),
            }
        })
        .await?;
        Ok(())
    }

    /// Lets `generation`'s keys in Redis expire after `grace_ms` (it no longer serves).
    pub(super) async fn expire_groups(&self, generation: u64, grace_ms: u64) -> Result<(), Error> {
        let segments = self.segments();
        self.each_group(|group| async move {
            let mut conn = self.conn.clone();
            let mut pipe = redis::pipe();
            for key in segments_of(group, segments)
                .map(|s| self.keys.segment(generation, s))
                .chain([
                    self.keys.versions(generation, group),
                    self.keys.group_fence(generation, group),
                ])
            {
                pipe.cmd("PEXPIRE").arg(key).arg(grace_ms).ignore();
            }
            pipe.query_async::<()>(&mut conn).await?;
            Ok(())
        })
        .await?;
        Ok(())
    }
}

/// The words of a segment pulled from Redis (`remote`, its bytes) that a filter of `num_bits`
/// bits holds, from its word `first` on: at most `count` (bytes past them are not the
/// filter's), and without the padding of the filter's last word (its bits at and above m,
/// which no key sets and a snapshot must hold as 0); trailing zero words dropped.
fn held_words(remote: &[u8], first: usize, count: usize, num_bits: u64) -> Vec<u64> {
    let mut words = protocol::bytes_to_words(remote, count);
    let last = (num_bits.div_ceil(64) as usize).saturating_sub(1);
    let used = num_bits % 64;
    if used != 0 {
        if let Some(word) = last.checked_sub(first).and_then(|i| words.get_mut(i)) {
            *word &= (1u64 << used) - 1;
        }
    }
    while words.last() == Some(&0) {
        words.pop();
    }
    words
}

/// Whether `filter`'s words `first..first + count` hold a bit that `remote` (the same
/// words pulled from Redis, as [`held_words`] gives them) lacks.
fn holds_bits_missing_from(
    filter: &BloomFilter,
    first: usize,
    count: usize,
    remote: &[u64],
) -> bool {
    filter
        .words_in(first..first + count)
        .enumerate()
        .any(|(i, local)| local & !remote.get(i).copied().unwrap_or(0) != 0)
}

/// Segment `s` of `filter` as stored in Redis: its words' little-endian bytes, without
/// trailing zero bytes.
pub(super) fn segment_bytes_of(filter: &BloomFilter, s: u64, segment_bytes: u64) -> Vec<u8> {
    let words_per_segment = (segment_bytes / 8) as usize;
    let first = s as usize * words_per_segment;
    let mut bytes: Vec<u8> = filter
        .words_in(first..first + words_per_segment)
        .flat_map(u64::to_le_bytes)
        .collect();
    while bytes.last() == Some(&0) {
        bytes.pop();
    }
    bytes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_received_write_advances_only_from_the_version_just_before() {
        let ledger = Ledger::new(130); // three groups
        ledger.set_group(1, 0, 4);
        ledger.set_seen(1, 5, 2);
        // Generation 1's group 0 and segment 5 receive a write: what each holds then.
        let receive = |group: u64, segment: u64, held: u64, seen: u64| {
            ledger.advance(1, &[(0, group)], &[(5, segment)]);
            assert_eq!(ledger.group_held(1, 0), Some(held));
            assert_eq!(ledger.seen(1, 5), seen);
        };
        // The write right after what is held: held now.
        receive(5, 3, 5, 3);
        // One missed in between (version 4 not arrived yet): nothing moves...
        receive(7, 5, 5, 3);
        // ... until it arrives (published after the later one): then both are held.
        receive(6, 4, 7, 5);
        // A write never received leaves the later ones waiting: the pass pulls...
        receive(9, 7, 7, 5);
        // ... and once a pass holds the missing one, the later ones count.
        ledger.set_seen(1, 5, 6);
        ledger.set_group(1, 0, 8);
        assert_eq!(ledger.seen(1, 5), 7);
        assert_eq!(ledger.group_held(1, 0), Some(9));
        // An unknown group stays unknown; a generation not followed gets no book.
        ledger.advance(1, &[(2, 1)], &[]);
        assert_eq!(ledger.group_held(1, 2), None);
        ledger.advance(9, &[(0, 1)], &[(0, 1)]);
        assert!(!lock(&ledger.books).contains_key(&9));
    }

    #[test]
    fn dirty_marks_are_taken_once_and_survive_forgetting_versions() {
        let ledger = Ledger::new(8);
        // Segments of 16 bytes: bits 0 and 200 are in segments 0 and 1.
        ledger.mark_bits_dirty(1, &[0, 200], 16);
        ledger.set_seen(1, 0, 3);
        ledger.forget_versions();
        assert_eq!(ledger.seen(1, 0), 0);
        assert_eq!(ledger.take_dirty(1), BTreeSet::from([0, 1]));
        assert!(ledger.take_dirty(1).is_empty());
    }

    /// A pulled segment keeps only what a filter of m bits can hold: no padding above m in
    /// its last word, no bytes past it; and the padding it held is no reason to push.
    #[test]
    fn pulled_words_lose_the_padding_above_m_and_the_bytes_past_the_end() {
        // m = 200: 4 words, bits 200..256 of word 3 are padding.
        let mut remote = vec![0u8; 40];
        remote[24] = 0x01; // bit 192: below m
        remote[25..32].fill(0xFF); // bits 200..256: padding
        remote[32..].fill(0xFF); // past the last word
        assert_eq!(held_words(&remote, 0, 4, 200), [0, 0, 0, 0x01]);
        // A segment of two words starting at word 2 (the last one at index 1).
        assert_eq!(held_words(&remote[16..], 2, 2, 200), [0, 0x01]);
        // Only padding: nothing held.
        assert!(held_words(&(!0xFFu64).to_le_bytes(), 3, 1, 200).is_empty());
        // No padding when m is a multiple of 64, and not in a segment before the last word.
        assert_eq!(held_words(&[0xFF; 8], 3, 1, 256), [!0]);
        assert_eq!(held_words(&[0xFF; 8], 0, 1, 200), [!0]);

        let filter = BloomFilter::builder()
            .bits(200)
            .hashes(1)
            .layout(bloom_core::Layout::Classic)
            .build()
            .unwrap();
        let remote_words = held_words(&remote, 0, 4, 200);
        filter.union_words(0, &remote_words);
        assert!(!holds_bits_missing_from(&filter, 0, 4, &remote_words));
        assert!(BloomFilter::from_bytes(&filter.to_bytes()).is_ok());
        filter.union_words(1, &[1]);
        assert!(holds_bits_missing_from(&filter, 0, 4, &remote_words));
        assert!(!holds_bits_missing_from(&filter, 2, 2, &remote_words[2..]));
    }

    #[test]
    fn local_segments_are_stored_without_trailing_zeros() {
        let filter = BloomFilter::builder()
            .bits(1024)
            .hashes(1)
            .layout(bloom_core::Layout::Classic)
            .build()
            .unwrap();
        filter.union_words(2, &[0x0102]);
        // Segments of 16 bytes (2 words): word 2 is the first of segment 1.
        assert_eq!(segment_bytes_of(&filter, 1, 16), vec![0x02, 0x01]);
        assert!(segment_bytes_of(&filter, 0, 16).is_empty());
        assert!(segment_bytes_of(&filter, 99, 16).is_empty());
    }
}
