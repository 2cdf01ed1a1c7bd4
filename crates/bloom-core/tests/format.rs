//! The file format (docs/FORMAT.md): decode robustness and the golden files.
//!
//! * Every defect of a file is an error, of the documented variant: every prefix, every
//!   single-byte change, trailing bytes, each inconsistent header field, a bad checksum, bits
//!   set beyond `m`; a header that claims a huge filter cannot make the reader allocate.
//! * Nothing panics: 10,000 seeded random blobs, proptest inputs and mutations of valid files.
//! * The golden files in `tests/data/` were written by format version 1:
//!   `golden-v1.bloom` (Blocked, 1000 keys at 1%), `golden-v1-classic.bloom` (Classic, 100
//!   keys at 1%), `golden-v1-blocked-k20.bloom` (Blocked sized by bits, k = 20, which
//!   reaches the in-block remix) and `golden-v1-split-block.bloom` (SplitBlock, layout byte
//!   2, 1000 keys at 1%). They must load, with the same header fields and the same answers,
//!   in every later version: a failure there means a change broke files users already have
//!   on disk. Fix the change, not the file.
//!
//! Regenerating them is only right when a golden file is added (for example for a new
//! format version, keeping the v1 files). The ignored test rewrites every file; afterwards
//! `git status` must show the existing ones unchanged:
//!
//! ```sh
//! cargo test -p bloomguard-core --release --test format -- --ignored regenerate_golden_files --nocapture
//! ```
//!
//! It prints each file's m, k and positives among the 1000 non-keys, the values pinned in
//! the `golden_v1_*_still_loads` tests.

use std::io::{self, Read};
use std::path::PathBuf;

use bloom_core::{BloomFilter, DecodeError, FORMAT_VERSION, Layout, MAGIC, params};
use crc::{CRC_32_ISCSI, Crc};
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::test_runner::RngSeed;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// CRC-32C, computed independently of the crate (which must agree with it).
const CRC32C: Crc<u32> = Crc::<u32>::new(&CRC_32_ISCSI);

const HEADER_LEN: usize = 64;
const TRAILER_LEN: usize = 4;

// ---------------------------------------------------------------------------------------
// Helpers

/// Small filters of every shape the format has: Blocked, Classic with `m` not a multiple of
/// 64 (unused bits in the last word), Classic sized by rate (capacity and target recorded),
/// SplitBlock (layout byte 2, k = 8) sized by rate.
fn small_filters() -> Vec<(&'static str, BloomFilter)> {
    let blocked = BloomFilter::builder()
        .layout(Layout::Blocked)
        .bits(1024)
        .hashes(5)
        .seed(0x0B10_C4ED)
        .build()
        .unwrap();
    let classic = BloomFilter::builder()
        .layout(Layout::Classic)
        .bits(200)
        .hashes(3)
        .seed(0x0C1A_551C)
        .build()
        .unwrap();
    let by_rate = BloomFilter::builder()
        .layout(Layout::Classic)
        .expected_items(20)
        .false_positive_rate(0.05)
        .seed(u128::MAX)
        .build()
        .unwrap();
    let split = BloomFilter::builder()
        .layout(Layout::SplitBlock)
        .expected_items(40)
        .false_positive_rate(0.05)
        .seed(0x5_9117)
        .build()
        .unwrap();
    for (i, f) in [&blocked, &classic, &by_rate, &split]
        .into_iter()
        .enumerate()
    {
        for j in 0..20 {
            f.insert(&format!("small:{i}:{j}"));
        }
    }
    vec![
        ("blocked", blocked),
        ("classic", classic),
        ("classic-by-rate", by_rate),
        ("split-block", split),
    ]
}

fn from_reader(bytes: &[u8]) -> Result<BloomFilter, DecodeError> {
    BloomFilter::read_from(&mut &bytes[..])
}

/// Recomputes the trailing CRC-32C after a deliberate header edit, so that the edit is the
/// file's only defect.
fn fix_crc(bytes: &mut [u8]) {
    let body = bytes.len() - TRAILER_LEN;
    let crc = CRC32C.checksum(&bytes[..body]);
    bytes[body..].copy_from_slice(&crc.to_le_bytes());
}

