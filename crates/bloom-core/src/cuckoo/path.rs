//! Making room: a breadth-first search for the shortest chain of moves that ends in a free
//! slot (libcuckoo's BFS), then the moves, last first, each under the stripes of the two
//! buckets it touches.
//!
//! Rules (the proof is in the module docs of `cuckoo`):
//! * The search only reads; a move re-checks, under its stripes, that its fingerprint is
//!   still in its source and that its destination still has a free slot, and otherwise stops
//!   the chain (the insert searches again).
//! * A move writes the destination and empties the source while holding both stripes, so
//!   between holds every fingerprint is in one of its two buckets and a validated lookup
//!   never sees the middle of a move (`tests/loom_cuckoo.rs`).
//! * Nothing is ever taken out of the table to make room: an insert that finds no chain
//!   fails and changes nothing (`a_full_filter_refuses_and_keeps_every_key`).

use super::bucket;
use super::filter::CuckooFilter;

/// Buckets the search visits at most: two roots and four levels of four children each, so a
/// chain is at most four moves (`tests/cuckoo.rs` measures the load reached with it).
pub(crate) const MAX_VISITS: usize = 2 + 8 + 32 + 128 + 512;

/// One move: fingerprint `fp` from bucket `from` to its other bucket `to`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Move {
    pub(crate) from: u64,
    pub(crate) to: u64,
    pub(crate) fp: u32,
}

#[derive(Clone, Copy)]
struct Visit {
    bucket: u64,
    /// The visit this one was reached from (`u32::MAX` for a root).
    parent: u32,
    /// The fingerprint that would move from the parent's bucket into this one.
    fp: u32,
}

impl CuckooFilter {
    /// The moves that free a slot in `a` or `b`, first move first (empty if one is free
    /// already), or `None` if no chain within [`MAX_VISITS`] ends in a free slot.
    pub(crate) fn find_room(&self, a: u64, b: u64) -> Option<Vec<Move>> {
        let shape = self.table.shape();
        let mut visits: Vec<Visit> = Vec::with_capacity(64);
        visits.push(Visit {
            bucket: a,
            parent: u32::MAX,
            fp: 0,
        });
        if b != a {
            visits.push(Visit {
                bucket: b,
                parent: u32::MAX,
                fp: 0,
            });
        }
        let mut next = 0;
        while next < visits.len() {
            let visit = visits[next];
            let fps = shape.decode(self.table.load(visit.bucket));
            if fps.contains(&0) {
                return Some(chain(&visits, next));
            }
            for (j, &fp) in fps.iter().enumerate() {
                // A fingerprint held twice moves the same way: try it once.
                if fps[..j].contains(&fp) {
                    continue;
                }
                let to = self.other_bucket(visit.bucket, fp);
                if to != visit.bucket && visits.len() < MAX_VISITS {
                    visits.push(Visit {
                        bucket: to,
                        parent: next as u32,
                        fp,
                    });
                }
            }
            next += 1;
        }
        None
    }

    /// Carries out `moves` last first, so each lands in a slot the one after it freed.
    /// `false` if one no longer applies (another writer got there first): nothing is lost,
    /// the moves made so far each left their fingerprint in its other bucket.
    pub(crate) fn make_room(&self, moves: &[Move]) -> bool {
        moves.iter().rev().all(|m| self.move_one(*m))
    }

    fn move_one(&self, m: Move) -> bool {
        let shape = self.table.shape();
        let _held = self.table.lock_pair(m.from, m.to);
        let (from_bits, to_bits) = (self.table.load(m.from), self.table.load(m.to));
        let Some(emptied) = bucket::with_removed(shape.decode(from_bits), m.fp) else {
            return false;
        };
        let Some(filled) = bucket::with_added(shape.decode(to_bits), m.fp) else {
            return false;
        };
        // Destination first, so an unvalidated read between the two writes (the path
        // search, a lookup's "yes") finds the fingerprint in both, never in neither. The
        // proof rests on the stripes, not on this order.
        self.table.store(m.to, to_bits, shape.encode(filled));
        self.table.store(m.from, from_bits, shape.encode(emptied));
        true
    }
}

/// The moves from a root to `visits[end]`, first move first.
fn chain(visits: &[Visit], end: usize) -> Vec<Move> {
    let mut moves = Vec::new();
    let mut at = end;
    while visits[at].parent != u32::MAX {
        let parent = visits[at].parent as usize;
        moves.push(Move {
            from: visits[parent].bucket,
            to: visits[at].bucket,
            fp: visits[at].fp,
        });
        at = parent;
    }
    moves.reverse();
    moves
}
