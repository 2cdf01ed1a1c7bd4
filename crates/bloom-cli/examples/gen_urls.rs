//! Writes a deterministic stream of 60-byte URLs to standard output, for measuring
//! `bloom dedup` (see the README's "Dedup throughput").
//!
//! ```sh
//! cargo run --release -p bloomguard-cli --example gen_urls -- 2000000 0.1 > /tmp/urls
//! ```
//!
//! Arguments: the number of lines (default 2000000) and the share of them that repeat an
//! earlier line, chosen uniformly among the distinct lines so far (default 0.1). Each line is
//! `https://www.example.com/<16 hex digits>/page?id=<11 digits>` (60 bytes) and a newline.
//! The stream depends only on the arguments: the same on every machine and run.

use std::io::{self, BufWriter, Write};

/// SplitMix64: a tiny, well-mixed, fully specified generator.
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (`n` ≥ 1), by multiply-shift.
    fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next()) * u128::from(n)) >> 64) as u64
    }
}

fn main() -> io::Result<()> {
    let mut args = std::env::args().skip(1);
    let n: u64 = args
        .next()
        .map_or(2_000_000, |a| a.parse().expect("lines: a number"));
    let repeat: f64 = args.next().map_or(0.1, |a| {
        a.parse().expect("repeat share: a number in [0, 1]")
    });
    assert!((0.0..=1.0).contains(&repeat), "repeat share: in [0, 1]");
    let threshold = (repeat * 2f64.powi(53)) as u64;

    let mut rng = SplitMix(0x05ee_d0fb_100d);
    let mut distinct = 0u64;
    let mut out = BufWriter::with_capacity(1 << 20, io::stdout().lock());
    for _ in 0..n {
        // Distinct line i has id i.
        let id = if distinct > 0 && rng.next() >> 11 < threshold {
            rng.below(distinct)
        } else {
            distinct += 1;
            distinct - 1
        };
        // The hex part is a function of the id, so a repeat is the same line.
        let hex = SplitMix(id ^ 0xa5a5_a5a5_a5a5_a5a5).next();
        writeln!(out, "https://www.example.com/{hex:016x}/page?id={id:011}")?;
    }
    out.flush()
}
