//! ScalableBloomFilter: grows past its initial capacity with no false negatives and the
//! compound false-positive rate within bound, grows once under concurrency, round-trips.

use bloom_core::{BuildError, DecodeError, Layout, ScalableBloomFilter};

const LAYOUTS: [Layout; 3] = [Layout::Blocked, Layout::Classic, Layout::SplitBlock];

fn scalable(n0: u64, p: f64, layout: Layout, seed: u128) -> ScalableBloomFilter {
    ScalableBloomFilter::builder(n0, p)
        .layout(layout)
        .seed(seed)
        .build()
        .unwrap()
}

#[test]
fn a_hundred_times_the_initial_capacity_keeps_every_key_and_the_rate() {
    let (n0, p) = (10_000u64, 0.01);
    for layout in LAYOUTS {
        let f = scalable(n0, p, layout, 42);
        for k in 0..100 * n0 {
            f.insert(&k);
        }
        assert!(
            (0..100 * n0).all(|k| f.contains(&k)),
            "{layout:?}: false negative"
        );
        // Capacities 1, 2, 4, … ×n0: 100×n0 keys fill six stages and start a seventh.
        assert_eq!(f.num_stages(), 7, "{layout:?}");
        let probes = 1_000_000u64;
        let positives = (1u64 << 40..(1u64 << 40) + probes)
            .filter(|k| f.contains(k))
            .count();
        let measured = positives as f64 / probes as f64;
        let sigma = (p * (1.0 - p) / probes as f64).sqrt();
        println!(
            "scalable {layout:?}: {} stages, measured FPR {measured:.5} (bound {p} + 3σ = {:.5})",
            f.num_stages(),
            p + 3.0 * sigma
        );
        assert!(
            measured <= p + 3.0 * sigma,
            "{layout:?}: measured {measured}"
        );
        assert!(
            f.current_fpr() <= p,
            "{layout:?}: implied compound FPR {}",
            f.current_fpr()
        );
        let stats = f.stage_stats();
        assert_eq!(stats.iter().map(|s| s.items).sum::<u64>(), f.len());
        assert_eq!(f.layout(), layout);
        if layout == Layout::SplitBlock {
            assert!(stats.iter().all(|s| s.num_hashes == 8), "{stats:?}");
        }
        for (i, s) in stats.iter().enumerate() {
            assert_eq!(s.capacity, n0 << i);
            assert!((s.target_fpr - p * 0.5 * 0.5f64.powi(i as i32)).abs() < 1e-15);
        }
        for s in &stats[..stats.len() - 1] {
            assert!(s.items >= s.capacity, "a stage grew before it was full");
        }
    }
}

#[test]
fn threads_crossing_the_threshold_together_grow_it_once_per_stage() {
    let f = scalable(1_000, 0.01, Layout::Blocked, 7);
    std::thread::scope(|s| {
        for t in 0..4u64 {
            let f = &f;
            s.spawn(move || {
                for k in (t * 1_000_000)..(t * 1_000_000 + 25_000) {
                    f.insert(&k);
                    assert!(f.contains(&k));
                }
            });
        }
    });
    for t in 0..4u64 {
        assert!(((t * 1_000_000)..(t * 1_000_000 + 25_000)).all(|k| f.contains(&k)));
    }
    let stats = f.stage_stats();
    for (i, s) in stats.iter().enumerate() {
        assert_eq!(
            s.capacity,
            1_000 << i,
            "stage {i}: no duplicate or skipped stage"
        );
    }
    // 100k keys need capacities 1k…64k: stages 0..=6, and the total must match growth
    // happening exactly when a stage filled, not once per racing thread.
    assert_eq!(f.num_stages(), 7);
}

