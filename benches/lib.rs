//! The benchmarks are this crate's `[[bench]]` targets; the library only holds helpers they share:
//! the keys (`u64` ids and 24-byte strings `"user:%019d"`), generated and shuffled outside the
//! timed region, and the sizes to run.
//!
//! Keys are identified by a `u64` id. Members (inserted) are ids `0..n`; non-members are
//! [`MISS_BASE`]` + i`, which never collide with members. The same id gives the same logical key
//! for every implementation: ours hashes the key's bytes, the peers hash it through
//! `std::hash::Hash` of the very same `&u64` / `&str`.
#![forbid(unsafe_code)]

use std::fmt::Write as _;
use std::hash::Hash;

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{SeedableRng, seq::index};

/// The false-positive rate every filter is sized for.
pub const FPR: f64 = 0.01;

/// The in-cache size (about 1.2 MB of bits at 1%: past a 1 MiB L2, inside L3), always run.
pub const SMALL: u64 = 1_000_000;

/// The in-L2 size (about 0.36 MB of bits at 1%: a third of a 1 MiB L2), always run, for the
/// single-lookup groups only (core.rs's `contains_hit` and `contains_miss` of `u64` keys).
pub const IN_L2: u64 = 300_000;

/// The out-of-cache size (about 60 MB of bits at 1%), run only when [`LARGE_ENV`] is `1`.
pub const LARGE: u64 = 50_000_000;

/// Set this environment variable to `1` to also run the [`LARGE`] size.
pub const LARGE_ENV: &str = "BLOOM_BENCH_LARGE";

/// Keys per batch in the batch-lookup benchmarks.
pub const BATCH: usize = 1024;

/// The most query keys kept per kind (members, non-members): enough that a cyclic pass over
/// them touches the whole filter, few enough to keep the 50M case's memory small.
pub const MAX_QUERIES: usize = 1 << 20;

/// Non-member ids start here (10¹⁸): still 19 digits, so the string keys stay 24 bytes.
pub const MISS_BASE: u64 = 1_000_000_000_000_000_000;

// Non-members never collide with members, at any size benchmarked.
const _: () = assert!(MISS_BASE > LARGE);

/// Length in bytes of every string key: `"user:"` and 19 digits.
pub const STR_KEY_LEN: usize = 24;

/// The filter sizes (expected items) to benchmark: [`SMALL`], plus [`LARGE`] when
/// `BLOOM_BENCH_LARGE=1`.
pub fn sizes() -> Vec<u64> {
    let large = std::env::var(LARGE_ENV).is_ok_and(|v| v == "1");
    if large {
        vec![SMALL, LARGE]
    } else {
        vec![SMALL]
    }
}

/// Whether the filter given on criterion's command line may select a benchmark whose id
/// contains `label`, knowing that the alternatives to `label` are `others` (e.g. `"u64"` vs
/// `["str"]`, `"1M"` vs `["50M"]`).
///
/// A heuristic used only to skip expensive setup up front (filling 50M-key filters) that no
/// selected benchmark needs: it answers `false` only when every positional argument names one
/// of `others` and not `label`, and `true` whenever in doubt. Benchmarks build what they need
/// on first use anyway, so a wrong `false` costs accuracy only under `--quick` (no warm-up).
/// Numbers are not filters: they are the values of options such as `--warm-up-time 1`, which
/// would otherwise name none of `others` and select everything.
pub fn filter_may_select(label: &str, others: &[&str]) -> bool {
    let positional: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-') && a.parse::<f64>().is_err())
        .collect();
    positional.is_empty()
        || positional
            .iter()
            .any(|f| f.contains(label) || !others.iter().any(|o| f.contains(o)))
}

/// `1000000` → `"1M"`, `50000000` → `"50M"`, for benchmark names.
pub fn size_label(n: u64) -> String {
    if n % 1_000_000 == 0 {
        format!("{}M", n / 1_000_000)
    } else if n % 1_000 == 0 {
        format!("{}k", n / 1_000)
    } else {
        n.to_string()
    }
}

/// Writes the string key of `id` into `buf` (replacing its contents): `"user:"` and the id
/// zero-padded to 19 digits, 24 bytes in all.
pub fn write_str_key(buf: &mut String, id: u64) {
    buf.clear();
    write!(buf, "user:{id:019}").expect("writing to a String cannot fail");
    debug_assert_eq!(buf.len(), STR_KEY_LEN, "id {id} too large for 19 digits");
}

/// The ids of the query keys for a filter of `n` members, each list in random order:
/// `(members, non_members)`, equally many, a multiple of [`BATCH`] and at most
/// [`MAX_QUERIES`]; when that is fewer than `n`, the members are a uniform random sample of
/// `0..n`. Deterministic for a given `seed`.
pub fn query_ids(n: u64, seed: u64) -> (Vec<u64>, Vec<u64>) {
    query_ids_at_most(n, MAX_QUERIES, seed)
}

/// How many member (and non-member) query keys [`query_ids`] gives for `n` members.
pub fn query_count(n: u64) -> usize {
    query_count_at_most(n, MAX_QUERIES)
}

fn query_count_at_most(n: u64, max: usize) -> usize {
    (n.min(max as u64) as usize) / BATCH * BATCH
}

