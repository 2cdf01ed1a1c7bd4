//! Argument types and value parsers shared by the commands: item counts, false-positive
//! rates, layouts, kinds and seeds, and the sizing they give (a Bloom filter's from
//! `bloom_core::params`, a cuckoo filter's in [`CuckooSizing`]). Every parser rejects bad
//! input with a message that says what a good value looks like; clap prints it and exits with
//! status 2.

use std::ffi::OsString;
use std::path::PathBuf;

use bloom_core::{BloomFilter, BuildError, Layout, Params, params};

use crate::input::DEFAULT_MAX_LINE_BYTES;

/// `--layout`: where a key's bits go.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LayoutArg {
    /// A key's bits in one 64-byte cache line: one memory access per lookup (≈10% more bits).
    #[default]
    Blocked,
    /// Bits anywhere: the fewest bits for a rate, up to k cache misses per lookup.
    Classic,
    /// One bit in each 64-bit word of a cache line, k fixed at 8: the fastest lookup (≈2% more
    /// bits than blocked at 1%, 22% more at 10%).
    #[value(name = "split-block")]
    SplitBlock,
}

impl From<LayoutArg> for Layout {
    fn from(l: LayoutArg) -> Self {
        match l {
            LayoutArg::Blocked => Layout::Blocked,
            LayoutArg::Classic => Layout::Classic,
            LayoutArg::SplitBlock => Layout::SplitBlock,
        }
    }
}

/// `--kind` of `build`: which filter to write.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum KindArg {
    /// A Bloom filter of bits: the smallest, mergeable, no removal.
    #[default]
    Plain,
    /// A Bloom filter of 4-bit counters (4× plain's memory): a service can remove keys.
    Counting,
    /// Fingerprints in buckets: a service can remove keys; every line is stored (as CF.ADD);
    /// a full filter is an error, never a dropped key. Takes no --layout.
    Cuckoo,
}

/// The flags of the commands that size a filter: `--items`, `--fpr` and `--layout`.
///
/// `N` is what `--items` takes: a count (`u64`), or a count or `auto` ([`ItemsArg`]). Each
/// command words the help of `--items` and `--fpr` for itself, with
/// `#[command(mut_arg("items", |a| a.help(..)))]` (likewise `"fpr"`).
#[derive(clap::Args, Clone, Copy, Debug)]
pub struct SizeArgs<N: ItemsValue = u64> {
    #[arg(short = 'n', long, value_name = N::VALUE_NAME, value_parser = N::parse,
          allow_negative_numbers = true)]
    pub items: N,
    #[arg(short = 'p', long, value_name = "P", value_parser = parse_fpr,
          allow_negative_numbers = true)]
    pub fpr: f64,
    /// Layout of the bits [default: blocked].
    #[arg(long, value_enum)]
    pub layout: Option<LayoutArg>,
}

impl<N: ItemsValue> SizeArgs<N> {
    /// `--layout` as the core library's type (the default if not given).
    pub fn layout(&self) -> Layout {
        Layout::from(self.layout.unwrap_or_default())
    }

    /// A filter for `items` keys at `--fpr` in `--layout`, with hash key `seed` (random if
    /// none).
    pub fn build_filter(&self, items: u64, seed: Option<u128>) -> Result<BloomFilter, BuildError> {
        let mut builder = BloomFilter::builder()
            .expected_items(items)
            .false_positive_rate(self.fpr)
            .layout(self.layout());
        if let Some(seed) = seed {
            builder = builder.seed(seed);
        }
        builder.build()
    }
}

impl SizeArgs {
    /// The bits and hashes of the filter these flags give.
    pub fn params(&self) -> Result<Params, BuildError> {
        params::for_layout(self.layout(), self.items, self.fpr)
    }
}

/// A bucket's slots.
const CUCKOO_SLOTS: u64 = 4;
/// The load `n` keys fill a cuckoo filter sized for them to.
const CUCKOO_DESIGN_LOAD: f64 = 0.95;
/// The narrowest and widest fingerprints a cuckoo filter takes.
const CUCKOO_FINGERPRINT_BITS: (u32, u32) = (5, 17);

