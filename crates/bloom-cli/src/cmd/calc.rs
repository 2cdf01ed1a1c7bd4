//! `bloom calc`: how big a filter for N keys at rate P is, before building it, and what the
//! other kinds `bloom build --kind` makes would take instead.

use anyhow::{Context, Result};
use bloom_core::{Layout, Params, params};
use indicatif::HumanBytes;

use crate::args::{CuckooSizing, SizeArgs, fmt_rate};

/// File bytes around the bits: the 64-byte header and the 4-byte checksum.
const FILE_OVERHEAD: u64 = 68;

/// Size a filter: bits, bytes, hashes per key and the expected false-positive rate; then the
/// memory of each kind `bloom build --kind` makes, side by side.
#[derive(clap::Args)]
#[command(after_help = "\
Example:
  bloom calc --items 100M --fpr 1e-4

The last lines compare the kinds for the same N and P: plain (the Bloom filter above),
counting (the same slots as 4-bit counters: 4x the memory) and cuckoo (buckets of four
fingerprints of f bits in 4f - 4 bits, sized to be 95% full at N keys; its rate steps with f,
and no f reaches a rate below about 5.8e-5). Bytes are the filter's bits in 64-bit words; a
file adds 68.")]
#[command(mut_arg("items", |a| a.help("Number of distinct keys, e.g. 1000000, 250k, 100M or 1e8")))]
#[command(mut_arg("fpr", |a| a.help("Target false-positive rate, e.g. 0.01, 1e-4 or 1%")))]
pub struct Args {
    #[command(flatten)]
    size: SizeArgs,
}

/// Prints the sizing.
pub fn run(args: &Args) -> Result<()> {
    let SizeArgs { items, fpr, .. } = args.size;
    let layout = args.size.layout();
    let sized = args.size.params().context("cannot size the filter")?;
    let bytes = sized.bits.div_ceil(64) * 8;
    let expected = params::expected_fpr(layout, sized.bits, sized.hashes, items as f64);
    let comparison = compare(items, fpr, &sized, layout);
    crate::cmd::print(&format!(
        "layout:        {layout}\n\
         items (n):     {items}\n\
         target fpr:    {target}\n\
         bits (m):      {bits}\n\
         bytes:         {bytes} ({human})\n\
         file size:     {file} bytes\n\
         hashes (k):    {k}\n\
         bits per item: {per_item:.2}\n\
         expected fpr:  {expected} at {items} items\n\
         {comparison}",
        target = fmt_rate(fpr),
        bits = sized.bits,
        human = HumanBytes(bytes),
        file = bytes + FILE_OVERHEAD,
        k = sized.hashes,
        per_item = sized.bits as f64 / items as f64,
        expected = fmt_rate(expected),
    ))
}

/// A heading and the `plain:`, `counting:` and `cuckoo:` lines: each kind's bytes and bits
/// per item for `items` keys at `fpr`, the plain filter being `sized` in `layout`. Each is
/// the size of the filter bloom-core builds (`tests/cli.rs`
/// `calc_compares_the_three_kinds_as_bloom_core_builds_them`).
fn compare(items: u64, fpr: f64, sized: &Params, layout: Layout) -> String {
    let line = |label: &str, bytes: u64, bits: u64, what: String| {
        format!(
            "{label:<15}{bytes} bytes ({}), {:.2} bits per item; {what}\n",
            HumanBytes(bytes),
            bits as f64 / items as f64,
        )
    };
    let plain = line(
        "plain:",
        sized.bits.div_ceil(64) * 8,
        sized.bits,
        format!("k = {}, {layout}", sized.hashes),
    );
    let counting_bits = 4 * sized.bits;
    let counting = line(
        "counting:",
        counting_bits.div_ceil(64) * 8,
        counting_bits,
        "4-bit counters, can remove".to_owned(),
    );
    let cuckoo = match CuckooSizing::new(items, fpr) {
        Ok(c) if c.bits() <= params::MAX_BITS => line(
            "cuckoo:",
            c.bytes(),
            c.bits(),
            format!(
                "{} buckets, f = {} bits, fpr {}, can remove",
                c.buckets,
                c.fingerprint_bits,
                fmt_rate(c.fpr_at(items)),
            ),
        ),
        Ok(c) => format!(
            "cuckoo:        not available: {} bits, more than the {} a filter may have\n",
            c.bits(),
            params::MAX_BITS
        ),
        Err(min) => format!(
            "cuckoo:        not available below p≈{min:.1e} (17-bit fingerprints at most)\n"
        ),
    };
    format!(
        "memory by kind, for {items} items at {}:\n{plain}{counting}{cuckoo}",
        fmt_rate(fpr)
    )
}
