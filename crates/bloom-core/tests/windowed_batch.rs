//! `WindowedFilter::contains_many_with` (`windowed/batch.rs`): the batch answers what
//! `contains` answers, key by key, over time windows (on a `ManualClock`, with the clock
//! left past the stored epoch and jumping whole windows) and count windows; a key inside the
//! window is always found; and a batch during which the filter rotates still finds every key
//! that stays inside the window.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use bloom_core::windowed::{ManualClock, RingLayout, Window, WindowedFilter};
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::test_runner::RngSeed;

fn config() -> ProptestConfig {
    ProptestConfig {
        cases: 512,
        // Fixed seed: a failure reproduces without a regressions file in the source tree.
        rng_seed: RngSeed::Fixed(0x0B47_C4ED),
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

/// Keys are drawn from `0..KEYS`; batches ask `0..2 * KEYS`, so half never went in.
const KEYS: u64 = 48;
/// The time window, ms.
const WINDOW_MS: u64 = 1_000;
/// The count window, inserts.
const WINDOW_COUNT: u64 = 60;
const START_MS: u64 = 1_700_000_000_000;

#[derive(Clone, Debug)]
enum Op {
    Insert(u64),
    /// Moves the clock on by this many ms (a time window; a count window ignores it).
    Advance(u64),
    /// A batch lookup of these keys.
    Batch(Vec<u64>),
}

/// Either ring layout: each answers alike (`windowed/ring.rs`).
fn ring_layout() -> impl Strategy<Value = RingLayout> {
    prop_oneof![Just(RingLayout::Separate), Just(RingLayout::Interleaved)]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0..KEYS).prop_map(Op::Insert),
        // Within a period, across one or a few, and (rarely) past the whole window.
        2 => prop_oneof![0..200u64, 200..1_500u64, 1_500..4_000u64].prop_map(Op::Advance),
        1 => vec(0..2 * KEYS, 0..40).prop_map(Op::Batch),
    ]
}

/// A filter of `generations` over the time window (`timed`) or the count window, laid out
/// as `ring`; small, so that false positives occur and the answers compare them too.
fn build(
    timed: bool,
    generations: u32,
    ring: RingLayout,
    clock: &Arc<ManualClock>,
) -> WindowedFilter {
    let window = if timed {
        Window::Time(Duration::from_millis(WINDOW_MS))
    } else {
        Window::Count(WINDOW_COUNT)
    };
    WindowedFilter::builder(window)
        .expected_items(40)
        .false_positive_rate(0.05)
        .generations(generations)
        .ring_layout(ring)
        .clock(clock.clone())
        .seed(0xBA7C)
        .build()
        .unwrap()
}

/// The keys a lookup now must find: for a time window, inserted less than `W` ago by the
/// clock; for a count window, with at most `W` inserts after theirs.
fn must_find(
    timed: bool,
    last_insert: &HashMap<u64, u64>,
    now_ms: u64,
    inserts: u64,
) -> impl Fn(u64) -> bool + '_ {
    move |key| match last_insert.get(&key) {
        None => false,
        Some(&at) if timed => now_ms - at < WINDOW_MS,
        Some(&seq) => inserts - 1 - seq <= WINDOW_COUNT,
    }
}

/// Every one of `keys` that `inside` says must be found was answered `true`.
fn every_key_inside_found(
    keys: &[u64],
    answers: &[bool],
    inside: impl Fn(u64) -> bool,
) -> Result<(), TestCaseError> {
    for (key, found) in keys.iter().zip(answers) {
        prop_assert!(
            *found || !inside(*key),
            "key {} inside the window missed",
            key
        );
    }
    Ok(())
}

/// Runs `ops` on a fresh filter; at each batch, checks its answers against `contains` and the
/// window's rule. Returns a failure message, if any.
fn run(timed: bool, generations: u32, ring: RingLayout, ops: &[Op]) -> Result<(), TestCaseError> {
    let clock = Arc::new(ManualClock::new(START_MS));
    let f = build(timed, generations, ring, &clock);
    // key → the time (ms) or the sequence number of its last insert.
    let mut last_insert = HashMap::new();
    let mut now = START_MS;
    let mut inserts = 0u64;
    for op in ops {
        match op {
            Op::Insert(key) => {
                f.insert(key);
                last_insert.insert(*key, if timed { now } else { inserts });
                inserts += 1;
            }
            Op::Advance(ms) => {
                if timed {
                    now += ms;
                    clock.set(now);
                }
            }
            Op::Batch(keys) => {
                let one_by_one: Vec<bool> = keys.iter().map(|k| f.contains(k)).collect();
                let mut batch = Vec::new();
                f.contains_many_with(keys.iter(), |found| batch.push(found));
                prop_assert_eq!(&batch, &one_by_one, "keys {:?}", keys);
                prop_assert_eq!(&f.contains_many(keys), &one_by_one);
                let inside = must_find(timed, &last_insert, now, inserts);
                every_key_inside_found(keys, &batch, inside)?;
            }
        }
    }
    Ok(())
}