/// The cuckoo filter `CuckooFilter::builder().expected_items(n).false_positive_rate(p)`
/// builds, computed without allocating it (for `calc`): the smallest fingerprint width `f`
/// whose rate at the design load meets `p`, and `⌈n / (4·0.95)⌉` buckets of `4f − 4` bits.
/// `tests/cli.rs` `calc_compares_the_three_kinds_as_bloom_core_builds_them` checks it against
/// the filter bloom-core builds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CuckooSizing {
    /// Buckets, `m`.
    pub buckets: u64,
    /// Bits per fingerprint, `f`.
    pub fingerprint_bits: u32,
}

impl CuckooSizing {
    /// The sizing for `items` keys at rate `fpr`; `Err(min)`, the lowest rate a cuckoo filter
    /// reaches, when `fpr` is below it.
    pub fn new(items: u64, fpr: f64) -> Result<Self, f64> {
        let (narrowest, widest) = CUCKOO_FINGERPRINT_BITS;
        let fingerprint_bits = (narrowest..=widest)
            .find(|&f| cuckoo_fpr(f, CUCKOO_DESIGN_LOAD) <= fpr)
            .ok_or_else(|| cuckoo_fpr(widest, CUCKOO_DESIGN_LOAD))?;
        let buckets = (items as f64 / (CUCKOO_SLOTS as f64 * CUCKOO_DESIGN_LOAD)).ceil() as u64;
        Ok(Self {
            buckets: buckets.max(1),
            fingerprint_bits,
        })
    }

    /// The buckets' bits, `m·(4f − 4)`.
    pub fn bits(&self) -> u64 {
        self.buckets * u64::from(4 * self.fingerprint_bits - 4)
    }

    /// Bytes of the packed buckets in 64-bit words, as in memory and in the file.
    pub fn bytes(&self) -> u64 {
        self.bits().div_ceil(64) * 8
    }

    /// The rate with `items` keys in it.
    pub fn fpr_at(&self, items: u64) -> f64 {
        let load = items as f64 / (self.buckets * CUCKOO_SLOTS) as f64;
        cuckoo_fpr(self.fingerprint_bits, load)
    }
}

/// A cuckoo filter's false-positive rate with `f`-bit fingerprints at `load` (slots used /
/// slots): `1 − (1 − 1/(2^f − 1))^(8·load)`, the chance that one of the fingerprints in a
/// key's two buckets of four equals its own (bloom-core's `CuckooFilter::current_fpr`).
pub fn cuckoo_fpr(fingerprint_bits: u32, load: f64) -> f64 {
    let one = 1.0 / ((1u64 << fingerprint_bits) - 1) as f64;
    1.0 - (1.0 - one).powf(2.0 * CUCKOO_SLOTS as f64 * load)
}

/// What `--items` of [`SizeArgs`] takes, and how it is parsed.
pub trait ItemsValue: Clone + Send + Sync + 'static {
    /// The placeholder in help and usage.
    const VALUE_NAME: &'static str;
    /// The value parser.
    fn parse(s: &str) -> Result<Self, String>;
}

impl ItemsValue for u64 {
    const VALUE_NAME: &'static str = "N";
    fn parse(s: &str) -> Result<Self, String> {
        parse_items(s)
    }
}

impl ItemsValue for ItemsArg {
    const VALUE_NAME: &'static str = "N|auto";
    fn parse(s: &str) -> Result<Self, String> {
        parse_items_or_auto(s)
    }
}

/// The arguments of the commands that look keys up in, or take them out of, one filter file:
/// the file, the keys, `--quiet` and [`InputArgs`].
///
/// Each command words the help of `file`, `keys` and `quiet` for itself, with
/// `#[command(mut_arg("file", |a| a.help(..)))]` (likewise `"keys"`, `"quiet"`).
#[derive(clap::Args, Debug)]
pub struct FileKeysArgs {
    /// The filter file.
    pub file: PathBuf,
    /// The keys; none reads them from standard input, one per line.
    #[arg(value_name = "KEY")]
    pub keys: Vec<OsString>,
    /// Print nothing.
    #[arg(short, long)]
    pub quiet: bool,
    #[command(flatten)]
    pub input: InputArgs,
}

