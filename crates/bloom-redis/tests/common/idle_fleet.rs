//! What an idle fleet costs: N instances in this one process (each a `SharedFilter` of `u64`
//! keys with its own `RedisSync`) share one small filter through one `redis-server`. They join
//! a batch at a time, wait until every one is fresh, then sit idle for a window, over which
//! this measures, per instance: bytes into and out of Redis (Redis's own `INFO stats`
//! counters), commands and `PUBLISH`es, this process's CPU (`/proc/self/stat`), and fleet
//! wide: redis-server's CPU (`/proc/<pid>/stat`), stale periods (`RedisStats::stale_periods`)
//! and the instances not fresh at the end. Then every instance `leave()`s.
//!
//! Shared by `tests/fleet_scale.rs` (which asserts on the figures) and
//! `benches/fleet_idle.rs` (which prints them for several N), through `#[path]`. Public API
//! of bloom_redis / bloom_tower / bloom_core only, and nothing about how freshness is kept:
//! the same code measures whatever protocol the crate runs. Every wait is bounded; what did
//! not happen in time (a join, the fleet settling) is reported, not waited for.

#![allow(dead_code)]

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::time::{Duration, Instant};

use bloom_core::BloomFilter;
use bloom_redis::RedisSync;
use bloom_tower::SharedFilter;
use redis::aio::MultiplexedConnection;

/// The seed every instance's filter shares (the parameters must be identical fleet-wide).
pub const SEED: u128 = 0x1d1e_f1ee_71d1_ef1e_e71d_1ef1_ee71_d1ef;

/// How a fleet is run.
#[derive(Clone, Debug)]
pub struct Options {
    /// Instances (N).
    pub instances: usize,
    /// The filter's expected items (at 1%): small, so that 300 copies fit in a test process.
    pub keys: u64,
    /// The idle window measured.
    pub idle: Duration,
    /// Instances joining at the same time.
    pub join_batch: usize,
    /// Joining stops (with the instances joined so far) after this long.
    pub join_limit: Duration,
    /// How long to wait, after the last join, for every instance to be fresh; the window is
    /// measured either way.
    pub settle_limit: Duration,
    /// Key prefix in Redis.
    pub prefix: String,
}

impl Options {
    /// `instances` with the defaults: 100,000 keys at 1%, 60 s idle, 10 joining at a time,
    /// at most 120 s to join and 60 s to settle. Library defaults for every `RedisSync`
    /// setting (heartbeat, `stale_after`, ...): what a service gets.
    pub fn new(instances: usize) -> Self {
        Self {
            instances,
            keys: 100_000,
            idle: Duration::from_secs(60),
            join_batch: 10,
            join_limit: Duration::from_secs(120),
            settle_limit: Duration::from_secs(60),
            prefix: "idle-fleet".to_owned(),
        }
    }
}

/// One instance's filter: the same parameters and seed on every instance.
pub fn filter(keys: u64, name: String) -> SharedFilter<u64> {
    let bloom = BloomFilter::builder()
        .expected_items(keys)
        .false_positive_rate(0.01)
        .seed(SEED)
        .build()
        .unwrap();
    SharedFilter::<u64>::builder().name(name).build(bloom)
}

/// Redis's own counters (`INFO stats`, `INFO commandstats`).
#[derive(Clone, Debug, Default)]
pub struct RedisCounters {
    /// `total_net_input_bytes`: what Redis received (from the instances).
    pub input: u64,
    /// `total_net_output_bytes`: what Redis sent (to the instances).
    pub output: u64,
    /// `total_commands_processed`.
    pub commands: u64,
    /// Calls per command (`cmdstat_<name>:calls=`), lower case, subcommands as `client|setname`.
    pub calls: BTreeMap<String, u64>,
}

