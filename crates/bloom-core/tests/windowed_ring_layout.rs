//! The two ring layouts of a windowed filter (`windowed/ring.rs`): separate generations and
//! interleaved ones hold the same bits, answer alike and write the same files; which one a
//! filter gets, built or read.
//!
//! The window's guarantees themselves run on both layouts in `tests/windowed.rs`,
//! `tests/windowed_batch.rs` and `tests/loom_windowed.rs`.

use std::sync::Arc;
use std::time::Duration;

use bloom_core::windowed::{
    INTERLEAVE_FROM_BYTES, ManualClock, RingLayout, Window, WindowedBuilder, WindowedFilter,
};
use bloom_core::{BuildError, Layout};

const START_MS: u64 = 1_700_000_000_000;

/// A filter of `builder` in each layout, with the same hash key.
fn pair(builder: WindowedBuilder) -> [WindowedFilter; 2] {
    [RingLayout::Separate, RingLayout::Interleaved].map(|ring| {
        let f = builder
            .clone()
            .ring_layout(ring)
            .seed(0x1A7E)
            .build()
            .unwrap();
        assert_eq!(f.ring_layout(), ring);
        f
    })
}

/// The same inserts into a separate and an interleaved ring, over several rotations of a
/// time window (the clock turning a third of a period at a time) and of a count window, in
/// each layout with lines and at N = 2, 4 and 8: every lookup and batch answers alike, the
/// statistics are equal, and both write the same file and the same generation files.
#[test]
fn both_layouts_answer_alike_and_write_the_same_file() {
    for layout in [Layout::SplitBlock, Layout::Blocked] {
        for generations in [2u32, 4, 8] {
            for timed in [true, false] {
                let clock = Arc::new(ManualClock::new(START_MS));
                let window = if timed {
                    Window::Time(Duration::from_secs(60))
                } else {
                    Window::Count(2_000)
                };
                let [separate, interleaved] = pair(
                    WindowedFilter::builder(window)
                        .expected_items(2_000)
                        .false_positive_rate(0.01)
                        .generations(generations)
                        .layout(layout)
                        .clock(clock.clone()),
                );
                let what = format!("{layout:?}, N = {generations}, timed {timed}");
                let step = Duration::from_millis(separate.period() / 3 + 1);
                for round in 0..20u64 {
                    for i in 0..500 {
                        let key = round * 500 + i;
                        assert_eq!(separate.insert(&key), interleaved.insert(&key), "{what}");
                    }
                    let mut seen = [Vec::new(), Vec::new()];
                    for (f, seen) in [&separate, &interleaved].into_iter().zip(&mut seen) {
                        f.seen_or_insert_many_with(round * 400..round * 400 + 300, |s| {
                            seen.push(s)
                        });
                    }
                    assert_eq!(seen[0], seen[1], "{what}, round {round}");
                    let probes: Vec<u64> = (0..12_000).chain(1 << 40..(1 << 40) + 5_000).collect();
                    let answers = separate.contains_many(probes.iter());
                    assert_eq!(answers, interleaved.contains_many(probes.iter()), "{what}");
                    let one_by_one: Vec<bool> =
                        probes.iter().map(|k| interleaved.contains(k)).collect();
                    assert_eq!(answers, one_by_one, "{what}");
                    assert_eq!(separate.count_ones(), interleaved.count_ones(), "{what}");
                    assert_eq!(
                        separate.current_fpr().to_bits(),
                        interleaved.current_fpr().to_bits(),
                        "{what}"
                    );
                    assert_eq!(
                        separate.estimated_items().to_bits(),
                        interleaved.estimated_items().to_bits(),
                        "{what}"
                    );
                    assert_eq!(
                        separate.to_bytes(),
                        interleaved.to_bytes(),
                        "{what}, round {round}"
                    );
                    assert_eq!(separate.epochs_with_keys(), interleaved.epochs_with_keys());
                    for epoch in separate.epochs_with_keys() {
                        let (mut a, mut b) = (Vec::new(), Vec::new());
                        separate.write_generation_to(epoch, &mut a).unwrap();
                        interleaved.write_generation_to(epoch, &mut b).unwrap();
                        assert_eq!(a, b, "{what}, epoch {epoch}");
                    }
                    if timed {
                        clock.advance(step);
                    }
                }
                assert!(
                    separate.epoch() >= 5,
                    "{what}: only {} rotations",
                    separate.epoch()
                );
            }
        }
    }
}

