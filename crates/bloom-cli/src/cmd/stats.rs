//! `bloom stats`: what a filter file holds. Never prints the secret hash key.

use std::path::PathBuf;

use anyhow::Result;
use bloom_core::{AnyFilter, BloomFilter, Layout, StageStats, params};
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

JSON fields: file, format_version, kind (plain, counting or scalable), layout, bits, hashes,
size_bytes, file_bytes, set_bits, fill_ratio, estimated_items (null if every bit is set),
current_fpr, capacity and target_fpr (null when the filter was sized by bits),
expected_fpr_at_capacity (null likewise), saturated (true when current_fpr is more than 10%
above the target: the filter holds clearly more keys than it was sized for),
saturated_counters (counting filters: counters stuck at 15), stages (scalable filters: one
object per stage with capacity, items, bits, hashes, target_fpr, fill_ratio, current_fpr;
capacity, hashes and expected_fpr_at_capacity are then null at the top level), snapshot (a
service's snapshot, as `SharedFilter::save` writes: name, watermark_hex, saved_at_unix_ms;
null for a bare filter file).

A counting filter's bits are its non-zero counters; a scalable filter's are summed over its
stages, and its current_fpr is the compound rate.")]
pub struct Args {
    /// The filter file.
    file: PathBuf,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
}

/// What `stats` reports, for any kind of filter.
struct Figures {
    kind: &'static str,
    layout: Layout,
    bits: u64,
    hashes: Option<u32>,
    size_bytes: usize,
    set_bits: u64,
    estimated: f64,
    current: f64,
    capacity: Option<u64>,
    target: Option<f64>,
    at_capacity: Option<f64>,
    saturated_counters: Option<u64>,
    stages: Option<Vec<StageStats>>,
}

impl Figures {
    fn of(filter: &AnyFilter) -> Self {
        match filter {
            AnyFilter::Plain(f) => Self::of_bits(f, "plain", f.size_in_bytes()),
            // The plain view answers exactly as the counters do (counter > 0 → bit).
            AnyFilter::Counting(c) => Self {
                saturated_counters: Some(c.count_saturated()),
                ..Self::of_bits(&c.to_bloom(), "counting", c.size_in_bytes())
            },
            AnyFilter::Scalable(s) => {
                let stages = s.stage_stats();
                Self {
                    kind: "scalable",
                    layout: s.layout(),
                    bits: s.num_bits(),
                    hashes: None,
                    size_bytes: s.size_in_bytes(),
                    set_bits: s.count_ones(),
                    estimated: s.estimated_items(),
                    current: s.current_fpr(),
                    capacity: None,
                    target: s.target_fpr(),
                    at_capacity: None,
                    saturated_counters: None,
                    stages: Some(stages),
                }
            }
        }
    }

    fn of_bits(f: &BloomFilter, kind: &'static str, size_bytes: usize) -> Self {
        Self {
            kind,
            layout: f.layout(),
            bits: f.num_bits(),
            hashes: Some(f.num_hashes()),
            size_bytes,
            set_bits: f.count_ones(),
            estimated: f.estimated_items(),
            current: f.current_fpr(),
            capacity: f.capacity(),
            target: f.target_fpr(),
            at_capacity: f
                .capacity()
                .map(|n| params::expected_fpr(f.layout(), f.num_bits(), f.num_hashes(), n as f64)),
            saturated_counters: None,
            stages: None,
        }
    }
}

/// Prints the statistics.
pub fn run(args: &Args) -> Result<()> {
    let loaded = crate::filter_file::load(&args.file)?;
    let f = Figures::of(&loaded.filter);
    let fill = f.set_bits as f64 / f.bits as f64;
    let saturated = f
        .target
        .is_some_and(|t| f.current > t * crate::cmd::SATURATED);

    let text = if args.json {
        let stages = f.stages.as_ref().map(|stages| {
            stages
                .iter()
                .map(|st| {
                    json!({
                        "capacity": st.capacity,
                        "items": st.items,
                        "bits": st.num_bits,
                        "hashes": st.num_hashes,
                        "target_fpr": st.target_fpr,
                        "fill_ratio": st.fill_ratio,
                        "current_fpr": st.current_fpr,
                    })
                })
                .collect::<Vec<_>>()
        });
        let value = json!({
            "file": args.file.display().to_string(),
            "format_version": loaded.version,
            "kind": f.kind,
            "layout": f.layout.to_string(),
            "bits": f.bits,
            "hashes": f.hashes,
            "size_bytes": f.size_bytes,
            "file_bytes": loaded.file_len,
            "set_bits": f.set_bits,
            "fill_ratio": fill,
            "estimated_items": f.estimated.is_finite().then_some(f.estimated),
            "current_fpr": f.current,
            "capacity": f.capacity,
            "target_fpr": f.target,
            "expected_fpr_at_capacity": f.at_capacity,
            "saturated": saturated,
            "saturated_counters": f.saturated_counters,
            "stages": stages,
            "snapshot": loaded.label.as_ref().map(|label| json!({
                "name": label.name,
                "watermark_hex": label.watermark.as_deref().map(hex),
                "saved_at_unix_ms": label.saved_at_unix_ms,
            })),
        });
        format!("{value:#}\n")
    } else {
        let or_none = |v: Option<String>| v.unwrap_or_else(|| "not recorded".to_owned());
        let kind = match &f.stages {
            Some(stages) => format!("scalable ({} stages)", stages.len()),
            None => f.kind.to_owned(),
        };
        let capacity = match &f.stages {
            Some(stages) => format!(
                "grows (first stage {})",
                stages.first().map_or(0, |st| st.capacity)
            ),
            None => or_none(f.capacity.map(|c| c.to_string())),
        };
        let mut s = format!(
            "file:            {file}\n\
             format version:  {version}\n\
             kind:            {kind}\n\
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
            layout = f.layout,
            bits = f.bits,
            k = f
                .hashes
                .map_or_else(|| "per stage".to_owned(), |k| k.to_string()),
            size = f.size_bytes,
            human = HumanBytes(f.size_bytes as u64),
            set_bits = f.set_bits,
            fill = fill * 100.0,
            estimated = f.estimated,
            current = fmt_rate(f.current),
            target = or_none(f.target.map(fmt_rate)),
        );
        if let Some(label) = &loaded.label {
            let watermark = label
                .watermark
                .as_deref()
                .map_or_else(|| "none (cannot be caught up)".to_owned(), hex);
            s.push_str(&format!(
                "snapshot of:     {:?}, watermark {watermark}, saved at {} ms since the epoch\n",
                label.name, label.saved_at_unix_ms
            ));
        }
        if let Some(counters) = f.saturated_counters {
            s.push_str(&format!("saturated counters: {counters} (stuck at 15)\n"));
        }
        for (i, st) in f.stages.iter().flatten().enumerate() {
            s.push_str(&format!(
                "stage {i}:         capacity {}, items {}, m {}, k {}, {:.2}% full, fpr {} (target {})\n",
                st.capacity,
                st.items,
                st.num_bits,
                st.num_hashes,
                st.fill_ratio * 100.0,
                fmt_rate(st.current_fpr),
                fmt_rate(st.target_fpr),
            ));
        }
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

/// Bytes as lower-case hex (a snapshot's watermark is opaque to the CLI).
fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
