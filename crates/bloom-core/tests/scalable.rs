//! ScalableBloomFilter: grows past its initial capacity with no false negatives and the
//! compound false-positive rate within bound, grows once under concurrency, round-trips.

use bloom_core::{BuildError, DecodeError, Layout, ScalableBloomFilter};

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
    for layout in [Layout::Blocked, Layout::Classic] {
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