fn put_u64(bytes: &mut [u8], at: usize, v: u64) {
    bytes[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

fn put_u32(bytes: &mut [u8], at: usize, v: u32) {
    bytes[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

/// A 64-byte header with the given fields and everything else valid.
fn header(layout: u8, hashes: u32, bits: u64, words: u64) -> Vec<u8> {
    let mut h = vec![0u8; HEADER_LEN];
    h[..8].copy_from_slice(&MAGIC);
    h[8..10].copy_from_slice(&1u16.to_le_bytes());
    h[10] = 0;
    h[11] = layout;
    put_u32(&mut h, 12, hashes);
    put_u64(&mut h, 16, bits);
    h[24..40].copy_from_slice(&0x5eed_u128.to_le_bytes());
    put_u64(&mut h, 56, words);
    h
}

/// Asserts that both decoders reject `bytes` with an error matching `expected`.
macro_rules! assert_rejects {
    ($bytes:expr, $expected:pat $(if $guard:expr)?, $($what:tt)+) => {{
        let bytes: &[u8] = &$bytes;
        for (decoder, result) in [("from_bytes", BloomFilter::from_bytes(bytes)), ("read_from", from_reader(bytes))] {
            match result {
                Err($expected) $(if $guard)? => {}
                other => panic!(
                    "{}: {decoder} gave {other:?}, expected {}",
                    format_args!($($what)+),
                    stringify!($expected $(if $guard)?)
                ),
            }
        }
    }};
}

/// Whether `e` refuses a file for its kind byte `kind` (offset 10) and for nothing else:
/// kinds 1 to 4 are the counting, scalable, cuckoo and windowed filters, valid files of
/// another structure (`WrongKind`); other values are unknown (`UnsupportedKind`).
fn refused_for_its_kind(e: &DecodeError, kind: u8) -> bool {
    match e {
        DecodeError::WrongKind { .. } => (1..=4).contains(&kind),
        DecodeError::UnsupportedKind { found } => *found == kind && kind > 4,
        _ => false,
    }
}

fn proptest_config(cases: u32) -> ProptestConfig {
    ProptestConfig {
        cases,
        rng_seed: RngSeed::Fixed(0x00F0_4A47),
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

// ---------------------------------------------------------------------------------------
// The layout of a valid file

#[test]
fn the_crc_is_crc32c() {
    // The standard check value of CRC-32C (Castagnoli): this is the checksum FORMAT.md names.
    assert_eq!(CRC32C.checksum(b"123456789"), 0xE306_9283);
}

#[test]
fn files_follow_the_documented_layout() {
    for (name, f) in small_filters() {
        let bytes = f.to_bytes();
        let words = f.num_bits().div_ceil(64);
        assert_eq!(bytes.len() as u64, 64 + 8 * words + 4, "{name}");
        assert_eq!(bytes[..8], MAGIC, "{name}");
        assert_eq!(MAGIC, *b"\x89BLM\r\n\x1a\n");
        assert_eq!(u16::from_le_bytes([bytes[8], bytes[9]]), 1, "{name}");
        assert_eq!(FORMAT_VERSION, 1);
        assert_eq!(bytes[10], 0, "{name}: kind");
        let layout_byte = match f.layout() {
            Layout::Classic => 0,
            Layout::Blocked => 1,
            Layout::SplitBlock => 2,
            other => panic!("no tag documented for {other:?}"),
        };
        assert_eq!(bytes[11], layout_byte, "{name}");
        let u64_at = |i: usize| u64::from_le_bytes(bytes[i..i + 8].try_into().unwrap());
        assert_eq!(
            u32::from_le_bytes(bytes[12..16].try_into().unwrap()),
            f.num_hashes()
        );
        assert_eq!(u64_at(16), f.num_bits(), "{name}");
        assert_eq!(
            u128::from_le_bytes(bytes[24..40].try_into().unwrap()),
            f.seed()
        );
        assert_eq!(u64_at(40), f.capacity().unwrap_or(0), "{name}");
        assert_eq!(
            f64::from_bits(u64_at(48)),
            f.target_fpr().unwrap_or(0.0),
            "{name}"
        );
        assert_eq!(u64_at(56), words, "{name}");
        // The words: bit i is bit i % 64 of word i / 64.
        let ones: u32 = bytes[64..bytes.len() - 4]
            .iter()
            .map(|b| b.count_ones())
            .sum();
        assert_eq!(u64::from(ones), f.count_ones(), "{name}");
        let body = bytes.len() - 4;
        assert_eq!(
            u32::from_le_bytes(bytes[body..].try_into().unwrap()),
            CRC32C.checksum(&bytes[..body]),
            "{name}: checksum"
        );

        let mut written = Vec::new();
        f.write_to(&mut written).unwrap();
        assert_eq!(written, bytes, "{name}: write_to differs from to_bytes");
        for decoded in [
            BloomFilter::from_bytes(&bytes).unwrap(),
            from_reader(&bytes).unwrap(),
        ] {
            assert_eq!(decoded.to_bytes(), bytes, "{name}: round trip");
        }
    }
}

#[test]
fn sized_by_bits_records_no_capacity_or_rate() {
    let (_, f) = small_filters().remove(0);
    let bytes = f.to_bytes();
    assert_eq!(bytes[40..56], [0u8; 16]);
    let decoded = BloomFilter::from_bytes(&bytes).unwrap();
    assert_eq!(decoded.capacity(), None);
    assert_eq!(decoded.target_fpr(), None);
}

#[test]
fn a_streaming_reader_copes_with_short_reads_and_interruptions() {
    /// Hands out one byte per call, with an `Interrupted` error before each.
    struct Trickle<'a> {
        data: &'a [u8],
        interrupt: bool,
    }
    impl Read for Trickle<'_> {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            self.interrupt = !self.interrupt;
            if self.interrupt {
                return Err(io::ErrorKind::Interrupted.into());
            }
            let n = buf.len().min(self.data.len()).min(1);
            buf[..n].copy_from_slice(&self.data[..n]);
            self.data = &self.data[n..];
            Ok(n)
        }
    }
    for (name, f) in small_filters() {
        let bytes = f.to_bytes();
        let mut r = Trickle {
            data: &bytes,
            interrupt: false,
        };
        let decoded = BloomFilter::read_from(&mut r).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(decoded.to_bytes(), bytes, "{name}");
    }
}

#[test]
fn a_failing_reader_is_an_io_error() {
    struct Broken<'a>(&'a [u8]);
    impl Read for Broken<'_> {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            if self.0.is_empty() {
                return Err(io::Error::other("disk on fire"));
            }
            let n = buf.len().min(self.0.len());
            buf[..n].copy_from_slice(&self.0[..n]);
            self.0 = &self.0[n..];
            Ok(n)
        }
    }
    let (_, f) = small_filters().remove(0);
    let bytes = f.to_bytes();
    for cut in [0, 5, 64, 100, bytes.len() - 1] {
        match BloomFilter::read_from(&mut Broken(&bytes[..cut])) {
            Err(DecodeError::Io(e)) => assert_eq!(e.to_string(), "disk on fire"),
            other => panic!("cut at {cut}: {other:?}"),
        }
    }
}

