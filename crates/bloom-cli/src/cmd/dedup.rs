//! `bloom dedup`: pass each line of standard input through the first time it is (probably)
//! seen.
//!
//! The hot loop is `BloomFilter::insert_many_with` over each chunk's lines (the result of one
//! `insert` per line, in order, with the lines' cache lines prefetched a window ahead)
//! between a 256 KiB read buffer and a 1 MiB write buffer on the raw file descriptors; see
//! the crate README for measured throughput and what limits it.

use std::io::{self, BufWriter, Write};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use bloom_core::windowed::{RingLayout, Window, WindowedFilter};
use bloom_core::{BloomFilter, params};
use indicatif::HumanBytes;

use crate::args::{InputArgs, SizeArgs, fmt_rate, parse_seed, parse_window};
use crate::cmd::{STDOUT_BUFFER, raw_stdout, stdout_failed};
use crate::filter_file::PlainUse;
use crate::input::{Batch, Lines, stdin_reader};
use crate::output::AtomicFile;
use crate::state_lock::StateLock;
use crate::window_state::WindowState;

/// De-duplicate lines: copy each line of standard input to standard output the first time it
/// is (probably) seen.
///
/// A repeated line is always dropped. A line never seen before is dropped with at most the
/// filter's false-positive rate (P when N distinct lines have gone through, less before).
/// Lines are compared as raw bytes without their line ending; output lines end in LF.
#[derive(clap::Args)]
#[command(after_help = "\
Examples:
  zcat urls.gz | bloom dedup --items 100M --fpr 1e-4 > unique.txt
  crawl-frontier | bloom dedup --items 1G --fpr 1e-3 --state seen.bloom --stats | fetch

  crawl-frontier | bloom dedup --window 24h --items 50M --fpr 1e-3 --state seen.bloom | fetch

--window W: forget lines after W, so a line seen again later passes again: a time (500ms,
90s, 30min, 24h, 7d, 2w; by the wall clock) or a number of lines (10M, 250k: the last W lines
read, repeats included). A line is dropped if it was seen within the last W, and passes once
it is older than W + W/(G-1) (G = --generations, default 4); --items is then the lines
per window. BLOOM_NOW_UNIX_MS fixes the time (milliseconds since the Unix epoch), to replay
a log as of its time. With --state the window is kept across runs: a crawler restarted every hour
still drops what it fetched in the last day, and lines that expired while it was stopped
pass again. The state is then FILE and one file per generation beside it (FILE.g<epoch>-<crc>):
a run rewrites only the generations it wrote to, and removes the files FILE no longer names.

--state FILE: if FILE exists, it is loaded and must have been created with the same --items,
--fpr and --layout (and --seed, if one is given; --window and --generations if given): a
mismatch is an error, nothing is read. Without --window FILE must hold a plain Bloom filter
(a counting, scalable, cuckoo or windowed filter is refused); with --window, a windowed one.
If it does not exist, a new filter is used. Either way the filter is saved to FILE,
atomically, when standard input ends. One run per FILE at a time: a run takes a lock on
.FILE.lock beside it, and a second run fails at once, reading nothing. On any error (including a closed output pipe) FILE
is left as it was, so a rerun repeats the interrupted part rather than losing it.")]
#[command(mut_arg("items", |a| a.help(
    "Number of distinct lines to size for (1000000, 250k, 100M, 1e8); past it, more and more \
     new lines are wrongly dropped")))]
#[command(mut_arg("fpr", |a| a.help(
    "Probability that a new line is wrongly dropped, at N lines: 0.01, 1e-4 or 1%")))]
pub struct Args {
    #[command(flatten)]
    size: SizeArgs,
    /// Load the filter from FILE if it exists, save it there at the end.
    #[arg(long, value_name = "FILE")]
    state: Option<PathBuf>,
    /// The secret 128-bit hash key, decimal or 0x-hex [default: random, or the state's].
    #[arg(long, value_name = "SEED", value_parser = parse_seed)]
    seed: Option<u128>,
    /// Forget lines after this long (24h, 30min, 7d) or this many lines (10M).
    #[arg(long, value_name = "W", value_parser = parse_window)]
    window: Option<Window>,
    /// With --window: the generations a lookup checks (2 to 64): lines fade out between W
    /// and W·G/(G−1).
    #[arg(long, value_name = "G", default_value_t = 4, requires = "window")]
    generations: u32,
    /// Print lines in and out, dropped, elapsed time and throughput to stderr at the end.
    #[arg(long)]
    stats: bool,
    /// No warning when the filter is past its capacity.
    #[arg(short, long)]
    quiet: bool,
    #[command(flatten)]
    input: InputArgs,
}

