//! The simulation: a load generator over TCP with a simulated clock, and an exact record of
//! what each user was shown, against which every answer is checked.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use bloom_core::windowed::{Clock as _, ManualClock};
use bloom_tower::filter_set::FilterSetStats;
use futures_util::StreamExt as _;
use serde::Deserialize;

use super::service::Feed;

/// How the simulated traffic looks.
#[derive(Clone, Debug)]
pub struct SimulationConfig {
    /// User ids `0..users`.
    pub users: u64,
    /// Fraction of the users active on a day: half of them every day (the regulars), half
    /// drawn afresh each day.
    pub active: f64,
    /// Simulated days.
    pub days: u64,
    /// Requests per simulated day, spread over 24 hourly slices.
    pub requests_per_day: u64,
    /// Requests in flight.
    pub concurrency: usize,
    /// The filters' window (the checker's too).
    pub window: Duration,
    /// The filters' period: an item fades out of a filter between `window` and
    /// `window + period` after it was shown.
    pub period: Duration,
    /// Seed of the user draws.
    pub seed: u64,
}

/// What the simulation measured.
#[derive(Clone, Debug)]
pub struct Report {
    /// Requests answered.
    pub requests: u64,
    /// Wall time of the requests.
    pub elapsed: Duration,
    /// Items returned.
    pub items_shown: u64,
    /// Items returned that the user had been shown within the window: must be 0.
    pub shown_twice: u64,
    /// Candidates withheld that the user had not been shown within `window + period`: the
    /// filters' false positives.
    pub wrongly_withheld: u64,
    /// Candidates withheld that the user had been shown between `window` and
    /// `window + period` ago: fading out, by design.
    pub fading_withheld: u64,
    /// Candidates the filter looked at that the user had not been shown within
    /// `window + period` (returned, or wrongly withheld): the false positives' denominator.
    pub fresh_candidates: u64,
    /// Distinct users who made a request.
    pub users_served: u64,
    /// The filter set at the end.
    pub stats: FilterSetStats,
}

#[derive(Deserialize)]
struct Page {
    items: Vec<u64>,
    withheld: Vec<u64>,
}

/// SplitMix64: the user draws.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Runs the simulation against the service at `base` (whose clock is `clock`), checking
/// every answer.
pub async fn simulate(
    base: &str,
    feed: &Arc<Feed>,
    clock: &ManualClock,
    config: &SimulationConfig,
) -> anyhow::Result<Report> {
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(config.concurrency)
        .build()?;
    let regular_every = (2.0 / config.active).round().max(1.0) as u64;
    let occasional = (config.active / 2.0) / (1.0 - config.active / 2.0);
    let window = config.window.as_millis() as u64;
    let fade = window + config.period.as_millis() as u64;
    let start = clock.now_millis();
    // user → item → when it was last shown (simulated ms).
    let mut shown: HashMap<u64, HashMap<u64, u64>> = HashMap::new();
    let mut report = Report {
        requests: 0,
        elapsed: Duration::ZERO,
        items_shown: 0,
        shown_twice: 0,
        wrongly_withheld: 0,
        fading_withheld: 0,
        fresh_candidates: 0,
        users_served: 0,
        stats: FilterSetStats::default(),
    };
    let started = Instant::now();
    let mut draw = config.seed;
    for day in 0..config.days {
        // The day's occasional users: a fixed fraction of the others, drawn from the day.
        let occasional_users: Vec<u64> = (0..config.users)
            .filter(|u| u % regular_every != 0)
            .filter(|u| (mix(u ^ mix(day + config.seed)) as f64 / u64::MAX as f64) < occasional)
            .collect();
        let regulars = config.users.div_ceil(regular_every);
        for hour in 0..24u64 {
            let now = start + (day * 24 + hour) * 3_600_000;
            clock.set(now);
            let n = config.requests_per_day / 24;
            let users: Vec<u64> = (0..n)
                .map(|_| {
                    draw = mix(draw);
                    if draw & 1 == 0 || occasional_users.is_empty() {
                        (draw >> 1) % regulars * regular_every
                    } else {
                        occasional_users[((draw >> 1) % occasional_users.len() as u64) as usize]
                    }
                })
                .collect();
            let mut answers = futures_util::stream::iter(users)
                .map(|user| {
                    let client = &client;
                    async move {
                        let response = client
                            .get(format!("{base}/feed/{user}"))
                            .send()
                            .await
                            .with_context(|| format!("GET /feed/{user}"))?;
                        let status = response.status();
                        anyhow::ensure!(
                            status.is_success(),
                            "GET /feed/{user}: {status}: {}",
                            response.text().await.unwrap_or_default()
                        );
                        Ok::<_, anyhow::Error>((user, response.json::<Page>().await?))
                    }
                })
                .buffer_unordered(config.concurrency);
            while let Some(answer) = answers.next().await {
                let (user, page) = answer?;
                report.requests += 1;
                let record = shown.entry(user).or_default();
                for item in &page.withheld {
                    match record.get(item) {
                        Some(&at) if now - at < window => {}
                        Some(&at) if now - at < fade => report.fading_withheld += 1,
                        _ => {
                            report.wrongly_withheld += 1;
                            report.fresh_candidates += 1;
                        }
                    }
                }
                for &item in &page.items {
                    report.items_shown += 1;
                    match record.insert(item, now) {
                        Some(at) if now - at < window => report.shown_twice += 1,
                        Some(at) if now - at < fade => {}
                        _ => report.fresh_candidates += 1,
                    }
                }
            }
        }
    }
    report.elapsed = started.elapsed();
    report.users_served = shown.len() as u64;
    report.stats = feed.shown().stats();
    Ok(report)
}