// ---------------------------------------------------------------------------------------
// Truncation, trailing bytes, bad magic

#[test]
fn every_prefix_is_truncated() {
    for (name, f) in small_filters() {
        let bytes = f.to_bytes();
        let full = bytes.len() as u64;
        for len in 0..bytes.len() {
            // Less than a header: the header is what is missing. Otherwise the whole file.
            let needed = if len < HEADER_LEN { 64 } else { full };
            assert_rejects!(
                bytes[..len],
                DecodeError::Truncated { needed: n, available: a } if n == needed && a == len as u64,
                "{name}: prefix of {len} bytes"
            );
        }
    }
}

#[test]
fn short_inputs_that_are_not_a_filter_are_bad_magic() {
    // Anything that departs from the magic in its first bytes, however short.
    for junk in [
        &b"P"[..],
        b"PK\x03\x04",
        b"\x89BLN",
        b"\x89BLM\r\n\x1a\r",
        b"{\"bits\": []}",
    ] {
        assert_rejects!(junk, DecodeError::BadMagic, "{junk:?}");
    }
    // A prefix of the magic is a truncated filter, down to the empty input.
    for len in 0..MAGIC.len() {
        assert_rejects!(
            MAGIC[..len],
            DecodeError::Truncated { needed: 64, available: a } if a == len as u64,
            "magic prefix of {len} bytes"
        );
    }
    // A whole file with any magic byte changed.
    let (_, f) = small_filters().remove(0);
    for i in 0..MAGIC.len() {
        let mut bytes = f.to_bytes();
        bytes[i] ^= 0x20; // e.g. the case of 'B', 'L', 'M'
        fix_crc(&mut bytes);
        assert_rejects!(bytes, DecodeError::BadMagic, "magic byte {i} changed");
    }
}