/// Runs the filter over standard input.
pub fn run(args: &Args) -> Result<()> {
    if let Some(window) = args.window {
        return run_windowed(args, window);
    }
    let setup = Instant::now();
    // Fail on an unwritable state path, or a state in use, before reading any input.
    let state_out = args.state.as_deref().map(AtomicFile::create).transpose()?;
    let _lock = args.state.as_deref().map(StateLock::acquire).transpose()?;
    let loaded = args.state.as_deref().is_some_and(|p| p.exists());
    let filter = match &args.state {
        Some(path) if loaded => {
            let filter = crate::filter_file::load_plain(path, PlainUse::DedupState)?;
            check_state(&filter, args, &path.display().to_string())?;
            filter
        }
        _ => args
            .size
            .build_filter(args.size.items, args.seed)
            .context("cannot size the filter")?,
    };
    let setup = setup.elapsed();

    let start = Instant::now();
    // `insert_many_with` hashes each line a window ahead and prefetches its cache line, so
    // the DRAM misses overlap, and reports for each line, in order, what `insert` would have:
    // the result is exactly that of one `insert` per line (a line repeated within the batch
    // is new only the first time).
    let (lines, kept) = stream(args, |batch, keep| {
        filter.insert_many_with(batch.iter(), |new| keep.push(new));
    })?;
    let streamed = start.elapsed();

    let saved = Instant::now();
    if let Some(file) = state_out {
        crate::filter_file::save(file, &filter)?;
    }
    let saved = saved.elapsed();

    if args.stats || (!args.quiet && may_be_saturated(&filter, loaded, kept)) {
        let estimated = filter.estimated_items();
        if args.stats {
            report(&filter, estimated, &lines, kept, [setup, streamed, saved]);
        }
        if !args.quiet {
            crate::cmd::warn_if_saturated(&filter, estimated, "the dedup filter");
        }
    }
    Ok(())
}

