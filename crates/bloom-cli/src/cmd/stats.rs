//! `bloom stats`: what a filter file holds. Never prints the secret hash key.

use std::path::PathBuf;

use anyhow::Result;
use bloom_core::windowed::Window;
use bloom_core::{AnyFilter, BloomFilter, Layout, StageStats, params};
use indicatif::HumanBytes;
use serde_json::json;

use crate::args::{cuckoo_fpr, fmt_rate};
use crate::filter_file::Loaded;

/// Describe a filter file: format version, kind, layout, m, k, fill, estimated items,
/// current false-positive rate, size, and the capacity and target rate it was sized for; for
/// a cuckoo filter, its buckets, fingerprint width, slots, exact item count and load factor.
///
/// The secret hash key is never printed.
#[derive(clap::Args)]
#[command(after_help = "\
Examples:
  bloom stats users.bloom
  bloom stats --json users.bloom | jq .current_fpr

JSON fields: file, format_version, kind (plain, counting, scalable, cuckoo or windowed), layout (null
for cuckoo), bits, hashes (null for cuckoo), size_bytes, file_bytes, set_bits (null for
cuckoo), fill_ratio, estimated_items (null if every bit is set), current_fpr, capacity and
target_fpr (null when the filter was sized by bits or buckets), expected_fpr_at_capacity (null
likewise), saturated (true when current_fpr is more than 10% above the target: the filter
holds clearly more keys than it was sized for), saturated_counters (counting filters: counters
stuck at 15), stages (scalable filters: one object per stage with capacity, items, bits,
hashes, target_fpr, fill_ratio, current_fpr; capacity, hashes and expected_fpr_at_capacity
are then null at the top level), snapshot (a service's snapshot, as `SharedFilter::save`
writes: name, watermark_hex, saved_at_unix_ms; null for a bare filter file); for cuckoo
filters (null for the others): buckets, fingerprint_bits, slots (4 per bucket), items (the
exact number of fingerprints stored) and load_factor (items / slots); window (windowed
filters, else null): unit (time_ms or inserts), length, generations, period, epoch, inserts;
a windowed filter's capacity is its keys per window and its bits, fill and estimate are
over the generations in the window.

A counting filter's bits are its non-zero counters; a scalable filter's are summed over its
stages, and its current_fpr is the compound rate. A cuckoo filter's bits are its buckets'
(buckets × (4 × fingerprint_bits − 4)), its fill_ratio is its load_factor and its
estimated_items its exact items; it is full, refusing inserts, somewhat above a load factor
of 0.95, the load it is sized to reach at capacity.")]
pub struct Args {
    /// The filter file.
    file: PathBuf,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
}

/// What only one family of filters has.
enum Detail {
    /// The Bloom kinds: a layout, and bits set (non-zero counters; summed over stages).
    Bits { layout: Layout, set_bits: u64 },
    /// A cuckoo filter.
    Cuckoo(CuckooFigures),
}

impl Detail {
    fn layout(&self) -> Option<Layout> {
        match self {
            Self::Bits { layout, .. } => Some(*layout),
            Self::Cuckoo(_) => None,
        }
    }

    fn set_bits(&self) -> Option<u64> {
        match self {
            Self::Bits { set_bits, .. } => Some(*set_bits),
            Self::Cuckoo(_) => None,
        }
    }

    fn cuckoo(&self) -> Option<&CuckooFigures> {
        match self {
            Self::Bits { .. } => None,
            Self::Cuckoo(c) => Some(c),
        }
    }
}

/// A cuckoo filter's own figures.
struct CuckooFigures {
    buckets: u64,
    fingerprint_bits: u32,
    slots: u64,
    items: u64,
    load_factor: f64,
}

/// A windowed filter's own figures.
struct WindowFigures {
    window: Window,
    generations: u32,
    period: u64,
    epoch: u64,
    inserts: u64,
}