#[test]
fn files_round_trip_and_reject_damage() {
    let f = scalable(500, 0.01, Layout::Classic, 3);
    for k in 0..5_000u64 {
        f.insert(&k);
    }
    let bytes = f.to_bytes();
    let back = ScalableBloomFilter::from_bytes(&bytes).unwrap();
    assert_eq!(back.num_stages(), f.num_stages());
    assert_eq!(back.to_bytes(), bytes);
    assert!((0..5_000u64).all(|k| back.contains(&k)));
    let streamed = ScalableBloomFilter::read_from(&mut bytes.as_slice()).unwrap();
    assert_eq!(streamed.len(), f.len());
    // It keeps growing after a reload.
    for k in 5_000..20_000u64 {
        back.insert(&k);
    }
    assert!(back.num_stages() > f.num_stages());

    assert!(matches!(
        ScalableBloomFilter::from_bytes(&[]),
        Err(DecodeError::Truncated { .. })
    ));
    assert!(matches!(
        ScalableBloomFilter::from_bytes(b"not a filter"),
        Err(DecodeError::BadMagic)
    ));
    let plain = bloom_core::BloomFilter::new(10, 0.01).unwrap().to_bytes();
    assert!(matches!(
        ScalableBloomFilter::from_bytes(&plain),
        Err(DecodeError::WrongKind { .. })
    ));
    assert!(matches!(
        bloom_core::BloomFilter::from_bytes(&bytes),
        Err(DecodeError::WrongKind { .. })
    ));
    for cut in 0..bytes.len() {
        assert!(
            ScalableBloomFilter::from_bytes(&bytes[..cut]).is_err(),
            "prefix {cut}"
        );
    }
    for i in (0..bytes.len()).step_by(7) {
        let mut bad = bytes.clone();
        bad[i] ^= 0x01;
        assert!(
            ScalableBloomFilter::from_bytes(&bad).is_err(),
            "flip at {i} undetected"
        );
    }
    let mut longer = bytes.clone();
    longer.push(0);
    assert!(ScalableBloomFilter::from_bytes(&longer).is_err());
}

#[test]
fn bad_parameters_are_errors() {
    assert!(matches!(
        ScalableBloomFilter::new(0, 0.01),
        Err(BuildError::ZeroItems)
    ));
    assert!(matches!(
        ScalableBloomFilter::new(10, 1.0),
        Err(BuildError::InvalidFalsePositiveRate(_))
    ));
    assert!(matches!(
        ScalableBloomFilter::builder(10, 0.01)
            .growth_factor(0.5)
            .build(),
        Err(BuildError::InvalidGrowthFactor(_))
    ));
    assert!(matches!(
        ScalableBloomFilter::builder(10, 0.01)
            .growth_factor(f64::NAN)
            .build(),
        Err(BuildError::InvalidGrowthFactor(_))
    ));
    assert!(matches!(
        ScalableBloomFilter::builder(10, 0.01)
            .tightening_ratio(1.0)
            .build(),
        Err(BuildError::InvalidTighteningRatio(_))
    ));
    let e = ScalableBloomFilter::builder(10, 0.01)
        .tightening_ratio(0.0)
        .build()
        .unwrap_err();
    assert!(e.to_string().contains("between 0 and 1"));
}

/// CRC-32C as bloom-core computes it, to re-seal a file after a deliberate edit so that the
/// decoder's own checks, not the checksum, have to catch it.
const CRC32C: crc::Crc<u32> = crc::Crc::<u32>::new(&crc::CRC_32_ISCSI);

fn fix_crc(bytes: &mut [u8]) {
    let body = bytes.len() - 4;
    let crc = CRC32C.checksum(&bytes[..body]);
    bytes[body..].copy_from_slice(&crc.to_le_bytes());
}

fn u64_at(bytes: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap())
}

/// One stage of a scalable file, as docs/FORMAT.md lays it out.
#[derive(Debug, Clone, Copy)]
struct StageField {
    /// Offset of the stage's item count.
    items_at: usize,
    items: u64,
    /// The stage's m and capacity, from its embedded kind-0 header.
    num_bits: u64,
    capacity: u64,
}

fn stage_fields(bytes: &[u8]) -> Vec<StageField> {
    let num_stages = u32::from_le_bytes(bytes[12..16].try_into().unwrap()) as usize;
    let mut at = 64;
    let mut out = Vec::new();
    for _ in 0..num_stages {
        let len = u64_at(bytes, at + 8) as usize;
        let inner = at + 16;
        out.push(StageField {
            items_at: at,
            items: u64_at(bytes, at),
            num_bits: u64_at(bytes, inner + 16),
            capacity: u64_at(bytes, inner + 40),
        });
        at = inner + len;
    }
    assert_eq!(at, bytes.len() - 4, "walked the whole stage list");
    out
}

/// `bytes` with stage `stage`'s item count set to `items` and the checksum re-computed.
fn with_items(bytes: &[u8], stage: usize, items: u64) -> Vec<u8> {
    let mut edited = bytes.to_vec();
    let at = stage_fields(bytes)[stage].items_at;
    edited[at..at + 8].copy_from_slice(&items.to_le_bytes());
    fix_crc(&mut edited);
    edited
}

/// A real three-stage file (capacities 100, 200, 400), single-threaded, so the sealed
/// stages hold exactly their capacity.
fn three_stage_file(layout: Layout) -> Vec<u8> {
    let f = scalable(100, 0.01, layout, 11);
    for k in 0..400u64 {
        f.insert(&k);
    }
    assert_eq!(f.num_stages(), 3, "{layout:?}");
    f.to_bytes()
}