/// Options of the commands that read keys, one per line.
#[derive(clap::Args, Clone, Copy, Debug)]
pub struct InputArgs {
    /// The longest line accepted, in bytes without its line ending (65536, 64K, 1M, 16MiB):
    /// a longer line is an error naming the input and the line number, and stops the command.
    #[arg(long, value_name = "BYTES", default_value_t = DEFAULT_MAX_LINE_BYTES,
          value_parser = parse_line_bytes)]
    pub max_line_bytes: usize,
}

const BYTES_HINT: &str =
    "expected a number of bytes such as 65536, 64K or 64KiB, 1M or 1MiB, 1G or 1GiB";

/// Parses a line length cap: a whole number of bytes ≥ 1, optionally with a binary suffix
/// `K`/`KiB` (1024), `M`/`MiB` or `G`/`GiB` (case-insensitive, `_` separators allowed).
pub fn parse_line_bytes(s: &str) -> Result<usize, String> {
    let t = s.trim().replace('_', "");
    let lower = t.to_ascii_lowercase();
    let digits_end = lower
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(lower.len());
    let (number, suffix) = lower.split_at(digits_end);
    let scale: u64 = match suffix.trim_start() {
        "" | "b" => 1,
        "k" | "kib" => 1 << 10,
        "m" | "mib" => 1 << 20,
        "g" | "gib" => 1 << 30,
        _ => return Err(format!("{s:?} is not a size: {BYTES_HINT}")),
    };
    if number.is_empty() {
        return Err(format!("{s:?} is not a size: {BYTES_HINT}"));
    }
    let n = number
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(scale))
        .filter(|&n| n <= usize::MAX as u64 / 2)
        .ok_or_else(|| format!("{s} is too large"))?;
    if n == 0 {
        return Err("must be at least 1 byte".to_owned());
    }
    Ok(n as usize)
}

/// `--items` for `build`: a count, or `auto` (count the input's lines first).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ItemsArg {
    /// Count the input lines and size the filter for that many keys.
    Auto,
    /// Sized for this many keys.
    Count(u64),
}

const ITEMS_HINT: &str = "expected a whole number of keys such as 1000000, 250k, 100M or 1e8";

/// Parses an item count: digits (with optional `_` separators), optionally in scientific
/// notation (`1e8`, `2.5e6`) and/or with a decimal suffix `k`, `M`, `G`, `T` (`100M` is
/// 100 000 000). It must be a whole number ≥ 1.
pub fn parse_items(s: &str) -> Result<u64, String> {
    let t = s.trim().replace('_', "");
    if t.starts_with('-') {
        return Err(format!("must be a positive number of keys, got {s}"));
    }
    let (number, scale) = match t.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() && !t.eq_ignore_ascii_case("nan") => {
            let scale: u64 = match c {
                'k' | 'K' => 1_000,
                'm' | 'M' => 1_000_000,
                'g' | 'G' => 1_000_000_000,
                't' | 'T' => 1_000_000_000_000,
                _ => return Err(format!("unknown suffix {c:?} in {s:?}: {ITEMS_HINT}")),
            };
            (&t[..i], scale)
        }
        _ => (t.as_str(), 1),
    };
    let n = if !number.is_empty() && number.bytes().all(|b| b.is_ascii_digit()) {
        number
            .parse::<u64>()
            .ok()
            .and_then(|n| n.checked_mul(scale))
            .ok_or_else(|| format!("{s} is too large"))?
    } else {
        let x: f64 = number
            .parse()
            .map_err(|_| format!("{s:?} is not a number: {ITEMS_HINT}"))?;
        let x = x * scale as f64;
        if !x.is_finite() {
            return Err(format!("{s:?} is not a finite number: {ITEMS_HINT}"));
        }
        if x.fract() != 0.0 {
            return Err(format!("{s} is not a whole number: {ITEMS_HINT}"));
        }
        if x >= u64::MAX as f64 {
            return Err(format!("{s} is too large"));
        }
        x as u64
    };
    if n == 0 {
        return Err(
            "must be at least 1: the number of distinct keys the filter is sized for".to_owned(),
        );
    }
    Ok(n)
}

