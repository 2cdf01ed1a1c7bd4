//! Loom model of the windowed filter's rotation: a lookup running while an insert rotates
//! to a new epoch (publishing it and clearing the generation that left the window) still
//! finds a key inserted within the window.
//! Run: `RUSTFLAGS="--cfg loom" cargo test -p bloomguard-core --release --test loom_windowed`
//!
//! Mutation that fails it: `WindowedFilter::advance_to` clearing the generation of the new
//! epoch − 1 (a generation still in the window) instead of the new spare.
#![cfg(loom)]

use std::sync::Arc as StdArc;
use std::time::Duration;

use bloom_core::windowed::{ManualClock, Window, WindowedFilter};
use loom::sync::Arc;
use loom::thread;

#[test]
fn a_lookup_during_a_rotation_finds_a_key_inside_the_window() {
    let mut model = loom::model::Builder::new();
    model.preemption_bound = Some(2);
    model.check(|| {
        // N = 2: W = T = 1 s; generations 0, 1 and the spare 2.
        let clock = StdArc::new(ManualClock::new(0));
        let filter = Arc::new(
            WindowedFilter::builder(Window::Time(Duration::from_secs(1)))
                .expected_items(4)
                .false_positive_rate(0.01)
                .generations(2)
                .layout(bloom_core::Layout::Classic) // one 64-bit word per generation
                .clock(clock.clone())
                .seed(3)
                .build()
                .unwrap(),
        );
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