fn query_ids_at_most(n: u64, max: usize, seed: u64) -> (Vec<u64>, Vec<u64>) {
    let count = query_count_at_most(n, max);
    assert!(count > 0, "n = {n} is smaller than one batch of {BATCH}");
    let mut rng = StdRng::seed_from_u64(seed);
    let mut members: Vec<u64> = if n as usize == count {
        (0..n).collect()
    } else {
        let n = usize::try_from(n).expect("n fits in usize");
        index::sample(&mut rng, n, count)
            .into_iter()
            .map(|i| i as u64)
            .collect()
    };
    members.shuffle(&mut rng);
    let mut non_members: Vec<u64> = (0..count as u64).map(|i| MISS_BASE + i).collect();
    non_members.shuffle(&mut rng);
    (members, non_members)
}

/// A kind of key, and an array of such keys laid out for a fast sequential pass.
pub trait KeySet: Send + Sync + Sized {
    /// The key type handed to the filters: `u64` or `str`.
    type Key: ?Sized + Hash + Send + Sync;

    /// The name in benchmark ids: `"u64"` or `"str"`.
    const NAME: &'static str;

    /// The keys of `ids`, in that order.
    fn from_ids(ids: &[u64]) -> Self;

    /// How many keys.
    fn len(&self) -> usize;

    /// Whether there are no keys.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Key number `i`.
    fn get(&self, i: usize) -> &Self::Key;

    /// Calls `f` with the key of every id in `ids`, in order, generating each on the fly
    /// (the 50M fill must not hold 50M strings at once).
    fn for_each_key(ids: impl IntoIterator<Item = u64>, f: impl FnMut(&Self::Key));
}

/// `u64` keys.
pub struct U64Keys(Vec<u64>);

impl KeySet for U64Keys {
    type Key = u64;
    const NAME: &'static str = "u64";

    fn from_ids(ids: &[u64]) -> Self {
        Self(ids.to_vec())
    }

    #[inline(always)]
    fn len(&self) -> usize {
        self.0.len()
    }

    #[inline(always)]
    fn get(&self, i: usize) -> &u64 {
        &self.0[i]
    }

    fn for_each_key(ids: impl IntoIterator<Item = u64>, mut f: impl FnMut(&u64)) {
        ids.into_iter().for_each(|id| f(&id));
    }
}

/// 24-byte string keys, stored back to back in one buffer so that a pass over them reads
/// memory sequentially (a `Vec<String>` in shuffled order would add a random memory access
/// per key and measure the allocator's layout, not the filter).
pub struct StrKeys {
    buf: String,
}

impl KeySet for StrKeys {
    type Key = str;
    const NAME: &'static str = "str";

    fn from_ids(ids: &[u64]) -> Self {
        let mut buf = String::with_capacity(ids.len() * STR_KEY_LEN);
        let mut key = String::with_capacity(STR_KEY_LEN);
        for &id in ids {
            write_str_key(&mut key, id);
            assert_eq!(key.len(), STR_KEY_LEN, "id {id} too large for 19 digits");
            buf.push_str(&key);
        }
        Self { buf }
    }

    #[inline(always)]
    fn len(&self) -> usize {
        self.buf.len() / STR_KEY_LEN
    }

    #[inline(always)]
    fn get(&self, i: usize) -> &str {
        &self.buf[i * STR_KEY_LEN..(i + 1) * STR_KEY_LEN]
    }

    fn for_each_key(ids: impl IntoIterator<Item = u64>, mut f: impl FnMut(&str)) {
        let mut key = String::with_capacity(STR_KEY_LEN);
        for id in ids {
            write_str_key(&mut key, id);
            f(&key);
        }
    }
}

/// The median of values sorted in ascending order (the mean of the two middle ones for an
/// even count).
pub fn median(sorted: &[f64]) -> f64 {
    let n = sorted.len();
    if n % 2 == 1 {
        sorted[n / 2]
    } else {
        (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_24_bytes_and_distinct_from_non_members() {
        let mut k = String::new();
        write_str_key(&mut k, 0);
        assert_eq!(k, "user:0000000000000000000");
        write_str_key(&mut k, MISS_BASE + MAX_QUERIES as u64);
        assert_eq!(k.len(), STR_KEY_LEN);
    }

    #[test]
    fn queries_are_shuffled_members_and_non_members() {
        let (hit, miss) = query_ids(10_000, 1);
        assert_eq!(hit.len(), 9 * BATCH);
        assert_eq!(query_count(10_000), hit.len());
        assert_eq!(miss.len(), hit.len());
        assert!(hit.iter().all(|&i| i < 10_000));
        assert!(miss.iter().all(|&i| i >= MISS_BASE));
        assert!(hit.windows(2).any(|w| w[0] > w[1]), "not shuffled");
        let (sample, _) = query_ids_at_most(100_000, 4 * BATCH, 1);
        assert_eq!(sample.len(), 4 * BATCH);
        assert!(sample.iter().all(|&i| i < 100_000));
        assert!(sample.iter().any(|&i| i >= 50_000), "not spread over 0..n");
        let s = StrKeys::from_ids(&hit[..3]);
        assert_eq!(s.len(), 3);
        assert_eq!(s.get(1), format!("user:{:019}", hit[1]));
    }
}
