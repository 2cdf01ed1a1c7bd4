//! No false negatives, ever: a key that was inserted is found by every later `contains`.
//!
//! Property tests over random key sets, for every layout, every built-in key type and a
//! user-defined one, and small and odd filter sizes (down to a single bit, `k` up to 64 so the
//! Blocked in-block remix path past the seventh probe is taken; SplitBlock always has k = 8). The property is checked after
//! `insert`, through `insert_many`/`contains_many`, after `union`/`intersect`, after a
//! `to_bytes`/`from_bytes` and a `write_to`/`read_from` round trip, and on a clone.
//!
//! The proptest RNG is seeded with a fixed value: a failure reproduces on every run (and
//! `PROPTEST_RNG_SEED=<n>` explores other inputs).

use std::fmt::Debug;

use bloom_core::params::SPLIT_HASHES;
use bloom_core::{BloomFilter, Key, Layout};
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::test_runner::RngSeed;

fn config() -> ProptestConfig {
    ProptestConfig {
        cases: 384, // 128 per layout on average
        rng_seed: RngSeed::Fixed(0x0b10_0f11_7e25),
        // Fixed seed: a failure reproduces without a regressions file in the source tree.
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

/// Every layout the crate has.
const LAYOUTS: [Layout; 3] = [Layout::Blocked, Layout::Classic, Layout::SplitBlock];

fn any_layout() -> impl Strategy<Value = Layout> {
    prop::sample::select(&LAYOUTS[..])
}

/// How a filter is sized.
#[derive(Clone, Copy, Debug)]
enum Size {
    /// `.bits(m).hashes(k)`.
    Explicit { bits: u64, hashes: u32 },
    /// `.expected_items(n).false_positive_rate(p)`.
    Rate { items: u64, fpr: f64 },
}

impl Size {
    /// This size for `layout`: SplitBlock takes no other k than 8.
    fn for_layout(self, layout: Layout) -> Self {
        match self {
            Size::Explicit { bits, .. } if layout == Layout::SplitBlock => Size::Explicit {
                bits,
                hashes: SPLIT_HASHES,
            },
            other => other,
        }
    }
}

#[derive(Clone, Copy, Debug)]
struct Setup {
    layout: Layout,
    size: Size,
    seed: u128,
}

impl Setup {
    fn build(&self) -> BloomFilter {
        let builder = BloomFilter::builder().layout(self.layout).seed(self.seed);
        let builder = match self.size {
            Size::Explicit { bits, hashes } => builder.bits(bits).hashes(hashes),
            Size::Rate { items, fpr } => builder.expected_items(items).false_positive_rate(fpr),
        };
        builder
            .build()
            .expect("the strategy only produces valid parameters")
    }
}

fn setup() -> impl Strategy<Value = Setup> {
    let size = prop_oneof![
        // Small and odd sizes (1 bit, 63, 65, 513 …); k ≤ 20 crosses the in-block remix at 7
        // and 14 probes.
        4 => (1u64..=2_000, 1u32..=20)
            .prop_map(|(bits, hashes)| Size::Explicit { bits, hashes }),
        // Up to the maximum k.
        1 => (1u64..=4_000, 21u32..=64)
            .prop_map(|(bits, hashes)| Size::Explicit { bits, hashes }),
        // Sized by rate, as most users do.
        2 => (1u64..=500, prop_oneof![Just(0.5), Just(1e-6), 0.0001f64..0.5])
            .prop_map(|(items, fpr)| Size::Rate { items, fpr }),
    ];
    (any_layout(), size, any::<u128>()).prop_map(|(layout, size, seed)| Setup {
        layout,
        size: size.for_layout(layout),
        seed,
    })
}

/// Short strings of any chars (cheaper to generate than `any::<String>()`'s regex).
fn text() -> impl Strategy<Value = String> {
    vec(any::<char>(), 0..24).prop_map(String::from_iter)
}

fn assert_all_found<K: Key + Debug + ?Sized>(
    filter: &BloomFilter,
    keys: &[&K],
    after: &str,
) -> Result<(), TestCaseError> {
    for &key in keys {
        prop_assert!(
            filter.contains(key),
            "false negative for {key:?} after {after} ({filter:?})"
        );
    }
    let batch = filter.contains_many(keys.iter().copied());
    prop_assert_eq!(batch.len(), keys.len(), "contains_many after {}", after);
    if let Some(i) = batch.iter().position(|&found| !found) {
        prop_assert!(
            false,
            "contains_many: false negative for {:?} after {after} ({filter:?})",
            keys[i]
        );
    }
    Ok(())
}

/// Same parameters, same answers: `copy` must be an exact copy of `original`.
fn assert_same_filter(
    original: &BloomFilter,
    copy: &BloomFilter,
    what: &str,
) -> Result<(), TestCaseError> {
    prop_assert_eq!(copy.num_bits(), original.num_bits(), "{}", what);
    prop_assert_eq!(copy.num_hashes(), original.num_hashes(), "{}", what);
    prop_assert_eq!(copy.layout(), original.layout(), "{}", what);
    prop_assert_eq!(copy.seed(), original.seed(), "{}", what);
    prop_assert_eq!(copy.capacity(), original.capacity(), "{}", what);
    prop_assert_eq!(copy.target_fpr(), original.target_fpr(), "{}", what);
    prop_assert_eq!(copy.count_ones(), original.count_ones(), "{}", what);
    prop_assert!(
        copy.to_bytes() == original.to_bytes(),
        "{}: bytes differ",
        what
    );
    Ok(())
}

/// The whole property for one key set.
fn check<K: Key + Debug + ?Sized>(setup: &Setup, keys: &[&K]) -> Result<(), TestCaseError> {
    // One by one. `insert` reports whether a bit was clear, `contains` whether all are set:
    // on one thread, `insert` returns true exactly when `contains` said false just before.
    let filter = setup.build();
    for (i, &key) in keys.iter().enumerate() {
        let was_there = filter.contains(key);
        let added = filter.insert(key);
        prop_assert_eq!(
            added,
            !was_there,
            "insert({:?}) returned {} but contains() said {} before",
            key,
            added,
            was_there
        );
        if i == 0 {
            prop_assert!(added, "the first insert into an empty filter adds bits");
        }
        prop_assert!(filter.contains(key), "{key:?} not found right after insert");
        prop_assert!(!filter.insert(key), "re-inserting {key:?} returned true");
    }
    assert_all_found(&filter, keys, "insert")?;

    // The batch forms set exactly the same bits, and `insert_many_with` reports, key by key
    // in order, what `insert` returned (so a key repeated in the batch is new only once).
    let batch = setup.build();
    batch.insert_many(keys.iter().copied());
    assert_all_found(&batch, keys, "insert_many")?;
    prop_assert!(
        batch.to_bytes() == filter.to_bytes(),
        "insert_many and insert set different bits"
    );
    let one_by_one = setup.build();
    let expected: Vec<bool> = keys.iter().map(|&k| one_by_one.insert(k)).collect();
    let with = setup.build();
    let mut reported = Vec::with_capacity(keys.len());
    with.insert_many_with(keys.iter().copied(), |new| reported.push(new));
    prop_assert_eq!(reported, expected, "insert_many_with vs insert");
    assert_all_found(&with, keys, "insert_many_with")?;
    prop_assert!(with.to_bytes() == filter.to_bytes());

    // Union of two halves = the whole; intersection with a half keeps that half.
    let (left, right) = keys.split_at(keys.len() / 2);
    let (a, b) = (setup.build(), setup.build());
    a.insert_many(left.iter().copied());
    b.insert_many(right.iter().copied());
    prop_assert!(a.union(&b).is_ok());
    assert_all_found(&a, keys, "union")?;
    prop_assert!(
        a.to_bytes() == filter.to_bytes(),
        "union of the halves differs from the whole"
    );
    let both = filter.clone();
    let half = setup.build();
    half.insert_many(left.iter().copied());
    prop_assert!(both.intersect(&half).is_ok());
    assert_all_found(&both, left, "intersect")?;

    // With a mix of answers, contains_many answers each key in its place.
    let single: Vec<bool> = keys.iter().map(|&k| half.contains(k)).collect();
    prop_assert_eq!(half.contains_many(keys.iter().copied()), single);

    // Serialised and back.
    let bytes = filter.to_bytes();
    let decoded =
        BloomFilter::from_bytes(&bytes).map_err(|e| TestCaseError::fail(e.to_string()))?;
    assert_all_found(&decoded, keys, "to_bytes/from_bytes")?;
    assert_same_filter(&filter, &decoded, "from_bytes")?;

    let mut written = Vec::new();
    filter
        .write_to(&mut written)
        .map_err(|e| TestCaseError::fail(e.to_string()))?;
    prop_assert!(written == bytes, "write_to and to_bytes differ");
    let read = BloomFilter::read_from(&mut written.as_slice())
        .map_err(|e| TestCaseError::fail(e.to_string()))?;
    assert_all_found(&read, keys, "write_to/read_from")?;
    assert_same_filter(&filter, &read, "read_from")?;

    // A clone is an independent snapshot: clearing it leaves the original intact.
    let clone = filter.clone();
    assert_all_found(&clone, keys, "clone")?;
    assert_same_filter(&filter, &clone, "clone")?;
    clone.clear();
    prop_assert_eq!(clone.count_ones(), 0);
    assert_all_found(&filter, keys, "clearing a clone")?;
    clone.insert_many(keys.iter().copied());
    assert_all_found(&clone, keys, "clear and re-insert")?;
    Ok(())
}

/// A user type: an order id within a shard, as 10 bytes.
#[derive(Debug, Clone)]
struct OrderId {
    shard: u16,
    id: u64,
}

impl Key for OrderId {
    fn key_bytes(&self) -> impl AsRef<[u8]> {
        let mut bytes = [0u8; 10];
        bytes[..2].copy_from_slice(&self.shard.to_le_bytes());
        bytes[2..].copy_from_slice(&self.id.to_le_bytes());
        bytes
    }
}

macro_rules! key_type_tests {
    ($($name:ident: $t:ty => $keys:expr;)*) => {$(
        proptest! {
            #![proptest_config(config())]
            #[test]
            fn $name(setup in setup(), keys in $keys) {
                let keys: Vec<$t> = keys;
                let refs: Vec<&$t> = keys.iter().collect();
                check(&setup, &refs)?;
            }
        }
    )*};
}

key_type_tests! {
    keys_string: String => vec(text(), 0..150);
    keys_vec_u8: Vec<u8> => vec(vec(any::<u8>(), 0..40), 0..150);
    keys_array_u8: [u8; 16] => vec(any::<[u8; 16]>(), 0..150);
    keys_u8: u8 => vec(any::<u8>(), 0..150);
    keys_u16: u16 => vec(any::<u16>(), 0..150);
    keys_u32: u32 => vec(any::<u32>(), 0..150);
    keys_u64: u64 => vec(any::<u64>(), 0..150);
    keys_u128: u128 => vec(any::<u128>(), 0..150);
    keys_usize: usize => vec(any::<usize>(), 0..150);
    keys_i8: i8 => vec(any::<i8>(), 0..150);
    keys_i16: i16 => vec(any::<i16>(), 0..150);
    keys_i32: i32 => vec(any::<i32>(), 0..150);
    keys_i64: i64 => vec(any::<i64>(), 0..150);
    keys_i128: i128 => vec(any::<i128>(), 0..150);
    keys_isize: isize => vec(any::<isize>(), 0..150);
    keys_user_type: OrderId => vec(
        (any::<u16>(), any::<u64>()).prop_map(|(shard, id)| OrderId { shard, id }),
        0..150,
    );
}

proptest! {
    #![proptest_config(config())]

    /// `str` and `[u8]` are unsized: borrowed from owned keys.
    #[test]
    fn keys_str(setup in setup(), keys in vec(text(), 0..150)) {
        let refs: Vec<&str> = keys.iter().map(String::as_str).collect();
        check(&setup, &refs)?;
    }

    #[test]
    fn keys_u8_slice(setup in setup(), keys in vec(vec(any::<u8>(), 0..40), 0..150)) {
        let refs: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
        check(&setup, &refs)?;
    }

    #[test]
    fn keys_boxed_str(setup in setup(), keys in vec(text(), 0..100)) {
        let boxed: Vec<Box<str>> = keys.into_iter().map(String::into_boxed_str).collect();
        let refs: Vec<&Box<str>> = boxed.iter().collect();
        check(&setup, &refs)?;
    }

    /// A key is its bytes: whatever type inserted it, any type with the same bytes finds it.
    #[test]
    fn equal_bytes_are_the_same_key(
        setup in setup(),
        text in text(),
        number in any::<u64>(),
        signed in any::<i32>(),
        shard in any::<u16>(),
    ) {
        let filter = setup.build();
        filter.insert(text.as_str());
        filter.insert(&number);
        filter.insert(&signed);
        filter.insert(&OrderId { shard, id: number });

        prop_assert!(filter.contains(&text));
        prop_assert!(filter.contains(text.as_bytes()));
        prop_assert!(filter.contains(&text.as_bytes().to_vec()));
        prop_assert!(filter.contains(&text.clone().into_boxed_str()));
        prop_assert!(filter.contains(&&&text.as_str()));
        prop_assert!(filter.contains(&number.to_le_bytes()));
        prop_assert!(filter.contains(number.to_le_bytes().as_slice()));
        prop_assert!(filter.contains(&(number as usize)), "usize hashes as u64");
        prop_assert!(filter.contains(&(number as i64)), "same bytes as i64");
        prop_assert!(filter.contains(&(number as i64 as isize)), "isize hashes as i64");
        prop_assert!(filter.contains(&signed.to_le_bytes()));
        prop_assert!(filter.contains(&(signed as u32)));
        let mut order = shard.to_le_bytes().to_vec();
        order.extend_from_slice(&number.to_le_bytes());
        prop_assert!(filter.contains(&order));
    }

    /// Many keys in a tiny filter (saturation): still no false negatives, and re-inserting
    /// never reports a new key.
    #[test]
    fn saturated_filters_keep_every_key(
        layout in any_layout(),
        bits in 1u64..=600,
        hashes in 1u32..=20,
        seed in any::<u128>(),
        keys in vec(any::<u64>(), 500..1500),
    ) {
        let size = Size::Explicit { bits, hashes }.for_layout(layout);
        let setup = Setup { layout, size, seed };
        let refs: Vec<&u64> = keys.iter().collect();
        check(&setup, &refs)?;
    }
}

/// The sizes the proptest strategies draw from, on a fixed key list, so the smallest and
/// most awkward ones are certainly covered (the strategies may miss an exact boundary).
#[test]
fn boundary_sizes_have_no_false_negatives() {
    let keys: Vec<String> = (0..300).map(|i| format!("key:{i}")).collect();
    let refs: Vec<&str> = keys.iter().map(String::as_str).collect();
    for layout in LAYOUTS {
        for bits in [1, 2, 63, 64, 65, 511, 512, 513, 1023, 1024, 1025, 4096] {
            let hashes: &[u32] = match layout {
                Layout::SplitBlock => &[SPLIT_HASHES],
                _ => &[1, 2, 6, 7, 8, 13, 14, 15, 20, 21, 63, 64],
            };
            for &hashes in hashes {
                let setup = Setup {
                    layout,
                    size: Size::Explicit { bits, hashes },
                    seed: u128::from(bits) << 64 | u128::from(hashes),
                };
                check(&setup, &refs).unwrap_or_else(|e| panic!("{setup:?}: {e}"));
            }
        }
    }
}

/// Blocked and SplitBlock filters round the size up to whole 512-bit blocks; Classic keeps it
/// exactly.
#[test]
fn explicit_sizes_are_kept_or_rounded_to_blocks() {
    for bits in [1u64, 63, 512, 513, 1000] {
        let blocked = BloomFilter::builder()
            .bits(bits)
            .hashes(3)
            .seed(1)
            .build()
            .unwrap();
        assert_eq!(blocked.layout(), Layout::Blocked, "the default layout");
        assert_eq!(blocked.num_bits(), bits.div_ceil(512) * 512);
        let classic = BloomFilter::builder()
            .layout(Layout::Classic)
            .bits(bits)
            .hashes(3)
            .seed(1)
            .build()
            .unwrap();
        assert_eq!(classic.num_bits(), bits);
        assert_eq!(classic.num_hashes(), 3);
        let split = BloomFilter::builder()
            .layout(Layout::SplitBlock)
            .bits(bits)
            .seed(1)
            .build()
            .unwrap();
        assert_eq!(split.num_bits(), bits.div_ceil(512) * 512);
        assert_eq!(split.num_hashes(), 8);
    }
}
