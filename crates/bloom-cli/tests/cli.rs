//! End-to-end tests of the `bloom` binary: every command, its output, its exit codes and its
//! error paths (no panic, one-line message naming the file, no partial output left behind).

use std::collections::HashSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Output;

use bloom_core::{CountingBloomFilter, Layout, ScalableBloomFilter, params};
use predicates::prelude::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tempfile::TempDir;

mod common;
use common::{assert_error, bloom, run, spawn_with_stdin, stderr, stdout};

/// Asserts a command-line (clap) rejection: exit status 2, the hint, no panic.
fn assert_usage_error(o: &Output, needle: &str) {
    let err = stderr(o);
    assert_eq!(o.status.code(), Some(2), "stderr: {err}");
    assert!(!err.contains("panicked"), "{err}");
    assert!(err.contains("invalid value"), "{err}");
    assert!(err.contains(needle), "{err:?} lacks {needle:?}");
}

/// The names in a directory, sorted (hidden temporary files included), but the locks
/// `dedup --state` keeps beside a state (`.NAME.lock`, empty, never removed;
/// `a_second_dedup_on_the_same_state_is_refused_while_the_first_runs`).
fn listing(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| !(name.starts_with('.') && name.ends_with(".lock")))
        .collect();
    names.sort();
    names
}

/// Builds `name` in `dir` from `keys` (one per line) with a fixed seed.
fn build(dir: &Path, name: &str, keys: &[&str], items: &str, fpr: &str, seed: &str) -> PathBuf {
    let input = keys.iter().map(|k| format!("{k}\n")).collect::<String>();
    let o = run(
        dir,
        &[
            "build", "--items", items, "--fpr", fpr, "--seed", seed, "-o", name,
        ],
        input,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    dir.join(name)
}

fn stats_json(dir: &Path, file: &str) -> serde_json::Value {
    let o = run(dir, &["stats", "--json", file], "");
    assert!(o.status.success(), "{}", stderr(&o));
    serde_json::from_slice(&o.stdout).expect("stats --json prints JSON")
}

// ---------------------------------------------------------------------------------------
// calc

/// The value after `label:` in `calc` / `stats` text output.
fn field<'a>(text: &'a str, label: &str) -> &'a str {
    text.lines()
        .find_map(|l| l.strip_prefix(label)?.strip_prefix(':'))
        .unwrap_or_else(|| panic!("no {label:?} in {text}"))
        .trim()
}

#[test]
fn calc_prints_the_sizing_of_bloom_core_for_each_layout() {
    let dir = TempDir::new().unwrap();
    for (layout, name) in [
        (Layout::Blocked, "blocked"),
        (Layout::Classic, "classic"),
        (Layout::SplitBlock, "split-block"),
    ] {
        let o = run(
            dir.path(),
            &["calc", "--items", "100M", "--fpr", "1e-4", "--layout", name],
            "",
        );
        assert!(o.status.success(), "{}", stderr(&o));
        let text = stdout(&o);
        let want = params::for_layout(layout, 100_000_000, 1e-4).unwrap();
        assert_eq!(field(&text, "layout"), name);
        assert_eq!(field(&text, "items (n)"), "100000000");
        assert_eq!(field(&text, "bits (m)"), want.bits.to_string());
        assert_eq!(field(&text, "hashes (k)"), want.hashes.to_string());
        let bytes = want.bits.div_ceil(64) * 8;
        assert!(
            field(&text, "bytes").starts_with(&format!("{bytes} (")),
            "{text}"
        );
        assert!(field(&text, "bytes").ends_with("MiB)"), "{text}");
        let expected: f64 = field(&text, "expected fpr")
            .split_whitespace()
            .next()
            .unwrap()
            .parse()
            .unwrap();
        let exact = params::expected_fpr(layout, want.bits, want.hashes, 1e8);
        assert!(
            (expected - exact).abs() <= exact * 1e-3,
            "{expected} vs {exact}"
        );
    }
}

#[test]
fn invalid_item_counts_and_rates_are_refused_with_a_hint() {
    let dir = TempDir::new().unwrap();
    let bad_items = [
        ("0", "at least 1"),
        ("-1", "positive"),
        ("1.5", "whole number"),
        ("NaN", "not a finite number"),
        ("lots", "expected a whole number"),
    ];
    let bad_rates = [
        ("0", "strictly between 0 and 1"),
        ("1", "strictly between 0 and 1"),
        ("-1", "strictly between 0 and 1"),
        ("1.5", "strictly between 0 and 1"),
        ("NaN", "strictly between 0 and 1"),
        ("often", "not a number"),
    ];
    for cmd in ["calc", "build", "dedup"] {
        for (items, hint) in bad_items {
            let o = run(
                dir.path(),
                &[cmd, "--items", items, "--fpr", "0.01", "-o", "out.bloom"]
                    [..if cmd == "build" { 7 } else { 5 }],
                "a\n",
            );
            assert_usage_error(&o, hint);
        }
        for (fpr, hint) in bad_rates {
            let o = run(
                dir.path(),
                &[cmd, "--items", "10", "--fpr", fpr, "-o", "out.bloom"]
                    [..if cmd == "build" { 7 } else { 5 }],
                "a\n",
            );
            assert_usage_error(&o, hint);
        }
    }
    assert!(listing(dir.path()).is_empty(), "{:?}", listing(dir.path()));
}

#[test]
fn a_size_beyond_the_maximum_is_a_clean_error() {
    let dir = TempDir::new().unwrap();
    let o = run(dir.path(), &["calc", "--items", "1T", "--fpr", "1e-9"], "");
    assert_error(&o, &["more than the maximum"]);
}

// ---------------------------------------------------------------------------------------
// build and check