/// [`parse_items`], or `auto`.
pub fn parse_items_or_auto(s: &str) -> Result<ItemsArg, String> {
    if s.trim().eq_ignore_ascii_case("auto") {
        Ok(ItemsArg::Auto)
    } else {
        parse_items(s)
            .map(ItemsArg::Count)
            .map_err(|e| format!("{e} (or auto)"))
    }
}

/// Parses a false-positive rate strictly between 0 and 1: `0.01`, `1e-4` or a percentage
/// such as `1%`.
pub fn parse_fpr(s: &str) -> Result<f64, String> {
    let t = s.trim();
    let (number, scale) = match t.strip_suffix('%') {
        Some(n) => (n.trim_end(), 0.01),
        None => (t, 1.0),
    };
    let p = number
        .parse::<f64>()
        .map(|x| x * scale)
        .map_err(|_| format!("{s:?} is not a number: expected a rate such as 0.01, 1e-4 or 1%"))?;
    if !(p > 0.0 && p < 1.0) {
        return Err(format!(
            "must be strictly between 0 and 1 (e.g. 0.01, 1e-4 or 1%), got {s}"
        ));
    }
    Ok(p)
}

/// Parses a 128-bit seed: decimal, or hexadecimal with a `0x` prefix (`_` separators allowed).
pub fn parse_seed(s: &str) -> Result<u128, String> {
    let t = s.trim().replace('_', "");
    let parsed = match t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        Some(hex) => u128::from_str_radix(hex, 16),
        None => t.parse::<u128>(),
    };
    parsed.map_err(|e| {
        format!("{e}: expected a decimal or 0x-prefixed hexadecimal integer below 2^128")
    })
}

/// A rate to four significant digits (trailing zeros dropped), without exponent notation
/// down to 1e-6.
pub fn fmt_rate(x: f64) -> String {
    if x == 0.0 || !x.is_finite() {
        return format!("{x}");
    }
    if x.abs() < 1e-6 {
        return format!("{x:.3e}");
    }
    let decimals = (3 - x.abs().log10().floor() as i32).max(0) as usize;
    let s = format!("{x:.decimals$}");
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_owned()
    } else {
        s
    }
}