impl RedisCounters {
    /// Reads them on `conn` (the two `INFO`s count in `commands`: negligible).
    pub async fn read(conn: &mut MultiplexedConnection) -> Self {
        let stats: String = redis::cmd("INFO")
            .arg("stats")
            .query_async(conn)
            .await
            .unwrap();
        let commandstats: String = redis::cmd("INFO")
            .arg("commandstats")
            .query_async(conn)
            .await
            .unwrap();
        let field = |name: &str| -> u64 {
            stats
                .lines()
                .find_map(|line| line.strip_prefix(name)?.strip_prefix(':'))
                .unwrap_or_else(|| panic!("INFO stats has no {name}"))
                .trim()
                .parse()
                .unwrap()
        };
        let calls = commandstats
            .lines()
            .filter_map(|line| {
                let (name, rest) = line.strip_prefix("cmdstat_")?.split_once(':')?;
                let calls = rest
                    .split(',')
                    .find_map(|kv| kv.strip_prefix("calls="))?
                    .parse()
                    .ok()?;
                Some((name.to_owned(), calls))
            })
            .collect();
        Self {
            input: field("total_net_input_bytes"),
            output: field("total_net_output_bytes"),
            commands: field("total_commands_processed"),
            calls,
        }
    }

    /// The counts since `earlier`.
    pub fn since(&self, earlier: &Self) -> Self {
        Self {
            input: self.input - earlier.input,
            output: self.output - earlier.output,
            commands: self.commands - earlier.commands,
            calls: self
                .calls
                .iter()
                .map(|(name, calls)| {
                    let before = earlier.calls.get(name).copied().unwrap_or(0);
                    (name.clone(), calls - before)
                })
                .filter(|(_, calls)| *calls > 0)
                .collect(),
        }
    }
}

/// Clock ticks per second of `/proc/*/stat` (`getconf CLK_TCK`; 100 if that fails).
pub fn clock_ticks() -> f64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|out| String::from_utf8(out.stdout).ok()?.trim().parse().ok())
        .unwrap_or(100.0)
}

/// CPU seconds (user + system, every thread) used so far by process `pid` ("self" for this
/// one), from `/proc/<pid>/stat`.
pub fn cpu_seconds(pid: &str, ticks: f64) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // After the command name (which may hold spaces and parentheses): field 3 (state) on;
    // utime and stime are fields 14 and 15.
    let rest = &stat[stat.rfind(')').unwrap() + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: f64 = fields[11].parse().unwrap();
    let stime: f64 = fields[12].parse().unwrap();
    (utime + stime) / ticks
}

/// The largest number of subscribers on one channel (plain and sharded pub/sub), and the
/// number of channels: with the `PUBLISH` count, how far each message fans out.
async fn subscribers(conn: &mut MultiplexedConnection) -> (u64, usize) {
    let mut most = 0;
    let mut channels = 0;
    for (list, count) in [("CHANNELS", "NUMSUB"), ("SHARDCHANNELS", "SHARDNUMSUB")] {
        let names: Vec<String> = redis::cmd("PUBSUB")
            .arg(list)
            .query_async(conn)
            .await
            .unwrap_or_default();
        if names.is_empty() {
            continue;
        }
        channels += names.len();
        let subs: HashMap<String, u64> = redis::cmd("PUBSUB")
            .arg(count)
            .arg(&names)
            .query_async(conn)
            .await
            .unwrap_or_default();
        most = most.max(subs.values().copied().max().unwrap_or(0));
    }
    (most, channels)
}

