//! `bloom check`: look keys up in a filter file.

use std::io::{BufWriter, Write};

use anyhow::Result;

use crate::args::FileKeysArgs;
use crate::cmd::{STDOUT_BUFFER, raw_stdout, stdout_failed};

/// Look keys up: prints `maybe<TAB>KEY` or `absent<TAB>KEY` for each. The file may hold a
/// plain, counting, scalable or cuckoo filter.
///
/// `absent` is certain: the key was never inserted. `maybe` means it probably was (wrong with
/// the filter's false-positive rate).
#[derive(clap::Args)]
#[command(mut_arg("file", |a| a.help("The filter file")))]
#[command(mut_arg("keys", |a| a.help(
    "Keys to look up; none reads them from standard input, one per line")))]
#[command(mut_arg("quiet", |a| a.help("Print nothing: the exit status alone answers")))]
#[command(after_help = "\
Examples:
  bloom check users.bloom user:1 user:2
  cut -f1 requests.tsv | bloom check users.bloom

Exit status:
  0  every key is maybe present (also when there are no keys)
  1  at least one key is absent
  2  error (missing, unreadable, truncated or corrupt filter file, unreadable input)")]
pub struct Args {
    #[command(flatten)]
    args: FileKeysArgs,
}

/// Looks the keys up; `Ok(true)` if every one is maybe present.
pub fn run(Args { args }: &Args) -> Result<bool> {
    let filter = crate::filter_file::load(&args.file)?.filter;
    let mut out = Answers {
        out: BufWriter::with_capacity(STDOUT_BUFFER, raw_stdout()),
        quiet: args.quiet,
        all_maybe: true,
    };
    crate::input::each_key_batch(&args.keys, args.input.max_line_bytes, |batch| {
        // A plain filter looks a batch up with prefetching; the others key by key.
        let found = match filter.as_plain() {
            Some(plain) => plain.contains_many(batch.iter()),
            None => batch.iter().map(|key| filter.contains(key)).collect(),
        };
        for (key, found) in batch.iter().zip(found) {
            out.answer(key, found)?;
        }
        // Answer what has arrived before waiting for more: keys may come one at a time
        // from another program that waits for each answer.
        out.flush()
    })?;
    Ok(out.all_maybe)
}

/// The `maybe`/`absent` lines on stdout.
struct Answers<W: Write> {
    out: W,
    quiet: bool,
    all_maybe: bool,
}

impl<W: Write> Answers<W> {
    fn answer(&mut self, key: &[u8], found: bool) -> Result<()> {
        self.all_maybe &= found;
        if self.quiet {
            return Ok(());
        }
        let answer: &[u8] = if found { b"maybe\t" } else { b"absent\t" };
        self.out
            .write_all(answer)
            .and_then(|()| self.out.write_all(key))
            .and_then(|()| self.out.write_all(b"\n"))
            .map_err(|e| stdout_failed(&e))
    }

    fn flush(&mut self) -> Result<()> {
        self.out.flush().map_err(|e| stdout_failed(&e))
    }
}