/// What `stats` reports, for any kind of filter.
struct Figures {
    window: Option<WindowFigures>,
    kind: &'static str,
    detail: Detail,
    bits: u64,
    hashes: Option<u32>,
    size_bytes: usize,
    fill: f64,
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
                let set_bits = s.count_ones();
                Self {
                    kind: "scalable",
                    detail: Detail::Bits {
                        layout: s.layout(),
                        set_bits,
                    },
                    bits: s.num_bits(),
                    hashes: None,
                    size_bytes: s.size_in_bytes(),
                    fill: set_bits as f64 / s.num_bits() as f64,
                    estimated: s.estimated_items(),
                    current: s.current_fpr(),
                    capacity: None,
                    target: s.target_fpr(),
                    at_capacity: None,
                    saturated_counters: None,
                    stages: Some(stages),
                    window: None,
                }
            }
            AnyFilter::Windowed(w) => Self {
                kind: "windowed",
                detail: Detail::Bits {
                    layout: w.layout(),
                    set_bits: w.count_ones(),
                },
                bits: w.num_bits(),
                hashes: Some(w.num_hashes()),
                size_bytes: w.size_in_bytes(),
                fill: w.fill_ratio(),
                estimated: w.estimated_items(),
                current: w.current_fpr(),
                capacity: Some(w.expected_items()),
                target: Some(w.target_fpr()),
                at_capacity: Some(w.target_fpr()),
                saturated_counters: None,
                stages: None,
                window: Some(WindowFigures {
                    window: w.window(),
                    generations: w.generations(),
                    period: w.period(),
                    epoch: w.epoch(),
                    inserts: w.inserts(),
                }),
            },
            AnyFilter::Cuckoo(c) => Self {
                kind: "cuckoo",
                detail: Detail::Cuckoo(CuckooFigures {
                    buckets: c.num_buckets(),
                    fingerprint_bits: c.fingerprint_bits(),
                    slots: c.slots(),
                    items: c.len(),
                    load_factor: c.load_factor(),
                }),
                bits: filter.num_bits(),
                hashes: None,
                size_bytes: c.size_in_bytes(),
                fill: c.load_factor(),
                estimated: c.len() as f64,
                current: c.current_fpr(),
                capacity: c.capacity(),
                target: c.target_fpr(),
                at_capacity: c
                    .capacity()
                    .map(|n| cuckoo_fpr(c.fingerprint_bits(), n as f64 / c.slots() as f64)),
                saturated_counters: None,
                stages: None,
                window: None,
            },
        }
    }

    fn of_bits(f: &BloomFilter, kind: &'static str, size_bytes: usize) -> Self {
        let set_bits = f.count_ones();
        Self {
            kind,
            detail: Detail::Bits {
                layout: f.layout(),
                set_bits,
            },
            bits: f.num_bits(),
            hashes: Some(f.num_hashes()),
            size_bytes,
            fill: set_bits as f64 / f.num_bits() as f64,
            estimated: f.estimated_items(),
            current: f.current_fpr(),
            capacity: f.capacity(),
            target: f.target_fpr(),
            at_capacity: f
                .capacity()
                .map(|n| params::expected_fpr(f.layout(), f.num_bits(), f.num_hashes(), n as f64)),
            saturated_counters: None,
            stages: None,
            window: None,
        }
    }
}

/// Prints the statistics.
pub fn run(args: &Args) -> Result<()> {
    let loaded = crate::filter_file::load(&args.file)?;
    let f = Figures::of(&loaded.filter);
    let saturated = f
        .target
        .is_some_and(|t| f.current > t * crate::cmd::SATURATED);
    let text = if args.json {
        json_text(args, &loaded, &f, saturated)
    } else {
        human_text(args, &loaded, &f, saturated)
    };
    crate::cmd::print(&text)
}