/// What a run measured.
#[derive(Clone, Debug, Default)]
pub struct Report {
    /// Instances asked for.
    pub wanted: usize,
    /// Instances that joined within the limits.
    pub joined: usize,
    /// Joins that failed or timed out (the first few messages).
    pub join_errors: Vec<String>,
    /// From the first join's start until the last one returned.
    pub join_wall: Duration,
    /// How long the join of the last instance (the N-th) took.
    pub last_join: Duration,
    /// The slowest join.
    pub slowest_join: Duration,
    /// redis-server's CPU while the instances joined, % of a core.
    pub redis_cpu_joining: f64,
    /// From the last join until every instance was fresh (`None`: not within the limit).
    pub settled: Option<Duration>,
    /// Stale periods summed over the instances from joining until the window began.
    pub stale_before_window: u64,
    /// Instances not fresh when the window began.
    pub not_fresh_at_start: usize,
    /// The measured idle window.
    pub window: Duration,
    /// Redis's counters over the window.
    pub redis: RedisCounters,
    /// Bytes into Redis per instance per minute.
    pub into_redis_per_minute: f64,
    /// Bytes out of Redis per instance per minute.
    pub out_of_redis_per_minute: f64,
    /// Commands per second per instance.
    pub commands_per_second: f64,
    /// `PUBLISH` + `SPUBLISH` per second per instance.
    pub publishes_per_second: f64,
    /// The most subscribers on one channel, and the channels, at the end of the window.
    pub subscribers: (u64, usize),
    /// This process's CPU per instance, % of a core.
    pub cpu_per_instance: f64,
    /// redis-server's CPU, % of a core.
    pub redis_cpu: f64,
    /// Stale periods summed over the instances during the window.
    pub stale_periods: u64,
    /// Instances not fresh at the end of the window.
    pub not_fresh_at_end: usize,
    /// Why instances were not fresh at the end of the window (`RedisStats::stale_reason`,
    /// up to three distinct ones, with how many instances gave each).
    pub stale_reasons: Vec<(String, usize)>,
    /// The smallest and largest `RedisStats::instances` at the end of the window.
    pub instances_seen: (usize, usize),
    /// Insert batches published and received, summed over the instances, in the window.
    pub published: u64,
    /// See `published`.
    pub received: u64,
    /// How long every instance's `leave()` took, together (`None`: not within the limit).
    pub left: Option<Duration>,
}

impl Report {
    /// The Markdown table's header (two lines).
    pub fn header() -> String {
        "| N | joined | N-th join | slowest join | Redis CPU while joining | all fresh after | \
         stale periods joining | window | into Redis /instance/min | out of Redis \
         /instance/min | commands /instance/s | PUBLISH /instance/s (subscribers, channels) | \
         CPU /instance | redis-server CPU | stale periods in window | not fresh at end |\n\
         |---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
            .to_owned()
    }

    /// This run's row.
    pub fn row(&self) -> String {
        format!(
            "| {} | {}{} | {:.2?} | {:.2?} | {:.1} % | {} | {} | {:.1} s | {} | {} | {:.1} | \
             {:.2} ({}, {}) | {:.3} % | {:.1} % | {} | {} |",
            self.wanted,
            self.joined,
            if self.join_errors.is_empty() {
                String::new()
            } else {
                format!(" ({} failed)", self.wanted - self.joined)
            },
            self.last_join,
            self.slowest_join,
            self.redis_cpu_joining,
            self.settled
                .map_or("**not within the limit**".to_owned(), |d| format!(
                    "{d:.2?}"
                )),
            self.stale_before_window,
            self.window.as_secs_f64(),
            human(self.into_redis_per_minute),
            human(self.out_of_redis_per_minute),
            self.commands_per_second,
            self.publishes_per_second,
            self.subscribers.0,
            self.subscribers.1,
            self.cpu_per_instance,
            self.redis_cpu,
            self.stale_periods,
            self.not_fresh_at_end,
        )
    }

