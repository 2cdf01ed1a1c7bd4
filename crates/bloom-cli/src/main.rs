//! `bloom`: size, build, check, inspect, merge and remove keys from Bloom and cuckoo filter
//! files, and de-duplicate huge line streams. See the crate's README.md for examples of every command.
//!
//! Errors, one style throughout: every command returns an `anyhow::Result`; an error from
//! `bloom-core` (a `std::error::Error`) gets `.context(..)` saying what was being done, so
//! its own message and causes follow in the one line [`main`] prints (`{:#}`); an
//! `io::Error` is formatted in place with `input::io_msg` (without the OS error number);
//! clap's value parsers (`args`) return `Result<_, String>`, which clap prints.
#![forbid(unsafe_code)]

mod args;
mod cmd;
mod filter_file;
mod input;
mod output;
mod progress;
mod state_lock;
mod window_state;

use std::io::Write;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

const EXIT_CODES: &str = "\
Exit status:
  0  success (`check`: every key is maybe present)
  1  `check` only: at least one key is definitely absent
  2  error: bad arguments, a missing, unreadable, truncated or corrupt file, incompatible
     filters, a full cuckoo filter (`build`), a failed write. The message is one line on
     stderr; no output file is left behind.";

/// Build, inspect, query and remove keys from Bloom and cuckoo filter files, and de-duplicate
/// line streams.
///
/// Keys are the raw bytes of each input line, without its line ending (LF or CR LF).
/// Filter files hold the secret hash key: they are created readable by their owner only.
#[derive(Parser)]
#[command(name = "bloom", version, after_help = EXIT_CODES)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    Calc(cmd::calc::Args),
    Build(cmd::build::Args),
    Check(cmd::check::Args),
    Stats(cmd::stats::Args),
    Merge(cmd::merge::Args),
    Dedup(cmd::dedup::Args),
    Remove(cmd::remove::Args),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Calc(a) => cmd::calc::run(&a).map(|()| ExitCode::SUCCESS),
        Command::Build(a) => cmd::build::run(&a).map(|()| ExitCode::SUCCESS),
        Command::Check(a) => cmd::check::run(&a).map(|all_maybe| {
            if all_maybe {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            }
        }),
        Command::Stats(a) => cmd::stats::run(&a).map(|()| ExitCode::SUCCESS),
        Command::Merge(a) => cmd::merge::run(&a).map(|()| ExitCode::SUCCESS),
        Command::Dedup(a) => cmd::dedup::run(&a).map(|()| ExitCode::SUCCESS),
        Command::Remove(a) => cmd::remove::run(&a).map(|()| ExitCode::SUCCESS),
    };
    result.unwrap_or_else(|err| {
        // One line, whatever the error's sources contain. Nothing useful is left to do if
        // stderr itself is gone, hence no panic (as eprintln! would) on a failed write.
        let msg = format!("{err:#}").replace(['\n', '\r'], " ");
        let _ = writeln!(std::io::stderr().lock(), "bloom: {msg}");
        ExitCode::from(2)
    })
}
