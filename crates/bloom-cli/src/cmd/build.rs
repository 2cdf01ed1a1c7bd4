//! `bloom build`: a filter file from keys, one per line.

use std::ffi::OsString;
use std::io::{self, Write};
use std::path::PathBuf;

use anyhow::{Context, Result, anyhow, bail};
use bloom_core::{AnyFilter, CuckooFilter};
use indicatif::HumanBytes;

use crate::args::{InputArgs, ItemsArg, KindArg, SizeArgs, parse_seed};
use crate::input::Source;
use crate::output::AtomicFile;
use crate::progress::{self, Progress};

/// Build a filter file from keys, one per line (LF or CR LF).
///
/// Every line is a key, the empty line included; a key is the line's raw bytes without its
/// line ending. The file is written atomically: it appears complete or not at all.
#[derive(clap::Args)]
#[command(after_help = "\
Examples:
  bloom build --items 1M --fpr 0.01 -o users.bloom users.txt
  psql -Atc 'select id from users' | bloom build --items auto --fpr 1e-3 -o users.bloom
  bloom build --kind cuckoo --items 1M --fpr 0.001 -o users.cf users.txt

With --items auto the filter is sized for the number of lines (duplicates included, so at
least the number of distinct keys). Files are read twice; standard input is first copied to
a temporary file (in $TMPDIR), which needs as much free disk space as the input.

--kind cuckoo: every line is stored, like CF.ADD (a key listed twice is stored twice), so
that a service removing one deleted key can never take the only fingerprint another key
relies on; a key may be listed at most 8 times. Rates below about 5.8e-5 are out of its reach (`bloom calc` says).
A cuckoo filter has a hard limit: when no slot is free for a key the build stops with an
error naming how many keys went in, and writes nothing; rerun it with a larger --items (or
--items auto). --layout applies to the Bloom kinds only.")]
#[command(mut_arg("items", |a| a.help(
    "Number of distinct keys to size for (1000000, 250k, 100M, 1e8), or `auto`")))]
#[command(mut_arg("fpr", |a| a.help("Target false-positive rate at N keys, e.g. 0.01, 1e-4 or 1%")))]
pub struct Args {
    /// Input files (regular files only); `-` or none reads standard input.
    #[arg(value_name = "INPUT")]
    inputs: Vec<OsString>,
    /// The filter file to write.
    #[arg(short, long, value_name = "FILE")]
    output: PathBuf,
    /// The kind of filter.
    #[arg(long, value_enum, default_value_t)]
    kind: KindArg,
    #[command(flatten)]
    size: SizeArgs<ItemsArg>,
    /// The secret 128-bit hash key, decimal or 0x-hex [default: random]. Only for filters
    /// that must be rebuilt identically; whoever knows it can craft false positives.
    #[arg(long, value_name = "SEED", value_parser = parse_seed)]
    seed: Option<u128>,
    /// No progress bar, no summary, no warning when the filter is past its capacity.
    #[arg(short, long)]
    quiet: bool,
    #[command(flatten)]
    input: InputArgs,
}

/// Builds the filter and writes it.
pub fn run(args: &Args) -> Result<()> {
    let mut sources: Vec<Source> = if args.inputs.is_empty() {
        vec![Source::Stdin]
    } else {
        args.inputs.iter().map(|a| Source::from_arg(a)).collect()
    };
    if sources
        .iter()
        .filter(|s| matches!(s, Source::Stdin))
        .count()
        > 1
    {
        bail!("standard input (-) can be read only once");
    }
    check_kind(args)?;
    // Fail on an unwritable destination before reading any input.
    let out = AtomicFile::create(&args.output)?;
    let show = progress::wanted(args.quiet);

    let items = match args.size.items {
        ItemsArg::Count(n) => n,
        ItemsArg::Auto => {
            let mut total = 0u64;
            let mut counted = Vec::with_capacity(sources.len());
            for source in sources {
                let bar = Progress::bytes(show, "counting", source.len());
                let (source, lines) =
                    source.count_lines(args.input.max_line_bytes, |bytes| bar.update(bytes, 0))?;
                total += lines;
                counted.push(source);
            }
            sources = counted;
            // An empty input still makes a valid (empty) filter: size it for one key.
            total.max(1)
        }
    };

    let filter = new_filter(args, items)
        .with_context(|| format!("cannot size the filter for {items} items"))?;

    let total_bytes = sources.iter().map(Source::len).sum::<Option<u64>>();
    let bar = Progress::bytes(show, "inserting", total_bytes);
    let (mut bytes_before, mut lines) = (0u64, 0u64);
    for source in &sources {
        let mut reader = source.open(args.input.max_line_bytes)?;
        let mut line = 0u64;
        while let Some(batch) = reader.next_batch()? {
            match &filter {
                AnyFilter::Plain(f) => f.insert_many(batch.iter()),
                AnyFilter::Cuckoo(f) => {
                    for key in batch.iter() {
                        line += 1;
                        insert_line(f, key, items, line, source, args)?;
                    }
                }
                other => batch.iter().for_each(|key| {
                    other.insert(key);
                }),
            }
            bar.update(bytes_before + reader.bytes(), lines + reader.lines());
        }
        bytes_before += reader.bytes();
        lines += reader.lines();
    }
    bar.finish();

    crate::filter_file::save_any(out, &filter)?;
    if !args.quiet {
        let estimated = filter.estimated_items();
        crate::cmd::warn_if_over_capacity(
            &args.output.display().to_string(),
            estimated,
            filter.capacity(),
            filter.target_fpr(),
            || filter.current_fpr(),
        );
    }
    if show {
        let _ = writeln!(
            io::stderr().lock(),
            "bloom: wrote {}: {lines} lines, {}",
            args.output.display(),
            describe(&filter),
        );
    }
    Ok(())
}

