//! Writes `docs/fpr.svg`: the measured and the theoretical false-positive rate of a filter sized
//! for n = 100,000 keys at p = 1%, as it is filled from 0.1 n to 3 n, for both layouts.
//!
//! Each layout gets one filter (fixed hash key); after every 0.1 n insertions, 200,000 keys
//! that were never inserted are looked up and the share found is the measured rate. The
//! theory is `bloom_core::params::expected_fpr` for the filter's own m and k. Rates below
//! 1 / 200,000 cannot be measured with that many probes and are left out.
//!
//! ```sh
//! cargo run --release --example fpr_plot            # writes docs/fpr.svg
//! cargo run --release --example fpr_plot -- out.svg # or elsewhere
//! ```
#![forbid(unsafe_code)]

use bloom_core::{BloomFilter, Layout, params};
use plotters::prelude::*;

const N: u64 = 100_000;
const P: f64 = 0.01;
const STEP: u64 = N / 10;
const MAX_ITEMS: u64 = 3 * N;
const PROBES: u64 = 200_000;
const SEED: u128 = 0x5EED_F00D;
/// The bottom of the plot.
const Y_MIN: f64 = 1e-6;

/// One layout's curves: `(items / n, rate)`.
struct Curves {
    layout: Layout,
    bits: u64,
    hashes: u32,
    measured: Vec<(f64, f64)>,
    theory: Vec<(f64, f64)>,
}

fn measure(layout: Layout) -> Result<Curves, Box<dyn std::error::Error>> {
    let filter = BloomFilter::builder()
        .expected_items(N)
        .false_positive_rate(P)
        .layout(layout)
        .seed(SEED)
        .build()?;
    // Members are 0, 1, 2, …; probes come from far above them.
    let probes: Vec<u64> = (0..PROBES).map(|i| (1 << 48) + i).collect();
    let mut measured = Vec::new();
    for end in (STEP..=MAX_ITEMS).step_by(STEP as usize) {
        filter.insert_many(end - STEP..end);
        let found = filter
            .contains_many(&probes)
            .into_iter()
            .filter(|&f| f)
            .count();
        measured.push((end as f64 / N as f64, found as f64 / PROBES as f64));
    }
    let (bits, hashes) = (filter.num_bits(), filter.num_hashes());
    let theory = (10..=300)
        .map(|i| {
            let items = f64::from(i) / 100.0 * N as f64;
            let fpr = params::expected_fpr(layout, bits, hashes, items);
            (items / N as f64, fpr)
        })
        .filter(|&(_, fpr)| fpr >= Y_MIN)
        .collect();
    Ok(Curves {
        layout,
        bits,
        hashes,
        measured,
        theory,
    })
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let out = std::env::args()
        .nth(1)
        .unwrap_or_else(|| concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/fpr.svg").to_owned());
    let curves = [measure(Layout::Blocked)?, measure(Layout::Classic)?];

    println!("| items | layout | measured | theory |");
    println!("| ---: | --- | ---: | ---: |");
    for c in &curves {
        for &(x, fpr) in &c.measured {
            if [1.0, 2.0, 3.0].iter().any(|m| (x - m).abs() < 1e-9) {
                let theory = params::expected_fpr(c.layout, c.bits, c.hashes, x * N as f64);
                println!("| {x} n | {} | {fpr:.5} | {theory:.5} |", c.layout);
            }
        }
    }

    let root = SVGBackend::new(&out, (900, 600)).into_drawing_area();
    root.fill(&WHITE)?;
    let floor = 1.0 / PROBES as f64;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "False-positive rate as a filter sized for n = 100,000 at p = 1% fills up",
            ("sans-serif", 24),
        )
        .margin(16)
        .x_label_area_size(48)
        .y_label_area_size(72)
        .build_cartesian_2d(0.0..3.0, (Y_MIN..1.0).log_scale())?;
    chart
        .configure_mesh()
        .x_desc("items inserted (multiples of n)")
        .y_desc("false-positive rate")
        .y_label_formatter(&|y| format!("{y:.0e}"))
        .x_label_formatter(&|x| format!("{x:.1}"))
        .draw()?;

    let colors = [BLUE, RED];
    for (c, color) in curves.iter().zip(colors) {
        let name = format!("{} (m = {}, k = {})", c.layout, c.bits, c.hashes);
        chart
            .draw_series(LineSeries::new(
                c.theory.iter().copied(),
                color.stroke_width(2),
            ))?
            .label(format!("{name}: theory"))
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], color.stroke_width(2)));
        chart
            .draw_series(
                c.measured
                    .iter()
                    .filter(|&&(_, fpr)| fpr > 0.0)
                    .map(|&(x, fpr)| Circle::new((x, fpr), 4, color.filled())),
            )?
            .label(format!("{name}: measured"))
            .legend(move |(x, y)| Circle::new((x + 10, y), 4, color.filled()));
    }
    // n, the capacity the filters were sized for, and the target p.
    chart
        .draw_series(DashedLineSeries::new(
            [(1.0, Y_MIN), (1.0, 1.0)],
            6,
            4,
            BLACK.stroke_width(1),
        ))?
        .label("n = 100,000 items")
        .legend(|(x, y)| PathElement::new([(x, y), (x + 20, y)], BLACK));
    chart.draw_series(DashedLineSeries::new(
        [(0.0, P), (3.0, P)],
        6,
        4,
        BLACK.mix(0.4).stroke_width(1),
    ))?;
    chart.draw_series(DashedLineSeries::new(
        [(0.0, floor), (3.0, floor)],
        2,
        4,
        BLACK.mix(0.4).stroke_width(1),
    ))?;
    chart.draw_series([
        Text::new(
            "target p = 1%",
            (0.03, P * 1.8),
            ("sans-serif", 14).into_font().color(&BLACK.mix(0.6)),
        ),
        Text::new(
            "1 / 200,000 probes: lower rates are not measurable",
            (0.03, floor * 1.8),
            ("sans-serif", 14).into_font().color(&BLACK.mix(0.6)),
        ),
    ])?;
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .draw()?;
    root.present()?;
    println!("wrote {out}");
    Ok(())
}