    /// The commands Redis ran in the window, per instance per second, busiest first; and
    /// what the row leaves out.
    pub fn details(&self) -> String {
        let per_instance_second = |calls: u64| {
            calls as f64 / self.joined.max(1) as f64 / self.window.as_secs_f64().max(1e-9)
        };
        let mut calls: Vec<(&String, &u64)> = self.redis.calls.iter().collect();
        calls.sort_by(|a, b| b.1.cmp(a.1));
        let mut out = format!("N={}: commands /instance/s:", self.wanted);
        for (name, n) in calls.iter().take(10) {
            let _ = write!(out, " {name} {:.2},", per_instance_second(**n));
        }
        out.pop();
        let _ = write!(
            out,
            "; RedisStats::instances {}..{} at the end; insert batches in the window: published \
             {}, received {}; leave() of all: {}",
            self.instances_seen.0,
            self.instances_seen.1,
            self.published,
            self.received,
            self.left
                .map_or("not within the limit".to_owned(), |d| format!("{d:.2?}")),
        );
        if !self.join_errors.is_empty() {
            let _ = write!(out, "; join errors: {:?}", self.join_errors);
        }
        if !self.stale_reasons.is_empty() {
            let _ = write!(
                out,
                "; not fresh at the end (reason, instances): {:?}",
                self.stale_reasons
            );
        }
        out
    }
}

/// `1.5 MiB`, `12.0 KiB`, `512 B`.
pub fn human(bytes: f64) -> String {
    const KIB: f64 = 1024.0;
    const MIB: f64 = 1024.0 * 1024.0;
    if bytes >= MIB {
        format!("{:.1} MiB", bytes / MIB)
    } else if bytes >= KIB {
        format!("{:.1} KiB", bytes / KIB)
    } else {
        format!("{bytes:.0} B")
    }
}

