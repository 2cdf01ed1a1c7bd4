//! `bloom calc`: how big a filter for N keys at rate P is, before building it.

use anyhow::{Context, Result};
use bloom_core::params;
use indicatif::HumanBytes;

use crate::args::{SizeArgs, fmt_rate};

/// File bytes around the bits: the 64-byte header and the 4-byte checksum.
const FILE_OVERHEAD: u64 = 68;

/// Size a filter: bits, bytes, hashes per key and the expected false-positive rate.
#[derive(clap::Args)]
#[command(after_help = "Example:\n  bloom calc --items 100M --fpr 1e-4")]
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
    crate::cmd::print(&format!(
        "layout:        {layout}\n\
         items (n):     {items}\n\
         target fpr:    {target}\n\
         bits (m):      {bits}\n\
         bytes:         {bytes} ({human})\n\
         file size:     {file} bytes\n\
         hashes (k):    {k}\n\
         bits per item: {per_item:.2}\n\
         expected fpr:  {expected} at {items} items\n",
        target = fmt_rate(fpr),
        bits = sized.bits,
        human = HumanBytes(bytes),
        file = bytes + FILE_OVERHEAD,
        k = sized.hashes,
        per_item = sized.bits as f64 / items as f64,
        expected = fmt_rate(expected),
    ))
}
