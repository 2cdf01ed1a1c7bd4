//! `bloom build`: a filter file from keys, one per line.

use std::ffi::OsString;
use std::io::{self, Write};
use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use indicatif::HumanBytes;

use crate::args::{InputArgs, ItemsArg, SizeArgs, parse_seed};
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

With --items auto the filter is sized for the number of lines (duplicates included, so at
least the number of distinct keys). Files are read twice; standard input is first copied to
a temporary file (in $TMPDIR), which needs as much free disk space as the input.")]
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

    let filter = args
        .size
        .build_filter(items, args.seed)
        .with_context(|| format!("cannot size the filter for {items} items"))?;

    let total_bytes = sources.iter().map(Source::len).sum::<Option<u64>>();
    let bar = Progress::bytes(show, "inserting", total_bytes);
    let (mut bytes_before, mut lines) = (0u64, 0u64);
    for source in &sources {
        let mut reader = source.open(args.input.max_line_bytes)?;
        while let Some(batch) = reader.next_batch()? {
            filter.insert_many(batch.iter());
            bar.update(bytes_before + reader.bytes(), lines + reader.lines());
        }
        bytes_before += reader.bytes();
        lines += reader.lines();
    }
    bar.finish();

    crate::filter_file::save(out, &filter)?;
    if !args.quiet {
        let estimated = filter.estimated_items();
        crate::cmd::warn_if_saturated(&filter, estimated, &args.output.display().to_string());
    }
    if show {
        let _ = writeln!(
            io::stderr().lock(),
            "bloom: wrote {}: {lines} lines, {} layout, m = {} bits ({}), k = {}",
            args.output.display(),
            filter.layout(),
            filter.num_bits(),
            HumanBytes(filter.size_in_bytes() as u64),
            filter.num_hashes(),
        );
    }
    Ok(())
}