#[test]
fn build_reads_lf_crlf_and_a_last_line_without_newline() {
    let dir = TempDir::new().unwrap();
    fs::write(
        dir.path().join("keys.txt"),
        "user:1\r\nuser:2\nuser:3\r\nuser:4",
    )
    .unwrap();
    let o = run(
        dir.path(),
        &[
            "build", "--items", "100", "--fpr", "1e-9", "--seed", "7", "-o", "k.bloom", "keys.txt",
        ],
        "",
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(o.stdout.is_empty());
    // The keys are the lines without CR: with p = 1e-9, "user:1\r" etc. were not inserted.
    let o = run(
        dir.path(),
        &["check", "k.bloom", "user:1", "user:2", "user:3", "user:4"],
        "",
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(
        stdout(&o),
        "maybe\tuser:1\nmaybe\tuser:2\nmaybe\tuser:3\nmaybe\tuser:4\n"
    );
    let o = run(dir.path(), &["check", "k.bloom", "user:1\r", "user:5"], "");
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(stdout(&o), "absent\tuser:1\r\nabsent\tuser:5\n");
}

/// `--layout split-block` end to end: `build` writes exactly the file bloom-core builds for the
/// same settings (layout byte 2, k = 8), `check` finds every key, `stats` and `calc` report
/// the layout, and merging it with a blocked filter or resuming a dedup with another layout
/// is a clean error. There is no flag for k: an unknown layout name is refused by clap with
/// the list of valid ones.
#[test]
fn split_block_filters_build_check_and_report_their_layout() {
    let dir = TempDir::new().unwrap();
    let keys: Vec<String> = (0..2_000).map(|i| format!("user:{i}")).collect();
    let input: String = keys.iter().map(|k| format!("{k}\n")).collect();
    let o = run(
        dir.path(),
        &[
            "build",
            "-n",
            "2000",
            "-p",
            "0.01",
            "--layout",
            "split-block",
            "--seed",
            "0x5b",
            "-o",
            "split.bloom",
        ],
        input.clone(),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let bytes = fs::read(dir.path().join("split.bloom")).unwrap();
    assert_eq!(bytes[11], 2, "layout byte");
    let want = bloom_core::BloomFilter::builder()
        .layout(Layout::SplitBlock)
        .expected_items(2_000)
        .false_positive_rate(0.01)
        .seed(0x5b)
        .build()
        .unwrap();
    want.insert_many(&keys);
    assert!(
        bytes == want.to_bytes(),
        "the CLI's file differs from bloom-core's"
    );

    // Every key is found (exit 0); a stdin batch with an absent key exits 1.
    let o = run(dir.path(), &["check", "-q", "split.bloom"], input);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let absent = (0..200)
        .map(|i| format!("nobody:{i}\n"))
        .collect::<String>();
    let o = run(dir.path(), &["check", "split.bloom"], absent);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let maybe = stdout(&o)
        .lines()
        .filter(|l| l.starts_with("maybe"))
        .count();
    assert!(maybe < 20, "{maybe} of 200 absent keys maybe at 1%");

    let v = stats_json(dir.path(), "split.bloom");
    let sized = params::for_layout(Layout::SplitBlock, 2_000, 0.01).unwrap();
    assert_eq!(v["layout"], "split-block");
    assert_eq!(v["hashes"], 8);
    assert_eq!(v["bits"], sized.bits);
    let est = v["estimated_items"].as_f64().unwrap();
    assert!((est - 2_000.0).abs() < 100.0, "{est}");
    let text = stdout(&run(dir.path(), &["stats", "split.bloom"], ""));
    assert_eq!(field(&text, "layout"), "split-block");
    assert_eq!(field(&text, "hashes (k)"), "8");

    // Not mergeable with the blocked filter of the same settings.
    let o = run(
        dir.path(),
        &[
            "build",
            "-n",
            "2000",
            "-p",
            "0.01",
            "--seed",
            "0x5b",
            "-o",
            "blocked.bloom",
        ],
        "x\n",
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let o = run(
        dir.path(),
        &["merge", "split.bloom", "blocked.bloom", "-o", "out.bloom"],
        "",
    );
    assert_error(&o, &["split.bloom", "blocked.bloom", "cannot be merged"]);
    // A dedup state of another layout is refused, naming both.
    let o = run(
        dir.path(),
        &[
            "dedup",
            "-n",
            "2000",
            "-p",
            "0.01",
            "--state",
            "split.bloom",
        ],
        "",
    );
    assert_error(&o, &["split.bloom", "layout is split-block, not blocked"]);
    assert_eq!(fs::read(dir.path().join("split.bloom")).unwrap(), bytes);
    assert!(!dir.path().join("out.bloom").exists());

    // Misspelt: clap lists the valid names.
    let o = run(
        dir.path(),
        &["calc", "-n", "10", "-p", "0.01", "--layout", "split"],
        "",
    );
    assert_usage_error(&o, "split-block");
    // The help says what it is.
    bloom()
        .args(["build", "--help"])
        .assert()
        .success()
        .stdout(predicate::str::contains("split-block"))
        .stdout(predicate::str::contains("k fixed at 8"));
}

#[test]
fn check_exit_codes_are_0_all_maybe_1_any_absent_2_error() {
    let dir = TempDir::new().unwrap();
    build(dir.path(), "k.bloom", &["a", "b", "c"], "100", "1e-9", "1");

    let o = run(dir.path(), &["check", "k.bloom", "a", "b"], "");
    assert_eq!(o.status.code(), Some(0));
    assert_eq!(stdout(&o), "maybe\ta\nmaybe\tb\n");

    let o = run(dir.path(), &["check", "k.bloom", "a", "zzz"], "");
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(stdout(&o), "maybe\ta\nabsent\tzzz\n");

    // Keys on stdin, CRLF included.
    let o = run(dir.path(), &["check", "k.bloom"], "c\r\nnope\nb");
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(stdout(&o), "maybe\tc\nabsent\tnope\nmaybe\tb\n");
    let o = run(dir.path(), &["check", "k.bloom"], "a\nb\n");
    assert_eq!(o.status.code(), Some(0));

    // --quiet: the status alone answers.
    let o = run(dir.path(), &["check", "-q", "k.bloom", "zzz"], "");
    assert_eq!(o.status.code(), Some(1));
    assert!(o.stdout.is_empty());

    let o = run(dir.path(), &["check", "missing.bloom", "a"], "");
    assert_error(&o, &["missing.bloom", "No such file"]);
    assert!(o.stdout.is_empty());
}

#[test]
fn help_documents_the_exit_codes() {
    for args in [&["--help"][..], &["check", "--help"]] {
        bloom()
            .args(args)
            .assert()
            .success()
            .stdout(predicate::str::contains("Exit status"))
            .stdout(predicate::str::contains("1  "))
            .stdout(predicate::str::contains("2  error"));
    }
}

#[test]
fn items_auto_counts_lines_from_files_and_stdin() {
    let dir = TempDir::new().unwrap();
    let keys: String = (0..1000).map(|i| format!("key-{i}\r\n")).collect();
    fs::write(dir.path().join("keys.txt"), &keys).unwrap();
    let args = |items: &'static str, out: &'static str, input: &'static str| {
        [
            "build", "--items", items, "--fpr", "0.001", "--seed", "0x5eed", "-o", out, input,
        ]
    };
    for (items, out, input) in [
        ("auto", "auto-file.bloom", "keys.txt"),
        ("auto", "auto-stdin.bloom", "-"),
        ("1000", "explicit.bloom", "keys.txt"),
    ] {
        let o = run(dir.path(), &args(items, out, input), keys.clone());
        assert!(o.status.success(), "{}", stderr(&o));
    }
    let explicit = fs::read(dir.path().join("explicit.bloom")).unwrap();
    // Same count, same seed: byte-identical files.
    assert_eq!(
        fs::read(dir.path().join("auto-file.bloom")).unwrap(),
        explicit
    );
    assert_eq!(
        fs::read(dir.path().join("auto-stdin.bloom")).unwrap(),
        explicit
    );
    assert_eq!(stats_json(dir.path(), "auto-stdin.bloom")["capacity"], 1000);

    // A last line without a newline counts; an empty input still makes a valid filter.
    let o = run(
        dir.path(),
        &[
            "build",
            "--items",
            "auto",
            "--fpr",
            "0.01",
            "-o",
            "two.bloom",
        ],
        "x\ny",
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stats_json(dir.path(), "two.bloom")["capacity"], 2);
    let o = run(
        dir.path(),
        &[
            "build",
            "--items",
            "auto",
            "--fpr",
            "0.01",
            "-o",
            "empty.bloom",
        ],
        "",
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let o = run(dir.path(), &["check", "empty.bloom", "x"], "");
    assert_eq!(o.status.code(), Some(1));
}

#[test]
fn build_reads_several_inputs_and_stdin_once() {
    let dir = TempDir::new().unwrap();
    fs::write(dir.path().join("a.txt"), "a1\na2\n").unwrap();
    fs::write(dir.path().join("b.txt"), "b1\n").unwrap();
    let o = run(
        dir.path(),
        &[
            "build", "-n", "10", "-p", "1e-9", "-o", "ab.bloom", "a.txt", "-", "b.txt",
        ],
        "s1\n",
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let o = run(
        dir.path(),
        &["check", "ab.bloom", "a1", "a2", "b1", "s1"],
        "",
    );
    assert_eq!(o.status.code(), Some(0), "{}", stdout(&o));

    let o = run(
        dir.path(),
        &["build", "-n", "10", "-p", "0.1", "-o", "x.bloom", "-", "-"],
        "",
    );
    assert_error(&o, &["standard input"]);
    assert!(!dir.path().join("x.bloom").exists());
}

#[test]
fn a_random_seed_differs_per_build_and_a_given_one_reproduces() {
    let dir = TempDir::new().unwrap();
    for out in ["r1.bloom", "r2.bloom"] {
        let o = run(
            dir.path(),
            &["build", "-n", "10", "-p", "0.01", "-o", out],
            "k\n",
        );
        assert!(o.status.success());
    }
    let read = |n: &str| fs::read(dir.path().join(n)).unwrap();
    assert_ne!(read("r1.bloom"), read("r2.bloom"));
    build(dir.path(), "s1.bloom", &["k"], "10", "0.01", "12345");
    build(dir.path(), "s2.bloom", &["k"], "10", "0.01", "0x3039");
    assert_eq!(read("s1.bloom"), read("s2.bloom"));
    let o = run(
        dir.path(),
        &[
            "build", "-n", "10", "-p", "0.01", "--seed", "0xZZ", "-o", "x.bloom",
        ],
        "",
    );
    assert_usage_error(&o, "hexadecimal");
}

#[test]
fn a_failed_build_leaves_nothing_behind_and_keeps_the_old_file() {
    let dir = TempDir::new().unwrap();
    build(dir.path(), "old.bloom", &["a"], "10", "0.01", "1");
    let old = fs::read(dir.path().join("old.bloom")).unwrap();
    fs::create_dir(dir.path().join("subdir")).unwrap();
    let before = listing(dir.path());

    // Missing input.
    let o = run(
        dir.path(),
        &[
            "build",
            "-n",
            "10",
            "-p",
            "0.01",
            "-o",
            "old.bloom",
            "nope.txt",
        ],
        "",
    );
    assert_error(&o, &["nope.txt", "cannot open", "No such file"]);
    // An input that is not a regular file (a directory), after a good one.
    fs::write(dir.path().join("good.txt"), "x\n").unwrap();
    let o = run(
        dir.path(),
        &[
            "build",
            "-n",
            "10",
            "-p",
            "0.01",
            "-o",
            "new.bloom",
            "good.txt",
            "subdir",
        ],
        "",
    );
    assert_error(&o, &["subdir", "not a regular file (a directory)"]);
    let o = run(
        dir.path(),
        &[
            "build",
            "-n",
            "auto",
            "-p",
            "0.01",
            "-o",
            "new.bloom",
            "good.txt",
            "subdir",
        ],
        "",
    );
    assert_error(&o, &["subdir", "not a regular file (a directory)"]);
    fs::remove_file(dir.path().join("good.txt")).unwrap();
    // Output into a missing directory, or onto a directory.
    let o = run(
        dir.path(),
        &["build", "-n", "10", "-p", "0.01", "-o", "nodir/x.bloom"],
        "a\n",
    );
    assert_error(&o, &["nodir/x.bloom", "does not exist"]);
    let o = run(
        dir.path(),
        &["build", "-n", "10", "-p", "0.01", "-o", "subdir"],
        "a\n",
    );
    assert_error(&o, &["subdir", "is a directory"]);

    assert_eq!(listing(dir.path()), before);
    assert!(listing(&dir.path().join("subdir")).is_empty());
    assert_eq!(fs::read(dir.path().join("old.bloom")).unwrap(), old);
}

#[test]
fn unreadable_stdin_is_an_error_for_check_and_dedup() {
    let dir = TempDir::new().unwrap();
    build(dir.path(), "k.bloom", &["a"], "10", "0.01", "1");
    for args in [
        &["check", "k.bloom"][..],
        &["dedup", "-n", "10", "-p", "0.01", "--state", "s.bloom"],
    ] {
        let o = std::process::Command::new(assert_cmd::cargo::cargo_bin("bloom"))
            .current_dir(dir.path())
            .args(args)
            .stdin(fs::File::open(dir.path()).unwrap()) // a directory: reads fail
            .output()
            .unwrap();
        assert_error(&o, &["stdin", "read failed"]);
    }
    // The failed dedup saved no state.
    assert_eq!(listing(dir.path()), ["k.bloom"]);
}

// ---------------------------------------------------------------------------------------
// damaged files

#[test]
fn missing_corrupt_truncated_and_foreign_files_are_named_errors() {
    let dir = TempDir::new().unwrap();
    let good = build(dir.path(), "good.bloom", &["a", "b"], "1000", "0.01", "1");
    let bytes = fs::read(&good).unwrap();
    let len = bytes.len();

    let mut flipped = bytes.clone();
    flipped[64 + 10] ^= 0x10; // a bit in the words
    fs::write(dir.path().join("flipped.bloom"), &flipped).unwrap();
    fs::write(dir.path().join("truncated.bloom"), &bytes[..100]).unwrap();
    fs::write(dir.path().join("empty.bloom"), b"").unwrap();
    fs::write(dir.path().join("text.bloom"), b"hello world\n").unwrap();
    let mut trailing = bytes.clone();
    trailing.push(0);
    fs::write(dir.path().join("trailing.bloom"), &trailing).unwrap();

    let cases: [(&str, &[&str]); 7] = [
        ("missing.bloom", &["missing.bloom", "No such file"]),
        ("flipped.bloom", &["flipped.bloom", "checksum mismatch"]),
        (
            "truncated.bloom",
            &[
                "truncated.bloom",
                &format!("file is truncated: 100 bytes, the header promises {len}"),
            ],
        ),
        ("empty.bloom", &["empty.bloom", "truncated"]),
        ("text.bloom", &["text.bloom", "not a bloom filter file"]),
        ("trailing.bloom", &["trailing.bloom", "unexpected bytes"]),
        (".", &["is a directory"]),
    ];
    for (file, needles) in cases {
        for args in [
            vec!["stats", file],
            vec!["stats", "--json", file],
            vec!["check", file, "a"],
            vec!["merge", "good.bloom", file, "-o", "merged.bloom"],
            vec!["dedup", "-n", "1000", "-p", "0.01", "--state", file],
        ] {
            if args[0] == "dedup" && (file == "missing.bloom" || file == ".") {
                continue; // a missing state is a fresh start; "." is not a file name
            }
            let before = listing(dir.path());
            let o = run(dir.path(), &args, "a\n");
            assert_error(&o, needles);
            assert!(o.stdout.is_empty(), "{args:?}");
            assert_eq!(listing(dir.path()), before, "{args:?} left a file");
        }
    }
    // The damaged state files were not overwritten by the failed dedup runs.
    assert_eq!(fs::read(dir.path().join("flipped.bloom")).unwrap(), flipped);
}

// ---------------------------------------------------------------------------------------
// stats

#[test]
fn stats_json_has_the_fields_and_never_the_seed() {
    let dir = TempDir::new().unwrap();
    let keys: String = (0..5000).map(|i| format!("item-{i}\n")).collect();
    let seed = "0x0123456789abcdef0123456789abcdef";
    let o = run(
        dir.path(),
        &[
            "build", "-n", "10000", "-p", "0.01", "--seed", seed, "--layout", "classic", "-o",
            "f.bloom",
        ],
        keys,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let v = stats_json(dir.path(), "f.bloom");
    let want = params::for_layout(Layout::Classic, 10_000, 0.01).unwrap();
    assert_eq!(v["file"], "f.bloom");
    assert_eq!(v["format_version"], 1);
    assert_eq!(v["layout"], "classic");
    assert_eq!(v["bits"], want.bits);
    assert_eq!(v["hashes"], want.hashes);
    assert_eq!(v["size_bytes"], want.bits.div_ceil(64) * 8);
    assert_eq!(v["file_bytes"], want.bits.div_ceil(64) * 8 + 68);
    assert_eq!(v["capacity"], 10_000);
    assert_eq!(v["target_fpr"], 0.01);
    assert_eq!(v["saturated"], false);
    let fill = v["fill_ratio"].as_f64().unwrap();
    assert!(fill > 0.2 && fill < 0.5, "{fill}");
    let est = v["estimated_items"].as_f64().unwrap();
    assert!((est - 5000.0).abs() < 250.0, "{est}");
    let fpr = v["current_fpr"].as_f64().unwrap();
    assert!(fpr > 0.0 && fpr < 0.01, "{fpr}");
    assert!(v["expected_fpr_at_capacity"].as_f64().unwrap() <= 0.0105);
    assert_eq!(
        v["set_bits"].as_f64().unwrap(),
        (fill * want.bits as f64).round()
    );

    let text = stdout(&run(dir.path(), &["stats", "f.bloom"], ""));
    assert_eq!(field(&text, "format version"), "1");
    assert_eq!(field(&text, "layout"), "classic");
    assert_eq!(field(&text, "bits (m)"), want.bits.to_string());
    assert_eq!(field(&text, "capacity"), "10000");
    assert_eq!(field(&text, "target fpr"), "0.01");
    for out in [text, v.to_string()] {
        let lower = out.to_lowercase();
        assert!(
            !lower.contains("seed") && !lower.contains("0123456789abcdef"),
            "{out}"
        );
        assert!(!lower.contains(&0x0123456789abcdef0123456789abcdef_u128.to_string()));
    }
}

#[test]
fn stats_flags_a_saturated_filter() {
    let dir = TempDir::new().unwrap();
    let keys: String = (0..2000).map(|i| format!("k{i}\n")).collect();
    let o = run(
        dir.path(),
        &["build", "-n", "100", "-p", "0.01", "-o", "full.bloom"],
        keys,
    );
    assert!(o.status.success());
    // build warns (one line) that the filter is past its capacity.
    assert!(stderr(&o).contains("warning"), "{}", stderr(&o));
    let v = stats_json(dir.path(), "full.bloom");
    assert_eq!(v["saturated"], true);
    let text = stdout(&run(dir.path(), &["stats", "full.bloom"], ""));
    assert!(text.contains("warning"), "{text}");
}

#[test]
fn check_and_stats_read_counting_and_scalable_files_and_merge_refuses_them() {
    let dir = TempDir::new().unwrap();
    let counting = CountingBloomFilter::builder()
        .expected_items(1_000)
        .false_positive_rate(0.01)
        .seed(5)
        .build()
        .unwrap();
    let scalable = ScalableBloomFilter::builder(100, 0.01)
        .seed(5)
        .build()
        .unwrap();
    let keys: Vec<String> = (0..1_000).map(|i| format!("k{i}")).collect();
    for key in &keys {
        counting.insert(key.as_str());
        scalable.insert(key.as_str());
    }
    fs::write(dir.path().join("c.bloom"), counting.to_bytes()).unwrap();
    fs::write(dir.path().join("s.bloom"), scalable.to_bytes()).unwrap();
    let all_keys: String = keys.iter().map(|k| format!("{k}\n")).collect();

    for (file, absent) in [
        (
            "c.bloom",
            (0..)
                .map(|i| format!("x{i}"))
                .find(|k| !counting.contains(k.as_str())),
        ),
        (
            "s.bloom",
            (0..)
                .map(|i| format!("x{i}"))
                .find(|k| !scalable.contains(k.as_str())),
        ),
    ] {
        // Keys as arguments and as a stream on stdin (the batch path).
        let o = run(dir.path(), &["check", file, "k1", "k999"], "");
        assert!(o.status.success(), "{}", stderr(&o));
        assert_eq!(stdout(&o), "maybe\tk1\nmaybe\tk999\n");
        let o = run(dir.path(), &["check", "--quiet", file], all_keys.clone());
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        let absent = absent.unwrap();
        let o = run(dir.path(), &["check", file, &absent], "");
        assert_eq!(o.status.code(), Some(1));
        assert_eq!(stdout(&o), format!("absent\t{absent}\n"));
    }

    let c = stats_json(dir.path(), "c.bloom");
    assert_eq!(c["kind"], "counting");
    assert_eq!(c["bits"], counting.num_slots());
    assert_eq!(c["size_bytes"], counting.size_in_bytes());
    assert_eq!(c["saturated_counters"], 0);
    assert_eq!(c["capacity"], 1_000);
    let est = c["estimated_items"].as_f64().unwrap();
    assert!((est - 1_000.0).abs() < 50.0, "{est}");

    let s = stats_json(dir.path(), "s.bloom");
    assert_eq!(s["kind"], "scalable");
    assert_eq!(s["hashes"], serde_json::Value::Null);
    assert_eq!(s["capacity"], serde_json::Value::Null);
    assert_eq!(s["target_fpr"], 0.01);
    let stages = s["stages"].as_array().unwrap();
    assert_eq!(stages.len(), scalable.num_stages());
    assert!(stages.len() >= 3, "{}", stages.len());
    assert_eq!(stages[0]["capacity"], 100);
    let est = s["estimated_items"].as_f64().unwrap();
    assert!((est - 1_000.0).abs() < 50.0, "{est}");
    let text = stdout(&run(dir.path(), &["stats", "s.bloom"], ""));
    assert_eq!(
        field(&text, "kind"),
        format!("scalable ({} stages)", stages.len())
    );
    assert!(text.contains("stage 0:"), "{text}");
    assert_eq!(field(&text, "capacity"), "grows (first stage 100)");

    // Merging and dedup state work bit by bit: plain filters only, and the error says so.
    build(dir.path(), "plain.bloom", &["a"], "1000", "0.01", "5");
    for (file, kind) in [("c.bloom", "counting"), ("s.bloom", "scalable")] {
        let before = listing(dir.path());
        let o = run(
            dir.path(),
            &["merge", "plain.bloom", file, "-o", "m.bloom"],
            "",
        );
        assert_error(
            &o,
            &[file, &format!("a {kind} Bloom filter"), "plain filters"],
        );
        let o = run(
            dir.path(),
            &["dedup", "-n", "1000", "-p", "0.01", "--state", file],
            "a\n",
        );
        assert_error(&o, &[file, kind]);
        assert!(o.stdout.is_empty());
        assert_eq!(listing(dir.path()), before);
    }
}

// ---------------------------------------------------------------------------------------
// merge

#[test]
fn merge_is_the_union() {
    let dir = TempDir::new().unwrap();
    let a: Vec<String> = (0..300).map(|i| format!("a{i}")).collect();
    let b: Vec<String> = (0..300).map(|i| format!("b{i}")).collect();
    fn refs(v: &[String]) -> Vec<&str> {
        v.iter().map(String::as_str).collect()
    }
    build(dir.path(), "a.bloom", &refs(&a), "1000", "1e-6", "99");
    build(dir.path(), "b.bloom", &refs(&b), "1000", "1e-6", "99");
    let o = run(
        dir.path(),
        &["merge", "a.bloom", "b.bloom", "-o", "ab.bloom"],
        "",
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let all: Vec<&str> = refs(&a).into_iter().chain(refs(&b)).collect();
    let mut args = vec!["check", "ab.bloom"];
    args.extend(&all);
    assert_eq!(run(dir.path(), &args, "").status.code(), Some(0));
    // Each input alone lacks the other's keys.
    args[1] = "a.bloom";
    assert_eq!(run(dir.path(), &args, "").status.code(), Some(1));
    let est = stats_json(dir.path(), "ab.bloom")["estimated_items"]
        .as_f64()
        .unwrap();
    assert!((est - 600.0).abs() < 60.0, "{est}");
    // The output may be one of the inputs.
    let o = run(
        dir.path(),
        &["merge", "a.bloom", "b.bloom", "-o", "a.bloom"],
        "",
    );
    assert!(o.status.success());
    assert_eq!(
        fs::read(dir.path().join("a.bloom")).unwrap(),
        fs::read(dir.path().join("ab.bloom")).unwrap()
    );
}

#[test]
fn merging_incompatible_filters_says_what_differs_and_writes_nothing() {
    let dir = TempDir::new().unwrap();
    build(dir.path(), "base.bloom", &["x"], "1000", "0.01", "1");
    build(dir.path(), "seed.bloom", &["x"], "1000", "0.01", "2");
    build(dir.path(), "size.bloom", &["x"], "5000", "0.01", "1");
    let o = run(
        dir.path(),
        &[
            "build",
            "-n",
            "1000",
            "-p",
            "0.01",
            "--seed",
            "1",
            "--layout",
            "classic",
            "-o",
            "classic.bloom",
        ],
        "x\n",
    );
    assert!(o.status.success());
    let before = listing(dir.path());
    for (other, needle) in [
        ("seed.bloom", "hash keys (seeds) differ"),
        ("size.bloom", "number of bits differs"),
        ("classic.bloom", "differs"),
    ] {
        let o = run(
            dir.path(),
            &["merge", "base.bloom", other, "-o", "out.bloom"],
            "",
        );
        assert_error(&o, &["base.bloom", other, "cannot be merged", needle]);
        assert_eq!(listing(dir.path()), before);
    }
}

// ---------------------------------------------------------------------------------------
// dedup

/// A stream of `n` URLs of 60 bytes in which each line is, with probability `repeat`, a
/// repeat of an earlier one (uniformly chosen), else new.
fn url_stream(n: usize, repeat: f64, seed: u64) -> Vec<String> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut distinct: Vec<String> = Vec::new();
    let mut stream = Vec::with_capacity(n);
    for _ in 0..n {
        if !distinct.is_empty() && rng.random_bool(repeat) {
            let i = rng.random_range(0..distinct.len());
            stream.push(distinct[i].clone());
        } else {
            let url = format!(
                "https://www.example.com/{:016x}/page?id={:011}",
                rng.random::<u64>(),
                distinct.len()
            );
            assert_eq!(url.len(), 60);
            distinct.push(url.clone());
            stream.push(url);
        }
    }
    stream
}

/// Checks dedup's `output` for `stream`: it is the stream's first occurrences in order, each
/// at most once, less some falsely dropped ones; returns how many were dropped.
fn false_drops(stream: &[String], output: &str) -> usize {
    let out: Vec<&str> = output.lines().collect();
    assert!(output.is_empty() || output.ends_with('\n'));
    let mut seen = HashSet::new();
    let mut next = 0;
    let mut firsts = 0;
    for line in stream {
        let first = seen.insert(line.as_str());
        firsts += usize::from(first);
        if next < out.len() && out[next] == line {
            assert!(first, "a repeat was written: {line}");
            next += 1;
        }
    }
    assert_eq!(
        next,
        out.len(),
        "output is not the first occurrences in order"
    );
    let unique: HashSet<&str> = out.iter().copied().collect();
    assert_eq!(unique.len(), out.len(), "a line was written twice");
    firsts - out.len()
}

/// Expected false drops when `distinct` new lines go through a filter sized for `n` at `p`:
/// the j-th new line is dropped with the filter's FPR after j inserts. FPR grows with j, so
/// summing each step of 1000 at its end bounds the sum from above. Plus three standard
/// deviations (a sum of Bernoullis has variance at most its mean).
fn false_drop_bound(n: u64, p: f64, distinct: u64) -> f64 {
    let sized = params::for_layout(Layout::Blocked, n, p).unwrap();
    let step = 1000;
    let mean: f64 = (0..distinct.div_ceil(step))
        .map(|s| {
            let end = ((s + 1) * step).min(distinct);
            params::expected_fpr(Layout::Blocked, sized.bits, sized.hashes, end as f64)
                * step as f64
        })
        .sum();
    assert!(mean <= distinct as f64 * p, "the bound is at most n·p");
    mean + 3.0 * mean.sqrt() + 1.0
}

#[test]
fn dedup_of_1m_urls_drops_every_repeat_and_few_first_occurrences() {
    let dir = TempDir::new().unwrap();
    let stream = url_stream(1_000_000, 0.3, 42);
    let distinct = stream.iter().collect::<HashSet<_>>().len() as u64;
    assert!((680_000..720_000).contains(&distinct), "{distinct}");
    let input = stream.iter().map(|u| format!("{u}\n")).collect::<String>();
    // Sized for the distinct lines at 1%: some hundreds of first occurrences are expected
    // to be (wrongly) dropped, and the bound must catch any more than that.
    let (n, p) = (700_000, 0.01);
    let o = run(
        dir.path(),
        &[
            "dedup", "--items", "700k", "--fpr", "0.01", "--seed", "3", "--stats",
        ],
        input,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let dropped = false_drops(&stream, &stdout(&o));
    let bound = false_drop_bound(n, p, distinct);
    eprintln!("{dropped} of {distinct} first occurrences dropped; bound {bound:.0}");
    assert!(
        dropped as f64 <= bound,
        "{dropped} first occurrences dropped, expected at most {bound:.0}"
    );
    // --stats on stderr.
    let err = stderr(&o);
    let kept = distinct - dropped as u64;
    assert!(
        err.contains(&format!(
            "1000000 lines in, {kept} out, {} dropped",
            1_000_000 - kept
        )),
        "{err}"
    );
    for needle in ["lines/s", "MB/s", " s:"] {
        assert!(err.contains(needle), "{err}");
    }
}

/// What `dedup` must write for `stream`: the lines for which one `BloomFilter::insert` per
/// line, in input order, on a filter built like the command's, returned `true`.
fn sequential_dedup(stream: &[String], items: u64, fpr: f64, layout: Layout, seed: u128) -> String {
    let filter = bloom_core::BloomFilter::builder()
        .expected_items(items)
        .false_positive_rate(fpr)
        .layout(layout)
        .seed(seed)
        .build()
        .unwrap();
    let mut out = String::new();
    for line in stream {
        if filter.insert(line.as_bytes()) {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

#[test]
fn dedup_output_is_that_of_one_insert_per_line_in_order() {
    // 60 000 lines of 61 bytes: 14 chunks of 256 KiB, about 4 300 lines each. A line is new
    // (60 %), the line just before it (adjacent repeat: 10 %), one of the last 2 000 lines
    // (within the chunk, mostly: 15 %) or any earlier line (across chunks: 15 %).
    let mut rng = StdRng::seed_from_u64(99);
    let mut stream: Vec<String> = Vec::new();
    let mut fresh = 0u64;
    for _ in 0..60_000 {
        let r = rng.random_range(0..100);
        let line = if stream.is_empty() || r < 60 {
            fresh += 1;
            format!(
                "https://www.example.com/{:016x}/page?id={fresh:011}",
                rng.random::<u64>()
            )
        } else if r < 70 {
            stream[stream.len() - 1].clone()
        } else if r < 85 {
            stream[rng.random_range(stream.len().saturating_sub(2_000)..stream.len())].clone()
        } else {
            stream[rng.random_range(0..stream.len())].clone()
        };
        assert_eq!(line.len(), 60);
        stream.push(line);
    }
    let input = stream.iter().map(|u| format!("{u}\n")).collect::<String>();
    let dir = TempDir::new().unwrap();
    // Sized for far fewer lines than there are, so a few thousand new lines are dropped as
    // false positives: the batched command must drop exactly the same ones. And sized
    // generously, where nearly every drop is a true repeat.
    for (items, fpr, layout) in [
        (5_000, 0.01, Layout::Blocked),
        (5_000, 0.01, Layout::Classic),
        (5_000, 0.01, Layout::SplitBlock),
        (1_000_000, 1e-6, Layout::Blocked),
    ] {
        let want = sequential_dedup(&stream, items, fpr, layout, 7);
        let o = run(
            dir.path(),
            &[
                "dedup",
                "--items",
                &items.to_string(),
                "--fpr",
                &fpr.to_string(),
                "--layout",
                &layout.to_string(),
                "--seed",
                "7",
                "--quiet",
            ],
            input.clone(),
        );
        assert!(o.status.success(), "{}", stderr(&o));
        let got = stdout(&o);
        let first_difference = got
            .lines()
            .zip(want.lines())
            .position(|(a, b)| a != b)
            .unwrap_or(got.lines().count().min(want.lines().count()));
        assert!(
            got == want,
            "{items} {fpr} {layout}: {} lines out, the sequential reference {}; first \
             difference at output line {first_difference}",
            got.lines().count(),
            want.lines().count(),
        );
        // The inputs do exercise what they are meant to.
        let kept = want.lines().count();
        let distinct = stream.iter().collect::<HashSet<_>>().len();
        if items == 5_000 {
            assert!(
                distinct - kept > 1_000,
                "{layout}: {kept} of {distinct} kept"
            );
        } else {
            assert!(distinct - kept < 10, "{kept} of {distinct} kept");
        }
    }
}

#[test]
fn dedup_resumes_from_its_state_file() {
    let dir = TempDir::new().unwrap();
    let stream = url_stream(200_000, 0.3, 7);
    let (part1, part2) = stream.split_at(100_000);
    let lines = |s: &[String]| s.iter().map(|u| format!("{u}\n")).collect::<String>();
    let args = [
        "dedup",
        "-n",
        "200k",
        "-p",
        "0.001",
        "--seed",
        "11",
        "--state",
        "seen.bloom",
    ];
    let o1 = run(dir.path(), &args, lines(part1));
    assert!(o1.status.success(), "{}", stderr(&o1));
    assert!(dir.path().join("seen.bloom").exists());
    let o2 = run(dir.path(), &args, lines(part2));
    assert!(o2.status.success(), "{}", stderr(&o2));

    // Together the two runs are one dedup of the whole stream.
    let both = stdout(&o1) + &stdout(&o2);
    let dropped = false_drops(&stream, &both);
    let distinct = stream.iter().collect::<HashSet<_>>().len() as u64;
    assert!(dropped as f64 <= false_drop_bound(200_000, 0.001, distinct));
    // In particular part 2's lines already seen in part 1 were all dropped...
    let in_part1: HashSet<&str> = part1.iter().map(String::as_str).collect();
    let out2 = stdout(&o2);
    assert!(out2.lines().all(|l| !in_part1.contains(l)));
    // ...which a fresh filter would not have done.
    let fresh = run(
        dir.path(),
        &["dedup", "-n", "200k", "-p", "0.001", "--seed", "11"],
        lines(part2),
    );
    let again = stdout(&fresh)
        .lines()
        .filter(|l| in_part1.contains(l))
        .count();
    assert!(again > 10_000, "{again}");

    // A state made for other parameters is refused and left untouched.
    let state = fs::read(dir.path().join("seen.bloom")).unwrap();
    let o = run(
        dir.path(),
        &["dedup", "-n", "200k", "-p", "0.01", "--state", "seen.bloom"],
        lines(part2),
    );
    assert_error(&o, &["seen.bloom", "--items 200000 --fpr 0.001"]);
    assert!(o.stdout.is_empty());
    let o = run(
        dir.path(),
        &[
            "dedup",
            "-n",
            "200k",
            "-p",
            "0.001",
            "--layout",
            "classic",
            "--state",
            "seen.bloom",
        ],
        "",
    );
    assert_error(&o, &["seen.bloom", "layout is blocked"]);
    let o = run(
        dir.path(),
        &[
            "dedup",
            "-n",
            "200k",
            "-p",
            "0.001",
            "--seed",
            "12",
            "--state",
            "seen.bloom",
        ],
        "",
    );
    assert_error(&o, &["seen.bloom", "hash key differs"]);
    assert_eq!(fs::read(dir.path().join("seen.bloom")).unwrap(), state);
    assert_eq!(listing(dir.path()), ["seen.bloom"]);
}

#[test]
fn dedup_normalises_line_endings_and_keeps_empty_lines_once() {
    let dir = TempDir::new().unwrap();
    let o = run(
        dir.path(),
        &["dedup", "-n", "100", "-p", "1e-6"],
        "a\r\nb\na\n\n\r\nb\r\nc",
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stdout(&o), "a\nb\n\nc\n");
    assert!(o.stderr.is_empty(), "{}", stderr(&o));
}

/// Feeds `bloom args` one line at a time, waiting for each line of output before sending the
/// next (as a program driving it through pipes would); returns the output lines and the exit
/// code.
fn converse(dir: &Path, args: &[&str], inputs: &[&str], expect: usize) -> (Vec<String>, i32) {
    use std::io::{BufRead as _, Write as _};
    let mut child = std::process::Command::new(assert_cmd::cargo::cargo_bin("bloom"))
        .current_dir(dir)
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines() {
            let _ = tx.send(line.unwrap());
        }
    });
    let mut got = Vec::new();
    for input in inputs {
        writeln!(stdin, "{input}").unwrap();
        stdin.flush().unwrap();
        if got.len() < expect {
            if let Ok(line) = rx.recv_timeout(std::time::Duration::from_secs(20)) {
                got.push(line);
            } else {
                let _ = child.kill();
                panic!("no answer to {input:?} while the input stayed open: {got:?}");
            }
        }
    }
    drop(stdin);
    let code = child.wait().unwrap().code().unwrap();
    got.extend(rx.iter());
    (got, code)
}

#[test]
fn check_and_dedup_answer_each_line_as_it_arrives() {
    let dir = TempDir::new().unwrap();
    build(dir.path(), "k.bloom", &["a", "b"], "100", "1e-9", "1");
    let (got, code) = converse(dir.path(), &["check", "k.bloom"], &["a", "zz", "b"], 3);
    assert_eq!(got, ["maybe\ta", "absent\tzz", "maybe\tb"]);
    assert_eq!(code, 1);
    let (got, code) = converse(
        dir.path(),
        &["dedup", "-n", "100", "-p", "1e-9"],
        &["x", "y", "z"],
        3,
    );
    assert_eq!(got, ["x", "y", "z"]);
    assert_eq!(code, 0);
}

#[test]
fn an_interrupted_dedup_leaves_no_file_behind() {
    use std::io::Write as _;
    let dir = TempDir::new().unwrap();
    let mut child = std::process::Command::new(assert_cmd::cargo::cargo_bin("bloom"))
        .current_dir(dir.path())
        .args(["dedup", "-n", "1M", "-p", "0.01", "--state", "seen.bloom"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(b"a\nb\na\n").unwrap();
    stdin.flush().unwrap();
    // dedup is now waiting for more input; kill it the way Ctrl-C would, with no cleanup.
    std::thread::sleep(std::time::Duration::from_millis(300));
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(listing(dir.path()).is_empty(), "{:?}", listing(dir.path()));
}

#[test]
fn dedup_with_an_unwritable_state_path_fails_before_reading() {
    let dir = TempDir::new().unwrap();
    let o = run(
        dir.path(),
        &[
            "dedup",
            "-n",
            "100",
            "-p",
            "0.01",
            "--state",
            "nodir/s.bloom",
        ],
        "a\nb\n",
    );
    assert_error(&o, &["nodir/s.bloom", "does not exist"]);
    assert!(o.stdout.is_empty());
    assert!(listing(dir.path()).is_empty());
}

// ---------------------------------------------------------------------------------------
// bounded input: named inputs must be regular files, lines are capped

/// How long a run may take before it counts as reading forever.
const NO_HANG: std::time::Duration = std::time::Duration::from_secs(60);

/// Runs `bloom args` in `dir` with `stdin` as its standard input (a real file or device, not
/// a pipe fed by the test), killing it if it outlives [`NO_HANG`].
fn run_with_stdin(dir: &Path, args: &[&str], stdin: fs::File) -> Output {
    use std::io::Read as _;
    let mut child = std::process::Command::new(assert_cmd::cargo::cargo_bin("bloom"))
        .current_dir(dir)
        .args(args)
        .stdin(stdin)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pipe = |r: Option<Box<dyn std::io::Read + Send>>| {
        let mut r = r.unwrap();
        std::thread::spawn(move || {
            let mut v = Vec::new();
            let _ = r.read_to_end(&mut v);
            v
        })
    };
    let out = pipe(child.stdout.take().map(|s| Box::new(s) as _));
    let err = pipe(child.stderr.take().map(|s| Box::new(s) as _));
    let start = std::time::Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if start.elapsed() > NO_HANG {
            let _ = child.kill();
            panic!("bloom {args:?} still running after {NO_HANG:?}: it reads without bound");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    Output {
        status,
        stdout: out.join().unwrap(),
        stderr: err.join().unwrap(),
    }
}

/// `run`, but killed (and failed) if it outlives [`NO_HANG`].
fn run_bounded(dir: &Path, args: &[&str], stdin: impl Into<Vec<u8>>) -> Output {
    bloom()
        .current_dir(dir)
        .args(args)
        .write_stdin(stdin)
        .timeout(NO_HANG)
        .output()
        .expect("bloom runs")
}

#[cfg(unix)]
#[test]
fn named_inputs_that_are_not_regular_files_are_refused_without_reading_them() {
    let dir = TempDir::new().unwrap();
    fs::create_dir(dir.path().join("a-dir")).unwrap();
    let made = std::process::Command::new("mkfifo")
        .arg(dir.path().join("a-fifo"))
        .status()
        .expect("mkfifo runs");
    assert!(made.success());
    fs::write(dir.path().join("keys.txt"), "a\nb\n").unwrap();
    let before = listing(dir.path());
    for items in ["10", "auto"] {
        for (input, kind) in [
            ("/dev/zero", "a character device"),
            ("a-dir", "a directory"),
            // Nobody writes to it: opening it for reading would block forever.
            ("a-fifo", "a FIFO"),
        ] {
            for inputs in [&[input][..], &["keys.txt", input]] {
                let mut args = vec!["build", "-n", items, "-p", "0.01", "-o", "out.bloom"];
                args.extend_from_slice(inputs);
                let o = run_bounded(dir.path(), &args, "");
                assert!(
                    o.status.code().is_some(),
                    "{args:?} was killed: it read without bound"
                );
                assert_error(&o, &[input, "not a regular file", kind, "give -"]);
                assert_eq!(listing(dir.path()), before, "{args:?} left a file behind");
            }
        }
    }
    // A symbolic link to a regular file is a regular file; `-` still reads a pipe.
    std::os::unix::fs::symlink("keys.txt", dir.path().join("link.txt")).unwrap();
    let o = run_bounded(
        dir.path(),
        &[
            "build",
            "-n",
            "10",
            "-p",
            "0.01",
            "-o",
            "out.bloom",
            "link.txt",
            "-",
        ],
        "c\n",
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let o = run(dir.path(), &["check", "out.bloom", "a", "b", "c"], "");
    assert_eq!(o.status.code(), Some(0), "{}", stdout(&o));
}

#[test]
fn a_line_over_the_cap_is_an_error_naming_the_input_and_the_line() {
    let dir = TempDir::new().unwrap();
    // 8 bytes (with LF, CR LF or nothing after it) is within a cap of 8; 9 is not.
    let fits = "12345678\nabcdefgh\r\n\nlast5678";
    let over = "a\nb\n123456789\nc\n";
    fs::write(dir.path().join("fits.txt"), fits).unwrap();
    fs::write(dir.path().join("over.txt"), over).unwrap();
    let cap = ["--max-line-bytes", "8"];
    for items in ["10", "auto"] {
        let build = |inputs: &[&str], stdin: &str| {
            let mut args = vec!["build", "-n", items, "-p", "0.01", "-o", "out.bloom"];
            args.extend_from_slice(&cap);
            args.extend_from_slice(inputs);
            run_bounded(dir.path(), &args, stdin)
        };
        for (inputs, stdin) in [(&["fits.txt"][..], ""), (&["-"], fits)] {
            let o = build(inputs, stdin);
            assert!(o.status.success(), "{items} {inputs:?}: {}", stderr(&o));
            fs::remove_file(dir.path().join("out.bloom")).unwrap();
        }
        for (inputs, stdin, name) in [
            (&["over.txt"][..], "", "over.txt"),
            (&["-"], over, "stdin"),
            (&["fits.txt", "-"], over, "stdin"),
        ] {
            let o = build(inputs, stdin);
            assert_error(
                &o,
                &[
                    &format!("{name}: line 3 is longer than 8 bytes"),
                    "--max-line-bytes",
                ],
            );
            assert_eq!(listing(dir.path()), ["fits.txt", "over.txt"], "{inputs:?}");
        }
    }

    // check stops at the line too, after answering the ones before it.
    build(dir.path(), "k.bloom", &["a"], "10", "0.01", "1");
    let mut args = vec!["check", "k.bloom"];
    args.extend_from_slice(&cap);
    let o = run_bounded(dir.path(), &args, over);
    assert_error(&o, &["stdin: line 3 is longer than 8 bytes"]);
    assert!(stdout(&o).starts_with("maybe\ta\n"), "{}", stdout(&o));

    // dedup passes on the lines before it, then fails and saves no state: a rerun with a
    // larger cap repeats the whole stream, nothing is lost or silently skipped.
    let mut args = vec!["dedup", "-n", "10", "-p", "0.01", "--state", "s.bloom"];
    args.extend_from_slice(&cap);
    let o = run_bounded(dir.path(), &args, over);
    assert_error(&o, &["stdin: line 3 is longer than 8 bytes"]);
    assert_eq!(stdout(&o), "a\nb\n");
    assert!(!dir.path().join("s.bloom").exists());
    let args = [
        "dedup",
        "-n",
        "10",
        "-p",
        "0.01",
        "--state",
        "s.bloom",
        "--max-line-bytes",
        "9",
    ];
    let o = run_bounded(dir.path(), &args, over);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stdout(&o), over);

    for bad in ["0", "1.5K", "lots"] {
        let o = run(
            dir.path(),
            &["dedup", "-n", "10", "-p", "0.01", "--max-line-bytes", bad],
            "",
        );
        assert_usage_error(&o, "--max-line-bytes");
    }
}

#[cfg(unix)]
#[test]
fn an_endless_line_on_stdin_stops_at_the_default_cap() {
    let dir = TempDir::new().unwrap();
    build(dir.path(), "k.bloom", &["a"], "10", "0.01", "1");
    let zero = || fs::File::open("/dev/zero").unwrap();
    for args in [
        &["build", "-n", "10", "-p", "0.01", "-o", "out.bloom"][..],
        &["build", "-n", "10", "-p", "0.01", "-o", "out.bloom", "-"],
        &["build", "-n", "auto", "-p", "0.01", "-o", "out.bloom", "-"],
        &["check", "k.bloom"],
        &["dedup", "-n", "10", "-p", "0.01", "--state", "s.bloom"],
    ] {
        let o = run_with_stdin(dir.path(), args, zero());
        assert_error(&o, &["stdin: line 1 is longer than 1048576 bytes"]);
        assert!(o.stdout.is_empty(), "{args:?}");
        assert_eq!(listing(dir.path()), ["k.bloom"], "{args:?}");
    }
    // The cap is the flag's.
    let o = run_with_stdin(
        dir.path(),
        &["dedup", "-n", "10", "-p", "0.01", "--max-line-bytes", "64K"],
        zero(),
    );
    assert_error(&o, &["stdin: line 1 is longer than 65536 bytes"]);
}

#[test]
fn help_documents_the_line_cap() {
    for command in ["build", "check", "dedup"] {
        let o = run(Path::new("."), &[command, "--help"], "");
        let help = stdout(&o);
        assert!(
            help.contains("--max-line-bytes <BYTES>"),
            "{command}: {help}"
        );
        assert!(help.contains("[default: 1048576]"), "{command}: {help}");
    }
}

#[test]
fn check_and_stats_read_a_services_labelled_snapshot() {
    // What `SharedFilter::save` writes: the filter behind a label with its name and watermark.
    let dir = TempDir::new().unwrap();
    let filter = bloom_core::AnyFilter::from(bloom_core::BloomFilter::new(1_000, 0.01).unwrap());
    filter.insert("user:42");
    let label =
        bloom_core::SnapshotLabel::new("users").with_watermark(vec![0, 0, 0, 0, 0, 0, 4, 0x12]);
    let mut bytes = Vec::new();
    bloom_core::Snapshot::write(&mut bytes, &label, &filter).unwrap();
    fs::write(dir.path().join("users.bloom"), &bytes).unwrap();

    let json = stats_json(dir.path(), "users.bloom");
    assert_eq!(json["kind"], "plain");
    assert_eq!(json["format_version"], 1);
    assert_eq!(json["snapshot"]["name"], "users");
    assert_eq!(json["snapshot"]["watermark_hex"], "0000000000000412");
    let out = run(dir.path(), &["check", "users.bloom", "user:42"], "");
    assert!(out.status.success(), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("user:42"));
    let text = run(dir.path(), &["stats", "users.bloom"], "");
    assert!(String::from_utf8_lossy(&text.stdout).contains("snapshot of:     \"users\""));
}

// ---------------------------------------------------------------------------------------
// --kind cuckoo (and counting)

/// `bloom build --kind KIND` of `input` with a fixed seed; the output.
fn build_kind(dir: &Path, kind: &str, items: &str, fpr: &str, out: &str, input: &str) -> Output {
    run(
        dir,
        &[
            "build", "--kind", kind, "-n", items, "-p", fpr, "--seed", "0xc0c0", "-o", out,
        ],
        input,
    )
}

/// `--kind cuckoo` end to end: `build` stores every line (`insert`, in input order, a key
/// listed twice stored twice) and writes exactly the file bloom-core writes for that, `check`
/// finds every key and answers absent keys, and `stats` reports the cuckoo figures, in JSON
/// and text.
#[test]
fn cuckoo_build_writes_bloom_cores_filter_and_check_and_stats_read_it() {
    let dir = TempDir::new().unwrap();
    let keys: Vec<String> = (0..2_900).map(|i| format!("user:{i}")).collect();
    // The first 100 keys twice: each line is stored.
    let lines: Vec<&String> = keys.iter().chain(&keys[..100]).collect();
    let input: String = lines.iter().map(|k| format!("{k}\n")).collect();
    fs::write(dir.path().join("keys.txt"), &input).unwrap();
    let o = run(
        dir.path(),
        &[
            "build", "--kind", "cuckoo", "-n", "3000", "-p", "0.01", "--seed", "0xc0c0", "-o",
            "users.cf", "keys.txt",
        ],
        "",
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let want = bloom_core::CuckooFilter::builder()
        .expected_items(3_000)
        .false_positive_rate(0.01)
        .seed(0xc0c0)
        .build()
        .unwrap();
    for key in &lines {
        want.insert(key.as_str()).unwrap();
    }
    let bytes = fs::read(dir.path().join("users.cf")).unwrap();
    assert_eq!(bytes[10], 3, "kind byte");
    assert!(
        bytes == want.to_bytes(),
        "the CLI's file differs from bloom-core's"
    );
    assert_eq!(want.len(), 3_000);
    assert!(want.count("user:0") >= 2 && want.count("user:2899") >= 1);

    // Every key is found, on stdin (batches) and as arguments; absent keys answer absent.
    let o = run(dir.path(), &["check", "-q", "users.cf"], input);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let absent: Vec<String> = (0..)
        .map(|i| format!("nobody:{i}"))
        .filter(|k| !want.contains(k.as_str()))
        .take(2)
        .collect();
    let o = run(
        dir.path(),
        &[
            "check",
            "users.cf",
            "user:0",
            &absent[0],
            "user:2899",
            &absent[1],
        ],
        "",
    );
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert_eq!(
        stdout(&o),
        format!(
            "maybe\tuser:0\nabsent\t{}\nmaybe\tuser:2899\nabsent\t{}\n",
            absent[0], absent[1]
        )
    );

    let v = stats_json(dir.path(), "users.cf");
    assert_eq!(v["kind"], "cuckoo");
    assert_eq!(v["buckets"], want.num_buckets());
    assert_eq!(v["buckets"], 790); // ⌈3000 / (4 · 0.95)⌉
    assert_eq!(v["fingerprint_bits"], 10);
    assert_eq!(v["slots"], 4 * 790);
    assert_eq!(v["items"], want.len());
    assert_eq!(v["estimated_items"].as_f64(), Some(want.len() as f64));
    let close = |field: &str, want: f64| {
        let got = v[field].as_f64().unwrap();
        assert!(
            (got - want).abs() <= want * 1e-12,
            "{field}: {got} vs {want}"
        );
    };
    close("load_factor", want.load_factor());
    assert_eq!(v["fill_ratio"], v["load_factor"]);
    assert_eq!(v["capacity"], 3_000);
    assert_eq!(v["target_fpr"], 0.01);
    close("current_fpr", want.current_fpr());
    let at_capacity = v["expected_fpr_at_capacity"].as_f64().unwrap();
    assert!(at_capacity <= 0.01 && at_capacity >= want.current_fpr());
    assert_eq!(v["bits"], 790 * (4 * 10 - 4));
    assert_eq!(v["size_bytes"], want.size_in_bytes());
    assert_eq!(v["file_bytes"], bytes.len());
    assert_eq!(v["saturated"], false);
    for absent_field in [
        "layout",
        "hashes",
        "set_bits",
        "saturated_counters",
        "stages",
    ] {
        assert!(v[absent_field].is_null(), "{absent_field}: {v}");
    }
    // The cuckoo fields are null for the other kinds.
    build(dir.path(), "plain.bloom", &["a"], "10", "0.01", "1");
    let plain = stats_json(dir.path(), "plain.bloom");
    for field in [
        "buckets",
        "fingerprint_bits",
        "slots",
        "items",
        "load_factor",
    ] {
        assert!(plain[field].is_null(), "{field}: {plain}");
    }

    let text = stdout(&run(dir.path(), &["stats", "users.cf"], ""));
    assert_eq!(field(&text, "kind"), "cuckoo");
    assert_eq!(field(&text, "buckets (m)"), "790");
    assert_eq!(field(&text, "fingerprint (f)"), "10 bits");
    assert_eq!(field(&text, "slots"), "3160");
    assert_eq!(field(&text, "items"), format!("{} (exact)", want.len()));
    assert_eq!(
        field(&text, "load factor"),
        format!("{:.2}%", want.load_factor() * 100.0)
    );
    assert_eq!(field(&text, "capacity"), "3000");
    assert_eq!(field(&text, "target fpr"), "0.01");
    assert!(!text.contains("layout"), "{text}");
    for out in [text, v.to_string()] {
        assert!(!out.to_lowercase().contains("seed"), "{out}");
        assert!(!out.contains(&0xc0c0_u32.to_string()), "{out}");
    }

    // The help says that every line is stored.
    bloom()
        .args(["build", "--help"])
        .assert()
        .success()
        .stdout(predicate::str::contains("CF.ADD "))
        .stdout(predicate::str::contains("listed twice is stored twice"));
}

/// `--kind counting` writes bloom-core's counting filter for the same settings.
#[test]
fn counting_build_writes_bloom_cores_filter() {
    let dir = TempDir::new().unwrap();
    let keys: Vec<String> = (0..1_000).map(|i| format!("k{i}")).collect();
    let input: String = keys.iter().map(|k| format!("{k}\n")).collect();
    let o = build_kind(dir.path(), "counting", "1000", "0.01", "c.bloom", &input);
    assert!(o.status.success(), "{}", stderr(&o));
    let want = bloom_core::BloomFilter::builder()
        .expected_items(1_000)
        .false_positive_rate(0.01)
        .seed(0xc0c0)
        .build_counting()
        .unwrap();
    for key in &keys {
        want.insert(key.as_str());
    }
    assert!(fs::read(dir.path().join("c.bloom")).unwrap() == want.to_bytes());
    assert_eq!(stats_json(dir.path(), "c.bloom")["kind"], "counting");
}

/// A cuckoo filter that runs out of room stops the build: exit 2, one line naming the output,
/// how many distinct keys went in and the line that found no room, and asking for a larger
/// --items; nothing written, an existing output untouched. Then a large enough --items builds.
#[test]
fn a_full_cuckoo_filter_stops_the_build_and_writes_nothing() {
    let dir = TempDir::new().unwrap();
    let keys: Vec<String> = (0..2_000).map(|i| format!("key-{i}")).collect();
    let input: String = keys.iter().map(|k| format!("{k}\n")).collect();
    fs::write(dir.path().join("keys.txt"), &input).unwrap();
    // Where bloom-core's filter of the same settings fills up.
    let same = bloom_core::CuckooFilter::builder()
        .expected_items(1_000)
        .false_positive_rate(0.01)
        .seed(0xc0c0)
        .build()
        .unwrap();
    let (line, full) = keys
        .iter()
        .enumerate()
        .find_map(|(i, k)| same.insert(k.as_str()).err().map(|e| (i + 1, e)))
        .expect("2000 keys overflow a filter for 1000");

    build(dir.path(), "old.cf", &["a"], "10", "0.01", "1");
    let old = fs::read(dir.path().join("old.cf")).unwrap();
    let before = listing(dir.path());
    for (out, inputs) in [
        ("new.cf", "keys.txt"),
        ("old.cf", "keys.txt"),
        ("new.cf", "-"),
    ] {
        let o = run(
            dir.path(),
            &[
                "build", "--kind", "cuckoo", "-n", "1000", "-p", "0.01", "--seed", "0xc0c0", "-o",
                out, inputs,
            ],
            input.clone(),
        );
        let source = if inputs == "-" { "stdin" } else { "keys.txt" };
        assert_error(
            &o,
            &[
                out,
                "not written",
                "is full",
                &format!("holds {} keys in its {} slots", full.len, full.slots),
                &format!("line {line} of {source}"),
                "larger --items",
            ],
        );
        assert_eq!(listing(dir.path()), before, "{out} left a file");
    }
    assert_eq!(fs::read(dir.path().join("old.cf")).unwrap(), old);

    // --items auto sizes it for the lines: every key goes in.
    let o = run(
        dir.path(),
        &[
            "build", "--kind", "cuckoo", "-n", "auto", "-p", "0.01", "-o", "new.cf", "keys.txt",
        ],
        "",
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let o = run(dir.path(), &["check", "-q", "new.cf"], input);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
}

/// A cuckoo build is what a service removes deleted keys from, so removing any one listed
/// key from the file's filter must leave every other listed key present, including keys
/// that share its fingerprint and buckets (a set-like build, which skips those, fails this:
/// about a hundred such pairs among 4,000 keys with 7-bit fingerprints).
#[test]
fn removing_any_key_of_a_cuckoo_build_keeps_every_other_key() {
    let dir = TempDir::new().unwrap();
    let keys: Vec<String> = (0..4_000).map(|i| format!("order:{i}")).collect();
    let input: String = keys.iter().map(|k| format!("{k}\n")).collect();
    let o = build_kind(dir.path(), "cuckoo", "4000", "0.1", "orders.cf", &input);
    assert!(o.status.success(), "{}", stderr(&o));
    let filter =
        bloom_core::CuckooFilter::from_bytes(&fs::read(dir.path().join("orders.cf")).unwrap())
            .unwrap();
    assert_eq!(filter.fingerprint_bits(), 7);
    assert_eq!(filter.len(), 4_000);
    // Keys by their pair of buckets: only keys of one pair can share a fingerprint there.
    let mut by_buckets: std::collections::HashMap<[u64; 2], Vec<&str>> = Default::default();
    for key in &keys {
        let mut pair = filter.buckets_of(key.as_str());
        pair.sort_unstable();
        by_buckets.entry(pair).or_default().push(key);
    }
    let mut shared = 0;
    for key in &keys {
        let mut pair = filter.buckets_of(key.as_str());
        pair.sort_unstable();
        assert!(filter.remove(key.as_str()), "{key} was not in the file");
        for other in by_buckets[&pair].iter().filter(|o| **o != key.as_str()) {
            assert!(
                filter.contains(*other),
                "removing {key} took {other} with it"
            );
        }
        shared += usize::from(filter.contains(key.as_str()));
        filter.insert(key.as_str()).unwrap();
    }
    // Keys still "maybe" after their own removal: those sharing a fingerprint and buckets
    // with another key (and a few whose fingerprint another stored key merely matches).
    assert!(
        shared >= 20,
        "only {shared} keys shared a fingerprint: the test proves little"
    );
}

/// A key listed more than eight times cannot be stored (both its buckets hold only its
/// fingerprint): the error says so instead of asking for a larger --items.
#[test]
fn a_cuckoo_build_names_a_key_listed_more_than_eight_times() {
    let dir = TempDir::new().unwrap();
    let input = "a\nb\n".to_owned() + &"same\n".repeat(9);
    let o = build_kind(dir.path(), "cuckoo", "1000", "0.01", "x.cf", &input);
    assert_error(
        &o,
        &[
            "x.cf",
            "not written",
            "line 11 of stdin repeats a key",
            "at most 8 times",
            "sort -u",
        ],
    );
    assert!(!dir.path().join("x.cf").exists());
}

/// What a cuckoo filter cannot take is refused before any input is read: a --layout, and a
/// rate below the reach of 17-bit fingerprints (with --items auto too, before the count).
#[test]
fn cuckoo_build_refuses_a_layout_and_a_rate_it_cannot_reach() {
    let dir = TempDir::new().unwrap();
    let o = run(
        dir.path(),
        &[
            "build", "--kind", "cuckoo", "-n", "100", "-p", "0.01", "--layout", "classic", "-o",
            "x.cf",
        ],
        "a\n",
    );
    assert_error(&o, &["--layout classic", "cuckoo filter has no layout"]);
    for items in ["100", "auto"] {
        let o = build_kind(dir.path(), "cuckoo", items, "1e-5", "x.cf", "a\n");
        assert_error(&o, &["cannot size the filter", "cuckoo", "5.8e-5"]);
    }
    // The boundary: 6e-5 is within reach (17-bit fingerprints).
    let o = build_kind(dir.path(), "cuckoo", "100", "6e-5", "x.cf", "a\n");
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stats_json(dir.path(), "x.cf")["fingerprint_bits"], 17);
    let o = run(
        dir.path(),
        &[
            "build", "--kind", "bloomier", "-n", "1", "-p", "0.1", "-o", "y",
        ],
        "",
    );
    assert_usage_error(&o, "cuckoo");
}

/// `merge` refuses a cuckoo filter, first or later among the inputs, saying why (its
/// fingerprints cannot be OR-ed) and what to do; `dedup --state` refuses one too; neither
/// writes anything.
#[test]
fn merge_and_dedup_refuse_cuckoo_files() {
    let dir = TempDir::new().unwrap();
    assert!(
        build_kind(dir.path(), "cuckoo", "100", "0.01", "a.cf", "x\n")
            .status
            .success()
    );
    assert!(
        build_kind(dir.path(), "cuckoo", "100", "0.01", "b.cf", "y\n")
            .status
            .success()
    );
    build(dir.path(), "plain.bloom", &["z"], "100", "0.01", "1");
    let before = listing(dir.path());
    for (inputs, named) in [
        (&["a.cf", "b.cf"][..], "a.cf"),
        (&["a.cf"], "a.cf"),
        (&["plain.bloom", "b.cf"], "b.cf"),
    ] {
        let mut args = vec!["merge"];
        args.extend(inputs);
        args.extend(["-o", "m.cf"]);
        let o = run(dir.path(), &args, "");
        assert_error(
            &o,
            &[
                named,
                "a cuckoo filter, which cannot be merged",
                "fingerprints cannot be OR-ed",
                "build one filter from all the keys",
            ],
        );
        assert_eq!(listing(dir.path()), before, "{args:?}");
    }
    let o = run(
        dir.path(),
        &["dedup", "-n", "100", "-p", "0.01", "--state", "a.cf"],
        "x\nq\n",
    );
    assert_error(&o, &["a.cf", "a cuckoo filter", "plain Bloom filters"]);
    assert!(o.stdout.is_empty());
    assert_eq!(listing(dir.path()), before);
}

/// A damaged cuckoo file is a one-line error naming it and the damage, from `check` and
/// `stats` alike, with nothing on stdout.
#[test]
fn damaged_cuckoo_files_are_refused_by_check_and_stats() {
    let dir = TempDir::new().unwrap();
    let keys: String = (0..500).map(|i| format!("k{i}\n")).collect();
    let o = build_kind(dir.path(), "cuckoo", "500", "0.01", "good.cf", &keys);
    assert!(o.status.success(), "{}", stderr(&o));
    let bytes = fs::read(dir.path().join("good.cf")).unwrap();
    let len = bytes.len();
    let mut flipped = bytes.clone();
    flipped[64 + 20] ^= 0x04; // a bit in the buckets
    let mut wide = bytes.clone();
    wide[12] = 30; // fingerprint width
    let damaged: [(&str, Vec<u8>, String); 4] = [
        ("flipped.cf", flipped, "checksum mismatch".to_owned()),
        (
            "truncated.cf",
            bytes[..len - 100].to_vec(),
            format!(
                "file is truncated: {} bytes, the header promises {len}",
                len - 100
            ),
        ),
        ("header.cf", bytes[..40].to_vec(), "truncated".to_owned()),
        (
            "wide.cf",
            wide,
            "fingerprint width outside 5 to 17 bits".to_owned(),
        ),
    ];
    for (name, content, needle) in &damaged {
        fs::write(dir.path().join(name), content).unwrap();
        for args in [
            vec!["check", name, "k1"],
            vec!["stats", name],
            vec!["stats", "--json", name],
        ] {
            let o = run(dir.path(), &args, "");
            assert_error(&o, &[name, needle]);
            assert!(o.stdout.is_empty(), "{args:?}");
        }
    }
    // The undamaged file still answers.
    let o = run(dir.path(), &["check", "good.cf", "k1"], "");
    assert_eq!(stdout(&o), "maybe\tk1\n");
}

/// The value of a `calc` comparison line `label:`: its bytes, bits per item and the rest.
fn kind_line<'a>(text: &'a str, label: &str) -> (u64, f64, &'a str) {
    let value = field(text, label);
    let (bytes, rest) = value
        .split_once(" bytes (")
        .unwrap_or_else(|| panic!("{value}"));
    let (_, rest) = rest.split_once("), ").unwrap();
    let (per_item, what) = rest.split_once(" bits per item; ").unwrap();
    (bytes.parse().unwrap(), per_item.parse().unwrap(), what)
}

/// `calc` keeps its lines and adds one per kind, each the size of the filter bloom-core
/// builds for the same --items and --fpr: plain (the layout's sizing), counting (4× its
/// bits), cuckoo (the buckets and fingerprint width of `CuckooFilter::builder`, in the bytes
/// its file holds past the 68 of header and checksum), or, for a rate no fingerprint
/// reaches, bloom-core's limit.
#[test]
fn calc_compares_the_three_kinds_as_bloom_core_builds_them() {
    let dir = TempDir::new().unwrap();
    for (items, fpr, layout) in [
        (100_000u64, "0.01", "blocked"),
        (123_457, "0.001", "classic"),
        (5_000, "0.2", "split-block"),
        (100_000, "6e-5", "blocked"),
    ] {
        let o = run(
            dir.path(),
            &[
                "calc",
                "-n",
                &items.to_string(),
                "-p",
                fpr,
                "--layout",
                layout,
            ],
            "",
        );
        assert!(o.status.success(), "{}", stderr(&o));
        let text = stdout(&o);
        let p: f64 = fpr.parse().unwrap();
        let layout_value: Layout = layout.parse().unwrap();
        let sized = params::for_layout(layout_value, items, p).unwrap();
        // The existing lines, unchanged.
        assert_eq!(field(&text, "layout"), layout);
        assert_eq!(field(&text, "bits (m)"), sized.bits.to_string());
        assert_eq!(field(&text, "hashes (k)"), sized.hashes.to_string());

        let plain = bloom_core::BloomFilter::builder()
            .expected_items(items)
            .false_positive_rate(p)
            .layout(layout_value)
            .seed(1)
            .build()
            .unwrap();
        let (bytes, per_item, what) = kind_line(&text, "plain");
        assert_eq!(bytes as usize, plain.size_in_bytes(), "{text}");
        assert_eq!(
            format!("{per_item:.2}"),
            format!("{:.2}", sized.bits as f64 / items as f64)
        );
        assert_eq!(what, format!("k = {}, {layout}", sized.hashes));

        let counting = bloom_core::CountingBloomFilter::builder()
            .expected_items(items)
            .false_positive_rate(p)
            .layout(layout_value)
            .seed(1)
            .build()
            .unwrap();
        let (bytes, per_item, what) = kind_line(&text, "counting");
        assert_eq!(bytes as usize, counting.size_in_bytes(), "{text}");
        assert_eq!(
            format!("{per_item:.2}"),
            format!("{:.2}", 4.0 * sized.bits as f64 / items as f64)
        );
        assert_eq!(what, "4-bit counters, can remove");

        let cuckoo = bloom_core::CuckooFilter::builder()
            .expected_items(items)
            .false_positive_rate(p)
            .seed(1)
            .build()
            .unwrap();
        let (bytes, per_item, what) = kind_line(&text, "cuckoo");
        assert_eq!(bytes as usize, cuckoo.to_bytes().len() - 68, "{text}");
        let bits = cuckoo.num_buckets() * u64::from(4 * cuckoo.fingerprint_bits() - 4);
        assert_eq!(
            format!("{per_item:.2}"),
            format!("{:.2}", bits as f64 / items as f64)
        );
        assert!(
            what.starts_with(&format!(
                "{} buckets, f = {} bits, fpr ",
                cuckoo.num_buckets(),
                cuckoo.fingerprint_bits()
            )),
            "{text}"
        );
        let rate: f64 = what
            .split("fpr ")
            .nth(1)
            .unwrap()
            .split(',')
            .next()
            .unwrap()
            .parse()
            .unwrap();
        assert!(rate <= p, "{text}");
    }

    // Below the cuckoo filter's reach: the plain and counting lines, and the limit.
    let o = run(dir.path(), &["calc", "-n", "1M", "-p", "1e-5"], "");
    assert!(o.status.success(), "{}", stderr(&o));
    let text = stdout(&o);
    kind_line(&text, "plain");
    kind_line(&text, "counting");
    let Err(bloom_core::BuildError::CuckooRateTooLow { min, .. }) =
        bloom_core::CuckooFilter::new(1_000_000, 1e-5)
    else {
        panic!("bloom-core builds a cuckoo filter at 1e-5");
    };
    assert_eq!(
        field(&text, "cuckoo"),
        format!("not available below p≈{min:.1e} (17-bit fingerprints at most)")
    );
    assert!(field(&text, "cuckoo").contains("5.8e-5"));
}

/// `dedup --window 24h` on a fixed clock (`BLOOM_NOW_UNIX_MS`), a run per "hour" with the
/// state file between: a URL seen 23 h ago is dropped, one first seen 49 h ago (two windows)
/// passes again; `stats` and `check` read the state as of the same time.
#[test]
fn dedup_window_drops_what_it_saw_within_the_window_and_passes_what_expired() {
    let dir = TempDir::new().unwrap();
    let (t0, hour) = (1_700_000_000_000u64, 3_600_000u64);
    let at = |hours: u64, input: &str| {
        bloom()
            .current_dir(dir.path())
            .env("BLOOM_NOW_UNIX_MS", (t0 + hours * hour).to_string())
            .args([
                "dedup", "--window", "24h", "-n", "10k", "-p", "0.001", "--seed", "7",
            ])
            .args(["--state", "seen.bloom"])
            .write_stdin(input)
            .output()
            .unwrap()
    };
    let o = at(0, "https://a/\nhttps://b/\nhttps://a/\n");
    assert_eq!(
        (o.status.code(), stdout(&o).as_str()),
        (Some(0), "https://a/\nhttps://b/\n")
    );
    let o = at(23, "https://a/\nhttps://c/\n");
    assert_eq!(stdout(&o), "https://c/\n", "a, 23 h old, must be dropped");
    let o = at(49, "https://a/\nhttps://b/\nhttps://c/\n");
    // a and b: 49 h old, gone; c: 26 h old, between W and W + T (32 h): still dropped.
    assert_eq!(stdout(&o), "https://a/\nhttps://b/\n");

    let stats = bloom()
        .current_dir(dir.path())
        .env("BLOOM_NOW_UNIX_MS", (t0 + 49 * hour).to_string())
        .args(["stats", "--json", "seen.bloom"])
        .output()
        .unwrap();
    let json: serde_json::Value = serde_json::from_slice(&stats.stdout).unwrap();
    assert_eq!(json["kind"], "windowed");
    assert_eq!(json["window"]["unit"], "time_ms");
    assert_eq!(json["window"]["length"], 86_400_000);
    assert_eq!(json["window"]["generations"], 4);
    assert_eq!(json["capacity"], 10_000);
    let check = bloom()
        .current_dir(dir.path())
        .env("BLOOM_NOW_UNIX_MS", (t0 + 49 * hour).to_string())
        .args(["check", "seen.bloom", "https://c/", "https://zzz/"])
        .output()
        .unwrap();
    assert_eq!(stdout(&check), "maybe\thttps://c/\nabsent\thttps://zzz/\n");
}

/// A count window: a line repeated within the last W lines is dropped, one whose first
/// sighting is more than W + W/(G − 1) lines back passes.
#[test]
fn dedup_window_by_lines_forgets_after_the_window() {
    let dir = TempDir::new().unwrap();
    let args = [
        "dedup", "--window", "6", "-n", "6", "-p", "0.001", "--seed", "3",
    ];
    // W = 6, G = 4: T = 2; "a" is dropped 6 lines later, passes 8 lines later.
    let within: String = ["a", "1", "2", "3", "4", "5", "a"]
        .map(|l| format!("{l}\n"))
        .concat();
    assert_eq!(
        stdout(&run(dir.path(), &args, within)),
        "a\n1\n2\n3\n4\n5\n"
    );
    let after: String = ["a", "1", "2", "3", "4", "5", "6", "7", "a"]
        .map(|l| format!("{l}\n"))
        .concat();
    assert_eq!(
        stdout(&run(dir.path(), &args, after)),
        "a\n1\n2\n3\n4\n5\n6\n7\na\n"
    );
}

#[test]
fn dedup_window_refuses_mismatched_or_other_states_and_ambiguous_units() {
    let dir = TempDir::new().unwrap();
    let windowed = [
        "dedup", "--window", "24h", "-n", "1k", "-p", "0.01", "--state", "w.bloom",
    ];
    assert!(run(dir.path(), &windowed, "x\n").status.success());
    let before = fs::read(dir.path().join("w.bloom")).unwrap();
    let other = [
        "dedup", "--window", "12h", "-n", "1k", "-p", "0.01", "--state", "w.bloom",
    ];
    let o = run(dir.path(), &other, "y\n");
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("does not match these options"),
        "{}",
        stderr(&o)
    );
    let plain = ["dedup", "-n", "1k", "-p", "0.01", "--state", "w.bloom"];
    let o = run(dir.path(), &plain, "y\n");
    assert!(stderr(&o).contains("a windowed filter"), "{}", stderr(&o));
    assert_eq!(
        fs::read(dir.path().join("w.bloom")).unwrap(),
        before,
        "a refused run changed the state"
    );

    assert!(
        run(
            dir.path(),
            &["dedup", "-n", "1k", "-p", "0.01", "--state", "p.bloom"],
            "x\n"
        )
        .status
        .success()
    );
    let o = run(
        dir.path(),
        &[
            "dedup", "--window", "1h", "-n", "1k", "-p", "0.01", "--state", "p.bloom",
        ],
        "x\n",
    );
    assert!(stderr(&o).contains("not a windowed one"), "{}", stderr(&o));
    let o = run(
        dir.path(),
        &["dedup", "--window", "10m", "-n", "1k", "-p", "0.01"],
        "x\n",
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("10min for minutes or 10M"),
        "{}",
        stderr(&o)
    );
}

/// The state is replaced atomically: a run killed with SIGKILL after reading input leaves the
/// previous state byte for byte, and no temporary file.
#[test]
fn a_killed_windowed_dedup_keeps_the_previous_state() {
    use std::io::Write as _;
    let dir = TempDir::new().unwrap();
    let args = [
        "dedup",
        "--window",
        "24h",
        "-n",
        "100k",
        "-p",
        "0.01",
        "--state",
        "seen.bloom",
    ];
    assert!(run(dir.path(), &args, "a\nb\n").status.success());
    let before = fs::read(dir.path().join("seen.bloom")).unwrap();
    let files = listing(dir.path());
    assert_eq!(files.len(), 2, "the manifest and one generation: {files:?}");
    let mut child = std::process::Command::new(assert_cmd::cargo::cargo_bin("bloom"))
        .current_dir(dir.path())
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(b"c\nd\n").unwrap();
    stdin.flush().unwrap();
    std::thread::sleep(std::time::Duration::from_millis(300));
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    assert_eq!(fs::read(dir.path().join("seen.bloom")).unwrap(), before);
    assert_eq!(listing(dir.path()), files);
}

/// Runs `command` with `input` on its standard input.
fn with_stdin(command: std::process::Command, input: &str) -> Output {
    spawn_with_stdin(command, input, std::process::Stdio::piped)
        .wait_with_output()
        .unwrap()
}

/// A run killed at each step of its save (`BLOOM_TEST_CRASH_AT`: after a generation file,
/// before the manifest, after it) leaves a state that finds every line of every completed
/// run; the next completed run removes what the killed one left.
#[test]
fn a_windowed_dedup_killed_at_each_step_of_a_save_loses_nothing() {
    let dir = TempDir::new().unwrap();
    let (t0, hour) = (1_700_000_000_000u64, 3_600_000u64);
    let dedup = |ms: u64, crash_at: &str| {
        let mut c = std::process::Command::new(assert_cmd::cargo::cargo_bin("bloom"));
        c.current_dir(dir.path())
            .env("BLOOM_NOW_UNIX_MS", ms.to_string())
            .env("BLOOM_TEST_CRASH_AT", crash_at)
            .args(["dedup", "--window", "24h", "-n", "10k", "-p", "0.001"])
            .args(["--state", "seen.bloom"]);
        c
    };
    let lines = |tag: &str| (0..200).map(|j| format!("{tag}-{j}\n")).collect::<String>();
    let mut remembered = String::new();
    let steps = ["generation-written", "before-manifest", "manifest-written"];
    for (i, step) in steps.iter().enumerate() {
        // The killed run replaces the newest generation's file, then starts a new one.
        for (k, later) in [0, 8].into_iter().enumerate() {
            let now = t0 + (2 * i as u64 + k as u64) * hour;
            let o = with_stdin(dedup(now, ""), &lines(&format!("ok-{i}-{k}")));
            assert!(o.status.success(), "{}", stderr(&o));
            remembered += &lines(&format!("ok-{i}-{k}"));
            let o = with_stdin(
                dedup(now + later * hour, step),
                &lines(&format!("killed-{i}-{k}")),
            );
            assert_eq!(o.status.code(), None, "{step}: the run was not killed");
            assert_state_holds(dir.path(), now, &remembered, &format!("killed at {step}"));
        }
    }
    let o = with_stdin(dedup(t0 + 12 * hour, ""), "last\n");
    assert!(o.status.success(), "{}", stderr(&o));
    assert_only_the_state_files(dir.path());
}

/// Two runs on one state must not overlap (the second would save over the first's lines):
/// while a run is streaming, another on the same state fails at once, reading nothing; once
/// the first ends, the next runs and sees its lines. Plain and windowed states alike.
#[test]
fn a_second_dedup_on_the_same_state_is_refused_while_the_first_runs() {
    use std::io::{BufRead as _, BufReader, Write as _};
    use std::process::Stdio;
    for window in [&[][..], &["--window", "24h"][..]] {
        let dir = TempDir::new().unwrap();
        let args: Vec<&str> = ["dedup", "-n", "1k", "-p", "0.01", "--state", "s.bloom"]
            .into_iter()
            .chain(window.iter().copied())
            .collect();
        let mut first = std::process::Command::new(assert_cmd::cargo::cargo_bin("bloom"))
            .current_dir(dir.path())
            .args(&args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdin = first.stdin.take().unwrap();
        stdin.write_all(b"a\n").unwrap();
        stdin.flush().unwrap();
        // Its first line passed through: it holds the state.
        let mut out = BufReader::new(first.stdout.take().unwrap());
        let mut line = String::new();
        out.read_line(&mut line).unwrap();
        assert_eq!(line, "a\n");

        let second = run(dir.path(), &args, "a\nb\n");
        assert_error(&second, &["s.bloom", "in use by another `bloom dedup`"]);
        assert_eq!(stdout(&second), "");

        drop(stdin); // the first run ends and saves
        assert!(first.wait().unwrap().success());
        let third = run(dir.path(), &args, "a\nb\n");
        assert_eq!(
            (third.status.code(), stdout(&third).as_str()),
            (Some(0), "b\n")
        );
    }
}

/// A symbolic link or a FIFO planted at a state's lock path (`.NAME.lock`) is refused with
/// an error naming it (`state_lock.rs`): nothing is created or written through the link,
/// the run reads no input and saves nothing, and a FIFO does not hang it. A regular lock
/// file left there works as before. Plain and windowed states alike.
#[cfg(unix)]
#[test]
fn a_symlink_or_fifo_planted_at_the_lock_path_is_refused() {
    for window in [&[][..], &["--window", "24h"][..]] {
        let dir = TempDir::new().unwrap();
        let args: Vec<&str> = ["dedup", "-n", "1k", "-p", "0.01", "--state", "s.bloom"]
            .into_iter()
            .chain(window.iter().copied())
            .collect();
        let (lock, victim) = (dir.path().join(".s.bloom.lock"), dir.path().join("victim"));
        std::os::unix::fs::symlink(&victim, &lock).unwrap();
        let o = run(dir.path(), &args, "a\n");
        assert_error(&o, &["s.bloom", ".s.bloom.lock", "symbolic link"]);
        assert_eq!(stdout(&o), "");
        assert!(!victim.exists(), "the link's target was created");
        fs::write(&victim, "keep").unwrap();
        let o = run(dir.path(), &args, "a\n");
        assert_error(&o, &[".s.bloom.lock", "symbolic link"]);
        assert_eq!(fs::read_to_string(&victim).unwrap(), "keep");
        assert!(!dir.path().join("s.bloom").exists(), "a state was saved");

        fs::remove_file(&lock).unwrap();
        let made = std::process::Command::new("mkfifo")
            .arg(&lock)
            .status()
            .unwrap();
        assert!(made.success());
        let o = run(dir.path(), &args, "a\n");
        assert_error(&o, &[".s.bloom.lock", "FIFO"]);
        assert_eq!(stdout(&o), "");

        fs::remove_file(&lock).unwrap();
        fs::write(&lock, "").unwrap();
        let o = run(dir.path(), &args, "a\n");
        assert_eq!(
            (o.status.code(), stdout(&o).as_str()),
            (Some(0), "a\n"),
            "{}",
            stderr(&o)
        );
    }
}

/// A generation file that is missing or damaged is an error naming it; the run reads no
/// input and leaves the state as it was.
#[test]
fn a_missing_or_corrupt_generation_file_is_an_error_naming_it() {
    let dir = TempDir::new().unwrap();
    let args = [
        "dedup",
        "--window",
        "24h",
        "-n",
        "1k",
        "-p",
        "0.01",
        "--state",
        "seen.bloom",
    ];
    assert!(run(dir.path(), &args, "a\n").status.success());
    let generation = listing(dir.path()).pop().unwrap();
    assert!(generation.starts_with("seen.bloom.g"), "{generation}");
    let path = dir.path().join(&generation);
    let bytes = fs::read(&path).unwrap();
    let manifest = fs::read(dir.path().join("seen.bloom")).unwrap();

    fs::remove_file(&path).unwrap();
    let o = run(dir.path(), &args, "b\n");
    assert_error(&o, &["seen.bloom", &generation, "No such file"]);
    assert_eq!(stdout(&o), "");

    let mut damaged = bytes.clone();
    damaged[100] ^= 1;
    fs::write(&path, &damaged).unwrap();
    let o = run(dir.path(), &args, "b\n");
    assert_error(&o, &["seen.bloom", "generation", "checksum mismatch"]);
    assert_eq!(fs::read(dir.path().join("seen.bloom")).unwrap(), manifest);
    assert_eq!(fs::read(&path).unwrap(), damaged);
}

/// Asserts that, as of `now`, the state `seen.bloom` in `dir` loads and holds every line of
/// `lines`.
fn assert_state_holds(dir: &Path, now: u64, lines: &str, when: &str) {
    let check = bloom()
        .current_dir(dir)
        .env("BLOOM_NOW_UNIX_MS", now.to_string())
        .args(["check", "seen.bloom"])
        .write_stdin(lines.to_owned())
        .output()
        .unwrap();
    let answers = stdout(&check);
    let forgotten: Vec<&str> = answers
        .lines()
        .filter(|l| l.starts_with("absent"))
        .collect();
    assert!(
        stderr(&check).is_empty() && forgotten.is_empty(),
        "{when}: {} forgotten, e.g. {:?}; {}",
        forgotten.len(),
        forgotten.first(),
        stderr(&check)
    );
}

/// Asserts that `dir` holds the state `seen.bloom` and the generation files it may name
/// (at most 4), nothing else: what a completed run leaves.
fn assert_only_the_state_files(dir: &Path) {
    let files = listing(dir);
    assert!(
        files[0] == "seen.bloom"
            && files.len() <= 5
            && files[1..].iter().all(|f| f.starts_with("seen.bloom.g")),
        "{files:?}"
    );
}

/// The state is a manifest and one file per generation (`window_state.rs`): a run killed
/// with SIGKILL at any point of its save (a few milliseconds apart, from the moment its
/// first temporary file appears, and later) leaves a state that loads and finds every line of every
/// run that completed; a completed run leaves no file it does not name.
#[test]
fn a_windowed_dedup_killed_while_saving_loses_no_completed_run() {
    use std::time::{Duration, Instant};
    let dir = TempDir::new().unwrap();
    let (t0, hour) = (1_700_000_000_000u64, 3_600_000u64);
    // 10M lines per window at 0.1 %: 8 MB a generation, so a save takes a while.
    let dedup = |ms: u64| {
        let mut c = std::process::Command::new(assert_cmd::cargo::cargo_bin("bloom"));
        c.current_dir(dir.path())
            .env("BLOOM_NOW_UNIX_MS", ms.to_string())
            .args(["dedup", "--window", "24h", "-n", "10M", "-p", "0.001"])
            .args(["--state", "seen.bloom"]);
        c
    };
    let lines = |run: u64| {
        (0..500)
            .map(|j| format!("run{run}-{j}\n"))
            .collect::<String>()
    };
    // The completed runs: when, and what.
    let mut remembered = Vec::new();
    // Three generations, 8 h apart.
    for run in 0..3 {
        let o = with_stdin(dedup(t0 + run * 8 * hour), &lines(run));
        assert!(o.status.success(), "{}", stderr(&o));
        remembered.push((t0 + run * 8 * hour, lines(run)));
    }
    let (mut killed, mut completed) = (0, 0);
    for round in 0..12u64 {
        // 30 minutes apart from 20 h: the runs from 24 h on start a new generation.
        let now = t0 + 20 * hour + round * hour / 2;
        // A completed run first, so that the killed one replaces a generation file the
        // manifest names (the newest).
        let o = with_stdin(dedup(now), &lines(200 + round));
        assert!(o.status.success(), "{}", stderr(&o));
        remembered.push((now, lines(200 + round)));
        let before: HashSet<String> = listing(dir.path()).into_iter().collect();
        // Its input closed at once: the run saves.
        let mut child =
            spawn_with_stdin(dedup(now), &lines(100 + round), std::process::Stdio::null);
        // Even rounds: killed the moment a generation file it wrote appears (between that
        // file and the manifest). Odd rounds: some time after it starts writing one.
        let trigger = |name: &String| {
            !before.contains(name)
                && if round % 2 == 0 {
                    name.starts_with("seen.bloom.g")
                } else {
                    name.ends_with(".tmp")
                        && fs::metadata(dir.path().join(name)).is_ok_and(|m| m.len() > 0)
                }
        };
        let start = Instant::now();
        while !listing(dir.path()).iter().any(trigger)
            && start.elapsed() < Duration::from_secs(20)
            && child.try_wait().unwrap().is_none()
        {}
        if round % 2 == 1 {
            std::thread::sleep(Duration::from_millis(
                [0, 3, 10, 30, 100, 1000][round as usize / 2],
            ));
        }
        child.kill().unwrap(); // SIGKILL, unless it already exited
        if child.wait().unwrap().success() {
            completed += 1;
            remembered.push((now, lines(100 + round)));
        } else {
            killed += 1;
        }
        // What the window guarantees: every line seen in the last 24 h.
        let recent: String = remembered
            .iter()
            .filter(|(at, _)| now - at < 24 * hour)
            .map(|(_, lines)| lines.as_str())
            .collect();
        assert_state_holds(dir.path(), now, &recent, &format!("round {round}"));
    }
    println!("{killed} runs killed while saving, {completed} completed");
    assert!(
        killed >= 4,
        "only {killed} of 12 kills landed before the run ended"
    );
    assert!(
        completed >= 1,
        "every run was killed: the state never changed"
    );
    // A completed run leaves the manifest and the files it names, nothing else.
    let o = with_stdin(dedup(t0 + 27 * hour), "last\n");
    assert!(o.status.success(), "{}", stderr(&o));
    assert_only_the_state_files(dir.path());
}