/// Without a choice, a ring of at least `INTERLEAVE_FROM_BYTES` with lines is interleaved and
/// a smaller one (a per-user filter) or a Classic one is separate; a choice is kept, by
/// `fresh` and `to_builder` too; interleaving Classic is refused with its own error.
#[test]
fn the_ring_layout_follows_the_size_unless_chosen() {
    let sized = |n: u64, layout: Layout| {
        WindowedFilter::builder(Window::Count(n))
            .expected_items(n)
            .false_positive_rate(0.01)
            .layout(layout)
    };
    let small = sized(1_000, Layout::SplitBlock).build().unwrap();
    assert!(small.size_in_bytes() < INTERLEAVE_FROM_BYTES);
    assert_eq!(small.ring_layout(), RingLayout::Separate);
    for layout in [Layout::SplitBlock, Layout::Blocked] {
        let large = sized(1_000_000, layout).build().unwrap();
        assert!(large.size_in_bytes() >= INTERLEAVE_FROM_BYTES);
        assert_eq!(large.ring_layout(), RingLayout::Interleaved, "{layout:?}");
        let chosen = sized(1_000_000, layout)
            .ring_layout(RingLayout::Separate)
            .build()
            .unwrap();
        assert_eq!(chosen.ring_layout(), RingLayout::Separate);
        assert_eq!(chosen.fresh().unwrap().ring_layout(), RingLayout::Separate);
        assert_eq!(
            chosen.to_builder().build().unwrap().ring_layout(),
            RingLayout::Separate
        );
        let interleaved_small = sized(1_000, layout)
            .ring_layout(RingLayout::Interleaved)
            .build()
            .unwrap();
        assert_eq!(
            interleaved_small.fresh().unwrap().ring_layout(),
            RingLayout::Interleaved
        );
    }
    let classic = sized(1_000_000, Layout::Classic).build().unwrap();
    assert_eq!(classic.ring_layout(), RingLayout::Separate);
    let refused = sized(1_000, Layout::Classic)
        .ring_layout(RingLayout::Interleaved)
        .build();
    assert!(matches!(refused, Err(BuildError::InterleavedClassic)));
}

/// A new interleaved ring (allocated with the filter, zeroed) answers as an empty one until
/// its first key: no key found, statistics of an empty filter, no generation to store.
#[test]
fn an_interleaved_ring_answers_empty_until_its_first_key() {
    let f = WindowedFilter::builder(Window::Count(1_000))
        .expected_items(1_000)
        .false_positive_rate(0.01)
        .ring_layout(RingLayout::Interleaved)
        .build()
        .unwrap();
    assert!(!f.contains("a"));
    assert_eq!(f.contains_many(["a", "b"]), [false, false]);
    assert_eq!((f.count_ones(), f.estimated_items()), (0, 0.0));
    assert!(f.epochs_with_keys().is_empty());
    f.insert("a");
    assert!(f.contains("a"));
    assert_eq!(f.epochs_with_keys(), [0]);
}

/// `into_ring_layout` both ways, over a time window that has rotated: the filter keeps its
/// answers, its file (epoch, inserts, every generation), and goes on rotating alike; an
/// empty ring changes layout without allocating; Classic is not interleaved.
#[test]
fn a_ring_changes_layout_and_keeps_everything() {
    for from in [RingLayout::Separate, RingLayout::Interleaved] {
        let to = match from {
            RingLayout::Separate => RingLayout::Interleaved,
            RingLayout::Interleaved => RingLayout::Separate,
        };
        let clock = Arc::new(ManualClock::new(START_MS));
        let build = || {
            WindowedFilter::builder(Window::Time(Duration::from_secs(30)))
                .expected_items(3_000)
                .false_positive_rate(0.01)
                .ring_layout(from)
                .clock(clock.clone())
                .seed(0xC0)
                .build()
                .unwrap()
        };
        let (kept, changed) = (build(), build());
        let empty = build().into_ring_layout(to).unwrap();
        assert_eq!((empty.ring_layout(), empty.count_ones()), (to, 0));
        for round in 0..6u64 {
            for i in 0..400 {
                kept.insert(&(round * 400 + i));
                changed.insert(&(round * 400 + i));
            }
            clock.advance(Duration::from_secs(7));
        }
        let changed = changed.into_ring_layout(to).unwrap();
        assert_eq!(changed.ring_layout(), to);
        let probes: Vec<u64> = (0..3_000).chain(1 << 40..(1 << 40) + 3_000).collect();
        assert_eq!(
            kept.contains_many(&probes),
            changed.contains_many(&probes),
            "{from:?}"
        );
        assert_eq!(kept.to_bytes(), changed.to_bytes(), "{from:?}");
        assert_eq!(
            (kept.epoch(), kept.inserts()),
            (changed.epoch(), changed.inserts())
        );
        for round in 6..12u64 {
            for i in 0..400 {
                assert_eq!(
                    kept.insert(&(round * 400 + i)),
                    changed.insert(&(round * 400 + i))
                );
            }
            clock.advance(Duration::from_secs(7));
            assert_eq!(kept.contains_many(&probes), changed.contains_many(&probes));
        }
        assert_eq!(
            kept.to_bytes(),
            changed.to_bytes(),
            "{from:?} after rotating on"
        );
    }
    let classic = WindowedFilter::builder(Window::Count(100))
        .expected_items(100)
        .false_positive_rate(0.01)
        .layout(Layout::Classic)
        .build()
        .unwrap();
    assert!(matches!(
        classic.into_ring_layout(RingLayout::Interleaved),
        Err(BuildError::InterleavedClassic)
    ));
}
