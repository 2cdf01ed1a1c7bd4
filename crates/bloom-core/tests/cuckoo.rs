//! The cuckoo filter: sizing and the load it reaches, memory as the allocator counts it,
//! false-positive rates against the closed form, what a full filter and a remove do, the
//! file format, and a concurrent stress test.
//!
//! `cargo test --release -p bloomguard-core --test cuckoo -- --nocapture --test-threads 1`
//! prints the tables `benches/README.md` reports.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bloom_core::{AnyFilter, CuckooFilter, DecodeError, FilterFull};

#[path = "support/counting_alloc.rs"]
mod counting_alloc;
use counting_alloc::live;

const NON_MEMBER: u64 = 1 << 63;

fn sized(n: u64, p: f64, seed: u128) -> CuckooFilter {
    CuckooFilter::builder()
        .expected_items(n)
        .false_positive_rate(p)
        .seed(seed)
        .build()
        .unwrap()
}

/// `1 − (1 − 1/(2^f − 1))^(8α)`: the rate the module docs derive.
fn closed_form(f: u32, load: f64) -> f64 {
    1.0 - (1.0 - 1.0 / ((1u64 << f) - 1) as f64).powf(8.0 * load)
}

/// n keys at p: bits per key as allocated (the whole filter: buckets, stripe versions, the
/// struct), the load n reaches, every one of them found, the measured rate against the
/// closed form (two-sided, 4σ) and against p (3σ), and the load of the first failed insert.
#[test]
fn sized_filters_meet_their_memory_rate_and_load_targets() {
    const N: u64 = 1_000_000;
    const PROBES: u64 = 1_000_000;
    println!(
        "| p | f | bits/key (allocated) | load at n | measured FPR | closed form ± 4σ | p + 3σ | first failure at load |"
    );
    println!("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
    for (p, max_bits_per_key) in [(0.01, 13.5), (0.001, 15.0), (0.0001, 17.0)] {
        let before = live();
        let filter = sized(N, p, 0xC0C0 ^ (p * 1e6) as u128);
        let bytes = live() - before;
        let bits_per_key = bytes as f64 * 8.0 / N as f64;
        assert!(
            bits_per_key <= max_bits_per_key,
            "p = {p}: {bits_per_key:.2} bits per key"
        );
        for key in 0..N {
            filter
                .insert(&key)
                .expect("n keys fit a filter sized for n");
        }
        assert!((0..N).all(|key| filter.contains(&key)), "a false negative");
        let load = filter.load_factor();
        assert!(load >= 0.949, "n keys fill it to {load}");

        let false_positives = (0..PROBES)
            .filter(|i| filter.contains(&(NON_MEMBER | i)))
            .count() as f64;
        let measured = false_positives / PROBES as f64;
        let f = filter.fingerprint_bits();
        let expected = closed_form(f, load);
        let sigma = (expected * (1.0 - expected) / PROBES as f64).sqrt();
        assert!(
            (measured - expected).abs() <= 4.0 * sigma,
            "p = {p}: measured {measured}, closed form {expected} ± 4σ ({sigma})"
        );
        let p_sigma = (p * (1.0 - p) / PROBES as f64).sqrt();
        assert!(
            measured <= p + 3.0 * p_sigma,
            "p = {p}: measured {measured}"
        );

        let mut next = N;
        let full = loop {
            match filter.insert(&next) {
                Ok(()) => next += 1,
                Err(full) => break full,
            }
        };
        let failed_at = full.len as f64 / full.slots as f64;
        assert!(
            failed_at >= 0.95,
            "p = {p}: first failure at load {failed_at}"
        );
        println!(
            "| {p} | {f} | {bits_per_key:.2} | {load:.4} | {measured:.6} | {expected:.6} ± {:.6} | {:.6} | {failed_at:.4} |",
            4.0 * sigma,
            p + 3.0 * p_sigma
        );
    }
}

/// A failed insert changes nothing: not a bit of the table, not the count, no key lost.
#[test]
fn a_full_filter_refuses_and_keeps_every_key() {
    for seed in 0..20u128 {
        let filter = CuckooFilter::builder()
            .buckets(50)
            .fingerprint_bits(12)
            .seed(seed)
            .build()
            .unwrap();
        let mut stored = Vec::new();
        let mut key = 0u64;
        let full: FilterFull = loop {
            match filter.insert(&key) {
                Ok(()) => stored.push(key),
                Err(full) => break full,
            }
            key += 1;
        };
        assert_eq!(full.len, stored.len() as u64);
        assert_eq!(full.slots, 200);
        let bytes = filter.to_bytes();
        for extra in key..key + 50 {
            if filter.insert(&extra).is_err() {
                assert_eq!(
                    filter.to_bytes(),
                    bytes,
                    "a failed insert changed the table"
                );
            } else {
                stored.push(extra);
                break;
            }
        }
        assert!(stored.iter().all(|k| filter.contains(k)), "seed {seed}");
        assert!(full.to_string().contains("nothing was dropped"));
    }
}

#[test]
fn each_insert_is_undone_by_one_remove() {
    let filter = sized(10_000, 0.001, 5);
    for key in 0..5_000u64 {
        filter.insert(&key).unwrap();
    }
    for key in (0..5_000u64).step_by(2) {
        filter.insert(&key).unwrap(); // the even keys twice
    }
    assert_eq!(filter.len(), 7_500);
    for key in 0..5_000u64 {
        assert!(filter.remove(&key));
    }
    assert!((0..5_000u64).step_by(2).all(|k| filter.contains(&k)));
    let odd_left = (1..5_000u64)
        .step_by(2)
        .filter(|k| filter.contains(k))
        .count();
    assert!(odd_left < 25, "{odd_left} removed keys still answer maybe");
    assert_eq!(filter.len(), 2_500);
    assert!(!filter.remove(&NON_MEMBER) || filter.len() == 2_499);
}

/// The documented hazard: removing a key that was never inserted takes the fingerprint of
/// one that was, if they share it and their buckets.
#[test]
fn removing_a_key_never_inserted_can_take_another_keys_fingerprint() {
    // One bucket and 5-bit fingerprints: keys share a fingerprint 1 time in 31.
    let filter = CuckooFilter::builder()
        .buckets(1)
        .fingerprint_bits(5)
        .seed(2)
        .build()
        .unwrap();
    filter.insert(&0u64).unwrap();
    let twin = (1u64..)
        .find(|k| filter.contains(k))
        .expect("some key shares the fingerprint");
    assert!(filter.remove(&twin), "the never-inserted twin was removed");
    assert!(!filter.contains(&0u64), "and took key 0 with it");
}

/// The documented hazard of `insert_unique` in a filter keys are removed from: a key that
/// shares another's fingerprint and buckets is not stored, so removing that other key takes
/// it out too. With `insert` the same two keys each keep a copy.
#[test]
fn a_key_insert_unique_skipped_goes_with_its_twin() {
    let build = || {
        CuckooFilter::builder()
            .buckets(1)
            .fingerprint_bits(5)
            .seed(2)
            .build()
            .unwrap()
    };
    let probe = build();
    probe.insert(&0u64).unwrap();
    let twin = (1u64..).find(|k| probe.contains(k)).unwrap();

    let unique = build();
    assert!(unique.insert_unique(&0u64).unwrap());
    assert!(
        !unique.insert_unique(&twin).unwrap(),
        "the twin was not stored"
    );
    assert!(unique.remove(&0u64));
    assert!(!unique.contains(&twin), "and went with key 0");

    let each = build();
    each.insert(&0u64).unwrap();
    each.insert(&twin).unwrap();
    assert!(each.remove(&0u64));
    assert!(each.contains(&twin), "insert kept the twin's own copy");
}

#[test]
fn racing_insert_unique_stores_a_key_once() {
    let filter = Arc::new(sized(100_000, 0.001, 9));
    let threads: Vec<_> = (0..2)
        .map(|_| {
            let filter = filter.clone();
            std::thread::spawn(move || {
                (0..50_000u64)
                    .filter(|k| filter.insert_unique(k).unwrap())
                    .count()
            })
        })
        .collect();
    let added: usize = threads.into_iter().map(|t| t.join().unwrap()).sum();
    assert_eq!(added as u64, filter.len());
    // Keys whose fingerprint and buckets collide with an earlier key's are stored once for
    // both: about n²·p/2 pairs would be far too many; the filter holds 50,000 less a few.
    assert!(added > 49_900 && added <= 50_000, "{added}");
}

/// Two threads insert and remove their own keys, keeping the filter near its design load
/// (so inserts move keys), while two threads check every key that is present the whole time
/// of a lookup. A key is present between the release store of an odd version (after its
/// insert returned) and the store of the next even one (before its remove starts).
#[test]
fn stress_no_false_negative_while_keys_move() {
    const KEYS_PER_WRITER: u64 = 60_000;
    let run_for = Duration::from_secs(10);
    // About half of each writer's keys are present at a time: 60,000 of 64,000 slots.
    let filter = Arc::new(
        CuckooFilter::builder()
            .buckets(16_000)
            .fingerprint_bits(12)
            .seed(77)
            .build()
            .unwrap(),
    );
    let versions: Arc<Vec<AtomicU64>> = Arc::new(
        (0..2 * KEYS_PER_WRITER)
            .map(|_| AtomicU64::new(0))
            .collect(),
    );
    let stop = Arc::new(AtomicBool::new(false));
    let (inserts, removes, full) = (
        Arc::new(AtomicU64::new(0)),
        Arc::new(AtomicU64::new(0)),
        Arc::new(AtomicU64::new(0)),
    );
    let writers: Vec<_> = (0..2u64)
        .map(|w| {
            let (filter, versions, stop) = (filter.clone(), versions.clone(), stop.clone());
            let (inserts, removes, full) = (inserts.clone(), removes.clone(), full.clone());
            std::thread::spawn(move || {
                let mut state = 0x2545_F491_4F6C_DD1Du64 ^ w;
                while !stop.load(Ordering::Relaxed) {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    let key = w * KEYS_PER_WRITER + state % KEYS_PER_WRITER;
                    let version = &versions[key as usize];
                    let v = version.load(Ordering::Relaxed);
                    if v % 2 == 1 {
                        version.store(v + 1, Ordering::Release);
                        assert!(filter.remove(&key), "a present key could not be removed");
                        removes.fetch_add(1, Ordering::Relaxed);
                    } else if filter.insert(&key).is_ok() {
                        version.store(v + 1, Ordering::Release);
                        inserts.fetch_add(1, Ordering::Relaxed);
                    } else {
                        full.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    let checkers: Vec<_> = (0..2u64)
        .map(|c| {
            let (filter, versions, stop) = (filter.clone(), versions.clone(), stop.clone());
            std::thread::spawn(move || {
                let (mut checked, mut missed) = (0u64, 0u64);
                let mut key = c;
                while !stop.load(Ordering::Relaxed) {
                    let version = &versions[key as usize];
                    let before = version.load(Ordering::Acquire);
                    if before % 2 == 1 {
                        let found = filter.contains(&key);
                        if version.load(Ordering::Acquire) == before {
                            checked += 1;
                            missed += u64::from(!found);
                        }
                    }
                    key = (key + 2) % (2 * KEYS_PER_WRITER);
                }
                (checked, missed)
            })
        })
        .collect();
    let started = Instant::now();
    std::thread::sleep(run_for);
    stop.store(true, Ordering::Relaxed);
    for w in writers {
        w.join().unwrap();
    }
    let (mut checked, mut missed) = (0, 0);
    for c in checkers {
        let (k, m) = c.join().unwrap();
        checked += k;
        missed += m;
    }
    println!(
        "stress, {:.1} s: {} inserts, {} removes, {} refused as full, {checked} lookups of present keys, {missed} false negatives, final load {:.3}",
        started.elapsed().as_secs_f64(),
        inserts.load(Ordering::Relaxed),
        removes.load(Ordering::Relaxed),
        full.load(Ordering::Relaxed),
        filter.load_factor()
    );
    assert!(checked > 1_000_000, "only {checked} lookups checked");
    assert_eq!(missed, 0, "false negatives among {checked} lookups");
}

fn golden_filter() -> CuckooFilter {
    let filter = sized(200, 0.01, 0x5EED_C0C0);
    for i in 0..150 {
        filter.insert(&format!("key-{i}")).unwrap();
    }
    filter
}

const GOLDEN: &[u8] = include_bytes!("data/golden-v1-cuckoo.bloom");

/// The bytes of a cuckoo file are the format: a change to where keys go or how buckets are
/// packed makes this fail, and needs a new format version.
#[test]
fn golden_v1_cuckoo_still_loads() {
    let filter = CuckooFilter::from_bytes(GOLDEN).unwrap();
    assert!((0..150).all(|i| filter.contains(&format!("key-{i}"))));
    assert_eq!(filter.len(), 150);
    assert_eq!(filter.to_bytes(), GOLDEN);
    assert_eq!(
        golden_filter().to_bytes(),
        GOLDEN,
        "the same keys now give other bytes"
    );
    let any = AnyFilter::read_from(&mut &GOLDEN[..]).unwrap();
    assert_eq!(any.kind(), "cuckoo");
}

#[test]
fn every_truncation_and_bit_flip_is_refused() {
    let bytes = golden_filter().to_bytes();
    for len in 0..bytes.len() {
        assert!(
            CuckooFilter::from_bytes(&bytes[..len]).is_err(),
            "len {len}"
        );
        assert!(
            CuckooFilter::read_from(&mut &bytes[..len]).is_err(),
            "len {len}"
        );
        assert!(AnyFilter::from_bytes(&bytes[..len]).is_err(), "len {len}");
    }
    for bit in 0..bytes.len() * 8 {
        let mut flipped = bytes.clone();
        flipped[bit / 8] ^= 1 << (bit % 8);
        assert!(CuckooFilter::from_bytes(&flipped).is_err(), "bit {bit}");
        assert!(
            CuckooFilter::read_from(&mut &flipped[..]).is_err(),
            "bit {bit}"
        );
    }
    let mut longer = bytes.clone();
    longer.push(0);
    assert!(matches!(
        CuckooFilter::from_bytes(&longer),
        Err(DecodeError::TrailingBytes { extra: 1 })
    ));
    let plain = bloom_core::BloomFilter::new(100, 0.01).unwrap().to_bytes();
    assert!(matches!(
        CuckooFilter::from_bytes(&plain),
        Err(DecodeError::WrongKind { .. })
    ));
}

/// A file whose checksum is right but whose content this crate could not have written (a
/// foreign or hand-edited file) is refused with an error, field by field, never loaded and
/// never a panic: the golden filter has f = 10, 53 buckets of 36 bits, 30 words.
#[test]
fn each_inconsistent_field_is_refused_even_with_a_valid_checksum() {
    const CRC32C: crc::Crc<u32> = crc::Crc::<u32>::new(&crc::CRC_32_ISCSI);
    let bytes = golden_filter().to_bytes();
    assert_eq!(bytes.len(), 64 + 8 * 30 + 4);
    let edited = |edit: &dyn Fn(&mut Vec<u8>)| {
        let mut b = bytes.clone();
        edit(&mut b);
        let body = b.len() - 4;
        let crc = CRC32C.checksum(&b[..body]);
        b[body..].copy_from_slice(&crc.to_le_bytes());
        b
    };
    let put = |b: &mut Vec<u8>, at: usize, v: &[u8]| b[at..at + v.len()].copy_from_slice(v);
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("f below 5", edited(&|b| b[12] = 4)),
        ("f above 17", edited(&|b| b[12] = 18)),
        ("three slots a bucket", edited(&|b| b[13] = 3)),
        ("reserved bits set", edited(&|b| b[15] = 1)),
        ("no bucket", edited(&|b| put(b, 16, &0u64.to_le_bytes()))),
        (
            "one bucket more",
            edited(&|b| put(b, 16, &54u64.to_le_bytes())),
        ),
        (
            "target rate of 1",
            edited(&|b| put(b, 48, &1f64.to_le_bytes())),
        ),
        (
            "a word count that is not m's",
            edited(&|b| put(b, 56, &29u64.to_le_bytes())),
        ),
        (
            "a bit past the last bucket",
            edited(&|b| b[64 + 8 * 29 + 7] |= 0x80),
        ),
        (
            "a bucket code above 3,875",
            edited(&|b| {
                b[64] = 0xFF;
                b[65] |= 0x0F;
            }),
        ),
    ];
    for (what, file) in cases {
        assert!(CuckooFilter::from_bytes(&file).is_err(), "{what}: loaded");
        assert!(
            CuckooFilter::read_from(&mut file.as_slice()).is_err(),
            "{what}: streamed"
        );
        assert!(AnyFilter::from_bytes(&file).is_err(), "{what}: as any");
    }
    let code = edited(&|b| {
        b[64] = 0xFF;
        b[65] |= 0x0F;
    });
    let err = CuckooFilter::from_bytes(&code).err().unwrap().to_string();
    assert!(err.contains("3,876"), "{err}");
}

#[test]
fn a_round_trip_keeps_every_key_and_setting() {
    let filter = sized(100_000, 0.001, 3);
    for key in 0..90_000u64 {
        filter.insert(&key).unwrap();
    }
    let bytes = filter.to_bytes();
    let mut streamed = Vec::new();
    filter.write_to(&mut streamed).unwrap();
    assert_eq!(streamed, bytes);
    for copy in [
        CuckooFilter::from_bytes(&bytes).unwrap(),
        CuckooFilter::read_from(&mut bytes.as_slice()).unwrap(),
    ] {
        assert_eq!(copy.to_bytes(), bytes);
        assert_eq!(copy.len(), 90_000);
        assert_eq!(
            (copy.capacity(), copy.target_fpr(), copy.seed()),
            (Some(100_000), Some(0.001), 3)
        );
        assert!((0..90_000u64).all(|k| copy.contains(&k)));
        assert!(copy.remove(&7u64) && !copy.contains(&7u64));
    }
}
