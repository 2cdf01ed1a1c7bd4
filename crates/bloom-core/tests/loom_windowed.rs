//! Loom model of the windowed filter's rotation: a lookup running while an insert rotates
//! to a new epoch (publishing it and clearing the generation that left the window) still
//! finds a key inserted within the window; and two inserts crossing into the new epoch at
//! once (one rotating, one waiting for it or finding it done) both keep their key. Each is
//! checked with a generation of one word (Classic) and with the default layout, SplitBlock
//! (a line of eight words per generation, every one of them cleared by the rotation), in
//! separate generations and interleaved (one array, the spare's line between the others').
//! Run: `RUSTFLAGS="--cfg loom" cargo test -p bloomguard-core --release --test loom_windowed`
//!
//! Mutations that fail it: `WindowedFilter::advance_to` clearing the generation of the new
//! epoch − 1 (a generation still in the window) instead of the new spare (the first model);
//! clearing the generation of the new epoch itself (the second: the key the waiting insert
//! put there is wiped); an interleaved ring clearing line `first + 1` on instead of `first`
//! (a neighbour's line).
#![cfg(loom)]

use std::sync::Arc as StdArc;
use std::time::Duration;

use bloom_core::Layout;
use bloom_core::windowed::{ManualClock, RingLayout, Window, WindowedFilter};
use loom::sync::Arc;
use loom::thread;

/// N = 2: W = T = 1 s; generations 0, 1 and the spare 2; SplitBlock rings in `ring`'s
/// layout (Classic ones are always separate).
fn filter(layout: Layout, ring: RingLayout, clock: &StdArc<ManualClock>) -> Arc<WindowedFilter> {
    Arc::new(
        WindowedFilter::builder(Window::Time(Duration::from_secs(1)))
            .expected_items(4)
            .false_positive_rate(0.01)
            .generations(2)
            .layout(layout)
            .ring_layout(ring)
            .clock(clock.clone())
            .seed(3)
            .build()
            .unwrap(),
    )
}

fn a_lookup_during_a_rotation(layout: Layout, ring: RingLayout) {
    let mut model = loom::model::Builder::new();
    model.preemption_bound = Some(2);
    model.check(move || {
        let clock = StdArc::new(ManualClock::new(0));
        let filter = filter(layout, ring, &clock);
        filter.insert("kept"); // epoch 0
        let reader = {
            let f = filter.clone();
            thread::spawn(move || assert!(f.contains("kept"), "a key inside the window was missed"))
        };
        clock.set(1_000); // epoch 1: "kept" is inside the window until 2 s
        filter.insert("new"); // rotates to epoch 1, clearing the spare
        reader.join().unwrap();
        assert!(filter.contains("kept") && filter.contains("new"));
        assert_eq!(filter.epoch(), 1);
    });
}

fn two_inserts_crossing_into_a_new_epoch(layout: Layout, ring: RingLayout) {
    let mut model = loom::model::Builder::new();
    model.preemption_bound = Some(2);
    model.check(move || {
        let clock = StdArc::new(ManualClock::new(0));
        let filter = filter(layout, ring, &clock);
        // Epochs 0, 1, 2, one key each: every generation of the ring is allocated before the
        // threads start (std's `OnceLock`, which allocates one, is not modelled by loom).
        for (epoch, key) in ["old", "kept", "warm"].into_iter().enumerate() {
            clock.set(epoch as u64 * 1_000);
            filter.insert(key);
        }
        // Epoch 3: both inserts below cross into it; one rotates (publishing 3, clearing the
        // generation of epoch 1, the new spare), the other waits for it or finds it done. The
        // generation of epoch 3 is the one cleared when 2 began.
        clock.set(3_000);
        let other = {
            let f = filter.clone();
            thread::spawn(move || {
                f.insert("b");
            })
        };
        filter.insert("a");
        other.join().unwrap();
        for key in ["warm", "a", "b"] {
            assert!(filter.contains(key), "{key} was lost by the rotation");
        }
        assert_eq!(filter.epoch(), 3);
    });
}

#[test]
fn a_lookup_during_a_rotation_finds_a_key_inside_the_window() {
    a_lookup_during_a_rotation(Layout::Classic, RingLayout::Separate); // one 64-bit word per generation
}

#[test]
fn a_lookup_during_a_rotation_finds_a_key_inside_the_window_split_block() {
    a_lookup_during_a_rotation(Layout::SplitBlock, RingLayout::Separate);
}

/// The ring's lines side by side: the rotation's strided clear of the spare's lines runs
/// while the lookup reads the lines next to them.
#[test]
fn a_lookup_during_a_rotation_finds_a_key_inside_the_window_interleaved() {
    a_lookup_during_a_rotation(Layout::SplitBlock, RingLayout::Interleaved);
}

#[test]
fn two_inserts_crossing_into_a_new_epoch_both_keep_their_key() {
    two_inserts_crossing_into_a_new_epoch(Layout::Classic, RingLayout::Separate);
}

#[test]
fn two_inserts_crossing_into_a_new_epoch_both_keep_their_key_split_block() {
    two_inserts_crossing_into_a_new_epoch(Layout::SplitBlock, RingLayout::Separate);
}

#[test]
fn two_inserts_crossing_into_a_new_epoch_both_keep_their_key_interleaved() {
    two_inserts_crossing_into_a_new_epoch(Layout::SplitBlock, RingLayout::Interleaved);
}