/// The `--json` object.
fn json_text(args: &Args, loaded: &Loaded, f: &Figures, saturated: bool) -> String {
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
    let cuckoo = f.detail.cuckoo();
    let value = json!({
        "file": args.file.display().to_string(),
        "format_version": loaded.version,
        "kind": f.kind,
        "layout": f.detail.layout().map(|l| l.to_string()),
        "bits": f.bits,
        "hashes": f.hashes,
        "size_bytes": f.size_bytes,
        "file_bytes": loaded.file_len,
        "set_bits": f.detail.set_bits(),
        "fill_ratio": f.fill,
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
        "buckets": cuckoo.map(|c| c.buckets),
        "fingerprint_bits": cuckoo.map(|c| c.fingerprint_bits),
        "slots": cuckoo.map(|c| c.slots),
        "items": cuckoo.map(|c| c.items),
        "load_factor": cuckoo.map(|c| c.load_factor),
        "window": f.window.as_ref().map(|w| {
            let (kind, length) = match w.window {
                Window::Time(d) => ("time_ms", d.as_millis() as u64),
                Window::Count(n) => ("inserts", n),
            };
            json!({
                "unit": kind,
                "length": length,
                "generations": w.generations,
                "period": w.period,
                "epoch": w.epoch,
                "inserts": w.inserts,
            })
        }),
    });
    format!("{value:#}\n")
}

/// The text report: one `label: value` line per figure.
fn human_text(args: &Args, loaded: &Loaded, f: &Figures, saturated: bool) -> String {
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
         kind:            {kind}\n",
        file = args.file.display(),
        version = loaded.version,
    );
    let size = format!(
        "{} bytes ({})",
        f.size_bytes,
        HumanBytes(f.size_bytes as u64)
    );
    match &f.detail {
        Detail::Cuckoo(c) => s.push_str(&format!(
            "buckets (m):     {buckets}\n\
             fingerprint (f): {fp} bits\n\
             slots:           {slots}\n\
             items:           {items} (exact)\n\
             load factor:     {load:.2}%\n\
             size:            {size}\n",
            buckets = c.buckets,
            fp = c.fingerprint_bits,
            slots = c.slots,
            items = c.items,
            load = c.load_factor * 100.0,
        )),
        Detail::Bits { layout, set_bits } => s.push_str(&format!(
            "layout:          {layout}\n\
             bits (m):        {bits}\n\
             hashes (k):      {k}\n\
             size:            {size}\n\
             set bits:        {set_bits} ({fill:.2}% full)\n\
             estimated items: {estimated:.0}\n",
            bits = f.bits,
            k = f
                .hashes
                .map_or_else(|| "per stage".to_owned(), |k| k.to_string()),
            fill = f.fill * 100.0,
            estimated = f.estimated,
        )),
    }
    if let Some(w) = &f.window {
        let (length, show): (u64, fn(u64) -> String) = match w.window {
            Window::Time(d) => (d.as_millis() as u64, fmt_millis),
            Window::Count(n) => (n, |n| format!("{n} lines")),
        };
        s.push_str(&format!(
            "window:          {window}, {g} generations of {period} (a key fades out between {window} and {end} after its insert)\n\
             epoch:           {epoch}{inserts}\n",
            window = show(length),
            g = w.generations,
            period = show(w.period),
            end = show(length + w.period),
            epoch = w.epoch,
            inserts = match w.window {
                Window::Count(_) => format!(" ({} lines so far)", w.inserts),
                Window::Time(_) => String::new(),
            },
        ));
    }
    s.push_str(&format!(
        "current fpr:     {current}\n\
         capacity:        {capacity}\n\
         target fpr:      {target}\n",
        current = fmt_rate(f.current),
        target = or_none(f.target.map(fmt_rate)),
    ));
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
}

/// Bytes as lower-case hex (a snapshot's watermark is opaque to the CLI).
fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Milliseconds in the largest unit that divides them: `24h`, `30min`, `1500ms`.
fn fmt_millis(ms: u64) -> String {
    const UNITS: [(u64, &str); 5] = [
        (86_400_000, "d"),
        (3_600_000, "h"),
        (60_000, "min"),
        (1_000, "s"),
        (1, "ms"),
    ];
    let (per, unit) = UNITS
        .into_iter()
        .find(|(per, _)| ms % per == 0 && ms >= *per)
        .unwrap_or((1, "ms"));
    format!("{}{unit}", ms / per)
}