/// Refuses, before any input is read, what `--kind` cannot take: `--layout` for a cuckoo
/// filter, and a rate a cuckoo filter cannot reach (also with `--items auto`, before the
/// count).
fn check_kind(args: &Args) -> Result<()> {
    if args.kind != KindArg::Cuckoo {
        return Ok(());
    }
    if let Some(layout) = args.size.layout {
        bail!(
            "--layout {} applies to the Bloom kinds; a cuckoo filter has no layout",
            bloom_core::Layout::from(layout)
        );
    }
    // The smallest filter with the rate: a fixed seed, so no draw from the OS.
    CuckooFilter::builder()
        .expected_items(1)
        .false_positive_rate(args.size.fpr)
        .seed(0)
        .build()
        .map(drop)
        .context("cannot size the filter")
}

/// The empty filter of `--kind` for `items` keys.
fn new_filter(args: &Args, items: u64) -> Result<AnyFilter> {
    Ok(match args.kind {
        KindArg::Plain => AnyFilter::Plain(args.size.build_filter(items, args.seed)?),
        KindArg::Counting => {
            let mut builder = bloom_core::BloomFilter::builder()
                .expected_items(items)
                .false_positive_rate(args.size.fpr)
                .layout(args.size.layout());
            if let Some(seed) = args.seed {
                builder = builder.seed(seed);
            }
            AnyFilter::Counting(builder.build_counting()?)
        }
        KindArg::Cuckoo => {
            let mut builder = CuckooFilter::builder()
                .expected_items(items)
                .false_positive_rate(args.size.fpr);
            if let Some(seed) = args.seed {
                builder = builder.seed(seed);
            }
            AnyFilter::Cuckoo(builder.build()?)
        }
    })
}

/// Stores `key` (line `line` of `source`): one insertion per line, like `CF.ADD`, so the
/// file holds a fingerprint for every line and a service's later remove of one deleted key
/// can never take the only copy another key relies on (`tests/cli.rs`
/// `removing_any_key_of_a_cuckoo_build_keeps_every_other_key`). A full filter stops the
/// build: every key must be in the file, so the error names how far it got and asks for a
/// larger --items (`a_full_cuckoo_filter_stops_the_build_and_writes_nothing`).
/// The most copies of one fingerprint a cuckoo filter holds: both buckets' four slots.
const MOST_COPIES: u32 = 8;

fn insert_line(
    filter: &CuckooFilter,
    key: &[u8],
    items: u64,
    line: u64,
    source: &Source,
    args: &Args,
) -> Result<()> {
    filter.insert(key).map_err(|full| {
        let out = args.output.display();
        let input = source.name();
        // Both buckets hold nothing but this fingerprint: the line repeats a key (or a key
        // sharing its fingerprint and buckets) eight times, which no size of filter takes.
        if filter.count(key) >= MOST_COPIES {
            return anyhow!(
                "{out}: not written: line {line} of {input} repeats a key that fills both its \
                 buckets: a cuckoo build stores every line, so a key may be listed at most \
                 {MOST_COPIES} times; remove the duplicate lines (sort -u)",
            );
        }
        anyhow!(
            "{out}: not written: the cuckoo filter sized for {items} keys is full: it holds \
             {len} keys in its {slots} slots and has no room for line {line} of {input}; \
             rerun with a larger --items{auto}",
            len = full.len,
            slots = full.slots,
            auto = if matches!(args.size.items, ItemsArg::Auto) {
                ""
            } else {
                " (or --items auto, which counts the input's lines)"
            },
        )
    })
}

/// The summary's description of what was written.
fn describe(filter: &AnyFilter) -> String {
    let size = HumanBytes(filter.size_in_bytes() as u64);
    match filter {
        AnyFilter::Plain(f) => format!(
            "{} layout, m = {} bits ({size}), k = {}",
            f.layout(),
            f.num_bits(),
            f.num_hashes()
        ),
        AnyFilter::Counting(f) => format!(
            "counting, {} layout, m = {} counters ({size}), k = {}",
            f.layout(),
            f.num_slots(),
            f.num_hashes()
        ),
        AnyFilter::Cuckoo(f) => format!(
            "cuckoo, {} keys in {} buckets ({size}), {}-bit fingerprints",
            f.len(),
            f.num_buckets(),
            f.fingerprint_bits()
        ),
        other => format!("{} ({size})", other.kind()),
    }
}
