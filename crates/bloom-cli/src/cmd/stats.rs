//! `bloom stats`: what a filter file holds. Never prints the secret hash key.

use std::path::PathBuf;

use anyhow::Result;
use bloom_core::params;
use indicatif::HumanBytes;
use serde_json::json;

use crate::args::fmt_rate;

/// Describe a filter file: format version, layout, m, k, fill, estimated items, current
/// false-positive rate, size, and the capacity and target rate it was sized for.
///
/// The secret hash key is never printed.
#[derive(clap::Args)]
#[command(after_help = "\
Examples:
  bloom stats users.bloom
  bloom stats --json users.bloom | jq .current_fpr

JSON fields: file, format_version, layout, bits, hashes, size_bytes, file_bytes, set_bits,
fill_ratio, estimated_items (null if every bit is set), current_fpr, capacity and
target_fpr (null when the filter was sized by bits), expected_fpr_at_capacity (null
likewise), saturated (true when current_fpr is more than 10% above the target: the filter
holds clearly more keys than it was sized for).")]
pub struct Args {
    /// The filter file.
    file: PathBuf,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
}

/// Prints the statistics.
pub fn run(args: &Args) -> Result<()> {
    let loaded = crate::filter_file::load(&args.file)?;
    let f = &loaded.filter;
    let set_bits = f.count_ones();
    let fill = set_bits as f64 / f.num_bits() as f64;
    let estimated = f.estimated_items();
    let current = f.current_fpr();
    let at_capacity = f
        .capacity()
        .map(|n| params::expected_fpr(f.layout(), f.num_bits(), f.num_hashes(), n as f64));
    let saturated = f
        .target_fpr()
        .is_some_and(|t| current > t * crate::cmd::SATURATED);

    let text = if args.json {
        let value = json!({
            "file": args.file.display().to_string(),
            "format_version": loaded.version,
            "layout": f.layout().to_string(),
            "bits": f.num_bits(),
            "hashes": f.num_hashes(),
            "size_bytes": f.size_in_bytes(),
            "file_bytes": loaded.file_len,
            "set_bits": set_bits,
            "fill_ratio": fill,
            "estimated_items": estimated.is_finite().then_some(estimated),
            "current_fpr": current,
            "capacity": f.capacity(),
            "target_fpr": f.target_fpr(),
            "expected_fpr_at_capacity": at_capacity,
            "saturated": saturated,
        });
        format!("{value:#}\n")
    } else {
        let or_none = |v: Option<String>| v.unwrap_or_else(|| "not recorded".to_owned());
        let mut s = format!(
            "file:            {file}\n\
             format version:  {version}\n\
             layout:          {layout}\n\
             bits (m):        {bits}\n\
             hashes (k):      {k}\n\
             size:            {size} bytes ({human})\n\
             set bits:        {set_bits} ({fill:.2}% full)\n\
             estimated items: {estimated:.0}\n\
             current fpr:     {current}\n\
             capacity:        {capacity}\n\
             target fpr:      {target}\n",
            file = args.file.display(),
            version = loaded.version,
            layout = f.layout(),
            bits = f.num_bits(),
            k = f.num_hashes(),
            size = f.size_in_bytes(),
            human = HumanBytes(f.size_in_bytes() as u64),
            fill = fill * 100.0,
            current = fmt_rate(current),
            capacity = or_none(f.capacity().map(|c| c.to_string())),
            target = or_none(f.target_fpr().map(fmt_rate)),
        );
        if saturated {
            s.push_str(
                "warning:         the current fpr is more than 10% above the target: the \
                 filter holds more keys than it was sized for; rebuild it larger\n",
            );
        }
        s
    };
    crate::cmd::print(&text)
}