#[test]
fn trailing_bytes_are_rejected() {
    for (name, f) in small_filters() {
        let bytes = f.to_bytes();
        let extras: [&[u8]; 4] = [&[0], b"\n", &[0xFF; 1000], &bytes];
        for extra in extras {
            let mut long = bytes.clone();
            long.extend_from_slice(extra);
            let n = extra.len() as u64;
            match BloomFilter::from_bytes(&long) {
                Err(DecodeError::TrailingBytes { extra }) => assert_eq!(extra, n, "{name}"),
                other => panic!("{name}: {n} trailing bytes: from_bytes gave {other:?}"),
            }
            // The streaming reader stops counting at the first byte past the end.
            match from_reader(&long) {
                Err(DecodeError::TrailingBytes { extra }) => assert_eq!(extra, 1, "{name}"),
                other => panic!("{name}: {n} trailing bytes: read_from gave {other:?}"),
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// Single-byte changes

#[test]
fn every_single_byte_change_is_detected() {
    for (name, f) in small_filters() {
        let bytes = f.to_bytes();
        let layout_byte = bytes[11];
        for i in 0..bytes.len() {
            // Every value a byte can be changed to, so every bit flip and 0x00/0xFF too.
            for x in 1..=255u8 {
                let mut bad = bytes.clone();
                bad[i] ^= x;
                let what = format!("{name}: byte {i} ^ {x:#04x}");
                match i {
                    0..8 => assert_rejects!(bad, DecodeError::BadMagic, "{what}"),
                    8..10 => assert_rejects!(
                        bad,
                        DecodeError::UnsupportedVersion { found } if found != 1,
                        "{what}"
                    ),
                    10 => assert_rejects!(bad, e if refused_for_its_kind(&e, x), "{what}"),
                    11 if layout_byte ^ x > 2 => assert_rejects!(
                        bad,
                        DecodeError::UnknownLayout { found } if found == layout_byte ^ x,
                        "{what}"
                    ),
                    // k, m, seed, capacity, target FPR, W (or another known layout): either
                    // the header contradicts itself or the checksum catches it.
                    11..HEADER_LEN => assert_rejects!(
                        bad,
                        DecodeError::Inconsistent(_) | DecodeError::ChecksumMismatch { .. },
                        "{what}"
                    ),
                    // The words and the checksum itself.
                    _ => assert_rejects!(
                        bad,
                        DecodeError::ChecksumMismatch { stored, computed } if stored != computed,
                        "{what}"
                    ),
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// Each inconsistency has its own variant

#[test]
fn versions_other_than_1_are_unsupported() {
    let (_, f) = small_filters().remove(0);
    for version in [0u16, 2, 3, 0x0100, u16::MAX] {
        let mut bytes = f.to_bytes();
        bytes[8..10].copy_from_slice(&version.to_le_bytes());
        fix_crc(&mut bytes);
        assert_rejects!(
            bytes,
            DecodeError::UnsupportedVersion { found } if found == version,
            "version {version}"
        );
        let message = BloomFilter::from_bytes(&bytes).unwrap_err().to_string();
        assert!(message.contains(&version.to_string()), "{message}");
    }
}

#[test]
fn unknown_kinds_and_layouts_have_their_own_variants() {
    let (_, f) = small_filters().remove(0);
    for kind in [5u8, 0x80, 0xFF] {
        let mut bytes = f.to_bytes();
        bytes[10] = kind;
        fix_crc(&mut bytes);
        assert_rejects!(bytes, DecodeError::UnsupportedKind { found } if found == kind, "kind {kind}");
    }
    for kind in [1u8, 2, 3, 4] {
        let mut bytes = f.to_bytes();
        bytes[10] = kind;
        fix_crc(&mut bytes);
        assert_rejects!(bytes, e if refused_for_its_kind(&e, kind), "kind {kind}");
    }
    for layout in [3u8, 0x7F, 0xFF] {
        let mut bytes = f.to_bytes();
        bytes[11] = layout;
        fix_crc(&mut bytes);
        assert_rejects!(
            bytes,
            DecodeError::UnknownLayout { found } if found == layout,
            "layout {layout}"
        );
    }
}

#[test]
fn inconsistent_headers_are_rejected() {
    let classic = 0u8;
    let blocked = 1u8;
    let split = 2u8;
    // (why, header, which message) — each header is otherwise valid, with a correct checksum
    // over a body of exactly W words.
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("k = 0", header(blocked, 0, 512, 8), "hashes"),
        ("k = 65", header(blocked, 65, 512, 8), "hashes"),
        ("k = u32::MAX", header(classic, u32::MAX, 64, 1), "hashes"),
        ("m = 0", header(classic, 3, 0, 0), "bits"),
        ("blocked m = 1000", header(blocked, 3, 1000, 16), "512"),
        ("blocked m = 513", header(blocked, 3, 513, 9), "512"),
        ("blocked m = 64", header(blocked, 3, 64, 1), "512"),
        ("split-block m = 1000", header(split, 8, 1000, 16), "512"),
        ("split-block m = 64", header(split, 8, 64, 1), "512"),
        ("split-block k = 0", header(split, 0, 512, 8), "hashes"),
        (
            "split-block k = 7",
            header(split, 7, 512, 8),
            "split-block layout's 8",
        ),
        (
            "split-block k = 9",
            header(split, 9, 512, 8),
            "split-block layout's 8",
        ),
        (
            "split-block k = 64",
            header(split, 64, 512, 8),
            "split-block layout's 8",
        ),
        (
            "m above the maximum",
            header(classic, 3, params::MAX_BITS + 1, 0),
            "bits",
        ),
        ("m = u64::MAX", header(blocked, 3, u64::MAX, 0), "bits"),
        ("W too small", header(classic, 3, 200, 3), "word count"),
        ("W too large", header(classic, 3, 200, 5), "word count"),
        ("W = 0", header(blocked, 3, 512, 0), "word count"),
        ("W huge", header(classic, 3, 200, u64::MAX), "word count"),
    ];
    for (why, mut bytes, message) in cases {
        let words = u64::from_le_bytes(bytes[56..64].try_into().unwrap());
        bytes.resize(HEADER_LEN + 8 * words.min(64) as usize + TRAILER_LEN, 0);
        fix_crc(&mut bytes);
        assert_rejects!(
            bytes,
            DecodeError::Inconsistent(m) if m.contains(message),
            "{why}"
        );
    }
    // Target FPR outside (0, 1) (0.0 means "sized by bits").
    for fpr in [1.0, 1.5, -0.01, f64::NAN, f64::INFINITY, -f64::MIN_POSITIVE] {
        let mut bytes = header(classic, 3, 64, 1);
        put_u64(&mut bytes, 48, f64::to_bits(fpr));
        bytes.resize(HEADER_LEN + 8 + TRAILER_LEN, 0);
        fix_crc(&mut bytes);
        assert_rejects!(
            bytes,
            DecodeError::Inconsistent(m) if m.contains("false-positive"),
            "target fpr {fpr}"
        );
    }
    // The hand-made header is itself valid: the cases above fail for their one defect.
    let mut ok = header(classic, 3, 200, 4);
    ok.resize(HEADER_LEN + 32 + TRAILER_LEN, 0);
    fix_crc(&mut ok);
    let f = BloomFilter::from_bytes(&ok).unwrap();
    assert_eq!(
        (f.num_bits(), f.num_hashes(), f.layout()),
        (200, 3, Layout::Classic)
    );
    assert_eq!(f.seed(), 0x5eed);
    assert_eq!(from_reader(&ok).unwrap().to_bytes(), ok);
}

#[test]
fn a_wrong_checksum_is_a_checksum_mismatch() {
    for (name, f) in small_filters() {
        let mut bytes = f.to_bytes();
        let body = bytes.len() - 4;
        let good = CRC32C.checksum(&bytes[..body]);
        let bad = good ^ 0x8000_0001;
        bytes[body..].copy_from_slice(&bad.to_le_bytes());
        assert_rejects!(
            bytes,
            DecodeError::ChecksumMismatch { stored, computed } if stored == bad && computed == good,
            "{name}"
        );
        let message = BloomFilter::from_bytes(&bytes).unwrap_err().to_string();
        assert!(message.contains("checksum"), "{message}");
    }
}

#[test]
fn bits_set_beyond_m_are_rejected_even_with_a_valid_checksum() {
    // Classic, m = 200: the last word (word 3) holds bits 192..200; its bits 8..64 are unused.
    let f = BloomFilter::builder()
        .layout(Layout::Classic)
        .bits(200)
        .hashes(3)
        .seed(9)
        .build()
        .unwrap();
    f.insert("x");
    let last_word = HEADER_LEN + 3 * 8;
    for (bit, valid) in [(0, true), (7, true), (8, false), (9, false), (63, false)] {
        let mut bytes = f.to_bytes();
        let mut word = u64::from_le_bytes(bytes[last_word..last_word + 8].try_into().unwrap());
        word |= 1 << bit;
        put_u64(&mut bytes, last_word, word);
        fix_crc(&mut bytes);
        if valid {
            let decoded = BloomFilter::from_bytes(&bytes).unwrap();
            assert_eq!(decoded.to_bytes(), bytes, "bit {} of m", 192 + bit);
            assert_eq!(from_reader(&bytes).unwrap().to_bytes(), bytes);
        } else {
            assert_rejects!(
                bytes,
                DecodeError::Inconsistent(m) if m.contains("beyond"),
                "bit {} set with m = 200",
                192 + bit
            );
        }
    }
}

// ---------------------------------------------------------------------------------------
// A header that claims a huge filter

/// Peak virtual memory of this process, in KiB (Linux only).
fn peak_virtual_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmPeak:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

#[test]
fn a_huge_claimed_size_with_a_tiny_body_is_truncated_without_allocating_it() {
    let peak_before = peak_virtual_kib();
    let max = params::MAX_BITS; // 2^40 bits: the file would be 128 GiB
    let words = max / 64;
    let needed = 64 + 8 * words + 4;
    for layout in [0u8, 1, 2] {
        for body_len in [0usize, 100, 200_003] {
            let k = if layout == 2 { 8 } else { 7 };
            let mut bytes = header(layout, k, max, words);
            bytes.extend((0..body_len).map(|i| i as u8));
            let available = bytes.len() as u64;
            assert_rejects!(
                bytes,
                DecodeError::Truncated { needed: n, available: a } if n == needed && a == available,
                "layout {layout}, claimed 2^40 bits, {body_len} bytes of body"
            );
        }
    }
    // If either decoder had reserved what the header claims (128 GiB), the allocation would
    // have aborted the process or shown up in the peak.
    if let (Some(before), Some(after)) = (peak_before, peak_virtual_kib()) {
        let grown_mib = after.saturating_sub(before) / 1024;
        // Generous: other tests' threads may reserve malloc arenas (64 MiB each) meanwhile.
        assert!(
            grown_mib < 8 * 1024,
            "peak virtual memory grew by {grown_mib} MiB"
        );
    }
}

// ---------------------------------------------------------------------------------------
// Never a panic

/// Decodes with both readers; they must agree on validity, and a valid input must re-encode
/// to exactly itself.
fn decode_without_panicking(bytes: &[u8]) -> bool {
    let a = BloomFilter::from_bytes(bytes);
    let b = from_reader(bytes);
    assert_eq!(a.is_ok(), b.is_ok(), "{a:?} vs {b:?} on {bytes:02x?}");
    if let (Ok(a), Ok(b)) = (&a, &b) {
        assert_eq!(a.to_bytes(), bytes);
        assert_eq!(b.to_bytes(), bytes);
    }
    a.is_ok()
}

/// A random, internally consistent header for a small filter.
fn random_header(rng: &mut StdRng) -> Vec<u8> {
    let layout = rng.random_range(0..3u8);
    let bits = if layout == 0 {
        rng.random_range(1..300u64)
    } else {
        512 * rng.random_range(1..4u64)
    };
    // SplitBlock's k is always 8.
    let hashes = if layout == 2 {
        8
    } else {
        rng.random_range(1..=64)
    };
    let mut h = header(layout, hashes, bits, bits.div_ceil(64));
    h[24..40].copy_from_slice(&rng.random::<u128>().to_le_bytes());
    h
}

#[test]
fn ten_thousand_random_blobs_never_panic() {
    let mut rng = StdRng::seed_from_u64(0x00B1_0B5E_ED01);
    let valid: Vec<Vec<u8>> = small_filters().iter().map(|(_, f)| f.to_bytes()).collect();
    let mut accepted = 0;
    for i in 0..10_000 {
        // The blob, and whether it must be accepted when that is known.
        let (blob, expected): (Vec<u8>, Option<bool>) = match i % 5 {
            // Pure noise.
            0 => {
                let len = rng.random_range(0..400);
                ((0..len).map(|_| rng.random()).collect(), None)
            }
            // The magic, then noise.
            1 => {
                let len = rng.random_range(0..400);
                let mut b = MAGIC.to_vec();
                b.extend((0..len).map(|_| rng.random::<u8>()));
                (b, None)
            }
            // A consistent header, a random body of about the right length.
            2 => {
                let mut b = random_header(&mut rng);
                let words = u64::from_le_bytes(b[56..64].try_into().unwrap()) as usize;
                let len =
                    (8 * words + 4).saturating_add_signed(rng.random_range(-3..=3i64) as isize);
                b.extend((0..len).map(|_| rng.random::<u8>()));
                (b, None)
            }
            // A consistent header, random words, a correct checksum: valid exactly when no
            // bit is set beyond m.
            3 => {
                let mut b = random_header(&mut rng);
                let words = u64::from_le_bytes(b[56..64].try_into().unwrap()) as usize;
                b.extend((0..8 * words + 4).map(|_| rng.random::<u8>()));
                fix_crc(&mut b);
                let bits = u64::from_le_bytes(b[16..24].try_into().unwrap());
                let last = u64::from_le_bytes(b[b.len() - 12..b.len() - 4].try_into().unwrap());
                let clean_tail = bits % 64 == 0 || last >> (bits % 64) == 0;
                (b, Some(clean_tail))
            }
            // A valid file with a few random byte changes: rejected unless they cancel out.
            _ => {
                let original = &valid[rng.random_range(0..valid.len())];
                let mut b = original.clone();
                for _ in 0..rng.random_range(1..5) {
                    let at = rng.random_range(0..b.len());
                    b[at] ^= rng.random_range(1..=255u8);
                }
                let same = b == *original;
                (b, Some(same))
            }
        };
        let ok = decode_without_panicking(&blob);
        if let Some(expected) = expected {
            assert_eq!(ok, expected, "blob {i}: {blob:02x?}");
        }
        accepted += usize::from(ok);
    }
    // The generator reaches the accepting path too (every tail-clean case of kind 3).
    assert!(accepted > 500, "only {accepted} blobs were valid");
}

proptest! {
    #![proptest_config(proptest_config(2_000))]

    #[test]
    fn arbitrary_bytes_never_panic(bytes in vec(any::<u8>(), 0..600)) {
        decode_without_panicking(&bytes);
    }

    #[test]
    fn arbitrary_bytes_after_the_magic_never_panic(tail in vec(any::<u8>(), 0..600)) {
        let mut bytes = MAGIC.to_vec();
        bytes.extend_from_slice(&[1, 0]);
        bytes.extend_from_slice(&tail);
        decode_without_panicking(&bytes);
    }

    /// Changed bytes, cut or extended: a different file is never accepted.
    #[test]
    fn mutations_of_a_valid_file_are_rejected(
        which in 0..4usize,
        changes in vec((any::<prop::sample::Index>(), 1..=255u8), 0..6),
        cut in prop::option::of(any::<prop::sample::Index>()),
        append in vec(any::<u8>(), 0..3),
    ) {
        let (_, f) = small_filters().swap_remove(which);
        let original = f.to_bytes();
        let mut bytes = original.clone();
        for (at, x) in changes {
            let at = at.index(bytes.len());
            bytes[at] ^= x;
        }
        if let Some(cut) = cut {
            bytes.truncate(cut.index(bytes.len()));
        }
        bytes.extend_from_slice(&append);
        let ok = decode_without_panicking(&bytes);
        prop_assert_eq!(ok, bytes == original);
    }
}

// ---------------------------------------------------------------------------------------
// Golden files

const GOLDEN_SEED: u128 = 0x0123_4567_89ab_cdef_fedc_ba98_7654_3210;

fn golden_path(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name)
}

fn read_golden(name: &str) -> Vec<u8> {
    let path = golden_path(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// How a golden filter was sized.
#[derive(Clone, Copy)]
enum Sizing {
    /// `.expected_items(items).false_positive_rate(fpr)`: both recorded in the header.
    Rate { items: u64, fpr: f64 },
    /// `.bits(bits).hashes(hashes)`: no capacity or rate in the header.
    Bits { bits: u64, hashes: u32 },
}

struct Golden {
    file: &'static str,
    layout: Layout,
    sizing: Sizing,
    keys: Vec<String>,
}

impl Golden {
    fn build(&self) -> BloomFilter {
        let b = BloomFilter::builder().layout(self.layout).seed(GOLDEN_SEED);
        match self.sizing {
            Sizing::Rate { items, fpr } => b.expected_items(items).false_positive_rate(fpr),
            Sizing::Bits { bits, hashes } => b.bits(bits).hashes(hashes),
        }
        .build()
        .unwrap()
    }
}

fn golden_specs() -> [Golden; 4] {
    let keys = |prefix: &str, n: usize| (0..n).map(|i| format!("{prefix}:{i}")).collect();
    [
        Golden {
            file: "golden-v1.bloom",
            layout: Layout::Blocked,
            sizing: Sizing::Rate {
                items: 1000,
                fpr: 0.01,
            },
            keys: keys("golden", 1000),
        },
        Golden {
            file: "golden-v1-classic.bloom",
            layout: Layout::Classic,
            sizing: Sizing::Rate {
                items: 100,
                fpr: 0.01,
            },
            keys: keys("golden-classic", 100),
        },
        // k = 20: the Blocked probes past the seventh come from the in-block remix, which the
        // k = 7 file above never reaches.
        Golden {
            file: "golden-v1-blocked-k20.bloom",
            layout: Layout::Blocked,
            sizing: Sizing::Bits {
                bits: 4096,
                hashes: 20,
            },
            keys: keys("golden-k20", 300),
        },
        // Layout byte 2: one bit in each 64-bit word of the block, offsets cut from one
        // multiply of the hash.
        Golden {
            file: "golden-v1-split-block.bloom",
            layout: Layout::SplitBlock,
            sizing: Sizing::Rate {
                items: 1000,
                fpr: 0.01,
            },
            keys: keys("golden-split", 1000),
        },
    ]
}

fn golden_non_keys() -> Vec<String> {
    (0..1000).map(|i| format!("absent:{i}")).collect()
}

/// Regenerates the golden files. Ignored: see the top of this file for when that is right.
#[test]
#[ignore = "rewrites tests/data/golden-v1*.bloom: only when adding a golden file"]
fn regenerate_golden_files() {
    for golden in golden_specs() {
        let f = golden.build();
        f.insert_many(&golden.keys);
        let positives = golden_non_keys()
            .iter()
            .filter(|k| f.contains(k.as_str()))
            .count();
        let path = golden_path(golden.file);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, f.to_bytes()).unwrap();
        println!(
            "{}: m = {}, k = {}, {} bytes, {positives} of 1000 non-keys positive",
            path.display(),
            f.num_bits(),
            f.num_hashes(),
            f.to_bytes().len()
        );
    }
}

/// Loads a golden file and checks everything a later version must preserve.
fn check_golden(golden: &Golden, num_bits: u64, num_hashes: u32, positives: usize) {
    let Golden {
        file: name,
        layout,
        sizing,
        keys,
    } = golden;
    let bytes = read_golden(name);
    for f in [BloomFilter::from_bytes(&bytes), from_reader(&bytes)] {
        let f = f.unwrap_or_else(|e| panic!("{name} no longer loads: {e}"));
        assert_eq!(f.num_bits(), num_bits, "{name}");
        assert_eq!(f.num_hashes(), num_hashes, "{name}");
        assert_eq!(f.layout(), *layout, "{name}");
        assert_eq!(f.seed(), GOLDEN_SEED, "{name}");
        let (capacity, target) = match *sizing {
            Sizing::Rate { items, fpr } => (Some(items), Some(fpr)),
            Sizing::Bits { .. } => (None, None),
        };
        assert_eq!(f.capacity(), capacity, "{name}");
        assert_eq!(f.target_fpr(), target, "{name}");

        for key in keys {
            assert!(f.contains(key.as_str()), "{name}: {key} not found");
        }
        assert!(f.contains_many(keys).iter().all(|&b| b), "{name}");
        // Any change of hashing or probing changes which non-keys collide.
        let found = golden_non_keys()
            .iter()
            .filter(|k| f.contains(k.as_str()))
            .count();
        assert_eq!(found, positives, "{name}: positives among 1000 non-keys");

        // Re-encoding gives the same bytes.
        assert_eq!(f.to_bytes(), bytes, "{name}: re-encoded differently");
        let mut written = Vec::new();
        f.write_to(&mut written).unwrap();
        assert_eq!(written, bytes, "{name}: write_to differs");
    }

    // Inserting the same keys today, into a filter of the same size, sets exactly the bits
    // in the file: hashing, block choice and probe positions are all unchanged.
    let today = BloomFilter::builder()
        .layout(*layout)
        .bits(num_bits)
        .hashes(num_hashes)
        .seed(GOLDEN_SEED)
        .build()
        .unwrap();
    for key in keys {
        today.insert(key.as_str());
    }
    let words = HEADER_LEN..bytes.len() - TRAILER_LEN;
    assert!(
        today.to_bytes()[words.clone()] == bytes[words],
        "{name}: the same keys set different bits today"
    );
}

#[test]
fn golden_v1_blocked_still_loads() {
    let [blocked, _, _, _] = golden_specs();
    check_golden(&blocked, 10_240, 7, 6);
    assert_eq!(read_golden(blocked.file).len(), 64 + 10_240 / 8 + 4);
}

#[test]
fn golden_v1_classic_still_loads() {
    let [_, classic, _, _] = golden_specs();
    check_golden(&classic, 959, 7, 14);
    assert_eq!(read_golden(classic.file).len(), 64 + 15 * 8 + 4);
}

#[test]
fn golden_v1_blocked_k20_still_loads() {
    let [_, _, k20, _] = golden_specs();
    check_golden(&k20, 4096, 20, 19);
    assert_eq!(read_golden(k20.file).len(), 64 + 4096 / 8 + 4);
}

#[test]
fn golden_v1_split_block_still_loads() {
    let [_, _, _, split] = golden_specs();
    check_golden(&split, 10_240, 8, 17);
    let bytes = read_golden(split.file);
    assert_eq!(bytes.len(), 64 + 10_240 / 8 + 4);
    assert_eq!(bytes[11], 2, "SplitBlock's layout byte");
    // Each key's bits, as FORMAT.md places them: one in each of the eight 64-bit words of
    // one 512-bit block.
    let f = BloomFilter::from_bytes(&bytes).unwrap();
    for key in &split.keys {
        let mut bits = Vec::new();
        f.for_each_bit(key.as_str(), |bit| bits.push(bit));
        let block = bits[0] / 512;
        let words: Vec<u64> = bits.iter().map(|b| b % 512 / 64).collect();
        assert_eq!(words, (0..8).collect::<Vec<u64>>(), "{key}: {bits:?}");
        assert!(bits.iter().all(|b| b / 512 == block), "{key}: {bits:?}");
    }
}

/// SplitBlock's k is fixed: a header with layout byte 2 and any other k is refused for what
/// it is (the checksum re-computed, so that the header is the file's only defect), and so is
/// a Blocked file relabelled as SplitBlock. A Blocked k = 8 file relabelled is a different
/// but valid SplitBlock filter (the format cannot tell).
#[test]
fn a_split_block_header_with_k_other_than_8_is_inconsistent() {
    let (_, f) = small_filters().pop().unwrap();
    assert_eq!((f.layout(), f.num_hashes()), (Layout::SplitBlock, 8));
    for k in [7u32, 1, 9, 64] {
        let mut bytes = f.to_bytes();
        put_u32(&mut bytes, 12, k);
        fix_crc(&mut bytes);
        assert_rejects!(
            bytes,
            DecodeError::Inconsistent(m) if m.contains("split-block layout's 8"),
            "layout 2, k = {k}"
        );
    }
    let (_, blocked) = small_filters().remove(0);
    assert_eq!(
        (blocked.layout(), blocked.num_hashes()),
        (Layout::Blocked, 5)
    );
    let mut bytes = blocked.to_bytes();
    bytes[11] = 2;
    fix_crc(&mut bytes);
    assert_rejects!(
        bytes,
        DecodeError::Inconsistent(m) if m.contains("split-block layout's 8"),
        "a Blocked k = 5 file relabelled as SplitBlock"
    );
    let mut bytes = f.to_bytes();
    bytes[11] = 1;
    fix_crc(&mut bytes);
    let relabelled = BloomFilter::from_bytes(&bytes).unwrap();
    assert_eq!(
        (relabelled.layout(), relabelled.num_hashes()),
        (Layout::Blocked, 8)
    );
}
