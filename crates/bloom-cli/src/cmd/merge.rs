//! `bloom merge`: the union of filter files.

use std::path::PathBuf;

use anyhow::{Context, Result, anyhow};

use crate::filter_file::PlainUse;
use crate::output::AtomicFile;

/// Merge filter files into one that answers `maybe` for every key of any of them (bitwise
/// OR).
///
/// The files must have the same layout, number of bits, number of hashes and hash key, i.e.
/// be built with the same --items, --fpr, --layout and --seed. The output keeps the first
/// file's recorded capacity and target rate. Plain filters only: a counting, scalable or
/// cuckoo filter is refused (a cuckoo filter's fingerprints cannot be OR-ed; build one
/// filter from all the keys instead).
#[derive(clap::Args)]
#[command(after_help = "\
Example:
  bloom merge shard-*.bloom -o all.bloom")]
pub struct Args {
    /// The filter files (one alone is validated and copied).
    #[arg(value_name = "FILE", required = true)]
    inputs: Vec<PathBuf>,
    /// The merged filter file to write (it may be one of the inputs).
    #[arg(short, long, value_name = "OUT")]
    output: PathBuf,
}

/// Merges and writes.
pub fn run(args: &Args) -> Result<()> {
    let out = AtomicFile::create(&args.output)?;
    let (first, rest) = args
        .inputs
        .split_first()
        .ok_or_else(|| anyhow!("no filter files to merge"))?;
    let merged = crate::filter_file::load_plain(first, PlainUse::Merge)?;
    for path in rest {
        let other = crate::filter_file::load_plain(path, PlainUse::Merge)?;
        merged.union(&other).with_context(|| {
            format!(
                "{} and {} cannot be merged",
                first.display(),
                path.display()
            )
        })?;
    }
    crate::filter_file::save(out, &merged)?;
    let estimated = merged.estimated_items();
    crate::cmd::warn_if_saturated(&merged, estimated, &args.output.display().to_string());
    Ok(())
}