/// Copies each line of standard input to standard output when `decide` says to keep it
/// (one answer per line of the batch, in order); the lines read, and how many were kept.
/// Each chunk's output is passed on at once, so a consumer downstream is never kept waiting
/// while the input trickles in (a chunk is up to 256 KiB of input: one write per thousands
/// of lines).
fn stream(
    args: &Args,
    mut decide: impl FnMut(&Batch<'_>, &mut Vec<bool>),
) -> Result<(Lines<Box<dyn io::Read>>, u64)> {
    let mut lines = Lines::new(
        stdin_reader(),
        "stdin".to_owned(),
        args.input.max_line_bytes,
    );
    let mut out = BufWriter::with_capacity(STDOUT_BUFFER, raw_stdout());
    let mut kept = 0u64;
    let mut keep = Vec::new();
    while let Some(batch) = lines.next_batch()? {
        keep.clear();
        decide(&batch, &mut keep);
        for (line, _) in batch.iter().zip(&keep).filter(|(_, keep)| **keep) {
            out.write_all(line)
                .and_then(|()| out.write_all(b"\n"))
                .map_err(|e| stdout_failed(&e))?;
            kept += 1;
        }
        out.flush().map_err(|e| stdout_failed(&e))?;
    }
    Ok((lines, kept))
}

/// Whether the saturation warning could fire, i.e. whether the pass over the whole bit array
/// it needs (`estimated_items`: about 40 ms on a 262 MiB filter, 13 % of a 2 M-line run) is
/// worth making.
///
/// Not for a new filter that took in at most half its capacity as new lines: each kept line
/// set at most k bits and a dropped one none, so at most `kept·k` bits are set, and from that
/// many the estimate is below 0.65 × capacity for any size and k that `--items`/`--fpr` give
/// (k·capacity/m ≤ ln 2 or so), far from the 1.05 × capacity the warning starts at. A loaded
/// state's bits are unknown without the pass, so it is always made then.
fn may_be_saturated(filter: &BloomFilter, loaded: bool, kept: u64) -> bool {
    loaded || filter.capacity().is_none_or(|capacity| kept > capacity / 2)
}

/// A state file must be the filter these arguments would create: same layout, size and k
/// (and hash key when --seed is given). Anything else would silently change the drop rate.
fn check_state(filter: &BloomFilter, args: &Args, name: &str) -> Result<()> {
    let sized_for = match (filter.capacity(), filter.target_fpr()) {
        (Some(n), Some(p)) => format!(" (it was created with --items {n} --fpr {p})"),
        _ => String::new(),
    };
    let layout = args.size.layout();
    if filter.layout() != layout {
        bail!(
            "{name}: the state's layout is {}, not {layout}{sized_for}",
            filter.layout()
        );
    }
    let want = args.size.params().context("cannot size the filter")?;
    if filter.num_bits() != want.bits || filter.num_hashes() != want.hashes {
        bail!(
            "{name}: the state has m = {} bits, k = {}, but --items {} --fpr {} give m = {}, \
             k = {}{sized_for}",
            filter.num_bits(),
            filter.num_hashes(),
            args.size.items,
            args.size.fpr,
            want.bits,
            want.hashes,
        );
    }
    if args.seed.is_some_and(|s| s != filter.seed()) {
        bail!("{name}: the state's hash key differs from --seed");
    }
    Ok(())
}

/// The `--stats` lines; `times` are filter setup, streaming and state save.
fn report<R>(
    filter: &BloomFilter,
    items: f64,
    lines: &Lines<R>,
    kept: u64,
    [setup, streamed, saved]: [Duration; 3],
) {
    let (n, bytes) = (lines.lines(), lines.bytes());
    let dropped = n - kept;
    let secs = streamed.as_secs_f64().max(1e-9);
    let fpr = params::expected_fpr(
        filter.layout(),
        filter.num_bits(),
        filter.num_hashes(),
        items,
    );
    let capacity = filter
        .capacity()
        .map_or_else(String::new, |c| format!(" of the {c} it was sized for"));
    let _ = write!(
        io::stderr().lock(),
        "bloom dedup: {n} lines in, {kept} out, {dropped} dropped ({pct:.2}%)\n\
         bloom dedup: {human} in {secs:.3} s: {mlps:.2} M lines/s, {mbps:.1} MB/s \
         (+ {setup:.3} s filter setup, {saved:.3} s state save)\n\
         bloom dedup: the filter holds about {items:.0} distinct lines{capacity}; \
         a new line is now dropped with probability {fpr}\n",
        pct = 100.0 * dropped as f64 / n.max(1) as f64,
        human = HumanBytes(bytes),
        mlps = n as f64 / secs / 1e6,
        mbps = bytes as f64 / secs / 1e6,
        setup = setup.as_secs_f64(),
        saved = saved.as_secs_f64(),
        fpr = fmt_rate(fpr),
    );
}

/// `--window`: the same stream through a [`WindowedFilter`], whose state file keeps the
/// window across runs.
fn run_windowed(args: &Args, window: Window) -> Result<()> {
    let setup = Instant::now();
    let clock = crate::filter_file::clock()?;
    let state_out = args.state.as_deref().map(AtomicFile::create).transpose()?;
    let _lock = args.state.as_deref().map(StateLock::acquire).transpose()?;
    let state = match &args.state {
        Some(path) if path.exists() => {
            let state = WindowState::load(path, clock)?;
            check_windowed_state(&state.filter, args, window, &path.display().to_string())?;
            state
        }
        _ => {
            // Separate, as a state is read: a run writes the generations it inserts into and
            // touches no page of the others (an interleaved ring would be faulted in whole by
            // a first run), and its lookups are prefetched batches.
            let mut builder = WindowedFilter::builder(window)
                .expected_items(args.size.items)
                .false_positive_rate(args.size.fpr)
                .generations(args.generations)
                .layout(args.size.layout())
                .ring_layout(RingLayout::Separate)
                .clock(clock);
            if let Some(seed) = args.seed {
                builder = builder.seed(seed);
            }
            WindowState::new(builder.build().context("cannot size the filter")?)
        }
    };
    let filter = &state.filter;
    let setup = setup.elapsed();

    let start = Instant::now();
    let (lines, kept) = stream(args, |batch, keep| {
        filter.seen_or_insert_many_with(batch.iter(), |seen| keep.push(!seen));
    })?;
    let streamed = start.elapsed();

    let saved = Instant::now();
    if let (Some(file), Some(path)) = (state_out, &args.state) {
        state.save(file, path)?;
    }
    let saved = saved.elapsed();
    if args.stats {
        let (n, bytes) = (lines.lines(), lines.bytes());
        let secs = streamed.as_secs_f64().max(1e-9);
        let _ = write!(
            io::stderr().lock(),
            "bloom dedup: {n} lines in, {kept} out, {dropped} dropped as seen within the window\n\
             bloom dedup: {human} in {secs:.3} s: {mlps:.2} M lines/s, {mbps:.1} MB/s \
             (+ {setup:.3} s filter setup, {saved:.3} s state save)\n\
             bloom dedup: about {items:.0} distinct lines inside the window of the {cap} it was sized for; \
             a new line is now dropped with probability {fpr}\n",
            dropped = n - kept,
            human = HumanBytes(bytes),
            mlps = n as f64 / secs / 1e6,
            mbps = bytes as f64 / secs / 1e6,
            setup = setup.as_secs_f64(),
            saved = saved.as_secs_f64(),
            items = filter.estimated_items(),
            cap = filter.expected_items(),
            fpr = fmt_rate(filter.current_fpr()),
        );
    }
    Ok(())
}

/// A windowed state must be the filter these arguments would create.
fn check_windowed_state(
    filter: &WindowedFilter,
    args: &Args,
    window: Window,
    name: &str,
) -> Result<()> {
    let was = format!(
        " (it was created with --window {} --generations {} --items {} --fpr {} --layout {})",
        match filter.window() {
            Window::Time(d) => format!("{}ms", d.as_millis()),
            Window::Count(n) => n.to_string(),
        },
        filter.generations(),
        filter.expected_items(),
        filter.target_fpr(),
        filter.layout(),
    );
    if filter.window() != window
        || filter.generations() != args.generations
        || filter.expected_items() != args.size.items
        || filter.target_fpr() != args.size.fpr
        || filter.layout() != args.size.layout()
    {
        bail!("{name}: the state does not match these options{was}");
    }
    if args.seed.is_some_and(|s| s != filter.seed()) {
        bail!("{name}: the state's hash key differs from --seed");
    }
    Ok(())
}