/// Runs the fleet described by `options` against the `redis-server` at `url` (process
/// `redis_pid`, for its CPU), measures it idle, and has every instance leave. Progress goes to
/// stderr. Needs a multi-threaded Tokio runtime.
pub async fn run(url: &str, redis_pid: u32, options: &Options) -> Report {
    let ticks = clock_ticks();
    let redis_pid = redis_pid.to_string();
    let n = options.instances;
    let mut probe = redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let mut report = Report {
        wanted: n,
        ..Report::default()
    };

    // Join, `join_batch` at a time.
    let redis_cpu_before = cpu_seconds(&redis_pid, ticks);
    let joining = Instant::now();
    let mut syncs: Vec<RedisSync<u64>> = Vec::with_capacity(n);
    let mut next = 0;
    while next < n {
        let left = options.join_limit.saturating_sub(joining.elapsed());
        if left.is_zero() {
            report
                .join_errors
                .push(format!("join limit {:?} reached", options.join_limit));
            break;
        }
        let batch: Vec<_> = (next..n.min(next + options.join_batch))
            .map(|i| {
                let shared = filter(options.keys, format!("instance-{i}"));
                let builder = RedisSync::builder(url).prefix(&options.prefix);
                tokio::spawn(async move {
                    let started = Instant::now();
                    let joined = tokio::time::timeout(left, builder.connect(&shared)).await;
                    (started.elapsed(), joined)
                })
            })
            .collect();
        next += batch.len();
        for task in batch {
            let (took, joined) = task.await.expect("a join task panicked");
            report.slowest_join = report.slowest_join.max(took);
            report.last_join = took;
            match joined {
                Ok(Ok(sync)) => syncs.push(sync),
                Ok(Err(e)) => report.join_errors.push(format!("after {took:.2?}: {e}")),
                Err(_) => report
                    .join_errors
                    .push(format!("timed out after {took:.2?}")),
            }
        }
        if next % 50 == 0 || next == n {
            eprintln!(
                "N={n}: {} joined after {:.1?}",
                syncs.len(),
                joining.elapsed()
            );
        }
    }
    report.join_errors.truncate(5);
    report.join_wall = joining.elapsed();
    report.joined = syncs.len();
    report.redis_cpu_joining = (cpu_seconds(&redis_pid, ticks) - redis_cpu_before)
        / report.join_wall.as_secs_f64()
        * 100.0;

    // Until every instance is fresh (bounded), then a second more.
    let settling = Instant::now();
    loop {
        if syncs.iter().all(|s| s.stats().fresh) {
            report.settled = Some(settling.elapsed());
            break;
        }
        if settling.elapsed() >= options.settle_limit {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let not_fresh = syncs.iter().filter(|s| !s.stats().fresh).count();
    eprintln!(
        "N={n}: {} fresh {}",
        syncs.len() - not_fresh,
        report.settled.map_or(
            format!("(not all within {:?})", options.settle_limit),
            |d| format!("{d:.2?} after the last join")
        )
    );
    tokio::time::sleep(Duration::from_secs(1)).await;

    // The idle window.
    let stats_before: Vec<_> = syncs.iter().map(RedisSync::stats).collect();
    report.stale_before_window = stats_before.iter().map(|s| s.stale_periods).sum();
    report.not_fresh_at_start = stats_before.iter().filter(|s| !s.fresh).count();
    let counters_before = RedisCounters::read(&mut probe).await;
    let cpu_before = cpu_seconds("self", ticks);
    let redis_cpu_before = cpu_seconds(&redis_pid, ticks);
    let started = Instant::now();
    tokio::time::sleep(options.idle).await;
    let cpu = cpu_seconds("self", ticks) - cpu_before;
    let redis_cpu = cpu_seconds(&redis_pid, ticks) - redis_cpu_before;
    let window = started.elapsed();
    let counters = RedisCounters::read(&mut probe)
        .await
        .since(&counters_before);
    let stats_after: Vec<_> = syncs.iter().map(RedisSync::stats).collect();
    report.subscribers = subscribers(&mut probe).await;

    let per = report.joined.max(1) as f64;
    let seconds = window.as_secs_f64();
    report.window = window;
    report.into_redis_per_minute = counters.input as f64 / per / seconds * 60.0;
    report.out_of_redis_per_minute = counters.output as f64 / per / seconds * 60.0;
    report.commands_per_second = counters.commands as f64 / per / seconds;
    let publishes = ["publish", "spublish"]
        .iter()
        .map(|c| counters.calls.get(*c).copied().unwrap_or(0))
        .sum::<u64>();
    report.publishes_per_second = publishes as f64 / per / seconds;
    report.cpu_per_instance = cpu / per / seconds * 100.0;
    report.redis_cpu = redis_cpu / seconds * 100.0;
    report.redis = counters;
    let deltas = stats_after.iter().zip(&stats_before);
    report.stale_periods = deltas
        .clone()
        .map(|(a, b)| a.stale_periods - b.stale_periods)
        .sum();
    report.published = deltas.clone().map(|(a, b)| a.published - b.published).sum();
    report.received = deltas.map(|(a, b)| a.received - b.received).sum();
    report.not_fresh_at_end = stats_after.iter().filter(|s| !s.fresh).count();
    let mut reasons: BTreeMap<String, usize> = BTreeMap::new();
    for stats in stats_after.iter().filter(|s| !s.fresh) {
        let reason = stats.stale_reason.clone().unwrap_or_else(|| "-".to_owned());
        *reasons.entry(reason).or_default() += 1;
    }
    report.stale_reasons = reasons.into_iter().collect();
    report
        .stale_reasons
        .sort_by_key(|(_, n)| std::cmp::Reverse(*n));
    report.stale_reasons.truncate(3);
    report.instances_seen = (
        stats_after.iter().map(|s| s.instances).min().unwrap_or(0),
        stats_after.iter().map(|s| s.instances).max().unwrap_or(0),
    );

    // Everyone leaves, `join_batch` at a time, bounded.
    let leaving = Instant::now();
    let limit = Duration::from_secs(30);
    let mut all_left = true;
    let mut syncs = syncs.into_iter();
    loop {
        let batch: Vec<_> = syncs
            .by_ref()
            .take(options.join_batch)
            .map(|sync| {
                tokio::spawn(async move { tokio::time::timeout(limit, sync.leave()).await })
            })
            .collect();
        if batch.is_empty() {
            break;
        }
        for task in batch {
            all_left &= task.await.expect("a leave task panicked").is_ok();
        }
    }
    report.left = all_left.then(|| leaving.elapsed());
    report
}