/// Parses `dedup --window`: a time (`90s`, `30min`, `24h`, `7d`, `2w`, `500ms`) or a number
/// of lines (`10M`, `250k`, `1000000`). A bare `m` is refused as ambiguous.
pub fn parse_window(s: &str) -> Result<bloom_core::windowed::Window, String> {
    use bloom_core::windowed::Window;
    use std::time::Duration;
    let t = s.trim();
    let digits = t
        .find(|c: char| !(c.is_ascii_digit() || c == '_' || c == '.'))
        .unwrap_or(t.len());
    let (number, unit) = t.split_at(digits);
    let millis_per = match unit {
        "ms" => Some(1.0),
        "s" => Some(1e3),
        "min" => Some(60e3),
        "h" => Some(3_600e3),
        "d" => Some(86_400e3),
        "w" => Some(7.0 * 86_400e3),
        "m" => {
            return Err(format!(
                "{s:?} is ambiguous: write {number}min for minutes or {number}M for {number} million lines"
            ));
        }
        _ => None,
    };
    match millis_per {
        Some(per) => {
            let n: f64 = number
                .replace('_', "")
                .parse()
                .map_err(|_| format!("{s:?} is not a duration such as 24h, 30min or 7d"))?;
            let millis = n * per;
            if !(1.0..1e15).contains(&millis) {
                return Err(format!(
                    "{s:?}: a window must be from 1 ms to about 30,000 years"
                ));
            }
            Ok(Window::Time(Duration::from_millis(millis.round() as u64)))
        }
        None => parse_items(t)
            .map(Window::Count)
            .map_err(|e| format!("{e} (or a duration such as 24h, 30min or 7d)")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn items_accept_suffixes_and_scientific_notation() {
        assert_eq!(parse_items("100M"), Ok(100_000_000));
        assert_eq!(parse_items("250k"), Ok(250_000));
        assert_eq!(parse_items("1_000_000"), Ok(1_000_000));
        assert_eq!(parse_items("1e8"), Ok(100_000_000));
        assert_eq!(parse_items("2.5M"), Ok(2_500_000));
        assert_eq!(parse_items(" 7 "), Ok(7));
    }

    #[test]
    fn items_reject_what_is_not_a_positive_whole_number() {
        for bad in [
            "0",
            "-1",
            "1.5",
            "NaN",
            "nan",
            "inf",
            "",
            "abc",
            "1x",
            "1e400",
            "99999999999999999999",
        ] {
            assert!(parse_items(bad).is_err(), "{bad:?} accepted");
        }
        assert!(parse_items("0").unwrap_err().contains("at least 1"));
        assert!(parse_items("1.5").unwrap_err().contains("whole number"));
        assert_eq!(parse_items_or_auto("AUTO"), Ok(ItemsArg::Auto));
    }

    #[test]
    fn rates_must_be_strictly_between_zero_and_one() {
        assert_eq!(parse_fpr("0.01"), Ok(0.01));
        assert_eq!(parse_fpr("1e-4"), Ok(1e-4));
        assert_eq!(parse_fpr("1%"), Ok(0.01));
        for bad in ["0", "1", "-0.1", "1.5", "NaN", "inf", "100%", "x"] {
            assert!(parse_fpr(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn seeds_are_decimal_or_hex() {
        assert_eq!(parse_seed("42"), Ok(42));
        assert_eq!(parse_seed("0xff_ff"), Ok(0xffff));
        assert_eq!(parse_seed(&u128::MAX.to_string()), Ok(u128::MAX));
        assert!(parse_seed("0x").is_err());
        assert!(parse_seed("-1").is_err());
        assert!(parse_seed("1".repeat(40).as_str()).is_err());
    }

    #[test]
    fn line_caps_are_bytes_with_binary_suffixes() {
        assert_eq!(parse_line_bytes("65536"), Ok(65_536));
        assert_eq!(parse_line_bytes("64K"), Ok(65_536));
        assert_eq!(parse_line_bytes("64kib"), Ok(65_536));
        assert_eq!(parse_line_bytes("1MiB"), Ok(1 << 20));
        assert_eq!(parse_line_bytes("1 M"), Ok(1 << 20));
        assert_eq!(parse_line_bytes("2G"), Ok(2 << 30));
        assert_eq!(parse_line_bytes("1_000"), Ok(1_000));
        for bad in [
            "0",
            "0K",
            "-1",
            "",
            "K",
            "1.5M",
            "1e6",
            "1T",
            "1x",
            "99999999999999999999G",
        ] {
            assert!(parse_line_bytes(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn rates_print_with_four_significant_digits() {
        assert_eq!(fmt_rate(0.009967123), "0.009967");
        assert_eq!(fmt_rate(0.5), "0.5");
        assert_eq!(fmt_rate(0.0001), "0.0001");
        assert_eq!(fmt_rate(0.01004), "0.01004");
        assert_eq!(fmt_rate(1e-9), "1.000e-9");
        assert_eq!(fmt_rate(0.0), "0");
    }

    #[test]
    fn windows_parse_as_times_or_line_counts() {
        use bloom_core::windowed::Window;
        use std::time::Duration;
        let h = |n: u64| Window::Time(Duration::from_secs(n * 3_600));
        assert_eq!(parse_window("24h"), Ok(h(24)));
        assert_eq!(parse_window("1d"), Ok(h(24)));
        assert_eq!(parse_window("2w"), Ok(h(336)));
        assert_eq!(
            parse_window("30min"),
            Ok(Window::Time(Duration::from_secs(1_800)))
        );
        assert_eq!(
            parse_window("500ms"),
            Ok(Window::Time(Duration::from_millis(500)))
        );
        assert_eq!(parse_window("10M"), Ok(Window::Count(10_000_000)));
        assert_eq!(parse_window("250k"), Ok(Window::Count(250_000)));
        assert!(parse_window("10m").unwrap_err().contains("ambiguous"));
        assert!(parse_window("0s").is_err());
        assert!(parse_window("xh").is_err());
    }
}