fn inconsistent(result: Result<ScalableBloomFilter, DecodeError>, what: &str) -> String {
    match result {
        Err(DecodeError::Inconsistent(msg)) => msg.to_string(),
        Err(e) => panic!("{what}: expected Inconsistent, got {e}"),
        Ok(_) => panic!("{what}: a file with impossible item counts was accepted"),
    }
}

#[test]
fn the_edited_files_are_valid_before_the_edit() {
    for layout in LAYOUTS {
        let bytes = three_stage_file(layout);
        let stages = stage_fields(&bytes);
        for (i, s) in stages.iter().enumerate() {
            assert!(s.items <= s.num_bits, "{layout:?} stage {i}");
            assert_eq!(s.capacity, 100 << i);
        }
        assert_eq!(stages[0].items, stages[0].capacity);
        assert_eq!(stages[1].items, stages[1].capacity);
        // Re-writing an unchanged count and re-sealing gives the same, loadable file.
        let same = with_items(&bytes, 1, stages[1].items);
        assert_eq!(same, bytes);
        let f = ScalableBloomFilter::from_bytes(&same).unwrap();
        assert_eq!(f.layout(), layout);
        assert!((0..400u64).all(|k| f.contains(&k)), "{layout:?}");
    }
}

#[test]
fn a_stage_below_its_capacity_followed_by_another_is_inconsistent() {
    for layout in LAYOUTS {
        let bytes = three_stage_file(layout);
        let stages = stage_fields(&bytes);
        for sealed in [0, 1] {
            let cap = stages[sealed].capacity;
            for items in [0, 1, cap / 2, cap - 1] {
                let msg = inconsistent(
                    ScalableBloomFilter::from_bytes(&with_items(&bytes, sealed, items)),
                    &format!("{layout:?} stage {sealed} items {items}"),
                );
                assert!(msg.contains("below its capacity"), "{msg}");
            }
            // Exactly the capacity, or more (inserts that raced the growth), is what a real
            // filter writes.
            for items in [cap, cap + 1, cap * 2] {
                let f = ScalableBloomFilter::from_bytes(&with_items(&bytes, sealed, items))
                    .unwrap_or_else(|e| panic!("{layout:?} stage {sealed} items {items}: {e}"));
                assert_eq!(f.stage_stats()[sealed].items, items);
            }
        }
        // The last stage is not sealed: any count up to its bits is fine, even 0.
        for items in [0, 1, stages[2].capacity, stages[2].capacity + 1] {
            ScalableBloomFilter::from_bytes(&with_items(&bytes, 2, items)).unwrap();
        }
    }
}

#[test]
fn a_stage_counting_more_keys_than_bits_is_inconsistent_and_never_panics() {
    for layout in LAYOUTS {
        let bytes = three_stage_file(layout);
        let stages = stage_fields(&bytes);
        for (i, s) in stages.iter().enumerate() {
            // The bound itself loads (a stage that could not grow keeps taking keys)...
            let at_bound = ScalableBloomFilter::from_bytes(&with_items(&bytes, i, s.num_bits))
                .unwrap_or_else(|e| panic!("{layout:?} stage {i} at its bits: {e}"));
            // ...and keeps working: inserting and growing neither panic nor overflow.
            for k in 0..2_000u64 {
                at_bound.insert(&(k + 1_000_000));
            }
            assert!((0..400u64).all(|k| at_bound.contains(&k)));
            assert!(at_bound.len() >= s.num_bits);
            for items in [s.num_bits + 1, s.num_bits * 2, u64::MAX / 2, u64::MAX] {
                let msg = inconsistent(
                    ScalableBloomFilter::from_bytes(&with_items(&bytes, i, items)),
                    &format!("{layout:?} stage {i} items {items}"),
                );
                assert!(msg.contains("more keys than it has bits"), "{msg}");
                // The streaming reader and AnyFilter reach the same verdict.
                assert!(matches!(
                    ScalableBloomFilter::read_from(&mut with_items(&bytes, i, items).as_slice()),
                    Err(DecodeError::Inconsistent(_))
                ));
                assert!(matches!(
                    bloom_core::AnyFilter::from_bytes(&with_items(&bytes, i, items)),
                    Err(DecodeError::Inconsistent(_))
                ));
            }
        }
        // Counts whose sum overflows a u64.
        let mut huge = with_items(&bytes, 0, u64::MAX);
        huge = with_items(&huge, 1, u64::MAX);
        huge = with_items(&huge, 2, u64::MAX);
        inconsistent(ScalableBloomFilter::from_bytes(&huge), "sum overflows");
        let mut halves = with_items(&bytes, 1, u64::MAX / 2 + 1);
        halves = with_items(&halves, 2, u64::MAX / 2 + 1);
        inconsistent(ScalableBloomFilter::from_bytes(&halves), "halves");
    }
}