/// Keys `0..KEYS` inserted over a few periods, then one batch of every key (and as many
/// never inserted) during which, after `at` answers, the clock moves on by `advance_ms` and an
/// insert rotates the filter (a count window: `advance` inserts). Every key still inside
/// the window after the rotation is found.
fn rotate_during_batch(
    timed: bool,
    generations: u32,
    ring: RingLayout,
    spread_ms: u64,
    at: usize,
    advance: u64,
) -> Result<(), TestCaseError> {
    let clock = Arc::new(ManualClock::new(START_MS));
    let f = build(timed, generations, ring, &clock);
    let mut last_insert = HashMap::new();
    let mut now = START_MS;
    let mut inserts = 0u64;
    for key in 0..KEYS {
        if timed {
            now += spread_ms;
            clock.set(now);
        }
        f.insert(&key);
        last_insert.insert(key, if timed { now } else { inserts });
        inserts += 1;
    }
    let keys: Vec<u64> = (0..2 * KEYS).collect();
    let mut answers = Vec::new();
    f.contains_many_with(keys.iter(), |found| {
        answers.push(found);
        if answers.len() == at {
            // Keys outside `0..2 * KEYS`: they change no answer the test checks.
            if timed {
                now += advance;
                clock.set(now);
                f.insert(&u64::MAX);
            } else {
                for i in 0..advance {
                    f.insert(&(u64::MAX - i));
                }
                inserts += advance;
            }
        }
    });
    prop_assert_eq!(answers.len(), keys.len());
    let inside = must_find(timed, &last_insert, now, inserts);
    every_key_inside_found(&keys, &answers, inside)
}

proptest! {
    #![proptest_config(config())]

    /// A time window on a manual clock: the batch's answers are `contains`'s, in order, with
    /// the clock inside the stored epoch, past it (no insert since), and whole windows on.
    #[test]
    fn a_batch_answers_as_contains_does_time(
        generations in 2u32..=8,
        ring in ring_layout(),
        ops in vec(op(), 0..300),
    ) {
        run(true, generations, ring, &ops)?;
    }

    /// A count window: the same, the inserts being the clock.
    #[test]
    fn a_batch_answers_as_contains_does_count(
        generations in 2u32..=8,
        ring in ring_layout(),
        ops in vec(op(), 0..300),
    ) {
        run(false, generations, ring, &ops)?;
    }

    /// A rotation in the middle of a batch (after `at` answers; the prefetch window is 16
    /// keys, so some keys were hashed before it and answered after it): every key inside the
    /// window after the rotation is still found.
    #[test]
    fn keys_that_stay_in_the_window_are_found_across_a_rotation(
        timed in any::<bool>(),
        generations in 2u32..=8,
        ring in ring_layout(),
        spread_ms in 0u64..60,
        at in 1usize..=96,
        advance in 1u64..1_200,
    ) {
        rotate_during_batch(timed, generations, ring, spread_ms, at, advance)?;
    }
}

/// The plain cases by hand: an empty filter, a key at the window's edge, and a clock that ran
/// a whole window past the last insert.
#[test]
fn edges_of_the_window() {
    let clock = Arc::new(ManualClock::new(START_MS));
    let f = build(true, 4, RingLayout::Separate, &clock);
    assert_eq!(f.contains_many([1u64, 2]), [false, false]);
    let mut none = 0;
    f.contains_many_with(Vec::<u64>::new(), |_| none += 1);
    assert_eq!(none, 0);
    f.insert(&1u64);
    clock.advance(Duration::from_millis(WINDOW_MS));
    assert_eq!(f.contains_many([1u64]), [true], "exactly W later: inside");
    // T = ⌈W / 3⌉: N = 4 periods after the insert's epoch, it is out of every range.
    clock.advance(Duration::from_millis(WINDOW_MS));
    assert_eq!(f.contains_many([1u64]), [f.contains(&1u64)]);
    assert_eq!(f.contains_many([1u64]), [false], "two windows later: gone");
}
